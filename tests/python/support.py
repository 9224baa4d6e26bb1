"""Shared pieces of the compatibility suite: the test record format, bounded produce and
consume loops for confluent-kafka (librdkafka), and the checks every test applies to what
it reads back.

Test records are derived from a sequence number alone, so any record read back can be
checked byte for byte without keeping what was sent:

    key     b"key-%08d" % seq
    value   b"seq=%010d;" % seq, then 80 bytes that depend on seq (across records every
            byte value occurs, including 0x00 and invalid UTF-8)
    headers ("seq", decimal seq), ("bin", 4 binary bytes), ("dup", b"a"), ("dup", b"b"),
            ("empty", b"") -- a repeated key and an empty value, both legal in Kafka

about 100 bytes of key and value per record.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException,
                             Producer, TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic

VALUE_FILLER_BYTES = 80

# Deadlines, generous because two cores are shared with the broker and with CI's builds.
ADMIN_TIMEOUT_S = 30.0
FLUSH_TIMEOUT_S = 180.0
CONSUME_DEADLINE_S = 180.0


@dataclass(frozen=True)
class Record:
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]


def make_record(seq: int) -> Record:
    filler = bytes((seq * 31 + j * 7) % 256 for j in range(VALUE_FILLER_BYTES))
    return Record(
        key=b"key-%08d" % seq,
        value=b"seq=%010d;" % seq + filler,
        headers=[("seq", b"%d" % seq),
                 ("bin", bytes([seq % 256, 0x00, 0xFF, (seq >> 8) % 256])),
                 ("dup", b"a"), ("dup", b"b"),
                 ("empty", b"")],
    )


def seq_of(value: bytes | None) -> int:
    """The sequence number embedded in a test record's value; ValueError if malformed."""
    if value is None:
        raise ValueError("not a test record value: null")
    if len(value) < 15 or not value.startswith(b"seq=") or value[14:15] != b";":
        raise ValueError(f"not a test record value: {value[:40]!r}")
    return int(value[4:14])


@dataclass
class Consumed:
    """One record read back, in the client-neutral shape the checks use."""
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: tuple[int, int] | None = None  # (type, milliseconds) as the client reports it


@dataclass
class Verdict:
    """Result of check_records: the sequence numbers seen and every problem found."""
    seqs: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def assert_ok(self, what: str) -> None:
        if self.problems:
            shown = "\n  ".join(self.problems[:30])
            more = len(self.problems) - 30
            raise AssertionError(f"{what}: {len(self.problems)} problems\n  {shown}"
                                 + (f"\n  ... and {more} more" if more > 0 else ""))


def check_records(records: list[Consumed], partitions: int) -> Verdict:
    """Checks what a consumer read from one topic, in the order it was delivered:
    every partition's offsets run 0, 1, 2, ... with no gap and no repeat; every record is a
    well-formed test record, byte for byte; sequence numbers rise within each partition
    (the producer sent them in that order)."""
    verdict = Verdict()
    next_offset = [0] * partitions
    last_seq = [-1] * partitions
    for r in records:
        where = f"partition {r.partition} offset {r.offset}"
        if not 0 <= r.partition < partitions:
            verdict.problems.append(f"{where}: partition out of range")
            continue
        if r.offset != next_offset[r.partition]:
            verdict.problems.append(
                f"{where}: expected offset {next_offset[r.partition]} (offsets must be dense "
                f"from 0 and delivered in order)")
        next_offset[r.partition] = r.offset + 1
        try:
            seq = seq_of(r.value)
        except ValueError as e:
            verdict.problems.append(f"{where}: {e}")
            continue
        want = make_record(seq)
        if r.key != want.key:
            verdict.problems.append(f"{where}: seq {seq}: key {r.key!r} != {want.key!r}")
        if r.value != want.value:
            verdict.problems.append(f"{where}: seq {seq}: value differs: {r.value!r}")
        if r.headers != want.headers:
            verdict.problems.append(
                f"{where}: seq {seq}: headers {r.headers!r} != {want.headers!r}")
        if seq <= last_seq[r.partition]:
            verdict.problems.append(
                f"{where}: seq {seq} after seq {last_seq[r.partition]}: out of order")
        last_seq[r.partition] = seq
        verdict.seqs.append(seq)
    return verdict


def check_all_present(verdict: Verdict, count: int) -> None:
    """Every seq in range(count) was read exactly once."""
    seen = sorted(verdict.seqs)
    if seen != list(range(count)):
        missing = sorted(set(range(count)) - set(seen))
        dups = len(seen) - len(set(seen))
        verdict.problems.append(
            f"read {len(seen)} records for {count} sent: {len(missing)} missing "
            f"(first {missing[:10]}), {dups} duplicated")


# -- confluent-kafka helpers ---------------------------------------------------------------

RDKAFKA_LOGGER = logging.getLogger("librdkafka")


def rdkafka_base(bootstrap: str) -> dict:
    """Settings every librdkafka client here starts from. Its log lines go to Python
    logging (pytest shows them with a failure) instead of interleaving with pytest's
    output, e.g. when a client outlives the broker it talked to."""
    return {"bootstrap.servers": bootstrap, "logger": RDKAFKA_LOGGER}



