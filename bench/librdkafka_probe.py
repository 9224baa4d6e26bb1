#!/usr/bin/env python3
"""Light librdkafka clients for `headway bench noisy-neighbour --librdkafka`.

One paced producer (acks=all, linger 1 ms, librdkafka's defaults otherwise) and N
consumers (assign() at the partition's end, no group), each in a process of its own so
that no client waits for another's turn at the interpreter. Every value starts with its
send time, microseconds since the epoch, big-endian (the lab's stamp), so a consumer's
end-to-end latency is its receive time minus the stamp; publish latency is produce() to
the delivery report.

Protocol: once every client is connected and positioned, prints `ready`; then runs for
--duration seconds (plus up to DRAIN_S for the consumers to read what is in flight) and
prints one line of JSON in the lab's report shape: publish and consume rates, publish and
end-to-end latency summaries (exact percentiles over every sample after --warmup), per
consumer figures and a per-second series. Bounded in time throughout.

Usage: librdkafka_probe.py --bootstrap HOST:PORT --topic T [--rate 2000] [--size 1024]
                           [--consumers 3] [--duration 30] [--warmup 3]
"""

import argparse
import json
import multiprocessing as mp
import struct
import sys
import time

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition, libversion
from confluent_kafka import version as client_version

READY_S = 30.0  # connecting and positioning a client
DRAIN_S = 3.0  # consumers keep reading after the producer stopped
FLUSH_S = 10.0  # the producer's last acknowledgements
RESULT_S = 30.0  # a child's results after its time


def now_us():
    return time.time_ns() // 1000


def produce(args, origin, ready, go, out):
    p = Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "linger.ms": 1})
    # Connects and fetches metadata before the clock starts.
    p.list_topics(args.topic, timeout=READY_S)
    samples = []  # (us since origin at acknowledgement, latency us)
    errors = [0]

    def delivered(err, msg):
        t = now_us()
        if err is not None:
            errors[0] += 1
            return
        stamp = struct.unpack(">Q", msg.value()[:8])[0]
        samples.append((t, t - stamp))

    pad = bytes(b"a"[0] + i % 23 for i in range(max(args.size, 8) - 8))
    ready.set()
    go.wait(READY_S)
    start = time.monotonic()
    sent = 0
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= args.duration:
            break
        wait = sent / args.rate - elapsed
        if wait > 0:
            # poll() counts whole milliseconds and returns at once below one: sleep
            # through short waits rather than spin a core the broker needs.
            if wait >= 0.002:
                p.poll(min(wait - 0.001, 0.05))
            else:
                time.sleep(wait)
            continue
        try:
            p.produce(args.topic, struct.pack(">Q", now_us()) + pad, on_delivery=delivered)
            sent += 1
        except BufferError:
            errors[0] += 1
        p.poll(0)
    left = p.flush(FLUSH_S)
    out.put(("producer", origin.value, sent, errors[0] + left, samples))


def consume(args, i, origin, ready, go, out):
    c = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"noisy-neighbour-probe-{i}",
            "enable.auto.commit": False,
        }
    )
    _, high = c.get_watermark_offsets(TopicPartition(args.topic, 0), timeout=READY_S)
    c.assign([TopicPartition(args.topic, 0, high if high >= 0 else OFFSET_END)])
    samples = []
    size = 0
    ready.set()
    go.wait(READY_S)
    end = time.monotonic() + args.duration + DRAIN_S
    while time.monotonic() < end:
        msg = c.poll(0.05)
        if msg is None or msg.error() is not None:
            continue
        t = now_us()
        value = msg.value() or b""
        size += len(value)
        if len(value) >= 8:
            samples.append((t, t - struct.unpack(">Q", value[:8])[0]))
    c.close()
    out.put((f"fast-{i}", origin.value, len(samples), size, samples))


