"""Randomized faults on three brokers, and a history checker over what the clients saw.

Goal: under a fault schedule drawn from a printed seed (SIGKILL and restart of a broker,
of a partition's leader, of a transactional id's coordinator, SIGSTOP and SIGCONT),
idempotent producers (librdkafka, acks=all) lose no acknowledged write, write nothing
twice, and send in order; transactional producers' transactions are read whole once
committed and never once aborted; no offset ever holds two values; readers with
assign() see every offset once, in order, but for transaction markers (and, reading
read_committed, aborted data); read_committed readers and group members never read an
aborted transaction, nor one before its commit was asked for; group members read only
values that were sent and, once healed, read every acknowledged and committed one; no
producer fails for good (tests/python/history.py lists the checks).
Method: three brokers (cluster_support), a topic at replication factor 3 with
min.insync.replicas=2. Two idempotent writers send unique values at a steady pace; two
transactional writers (their own transactional ids, so their coordinators are the
leaders of two partitions of the replicated `__transaction_state`) send TXN_VALUES
unique values per transaction over the partitions of the same topic and commit, every
ABORT_EVERY'th transaction aborted on purpose once its records are in the log. Two
readers read with assign() from the start, one read_committed and one read_uncommitted,
and two members of one group read (read_committed) and commit, while the schedule runs:
one fault at a time, each held 2 to 6 s, 1 to 3 s apart. Then every broker is running
again, the writers stop once their sends and transactions are answered, the last stable
offsets reach the high watermarks (no transaction left open), the readers catch up to
them, a fresh read_committed consumer reads each partition whole, and a raw fetch maps
each partition's batches (which offsets are markers, which hold aborted data); the
checker compares everything.

In CI one schedule of 30 s runs, always of the same seed. The longer run, of random
seeds, with its seeds and results written to `bench/results/cluster/history.md`
(append), is:
`HEADWAY_HISTORY_SCHEDULES=100 HEADWAY_HISTORY_RESULTS=bench/results/cluster/history.md
pytest tests/python/test_cluster_history.py`; `HEADWAY_HISTORY_SEED=N` replays one seed.
"""

from __future__ import annotations

import os
import random
import signal
import struct
import threading
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, \
    Producer, TopicPartition
from kafka.record.memory_records import MemoryRecords

from cluster_support import call, cluster_with_topic, led_by, metadata
from history import ABORTED, COMMITTED, INDETERMINATE, Batch, History, Txn, check
from support import rdkafka_base, wait_until
from test_cluster_transactions import find_coordinator

TOPIC = "history"
PARTITIONS = 3
NODES = {1, 2, 3}
SCHEDULE_S = float(os.environ.get("HEADWAY_HISTORY_SECONDS", "30"))
# Without HEADWAY_HISTORY_SCHEDULES one schedule of a fixed seed runs (CI: the same
# faults every run); with it, that many schedules of seeds drawn at random.
SCHEDULES = os.environ.get("HEADWAY_HISTORY_SCHEDULES")
CI_SEED = 471027349
WRITERS, READERS, MEMBERS = 2, 2, 2
SENDS_PER_S = 50  # per writer
# Transactional writers: writer ids from TXN_WRITER_BASE, transactional ids
# `history-txn-<i>`; TXN_VALUES values a transaction, each ABORT_EVERY'th aborted on
# purpose, each held open TXN_OPEN_S after its sends.
TXN_WRITERS, TXN_WRITER_BASE, TXN_VALUES, ABORT_EVERY, TXN_OPEN_S = 2, 50, 6, 4, 0.05
# One call of the transactional API (librdkafka retries inside it); a call refused with
# a retriable error is made again until TXN_RETRY_S passed.
TXN_CALL_S, TXN_RETRY_S = 30.0, 60.0
# Readers: reader-0 and the group members read with read_committed, reader-1 with
# read_uncommitted.
COMMITTED_READERS = {"reader-0"} | {f"member-{i}" for i in range(MEMBERS)}
FETCH_KEY = 1
GROUP = "history-group"
# After healing: every broker back in every ISR, the writers' sends answered, the
# readers at the high watermarks. Generous: a loaded 2-core machine.
HEAL_S = 120.0
MESSAGE_TIMEOUT_MS = 30_000


