#!/usr/bin/env python3
"""What a partition costs a headway broker at rest, and how long a start takes, at N
partitions.

Steps: starts `headway serve` on a fresh data directory (connections_max 1000 from a
config file, so that the open files budget is not kept for 10,000 connections); creates
one topic of --partitions partitions (in steps of 1,000, CreatePartitions); writes one
record to every partition (librdkafka, acks=all); measures the idle broker's open files
(/proc/PID/fd) and RSS; stops it (SIGTERM) and times the next start until it listens
("clean" start); kills that one (SIGKILL) and times the next start ("after SIGKILL").

Prints the figures and appends them as one JSON line to --out (a .jsonl file).

Usage: bench/scale_startup.py --headway target/release/headway --partitions 3000
           [--out bench/results/scale/startup.jsonl] [--label NAME]
"""

import argparse
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

LISTENING = re.compile(rb"^headway listening on (\S+:\d+)")


def start(binary: str, data: Path, config: Path, log) -> tuple[subprocess.Popen, str, float]:
    began = time.monotonic()
    proc = subprocess.Popen([binary, "serve", "--data-dir", str(data), "--listen",
                             "127.0.0.1:0", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=log)
    for line in proc.stdout:
        m = LISTENING.match(line)
        if m:
            return proc, m.group(1).decode(), time.monotonic() - began
    raise SystemExit(f"headway exited with {proc.wait()} before listening")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--headway", default="target/release/headway")
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--out")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="headway-scale-") as tmp:
        tmp = Path(tmp)
        config = tmp / "headway.toml"
        config.write_text("connections_max = 1000\n")
        data = tmp / "data"
        log = open(tmp / "headway.log", "ab")
        proc, bootstrap, _ = start(args.headway, data, config, log)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        first = min(1000, args.partitions)
        admin.create_topics([NewTopic("wide", first, 1)])["wide"].result(300)
        count = first
        while count < args.partitions:
            count = min(count + 1000, args.partitions)
            admin.create_partitions([NewPartitions("wide", count)])["wide"].result(300)
        time.sleep(1)  # metadata of the new partitions reaches the producer
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                             "linger.ms": 5})
        for p in range(args.partitions):
            producer.produce("wide", value=b"x" * 100, partition=p)
            producer.poll(0)
        assert producer.flush(300) == 0, "records left unsent"
        time.sleep(2)
        fds = len(os.listdir(f"/proc/{proc.pid}/fd"))
        rss = rss_mib(proc.pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        proc, _, clean_s = start(args.headway, data, config, log)
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
        proc, _, killed_s = start(args.headway, data, config, log)
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    result = {"label": args.label, "partitions": args.partitions, "open_files_idle": fds,
              "rss_mib_idle": round(rss, 1), "start_after_clean_stop_s": round(clean_s, 2),
              "start_after_sigkill_s": round(killed_s, 2)}
    print(json.dumps(result))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
