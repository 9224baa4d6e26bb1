#!/usr/bin/env python3
"""acks=all on a three-broker cluster: paced latency and maximum throughput, RF=3.

Measures a replicated cluster with Kafka's own load generator (kafka-producer-perf-test,
`org.apache.kafka.tools.ProducerPerformance` from Apache Kafka 4.3.1 in peers/kafka/lib),
so both systems are driven by a client neither of them wrote, at its default settings
except `acks=all`:
- paced: `--rate` records/s (default 2,000) of `--size` bytes for `--seconds`, reporting
  the producer's latency percentiles (send to acknowledgement);
- max: as fast as the producer goes, for `--max-records` records, reporting records/s.
Each is run `--runs` times after one unmeasured warm-up; every run is listed, bad ones
included, with the median and the spread.

The cluster under test is either given (`--bootstrap HOST:PORT`) or started here, in a
temporary directory, and stopped at the end: `--start-kafka` starts three Kafka nodes with
peers/kafka/start-cluster (replication 3, min.insync.replicas 2), `--start-headway` three
headway brokers with scripts/cluster (the binary: $HEADWAY_BIN, else
target/release/headway). Either way the topic is created here at replication factor 3
with min.insync.replicas 2.

Usage:
    bench/cluster_acks.py --start-kafka [--kafka-setting KEY=VALUE ...] [--runs 5]
        [--seconds 30] [--out FILE.md]
    bench/cluster_acks.py --start-headway [--headway-arg=--flag=value ...] [...]
    bench/cluster_acks.py --bootstrap 127.0.0.1:9092 --label headway [...]

A run of the defaults takes about 6 minutes.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KAFKA = REPO / "peers" / "kafka"
CLUSTER = REPO / "scripts" / "cluster"
MIN_INSYNC_REPLICAS = 2
RESULT = re.compile(
    r"(?P<sent>\d+) records sent, (?P<rate>[\d.]+) records/sec .*?, (?P<avg>[\d.]+) ms avg latency, "
    r"(?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, "
    r"(?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99.9th"
)


def free_port_block(count: int) -> int:
    """A first port such that it and the next `count - 1`, and the same 1000 higher, are free."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            first = s.getsockname()[1]
        if first + 1000 + count >= 65536:
            continue
        ports = [first + i for i in range(count)] + [first + 1000 + i for i in range(count)]
        free = True
        for port in ports:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    free = False
                    break
        if free:
            return first
    sys.exit("cluster_acks: no free block of ports")


def create_topic(bootstrap: str, topic: str, partitions: int, replicas: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"min.insync.replicas": str(MIN_INSYNC_REPLICAS)}
    futures = admin.create_topics([NewTopic(topic, partitions, replicas, config=config)],
                                  request_timeout=30)
    for future in futures.values():
        future.result(timeout=60)