class Writer(threading.Thread):
    """Sends `w<id>-<n>` to partition n % PARTITIONS at a steady pace; a fatal error
    (an idempotent producer fenced by the broker) starts a new producer under a new
    writer id, since per-writer order is a promise of one producer."""

    def __init__(self, ident: int, bootstrap: str, history: History, stop: threading.Event):
        super().__init__(daemon=True)
        self.writer_id, self.bootstrap, self.history, self.stop = ident, bootstrap, history, stop
        self.fatal: list[str] = []

    def producer(self) -> Producer:
        return Producer({**rdkafka_base(self.bootstrap), "enable.idempotence": True,
                         "message.timeout.ms": MESSAGE_TIMEOUT_MS, "linger.ms": 5,
                         "error_cb": self.client_error})

    def client_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.fatal.append(str(err))

    def run(self) -> None:
        writer, n, producer = self.writer_id, 0, self.producer()
        while not self.stop.is_set():
            partition = n % PARTITIONS
            send = self.history.sent(writer, partition, f"w{writer}-{n}")

            def answered(err, msg, send=send) -> None:
                if err is None:
                    send.offset = msg.offset()
            try:
                producer.produce(TOPIC, value=send.value.encode(), partition=partition,
                                 on_delivery=answered)
            except BufferError:
                send.failed = True  # refused before it left: never written
            except KafkaException as e:
                self.fatal.append(str(e))
                producer.flush(MESSAGE_TIMEOUT_MS / 1000 + 10)
                writer, producer = writer + 100, self.producer()
            n += 1
            producer.poll(1.0 / SENDS_PER_S)
        assert producer.flush(MESSAGE_TIMEOUT_MS / 1000 + 30) == 0, "sends never answered"


class TxnWriter(threading.Thread):
    """A transactional producer looping until `stop`: begin, send TXN_VALUES values
    `t<id>-<n>-<i>` over the partitions, commit (each ABORT_EVERY'th transaction flushed,
    so its records are in the log, and aborted instead). Each transaction and its
    outcome go to the history (history.py says what committed / aborted / indeterminate
    promise). A fatal error, or a producer left unable to go on, is recorded and a new
    producer of the same transactional id (which fences the old one and ends its open
    transaction) carries on under a new writer id."""

    def __init__(self, ident: int, bootstrap: str, history: History, stop: threading.Event):
        super().__init__(daemon=True, name=f"history-txn-{ident}")
        self.tid = self.name
        self.writer_id, self.bootstrap = TXN_WRITER_BASE + ident, bootstrap
        self.history, self.stop = history, stop
        self.fatal: list[str] = []
        self.errors: list[str] = []
        self.retired: list[Producer] = []  # replaced producers, kept from destruction

    def client_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.fatal.append(f"{self.tid}: {err}")

    def new_producer(self) -> Producer:
        producer = Producer({**rdkafka_base(self.bootstrap), "transactional.id": self.tid,
                             "linger.ms": 5, "error_cb": self.client_error})
        err = self.retried(lambda: producer.init_transactions(TXN_CALL_S))
        if err is not None:
            raise RuntimeError(f"init_transactions: {err}")
        return producer

    def run(self) -> None:
        try:
            self.loop()
        except Exception as e:  # noqa: BLE001 - reported as an anomaly
            self.fatal.append(f"{self.tid}: {type(e).__name__}: {e}")

    def loop(self) -> None:
        producer, n = self.new_producer(), 0
        while not self.stop.is_set():
            txn = self.history.began(self.writer_id, n)
            usable = self.transact(producer, txn, n % ABORT_EVERY == ABORT_EVERY - 1)
            if not usable:
                self.retired.append(producer)
                self.writer_id += 100
                producer = self.new_producer()
            n += 1
        assert producer.flush(TXN_CALL_S) == 0, "transactional sends never answered"

    def transact(self, producer: Producer, txn: Txn, on_purpose: bool) -> bool:
        """Runs one transaction and records its outcome; False when the producer cannot
        go on."""
        txn.outcome = ABORTED  # until its commit is asked for
        try:
            producer.begin_transaction()
        except KafkaException as e:
            self.errors.append(f"begin: {e.args[0]}")
            return False
        for i in range(TXN_VALUES):
            partition = (txn.number + i) % PARTITIONS
            send = self.history.sent(self.writer_id, partition,
                                     f"t{self.writer_id}-{txn.number}-{i}", txn=txn)

            def answered(err, msg, send=send) -> None:
                if err is None:
                    send.offset = msg.offset()
            while True:
                try:
                    producer.produce(TOPIC, value=send.value.encode(), partition=partition,
                                     on_delivery=answered)
                    break
                except BufferError:
                    producer.poll(0.1)
                except KafkaException as e:
                    err = e.args[0]
                    self.errors.append(f"produce: {err}")
                    if err.fatal():
                        return False
                    return self.abort(producer)  # never committed: stays aborted
            producer.poll(0)
        producer.poll(TXN_OPEN_S)
        if on_purpose:
            producer.flush(TXN_CALL_S)  # the records in the log, for readers to skip
            return self.abort(producer)
        txn.commit_at, txn.outcome = time.monotonic(), INDETERMINATE
        err = self.retried(lambda: producer.commit_transaction(TXN_CALL_S))
        if err is None:
            txn.outcome = COMMITTED
            return True
        self.errors.append(f"commit: {err}")
        if err.fatal():
            return False
        # Refused (abortable) or never answered: the commit may still have gone through,
        # so the outcome stays indeterminate; the abort only readies the producer.
        return self.abort(producer)

    def abort(self, producer: Producer) -> bool:
        err = self.retried(lambda: producer.abort_transaction(TXN_CALL_S))
        if err is not None:
            self.errors.append(f"abort: {err}")
        return err is None

    def retried(self, call_) -> KafkaError | None:
        """Calls `call_` until it succeeds (None) or fails with an error that is not
        retriable, or TXN_RETRY_S passed (that error). A fatal error is recorded."""
        deadline = time.monotonic() + TXN_RETRY_S
        while True:
            try:
                call_()
                return None
            except KafkaException as e:
                err = e.args[0]
                if err.fatal():
                    self.fatal.append(f"{self.tid}: {err}")
                    return err
                if not err.retriable() or time.monotonic() > deadline:
                    return err


