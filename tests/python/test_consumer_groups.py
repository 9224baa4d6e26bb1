"""Consumer groups of the broker-driven protocol (KIP-848), as real clients run them.

Goal: with `group.protocol=consumer` and otherwise default settings, Java's
`KafkaConsumer` 4.x and librdkafka (confluent-kafka) share a topic's partitions through
the broker's assignor: three members split six partitions two each; when one leaves and
another joins, the partitions move incrementally, so the members that keep partitions go
on consuming them during the change (no stop-the-world), and every record is consumed
exactly once across the group, each member committing after every poll.
Method: one broker; a background producer writes numbered records throughout; each
member reports, in order, the partitions it was given and gave up and the records it
consumed and committed (Java: tests/java/src/GroupMember.java; librdkafka: a thread per
consumer here). "During the change" is the stretch of each continuing member's report
between the leaving member's close and the moment the group is balanced again with the
newcomer: an ordering of events, not a timing.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, ConsumerGroupType
from confluent_kafka.admin import AdminClient

from group_support import headway_cli
from java_support import JavaClient
from support import BackgroundProducer, create_topic, rdkafka_base

PARTITIONS = 6
BALANCE_DEADLINE_S = 60.0
DRAIN_DEADLINE_S = 60.0
RATE_PER_S = 300.0


class RdkafkaMember:
    """A librdkafka consumer with `group.protocol=consumer` (or `protocol`) on its own
    thread, reporting events as GroupMember.java does."""

    def __init__(self, bootstrap: str, topic: str, group: str, protocol: str = "consumer"):
        self.events: list[dict] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._consumer = Consumer({**rdkafka_base(bootstrap), "group.id": group,
                                   "group.protocol": protocol,
                                   "auto.offset.reset": "earliest"})
        self._consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _assigned(self, _consumer, partitions) -> None:
        self.events.append({"event": "assigned", "partitions": [p.partition for p in partitions]})

    def _revoked(self, _consumer, partitions) -> None:
        self.events.append({"event": "revoked", "partitions": [p.partition for p in partitions]})

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                batch = self._consumer.consume(num_messages=500, timeout=0.1)
                records = [[m.partition(), m.offset()] for m in batch if m.error() is None]
                if records:
                    self._consumer.commit(asynchronous=False)
                    self.events.append({"event": "records", "records": records})
            self._consumer.close()
            self.events.append({"event": "closed"})
        except BaseException as e:  # reported by check()
            self.error = e

    def leave(self) -> None:
        self._stop.set()

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"librdkafka member failed: {self.error}")

    def wait_closed(self, deadline_s: float) -> None:
        self._thread.join(timeout=deadline_s)
        self.check()
        assert not self._thread.is_alive(), "librdkafka member did not close"


class JavaMember:
    """GroupMember.java with `group.protocol=consumer` (or `protocol`)."""

    def __init__(self, java: JavaClient, bootstrap: str, topic: str, group: str,
                 protocol: str = "consumer"):
        self._proc = java.start("GroupMember", "--bootstrap", bootstrap, "--topic", topic,
                                "--group", group, "--set", f"group.protocol={protocol}",
                                "--set", "auto.offset.reset=earliest", stdin=True)
        self.events = self._proc.events

    def leave(self) -> None:
        self._proc.close_stdin()

    def check(self) -> None:
        errors = [e for e in self.events if e.get("event") == "error"]
        assert not errors, f"{self._proc.what}: {errors[0]['error']}"

    def wait_closed(self, deadline_s: float) -> None:
        self._proc.wait_event(lambda e: e.get("event") == "closed", deadline_s, "close")
        self._proc.finish(deadline_s)

    def kill(self) -> None:
        self._proc.kill()


def owned(member, upto: int | None = None) -> set[int]:
    """The partitions a member holds after its first `upto` events."""
    held: set[int] = set()
    for e in member.events[:upto]:
        if e["event"] == "assigned":
            held |= set(e["partitions"])
        elif e["event"] == "revoked":
            held -= set(e["partitions"])
    return held


def consumed(member) -> list[tuple[int, int]]:
    return [tuple(r) for e in list(member.events) if e["event"] == "records"
            for r in e["records"]]


def wait_balanced(members: list, deadline_s: float = BALANCE_DEADLINE_S) -> None:
    """Until the members hold all partitions between them, evenly, none twice."""
    deadline = time.monotonic() + deadline_s
    while True:
        for m in members:
            m.check()
        holdings = [owned(m) for m in members]
        counts = Counter(p for h in holdings for p in h)
        even = {len(h) for h in holdings} == {PARTITIONS // len(members)}
        if even and sorted(counts) == list(range(PARTITIONS)) and set(counts.values()) == {1}:
            return
        assert time.monotonic() < deadline, f"not balanced within {deadline_s} s: {holdings}"
        time.sleep(0.1)


def kept_consuming(member, start: int, end: int) -> set[int]:
    """Partitions the member held throughout its events [start, end) and consumed from
    in that stretch."""
    held = owned(member, start)
    read: set[int] = set()
    for e in member.events[start:end]:
        if e["event"] == "revoked":
            held -= set(e["partitions"])
        elif e["event"] == "records":
            read |= {p for p, _ in e["records"] if p in held}
    return read & held


def check_admin_view(bootstrap: str, group: str, members: int) -> None:
    """ListGroups shows the group's type; describing it (ConsumerGroupDescribe) shows
    its members and their assignments, all partitions once."""
    admin = AdminClient(rdkafka_base(bootstrap))
    listed = admin.list_consumer_groups(request_timeout=30).result(timeout=30)
    types = {g.group_id: g.type for g in listed.valid}
    assert types.get(group) == ConsumerGroupType.CONSUMER, types
    described = admin.describe_consumer_groups([group], request_timeout=30)[group].result(
        timeout=30)
    assert len(described.members) == members
    given = sorted(tp.partition for m in described.members
                   for tp in m.assignment.topic_partitions)
    assert given == list(range(PARTITIONS)), given
    rows = [line.split() for line in headway_cli("group", "list", "-b", bootstrap).splitlines()]
    assert [group, "consumer"] in [[r[0], r[-1]] for r in rows if r], rows
    text = headway_cli("group", "describe", group, "-b", bootstrap)
    assert "consumer protocol: group epoch" in text and "TARGET" in text, text


def run_scenario(bootstrap: str, topic: str, group: str, make_member) -> None:
    create_topic(bootstrap, topic, PARTITIONS)
    producer = BackgroundProducer(bootstrap, topic, rate_per_s=RATE_PER_S).start()
    members = [make_member() for _ in range(3)]
    try:
        wait_balanced(members)
        check_admin_view(bootstrap, group, 3)
        leaving, staying = members[2], members[:2]
        marks = [len(m.events) for m in staying]
        leaving.leave()
        leaving.wait_closed(BALANCE_DEADLINE_S)
        joining = make_member()
        members.append(joining)
        wait_balanced(staying + [joining])
        ends = [len(m.events) for m in staying]
        kept = [kept_consuming(m, s, e) for m, s, e in zip(staying, marks, ends)]
        assert any(kept), ("no continuing member consumed a partition it kept while the "
                           f"group changed: {kept}")
        producer.stop(purge=False)
        acked = {(p, o) for p, o in producer.delivery.acked.values()}
        assert len(acked) == producer.sent
        deadline = time.monotonic() + DRAIN_DEADLINE_S
        while not acked <= set(sum((consumed(m) for m in members), [])):
            assert time.monotonic() < deadline, "records left unconsumed"
            time.sleep(0.1)
        every = Counter(sum((consumed(m) for m in members), []))
        twice = sorted(r for r, n in every.items() if n > 1)
        assert not twice, f"{len(twice)} records consumed twice, e.g. {twice[:5]}"
        for m in staying + [joining]:
            m.leave()
        for m in staying + [joining]:
            m.wait_closed(BALANCE_DEADLINE_S)
    finally:
        if producer.error is None and not producer._stop.is_set():
            producer.stop(purge=True)
        for m in members:
            m.leave()
            if isinstance(m, JavaMember):
                m.kill()


def test_java_consumers_share_partitions_incrementally(broker, tmp_path):
    java = JavaClient("lib-4", "classes-4", "GroupMember", tmp_path)
    bootstrap = broker.bootstrap
    run_scenario(bootstrap, "cg-java", "g-java", lambda: JavaMember(java, bootstrap, "cg-java", "g-java"))


def test_librdkafka_consumers_share_partitions_incrementally(broker):
    bootstrap = broker.bootstrap
    run_scenario(bootstrap, "cg-rdkafka", "g-rd", lambda: RdkafkaMember(bootstrap, "cg-rdkafka", "g-rd"))
