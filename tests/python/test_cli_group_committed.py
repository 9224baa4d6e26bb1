"""`headway consume --group` members that join and leave a group whose offsets were
committed beforehand lose no record, with the reset policy `latest` (no
--from-beginning), alone or beside librdkafka and Java members.

Goal: the union of what the members printed holds every record produced, whatever the
joins, leaves, SIGINTs and SIGTERMs; a member never prints a record twice; a record
printed by two members is allowed only on a partition whose commit some member reported
it could not make (the next owner reads again from the last commit). Every member ends
with status 0, no member logs a commit past what it handed out (the client's own check),
and at the end the group's committed offsets reach every partition's end.

Cases, each with its schedule drawn from a seeded generator (the seed is printed; set
HEADWAY_TEST_SEED to replay it):
- committed_at_zero: the group's offsets are set to 0 on every partition before any
  member runs, and records are produced before the first member starts (a member that
  fell back to `latest` would skip them); then a `headway produce` process writes
  numbered lines at 2,000 a second while a second member joins, a third joins, the
  second gets SIGINT and starts again, the third gets SIGTERM, around the times of a
  schedule of 4, 8, 14, 19 and 24 s, here compressed and jittered.
- sigterm_with_unread: the records are all there before the members start; one member
  prints into a pipe the test drains slowly, so it owns partitions with records it has
  not read (prefetched or not fetched) when it gets SIGTERM; the others take them on
  from its commit.
- join_during_commit: members are stopped (SIGINT or SIGTERM) while new ones start in
  the same instant, so that a JoinGroup lands while the leaving member commits and
  leaves, and the others' commits race the rebalance.
- killed (test_a_killed_member_committed_no_record_it_had_not_written_out): a member
  whose output waits in a slowly drained pipe is SIGKILLed right after a periodic
  commit; the group's offsets go no further than what came out of the pipe.
- mixed (test_mixed_group_churn): two `headway consume --group` members, a librdkafka
  member (group_member.py) and a Java KafkaConsumer (GroupMember.java, classic
  protocol) share the group while members of each kind leave and come back.

Method: real processes against a real broker; members write "partition offset value"
lines to files (or a pipe), read at the end. Waits are on conditions with deadlines.
HEADWAY_CHURN_ROUNDS=N runs each headway-only case N times with consecutive seeds (a
longer soak; default 1, about 30 s a case).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import HEADWAY_BIN
from group_support import Member as RdkafkaMember
from group_support import group_describe, headway_cli
from java_support import JavaClient
from support import BackgroundProducer, create_topic

TOPIC = "committed"
GROUP = "committed-g"
PARTITIONS = 6
LINES_PER_FLUSH = 1_000
LINES_PER_S = 2_000.0
ALL_SEEN_DEADLINE_S = 90.0
EXIT_DEADLINE_S = 60.0
ROUNDS = int(os.environ.get("HEADWAY_CHURN_ROUNDS", "1"))

# A member's warning that the next owner of some partitions reads their records again:
# a commit refused, or records handed out and not acknowledged (printed) in time.
NOT_COMMITTED_RE = re.compile(
    r"(?:offsets not committed|not acknowledged in time).*partitions=(\S+)")
# The client's check of every commit against what the member handed out.
BEYOND_RE = re.compile(r"commit beyond what this member handed out")


def client_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWAY_")}
    env["HEADWAY_LOG"] = "info"
    return env


def seeds() -> list[int]:
    base = int(os.environ.get("HEADWAY_TEST_SEED", random.randrange(1 << 32)))
    return [base + i for i in range(ROUNDS)]


class CliMember:
    """One `headway consume --group` process without --from-beginning. Its lines go to
    a file, or, with `drain_bytes_per_s`, into a pipe that a thread here empties at that
    pace into the file (a slow reader: the member blocks on its output)."""

    def __init__(self, name: str, bootstrap: str, out_dir: Path, fmt: str,
                 drain_bytes_per_s: float | None = None):
        self.name = name
        self.out_path = out_dir / f"{name}.out"
        self.err_path = out_dir / f"{name}.err"
        args = [str(HEADWAY_BIN), "consume", TOPIC, "-b", bootstrap, "--group", GROUP,
                "-q", "-f", fmt]
        self.drain: threading.Thread | None = None
        with open(self.err_path, "wb") as err:
            if drain_bytes_per_s is None:
                with open(self.out_path, "wb") as out:
                    self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out,
                                                 stderr=err, env=client_env())
            else:
                self.out_path.touch()
                self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                             stdout=subprocess.PIPE, stderr=err,
                                             env=client_env())
                self.drain = threading.Thread(target=self._drain, args=(drain_bytes_per_s,),
                                              daemon=True, name=f"drain-{name}")
                self.drain.start()

    def _drain(self, bytes_per_s: float) -> None:
        step = 512
        with open(self.out_path, "ab") as out:
            while True:
                chunk = self.proc.stdout.read1(step)
                if not chunk:
                    return
                out.write(chunk)
                out.flush()
                time.sleep(len(chunk) / bytes_per_s)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait_exit(self, what: str) -> None:
        try:
            code = self.proc.wait(timeout=EXIT_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.name} still running {EXIT_DEADLINE_S} s after "
                                 f"{what}\n{self.log()}")
        if self.drain is not None:
            self.drain.join(timeout=EXIT_DEADLINE_S)
            assert not self.drain.is_alive(), f"{self.name}: its output did not end"
        assert code == 0, f"{self.name} exited {code} after {what}\n{self.log()}"

    def stop(self, sig: int) -> None:
        self.signal(sig)
        self.wait_exit(signal.Signals(sig).name)

    def lines(self) -> list[list[str]]:
        """The fields of every complete line printed so far."""
        text = self.out_path.read_bytes().decode()
        return [line.split(" ") for line in text.split("\n")[:-1]]

    def log(self) -> str:
        return f"--- {self.name} stderr ---\n" + self.err_path.read_text(errors="replace")

    def not_committed_partitions(self) -> set[int]:
        found = set()
        for m in NOT_COMMITTED_RE.finditer(self.err_path.read_text(errors="replace")):
            for item in m.group(1).split(","):
                found.add(int(item.split("@")[0].rsplit("/", 1)[1]))
        return found


class Case:
    """The members of one run, started and stopped by name, and the checks at the end."""

    def __init__(self, broker, out_dir: Path, seed: int):
        self.bootstrap = broker.bootstrap
        self.out_dir = out_dir
        self.seed = seed
        self.members: list[CliMember] = []
        self.running: dict[str, CliMember] = {}
        self.runs: Counter = Counter()

    def start(self, slot: str, **kw) -> CliMember:
        self.runs[slot] += 1
        m = CliMember(f"{slot}.{self.runs[slot]}", self.bootstrap, self.out_dir,
                      "{partition} {offset} {value}", **kw)
        self.members.append(m)
        self.running[slot] = m
        return m

    def stop(self, slot: str, sig: int) -> None:
        self.running.pop(slot).stop(sig)

    def printed(self) -> dict[tuple[int, int], list[tuple[str, int]]]:
        """(partition, offset) -> [(member, value)] over every member's output."""
        out: dict[tuple[int, int], list[tuple[str, int]]] = {}
        for m in self.members:
            for p, o, v in m.lines():
                out.setdefault((int(p), int(o)), []).append((m.name, int(v)))
        return out

    def values(self) -> set[int]:
        return {int(v) for m in self.members for _p, _o, v in m.lines()}

    def wait_all_seen(self, count: int) -> None:
        deadline = time.monotonic() + ALL_SEEN_DEADLINE_S
        while len(self.values()) < count and time.monotonic() < deadline:
            time.sleep(0.5)

    def stop_all(self) -> None:
        for slot in sorted(self.running):
            self.stop(slot, signal.SIGINT)

    def kill_all(self) -> None:
        for m in self.running.values():
            m.proc.kill()
            m.proc.wait()

    def check(self, count: int) -> None:
        seed = self.seed
        logs = "\n".join(m.log() for m in self.members)
        assert "panicked" not in logs, f"seed {seed}\n{logs}"
        assert not BEYOND_RE.search(logs), f"seed {seed}: a commit past what was handed out\n{logs}"
        printed = self.printed()
        for m in self.members:
            keys = [(int(p), int(o)) for p, o, _v in m.lines()]
            twice = [k for k, n in Counter(keys).items() if n > 1]
            assert not twice, f"seed {seed}: {m.name} printed {twice[:5]} twice"
        for key, by in printed.items():
            assert len({v for _m, v in by}) == 1, f"seed {seed}: {key} printed as {by}"
        values = {by[0][1] for by in printed.values()}
        missing = sorted(set(range(count)) - values)
        assert not missing, (f"seed {seed}: {len(missing)} records printed by no member, "
                             f"first {missing[:10]}, runs {runs_of(missing)[:10]}\n{logs}")
        assert len(printed) == count, f"seed {seed}: {len(printed)} offsets for {count} values"
        not_committed = set().union(*(m.not_committed_partitions() for m in self.members))
        twice = {k: by for k, by in printed.items() if len(by) > 1}
        unexplained = sorted(k for k in twice if k[0] not in not_committed)
        assert not unexplained, (
            f"seed {seed}: {len(unexplained)} records printed by two members on partitions "
            f"whose commits all went through, first "
            f"{[(k, twice[k]) for k in unexplained[:5]]}\n{logs}")
        print(f"seed {seed}: {len(self.members)} member runs, {count} records, "
              f"{len(twice)} printed twice (partitions not committed: {sorted(not_committed)})")
        description = group_describe(self.bootstrap, GROUP)
        for (topic, partition), row in description.partitions.items():
            assert row["committed"] == row["log_end"], (
                f"seed {seed}: {topic}/{partition} committed {row['committed']} of "
                f"{row['log_end']}\n{description.text}")


