"""Randomized faults on three brokers, and a history checker over what the clients saw.

Goal: under a fault schedule drawn from a printed seed (SIGKILL and restart of a broker,
of a partition's leader, of a transactional id's coordinator, SIGSTOP and SIGCONT, a
partition's leader or a coordinator cut off from the other brokers by packet filter
rules, one batch of a killed broker's log damaged before it restarts, a broker's wall
clock stepped forward or back, a broker killed and its unsynced writes lost), idempotent
producers (librdkafka, acks=all) lose no acknowledged write, write nothing
twice, and send in order; transactional producers' transactions are read whole once
committed and never once aborted; no offset ever holds two values; readers with
assign() see every offset once, in order, but for transaction markers (and, reading
read_committed, aborted data); read_committed readers and group members never read an
aborted transaction, nor one before its commit was asked for; group members read only
values that were sent and, once healed, read every acknowledged and committed one; no
producer fails for good (tests/python/history.py lists the checks); nobody reads a
batch that fails its CRC (readers check CRCs, the raw fetch below too), and once the
brokers stop every replica's copy of each partition on disk is whole, passes its CRCs up
to the high watermark and is the same, byte for byte, as the others': a damaged replica
repaired itself from the others and spread nothing.
Method: three brokers (cluster_support), a topic at replication factor 3 with
min.insync.replicas=2. Two idempotent writers send unique values at a steady pace; two
transactional writers (their own transactional ids, so their coordinators are the
leaders of two partitions of the replicated `__transaction_state`) send TXN_VALUES
unique values per transaction over the partitions of the same topic and commit, every
ABORT_EVERY'th transaction aborted on purpose once its records are in the log. Two
readers read with assign() from the start, one read_committed and one read_uncommitted,
and two members of one group read (read_committed) and commit, while the schedule runs:
one fault at a time, each held 2 to 6 s, 1 to 3 s apart.

The network partition ("isolate"): where this process may add iptables rules (root, the
binary, a probe rule accepted) each broker listens on its own loopback address and runs
under its own group id, and OUTPUT rules drop what the victim's sockets send to the others
and theirs to it: Raft and replication traffic stop both ways, while the clients still
reach every broker (as in a partition between machines that leaves the clients' network
alone). The rules go at the end of the hold, at the healing whatever happens, and at
exit. Without a usable packet filter the kind is left out of the draw (and said so).
The damage ("corrupt"): the broker is killed, then one batch of one of its segment files
of the topic, picked at random, gets one bit flipped in the bytes its CRC covers (or in
the CRC), or the file is cut inside that batch; the broker starts again on the same port
after the hold, and what its log then says about the damage is printed.
The clock step ("clock"): where Debian's libfaketime is installed every broker runs
under it (LD_PRELOAD) and one broker's wall clock is set 2 to 55 s ahead or behind for
the hold, its monotonic clock untouched (WallClocks); without the library the kind is
left out of the draw (and said so).
The lost writes ("lose-unsynced"): where FUSE can be mounted (root, /dev/fuse, fusepy and
libfuse2) one broker, drawn from the seed, keeps its data directory on
tests/python/lazyfs.py, which holds written data in memory until the file is synced;
the fault kills that broker, drops everything it had not synced (as a power loss drops
a page cache) and restarts it after the hold. A minority loses its unsynced writes: the
others' copies must make up for it, and the acknowledgement of a write must never have
counted a copy that was not on disk.

Then every broker is running
again, the writers stop once their sends and transactions are answered, the last stable
offsets reach the high watermarks (no transaction left open), the readers catch up to
them, a fresh read_committed consumer reads each partition whole, and a raw fetch maps
each partition's batches (which offsets are markers, which hold aborted data); the
checker compares everything. Last, the brokers are killed and their copies of the
topic read from disk.

In CI one schedule of 30 s runs, always of the same seed. The longer run, of random
seeds, with its seeds and results written to `bench/results/cluster/history.md`
(append), is:
`HEADWAY_HISTORY_SCHEDULES=100 HEADWAY_HISTORY_RESULTS=bench/results/cluster/history.md
pytest tests/python/test_cluster_history.py`; `HEADWAY_HISTORY_SEED=N` replays one seed.
"""

from __future__ import annotations

import atexit
import glob
import os
import random
import re
import shutil
import signal
import subprocess
import struct
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, \
    Producer, TopicPartition
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

