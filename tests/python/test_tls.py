"""SSL listeners with real clients: librdkafka, kcat and the Java client over TLS.

Goal: a broker serves a PLAINTEXT and an SSL listener at once (Kafka's `listeners` model);
clients of each are told their own listener's address, so TLS clients stay on TLS; records
written over TLS are read back whole over TLS and over plaintext. With a client CA
configured, the SSL listener requires client certificates: a client with a certificate
from that CA works, one without a certificate or with a certificate from another CA is
refused, and each refusal is counted on /metrics.
Method: trustme makes a CA, the broker's certificate (for 127.0.0.1) and client
certificates, written as PEM files; the broker runs with `--listeners` and the
`--ssl-*-file` flags; the clients run at their defaults plus the settings TLS needs
(`security.protocol`, the CA, and a client certificate where required). Every wait
has a deadline.
"""

from __future__ import annotations

import re
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
    lib, classes = JAVA_CLIENTS[version]
    java = JavaClient(lib, classes, "ProducerCheck", tmp_path)
    tls = ("--set", "security.protocol=SSL", "--set", "ssl.truststore.type=PEM",
           "--set", f"ssl.truststore.location={pki.ca_file}")
    events = java.run("ProducerCheck", "--bootstrap", ssl_address, "--topic", topic,
                      "--count", str(JAVA_RECORDS), *tls)
    result = events[-1] if events else {}
    assert result.get("event") == "done" and not result["failed"], result
    assert result["acked"] == JAVA_RECORDS
    events = java.run("ConsumerCheck", "--bootstrap", ssl_address, "--topic", topic,
                      "--group", "java-tls", "--count", str(JAVA_RECORDS),
                      "--set", "auto.offset.reset=earliest", *tls)
    done = next((e for e in events if e["event"] == "done"), None)
    assert done is not None, events[-1:]
    assert done["count"] == JAVA_RECORDS


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
