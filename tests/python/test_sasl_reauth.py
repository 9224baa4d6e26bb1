"""SASL re-authentication (KIP-368) with real clients and a raw socket.

Goal: with `connections_max_reauth_ms` set, SaslAuthenticate tells the client how long its
session lasts; librdkafka and the Java client re-authenticate on their connections before
it ends and go on working without an error; a re-authentication as the same principal is
accepted and one as another principal refused, closing the connection; a client that does
not re-authenticate is disconnected on its first request after its session ended.
Method: a broker with a SASL_PLAINTEXT listener and a 3 s session; librdkafka writes one
record every 20 ms for 10 s while the Java consumer (kafka-clients 4.x) reads them, and
/metrics counts the re-authentications; a raw socket speaks SaslHandshake v1,
SaslAuthenticate v1 and ApiVersions v0. Every wait has a deadline.
"""

from __future__ import annotations

import socket
import struct
import time

from confluent_kafka import Producer

from java_support import JavaClient
from support import Delivery, create_topic, make_record, rdkafka_base
from test_sasl import USER, PASSWORD, add_user, sasl_settings
from test_tls import JAVA_CLIENTS, listener_address, metric

REAUTH_MS = 3_000
WRITE_S = 10.0
DEADLINE_S = 60.0
OTHER_USER, OTHER_PASSWORD = "bob", "bob-secret"
SASL_AUTHENTICATION_FAILED, ILLEGAL_SASL_STATE = 58, 34


def reauth_broker(make_broker):
    broker = make_broker("--listeners", "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                         "--connections-max-reauth-ms", str(REAUTH_MS),
                         "--metrics-listen", "127.0.0.1:0", start=False)
    broker.data_dir.mkdir(parents=True, exist_ok=True)
    add_user(broker, USER, PASSWORD)
    add_user(broker, OTHER_USER, OTHER_PASSWORD)
    broker.start()
    return broker


def test_librdkafka_and_java_reauthenticate_and_keep_working(make_broker, tmp_path):
    broker = reauth_broker(make_broker)
    address = listener_address(broker, "SASL_PLAINTEXT")
    topic = "reauth"
    create_topic(broker.bootstrap, topic, 1)
    count = int(WRITE_S / 0.02)
    lib, classes = JAVA_CLIENTS["4"]
    java = JavaClient(lib, classes, "ConsumerCheck", tmp_path)
    jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{USER}" password="{PASSWORD}";')
    consumer = java.start("ConsumerCheck", "--bootstrap", address, "--topic", topic,
                          "--group", "reauth", "--count", str(count),
                          "--deadline-s", str(int(DEADLINE_S)),
                          "--set", "auto.offset.reset=earliest",
                          "--set", "security.protocol=SASL_PLAINTEXT",
                          "--set", "sasl.mechanism=SCRAM-SHA-512",
                          "--set", f"sasl.jaas.config={jaas}")
    try:
        settings = sasl_settings("SASL_PLAINTEXT", "SCRAM-SHA-512", None)
        producer = Producer({**rdkafka_base(address), **settings, "acks": "all"})
        delivery = Delivery()
        started = time.monotonic()
        for seq in range(count):
            # One record every 20 ms, for WRITE_S seconds.
            while time.monotonic() < started + seq * 0.02:
                producer.poll(0.005)
            r = make_record(seq)
            producer.produce(topic, key=r.key, value=r.value, headers=r.headers,
                             on_delivery=delivery.callback)
            producer.poll(0)
        assert producer.flush(DEADLINE_S) == 0
        assert time.monotonic() - started >= WRITE_S - 0.5
        assert len(delivery.acked) == count and not delivery.failed, delivery.failed[:3]
        done = consumer.wait_event(lambda e: e["event"] == "done", DEADLINE_S, "done")
        assert done["count"] == count, done
    finally:
        consumer.kill()
    # Over 10 s with 3 s sessions each client re-authenticated its connections several
    # times, and no connection was closed for an ended session.
    reauths = metric(broker, "sasl_reauthentications_total")
    successes = metric(broker, 'sasl_authentication_successes_total{mechanism="SCRAM-SHA-512"}')
    assert reauths >= 4, reauths
    assert successes >= reauths + 2, (successes, reauths)
    assert metric(broker, "sasl_expired_sessions_closed_total") == 0


