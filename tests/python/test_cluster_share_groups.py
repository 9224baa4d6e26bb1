"""Share groups on three brokers: members at the group's coordinator, records at the
partitions' leaders.

Goal: in a cluster a share group's members heartbeat to the group's coordinator (the
leader of its partition of `__consumer_offsets`), which assigns the partitions; each
member fetches and acknowledges at the leaders of its partitions, which keep the
share-partitions' state. Java share consumers on a topic whose partitions are led by
different brokers get every record exactly once (no failure, so no redelivery), the
group's `share.auto.offset.reset=earliest`, set through one broker, holds on every
leader, and a broker that does not coordinate the group answers its heartbeat
NOT_COORDINATOR. When the leader of a partition is SIGKILLed after every record so far was
acknowledged, its successor reads the share-partition's state from the replicated
`__share_group_state`: no acknowledged record is delivered again, and the records
produced afterwards all arrive. The same holds when the broker killed is the group's
coordinator, with each of the three client libraries: Java's KafkaShareConsumer,
librdkafka's (confluent-kafka's ShareConsumer, implicit acknowledgement, commit_sync
after each poll) and franz-go's (tests/go/cmd/franzshare, acknowledgements flushed after
each poll): the members join the new coordinator and carry on.
Method: three brokers (cluster_support), a 3-partition topic at replication factor 3
with its leaders spread; `headway group config` sets the group's reset; the consumers
are threads of tests/java/share/ShareConsumerCheck.java (as test_share_groups.py);
records come from confluent-kafka, before and after the consumers start. Every wait
polls for its condition with a deadline.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, ShareConsumer

from cluster_support import (CALL_TIMEOUT_S, Reader, call, cluster_with_topic, group_configs,
                             led_by)
from go_support import build_go_command
from java_support import EventLog, LineProcess
from kafka_frames import read_response
from group_support import headway_cli
from support import rdkafka_base, wait_until
from test_share_groups import (  # noqa: F401 (fixtures)
    DEADLINE_S, close, consumer, java, produce, records, share_classes, wait_records)

TOPIC = "shares-rf3"
PARTITIONS = 3
FIND_COORDINATOR_KEY, SHARE_GROUP_HEARTBEAT_KEY = 10, 76
NOT_COORDINATOR = 16


def coordinator_of(bootstrap: str, group: str) -> int:
    """FindCoordinator v1 (key type GROUP) as one broker answers it: the node id."""
    key = group.encode()
    r = call(bootstrap, FIND_COORDINATOR_KEY, 1, struct.pack(">h", len(key)) + key + b"\x00")
    r.take(">i")  # throttle
    error, _message = r.take(">h"), r.string()
    assert error == 0, error
    return r.take(">i")


def heartbeat_error(bootstrap: str, group: str, topic: str) -> int:
    """A new member's ShareGroupHeartbeat v1 (flexible) at one broker: its error code."""
    def compact(s: str) -> bytes:
        b = s.encode()
        return bytes([len(b) + 1]) + b
    body = (compact(group) + compact("") + struct.pack(">i", 0) + b"\x00"  # rack: null
            + bytes([2]) + compact(topic) + b"\x00")
    # kafka-python has no schema of this API, so the flexible header (v2) is made here.
    client = b"cluster-share-test"
    header = (struct.pack(">hhih", SHARE_GROUP_HEARTBEAT_KEY, 1, 11, len(client)) + client
              + b"\x00")
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=CALL_TIMEOUT_S) as sock:
        sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        response = read_response(sock)
    assert response is not None, f"{bootstrap}: connection closed without an answer"
    r = Reader(response)
    assert r.take(">i") == 11
    r.take(">b")  # the response header's tagged fields
    r.take(">i")  # throttle
    return r.take(">h")


def start_at_earliest(bootstraps: list[str], group: str) -> None:
    """Sets the group's `share.auto.offset.reset=earliest` through the first broker and
    waits until every broker describes it."""
    reset = "share.auto.offset.reset"
    headway_cli("group", "config", group, "-b", bootstraps[0], "--set", f"{reset}=earliest")
    wait_until(lambda: all(group_configs(b, group)[reset] == ("earliest", 8)
                           for b in bootstraps), "the reset on every broker", DEADLINE_S)


