"""One librdkafka (confluent-kafka) consumer-group member, run as its own process so that a
test can SIGKILL it: a crash the broker can only notice through the session timeout.

Usage: python group_member.py --bootstrap HOST:PORT --group G --topic T
           [--instance-id ID] [--session-timeout-ms N] [--heartbeat-interval-ms N]
           [--max-records N]

The member subscribes with librdkafka's defaults (eager "range,roundrobin" assignment),
auto.offset.reset=earliest, and commits by hand: after each batch it has reported, it
commits the next offset of every partition in that batch synchronously. So everything it
reported before a crash is either committed or re-delivered to another member
(at-least-once). Every record is checked against support.make_record.

Stdout carries one JSON object per line, flushed at once (a SIGKILL loses nothing that
was printed); `t` is time.monotonic(), which is system-wide on Linux:
    {"event": "started", "pid": ...}
    {"event": "assigned", "partitions": [...], "member_id": "...", "t": ...}
    {"event": "revoked", "partitions": [...], "t": ...}
    {"event": "records", "items": [[partition, offset, seq], ...], "problems": [...]}
    {"event": "committed", "offsets": {"partition": next_offset, ...}}
    {"event": "commit_failed", "error": "..."}   (e.g. during a rebalance; retried later)
    {"event": "idle", "committed": {...}}        --max-records reached: stops reading
    {"event": "client_error", "error": "..."}
    {"event": "closed", "count": N}              after "stop" on stdin: consumer closed
Stdin: a line "stop" makes the member commit, close (leaving the group) and exit 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition

from support import make_record, seq_of

POLL_S = 0.2
BATCH_MAX = 500
STOP_COMMAND = "stop"


def emit(event: str, **fields) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def check(msg) -> str | None:
    try:
        seq = seq_of(msg.value())
    except ValueError as e:
        return f"partition {msg.partition()} offset {msg.offset()}: {e}"
    want = make_record(seq)
    headers = list(msg.headers() or [])
    if msg.key() != want.key or msg.value() != want.value or headers != want.headers:
        return f"partition {msg.partition()} offset {msg.offset()}: seq {seq} differs"
    return None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--instance-id")
    parser.add_argument("--session-timeout-ms", type=int, default=10_000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=1_000)
    parser.add_argument("--max-records", type=int)
    args = parser.parse_args()

    config = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": args.heartbeat_interval_ms,
        "check.crcs": True,
        "error_cb": lambda err: emit("client_error", error=f"{err.name()}: {err.str()}"),
    }
    if args.instance_id:
        config["group.instance.id"] = args.instance_id
    consumer = Consumer(config)

    def on_assign(c, partitions):
        emit("assigned", partitions=sorted(p.partition for p in partitions),
             member_id=c.memberid(), t=time.monotonic())

    def on_revoke(_c, partitions):
        emit("revoked", partitions=sorted(p.partition for p in partitions), t=time.monotonic())

    stop = threading.Event()

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == STOP_COMMAND:
                break
        stop.set()  # "stop", or stdin closed because the test went away

    threading.Thread(target=read_stdin, daemon=True).start()
    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    emit("started", pid=os.getpid())

    count = 0
    idle = False
    while not stop.is_set():
        messages = consumer.consume(num_messages=BATCH_MAX, timeout=POLL_S)
        if idle:
            continue  # keeps the member in the group (max.poll.interval.ms) without reading
        items, problems, next_offsets = [], [], {}
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    emit("client_error", error=f"{err.name()}: {err.str()}")
                continue
            if args.max_records is not None and count >= args.max_records:
                break
            problem = check(msg)
            if problem:
                problems.append(problem)
            seq = seq_of(msg.value()) if problem is None else -1
            items.append([msg.partition(), msg.offset(), seq])
            next_offsets[msg.partition()] = msg.offset() + 1
            count += 1
        if items:
            emit("records", items=items, problems=problems)
            commit(consumer, args.topic, next_offsets)
        if args.max_records is not None and count >= args.max_records and not idle:
            idle = True
            assignment = consumer.assignment()
            committed = consumer.committed(assignment, timeout=30) if assignment else []
            emit("idle", committed={str(tp.partition): tp.offset for tp in committed})

    consumer.close()
    emit("closed", count=count)
    return 0


def commit(consumer: Consumer, topic: str, next_offsets: dict[int, int]) -> None:
    offsets = [TopicPartition(topic, p, o) for p, o in sorted(next_offsets.items())]
    try:
        result = consumer.commit(offsets=offsets, asynchronous=False)
    except Exception as e:  # KafkaException: REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION...
        emit("commit_failed", error=str(e))
        return
    failed = [f"{tp.partition}: {tp.error}" for tp in result or [] if tp.error is not None]
    if failed:
        emit("commit_failed", error="; ".join(failed))
    else:
        emit("committed", offsets={str(p): o for p, o in next_offsets.items()})


if __name__ == "__main__":
    sys.exit(main())
