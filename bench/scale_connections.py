#!/usr/bin/env python3
"""Working clients' latency and the broker's memory beside many idle connections.

Steps: starts `headway serve` on a fresh data directory (connections_max --idle plus
100, from a config file; both processes at their hard open files limit); creates a
topic of 4 partitions; runs one librdkafka producer (1 KiB records, acks=all, paced at --rate msg/s for
--seconds) and records each delivery's latency; opens --idle TCP connections that stay
idle; runs the same producer
again beside them; measures the broker's RSS and open files each time. Every load is
bounded in time; the broker is stopped at the end.

Prints the figures and appends them as one JSON line to --out (a .jsonl file).

Usage: bench/scale_connections.py --headway target/release/headway [--idle 10000]
           [--rate 2000] [--seconds 20] [--out bench/results/scale/connections.jsonl]
"""

import argparse
import json
import os
import re
import resource
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

LISTENING = re.compile(rb"^headway listening on (\S+:\d+)")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def paced_producer(bootstrap: str, rate: int, seconds: float) -> dict:
    """1 KiB records at `rate` msg/s for `seconds`, acks=all: latency percentiles in ms."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
    latencies: list[float] = []
    errors = [0]

    def delivered(err, _msg, sent=None) -> None:
        if err is not None:
            errors[0] += 1
        else:
            latencies.append((time.monotonic() - sent) * 1000)

    value = b"v" * 1024
    began = time.monotonic()
    i = 0
    while (now := time.monotonic()) - began < seconds:
        due = began + i / rate
        if now < due:
            producer.poll(min(due - now, 0.005))
            continue
        producer.produce("work", value=value, partition=i % 4,
                         on_delivery=lambda err, msg, sent=now: delivered(err, msg, sent))
        producer.poll(0)
        i += 1
    assert producer.flush(60) == 0, "records left unsent"
    warm = latencies[len(latencies) // 10:]
    return {"sent": i, "errors": errors[0], "p50_ms": round(percentile(warm, 0.5), 2),
            "p99_ms": round(percentile(warm, 0.99), 2),
            "p999_ms": round(percentile(warm, 0.999), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--headway", default="target/release/headway")
    ap.add_argument("--idle", type=int, default=10000)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--out")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory(prefix="headway-conns-") as tmp:
        tmp = Path(tmp)
        config = tmp / "headway.toml"
        config.write_text(f"connections_max = {args.idle + 100}\n")
        log = open(tmp / "headway.log", "ab")
        proc = subprocess.Popen([args.headway, "serve", "--data-dir", str(tmp / "data"),
                                 "--listen", "127.0.0.1:0", "--config", str(config)],
                                stdout=subprocess.PIPE, stderr=log)
        try:
            bootstrap = next(m.group(1).decode() for line in proc.stdout
                             if (m := LISTENING.match(line)))
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic("work", 4, 1)])["work"].result(60)
            time.sleep(1)
            alone = paced_producer(bootstrap, args.rate, args.seconds)
            alone.update(rss_mib=round(rss_mib(proc.pid), 1),
                         open_files=len(os.listdir(f"/proc/{proc.pid}/fd")))
            host, port = bootstrap.rsplit(":", 1)
            idle = [socket.create_connection((host, int(port)), timeout=30)
                    for _ in range(args.idle)]
            time.sleep(2)
            beside = paced_producer(bootstrap, args.rate, args.seconds)
            beside.update(rss_mib=round(rss_mib(proc.pid), 1),
                          open_files=len(os.listdir(f"/proc/{proc.pid}/fd")))
            for s in idle:
                s.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)
    result = {"label": args.label, "idle_connections": args.idle, "rate": args.rate,
              "seconds": args.seconds, "alone": alone, "beside_idle": beside}
    print(json.dumps(result))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
