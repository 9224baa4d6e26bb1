"""Kafka applications against headway: Kafka Streams and Kafka Connect.

Goal: the applications Kafka users run on compacted topics work on headway.
- A Kafka Streams application (kafka-streams 4.x, at-least-once, its defaults) keeps its
  state through the loss of its local state: a word count is stopped, its state
  directory deleted, restarted and fed more lines, and every count is still exact, so its
  state came back from the compacted changelog topic it created.
- A Kafka Connect worker in distributed mode (connect-runtime 4.x) keeps its connectors'
  configs, offsets and status in compacted topics it creates and checks: a FileStreamSource
  and a FileStreamSink copy a file through headway, and after the worker restarts they
  resume where they were, without reading the source file again or writing a line twice.
Method: tests/java/apps/WordCountApp.java and Connect's own ConnectDistributed (both from
tests/java/pom-apps.xml, set up by scripts/setup) run in the background; librdkafka writes
the word count's input and reads its output (the latest count per word), Connect's REST API
creates the connectors; every wait polls with a deadline.
"""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from java_support import JVM_OPTIONS, JavaClient, JavaProcess, kill, tail
from support import ADMIN_TIMEOUT_S, FLUSH_TIMEOUT_S, create_topic, rdkafka_base

GROUP_ARGS = ("--group-initial-rebalance-delay-ms", "0")
APP_DEADLINE_S = 180.0
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


@pytest.fixture
def apps(tmp_path) -> JavaClient:
    return JavaClient("lib-apps", "classes-apps", "WordCountApp", tmp_path)


def lines(start: int, count: int) -> list[str]:
    """Lines of three words each, deterministic, overlapping between batches."""
    return [" ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 5))
            for i in range(start, start + count)]


def produce_lines(bootstrap: str, topic: str, text: list[str]) -> None:
    producer = Producer({**rdkafka_base(bootstrap), "acks": "all"})
    failed: list[str] = []
    for i, line in enumerate(text):
        producer.produce(topic, key=str(i).encode(), value=line.encode(),
                         on_delivery=lambda err, _m: err and failed.append(err.str()))
        producer.poll(0)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0, "every line delivered"
    assert not failed, failed[:5]


class Counts:
    """Reads the output topic from the start and keeps the latest count of each word.
    `isolation` is the reader's isolation level (librdkafka's default: read_committed).
    With `exact`, a count above the expected one fails at once: a word counted twice."""

    def __init__(self, bootstrap: str, topic: str, isolation: str = "read_committed",
                 exact: bool = False):
        self.consumer = Consumer({**rdkafka_base(bootstrap),
                                  "group.id": f"counts-reader-{isolation}",
                                  "auto.offset.reset": "earliest",
                                  "isolation.level": isolation,
                                  "enable.auto.commit": False})
        self.consumer.subscribe([topic])
        self.latest: dict[str, int] = {}
        self.exact = exact

    def wait_for(self, expected: Counter, what: str) -> None:
        deadline = time.monotonic() + APP_DEADLINE_S
        while dict(expected) != self.latest:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: counts {self.latest}, expected {dict(expected)}")
            for msg in self.consumer.consume(500, timeout=0.5):
                if msg.error():
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    continue
                (count,) = struct.unpack(">q", msg.value())
                word = msg.key().decode()
                self.latest[word] = count
                assert not self.exact or count <= expected[word], \
                    f"{what}: {word!r} counted {count} times, expected {expected[word]}"

    def close(self) -> None:
        self.consumer.close()


def start_app(apps: JavaClient, bootstrap: str, state_dir, *settings: str) -> JavaProcess:
    app = apps.start("WordCountApp", "--bootstrap", bootstrap, "--application-id", "wordcount",
                     "--state-dir", str(state_dir), "--input", "lines", "--output", "counts",
                     *settings, stdin=True)
    app.wait_event(lambda e: e.get("state") == "RUNNING", APP_DEADLINE_S, "state RUNNING")
    return app


def stop_app(app: JavaProcess) -> None:
    app.close_stdin()
    closed = app.wait_event(lambda e: e.get("event") == "closed", APP_DEADLINE_S, "closed")
    assert closed["clean"], "the application closed within its timeout"
    assert app.finish(60) == 0