def perf(bootstrap: str, topic: str, records: int, size: int, rate: int) -> dict:
    command = [
        "java", "-Xmx512m", "-cp", f"{KAFKA / 'lib'}/*",
        f"-Dlog4j2.configurationFile={KAFKA / 'log4j2.properties'}",
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic", topic, "--num-records", str(records), "--record-size", str(size),
        "--throughput", str(rate),
        "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL)
    lines = [m for m in map(RESULT.search, done.stdout.splitlines()) if m]
    if done.returncode != 0 or not lines:
        sys.exit(f"cluster_acks: the load generator failed ({done.returncode}):\n"
                 + (done.stdout + done.stderr)[-3000:])
    result = lines[-1].groupdict()
    return {k: float(v) for k, v in result.items()}


def headway_binary() -> str:
    return os.environ.get("HEADWAY_BIN") or str(REPO / "target" / "release" / "headway")


def headway_version() -> str:
    """The label of a headway run: `headway --version` and the commit it was built from."""
    try:
        version = subprocess.run([headway_binary(), "--version"], capture_output=True,
                                 text=True, timeout=30).stdout.strip()
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        return "headway"
    return f"{version or 'headway'} ({commit})" if commit else (version or "headway")


def start_headway(directory: Path, serve_args: list[str]) -> str:
    """Three headway brokers started by scripts/cluster in `directory`; their bootstrap."""
    command = [str(CLUSTER), "start", "--brokers", "3", "--dir", str(directory),
               "--bin", headway_binary()]
    if serve_args:
        command += ["--", *serve_args]
    started = subprocess.run(command, stdout=subprocess.PIPE, text=True, timeout=400)
    if started.returncode != 0:
        sys.exit(f"cluster_acks: scripts/cluster start failed ({started.returncode})")
    return started.stdout.strip().splitlines()[-1]


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} (min {min(values):.1f}, max {max(values):.1f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--bootstrap", help="a running cluster's bootstrap address")
    target.add_argument("--start-kafka", action="store_true",
                        help="start three Kafka nodes here (peers/kafka/start-cluster)")
    target.add_argument("--start-headway", action="store_true",
                        help="start three headway brokers here (scripts/cluster)")
    parser.add_argument("--kafka-setting", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for every Kafka node (with --start-kafka), repeatable")
    parser.add_argument("--headway-arg", action="append", default=[], metavar="ARG",
                        help="an argument for every `headway serve` (with --start-headway), "
                             "repeatable; write it --headway-arg=--flush=interval:5")
    parser.add_argument("--label", default=None, help="the system's name in the report")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=30, help="length of a paced run")
    parser.add_argument("--rate", type=int, default=2000, help="records/s of a paced run")
    parser.add_argument("--size", type=int, default=100, help="bytes per record")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--max-records", type=int, default=500_000)
    parser.add_argument("--out", type=Path, default=None, help="Markdown report to write")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="cluster-acks-"))
    bootstrap = args.bootstrap
    label = args.label or ("Kafka 4.3.1" if args.start_kafka
                           else headway_version() if args.start_headway else bootstrap)
    if args.start_kafka and args.kafka_setting:
        label += " (" + ", ".join(args.kafka_setting) + ")"
    if args.start_headway and args.headway_arg:
        label += " (" + " ".join(args.headway_arg) + ")"
    try:
        if args.start_headway:
            bootstrap = start_headway(work / "headway", args.headway_arg)
        if args.start_kafka:
            first = free_port_block(3)
            subprocess.run([str(KAFKA / "start-cluster"), str(work / "kafka"), "3", str(first),
                            *args.kafka_setting],
                           check=True, timeout=400, stdout=sys.stderr)
            bootstrap = ",".join(f"127.0.0.1:{first + i}" for i in range(3))
        topic = f"acks-all-{os.getpid()}"
        create_topic(bootstrap, topic, args.partitions, 3)
        print(f"cluster_acks: {label} at {bootstrap}, topic {topic} ({args.partitions} partitions, RF 3)",
              file=sys.stderr)
        paced_records = args.rate * args.seconds
        perf(bootstrap, topic, min(paced_records, args.rate * 5), args.size, args.rate)  # warm-up
        paced, maxed = [], []
        for run in range(1, args.runs + 1):
            paced.append(perf(bootstrap, topic, paced_records, args.size, args.rate))
            maxed.append(perf(bootstrap, topic, args.max_records, args.size, -1))
            print(f"cluster_acks: run {run}: paced p99 {paced[-1]['p99']:.0f} ms, "
                  f"max {maxed[-1]['rate']:.0f} records/s", file=sys.stderr)
    finally:
        if args.start_kafka:
            subprocess.run([str(KAFKA / "stop-cluster"), str(work / "kafka")],
                           timeout=200, stdout=sys.stderr)
        if args.start_headway and (work / "headway" / "cluster.json").exists():
            subprocess.run([str(CLUSTER), "stop", "--dir", str(work / "headway")],
                           timeout=200, stdout=sys.stderr)

    cores = os.cpu_count()
    command = "bench/cluster_acks.py " + " ".join(
        a for a in sys.argv[1:] if not a.startswith("--out") and a != str(args.out))
    lines = [
        f"# acks=all on three brokers, replication 3: {label}",
        "",
        f"{datetime.date.today().isoformat()}, {cores} cores, command `{command}`.",
        f"Load: Kafka's ProducerPerformance (4.3.1), acks=all, {args.size}-byte records, "
        f"{args.partitions} partitions; paced at {args.rate} records/s for {args.seconds} s; "
        f"max rate over {args.max_records} records; one unmeasured warm-up first.",
        "",
        "| run | paced p50 ms | paced p99 ms | paced p99.9 ms | paced max ms | max records/s |",
        "|---|---|---|---|---|---|",
    ]
    for i, (p, m) in enumerate(zip(paced, maxed), start=1):
        lines.append(f"| {i} | {p['p50']:.0f} | {p['p99']:.0f} | {p['p999']:.0f} | "
                     f"{p['max']:.0f} | {m['rate']:.0f} |")
    lines += [
        "",
        f"Median (spread) over {len(paced)} runs: paced p99 {spread([p['p99'] for p in paced])} ms, "
        f"p99.9 {spread([p['p999'] for p in paced])} ms; "
        f"max {spread([m['rate'] for m in maxed])} records/s.",
        "",
    ]
    report = "\n".join(lines)
    print(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