class Reader(threading.Thread):
    """assign() of every partition from the start (or subscribe() in the group), each
    poll's records recorded in order with when the poll returned; read_committed for the
    readers named in COMMITTED_READERS. An assign() reader's position is librdkafka's
    (it moves past markers and skipped aborted data, unlike the last record's offset)."""

    def __init__(self, name: str, bootstrap: str, history: History, stop: threading.Event,
                 group: bool):
        super().__init__(daemon=True)
        self.name_, self.history, self.stop, self.group = name, history, stop, group
        committed = name in COMMITTED_READERS
        if committed:
            history.committed_readers.add(name)
        settings = {**rdkafka_base(bootstrap), "enable.partition.eof": False,
                    "group.id": GROUP if group else f"unused-{name}",
                    "enable.auto.commit": False, "auto.offset.reset":
                    "earliest" if group else "error",
                    "isolation.level": "read_committed" if committed else "read_uncommitted"}
        self.consumer = Consumer(settings)
        self.errors: list[str] = []
        self.positions: dict[int, int] = {}

    def run(self) -> None:
        partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        if self.group:
            self.consumer.subscribe([TOPIC])
        else:
            self.consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING)
                                  for p in range(PARTITIONS)])
        while not self.stop.is_set():
            batch = self.consumer.consume(num_messages=200, timeout=0.2)
            at = time.monotonic()
            records = []
            for m in batch:
                if m.error() is None:
                    records.append((m.partition(), m.offset(), m.value().decode()))
                elif m.error().code() == KafkaError._AUTO_OFFSET_RESET:
                    self.errors.append(f"{self.name_}: offset reset: {m.error()}")
            self.history.polled(self.name_, records, at)
            if not self.group:
                self.positions.update((tp.partition, tp.offset)
                                      for tp in self.consumer.position(partitions))
            if self.group and records:
                try:
                    self.consumer.commit(asynchronous=False)
                except KafkaException:
                    pass  # a rebalance or a coordinator moving: the next commit covers it
        self.consumer.close()


