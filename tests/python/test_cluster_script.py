"""`scripts/cluster` starts a working three-broker cluster, breaks one node and stops it all.

Goal: the script a person (or the lab) uses to run a cluster does what it says: `start`
returns once the brokers form a cluster, with the bootstrap list as its last line; the
cluster takes a topic at replication factor 3 and librdkafka's producer at its defaults
(acks=all) writes records a consumer reads back; `stop --kill 2` ends that node (status
says it is down), `stop --restart 2` brings it back into every ISR; `stop` leaves no
broker process. Teardown stops the cluster whatever happened, and a broker that panicked
fails the test.

Method: the script runs as a user runs it (a subprocess, HEADWAY_BIN naming the broker);
pids come from its cluster.json; each partition's leader and ISR are asked of every live
broker with a raw Metadata request. A second test checks the one-line errors of a missing
binary and of a directory without a cluster, which start no broker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import HEADWAY_BIN, PANICKED_RE, REPO_ROOT
from support import ADMIN_TIMEOUT_S, ErrorLog, raise_on_error, rdkafka_base, read_records, \
    wait_until
from test_cluster_metadata import CLUSTER_UP_S, metadata

SCRIPT = REPO_ROOT / "scripts" / "cluster"
TOPIC = "scripted"
PARTITIONS = 3
RECORDS = 300
# The script's own deadlines (start 90 s, stop grace 30 s) come first; this only keeps a
# hung script from hanging the suite.
SCRIPT_TIMEOUT_S = 150.0


def cluster(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Runs scripts/cluster with `args` as a user would; HEADWAY_BIN names the broker."""
    env = {**os.environ, "HEADWAY_BIN": str(HEADWAY_BIN)}
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, env=env, timeout=SCRIPT_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    if check:
        assert done.returncode == 0, \
            f"scripts/cluster {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
    return done


def gone(pid: int) -> bool:
    """The process has exited (a zombie nobody reaped yet counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


@pytest.fixture
def cluster_dir(tmp_path):
    """The cluster's directory; at teardown the cluster is stopped (and any broker left
    killed), and a panic in any broker's log fails the test."""
    directory = tmp_path / "cluster"
    yield directory
    state = directory / "cluster.json"
    if state.exists():
        cluster("stop", "--dir", str(directory), check=False)
        for node in json.loads(state.read_text())["nodes"]:
            if node["pid"] and not gone(node["pid"]):
                os.kill(node["pid"], signal.SIGKILL)
    panics = [f"{log.parent.name}: {line}" for log in sorted(directory.glob("node-*/headway.log"))
              for line in log.read_text("utf-8", "replace").splitlines()
              if PANICKED_RE.search(line)]
    if panics:
        pytest.fail("headway panicked\n" + "\n".join(panics), pytrace=False)


def in_sync(bootstraps: dict[int, str], alive: set[int], isr_size: int):
    """The topic's leaders when every live broker reports every partition led by a live
    broker with `isr_size` replicas in sync, identically."""
    answers = [metadata(bootstraps[n])["topics"].get(TOPIC) for n in sorted(alive)]
    first = answers[0]
    if first is None or len(first["partitions"]) != PARTITIONS:
        return None
    for topic in answers:
        if topic != first:
            return None
        for p in topic["partitions"].values():
            if p["leader"] not in alive or len(p["isr"]) != isr_size:
                return None
    return {i: p["leader"] for i, p in first["partitions"].items()}


def status_lines(directory: Path) -> tuple[int, dict[int, str]]:
    done = cluster("status", "--dir", str(directory), check=False)
    lines = {int(line.split(":")[0].split()[1]): line
             for line in done.stdout.splitlines() if line.startswith("node ")}
    return done.returncode, lines


