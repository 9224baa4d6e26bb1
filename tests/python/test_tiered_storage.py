"""The remote tier: sealed segments of a tiered topic copied to an S3-compatible bucket.

Goal: a topic with `remote.storage.enable=true` has every sealed segment below its last
stable offset in the bucket, byte for byte with the local files; retention removes the
remote copies of what the log start passed; a broker killed while it uploads leaves no
object that counts as data without its files, and the objects of cut uploads are deleted
when it comes back; a topic cannot be tiered when compacted or on a broker without a
remote tier. Past `local.retention.bytes` the local copies go, and a backlog that lives
only in the bucket is read back byte for byte by librdkafka and the Java consumer, with
ListOffsets earliest at 0, across a restart and a SIGKILL; read_committed readers skip
the aborted transactions of remote segments; a bucket that stops answering mid-read
fails only the remote reads (produces and tail reads go on) and the read resumes. Method: moto's S3 server (from the Python index) on a loopback port, the
bucket read back with boto3, records produced by librdkafka; every wait polls its
condition with a deadline.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                   ConfigResource, NewTopic, ResourceType)

from java_support import JavaClient
from support import (ADMIN_TIMEOUT_S, FLUSH_TIMEOUT_S, Consumed, Delivery, RecordChecker,
                     Verdict, check_all_present, check_records, create_topic, error_code_of,
                     make_record, new_consumer, produce_records, rdkafka_base, read_records,
                     seq_of)
from support import wait_until as wait_until_within

boto3 = pytest.importorskip("boto3")


def wait_until(condition, what: str):
    return wait_until_within(condition, what, DEADLINE_S)

BUCKET = "headway-tier"
PREFIX = "tier-test"
DEADLINE_S = 90.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """moto's S3 server on a loopback port, with one bucket."""

    def __init__(self, log: Path):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        moto = Path(sys.executable).with_name("moto_server")
        self.log = log.open("w")
        self.proc = subprocess.Popen([str(moto), "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                                   aws_access_key_id="tier", aws_secret_access_key="secret")
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(self.endpoint, timeout=2).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"moto_server did not start: {log.read_text()}")
                time.sleep(0.2)
        self.client.create_bucket(Bucket=BUCKET)

    def objects(self) -> dict[str, int]:
        """Every object's key and size."""
        found = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
            for o in page.get("Contents", []):
                found[o["Key"]] = o["Size"]
        return found

    def read(self, key: str) -> bytes:
        return self.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()

    def put(self, key: str, body: bytes) -> None:
        self.client.put_object(Bucket=BUCKET, Key=key, Body=body)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def s3(tmp_path):
    server = S3Server(tmp_path / "moto.log")
    yield server
    server.stop()


def tier_args(s3: S3Server) -> list[str]:
    return ["--remote-storage-endpoint", s3.endpoint, "--remote-storage-bucket", BUCKET,
            "--remote-storage-access-key-id", "tier",
            "--remote-storage-prefix", PREFIX, "--remote-storage-upload-interval-ms", "200",
            "--retention-check-interval-ms", "200", "--metrics-listen", "127.0.0.1:0"]


def produce(bootstrap: str, topic: str, count: int, value_bytes: int) -> None:
    producer = Producer({**rdkafka_base(bootstrap), "linger.ms": 5, "batch.size": 16384})
    failed = []
    for i in range(count):
        producer.produce(topic, value=(f"{i:08d}".encode() * (value_bytes // 8 + 1))[:value_bytes],
                         on_delivery=lambda err, _msg: err and failed.append(err))
        producer.poll(0)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0
    assert not failed, failed[:5]


def local_segments(data_dir: Path, topic: str) -> list[Path]:
    """The partition's sealed `.log` files (every one but the active, the last)."""
    logs = sorted((data_dir / "topics" / topic / "0").glob("*.log"))
    return logs[:-1]


def committed(s3: S3Server) -> dict[int, dict]:
    """The commit objects in the bucket, by base offset, with the objects of each."""
    objects = s3.objects()
    found = {}
    for key in objects:
        if key.endswith(".segment"):
            try:
                meta = json.loads(s3.read(key))
            except s3.client.exceptions.NoSuchKey:
                continue  # deleted since the listing (retention)
            stem = key.removesuffix(".segment")
            found[meta["base_offset"]] = {"meta": meta, "stem": stem}
    return found


def metric(broker, name: str) -> float:
    with urllib.request.urlopen(f"http://{broker.metrics_address()}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def all_uploaded(s3: S3Server, data_dir: Path, topic: str) -> bool:
    sealed = local_segments(data_dir, topic)
    remote = committed(s3)
    return bool(sealed) and all(int(p.stem) in remote for p in sealed)


def assert_copies_match(s3: S3Server, data_dir: Path, topic: str) -> int:
    """Every local sealed segment's files are in the bucket byte for byte; answers how
    many segments were compared."""
    remote = committed(s3)
    sealed = local_segments(data_dir, topic)
    for log in sealed:
        entry = remote[int(log.stem)]
        meta, stem = entry["meta"], entry["stem"]
        assert meta["size_bytes"] == log.stat().st_size
        assert s3.read(stem + ".log") == log.read_bytes(), f"{log.name} differs"
        for kind in ("index", "timeindex"):
            local = log.with_suffix("." + kind)
            assert s3.read(stem + "." + kind) == local.read_bytes(), f"{local.name} differs"
        assert meta["end_offset"] > meta["base_offset"]
    return len(sealed)


def test_sealed_segments_are_copied_byte_for_byte_and_retention_removes_the_copies(
        make_broker, s3):
    broker = make_broker(*tier_args(s3))
    create_topic(broker.bootstrap, "tiered", 1, **{"remote.storage.enable": "true",
                                                     "segment.bytes": "65536"})
    create_topic(broker.bootstrap, "local", 1, **{"segment.bytes": "65536"})
    produce(broker.bootstrap, "tiered", 3000, 200)
    produce(broker.bootstrap, "local", 500, 200)
    wait_until(lambda: all_uploaded(s3, broker.data_dir, "tiered"),
               "every sealed segment of the tiered topic in the bucket")
    compared = assert_copies_match(s3, broker.data_dir, "tiered")
    assert compared >= 5, compared
    keys = s3.objects()
    assert all(k.startswith(PREFIX + "/tiered-") for k in keys), \
        "only the tiered topic is uploaded, under the prefix"
    assert metric(broker, "headway_remote_uploaded_segments_total") >= compared
    assert metric(broker, "headway_remote_upload_failures_total") == 0

    # Retention moves the log start: the remote copies of what it passed go too.
    admin = AdminClient(rdkafka_base(broker.bootstrap))
    resource = ConfigResource(ResourceType.TOPIC, "tiered", incremental_configs=[
        ConfigEntry("retention.bytes", "200000", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=ADMIN_TIMEOUT_S)

    def trimmed() -> bool:
        sealed = local_segments(broker.data_dir, "tiered")
        remote = committed(s3)
        first_local = int(sorted((broker.data_dir / "topics" / "tiered" / "0")
                                 .glob("*.log"))[0].stem)
        return bool(remote) and first_local > 0 and min(remote) >= first_local \
            and all(int(p.stem) in remote for p in sealed)

    wait_until(trimmed, "remote copies below the log start deleted")
    assert metric(broker, "headway_remote_deleted_segments_total") >= 1
    # Only whole uploads remain: every object belongs to a committed segment.
    stems = {e["stem"] for e in committed(s3).values()}
    assert all(k.rsplit(".", 1)[0] in stems for k in s3.objects())


def test_a_broker_killed_while_uploading_leaves_no_counted_orphan(make_broker, s3):
    broker = make_broker(*tier_args(s3))
    create_topic(broker.bootstrap, "tiered", 1, **{"remote.storage.enable": "true",
                                                     "segment.bytes": "1048576"})
    produce(broker.bootstrap, "tiered", 24000, 1000)
    # Killed as soon as the first upload counts, with others still to come.
    wait_until(lambda: committed(s3), "a first segment uploaded")
    broker.kill()
    before = len(committed(s3))
    # An upload cut short, as a kill between a file and its commit object leaves it.
    dir_prefix = next(iter(committed(s3).values()))["stem"].rsplit("/", 1)[0]
    orphan = f"{dir_prefix}/{99999999:020d}-{'0' * 32}.log"
    s3.put(orphan, b"not a segment")
    broker.start()
    wait_until(lambda: all_uploaded(s3, broker.data_dir, "tiered"),
               "every sealed segment uploaded after the restart")
    wait_until(lambda: orphan not in s3.objects(), "the cut upload's object deleted")
    compared = assert_copies_match(s3, broker.data_dir, "tiered")
    print(f"{before} of {compared} segments counted when the broker was killed")
    remote = committed(s3)
    assert len(remote) == compared, "one committed copy per segment"
    stems = {e["stem"] for e in remote.values()}
    assert all(k.rsplit(".", 1)[0] in stems for k in s3.objects()), \
        "every object left belongs to a committed segment"
    assert metric(broker, "headway_remote_orphans_deleted_total") >= 1


def test_a_topic_is_tiered_only_on_a_broker_with_a_remote_tier_and_never_compacted(
        make_broker, s3):
    plain = make_broker()
    admin = AdminClient(rdkafka_base(plain.bootstrap))
    refused = admin.create_topics([NewTopic("t", 1, 1, config={"remote.storage.enable": "true"})],
                                  operation_timeout=ADMIN_TIMEOUT_S)
    assert error_code_of(refused["t"]) == KafkaError.INVALID_CONFIG
    tiered = make_broker(*tier_args(s3))
    admin = AdminClient(rdkafka_base(tiered.bootstrap))
    refused = admin.create_topics([NewTopic("c", 1, 1, config={
        "remote.storage.enable": "true", "cleanup.policy": "compact"})],
        operation_timeout=ADMIN_TIMEOUT_S)
    assert error_code_of(refused["c"]) == KafkaError.INVALID_CONFIG
    create_topic(tiered.bootstrap, "ok", 1, **{"remote.storage.enable": "true"})
    described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "ok")])
    entries = next(iter(described.values())).result(timeout=ADMIN_TIMEOUT_S)
    assert entries["remote.storage.enable"].value == "true"
    assert entries["local.retention.ms"].value == "-2"
    # A tiered topic stays tiered: turning it off (deleting the setting, or false) is
    # refused and changes nothing.
    for op, value in ((AlterConfigOpType.SET, "false"), (AlterConfigOpType.DELETE, None)):
        resource = ConfigResource(ResourceType.TOPIC, "ok", incremental_configs=[
            ConfigEntry("remote.storage.enable", value, incremental_operation=op)])
        for future in admin.incremental_alter_configs([resource]).values():
            with pytest.raises(KafkaException) as refusal:
                future.result(timeout=ADMIN_TIMEOUT_S)
            assert refusal.value.args[0].code() == KafkaError.INVALID_CONFIG
    described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "ok")])
    entries = next(iter(described.values())).result(timeout=ADMIN_TIMEOUT_S)
    assert entries["remote.storage.enable"].value == "true"