from cluster_support import call, cluster_with_topic, led_by, metadata
from history import ABORTED, COMMITTED, INDETERMINATE, Batch, History, Txn, check
from support import rdkafka_base, wait_until
from test_cluster_isolation import COMMENT, group_of, iptables, iptables_binary, pid_alive, \
    remove_rules, subnet
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
CORRUPT_MESSAGE = 2
GROUP = "history-group"
# After healing: every broker back in every ISR, the writers' sends answered, the
# readers at the high watermarks. Generous: a loaded 2-core machine.
HEAL_S = 120.0
MESSAGE_TIMEOUT_MS = 30_000
# What librdkafka reports for a record batch that fails its CRC (check.crcs), and what a
# broker answers for a stored batch it finds damaged (CORRUPT_MESSAGE, 2, librdkafka's
# INVALID_MSG): either is a read of damaged data.
DAMAGED_READ = {KafkaError._BAD_MSG, KafkaError.INVALID_MSG}
# The fault kinds; "isolate" only where packet filter rules can be added, "clock" only
# with libfaketime, "lose-unsynced" only where FUSE mounts.
# HEADWAY_HISTORY_FAULTS=corrupt,isolate draws from those alone.
FAULT_KINDS = ["kill", "kill-leader", "stop", "kill-coordinator", "corrupt"]
ONLY_KINDS = [k for k in os.environ.get("HEADWAY_HISTORY_FAULTS", "").split(",") if k]
# A stepped wall clock is off by CLOCK_STEP_S seconds at most, either way: below the
# clients' 60 s transaction timeout (a transaction open across a larger step forward is
# aborted by its coordinator, as Kafka's would be), above their 45 s session timeout.
CLOCK_STEP_S = (2.0, 55.0)
# librdkafka's debug contexts for the readers and members (e.g. "fetch,consumer"), whose
# log lines then say why a reader moved where it did.
READER_DEBUG = os.environ.get("HEADWAY_HISTORY_RDKAFKA_DEBUG", "")
# The same for the idempotent writers (e.g. "eos,msg,protocol"): their lines say which
# answer made librdkafka bump its producer epoch.
WRITER_DEBUG = os.environ.get("HEADWAY_HISTORY_RDKAFKA_WRITER_DEBUG", "")
# The topic's segment size: small, so that each partition has several segments and a
# damaged batch may sit in a sealed segment as well as in the active one.
SEGMENT_BYTES = int(os.environ.get("HEADWAY_HISTORY_SEGMENT_BYTES", str(1 << 30)))
# Broker log lines that tell what a restart found in a damaged log.
REPAIR_RE = re.compile(r"truncat|repair|corrupt|crc|damag|invalid", re.IGNORECASE)


class Writer(threading.Thread):
    """Sends `w<id>-<n>` to partition n % PARTITIONS at a steady pace; a fatal error
    (an idempotent producer fenced by the broker) starts a new producer under a new
    writer id, since per-writer order is a promise of one producer."""

    def __init__(self, ident: int, bootstrap: str, history: History, stop: threading.Event):
        super().__init__(daemon=True)
        self.writer_id, self.bootstrap, self.history, self.stop = ident, bootstrap, history, stop
        self.fatal: list[str] = []

    def producer(self) -> Producer:
        settings = {**rdkafka_base(self.bootstrap), "enable.idempotence": True,
                    "message.timeout.ms": MESSAGE_TIMEOUT_MS, "linger.ms": 5,
                    "error_cb": self.client_error}
        if WRITER_DEBUG:
            settings["debug"] = WRITER_DEBUG
            del settings["logger"]
        return Producer(settings)

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
                    "isolation.level": "read_committed" if committed else "read_uncommitted",
                    "check.crcs": True}
        if READER_DEBUG:
            # To the process's stderr, as librdkafka writes without a logger.
            settings["debug"] = READER_DEBUG
            del settings["logger"]
        self.consumer = Consumer(settings)
        self.errors: list[str] = []
        self.refused: set[tuple[int, int]] = set()
        self.positions: dict[int, int] = {}

    def run(self) -> None:
        partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        if self.group:
            self.consumer.subscribe([TOPIC])
        else:
            # From offset 0 (the log start: nothing is deleted here), not the logical
            # OFFSET_BEGINNING: librdkafka (2.16) answers a late ListOffsets reply it
            # calls outdated (sent to a leader that died, answered after its restart,
            # meanwhile the reader fetches from the new leader) by querying the logical
            # offset again, and reads the partition from its start a second time (seed
            # 4235925542, `fetch` debug: "outdated offset response: (re)starting offset
            # query timer for offset BEGINNING"). An absolute offset needs no query.
            self.consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        while not self.stop.is_set():
            batch = self.consumer.consume(num_messages=200, timeout=0.2)
            at = time.monotonic()
            records = []
            for m in batch:
                if m.error() is None:
                    records.append((m.partition(), m.offset(), m.value().decode()))
                elif m.error().code() == KafkaError._AUTO_OFFSET_RESET:
                    self.errors.append(f"{self.name_}: offset reset: {m.error()}")
                elif m.error().code() in DAMAGED_READ:
                    where = (m.partition(), m.offset())
                    if where not in self.refused:  # once each: a refusal repeats
                        self.refused.add(where)
                        self.errors.append(f"{self.name_}: damaged data at {where[0]}/"
                                           f"{where[1]}: {m.error()}")
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


