"""/metrics, /healthz and /readyz during a librdkafka produce and consume run.

Goal: the families an operator reads (docs/metrics.md) move with real traffic: request
counters, response codes and latency histograms per API, partition offsets and sizes,
and a consumer group's committed offsets and lag, which rises while the group's consumer
is paused and falls to 0 once it has caught up and committed. /healthz and /readyz
answer 200 on a healthy broker.
Method: a broker with metrics on an ephemeral port; a librdkafka producer (acks=all)
writes to a 2-partition topic and a librdkafka group consumer reads everything and
commits; then the consumer pauses, more records are produced, and the lag on /metrics
must equal exactly what was produced since; it resumes, reads and commits, and the lag
must come back to 0. Every wait is on a condition with a deadline. The text format is
parsed by a small parser below. (A stalled client's outbound bytes on /metrics are
asserted by crates/server/tests/isolation.rs, with a client that never reads its
socket.)
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

from confluent_kafka import Consumer, Producer

from support import Delivery, ErrorLog, create_topic, produce_records, rdkafka_base
from conftest import REPO_ROOT

TOPIC = "metrics-run"
GROUP = "metrics-lag"
PARTITIONS = 2
FIRST = 2_000
MORE = 500
DEADLINE_S = 60.0

DASHBOARD = REPO_ROOT / "dashboards" / "headway.json"
FAMILY_RE = re.compile(r"headway_[a-z_]+")
SUFFIX_RE = re.compile(r"_(bucket|sum|count|total)$")

SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Scrape:
    """One scrape of /metrics: every sample with its labels."""

    def __init__(self, text: str):
        self.text = text
        self.samples: list[tuple[str, dict[str, str], float]] = []
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            match = SAMPLE_RE.match(line)
            assert match, f"not a sample line: {line!r}"
            name, labels, value = match.groups()
            self.samples.append((name, dict(LABEL_RE.findall(labels or "")), float(value)))

    def series(self, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
        return [(l, v) for n, l, v in self.samples
                if n == name and all(l.get(k) == want for k, want in labels.items())]

    def sum(self, name: str, **labels: str) -> float:
        return sum(v for _, v in self.series(name, **labels))


class Endpoint:
    def __init__(self, address: str):
        self.base = f"http://{address}"

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def scrape(self) -> Scrape:
        status, text = self.get("/metrics")
        assert status == 200, text
        return Scrape(text)

    def wait_for(self, what: str, condition) -> Scrape:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            m = self.scrape()
            if condition(m):
                return m
            assert time.monotonic() < deadline, f"/metrics never showed {what}:\n{m.text}"
            time.sleep(0.1)


def lag(m: Scrape) -> float:
    return m.sum("headway_group_lag", group=GROUP, topic=TOPIC)


def committed(m: Scrape) -> float:
    return m.sum("headway_group_committed_offset", group=GROUP, topic=TOPIC)


def consume(consumer: Consumer, count: int, errors: ErrorLog) -> None:
    """Polls until `count` records arrived, then commits synchronously."""
    deadline = time.monotonic() + DEADLINE_S
    got = 0
    while got < count:
        assert time.monotonic() < deadline, f"read {got} of {count}; errors: {errors.summary()}"
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got += 1
    assert got == count
    consumer.commit(asynchronous=False)


def test_metrics_follow_a_produce_consume_run(make_broker):
    broker = make_broker("--metrics-listen", "127.0.0.1:0")
    endpoint = Endpoint(broker.metrics_address())
    assert endpoint.get("/healthz") == (200, "ok\n")
    deadline = time.monotonic() + DEADLINE_S
    while (ready := endpoint.get("/readyz"))[0] != 200:
        assert time.monotonic() < deadline, f"/readyz never 200: {ready}"
        time.sleep(0.1)
    assert endpoint.get("/nothing-here")[0] == 404

    before = endpoint.scrape()
    create_topic(broker.bootstrap, TOPIC, PARTITIONS)
    producer = Producer({**rdkafka_base(broker.bootstrap), "acks": "all"})
    delivery = Delivery()
    produce_records(producer, TOPIC, range(FIRST), delivery)
    assert len(delivery.acked) == FIRST and not delivery.failed

    after = endpoint.scrape()
    for name in ("headway_api_requests_total", "headway_api_request_seconds_count"):
        moved = after.sum(name, api="Produce") - before.sum(name, api="Produce")
        assert moved >= 1, f"{name} for Produce did not move:\n{after.text}"
    assert after.sum("headway_api_response_codes_total", api="Produce", code="0") >= 1
    assert after.sum("headway_api_requests_total", api="CreateTopics") >= 1
    assert after.sum("headway_partition_log_end_offset", topic=TOPIC) == FIRST
    sizes = after.series("headway_partition_size_bytes", topic=TOPIC)
    assert len(sizes) == PARTITIONS and all(v > 0 for _, v in sizes), sizes
    assert after.sum("headway_process_resident_memory_bytes") > 0
    assert after.sum("headway_process_open_fds") > 0
    assert after.sum("headway_partitions_omitted") == 0
    # Exactly what was acknowledged, once: retries of the idempotent producer are not
    # appended twice.
    assert after.sum("headway_topic_records_in_total", topic=TOPIC) == FIRST
    assert after.sum("headway_records_in_total") == FIRST
    assert after.sum("headway_topic_bytes_in_total", topic=TOPIC) > 0
    assert after.sum("headway_sync_records_sum") >= FIRST

    errors = ErrorLog()
    consumer = Consumer({**rdkafka_base(broker.bootstrap), "group.id": GROUP,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "error_cb": errors})
    try:
        consumer.subscribe([TOPIC])
        consume(consumer, FIRST, errors)
        caught_up = endpoint.wait_for(
            "the group committed everything",
            lambda m: committed(m) == FIRST and lag(m) == 0
            and len(m.series("headway_group_lag", group=GROUP, topic=TOPIC)) == PARTITIONS)
        for name in ("headway_api_requests_total", "headway_api_request_seconds_count"):
            assert caught_up.sum(name, api="Fetch") > before.sum(name, api="Fetch"), name
        assert caught_up.sum("headway_api_response_codes_total", api="OffsetCommit",
                             code="0") >= 1
        assert caught_up.sum("headway_topic_records_out_total", topic=TOPIC) >= FIRST
        assert caught_up.sum("headway_topic_bytes_out_total", topic=TOPIC) >= \
            caught_up.sum("headway_topic_bytes_in_total", topic=TOPIC)

        # Paused: the group keeps its members (poll goes on) but reads nothing.
        consumer.pause(consumer.assignment())
        produce_records(producer, TOPIC, range(FIRST, FIRST + MORE), delivery)
        deadline = time.monotonic() + DEADLINE_S
        while True:
            consumer.poll(0.1)
            behind = endpoint.scrape()
            if lag(behind) == MORE:
                break
            assert lag(behind) < MORE, behind.text
            assert time.monotonic() < deadline, f"lag never reached {MORE}:\n{behind.text}"
        assert committed(behind) == FIRST, "nothing committed while paused"
        print(f"lag while paused: {lag(behind):.0f}")

        consumer.resume(consumer.assignment())
        consume(consumer, MORE, errors)
        endpoint.wait_for("the lag back to 0",
                          lambda m: lag(m) == 0 and committed(m) == FIRST + MORE)
    finally:
        consumer.close()
    assert endpoint.get("/readyz") == (200, "ready\n")
    check_dashboard(endpoint.scrape())


def check_dashboard(m: Scrape) -> None:
    """Every family the Grafana dashboard queries is on /metrics after the run."""
    exprs = []

    def collect(node):
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                exprs.append(node["expr"])
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(json.loads(DASHBOARD.read_text()))
    queried = {SUFFIX_RE.sub("", name) for e in exprs for name in FAMILY_RE.findall(e)}
    served = {SUFFIX_RE.sub("", name) for name, _, _ in m.samples}
    assert len(queried) >= 20, queried
    missing = sorted(queried - served)
    assert not missing, f"the dashboard queries families /metrics does not have: {missing}"
