"""Compacted topics as Kafka clients see them, through librdkafka.

Goal: the settings of compacted topics (`cleanup.policy` and the compaction settings)
are accepted, described and altered as Kafka does; a compacted topic refuses records
without a key with INVALID_RECORD while keyed records go through; a manual replica
assignment that places every partition on this broker is accepted (librdkafka's admin
tests create topics that way) and one naming another broker is refused; the log cleaner
compacts a topic as it is written (each key's latest record stays, at its offset) and
shows its work on /metrics; a tombstone stays `delete.retention.ms` after its first
cleaning whatever its timestamp, then goes; the committed-offsets log is listed as the internal topic
`__consumer_offsets`, readable and compacted, but neither writable nor creatable.
Method: one broker per test, confluent-kafka's AdminClient and Producer; every wait polls
for its condition with a deadline.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                   ConfigResource, NewTopic, ResourceType)

from support import (ADMIN_TIMEOUT_S, FLUSH_TIMEOUT_S, create_topic, error_code_of, rdkafka_base,
                     wait_for_topic)


def admin_for(broker) -> AdminClient:
    return AdminClient(rdkafka_base(broker.bootstrap))


def described(admin: AdminClient, topic: str) -> dict:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)


def test_compacted_topic_settings_are_kept_and_described(broker):
    create_topic(broker.bootstrap, "changelog", 2, **{
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "1000",
        "min.compaction.lag.ms": "0",
        "max.compaction.lag.ms": "60000",
    })
    admin = admin_for(broker)
    configs = described(admin, "changelog")
    assert configs["cleanup.policy"].value == "compact"
    assert float(configs["min.cleanable.dirty.ratio"].value) == 0.01
    assert configs["delete.retention.ms"].value == "1000"
    assert configs["max.compaction.lag.ms"].value == "60000"

    # Both policies at once, then back to delete, through IncrementalAlterConfigs.
    resource = ConfigResource(ResourceType.TOPIC, "changelog", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact,delete",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
    assert set(described(admin, "changelog")["cleanup.policy"].value.split(",")) == \
        {"compact", "delete"}

    # A policy Kafka does not have, and a ratio out of range, are refused.
    bad = admin.create_topics([
        NewTopic("bad-policy", num_partitions=1, replication_factor=1,
                 config={"cleanup.policy": "shrink"}),
        NewTopic("bad-ratio", num_partitions=1, replication_factor=1,
                 config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "2"}),
    ], operation_timeout=ADMIN_TIMEOUT_S)
    assert error_code_of(bad["bad-policy"]) == KafkaError.INVALID_CONFIG
    assert error_code_of(bad["bad-ratio"]) == KafkaError.INVALID_CONFIG


def deliver(producer: Producer, topic: str, messages: list[tuple[bytes | None, bytes]]) -> list:
    """Sends the messages to partition 0 and flushes; each message's error (None: acked)."""
    outcomes: list = [KafkaError._TIMED_OUT] * len(messages)

    def report(i):
        def callback(err, _msg):
            outcomes[i] = None if err is None else err.code()
        return callback

    for i, (key, value) in enumerate(messages):
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=report(i))
    assert producer.flush(FLUSH_TIMEOUT_S) == 0, "every delivery report arrives"
    return outcomes


