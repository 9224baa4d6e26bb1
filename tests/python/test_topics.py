"""Topic administration, offset look-ups, configs and restarts, through librdkafka.

Goal: the admin and metadata paths clients use besides produce and fetch behave as Kafka's
do: CreateTopics/DeleteTopics with their error codes, auto-creation on metadata, the
`--default-partitions` and `--auto-create-topics` settings, ListOffsets (earliest, latest,
by timestamp), DescribeConfigs, and data kept across a clean SIGTERM shutdown.
Method: one broker per test, confluent-kafka's AdminClient, Producer and Consumer; every
wait polls for its condition with a deadline.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, ConfigResource, NewPartitions, NewTopic,
                                   ResourceType)

from support import (ADMIN_TIMEOUT_S, FLUSH_TIMEOUT_S, Delivery, check_all_present,
                     check_records, consume_all, create_topic, error_code_of, make_record,
                     new_consumer,
                     produce_records, raise_on_error, rdkafka_base, seq_of, wait_for_topic)


def admin_for(broker) -> AdminClient:
    return AdminClient(rdkafka_base(broker.bootstrap))


def topic_names(admin: AdminClient) -> set[str]:
    return set(admin.list_topics(timeout=10).topics)


def wait_until(condition, what: str, deadline_s: float = ADMIN_TIMEOUT_S) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not true within {deadline_s:.0f} s")
        time.sleep(0.1)


def test_create_list_delete(broker):
    admin = admin_for(broker)
    futures = admin.create_topics([NewTopic("alpha", num_partitions=3, replication_factor=1),
                                   NewTopic("beta", num_partitions=1, replication_factor=1)],
                                  operation_timeout=ADMIN_TIMEOUT_S)
    raise_on_error(futures)
    wait_for_topic(broker.bootstrap, "alpha", 3)
    wait_for_topic(broker.bootstrap, "beta", 1)

    again = admin.create_topics([NewTopic("alpha", num_partitions=3, replication_factor=1)],
                                operation_timeout=ADMIN_TIMEOUT_S)
    assert error_code_of(again["alpha"]) == KafkaError.TOPIC_ALREADY_EXISTS

    raise_on_error(admin.delete_topics(["alpha"], operation_timeout=ADMIN_TIMEOUT_S))
    wait_until(lambda: "alpha" not in topic_names(admin), "deleted topic 'alpha' gone from "
                                                         "metadata")
    assert "beta" in topic_names(admin)

    missing = admin.delete_topics(["never-created"], operation_timeout=ADMIN_TIMEOUT_S)
    assert error_code_of(missing["never-created"]) == KafkaError.UNKNOWN_TOPIC_OR_PART

    # Creations and deletions are durable.
    broker.restart()
    wait_for_topic(broker.bootstrap, "beta", 1)
    assert "alpha" not in topic_names(admin_for(broker))


def test_create_topic_invalid_partitions(broker):
    admin = admin_for(broker)
    futures = admin.create_topics([NewTopic("zero-partitions", num_partitions=0,
                                            replication_factor=1)],
                                  operation_timeout=ADMIN_TIMEOUT_S)
    assert error_code_of(futures["zero-partitions"]) == KafkaError.INVALID_PARTITIONS


def test_deleted_topic_can_be_recreated_empty(broker):
    create_topic(broker.bootstrap, "reborn", 2)
    producer = Producer({**rdkafka_base(broker.bootstrap), "acks": "all"})
    delivery = Delivery()
    produce_records(producer, "reborn", range(100), delivery, partition=0)
    admin = admin_for(broker)
    raise_on_error(admin.delete_topics(["reborn"], operation_timeout=ADMIN_TIMEOUT_S))
    wait_until(lambda: "reborn" not in topic_names(admin), "deleted topic gone")

    create_topic(broker.bootstrap, "reborn", 1)
    consumer = new_consumer(broker.bootstrap)
    try:
        assert consumer.get_watermark_offsets(TopicPartition("reborn", 0), timeout=30) == (0, 0)
    finally:
        consumer.close()


def test_auto_create_on_produce(broker):
    producer = Producer({**rdkafka_base(broker.bootstrap), "acks": "all"})
    delivery = Delivery()
    produce_records(producer, "auto-created", range(10), delivery)
    assert not delivery.failed, delivery.failed
    wait_for_topic(broker.bootstrap, "auto-created", 1)
    records = consume_all(broker.bootstrap, "auto-created", 1, expected=10)
    verdict = check_records(records, 1)
    check_all_present(verdict, 10)
    verdict.assert_ok("auto-created topic")


def test_default_partitions_setting(make_broker):
    broker = make_broker("--default-partitions", "3")
    producer = Producer({**rdkafka_base(broker.bootstrap), "acks": "all"})
    delivery = Delivery()
    produce_records(producer, "auto-three", range(300), delivery)
    assert not delivery.failed, delivery.failed
    wait_for_topic(broker.bootstrap, "auto-three", 3)
    assert {p for p, _ in delivery.acked.values()} == {0, 1, 2}


def test_setting_from_environment(make_broker):
    """Every setting can come from HEADWAY_<NAME>; here HEADWAY_DEFAULT_PARTITIONS."""
    broker = make_broker(env={"HEADWAY_DEFAULT_PARTITIONS": "2"})
    producer = Producer({**rdkafka_base(broker.bootstrap), "acks": "all"})
    delivery = Delivery()
    produce_records(producer, "auto-two", range(10), delivery)
    assert not delivery.failed, delivery.failed
    wait_for_topic(broker.bootstrap, "auto-two", 2)


def test_auto_create_disabled(make_broker):
    broker = make_broker("--auto-create-topics", "false")
    producer = Producer({**rdkafka_base(broker.bootstrap), "acks": "all",
                         "message.timeout.ms": 5_000})
    delivery = Delivery()
    r = make_record(0)
    producer.produce("not-auto-created", key=r.key, value=r.value,
                     on_delivery=delivery.callback)
    assert producer.flush(30) == 0, "no delivery report within 30 s"
    assert not delivery.acked, "a produce to a missing topic was acknowledged"
    assert delivery.failed, "no delivery report"
    assert "not-auto-created" not in topic_names(admin_for(broker))


def test_watermarks_and_offsets_for_times(broker):
    topic = "offsets"
    create_topic(broker.bootstrap, topic, 2)
    producer = Producer({**rdkafka_base(broker.bootstrap), "acks": "all"})
    delivery = Delivery()
    base_ms = 1_700_000_000_000
    # Partition 0: 50 records 1 s apart in CreateTime; partition 1 stays empty.
    for seq in range(50):
        r = make_record(seq)
        producer.produce(topic, key=r.key, value=r.value, headers=r.headers, partition=0,
                         timestamp=base_ms + seq * 1000, on_delivery=delivery.callback)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0
    assert not delivery.failed, delivery.failed

    consumer = new_consumer(broker.bootstrap)
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30) == (0, 50)
        assert consumer.get_watermark_offsets(TopicPartition(topic, 1), timeout=30) == (0, 0)

        def offset_for(partition: int, timestamp_ms: int) -> int:
            [tp] = consumer.offsets_for_times([TopicPartition(topic, partition, timestamp_ms)],
                                              timeout=30)
            assert tp.error is None, tp.error
            return tp.offset

        assert offset_for(0, base_ms - 10_000) == 0  # before the first record
        assert offset_for(0, base_ms) == 0  # exact match
        assert offset_for(0, base_ms + 20_000) == 20  # exact match
        assert offset_for(0, base_ms + 20_500) == 21  # first record at or after
        assert offset_for(0, base_ms + 49_000) == 49  # the last record
        assert offset_for(0, base_ms + 60_000) == -1  # none that late: offset -1 (end)
        assert offset_for(1, base_ms) == -1  # empty partition
    finally:
        consumer.close()


def test_describe_configs(broker):
    topic = "configured"
    create_topic(broker.bootstrap, topic, 1, **{"retention.ms": "3600000"})
    admin = admin_for(broker)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
    assert "retention.ms" in configs, sorted(configs)
    assert configs["retention.ms"].value == "3600000"
    for name in ("cleanup.policy", "segment.bytes", "retention.bytes"):
        assert name in configs, f"{name} missing from {sorted(configs)}"
    assert configs["cleanup.policy"].value == "delete"
    int(configs["segment.bytes"].value)
    int(configs["retention.bytes"].value)

    defaults = ConfigResource(ResourceType.TOPIC, "default-configs")
    create_topic(broker.bootstrap, "default-configs", 1)
    configs = admin.describe_configs([defaults])[defaults].result(timeout=ADMIN_TIMEOUT_S)
    assert int(configs["retention.ms"].value) == 7 * 24 * 3600 * 1000, \
        configs["retention.ms"].value


def test_describe_configs_unknown_topic(broker):
    admin = admin_for(broker)
    resource = ConfigResource(ResourceType.TOPIC, "no-such-topic")
    assert error_code_of(admin.describe_configs([resource])[resource]) == \
        KafkaError.UNKNOWN_TOPIC_OR_PART


def test_sigterm_then_restart_keeps_data(broker):
    topic = "survives-restart"
    count = 20_000
    create_topic(broker.bootstrap, topic, 3)
    producer = Producer({**rdkafka_base(broker.bootstrap), "acks": "all"})
    delivery = Delivery()
    produce_records(producer, topic, range(count), delivery)
    assert not delivery.failed, list(delivery.failed.items())[:5]
    producer.flush(10)
    del producer

    assert broker.stop() == 0, f"headway exited {broker.returncode} on SIGTERM, expected 0"
    broker.start()
    wait_for_topic(broker.bootstrap, topic, 3)

    records = consume_all(broker.bootstrap, topic, 3, expected=count)
    verdict = check_records(records, 3)
    check_all_present(verdict, count)
    for r in records:
        if delivery.acked.get(seq_of(r.value)) != (r.partition, r.offset):
            verdict.problems.append(f"partition {r.partition} offset {r.offset} moved")
            break
    verdict.assert_ok("after SIGTERM and restart")

    # The restarted log takes new appends after the recovered ones.
    producer = Producer({**rdkafka_base(broker.bootstrap), "acks": "all"})
    more = Delivery()
    produce_records(producer, topic, range(count, count + 100), more)
    assert not more.failed, list(more.failed.items())[:5]
    records = consume_all(broker.bootstrap, topic, 3, expected=count + 100)
    verdict = check_records(records, 3)
    check_all_present(verdict, count + 100)
    verdict.assert_ok("appends after restart")


def test_sigint_exits_cleanly(broker):
    code = broker.stop(signal.SIGINT)
    assert code == 0, f"headway exited {code} on SIGINT, expected 0"


def test_partitions_past_the_open_files_limit_are_refused_whole(make_broker):
    """Under a limit of 1,024 open files (448 for the logs beside the connections'
    reserve), a topic of 600 partitions (one file each counted: the log a write holds
    until its sync) is refused before anything is created, with POLICY_VIOLATION naming
    the limit; the broker keeps serving, a small topic is created, growing it past the
    limit is refused too, and the broker starts again under the same limit."""
    broker = make_broker(open_files_max=1024)
    admin = admin_for(broker)
    refused = admin.create_topics([NewTopic("wide", num_partitions=600, replication_factor=1)],
                                  operation_timeout=ADMIN_TIMEOUT_S)
    try:
        refused["wide"].result(timeout=ADMIN_TIMEOUT_S)
        raise AssertionError("a topic past the open files limit was created")
    except KafkaException as e:
        assert e.args[0].code() == KafkaError.POLICY_VIOLATION, e
        assert "open files limit of 1024" in e.args[0].str(), e
    assert "wide" not in topic_names(admin)
    assert not (broker.data_dir / "topics" / "wide").exists()

    create_topic(broker.bootstrap, "narrow", 4)
    grow = admin.create_partitions([NewPartitions("narrow", 600)])
    assert error_code_of(grow["narrow"]) == KafkaError.POLICY_VIOLATION
    wait_for_topic(broker.bootstrap, "narrow", 4)

    broker.stop()
    broker.start()
    wait_for_topic(broker.bootstrap, "narrow", 4)


def _metrics_text(broker) -> str:
    import urllib.request
    with urllib.request.urlopen(f"http://{broker.metrics_address()}/metrics", timeout=10) as r:
        return r.read().decode()


def _produce_to(bootstrap: str, topic: str, partitions: list[int], per_partition: int) -> None:
    producer = Producer({**rdkafka_base(bootstrap), "acks": "all"})
    errors: list[str] = []
    acked: list[int] = []

    def delivered(err, msg) -> None:
        (errors.append(err.str()) if err is not None else acked.append(msg.partition()))

    for p in partitions:
        for i in range(per_partition):
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p,
                             on_delivery=delivered)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0, "records still in flight"
    assert not errors and len(acked) == per_partition * len(partitions), errors[:3]


def _read_partitions(bootstrap: str, topic: str, partitions: list[int]) -> dict[int, int]:
    """Reads every listed partition to its high watermark; returns records per partition."""
    consumer = new_consumer(bootstrap)
    try:
        high = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        seen = {p: 0 for p in partitions}
        deadline = time.monotonic() + ADMIN_TIMEOUT_S
        while any(seen[p] < high[p] for p in partitions):
            assert time.monotonic() < deadline, f"read {seen} of {high}"
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() is None:
                    seen[msg.partition()] += 1
        return seen
    finally:
        consumer.close()


def test_a_partition_that_cannot_be_opened_is_offline_and_the_others_are_served(make_broker):
    """Goal: one damaged partition directory never keeps a broker from starting. Method:
    write to every partition, stop, make one partition's log file unopenable (a directory
    in its place, which fails for any user), start: the broker serves the other partitions
    and topics, Metadata shows the bad one without a leader and with KAFKA_STORAGE_ERROR,
    /metrics counts it, and the log names its path."""
    broker = make_broker("--metrics-listen", "127.0.0.1:0")
    create_topic(broker.bootstrap, "t", 3)
    create_topic(broker.bootstrap, "other", 1)
    _produce_to(broker.bootstrap, "t", [0, 1, 2], 10)
    broker.stop()
    log = broker.data_dir / "topics" / "t" / "1" / "00000000000000000000.log"
    log.unlink()
    log.mkdir()

    broker.start()
    admin = admin_for(broker)
    md = admin.list_topics(timeout=10).topics["t"]
    bad = md.partitions[1]
    assert bad.error is not None and bad.error.code() == KafkaError.KAFKA_STORAGE_ERROR, bad.error
    assert bad.leader == -1
    assert all(md.partitions[p].error is None and md.partitions[p].leader >= 0 for p in (0, 2))
    _produce_to(broker.bootstrap, "t", [0, 2], 5)
    _produce_to(broker.bootstrap, "other", [0], 5)
    assert _read_partitions(broker.bootstrap, "t", [0, 2]) == {0: 15, 2: 15}
    assert _read_partitions(broker.bootstrap, "other", [0]) == {0: 5}
    text = _metrics_text(broker)
    assert "headway_partitions_unopened 1" in text, text
    assert 'headway_partition_offline{topic="t",partition="1"} 1' in text
    stderr = broker.stderr_path.read_text("utf-8", "replace")
    assert "partition could not be opened" in stderr and str(log) in stderr


def test_a_half_created_topic_does_not_keep_the_broker_from_starting(make_broker):
    """Goal: what an interrupted topic creation leaves behind never stops a start. Method:
    stop a broker, then leave a hidden staging directory of a creation that never reached
    its rename, and a topic with one partition directory missing and another holding only
    empty files (no clean-shutdown marker): the broker starts, removes the staging
    directory, serves the other topic with every record, and the half topic's intact
    partitions."""
    broker = make_broker()
    create_topic(broker.bootstrap, "whole", 2)
    create_topic(broker.bootstrap, "half", 3)
    _produce_to(broker.bootstrap, "whole", [0, 1], 20)
    broker.stop()
    topics = broker.data_dir / "topics"
    staging = topics / ".creating-0f0f" / "0"
    staging.mkdir(parents=True)
    (staging / "00000000000000000000.log").write_bytes(b"")
    shutil.rmtree(topics / "half" / "2")
    for f in (topics / "half" / "1").iterdir():
        if f.name.startswith("."):
            f.unlink()
        else:
            f.write_bytes(b"")

    broker.start()
    assert not (topics / ".creating-0f0f").exists()
    assert _read_partitions(broker.bootstrap, "whole", [0, 1]) == {0: 20, 1: 20}
    md = admin_for(broker).list_topics(timeout=10).topics["half"]
    assert md.partitions[2].error.code() == KafkaError.KAFKA_STORAGE_ERROR
    _produce_to(broker.bootstrap, "half", [0, 1], 3)
    assert _read_partitions(broker.bootstrap, "half", [0, 1]) == {0: 3, 1: 3}


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_sealed_segments_files_stay_within_the_open_files_limit(make_broker):
    """Goal: sealed segments do not hold files open, so a broker keeps far more segment
    files than its open files limit and still reads every one. Method: under a limit of
    512 open files, 8 partitions with tiny segments (segment.bytes 4096) get 3,000
    records of 1 KiB written round-robin, about 1,000 segments (1,000 .log files, plus
    their indexes); every record is read back from the start, twice, with the count of the
    process's open files (/proc/PID/fd) checked under the limit while writing and after
    reading, and the cache's misses and evictions seen on /metrics."""
    limit = 512
    broker = make_broker("--metrics-listen", "127.0.0.1:0", open_files_max=limit)
    create_topic(broker.bootstrap, "sealed", 8, **{"segment.bytes": "4096"})
    producer = Producer({**rdkafka_base(broker.bootstrap), "acks": "all",
                         "linger.ms": 0, "batch.num.messages": 1})
    errors: list[str] = []
    peak = 0
    for i in range(3000):
        producer.produce("sealed", value=b"%06d" % i + b"x" * 1018, partition=i % 8,
                         on_delivery=lambda err, _m: err and errors.append(err.str()))
        if i % 200 == 199:
            assert producer.flush(FLUSH_TIMEOUT_S) == 0
            peak = max(peak, _open_files(broker.pid))
    assert producer.flush(FLUSH_TIMEOUT_S) == 0 and not errors, errors[:3]
    segments = len(list((broker.data_dir / "topics" / "sealed").glob("*/*.log")))
    assert segments > limit, f"only {segments} segments"
    for _ in range(2):
        assert _read_partitions(broker.bootstrap, "sealed", list(range(8))) == {
            p: 375 for p in range(8)}
        peak = max(peak, _open_files(broker.pid))
    assert peak < limit, f"{peak} files open under a limit of {limit}"
    text = _metrics_text(broker)
    misses = re.search(r"^headway_file_cache_misses_total (\S+)$", text, re.M)
    evictions = re.search(r"^headway_file_cache_evictions_total (\S+)$", text, re.M)
    assert misses and float(misses.group(1)) >= segments, text[:2000]
    assert evictions and float(evictions.group(1)) > 0


