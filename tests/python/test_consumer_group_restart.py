"""Consumer-protocol groups (KIP-848) across a broker restart, as real clients see it.

Goal: two members with `group.protocol=consumer` (librdkafka through confluent-kafka, and
Java's `KafkaConsumer` 4.x) consuming a 4-partition topic keep their member ids, member epochs and partitions when the broker is
killed (SIGKILL) and started again on its data directory: neither sees a partition
revoked, lost or assigned again, the group's epochs are the ones it had, the members'
commits (OffsetCommit v9 names the member id and epoch) succeed again, and every record
produced after the restart is consumed exactly once, each member committing after every
batch.
Method: one broker on a fixed port, so the clients find it again after the restart; each
member reports its rebalance callbacks, its records and its commits (librdkafka: a
thread here, which reports its member id too; Java: tests/java/src/GroupMember.java,
which reports records once committed and a lost partition as revoked); the group's
member ids and epochs come from ConsumerGroupDescribe (`headway group describe --format
json`). While the broker is down the members'
heartbeats and commits fail and are retried. After the restart the test waits until each
member committed again and two heartbeat intervals have passed, so a heartbeat the broker
did not recognise would have shown as lost partitions.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from group_support import headway_cli
from java_support import JavaClient
from support import Delivery, create_topic, produce_records, rdkafka_base, wait_until

PARTITIONS = 4
TOPIC = "restart-cg"
GROUP = "restart-g"
BEFORE = 400
AFTER = 800
DEADLINE_S = 60.0
# The broker's group.consumer.heartbeat.interval.ms (5 s), told to the members.
HEARTBEAT_INTERVAL_S = 5.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Member:
    """What both kinds of member report: `events` with "assigned", "revoked" (and
    "lost") partitions and "records" [[partition, offset], ...]."""

    events: list[dict]
    member_id: str | None = None

    def owned(self, upto: int | None = None) -> set[int]:
        held: set[int] = set()
        for e in self.events[:upto]:
            if e["event"] == "assigned":
                held |= set(e["partitions"])
            elif e["event"] in ("revoked", "lost"):
                held -= set(e["partitions"])
        return held

    def consumed(self, start: int = 0) -> list[tuple[int, int]]:
        return [tuple(r) for e in list(self.events[start:]) if e["event"] == "records"
                for r in e["records"]]


class RdkafkaMember(Member):
    """A librdkafka consumer on its own thread: reports callbacks, records and commits."""

    def __init__(self, bootstrap: str):
        self.events: list[dict] = []
        self.error: BaseException | None = None
        self.member_id: str | None = None
        self._stop = threading.Event()
        self._consumer = Consumer({**rdkafka_base(bootstrap), "group.id": GROUP,
                                   "group.protocol": "consumer",
                                   "enable.auto.commit": False,
                                   "auto.offset.reset": "earliest"})
        self._consumer.subscribe([TOPIC], on_assign=self._event("assigned"),
                                 on_revoke=self._event("revoked"), on_lost=self._event("lost"))
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _event(self, name: str):
        def callback(_consumer, partitions) -> None:
            self.events.append({"event": name, "partitions": [p.partition for p in partitions]})
        return callback

    def _commit(self) -> bool:
        try:
            self._consumer.commit(asynchronous=False)
            self.events.append({"event": "committed"})
            return True
        except KafkaException as e:
            if e.args[0].code() == KafkaError._NO_OFFSET:
                return True
            self.events.append({"event": "commit_failed", "error": str(e)})
            return False

    def _run(self) -> None:
        try:
            uncommitted = False
            while not self._stop.is_set():
                batch = self._consumer.consume(num_messages=500, timeout=0.1)
                records = [[m.partition(), m.offset()] for m in batch if m.error() is None]
                if records:
                    self.events.append({"event": "records", "records": records})
                    uncommitted = True
                if uncommitted:
                    uncommitted = not self._commit()
                self.member_id = self._consumer.memberid()
            self._consumer.close()
        except BaseException as e:  # reported by check()
            self.error = e

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"librdkafka member failed: {self.error!r}")

    def committed_all(self) -> bool:
        return self.events[-1]["event"] == "committed"

    def committed_since(self, mark: int) -> bool:
        return any(e["event"] == "committed" for e in self.events[mark:]) and \
            self.committed_all()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=DEADLINE_S)


class JavaMember(Member):
    """GroupMember.java: its "records" events come once they are committed."""

    def __init__(self, java: JavaClient, bootstrap: str):
        self._proc = java.start("GroupMember", "--bootstrap", bootstrap, "--topic", TOPIC,
                                "--group", GROUP, "--set", "group.protocol=consumer",
                                "--set", "auto.offset.reset=earliest", stdin=True)
        self.events = self._proc.events

    def check(self) -> None:
        errors = [e for e in self.events if e.get("event") == "error"]
        assert not errors, f"{self._proc.what}: {errors[0]['error']}"
        stopped = self._proc.proc.stdin.closed
        assert stopped or self._proc.proc.poll() is None, f"{self._proc.what} exited"

    def committed_all(self) -> bool:
        return True

    def committed_since(self, mark: int) -> bool:
        return any(e["event"] == "records" for e in self.events[mark:])

    def stop(self) -> None:
        self._proc.close_stdin()
        try:
            self._proc.wait_event(lambda e: e.get("event") == "closed", DEADLINE_S, "close")
        finally:
            self._proc.finish(DEADLINE_S)


def describe(bootstrap: str) -> dict:
    """The group's epochs and members from ConsumerGroupDescribe: {"group_epoch",
    "assignment_epoch", "members": {member id: (member epoch, sorted partitions)}}."""
    doc = json.loads(headway_cli("group", "describe", GROUP, "-b", bootstrap,
                                 "--format", "json"))
    c = doc["consumer_protocol"]
    members = {m["member_id"]: (m["member_epoch"],
                                sorted(p for _, ps in m["assignment"] for p in ps))
               for m in c["members"]}
    return {"group_epoch": c["group_epoch"], "assignment_epoch": c["assignment_epoch"],
            "members": members}


def balanced(members: list[Member]) -> bool:
    for m in members:
        m.check()
    holdings = [m.owned() for m in members]
    counts = Counter(p for h in holdings for p in h)
    return ({len(h) for h in holdings} == {PARTITIONS // len(members)}
            and sorted(counts) == list(range(PARTITIONS)) and set(counts.values()) == {1})


def produce(bootstrap: str, seqs) -> set[tuple[int, int]]:
    delivery = Delivery()
    producer = Producer({**rdkafka_base(bootstrap), "acks": "all"})
    produce_records(producer, TOPIC, seqs, delivery)
    assert not delivery.failed, delivery.failed
    return set(delivery.acked.values())


def wait_consumed(members: list[Member], records: set[tuple[int, int]], what: str) -> None:
    def done() -> bool:
        for m in members:
            m.check()
        return records <= {r for m in members for r in m.consumed()}
    wait_until(done, what, DEADLINE_S)


@pytest.mark.parametrize("client", ["librdkafka", "java"])
def test_consumer_group_survives_a_broker_restart(make_broker, tmp_path, client):
    broker = make_broker(listen=f"127.0.0.1:{free_port()}")
    bootstrap = broker.bootstrap
    create_topic(bootstrap, TOPIC, PARTITIONS)
    members: list[Member] = []
    if client == "java":
        java = JavaClient("lib-4", "classes-4", "GroupMember", tmp_path)
        make_member = lambda: JavaMember(java, bootstrap)  # noqa: E731
    else:
        make_member = lambda: RdkafkaMember(bootstrap)  # noqa: E731
    try:
        members += [make_member(), make_member()]
        wait_until(lambda: balanced(members), "two members with two partitions each",
                   DEADLINE_S)
        wait_until(lambda: describe(bootstrap)["assignment_epoch"] > 0
                   and len(describe(bootstrap)["members"]) == 2
                   and all(e == describe(bootstrap)["assignment_epoch"]
                           for e, _ in describe(bootstrap)["members"].values()),
                   "the group is reconciled", DEADLINE_S)
        wait_consumed(members, produce(bootstrap, range(BEFORE)), "records before the restart")
        wait_until(lambda: all(m.committed_all() for m in members),
                   "each member committed what it consumed", DEADLINE_S)
        ids = [m.member_id for m in members]
        held = [m.owned() for m in members]
        group = describe(bootstrap)
        if client == "librdkafka":
            assert set(group["members"]) == set(ids), (group, ids)
        assert sorted(ps for _, ps in group["members"].values()) == \
            sorted(sorted(h) for h in held), (group, held)
        marks = [len(m.events) for m in members]

        broker.kill()
        broker.start()
        restarted = time.monotonic()
        assert describe(bootstrap) == group, "the group as it was before the restart"

        after = produce(bootstrap, range(BEFORE, BEFORE + AFTER))
        wait_consumed(members, after, "records produced after the restart")
        # Each member's commit after the restart names its member id and epoch: the
        # broker accepts it only if it knows both.
        wait_until(lambda: all(m.committed_since(mark) for m, mark in zip(members, marks)),
                   "each member committed after the restart", DEADLINE_S)
        # Two heartbeat intervals: each member heartbeat at least once to the new broker.
        wait_until(lambda: time.monotonic() - restarted > 2 * HEARTBEAT_INTERVAL_S + 1,
                   "two heartbeat intervals", DEADLINE_S)
        for m in members:
            m.check()

        assert [m.member_id for m in members] == ids
        for m, mark, h in zip(members, marks, held):
            moves = [e for e in m.events[mark:]
                     if e["event"] in ("assigned", "revoked", "lost")]
            assert not moves, f"member {m.member_id} saw its partitions move: {moves}"
            assert m.owned() == h
            assert {p for p, _ in m.consumed(mark)} <= h
        assert describe(bootstrap) == group, "the same epochs and assignments after it"

        since = Counter(r for m, mark in zip(members, marks) for r in m.consumed(mark))
        twice = sorted(r for r, n in since.items() if n > 1)
        assert not twice, f"{len(twice)} records consumed twice, e.g. {twice[:5]}"
        again = sorted(r for r in since if r not in after)
        assert not again, f"{len(again)} records from before the restart again: {again[:5]}"
        assert set(since) == after
    finally:
        for m in members:
            m.stop()
        for m in members:
            m.check()