def test_streams_word_count_state_survives_losing_its_state_dir(make_broker, apps, tmp_path):
    broker = make_broker(*GROUP_ARGS)
    create_topic(broker.bootstrap, "lines", 2)
    create_topic(broker.bootstrap, "counts", 1)
    state_dir = tmp_path / "streams-state"
    counts = Counts(broker.bootstrap, "counts")
    first, second = lines(0, 300), lines(300, 200)
    try:
        app = start_app(apps, broker.bootstrap, state_dir)
        try:
            produce_lines(broker.bootstrap, "lines", first)
            expected = Counter(w for line in first for w in line.split())
            counts.wait_for(expected, "after the first lines")
            stop_app(app)
        finally:
            app.kill()

        # The changelog topic Streams created for its store is compacted.
        admin = AdminClient(rdkafka_base(broker.bootstrap))
        changelog = "wordcount-counts-changelog"
        resource = ConfigResource(ResourceType.TOPIC, changelog)
        configs = admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
        assert configs["cleanup.policy"].value == "compact"

        # Local state gone: the counts must come back from the changelog.
        shutil.rmtree(state_dir)
        app = start_app(apps, broker.bootstrap, state_dir)
        try:
            produce_lines(broker.bootstrap, "lines", second)
            expected += Counter(w for line in second for w in line.split())
            counts.wait_for(expected, "after the restart without local state")
            stop_app(app)
        finally:
            app.kill()
    finally:
        counts.close()


def open_transaction_on(broker, topic: str) -> bool:
    """Whether partition 0 of `topic` has an open transaction holding its last stable
    offset below its high watermark, as the broker's /metrics shows it."""
    with urllib.request.urlopen(f"http://{broker.metrics_address()}/metrics", timeout=10) as r:
        text = r.read().decode()

    def value(family: str) -> float:
        for line in text.splitlines():
            if line.startswith(f'headway_{family}{{topic="{topic}",partition="0"}} '):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"no {family} for {topic} on /metrics")

    return value("partition_last_stable_offset") < value("partition_high_watermark")


def test_streams_exactly_once_counts_stay_exact_through_a_kill(make_broker, apps, tmp_path):
    """processing.guarantee=exactly_once_v2 (Kafka Streams' transactions): the
    application is SIGKILLed after it wrote the counts of a batch of lines and before it
    committed them with its input offsets (the broker shows the transaction open), and
    restarted on the same state directory; every count a read_committed reader sees stays
    exact. At-least-once fails here: its restart counts the batch's words again."""
    broker = make_broker(*GROUP_ARGS, "--metrics-listen", "127.0.0.1:0")
    create_topic(broker.bootstrap, "lines", 2)
    create_topic(broker.bootstrap, "counts", 1)
    state_dir = tmp_path / "streams-state"
    committed = Counts(broker.bootstrap, "counts", exact=True)
    written = Counts(broker.bootstrap, "counts", isolation="read_uncommitted")
    # No record cache: each count is written at once, not at the commit. A long commit
    # interval: the kill lands between the counts' write and their commit.
    eos = ("--set", "processing.guarantee=exactly_once_v2",
           "--set", "statestore.cache.max.bytes=0", "--set", "commit.interval.ms=10000")
    expected = Counter()
    app = None
    try:
        app = start_app(apps, broker.bootstrap, state_dir, *eos)
        first = lines(0, 300)
        produce_lines(broker.bootstrap, "lines", first)
        expected += Counter(w for line in first for w in line.split())
        committed.wait_for(expected, "the first batch")
        killed_inside = 0
        for attempt in range(3):
            batch = lines(300 + 100 * attempt, 100)
            produce_lines(broker.bootstrap, "lines", batch)
            expected += Counter(w for line in batch for w in line.split())
            written.wait_for(expected, f"batch {attempt + 2} written")
            app.kill()  # SIGKILL, no clean close
            inside = open_transaction_on(broker, "counts")
            print(f"batch {attempt + 2}: killed {'inside' if inside else 'after'} "
                  "its transaction")
            app = start_app(apps, broker.bootstrap, state_dir, *eos)
            committed.wait_for(expected, f"after the kill of batch {attempt + 2}")
            if inside:
                killed_inside += 1
                break
        # Each try misses only if the 10 s commit came in the moment between the
        # counts' write and the kill.
        assert killed_inside, "no kill landed inside an open transaction in 3 tries"
        last = lines(1000, 100)
        produce_lines(broker.bootstrap, "lines", last)
        expected += Counter(w for line in last for w in line.split())
        committed.wait_for(expected, "after the restart")
        stop_app(app)
    finally:
        if app is not None:
            app.kill()
        committed.close()
        written.close()


# -- Kafka Connect, distributed ------------------------------------------------------------

