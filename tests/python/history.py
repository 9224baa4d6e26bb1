"""A history of sends, transactions and polls against a replicated topic, and the checker
over it, in the style of Jepsen's Kafka workload.

Writers send unique values, each to one partition, and record what they were told: the
offset of an acknowledged send, a definite failure, or nothing (indeterminate: the
record may or may not be written). A transactional writer also groups its values into
transactions and records how each ended:
- committed: commit_transaction returned;
- aborted: commit_transaction was never called for it (aborted on purpose, or a send
  refused so the transaction had to be aborted). The coordinator commits only when asked
  to by EndTxn(commit), so such a transaction can never become visible: this outcome is
  definite whatever the abort call answered;
- indeterminate: the commit was asked for and its answer was an error or never came
  (it may have gone through or not).
When its commit is first asked for is recorded too (`commit_at`, time.monotonic()).

Readers (assign(), no group) and group members record every record each poll returned,
in order, and when the poll returned; some read with isolation.level=read_committed
(`committed_readers`). After the faults are healed, one final read_committed read takes
every partition from its start to its end, and a raw fetch (read_uncommitted, every
batch as the leader stores it, control batches included) maps the log: which offsets
are transaction markers, which hold data of aborted transactions (`log`).

Why the log map. A transaction marker (control batch) takes an offset but is never
handed to a client, and a read_committed reader is not handed the data of an aborted
transaction either. So on a partition that transactions wrote, readers' offsets are not
dense: a read_uncommitted reader skips the markers' offsets, a read_committed reader
skips those and the aborted data's. The offset checks below ("skipped offset", "gap in
the final read") therefore accept exactly those offsets as skipped, and only when the
log map shows them to be so; without a log map every offset must be read (the log has
no control records). Whether a data batch is aborted is decided here from the markers
themselves (the batch's producer's next marker in the partition is an abort), not from
the broker's aborted-transaction index, which the readers' own filtering relies on.

`check(history)` returns the anomalies, each a short line naming what and where:
- lost: an acknowledged value that must be visible (not transactional, or of a
  committed transaction) not in the final read, or at another offset than it was
  acknowledged at;
- duplicate: a value at two offsets of the final read, unless the log shows a client's
  resend across an epoch bump (below);
- inconsistent offset: one offset observed with two values (by any two observations,
  an acknowledgement and the final read included), or a value read at an offset the log
  map shows to be a marker;
- non-monotonic send: one writer's acknowledged offsets in one partition not in the
  order it sent them;
- non-monotonic poll / skipped offset: one reader's successive records of a partition
  not at successive offsets, other than over markers (any reader) and aborted data
  (read_committed readers); a reader with assign() never seeks, and starts at the log
  start;
- gap in the final read: an offset between the log start and the end neither read nor
  a marker nor aborted data;
- unknown value: a value observed that no writer sent;
- written after a definite failure: a value refused before it left, yet in the log;
- aborted read (G1a): a read_committed reader (a poll or the final read) holds a value
  of an aborted transaction;
- uncommitted read: a read_committed reader's poll returned a value of a transaction
  before its writer even asked for the commit. (A value may rightly be read after the
  commit was asked for and before commit_transaction returned: the markers are written
  once the commit is decided, and the answer follows. So only a read that ended before
  the commit was asked for is certainly a read of uncommitted data; a read of a
  transaction that never committed at all is an aborted read.)
- partial transaction: the final read holds some but not all values of a committed or
  indeterminate transaction;
- lost committed transaction: none of a committed transaction's values in the final
  read;
- transaction left open: the log map ends with a producer's transactional data and no
  marker after it (every writer ended its transactions before the final read).

A client's resend across an epoch bump is not the broker's anomaly, and is listed apart
(`History.client_resends`): a value at two offsets whose batches are both plain
(not transactional) data of one idempotent producer id, the later one under a higher
producer epoch. A broker deduplicates a producer's resends by (epoch, sequence) within
one epoch; a new epoch starts the sequences over, so no broker can recognise a record
sent again under it. librdkafka's idempotent producer does send possibly persisted
records again after bumping its epoch (when a request after a failed one is refused for
the gap it left, e.g. at a leader change), an open librdkafka issue seen against Apache
Kafka ("Sporadic message duplication during leader transition with idempotent
producer", https://github.com/confluentinc/librdkafka/issues/4953). A duplicate within
one epoch, or of two producers, stays an anomaly.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

COMMITTED, ABORTED, INDETERMINATE = "committed", "aborted", "indeterminate"


@dataclass(eq=False)
class Send:
    writer: int
    partition: int
    value: str
    offset: int | None = None  # acknowledged at
    failed: bool = False  # a definite refusal: not written
    txn: Txn | None = None  # the transaction it was sent in, if any


@dataclass(eq=False)
class Txn:
    writer: int
    number: int
    sends: list[Send] = field(default_factory=list)
    outcome: str = INDETERMINATE
    commit_at: float | None = None  # when commit_transaction was first called

    @property
    def name(self) -> str:
        return f"writer {self.writer} transaction {self.number} ({self.outcome})"


@dataclass(frozen=True)
class Batch:
    """One batch of a partition's log, as a raw read_uncommitted fetch returns it."""
    first: int
    last: int
    producer: int = -1
    transactional: bool = False
    marker: str | None = None  # a control batch: "commit" or "abort"
    epoch: int = -1  # the producer epoch


