"""The Java Kafka client (kafka-clients 3.9 and 4.x) against headway, with default settings.

Goal: the reference client works with headway as configured out of the box: a
KafkaConsumer in a group (default assignors, auto-commit settings, auto.offset.reset=latest)
joins, consumes and commits; a KafkaProducer with defaults (idempotence on, acks=all) writes
100,000 records that a consumer reads back exactly once; the AdminClient manages topics and
configs and answers cluster and offset queries.
Method: the programs of tests/java/src (compiled by scripts/setup against each client
version) run with `java -cp` and print JSON lines; the tests check them against the
broker's state as seen by librdkafka and `headway group describe`. Records use the suite's
test record format and are checked byte for byte on the Java side.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from group_support import group_describe, group_list
from java_support import JavaClient, JavaProcess
from support import (CONSUME_DEADLINE_S, Delivery, create_topic, make_record, produce_records,
                     rdkafka_base)

JAVA_CLIENTS = {"3.9": ("lib-3.9", "classes-3.9"), "4": ("lib-4", "classes-4")}
ADMIN_DEADLINE_S = 120.0
GROUP_ARGS = ("--group-initial-rebalance-delay-ms", "0")


@pytest.fixture(params=sorted(JAVA_CLIENTS), ids=lambda k: f"kafka-clients-{k}")
def java(request, tmp_path) -> JavaClient:
    lib, classes = JAVA_CLIENTS[request.param]
    return JavaClient(lib, classes, "ConsumerCheck", tmp_path)


@pytest.fixture
def background(java):
    """Factory: background(main, *args) -> JavaProcess, killed at the end of the test."""
    started: list[JavaProcess] = []

    def factory(main: str, *args: str) -> JavaProcess:
        process = java.start(main, *args)
        started.append(process)
        return process

    yield factory
    for process in started:
        process.kill()


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({**rdkafka_base(bootstrap), "group.id": "headway-watermarks"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({**rdkafka_base(bootstrap), "group.id": group})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                 timeout=30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


def check_consumed(done: dict, placements: dict[int, tuple[int, int]], count: int) -> None:
    """A ConsumerCheck "done" event read records 0..count-1 once each, byte for byte, each at
    the partition and offset its producer was told."""
    assert not done["timed_out"], f"read {done['count']} of {count} records before the deadline"
    assert not done["problems"], f"records differ: {done['problems'][:10]}"
    seqs = sorted(seq for _p, _o, seq in done["records"])
    assert seqs == list(range(count)), (
        f"read {len(seqs)} records, {len(set(seqs))} distinct, for {count} produced")
    wrong = [(seq, (p, o), placements[seq]) for p, o, seq in done["records"]
             if placements[seq] != (p, o)]
    assert not wrong, f"{len(wrong)} records not where the producer put them, e.g. {wrong[:5]}"


# -- consumer group ------------------------------------------------------------------------

def test_consumer_group_defaults(make_broker, java, background):
    """KafkaConsumer with defaults and a group.id: joins, reads what is produced after its
    assignment (auto.offset.reset=latest), commits, and leaves on close."""
    broker = make_broker(*GROUP_ARGS)
    topic, group, partitions, count = "java-group", "java-group", 4, 2_000
    create_topic(broker.bootstrap, topic, partitions)
    consumer = background("ConsumerCheck", "--bootstrap", broker.bootstrap, "--topic", topic,
                          "--group", group, "--count", str(count))
    assigned = consumer.wait_event(
        lambda e: e["event"] == "assigned" and len(e["partitions"]) == partitions,
        CONSUME_DEADLINE_S, f"assignment of all {partitions} partitions")
    assert assigned["positions"] == {str(p): 0 for p in range(partitions)}, assigned

    delivery = Delivery()
    producer = Producer({**rdkafka_base(broker.bootstrap), "acks": "all", "linger.ms": 5})
    produce_records(producer, topic, range(count), delivery)
    assert not delivery.failed
    done = consumer.wait_event(lambda e: e["event"] == "done", CONSUME_DEADLINE_S, "done")
    consumer.wait_event(lambda e: e["event"] == "closed", CONSUME_DEADLINE_S, "closed")
    assert consumer.finish(60) == 0
    check_consumed(done, delivery.acked, count)

    ends = high_watermarks(broker.bootstrap, topic, partitions)
    assert done["committed"] == {str(p): ends[p] for p in range(partitions)}, done["committed"]
    assert committed_offsets(broker.bootstrap, group, topic, partitions) == ends
    d = group_describe(broker.bootstrap, group)
    assert d.state == "Empty" and d.members == [], f"the consumer did not leave:\n{d.text}"
    for p in range(partitions):
        assert d.partitions[(topic, p)] == {"committed": ends[p], "log_end": ends[p], "lag": 0,
                                            "member": None}, d.text
    assert group in group_list(broker.bootstrap)


# -- producer --------------------------------------------------------------------------------

def test_producer_defaults_exactly_once(make_broker, java):
    """KafkaProducer with defaults (idempotence on, acks=all) sends 100,000 records; the log
    holds each once, and a KafkaConsumer in a group reads each once, where the producer was
    told it is."""
    broker = make_broker(*GROUP_ARGS)
    topic, partitions, count = "java-produce", 4, 100_000
    create_topic(broker.bootstrap, topic, partitions)
    events = java.run("ProducerCheck", "--bootstrap", broker.bootstrap, "--topic", topic,
                      "--count", str(count))
    result = events[-1] if events else {}
    assert result.get("event") == "done" and not result["failed"], (
        f"kafka-clients {java.version} producer: {result.get('acked')} acked, "
        f"{result.get('failed')} failed: {result.get('error') or result.get('errors')}")
    assert result["acked"] == count
    placements = {seq: (p, o) for seq, p, o in result["placements"]}

    ends = high_watermarks(broker.bootstrap, topic, partitions)
    assert sum(ends.values()) == count, f"the log holds {sum(ends.values())} records: {ends}"
    events = java.run("ConsumerCheck", "--bootstrap", broker.bootstrap, "--topic", topic,
                      "--group", "java-produce", "--count", str(count),
                      "--set", "auto.offset.reset=earliest")
    done = next((e for e in events if e["event"] == "done"), None)
    assert done is not None, f"consumer: {events[-1:]}"
    check_consumed(done, placements, count)
    assert done["committed"] == {str(p): ends[p] for p in range(partitions)}


# -- admin -----------------------------------------------------------------------------------

def admin(java: JavaClient, bootstrap: str, command: str, *args: str) -> dict[str, dict]:
    """Runs one AdminCheck scenario; returns its steps by name."""
    events = java.run("AdminCheck", "--bootstrap", bootstrap, command, *args,
                      timeout_s=ADMIN_DEADLINE_S)
    assert len(events) == 1 and "steps" in events[0], f"AdminCheck {command}: {events}"
    return {s["step"]: s for s in events[0]["steps"]}


def result_of(steps: dict[str, dict], name: str):
    """The result of a step that must succeed."""
    step = steps[name]
    assert step["ok"], f"step {name}: {step['error']}"
    return step["result"]


def error_of(steps: dict[str, dict], name: str) -> str:
    """The error of a step that must fail."""
    step = steps[name]
    assert not step["ok"], f"step {name} should have failed but returned {step['result']}"
    return step["error"]


def test_admin_topics(make_broker, java):
    broker = make_broker("--default-partitions", "2")
    host, port = broker.bootstrap.rsplit(":", 1)
    steps = admin(java, broker.bootstrap, "topics", "--topic", "adm")
    failures = [f"{name}: {s.get('error')}" for name, s in steps.items()
                if not s["ok"] and name not in ("create-existing", "describe-missing")]
    assert not failures, "\n".join(failures)

    created = result_of(steps, "create")
    assert created == {"adm-a": {"partitions": 3, "replication_factor": 1},
                       "adm-b": {"partitions": 2, "replication_factor": 1},
                       "created_retention_ms": "3600000"}, created
    assert "TopicExistsException" in error_of(steps, "create-existing")
    listed = result_of(steps, "list")
    assert {"adm-a", "adm-b"} <= set(listed["names"]), listed
    described = result_of(steps, "describe")
    leader = {"id": 1, "host": host, "port": int(port)}
    for topic, count in (("adm-a", 3), ("adm-b", 2)):
        assert described[topic] == {"internal": False, "partitions": [
            {"partition": p, "leader": leader, "replicas": [1], "isr": [1]}
            for p in range(count)]}, described[topic]
    assert "UnknownTopicOrPartitionException" in error_of(steps, "describe-missing")
    config = result_of(steps, "describe-configs")
    assert config["retention.ms"] == {"value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG",
                                      "default": False}, config["retention.ms"]
    assert config["cleanup.policy"]["value"] == "delete", config["cleanup.policy"]


def test_admin_alter_config_retention(broker, java):
    create_topic(broker.bootstrap, "adm-alter", 2)
    steps = admin(java, broker.bootstrap, "alter-config", "--topic", "adm-alter")
    result_of(steps, "set")
    after_set = result_of(steps, "describe-after-set")["retention.ms"]
    assert after_set == {"value": "1234567", "source": "DYNAMIC_TOPIC_CONFIG",
                         "default": False}, after_set
    result_of(steps, "delete")
    after_delete = result_of(steps, "describe-after-delete")["retention.ms"]
    assert after_delete["value"] == "604800000" and after_delete["source"] == "DEFAULT_CONFIG", (
        after_delete)


def test_admin_create_partitions(broker, java):
    create_topic(broker.bootstrap, "adm-grow", 3)
    steps = admin(java, broker.bootstrap, "create-partitions", "--topic", "adm-grow",
                  "--partitions", "5")
    result_of(steps, "increase")
    described = result_of(steps, "describe")
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2, 3, 4], described
    assert "InvalidPartitionsException" in error_of(steps, "decrease")


def test_admin_delete_topic(broker, java):
    create_topic(broker.bootstrap, "adm-gone", 2)
    create_topic(broker.bootstrap, "adm-stays", 1)
    steps = admin(java, broker.bootstrap, "delete", "--topic", "adm-gone")
    result_of(steps, "delete")
    remaining = result_of(steps, "list-until-gone")
    assert "adm-gone" not in remaining and "adm-stays" in remaining, remaining
    assert "UnknownTopicOrPartitionException" in error_of(steps, "delete-missing")


def test_admin_describe_cluster(broker, java):
    host, port = broker.bootstrap.rsplit(":", 1)
    steps = admin(java, broker.bootstrap, "describe-cluster")
    cluster = result_of(steps, "describe-cluster")
    node = {"id": 1, "host": host, "port": int(port)}
    assert cluster["cluster_id"], cluster
    assert cluster["nodes"] == [node] and cluster["controller"] == node, cluster


LIST_OFFSETS_BASE_MS = 1_700_000_000_000  # record timestamps: base + 1000 * i


def test_admin_list_offsets(broker, java):
    # 10 records with known timestamps in partition 0, none in partition 1.
    topic = "adm-offsets"
    create_topic(broker.bootstrap, topic, 2)
    delivery = Delivery()
    producer = Producer({**rdkafka_base(broker.bootstrap), "acks": "all"})
    for i in range(10):
        r = make_record(i)
        producer.produce(topic, key=r.key, value=r.value, partition=0,
                         timestamp=LIST_OFFSETS_BASE_MS + 1000 * i, on_delivery=delivery.callback)
    assert producer.flush(60) == 0 and not delivery.failed

    steps = admin(java, broker.bootstrap, "list-offsets", "--topic", topic,
                  "--partitions", "2", "--timestamp", str(LIST_OFFSETS_BASE_MS + 4500))
    assert result_of(steps, "earliest") == {"0": {"offset": 0, "timestamp": -1},
                                            "1": {"offset": 0, "timestamp": -1}}
    assert result_of(steps, "latest") == {"0": {"offset": 10, "timestamp": -1},
                                          "1": {"offset": 0, "timestamp": -1}}
    # The newest record's timestamp (ListOffsets v7, KIP-734); none in the empty partition.
    assert result_of(steps, "max-timestamp") == {
        "0": {"offset": 9, "timestamp": LIST_OFFSETS_BASE_MS + 9000},
        "1": {"offset": -1, "timestamp": -1}}
    # The first record at or after the timestamp; none in the empty partition.
    assert result_of(steps, "for-timestamp") == {
        "0": {"offset": 5, "timestamp": LIST_OFFSETS_BASE_MS + 5000},
        "1": {"offset": -1, "timestamp": -1}}

