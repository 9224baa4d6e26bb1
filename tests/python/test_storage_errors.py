"""A full disk, with librdkafka at its default settings.

Goal: when the data directory's filesystem fills up, headway refuses the writes that do
not fit (KAFKA_STORAGE_ERROR, which librdkafka retries) and keeps nothing partial of them;
reads keep working; once space returns, the client's own retries and new produces to the
same partition succeed without a broker restart; every acknowledged record is intact,
dense and in place, before and after a restart. Below `disk_free_bytes_min` produces are
refused before the disk is full, while group offset commits still succeed.
Method: the broker's data directory is a 64 MiB tmpfs mounted for the test (root only:
the tests skip, saying so, where mounting is impossible). A file filling the rest of the
filesystem makes the disk full; deleting it makes room again.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from support import (Delivery, check_all_present, check_records, consume_all, create_topic,
                     make_record, rdkafka_base)

DISK_BYTES = 64 * 1024 * 1024
SEGMENT_BYTES = 1024 * 1024
LOG_DEADLINE_S = 60.0
DELIVERY_DEADLINE_S = 120.0


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB tmpfs mounted at a fresh directory, unmounted after the test."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("the full-disk tests mount a tmpfs, which needs root (CI runs as root)")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here, so the full-disk tests cannot run: "
                    f"{mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def start_on(make_broker, disk: Path, *args: str):
    broker = make_broker("--segment-bytes", str(SEGMENT_BYTES), *args, start=False)
    broker.data_dir = disk / "data"
    broker.stderr_path.parent.mkdir(parents=True, exist_ok=True)  # made with the default data dir
    return broker.start()


def fill(path: Path, leave_bytes: int = 0) -> None:
    """Writes `path` until the filesystem has at most `leave_bytes` free (0: until the
    filesystem refuses even one byte)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        chunk = 1024 * 1024
        while chunk >= 1:
            stat = os.statvfs(path)
            free = stat.f_bavail * stat.f_frsize
            if leave_bytes and free <= leave_bytes:
                return
            size = min(chunk, free - leave_bytes) if leave_bytes else chunk
            try:
                os.write(fd, b"\0" * max(size, 1))
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                chunk //= 16
    finally:
        os.close(fd)


def wait_for_log(broker, text: str) -> None:
    deadline = time.monotonic() + LOG_DEADLINE_S
    while text not in broker.stderr_path.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise AssertionError(f"the broker never logged {text!r} within "
                                 f"{LOG_DEADLINE_S:.0f} s\n{broker.stderr_tail()}")
        time.sleep(0.1)


def produce_async(producer: Producer, topic: str, seqs, delivery: Delivery) -> None:
    for seq in seqs:
        r = make_record(seq)
        producer.produce(topic, key=r.key, value=r.value, headers=r.headers, partition=0,
                         on_delivery=delivery.callback)
        producer.poll(0)


def flush(producer: Producer, delivery: Delivery, what: str) -> None:
    remaining = producer.flush(DELIVERY_DEADLINE_S)
    assert remaining == 0, (f"{what}: {remaining} records undelivered after "
                            f"{DELIVERY_DEADLINE_S:.0f} s ({len(delivery.acked)} acked)")
    assert not delivery.failed, f"{what}: failed deliveries: {list(delivery.failed.items())[:5]}"


def check_acked(broker, topic: str, delivery: Delivery, count: int) -> None:
    """Every one of `count` records was acknowledged and sits where its report said."""
    records = consume_all(broker.bootstrap, topic, 1, expected=count)
    verdict = check_records(records, 1)
    check_all_present(verdict, count)
    verdict.assert_ok("read back")
    at = {(r.partition, r.offset): int(r.headers[0][1]) for r in records}
    misplaced = [(seq, place) for seq, place in delivery.acked.items() if at.get(place) != seq]
    assert not misplaced, f"acknowledged records not where reported: {misplaced[:5]}"


def test_a_full_disk_refuses_writes_and_they_resume_when_space_returns(small_disk,
                                                                       make_broker):
    # The threshold is off: this is the disk really running out.
    broker = start_on(make_broker, small_disk, "--disk-free-bytes-min", "0")
    topic = "full-disk"
    create_topic(broker.bootstrap, topic, 1)
    producer = Producer({**rdkafka_base(broker.bootstrap)})  # defaults: acks=all, retries
    delivery = Delivery()
    produce_async(producer, topic, range(0, 2000), delivery)
    flush(producer, delivery, "before the disk is full")

    filler = small_disk / "filler"
    fill(filler)
    # Records that do not fit are refused and retried by the client, which keeps them.
    produce_async(producer, topic, range(2000, 6000), delivery)
    producer.poll(2.0)

    # Reads keep working: everything acknowledged so far is there, dense and whole.
    # (A record or two may have fit in the last page the segment file already had.)
    records = consume_all(broker.bootstrap, topic, 1)
    verdict = check_records(records, 1)
    verdict.assert_ok("read while the disk is full")
    assert set(range(2000)) <= set(verdict.seqs)
    assert len(verdict.seqs) < 6000, "the disk was never full"

    filler.unlink()
    flush(producer, delivery, "after space returned, the client's retries")
    produce_async(producer, topic, range(6000, 8000), delivery)
    flush(producer, delivery, "new produces after space returned")
    wait_for_log(broker, "append refused; the log is unchanged")
    wait_for_log(broker, "appends succeed again")
    log = broker.stderr_path.read_text(errors="replace")
    assert "poisoned" not in log and "offline" not in log, broker.stderr_tail()

    check_acked(broker, topic, delivery, 8000)
    broker.restart()
    check_acked(broker, topic, delivery, 8000)


def test_produces_stop_at_the_threshold_while_offset_commits_go_on(small_disk, make_broker):
    min_bytes = 16 * 1024 * 1024
    broker = start_on(make_broker, small_disk, "--disk-free-bytes-min", str(min_bytes))
    topic = "threshold"
    create_topic(broker.bootstrap, topic, 1)
    producer = Producer({**rdkafka_base(broker.bootstrap)})
    delivery = Delivery()
    produce_async(producer, topic, range(0, 1000), delivery)
    flush(producer, delivery, "above the threshold")

    filler = small_disk / "filler"
    fill(filler, leave_bytes=min_bytes // 2)
    wait_for_log(broker, "free space is below disk_free_bytes_min")
    produce_async(producer, topic, range(1000, 2000), delivery)
    producer.poll(2.0)
    assert len(delivery.acked) == 1000, "a produce went through below the threshold"

    # The broker's own writes still have room: a group commits its offsets.
    consumer = Consumer({**rdkafka_base(broker.bootstrap), "group.id": "threshold-group",
                         "enable.auto.commit": False})
    try:
        committed = consumer.commit(offsets=[TopicPartition(topic, 0, 500)],
                                    asynchronous=False)
        assert committed[0].error is None, committed[0].error
        got = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        assert got[0].offset == 500, got
    finally:
        consumer.close()

    filler.unlink()
    wait_for_log(broker, "free space is back above disk_free_bytes_min")
    flush(producer, delivery, "after space returned")
    check_acked(broker, topic, delivery, 2000)