# -- Reads before the local log ------------------------------------------------------------

REMOTE_RECORDS = 6000


def local_start(data_dir: Path, topic: str) -> int:
    """The base offset of the partition's first local segment."""
    return int(sorted((data_dir / "topics" / topic / "0").glob("*.log"))[0].stem)


def remote_only_backlog(make_broker, s3, topic: str, produce_backlog,
                        segment_bytes: int = 65536):
    """A broker and a tiered topic with `local.retention.bytes` 0, filled by
    `produce_backlog(bootstrap)`; answers once the local log starts past most of what was
    produced (the rest lives only in the bucket)."""
    broker = make_broker(*tier_args(s3))
    create_topic(broker.bootstrap, topic, 1, **{"remote.storage.enable": "true",
                                                  "segment.bytes": str(segment_bytes),
                                                  "local.retention.bytes": "0"})
    end = produce_backlog(broker.bootstrap)
    wait_until(lambda: local_start(broker.data_dir, topic) >= end * 3 // 4,
               "the local log starting past three quarters of the backlog")
    return broker


def produce_plain(bootstrap: str, topic: str) -> int:
    delivery = Delivery()
    producer = Producer({**rdkafka_base(bootstrap), "linger.ms": 5})
    produce_records(producer, topic, range(REMOTE_RECORDS), delivery)
    assert not delivery.failed and len(delivery.acked) == REMOTE_RECORDS
    return REMOTE_RECORDS


