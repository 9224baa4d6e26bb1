"""kcat (Debian's build, linked to the system librdkafka) against headway.

Goal: the command-line tool people reach for first can list, produce and consume.
Method: `kcat -L` must show the broker at its advertised address and each topic with its
partition count and leaders; `kcat -P` sends keyed lines with headers and must exit 0
(every delivery acknowledged), then `kcat -C -e` must print exactly those records, in
order, and exit by itself at the end of the partition.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from support import create_topic

KCAT_TIMEOUT_S = 60


def kcat(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    # A missing kcat is a failure, not a skip: scripts/setup installs it everywhere.
    if shutil.which("kcat") is None:
        pytest.fail("kcat is not installed: run scripts/setup", pytrace=False)
    return subprocess.run(["kcat", *args], input=stdin, capture_output=True,
                          timeout=KCAT_TIMEOUT_S)


def describe(proc: subprocess.CompletedProcess) -> str:
    return (f"kcat {' '.join(proc.args[1:])} exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout.decode(errors='replace')}\n"
            f"stderr:\n{proc.stderr.decode(errors='replace')}")


def test_list_metadata(broker):
    create_topic(broker.bootstrap, "kcat-listed", 3)
    proc = kcat("-b", broker.bootstrap, "-L")
    assert proc.returncode == 0, describe(proc)
    out = proc.stdout.decode()

    host, port = broker.bootstrap.rsplit(":", 1)
    brokers = re.findall(r"^\s*broker (-?\d+) at (\S+?)(?: \(controller\))?$", out, re.M)
    assert len(brokers) == 1 and brokers[0][1] == f"{host}:{port}", \
        f"expected one line 'broker N at {broker.bootstrap}'\n{describe(proc)}"
    node_id = brokers[0][0]

    assert re.search(r'^\s*topic "kcat-listed" with 3 partitions:$', out, re.M), describe(proc)
    leaders = re.findall(r"^\s*partition (\d+), leader (-?\d+), replicas: (\S*), isrs: (\S*)",
                         out.split('topic "kcat-listed"', 1)[1], re.M)[:3]
    assert [(p, leader) for p, leader, _, _ in leaders] == [
        (str(p), node_id) for p in range(3)], describe(proc)


def test_produce_then_consume(broker):
    topic = "kcat-round-trip"  # auto-created by the produce, 1 partition by default
    lines = [f"key-{i}:value {i} {'x' * (i % 50)}" for i in range(500)]
    proc = kcat("-b", broker.bootstrap, "-P", "-t", topic, "-K", ":", "-H", "origin=kcat",
                "-H", "bin=a\tb", "-X", "acks=all",
                stdin=("\n".join(lines) + "\n").encode())
    assert proc.returncode == 0, describe(proc)

    proc = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                "-f", "%p|%o|%k|%s|%h\n")
    assert proc.returncode == 0, describe(proc)
    got = proc.stdout.decode().splitlines()
    want = [f"0|{i}|{line.replace(':', '|', 1)}|origin=kcat,bin=a\tb"
            for i, line in enumerate(lines)]
    assert got == want, describe(proc)


def test_consume_count_from_offset(broker):
    """-o <offset> -c <count>: a Fetch that starts in the middle of the log."""
    topic = "kcat-offsets"
    proc = kcat("-b", broker.bootstrap, "-P", "-t", topic,
                stdin="".join(f"m{i}\n" for i in range(100)).encode())
    assert proc.returncode == 0, describe(proc)
    proc = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "42", "-c", "5",
                "-q", "-f", "%o=%s\n")
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout.decode().splitlines() == [f"{o}=m{o}" for o in range(42, 47)], \
        describe(proc)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_produce(broker, codec):
    """The system librdkafka (older than the one in confluent-kafka) compresses too."""
    topic = f"kcat-{codec}"
    lines = [f"{codec} record {i} " + "abc" * (i % 40) for i in range(2000)]
    proc = kcat("-b", broker.bootstrap, "-P", "-t", topic, "-X", f"compression.codec={codec}",
                "-X", "linger.ms=20", stdin=("\n".join(lines) + "\n").encode())
    assert proc.returncode == 0, describe(proc)
    proc = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                "-f", "%o|%s\n")
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout.decode().splitlines() == [f"{i}|{line}" for i, line in enumerate(lines)]