def test_share_consumers_read_every_record_once_from_leaders_on_three_brokers(
        make_broker, java):
    _brokers, bootstraps, led = cluster_with_topic(make_broker, TOPIC, PARTITIONS)
    assert len({p["leader"] for p in led.values()}) > 1, f"leaders not spread: {led}"
    bootstrap = ",".join(bootstraps)
    group = "rf3-share"
    start_at_earliest(bootstraps, group)

    before = [f"old{i}" for i in range(150)]
    produce(bootstrap, TOPIC, before, partitions=PARTITIONS)
    coordinator = coordinator_of(bootstraps[0], group)
    others = [b for n, b in enumerate(bootstraps, 1) if n != coordinator]
    assert heartbeat_error(others[0], group, TOPIC) == NOT_COORDINATOR

    proc = consumer(java, bootstrap, TOPIC, group, "--consumers", "3")
    try:
        after = [f"new{i}" for i in range(150)]
        produce(bootstrap, TOPIC, after, partitions=PARTITIONS)
        wanted = set(before) | set(after)
        got = wait_records(proc, lambda rs: {r["value"] for r in rs} >= wanted,
                           "every record, from every leader")
    finally:
        close(proc)
    values = [r["value"] for r in got]
    assert sorted(values) == sorted(wanted), "a record delivered twice or one not produced"
    assert all(r["delivery"] == 1 for r in got), [r for r in got if r["delivery"] != 1]
    assert {r["partition"] for r in got} == set(range(PARTITIONS))


def acknowledged(proc) -> int:
    """Records whose acknowledgement the broker confirmed, over every consumer."""
    with proc._cond:
        events = [e for e in proc.events if e.get("event") == "acknowledged"]
    assert all(e["error"] is None for e in events), [e for e in events if e["error"]]
    return sum(e["records"] for e in events)


def test_a_killed_leaders_successor_starts_from_the_replicated_share_state(make_broker, java):
    brokers, bootstraps, led = cluster_with_topic(
        make_broker, TOPIC, PARTITIONS, config={"min.insync.replicas": "2"})
    bootstrap = ",".join(bootstraps)
    group = "rf3-share-failover"
    start_at_earliest(bootstraps, group)
    before = [f"old{i}" for i in range(300)]
    produce(bootstrap, TOPIC, before, partitions=PARTITIONS)

    proc = consumer(java, bootstrap, TOPIC, group, "--consumers", "3")
    try:
        wait_records(proc, lambda rs: {r["value"] for r in rs} >= set(before), "the first 300")
        wait_until(lambda: acknowledged(proc) >= len(before), "the first 300 acknowledged",
                   DEADLINE_S)
        victim = led[0]["leader"]
        brokers[victim - 1].kill()
        alive = {1, 2, 3} - {victim}
        survivors = ",".join(bootstraps[n - 1] for n in sorted(alive))
        wait_until(lambda: led_by(bootstraps, TOPIC, alive, 2), "partition 0 led again",
                   DEADLINE_S)
        after = [f"new{i}" for i in range(300)]
        produce(survivors, TOPIC, after, partitions=PARTITIONS)
        got = wait_records(proc, lambda rs: {r["value"] for r in rs} >= set(after),
                           "the records produced after the kill", DEADLINE_S * 2)
    finally:
        close(proc)
    values = [r["value"] for r in got]
    again = sorted({v for v in values if v in set(before) and values.count(v) > 1})
    assert not again, f"acknowledged records delivered again after the failover: {again[:10]}"
    assert set(values) == set(before) | set(after)


