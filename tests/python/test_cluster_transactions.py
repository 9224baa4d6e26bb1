"""Transactions on three brokers: the transaction coordinator killed, nothing lost.

Goal: in a cluster a transactional id's coordinator is the leader of the id's partition
of the replicated `__transaction_state` (abs(Java String.hashCode(id)) % partitions, as
Kafka places it; FindCoordinator with key type 1 answers that leader), and it writes the
transaction markers to the partitions' leaders, on whichever broker they are
(WriteTxnMarkers). When the coordinator's broker is SIGKILLed, another in-sync replica
leads the partition, rebuilds the transactions' state from it and carries on: a
producer's transaction in flight ends (committed or aborted, never half), every
transaction a producer was told is committed is read by read_committed readers exactly
once, nothing of an aborted one is, and the producers commit again, first while the
broker is down, then once it is back (restarted on the same port, as a broker of a real
cluster comes back).
Method: three brokers (cluster_support), a topic of 3 partitions at replication factor 3
with min.insync.replicas=2. Two librdkafka transactional producers (confluent-kafka at
default settings, two transactional ids) loop: begin, send PER_TXN unique values spread
over the partitions, commit; every ABORT_EVERY'th transaction is flushed (its records are
in the log) and aborted on purpose. Each transaction's outcome is recorded: committed;
aborted on purpose; failed (commit or send refused with an abortable error, then
aborted: counted as aborted-or-unknown); unknown (the producer could not tell). Once both
committed a few, the coordinator of the first producer's id (as every broker answers
FindCoordinator, and as the leader of its `__transaction_state` partition) is killed. The
producers must commit again while it is down, and again after it rejoined every ISR. Then
they stop, and a read_committed consumer (assign(), from the start) reads each partition
to its last stable offset, which must have reached the high watermark (no transaction
left open). Asserted: every value of a committed transaction read exactly once, no value
of a transaction aborted on purpose read, a failed or unknown transaction's values all
read or none, no value read that nobody sent, and no producer failed fatally (librdkafka
gives up on a transactional producer for good with a fatal error).
Java (tests/java/src/TransactionalCopy.java, kafka-clients 4): the consume-transform-
produce loop copies a topic (RF 3) while its coordinator is killed the same way; it must
report no error, commit again while the broker is down, and leave every input record's
copy exactly once for read_committed readers, none of an aborted transaction.
franz-go (tests/go/cmd/franztxn, a GroupTransactSession at default settings) copies the
same way while the input is still arriving, once with its transactional id's coordinator
killed and once with its group's: no error, every copy exactly once. A classic group's
members are in the offsets log (as Kafka keeps them), so the group's new coordinator
knows them and their heartbeats and transactional commits carry on.
"""

from __future__ import annotations

import json
import struct
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, \
    Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cluster_support import CLUSTER_UP_S, call, cluster_with_topic, led_by, metadata
from go_support import build_go_command
from java_support import JavaClient
from support import ADMIN_TIMEOUT_S, raise_on_error, rdkafka_base, wait_until

TOPIC = "txn-rf3"
PARTITIONS = 3
NODES = {1, 2, 3}
TXN_STATE = "__transaction_state"
FIND_COORDINATOR_KEY, GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE = 10, 0, 1
# Where each kind of coordinator keeps its state: the leader of the key's partition.
STATE_TOPICS = {GROUP_KEY_TYPE: "__consumer_offsets", TRANSACTION_KEY_TYPE: TXN_STATE}
TRANSACTIONAL_IDS = ["txn-writer-0", "txn-writer-1"]
PER_TXN = 30  # values per transaction, spread over the partitions
ABORT_EVERY = 4  # every 4th transaction of a producer is aborted on purpose
# How long each transaction stays open after its values were sent (a steady pace, and a
# kill finds a transaction in flight: its partitions added, its records in the log).
OPEN_S = 0.1
# Committed transactions each producer must reach: before the kill, after it with the
# broker down, after it came back.
BEFORE_KILL, WHILE_DOWN, AFTER_RESTART = 3, 2, 3
# One call of the transactional API (librdkafka retries inside it); a commit or abort
# refused with a retriable error is called again until RETRY_S passed.
TXN_CALL_S = 30.0
RETRY_S = 60.0
# The controller fences a killed broker within about 6 to 10 s, the new leader of the
# `__transaction_state` partition loads it; the margin is for a loaded 2-core machine.
FAILOVER_S = 60.0
PROGRESS_S = 60.0
DEADLINE_S = 120.0