CONNECT_TOPICS = {"config.storage.topic": "connect-configs",
                  "offset.storage.topic": "connect-offsets",
                  "status.storage.topic": "connect-status"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Connect's storage topics default to 3 replicas, which a cluster of one broker (Kafka's
# too) refuses; Kafka's sample worker file for one broker sets 1, as here.
REPLICATION = {f"{kind}.storage.replication.factor": "1" for kind in ("config", "offset", "status")}


class ConnectWorker:
    """A Connect worker in distributed mode, with the settings a distributed worker needs
    (its group, converters, storage topics and their replication on one broker, REST
    listener) and defaults otherwise."""

    def __init__(self, apps: JavaClient, bootstrap: str, work_dir: Path, port: int):
        self.url = f"http://127.0.0.1:{port}"
        settings = {"bootstrap.servers": bootstrap, "group.id": "connect-cluster",
                    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
                    "value.converter": "org.apache.kafka.connect.storage.StringConverter",
                    "listeners": self.url, **CONNECT_TOPICS, **REPLICATION}
        properties = work_dir / "worker.properties"
        properties.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        self.log = work_dir / f"connect-{time.monotonic_ns()}.log"
        command = ["java", *JVM_OPTIONS, "-cp", apps.classpath,
                   "org.apache.kafka.connect.cli.ConnectDistributed", str(properties)]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, cwd=work_dir)

    def request(self, method: str, path: str, body: dict | None = None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def wait_until(self, condition, what: str) -> None:
        deadline = time.monotonic() + APP_DEADLINE_S
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"the Connect worker exited ({self.proc.returncode}) "
                                     f"before {what}\n{tail(self.log)}")
            try:
                if condition():
                    return
            except OSError:
                pass  # the REST server is not up yet, or answered an error
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {APP_DEADLINE_S:.0f} s\n{tail(self.log)}")
            time.sleep(0.25)

    def running(self, connector: str) -> bool:
        status = self.request("GET", f"/connectors/{connector}/status")
        return status["connector"]["state"] == "RUNNING" and bool(status["tasks"]) and all(
            t["state"] == "RUNNING" for t in status["tasks"])

    def stop(self) -> None:
        """A graceful stop (SIGTERM), which commits the tasks' offsets."""
        self.proc.terminate()
        try:
            assert self.proc.wait(timeout=APP_DEADLINE_S) in (0, 143), tail(self.log)
        finally:
            self.kill()

    def kill(self) -> None:
        kill(self.proc)


def file_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_connect_distributed_file_connectors_resume_after_restart(make_broker, apps, tmp_path):
    broker = make_broker(*GROUP_ARGS)
    source, sink = tmp_path / "source.txt", tmp_path / "sink.txt"
    source.write_text("".join(f"line {i}\n" for i in range(100)))
    port = free_port()
    worker = ConnectWorker(apps, broker.bootstrap, tmp_path, port)
    try:
        worker.wait_until(lambda: worker.request("GET", "/") is not None, "REST answer")
        worker.request("POST", "/connectors", {"name": "file-source", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "file": str(source), "topic": "copied", "tasks.max": "1"}})
        worker.request("POST", "/connectors", {"name": "file-sink", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "file": str(sink), "topics": "copied", "tasks.max": "1"}})
        for name in ("file-source", "file-sink"):
            worker.wait_until(lambda: worker.running(name), f"{name} RUNNING")
        first = [f"line {i}" for i in range(100)]
        worker.wait_until(lambda: file_lines(sink) == first, "the first 100 lines copied")
        worker.stop()

        # The worker's storage topics are compacted, as Connect requires.
        admin = AdminClient(rdkafka_base(broker.bootstrap))
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in CONNECT_TOPICS.values()]
        for resource, future in admin.describe_configs(resources).items():
            configs = future.result(timeout=ADMIN_TIMEOUT_S)
            assert configs["cleanup.policy"].value == "compact", resource

        # Restarted, the worker finds its connectors and their offsets: only new lines.
        with source.open("a") as f:
            f.write("".join(f"line {i}\n" for i in range(100, 150)))
        worker = ConnectWorker(apps, broker.bootstrap, tmp_path, port)
        everything = [f"line {i}" for i in range(150)]
        worker.wait_until(lambda: len(file_lines(sink)) >= 150, "the next 50 lines copied")
        assert file_lines(sink) == everything, "every line once, in order"
        consumer = Consumer({**rdkafka_base(broker.bootstrap), "group.id": "copied-count"})
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition("copied", 0), timeout=30)
        finally:
            consumer.close()
        assert (low, high) == (0, 150), "the source read each line of the file once"
        worker.stop()
    finally:
        worker.kill()
