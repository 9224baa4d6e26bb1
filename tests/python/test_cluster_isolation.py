"""Three headway processes as one cluster, one of them cut off from the two others: a
leader in the minority acknowledges nothing it could lose.

What runs: each broker listens (Kafka listener and controller listener, advertised as
bound) on its own loopback address, 127.A.B.N, A.B picked from the test's pid so that
parallel runs do not share addresses; a topic of 3 partitions at replication factor 3
takes acks=all writes from raw producers, one per broker and partition, so every
acknowledgement is known to come from one broker (a non-leader answers
NOT_LEADER_OR_FOLLOWER; a minority leader never answers, the producer gives up after a few
seconds). Then packet filter rules cut the leader of one partition off from the two
others, both ways, while the test's clients still reach all three. Two cases: the victim
also leads the controller (the others elect a new controller first), or it leads only
partitions.

Asserted: the victim acknowledges no write sent to it during the isolation, and none
answered later than the lag bound plus the session timeout after it; the two others elect
a new leader, which acknowledges writes; once the rules are removed the victim follows
again (it cuts its divergent tail: "follower log truncated" in its log) and every
partition is back at three in-sync replicas; every acknowledged record is read back at the
offset it was acknowledged at, no value is in the log twice, and each partition's log on
the three brokers' disks (read after they stop) is the same, batch for batch, byte for
byte, and holds what a consumer reads.

A write the victim holds across the healing (one is sent on purpose and waited for with a
long timeout; others are sent just after the healing, before the victim hears that it no
longer leads) must not be acknowledged: its record was cut and another took its offset, so
the victim answers it NOT_LEADER_OR_FOLLOWER (or REQUEST_TIMED_OUT) once it follows again.

How the cut is made: a connection between brokers starts at 127.0.0.1 (the kernel's
source address for loopback destinations; the brokers do not bind their outgoing sockets),
as the test's clients do, so addresses alone cannot tell a broker's connection from a
client's. Each broker runs under its own group id instead, and the rules drop, on OUTPUT
(every loopback packet passes it once), what the victim's sockets send to the others'
addresses and what the others' sockets send to the victim's (`-m owner --gid-owner`):
controller and replication traffic both ways, and nothing of the clients'. Every rule
carries the comment `headway-test-<pid>`; the rules are removed when the isolation ends, in
teardown and at exit whatever happens, and a run first removes the rules left by test
processes that no longer exist. Without root or a usable iptables the test skips.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shlex
import shutil
import socket
import struct
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from cluster_support import CLUSTER_UP_S, FENCED_WITHIN_S, Reader, all_agree, metadata
from conftest import BrokerStartError
from kafka_frames import frame, read_response
from support import ADMIN_TIMEOUT_S, raise_on_error, rdkafka_base, read_records, wait_until

TOPIC = "isolated"
PARTITIONS = 3
NODES = (1, 2, 3)
PRODUCE_KEY, PRODUCE_VERSION = 0, 3
# REPLICA_LAG_TIME_MAX_MS_DEFAULT and BROKER_SESSION_TIMEOUT_MS_DEFAULT: a leader whose
# followers are silent for the first proposes to shrink its ISR; the controller fences a
# silent broker after the second. A minority leader stops acknowledging within both.
LAG_S, SESSION_S = 5.0, 6.0
STOPS_WITHIN_S = LAG_S + SESSION_S
# How long the victim stays cut off: past the bound above, so that a victim that went on
# acknowledging after it would be seen doing so.
ISOLATED_FOR_S = STOPS_WITHIN_S + 4.0
# A raw producer's wait for an answer: a minority leader holds an acks=all write without
# answering (headway does not answer REQUEST_TIMED_OUT at the request's timeout).
ANSWER_WITHIN_S = 4.0
ACKS_STEADY = 20
COMMENT = f"headway-test-{os.getpid()}"
COMMENT_RE = re.compile(r"--comment\s+\"?headway-test-(\d+)\"?")


def subnet() -> str:
    """127.A.B: this test process's addresses, 127.A.B.N for node N."""
    pid = os.getpid()
    return f"127.{1 + (pid >> 8) % 254}.{pid & 0xff}"


def group_of(node: int) -> int:
    """The group id node N runs as: unique to this test process and node."""
    return 2_000_000_000 + (os.getpid() % 10_000_000) * 4 + node


# -- iptables ----------------------------------------------------------------------------

def iptables_binary() -> str | None:
    found = shutil.which("iptables")
    if found:
        return found
    return next((p for p in ("/usr/sbin/iptables", "/sbin/iptables") if os.access(p, os.X_OK)),
                None)


