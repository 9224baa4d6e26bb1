"""Pieces the consumer-group tests share: group members running as their own processes
(group_member.py), waits on what they report, and parsers for `headway group list` and
`headway group describe`.

A member's state is rebuilt from the JSON lines it prints; every wait has a deadline and
fails with a summary of every member's state and the tail of its stderr.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from conftest import HEADWAY_BIN

HERE = Path(__file__).resolve().parent
MEMBER_SCRIPT = HERE / "group_member.py"

MEMBER_START_DEADLINE_S = 60.0
MEMBER_STOP_DEADLINE_S = 60.0
CLI_DEADLINE_S = 60.0


class Member:
    """One group_member.py process and what it reported so far."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, log_dir: Path,
                 instance_id: str | None = None, session_timeout_ms: int = 10_000,
                 heartbeat_interval_ms: int = 1_000, max_records: int | None = None):
        self.name = name
        args = [sys.executable, str(MEMBER_SCRIPT), "--bootstrap", bootstrap,
                "--group", group, "--topic", topic,
                "--session-timeout-ms", str(session_timeout_ms),
                "--heartbeat-interval-ms", str(heartbeat_interval_ms)]
        if instance_id:
            args += ["--instance-id", instance_id]
        if max_records is not None:
            args += ["--max-records", str(max_records)]
        self.stderr_path = log_dir / f"member-{name}.stderr.log"
        self._cond = threading.Condition()
        self.events: list[dict] = []
        self.assignment: set[int] = set()
        self.assignments: list[tuple[float, list[int]]] = []  # (t, partitions) per "assigned"
        self.rebalance_events = 0  # "assigned" and "revoked" callbacks
        self.member_id: str | None = None
        self.records: list[tuple[int, int, int]] = []  # (partition, offset, seq)
        self.problems: list[str] = []
        self.committed: dict[int, int] = {}  # partition -> next offset, last confirmed commit
        self.idle_committed: dict[int, int] | None = None
        self.client_errors: list[str] = []
        self.closed_count: int | None = None
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, cwd=HERE)
        self._reader = threading.Thread(target=self._read, daemon=True, name=f"member-{name}")
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "unparsable", "line": line.decode("utf-8", "replace")}
            with self._cond:
                self._apply(event)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def _apply(self, e: dict) -> None:
        self.events.append(e)
        kind = e["event"]
        if kind == "assigned":
            self.assignment = set(e["partitions"])
            self.assignments.append((e["t"], e["partitions"]))
            self.member_id = e["member_id"]
            self.rebalance_events += 1
        elif kind == "revoked":
            self.assignment -= set(e["partitions"])
            self.rebalance_events += 1
        elif kind == "records":
            self.records.extend(tuple(item) for item in e["items"])
            self.problems.extend(e["problems"])
        elif kind == "committed":
            self.committed.update({int(p): o for p, o in e["offsets"].items()})
        elif kind == "idle":
            self.idle_committed = {int(p): o for p, o in e["committed"].items()}
        elif kind == "client_error":
            self.client_errors.append(e["error"])
        elif kind == "closed":
            self.closed_count = e["count"]

    # -- waiting --------------------------------------------------------------------------

    def wait(self, predicate, deadline_s: float, what: str) -> None:
        """Waits until predicate(self) holds; fails after deadline_s or if the process
        ended first."""
        deadline = time.monotonic() + deadline_s
        with self._cond:
            while not predicate(self):
                if not self._reader.is_alive() and self.proc.poll() is not None:
                    raise AssertionError(f"member {self.name} exited (code "
                                         f"{self.proc.returncode}) before {what}\n"
                                         f"{self.describe()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"member {self.name}: no {what} within "
                                         f"{deadline_s:.0f} s\n{self.describe()}")
                self._cond.wait(timeout=min(left, 0.5))

    def snapshot(self):
        """(assignment, rebalance_events, record count) at this moment."""
        with self._cond:
            return set(self.assignment), self.rebalance_events, len(self.records)

    def seqs(self) -> list[int]:
        with self._cond:
            return [seq for _p, _o, seq in self.records]

    def take_records(self) -> list[tuple[int, int, int]]:
        """The (partition, offset, seq) reported since the last call, removed from
        `records`: a long run checks them as they come instead of keeping them all."""
        with self._cond:
            taken, self.records = self.records, []
            return taken

    def confirmed_commits(self) -> dict[int, int]:
        """partition -> next offset of the last commit the broker confirmed."""
        with self._cond:
            return dict(self.committed)

    # -- ending ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Asks the member to commit, leave the group and exit; fails if it does not."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"stop\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass
        try:
            self.proc.wait(timeout=MEMBER_STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"member {self.name} did not exit within "
                                 f"{MEMBER_STOP_DEADLINE_S:.0f} s of 'stop'\n{self.describe()}")
        self._reader.join(timeout=10)
        if self.proc.returncode != 0 or self.closed_count is None:
            raise AssertionError(f"member {self.name} exited with code {self.proc.returncode} "
                                 f"after 'stop'\n{self.describe()}")

    def kill(self) -> None:
        """SIGKILL: the member neither commits nor leaves the group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=10)

    def describe(self) -> str:
        try:
            err = self.stderr_path.read_text(errors="replace").splitlines()[-20:]
        except FileNotFoundError:
            err = []
        with self._cond:
            return (f"  member {self.name}: pid {self.proc.pid} exit {self.proc.poll()}, "
                    f"member_id {self.member_id}, assignment {sorted(self.assignment)}, "
                    f"{self.rebalance_events} rebalance callbacks, {len(self.records)} records, "
                    f"committed {self.committed}, client errors {self.client_errors[:5]}, "
                    f"problems {self.problems[:5]}\n"
                    + "".join(f"    stderr: {line}\n" for line in err))


def describe_members(members: list[Member]) -> str:
    return "".join(m.describe() for m in members)


def wait_stable(members: list[Member], partitions: int, deadline_s: float) -> None:
    """Waits until every member holds a non-empty assignment and together they hold each of
    the topic's partitions exactly once: a generation that includes all of them."""
    deadline = time.monotonic() + deadline_s
    while True:
        assignments = [m.snapshot()[0] for m in members]
        union = set().union(*assignments)
        if (all(assignments) and union == set(range(partitions))
                and sum(len(a) for a in assignments) == partitions):
            return
        for m in members:
            if m.proc.poll() is not None:
                raise AssertionError(f"member {m.name} exited while waiting for a stable "
                                     f"group\n{describe_members(members)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"group not stable with {len(members)} members over "
                                 f"{partitions} partitions within {deadline_s:.0f} s\n"
                                 f"{describe_members(members)}")
        time.sleep(0.05)


