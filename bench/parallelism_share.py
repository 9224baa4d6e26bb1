#!/usr/bin/env python3
"""The parallelism seed's spike with a share group: 10 classic consumers (one per
partition) against 50 share consumers on the same 10 partitions, headway beside Kafka 4.3.1.

A spike of `--messages` records (the seed's 1,000 concurrent requests) is written at once by
a librdkafka (confluent-kafka) producer to a fresh topic of `--partitions` partitions, round
robin over the partitions, each value stamped with its send time. It is drained by

- classic: `--classic` KafkaConsumer threads of one consumer group (one per partition);
- share: `--share` KafkaShareConsumer threads of one share group (client defaults,
  implicit acknowledgement), on the same number of partitions;

each processing a record by waiting `--io-ms` (the seed's I/O-bound handler) before the
next. The consumers are one JVM (bench/java/SpikeDrain.java, compiled by this script
against tests/java/lib-4, the kafka-clients 4.x jars scripts/setup installs, into a scratch
directory); they join their group before the spike is written. Reported per broker and
shape, in the seed's table shape: drain duration (first send to last record processed),
producer-to-consumer latency p50/p95/p99/max (send to end of processing, first delivery),
throughput (records / drain), records processed more than once, and records missing, which
must be 0: the script exits with an error when any is.

headway is started with `--share-auto-offset-reset earliest`; Kafka (peers/kafka/start) gets
the group config `share.auto.offset.reset=earliest` from the Admin client before the share
consumers start. Every phase has a deadline; the brokers are stopped however the script
ends. The order of the four runs alternates from round to round.

Writes one JSON line per run to OUT/runs.jsonl (appended) and the tables to OUT/README.md
(`--summarize` rewrites it from runs.jsonl alone).

Usage: bench/parallelism_share.py [--rounds 3] [--messages 1000] [--io-ms 40]
           [--partitions 10] [--classic 10] [--share 50] [--brokers headway,kafka]
           [--share-props key=value,...] [--summarize]
           [--out bench/results/parallelism-share] [--bin target/release/headway]
"""

import argparse
import json
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer, libversion
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
START_S = 30.0  # headway's listener appears
JOIN_S = 80.0  # the consumers join their group (the JVM's own bound; this script waits 30 s more)
FLUSH_S = 30.0  # the spike is acknowledged
JVM = ["-XX:+UseSerialGC", "-Xmx512m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_headway(binary: str, work: Path) -> tuple[subprocess.Popen, str]:
    out = open(work / "headway.out", "w")
    proc = subprocess.Popen(
        [binary, "serve", "--data-dir", str(work / "headway"), "--listen", "127.0.0.1:0",
         "--share-auto-offset-reset", "earliest"],
        stdout=out, stderr=open(work / "headway.err", "w"), stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if not k.startswith("HEADWAY_")})
    pattern = re.compile(r"^headway listening on (\S+:\d+)\s*$", re.MULTILINE)
    deadline = time.monotonic() + START_S
    while True:
        m = pattern.search((work / "headway.out").read_text())
        if m:
            return proc, m.group(1)
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            sys.exit("parallelism_share: headway did not start (its stderr: headway.err)")
        time.sleep(0.05)


def start_kafka(work: Path) -> str:
    port = free_port()
    subprocess.run([str(REPO / "peers/kafka/start"), str(work / "kafka"), str(port)],
                   check=True, stdout=sys.stderr, timeout=180)
    return f"127.0.0.1:{port}"


def compile_java(work: Path) -> str:
    lib = REPO / "tests/java/lib-4"
    if not list(lib.glob("kafka-clients-4*.jar")):
        sys.exit("parallelism_share: no kafka-clients 4.x in tests/java/lib-4: run scripts/setup")
    classes = work / "classes"
    subprocess.run(["javac", "-nowarn", "--release", "17", "-d", str(classes), "-cp",
                    f"{lib}/*", str(REPO / "bench/java/SpikeDrain.java")],
                   check=True, timeout=300)
    return f"{classes}:{lib}/*"