def summary(latencies_us):
    v = sorted(latencies_us)
    if not v:
        return {"count": 0, "mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "p999": 0.0, "max": 0.0}

    def q(f):
        return v[min(len(v) - 1, int(f * len(v)))] / 1000.0

    return {
        "count": len(v),
        "mean": sum(v) / len(v) / 1000.0,
        "p50": q(0.5),
        "p90": q(0.9),
        "p99": q(0.99),
        "p999": q(0.999),
        "max": v[-1] / 1000.0,
    }


def rate(messages, nbytes, seconds):
    return {
        "messages": messages,
        "bytes": nbytes,
        "msgs_per_s": messages / seconds,
        "mb_per_s": nbytes / 1e6 / seconds,
    }


def counted(samples, origin_us, warmup_s):
    return [lat for t, lat in samples if t >= origin_us + warmup_s * 1e6]


def per_second(samples, origin_us):
    seconds = {}
    for t, lat in samples:
        seconds.setdefault(max(0, int((t - origin_us) // 1_000_000)), []).append(lat)
    return seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--rate", type=float, default=2000.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--consumers", type=int, default=3)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=0.0)
    args = ap.parse_args()
    args.rate = max(args.rate, 1.0)

    ctx = mp.get_context("fork")
    origin = ctx.Value("q", 0)  # the clock's start, set just before `go`
    out = ctx.Queue()
    go = ctx.Event()
    children = []
    readies = []
    for i in range(args.consumers):
        r = ctx.Event()
        children.append(ctx.Process(target=consume, args=(args, i, origin, r, go, out), daemon=True))
        readies.append(r)
    r = ctx.Event()
    children.append(ctx.Process(target=produce, args=(args, origin, r, go, out), daemon=True))
    readies.append(r)
    for c in children:
        c.start()
    deadline = time.monotonic() + READY_S
    for r in readies:
        if not r.wait(max(0.0, deadline - time.monotonic())):
            print("not ready", flush=True)
            sys.exit(1)
    origin.value = now_us()
    print("ready", flush=True)
    go.set()

    results = {}
    deadline = time.monotonic() + args.duration + DRAIN_S + FLUSH_S + RESULT_S
    while len(results) < len(children):
        try:
            name, *rest = out.get(timeout=max(0.1, deadline - time.monotonic()))
        except Exception:
            break
        results[name] = rest
    for c in children:
        c.join(1.0)
        if c.is_alive():
            c.kill()
    if "producer" not in results:
        print("the producer did not report", file=sys.stderr)
        sys.exit(1)

    origin = origin.value
    _, sent, errors, publish_samples = results["producer"]
    seconds = args.duration
    consumers = []
    e2e_all = []
    e2e_samples = []
    for i in range(args.consumers):
        if f"fast-{i}" not in results:
            continue
        _, n, nbytes, samples = results[f"fast-{i}"]
        lat = counted(samples, origin, args.warmup)
        e2e_all.extend(lat)
        e2e_samples.extend(samples)
        consumers.append(
            {
                "name": f"fast-{i}",
                "role": "fast",
                "consume": rate(n, nbytes, seconds),
                "e2e_latency_ms": summary(lat),
                "lag_end": max(0, sent - n),
            }
        )
    pub_s = per_second(publish_samples, origin)
    e2e_s = per_second(e2e_samples, origin)
    series = []
    for t in range(max([*pub_s, *e2e_s, -1]) + 1):
        p = summary(pub_s.get(t, []))
        e = summary(e2e_s.get(t, []))
        series.append(
            {
                "t": t,
                "publish_msgs_per_s": float(p["count"]),
                "consume_msgs_per_s": float(e["count"]),
                "backlog": 0,
                "publish_p50_ms": p["p50"],
                "publish_p99_ms": p["p99"],
                "e2e_p50_ms": e["p50"],
                "e2e_p99_ms": e["p99"],
                "e2e_max_ms": e["max"],
            }
        )
    consumed = sum(c["consume"]["messages"] for c in consumers)
    consumed_bytes = sum(c["consume"]["bytes"] for c in consumers)
    report = {
        "client": f"confluent-kafka {client_version()[0]}, librdkafka {libversion()[0]}",
        "publish": rate(sent, sent * args.size, seconds),
        "publish_errors": errors,
        "consume": rate(consumed, consumed_bytes, seconds),
        "publish_latency_ms": summary(counted(publish_samples, origin, args.warmup)),
        "e2e_latency_ms": summary(e2e_all),
        "consumers": consumers,
        "series": series,
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
