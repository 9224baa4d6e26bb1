"""The web console (--console-listen) in headless Chromium during a run with a slow
consumer.

Goal: an operator loading the page sees the topics, a consumer group's lag with the
right number, and which connection is slow: its outbound bytes held against its budget.
Method: a broker with the console on an ephemeral port (its address read from the log
line); a librdkafka producer writes to a 2-partition topic and a librdkafka group
consumer reads everything, commits, and pauses while more is produced, so the group's
lag is exactly what was produced since; a raw client with a tiny receive buffer
pipelines large fetches of a second topic and never reads its socket, so the broker
holds bytes for it. Chromium (Debian's `chromium`, headless) loads the page; the test
asserts on the DOM it dumps (the page marks its rows with data- attributes) and on
/api/state, and saves a screenshot next to the broker's log. Skipped without Chromium
only outside CI. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import struct
import subprocess
import threading
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer

from conftest import REPO_ROOT
from support import Delivery, ErrorLog, create_topic, produce_records, rdkafka_base

TOPIC = "console-run"
BULK = "console-bulk"
GROUP = "console-lag"
GROUP_CLIENT = "console-group-consumer"
SLOW_CLIENT = b"slow-consumer"
PARTITIONS = 2
FIRST = 1_000
MORE = 300
BULK_RECORDS = 512
BULK_VALUE = bytes(16 * 1024)
DEADLINE_S = 40.0
CHROMIUM_TIMEOUT_S = 40.0

CONSOLE_RE = re.compile(r"serving the console at \S+ addr=(\S+:\d+)")


def chromium() -> str | None:
    tools = REPO_ROOT / ".tools" / "bin" / "chromium"
    return str(tools) if tools.exists() else shutil.which("chromium")


def get_state(base: str) -> dict:
    with urllib.request.urlopen(base + "/api/state", timeout=10) as answer:
        return json.load(answer)


def wait_state(base: str, what: str, condition) -> dict:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        state = get_state(base)
        if condition(state):
            return state
        assert time.monotonic() < deadline, f"/api/state never showed {what}:\n{state}"
        time.sleep(0.1)


def group_lag(state: dict) -> int | None:
    return next((g["lag"] for g in state["groups"] if g["group_id"] == GROUP), None)


def fetch_frame(correlation_id: int) -> bytes:
    """A Fetch v4 of partition 0 of BULK from offset 0 asking for 50 MiB (header v1)."""
    topic = BULK.encode()
    body = struct.pack(">iiiib", -1, 500, 1, 50 << 20, 0)
    body += struct.pack(">ih", 1, len(topic)) + topic
    body += struct.pack(">iiqi", 1, 0, 0, 50 << 20)
    head = struct.pack(">hhih", 1, 4, correlation_id, len(SLOW_CLIENT)) + SLOW_CLIENT
    return struct.pack(">i", len(head) + len(body)) + head + body


def never_reading_client(address: tuple[str, int]) -> socket.socket:
    """Connects with a tiny receive buffer and pipelines fetches from a thread (its
    sends block once the broker stops reading it); never reads."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(address)
    payload = b"".join(fetch_frame(i) for i in range(1, 65))

    def send() -> None:
        try:
            sock.sendall(payload)
        except OSError:
            pass  # closed by the test

    threading.Thread(target=send, daemon=True).start()
    return sock


def run_chromium(binary: str, *args: str) -> str:
    done = subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--virtual-time-budget=4000", *args],
        capture_output=True, timeout=CHROMIUM_TIMEOUT_S, text=True)
    assert done.returncode == 0, f"chromium failed ({done.returncode}):\n{done.stderr[-3000:]}"
    return done.stdout


def test_console_shows_topics_lag_and_the_slow_connection(make_broker):
    browser = chromium()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("chromium not found (scripts/setup installs Debian's chromium)")
        pytest.skip("chromium not found: run scripts/setup (installs Debian's chromium)")
    broker = make_broker("--console-listen", "127.0.0.1:0")
    found = CONSOLE_RE.findall(broker.stderr_path.read_text("utf-8", "replace"))
    assert found, f"no console address in the broker's log\n{broker.stderr_tail()}"
    base = f"http://{found[-1]}"

    create_topic(broker.bootstrap, TOPIC, PARTITIONS)
    create_topic(broker.bootstrap, BULK, 1)
    producer = Producer({**rdkafka_base(broker.bootstrap), "acks": "all"})
    delivery = Delivery()
    produce_records(producer, TOPIC, range(FIRST), delivery)
    assert len(delivery.acked) == FIRST and not delivery.failed
    for _ in range(BULK_RECORDS):
        producer.produce(BULK, value=BULK_VALUE)
        producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0

    errors = ErrorLog()
    consumer = Consumer({**rdkafka_base(broker.bootstrap), "group.id": GROUP,
                         "client.id": GROUP_CLIENT, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "error_cb": errors})
    host, port = broker.bootstrap.rsplit(":", 1)
    slow = None
    try:
        consumer.subscribe([TOPIC])
        got, deadline = 0, time.monotonic() + DEADLINE_S
        while got < FIRST:
            assert time.monotonic() < deadline, f"read {got}; errors: {errors.summary()}"
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got += 1
        consumer.commit(asynchronous=False)
        # Paused: still a member, reads nothing; the lag is what is produced from here.
        consumer.pause(consumer.assignment())
        produce_records(producer, TOPIC, range(FIRST, FIRST + MORE), delivery)
        wait_state(base, f"the group's lag at {MORE}", lambda s: group_lag(s) == MORE)

        slow = never_reading_client((host, int(port)))
        state = wait_state(
            base, "the slow connection holding bytes",
            lambda s: any(c["client_id"] == SLOW_CLIENT.decode() and c["outbound_bytes_held"] > 0
                          for c in s["connections"]))
        assert state["connections"][0]["client_id"] == SLOW_CLIENT.decode(), "slowest on top"
        assert group_lag(state) == MORE

        dom = run_chromium(browser, "--dump-dom", base + "/")
        screenshot = broker.stderr_path.parent / "console.png"
        run_chromium(browser, f"--screenshot={screenshot}", "--window-size=1400,1000",
                     "--hide-scrollbars", base + "/")
        print(f"console screenshot: {screenshot}")
        after = get_state(base)
    finally:
        if slow is not None:
            slow.close()
        consumer.close()

    assert screenshot.stat().st_size > 10_000, "a screenshot with content"
    for topic in (TOPIC, BULK):
        assert f'data-topic="{topic}" data-partition="0"' in dom, f"{topic} listed:\n{dom}"
    lags = re.findall(rf'class="group" data-group="{GROUP}" data-lag="(\d+)"', dom)
    assert lags == [str(MORE)], f"the group's lag on the page: {lags}"
    assert group_lag(after) == MORE, "the page and /api/state agree"
    assert GROUP_CLIENT in dom, "the group's member by client id"
    assert f"{TOPIC}[" in dom, "the member's decoded assignment"
    rows = re.findall(r'<tr class="conn( slow)?" data-id="\d+" data-client-id="([^"]*)" '
                      r'data-held="(\d+)"', dom)
    assert rows, f"no connection rows:\n{dom}"
    slow_flag, client_id, held = rows[0]
    assert client_id == SLOW_CLIENT.decode() and slow_flag and int(held) > 0, rows
    assert all(int(h) == 0 for _, c, h in rows[1:]), f"only the slow one holds bytes: {rows}"