class Drain:
    """The consumers' JVM; its JSON lines collected as they come."""

    def __init__(self, classpath: str, work: Path, args: list[str]):
        self.events: list[dict] = []
        self.cond = threading.Condition()
        self.err_path = work / f"java-{time.monotonic_ns()}.err"
        self.proc = subprocess.Popen(["java", *JVM, "-cp", classpath, "SpikeDrain", *args],
                                     stdout=subprocess.PIPE, stderr=open(self.err_path, "w"),
                                     stdin=subprocess.DEVNULL, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.strip():
                with self.cond:
                    self.events.append(json.loads(line))
                    self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_for(self, name: str, deadline_s: float) -> dict:
        end = time.monotonic() + deadline_s
        with self.cond:
            while True:
                for e in self.events:
                    if e["event"] == name:
                        return e
                    if e["event"] == "error":
                        raise RuntimeError(f"consumers: {e['error']}")
                if not self.reader.is_alive():
                    raise RuntimeError(f"consumers exited ({self.proc.poll()}) before {name}: "
                                       + self.err_path.read_text()[-2000:])
                left = end - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"consumers: no {name} within {deadline_s:.0f} s")
                self.cond.wait(min(left, 0.5))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.reader.join(timeout=10)


def spike(bootstrap: str, topic: str, messages: int, partitions: int) -> dict[int, int]:
    """Writes the spike; returns each record's send time in ns (wall clock) by sequence."""
    sent: dict[int, int] = {}
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(messages):
        now = time.time_ns()
        sent[i] = now
        while True:
            try:
                producer.produce(topic, f"{i}:{now}".encode(), partition=i % partitions,
                                 on_delivery=lambda err, _m: err and errors.append(err))
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(FLUSH_S)
    if left or errors:
        raise RuntimeError(f"spike: {left} unacknowledged, errors {errors[:3]}")
    return sent


def pct(sorted_ms: list[float], q: float) -> float:
    """Nearest rank."""
    i = min(len(sorted_ms) - 1, max(0, math.ceil(q * len(sorted_ms)) - 1))
    return sorted_ms[i]


