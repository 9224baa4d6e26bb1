"""The `headway` client commands as a user runs them: restarts, pipes, headers.

Goal: `headway produce` rides out a broker restart (SIGTERM, then a new process on the
same address) with every record acknowledged and stored exactly once, in order per
partition; `headway group describe` and `headway consume` end quietly with status 0 when
their reader (`head`) closes the pipe; `-H` headers (and the headers field of `-K` lines)
round-trip through kcat; describing a group that does not exist fails clearly.
Method: real processes against a real broker. The restart test starts its own broker on
a fixed free port, so that the producer finds the new process at the same address.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from conftest import HEADWAY_BIN, PANICKED_RE
from support import create_topic, rdkafka_base

RUN_DEADLINE_S = 120.0
RESTART_RECORDS = 200_000
RESTART_CHUNK = 2_000
RESTART_CHUNK_PAUSE_S = 0.05
ACKED_BEFORE_STOP = 40_000


def client_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("HEADWAY_")}


def headway(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(HEADWAY_BIN), *args], input=stdin, capture_output=True,
                          timeout=RUN_DEADLINE_S, env=client_env())


def consume_all(bootstrap: str, topic: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value line) of every record, read with `headway consume -e`."""
    proc = headway("consume", topic, "-b", bootstrap, "--from-beginning", "-e", "-q",
                   "-f", "{partition} {offset} {value}")
    assert proc.returncode == 0, proc.stderr.decode()
    rows = []
    for line in proc.stdout.decode().splitlines():
        partition, offset, value = line.split(" ", 2)
        rows.append((int(partition), int(offset), value))
    return rows


class FixedPortBroker:
    """`headway serve` on one data directory and one fixed port, restartable."""

    def __init__(self, data_dir: Path, log_path: Path):
        self.data_dir = data_dir
        self.log_path = log_path
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(HEADWAY_BIN), "serve", "--data-dir", str(self.data_dir),
                 "--listen", self.bootstrap],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                env={**client_env(), "NO_COLOR": "1"})
        line = self.proc.stdout.readline().decode()
        assert line.startswith("headway listening on"), f"broker did not start:\n{self.log()}"
        # Keep reading stdout so that the broker never blocks on it.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=60)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = Consumer({**rdkafka_base(bootstrap), "group.id": "watermarks"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in range(partitions))
    finally:
        consumer.close()


def test_produce_rides_out_a_broker_restart_exactly_once(tmp_path):
    broker = FixedPortBroker(tmp_path / "data", tmp_path / "broker.log")
    broker.start()
    topic, partitions = "restarted", 4
    try:
        create_topic(broker.bootstrap, topic, partitions)
        err_path = tmp_path / "produce.err"
        with open(err_path, "wb") as err:
            producer = subprocess.Popen(
                [str(HEADWAY_BIN), "produce", topic, "-b", broker.bootstrap, "-q"],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
                env=client_env())

        def feed() -> None:
            # Paced, so that the restart falls in the middle of the stream.
            for start in range(0, RESTART_RECORDS, RESTART_CHUNK):
                producer.stdin.write("".join(
                    f"{i}\n" for i in range(start, start + RESTART_CHUNK)).encode())
                producer.stdin.flush()
                time.sleep(RESTART_CHUNK_PAUSE_S)
            producer.stdin.close()

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        deadline = time.monotonic() + RUN_DEADLINE_S
        while high_watermarks(broker.bootstrap, topic, partitions) < ACKED_BEFORE_STOP:
            assert time.monotonic() < deadline, "the producer made no progress"
            time.sleep(0.1)
        assert broker.stop(signal.SIGTERM) == 0, broker.log()
        broker.start()
        feeder.join(timeout=RUN_DEADLINE_S)
        code = producer.wait(timeout=RUN_DEADLINE_S + 60)
        stderr = err_path.read_text()
        assert code == 0, stderr
        assert f"produced {RESTART_RECORDS} records" in stderr and ", 0 failed" in stderr, stderr
        assert stderr.count("WARN") <= 10, f"one WARN line per cause, not per batch:\n{stderr}"

        rows = consume_all(broker.bootstrap, topic)
        values = [int(v) for (_, _, v) in rows]
        assert len(values) == RESTART_RECORDS and set(values) == set(range(RESTART_RECORDS)), (
            f"{len(values)} records stored, {len(set(values))} distinct")
        for p in range(partitions):
            in_partition = [int(v) for (q, _, v) in sorted(rows) if q == p]
            assert in_partition == sorted(in_partition), f"partition {p} out of order"
        assert not PANICKED_RE.search(broker.log_path.read_text(errors="replace")), (
            f"the broker panicked:\n{broker.log()}")
    finally:
        if broker.proc and broker.proc.poll() is None:
            broker.stop(signal.SIGKILL)