# The Java copy: input records, records per transaction (a poll's worth at most).
COPY_INPUT, COPY_OUTPUT, COPY_TXN_ID = "copy-in", "copy-out", "rf3-copier-1"
COPY_RECORDS, COPY_BATCH = 600, 10
# franz-go's copy (tests/go/cmd/franztxn): its group and transactional id.
GO_COPY_GROUP, GO_COPY_TXN_ID = "rf3-go-copier", "rf3-go-copier-1"
# Its input: the first records before it starts, the rest one every pace while it runs
# (about 25 s), the kill in their midst.
GO_COPY_FIRST, GO_COPY_PACE_S = 100, 0.05

COMMITTED = "committed"  # commit_transaction returned
ABORTED = "aborted"  # aborted on purpose: never committed
FAILED = "failed"  # a send or the commit refused (abortable), then aborted: aborted-or-unknown
UNKNOWN = "unknown"  # the producer could not tell (a fatal error, a commit never answered)


@dataclass
class Txn:
    writer: str
    number: int
    values: list[str]
    outcome: str = UNKNOWN
    ended_at: float | None = None  # time.monotonic() when its outcome was known
    errors: list[str] = field(default_factory=list)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def txn_state_partition(transactional_id: str, partitions: int) -> int:
    """Kafka's partitionFor: Utils.abs(hashCode) % partitions (abs(MIN_VALUE) is 0)."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class Writer(threading.Thread):
    """One transactional producer looping over transactions until `stop`; each
    transaction's outcome is recorded in `txns`. A fatal error ends the loop (and the
    test): librdkafka's transactional producer cannot go on after one."""

    def __init__(self, transactional_id: str, bootstrap: str, stop: threading.Event):
        super().__init__(daemon=True, name=transactional_id)
        self.tid, self.bootstrap, self.stop = transactional_id, bootstrap, stop
        self.txns: list[Txn] = []
        self.fatal: list[str] = []
        self.lock = threading.Lock()

    def client_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.fatal.append(f"error_cb: {err}")

    def committed_since(self, since: float) -> int:
        with self.lock:
            return sum(1 for t in self.txns if t.outcome == COMMITTED and t.ended_at is not None
                       and t.ended_at >= since)

    def in_flight(self) -> str:
        """The transaction open now, if any."""
        with self.lock:
            open_ = [t for t in self.txns if t.ended_at is None]
        return f"transaction {open_[-1].number}" if open_ else "none"

    def summary(self) -> str:
        with self.lock:
            counts = Counter(t.outcome for t in self.txns if t.ended_at is not None)
            errors = [e for t in self.txns for e in t.errors][-3:]
        return (f"{self.tid}: {dict(counts)}, fatal {self.fatal}, alive {self.is_alive()}, "
                f"last errors {errors}")

    def run(self) -> None:
        try:
            self.loop()
        except Exception as e:  # noqa: BLE001 - reported as the test's failure
            self.fatal.append(f"{type(e).__name__}: {e}")

    def loop(self) -> None:
        producer = Producer({**rdkafka_base(self.bootstrap), "transactional.id": self.tid,
                             "error_cb": self.client_error})
        err = self.retried(lambda: producer.init_transactions(TXN_CALL_S), None)
        if err is not None:
            self.fatal.append(f"init_transactions: {err}")
            return
        n = 0
        while not self.stop.is_set() and not self.fatal:
            txn = Txn(self.tid, n, [f"{self.tid}-{n}-{i}" for i in range(PER_TXN)])
            with self.lock:
                self.txns.append(txn)
            producer.begin_transaction()
            txn.outcome = self.transact(producer, txn, n % ABORT_EVERY == ABORT_EVERY - 1)
            txn.ended_at = time.monotonic()
            n += 1

    def transact(self, producer: Producer, txn: Txn, on_purpose: bool) -> str:
        """Sends the begun transaction's values and ends it; returns its outcome."""
        if self.send(producer, txn):
            return FAILED if self.abort(producer, txn) else UNKNOWN
        producer.poll(OPEN_S)
        if on_purpose:
            producer.flush(TXN_CALL_S)  # the records in the log, for readers to skip
            self.abort(producer, txn)
            return ABORTED  # never asked to commit, whatever the abort said
        return self.commit(producer, txn)

    def send(self, producer: Producer, txn: Txn) -> bool:
        """Sends the transaction's values; True when the producer refused one because the
        transaction must be aborted."""
        for i, value in enumerate(txn.values):
            while True:
                try:
                    producer.produce(TOPIC, value=value.encode(), partition=i % PARTITIONS)
                    break
                except BufferError:
                    producer.poll(0.1)
                except KafkaException as e:
                    err = e.args[0]
                    txn.errors.append(f"produce: {err}")
                    if err.fatal():
                        self.fatal.append(f"produce: {err}")
                        raise
                    if err.txn_requires_abort() or err.code() == KafkaError._STATE:
                        return True  # _STATE: an earlier send of it failed (abortable)
                    raise
            producer.poll(0)
        return False

    def retried(self, call_, txn: Txn | None) -> KafkaError | None:
        """Calls `call_` until it succeeds (None) or fails with an error that is not
        retriable, or RETRY_S passed (that error). A fatal error is recorded."""
        deadline = time.monotonic() + RETRY_S
        while True:
            try:
                call_()
                return None
            except KafkaException as e:
                err = e.args[0]
                if txn is not None:
                    txn.errors.append(str(err))
                if err.fatal():
                    self.fatal.append(str(err))
                    return err
                if not err.retriable() or time.monotonic() > deadline:
                    return err

    def abort(self, producer: Producer, txn: Txn) -> bool:
        return self.retried(lambda: producer.abort_transaction(TXN_CALL_S), txn) is None

    def commit(self, producer: Producer, txn: Txn) -> str:
        err = self.retried(lambda: producer.commit_transaction(TXN_CALL_S), txn)
        if err is None:
            return COMMITTED
        if err.fatal():
            return UNKNOWN
        if err.txn_requires_abort():
            return FAILED if self.abort(producer, txn) else UNKNOWN
        # Neither committed nor known to need an abort (retries ran out): try the abort,
        # which cannot undo a commit that went through.
        self.abort(producer, txn)
        return UNKNOWN


