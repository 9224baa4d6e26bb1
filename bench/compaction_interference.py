#!/usr/bin/env python3
"""What the log cleaner costs the clients beside it: a light producer and tail consumers
on one topic, while the broker compacts a large partition of another.

Steps, against any Kafka-compatible broker (headway or Kafka):
1. creates `cmp-light` (1 partition) and `cmp-table` (1 partition, cleanup.policy=compact,
   64 MiB segments, min.cleanable.dirty.ratio=1.0, which holds the cleaner off);
2. fills `cmp-table` with --table-mb MiB of 1 KiB values, each key written --updates times
   (so about 1 - 1/updates of it is superseded), with progress lines;
3. *idle*: runs bench/librdkafka_probe.py on `cmp-light` for --duration seconds (a paced
   producer at --rate msg/s, acks=all, and 3 consumers from the end, librdkafka);
4. sets `cmp-table`'s min.cleanable.dirty.ratio to 0.01 (IncrementalAlterConfigs): the
   cleaner takes the partition at its next look (headway: log_cleaner_backoff_ms, 15 s by
   default; Kafka: log.cleaner.backoff.ms, 15 s);
5. *cleaning*: runs the same probe again, for the same time, while the cleaner works;
6. waits (bounded) for the table's directory to shrink, when --table-dir is given.

Prints and writes (with --out DIR, as compaction-LABEL.json) the light clients' publish
and end-to-end p99 in both phases and their ratio, with how far the cleaner got: the
table's directory size before and after (--table-dir) and, for headway, the cleaner's
bytes from /metrics (--metrics HOST:PORT).

Usage: bench/compaction_interference.py --bootstrap HOST:PORT --label NAME
           [--table-mb 2048] [--updates 8] [--duration 30] [--rate 2000]
           [--table-dir DIR] [--metrics HOST:PORT] [--out DIR]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

from confluent_kafka import Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                   ConfigResource, NewTopic, ResourceType)

MIB = 1024 * 1024
VALUE_BYTES = 1024
PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "librdkafka_probe.py")
SHRINK_WAIT_S = 300.0  # the cleaner's work after the measured phase


def log(*words):
    print("[compaction]", *words, flush=True)


def create_topics(admin, args):
    table = NewTopic("cmp-table", num_partitions=1, replication_factor=1, config={
        "cleanup.policy": "compact", "segment.bytes": str(64 * MIB),
        "min.cleanable.dirty.ratio": "1.0"})
    light = NewTopic("cmp-light", num_partitions=1, replication_factor=1)
    for name, future in admin.create_topics([table, light], operation_timeout=30).items():
        future.result(timeout=60)
        log("created", name)


def fill_table(args):
    keys = max(1, args.table_mb * MIB // (VALUE_BYTES * args.updates))
    total = keys * args.updates
    p = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 20,
                  "batch.size": 1_000_000, "queue.buffering.max.kbytes": 262144})
    failed = [0]

    def report(err, _msg):
        if err is not None:
            failed[0] += 1

    value = (os.urandom(64) * (VALUE_BYTES // 64 + 1))[:VALUE_BYTES]
    started = time.monotonic()
    step = max(1, total // 8)
    for i in range(total):
        key = b"key-%09d" % (i % keys)
        while True:
            try:
                p.produce("cmp-table", key=key, value=value, partition=0, on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
        if (i + 1) % step == 0:
            log(f"table: {(i + 1) * VALUE_BYTES // MIB} of {total * VALUE_BYTES // MIB} MiB")
    remaining = p.flush(120)
    seconds = time.monotonic() - started
    if remaining or failed[0]:
        sys.exit(f"filling the table: {remaining} undelivered, {failed[0]} failed")
    mb = total * VALUE_BYTES / MIB
    log(f"table filled: {keys} keys x {args.updates} updates, {mb:.0f} MiB in {seconds:.1f} s")
    return {"keys": keys, "records": total, "mib": mb, "fill_s": seconds}


def probe(args, phase):
    command = [sys.executable, PROBE, "--bootstrap", args.bootstrap, "--topic", "cmp-light",
               "--rate", str(args.rate), "--consumers", "3", "--duration", str(args.duration),
               "--warmup", str(args.duration / 10)]
    log(f"{phase}: light clients for {args.duration:.0f} s")
    run = subprocess.run(command, capture_output=True, text=True,
                         timeout=args.duration + 180)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if run.returncode != 0 or not lines:
        sys.exit(f"probe failed ({run.returncode}): {run.stderr[-2000:]}")
    result = json.loads(lines[-1])
    pub, e2e = result["publish_latency_ms"], result["e2e_latency_ms"]
    log(f"{phase}: publish p99 {pub['p99']:.2f} ms, e2e p99 {e2e['p99']:.2f} ms")
    return result


def set_ratio(admin, ratio):
    resource = ConfigResource(ResourceType.TOPIC, "cmp-table", incremental_configs=[
        ConfigEntry("min.cleanable.dirty.ratio", ratio,
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=60)


def dir_mib(path):
    if not path:
        return None
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except FileNotFoundError:
                pass
    return total / MIB


def cleaner_metrics(address):
    """headway's cleaner figures for cmp-table, or None."""
    if not address:
        return None
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
        text = r.read().decode()
    found = {}
    for name in ("passes", "bytes_read", "bytes_written", "records_removed"):
        m = re.search(r'^headway_cleaner_%s\{topic="cmp-table",partition="0"\} (\S+)' % name,
                      text, re.M)
        found[name] = float(m.group(1)) if m else 0.0
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--table-mb", type=int, default=2048)
    ap.add_argument("--updates", type=int, default=8)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=2000.0)
    ap.add_argument("--table-dir", help="the broker's directory of cmp-table partition 0")
    ap.add_argument("--metrics", help="headway's metrics address, HOST:PORT")
    ap.add_argument("--out")
    args = ap.parse_args()

    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    create_topics(admin, args)
    table = fill_table(args)
    before_mib = dir_mib(args.table_dir)
    idle = probe(args, "idle")
    set_ratio(admin, "0.01")
    altered = time.monotonic()
    cleaning = probe(args, "cleaning")
    during = cleaner_metrics(args.metrics)
    after_mib = dir_mib(args.table_dir)
    deadline = altered + SHRINK_WAIT_S
    while args.table_dir and after_mib > before_mib / 2 and time.monotonic() < deadline:
        time.sleep(2)
        after_mib = dir_mib(args.table_dir)
    summary = {
        "label": args.label,
        "cores": os.cpu_count(),
        "command": " ".join(["bench/compaction_interference.py", *sys.argv[1:]]),
        "table": table,
        "table_dir_mib_before": before_mib,
        "table_dir_mib_after": after_mib,
        "table_shrunk_within_s": (time.monotonic() - altered) if args.table_dir else None,
        "cleaner_during_phase": during,
        "idle": {"publish_p99_ms": idle["publish_latency_ms"]["p99"],
                 "e2e_p99_ms": idle["e2e_latency_ms"]["p99"]},
        "cleaning": {"publish_p99_ms": cleaning["publish_latency_ms"]["p99"],
                     "e2e_p99_ms": cleaning["e2e_latency_ms"]["p99"]},
        "series": {"idle": idle.get("series"), "cleaning": cleaning.get("series")},
    }
    for kind in ("publish_p99_ms", "e2e_p99_ms"):
        summary[f"{kind}_cleaning_over_idle"] = summary["cleaning"][kind] / summary["idle"][kind]
    log(f"{args.label}: publish p99 x{summary['publish_p99_ms_cleaning_over_idle']:.2f}, "
        f"e2e p99 x{summary['e2e_p99_ms_cleaning_over_idle']:.2f} with the cleaner working; "
        f"table {before_mib} -> {after_mib} MiB")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, f"compaction-{args.label}.json")
        with open(path, "w") as f:
            json.dump(summary, f, indent=1)
        log("wrote", path)


if __name__ == "__main__":
    main()
