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

Sized test records (sized_record), for tests that need records of a given size, half
compressible, the same in tests/java/src/TestRecords.java and tests/go/cmd/franzsized:

    key     b"key-%08d" % seq
    value   exactly B bytes: b"seq=%010d;" % seq, then B - 15 filler bytes, the first
            (B - 15) // 2 pseudo-random (a 32-bit LCG: x = seq * 2654435761 + 1, then per
            byte x = x * 1103515245 + 12345, both mod 2**32, byte (x >> 16) & 0xFF), the
            rest (seq * 31 + j * 7) % 256 for filler byte j
    headers ("seq", decimal seq)
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException,
                             Producer, TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic

VALUE_FILLER_BYTES = 80

# Deadlines, generous because two cores are shared with the broker and with CI's builds.
ADMIN_TIMEOUT_S = 30.0
FLUSH_TIMEOUT_S = 180.0
# How long a stopping BackgroundProducer waits for the delivery reports still due.
PRODUCER_DRAIN_S = 60.0
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


@functools.lru_cache(maxsize=65536)
def sized_value(seq: int, size: int) -> bytes:
    """The value of sized test record `seq`: `size` bytes (at least 15)."""
    if size < 15:
        raise ValueError("a sized value has at least 15 bytes")
    filler = size - 15
    random_bytes = filler // 2
    out = bytearray(b"seq=%010d;" % seq)
    x = (seq * 2654435761 + 1) & 0xFFFFFFFF
    for _ in range(random_bytes):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        out.append((x >> 16) & 0xFF)
    out.extend((seq * 31 + j * 7) % 256 for j in range(random_bytes, filler))
    return bytes(out)


def sized_record(seq: int, value_bytes: int) -> Record:
    return Record(key=b"key-%08d" % seq, value=sized_value(seq, value_bytes),
                  headers=[("seq", b"%d" % seq)])


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


class RecordChecker:
    """Checks the records read from one topic one at a time, in the order they were
    delivered: every partition's offsets run on densely from its start offset (0 unless
    given) with no gap and no repeat; every record is a well-formed test record, byte for
    byte; sequence numbers rise within each partition (the producer sent them in that
    order). Problems accumulate in `problems`."""

    def __init__(self, partitions: int, start_offsets: list[int] | None = None):
        self.partitions = partitions
        self.next_offset = list(start_offsets) if start_offsets else [0] * partitions
        self.last_seq = [-1] * partitions
        self.problems: list[str] = []

    def check(self, r: Consumed) -> int | None:
        """The record's sequence number, or None if it is not a well-formed test record."""
        where = f"partition {r.partition} offset {r.offset}"
        if not 0 <= r.partition < self.partitions:
            self.problems.append(f"{where}: partition out of range")
            return None
        if r.offset != self.next_offset[r.partition]:
            self.problems.append(
                f"{where}: expected offset {self.next_offset[r.partition]} (offsets must be "
                f"dense from the start and delivered in order)")
        self.next_offset[r.partition] = r.offset + 1
        try:
            seq = seq_of(r.value)
        except ValueError as e:
            self.problems.append(f"{where}: {e}")
            return None
        want = make_record(seq)
        if r.key != want.key:
            self.problems.append(f"{where}: seq {seq}: key {r.key!r} != {want.key!r}")
        if r.value != want.value:
            self.problems.append(f"{where}: seq {seq}: value differs: {r.value!r}")
        if r.headers != want.headers:
            self.problems.append(
                f"{where}: seq {seq}: headers {r.headers!r} != {want.headers!r}")
        if seq <= self.last_seq[r.partition]:
            self.problems.append(
                f"{where}: seq {seq} after seq {self.last_seq[r.partition]}: out of order")
        self.last_seq[r.partition] = seq
        return seq


def check_records(records: list[Consumed], partitions: int) -> Verdict:
    """Checks what a consumer read from one topic, from offset 0 of every partition, with
    RecordChecker; the verdict lists the sequence numbers of the well-formed records."""
    checker = RecordChecker(partitions)
    verdict = Verdict(problems=checker.problems)
    for r in records:
        seq = checker.check(r)
        if seq is not None:
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