def read_from_start(bootstrap: str, topic: str, expected: int, **settings) -> Verdict:
    verdict = check_records(list(read_records(bootstrap, topic, 1, expected=expected,
                                              settings=settings)), 1)
    check_all_present(verdict, expected)
    return verdict


def low_watermark(bootstrap: str, topic: str) -> int:
    consumer = new_consumer(bootstrap)
    try:
        low, _high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        return low
    finally:
        consumer.close()


def test_a_backlog_only_in_the_bucket_is_read_back_by_librdkafka_and_java_across_a_restart(
        make_broker, s3, tmp_path):
    topic = "remote-backlog"
    broker = remote_only_backlog(make_broker, s3, topic,
                                 lambda bootstrap: produce_plain(bootstrap, topic))
    first_local = local_start(broker.data_dir, topic)
    # The log starts where the bucket's copy does: ListOffsets earliest is 0.
    assert low_watermark(broker.bootstrap, topic) == 0
    read_from_start(broker.bootstrap, topic, REMOTE_RECORDS).assert_ok("librdkafka")
    java = JavaClient("lib-4", "classes-4", "AssignedReaderCheck", tmp_path)
    got = java.run("AssignedReaderCheck", "--bootstrap", broker.bootstrap, "--topic", topic,
                   "--deadline-s", "120", timeout_s=180)[-1]
    assert got["event"] == "done" and not got["timed_out"], got
    assert not got["problems"], got["problems"][:10]
    assert sorted(seq for _p, _o, seq in got["records"]) == list(range(REMOTE_RECORDS))
    assert [o for _p, o, _s in got["records"]] == list(range(REMOTE_RECORDS))
    assert metric(broker, "headway_remote_local_deleted_segments_total") >= 1
    served = metric(broker, "headway_remote_fetch_bytes_total")
    assert served > 0 and metric(broker, "headway_remote_fetch_failures_total") == 0
    print(f"local log from offset {first_local} of {REMOTE_RECORDS}; "
          f"{served / 2**20:.1f} MiB served from the bucket")

    # A restart keeps the log start before the local log, and the reads.
    broker.stop()
    broker.start()
    assert local_start(broker.data_dir, topic) >= first_local
    assert low_watermark(broker.bootstrap, topic) == 0
    read_from_start(broker.bootstrap, topic, REMOTE_RECORDS).assert_ok("after a restart")
    broker.kill()
    broker.start()
    assert low_watermark(broker.bootstrap, topic) == 0
    read_from_start(broker.bootstrap, topic, REMOTE_RECORDS).assert_ok("after a SIGKILL")