def iptables(binary: str, *args: str) -> subprocess.CompletedProcess:
    # -w: other processes change the rules too; wait for the lock instead of failing.
    return subprocess.run([binary, "-w", "30", *args], capture_output=True, text=True,
                          timeout=60)


def remove_rules(binary: str, owned_by) -> int:
    """Deletes every OUTPUT rule whose comment names a pid `owned_by(pid)` accepts;
    returns how many."""
    listed = iptables(binary, "-S", "OUTPUT")
    removed = 0
    for line in listed.stdout.splitlines():
        m = COMMENT_RE.search(line)
        if not line.startswith("-A ") or m is None or not owned_by(int(m.group(1))):
            continue
        spec = shlex.split(line)[2:]
        if iptables(binary, "-D", "OUTPUT", *spec).returncode == 0:
            removed += 1
    return removed


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Cut:
    """DROP rules on OUTPUT between one broker's sockets and the others' addresses."""

    def __init__(self, binary: str):
        self.binary = binary
        self.rules: list[list[str]] = []

    def add(self, *spec: str) -> None:
        rule = [*spec, "-m", "comment", "--comment", COMMENT, "-j", "DROP"]
        done = iptables(self.binary, "-A", "OUTPUT", *rule)
        assert done.returncode == 0, f"iptables -A OUTPUT {' '.join(rule)}: {done.stderr}"
        self.rules.append(rule)

    def isolate(self, victim: int, hosts: dict[int, str]) -> None:
        for other in NODES:
            if other == victim:
                continue
            self.add("-m", "owner", "--gid-owner", str(group_of(victim)), "-d", hosts[other])
            self.add("-m", "owner", "--gid-owner", str(group_of(other)), "-d", hosts[victim])

    def heal(self) -> None:
        """Removes every rule of this process, those added here first."""
        failed = []
        for rule in reversed(self.rules):
            done = iptables(self.binary, "-D", "OUTPUT", *rule)
            if done.returncode != 0:
                failed.append(done.stderr.strip())
        self.rules.clear()
        remove_rules(self.binary, lambda pid: pid == os.getpid())
        assert not failed, f"iptables -D failed: {failed}"


@pytest.fixture
def cut():
    """A Cut whose rules are removed at teardown and, should teardown never run, at exit."""
    if os.geteuid() != 0:
        pytest.skip("the isolation test needs root to add iptables rules")
    binary = iptables_binary()
    if binary is None:
        pytest.skip("iptables is not installed (scripts/setup installs it)")
    probe = ["-d", "127.255.255.254", "-m", "comment", "--comment", COMMENT, "-j", "DROP"]
    added = iptables(binary, "-A", "OUTPUT", *probe)
    if added.returncode != 0:
        pytest.skip(f"iptables is not usable here: {added.stderr.strip()}")
    iptables(binary, "-D", "OUTPUT", *probe)
    # Rules left by a test process that was killed before its teardown ran.
    stale = remove_rules(binary, lambda pid: pid != os.getpid() and not pid_alive(pid))
    if stale:
        print(f"removed {stale} rules left by test processes that no longer exist")

    c = Cut(binary)
    at_exit = lambda: remove_rules(binary, lambda pid: pid == os.getpid())  # noqa: E731
    atexit.register(at_exit)
    try:
        yield c
    finally:
        c.heal()
        atexit.unregister(at_exit)


# -- the cluster on its own addresses ----------------------------------------------------

def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start_cluster_apart(make_broker):
    """Three brokers, node N on 127.A.B.N (its Kafka and controller listeners) running as
    group_of(N); tried again when a voter port was taken meanwhile."""
    hosts = {n: f"{subnet()}.{n}" for n in NODES}
    for _attempt in range(3):
        voters = ",".join(f"{n}@{hosts[n]}:{free_port(hosts[n])}" for n in NODES)
        brokers = [make_broker("--node-id", str(n), "--controller-quorum-voters", voters,
                               listen=f"{hosts[n]}:0", group=group_of(n), start=False)
                   for n in NODES]
        try:
            for b in brokers:
                b.start()
            return hosts, brokers
        except BrokerStartError as e:
            for b in brokers:
                b.kill()
            if "in use" not in str(e):
                raise
    raise AssertionError("no free voter ports in three tries")