def final_read(bootstrap: str, history: History, marks: dict[int, tuple[int, int]],
               damaged: list[str]) -> None:
    """read_committed, every partition from the start to its high watermark (which the
    last stable offset reached): done at a partition once librdkafka's position there
    reached it (the position moves past markers too). Batches that fail their CRC, or
    that a broker calls corrupt, go to `damaged`."""
    consumer = Consumer({**rdkafka_base(bootstrap), "group.id": "history-final",
                         "enable.partition.eof": True, "isolation.level": "read_committed",
                         "check.crcs": True})
    partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    history.final = {p: {} for p in range(PARTITIONS)}
    history.final_start = {p: low for p, (low, _) in marks.items()}
    history.final_end = {p: high for p, (_, high) in marks.items()}
    deadline = time.monotonic() + HEAL_S
    refused: dict[int, str] = {}  # partition -> the damaged read it is stuck at
    try:
        while any(tp.offset < marks[tp.partition][1] for tp in consumer.position(partitions)):
            if time.monotonic() > deadline:
                # A partition whose leader refuses a damaged batch for good: an anomaly
                # (the replica was not repaired from the others), not a harness failure.
                assert refused, "the final read did not reach the watermarks"
                damaged += [f"final read stuck at {e}" for e in refused.values()]
                break
            for m in consumer.consume(num_messages=500, timeout=0.5):
                if m.error() is None and m.offset() < marks[m.partition()][1]:
                    history.final[m.partition()][m.offset()] = m.value().decode()
                    refused.pop(m.partition(), None)
                elif m.error() is not None and m.error().code() in DAMAGED_READ:
                    if m.partition() not in refused:
                        damaged.append(f"final read: damaged data at {m.partition()}/"
                                       f"{m.offset()}: {m.error()}")
                    refused[m.partition()] = f"{m.partition()}/{m.offset()}: {m.error()}"
    finally:
        consumer.close()


def fetch_batches(address: str, partition: int, offset: int,
                  damaged: list[str] | None = None) -> tuple[int, list[Batch]]:
    """One raw Fetch v4 (read_uncommitted) of the partition from `offset`, asked of the
    broker at `address`: its error and the complete batches returned, control batches
    included (their marker read from the control record's key). A batch that fails its
    CRC is named in `damaged`."""
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
        if damaged is not None and not b.validate_crc():
            damaged.append(f"raw fetch from {address}: batch {b.base_offset}.."
                           f"{b.last_offset} of partition {partition} fails its CRC")
        marker = None
        if b.is_control_batch:
            marker = "abort" if next(iter(b)).abort else "commit"
        batches.append(Batch(b.base_offset, b.last_offset, b.producer_id,
                             b.is_transactional, marker, b.producer_epoch))
    return error, batches


def map_the_log(bootstraps: list[str], history: History,
                marks: dict[int, tuple[int, int]], damaged: list[str]) -> None:
    """Every batch of each partition from its start to its high watermark, fetched raw
    from its leader, into `history.log`; batches failing their CRC into `damaged`."""
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
            error, got = fetch_batches(bootstraps[leader - 1], partition, offset, damaged)
            if error == CORRUPT_MESSAGE:
                # The leader refuses a damaged batch of its own copy: reported, and the map
                # of this partition ends here (the checker then finds what it misses).
                damaged.append(f"raw fetch of {partition} at {offset} from node {leader}: "
                               f"CORRUPT_MESSAGE")
                break
            got = [b for b in got if b.last >= offset and b.first < high]
            if error or not got:
                time.sleep(0.2)  # a leader moving, or nothing yet: ask again
                continue
            batches += got
            offset = got[-1].last + 1
        history.log[partition] = batches


# -- a network partition between brokers ---------------------------------------------------

def broker_hosts() -> dict[int, str]:
    """Node N's own loopback address, 127.A.B.(10 + N): A.B from this test process's pid
    (parallel runs apart), the last byte apart from the other cluster tests' addresses."""
    return {n: f"{subnet()}.{10 + n}" for n in NODES}