class BackgroundProducer:
    """A librdkafka producer that sends test records from `seq_base` upward on its own
    thread until stopped (at most `records_max`), as fast as it can or paced at
    `rate_per_s`. acks=all; `config` adds librdkafka settings or overrides these. Every
    delivery report lands in `delivery`, every client-level error in `errors`."""

    def __init__(self, bootstrap: str, topic: str, seq_base: int = 0,
                 records_max: int = 2_000_000, rate_per_s: float | None = None,
                 config: dict | None = None):
        self.topic = topic
        self.seq_base = seq_base
        self.records_max = records_max
        self.rate_per_s = rate_per_s
        self.delivery = Delivery()
        self.errors = ErrorLog()
        self.sent = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._purge = True
        self._drain_s = PRODUCER_DRAIN_S
        self._producer = Producer({
            **rdkafka_base(bootstrap),
            "acks": "all",
            "linger.ms": 2,
            # Fail fast once the broker is gone instead of retrying for minutes.
            "message.timeout.ms": 30_000,
            "reconnect.backoff.max.ms": 1_000,
            "error_cb": self.errors,
            **(config or {}),
        })
        self._thread = threading.Thread(target=self._run, name=f"producer-{topic}", daemon=True)

    def start(self) -> "BackgroundProducer":
        self._thread.start()
        return self

    def acked_count(self) -> int:
        return len(self.delivery.acked)

    def _run(self) -> None:
        try:
            p = self._producer
            started = time.monotonic()
            while not self._stop.is_set() and self.sent < self.records_max:
                if self.rate_per_s is not None:
                    ahead_s = started + self.sent / self.rate_per_s - time.monotonic()
                    if ahead_s > 0:
                        p.poll(min(ahead_s, 0.05))
                        continue
                r = make_record(self.seq_base + self.sent)
                try:
                    p.produce(self.topic, key=r.key, value=r.value, headers=r.headers,
                              on_delivery=self.delivery.callback)
                    self.sent += 1
                except BufferError:
                    p.poll(0.05)
                p.poll(0)
            if self._purge:
                # The broker is dead: nothing can be acknowledged any more. Drop what is
                # queued or in flight (those records count as unacknowledged) and collect
                # the delivery reports that already arrived.
                p.purge(in_queue=True, in_flight=True)
            p.flush(self._drain_s)
        except BaseException as e:  # reported by stop()
            self.error = e

    def stop(self, purge: bool = True, drain_s: float = PRODUCER_DRAIN_S) -> None:
        """Stops producing. With `purge` (the broker is dead) what is still queued or in
        flight is dropped; without it, every record sent must get its delivery report
        within drain_s, or this fails."""
        self._purge = purge
        self._drain_s = drain_s
        self._stop.set()
        self._thread.join(timeout=drain_s + 30)
        assert not self._thread.is_alive(), "producer thread did not finish"
        if self.error is not None:
            raise self.error
        reported = len(self.delivery.acked) + len(self.delivery.failed)
        if not purge and reported < self.sent:
            raise AssertionError(f"{self.sent - reported} of {self.sent} records without a "
                                 f"delivery report {drain_s:.0f} s after the producer stopped; "
                                 f"client errors: {self.errors.summary()}")


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
    return list(read_records(bootstrap, topic, partitions, expected=expected,
                             deadline_s=deadline_s))


def read_records(bootstrap: str, topic: str, partitions: int,
                 start_offsets: list[int] | None = None, end_offsets: list[int] | None = None,
                 expected: int | None = None,
                 deadline_s: float = CONSUME_DEADLINE_S,
                 settings: dict | None = None) -> Iterator[Consumed]:
    """Yields the records of `topic` as a manually assigned consumer delivers them, from
    `start_offsets` (default: the beginning of every partition). Without `end_offsets` it
    reads like consume_all; with them it reads each partition up to that offset (exclusive)
    and yields nothing past it, which bounds a read while producers keep appending. One
    record at a time, so a long log never sits in memory. `settings` are extra client
    settings (TLS)."""
    errors = ErrorLog()
    consumer = new_consumer(bootstrap, errors, **(settings or {}))
    try:
        yield from _read_records(consumer, errors, topic, partitions, start_offsets,
                                 end_offsets, expected, deadline_s)
    finally:
        consumer.close()


def _read_records(consumer: Consumer, errors: ErrorLog, topic: str, partitions: int,
                  start_offsets: list[int] | None, end_offsets: list[int] | None,
                  expected: int | None, deadline_s: float) -> Iterator[Consumed]:
    deadline = time.monotonic() + deadline_s
    if end_offsets is not None:
        high = dict(enumerate(end_offsets))
    else:
        high = {}
        for p in range(partitions):
            _low, hw = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            high[p] = hw
    starts = start_offsets or [OFFSET_BEGINNING] * partitions
    consumer.assign([TopicPartition(topic, p, starts[p]) for p in range(partitions)])
    count = 0
    # A bounded read is done with a partition that starts at its end.
    at_end: set[int] = ({p for p in range(partitions) if starts[p] >= high[p]}
                        if end_offsets is not None else set())

    def done() -> bool:
        if expected is not None and count < expected:
            return False
        return len(at_end) == partitions

    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"consumed {count} records (expected {expected}, high watermarks "
                f"{high}, partitions at end {sorted(at_end)}) before the "
                f"{deadline_s:.0f} s deadline; client errors: {errors.summary()}")
        for msg in consumer.consume(num_messages=1000, timeout=0.5):
            err = msg.error()
            p = msg.partition()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= high[p]:
                        at_end.add(p)
                    continue
                raise AssertionError(f"consume error on partition {p} offset "
                                     f"{msg.offset()}: {err.name()}: {err.str()}")
            if end_offsets is not None:
                if msg.offset() >= high[p]:
                    continue
                if msg.offset() + 1 >= high[p]:
                    at_end.add(p)
            else:
                at_end.discard(p)
            count += 1
            yield Consumed(p, msg.offset(), msg.key(), msg.value(), list(msg.headers() or []),
                           msg.timestamp())


def error_code_of(future) -> int | None:
    """The Kafka error code an admin future failed with (None: it succeeded)."""
    try:
        future.result(timeout=ADMIN_TIMEOUT_S)
    except KafkaException as e:
        return e.args[0].code()
    return None


def raise_on_error(futures: dict, timeout_s: float = ADMIN_TIMEOUT_S) -> None:
    for name, f in futures.items():
        try:
            f.result(timeout=timeout_s)
        except KafkaException as e:
            raise AssertionError(f"{name}: {e}") from None


def wait_until(condition, what: str, deadline_s: float = 60.0):
    """Polls `condition()` until it returns something true; returns that."""
    deadline = time.monotonic() + deadline_s
    while not (result := condition()):
        assert time.monotonic() < deadline, f"{what}: not true within {deadline_s:.0f} s"
        time.sleep(0.1)
    return result
