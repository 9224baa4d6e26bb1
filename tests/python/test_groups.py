"""Consumer groups (the classic protocol) with librdkafka and kafka-python.

Goal: real clients, with their default group settings, can share a topic through headway's
group coordinator: partitions are split among members and each record goes to exactly one
member while the group is stable; a member that dies is replaced within the session
timeout without losing records; committed offsets survive a broker restart (SIGTERM and
SIGKILL) and are shared between client libraries; a static member (group.instance.id)
that restarts gets its partitions back without a rebalance; `headway group list` and
`headway group describe` show what the clients see.
Method: librdkafka members run as their own processes (group_member.py), so one can be
SIGKILLed; they report assignments, records (checked byte for byte) and commits as JSON
lines. Every wait has a deadline; nothing sleeps in the hope that the group settled: a
group counts as stable once every member reports a non-empty assignment and together they
hold each partition exactly once.
"""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest
from confluent_kafka import (OFFSET_INVALID, Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition)
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.structs import OffsetAndMetadata

from group_support import (Member, describe_members, group_describe, group_list, wait_all_seen,
                           wait_stable)
from support import (CONSUME_DEADLINE_S, Delivery, create_topic, produce_records, rdkafka_base)

# The first rebalance of an empty group otherwise waits 3 s for more members.
GROUP_ARGS = ("--group-initial-rebalance-delay-ms", "0")
STABLE_DEADLINE_S = 60.0
# Short, so that a dead member is noticed quickly; heartbeats well inside it.
SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 1_000
# After the session timeout expires, survivors learn of the rebalance through their next
# heartbeat and rejoin; the rest is slack for two busy cores.
TAKEOVER_SLACK_S = 14.0


@pytest.fixture
def spawn(tmp_path):
    """Factory: spawn(name, bootstrap, group, topic, **options) -> Member. Every member
    still running at the end of the test is SIGKILLed."""
    members: list[Member] = []

    def factory(name: str, bootstrap: str, group: str, topic: str, **options) -> Member:
        options.setdefault("session_timeout_ms", SESSION_TIMEOUT_MS)
        options.setdefault("heartbeat_interval_ms", HEARTBEAT_INTERVAL_MS)
        member = Member(name, bootstrap, group, topic, tmp_path, **options)
        members.append(member)
        return member

    yield factory
    for m in members:
        m.kill()


def produce(bootstrap: str, topic: str, seqs) -> Delivery:
    delivery = Delivery()
    producer = Producer({**rdkafka_base(bootstrap), "acks": "all", "linger.ms": 5})
    produce_records(producer, topic, seqs, delivery)
    assert not delivery.failed, f"deliveries failed: {list(delivery.failed.items())[:5]}"
    return delivery


def partition_ends(delivery: Delivery, partitions: int) -> dict[int, int]:
    """Log end offset of each partition, from the delivery reports of a fresh topic."""
    ends = {p: 0 for p in range(partitions)}
    for p, o in delivery.acked.values():
        ends[p] = max(ends[p], o + 1)
    return ends


def last_offsets(member: Member) -> dict[int, int]:
    """The highest offset the member reported per partition."""
    last: dict[int, int] = {}
    for p, o, _s in member.records:
        last[p] = max(o, last.get(p, -1))
    return last


def test_three_members_share_six_partitions(make_broker, spawn):
    broker = make_broker(*GROUP_ARGS)
    topic, group, count, partitions = "shared", "shared-group", 60_000, 6
    create_topic(broker.bootstrap, topic, partitions)
    members = [spawn(f"m{i}", broker.bootstrap, group, topic) for i in range(3)]
    wait_stable(members, partitions, STABLE_DEADLINE_S)
    stable = [m.snapshot() for m in members]
    assert sorted(len(a) for a, _, _ in stable) == [2, 2, 2], describe_members(members)

    delivery = produce(broker.bootstrap, topic, range(count))
    wait_all_seen(members, count, CONSUME_DEADLINE_S)
    # Still the same generation: no member saw an assignment change while consuming.
    for m, (assignment, rebalances, _n) in zip(members, stable):
        now, rebalances_now, _ = m.snapshot()
        assert (now, rebalances_now) == (assignment, rebalances), (
            f"member {m.name} saw a rebalance while the group should be stable\n"
            f"{describe_members(members)}")
    for m in members:
        m.stop()

    seen = Counter()
    for m, (assignment, _r, _n) in zip(members, stable):
        assert not m.problems, f"member {m.name}: {m.problems[:5]}"
        assert not m.client_errors, f"member {m.name}: {m.client_errors[:5]}"
        outside = {p for p, _o, _s in m.records} - assignment
        assert not outside, f"member {m.name} read partitions {outside} outside {assignment}"
        for p, o, seq in m.records:
            assert delivery.acked[seq] == (p, o), (
                f"seq {seq} read at {(p, o)}, produced at {delivery.acked[seq]}")
            seen[seq] += 1
    dups = {seq: n for seq, n in seen.items() if n > 1}
    assert not dups, f"{len(dups)} records seen more than once, e.g. {list(dups.items())[:10]}"
    assert sorted(seen) == list(range(count))


