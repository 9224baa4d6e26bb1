"""SSL listeners with real clients: librdkafka, kcat and the Java client over TLS.

Goal: a broker serves a PLAINTEXT and an SSL listener at once (Kafka's `listeners` model);
clients of each are told their own listener's address, so TLS clients stay on TLS; records
written over TLS are read back whole over TLS and over plaintext. With a client CA
configured, the SSL listener requires client certificates: a client with a certificate
from that CA works, one without a certificate or with a certificate from another CA is
refused, and each refusal is counted on /metrics. SIGHUP reloads the certificate files:
new connections get the new certificate, established ones are kept, and a reload that
fails keeps the certificate in use.
Method: trustme makes a CA, the broker's certificate (for 127.0.0.1) and client
certificates, written as PEM files; the broker runs with `--listeners` and the
`--ssl-*-file` flags; the clients run at their defaults plus the settings TLS needs
(`security.protocol`, the CA, and a client certificate where required). Every wait
has a deadline.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import ssl
import struct
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from java_support import JavaClient
from kafka_frames import API_VERSIONS_KEY, frame, read_response
from support import (Delivery, create_topic, make_record, produce_records, rdkafka_base,
                     read_records)

RECORDS = 2_000
JAVA_RECORDS = 1_000
DEADLINE_S = 30.0
JAVA_CLIENTS = {"3.9": ("lib-3.9", "classes-3.9"), "4": ("lib-4", "classes-4")}


class Pki:
    """A CA, the broker's certificate and key, and a client certificate, as PEM files."""

    def __init__(self, directory: Path, name: str = "ca"):
        self.dir = directory
        self.ca = trustme.CA()
        self.ca_file = self._write(f"{name}.pem", self.ca.cert_pem.bytes())
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        self.server_cert = self._write(f"{name}-server.pem",
                                       b"".join(c.bytes() for c in server.cert_chain_pems))
        self.server_key = self._write(f"{name}-server.key", server.private_key_pem.bytes())
        client = self.ca.issue_cert("client@example.com")
        self.client_cert = self._write(f"{name}-client.pem",
                                       b"".join(c.bytes() for c in client.cert_chain_pems))
        self.client_key = self._write(f"{name}-client.key", client.private_key_pem.bytes())
        # Java's PEM key store: the private key (PKCS#8, the form Java reads) and its
        # certificate chain in one file.
        key = serialization.load_pem_private_key(client.private_key_pem.bytes(), None)
        pkcs8 = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
        self.client_keystore = self._write(
            f"{name}-client-keystore.pem",
            pkcs8 + b"".join(c.bytes() for c in client.cert_chain_pems))

    def _write(self, name: str, data: bytes) -> str:
        path = self.dir / name
        path.write_bytes(data)
        return str(path)


def listener_address(broker, name: str) -> str:
    """The address of the broker's listener `name`, from its start-up lines."""
    pattern = re.compile(rf"^headway listener {name} \S+ (\S+)$", re.MULTILINE)
    deadline = time.monotonic() + DEADLINE_S
    while not (found := pattern.findall(broker.stdout_path.read_text())):
        assert time.monotonic() < deadline, f"no listener {name} in the broker's output"
        time.sleep(0.05)
    return found[-1]


def tls_settings(pki: Pki, client_cert: bool = False) -> dict:
    settings = {"security.protocol": "ssl", "ssl.ca.location": pki.ca_file}
    if client_cert:
        settings.update({"ssl.certificate.location": pki.client_cert,
                         "ssl.key.location": pki.client_key})
    return settings


def start_tls_broker(make_broker, pki: Pki, *extra: str):
    broker = make_broker("--listeners", "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                         "--ssl-certificate-file", pki.server_cert,
                         "--ssl-key-file", pki.server_key,
                         "--metrics-listen", "127.0.0.1:0", *extra)
    return broker, listener_address(broker, "SSL")


