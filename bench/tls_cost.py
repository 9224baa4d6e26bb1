#!/usr/bin/env python3
"""The cost of TLS on the produce path: one broker, a PLAINTEXT and an SSL listener, the
same librdkafka producer over each in turn.

One broker serves both listeners (`--listeners PLAINTEXT://...,SSL://...`, a certificate
made by trustme for 127.0.0.1). For each round and each listener, in alternating order,
one librdkafka producer (its defaults plus `acks`) writes records of `--size` bytes as
fast as it can for `--duration` seconds into a topic of its own; the script records the
acknowledged records and bytes per second and the broker's CPU seconds (user + system,
from /proc) per GB acknowledged. Alternating the listeners round by round puts both
under the same machine conditions, and the spread over rounds is reported, every round
kept.

Writes one JSON line per run to OUT/runs.jsonl and a summary table to OUT/README.md.

Usage: bench/tls_cost.py [--rounds 3] [--duration 20] [--size 1024] [--acks all]
                         [--out bench/results/tls] [--bin target/release/headway]
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trustme
from confluent_kafka import Producer, libversion
from confluent_kafka.admin import AdminClient, NewTopic

START_S = 30.0  # the broker's listeners appear
FLUSH_S = 30.0  # the producer's last acknowledgements
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def start_broker(binary: str, work: Path, cert: str, key: str):
    """Starts the broker; returns (process, {listener name: address})."""
    out = open(work / "broker.out", "w")
    proc = subprocess.Popen(
        [binary, "serve", "--data-dir", str(work / "data"),
         "--listeners", "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
         "--ssl-certificate-file", cert, "--ssl-key-file", key],
        stdout=out, stderr=open(work / "broker.err", "w"), stdin=subprocess.DEVNULL)
    pattern = re.compile(r"^headway listener (\S+) \S+ (\S+)$", re.MULTILINE)
    deadline = time.monotonic() + START_S
    while True:
        found = dict(pattern.findall((work / "broker.out").read_text()))
        if {"PLAINTEXT", "SSL"} <= found.keys():
            return proc, found
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            sys.exit(f"the broker did not start; see {work / 'broker.err'}")
        time.sleep(0.05)


def produce(settings: dict, topic: str, size: int, duration: float) -> dict:
    """Writes as fast as the producer takes records for `duration` s; acknowledged counts."""
    acked = {"records": 0, "bytes": 0, "errors": 0}

    def delivered(err, msg):
        if err is None:
            acked["records"] += 1
            acked["bytes"] += len(msg.value())
        else:
            acked["errors"] += 1

    producer = Producer(settings)
    value = os.urandom(size)
    start = time.monotonic()
    end = start + duration
    while time.monotonic() < end:
        try:
            producer.produce(topic, value, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
            continue
        producer.poll(0)
    left = producer.flush(FLUSH_S)
    elapsed = time.monotonic() - start
    acked["unflushed"] = left
    acked["seconds"] = elapsed
    return acked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--acks", default="all")
    parser.add_argument("--out", default="bench/results/tls")
    parser.add_argument("--bin", default="target/release/headway")
    args = parser.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="headway-tls-cost-"))
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    cert, key, ca_file = work / "server.pem", work / "server.key", work / "ca.pem"
    cert.write_bytes(b"".join(c.bytes() for c in server.cert_chain_pems))
    key.write_bytes(server.private_key_pem.bytes())
    ca_file.write_bytes(ca.cert_pem.bytes())

    proc, listeners = start_broker(args.bin, work, str(cert), str(key))
    runs = []
    try:
        client = {
            "PLAINTEXT": {},
            "SSL": {"security.protocol": "ssl", "ssl.ca.location": str(ca_file)},
        }
        for r in range(args.rounds):
            order = ["PLAINTEXT", "SSL"] if r % 2 == 0 else ["SSL", "PLAINTEXT"]
            for name in order:
                bootstrap = listeners[name]
                topic = f"tls-cost-{name.lower()}-{r}"
                admin = AdminClient({"bootstrap.servers": bootstrap, **client[name]})
                admin.create_topics([NewTopic(topic, 1)])[topic].result(timeout=30)
                settings = {"bootstrap.servers": bootstrap, "acks": args.acks, **client[name]}
                load = os.getloadavg()[0]
                cpu0 = cpu_seconds(proc.pid)
                got = produce(settings, topic, args.size, args.duration)
                cpu = cpu_seconds(proc.pid) - cpu0
                run = {
                    "round": r + 1, "listener": name, "acks": args.acks, "size": args.size,
                    "records_per_s": got["records"] / got["seconds"],
                    "mb_per_s": got["bytes"] / got["seconds"] / 1e6,
                    "broker_cpu_s_per_gb": cpu / (got["bytes"] / 1e9) if got["bytes"] else None,
                    "errors": got["errors"], "unflushed": got["unflushed"],
                    "seconds": round(got["seconds"], 2), "load_1m": round(load, 2),
                    "cores": os.cpu_count(), "librdkafka": libversion()[0],
                }
                runs.append(run)
                print(f"round {r + 1} {name:9} {run['mb_per_s']:7.1f} MB/s "
                      f"{run['records_per_s']:9.0f} rec/s  broker CPU "
                      f"{run['broker_cpu_s_per_gb'] or 0:5.2f} s/GB  load {load:.1f}",
                      flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(work, ignore_errors=True)

    with open(out / "runs.jsonl", "a") as f:
        for run in runs:
            f.write(json.dumps(run) + "\n")
    write_summary(out, runs, args)


def write_summary(out: Path, runs: list[dict], args) -> None:
    """Per round the TLS/plaintext throughput ratio, and the spread over rounds."""
    rows, ratios, cpu_ratios = [], [], []
    for r in sorted({run["round"] for run in runs}):
        by = {run["listener"]: run for run in runs if run["round"] == r}
        plain, tls = by["PLAINTEXT"], by["SSL"]
        ratio = tls["mb_per_s"] / plain["mb_per_s"]
        cpu_ratio = tls["broker_cpu_s_per_gb"] / plain["broker_cpu_s_per_gb"]
        ratios.append(ratio)
        cpu_ratios.append(cpu_ratio)
        rows.append(f"| {r} | {plain['mb_per_s']:.1f} | {tls['mb_per_s']:.1f} | {ratio:.2f} | "
                    f"{plain['broker_cpu_s_per_gb']:.2f} | {tls['broker_cpu_s_per_gb']:.2f} | "
                    f"{cpu_ratio:.2f} | {plain['load_1m']:.1f} / {tls['load_1m']:.1f} |")
    text = [
        "| round | plaintext MB/s | TLS MB/s | TLS / plaintext | broker CPU s/GB plaintext | "
        "TLS | CPU ratio | load (1 min) |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
        *rows,
        "",
        f"Throughput ratio TLS / plaintext: median {statistics.median(ratios):.2f}, "
        f"range {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} rounds. "
        f"Broker CPU per GB, TLS / plaintext: median {statistics.median(cpu_ratios):.2f}, "
        f"range {min(cpu_ratios):.2f}-{max(cpu_ratios):.2f}.",
        "",
        f"Command: `bench/tls_cost.py --rounds {args.rounds} --duration {args.duration:g} "
        f"--size {args.size} --acks {args.acks}`; {os.cpu_count()} cores; librdkafka "
        f"{runs[0]['librdkafka']}.",
    ]
    (out / "latest.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