class Raw:
    """A raw connection speaking the SASL requests and ApiVersions."""

    def __init__(self, address: str):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=DEADLINE_S)
        self.correlation = 0

    def call(self, api_key: int, version: int, body: bytes = b"") -> bytes | None:
        """The response body (after the correlation id), or None if the broker closed."""
        self.correlation += 1
        header = struct.pack(">hhih", api_key, version, self.correlation, 3) + b"raw"
        try:
            self.sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
            head = self.sock.recv(4, socket.MSG_WAITALL)
            if len(head) < 4:
                return None
            size = struct.unpack(">i", head)[0]
            body = self.sock.recv(size, socket.MSG_WAITALL)
        except (ConnectionResetError, BrokenPipeError):
            return None
        assert struct.unpack(">i", body[:4])[0] == self.correlation
        return body[4:]

    def handshake(self, mechanism: str) -> int:
        name = mechanism.encode()
        answer = self.call(17, 1, struct.pack(">h", len(name)) + name)
        assert answer is not None
        return struct.unpack(">h", answer[:2])[0]

    def authenticate(self, token: bytes) -> tuple[int, int] | None:
        """SaslAuthenticate v1: (error code, session lifetime in ms), None if closed."""
        answer = self.call(36, 1, struct.pack(">i", len(token)) + token)
        if answer is None:
            return None
        code, message_len = struct.unpack(">hh", answer[:4])
        at = 4 + max(message_len, 0)
        token_len = struct.unpack(">i", answer[at:at + 4])[0]
        at += 4 + max(token_len, 0)
        return code, struct.unpack(">q", answer[at:at + 8])[0]

    def plain(self, user: str, password: str) -> tuple[int, int] | None:
        assert self.handshake("PLAIN") == 0
        return self.authenticate(b"\0" + user.encode() + b"\0" + password.encode())

    def api_versions(self) -> bool:
        """Whether ApiVersions v0 was answered (False: the broker closed)."""
        return self.call(18, 0) is not None

    def closed_by_broker(self) -> bool:
        self.sock.settimeout(DEADLINE_S)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def test_sessions_end_unless_renewed_by_the_same_principal(make_broker):
    broker = reauth_broker(make_broker)
    address = listener_address(broker, "SASL_PLAINTEXT")
    expired = metric(broker, "sasl_expired_sessions_closed_total")

    raw = Raw(address)
    assert raw.plain(USER, PASSWORD) == (0, REAUTH_MS)
    assert raw.api_versions()
    # Re-authenticating as the same principal starts a new session.
    time.sleep(1.0)
    assert raw.plain(USER, PASSWORD) == (0, REAUTH_MS)
    renewed = time.monotonic()
    # Requests are served until the session ends, then the connection is closed.
    answered_until = renewed
    while raw.api_versions():
        answered_until = time.monotonic()
        assert answered_until < renewed + DEADLINE_S, "never disconnected"
        time.sleep(0.1)
    assert REAUTH_MS / 1000 - 0.5 <= answered_until - renewed <= REAUTH_MS / 1000 + 0.5, \
        answered_until - renewed
    raw.close()
    assert metric(broker, "sasl_expired_sessions_closed_total") == expired + 1

    # Re-authenticating as another principal is refused and closes the connection.
    raw = Raw(address)
    assert raw.plain(USER, PASSWORD) == (0, REAUTH_MS)
    refused = raw.plain(OTHER_USER, OTHER_PASSWORD)
    assert refused is not None and refused[0] == SASL_AUTHENTICATION_FAILED, refused
    assert raw.closed_by_broker()
    raw.close()

    # So is another mechanism than the session's.
    raw = Raw(address)
    assert raw.plain(USER, PASSWORD) == (0, REAUTH_MS)
    assert raw.handshake("SCRAM-SHA-512") == ILLEGAL_SASL_STATE
    assert raw.closed_by_broker()
    raw.close()
    assert "re-authentication as User:bob" in broker.stderr_path.read_text()