def wait_for_commits(writers: list[Writer], count: int, since: float, what: str,
                     deadline_s: float = PROGRESS_S) -> None:
    """Until each writer committed `count` transactions that ended after `since`; fails
    at once on a fatal error or a writer that stopped."""
    def enough() -> bool:
        for w in writers:
            assert not w.fatal, f"{w.tid}: fatal error ({what}): {w.fatal}"
            assert w.is_alive(), f"{w.tid} stopped ({what}): {w.summary()}"
        return all(w.committed_since(since) >= count for w in writers)
    try:
        wait_until(enough, f"{count} commits of each producer {what}", deadline_s)
    except AssertionError as e:
        raise AssertionError(f"{e}\n  " + "\n  ".join(w.summary() for w in writers)) from None


def find_coordinator(bootstrap: str, transactional_id: str,
                     key_type: int = TRANSACTION_KEY_TYPE) -> int | str:
    """The node this broker names as `transactional_id`'s coordinator (FindCoordinator
    v1, key type 1; with `key_type` 0, a group's), or a string saying why none."""
    key = transactional_id.encode()
    try:
        r = call(bootstrap, FIND_COORDINATOR_KEY, 1,
                 struct.pack(">h", len(key)) + key + struct.pack(">b", key_type))
    except (OSError, AssertionError) as e:
        return f"no answer: {e}"
    r.take(">i")  # throttle
    error, message, node = r.take(">h"), r.string(), r.take(">i")
    return node if error == 0 else f"error {error} {message}"


