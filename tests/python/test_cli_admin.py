"""The operator commands `headway topic`, `headway group` and `headway cluster`, against
headway and against Kafka 4.3.1: the CLI is a Kafka tool.

Goal: the CLI creates topics (with settings), lists, describes, alters a setting, adds
partitions and deletes topics; it resets a group's committed offsets to the earliest, the
latest, a timestamp and an explicit offset, for all or chosen partitions, where --dry-run
commits nothing and a group with an active member is refused; it deletes groups and
describes the cluster. Errors are one `error: ...` line naming the Kafka error, exit 1.
Method: every command runs as a process with `--format json` (and once as a table);
every effect is checked through librdkafka (confluent-kafka's AdminClient and
Consumer.committed), never through the CLI alone. Each test runs against a headway broker
of its own and against one Kafka broker shared by the module (started by peers/kafka/start,
skipped with the reason where peers/kafka is not set up), with names unique per test.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

from conftest import HEADWAY_BIN
from support import ADMIN_TIMEOUT_S, FLUSH_TIMEOUT_S, rdkafka_base, wait_for_topic

CLI_DEADLINE_S = 120.0
RECORDS_PER_PARTITION = 10
# What Kafka answers while its group coordinator is not ready yet.
COORDINATOR_NOT_READY = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                         KafkaError.COORDINATOR_NOT_AVAILABLE}
# Record i of each partition has timestamp BASE + i * STEP (in the past: Kafka refuses
# timestamps more than an hour ahead).
TIMESTAMP_STEP_MS = 1000


@pytest.fixture(params=["headway", "kafka"])
def target(request) -> str:
    """The bootstrap address of the broker under test."""
    if request.param == "headway":
        return request.getfixturevalue("broker").bootstrap
    return request.getfixturevalue("kafka_peer").bootstrap


def headway(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWAY_")}
    return subprocess.run([str(HEADWAY_BIN), *args, "-b", bootstrap], capture_output=True,
                          text=True, timeout=CLI_DEADLINE_S, env=env)


def ok(bootstrap: str, *args: str) -> str:
    proc = headway(bootstrap, *args)
    assert proc.returncode == 0, f"headway {' '.join(args)}: exit {proc.returncode}\n" \
                                 f"{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def ok_json(bootstrap: str, *args: str):
    return json.loads(ok(bootstrap, *args, "--format", "json"))


def fails(bootstrap: str, *args: str) -> str:
    """Runs a command that must fail with one `error: ...` line; returns that line."""
    proc = headway(bootstrap, *args)
    assert proc.returncode == 1, f"headway {' '.join(args)}: exit {proc.returncode}\n" \
                                 f"{proc.stdout}\n{proc.stderr}"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def wait_until(condition, what: str, deadline_s: float = ADMIN_TIMEOUT_S):
    """Polls `condition` until it returns something true; returns it."""
    deadline = time.monotonic() + deadline_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not true within {deadline_s:.0f} s")
        time.sleep(0.1)


def unique(request, name: str) -> str:
    """A name no other test of the shared Kafka broker uses."""
    return f"{name}-{request.node.callspec.id}-{time.monotonic_ns() % 1_000_000}"


def topic_configs(bootstrap: str, topic: str) -> dict:
    admin = AdminClient(rdkafka_base(bootstrap))
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)


def topic_names(bootstrap: str) -> set[str]:
    return set(AdminClient(rdkafka_base(bootstrap)).list_topics(timeout=10).topics)


def test_topic_create_describe_alter_grow_delete(request, target):
    topic = unique(request, "admin")
    created = ok_json(target, "topic", "create", topic, "-p", "2", "-r", "1",
                      "-c", "retention.ms=3600000", "-c", "max.message.bytes=200000")
    assert created == {"topics": [{"name": topic, "partitions": 2, "replication_factor": 1}]}
    wait_for_topic(target, topic, 2)
    wait_until(lambda: topic_configs(target, topic)["retention.ms"].value == "3600000",
               "retention.ms set at creation")
    assert topic_configs(target, topic)["max.message.bytes"].value == "200000"

    line = fails(target, "topic", "create", topic, "-p", "2")
    assert line.startswith(f'error: topic "{topic}": TOPIC_ALREADY_EXISTS'), line

    producer = Producer({**rdkafka_base(target), "acks": "all"})
    for i in range(5):
        producer.produce(topic, value=b"v%d" % i, partition=0)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0

    listed = ok_json(target, "topic", "list")
    mine = [t for t in listed["topics"] if t["name"] == topic]
    assert len(mine) == 1 and mine[0]["partitions"] == 2, listed
    assert mine[0]["replication_factor"] == 1 and mine[0]["internal"] is False, listed
    assert not any(t["internal"] for t in listed["topics"]), listed
    table = ok(target, "topic", "list").splitlines()
    assert table[0].split() == ["NAME", "PARTITIONS", "REPLICAS"], table
    assert [topic, "2", "1"] in [row.split() for row in table[1:]], table

    described = ok_json(target, "topic", "describe", topic)
    assert described["name"] == topic and described["internal"] is False, described
    partitions = {p["partition"]: p for p in described["partitions"]}
    assert sorted(partitions) == [0, 1], described
    assert partitions[0]["log_start_offset"] == 0, described
    assert partitions[0]["log_end_offset"] == 5, described
    assert partitions[1]["log_end_offset"] == 0, described
    assert partitions[0]["leader"] >= 0 and len(partitions[0]["replicas"]) == 1, described
    configs = {c["name"]: c for c in described["configs"]}
    assert configs["retention.ms"]["value"] == "3600000", configs["retention.ms"]
    assert configs["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG", configs["retention.ms"]
    text = ok(target, "topic", "describe", topic)
    assert text.splitlines()[0].startswith(f"topic {topic}"), text
    assert "PARTITION  LEADER  REPLICAS  ISR  LOG-START  LOG-END" in text, text

    altered = ok_json(target, "topic", "alter-config", topic, "--set", "retention.ms=7200000",
                      "--delete", "max.message.bytes")
    assert {"operation": "set", "name": "retention.ms", "value": "7200000"} \
        in altered["changes"], altered
    wait_until(lambda: topic_configs(target, topic)["retention.ms"].value == "7200000",
               "retention.ms altered")
    wait_until(lambda: topic_configs(target, topic)["max.message.bytes"].value != "200000",
               "max.message.bytes back to its default")
    reset = topic_configs(target, topic)["max.message.bytes"]
    assert reset.source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value, reset

    grown = ok_json(target, "topic", "add-partitions", topic, "-n", "2")
    assert grown == {"topic": topic, "partitions_before": 2, "partitions": 4}, grown
    wait_for_topic(target, topic, 4)

    assert ok_json(target, "topic", "delete", topic) == {"deleted": [topic]}
    wait_until(lambda: topic not in topic_names(target), "deleted topic gone from metadata")

    line = fails(target, "topic", "describe", topic)
    assert line.startswith(f'error: topic "{topic}": UNKNOWN_TOPIC_OR_PARTITION'), line
    line = fails(target, "topic", "delete", topic)
    assert line.startswith(f'error: topic "{topic}": UNKNOWN_TOPIC_OR_PARTITION'), line


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed offsets as librdkafka reads them (negative: none)."""
    consumer = Consumer({**rdkafka_base(bootstrap), "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                 timeout=ADMIN_TIMEOUT_S)
        return [tp.offset for tp in tps]
    finally:
        consumer.close()


def seek(bootstrap: str, group: str, *args: str) -> dict:
    """`group seek` as JSON: {(topic, partition): (current_offset, new_offset)} under
    "offsets", and the document itself under "document"."""
    document = ok_json(bootstrap, "group", "seek", group, *args)
    offsets = {(o["topic"], o["partition"]): (o["current_offset"], o["new_offset"])
               for o in document["offsets"]}
    return {"offsets": offsets, "document": document}


def group_members(bootstrap: str, group: str) -> int:
    return len(ok_json(bootstrap, "group", "describe", group)["members"])


def test_group_seek_delete(request, target):
    topic, group = unique(request, "seek"), unique(request, "seekers")
    ok(target, "topic", "create", topic, "-p", "2")
    wait_for_topic(target, topic, 2)
    base_ms = int(time.time() * 1000) - 600_000
    producer = Producer({**rdkafka_base(target), "acks": "all"})
    for p in range(2):
        for i in range(RECORDS_PER_PARTITION):
            producer.produce(topic, value=b"r%d" % i, partition=p,
                             timestamp=base_ms + i * TIMESTAMP_STEP_MS)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0

    # Offsets committed by librdkafka from outside any generation, as a tool would.
    # Kafka answers NOT_COORDINATOR while it loads a fresh offsets topic.
    setup = Consumer({**rdkafka_base(target), "group.id": group})
    try:
        deadline = time.monotonic() + ADMIN_TIMEOUT_S
        while True:
            try:
                setup.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 3)],
                             asynchronous=False)
                break
            except KafkaException as e:
                if e.args[0].code() not in COORDINATOR_NOT_READY or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        setup.close()
    assert committed(target, group, topic, 2) == [3, 3]

    result = seek(target, group, "--to-earliest")
    assert result["offsets"] == {(topic, 0): (3, 0), (topic, 1): (3, 0)}, result
    assert result["document"]["group"] == group and result["document"]["dry_run"] is False
    assert committed(target, group, topic, 2) == [0, 0]

    result = seek(target, group, "--to-latest", "--dry-run")
    assert result["offsets"] == {(topic, 0): (0, 10), (topic, 1): (0, 10)}, result
    assert result["document"]["dry_run"] is True
    assert committed(target, group, topic, 2) == [0, 0], "--dry-run committed"
    table = ok(target, "group", "seek", group, "--to-latest", "--dry-run").splitlines()
    assert table[0].split() == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"], table
    assert [topic, "1", "0", "10"] in [row.split() for row in table], table
    assert committed(target, group, topic, 2) == [0, 0], "--dry-run committed"

    seek(target, group, "--to-latest")
    assert committed(target, group, topic, 2) == [10, 10]

    result = seek(target, group, "--to-timestamp", str(base_ms + 5 * TIMESTAMP_STEP_MS),
                  "--topic", topic)
    assert result["offsets"] == {(topic, 0): (10, 5), (topic, 1): (10, 5)}, result
    assert committed(target, group, topic, 2) == [5, 5]

    result = seek(target, group, "--to-offset", "7", "--topic", f"{topic}:1")
    assert result["offsets"] == {(topic, 1): (5, 7)}, result
    assert committed(target, group, topic, 2) == [5, 7]

    # Beyond the log end: brought to it, as Kafka's tool does.
    result = seek(target, group, "--to-offset", "1000")
    assert result["offsets"] == {(topic, 0): (5, 10), (topic, 1): (7, 10)}, result
    assert committed(target, group, topic, 2) == [10, 10]

    # An active member: refused, nothing changes.
    assigned = []
    member = Consumer({**rdkafka_base(target), "group.id": group,
                       "enable.auto.commit": False})
    try:
        member.subscribe([topic], on_assign=lambda _c, tps: assigned.extend(tps))
        deadline = time.monotonic() + ADMIN_TIMEOUT_S * 2
        while not assigned:
            assert time.monotonic() < deadline, "the member got no assignment"
            member.poll(0.2)
        line = fails(target, "group", "seek", group, "--to-earliest")
        assert line.startswith(f'error: group "{group}": offsets can only be reset while '
                               f'the group is inactive'), line
        line = fails(target, "group", "seek", group, "--to-earliest", "--dry-run")
        assert "inactive" in line, line
        line = fails(target, "group", "delete", group)
        assert line.startswith(f'error: group "{group}": NON_EMPTY_GROUP'), line
        assert committed(target, group, topic, 2) == [10, 10]
    finally:
        member.close()
    wait_until(lambda: group_members(target, group) == 0, "the member left the group")
    seek(target, group, "--to-earliest")
    assert committed(target, group, topic, 2) == [0, 0]

    assert ok_json(target, "group", "delete", group) == {"deleted": [group]}
    listed = ok_json(target, "group", "list")["groups"]
    assert group not in [g["group_id"] for g in listed], listed
    assert all(o < 0 for o in committed(target, group, topic, 2))
    line = fails(target, "group", "delete", group)
    assert line.startswith(f'error: group "{group}": GROUP_ID_NOT_FOUND'), line

    line = fails(target, "group", "seek", group, "--to-earliest", "--topic", "no-such-topic")
    assert line.startswith('error: topic "no-such-topic": UNKNOWN_TOPIC_OR_PARTITION'), line


def test_cluster_info_and_config(target):
    info = ok_json(target, "cluster", "info")
    port = int(target.rsplit(":", 1)[1])
    assert [b["port"] for b in info["brokers"]] == [port], info
    assert info["cluster_id"], info
    text = ok(target, "cluster", "info").splitlines()
    assert text[0].startswith("cluster "), text
    assert text[2].split() == ["ID", "HOST", "PORT", "RACK"], text

    config = ok_json(target, "cluster", "config")
    assert config["broker_id"] == info["brokers"][0]["node_id"], config
    names = {c["name"] for c in config["configs"]}
    assert names, config
    assert all(c["source"] != "UNKNOWN" for c in config["configs"]), config
    text = ok(target, "cluster", "config").splitlines()
    assert text[0].split() == ["NAME", "VALUE", "SOURCE"], text

    line = fails(target, "cluster", "config", "--broker", "4242")
    assert line.startswith("error: broker 4242: "), line