def test_killed_member_partitions_taken_over(make_broker, spawn):
    """At-least-once across a SIGKILLed member: every record is seen, the survivors start
    each of its partitions at its committed offset, with no gap after what it saw."""
    broker = make_broker(*GROUP_ARGS)
    topic, group, partitions, half = "takeover", "takeover-group", 6, 30_000
    create_topic(broker.bootstrap, topic, partitions)
    members = [spawn(f"m{i}", broker.bootstrap, group, topic) for i in range(3)]
    wait_stable(members, partitions, STABLE_DEADLINE_S)
    delivery = produce(broker.bootstrap, topic, range(half))
    wait_all_seen(members, half, CONSUME_DEADLINE_S)

    victim, survivors = members[2], members[:2]
    victim_partitions = set(victim.assignment)
    victim.kill()
    killed_at = time.monotonic()
    victim_seen = {p: max((o for q, o, _s in victim.records if q == p), default=-1)
                   for p in victim_partitions}
    victim_committed = dict(victim.committed)
    survivor_counts = [len(m.records) for m in survivors]
    delivery.acked.update(produce(broker.bootstrap, topic, range(half, 2 * half)).acked)

    wait_stable(survivors, partitions,
                SESSION_TIMEOUT_MS / 1000 + TAKEOVER_SLACK_S + 30.0)
    taken_over_at = max(t for m in survivors for t, ps in m.assignments
                        if t > killed_at and set(ps) & victim_partitions)
    takeover_s = taken_over_at - killed_at
    print(f"survivors held the killed member's partitions {takeover_s:.1f} s after SIGKILL "
          f"(session.timeout.ms={SESSION_TIMEOUT_MS})")
    assert takeover_s <= SESSION_TIMEOUT_MS / 1000 + TAKEOVER_SLACK_S, (
        f"takeover took {takeover_s:.1f} s\n{describe_members(members)}")

    wait_all_seen(members, 2 * half, CONSUME_DEADLINE_S)
    for m in survivors:
        m.stop()

    for m in members:
        assert not m.problems, f"member {m.name}: {m.problems[:5]}"
    # Where the survivors started each partition the victim held.
    for p in sorted(victim_partitions):
        first = min((o for m, n in zip(survivors, survivor_counts)
                     for q, o, _s in m.records[n:] if q == p), default=None)
        assert first is not None, f"no survivor read partition {p} after the takeover"
        assert victim_committed.get(p, 0) <= first <= victim_seen[p] + 1, (
            f"partition {p}: survivors started at offset {first}; the victim had committed "
            f"{victim_committed.get(p)} and seen up to {victim_seen[p]}")
    # No loss, by content and by offset.
    ends = partition_ends(delivery, partitions)
    for p in range(partitions):
        offsets = {o for m in members for q, o, _s in m.records if q == p}
        assert offsets == set(range(ends[p])), (
            f"partition {p}: {len(set(range(ends[p])) - offsets)} offsets below {ends[p]} "
            f"never seen")
    for m in members:
        for p, o, seq in m.records:
            assert delivery.acked[seq] == (p, o), f"seq {seq} read at {(p, o)}"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_restart_resumes_from_committed(make_broker, spawn, sig):
    broker = make_broker(*GROUP_ARGS)
    topic, group, partitions, count, first_read = "resume", "resume-group", 3, 3_000, 1_500
    create_topic(broker.bootstrap, topic, partitions)
    delivery = produce(broker.bootstrap, topic, range(count))
    ends = partition_ends(delivery, partitions)

    reader = spawn("before", broker.bootstrap, group, topic, max_records=first_read)
    reader.wait(lambda m: m.idle_committed is not None, CONSUME_DEADLINE_S,
                f"'idle' after {first_read} records")
    committed = {p: reader.committed.get(p) for p in range(partitions)}
    assert committed == {p: (None if o == OFFSET_INVALID else o)
                         for p, o in reader.idle_committed.items()}, describe_members([reader])
    assert len(reader.records) == first_read
    before = group_describe(broker.bootstrap, group)
    for p in range(partitions):
        row = before.partitions[(topic, p)]
        assert (row["committed"], row["log_end"]) == (committed[p], ends[p]), before.text

    # The broker goes down while the member is still in the group; then the member dies too.
    if sig == signal.SIGKILL:
        broker.kill()
    else:
        assert broker.stop(sig) == 0, broker.stderr_tail()
    reader.kill()
    broker.start()

    after = group_describe(broker.bootstrap, group)
    for p in range(partitions):
        row = after.partitions.get((topic, p))
        if committed[p] is None:  # nothing committed and no owner: describe has no row
            assert row is None or row["committed"] is None, after.text
            continue
        assert row is not None and (row["committed"], row["log_end"], row["lag"]) == (
            committed[p], ends[p], ends[p] - committed[p]), (
            f"after restart, partition {p}: {row}; before: committed {committed[p]}, "
            f"log end {ends[p]}\n{after.text}")

    probe = Consumer({**rdkafka_base(broker.bootstrap), "group.id": group})
    try:
        got = probe.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        probe.close()
    assert {tp.partition: tp.offset for tp in got} == {
        p: (OFFSET_INVALID if o is None else o) for p, o in committed.items()}

    resumed = spawn("after", broker.bootstrap, group, topic)
    start = {p: committed[p] or 0 for p in range(partitions)}
    expected = sorted(seq for seq, (p, o) in delivery.acked.items() if o >= start[p])
    resumed.wait(lambda m: len(m.records) >= len(expected), CONSUME_DEADLINE_S,
                 f"{len(expected)} records after the restart")
    resumed.stop()
    early = [(p, o) for p, o, _s in resumed.records if o < start[p]]
    assert not early, (f"{len(early)} records before the committed offsets re-delivered, "
                       f"e.g. {early[:10]}; committed {committed}")
    assert sorted(resumed.seqs()) == expected
    assert not resumed.problems, resumed.problems[:5]


