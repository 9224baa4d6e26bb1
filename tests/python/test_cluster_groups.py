"""Consumer groups on three brokers: the group's coordinator killed, nothing lost; a
group's settings are every broker's.

Goal: in a cluster a group's coordinator is the leader of the group's partition of the
replicated `__consumer_offsets`. When that broker is SIGKILLed, another in-sync replica
leads the partition, rebuilds the group's state from it and serves the group: every
commit a client was told succeeded is there, the members carry on at the committed
positions, so no record is skipped and no record whose commit was acknowledged is
delivered again; when the broker comes back it rejoins and the group is still whole.
Method: three brokers (cluster_support), a topic at replication factor 3. The coordinator
is the one the client library is told (AdminClient.describe_consumer_groups). librdkafka:
one consumer reads half the records and commits them synchronously, the coordinator is
killed, a second consumer of the same group (not subscribed) asks for the committed
offsets until the new coordinator answers them, then the first consumer reads and
commits the rest. Java (tests/java/src/GroupMember.java, classic and consumer protocol):
two members consume while records are produced; each reports records only once their
commit succeeded; the coordinator is killed mid-way and restarted after the group moved.
Group settings: `headway group config --set` at one broker, then DescribeConfigs sent to
each broker on its own (a raw request), before and after a broker's SIGKILL and restart.
"""

from __future__ import annotations

import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from cluster_support import (CLUSTER_UP_S, all_agree, cluster_with_topic, group_configs,
                             led_by, start_cluster)
from group_support import HEADWAY_BIN, headway_cli
from java_support import JavaClient
from support import rdkafka_base, wait_until

TOPIC = "groups-rf3"
PARTITIONS = 3
RECORDS = 600
# Failover: the controller fences a killed broker within about 6 to 10 s, the new
# leader loads the group's partition within a second; the margin is for a loaded machine.
FAILOVER_S = 60.0
DEADLINE_S = 120.0
# A commit refused with these is tried again once the member rejoined (a classic group's
# members are not kept in the log, so the new coordinator does not know the member).
REJOIN = (KafkaError._NO_OFFSET, KafkaError._ASSIGNMENT_LOST, KafkaError.UNKNOWN_MEMBER_ID,
          KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS)