def metric(broker, name: str) -> float:
    with urllib.request.urlopen(f"http://{broker.metrics_address()}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(f"headway_{name} "):
                return float(line.split()[1])
    raise AssertionError(f"no {name} on /metrics")


def reaches(bootstrap: str, settings: dict) -> bool:
    """Whether a librdkafka admin client with `settings` gets Metadata within 10 s."""
    admin = AdminClient({**rdkafka_base(bootstrap), **settings})
    try:
        admin.list_topics(timeout=10)
        return True
    except KafkaException:
        return False


@pytest.fixture
def pki(tmp_path) -> Pki:
    return Pki(tmp_path)


def test_tls_and_plaintext_listeners_serve_the_same_records(make_broker, pki, tmp_path):
    broker, ssl_address = start_tls_broker(make_broker, pki)
    topic = "over-tls"
    create_topic(broker.bootstrap, topic, 2)

    # librdkafka: write over TLS; Metadata over TLS must name the SSL listener, or the
    # producer's next connection (to the advertised address) would speak TLS to plaintext.
    producer = Producer({**rdkafka_base(ssl_address), **tls_settings(pki), "acks": "all"})
    delivery = Delivery()
    produce_records(producer, topic, range(RECORDS), delivery)
    assert len(delivery.acked) == RECORDS and not delivery.failed, delivery.failed[:3]

    over_tls = list(read_records(ssl_address, topic, 2, expected=RECORDS,
                                 settings=tls_settings(pki)))
    over_plaintext = list(read_records(broker.bootstrap, topic, 2, expected=RECORDS))
    assert len(over_tls) == RECORDS
    assert sorted((r.partition, r.offset, r.value) for r in over_tls) == \
        sorted((r.partition, r.offset, r.value) for r in over_plaintext)
    assert {r.value for r in over_tls} == {make_record(i).value for i in range(RECORDS)}

    # kcat over TLS reads every record.
    out = subprocess.run(["kcat", "-b", ssl_address, "-X", "security.protocol=ssl",
                          "-X", f"ssl.ca.location={pki.ca_file}", "-C", "-t", topic,
                          "-o", "beginning", "-e", "-q", "-f", "%o\n"],
                         capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr.decode()
    assert len(out.stdout.splitlines()) == RECORDS

    # A plaintext client at the SSL port is refused; the broker keeps serving.
    assert not reaches(ssl_address, {})
    assert metric(broker, "tls_handshake_failures_total") >= 1
    assert reaches(broker.bootstrap, {})


@pytest.mark.parametrize("version", sorted(JAVA_CLIENTS), ids=lambda v: f"kafka-clients-{v}")
def test_the_java_client_produces_and_consumes_over_tls(make_broker, pki, tmp_path, version):
    broker, ssl_address = start_tls_broker(make_broker, pki)
    topic = "java-tls"
    create_topic(broker.bootstrap, topic, 2)
    tls = ("--set", "security.protocol=SSL", "--set", "ssl.truststore.type=PEM",
           "--set", f"ssl.truststore.location={pki.ca_file}")
    java_produce_and_consume(version, tmp_path, ssl_address, topic, JAVA_RECORDS, tls)


def java_produce_and_consume(version: str, tmp_path, address: str, topic: str, count: int,
                             settings: tuple) -> None:
    """The Java producer writes `count` records to `topic` and the consumer (group
    `java-<topic>`) reads them all, both with `settings` (`--set` pairs)."""
    lib, classes = JAVA_CLIENTS[version]
    java = JavaClient(lib, classes, "ProducerCheck", tmp_path)
    events = java.run("ProducerCheck", "--bootstrap", address, "--topic", topic,
                      "--count", str(count), *settings)
    result = events[-1] if events else {}
    assert result.get("event") == "done" and not result["failed"], result
    assert result["acked"] == count
    events = java.run("ConsumerCheck", "--bootstrap", address, "--topic", topic,
                      "--group", f"java-{topic}", "--count", str(count),
                      "--set", "auto.offset.reset=earliest", *settings)
    done = next((e for e in events if e["event"] == "done"), None)
    assert done is not None, events[-1:]
    assert done["count"] == count


def test_client_certificates_are_required_when_a_client_ca_is_set(make_broker, pki, tmp_path):
    broker, ssl_address = start_tls_broker(make_broker, pki, "--ssl-client-ca-file", pki.ca_file)
    create_topic(broker.bootstrap, "mutual", 1)
    stranger = Pki(tmp_path, name="other")

    assert reaches(ssl_address, tls_settings(pki, client_cert=True))
    failures = metric(broker, "tls_handshake_failures_total")
    assert not reaches(ssl_address, tls_settings(pki)), "no client certificate"
    untrusted = {**tls_settings(pki), "ssl.certificate.location": stranger.client_cert,
                 "ssl.key.location": stranger.client_key}
    assert not reaches(ssl_address, untrusted), "a client certificate of another CA"
    assert metric(broker, "tls_handshake_failures_total") >= failures + 2
    assert "TLS handshake failed" in broker.stderr_path.read_text()

    java = JavaClient("lib-4", "classes-4", "ProducerCheck", tmp_path)
    events = java.run("ProducerCheck", "--bootstrap", ssl_address, "--topic", "mutual",
                      "--count", "100", "--set", "security.protocol=SSL",
                      "--set", "ssl.truststore.type=PEM",
                      "--set", f"ssl.truststore.location={pki.ca_file}",
                      "--set", "ssl.keystore.type=PEM",
                      "--set", f"ssl.keystore.location={pki.client_keystore}")
    result = events[-1] if events else {}
    assert result.get("event") == "done" and result.get("acked") == 100, result


def _api_versions_over(sock, correlation_id: int) -> None:
    """Sends ApiVersions v0 on an open socket and checks its answer."""
    sock.sendall(frame(API_VERSIONS_KEY, 0, b"", correlation_id=correlation_id))
    response = read_response(sock)
    assert response is not None, "the established TLS connection was closed"
    assert struct.unpack_from(">ih", response) == (correlation_id, 0)


def _wait_for_log(broker, text: str, count: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while broker.stderr_path.read_text("utf-8", "replace").count(text) < count:
        assert time.monotonic() < deadline, f"no {text!r} in the log\n{broker.stderr_tail()}"
        broker.check_alive()
        time.sleep(0.05)


def test_sighup_reloads_the_certificate_and_keeps_established_connections(make_broker,
                                                                          tmp_path):
    first, second = Pki(tmp_path, "first"), Pki(tmp_path, "second")
    live_cert, live_key = tmp_path / "live.pem", tmp_path / "live.key"
    live_cert.write_bytes(Path(first.server_cert).read_bytes())
    live_key.write_bytes(Path(first.server_key).read_bytes())
    broker = make_broker("--listeners", "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                         "--ssl-certificate-file", str(live_cert),
                         "--ssl-key-file", str(live_key))
    ssl_address = listener_address(broker, "SSL")
    host, port = ssl_address.rsplit(":", 1)
    assert reaches(ssl_address, tls_settings(first))
    assert not reaches(ssl_address, tls_settings(second))

    # A connection established under the first certificate.
    context = ssl.create_default_context(cafile=first.ca_file)
    established = context.wrap_socket(socket.create_connection((host, int(port)), timeout=10),
                                      server_hostname=host)
    _api_versions_over(established, 1)

    # The files are replaced by a certificate of another CA; SIGHUP loads them.
    live_cert.write_bytes(Path(second.server_cert).read_bytes())
    live_key.write_bytes(Path(second.server_key).read_bytes())
    os.kill(broker.pid, signal.SIGHUP)
    _wait_for_log(broker, "SIGHUP: reloaded the TLS certificate", 1)
    assert reaches(ssl_address, tls_settings(second))
    assert not reaches(ssl_address, tls_settings(first))
    # The established connection keeps its session and is served.
    _api_versions_over(established, 2)

    # A reload that cannot load the files keeps the certificate in use.
    live_key.write_bytes(b"not a key")
    os.kill(broker.pid, signal.SIGHUP)
    _wait_for_log(broker, "SIGHUP: TLS reload failed", 1)
    assert reaches(ssl_address, tls_settings(second))
    _api_versions_over(established, 3)
    established.close()
    broker.check_alive()


def test_the_headway_commands_present_a_client_certificate_over_ssl(make_broker, pki):
    broker, ssl_address = start_tls_broker(make_broker, pki, "--ssl-client-ca-file", pki.ca_file)
    create_topic(broker.bootstrap, "mutual-cli", 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWAY_")}

    def topic_list(*security: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(broker.binary), "topic", "list", "-b", ssl_address,
                               "--security-protocol", "SSL", "--ssl-ca-location", pki.ca_file,
                               *security], capture_output=True, timeout=60, env=env)

    listed = topic_list("--ssl-certificate-location", pki.client_cert,
                        "--ssl-key-location", pki.client_key)
    assert listed.returncode == 0, listed.stderr.decode()
    assert "mutual-cli" in listed.stdout.decode()
    refused = topic_list()
    assert refused.returncode == 1, "no client certificate"
    assert "connecting to" in refused.stderr.decode(), refused.stderr.decode()
