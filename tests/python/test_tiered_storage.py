"""The remote tier: sealed segments of a tiered topic copied to an S3-compatible bucket.

Goal: a topic with `remote.storage.enable=true` has every sealed segment below its last
stable offset in the bucket, byte for byte with the local files; retention removes the
remote copies of what the log start passed; a broker killed while it uploads leaves no
object that counts as data without its files, and the objects of cut uploads are deleted
when it comes back; a topic cannot be tiered when compacted or on a broker without a
remote tier. Method: moto's S3 server (from the Python index) on a loopback port, the
bucket read back with boto3, records produced by librdkafka; every wait polls its
condition with a deadline.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                   ConfigResource, NewTopic, ResourceType)

from support import (ADMIN_TIMEOUT_S, FLUSH_TIMEOUT_S, create_topic, error_code_of,
                     rdkafka_base)
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