def test_read_committed_from_the_bucket_skips_aborted_transactions(make_broker, s3):
    topic = "remote-txn"
    batches, per_batch = 60, 100

    def produce_transactions(bootstrap: str) -> int:
        producer = Producer({**rdkafka_base(bootstrap), "transactional.id": "remote-txn",
                             "linger.ms": 5})
        producer.init_transactions(ADMIN_TIMEOUT_S)
        for b in range(batches):
            producer.begin_transaction()
            for i in range(per_batch):
                r = make_record(b * per_batch + i)
                producer.produce(topic, key=r.key, value=r.value, headers=r.headers)
                producer.poll(0)
            # Delivered first, so the partition is in the transaction before its end.
            assert producer.flush(FLUSH_TIMEOUT_S) == 0
            if b % 3 == 2:
                producer.abort_transaction(ADMIN_TIMEOUT_S)
            else:
                producer.commit_transaction(ADMIN_TIMEOUT_S)
        return batches * per_batch

    # Transactions' batches are small: smaller segments, so that most are remote.
    broker = remote_only_backlog(make_broker, s3, topic, produce_transactions, 8192)
    committed_seqs = [b * per_batch + i for b in range(batches) if b % 3 != 2
                      for i in range(per_batch)]
    seen = [seq_of(r.value) for r in read_records(
        broker.bootstrap, topic, 1, expected=len(committed_seqs),
        settings={"isolation.level": "read_committed"})]
    assert seen == committed_seqs, \
        f"read_committed read {len(seen)} records; first differences " \
        f"{[(a, b) for a, b in zip(seen, committed_seqs) if a != b][:5]}"
    every = [seq_of(r.value) for r in read_records(
        broker.bootstrap, topic, 1, expected=batches * per_batch,
        settings={"isolation.level": "read_uncommitted"})]
    assert every == list(range(batches * per_batch))
    # Some of the aborted transactions were answered from the bucket's .txnindex copies.
    assert any(k.endswith(".txnindex") for k in s3.objects())


