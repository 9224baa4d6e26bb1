"""SASL listeners with real clients: librdkafka, kcat and the Java client authenticate
with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 over SASL_PLAINTEXT and SASL_SSL, and
librdkafka with OAUTHBEARER tokens checked against a JSON Web Key Set.

Goal: a client with a user's password authenticates and then produces and consumes as on
any listener; a wrong password or an unknown user is refused with the authentication
error the client surfaces, and the broker keeps serving everyone else; before
authenticating, a client can send nothing but ApiVersions and the SASL requests, and no
large frame; successes and failures are counted on /metrics.
Method: users are added with `headway user add` on the data directory before the broker
starts (how the first user is made); the broker serves PLAINTEXT, SASL_PLAINTEXT and
SASL_SSL listeners at once (certificates from trustme, as in test_tls.py); clients run at
their defaults plus the settings SASL needs. Every wait has a deadline.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import time

import pytest
from confluent_kafka import KafkaError, Producer

from support import (Delivery, create_topic, make_record, produce_records, rdkafka_base,
                     read_records)
from jwt_support import TokenIssuer
from test_tls import JAVA_CLIENTS, Pki, java_produce_and_consume, listener_address, metric

RECORDS = 1_000
DEADLINE_S = 30.0
USER, PASSWORD = "alice", "alice-secret"


def add_user(broker, name: str, password: str) -> None:
    out = subprocess.run([str(broker.binary), "user", "--data-dir", str(broker.data_dir),
                          "add", name], input=password.encode() + b"\n",
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()


@pytest.fixture
def sasl_broker(make_broker, tmp_path):
    """A broker with PLAINTEXT, SASL_PLAINTEXT and SASL_SSL listeners and one user."""
    pki = Pki(tmp_path)
    broker = make_broker("--listeners",
                         "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                         "SASL_SSL://127.0.0.1:0",
                         "--ssl-certificate-file", pki.server_cert,
                         "--ssl-key-file", pki.server_key,
                         "--metrics-listen", "127.0.0.1:0", start=False)
    broker.data_dir.mkdir(parents=True, exist_ok=True)
    add_user(broker, USER, PASSWORD)
    broker.start()
    return broker, pki


def sasl_settings(protocol: str, mechanism: str, pki: Pki, user: str = USER,
                  password: str = PASSWORD) -> dict:
    settings = {"security.protocol": protocol.lower(), "sasl.mechanism": mechanism,
                "sasl.username": user, "sasl.password": password}
    if protocol == "SASL_SSL":
        settings["ssl.ca.location"] = pki.ca_file
    return settings


def sasl_metric(broker, outcome: str, mechanism: str) -> float:
    return metric(broker, f'sasl_authentication_{outcome}_total{{mechanism="{mechanism}"}}')


def authentication_error(address: str, settings: dict) -> KafkaError | None:
    """The error a librdkafka producer with `settings` reports within the deadline
    (None if it connects and gets Metadata)."""
    errors: list[KafkaError] = []
    producer = Producer({**rdkafka_base(address), **settings,
                         "error_cb": errors.append})
    deadline = time.monotonic() + DEADLINE_S
    while not errors and time.monotonic() < deadline:
        try:
            producer.list_topics(timeout=1)
            return None
        except Exception:  # noqa: BLE001 - the error_cb has the reason
            producer.poll(0.1)
    return errors[0] if errors else None


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_librdkafka_authenticates_with_each_mechanism_and_produces_and_consumes(
        sasl_broker, protocol):
    broker, pki = sasl_broker
    address = listener_address(broker, protocol)
    for mechanism in ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]:
        topic = f"sasl-{protocol.lower()}-{mechanism.lower()}"
        create_topic(broker.bootstrap, topic, 2)
        settings = sasl_settings(protocol, mechanism, pki)
        producer = Producer({**rdkafka_base(address), **settings, "acks": "all"})
        delivery = Delivery()
        produce_records(producer, topic, range(RECORDS), delivery)
        assert len(delivery.acked) == RECORDS and not delivery.failed, delivery.failed[:3]
        read = list(read_records(address, topic, 2, expected=RECORDS, settings=settings))
        assert sorted(r.value for r in read) == \
            sorted(make_record(i).value for i in range(RECORDS))
        assert sasl_metric(broker, "successes", mechanism) >= 2


def test_wrong_passwords_and_unknown_users_are_refused_and_others_still_served(sasl_broker):
    broker, pki = sasl_broker
    address = listener_address(broker, "SASL_SSL")
    for mechanism in ["SCRAM-SHA-512", "PLAIN"]:
        before = sasl_metric(broker, "failures", mechanism)
        for user, password in [(USER, "wrong"), ("mallory", PASSWORD)]:
            error = authentication_error(
                address, sasl_settings("SASL_SSL", mechanism, pki, user, password))
            assert error is not None, (mechanism, user)
            assert error.code() == KafkaError._AUTHENTICATION, error
            assert "Authentication failed" in error.str() or \
                "authentication failed" in error.str().lower(), error
        assert sasl_metric(broker, "failures", mechanism) >= before + 2
        # The right password still works on the same listener.
        assert authentication_error(address, sasl_settings("SASL_SSL", mechanism, pki)) is None
    assert "SASL authentication failed" in broker.stderr_path.read_text()


def test_a_mechanism_that_is_not_enabled_is_refused(make_broker, tmp_path):
    broker = make_broker("--listeners", "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                         "--sasl-enabled-mechanisms", "SCRAM-SHA-512", start=False)
    broker.data_dir.mkdir(parents=True, exist_ok=True)
    add_user(broker, USER, PASSWORD)
    broker.start()
    address = listener_address(broker, "SASL_PLAINTEXT")
    error = authentication_error(address, sasl_settings("SASL_PLAINTEXT", "PLAIN", None))
    assert error is not None and "SCRAM-SHA-512" in error.str(), error
    assert authentication_error(
        address, sasl_settings("SASL_PLAINTEXT", "SCRAM-SHA-512", None)) is None


def frame(api_key: int, version: int, body: bytes = b"") -> bytes:
    header = struct.pack(">hhih", api_key, version, 7, 4) + b"test"
    return struct.pack(">i", len(header) + len(body)) + header + body


def closed_by_broker(sock: socket.socket) -> bool:
    """Whether the broker closes `sock` (EOF or reset) before the deadline."""
    sock.settimeout(DEADLINE_S)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_before_authentication_only_sasl_requests_and_small_frames_are_read(sasl_broker):
    broker, _ = sasl_broker
    host, port = listener_address(broker, "SASL_PLAINTEXT").rsplit(":", 1)
    failures = sasl_metric(broker, "failures", "none")

    # Metadata v1 (all topics) before authenticating closes the connection.
    with socket.create_connection((host, int(port)), timeout=DEADLINE_S) as sock:
        sock.sendall(frame(3, 1, struct.pack(">i", -1)))
        assert closed_by_broker(sock)

    # A 1 MiB frame: the broker closes after the length prefix, without reading the body.
    with socket.create_connection((host, int(port)), timeout=DEADLINE_S) as sock:
        sock.sendall(struct.pack(">i", 1 << 20) + b"\0" * 1024)
        assert closed_by_broker(sock)

    # ApiVersions is answered before authenticating, and lists the SASL APIs.
    with socket.create_connection((host, int(port)), timeout=DEADLINE_S) as sock:
        sock.sendall(frame(18, 0))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        body = sock.recv(size, socket.MSG_WAITALL)
        correlation, error, count = struct.unpack(">ihi", body[:10])
        assert (correlation, error) == (7, 0)
        keys = {struct.unpack(">h", body[10 + 6 * i:12 + 6 * i])[0] for i in range(count)}
        assert {17, 36} <= keys

    assert sasl_metric(broker, "failures", "none") >= failures + 2
    assert authentication_error(listener_address(broker, "SASL_PLAINTEXT"),
                                sasl_settings("SASL_PLAINTEXT", "SCRAM-SHA-256", None)) is None


def test_kcat_reads_over_sasl_ssl_with_scram(sasl_broker):
    broker, pki = sasl_broker
    address = listener_address(broker, "SASL_SSL")
    topic = "kcat-sasl"
    create_topic(broker.bootstrap, topic, 1)
    producer = Producer(rdkafka_base(broker.bootstrap))
    delivery = Delivery()
    produce_records(producer, topic, range(RECORDS), delivery)
    assert len(delivery.acked) == RECORDS
    out = subprocess.run(["kcat", "-b", address, "-X", "security.protocol=sasl_ssl",
                          "-X", f"ssl.ca.location={pki.ca_file}",
                          "-X", "sasl.mechanisms=SCRAM-SHA-512",
                          "-X", f"sasl.username={USER}", "-X", f"sasl.password={PASSWORD}",
                          "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%o\n"],
                         capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr.decode()
    assert len(out.stdout.splitlines()) == RECORDS


JAVA_LOGIN_MODULES = {
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
}


@pytest.mark.parametrize("mechanism", sorted(JAVA_LOGIN_MODULES))
@pytest.mark.parametrize("version", sorted(JAVA_CLIENTS), ids=lambda v: f"kafka-clients-{v}")
def test_the_java_client_produces_and_consumes_over_sasl_ssl(sasl_broker, tmp_path, version,
                                                            mechanism):
    broker, pki = sasl_broker
    address = listener_address(broker, "SASL_SSL")
    topic = f"java-sasl-{mechanism.lower()}"
    create_topic(broker.bootstrap, topic, 2)
    jaas = (f"{JAVA_LOGIN_MODULES[mechanism]} required "
            f'username="{USER}" password="{PASSWORD}";')
    sasl = ("--set", "security.protocol=SASL_SSL", "--set", "ssl.truststore.type=PEM",
            "--set", f"ssl.truststore.location={pki.ca_file}",
            "--set", f"sasl.mechanism={mechanism}", "--set", f"sasl.jaas.config={jaas}")
    java_produce_and_consume(version, tmp_path, address, topic, RECORDS, sasl)


def oauth_settings(pki: Pki, token) -> dict:
    """librdkafka over SASL_SSL with OAUTHBEARER, its token from `token()`."""
    return {"security.protocol": "sasl_ssl", "ssl.ca.location": pki.ca_file,
            "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": lambda _config: (token(), time.time() + 3600)}


def oauth_broker(make_broker, pki: Pki, issuer: TokenIssuer, mechanisms: str):
    """A broker whose SASL_SSL listener checks OAUTHBEARER tokens against `issuer`'s key
    set (audience `headway`); returns it and that listener's address."""
    jwks = pki.dir / "jwks.json"
    jwks.write_text(issuer.jwks())
    broker = make_broker("--listeners", "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                         "--ssl-certificate-file", pki.server_cert,
                         "--ssl-key-file", pki.server_key,
                         "--sasl-enabled-mechanisms", mechanisms,
                         "--sasl-oauthbearer-jwks-file", str(jwks),
                         "--sasl-oauthbearer-expected-audience", "headway",
                         "--metrics-listen", "127.0.0.1:0")
    return broker, listener_address(broker, "SASL_SSL")