def wait_all_seen(members: list[Member], count: int, deadline_s: float) -> set[int]:
    """Waits until the members together reported every seq in range(count); returns them."""
    deadline = time.monotonic() + deadline_s
    while True:
        seen = set()
        for m in members:
            seen.update(m.seqs())
        if len(seen & set(range(count))) == count:
            return seen
        if time.monotonic() > deadline:
            missing = sorted(set(range(count)) - seen)
            raise AssertionError(f"members saw {len(seen)} distinct records of {count} within "
                                 f"{deadline_s:.0f} s; missing {len(missing)} "
                                 f"(first {missing[:10]})\n{describe_members(members)}")
        time.sleep(0.05)


# -- headway group list / describe ---------------------------------------------------------

def headway_cli(*args: str) -> str:
    """Runs the headway binary with args; returns stdout, fails on a non-zero exit."""
    proc = subprocess.run([str(HEADWAY_BIN), *args], capture_output=True, text=True,
                          timeout=CLI_DEADLINE_S,
                          env={k: v for k, v in os.environ.items() if not k.startswith("HEADWAY_")})
    if proc.returncode != 0:
        raise AssertionError(f"headway {' '.join(args)} exited with {proc.returncode}\n"
                             f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
    return proc.stdout


def group_list(bootstrap: str) -> dict[str, dict]:
    """`headway group list`: {group: {"state": ..., "protocol_type": ...}}."""
    out = headway_cli("group", "list", "-b", bootstrap)
    lines = out.splitlines()
    assert lines and lines[0].split() == ["GROUP", "STATE", "PROTOCOL-TYPE", "TYPE"], out
    groups = {}
    for line in lines[1:]:
        cells = line.split()
        if not cells:
            continue
        groups[cells[0]] = {"state": cells[1] if len(cells) > 1 else "",
                            "protocol_type": cells[2] if len(cells) > 2 and cells[2] != "-"
                            else ""}
    return groups


HEADER_RE = re.compile(r"^group (?P<group>\S+): (?P<state>[^,]+), protocol (?P<type>[^/]*)/"
                       r"(?P<protocol>\S*), (?P<members>\d+) members$")


@dataclass
class GroupDescription:
    group: str
    state: str
    protocol_type: str
    protocol: str
    # each: member, instance, client_id, host, assignment ({topic: [partitions]})
    members: list[dict] = field(default_factory=list)
    # (topic, partition) -> committed, log_end, lag, member; None where the CLI prints "-"
    partitions: dict[tuple[str, int], dict] = field(default_factory=dict)
    text: str = ""


def _int_or_none(cell: str) -> int | None:
    return None if cell == "-" else int(cell)


def group_describe(bootstrap: str, group: str) -> GroupDescription:
    """`headway group describe GROUP`, parsed. Assignments become {topic: [partitions]}."""
    out = headway_cli("group", "describe", group, "-b", bootstrap)
    lines = out.splitlines()
    m = HEADER_RE.match(lines[0]) if lines else None
    assert m, f"unexpected first line of headway group describe:\n{out}"
    d = GroupDescription(m["group"], m["state"], m["type"], m["protocol"], text=out)
    sections: list[list[str]] = []
    for line in lines[1:]:
        if not line.strip():
            sections.append([])
        elif sections:
            sections[-1].append(line)
    sections = [s for s in sections if s]
    assert len(sections) == 2, f"expected a member table and a partition table:\n{out}"
    members, partitions = sections
    assert members[0].split() == ["MEMBER", "INSTANCE", "CLIENT-ID", "HOST", "ASSIGNMENT"], out
    for line in members[1:]:
        cells = line.split()
        assignment: dict[str, list[int]] = {}
        for item in cells[4:]:
            topic, _, ps = item.rpartition(":")
            assignment[topic] = [int(p) for p in ps.split(",") if p]
        d.members.append({"member": cells[0], "instance": None if cells[1] == "-" else cells[1],
                          "client_id": cells[2], "host": cells[3], "assignment": assignment})
    assert int(m["members"]) == len(d.members), out
    assert partitions[0].split() == ["TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG",
                                     "MEMBER"], out
    for line in partitions[1:]:
        topic, partition, committed, log_end, lag, member = line.split()
        d.partitions[(topic, int(partition))] = {
            "committed": _int_or_none(committed), "log_end": _int_or_none(log_end),
            "lag": _int_or_none(lag), "member": None if member == "-" else member}
    return d