def test_kafka_python_commits_visible_to_librdkafka(make_broker, spawn):
    broker = make_broker(*GROUP_ARGS)
    topic, group, partitions, count = "kp-group", "kp-group", 3, 3_000
    create_topic(broker.bootstrap, topic, partitions)
    delivery = produce(broker.bootstrap, topic, range(count))
    ends = partition_ends(delivery, partitions)

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group,
                             client_id="kafka-python-member", enable_auto_commit=False,
                             auto_offset_reset="earliest")
    try:
        consumer.subscribe([topic])
        next_offsets: dict[int, int] = {}
        read = 0
        deadline = time.monotonic() + CONSUME_DEADLINE_S
        while read < count // 3:
            assert time.monotonic() < deadline, f"kafka-python read {read} records"
            for tp, msgs in consumer.poll(timeout_ms=500, max_records=200).items():
                for m in msgs:
                    assert delivery.acked[int(m.value[4:14])] == (m.partition, m.offset)
                    next_offsets[tp.partition] = m.offset + 1
                    read += 1
        consumer.commit({KpTopicPartition(topic, p): OffsetAndMetadata(o, "kp-meta", -1)
                         for p, o in next_offsets.items()})
        for p, o in next_offsets.items():
            assert consumer.committed(KpTopicPartition(topic, p)) == o
        described = group_describe(broker.bootstrap, group)
        assert [m["client_id"] for m in described.members] == ["kafka-python-member"]
        assert described.members[0]["assignment"] == {topic: list(range(partitions))}
        for p, o in next_offsets.items():
            assert described.partitions[(topic, p)]["committed"] == o, described.text
    finally:
        consumer.close()

    probe = Consumer({**rdkafka_base(broker.bootstrap), "group.id": group})
    try:
        got = probe.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        probe.close()
    for tp in got:
        want = next_offsets.get(tp.partition, OFFSET_INVALID)
        assert tp.offset == want, f"librdkafka sees partition {tp.partition} at {tp.offset}"
        if tp.partition in next_offsets:
            assert tp.metadata == "kp-meta", f"commit metadata {tp.metadata!r}"

    # librdkafka resumes where kafka-python left off, and its commits reach kafka-python.
    member = spawn("librdkafka", broker.bootstrap, group, topic)
    expected = sorted(seq for seq, (p, o) in delivery.acked.items()
                      if o >= next_offsets.get(p, 0))
    member.wait(lambda m: len(m.records) >= len(expected), CONSUME_DEADLINE_S,
                f"the {len(expected)} records kafka-python did not commit")
    member.wait(lambda m: all(m.committed.get(p) == ends[p] for p in range(partitions)
                              if ends[p] > next_offsets.get(p, 0)),
                CONSUME_DEADLINE_S, "commits up to the log end offsets")
    member.stop()
    assert sorted(member.seqs()) == expected
    reader = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group,
                           enable_auto_commit=False)
    try:
        for p in range(partitions):
            assert reader.committed(KpTopicPartition(topic, p)) == ends[p]
    finally:
        reader.close()


