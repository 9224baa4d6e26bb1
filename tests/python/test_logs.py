"""The broker's log lines in JSON, and the line every client-visible failure gets.

Goal: with `--log-format json` every line the broker writes on stderr is one JSON
object (log collectors parse it), and a request the broker refuses for bad input is
logged with what an operator needs to find the client: the API, the error's Kafka name,
the client id and the client's address. A client repeating the failure cannot flood the
log: lines past the per-second bound are left out and counted in the next line.
Method: a broker started with `--log-format json`; a raw-socket client sends a Produce
whose record batch fails its CRC, several times; the broker answers CORRUPT_MESSAGE and
the test waits for the log line naming this socket's address and client id. A librdkafka
producer then writes to the same partition and a consumer reads back exactly its records:
the refused batches left nothing in the log.
"""

from __future__ import annotations

import json
import socket
import struct
import time

from confluent_kafka import Producer

import kafka_frames as kf
from support import Delivery, create_topic, produce_records, rdkafka_base, read_records

TOPIC = "logged"
DEADLINE_S = 30.0
CORRUPT_MESSAGE = 2
GOOD_RECORDS = 50


def corrupt_produce(topic: str) -> bytes:
    """Produce v3 body: one partition, one v2 batch whose CRC does not match."""
    records = 3
    batch_length = 49 + 12 * records
    batch = struct.pack(">qi", 0, batch_length) + struct.pack(">ibI", 0, 2, 0xDEADBEEF)
    batch += b"\x00" * (batch_length - 9)
    name = topic.encode()
    return (struct.pack(">hhi", -1, -1, 30_000) + struct.pack(">i", 1)
            + struct.pack(">h", len(name)) + name + struct.pack(">i", 1)
            + struct.pack(">ii", 0, len(batch)) + batch)


def json_lines(broker) -> list[dict]:
    """Every log line the broker wrote, parsed; the harness's own `###` lines skipped."""
    lines = []
    for line in broker.stderr_path.read_text(errors="replace").splitlines():
        if not line.strip() or line.startswith("### "):
            continue
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise AssertionError(f"not a JSON log line: {line!r} ({e})") from None
    return lines


def test_a_refused_request_is_logged_as_json_with_its_client(make_broker):
    broker = make_broker("--log-format", "json")
    create_topic(broker.bootstrap, TOPIC, 1)
    host, port = broker.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=DEADLINE_S) as sock:
        peer = "%s:%d" % sock.getsockname()
        for correlation_id in range(3):
            sock.sendall(kf.frame(0, 3, corrupt_produce(TOPIC), correlation_id))
            response = kf.read_response(sock)
            assert response is not None, "the broker closed the connection"
            # correlation id, one topic, its name, one partition: index, then error code.
            head = 4 + 4 + 2 + len(TOPIC) + 4 + 4
            (code,) = struct.unpack(">h", response[head:head + 2])
            assert code == CORRUPT_MESSAGE, response.hex()

    deadline = time.monotonic() + DEADLINE_S
    while True:
        failures = [line for line in json_lines(broker)
                    if line.get("message") == "request failed" and line.get("peer") == peer]
        if len(failures) == 3:
            break
        assert time.monotonic() < deadline, \
            f"expected 3 failure lines for {peer}, got {failures}\n{broker.stderr_tail()}"
        time.sleep(0.1)
    for line in failures:
        assert line["level"] == "WARN", line
        assert line["api"] == "Produce" and line["error"] == "CorruptMessage", line
        assert line["code"] == CORRUPT_MESSAGE, line
        assert line["client_id"] == kf.CLIENT_ID.decode(), line
    assert any(line.get("message") == "starting" for line in json_lines(broker))

    producer = Producer({**rdkafka_base(broker.bootstrap), "acks": "all"})
    delivery = Delivery()
    produce_records(producer, TOPIC, range(GOOD_RECORDS), delivery)
    assert len(delivery.acked) == GOOD_RECORDS and not delivery.failed
    records = list(read_records(broker.bootstrap, TOPIC, 1, expected=GOOD_RECORDS))
    assert [r.offset for r in records] == list(range(GOOD_RECORDS)), \
        "the refused batches took no offsets"