def one_run(broker: str, bootstrap: str, mode: str, rnd: int, args, classpath: str,
            work: Path) -> dict:
    topic = f"spike-{mode}-{rnd}-{time.time_ns() % 10**9}"
    group = f"{topic}-group"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(timeout=30)
    consumers = args.share if mode == "share" else args.classic
    cmd = ["--bootstrap", bootstrap, "--topic", topic, "--group", group, "--mode", mode,
           "--consumers", str(consumers), "--expect", str(args.messages),
           "--io-ms", str(args.io_ms), "--deadline-s", str(args.deadline_s),
           "--join-s", str(JOIN_S),
           "--partitions", str(args.partitions),
           "--set-reset", "true" if broker == "kafka" else "false",
           "--share-props", args.share_props]
    load = os.getloadavg()
    drain = Drain(classpath, work, cmd)
    try:
        try:
            ready = drain.wait_for("ready", JOIN_S + 30)
        except RuntimeError as e:
            # The group never settled: no spike is written; the run is kept as failed.
            return {"round": rnd, "broker": broker, "shape": mode, "consumers": consumers,
                    "share_props": args.share_props if mode == "share" else "",
                    "partitions": args.partitions, "messages": args.messages,
                    "io_ms": args.io_ms, "error": str(e)[:2000], "load_1m": round(load[0], 2),
                    "load_5m": round(load[1], 2), "cores": os.cpu_count(),
                    "librdkafka": libversion()[0]}
        sent = spike(bootstrap, topic, args.messages, args.partitions)
        drain.wait_for("done", args.deadline_s + 60)
        drain.proc.wait(timeout=90)
    finally:
        drain.kill()
    first: dict[int, int] = {}
    times: dict[int, int] = {}
    by_consumer: dict[int, int] = {}
    max_delivery = 0
    for e in drain.events:
        if e["event"] != "record":
            continue
        seq = int(e["v"].split(":")[0])
        times[seq] = times.get(seq, 0) + 1
        first.setdefault(seq, e["t"])
        by_consumer[e["c"]] = by_consumer.get(e["c"], 0) + 1
        max_delivery = max(max_delivery, e["d"])
    done = next(e for e in drain.events if e["event"] == "done")
    lat = sorted(first[s] - sent[s] / 1e6 for s in first)
    start_ms = min(sent.values()) / 1e6
    drain_s = (max(first.values()) - start_ms) / 1e3 if first else None
    return {
        "round": rnd, "broker": broker, "shape": mode, "consumers": consumers,
        "share_props": args.share_props if mode == "share" else "",
        "partitions": args.partitions, "messages": args.messages, "io_ms": args.io_ms,
        "drain_s": round(drain_s, 3) if drain_s else None,
        "p50_s": round(pct(lat, 0.50) / 1e3, 3) if lat else None,
        "p95_s": round(pct(lat, 0.95) / 1e3, 3) if lat else None,
        "p99_s": round(pct(lat, 0.99) / 1e3, 3) if lat else None,
        "max_s": round(lat[-1] / 1e3, 3) if lat else None,
        "throughput_per_s": round(len(first) / drain_s, 1) if drain_s else None,
        "processed_more_than_once": sum(n - 1 for n in times.values()),
        "missing": args.messages - len(first), "timed_out": done["timed_out"],
        "consumers_with_records": len(by_consumer),
        "max_records_one_consumer": max(by_consumer.values()) if by_consumer else 0,
        "max_delivery_count": max_delivery,
        "records_by_consumer": sorted(by_consumer.values(), reverse=True),
        "members_per_partition": ready.get("members_per_partition"),
        "load_1m": round(load[0], 2), "load_5m": round(load[1], 2),
        "cores": os.cpu_count(), "librdkafka": libversion()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--io-ms", type=int, default=40)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--classic", type=int, default=10)
    parser.add_argument("--share", type=int, default=50)
    parser.add_argument("--deadline-s", type=float, default=120.0,
                        help="per run: the drain's deadline after the consumers joined")
    parser.add_argument("--share-props", default="",
                        help="share consumer settings over the defaults, k=v,k=v")
    parser.add_argument("--brokers", default="headway,kafka")
    parser.add_argument("--out", default="bench/results/parallelism-share")
    parser.add_argument("--bin", default="target/release/headway")
    parser.add_argument("--summarize", action="store_true",
                        help="only rewrite OUT/README.md from OUT/runs.jsonl")
    args = parser.parse_args()
    if args.summarize:
        runs_file = Path(args.out) / "runs.jsonl"
        write_summary(Path(args.out), [json.loads(line) for line in
                                       runs_file.read_text().splitlines() if line.strip()])
        return
    brokers = args.brokers.split(",")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="headway-parallelism-share-"))
    headway = None
    kafka_started = False
    runs = []
    try:
        classpath = compile_java(work)
        addr = {}
        if "headway" in brokers:
            headway, addr["headway"] = start_headway(args.bin, work)
        if "kafka" in brokers:
            addr["kafka"] = start_kafka(work)
            kafka_started = True
        plan = [(b, m) for b in brokers for m in ("classic", "share")]
        for rnd in range(1, args.rounds + 1):
            order = plan if rnd % 2 == 1 else plan[::-1]
            for broker, mode in order:
                run = one_run(broker, addr[broker], mode, rnd, args, classpath, work)
                runs.append(run)
                if run.get("error"):
                    print(f"round {rnd} {broker:8} {mode:7} FAILED: {run['error']}", flush=True)
                    continue
                print(f"round {rnd} {broker:8} {mode:7} x{run['consumers']:<3} drain "
                      f"{run['drain_s']} s  p50 {run['p50_s']} p95 {run['p95_s']} p99 "
                      f"{run['p99_s']} max {run['max_s']} s  {run['throughput_per_s']}/s  "
                      f"more than once {run['processed_more_than_once']}  missing "
                      f"{run['missing']}  consumers with records "
                      f"{run['consumers_with_records']}  load {run['load_1m']}", flush=True)
    finally:
        if headway is not None:
            if headway.poll() is not None:
                print(f"parallelism_share: headway exited early ({headway.returncode}):\n"
                      + (work / "headway.err").read_text()[-3000:], file=sys.stderr)
            headway.terminate()
            try:
                headway.wait(timeout=60)
            except subprocess.TimeoutExpired:
                headway.kill()
        if kafka_started:
            subprocess.run([str(REPO / "peers/kafka/stop"), str(work / "kafka")],
                           stdout=sys.stderr, timeout=120)
        shutil.rmtree(work, ignore_errors=True)
        if runs:
            with open(out / "runs.jsonl", "a") as f:
                for run in runs:
                    f.write(json.dumps(run) + "\n")

    write_summary(out, runs)
    failed = [r for r in runs if r.get("error")]
    bad = [r for r in runs if r.get("missing")]
    if failed:
        print(f"parallelism_share: {len(failed)} run(s) failed: "
              + "; ".join(f"round {r['round']} {r['broker']} {r['shape']}: {r['error'][:300]}"
                          for r in failed), file=sys.stderr)
    if bad:
        sys.exit(f"parallelism_share: records missing in {len(bad)} run(s): "
                 + ", ".join(f"round {r['round']} {r['broker']} {r['shape']}: {r['missing']}"
                             for r in bad))
    if failed:
        sys.exit(1)