def test_static_member_restart_keeps_assignment(make_broker, spawn):
    """A static member (group.instance.id) killed and restarted within its session timeout
    takes its partitions back; the other member sees no rebalance at all."""
    session_timeout_ms = 30_000  # room for a process restart on a busy machine
    broker = make_broker(*GROUP_ARGS)
    topic, group, partitions = "static", "static-group", 4
    create_topic(broker.bootstrap, topic, partitions)
    # The dynamic member joins first and stays the group leader throughout.
    other = spawn("dynamic", broker.bootstrap, group, topic, session_timeout_ms=session_timeout_ms)
    other.wait(lambda m: len(m.assignment) == partitions, STABLE_DEADLINE_S, "assignment")
    static = spawn("static", broker.bootstrap, group, topic, instance_id="static-a",
                   session_timeout_ms=session_timeout_ms)
    wait_stable([other, static], partitions, STABLE_DEADLINE_S)
    delivery = produce(broker.bootstrap, topic, range(1_000))
    wait_all_seen([other, static], 1_000, CONSUME_DEADLINE_S)
    # Its commits are confirmed before the kill, so it is known where its successor starts.
    static.wait(lambda m: all(m.committed.get(p) == o + 1 for p, o in last_offsets(m).items()),
                CONSUME_DEADLINE_S, "commits of everything read")
    before = group_describe(broker.bootstrap, group)
    other_rebalances = other.rebalance_events
    static_assignment = set(static.assignment)

    static.kill()
    killed_at = time.monotonic()
    again = spawn("static-again", broker.bootstrap, group, topic, instance_id="static-a",
                  session_timeout_ms=session_timeout_ms)
    again.wait(lambda m: m.assignment, session_timeout_ms / 1000, "assignment after restart")
    back_s = time.monotonic() - killed_at
    print(f"restarted static member assigned {back_s:.1f} s after SIGKILL")
    assert again.assignment == static_assignment, describe_members([other, static, again])
    static_committed = dict(static.committed)

    delivery.acked.update(produce(broker.bootstrap, topic, range(1_000, 2_000)).acked)
    wait_all_seen([other, static, again], 2_000, CONSUME_DEADLINE_S)
    assert other.rebalance_events == other_rebalances, (
        f"the other member saw {other.rebalance_events - other_rebalances} rebalance callbacks "
        f"while the static member restarted\n{describe_members([other, static, again])}")
    after = group_describe(broker.bootstrap, group)
    assert after.state == "Stable", after.text
    assert sorted((m["member"], m["instance"]) for m in after.members
                  if m["instance"] is None) == [(other.member_id, None)], after.text
    static_rows = [m for m in after.members if m["instance"] == "static-a"]
    assert len(static_rows) == 1 and len(after.members) == 2, (
        f"before:\n{before.text}\nafter:\n{after.text}")
    assert set(static_rows[0]["assignment"][topic]) == static_assignment, after.text
    # The restarted member resumed from what its previous incarnation committed.
    for p in static_assignment:
        first = min(o for q, o, _s in again.records if q == p)
        assert first == static_committed.get(p, 0), (
            f"partition {p}: restarted static member started at offset {first}, its previous "
            f"incarnation had committed {static_committed.get(p)}")
    for seq in range(1_000, 2_000):
        p, _o = delivery.acked[seq]
        owner = again if p in static_assignment else other
        assert seq in set(owner.seqs()), f"seq {seq} on partition {p} not read by {owner.name}"