def coordinator_of(bootstraps: list[str], alive: set[int], transactional_id: str,
                   deadline_s: float, key_type: int = TRANSACTION_KEY_TYPE) -> int:
    """The coordinator of `transactional_id` once every live broker names the same live
    node in FindCoordinator and that node leads the id's `__transaction_state`
    partition (replicated on three brokers); with `key_type` 0, of a group, the leader
    of its `__consumer_offsets` partition."""
    seen: list[str] = []
    state = STATE_TOPICS[key_type]

    def agreed() -> int | None:
        answers = {n: find_coordinator(bootstraps[n - 1], transactional_id, key_type)
                   for n in sorted(alive)}
        try:
            topic = metadata(bootstraps[min(alive) - 1])["topics"].get(state)
        except (OSError, AssertionError) as e:
            seen[:] = [f"FindCoordinator {answers}, Metadata: {e}"]
            return None
        if topic is None:
            seen[:] = [f"FindCoordinator {answers}, no {state} in Metadata"]
            return None
        index = txn_state_partition(transactional_id, len(topic["partitions"]))
        partition = topic["partitions"][index]
        seen[:] = [f"FindCoordinator {answers}, {state} partition {index} of "
                   f"{len(topic['partitions'])}: {partition}"]
        nodes = set(answers.values())
        if len(nodes) != 1:
            return None
        node = nodes.pop()
        if node not in alive or partition["leader"] != node:
            return None
        assert len(partition["replicas"]) == 3, f"{state} is not replicated: {seen[0]}"
        return node
    try:
        return wait_until(agreed, f"the brokers agree on the coordinator of {transactional_id}",
                          deadline_s)
    except AssertionError as e:
        raise AssertionError(f"{e}; last seen: {seen[0] if seen else '-'}") from None


def end_offsets(bootstrap: str, isolation: str, topic: str = TOPIC) -> dict[int, int]:
    """Each partition's end as a consumer of `isolation` is told it (ListOffsets latest:
    the high watermark, or for read_committed the last stable offset)."""
    consumer = Consumer({**rdkafka_base(bootstrap), "group.id": f"txn-ends-{isolation}",
                         "isolation.level": isolation})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                                  cached=False)[1]
                for p in range(PARTITIONS)}
    finally:
        consumer.close()


def settled_ends(bootstrap: str, topic: str = TOPIC) -> dict[int, int]:
    """The last stable offsets, once they reached the high watermarks: every transaction
    ended (each partition's writes stopped before). Both are asked again each time: a
    commit returns once it is decided, its markers follow, moving the high watermarks."""
    high: dict[int, int] = {}
    stable: dict[int, int] = {}

    def settled() -> bool:
        stable.update(end_offsets(bootstrap, "read_committed", topic))
        high.update(end_offsets(bootstrap, "read_uncommitted", topic))
        return stable == high
    try:
        wait_until(settled, "the last stable offsets at the high watermarks", FAILOVER_S)
    except AssertionError as e:
        raise AssertionError(f"{e}: a transaction left open: last stable offsets {stable}, "
                             f"high watermarks {high}") from None
    return stable