class RdkafkaShareConsumers(EventLog):
    """librdkafka share consumers (confluent-kafka's ShareConsumer at default settings,
    implicit acknowledgement), one per thread of this process, reporting the events
    ShareConsumerCheck.java prints: a "record" per record, and after each poll's
    commit_sync an "acknowledged" whose error is the first partition's failure (None when
    the broker took them all); "closed" once every consumer closed."""

    def __init__(self, bootstrap: str, topic: str, group: str, consumers: int):
        super().__init__(f"librdkafka share consumers of {group}")
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True,
                                          args=(i, bootstrap, topic, group))
                         for i in range(consumers)]
        for t in self._threads:
            t.start()
        self.add({"event": "started", "consumers": consumers})

    def _run(self, ident: int, bootstrap: str, topic: str, group: str) -> None:
        consumer = ShareConsumer({**rdkafka_base(bootstrap), "group.id": group})
        try:
            consumer.subscribe([topic])
            while not self._stop.is_set():
                polled = [m for m in consumer.poll(0.5)]
                for m in polled:
                    if m.error() is not None:
                        self.add({"event": "fetch_error", "consumer": ident,
                                    "error": str(m.error())})
                        continue
                    self.add({"event": "record", "consumer": ident,
                                "partition": m.partition(), "offset": m.offset(),
                                "value": m.value().decode(), "delivery": m.delivery_count()})
                got = sum(1 for m in polled if m.error() is None)
                if not got:
                    continue
                try:
                    failed = [f"{tp.topic}-{tp.partition}: {e}"
                              for tp, e in consumer.commit_sync(60).items() if e is not None]
                except KafkaException as e:
                    failed = [str(e)]
                self.add({"event": "acknowledged", "consumer": ident, "records": got,
                            "error": failed[0] if failed else None})
        except Exception as e:  # reported as the Java check reports a failure
            self.add({"event": "error", "consumer": ident, "error": repr(e)})
        finally:
            consumer.close()

    def close_stdin(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(DEADLINE_S)
        self.add({"event": "closed"})

    def kill(self) -> None:
        self._stop.set()


@pytest.fixture(scope="module")
def franzshare(tmp_path_factory) -> Path:
    return build_go_command(tmp_path_factory, "franzshare")


def share_consumers(client: str, java, franzshare: Path, bootstrap: str, group: str,
                    tmp_path: Path):
    """Three share consumers of `client` (Java, librdkafka) or one (franz-go) reading
    TOPIC in `group`, started; each reports the events ShareConsumerCheck.java prints."""
    if client == "java":
        return consumer(java, bootstrap, TOPIC, group, "--consumers", "3")
    if client == "librdkafka":
        return RdkafkaShareConsumers(bootstrap, TOPIC, group, 3)
    proc = LineProcess("franzshare", [str(franzshare), "-brokers", bootstrap, "-topic", TOPIC,
                                      "-group", group],
                       tmp_path / "franzshare.stderr.log", tmp_path, stdin=True)
    proc.wait_event(lambda e: e.get("event") == "started", DEADLINE_S, "start")
    return proc


@pytest.mark.parametrize("client", ["java", "librdkafka", "franz-go"])
def test_share_consumers_carry_on_when_the_groups_coordinator_is_killed(
        make_broker, java, franzshare, tmp_path, client):
    brokers, bootstraps, _ = cluster_with_topic(
        make_broker, TOPIC, PARTITIONS, config={"min.insync.replicas": "2"})
    bootstrap = ",".join(bootstraps)
    group = f"rf3-share-coordinator-{client}"
    start_at_earliest(bootstraps, group)
    before = [f"old{i}" for i in range(300)]
    produce(bootstrap, TOPIC, before, partitions=PARTITIONS)

    proc = share_consumers(client, java, franzshare, bootstrap, group, tmp_path)
    try:
        wait_records(proc, lambda rs: {r["value"] for r in rs} >= set(before), "the first 300")
        wait_until(lambda: acknowledged(proc) >= len(before), "the first 300 acknowledged",
                   DEADLINE_S)
        victim = coordinator_of(bootstraps[0], group)
        killed_at = time.monotonic()
        brokers[victim - 1].kill()
        alive = {1, 2, 3} - {victim}
        survivors = ",".join(bootstraps[n - 1] for n in sorted(alive))
        wait_until(lambda: led_by(bootstraps, TOPIC, alive, 2), "every partition led again",
                   DEADLINE_S)
        moved = coordinator_of(survivors.split(",")[0], group)
        after = [f"new{i}" for i in range(300)]
        produce(survivors, TOPIC, after, partitions=PARTITIONS)
        got = wait_records(proc, lambda rs: {r["value"] for r in rs} >= set(after),
                           "the records produced after the kill", DEADLINE_S * 2)
        print(f"{client}: coordinator {victim} killed, {moved} after it; every record "
              f"{time.monotonic() - killed_at:.0f} s after the kill")
    finally:
        close(proc)
    with proc._cond:
        fetch_errors = [e["error"] for e in proc.events if e.get("event") == "fetch_error"]
    values = [r["value"] for r in got]
    again = sorted({v for v in values if v in set(before) and values.count(v) > 1})
    assert not again, f"acknowledged records delivered again after the failover: {again[:10]}"
    assert set(values) == set(before) | set(after)
    redelivered = sorted({v for v in values if values.count(v) > 1})
    print(f"{client}: {len(values)} deliveries of {len(set(values))} records, redelivered "
          f"(unacknowledged at the kill) {len(redelivered)}; fetch errors reported: "
          f"{len(fetch_errors)} {fetch_errors[:3]}")