def settled(bootstraps: dict[int, str], asked: set[int], isr_size: int):
    """The partitions' records when every broker in `asked` answers the same, each
    partition led by one of `asked` with `isr_size` replicas in sync."""
    answers = [metadata(bootstraps[n]) for n in sorted(asked)]
    first = answers[0]["topics"].get(TOPIC)
    if first is None or len(first["partitions"]) != PARTITIONS:
        return None
    for a in answers:
        if a["topics"].get(TOPIC) != first:
            return None
    for p in first["partitions"].values():
        if p["leader"] not in asked or len(p["isr"]) != isr_size:
            return None
    return {"partitions": first["partitions"], "controller": answers[0]["controller"]}


# -- raw producers -----------------------------------------------------------------------

@dataclass
class Attempt:
    node: int
    partition: int
    value: bytes
    sent: float
    answered: float | None = None
    error: int | None = None
    offset: int | None = None

    @property
    def acknowledged(self) -> bool:
        return self.answered is not None and self.error == 0


def produce_request(partition: int, value: bytes, correlation_id: int) -> bytes:
    """Produce v3, acks=all, one record in one batch."""
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    builder.close()
    records = bytes(builder.buffer())
    name = TOPIC.encode()
    body = (struct.pack(">hhi", -1, -1, 30_000) + struct.pack(">i", 1)
            + struct.pack(">h", len(name)) + name + struct.pack(">i", 1)
            + struct.pack(">ii", partition, len(records)) + records)
    return frame(PRODUCE_KEY, PRODUCE_VERSION, body, correlation_id=correlation_id)


def produce_answer(response: bytes, correlation_id: int, partition: int) -> tuple[int, int]:
    r = Reader(response)
    assert r.take(">i") == correlation_id
    assert r.take(">i") == 1 and r.string() == TOPIC and r.take(">i") == 1
    index, error, base_offset, _append_time = r.take(">ihqq")
    assert index == partition
    return error, base_offset


class RawProducer(threading.Thread):
    """Writes one record at a time, acks=all, to one partition on one broker, each with a
    value never sent before, and keeps every attempt and its answer."""

    def __init__(self, node: int, bootstrap: str, partition: int, stop: threading.Event):
        super().__init__(daemon=True, name=f"producer-{node}-{partition}")
        self.node, self.partition, self.stop = node, partition, stop
        host, port = bootstrap.rsplit(":", 1)
        self.address = (host, int(port))
        self.attempts: list[Attempt] = []

    def run(self) -> None:
        sock = None
        seq = 0
        while not self.stop.is_set():
            seq += 1
            attempt = Attempt(self.node, self.partition,
                              f"n{self.node}-p{self.partition}-{seq}".encode(), 0.0)
            try:
                if sock is None:
                    sock = socket.create_connection(self.address, timeout=ANSWER_WITHIN_S)
                request = produce_request(self.partition, attempt.value, seq)
                attempt.sent = time.monotonic()
                self.attempts.append(attempt)
                sock.sendall(request)
                response = read_response(sock)
                if response is None:
                    raise ConnectionError("closed without an answer")
                attempt.error, attempt.offset = produce_answer(response, seq, self.partition)
                attempt.answered = time.monotonic()
            except OSError:
                if sock is not None:
                    sock.close()
                sock = None
            self.stop.wait(0.02 if attempt.acknowledged else 0.1)
        if sock is not None:
            sock.close()


def acks(producers: list[RawProducer], partition: int, node: int | None = None,
         sent_after: float = 0.0) -> list[Attempt]:
    return [a for pr in producers for a in list(pr.attempts)
            if a.partition == partition and a.acknowledged and a.sent > sent_after
            and (node is None or a.node == node)]


def produce_once(bootstrap: str, partition: int, value: bytes) -> int | None:
    """One acks=all write; its offset, or None when refused or unanswered."""
    host, port = bootstrap.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(produce_request(partition, value, 99))
            response = read_response(sock)
    except OSError:
        return None
    if response is None:
        return None
    error, offset = produce_answer(response, 99, partition)
    return offset if error == 0 else None


class HeldWrite(threading.Thread):
    """One acks=all write to the cut-off victim, waited for across the healing: a write
    the victim holds when it learns it no longer leads."""

    def __init__(self, node: int, bootstrap: str, partition: int):
        super().__init__(daemon=True, name=f"held-{node}-{partition}")
        host, port = bootstrap.rsplit(":", 1)
        self.address = (host, int(port))
        self.attempt = Attempt(node, partition, f"held-n{node}-p{partition}".encode(), 0.0)

    def run(self) -> None:
        a = self.attempt
        try:
            with socket.create_connection(self.address, timeout=CLUSTER_UP_S) as sock:
                a.sent = time.monotonic()
                sock.sendall(produce_request(a.partition, a.value, 98))
                response = read_response(sock)
                if response is not None:
                    a.error, a.offset = produce_answer(response, 98, a.partition)
                    a.answered = time.monotonic()
        except OSError:
            pass