def read_committed(bootstrap: str, ends: dict[int, int], topic: str = TOPIC) -> list[str]:
    """Every value a read_committed consumer reads from the start of each partition up to
    its end in `ends`."""
    consumer = Consumer({**rdkafka_base(bootstrap), "group.id": "txn-final-read",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
    values: list[str] = []
    done: set[int] = set()
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(done) < len(ends):
            assert time.monotonic() < deadline, \
                f"the final read did not reach the ends {ends}: at the end of {sorted(done)}"
            for m in consumer.consume(num_messages=500, timeout=0.5):
                if m.error() is None:
                    values.append(m.value().decode())
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    p = m.partition()
                    position = consumer.position([TopicPartition(topic, p)])[0].offset
                    if position >= ends[p]:
                        done.add(p)
                else:
                    raise AssertionError(f"final read: {m.error()}")
    finally:
        consumer.close()
    return values


def check(txns: list[Txn], read: list[str]) -> list[str]:
    """The anomalies of what was read against the transactions' outcomes."""
    anomalies: list[str] = []
    times = Counter(read)
    sent = {v for t in txns for v in t.values}
    unknown = sorted(v for v in times if v not in sent)
    if unknown:
        anomalies.append(f"{len(unknown)} values read that nobody sent: {unknown[:5]}")
    twice = sorted(v for v, n in times.items() if n > 1)
    if twice:
        anomalies.append(f"{len(twice)} values read more than once: {twice[:5]}")
    for t in txns:
        present = sum(1 for v in t.values if v in times)
        name = f"{t.writer} transaction {t.number} ({t.outcome})"
        if t.outcome == COMMITTED and present != len(t.values):
            anomalies.append(f"lost: {name}: {len(t.values) - present} of {len(t.values)} "
                             f"values not read")
        elif t.outcome == ABORTED and present:
            anomalies.append(f"aborted but read: {name}: {present} of {len(t.values)} values")
        elif t.outcome in (FAILED, UNKNOWN) and 0 < present < len(t.values):
            anomalies.append(f"half a transaction: {name}: {present} of {len(t.values)} "
                             f"values read, errors {t.errors[-2:]}")
    return anomalies


def test_transactions_survive_the_coordinators_sigkill(make_broker):
    brokers, bootstraps, _ = cluster_with_topic(make_broker, TOPIC, PARTITIONS,
                                                {"min.insync.replicas": "2"})
    bootstrap = ",".join(bootstraps)
    started = time.monotonic()
    stop = threading.Event()
    writers = [Writer(tid, bootstrap, stop) for tid in TRANSACTIONAL_IDS]
    failed = True
    try:
        for w in writers:
            w.start()
        wait_for_commits(writers, BEFORE_KILL, started, "before the kill")

        victim = coordinator_of(bootstraps, NODES, TRANSACTIONAL_IDS[0], FAILOVER_S)
        others = {tid: coordinator_of(bootstraps, NODES, tid, FAILOVER_S)
                  for tid in TRANSACTIONAL_IDS[1:]}
        print(f"coordinator of {TRANSACTIONAL_IDS[0]}: node {victim} (killed); of the "
              f"others: {others}")
        killed_at = time.monotonic()
        brokers[victim - 1].kill()
        print("in flight at the kill: " + ", ".join(f"{w.tid} {w.in_flight()}" for w in writers))
        alive = NODES - {victim}
        moved = coordinator_of(bootstraps, alive, TRANSACTIONAL_IDS[0], FAILOVER_S)
        print(f"coordinator of {TRANSACTIONAL_IDS[0]} after the kill: node {moved}, "
              f"{time.monotonic() - killed_at:.1f} s after it")
        wait_for_commits(writers, WHILE_DOWN, killed_at, "after the kill, its broker down",
                         FAILOVER_S)

        # Back on the port it had, as a restarted broker of a real cluster is.
        victim_broker = brokers[victim - 1]
        victim_broker.listen = victim_broker.bootstrap
        victim_broker.start()
        for topic in (TOPIC, TXN_STATE):
            wait_until(lambda topic=topic: led_by(bootstraps, topic, NODES, 3),
                       f"the restarted broker back in every ISR of {topic}", CLUSTER_UP_S * 2)
        # The controller may give the partition back to its preferred leader: the
        # coordinator can move once more.
        back = coordinator_of(bootstraps, NODES, TRANSACTIONAL_IDS[0], FAILOVER_S)
        print(f"coordinator of {TRANSACTIONAL_IDS[0]} once the broker rejoined: node {back}")
        rejoined_at = time.monotonic()
        wait_for_commits(writers, AFTER_RESTART, rejoined_at, "after the restart")
        failed = False
    finally:
        stop.set()
        for w in writers:  # each ends its transaction; not waited for long after a failure
            w.join(10.0 if failed else DEADLINE_S)
    assert not any(w.is_alive() for w in writers), \
        "a producer still in its transaction:\n  " + "\n  ".join(w.summary() for w in writers)
    fatal = [f"{w.tid}: {e}" for w in writers for e in w.fatal]
    assert not fatal, f"fatal producer errors: {fatal}"

    high = settled_ends(bootstrap)
    read = read_committed(bootstrap, high)

    txns = [t for w in writers for t in w.txns]
    outcomes = Counter(t.outcome for t in txns)
    after_kill = {w.tid: w.committed_since(killed_at) for w in writers}
    print(f"transactions: {dict(outcomes)}; committed after the kill: {after_kill}; "
          f"values read: {len(read)}; high watermarks {high}; "
          f"{time.monotonic() - started:.0f} s")
    anomalies = check(txns, read)
    for a in anomalies[:20]:
        print(f"  {a}")
    assert not anomalies, f"{len(anomalies)} anomalies: {anomalies[:10]}"
    assert all(n >= WHILE_DOWN + AFTER_RESTART for n in after_kill.values()), after_kill


def copy_topics(make_broker, records: int = COPY_RECORDS):
    """Three brokers, the copy's input and output topics (RF 3, min.insync.replicas=2)
    and the first `records` input records; returns the brokers and their addresses."""
    brokers, bootstraps, _ = cluster_with_topic(make_broker, COPY_INPUT, PARTITIONS,
                                                {"min.insync.replicas": "2"})
    bootstrap = ",".join(bootstraps)
    admin = AdminClient(rdkafka_base(bootstrap))
    raise_on_error(admin.create_topics(
        [NewTopic(COPY_OUTPUT, num_partitions=PARTITIONS, replication_factor=3,
                  config={"min.insync.replicas": "2"})],
        operation_timeout=ADMIN_TIMEOUT_S, request_timeout=ADMIN_TIMEOUT_S))
    wait_until(lambda: led_by(bootstraps, COPY_OUTPUT, NODES, 3), "the output topic led, ISR 3",
               CLUSTER_UP_S)
    produce_input(bootstrap, range(records))
    return brokers, bootstraps


def produce_input(bootstrap: str, numbers: range, pace_s: float = 0.0) -> None:
    """Input records "v<i>" for each i of `numbers`, round robin over the partitions,
    one every `pace_s` seconds; every one acknowledged (acks=all)."""
    producer = Producer({**rdkafka_base(bootstrap), "acks": "all"})
    for i in numbers:
        producer.produce(COPY_INPUT, key=b"k%d" % i, value=b"v%d" % i, partition=i % PARTITIONS)
        producer.poll(0)
        time.sleep(pace_s)
    assert producer.flush(60) == 0, "input records not acknowledged"


def restart_in_every_isr(brokers, bootstraps: list[str], node: int) -> None:
    """Starts the killed `node` again on its port and waits for it in every ISR of the
    copy's topics and of both coordinators' state topics."""
    broker = brokers[node - 1]
    broker.listen = broker.bootstrap
    broker.start()
    for topic in (COPY_INPUT, COPY_OUTPUT, *STATE_TOPICS.values()):
        wait_until(lambda topic=topic: led_by(bootstraps, topic, NODES, 3),
                   f"the restarted broker back in every ISR of {topic}", CLUSTER_UP_S * 2)


def assert_copied_once(bootstrap: str) -> None:
    """Every input record's copy read exactly once by a read_committed reader, and
    nothing else (a copy from an aborted transaction)."""
    read = read_committed(bootstrap, settled_ends(bootstrap, COPY_OUTPUT), COPY_OUTPUT)
    copies = Counter(read)
    twice = sorted(v for v, n in copies.items() if n > 1)
    want = {f"copy:v{i}" for i in range(COPY_RECORDS)}
    missing = sorted(want - set(copies))
    other = sorted(set(copies) - want)
    assert not (twice or missing or other), (
        f"read_committed copy: {len(twice)} copied twice {twice[:5]}, {len(missing)} missing "
        f"{missing[:5]}, {len(other)} not copies (aborted) {other[:5]}")


def test_a_java_exactly_once_copy_carries_on_when_its_coordinator_is_killed(make_broker,
                                                                           tmp_path):
    """kafka-clients 4's consume-transform-produce loop (tests/java/src/TransactionalCopy
    .java: read_committed consumer in a group, sendOffsetsToTransaction, every 5th
    transaction aborted on purpose) copies a topic while its transaction coordinator is
    killed, and restarted once the copy went on without it: no error, and every input
    record's copy read exactly once by read_committed readers, nothing aborted."""
    brokers, bootstraps = copy_topics(make_broker)
    bootstrap = ",".join(bootstraps)
    java = JavaClient("lib-4", "classes-4", "TransactionalCopy", tmp_path)
    copy = java.start("TransactionalCopy", "--bootstrap", bootstrap, "--input", COPY_INPUT,
                      "--output", COPY_OUTPUT, "--group", "rf3-copier",
                      "--transactional-id", COPY_TXN_ID, "--abort-every", "5",
                      "--batch", str(COPY_BATCH))

    def commits() -> int:
        return sum(1 for e in copy.events if e.get("event") == "committed")

    def committed(n: int, what: str, deadline_s: float = PROGRESS_S) -> None:
        copy.wait_event(lambda e: e.get("event") == "committed" and commits() >= n,
                        deadline_s, what)
    try:
        committed(BEFORE_KILL, f"{BEFORE_KILL} commits before the kill")
        victim = coordinator_of(bootstraps, NODES, COPY_TXN_ID, FAILOVER_S)
        before = commits()
        killed_at = time.monotonic()
        print(f"coordinator of {COPY_TXN_ID}: node {victim} (killed after {before} commits)")
        brokers[victim - 1].kill()
        alive = NODES - {victim}
        moved = coordinator_of(bootstraps, alive, COPY_TXN_ID, FAILOVER_S)
        committed(before + WHILE_DOWN, f"commits after the kill, at node {moved}", FAILOVER_S)
        print(f"coordinator of {COPY_TXN_ID} after the kill: node {moved}; committing again "
              f"{time.monotonic() - killed_at:.1f} s after it")
        restart_in_every_isr(brokers, bootstraps, victim)
        copy.wait_event(lambda e: e.get("event") == "committed"
                        and e.get("total", 0) >= COPY_RECORDS, DEADLINE_S,
                        f"the copy of all {COPY_RECORDS} records committed")
    finally:
        copy.kill()
    aborted = sum(1 for e in copy.events if e.get("event") == "aborted")
    print(f"copier: {commits()} commits, {aborted} aborted on purpose, after the kill "
          f"{commits() - before}; done {time.monotonic() - killed_at:.0f} s after the kill")
    assert_copied_once(bootstrap)


@pytest.fixture(scope="module")
def franztxn(tmp_path_factory) -> Path:
    return build_go_command(tmp_path_factory, "franztxn")


@pytest.mark.parametrize("victim_of", ["transaction", "group"])
def test_a_franz_go_exactly_once_copy_carries_on_when_its_coordinator_is_killed(
        make_broker, franztxn, tmp_path, victim_of):
    """franz-go's GroupTransactSession (tests/go/cmd/franztxn, default settings: a
    read_committed group consumer, the group's offsets committed in each transaction)
    copies a topic while the coordinator of its transactional id, or of its group, is
    killed and later restarted on its port: the copier reports no error and commits again
    while the broker is down, and every input record's copy is read exactly once by
    read_committed readers, nothing else."""
    brokers, bootstraps = copy_topics(make_broker, GO_COPY_FIRST)
    bootstrap = ",".join(bootstraps)
    # The rest of the input arrives while the copy runs, so that the kill finds it
    # between transactions or in one.
    rest = threading.Thread(target=produce_input, daemon=True, args=(
        bootstrap, range(GO_COPY_FIRST, COPY_RECORDS), GO_COPY_PACE_S))
    key, key_type = {"transaction": (GO_COPY_TXN_ID, TRANSACTION_KEY_TYPE),
                     "group": (GO_COPY_GROUP, GROUP_KEY_TYPE)}[victim_of]
    stderr = open(tmp_path / "franztxn.stderr.log", "wb")
    copier = subprocess.Popen([str(franztxn), "-brokers", bootstrap, "-input", COPY_INPUT,
                               "-output", COPY_OUTPUT, "-group", GO_COPY_GROUP,
                               "-txn-id", GO_COPY_TXN_ID],
                              stdout=subprocess.PIPE, stderr=stderr)
    events: list[dict] = []
    reader = threading.Thread(target=lambda: events.extend(
        json.loads(line) for line in copier.stdout), daemon=True)
    reader.start()
    rest.start()

    def total() -> int:
        errors = [e for e in events if e.get("event") == "error"]
        assert not errors, f"franztxn: {errors}"
        return max((e["total"] for e in events if e.get("event") == "committed"), default=0)

    def copied(n: int, what: str, deadline_s: float = PROGRESS_S) -> int:
        return wait_until(lambda: total() >= n and total(), what, deadline_s)
    try:
        copied(GO_COPY_FIRST, "the first records copied")
        victim = coordinator_of(bootstraps, NODES, key, FAILOVER_S, key_type)
        before = total()
        killed_at = time.monotonic()
        print(f"coordinator of {victim_of} {key}: node {victim} (killed at {before} copied)")
        brokers[victim - 1].kill()
        moved = coordinator_of(bootstraps, NODES - {victim}, key, FAILOVER_S, key_type)
        print(f"coordinator after the kill: node {moved}")
        restart_in_every_isr(brokers, bootstraps, victim)
        copied(COPY_RECORDS, f"the copy of all {COPY_RECORDS} records committed", DEADLINE_S)
        rest.join(DEADLINE_S)
        print(f"copied {total()} in {len(events)} events; done "
              f"{time.monotonic() - killed_at:.0f} s after the kill")
    finally:
        copier.kill()
        copier.wait(30)
        stderr.close()
    assert_copied_once(bootstrap)