def test_librdkafka_authenticates_with_oauthbearer_tokens_of_the_key_set(make_broker,
                                                                          tmp_path):
    pki, issuer = Pki(tmp_path), TokenIssuer()
    broker, address = oauth_broker(make_broker, pki, issuer, "SCRAM-SHA-512,OAUTHBEARER")
    topic = "oauth-orders"
    create_topic(broker.bootstrap, topic, 2)
    settings = oauth_settings(pki, lambda: issuer.token("svc-orders", aud="headway"))
    producer = Producer({**rdkafka_base(address), **settings, "acks": "all"})
    delivery = Delivery()
    produce_records(producer, topic, range(RECORDS), delivery)
    assert len(delivery.acked) == RECORDS and not delivery.failed, delivery.failed[:3]
    read = list(read_records(address, topic, 2, expected=RECORDS, settings=settings))
    assert sorted(r.value for r in read) == sorted(make_record(i).value for i in range(RECORDS))
    assert sasl_metric(broker, "successes", "OAUTHBEARER") >= 2

    # Expired, for another audience, signed by a key outside the set, and unsigned
    # (librdkafka's own unsecured token): each refused with the authentication error.
    other = TokenIssuer()
    refused = [
        oauth_settings(pki, lambda: issuer.token("svc-orders", lifetime_s=-3600, aud="headway")),
        oauth_settings(pki, lambda: issuer.token("svc-orders", aud="web")),
        oauth_settings(pki, lambda: other.token("svc-orders", aud="headway")),
        {"security.protocol": "sasl_ssl", "ssl.ca.location": pki.ca_file,
         "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
         "sasl.oauthbearer.config": "principal=svc-orders"},
    ]
    before = sasl_metric(broker, "failures", "OAUTHBEARER")
    for bad in refused:
        error = authentication_error(address, bad)
        assert error is not None and error.code() == KafkaError._AUTHENTICATION, error
    assert sasl_metric(broker, "failures", "OAUTHBEARER") >= before + len(refused)
    # The good token still works.
    assert authentication_error(address, settings) is None
    assert "invalid bearer token" in broker.stderr_path.read_text()


