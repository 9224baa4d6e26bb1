"""librdkafka (confluent-kafka) against headway.

Goal: the most widely deployed Kafka client library produces and consumes through headway
with its default settings and loses, reorders or alters nothing.
Method: create a 4-partition topic with the admin API, produce 100,000 keyed records with
headers (acks=all, default partitioner), require a successful delivery report for each,
then read every partition from the beginning and compare each record byte for byte with
what its sequence number says it must be, and with the offset its delivery report gave.
Each compression codec gets its own smaller round trip.
"""

from __future__ import annotations

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Producer

from support import (FLUSH_TIMEOUT_S, Delivery, check_all_present, check_records, consume_all,
                     create_topic, make_record, produce_records, rdkafka_base, seq_of)

RECORD_COUNT = 100_000
PARTITIONS = 4


def check_delivery_offsets(records, delivery: Delivery) -> list[str]:
    """Every record sits at the partition and offset its delivery report announced."""
    problems = []
    for r in records:
        try:
            seq = seq_of(r.value)
        except ValueError:
            continue  # check_records reports malformed records
        want = delivery.acked.get(seq)
        if want is not None and want != (r.partition, r.offset):
            problems.append(f"seq {seq} read at partition {r.partition} offset {r.offset}, "
                            f"delivery report said {want}")
    return problems


def test_produce_consume_100k_acks_all(broker):
    topic = "librdkafka-100k"
    create_topic(broker.bootstrap, topic, PARTITIONS)

    producer = Producer({**rdkafka_base(broker.bootstrap), "acks": "all"})
    delivery = Delivery()
    produce_records(producer, topic, range(RECORD_COUNT), delivery)
    assert not delivery.failed, f"{len(delivery.failed)} deliveries failed, e.g. " \
                                f"{list(delivery.failed.items())[:5]}"
    assert len(delivery.acked) == RECORD_COUNT
    used = {p for p, _ in delivery.acked.values()}
    assert used == set(range(PARTITIONS)), f"partitioner used only partitions {sorted(used)}"

    records = consume_all(broker.bootstrap, topic, PARTITIONS, expected=RECORD_COUNT)
    verdict = check_records(records, PARTITIONS)
    check_all_present(verdict, RECORD_COUNT)
    verdict.problems.extend(check_delivery_offsets(records, delivery))
    verdict.assert_ok(f"reading back {RECORD_COUNT} records from {topic}")


def test_timestamps_are_create_time(broker):
    """Records keep the timestamp the producer gave them (CreateTime, the topic default)."""
    topic = "librdkafka-timestamps"
    count = 100
    create_topic(broker.bootstrap, topic, 1)
    producer = Producer({**rdkafka_base(broker.bootstrap), "acks": "all"})
    delivery = Delivery()
    base_ms = 1_700_000_000_000
    for seq in range(count):
        r = make_record(seq)
        producer.produce(topic, key=r.key, value=r.value, headers=r.headers, partition=0,
                         timestamp=base_ms + seq, on_delivery=delivery.callback)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0
    assert not delivery.failed, delivery.failed

    records = consume_all(broker.bootstrap, topic, 1, expected=count)
    check_records(records, 1).assert_ok("timestamp records")
    wrong = [(r.offset, r.timestamp) for r in records
             if r.timestamp != (TIMESTAMP_CREATE_TIME, base_ms + seq_of(r.value))]
    assert not wrong, f"(offset, (type, timestamp)) not as produced: {wrong[:10]}"


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression_round_trip(broker, codec):
    """A batch compressed by librdkafka comes back intact, for every codec Kafka defines."""
    topic = f"librdkafka-compression-{codec}"
    count = 20_000
    create_topic(broker.bootstrap, topic, 2)
    producer = Producer({
        **rdkafka_base(broker.bootstrap),
        "acks": "all",
        "compression.type": codec,
        # Large batches, so that most records travel inside compressed multi-record batches.
        "linger.ms": 20,
        "batch.num.messages": 5000,
    })
    delivery = Delivery()
    produce_records(producer, topic, range(count), delivery)
    assert not delivery.failed, f"{codec}: {len(delivery.failed)} deliveries failed, e.g. " \
                                f"{list(delivery.failed.items())[:3]}"

    records = consume_all(broker.bootstrap, topic, 2, expected=count)
    verdict = check_records(records, 2)
    check_all_present(verdict, count)
    verdict.problems.extend(check_delivery_offsets(records, delivery))
    verdict.assert_ok(f"{codec} round trip")