def high_watermarks(bootstrap: str, isolation: str = "read_uncommitted"
                    ) -> dict[int, tuple[int, int]]:
    """Each partition's (log start, end); the end is the high watermark, or for
    read_committed the last stable offset."""
    consumer = Consumer({**rdkafka_base(bootstrap), "group.id": "history-watermarks",
                         "isolation.level": isolation})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10,
                                                  cached=False)
                for p in range(PARTITIONS)}
    finally:
        consumer.close()


def settled_marks(bootstrap: str) -> dict[int, tuple[int, int]]:
    """The watermarks once the last stable offsets reached the high watermarks: every
    transaction ended (the writers stopped before), its markers written."""
    seen: list[str] = []

    def settled() -> dict[int, tuple[int, int]] | None:
        high = high_watermarks(bootstrap)
        stable = high_watermarks(bootstrap, "read_committed")
        seen[:] = [f"high watermarks {high}, last stable offsets {stable}"]
        return high if high == stable else None
    try:
        return wait_until(settled, "the last stable offsets at the high watermarks", HEAL_S)
    except AssertionError as e:
        raise AssertionError(f"{e}: a transaction left open? {seen[0] if seen else ''}") \
            from None


def final_read(bootstrap: str, history: History, marks: dict[int, tuple[int, int]]) -> None:
    """read_committed, every partition from the start to its high watermark (which the
    last stable offset reached): done at a partition once librdkafka's position there
    reached it (the position moves past markers too)."""
    consumer = Consumer({**rdkafka_base(bootstrap), "group.id": "history-final",
                         "enable.partition.eof": True, "isolation.level": "read_committed"})
    partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    history.final = {p: {} for p in range(PARTITIONS)}
    history.final_start = {p: low for p, (low, _) in marks.items()}
    history.final_end = {p: high for p, (_, high) in marks.items()}
    deadline = time.monotonic() + HEAL_S
    try:
        while any(tp.offset < marks[tp.partition][1] for tp in consumer.position(partitions)):
            assert time.monotonic() < deadline, "the final read did not reach the watermarks"
            for m in consumer.consume(num_messages=500, timeout=0.5):
                if m.error() is None and m.offset() < marks[m.partition()][1]:
                    history.final[m.partition()][m.offset()] = m.value().decode()
    finally:
        consumer.close()


def fetch_batches(address: str, partition: int, offset: int) -> tuple[int, list[Batch]]:
    """One raw Fetch v4 (read_uncommitted) of the partition from `offset`, asked of the
    broker at `address`: its error and the complete batches returned, control batches
    included (their marker read from the control record's key)."""
    name = TOPIC.encode()
    body = (struct.pack(">iiiib", -1, 100, 1, 4 << 20, 0) + struct.pack(">i", 1)
            + struct.pack(">h", len(name)) + name + struct.pack(">i", 1)
            + struct.pack(">iqi", partition, offset, 1 << 20))
    r = call(address, FETCH_KEY, 4, body)
    r.take(">i")  # throttle
    assert r.take(">i") == 1 and r.string() == TOPIC and r.take(">i") == 1
    index, error, _high, _stable = r.take(">ihqq")
    assert index == partition
    for _ in range(max(r.take(">i"), 0)):  # aborted transactions: not asked for
        r.take(">qq")
    size = r.take(">i")
    records = MemoryRecords(bytes(r.data[r.at:r.at + max(size, 0)]))
    batches = []
    while (b := records.next_batch()) is not None:
        marker = None
        if b.is_control_batch:
            marker = "abort" if next(iter(b)).abort else "commit"
        batches.append(Batch(b.base_offset, b.last_offset, b.producer_id,
                             b.is_transactional, marker))
    return error, batches


def map_the_log(bootstraps: list[str], history: History,
                marks: dict[int, tuple[int, int]]) -> None:
    """Every batch of each partition from its start to its high watermark, fetched raw
    from its leader, into `history.log`."""
    for partition, (low, high) in marks.items():
        batches: list[Batch] = []
        offset, deadline = low, time.monotonic() + HEAL_S
        while offset < high:
            assert time.monotonic() < deadline, f"the raw fetch of {partition} stuck at {offset}"
            leader = None
            for address in bootstraps:
                try:
                    leader = metadata(address)["topics"][TOPIC]["partitions"][partition]["leader"]
                    break
                except (OSError, AssertionError, KeyError):
                    continue
            if leader not in NODES:
                time.sleep(0.2)
                continue
            error, got = fetch_batches(bootstraps[leader - 1], partition, offset)
            got = [b for b in got if b.last >= offset and b.first < high]
            if error or not got:
                time.sleep(0.2)  # a leader moving, or nothing yet: ask again
                continue
            batches += got
            offset = got[-1].last + 1
        history.log[partition] = batches