def test_a_compacted_topic_refuses_records_without_a_key(broker):
    create_topic(broker.bootstrap, "keyed-only", 1, **{"cleanup.policy": "compact"})
    create_topic(broker.bootstrap, "plain", 1)
    # One message per request (no linger), so that each outcome is the message's own.
    producer = Producer({**rdkafka_base(broker.bootstrap), "linger.ms": 0,
                         "enable.idempotence": False, "retries": 0})
    keyless = deliver(producer, "keyed-only", [(None, b"lost")] * 3)
    assert keyless == [KafkaError.INVALID_RECORD] * 3
    keyed = deliver(producer, "keyed-only", [(b"k%d" % i, b"kept") for i in range(3)])
    assert keyed == [None] * 3
    # A topic with the delete policy takes keyless records.
    assert deliver(producer, "plain", [(None, b"fine")] * 2) == [None] * 2

    # After the topic turns to delete, keyless records go through; back to compact,
    # they are refused again.
    admin = admin_for(broker)
    for policy, expected in (("delete", None), ("compact", KafkaError.INVALID_RECORD)):
        resource = ConfigResource(ResourceType.TOPIC, "keyed-only", incremental_configs=[
            ConfigEntry("cleanup.policy", policy, incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
        assert deliver(producer, "keyed-only", [(None, b"x")]) == [expected], policy


def test_manual_replica_assignment_on_this_broker(broker):
    admin = admin_for(broker)
    node = next(iter(admin.list_topics(timeout=10).brokers))
    # librdkafka's form: the partition count, and a replication factor of -1.
    futures = admin.create_topics([
        NewTopic(name, num_partitions=len(assignment), replication_factor=-1,
                 replica_assignment=assignment)
        for name, assignment in (("assigned", [[node], [node], [node]]),
                                 ("elsewhere", [[node + 1]]),
                                 ("two-replicas", [[node, node + 1]]))
    ], operation_timeout=ADMIN_TIMEOUT_S)
    futures["assigned"].result(timeout=ADMIN_TIMEOUT_S)
    wait_for_topic(broker.bootstrap, "assigned", 3)
    assert error_code_of(futures["elsewhere"]) == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert error_code_of(futures["two-replicas"]) == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert "elsewhere" not in admin.list_topics(timeout=10).topics


CLEANER_DEADLINE_S = 120.0


def read_from_start(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """Every record of partition 0 from its start to its high watermark."""
    consumer = Consumer({**rdkafka_base(bootstrap), "group.id": "compacted-reader",
                         "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, low)])
        records = []
        deadline = time.monotonic() + 60
        while (not records or records[-1][0] < high - 1) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                records.append((msg.offset(), msg.key(), msg.value()))
        assert records and records[-1][0] == high - 1, f"read up to {high} within 60 s"
        return records
    finally:
        consumer.close()


def cleaner_passes(metrics_address: str, topic: str) -> int:
    with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10) as r:
        text = r.read().decode()
    found = re.search(r'^headway_cleaner_passes\{topic="%s",partition="0"\} (\d+)' % topic,
                      text, re.M)
    return int(found.group(1)) if found else 0


def test_the_cleaner_keeps_each_keys_latest_record(make_broker):
    broker = make_broker("--log-cleaner-backoff-ms", "100", "--metrics-listen", "127.0.0.1:0")
    create_topic(broker.bootstrap, "table", 1, **{
        "cleanup.policy": "compact", "segment.bytes": "16384",
        "min.cleanable.dirty.ratio": "0.01"})
    # Batches of at most 4 KiB, so that segments of 16 KiB roll often and the active
    # segment, which is never cleaned, holds few records.
    producer = Producer({**rdkafka_base(broker.bootstrap), "linger.ms": 1, "batch.size": 4096})
    latest: dict[bytes, bytes | None] = {}
    written: dict[int, tuple[bytes, bytes | None]] = {}

    def remember(err, msg):
        assert err is None, err
        written[msg.offset()] = (msg.key(), msg.value())

    for i in range(5000):
        key, value = b"key-%d" % (i % 50), b"value-%d-" % i + b"x" * 100
        producer.produce("table", key=key, value=value, partition=0, on_delivery=remember)
        latest[key] = value
        producer.poll(0)
    for k in range(5):  # tombstones: their keys end deleted
        key = b"key-%d" % k
        producer.produce("table", key=key, value=None, partition=0, on_delivery=remember)
        latest[key] = None
    assert producer.flush(FLUSH_TIMEOUT_S) == 0
    assert len(written) == 5005

    deadline = time.monotonic() + CLEANER_DEADLINE_S
    while True:
        records = read_from_start(broker.bootstrap, "table")
        if len(records) < 1000 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(records) < 1000, f"{len(records)} records left of 5005 after cleaning"
    assert all(a[0] < b[0] for a, b in zip(records, records[1:])), "offsets increase"
    for offset, key, value in records:
        assert written[offset] == (key, value), f"offset {offset} holds what was written there"
    last_read = {key: value for _offset, key, value in records}
    for key, value in latest.items():
        # A deleted key may be gone entirely once its tombstone is cleaned away too.
        assert last_read.get(key) == value, (key, last_read.get(key), value)
    assert cleaner_passes(broker.metrics_address(), "table") >= 1
    # The CLI shows the same figures.
    shown = subprocess.run([str(broker.binary), "cleaner", "--metrics", broker.metrics_address(),
                            "--topic", "table", "--format", "json"],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)
    assert [(r["topic"], r["partition"]) for r in rows] == [("table", 0)]
    assert rows[0]["passes"] >= 1 and rows[0]["records_removed"] > 0, rows
    assert rows[0]["last_pass"] is not None, rows


def test_tombstones_stay_for_delete_retention_after_their_first_cleaning(make_broker):
    """Tombstones written with timestamps two days old: on a topic that keeps them an
    hour, cleaning removes the values they delete but keeps them, whatever their age;
    on a topic that keeps them half a second, a later pass removes them too."""
    broker = make_broker("--log-cleaner-backoff-ms", "100", "--metrics-listen", "127.0.0.1:0")
    two_days_ago_ms = int(time.time() * 1000) - 2 * 86_400_000
    deleted = [b"key-%d" % k for k in range(5)]
    for topic, retention_ms in (("kept", "3600000"), ("dropped", "500")):
        create_topic(broker.bootstrap, topic, 1, **{
            "cleanup.policy": "compact", "segment.bytes": "16384",
            "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": retention_ms})
        producer = Producer({**rdkafka_base(broker.bootstrap), "linger.ms": 1,
                             "batch.size": 4096})
        for key in deleted:
            producer.produce(topic, key=key, value=b"old", partition=0,
                             timestamp=two_days_ago_ms)
        for key in deleted:
            producer.produce(topic, key=key, value=None, partition=0,
                             timestamp=two_days_ago_ms)
        for i in range(600):  # other keys, so that the tombstones' segment is sealed
            producer.produce(topic, key=b"other-%d" % i, value=b"x" * 100, partition=0)
            producer.poll(0)
        assert producer.flush(FLUSH_TIMEOUT_S) == 0

    def of_deleted(topic: str) -> list[tuple[bytes, bytes | None]]:
        return [(key, value) for _offset, key, value in read_from_start(broker.bootstrap, topic)
                if key in deleted]

    deadline = time.monotonic() + CLEANER_DEADLINE_S
    while time.monotonic() < deadline:
        if cleaner_passes(broker.metrics_address(), "kept") >= 1 and \
                all(value is None for _key, value in of_deleted("kept")):
            break
        time.sleep(0.5)
    assert of_deleted("kept") == [(key, None) for key in deleted], \
        "the values are cleaned away, the tombstones stay"
    while of_deleted("dropped") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert of_deleted("dropped") == [], "past its horizon a tombstone goes"
    assert cleaner_passes(broker.metrics_address(), "dropped") >= 2


def test_consumer_offsets_is_an_internal_topic(make_broker):
    broker = make_broker("--group-initial-rebalance-delay-ms", "0")
    create_topic(broker.bootstrap, "plain", 1)
    consumer = Consumer({**rdkafka_base(broker.bootstrap), "group.id": "committer"})
    try:
        consumer.commit(offsets=[TopicPartition("plain", 0, 7)], asynchronous=False)
    finally:
        consumer.close()
    admin = admin_for(broker)
    listed = admin.list_topics(timeout=10).topics
    assert "__consumer_offsets" in listed, sorted(listed)
    assert len(listed["__consumer_offsets"].partitions) == 1
    records = read_from_start(broker.bootstrap, "__consumer_offsets")
    assert any(b"committer" in key for _offset, key, _value in records), records

    producer = Producer({**rdkafka_base(broker.bootstrap), "retries": 0})
    assert deliver(producer, "__consumer_offsets", [(b"k", b"v")]) == \
        [KafkaError.TOPIC_EXCEPTION]
    created = admin.create_topics([NewTopic("__consumer_offsets", 1, 1)],
                                  operation_timeout=ADMIN_TIMEOUT_S)
    assert error_code_of(created["__consumer_offsets"]) == KafkaError.TOPIC_ALREADY_EXISTS