def fmt(values: list, unit: str = "") -> str:
    """Median and range over rounds."""
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:g}{unit}"
    return f"{med:g}{unit} ({min(values):g}-{max(values):g})"


def write_summary(out: Path, runs: list[dict]) -> None:
    """OUT/README.md from the runs: the table per broker and shape (median and range over
    rounds), every run with its machine load, and the command."""
    if not runs:
        return
    r0 = runs[0]
    brokers = list(dict.fromkeys(r["broker"] for r in runs))
    props = next((r.get("share_props") for r in runs if r.get("share_props")), "")
    command = (f"bench/parallelism_share.py --rounds {max(r['round'] for r in runs)} "
               f"--messages {r0['messages']} --io-ms {r0['io_ms']} --partitions "
               f"{r0['partitions']} --classic "
               f"{next((r['consumers'] for r in runs if r['shape'] == 'classic'), 0)} --share "
               f"{next((r['consumers'] for r in runs if r['shape'] == 'share'), 0)} "
               f"--brokers {','.join(brokers)}" + (f" --share-props {props}" if props else ""))
    loads = [r["load_1m"] for r in runs]
    failed = sum(1 for r in runs if r.get("error"))
    lines = [
        "# The parallelism seed with a share group: headway beside Kafka 4.3.1",
        "",
        "<!-- Written by bench/parallelism_share.py from runs.jsonl; do not edit. -->",
        "",
        f"Command: `{command}` ({r0['cores']} cores, librdkafka {r0['librdkafka']} "
        "producer, kafka-clients 4.3.1 consumers). A spike of "
        f"{r0['messages']} records on {r0['partitions']} partitions, drained by classic "
        "consumers (one group) and by share consumers (one share group), each record "
        f"processed by waiting {r0['io_ms']} ms. Drain: first send to last record processed; "
        "latency: send to end of processing (first delivery); throughput: records / drain. "
        "Method: the docstring of bench/parallelism_share.py.",
        "",
        f"The machine was shared with other builds and runs: 1-minute load average "
        f"{min(loads):g}-{max(loads):g} on {r0['cores']} cores at the start of the runs "
        "(per run below). Median (min-max) over rounds, every round kept"
        + (f"; {failed} run(s) failed (below) and are left out of the medians." if failed
           else "."),
        "",
        "| broker | shape | consumers | drain, s | p50, s | p95, s | p99, s | max, s | "
        "throughput, /s | processed more than once | missing | consumers with records |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for broker in brokers:
        for shape in ("classic", "share"):
            rs = [r for r in runs if r["broker"] == broker and r["shape"] == shape
                  and not r.get("error")]
            if not rs:
                continue
            lines.append(
                f"| {broker} | {shape} | {rs[0]['consumers']} | "
                f"{fmt([r['drain_s'] for r in rs])} | {fmt([r['p50_s'] for r in rs])} | "
                f"{fmt([r['p95_s'] for r in rs])} | {fmt([r['p99_s'] for r in rs])} | "
                f"{fmt([r['max_s'] for r in rs])} | {fmt([r['throughput_per_s'] for r in rs])} | "
                f"{fmt([r['processed_more_than_once'] for r in rs])} | "
                f"{fmt([r['missing'] for r in rs])} | "
                f"{fmt([r['consumers_with_records'] for r in rs])} |")
    lines += ["", "Every run, in the order run:", "",
              "| round | broker | shape | drain, s | p50 / p95 / p99 / max, s | /s | "
              "more than once | missing | consumers with records | load 1 min / 5 min |",
              "|---:|---|---|---:|---|---:|---:|---:|---:|---|"]
    for r in runs:
        if r.get("error"):
            lines.append(f"| {r['round']} | {r['broker']} | {r['shape']} | failed: "
                         f"{r['error'][:200]} | | | | | | {r['load_1m']} / {r['load_5m']} |")
            continue
        lines.append(f"| {r['round']} | {r['broker']} | {r['shape']} | {r['drain_s']} | "
                     f"{r['p50_s']} / {r['p95_s']} / {r['p99_s']} / {r['max_s']} | "
                     f"{r['throughput_per_s']} | {r['processed_more_than_once']} | "
                     f"{r['missing']} | {r['consumers_with_records']} | "
                     f"{r['load_1m']} / {r['load_5m']} |")
    lines += ["", "Consumers with records: how many of the consumers processed at least one "
              "record (runs.jsonl has the records per consumer and, for the share group, the "
              "members per partition when the spike was written)."]
    text = "\n".join(lines) + "\n"
    (out / "README.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