def test_start_produce_kill_restart_stop(cluster_dir):
    started = time.monotonic()
    done = cluster("start", "--brokers", "3", "--dir", str(cluster_dir))
    boot = done.stdout.strip().splitlines()[-1]
    up = time.monotonic() - started
    state = json.loads((cluster_dir / "cluster.json").read_text())
    nodes = {n["id"]: n for n in state["nodes"]}
    assert sorted(nodes) == [1, 2, 3]
    bootstraps = {i: f"127.0.0.1:{n['port']}" for i, n in nodes.items()}
    assert boot == ",".join(bootstraps[i] for i in (1, 2, 3))
    # `start` returned: every broker already lists the three and one controller.
    answers = [metadata(b) for b in bootstraps.values()]
    assert all(sorted(a["brokers"]) == [1, 2, 3] for a in answers), answers
    assert len({a["controller"] for a in answers}) == 1 and answers[0]["controller"] > 0

    admin = AdminClient(rdkafka_base(boot))
    raise_on_error(admin.create_topics(
        [NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)],
        operation_timeout=ADMIN_TIMEOUT_S, request_timeout=ADMIN_TIMEOUT_S))
    wait_until(lambda: in_sync(bootstraps, {1, 2, 3}, 3), "the topic led, ISR 3",
               CLUSTER_UP_S)

    errors = ErrorLog()
    producer = Producer({**rdkafka_base(boot), "error_cb": errors})
    failed: list[str] = []

    def delivered(err, _msg):
        if err is not None:
            failed.append(str(err))

    for seq in range(RECORDS):
        producer.produce(TOPIC, key=str(seq).encode(), value=f"v{seq}".encode(),
                         partition=seq % PARTITIONS, on_delivery=delivered)
    assert producer.flush(ADMIN_TIMEOUT_S) == 0, errors.summary()
    assert failed == []
    values = sorted(r.value for r in read_records(boot, TOPIC, PARTITIONS, expected=RECORDS))
    assert values == sorted(f"v{seq}".encode() for seq in range(RECORDS))

    # One node crashes: status reports it down and the others up.
    cluster("stop", "--kill", "2", "--dir", str(cluster_dir))
    assert gone(nodes[2]["pid"])
    code, lines = status_lines(cluster_dir)
    assert code == 3, lines
    assert " down," in lines[2], lines
    assert " alive," in lines[1] and " alive," in lines[3], lines

    # Back on its ports and data, it is registered and catches up into every ISR.
    cluster("stop", "--restart", "2", "--dir", str(cluster_dir))
    restarted = json.loads((cluster_dir / "cluster.json").read_text())["nodes"][1]
    assert restarted["pid"] != nodes[2]["pid"] and restarted["port"] == nodes[2]["port"]
    code, lines = status_lines(cluster_dir)
    assert code == 0, lines
    assert all(" alive," in line and "registered" in line and "not registered" not in line
               for line in lines.values()), lines
    wait_until(lambda: in_sync(bootstraps, {1, 2, 3}, 3), "node 2 back in every ISR",
               CLUSTER_UP_S)

    cluster("stop", "--dir", str(cluster_dir))
    pids = [n["pid"] for n in json.loads((cluster_dir / "cluster.json").read_text())["nodes"]]
    assert all(gone(pid) for pid in pids), pids
    code, lines = status_lines(cluster_dir)
    assert code == 3 and all(" down," in line for line in lines.values()), lines
    print(f"cluster up in {up:.1f} s; whole test {time.monotonic() - started:.1f} s")


def test_errors_are_one_line(tmp_path):
    missing = tmp_path / "no-such-headway"
    done = cluster("start", "--dir", str(tmp_path / "c"), "--bin", str(missing), check=False)
    assert done.returncode == 1
    assert done.stderr.strip() == f"cluster: no headway binary at {missing}: give the " \
                                  f"headway binary with --bin or HEADWAY_BIN"
    assert done.stdout == ""

    done = cluster("stop", "--dir", str(tmp_path / "empty"), check=False)
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1
    assert "no cluster in" in done.stderr