def produce(bootstrap: str, start: int, count: int) -> None:
    producer = Producer(rdkafka_base(bootstrap))
    for i in range(start, start + count):
        producer.produce(TOPIC, value=str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(60) == 0, "records not acknowledged"


def coordinator_of(bootstrap: str, group: str) -> int:
    """The node the client library is told coordinates `group`."""
    admin = AdminClient(rdkafka_base(bootstrap))

    def ask():
        try:
            described = admin.describe_consumer_groups([group], request_timeout=10)
            return described[group].result().coordinator.id
        except KafkaException:
            return None
    return wait_until(ask, f"the coordinator of {group}", DEADLINE_S)


def committed(bootstrap: str, group: str) -> dict[int, int] | None:
    """The group's committed offsets as a fresh client of the group reads them; `None`
    while the coordinator does not answer."""
    consumer = Consumer({**rdkafka_base(bootstrap), "group.id": group})
    try:
        asked = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        answer = consumer.committed(asked, timeout=10)
        if any(tp.error is not None for tp in answer):
            return None
        return {tp.partition: tp.offset for tp in answer}
    except KafkaException:
        return None
    finally:
        consumer.close()


def read(consumer: Consumer, count: int, seen: list[tuple[int, int, int]]) -> None:
    """Polls until `count` more records arrived, appending (partition, offset, value)."""
    deadline = time.monotonic() + DEADLINE_S
    wanted = len(seen) + count
    while len(seen) < wanted:
        assert time.monotonic() < deadline, f"{len(seen)} of {wanted} records read"
        for m in consumer.consume(num_messages=100, timeout=0.5):
            if m.error() is None:
                seen.append((m.partition(), m.offset(), int(m.value())))
            elif m.error().code() != KafkaError._PARTITION_EOF:
                raise AssertionError(f"consumer error: {m.error()}")


def positions(seen: list[tuple[int, int, int]]) -> dict[int, int]:
    """The next offset of each partition read from."""
    out: dict[int, int] = {}
    for partition, offset, _ in seen:
        out[partition] = max(out.get(partition, 0), offset + 1)
    return out


def commit_until_done(consumer: Consumer) -> dict[int, int]:
    """Commits the consumer's positions, retrying through a change of coordinator;
    returns what was acknowledged (the partitions with a position)."""
    deadline = time.monotonic() + FAILOVER_S
    while True:
        try:
            done = consumer.commit(asynchronous=False)
            return {tp.partition: tp.offset for tp in done if tp.offset >= 0}
        except KafkaException as e:
            if e.args[0].code() == KafkaError._NO_OFFSET:
                return {}
            assert time.monotonic() < deadline, f"commits refused for {FAILOVER_S} s: {e}"
            time.sleep(0.5)


def consume_to_the_end(consumer: Consumer, seen: list[tuple[int, int, int]],
                      acked: dict[int, int]) -> dict[int, int]:
    """Polls and commits until every record was read and a commit of all of them was
    acknowledged; a commit refused meanwhile (the member rejoining) is tried again
    after the next poll. Asserts that no record below an acknowledged commit is read
    again. Returns the last acknowledged commit."""
    deadline = time.monotonic() + DEADLINE_S
    every = {p: len(range(p, RECORDS, PARTITIONS)) for p in range(PARTITIONS)}
    while acked != every:
        assert time.monotonic() < deadline, f"committed {acked} of {every}"
        for m in consumer.consume(num_messages=100, timeout=0.5):
            if m.error() is not None:
                continue
            p, o = m.partition(), m.offset()
            assert o >= acked.get(p, 0), f"{p}/{o} read again after its commit was acknowledged"
            seen.append((p, o, int(m.value())))
        try:
            done = consumer.commit(asynchronous=False)
            acked.update({tp.partition: tp.offset for tp in done if tp.offset >= 0})
        except KafkaException as e:
            if e.args[0].code() not in REJOIN:
                assert e.args[0].retriable(), f"commit failed: {e}"
    return dict(acked)


def test_acknowledged_commits_survive_the_coordinators_sigkill(make_broker):
    brokers, bootstraps, _ = cluster_with_topic(make_broker, TOPIC, PARTITIONS)
    bootstrap = ",".join(bootstraps)
    group = "rf3-commits"
    produce(bootstrap, 0, RECORDS)
    consumer = Consumer({**rdkafka_base(bootstrap), "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    seen: list[tuple[int, int, int]] = []
    try:
        consumer.subscribe([TOPIC])
        read(consumer, RECORDS // 2, seen)
        acked = commit_until_done(consumer)
        assert acked == positions(seen), (acked, positions(seen))
        acked = dict(acked)

        victim = coordinator_of(bootstrap, group)
        brokers[victim - 1].kill()
        alive = {1, 2, 3} - {victim}
        survivors = ",".join(bootstraps[n - 1] for n in sorted(alive))
        after_failover = wait_until(lambda: committed(survivors, group),
                                    "the new coordinator answers the commits", FAILOVER_S)
        acked_or_none = {p: acked.get(p, -1001) for p in range(PARTITIONS)}
        assert after_failover == acked_or_none, (after_failover, acked)
        assert coordinator_of(survivors, group) in alive

        # The member rejoins at the new coordinator and reads on from the commits.
        final = consume_to_the_end(consumer, seen, acked)
        assert sorted(set(v for _, _, v in seen)) == list(range(RECORDS)), "a record skipped"

        brokers[victim - 1].start()
        bootstraps[victim - 1] = brokers[victim - 1].bootstrap  # a new port
        bootstrap = ",".join(bootstraps)
        wait_until(lambda: led_by(bootstraps, TOPIC, {1, 2, 3}, 3),
                   "the restarted broker back in every ISR", CLUSTER_UP_S * 2)
        assert wait_until(lambda: committed(bootstrap, group), "the commits after the restart",
                          FAILOVER_S) == final
    finally:
        consumer.close()


def records_reported(events: list[dict]) -> list[tuple[int, int]]:
    return [tuple(r) for e in events if e.get("event") == "records"
            and e.get("committed", True) for r in e["records"]]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_java_group_carries_on_when_its_coordinator_is_killed(make_broker, tmp_path, protocol):
    brokers, bootstraps, _ = cluster_with_topic(make_broker, TOPIC, PARTITIONS)
    bootstrap = ",".join(bootstraps)
    group = f"rf3-java-{protocol}"
    java = JavaClient("lib-4", "classes-4", "GroupMember", tmp_path)
    members = [java.start("GroupMember", "--bootstrap", bootstrap, "--topic", TOPIC,
                          "--group", group, "--commit-failures", "report",
                          "--set", f"group.protocol={protocol}",
                          "--set", "auto.offset.reset=earliest", stdin=True)
               for _ in range(2)]
    try:
        produce(bootstrap, 0, RECORDS // 2)
        wait_until(lambda: len({r for m in members for r in records_reported(m.events)})
                   >= RECORDS // 2, "the first half consumed and committed", DEADLINE_S)
        victim = coordinator_of(bootstrap, group)
        brokers[victim - 1].kill()
        alive = {1, 2, 3} - {victim}
        survivors = ",".join(bootstraps[n - 1] for n in sorted(alive))
        produce(survivors, RECORDS // 2, RECORDS // 2)
        wait_until(lambda: len({r for m in members for r in records_reported(m.events)})
                   >= RECORDS, "every record consumed and committed", DEADLINE_S)
        brokers[victim - 1].start()
        bootstraps[victim - 1] = brokers[victim - 1].bootstrap  # a new port
        bootstrap = ",".join(bootstraps)
        wait_until(lambda: led_by(bootstraps, TOPIC, {1, 2, 3}, 3),
                   "the restarted broker back in every ISR", CLUSTER_UP_S * 2)
        for m in members:
            m.close_stdin()
        for m in members:
            m.wait_event(lambda e: e.get("event") == "closed", DEADLINE_S, "close")
            assert m.finish(DEADLINE_S) == 0
        errors = [e for m in members for e in m.events if e.get("event") == "error"]
        assert not errors, errors
        reported = [r for m in members for r in records_reported(m.events)]
        twice = {r for r in reported if reported.count(r) > 1}
        assert not twice, f"records delivered again after their commit: {sorted(twice)[:10]}"
        assert len(set(reported)) == RECORDS
        assert committed(bootstrap, group) == {
            p: len([i for i in range(RECORDS) if i % PARTITIONS == p])
            for p in range(PARTITIONS)}
    finally:
        for m in members:
            m.kill()


def test_a_groups_settings_set_at_one_broker_are_every_brokers_and_survive_a_restart(
        make_broker):
    """In a cluster a group's settings are the controller's: set through one broker, every
    broker describes (and its coordinators use) the same values, a broker restarted after
    SIGKILL has them again, and a deletion reaches every broker too."""
    brokers = start_cluster(make_broker)
    bootstraps = [b.bootstrap for b in brokers]
    wait_until(lambda: all_agree(bootstraps, 3), "three brokers, one controller", CLUSTER_UP_S)
    group, reset = "rf3-settings", "share.auto.offset.reset"
    assert group_configs(bootstraps[0], group)[reset] == ("latest", 5)  # the broker's value

    headway_cli("group", "config", group, "-b", bootstraps[1],
                "--set", f"{reset}=earliest", "--set", "share.record.lock.duration.ms=15000")

    def everywhere(value, source):
        return all(group_configs(b, group)[reset] == (value, source) for b in bootstraps)
    wait_until(lambda: everywhere("earliest", 8), "the setting on every broker", FAILOVER_S)
    assert group_configs(bootstraps[2], group)["share.record.lock.duration.ms"] == ("15000", 8)

    refused = subprocess.run(
        [str(HEADWAY_BIN), "group", "config", group, "-b", bootstraps[0],
         "--set", f"{reset}=sideways"], capture_output=True, text=True, timeout=DEADLINE_S)
    assert refused.returncode != 0 and "sideways" in refused.stderr, refused
    assert everywhere("earliest", 8), "a refused value changed the settings"

    brokers[0].kill()
    brokers[0].start()
    bootstraps[0] = brokers[0].bootstrap  # a new port
    wait_until(lambda: all_agree(bootstraps, 3), "the restarted broker back", CLUSTER_UP_S * 2)
    wait_until(lambda: group_configs(bootstraps[0], group)[reset] == ("earliest", 8),
               "the setting on the restarted broker", FAILOVER_S)

    headway_cli("group", "config", group, "-b", bootstraps[0], "--delete", reset)
    wait_until(lambda: everywhere("latest", 5), "the deletion on every broker", FAILOVER_S)
    assert group_configs(bootstraps[1], group)["share.record.lock.duration.ms"] == ("15000", 8)