def test_group_cli_list_and_describe(make_broker, spawn):
    broker = make_broker(*GROUP_ARGS)
    topic, group, partitions, count = "cli", "cli-group", 4, 2_000
    create_topic(broker.bootstrap, topic, partitions)
    # Each member reads part of what it was given, then stops reading: a lag to show.
    # Produced once the group is stable, so each partition is read by one member only.
    members = [spawn(f"m{i}", broker.bootstrap, group, topic, max_records=300)
               for i in range(2)]
    wait_stable(members, partitions, STABLE_DEADLINE_S)
    delivery = produce(broker.bootstrap, topic, range(count))
    ends = partition_ends(delivery, partitions)
    for m in members:
        m.wait(lambda m: m.idle_committed is not None, CONSUME_DEADLINE_S, "'idle'")
    wait_stable(members, partitions, STABLE_DEADLINE_S)  # still the final generation

    listed = group_list(broker.bootstrap)
    assert listed.get(group) == {"state": "Stable", "protocol_type": "consumer"}, listed

    d = group_describe(broker.bootstrap, group)
    assert (d.group, d.state, d.protocol_type, d.protocol) == (
        group, "Stable", "consumer", "range"), d.text
    by_id = {row["member"]: row for row in d.members}
    assert set(by_id) == {m.member_id for m in members}, d.text
    for m in members:
        row = by_id[m.member_id]
        assert row["assignment"] == {topic: sorted(m.assignment)}, d.text
        assert (row["instance"], row["client_id"]) == (None, "rdkafka"), d.text
        assert row["host"].endswith("127.0.0.1"), d.text
    owners = {p: m.member_id for m in members for p in m.assignment}
    committed = {p: o for m in members for p, o in m.committed.items()}
    assert sum(committed.values()) == 600, describe_members(members)
    for p in range(partitions):
        row = d.partitions[(topic, p)]
        want_lag = ends[p] - committed[p] if p in committed else None
        assert row == {"committed": committed.get(p), "log_end": ends[p], "lag": want_lag,
                       "member": owners[p]}, f"partition {p}\n{d.text}"

    for m in members:
        m.stop()
    listed = group_list(broker.bootstrap)
    assert listed.get(group, {}).get("state") == "Empty", listed
    d = group_describe(broker.bootstrap, group)
    assert d.state == "Empty" and d.members == [], d.text
    for p in range(partitions):  # a partition nobody committed and nobody owns has no row
        assert d.partitions.get((topic, p), {}).get("committed") == committed.get(p), d.text


def test_commit_for_a_topic_that_does_not_exist_is_refused(broker):
    """Offsets of a topic that does not exist are not stored: UNKNOWN_TOPIC_OR_PART for its
    partitions (librdkafka's own test 0030 expects it), while the same request's offsets
    of an existing topic are committed."""
    create_topic(broker.bootstrap, "exists", 1)
    consumer = Consumer({**rdkafka_base(broker.bootstrap), "group.id": "committer",
                         "enable.auto.commit": False})
    try:
        # librdkafka raises the first partition error of a synchronous commit.
        with pytest.raises(KafkaException) as raised:
            consumer.commit(offsets=[TopicPartition("exists", 0, 5),
                                     TopicPartition("never-created", 0, 7)],
                            asynchronous=False)
        assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        committed = consumer.committed([TopicPartition("exists", 0)], timeout=30)
        assert committed[0].offset == 5
    finally:
        consumer.close()