def packet_filter() -> tuple[str | None, str]:
    """The iptables binary when rules can be added here (root, the binary, a probe rule
    accepted), else None; and why not."""
    if os.geteuid() != 0:
        return None, "not root"
    binary = iptables_binary()
    if binary is None:
        return None, "no iptables binary"
    probe = ["-d", "127.255.255.254", "-m", "comment", "--comment", COMMENT, "-j", "DROP"]
    try:
        added = iptables(binary, "-A", "OUTPUT", *probe)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"iptables did not run: {e}"
    if added.returncode != 0:
        return None, f"iptables refused a rule: {added.stderr.strip()}"
    iptables(binary, "-D", "OUTPUT", *probe)
    stale = remove_rules(binary, lambda pid: pid != os.getpid() and not pid_alive(pid))
    if stale:
        print(f"removed {stale} packet filter rules left by test processes that are gone")
    return binary, ""


class NetworkCut:
    """Cuts one broker off from the others as a network partition between machines does:
    OUTPUT rules (each loopback packet passes OUTPUT once) drop what the victim's sockets
    send to the others' addresses and what the others' sockets send to the victim's, told
    apart by the group id each broker runs as. Controller (Raft) and replication traffic
    stop both ways; the test's clients, running as another group, still reach every
    broker, the isolated one included. Every rule carries this process's comment, so
    that a later run removes it should this process die before healing."""

    def __init__(self, binary: str, hosts: dict[int, str], groups: dict[int, int]):
        self.binary, self.hosts, self.groups = binary, hosts, groups
        self.rules: list[list[str]] = []
        atexit.register(self.heal)

    def isolate(self, victim: int) -> None:
        for other in sorted(NODES - {victim}):
            for source, destination in ((victim, other), (other, victim)):
                rule = ["-m", "owner", "--gid-owner", str(self.groups[source]),
                        "-d", self.hosts[destination],
                        "-m", "comment", "--comment", COMMENT, "-j", "DROP"]
                done = iptables(self.binary, "-A", "OUTPUT", *rule)
                assert done.returncode == 0, f"iptables -A OUTPUT {rule}: {done.stderr}"
                self.rules.append(rule)

    def heal(self) -> None:
        """Removes every rule of this process; the brokers hear each other again from the
        first rule removed."""
        failed = []
        while self.rules:
            done = iptables(self.binary, "-D", "OUTPUT", *self.rules.pop())
            if done.returncode != 0:
                failed.append(done.stderr.strip())
        remove_rules(self.binary, lambda pid: pid == os.getpid())
        assert not failed, f"iptables -D failed: {failed}"


# -- a broker's wall clock stepped --------------------------------------------------------

def faketime_library() -> tuple[str | None, str]:
    """Debian's libfaketime (its build for threaded programs, which scripts/setup installs)
    when it is here, else None; and why not."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    if not found:
        return None, "Debian's libfaketime is not installed (scripts/setup installs it)"
    return found[0], ""


class WallClocks:
    """Each broker runs under libfaketime (LD_PRELOAD) and reads its wall clock's offset
    from a file of its own: "+37" there sets that broker's wall clock (CLOCK_REALTIME:
    record timestamps, group session, share lock and transaction timeouts, time-based
    retention, everything Kafka reads from its wall clock too) 37 s ahead within a second
    (the library reads the file again at most once a second), "+0" back. Its monotonic
    clock (Raft elections, replication and request deadlines) runs on undisturbed, as
    when NTP or an operator steps one machine's clock."""

    def __init__(self, library: str):
        self.directory = Path(tempfile.mkdtemp(prefix="headway-clocks-"))
        self.files = {n: self.directory / f"node-{n}" for n in NODES}
        for f in self.files.values():
            f.write_text("+0\n")
        # Both names of the monotonic switch: libfaketime took the FAKETIME_ prefix in
        # 0.9.8 and still reads the old one.
        self.env = {n: {"LD_PRELOAD": library, "FAKETIME_TIMESTAMP_FILE": str(f),
                        "FAKETIME_CACHE_DURATION": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                        "DONT_FAKE_MONOTONIC": "1"} for n, f in self.files.items()}

    def set(self, node: int, seconds: float) -> None:
        """Node's wall clock `seconds` off true time (0: true time), in one rename so the
        library never reads half a line."""
        staged = self.files[node].with_suffix(".new")
        staged.write_text(f"{seconds:+.0f}\n")
        staged.replace(self.files[node])

    def heal(self) -> None:
        for node in NODES:
            self.set(node, 0)

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


# -- a broker's unsynced writes lost ------------------------------------------------------

LAZYFS = Path(__file__).parent / "lazyfs.py"


