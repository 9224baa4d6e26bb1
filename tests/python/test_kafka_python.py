"""kafka-python against headway.

Goal: a pure-Python client, with its own protocol encoder and version negotiation, works
against headway with default settings (api_version auto-detected from ApiVersions, and
idempotence on, which is kafka-python 3's default).
Method: the same 100,000 keyed records with headers as the librdkafka test, over 4
partitions with acks='all'; every future must resolve; then a manually assigned consumer
(no group) reads all partitions from the beginning and every record is checked byte for
byte, in order, at the offset its send future reported.
"""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from support import (CONSUME_DEADLINE_S, FLUSH_TIMEOUT_S, Consumed, check_all_present,
                     check_records, make_record, seq_of, wait_for_topic)

RECORD_COUNT = 100_000
PARTITIONS = 4


def produce(bootstrap: str, topic: str, count: int, **config):
    """Sends test records 0..count-1; returns {seq: (partition, offset)} of acknowledged
    records and {seq: error} of failed ones, after waiting on every future."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **config)
    try:
        futures = []
        for seq in range(count):
            r = make_record(seq)
            futures.append((seq, producer.send(topic, key=r.key, value=r.value,
                                               headers=r.headers)))
        producer.flush(timeout=FLUSH_TIMEOUT_S)
        acked, failed = {}, {}
        for seq, future in futures:
            if not future.is_done:
                failed[seq] = "not done after flush"
            elif future.failed():
                failed[seq] = repr(future.exception)
            else:
                md = future.value
                acked[seq] = (md.partition, md.offset)
        return acked, failed
    finally:
        producer.close(timeout=30)


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int,
                deadline_s: float = CONSUME_DEADLINE_S) -> list[Consumed]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        records: list[Consumed] = []
        deadline = time.monotonic() + deadline_s
        while len(records) < expected:
            if time.monotonic() > deadline:
                raise AssertionError(f"kafka-python read {len(records)} of {expected} records "
                                     f"within {deadline_s:.0f} s")
            batches = consumer.poll(timeout_ms=500, max_records=5000)
            for tp in sorted(batches, key=lambda tp: tp.partition):
                for m in batches[tp]:
                    records.append(Consumed(m.partition, m.offset, m.key, m.value,
                                            list(m.headers or []),
                                            (m.timestamp_type, m.timestamp)))
        return records
    finally:
        consumer.close()


def test_admin_create_topic(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic("kafka-python-admin", num_partitions=3,
                                      replication_factor=1)], timeout_ms=30_000)
    finally:
        admin.close()
    wait_for_topic(broker.bootstrap, "kafka-python-admin", 3)


# kafka-python 3 turns idempotence on by default (it needs InitProducerId); "disabled"
# checks the plain produce path on its own, so each failure points at one feature.
@pytest.mark.parametrize("idempotence", ["default", "disabled"])
def test_produce_consume_100k_acks_all(broker, idempotence):
    config = {} if idempotence == "default" else {"enable_idempotence": False}
    topic = "kafka-python-100k"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)],
                            timeout_ms=30_000)
    finally:
        admin.close()
    wait_for_topic(broker.bootstrap, topic, PARTITIONS)

    acked, failed = produce(broker.bootstrap, topic, RECORD_COUNT, **config)
    assert not failed, f"{len(failed)} sends failed, e.g. {list(failed.items())[:5]}"
    assert len(acked) == RECORD_COUNT
    used = {p for p, _ in acked.values()}
    assert used == set(range(PARTITIONS)), f"partitioner used only partitions {sorted(used)}"

    records = consume_all(broker.bootstrap, topic, PARTITIONS, RECORD_COUNT)
    verdict = check_records(records, PARTITIONS)
    check_all_present(verdict, RECORD_COUNT)
    for r in records:
        seq = seq_of(r.value) if r.value and r.value.startswith(b"seq=") else None
        if seq is not None and acked.get(seq) != (r.partition, r.offset):
            verdict.problems.append(f"seq {seq} read at partition {r.partition} offset "
                                    f"{r.offset}, send future said {acked.get(seq)}")
    verdict.assert_ok(f"kafka-python reading back {RECORD_COUNT} records")


def test_gzip_round_trip(broker):
    """gzip is the codec kafka-python supports without optional native packages."""
    topic = "kafka-python-gzip"
    count = 5_000
    acked, failed = produce(broker.bootstrap, topic, count, compression_type="gzip",
                            linger_ms=20, enable_idempotence=False)
    assert not failed, f"{len(failed)} sends failed, e.g. {list(failed.items())[:5]}"
    partitions = len({p for p, _ in acked.values()})
    records = consume_all(broker.bootstrap, topic, partitions, count)
    verdict = check_records(records, partitions)
    check_all_present(verdict, count)
    verdict.assert_ok("kafka-python gzip round trip")
