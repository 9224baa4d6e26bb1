"""Online conversion of a running consumer group between the classic protocol and the
consumer protocol (KIP-848 upgrade and downgrade), as Java's `KafkaConsumer` 4.x and
librdkafka do it.

Goal: a rolling upgrade, restarting a 3-member classic group's consumers one at a time
with `group.protocol=consumer` while a producer writes to a 6-partition topic, loses no
record and leaves a consumer group; the rolling downgrade back to `classic` likewise
leaves a classic group; with `group_consumer_migration_policy = disabled` a consumer
member is refused by a classic group with members, as Kafka refuses it.
Method: one broker; a background producer writes numbered records throughout; each
member (tests/java/src/GroupMember.java, or a librdkafka consumer on a thread) commits
after every poll and reports what it was given, gave up and consumed. After each
restart the test waits until the three live members hold two partitions each, none
twice; at the end every acknowledged record must have been consumed (duplicates are
allowed, at-least-once, and counted).
"""

from __future__ import annotations

import time
from collections import Counter

from confluent_kafka import ConsumerGroupType
from confluent_kafka.admin import AdminClient

from java_support import JavaClient
from support import BackgroundProducer, create_topic, rdkafka_base
from test_consumer_groups import (BALANCE_DEADLINE_S, DRAIN_DEADLINE_S, JavaMember,
                                  RdkafkaMember, consumed, wait_balanced)

PARTITIONS = 6
RATE_PER_S = 200.0


def group_type(bootstrap: str, group: str):
    admin = AdminClient(rdkafka_base(bootstrap))
    listed = admin.list_consumer_groups(request_timeout=30).result(timeout=30)
    return {g.group_id: g.type for g in listed.valid}.get(group)


def wait_group_type(bootstrap: str, group: str, expected, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while (found := group_type(bootstrap, group)) != expected:
        assert time.monotonic() < deadline, f"group type {found}, not {expected}"
        time.sleep(0.2)


def roll(members: list, make, protocol: str) -> None:
    """Restarts the members one at a time with `protocol`, each time until balanced."""
    for i in range(len(members)):
        members[i].leave()
        members[i].wait_closed(BALANCE_DEADLINE_S)
        members[i] = make(protocol)
        wait_balanced(members)


def check_every_record_consumed(producer: BackgroundProducer, everyone: list) -> int:
    """Waits until every acknowledged record was consumed; returns the duplicates."""
    acked = {(p, o) for p, o in producer.delivery.acked.values()}
    assert len(acked) == producer.sent
    deadline = time.monotonic() + DRAIN_DEADLINE_S
    while not acked <= set(sum((consumed(m) for m in everyone), [])):
        for m in everyone:
            m.check()
        assert time.monotonic() < deadline, "records left unconsumed"
        time.sleep(0.1)
    every = Counter(sum((consumed(m) for m in everyone), []))
    return sum(n - 1 for n in every.values() if n > 1)


def test_java_rolling_upgrade_to_the_consumer_protocol_and_back(broker, tmp_path):
    java = JavaClient("lib-4", "classes-4", "GroupMember", tmp_path)
    bootstrap = broker.bootstrap
    rolling_upgrade_and_back(
        bootstrap, "migrate", "g-migrate",
        lambda protocol: JavaMember(java, bootstrap, "migrate", "g-migrate", protocol))


def test_librdkafka_rolling_upgrade_to_the_consumer_protocol_and_back(broker):
    bootstrap = broker.bootstrap
    rolling_upgrade_and_back(
        bootstrap, "migrate-rd", "g-migrate-rd",
        lambda protocol: RdkafkaMember(bootstrap, "migrate-rd", "g-migrate-rd", protocol))


def rolling_upgrade_and_back(bootstrap: str, topic: str, group: str, new_member) -> None:
    create_topic(bootstrap, topic, PARTITIONS)
    everyone: list = []

    def make(protocol: str):
        m = new_member(protocol)
        everyone.append(m)
        return m

    producer = BackgroundProducer(bootstrap, topic, rate_per_s=RATE_PER_S).start()
    try:
        members = [make("classic") for _ in range(3)]
        wait_balanced(members)
        assert group_type(bootstrap, group) == ConsumerGroupType.CLASSIC
        roll(members, make, "consumer")
        wait_group_type(bootstrap, group, ConsumerGroupType.CONSUMER, BALANCE_DEADLINE_S)
        admin = AdminClient(rdkafka_base(bootstrap))
        described = admin.describe_consumer_groups([group], request_timeout=30)[group]
        described = described.result(timeout=30)
        assert len(described.members) == 3
        roll(members, make, "classic")
        wait_group_type(bootstrap, group, ConsumerGroupType.CLASSIC, BALANCE_DEADLINE_S)
        producer.stop(purge=False)
        duplicates = check_every_record_consumed(producer, everyone)
        print(f"records {producer.sent}, consumed twice or more: {duplicates}")
        for m in members:
            m.leave()
        for m in members:
            m.wait_closed(BALANCE_DEADLINE_S)
    finally:
        if producer.error is None and not producer._stop.is_set():
            producer.stop(purge=True)
        for m in everyone:
            m.leave()
            if isinstance(m, JavaMember):
                m.kill()


def test_without_migration_a_consumer_member_is_refused_by_a_classic_group(make_broker,
                                                                          tmp_path):
    broker = make_broker("--group-consumer-migration-policy", "disabled")
    java = JavaClient("lib-4", "classes-4", "GroupMember", tmp_path)
    bootstrap, topic, group = broker.bootstrap, "no-migrate", "g-no-migrate"
    create_topic(bootstrap, topic, PARTITIONS)
    classic = JavaMember(java, bootstrap, topic, group, "classic")
    newcomer = None
    try:
        classic._proc.wait_event(lambda e: e.get("event") == "assigned", BALANCE_DEADLINE_S,
                                 "assignment")
        newcomer = JavaMember(java, bootstrap, topic, group, "consumer")
        refused = newcomer._proc.wait_event(lambda e: e.get("event") == "error",
                                            BALANCE_DEADLINE_S, "refusal")
        assert "GroupIdNotFound" in refused["error"], refused
        assert group_type(bootstrap, group) == ConsumerGroupType.CLASSIC
    finally:
        for m in (classic, newcomer):
            if m is not None:
                m.leave()
                m.kill()