class Faults:
    """One fault at a time from `rng`: kill and restart a broker, kill and restart a
    partition's leader or a transactional id's coordinator, or stop and continue a
    broker."""

    def __init__(self, brokers, bootstraps: list[str], rng: random.Random):
        self.brokers, self.bootstraps, self.rng = brokers, bootstraps, rng
        self.log: list[str] = []

    def leader_of(self, partition: int) -> int | None:
        for node in NODES:
            if self.brokers[node - 1].running:
                try:
                    t = metadata(self.bootstraps[node - 1])["topics"].get(TOPIC)
                except OSError:
                    continue
                leader = t["partitions"][partition]["leader"] if t else -1
                return leader if leader in NODES else None
        return None

    def coordinator_of(self, transactional_id: str) -> int | None:
        """The node a running broker names in FindCoordinator as the id's transaction
        coordinator (the leader of its `__transaction_state` partition)."""
        for node in NODES:
            if self.brokers[node - 1].running:
                answer = find_coordinator(self.bootstraps[node - 1], transactional_id)
                if isinstance(answer, int) and answer in NODES:
                    return answer
        return None

    def run(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            kind = self.rng.choice(["kill", "kill-leader", "stop", "kill-coordinator"])
            node = self.rng.choice(sorted(NODES))
            if kind == "kill-leader":
                node = self.leader_of(self.rng.randrange(PARTITIONS)) or node
            elif kind == "kill-coordinator":
                node = self.coordinator_of(f"history-txn-{self.rng.randrange(TXN_WRITERS)}") \
                    or node
            held = self.rng.uniform(2, 6)
            at = f"{seconds - (end - time.monotonic()):.1f}s"
            self.log.append(f"{at} {kind} {node} for {held:.1f}s")
            broker = self.brokers[node - 1]
            if kind == "stop":
                os.kill(broker.pid, signal.SIGSTOP)
                try:
                    time.sleep(held)
                finally:
                    os.kill(broker.pid, signal.SIGCONT)
            else:
                broker.kill()
                time.sleep(held)
                self.start_again(broker)
            time.sleep(self.rng.uniform(1, 3))

    @staticmethod
    def start_again(broker) -> None:
        """On the port it had, as a restarted broker of a real cluster is: clients keep
        its address (librdkafka's group coordinator, once told a known node's new port,
        stayed waiting for its old one)."""
        broker.listen = broker.bootstrap
        broker.start()

    def heal(self) -> None:
        for node in NODES:
            broker = self.brokers[node - 1]
            if broker.running:
                os.kill(broker.pid, signal.SIGCONT)
            else:
                self.start_again(broker)


def empty_markers(batches: list[Batch]) -> int:
    """Markers of a partition's log that end no data of their producer (a marker written
    again, or a transaction that wrote nothing there): harmless, counted for the summary."""
    pending: dict[int, bool] = {}
    count = 0
    for b in batches:
        if b.marker is not None:
            count += not pending.get(b.producer, False)
            pending[b.producer] = False
        elif b.transactional:
            pending[b.producer] = True
    return count


def one_schedule(make_broker, seed: int) -> tuple[list[str], str]:
    brokers, bootstraps, _ = cluster_with_topic(make_broker, TOPIC, PARTITIONS,
                                                {"min.insync.replicas": "2"})
    bootstrap = ",".join(bootstraps)
    history, stop_writing, stop_reading = History(), threading.Event(), threading.Event()
    writers = [Writer(i, bootstrap, history, stop_writing) for i in range(WRITERS)]
    txn_writers = [TxnWriter(i, bootstrap, history, stop_writing) for i in range(TXN_WRITERS)]
    readers = [Reader(f"reader-{i}", bootstrap, history, stop_reading, group=False)
               for i in range(READERS)]
    members = [Reader(f"member-{i}", bootstrap, history, stop_reading, group=True)
               for i in range(MEMBERS)]
    faults = Faults(brokers, bootstraps, random.Random(seed))
    started = time.monotonic()
    try:
        for t in writers + txn_writers + readers + members:
            t.start()
        faults.run(SCHEDULE_S)
    finally:
        faults.heal()
    wait_until(lambda: led_by(bootstraps, TOPIC, NODES, 3), "every broker back in every ISR",
               HEAL_S)
    stop_writing.set()
    for w in writers + txn_writers:
        w.join(HEAL_S)
    still = [w.name for w in writers + txn_writers if w.is_alive()]
    assert not still, f"writers still sending or in a transaction: {still}"
    marks = settled_marks(bootstrap)
    wait_until(lambda: all(r.positions.get(p, 0) >= high for r in readers
                           for p, (_, high) in marks.items()),
               "the readers at the high watermarks", HEAL_S)
    # The group carries on: its members together read every acknowledged value that
    # must be visible (not transactional, or of a committed transaction).
    acked_values = {s.value for s in history.sends if s.offset is not None
                    and (s.txn is None or s.txn.outcome == COMMITTED)}

    def group_read() -> set[str]:
        with history.lock:
            return {v for m in members for _, _, v in history.polls.get(m.name_, [])}
    group_deadline = time.monotonic() + HEAL_S
    while not acked_values <= group_read() and time.monotonic() < group_deadline:
        time.sleep(0.2)
    group_missing = len(acked_values - group_read())
    stop_reading.set()
    for r in readers + members:
        r.join(HEAL_S)
    final_read(bootstrap, history, marks)
    map_the_log(bootstraps, history, marks)
    anomalies = check(history, group_readers={m.name_ for m in members})
    anomalies += [e for r in readers for e in r.errors]
    if group_missing:
        anomalies.append(f"group stuck: its members never read {group_missing} of "
                         f"{len(acked_values)} acknowledged values")
    # An idempotent producer that the brokers fence (e.g. two producers given one id)
    # fails for good: librdkafka calls that fatal.
    # So does a transactional producer the brokers fence (its epoch bumped by another).
    anomalies += [f"fatal producer error: {e}" for w in writers + txn_writers for e in w.fatal]
    acked = sum(1 for s in history.sends if s.offset is not None)
    outcomes = Counter(t.outcome for t in history.txns)
    markers = sum(1 for log in history.log.values() for b in log if b.marker)
    empty = sum(empty_markers(log) for log in history.log.values())
    txn_errors = [e for w in txn_writers for e in w.errors]
    summary = (f"seed {seed}: {len(history.sends)} sends ({acked} acknowledged), "
               f"{len(history.txns)} transactions {dict(outcomes)} ({markers} markers in the "
               f"log, {empty} ending no data; {len(txn_errors)} transactional call errors"
               + (f", last {txn_errors[-1]}" if txn_errors else "") + "), "
               f"{sum(len(v) for v in history.polls.values())} records polled, "
               f"{sum(len(v) for v in history.final.values())} in the final read, "
               f"{len(anomalies)} anomalies, {time.monotonic() - started:.0f} s; faults: "
               + "; ".join(faults.log))
    for b in brokers:
        b.kill()
    return anomalies, summary


def test_a_fault_schedule_loses_and_reorders_nothing(make_broker):
    given = os.environ.get("HEADWAY_HISTORY_SEED")
    if given:
        seeds = [int(given)]
    elif SCHEDULES:
        seeds = [random.SystemRandom().randrange(2**32) for _ in range(int(SCHEDULES))]
    else:
        seeds = [CI_SEED]
    results = os.environ.get("HEADWAY_HISTORY_RESULTS")
    failed = []
    for seed in seeds:
        print(f"fault schedule seed {seed} (HEADWAY_HISTORY_SEED={seed} replays it)")
        anomalies, summary = one_schedule(make_broker, seed)
        print(summary)
        for a in anomalies[:20]:
            print(f"  {a}")
        if results:
            with open(Path(results), "a") as out:
                out.write(f"- {summary}\n" + "".join(f"  - {a}\n" for a in anomalies[:20]))
        if anomalies:
            failed.append((seed, anomalies[:5]))
    assert not failed, f"schedules with anomalies: {failed}"