def test_a_stalled_bucket_fails_only_its_reads_and_they_resume(make_broker, s3):
    topic = "remote-stall"
    broker = remote_only_backlog(make_broker, s3, topic,
                                 lambda bootstrap: produce_plain(bootstrap, topic))
    create_topic(broker.bootstrap, "tail", 1)
    consumer = new_consumer(broker.bootstrap)
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    checker = RecordChecker(1)
    got: list[int] = []

    def consume(until) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not until():
            assert time.monotonic() < deadline, f"read {len(got)} records before the deadline"
            for msg in consumer.consume(num_messages=100, timeout=0.5):
                if msg.error() is None:
                    seq = checker.check(Consumed(0, msg.offset(), msg.key(), msg.value(),
                                                 list(msg.headers() or [])))
                    got.append(seq)

    try:
        consume(lambda: len(got) >= 200)
        s3.proc.send_signal(signal.SIGSTOP)  # the bucket stops answering mid-read
        try:
            failures = metric(broker, "headway_remote_fetch_failures_total")
            wait_until(lambda: metric(broker, "headway_remote_fetch_failures_total") > failures,
                       "a remote read timing out while the bucket is stalled")
            # Produces and the tail go on meanwhile.
            delivery = Delivery()
            produce_records(Producer(rdkafka_base(broker.bootstrap)), "tail", range(100),
                            delivery)
            assert len(delivery.acked) == 100 and not delivery.failed
            tail = list(read_records(broker.bootstrap, "tail", 1, expected=100))
            assert len(tail) == 100
        finally:
            s3.proc.send_signal(signal.SIGCONT)
        consume(lambda: len(got) >= REMOTE_RECORDS)
    finally:
        consumer.close()
    assert not checker.problems, checker.problems[:10]
    assert got == list(range(REMOTE_RECORDS))


def test_the_whole_log_retention_counts_the_remote_segments(make_broker, s3):
    topic = "remote-retention"
    broker = remote_only_backlog(make_broker, s3, topic,
                                 lambda bootstrap: produce_plain(bootstrap, topic))
    assert low_watermark(broker.bootstrap, topic) == 0
    total = sum(e["meta"]["size_bytes"] for e in committed(s3).values())
    # Keep about a third of what the bucket holds: the log start moves into the remote
    # segments (the local log alone is far below the limit), and their copies go.
    admin = AdminClient(rdkafka_base(broker.bootstrap))
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.bytes", str(total // 3),
                    incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=ADMIN_TIMEOUT_S)
    first_local = local_start(broker.data_dir, topic)

    def moved() -> int:
        low = low_watermark(broker.bootstrap, topic)
        remote = committed(s3)
        return low if 0 < low < first_local and remote and min(remote) == low else 0

    start = wait_until(moved, "the log start moved into the remote segments, their copies "
                              "below it gone")
    kept = sum(e["meta"]["size_bytes"] for e in committed(s3).values())
    local_bytes = sum(p.stat().st_size for p in
                      (broker.data_dir / "topics" / topic / "0").glob("*.log"))
    assert kept + local_bytes >= total // 3, "the log keeps at least retention.bytes"
    assert metric(broker, "headway_remote_deleted_segments_total") >= 1
    # What is left reads from the new start to the end, from the bucket and then the disk.
    rest = list(read_records(broker.bootstrap, topic, 1, expected=REMOTE_RECORDS - start))
    checker = RecordChecker(1, [start])
    assert [checker.check(r) for r in rest] == list(range(start, REMOTE_RECORDS))
    assert not checker.problems, checker.problems[:10]


