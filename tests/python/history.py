"""A history of sends and polls against a replicated topic, and the checker over it, in
the style of Jepsen's Kafka workload (no transactions yet: the transaction coordinator is
not clustered).

Writers send unique values, each to one partition, and record what they were told: the
offset of an acknowledged send, a definite failure, or nothing (indeterminate: the
record may or may not be written). Readers (assign(), no group) and group members
record every record each poll returned, in order. After the faults are healed, one
final read takes every partition from its start to its high watermark.

`check(history)` returns the anomalies, each a short line naming what and where:
- lost: an acknowledged value not in the final read, or at another offset than it was
  acknowledged at;
- duplicate: a value at two offsets of the final read;
- inconsistent offset: one offset observed with two values (by any two observations,
  the final read included);
- non-monotonic send: one writer's acknowledged offsets in one partition not in the
  order it sent them;
- non-monotonic poll / skipped offset: one reader's successive records of a partition
  not at successive offsets (a reader with assign() never seeks; the log has no
  control records, so its offsets are dense);
- gap in the final read: an offset missing between the log start and the high
  watermark;
- unknown value: a value observed that no writer sent.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class Send:
    writer: int
    partition: int
    value: str
    offset: int | None = None  # acknowledged at
    failed: bool = False  # a definite refusal: not written


@dataclass
class History:
    sends: list[Send] = field(default_factory=list)
    # reader name -> list of (partition, offset, value), in the order polled
    polls: dict[str, list[tuple[int, int, str]]] = field(default_factory=lambda: defaultdict(list))
    # partition -> {offset: value}, from the final read
    final: dict[int, dict[int, str]] = field(default_factory=dict)
    # partition -> the first offset of the final read (the log start)
    final_start: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sent(self, writer: int, partition: int, value: str) -> Send:
        send = Send(writer, partition, value)
        with self.lock:
            self.sends.append(send)
        return send

    def polled(self, reader: str, records: list[tuple[int, int, str]]) -> None:
        with self.lock:
            self.polls[reader].extend(records)


def check(history: History, group_readers: set[str] = frozenset()) -> list[str]:
    """The anomalies of `history`. Readers named in `group_readers` are group members:
    a rebalance moves their partitions and they may read a partition again from its
    committed offset, so only their values are checked, not their order."""
    anomalies: list[str] = []
    sent_values = {s.value for s in history.sends}

    # The final read: dense, and each value once.
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for partition, log in sorted(history.final.items()):
        start = history.final_start.get(partition, min(log, default=0))
        end = max(log, default=start - 1)
        missing = [o for o in range(start, end + 1) if o not in log]
        if missing:
            anomalies.append(f"gap in the final read: {partition}/{missing[:5]}")
        for offset, value in log.items():
            where[value].append((partition, offset))
    for value, places in where.items():
        if len(places) > 1:
            anomalies.append(f"duplicate: {value} at {sorted(places)}")
        if value not in sent_values:
            anomalies.append(f"unknown value: {value} at {places}")

    # Acknowledged sends: there, where acknowledged; in send order per writer.
    last: dict[tuple[int, int], int] = {}
    for s in history.sends:
        if s.offset is None:
            continue
        found = history.final.get(s.partition, {}).get(s.offset)
        if found != s.value:
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

    # Observations: one value per offset; readers move one offset at a time.
    seen: dict[tuple[int, int], str] = {
        (p, o): v for p, log in history.final.items() for o, v in log.items()}
    for reader, records in sorted(history.polls.items()):
        previous: dict[int, int] = {}
        for partition, offset, value in records:
            if value not in sent_values:
                anomalies.append(f"unknown value: {reader} read {value} at {partition}/{offset}")
            known = seen.setdefault((partition, offset), value)
            if known != value:
                anomalies.append(f"inconsistent offset: {partition}/{offset} held {known} "
                                 f"and {value} ({reader})")
            if reader in group_readers:
                continue
            before = previous.get(partition)
            if before is not None and offset != before + 1:
                kind = "non-monotonic poll" if offset <= before else "skipped offset"
                anomalies.append(f"{kind}: {reader} read {partition}/{offset} after {before}")
            previous[partition] = offset
    return anomalies