class ErrorLog:
    """error_cb for librdkafka clients: keeps every client-level error for the report."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def __call__(self, err: KafkaError) -> None:
        self.errors.append(f"{err.name()}: {err.str()}")

    def summary(self) -> str:
        return "; ".join(self.errors[:20]) or "none"


def create_topic(bootstrap: str, topic: str, partitions: int, **config: str) -> None:
    admin = AdminClient(rdkafka_base(bootstrap))
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config)],
        operation_timeout=ADMIN_TIMEOUT_S, request_timeout=ADMIN_TIMEOUT_S)
    futures[topic].result(timeout=ADMIN_TIMEOUT_S)
    wait_for_topic(bootstrap, topic, partitions)


def wait_for_topic(bootstrap: str, topic: str, partitions: int,
                   deadline_s: float = ADMIN_TIMEOUT_S) -> None:
    """Polls metadata until the topic shows `partitions` partitions, each with a leader."""
    admin = AdminClient(rdkafka_base(bootstrap))
    deadline = time.monotonic() + deadline_s
    last = "no answer"
    while time.monotonic() < deadline:
        # All topics, not list_topics(topic=...): a metadata request naming a topic may
        # auto-create it, which would hide a topic the broker lost.
        md = admin.list_topics(timeout=10)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions.values()):
            return
        last = (f"error={t.error} partitions={len(t.partitions)}" if t is not None
                else "topic absent")
        time.sleep(0.1)
    raise AssertionError(f"topic {topic} not ready with {partitions} partitions "
                         f"within {deadline_s} s: {last}")


@dataclass
class Delivery:
    """What the producer's delivery reports said, keyed by sequence number."""
    acked: dict[int, tuple[int, int]] = field(default_factory=dict)  # seq -> (partition, offset)
    failed: dict[int, str] = field(default_factory=dict)  # seq -> error

    def callback(self, err, msg) -> None:
        seq = seq_of(msg.value())
        if err is not None:
            self.failed[seq] = f"{err.name()}: {err.str()}"
        else:
            self.acked[seq] = (msg.partition(), msg.offset())


def produce_records(producer: Producer, topic: str, seqs, delivery: Delivery,
                    partition: int | None = None, deadline_s: float = FLUSH_TIMEOUT_S) -> None:
    """Produces the test records for `seqs` and flushes; raises if not every delivery
    report arrived before the deadline. Backs off (poll) while the local queue is full."""
    deadline = time.monotonic() + deadline_s
    extra = {} if partition is None else {"partition": partition}
    for seq in seqs:
        r = make_record(seq)
        while True:
            try:
                producer.produce(topic, key=r.key, value=r.value, headers=r.headers,
                                 on_delivery=delivery.callback, **extra)
                break
            except BufferError:
                if time.monotonic() > deadline:
                    raise AssertionError("producer queue stayed full until the deadline")
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(max(1.0, deadline - time.monotonic()))
    if remaining:
        raise AssertionError(f"{remaining} messages still undelivered after flush "
                             f"({len(delivery.acked)} acked, {len(delivery.failed)} failed)")


def new_consumer(bootstrap: str, errors: ErrorLog | None = None, **extra) -> Consumer:
    config = {
        **rdkafka_base(bootstrap),
        # librdkafka wants a group.id even for a manually assigned consumer; nothing is
        # committed (headway has no group coordinator yet).
        "group.id": "headway-compat",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        # Verify each batch's CRC: a corrupt batch must show up as an error, not as data.
        "check.crcs": True,
    }
    if errors is not None:
        config["error_cb"] = errors
    config.update(extra)
    return Consumer(config)


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int | None = None,
                deadline_s: float = CONSUME_DEADLINE_S) -> list[Consumed]:
    """Reads `topic` from the beginning of every partition until each partition reported
    end-of-partition at or past its high watermark (and, if given, `expected` records were
    read). Any consume error other than end-of-partition fails the test."""
    errors = ErrorLog()
    consumer = new_consumer(bootstrap, errors)
    try:
        return _consume_all(consumer, errors, topic, partitions, expected, deadline_s)
    finally:
        consumer.close()


def _consume_all(consumer: Consumer, errors: ErrorLog, topic: str, partitions: int,
                 expected: int | None, deadline_s: float) -> list[Consumed]:
    deadline = time.monotonic() + deadline_s
    high = {}
    for p in range(partitions):
        _low, hw = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        high[p] = hw
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records: list[Consumed] = []
    at_end: set[int] = set()

    def done() -> bool:
        if expected is not None and len(records) < expected:
            return False
        return len(at_end) == partitions

    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"consumed {len(records)} records (expected {expected}, high watermarks "
                f"{high}, partitions at end {sorted(at_end)}) before the "
                f"{deadline_s:.0f} s deadline; client errors: {errors.summary()}")
        for msg in consumer.consume(num_messages=1000, timeout=0.5):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= high[msg.partition()]:
                        at_end.add(msg.partition())
                    continue
                raise AssertionError(f"consume error on partition {msg.partition()} offset "
                                     f"{msg.offset()}: {err.name()}: {err.str()}")
            at_end.discard(msg.partition())
            records.append(Consumed(msg.partition(), msg.offset(), msg.key(), msg.value(),
                                    list(msg.headers() or []), msg.timestamp()))
    return records


def raise_on_error(futures: dict, timeout_s: float = ADMIN_TIMEOUT_S) -> None:
    for name, f in futures.items():
        try:
            f.result(timeout=timeout_s)
        except KafkaException as e:
            raise AssertionError(f"{name}: {e}") from None