def test_more_partitions_than_the_open_files_limit_are_written_and_read_back(make_broker,
                                                                             tmp_path):
    """Goal: an idle partition holds no file, so a broker serves far more partitions than
    its open files limit would allow at three files each. Method: under a limit of 2,048
    open files (connections_max 200), one topic of 1,500 partitions (4,500 segment files
    if each held its active segment open) gets 3 records per partition written
    round-robin (librdkafka, acks=all, flushed every 500 records); every record is read
    back by value, before and after a restart, with the process's open files
    (/proc/PID/fd) checked under the limit after each flush and read."""
    limit, partitions, per_partition = 2048, 1500, 3
    config = tmp_path / "headway.toml"
    config.write_text("connections_max = 200\n")
    broker = make_broker("--config", str(config), open_files_max=limit)
    create_topic(broker.bootstrap, "wide", partitions)
    producer = Producer({**rdkafka_base(broker.bootstrap), "acks": "all"})
    errors: list[str] = []
    peak = _open_files(broker.pid)
    expected = {p: set() for p in range(partitions)}
    for i in range(partitions * per_partition):
        p = i % partitions
        value = f"{p}-{i}".encode()
        expected[p].add(value)
        producer.produce("wide", value=value, partition=p,
                         on_delivery=lambda err, _m: err and errors.append(err.str()))
        if i % 500 == 499:
            assert producer.flush(FLUSH_TIMEOUT_S) == 0, "records still in flight"
            peak = max(peak, _open_files(broker.pid))
    assert producer.flush(FLUSH_TIMEOUT_S) == 0 and not errors, errors[:3]
    for restart in (False, True):
        if restart:
            broker.stop()
            broker.start()
            wait_for_topic(broker.bootstrap, "wide", partitions)
        assert _read_values(broker.bootstrap, "wide", partitions, per_partition) == expected
        peak = max(peak, _open_files(broker.pid))
    assert peak < limit, f"{peak} files open under a limit of {limit}"


