"""Transactions as Kafka clients run them: exactly-once pipelines and read_committed.

Goal: a Java consume-transform-produce loop (kafka-clients 3.9 and 4.x, defaults plus a
transactional id, read_committed consumer, sendOffsetsToTransaction) that is SIGKILLed at
random points and restarted leaves, for a read_committed reader, every input record's
copy exactly once and no record of an aborted transaction; a zombie producer is fenced by
a newer one with the same transactional id; a transaction abandoned by its producer is
aborted after its timeout, so read_committed readers move on past it; librdkafka's
transactional producer and read_committed consumer see commits and aborts as Kafka shows
them; franz-go's GroupTransactSession copies a topic exactly once through a kill.
Method: one broker per test; the Java loop is tests/java/src/TransactionalCopy.java, the
Go one tests/go/cmd/franztxn, librdkafka is confluent-kafka; every wait polls for its condition with a deadline. Random
choices print their seed (`HEADWAY_TEST_SEED` replays them).
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from go_support import build_go_command
from java_support import JavaClient
from support import FLUSH_TIMEOUT_S, create_topic, rdkafka_base

JAVA_CLIENTS = {"3.9": ("lib-3.9", "classes-3.9"), "4": ("lib-4", "classes-4")}
GROUP_ARGS = ("--group-initial-rebalance-delay-ms", "0")
READ_DEADLINE_S = 120.0
PIPELINE_DEADLINE_S = 240.0


@pytest.fixture(params=sorted(JAVA_CLIENTS), ids=lambda k: f"kafka-clients-{k}")
def java(request, tmp_path) -> JavaClient:
    lib, classes = JAVA_CLIENTS[request.param]
    return JavaClient(lib, classes, "TransactionalCopy", tmp_path)


def seeded(name: str) -> random.Random:
    seed = int(os.environ.get("HEADWAY_TEST_SEED", time.time_ns() % 2**32))
    print(f"{name}: seed {seed} (HEADWAY_TEST_SEED={seed} replays it)")
    return random.Random(seed)


def read_values(bootstrap: str, topic: str, partitions: int, isolation: str,
                expected: int | None = None,
                deadline_s: float = READ_DEADLINE_S) -> list[tuple[bytes, bytes]]:
    """(key, value) of every record a consumer with `isolation` reads from the start of
    each partition, until each partition reported its end (and `expected` records came)."""
    consumer = Consumer({**rdkafka_base(bootstrap), "group.id": f"reader-{isolation}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        records: list[tuple[bytes, bytes]] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + deadline_s
        while len(at_end) < partitions or (expected is not None and len(records) < expected):
            assert time.monotonic() < deadline, \
                f"read {len(records)} records of {topic} ({isolation}), expected {expected}, " \
                f"partitions at end {sorted(at_end)}"
            for msg in consumer.consume(500, timeout=0.5):
                if msg.error() is not None:
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    at_end.add(msg.partition())
                    continue
                at_end.discard(msg.partition())
                records.append((msg.key(), msg.value()))
        return records
    finally:
        consumer.close()


def test_consume_transform_produce_is_exactly_once_through_kills(make_broker, java):
    broker = make_broker(*GROUP_ARGS)
    rng = seeded("exactly-once pipeline")
    count, partitions = 2000, 3
    create_topic(broker.bootstrap, "input", partitions)
    create_topic(broker.bootstrap, "output", partitions)
    producer = Producer(rdkafka_base(broker.bootstrap))
    for i in range(count):
        producer.produce("input", key=b"k%d" % i, value=b"v%d" % i)
        producer.poll(0)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0

    args = ("--bootstrap", broker.bootstrap, "--input", "input", "--output", "output",
            "--group", "copier", "--transactional-id", "copier-1", "--abort-every", "7",
            "--batch", "40")
    aborted_any = False
    for kill in range(4):
        copy = java.start("TransactionalCopy", *args)
        try:
            # Let it commit a random number of transactions, then kill it mid-flight.
            commits = rng.randint(1, 6)
            copy.wait_event(lambda e: e.get("event") == "committed" and
                            sum(x.get("event") == "committed" for x in copy.events) >= commits,
                            PIPELINE_DEADLINE_S, f"{commits} commits before kill {kill}")
            time.sleep(rng.uniform(0, 0.3))
            aborted_any |= any(e.get("event") == "aborted" for e in copy.events)
        finally:
            copy.kill()
    copy = java.start("TransactionalCopy", *args)
    try:
        # The last instance runs until every input record's copy is committed.
        read_values(broker.bootstrap, "output", partitions, "read_committed",
                    expected=count, deadline_s=PIPELINE_DEADLINE_S)
        aborted_any |= any(e.get("event") == "aborted" for e in copy.events)
    finally:
        copy.kill()

    committed = read_values(broker.bootstrap, "output", partitions, "read_committed")
    values = sorted(v for _k, v in committed)
    assert values == sorted(b"copy:v%d" % i for i in range(count)), \
        "every input record's copy exactly once, nothing of an aborted transaction"
    assert all(k == b"k" + v[len(b"copy:v"):] for k, v in committed)
    everything = read_values(broker.bootstrap, "output", partitions, "read_uncommitted")
    aborted = [v for _k, v in everything if not v.startswith(b"copy:")]
    assert all(v.startswith(b"aborted:") for v in aborted), aborted[:5]
    if aborted_any:
        assert aborted, "an aborted transaction's records are in the log, unread by read_committed"


def transactional(bootstrap: str, transactional_id: str, **extra) -> Producer:
    return Producer({**rdkafka_base(bootstrap), "transactional.id": transactional_id, **extra})


def test_librdkafka_commits_and_aborts_as_read_committed_readers_see_them(broker):
    create_topic(broker.bootstrap, "ledger", 2)
    producer = transactional(broker.bootstrap, "ledger-writer")
    producer.init_transactions(30)
    for round_, outcome in enumerate(("commit", "abort", "commit")):
        producer.begin_transaction()
        for i in range(100):
            producer.produce("ledger", key=b"%d" % i, value=b"%s-%d-%d" % (outcome.encode(),
                                                                          round_, i))
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.flush(FLUSH_TIMEOUT_S)
            producer.abort_transaction(30)
    committed = read_values(broker.bootstrap, "ledger", 2, "read_committed", expected=200)
    assert sorted(v for _k, v in committed) == sorted(
        b"commit-%d-%d" % (r, i) for r in (0, 2) for i in range(100))
    everything = read_values(broker.bootstrap, "ledger", 2, "read_uncommitted", expected=300)
    assert len(everything) == 300


def test_a_zombie_producer_is_fenced_by_a_newer_one(broker):
    create_topic(broker.bootstrap, "fenced", 1)
    zombie = transactional(broker.bootstrap, "same-id")
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce("fenced", value=b"zombie")
    zombie.flush(FLUSH_TIMEOUT_S)
    successor = transactional(broker.bootstrap, "same-id")
    successor.init_transactions(30)  # fences the zombie and aborts its transaction
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal() or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                             KafkaError.INVALID_PRODUCER_EPOCH), error
    successor.begin_transaction()
    successor.produce("fenced", value=b"successor")
    successor.commit_transaction(30)
    assert read_values(broker.bootstrap, "fenced", 1, "read_committed", expected=1) == \
        [(None, b"successor")]


def test_an_abandoned_transaction_is_aborted_after_its_timeout(broker):
    create_topic(broker.bootstrap, "stuck", 1)
    abandoned = transactional(broker.bootstrap, "walks-away", **{"transaction.timeout.ms": 3000})
    abandoned.init_transactions(30)
    abandoned.begin_transaction()
    abandoned.produce("stuck", value=b"abandoned")
    abandoned.flush(FLUSH_TIMEOUT_S)
    # Its producer never ends it. A plain write after it is held back from
    # read_committed readers until the coordinator aborts the transaction.
    plain = Producer(rdkafka_base(broker.bootstrap))
    plain.produce("stuck", value=b"after")
    assert plain.flush(FLUSH_TIMEOUT_S) == 0
    seen = read_values(broker.bootstrap, "stuck", 1, "read_committed", expected=1,
                       deadline_s=READ_DEADLINE_S)
    assert seen == [(None, b"after")]


@pytest.fixture(scope="session")
def franztxn(tmp_path_factory) -> Path:
    """tests/go/cmd/franztxn, built once per session."""
    return build_go_command(tmp_path_factory, "franztxn")


def test_franz_go_group_transact_session_is_exactly_once_through_a_kill(make_broker, franztxn,
                                                                         tmp_path):
    broker = make_broker(*GROUP_ARGS)
    count, partitions = 1000, 3
    create_topic(broker.bootstrap, "go-input", partitions)
    create_topic(broker.bootstrap, "go-output", partitions)
    producer = Producer(rdkafka_base(broker.bootstrap))
    for i in range(count):
        producer.produce("go-input", key=b"k%d" % i, value=b"v%d" % i)
        producer.poll(0)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0
    command = [str(franztxn), "-brokers", broker.bootstrap, "-input", "go-input",
               "-output", "go-output", "-group", "go-copier", "-txn-id", "go-copier-1"]
    for run in range(2):
        log = open(tmp_path / f"franztxn-{run}.stderr.log", "wb")
        copier = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log)
        try:
            if run == 0:
                # Killed after its first committed transaction.
                line = copier.stdout.readline()
                assert b'"committed"' in line, line
            else:
                read_values(broker.bootstrap, "go-output", partitions, "read_committed",
                            expected=count, deadline_s=PIPELINE_DEADLINE_S)
        finally:
            copier.kill()
            copier.wait(timeout=30)
            log.close()
    committed = read_values(broker.bootstrap, "go-output", partitions, "read_committed")
    assert sorted(v for _k, v in committed) == sorted(b"copy:v%d" % i for i in range(count))


def test_a_commit_survives_a_broker_sigkill_right_after_end_txn(make_broker):
    """EndTxn is answered once PrepareCommit is durable; the markers follow. The broker
    is SIGKILLed as soon as the commit returns (with eight partitions to mark, often
    before every marker is durable; the coordinator's own tests stop at each step):
    after the restart the coordinator completes the commit, read_committed readers see
    every record, and the partitions' last stable offsets move on."""
    broker = make_broker()
    partitions = 8
    create_topic(broker.bootstrap, "crash", partitions)
    for round_ in range(3):
        producer = transactional(broker.bootstrap, "crash-writer")
        producer.init_transactions(60)
        producer.begin_transaction()
        for i in range(400):
            producer.produce("crash", partition=i % partitions, value=b"%d-%d" % (round_, i))
        producer.commit_transaction(60)
        broker.kill()
        broker.start()
        committed = read_values(broker.bootstrap, "crash", partitions, "read_committed",
                                expected=400 * (round_ + 1))
        assert sorted(v for _k, v in committed) == sorted(
            b"%d-%d" % (r, i) for r in range(round_ + 1) for i in range(400))
    # Nothing stays open: a plain record after the last restart is readable at once.
    plain = Producer(rdkafka_base(broker.bootstrap))
    plain.produce("crash", partition=0, value=b"after")
    assert plain.flush(FLUSH_TIMEOUT_S) == 0
    seen = read_values(broker.bootstrap, "crash", partitions, "read_committed",
                       expected=1201)
    assert (None, b"after") in seen