# An hour ago: well inside the default retention.ms, so only local.retention.bytes acts.
TIMED_BASE_MS = int(time.time() * 1000) - 3_600_000


def produce_timed(bootstrap: str, topic: str) -> int:
    """REMOTE_RECORDS records, record i stamped TIMED_BASE_MS + 10 * i, in batches of
    16 KiB at most (so that 64 KiB segments roll)."""
    producer = Producer({**rdkafka_base(bootstrap), "linger.ms": 5, "batch.size": 16384})
    failed = []
    for i in range(REMOTE_RECORDS):
        producer.produce(topic, value=f"{i:08d}".encode() * 8, timestamp=TIMED_BASE_MS + 10 * i,
                         on_delivery=lambda err, _msg: err and failed.append(err))
        producer.poll(0)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0
    assert not failed, failed[:5]
    return REMOTE_RECORDS


def offsets_for_times(bootstrap: str, topic: str, times: list[int]) -> list[int]:
    """librdkafka's answer for each time, one request each (it asks once per partition)."""
    consumer = new_consumer(bootstrap)
    try:
        offsets = []
        for t in times:
            [found] = consumer.offsets_for_times([TopicPartition(topic, 0, t)], timeout=30)
            assert found.error is None, found
            offsets.append(found.offset)
        return offsets
    finally:
        consumer.close()


def test_lookups_by_time_find_records_that_only_the_bucket_holds(make_broker, s3):
    topic = "remote-times"
    broker = remote_only_backlog(make_broker, s3, topic,
                                 lambda bootstrap: produce_timed(bootstrap, topic))
    first_local = local_start(broker.data_dir, topic)
    assert low_watermark(broker.bootstrap, topic) == 0
    # Before the first record, inside the bucket's part (exact and between two records),
    # at the local log's first record, inside the local log, after the last record.
    times = [TIMED_BASE_MS - 5_000, TIMED_BASE_MS + 10 * 1234, TIMED_BASE_MS + 10 * 2001 - 3,
             TIMED_BASE_MS + 10 * first_local, TIMED_BASE_MS + 10 * (REMOTE_RECORDS - 7),
             TIMED_BASE_MS + 10 * REMOTE_RECORDS + 1]
    expected = [0, 1234, 2001, first_local, REMOTE_RECORDS - 7, -1]
    assert offsets_for_times(broker.bootstrap, topic, times) == expected
    assert metric(broker, "headway_remote_fetch_failures_total") == 0
    # The same answers after a restart, when the broker has no view of the bucket yet.
    broker.stop()
    broker.start()
    assert offsets_for_times(broker.bootstrap, topic, times) == expected


def test_followers_drop_what_the_bucket_holds_and_a_new_leader_serves_it(make_broker, s3):
    from cluster_support import CLUSTER_UP_S, cluster_with_topic, led_by

    topic = "remote-replicated"
    brokers, bootstraps, led = cluster_with_topic(
        make_broker, topic, 1, args=tier_args(s3),
        config={"remote.storage.enable": "true", "segment.bytes": "65536",
                "local.retention.bytes": "0"})
    produce_plain(",".join(bootstraps), topic)
    # Every replica's local log, the followers' too, starts past most of the backlog.
    wait_until(lambda: all(local_start(b.data_dir, topic) >= REMOTE_RECORDS * 3 // 4
                           for b in brokers),
               "every replica's local log starting past three quarters of the backlog")
    leader = led[0]["leader"]
    for node, b in enumerate(brokers, 1):
        if node != leader:
            assert metric(b, "headway_remote_local_deleted_segments_total") >= 1
            assert metric(b, "headway_remote_uploaded_segments_total") == 0, "a follower uploads"

    # The leader goes: the new one serves the bucket's part from offset 0.
    brokers[leader - 1].kill()
    alive = {1, 2, 3} - {leader}
    wait_until_within(lambda: led_by(bootstraps, topic, alive, 2), "a new leader, ISR 2",
                      CLUSTER_UP_S * 3)
    survivors = ",".join(bootstraps[n - 1] for n in sorted(alive))
    assert low_watermark(survivors, topic) == 0
    read_from_start(survivors, topic, REMOTE_RECORDS).assert_ok("from the new leader")