@dataclass
class LogMap:
    """What a partition's batches say about its offsets."""
    markers: set[int] = field(default_factory=set)
    aborted: set[int] = field(default_factory=set)  # data of aborted transactions
    open: list[tuple[int, int]] = field(default_factory=list)  # (producer, first offset)


def map_log(batches: list[Batch]) -> LogMap:
    """Markers, aborted data and open transactions of one partition. A producer's
    transactional batches belong to the transaction its next marker in the partition
    ends; they are aborted when that marker is an abort."""
    result = LogMap()
    pending: dict[int, list[Batch]] = defaultdict(list)
    for b in sorted(batches, key=lambda b: b.first):
        if b.marker is not None:
            result.markers.update(range(b.first, b.last + 1))
            if b.marker == "abort":
                for d in pending[b.producer]:
                    result.aborted.update(range(d.first, d.last + 1))
            pending[b.producer] = []
        elif b.transactional:
            pending[b.producer].append(b)
    result.open = sorted((p, ds[0].first) for p, ds in pending.items() if ds)
    return result


def batch_at(batches: list[Batch], offset: int) -> Batch | None:
    return next((b for b in batches if b.first <= offset <= b.last), None)


def resent_across_epochs(log: dict[int, list[Batch]],
                         places: list[tuple[int, int]]) -> str | None:
    """How the copies of one value at `places` (in offset order) came to be, when they
    are a client's resend across an epoch bump: every copy in a plain data batch of one
    producer id, each under a higher epoch than the one before. `None` otherwise."""
    held = [batch_at(log.get(p, []), o) for p, o in places]
    if any(b is None or b.transactional or b.marker or b.producer < 0 for b in held):
        return None
    if len({b.producer for b in held}) != 1:
        return None
    epochs = [b.epoch for b in held]
    if any(later <= earlier for earlier, later in zip(epochs, epochs[1:])):
        return None
    copies = ", ".join(f"{p}/{o} epoch {e}" for (p, o), e in zip(places, epochs))
    return f"producer {held[0].producer}: {copies}"