def runs_of(values: list[int]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for v in values:
        if out and out[-1][1] == v - 1:
            out[-1][1] = v
        else:
            out.append([v, v])
    return [(a, b) for a, b in out]


class LineProducer:
    """`headway produce TOPIC` fed numbered lines on stdin, LINES_PER_FLUSH at a time,
    paced at `lines_per_s` (None: as fast as it takes them), on a thread."""

    def __init__(self, bootstrap: str, first: int, end: int,
                 lines_per_s: float | None = LINES_PER_S):
        self.failures: list[str] = []
        self.proc = subprocess.Popen([str(HEADWAY_BIN), "produce", TOPIC, "-b", bootstrap,
                                      "-q"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=client_env())
        self.thread = threading.Thread(target=self._run, args=(first, end, lines_per_s),
                                       daemon=True, name="produce")
        self.thread.start()

    def _run(self, first: int, end: int, lines_per_s: float | None) -> None:
        started = time.monotonic()
        try:
            for start in range(first, end, LINES_PER_FLUSH):
                if lines_per_s is not None:
                    due = started + (start - first) / lines_per_s
                    time.sleep(max(0.0, due - time.monotonic()))
                last = min(end, start + LINES_PER_FLUSH)
                self.proc.stdin.write("".join(f"{i}\n" for i in range(start, last)).encode())
                self.proc.stdin.flush()
            self.proc.stdin.close()
            err = self.proc.stderr.read()
            self.proc.wait(timeout=120)
            if self.proc.returncode != 0:
                self.failures.append(f"produce exited {self.proc.returncode}: {err.decode()}")
        except BaseException as e:  # reported by finish()
            self.proc.kill()
            self.failures.append(f"produce: {e!r}")

    def finish(self, seed: int) -> None:
        self.thread.join(timeout=180)
        assert not self.thread.is_alive(), f"seed {seed}: the producer did not finish"
        assert not self.failures, f"seed {seed}: {self.failures}"


def prepare(broker) -> None:
    """The topic, and the group's offsets committed at 0 on every partition."""
    create_topic(broker.bootstrap, TOPIC, PARTITIONS)
    out = headway_cli("group", "seek", GROUP, "--to-offset", "0", "-t", TOPIC,
                      "-b", broker.bootstrap)
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    assert sorted(int(r[1]) for r in rows) == list(range(PARTITIONS)), out
    assert {r[3] for r in rows} == {"0"}, out


def run_schedule(case: Case, started: float, events: list[tuple[float, str, str]]) -> None:
    """Runs (time from `started`, slot, "start" | "SIGINT" | "SIGTERM") in order."""
    for at, slot, action in sorted(events):
        time.sleep(max(0.0, started + at - time.monotonic()))
        if action == "start":
            case.start(slot)
        else:
            case.stop(slot, getattr(signal, action))


def committed_at_zero(broker, out_dir: Path, seed: int) -> None:
    rng = random.Random(seed)
    case = Case(broker, out_dir, seed)
    prepare(broker)
    early, total = 2_000, 40_000
    LineProducer(broker.bootstrap, 0, early, lines_per_s=None).finish(seed)
    try:
        case.start("a")
        started = time.monotonic()
        producer = LineProducer(broker.bootstrap, early, total)

        def at(t: float) -> float:
            return t * 0.7 + rng.uniform(-0.7, 0.7)
        events = [(at(4), "b", "start"), (at(8), "c", "start"),
                  (at(14), "b", rng.choice(["SIGINT", "SIGTERM"])), (at(19), "b", "start"),
                  (at(24), "c", rng.choice(["SIGTERM", "SIGINT"]))]
        run_schedule(case, started, events)
        producer.finish(seed)
        case.wait_all_seen(total)
        case.stop_all()
    finally:
        case.kill_all()
    case.check(total)


def sigterm_with_unread(broker, out_dir: Path, seed: int) -> None:
    rng = random.Random(seed)
    case = Case(broker, out_dir, seed)
    prepare(broker)
    total = 30_000
    LineProducer(broker.bootstrap, 0, total, lines_per_s=None).finish(seed)
    try:
        # About 1,000 lines a second: the slow member cannot keep up with its partitions.
        slow = case.start("slow", drain_bytes_per_s=14_000.0)
        wait_for(lambda: len(slow.lines()) >= 500, "the slow member printing", seed)
        fast = case.start("fast")
        wait_for(lambda: len(fast.lines()) >= 1, "the fast member printing", seed)
        time.sleep(rng.uniform(0.0, 2.0))
        # It still holds partitions with records it has not printed: it cannot have read
        # more than the pipe and its buffers hold beyond what the test took. The fast member
        # may print again what the slow one printed before the rebalance, so the records
        # nobody has printed yet are counted by (partition, offset).
        held = {int(p) for p, _o, _v in slow.lines()[-200:]}
        printed_then = len(slow.lines())
        seen = {(int(p), int(o)) for p, o, _v in slow.lines() + fast.lines()}
        assert total - len(seen) >= 3_000, (
            f"seed {seed}: the slow member kept up ({printed_then} printed, "
            f"{len(seen)} of {total} records printed by someone)")
        case.stop("slow", signal.SIGTERM)
        # Another member comes later, on top of the fast one.
        time.sleep(rng.uniform(0.0, 3.0))
        case.start("late")
        case.wait_all_seen(total)
        tail = [(int(p), int(o)) for p, o, _v in slow.lines()]
        last = {p: max(o for q, o in tail if q == p) for p in held}
        print(f"seed {seed}: the slow member held {sorted(held)}, stopped at {last}, "
              f"{len(tail)} lines, {printed_then} when signalled")
        case.stop_all()
    finally:
        case.kill_all()
    case.check(total)


def join_during_commit(broker, out_dir: Path, seed: int) -> None:
    rng = random.Random(seed)
    case = Case(broker, out_dir, seed)
    prepare(broker)
    total = 30_000
    try:
        for slot in "abc":
            case.start(slot)
        started = time.monotonic()
        producer = LineProducer(broker.bootstrap, 0, total)
        spare = iter("defgh")
        t = 1.0
        for _ in range(3):
            t += rng.uniform(2.5, 4.5)
            time.sleep(max(0.0, started + t - time.monotonic()))
            leaving = rng.choice(sorted(case.running))
            m = case.running.pop(leaving)
            m.signal(rng.choice([signal.SIGINT, signal.SIGTERM]))
            # The newcomer's JoinGroup lands while the leaving member commits and leaves.
            time.sleep(rng.uniform(0.0, 0.15))
            case.start(next(spare))
            m.wait_exit("a signal")
        producer.finish(seed)
        case.wait_all_seen(total)
        case.stop_all()
    finally:
        case.kill_all()
    case.check(total)


def wait_for(predicate, what: str, seed: int, deadline_s: float = 60.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not predicate():
        assert time.monotonic() < deadline, f"seed {seed}: no {what} within {deadline_s} s"
        time.sleep(0.1)


@pytest.mark.parametrize("scenario", [committed_at_zero, sigterm_with_unread, join_during_commit],
                         ids=lambda f: f.__name__)
def test_members_come_and_go_after_a_commit_without_losing_a_record(make_broker, tmp_path,
                                                                      scenario):
    for seed in seeds():
        print(f"seed {seed} (replay with HEADWAY_TEST_SEED={seed})")
        out_dir = tmp_path / f"seed-{seed}"
        out_dir.mkdir()
        scenario(make_broker(), out_dir, seed)


def test_a_killed_member_committed_no_record_it_had_not_written_out(make_broker, tmp_path):
    """A member that prints into a slowly drained pipe (its output buffer full, waiting)
    is killed (SIGKILL) right after one of its periodic commits: the group's committed
    offsets go no further than what came out of the pipe, so whatever its buffer held is
    read again by the next owner instead of being skipped."""
    seed = int(os.environ.get("HEADWAY_TEST_SEED", random.randrange(1 << 32)))
    print(f"seed {seed} (replay with HEADWAY_TEST_SEED={seed})")
    broker = make_broker()
    prepare(broker)
    total = 30_000
    LineProducer(broker.bootstrap, 0, total, lines_per_s=None).finish(seed)
    case = Case(broker, tmp_path, seed)
    try:
        member = case.start("slow", drain_bytes_per_s=14_000.0)

        def committed() -> dict[int, int]:
            rows = group_describe(broker.bootstrap, GROUP).partitions
            return {p: row["committed"] or 0 for (_t, p), row in rows.items()}
        # Its first periodic commit comes 5 s after it joined.
        wait_for(lambda: sum(committed().values()) > 0, "periodic commit", seed)
        member.proc.kill()
        member.proc.wait(timeout=EXIT_DEADLINE_S)
        member.drain.join(timeout=EXIT_DEADLINE_S)
        assert not member.drain.is_alive(), f"seed {seed}: the pipe did not end"
    finally:
        case.kill_all()
    next_printed: dict[int, int] = {}
    for p, o, _v in member.lines():
        next_printed[int(p)] = max(next_printed.get(int(p), 0), int(o) + 1)
    after_kill = committed()
    print(f"seed {seed}: committed {after_kill}, printed up to {next_printed}")
    assert sum(after_kill.values()) > 0
    past = {p: (c, next_printed.get(p, 0)) for p, c in after_kill.items()
            if c > next_printed.get(p, 0)}
    assert not past, (f"seed {seed}: committed past what came out (partition: (committed, "
                      f"next printed)): {past}\n{member.log()}")


class JavaMember:
    """GroupMember.java in the classic protocol; a commit refused by a rebalance is
    reported, not fatal ("committed": false)."""

    def __init__(self, java: JavaClient, bootstrap: str):
        self.proc = java.start("GroupMember", "--bootstrap", bootstrap, "--topic", TOPIC,
                               "--group", GROUP, "--commit-failures", "report",
                               "--set", "group.protocol=classic",
                               "--set", "auto.offset.reset=earliest", stdin=True)

    def records(self) -> list[tuple[int, int]]:
        return [tuple(r) for e in list(self.proc.events) if e["event"] == "records"
                for r in e["records"]]

    def uncommitted_partitions(self) -> set[int]:
        return {r[0] for e in list(self.proc.events)
                if e["event"] == "records" and not e.get("committed", True)
                for r in e["records"]}

    def check(self) -> None:
        errors = [e for e in self.proc.events if e.get("event") == "error"]
        assert not errors, f"{self.proc.what}: {errors[0]['error']}"

    def stop(self) -> None:
        self.proc.close_stdin()
        self.proc.wait_event(lambda e: e.get("event") == "closed", EXIT_DEADLINE_S, "close")
        self.proc.finish(EXIT_DEADLINE_S)
        self.check()


def test_mixed_group_churn(make_broker, tmp_path):
    """Two `headway consume --group` members, a librdkafka member and a Java member in
    one classic group; each kind leaves and comes back while records are produced."""
    seed = int(os.environ.get("HEADWAY_TEST_SEED", random.randrange(1 << 32)))
    print(f"seed {seed} (replay with HEADWAY_TEST_SEED={seed})")
    rng = random.Random(seed)
    broker = make_broker()
    prepare(broker)
    java = JavaClient("lib-4", "classes-4", "GroupMember", tmp_path)
    cli: list[CliMember] = []
    running_cli: dict[str, CliMember] = {}
    rdkafka: list[RdkafkaMember] = []
    javas: list[JavaMember] = []
    runs: Counter = Counter()

    def start_cli(slot: str) -> None:
        runs[slot] += 1
        m = CliMember(f"{slot}.{runs[slot]}", broker.bootstrap, tmp_path,
                      "{partition} {offset}")
        cli.append(m)
        running_cli[slot] = m

    def start_rdkafka() -> RdkafkaMember:
        m = RdkafkaMember(f"rd{len(rdkafka) + 1}", broker.bootstrap, GROUP, TOPIC, tmp_path)
        rdkafka.append(m)
        return m

    def seen() -> set[tuple[int, int]]:
        out = {(int(p), int(o)) for m in cli for p, o in m.lines()}
        out |= {(p, o) for m in rdkafka for p, o, _s in list(m.records)}
        out |= {r for m in javas for r in m.records()}
        return out

    producer = BackgroundProducer(broker.bootstrap, TOPIC, rate_per_s=600.0)
    try:
        start_cli("h1")
        rd = start_rdkafka()
        javas.append(JavaMember(java, broker.bootstrap))
        producer.start()
        # Each kind leaves and comes back once, in a seeded order, a few seconds apart.
        kinds = ["headway", "rdkafka", "java"]
        rng.shuffle(kinds)
        start_cli("h2")
        for kind in kinds:
            time.sleep(rng.uniform(2.0, 4.0))
            if kind == "headway":
                slot = rng.choice(sorted(running_cli))
                running_cli.pop(slot).stop(rng.choice([signal.SIGINT, signal.SIGTERM]))
                time.sleep(rng.uniform(0.0, 1.5))
                start_cli(slot)
            elif kind == "rdkafka":
                rd.stop()
                time.sleep(rng.uniform(0.0, 1.5))
                rd = start_rdkafka()
            else:
                javas[-1].stop()
                time.sleep(rng.uniform(0.0, 1.5))
                javas.append(JavaMember(java, broker.bootstrap))
        time.sleep(1.0)  # records produced after the last change too
        producer.stop(purge=False)
        acked = producer.delivery.acked
        count = len(acked)
        assert count >= 3_000 and not producer.delivery.failed, (
            f"seed {seed}: {count} acknowledged, failed {producer.delivery.failed}")
        wanted = set(acked.values())
        deadline = time.monotonic() + ALL_SEEN_DEADLINE_S
        while not wanted <= seen() and time.monotonic() < deadline:
            for j in javas:
                j.check()
            time.sleep(0.5)
        for slot in sorted(running_cli):
            running_cli.pop(slot).stop(signal.SIGINT)
        rd.stop()
        javas[-1].stop()
    finally:
        for m in running_cli.values():
            m.proc.kill()
            m.proc.wait()
        for j in javas:
            j.proc.kill()
        for m in rdkafka:
            m.kill()

    logs = "\n".join(m.log() for m in cli)
    assert "panicked" not in logs and not BEYOND_RE.search(logs), f"seed {seed}\n{logs}"
    problems = [p for m in rdkafka for p in m.problems]
    assert not problems, f"seed {seed}: librdkafka member saw {problems[:5]}"
    missing = sorted(wanted - seen())
    assert not missing, (f"seed {seed}: {len(missing)} of {count} records consumed by no "
                         f"member, first {missing[:10]}\n{logs}")
    for m in cli:
        keys = [(int(p), int(o)) for p, o in m.lines()]
        twice = [k for k, n in Counter(keys).items() if n > 1]
        assert not twice, f"seed {seed}: {m.name} printed {twice[:5]} twice"
    description = group_describe(broker.bootstrap, GROUP)
    for (topic, partition), row in description.partitions.items():
        assert row["committed"] == row["log_end"], (
            f"seed {seed}: {topic}/{partition} committed {row['committed']} of "
            f"{row['log_end']}\n{description.text}")
    kinds_seen = {"headway": sum(len(m.lines()) for m in cli),
                  "librdkafka": sum(len(m.records) for m in rdkafka),
                  "java": sum(len(j.records()) for j in javas)}
    print(f"seed {seed}: records per kind of member {kinds_seen}")