# -- the logs on disk --------------------------------------------------------------------

def batches_on_disk(data_dir: Path, partition: int) -> list[bytes]:
    """The partition's batches, in order, as its segment files hold them."""
    found = []
    for segment in sorted((data_dir / "topics" / TOPIC / str(partition)).glob("*.log")):
        data = segment.read_bytes()
        at = 0
        while at + 12 <= len(data):
            (length,) = struct.unpack_from(">i", data, at + 8)
            if length <= 0 or at + 12 + length > len(data):
                break
            found.append(data[at:at + 12 + length])
            at += 12 + length
    return found


def records_of(batches: list[bytes]) -> dict[int, bytes]:
    """offset -> value of every record in `batches`."""
    records = {}
    for batch in batches:
        decoded = MemoryRecords(batch).next_batch()
        for r in decoded:
            records[r.offset] = r.value
    return records


# -- the test ------------------------------------------------------------------------------

@pytest.mark.parametrize("victim_kind", ["controller-leader", "partition-leader-only"])
def test_a_leader_cut_off_from_the_others_loses_no_acknowledged_record(make_broker, cut,
                                                                        victim_kind):
    started = time.monotonic()
    hosts, brokers = start_cluster_apart(make_broker)
    bootstraps = {n: brokers[n - 1].bootstrap for n in NODES}
    wait_until(lambda: all_agree(list(bootstraps.values()), 3), "three brokers, one controller",
               CLUSTER_UP_S)
    admin = AdminClient(rdkafka_base(",".join(bootstraps.values())))
    raise_on_error(admin.create_topics(
        [NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)],
        operation_timeout=ADMIN_TIMEOUT_S, request_timeout=ADMIN_TIMEOUT_S))
    wait_until(lambda: settled(bootstraps, set(NODES), 3), "the topic led, ISR 3", CLUSTER_UP_S)

    stop = threading.Event()
    producers = [RawProducer(n, bootstraps[n], p, stop) for n in NODES for p in range(PARTITIONS)]
    for pr in producers:
        pr.start()
    try:
        wait_until(lambda: all(len(acks(producers, p)) >= ACKS_STEADY for p in range(PARTITIONS)),
                   "every partition acknowledging", CLUSTER_UP_S)

        # The victim: the controller's leader and the partition it leads, or the leader of
        # a partition that does not lead the controller.
        state = wait_until(lambda: settled(bootstraps, set(NODES), 3), "the topic settled",
                           CLUSTER_UP_S)
        leaders = {p: record["leader"] for p, record in state["partitions"].items()}
        controller = state["controller"]
        if victim_kind == "controller-leader":
            victim = controller
        else:
            victim = next(n for n in NODES if n != controller and n in leaders.values())
        partition = next(p for p, leader in leaders.items() if leader == victim)
        majority = set(NODES) - {victim}

        cut.isolate(victim, hosts)
        isolated = time.monotonic()

        def new_leader():
            s = settled(bootstraps, majority, 2)
            if s is None or victim in s["partitions"][partition]["isr"] \
                    or s["controller"] not in majority:
                return None
            return s
        after = wait_until(new_leader, "the two others lead the controller and every "
                           "partition without the victim", FENCED_WITHIN_S)
        elected_after = time.monotonic() - isolated
        successor = after["partitions"][partition]["leader"]
        wait_until(lambda: len(acks(producers, partition, successor, isolated)) >= ACKS_STEADY,
                   "the new leader acknowledging", CLUSTER_UP_S)
        # What the victim answers meanwhile (printed at the end): it has heard of nothing
        # since the cut.
        victim_view = metadata(bootstraps[victim])["topics"][TOPIC]["partitions"][partition]
        held = HeldWrite(victim, bootstraps[victim], partition)
        held.start()
        time.sleep(max(0.0, isolated + ISOLATED_FOR_S - time.monotonic()))
        # Packets flow again from the first rule removed.
        healed = time.monotonic()
        cut.heal()

        wait_until(lambda: settled(bootstraps, set(NODES), 3),
                   "the victim back in every ISR, every broker agreeing", CLUSTER_UP_S)
        back_after = time.monotonic() - healed
        wait_until(lambda: all(len(acks(producers, p, sent_after=healed)) >= ACKS_STEADY
                               for p in range(PARTITIONS)),
                   "every partition acknowledging after the healing", CLUSTER_UP_S)
        held.join(timeout=CLUSTER_UP_S)
    finally:
        stop.set()
        for pr in producers:
            pr.join(timeout=ANSWER_WITHIN_S + 10)
    attempts = [a for pr in producers for a in pr.attempts] + [held.attempt]

    # One last write on each partition, acknowledged by all three: every replica then holds
    # every partition's log to its end (nothing is written after it).
    tries = itertools.count()
    ends = {}
    for p in range(PARTITIONS):
        def last_write(p=p):
            s = settled(bootstraps, set(NODES), 3)
            if s is None:
                return None
            offset = produce_once(bootstraps[s["partitions"][p]["leader"]], p,
                                  f"last-{p}-{next(tries)}".encode())
            return None if offset is None else offset + 1
        ends[p] = wait_until(last_write, f"partition {p}: a last write acknowledged",
                             CLUSTER_UP_S)
    wait_until(lambda: settled(bootstraps, set(NODES), 3),
               "every replica in sync after the last writes", CLUSTER_UP_S)

    consumed = {p: {} for p in range(PARTITIONS)}
    for r in read_records(",".join(bootstraps.values()), TOPIC, PARTITIONS,
                          end_offsets=[ends[p] for p in range(PARTITIONS)]):
        consumed[r.partition][r.offset] = r.value
    for b in brokers:
        b.stop()

    # Every acknowledged record is where it was acknowledged, and no value is there twice:
    # a write sent to the victim once it was cut off (or healed, before it heard that it no
    # longer leads) and held there is refused once it follows again, not acknowledged.
    lost = [a for a in attempts
            if a.acknowledged and consumed[a.partition].get(a.offset) != a.value]
    assert lost == [], \
        f"acknowledged, not at the offset acknowledged: {lost} (now there: " \
        f"{[consumed[a.partition].get(a.offset) for a in lost]}); victim {victim}, " \
        f"partition {partition}, cut at {isolated:.3f}, healed at {healed:.3f}"
    for p in range(PARTITIONS):
        values = list(consumed[p].values())
        assert len(values) == len(set(values)), f"partition {p}: a value written twice"
        assert sorted(consumed[p]) == list(range(ends[p])), f"partition {p}: offsets missing"

    # The three replicas' logs are the same, byte for byte, and hold what was read.
    for p in range(PARTITIONS):
        logs = {n: batches_on_disk(brokers[n - 1].data_dir, p) for n in NODES}
        for n in NODES:
            assert logs[n] == logs[successor], f"partition {p}: node {n}'s log differs"
        assert records_of(logs[successor]) == consumed[p], f"partition {p}: disk and read differ"

    # While cut off, the victim acknowledged nothing sent after the cut, and nothing later
    # than the bound; the others took over; it cut its divergent tail once back.
    during = [a for a in attempts if a.node == victim and a.partition == partition
              and a.acknowledged and isolated < a.answered < healed]
    assert [a for a in during if a.sent > isolated] == [], "the cut-off victim acknowledged"
    assert all(a.answered < isolated + STOPS_WITHIN_S for a in during), during
    unanswered = [a for a in attempts if a.node == victim and a.partition == partition
                  and isolated < a.sent < healed and not a.acknowledged]
    assert unanswered, "nothing was sent to the victim while it was cut off"
    successors = acks([pr for pr in producers if pr.node == successor], partition,
                      sent_after=isolated)
    assert [a for a in successors if a.sent < healed], "the new leader acknowledged nothing"
    text = brokers[victim - 1].stderr_path.read_text("utf-8", "replace")
    truncated = [line for line in text.splitlines() if "follower log truncated" in line
                 and f"topic={TOPIC}" in line and f"partition={partition}" in line]
    assert truncated, "the victim did not cut its divergent tail"
    print(f"victim node {victim} ({victim_kind}, controller was {controller}) led "
          f"{TOPIC}/{partition}; it saw itself {victim_view}; node {successor} led it "
          f"{elected_after:.1f} s after the cut; the victim acknowledged {len(during)} writes "
          f"sent before the cut and answered after it, and left {len(unanswered)} "
          f"unanswered; back in every ISR {back_after:.1f} s after the healing; "
          f"{sum(a.acknowledged for a in attempts)} writes acknowledged in all; "
          f"whole test {time.monotonic() - started:.1f} s")