@dataclass
class History:
    sends: list[Send] = field(default_factory=list)
    txns: list[Txn] = field(default_factory=list)
    # reader name -> list of (partition, offset, value), in the order polled
    polls: dict[str, list[tuple[int, int, str]]] = field(default_factory=lambda: defaultdict(list))
    # reader name -> when the poll that returned each of its records ended (parallel)
    read_at: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    # readers with isolation.level=read_committed
    committed_readers: set[str] = field(default_factory=set)
    # partition -> {offset: value}, from the final (read_committed) read
    final: dict[int, dict[int, str]] = field(default_factory=dict)
    # partition -> the first offset of the final read (the log start)
    final_start: dict[int, int] = field(default_factory=dict)
    # partition -> the end of the final read (the high watermark); without it, the last
    # offset read
    final_end: dict[int, int] = field(default_factory=dict)
    # partition -> its batches, from a raw read_uncommitted fetch after the final read
    log: dict[int, list[Batch]] = field(default_factory=dict)
    # duplicates that are a client's resends across an epoch bump, found by check()
    client_resends: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sent(self, writer: int, partition: int, value: str, txn: Txn | None = None) -> Send:
        send = Send(writer, partition, value, txn=txn)
        with self.lock:
            self.sends.append(send)
            if txn is not None:
                txn.sends.append(send)
        return send

    def began(self, writer: int, number: int) -> Txn:
        txn = Txn(writer, number)
        with self.lock:
            self.txns.append(txn)
        return txn

    def polled(self, reader: str, records: list[tuple[int, int, str]],
               at: float | None = None) -> None:
        at = time.monotonic() if at is None else at
        with self.lock:
            self.polls[reader].extend(records)
            self.read_at[reader].extend([at] * len(records))


