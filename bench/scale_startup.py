#!/usr/bin/env python3
"""What a partition costs a headway broker at rest, how long a start and a stop take,
and what one producer writes, at N partitions.

Steps: starts `headway serve` on a fresh data directory (connections_max 1000 from a
config file, so that the open files budget is not kept for 10,000 connections; the
process's open files limit set to --nofile); creates one topic of --partitions
partitions (in steps of 1,000, CreatePartitions); writes one record to every partition
(librdkafka, acks=all); with --throughput-s, writes keyed 1 KiB records (librdkafka's
default partitioner, acks=all) for that long and counts those acknowledged; measures
the idle broker's open files (/proc/PID/fd, also sampled during the writes: the peak)
and RSS; stops it (SIGTERM) and times the stop ("stop after writes"); times the next
start until it listens ("clean" start); stops that one and times it ("idle stop");
starts again, kills it (SIGKILL) and times the next start ("after SIGKILL").

Prints the figures and appends them as one JSON line to --out (a .jsonl file).

Usage: bench/scale_startup.py --headway target/release/headway --partitions 3000
           [--out bench/results/scale/startup.jsonl] [--label NAME] [--nofile 20000]
           [--throughput-s 30]
"""

import argparse
import json
import os
import re
import resource
import signal
import threading
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

LISTENING = re.compile(rb"^headway listening on (\S+:\d+)")


NOFILE = 20000


def limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def start(binary: str, data: Path, config: Path, log) -> tuple[subprocess.Popen, str, float]:
    began = time.monotonic()
    proc = subprocess.Popen([binary, "serve", "--data-dir", str(data), "--listen",
                             "127.0.0.1:0", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=log, preexec_fn=limit_files)
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


def stop(proc: subprocess.Popen) -> float:
    """SIGTERM; seconds until the process exited."""
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(600)
    return time.monotonic() - began


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def keyed_throughput(bootstrap: str, seconds: float, pid: int) -> tuple[float, int]:
    """Keyed 1 KiB records, acks=all, for `seconds`: records acknowledged per second,
    and the peak of open files sampled meanwhile."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "queue.buffering.max.messages": 200000})
    acked = [0]
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            peak[0] = max(peak[0], open_files(pid))

    def delivered(err, _msg) -> None:
        if err is None:
            acked[0] += 1

    sampler = threading.Thread(target=sample)
    sampler.start()
    value = b"v" * 1024
    began = time.monotonic()
    i = 0
    while time.monotonic() - began < seconds:
        try:
            producer.produce("wide", key=b"key-%d" % i, value=value, on_delivery=delivered)
            i += 1
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(300) == 0, "records left unsent"
    elapsed = time.monotonic() - began
    done.set()
    sampler.join()
    return acked[0] / elapsed, peak[0]


def main() -> None:
    global NOFILE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--headway", default="target/release/headway")
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--out")
    ap.add_argument("--label", default="")
    ap.add_argument("--nofile", type=int, default=NOFILE)
    ap.add_argument("--throughput-s", type=float, default=0)
    args = ap.parse_args()
    NOFILE = args.nofile
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
        rate, peak = 0.0, 0
        if args.throughput_s > 0:
            rate, peak = keyed_throughput(bootstrap, args.throughput_s, proc.pid)
        time.sleep(2)
        fds = open_files(proc.pid)
        rss = rss_mib(proc.pid)
        written_stop_s = stop(proc)
        proc, _, clean_s = start(args.headway, data, config, log)
        time.sleep(2)
        idle_rss = rss_mib(proc.pid)
        idle_fds = open_files(proc.pid)
        idle_stop_s = stop(proc)
        proc, _, _ = start(args.headway, data, config, log)
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
        proc, _, killed_s = start(args.headway, data, config, log)
        stop(proc)
    result = {"label": args.label, "partitions": args.partitions, "nofile": NOFILE,
              "open_files_after_writes": fds, "rss_mib_after_writes": round(rss, 1),
              "open_files_idle": idle_fds, "rss_mib_idle": round(idle_rss, 1),
              "start_after_clean_stop_s": round(clean_s, 2),
              "start_after_sigkill_s": round(killed_s, 2),
              "stop_after_writes_s": round(written_stop_s, 2),
              "stop_idle_s": round(idle_stop_s, 2),
              "keyed_1kib_acks_all_msgs_per_s": round(rate), "open_files_peak_writing": peak}
    print(json.dumps(result))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