def _read_values(bootstrap: str, topic: str, partitions: int, per_partition: int
                 ) -> dict[int, set[bytes]]:
    """Reads `per_partition` records from the start of each partition; their values."""
    consumer = new_consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        seen: dict[int, set[bytes]] = {p: set() for p in range(partitions)}
        total = 0
        deadline = time.monotonic() + ADMIN_TIMEOUT_S
        while total < partitions * per_partition:
            assert time.monotonic() < deadline, f"read {total} records"
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() is None:
                    seen[msg.partition()].add(msg.value())
                    total += 1
        return seen
    finally:
        consumer.close()


def test_connections_past_connections_max_wait_and_the_limit_is_logged(make_broker, tmp_path):
    """With connections_max 4, six idle TCP connections: the broker serves four, logs
    one clear line naming the limit, and serves the waiting ones once others close."""
    import socket

    config = tmp_path / "headway.toml"
    config.write_text("connections_max = 4\n")
    broker = make_broker("--config", str(config))
    host, port = broker.bootstrap.rsplit(":", 1)
    sockets = [socket.create_connection((host, int(port)), timeout=10) for _ in range(6)]
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    line = "connections_max reached: new connections wait in the listen backlog"
    while line not in broker.stderr_path.read_text():
        assert time.monotonic() < deadline, "no log line for connections_max"
        time.sleep(0.1)
    assert "connections_max=4" in broker.stderr_path.read_text()
    for s in sockets:
        s.close()
    # Slots free again: a client is served.
    assert "wide" not in topic_names(admin_for(broker))