def check(history: History, group_readers: set[str] = frozenset()) -> list[str]:
    """The anomalies of `history`. Readers named in `group_readers` are group members:
    a rebalance moves their partitions and they may read a partition again from its
    committed offset, so only their values are checked, not their order."""
    anomalies: list[str] = []
    sent_values = {s.value: s for s in history.sends}
    maps = {p: map_log(batches) for p, batches in history.log.items()}

    def invisible(partition: int, offset: int, committed: bool) -> bool:
        """Whether a reader (read_committed or not) rightly never sees this offset."""
        m = maps.get(partition)
        return m is not None and (offset in m.markers or (committed and offset in m.aborted))

    for partition, m in sorted(maps.items()):
        for producer, first in m.open:
            anomalies.append(f"transaction left open: {partition}/{first} onwards, "
                             f"producer {producer}")

    # The final read: every offset read but markers and aborted data, each value once.
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for partition, log in sorted(history.final.items()):
        start = history.final_start.get(partition, min(log, default=0))
        end = history.final_end.get(partition, max(log, default=start - 1) + 1)
        missing = [o for o in range(start, end) if o not in log
                   and not invisible(partition, o, committed=True)]
        if missing:
            anomalies.append(f"gap in the final read: {partition}/{missing[:5]}")
        for offset, value in log.items():
            where[value].append((partition, offset))
    history.client_resends = []
    for value, places in where.items():
        if len(places) > 1:
            resend = resent_across_epochs(history.log, sorted(places))
            if resend is not None:
                history.client_resends.append(f"{value}: {resend}")
            else:
                anomalies.append(f"duplicate: {value} at {sorted(places)}")
        if value not in sent_values:
            anomalies.append(f"unknown value: {value} at {places}")

    # Acknowledged sends: there, where acknowledged, when they must be visible (not
    # transactional, or committed); in send order per writer, transactional or not.
    last: dict[tuple[int, int], int] = {}
    for s in history.sends:
        if s.offset is None:
            continue
        found = history.final.get(s.partition, {}).get(s.offset)
        if (s.txn is None or s.txn.outcome == COMMITTED) and found != s.value:
            anomalies.append(f"lost: {s.value} acknowledged at {s.partition}/{s.offset}, "
                             f"final read has {found!r} there")
        key = (s.writer, s.partition)
        if key in last and s.offset <= last[key]:
            anomalies.append(f"non-monotonic send: writer {s.writer} {s.value} at "
                             f"{s.partition}/{s.offset} after {last[key]}")
        last[key] = s.offset
    for s in history.sends:
        if s.failed and s.value in where:
            anomalies.append(f"written after a definite failure: {s.value} at {where[s.value]}")

    # Transactions in the final read: all or nothing; all when committed; nothing when
    # aborted.
    for t in history.txns:
        present = [s.value for s in t.sends if s.value in where]
        n = len(t.sends)
        if t.outcome == ABORTED and present:
            anomalies.append(f"aborted read (G1a): the final read holds {len(present)} of {n} "
                             f"values of {t.name}, e.g. {present[0]} at {where[present[0]]}")
        elif t.outcome == COMMITTED and not present and n:
            anomalies.append(f"lost committed transaction: none of the {n} values of {t.name} "
                             f"in the final read")
        elif t.outcome != ABORTED and 0 < len(present) < n:
            absent = [s.value for s in t.sends if s.value not in where]
            anomalies.append(f"partial transaction: the final read holds {len(present)} of "
                             f"{n} values of {t.name}; without {absent[:3]}")

    # Observations: one value per offset (an acknowledgement is one); readers move one
    # offset at a time but for what they rightly never see; read_committed readers see
    # nothing of a transaction before its commit was asked for, nor ever of an aborted one.
    seen: dict[tuple[int, int], str] = {
        (p, o): v for p, log in history.final.items() for o, v in log.items()}
    for s in history.sends:
        if s.offset is not None:
            known = seen.setdefault((s.partition, s.offset), s.value)
            if known != s.value:
                anomalies.append(f"inconsistent offset: {s.partition}/{s.offset} acknowledged "
                                 f"for {s.value}, read with {known}")
    for partition, log in sorted(history.final.items()):
        marked = sorted(o for o in log if partition in maps and o in maps[partition].markers)
        if marked:
            anomalies.append(f"inconsistent offset: the final read has values at markers "
                             f"{partition}/{marked[:5]}")
    for reader, records in sorted(history.polls.items()):
        committed = reader in history.committed_readers
        times = history.read_at.get(reader, [])
        previous: dict[int, int] = {}
        flagged: set[int] = set()  # transactions already reported for this reader
        for i, (partition, offset, value) in enumerate(records):
            send = sent_values.get(value)
            if send is None:
                anomalies.append(f"unknown value: {reader} read {value} at {partition}/{offset}")
            known = seen.setdefault((partition, offset), value)
            if known != value:
                anomalies.append(f"inconsistent offset: {partition}/{offset} held {known} "
                                 f"and {value} ({reader})")
            txn = send.txn if send is not None else None
            if committed and txn is not None and id(txn) not in flagged:
                at = times[i] if i < len(times) else None
                if txn.outcome == ABORTED:
                    flagged.add(id(txn))
                    anomalies.append(f"aborted read (G1a): {reader} read {value} of {txn.name} "
                                     f"at {partition}/{offset}")
                elif txn.commit_at is not None and at is not None and at < txn.commit_at:
                    flagged.add(id(txn))
                    anomalies.append(f"uncommitted read: {reader} read {value} of {txn.name} "
                                     f"at {partition}/{offset}, {txn.commit_at - at:.3f} s "
                                     f"before its commit was asked for")
            if reader in group_readers:
                continue
            before = previous.get(partition)
            if before is None and partition in history.final_start:
                before = history.final_start[partition] - 1  # assign() from the log start
            if before is not None:
                between = range(before + 1, offset)
                if offset <= before:
                    anomalies.append(f"non-monotonic poll: {reader} read {partition}/{offset} "
                                     f"after {before}")
                elif any(not invisible(partition, o, committed) for o in between):
                    anomalies.append(f"skipped offset: {reader} read {partition}/{offset} "
                                     f"after {before}")
            previous[partition] = offset
    return anomalies