@pytest.mark.parametrize("version", sorted(JAVA_CLIENTS), ids=lambda v: f"kafka-clients-{v}")
def test_the_java_client_authenticates_with_an_oauthbearer_token_file(make_broker, tmp_path,
                                                                       monkeypatch, version):
    """The Java producer and consumer with Kafka's OAUTHBEARER login handler, reading a
    signed token from a file (`sasl.oauthbearer.token.endpoint.url=file:...`, which
    kafka-clients 3.9.1+ and 4.x allow only when the URL is listed in the system property
    `org.apache.kafka.sasl.oauthbearer.allowed.urls`)."""
    pki, issuer = Pki(tmp_path), TokenIssuer()
    broker, address = oauth_broker(make_broker, pki, issuer, "OAUTHBEARER")
    topic = "java-oauth"
    create_topic(broker.bootstrap, topic, 2)
    token = tmp_path / "token.jwt"
    token.write_text(issuer.token("svc-java", aud="headway"))
    url = token.resolve().as_uri()
    monkeypatch.setenv("JDK_JAVA_OPTIONS", f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={url}")
    jaas = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;"
    handler = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
    oauth = ("--set", "security.protocol=SASL_SSL", "--set", "ssl.truststore.type=PEM",
             "--set", f"ssl.truststore.location={pki.ca_file}",
             "--set", "sasl.mechanism=OAUTHBEARER", "--set", f"sasl.jaas.config={jaas}",
             "--set", f"sasl.login.callback.handler.class={handler}",
             "--set", f"sasl.oauthbearer.token.endpoint.url={url}")
    before = sasl_metric(broker, "successes", "OAUTHBEARER")
    java_produce_and_consume(version, tmp_path, address, topic, RECORDS, oauth)
    assert sasl_metric(broker, "successes", "OAUTHBEARER") >= before + 2


def headway_command(broker, *args: str, password: str = PASSWORD,
                    stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """`headway ARGS` with the SASL password in the environment, as operators pass it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWAY_")}
    env["HEADWAY_SASL_PASSWORD"] = password
    return subprocess.run([str(broker.binary), *args], input=stdin, capture_output=True,
                          timeout=60, env=env)


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_the_headway_commands_authenticate_with_each_mechanism(sasl_broker, protocol):
    broker, pki = sasl_broker
    address = listener_address(broker, protocol)
    for mechanism in ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]:
        security = ["-b", address, "--security-protocol", protocol,
                    "--sasl-mechanism", mechanism, "--sasl-username", USER]
        if protocol == "SASL_SSL":
            security += ["--ssl-ca-location", pki.ca_file]
        topic = f"cli-{protocol.lower()}-{mechanism.lower()}"
        before = sasl_metric(broker, "successes", mechanism)
        created = headway_command(broker, "topic", "create", topic, "--partitions", "2",
                                  *security)
        assert created.returncode == 0, created.stderr.decode()
        lines = b"".join(b"record-%d\n" % i for i in range(50))
        produced = headway_command(broker, "produce", topic, *security, stdin=lines)
        assert produced.returncode == 0, produced.stderr.decode()
        consumed = headway_command(broker, "consume", topic, *security, "--from-beginning",
                                   "-e", "-q", "-f", "{value}")
        assert consumed.returncode == 0, consumed.stderr.decode()
        assert sorted(consumed.stdout.decode().split()) == \
            sorted(f"record-{i}" for i in range(50))
        listed = headway_command(broker, "topic", "list", *security)
        assert topic in listed.stdout.decode(), listed.stderr.decode()
        assert sasl_metric(broker, "successes", mechanism) >= before + 4
        # librdkafka reads what the command wrote.
        read = list(read_records(address, topic, 2, expected=50,
                                 settings=sasl_settings(protocol, mechanism, pki)))
        assert len(read) == 50

        refused = headway_command(broker, "topic", "list", *security, password="wrong")
        assert refused.returncode == 1
        assert "authentication failed" in refused.stderr.decode(), refused.stderr.decode()


def test_the_headway_commands_refuse_an_untrusted_broker_and_incomplete_settings(
        sasl_broker, tmp_path):
    broker, pki = sasl_broker
    address = listener_address(broker, "SASL_SSL")
    stranger = Pki(tmp_path, name="other")
    base = ["topic", "list", "-b", address, "--security-protocol", "SASL_SSL",
            "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", USER]
    untrusted = headway_command(broker, *base, "--ssl-ca-location", stranger.ca_file)
    assert untrusted.returncode == 1
    assert "TLS handshake" in untrusted.stderr.decode(), untrusted.stderr.decode()
    no_ca = headway_command(broker, *base)
    assert no_ca.returncode == 1 and "--ssl-ca-location" in no_ca.stderr.decode()
    no_user = headway_command(broker, "topic", "list", "-b", address,
                              "--security-protocol", "SASL_PLAINTEXT",
                              "--sasl-mechanism", "PLAIN")
    assert no_user.returncode == 1 and "--sasl-username" in no_user.stderr.decode()