def lazy_filesystem() -> tuple[bool, str]:
    """Whether tests/python/lazyfs.py can mount here (root, /dev/fuse, fusepy and
    Debian's libfuse2), and why not."""
    if os.geteuid() != 0:
        return False, "not root"
    if not Path("/dev/fuse").exists():
        return False, "no /dev/fuse"
    try:
        import fuse  # noqa: F401 (fusepy loads libfuse2 as it is imported)
    except (ImportError, OSError, EnvironmentError) as e:
        return False, f"fusepy or libfuse2 missing ({e}; scripts/setup installs them)"
    return True, ""


class LazyMount:
    """One broker's data directory on tests/python/lazyfs.py: what the broker wrote and
    did not sync is held in the file system's memory, and `clear` drops it, as a power
    loss drops a page cache."""

    def __init__(self, backing: Path, mount: Path):
        self.mount = mount
        backing.mkdir(parents=True, exist_ok=True)
        mount.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([sys.executable, str(LAZYFS), str(backing), str(mount)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=open(backing.parent / "lazyfs.stderr.log", "ab"),
                                     text=True)
        line = self.proc.stdout.readline()
        assert line.strip() == "mounted", f"lazyfs did not mount {mount}: {line!r}"

    def clear(self) -> str:
        """Drops every unsynced write (its broker must be dead); what was dropped."""
        self.proc.stdin.write("clear\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().split()
        assert line[:1] == ["cleared"], f"lazyfs answered {line}"
        return f"{int(line[1])} unsynced bytes in {int(line[2])} files dropped"

    def unmount(self) -> None:
        if self.proc.poll() is None:
            done = subprocess.run(["umount", str(self.mount)], capture_output=True, timeout=60)
            if done.returncode != 0:
                # Still in use (a process not yet reaped): detached now, gone when freed.
                subprocess.run(["umount", "-l", str(self.mount)], capture_output=True,
                               timeout=60)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


# -- damage to a stopped replica's log ----------------------------------------------------

def batches_in(segment: Path) -> list[tuple[int, int]]:
    """(position, size) of each whole batch of a segment file, by its length fields."""
    data, at, found = segment.read_bytes(), 0, []
    while at + 12 <= len(data):
        (length,) = struct.unpack_from(">i", data, at + 8)
        if length <= 0 or at + 12 + length > len(data):
            break
        found.append((at, 12 + length))
        at += 12 + length
    return found


def damage(data_dir: Path, partition: int, rng: random.Random) -> str:
    """Damages one batch of the partition's segment files in a stopped broker's data
    directory: flips one bit of a byte its CRC covers (the CRC itself included; the base
    offset and leader epoch before it are not covered, as in Kafka), or cuts the file
    inside the batch. Says what it did."""
    candidates = []
    # The partition drawn, or when it holds nothing yet (early in a schedule) the next.
    for p in [partition] + [q for q in range(PARTITIONS) if q != partition]:
        for segment in sorted((data_dir / "topics" / TOPIC / str(p)).glob("*.log")):
            candidates += [(segment, at, size) for at, size in batches_in(segment)]
        if candidates:
            break
    if not candidates:
        return "nothing to damage (no batch on disk)"
    segment, at, size = rng.choice(candidates)
    name = segment.relative_to(data_dir)
    offset = struct.unpack_from(">q", segment.read_bytes(), at)[0]
    if rng.random() < 0.5:
        position = at + rng.randrange(17, size)  # the CRC (17..21) and what it covers
        bit = rng.randrange(8)
        with open(segment, "r+b") as f:
            f.seek(position)
            byte = f.read(1)[0]
            f.seek(position)
            f.write(bytes([byte ^ (1 << bit)]))
            f.flush()
            os.fsync(f.fileno())
        return (f"bit {bit} of byte {position} flipped ({byte:#04x}), batch at {at} "
                f"(base offset {offset}, {size} bytes) of {name}")
    position = at + rng.randrange(1, size)
    length = segment.stat().st_size
    os.truncate(segment, position)
    return (f"cut at byte {position} of {length}, inside the batch at {at} (base offset "
            f"{offset}, {size} bytes) of {name}")


def check_replicas(brokers, marks: dict[int, tuple[int, int]]) -> list[str]:
    """Reads each stopped broker's copy of every partition from its segment files:
    every batch whole and passing its CRC, the batches covering the partition from its
    start to its high watermark (every replica is in sync), and the same bytes on every
    replica. The anomalies found: damage kept or copied to a replica."""
    anomalies = []
    for partition, (low, high) in marks.items():
        copies: dict[int, dict[int, bytes]] = {}
        for node in sorted(NODES):
            directory = brokers[node - 1].data_dir / "topics" / TOPIC / str(partition)
            batches: dict[int, bytes] = {}
            for segment in sorted(directory.glob("*.log")):
                data = segment.read_bytes()
                whole = batches_in(segment)
                end = whole[-1][0] + whole[-1][1] if whole else 0
                if end != len(data):
                    anomalies.append(f"node {node} {segment.name} of {partition}: "
                                     f"{len(data) - end} bytes after its last whole batch")
                for at, size in whole:
                    raw = data[at:at + size]
                    batch = DefaultRecordBatch(raw)
                    if not batch.validate_crc():
                        anomalies.append(f"node {node}: batch {batch.base_offset}.."
                                         f"{batch.last_offset} of {partition} at byte {at} "
                                         f"of {segment.name} fails its CRC")
                    batches[batch.base_offset] = raw
            expected, covered = low, True
            for base in sorted(batches):
                if base >= high:
                    break
                if base > expected:
                    covered = False
                last = DefaultRecordBatch(batches[base]).last_offset
                expected = max(expected, last + 1)
            if not covered or expected < high:
                anomalies.append(f"node {node}: partition {partition} does not hold every "
                                 f"offset from {low} to its high watermark {high}")
            copies[node] = {b: raw for b, raw in batches.items() if b < high}
        first = copies[min(copies)]
        for node, batches in copies.items():
            differ = [b for b in set(first) | set(batches) if first.get(b) != batches.get(b)]
            if differ:
                anomalies.append(f"partition {partition}: node {node}'s batches at "
                                 f"{sorted(differ)[:5]} differ from node {min(copies)}'s")
    return anomalies


class Faults:
    """One fault at a time from `rng`: kill and restart a broker, kill and restart a
    partition's leader or a transactional id's coordinator, stop and continue a broker,
    kill a broker and damage one batch of its log before restarting it, (with a
    NetworkCut) cut a partition's leader or a coordinator off from the other brokers,
    (with WallClocks) step a broker's wall clock forward or back, or (with a LazyMount)
    kill the broker on it and drop what it had not synced."""

    def __init__(self, brokers, bootstraps: list[str], rng: random.Random,
                 cut: NetworkCut | None = None, clocks: WallClocks | None = None,
                 lazy: tuple[int, LazyMount] | None = None):
        self.brokers, self.bootstraps, self.rng, self.cut = brokers, bootstraps, rng, cut
        self.clocks, self.lazy = clocks, lazy
        self.kinds = FAULT_KINDS + (["isolate"] if cut is not None else []) \
            + (["clock"] if clocks is not None else []) \
            + (["lose-unsynced"] if lazy is not None else [])
        if ONLY_KINDS:
            self.kinds = [k for k in self.kinds if k in ONLY_KINDS]
            assert self.kinds, f"none of {ONLY_KINDS} can be drawn here"
        self.log: list[str] = []
        # For each damaged log: the node, and where its broker's log of the restart begins.
        self.damaged: list[tuple[int, int, str]] = []

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
            kind = self.rng.choice(self.kinds)
            node = self.rng.choice(sorted(NODES))
            if kind == "kill-leader":
                node = self.leader_of(self.rng.randrange(PARTITIONS)) or node
            elif kind == "kill-coordinator":
                node = self.coordinator_of(f"history-txn-{self.rng.randrange(TXN_WRITERS)}") \
                    or node
            elif kind == "corrupt":
                # Half the time the partition's leader: the replica clients were served by.
                partition = self.rng.randrange(PARTITIONS)
                if self.rng.random() < 0.5:
                    node = self.leader_of(partition) or node
            elif kind == "isolate":
                if self.rng.random() < 0.5:
                    node, what = self.leader_of(self.rng.randrange(PARTITIONS)) or node, "leader"
                else:
                    tid = f"history-txn-{self.rng.randrange(TXN_WRITERS)}"
                    node, what = self.coordinator_of(tid) or node, "coordinator"
                kind = f"isolate ({what})"
            elif kind == "clock":
                step = self.rng.choice((-1, 1)) * self.rng.uniform(*CLOCK_STEP_S)
                kind = f"clock {step:+.0f}s"
            elif kind == "lose-unsynced":
                node = self.lazy[0]
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
            elif kind.startswith("isolate"):
                self.cut.isolate(node)
                try:
                    time.sleep(held)
                finally:
                    self.cut.heal()
            elif kind.startswith("clock"):
                self.clocks.set(node, step)
                try:
                    time.sleep(held)
                finally:
                    self.clocks.set(node, 0)
            elif kind == "lose-unsynced":
                broker.kill()
                self.log[-1] += f" ({self.lazy[1].clear()})"
                time.sleep(held)
                self.start_again(broker)
            elif kind == "corrupt":
                broker.kill()
                what = damage(broker.data_dir, partition, self.rng)
                self.log[-1] += f" ({what})"
                time.sleep(held)
                self.damaged.append((node, broker.stderr_path.stat().st_size, what))
                self.start_again(broker)
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

    def repairs(self) -> list[str]:
        """What each damaged broker logged about its log after the restart (the first
        lines that speak of truncation, repair, corruption or CRCs)."""
        found = []
        for node, start, what in self.damaged:
            with open(self.brokers[node - 1].stderr_path, "rb") as f:
                f.seek(start)
                lines = f.read().decode("utf-8", "replace").splitlines()
            # This start's lines only: up to the next start's header.
            later = [i for i, line in enumerate(lines) if line.startswith("### headway start")]
            lines = lines[:later[1]] if len(later) > 1 else lines
            said = [line.strip() for line in lines
                    if REPAIR_RE.search(line) and TOPIC in line][:3]
            found.append(f"node {node} after {what}: "
                         + (" | ".join(said) if said else "logged nothing about it"))
        return found

    def heal(self) -> None:
        if self.cut is not None:
            self.cut.heal()
        if self.clocks is not None:
            self.clocks.heal()
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


def one_schedule(make_broker, seed: int, filter_binary: str | None, faketime: str | None,
                 lazy_fs: bool) -> tuple[list[str], str, list[str]]:
    # With a packet filter each broker gets its own address and group id, for the cut;
    # with libfaketime, a wall clock the schedule can step; with FUSE, one broker (a
    # minority) whose data directory forgets unsynced writes at a "lose-unsynced" fault.
    hosts = broker_hosts() if filter_binary else None
    groups = {n: group_of(n) for n in NODES} if filter_binary else None
    clocks = WallClocks(faketime) if faketime else None
    lazy_node = random.Random(seed ^ 0x1A2F).choice(sorted(NODES)) if lazy_fs else None
    mounts: list[LazyMount] = []

    def mount_lazy(node: int, broker) -> None:
        if node == lazy_node:
            mounts.append(LazyMount(broker.data_dir.parent / "lazy-backing", broker.data_dir))
    try:
        brokers, bootstraps, _ = cluster_with_topic(
            make_broker, TOPIC, PARTITIONS,
            {"min.insync.replicas": "2", "segment.bytes": str(SEGMENT_BYTES)},
            hosts, groups, clocks and clocks.env, mount_lazy)
    except BaseException:
        for m in mounts:
            m.unmount()
        raise
    cut = NetworkCut(filter_binary, hosts, groups) if filter_binary else None
    bootstrap = ",".join(bootstraps)
    history, stop_writing, stop_reading = History(), threading.Event(), threading.Event()
    writers = [Writer(i, bootstrap, history, stop_writing) for i in range(WRITERS)]
    txn_writers = [TxnWriter(i, bootstrap, history, stop_writing) for i in range(TXN_WRITERS)]
    readers = [Reader(f"reader-{i}", bootstrap, history, stop_reading, group=False)
               for i in range(READERS)]
    members = [Reader(f"member-{i}", bootstrap, history, stop_reading, group=True)
               for i in range(MEMBERS)]
    faults = Faults(brokers, bootstraps, random.Random(seed), cut, clocks,
                    (lazy_node, mounts[-1]) if mounts else None)
    try:
        started = time.monotonic()
        try:
            for t in writers + txn_writers + readers + members:
                t.start()
            faults.run(SCHEDULE_S)
        finally:
            faults.heal()
        try:
            wait_until(lambda: led_by(bootstraps, TOPIC, NODES, 3),
                       "every broker back in every ISR", HEAL_S)
        except AssertionError:
            print(describe_stuck(brokers, bootstraps))
            raise
        stop_writing.set()
        for w in writers + txn_writers:
            w.join(HEAL_S)
        still = [w.name for w in writers + txn_writers if w.is_alive()]
        assert not still, f"writers still sending or in a transaction: {still}"
        marks = settled_marks(bootstrap)
        try:
            wait_until(lambda: all(r.positions.get(p, 0) >= high for r in readers
                                   for p, (_, high) in marks.items()),
                       "the readers at the high watermarks", HEAL_S)
        except AssertionError:
            # Readers held at a batch a broker refuses as damaged, or whose position fell
            # out of a log cut below what they had read: their errors say so and are
            # anomalies, and the checks go on; stuck for any other reason is a failure.
            if not any(r.errors for r in readers):
                raise
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
        damaged: list[str] = []
        final_read(bootstrap, history, marks, damaged)
        map_the_log(bootstraps, history, marks, damaged)
        for b in brokers:
            b.kill()
        anomalies = check(history, group_readers={m.name_ for m in members})
        anomalies += [e for r in readers + members for e in r.errors]
        anomalies += damaged
        # Each replica's copy on disk: no damage kept or copied, the three the same.
        anomalies += check_replicas(brokers, marks)
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
                   f"{len(anomalies)} anomalies"
                   + (f" ({len(history.client_resends)} client resends across an epoch bump: "
                      + "; ".join(history.client_resends) + ")"
                      if history.client_resends else "")
                   + f", {time.monotonic() - started:.0f} s; faults: "
                   + "; ".join(faults.log))
        return anomalies, summary, faults.repairs()
    except BaseException:
        # A schedule that cannot finish (a wait ran out) stops its clients and brokers,
        # so that the next schedule of a long run starts on a quiet machine.
        stop_writing.set()
        stop_reading.set()
        for b in brokers:
            b.kill()
        raise
    finally:
        if cut is not None:
            atexit.unregister(cut.heal)
        if clocks is not None:
            clocks.close()
        for b in brokers:
            b.kill()
        for m in mounts:
            m.unmount()


def describe_stuck(brokers, bootstraps: list[str]) -> str:
    """For a schedule that cannot heal: each node's answer for the topic's partitions
    (leader, ISR), and each running broker's thread stacks (gdb, when installed) in
    `stacks.txt` beside its log, taken before the brokers are stopped."""
    lines = ["  what each node answers, and where its threads are:"]
    for node, (broker, bootstrap) in enumerate(zip(brokers, bootstraps), start=1):
        try:
            topic = metadata(bootstrap)["topics"].get(TOPIC) or {}
            parts = {i: (p["leader"], sorted(p["isr"]))
                     for i, p in sorted(topic.get("partitions", {}).items())}
            lines.append(f"    node {node}: (leader, isr) by partition {parts}")
        except Exception as e:  # noqa: BLE001 - a stuck broker may not answer at all
            lines.append(f"    node {node}: no metadata answer: {e}")
        gdb = shutil.which("gdb")
        if gdb and broker.running and broker.pid:
            out = broker.stderr_path.with_name("stacks.txt")
            with open(out, "w") as f:
                subprocess.run([gdb, "-batch", "-p", str(broker.pid), "-ex",
                                "thread apply all bt"], stdout=f, stderr=subprocess.STDOUT,
                               timeout=120, check=False)
            lines.append(f"    node {node}: thread stacks in {out}")
    return "\n".join(lines)


# The suite's 15 minutes per test, or 3 minutes a schedule for a long run.
@pytest.mark.timeout(max(900, 180 * int(SCHEDULES or 1)))
def test_a_fault_schedule_loses_and_reorders_nothing(make_broker):
    given = os.environ.get("HEADWAY_HISTORY_SEED")
    if given:
        seeds = [int(given)]
    elif SCHEDULES:
        seeds = [random.SystemRandom().randrange(2**32) for _ in range(int(SCHEDULES))]
    else:
        seeds = [CI_SEED]
    results = os.environ.get("HEADWAY_HISTORY_RESULTS")
    filter_binary, why_not = packet_filter()
    if filter_binary is None:
        print(f"fault kind 'isolate' left out: no packet filter here ({why_not})")
    faketime, why_not = faketime_library()
    if faketime is None:
        print(f"fault kind 'clock' left out: {why_not}")
    lazy_fs, why_not = lazy_filesystem()
    if not lazy_fs:
        print(f"fault kind 'lose-unsynced' left out: {why_not}")
    failed = []
    for seed in seeds:
        print(f"fault schedule seed {seed} (HEADWAY_HISTORY_SEED={seed} replays it)")
        try:
            anomalies, summary, repairs = one_schedule(make_broker, seed, filter_binary,
                                                       faketime, lazy_fs)
        except AssertionError as e:
            # Counted as a failed schedule; a long run goes on with the next seed.
            anomalies, repairs = [f"the schedule did not finish: {e}"], []
            summary = f"seed {seed}: did not finish"
        print(summary)
        for r in repairs:
            print(f"  repair: {r}")
        for a in anomalies[:20]:
            print(f"  {a}")
        if results:
            with open(Path(results), "a") as out:
                out.write(f"- {summary}\n" + "".join(f"  - {a}\n" for a in anomalies[:20]))
        if anomalies:
            failed.append((seed, anomalies[:5]))
    assert not failed, f"schedules with anomalies: {failed}"
