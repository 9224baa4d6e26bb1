"""Crash loop: SIGKILL at random moments under idempotent producers and committing consumers.

Goal: however often and wherever headway dies, what it acknowledged stays, exactly once:
no acknowledged record lost, no record stored twice (the producers are idempotent, and
their retries of batches whose answer died with the broker must be recognised after the
restart), offsets dense from the log start, every record well-formed, no offset that
holds one record before a crash and another after it, and no committed offset beyond the
log end offset of its partition (nor behind a commit the broker had confirmed).
Method: one broker on one data directory and a fixed loopback port, so the clients live
through every restart and reconnect by themselves, as they would to a real broker. Two
idempotent acks=all producers write paced streams of test records (support.py), a
librdkafka one to topic A and a kafka-python one to topic B, and three librdkafka group
members (group_member.py, their own processes) read both topics and commit after every
batch. Each cycle waits until both producers have new acknowledgements, lets a random
delay pass, SIGKILLs the broker and starts it again; in some cycles it kills the new
broker again within moments, amid reconnects, rejoins and retries. After each restart:
log start 0 and log end past every acknowledged and every consumed record, committed
offsets at most the log end and at least the last confirmed commit, then the new part of
each partition is read and checked (dense, well-formed, each seq once, every acknowledged
and consumed record at its reported offset). At the end the producers drain, the members
must commit up to the log end, and every partition is read again from offset 0 and
compared with what the cycles read.

The kill delays come from a seeded generator; the seed is printed, and HEADWAY_CRASH_SEED
replays the same schedule (the broker's and clients' timing still varies from run to run).
HEADWAY_CRASH_CYCLES sets the number of cycles: 40 (about two minutes) by default, 200 for
the documented run in docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import threading
import time
from array import array
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_INVALID, Consumer, TopicPartition
from kafka import KafkaProducer

from group_support import Member, describe_members
from support import (BackgroundProducer, Delivery, RecordChecker, create_topic,
                     make_record, new_consumer, rdkafka_base, read_records, wait_for_topic)

# About two minutes on two busy cores.
CYCLES = int(os.environ.get("HEADWAY_CRASH_CYCLES", "40"))
SEED = int(os.environ.get("HEADWAY_CRASH_SEED") or random.SystemRandom().randrange(2**32))
# The kill comes this long after both producers had a new acknowledgement: uniformly
# between 0 (in the middle of the first batches after recovery) and this.
KILL_DELAY_MAX_S = 1.5
# Some cycles kill the restarted broker a second time this soon, while the clients
# reconnect, rejoin their group and retry what the first kill left unanswered.
SECOND_KILL_SHARE = 0.2
SECOND_KILL_DELAY_MAX_S = 0.3
# Paced producers: enough load that every kill catches batches in flight, little enough
# for two shared cores.
RDKAFKA_RATE_PER_S = 1_500
KAFKA_PYTHON_RATE_PER_S = 300
TOPIC_A, PARTITIONS_A = "crash-loop-a", 4
TOPIC_B, PARTITIONS_B = "crash-loop-b", 2
MEMBERS_A = 2
# Small segments, so that the loop also kills during rolls and recovers sealed segments.
BROKER_ARGS = ("--group-initial-rebalance-delay-ms", "0", "--segment-bytes", "1048576")
# Outside Linux's ephemeral range (32768-60999), so no outgoing connection takes the
# port while the broker is down.
PORT_RANGE = (20_000, 32_000)
PROGRESS_DEADLINE_S = 90.0
# After a crash a producer retries what was in flight; records wait in its queue while
# the broker restarts, well within this.
MESSAGE_TIMEOUT_MS = 120_000
DRAIN_S = 150.0
COMMIT_DEADLINE_S = 180.0
READ_DEADLINE_S = 300.0
SHOWN_MAX = 30


def free_port(rng: random.Random) -> int:
    """A loopback port nothing listens on, from PORT_RANGE."""
    for _ in range(100):
        port = rng.randrange(*PORT_RANGE)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free loopback port in {PORT_RANGE}")


class KafkaPythonProducer:
    """kafka-python's producer (idempotent by default) on its own thread, paced, sending
    test records from 0 upward until stopped; acknowledgements land in `delivery`."""

    def __init__(self, bootstrap: str, topic: str, rate_per_s: float):
        self.topic = topic
        self.rate_per_s = rate_per_s
        self.delivery = Delivery()
        self.sent = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                       enable_idempotence=True, linger_ms=2,
                                       reconnect_backoff_max_ms=1_000,
                                       delivery_timeout_ms=MESSAGE_TIMEOUT_MS)
        self._thread = threading.Thread(target=self._run, name="kafka-python", daemon=True)

    def start(self) -> "KafkaPythonProducer":
        self._thread.start()
        return self

    def acked_count(self) -> int:
        return len(self.delivery.acked)

    def _acked(self, seq: int, md) -> None:
        self.delivery.acked[seq] = (md.partition, md.offset)

    def _failed(self, seq: int, exc) -> None:
        self.delivery.failed[seq] = repr(exc)

    def _run(self) -> None:
        try:
            started = time.monotonic()
            while not self._stop.is_set():
                ahead_s = started + self.sent / self.rate_per_s - time.monotonic()
                if ahead_s > 0:
                    self._stop.wait(min(ahead_s, 0.05))
                    continue
                seq = self.sent
                r = make_record(seq)
                future = self._producer.send(self.topic, key=r.key, value=r.value,
                                             headers=r.headers)
                future.add_callback(self._acked, seq)
                future.add_errback(self._failed, seq)
                self.sent += 1
        except BaseException as e:  # reported by stop()
            self.error = e

    def stop(self, drain_s: float) -> None:
        """Stops sending; every record sent must be acknowledged or failed within drain_s."""
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "kafka-python producer thread did not finish"
        self._producer.flush(timeout=drain_s)
        self._producer.close(timeout=30)
        if self.error is not None:
            raise self.error
        reported = len(self.delivery.acked) + len(self.delivery.failed)
        assert reported == self.sent, (f"kafka-python: {self.sent - reported} of {self.sent} "
                                       f"records without an outcome after flush")


@dataclass
class Ledger:
    """What the loop knows of one topic: the seq found at every offset read so far, how
    often each seq occurs in the log, and the (acknowledged or consumed) positions still
    to be checked because the reads have not reached them yet."""
    topic: str
    partitions: int
    log: list[array] = field(default_factory=list)
    counts: bytearray = field(default_factory=bytearray)
    pending: list[tuple[str, int, int, int]] = field(default_factory=list)  # what, seq, p, o
    acked_taken: int = 0
    lost: int = 0
    duplicated: int = 0
    changed: int = 0
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.log = [array("q") for _ in range(self.partitions)]

    def ends(self) -> list[int]:
        return [len(offsets) for offsets in self.log]

    def expect(self, what: str, seq: int, partition: int, offset: int) -> None:
        self.pending.append((what, seq, partition, offset))

    def take_acks(self, delivery: Delivery) -> None:
        """Queues the positions of the acknowledgements that arrived since the last call."""
        acked = list(delivery.acked.items())
        for seq, (p, o) in acked[self.acked_taken:]:
            self.expect("acknowledged", seq, p, o)
        self.acked_taken = len(acked)

    def check_ends(self, when: str, high: list[int]) -> None:
        """The log end may not fall behind anything read, acknowledged or consumed."""
        for p, hw in enumerate(high):
            if hw < len(self.log[p]):
                self.problems.append(f"{when}: {self.topic}/{p} log end {hw} is behind offset "
                                     f"{len(self.log[p])} read before")
        for what, seq, p, o in self.pending:
            if o >= high[p]:
                self.problems.append(f"{when}: {what} seq {seq} at {self.topic}/{p} offset "
                                     f"{o} is past the log end {high[p]}")

    def read_new(self, bootstrap: str, high: list[int]) -> int:
        """Reads every partition from where the last read stopped up to `high`, checks it,
        then checks the pending positions it reached. Returns the records read."""
        starts = self.ends()
        checker = RecordChecker(self.partitions, starts)
        checker.last_seq = [offsets[-1] if offsets else -1 for offsets in self.log]
        count = 0
        for r in read_records(bootstrap, self.topic, self.partitions, start_offsets=starts,
                              end_offsets=high, deadline_s=READ_DEADLINE_S):
            seq = checker.check(r)
            self._record(r.partition, seq if seq is not None else -1)
            count += 1
        self.problems.extend(f"{self.topic}: {p}" for p in checker.problems)
        self._check_pending()
        return count

    def reread_all(self, bootstrap: str, high: list[int]) -> int:
        """Reads every partition again from offset 0 up to `high`: the part read before
        must hold the same records, the rest is checked as read_new does."""
        checker = RecordChecker(self.partitions)
        known = self.ends()
        count = 0
        for r in read_records(bootstrap, self.topic, self.partitions, end_offsets=high,
                              deadline_s=READ_DEADLINE_S):
            seq = checker.check(r)
            seq = seq if seq is not None else -1
            p, o = r.partition, r.offset
            if o < known[p]:
                if self.log[p][o] != seq:
                    self.changed += 1
                    self.problems.append(f"{self.topic}/{p} offset {o} held seq "
                                         f"{self.log[p][o]}, now seq {seq}")
            elif o == len(self.log[p]):
                self._record(p, seq)
            count += 1
        self.problems.extend(f"{self.topic} (full read): {p}" for p in checker.problems)
        self._check_pending()
        return count

    def _record(self, partition: int, seq: int) -> None:
        self.log[partition].append(seq)
        if seq < 0:
            return
        if seq >= len(self.counts):
            self.counts.extend(bytes(max(seq + 1 - len(self.counts), 1 << 16)))
        if self.counts[seq] == 1:
            self.duplicated += 1
            self.problems.append(f"{self.topic}/{partition} offset "
                                 f"{len(self.log[partition]) - 1}: seq {seq} is stored twice")
        self.counts[seq] = min(self.counts[seq] + 1, 255)

    def _check_pending(self) -> None:
        still = []
        for what, seq, p, o in self.pending:
            if o >= len(self.log[p]):
                still.append((what, seq, p, o))
            elif self.log[p][o] != seq:
                if what == "acknowledged":
                    self.lost += 1
                self.problems.append(f"{what} seq {seq} at {self.topic}/{p} offset {o}: the "
                                     f"log holds seq {self.log[p][o]} there")
        self.pending = still

    def check_sent(self, sent: int) -> None:
        """Nothing in the log that was never sent."""
        strays = sum(self.counts[sent:])
        if strays:
            self.problems.append(f"{self.topic}: {strays} records with seqs never sent")


def watermarks(bootstrap: str, topic: str, partitions: int) -> tuple[list[int], list[int]]:
    consumer = new_consumer(bootstrap)
    try:
        marks = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                 for p in range(partitions)]
    finally:
        consumer.close()
    return [low for low, _ in marks], [high for _, high in marks]


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int | None]:
    """The group's committed offset of every partition, None where it has none."""
    consumer = Consumer({**rdkafka_base(bootstrap), "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                 timeout=30)
    finally:
        consumer.close()
    return [None if tp.offset == OFFSET_INVALID else tp.offset for tp in tps]


@dataclass
class Stream:
    """One topic with its producer, its group and its ledger."""
    ledger: Ledger
    producer: object  # BackgroundProducer or KafkaPythonProducer
    group: str
    members: list[Member]

    def confirmed_commits(self) -> dict[int, int]:
        """The highest commit each partition had confirmed, over all members."""
        best: dict[int, int] = {}
        for m in self.members:
            for p, o in m.confirmed_commits().items():
                best[p] = max(best.get(p, o), o)
        return best

    def take_consumed(self) -> int:
        count = 0
        for m in self.members:
            items = m.take_records()
            for p, o, seq in items:
                self.ledger.expect("consumed", seq, p, o)
            count += len(items)
        with_problems = [m for m in self.members if m.problems]
        for m in with_problems:
            self.ledger.problems.extend(f"member {m.name}: {x}" for x in m.problems)
            m.problems.clear()
        return count

    def check(self, when: str, bootstrap: str, confirmed: dict[int, int]) -> None:
        """Takes the acknowledgements and consumed records so far, then reads committed
        offsets, then log ends: ends only grow, so everything taken or committed before
        must lie below them. Then reads the records up to those ends."""
        ledger = self.ledger
        ledger.take_acks(self.producer.delivery)
        self.take_consumed()
        committed = committed_offsets(bootstrap, self.group, ledger.topic, ledger.partitions)
        low, high = watermarks(bootstrap, ledger.topic, ledger.partitions)
        for p in range(ledger.partitions):
            where = f"{when}: {ledger.topic}/{p}"
            if low[p] != 0:
                ledger.problems.append(f"{where}: log start offset {low[p]}, not 0")
            if committed[p] is not None and committed[p] > high[p]:
                ledger.problems.append(f"{where}: committed offset {committed[p]} beyond the "
                                       f"log end offset {high[p]}")
            if p in confirmed and (committed[p] is None or committed[p] < confirmed[p]):
                ledger.problems.append(f"{where}: committed offset {committed[p]} behind the "
                                       f"confirmed commit {confirmed[p]}")
        ledger.check_ends(when, high)
        ledger.read_new(bootstrap, high)


def wait_for_progress(streams: list[Stream], broker, since: list[int], cycle: int) -> None:
    """Waits until every producer has an acknowledgement it did not have at `since`."""
    deadline = time.monotonic() + PROGRESS_DEADLINE_S
    while any(s.producer.acked_count() <= n for s, n in zip(streams, since)):
        broker.check_alive()
        for s in streams:
            if s.producer.error is not None:
                raise AssertionError(f"cycle {cycle}: producer of {s.ledger.topic} failed: "
                                     f"{s.producer.error!r}")
        if time.monotonic() > deadline:
            raise AssertionError(
                f"cycle {cycle}: no new acknowledgement within {PROGRESS_DEADLINE_S:.0f} s "
                f"of the restart: acked {[s.producer.acked_count() for s in streams]}, "
                f"before {since}; failures "
                f"{[list(s.producer.delivery.failed.items())[:3] for s in streams]}")
        time.sleep(0.01)


def wait_committed_at_end(stream: Stream, bootstrap: str) -> None:
    """Waits until the group committed the log end of every partition of its topic."""
    ledger = stream.ledger
    deadline = time.monotonic() + COMMIT_DEADLINE_S
    while True:
        _low, high = watermarks(bootstrap, ledger.topic, ledger.partitions)
        committed = committed_offsets(bootstrap, stream.group, ledger.topic, ledger.partitions)
        if committed == high:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"group {stream.group} committed {committed}, log ends {high}, "
                                 f"{COMMIT_DEADLINE_S:.0f} s after the producers stopped\n"
                                 f"{describe_members(stream.members)}")
        time.sleep(0.2)


def report(streams: list[Stream], cycles: int, duration_s: float) -> str:
    lines = [f"crash loop: {cycles} cycles, seed {SEED}, {os.cpu_count()} cores, "
             f"{duration_s:.0f} s"]
    for s in streams:
        d, ledger = s.producer.delivery, s.ledger
        lines.append(f"  {ledger.topic}: sent {s.producer.sent}, acknowledged {len(d.acked)}, "
                     f"failed {len(d.failed)}, in the log {sum(ledger.ends())}, "
                     f"lost {ledger.lost}, duplicated {ledger.duplicated}, "
                     f"offsets changed {ledger.changed}")
    return "\n".join(lines)


def test_crash_loop(make_broker, tmp_path):
    print(f"crash loop: seed {SEED} (replay with HEADWAY_CRASH_SEED={SEED}), {CYCLES} cycles")
    rng = random.Random(SEED)
    port = free_port(random.Random())
    broker = make_broker(*BROKER_ARGS, listen=f"127.0.0.1:{port}")
    bootstrap = broker.bootstrap
    create_topic(bootstrap, TOPIC_A, PARTITIONS_A)
    create_topic(bootstrap, TOPIC_B, PARTITIONS_B)
    started = time.monotonic()

    streams: list[Stream] = []
    members: list[Member] = []
    try:
        for i in range(MEMBERS_A):
            members.append(Member(f"a{i}", bootstrap, "crash-loop-a", TOPIC_A, tmp_path))
        members.append(Member("b0", bootstrap, "crash-loop-b", TOPIC_B, tmp_path))
        rdkafka = BackgroundProducer(bootstrap, TOPIC_A, rate_per_s=RDKAFKA_RATE_PER_S,
                                     records_max=10**9, config={
                                         "enable.idempotence": True,
                                         "message.timeout.ms": MESSAGE_TIMEOUT_MS})
        streams.append(Stream(Ledger(TOPIC_A, PARTITIONS_A), rdkafka, "crash-loop-a",
                              members[:MEMBERS_A]))
        kp = KafkaPythonProducer(bootstrap, TOPIC_B, KAFKA_PYTHON_RATE_PER_S)
        streams.append(Stream(Ledger(TOPIC_B, PARTITIONS_B), kp, "crash-loop-b",
                              members[MEMBERS_A:]))
        for s in streams:
            s.producer.start()
        run_cycles(streams, broker, rng)

        for s in streams:
            if isinstance(s.producer, BackgroundProducer):
                s.producer.stop(purge=False, drain_s=DRAIN_S)
            else:
                s.producer.stop(DRAIN_S)
        for s in streams:
            wait_committed_at_end(s, bootstrap)
        for m in members:
            m.stop()
        for s in streams:
            confirmed = s.confirmed_commits()
            s.check("at the end", bootstrap, confirmed)
            _low, high = watermarks(bootstrap, s.ledger.topic, s.ledger.partitions)
            s.ledger.take_acks(s.producer.delivery)
            s.ledger.reread_all(bootstrap, high)
            s.ledger.check_sent(s.producer.sent)
            # The broker came back every time within the producers' message timeout, so
            # every record must have been stored: a refusal is a broker error.
            failed = s.producer.delivery.failed
            if failed:
                s.ledger.problems.append(f"{s.ledger.topic}: {len(failed)} deliveries failed, "
                                         f"first {sorted(failed.items())[:5]}")
            if s.ledger.pending:
                s.ledger.problems.append(f"{len(s.ledger.pending)} positions never read, "
                                         f"first {s.ledger.pending[:5]}")
    finally:
        for m in members:
            m.kill()
        # After a failure the producers may still run; a second stop is harmless.
        for s in streams:
            with contextlib.suppress(Exception):
                if isinstance(s.producer, BackgroundProducer):
                    s.producer.stop(purge=True, drain_s=5)
                else:
                    s.producer.stop(drain_s=5)

    summary = report(streams, CYCLES, time.monotonic() - started)
    print(summary)
    # The first problems of each topic, so that one topic's cannot hide the other's.
    problems = [p for s in streams for p in s.ledger.problems[:SHOWN_MAX // len(streams)]]
    errors = [f"{s.ledger.topic}: {e}" for s in streams
              if isinstance(s.producer, BackgroundProducer) for e in s.producer.errors.errors
              if "FATAL" in e]
    total = sum(len(s.ledger.problems) for s in streams)
    assert not problems and not errors, (
        f"seed {SEED}: {total} problems, fatal producer errors {errors}\n{summary}\n  "
        + "\n  ".join(problems))


def run_cycles(streams: list[Stream], broker, rng: random.Random) -> None:
    since = [0] * len(streams)
    for cycle in range(CYCLES):
        wait_for_progress(streams, broker, since, cycle)
        delay_s = rng.uniform(0, KILL_DELAY_MAX_S)
        time.sleep(delay_s)  # the random moment itself: the load runs on meanwhile
        broker.check_alive()
        broker.kill()
        # Only commits the dead broker answered can be in these.
        confirmed = [s.confirmed_commits() for s in streams]
        broker.start()
        second_kill = rng.random() < SECOND_KILL_SHARE
        second_delay_s = rng.uniform(0, SECOND_KILL_DELAY_MAX_S)
        if second_kill:
            time.sleep(second_delay_s)
            broker.check_alive()
            broker.kill()
            broker.start()
        for s in streams:
            wait_for_topic(broker.bootstrap, s.ledger.topic, s.ledger.partitions)
        since = [s.producer.acked_count() for s in streams]
        for s, c in zip(streams, confirmed):
            s.check(f"cycle {cycle}", broker.bootstrap, c)
        again = f", again {second_delay_s:.3f} s after restarting" if second_kill else ""
        print(f"cycle {cycle}: killed {delay_s:.3f} s after progress{again}; acknowledged "
              f"{since}; log ends {[sum(s.ledger.ends()) for s in streams]}; "
              f"problems {sum(len(s.ledger.problems) for s in streams)}")