def run_piped_to_head(*args: str) -> subprocess.CompletedProcess:
    """`headway ARGS | head -1` with pipefail: the status is headway's."""
    command = " ".join([str(HEADWAY_BIN), *args])
    return subprocess.run(["bash", "-c", f"set -o pipefail; {command} | head -1"],
                          capture_output=True, timeout=RUN_DEADLINE_S, env=client_env())


def test_a_closed_stdout_ends_quietly(broker):
    topic = "piped"
    # Many partitions: describe writes its first line long before its last.
    create_topic(broker.bootstrap, topic, 64)
    lines = "".join(f"line {i}\n" for i in range(20_000)).encode()
    assert headway("produce", topic, "-b", broker.bootstrap, "-q", stdin=lines).returncode == 0
    grouped = headway("consume", topic, "-b", broker.bootstrap, "--group", "piped-group",
                      "--from-beginning", "-e", "-q", "-c", "100")
    assert grouped.returncode == 0, grouped.stderr.decode()

    for args in (["group", "describe", "piped-group", "-b", broker.bootstrap],
                 ["consume", topic, "-b", broker.bootstrap, "--from-beginning", "-e", "-q"],
                 ["consume", topic, "-b", broker.bootstrap, "--from-beginning", "-e", "-q",
                  "--group", "piped-group"]):
        proc = run_piped_to_head(*args)
        stderr = proc.stderr.decode()
        assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{stderr}"
        assert len(proc.stdout.decode().splitlines()) == 1, proc.stdout
        for text in ("panicked", "Broken pipe", "error"):
            assert text not in stderr, f"{args}: {stderr}"


def test_describing_a_missing_group_fails_clearly(broker):
    proc = headway("group", "describe", "nobody-here", "-b", broker.bootstrap)
    assert proc.returncode == 1, proc
    assert "group nobody-here does not exist" in proc.stderr.decode(), proc.stderr


def test_headers_round_trip_through_kcat(broker):
    if shutil.which("kcat") is None:
        pytest.fail("kcat is not installed: run scripts/setup", pytrace=False)
    topic = "headers"
    create_topic(broker.bootstrap, topic, 1)
    produced = headway("produce", topic, "-b", broker.bootstrap, "-q", "-H", "app=cli",
                       "-H", "trace=t-1", stdin=b"first\nsecond\n")
    assert produced.returncode == 0, produced.stderr.decode()
    keyed = headway("produce", topic, "-b", broker.bootstrap, "-q", "-K", ":",
                    "-H", "app=cli", stdin=b"k1:third:seq=3,kind=keyed\nk2:fourth\n")
    assert keyed.returncode == 0, keyed.stderr.decode()
    proc = subprocess.run(["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-e", "-q",
                           "-f", "%k|%s|%h\n"], capture_output=True, timeout=RUN_DEADLINE_S)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().splitlines() == [
        "|first|app=cli,trace=t-1",
        "|second|app=cli,trace=t-1",
        "k1|third|app=cli,seq=3,kind=keyed",
        "k2|fourth|app=cli",
    ]
