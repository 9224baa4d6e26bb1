"""Three headway processes as one cluster, under faults, with real clients at their defaults.

Goal: what a producer was told is written (acks=all) is there once, in order, at dense
offsets, when the records go through a cluster at replication factor 3 with
min.insync.replicas=2 (a topic config): with the Java client and franz-go; while a follower
is frozen (SIGSTOP) for 30 s; and when two of the three brokers are killed, so that the
last one can acknowledge nothing until they are back.
Method: each test starts three brokers (cluster_support.start_cluster) and creates its
topic through the AdminClient. The Java programs (tests/java/src: ProducerCheck, then
AssignedReaderCheck, which reads with assign() and no group) and franzcheck (tests/go,
without -group: a direct consumer) produce and read back; groups are avoided because the
brokers do not share group coordinators yet. The SIGSTOP test paces librdkafka's producer
at 200 records/s to one partition and stops one of its followers: the leader drops the
silent follower from the ISR through the controller after the replica lag bound (5 s), the
controller fences the stopped broker after its 6 s session and moves the partitions it led;
acknowledgements resume while it is stopped and, after SIGCONT, it rejoins every ISR. The
two-down test asks the survivor directly (raw Produce, acks=-1: REQUEST_TIMED_OUT at the
request's timeout) and through librdkafka with a short message.timeout.ms: without a
controller quorum the ISR cannot shrink, so nothing is acknowledged; once both are back (written to by an idempotent producer, as the leaders
move back and forth meanwhile) every acknowledged record is read back once.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from cluster_support import CLUSTER_UP_S, FENCED_WITHIN_S, NOT_LEADER_OR_FOLLOWER, all_agree, \
    led_by, metadata, produce_v3, start_cluster
from go_support import build_go_command
from java_support import JavaClient
from support import ADMIN_TIMEOUT_S, ErrorLog, check_all_present, check_records, make_record, \
    rdkafka_base, read_records, seq_of, wait_until

PARTITIONS = 3
MIN_INSYNC = "2"
NODES = {1, 2, 3}
# The Java and franz-go runs: records each client produces and reads back.
CLIENT_RECORDS = 2_000
CLIENT_DEADLINE_S = 180
# The SIGSTOP test: the producer's pace, how long the follower stays stopped, and the
# bounds asserted (generous: the lag bound is 5 s, the session timeout 6 s).
PACE_PER_S = 200
STOPPED_S = 30.0
WARM_UP_ACKS = 400
AFTER_CONT_S = 3.0
ACK_GAP_MAX_S = 20.0
ACKS_LATE_FROM_S = 15.0
# The two-down test: how long librdkafka tries a refused record, and the raw request's
# own timeout at the survivor.
REFUSED_MESSAGE_TIMEOUT_MS = 5_000
RAW_TIMEOUT_MS = 3_000
RAW_ANSWER_MARGIN_S = 5.0
REQUEST_TIMED_OUT = 7


def replicated_topic(make_broker, topic: str):
    """Three brokers and `topic` (PARTITIONS partitions, replication factor 3,
    min.insync.replicas=2), every partition led with all three in sync; returns the
    brokers, their addresses and the topic's partitions as Metadata shows them."""
    brokers = start_cluster(make_broker)
    bootstraps = [b.bootstrap for b in brokers]
    wait_until(lambda: all_agree(bootstraps, 3), "three brokers, one controller", CLUSTER_UP_S)
    admin = AdminClient(rdkafka_base(",".join(bootstraps)))
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3,
                  config={"min.insync.replicas": MIN_INSYNC})],
        operation_timeout=ADMIN_TIMEOUT_S, request_timeout=ADMIN_TIMEOUT_S)
    futures[topic].result(timeout=ADMIN_TIMEOUT_S)
    partitions = wait_until(lambda: led_by(bootstraps, topic, NODES, 3),
                            "the topic led, all three in sync", CLUSTER_UP_S)
    # The brokers create their copy of the topic just after the controller's metadata
    # shows it; its settings are asked until every broker has it.
    for b in bootstraps:
        wait_until(lambda: min_insync_replicas(b, topic) == MIN_INSYNC,
                   f"min.insync.replicas={MIN_INSYNC} at {b}", CLUSTER_UP_S)
    return brokers, bootstraps, partitions


def min_insync_replicas(bootstrap: str, topic: str) -> str | None:
    """The topic's min.insync.replicas as this one broker describes it; None while the
    broker does not know the topic."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = AdminClient(rdkafka_base(bootstrap))
    future = admin.describe_configs([resource], request_timeout=ADMIN_TIMEOUT_S)[resource]
    try:
        return future.result(timeout=ADMIN_TIMEOUT_S)["min.insync.replicas"].value
    except KafkaException as e:
        if e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return None
        raise


# -- 1. Java and franz-go at their defaults --------------------------------------------------

@pytest.fixture
def java(tmp_path) -> JavaClient:
    return JavaClient("lib-4", "classes-4", "AssignedReaderCheck", tmp_path)


@pytest.fixture(scope="session")
def franzcheck(tmp_path_factory) -> Path:
    return build_go_command(tmp_path_factory, "franzcheck")


def check_in_order(bootstrap: str, topic: str, count: int) -> None:
    """Read independently with librdkafka: offsets dense from 0 in every partition, seqs
    rising within each, records 0..count-1 each once, byte for byte."""
    verdict = check_records(list(read_records(bootstrap, topic, PARTITIONS, expected=count)),
                            PARTITIONS)
    check_all_present(verdict, count)
    verdict.assert_ok(f"{topic} read back with librdkafka")


def test_java_producer_and_assigned_consumer_at_rf3(make_broker, java):
    topic = "java-rf3"
    _brokers, bootstraps, _partitions = replicated_topic(make_broker, topic)
    bootstrap = ",".join(bootstraps)

    produced = java.run("ProducerCheck", "--bootstrap", bootstrap, "--topic", topic,
                        "--count", str(CLIENT_RECORDS), timeout_s=CLIENT_DEADLINE_S + 60)
    done = produced[-1]
    assert done["event"] == "done", done
    assert (done["acked"], done["failed"], done["errors"]) == (CLIENT_RECORDS, 0, {}), done
    placements = {seq: (p, o) for seq, p, o in done["placements"]}

    read = java.run("AssignedReaderCheck", "--bootstrap", bootstrap, "--topic", topic,
                    "--deadline-s", str(CLIENT_DEADLINE_S), timeout_s=CLIENT_DEADLINE_S + 60)
    got = read[-1]
    assert got["event"] == "done", got
    assert not got["timed_out"], f"read {got['count']} of {CLIENT_RECORDS} before the deadline"
    assert not got["problems"], got["problems"][:10]
    seqs = sorted(seq for _p, _o, seq in got["records"])
    assert seqs == list(range(CLIENT_RECORDS)), (
        f"read {len(seqs)} records, {len(set(seqs))} distinct, for {CLIENT_RECORDS} acked")
    next_offset = {p: 0 for p in range(PARTITIONS)}
    last_seq = {p: -1 for p in range(PARTITIONS)}
    for p, o, seq in got["records"]:
        assert o == next_offset[p], f"partition {p}: offset {o}, expected {next_offset[p]}"
        assert seq > last_seq[p], f"partition {p} offset {o}: seq {seq} after {last_seq[p]}"
        assert placements[seq] == (p, o), f"seq {seq} read at {(p, o)}, acked at " \
                                          f"{placements[seq]}"
        next_offset[p], last_seq[p] = o + 1, seq
    assert {int(p): o for p, o in got["end_offsets"].items()} == next_offset
    print(f"kafka-clients {java.version}: {CLIENT_RECORDS} records acked in "
          f"{done['elapsed_ms']} ms, read back in {got['elapsed_ms']} ms")


def test_franz_go_producer_and_direct_consumer_at_rf3(make_broker, franzcheck):
    topic = "franz-rf3"
    _brokers, bootstraps, _partitions = replicated_topic(make_broker, topic)
    bootstrap = ",".join(bootstraps)
    result = subprocess.run(
        [str(franzcheck), "-brokers", bootstrap, "-topic", topic, "-from", "0",
         "-count", str(CLIENT_RECORDS), "-timeout", f"{CLIENT_DEADLINE_S}s"],
        capture_output=True, text=True, timeout=CLIENT_DEADLINE_S + 60)
    try:
        summary = json.loads(result.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"franzcheck exited {result.returncode} without a summary\n"
                             f"stderr: {result.stderr[-4000:]}") from None
    assert result.returncode == 0 and summary["error_count"] == 0, (
        f"franzcheck: {summary['errors']}\nfranz-go log:\n{result.stderr[-4000:]}")
    assert summary["produced"] == summary["consumed"] == CLIENT_RECORDS, summary
    assert summary["producer_id"] >= 0, summary  # idempotent, franz-go's default
    ends = {int(p): o for p, o in summary["end_offsets"].items()}
    for p, part in summary["consumed_partitions"].items():
        # Every offset from 0 to the end read once: dense.
        assert (part["first_offset"], part["last_offset"], part["count"]) == \
            (0, ends[int(p)] - 1, ends[int(p)]), (p, part, ends)
    check_in_order(bootstrap, topic, CLIENT_RECORDS)
    print(f"franz-go: {CLIENT_RECORDS} records acked in {summary['seconds']['produce']:.1f} s, "
          f"read back in {summary['seconds']['consume']:.1f} s")


# -- 2. a follower stopped for 30 s ----------------------------------------------------------

class PacedProducer:
    """librdkafka's producer at its defaults (acks=all) sending test records 0, 1, ... to
    one partition at a steady pace from its own thread; notes when each was sent and when
    its delivery report came."""

    def __init__(self, bootstrap: str, topic: str, partition: int, per_s: int):
        self.errors = ErrorLog()
        self.producer = Producer({**rdkafka_base(bootstrap), "error_cb": self.errors})
        self.topic, self.partition, self.interval_s = topic, partition, 1.0 / per_s
        self.sent_at: list[float] = []
        self.acked_at: dict[int, float] = {}
        self.failed: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="paced-producer")
        self._thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            seq = len(self.sent_at)
            due = started + seq * self.interval_s
            now = time.monotonic()
            if due > now:
                self.producer.poll(due - now)
                continue
            r = make_record(seq)
            self.sent_at.append(time.monotonic())
            self.producer.produce(self.topic, key=r.key, value=r.value, headers=r.headers,
                                  partition=self.partition,
                                  on_delivery=lambda err, _m, seq=seq: self._delivered(seq, err))
            self.producer.poll(0)

    def _delivered(self, seq: int, err) -> None:
        if err is None:
            self.acked_at[seq] = time.monotonic()
        else:
            self.failed[seq] = err.name()

    def acks(self) -> int:
        return len(self.acked_at)

    def stop(self, deadline_s: float) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        assert self.producer.flush(deadline_s) == 0, self.errors.summary()


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 \
        else values[0]


def test_a_follower_stopped_for_30_s(make_broker):
    started = time.monotonic()
    topic = "paced"
    brokers, bootstraps, partitions = replicated_topic(make_broker, topic)
    written = 0
    leader = partitions[written]["leader"]
    controller = metadata(bootstraps[0])["controller"]
    # A follower of the written partition; not the controller's leader when there is a
    # choice, so that no election mixes into what is measured.
    followers = [n for n in partitions[written]["replicas"] if n != leader]
    victim = next((n for n in followers if n != controller), followers[0])
    alive = NODES - {victim}

    producer = PacedProducer(",".join(bootstraps), topic, written, PACE_PER_S)
    try:
        wait_until(lambda: producer.acks() >= WARM_UP_ACKS, "the producer's first acks",
                   CLUSTER_UP_S)
        os.kill(brokers[victim - 1].pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            # The others drop it from every ISR and lead what it led.
            wait_until(lambda: led_by(bootstraps, topic, alive, 2),
                       "the stopped broker out of every ISR, its partitions moved",
                       FENCED_WITHIN_S)
            out_after = time.monotonic() - stopped_at
            wait_until(lambda: time.monotonic() - stopped_at >= STOPPED_S,
                       "the stop's duration", STOPPED_S + 5)
        finally:
            os.kill(brokers[victim - 1].pid, signal.SIGCONT)
        continued_at = time.monotonic()
        wait_until(lambda: led_by(bootstraps, topic, NODES, 3),
                   "the stopped broker back in every ISR", CLUSTER_UP_S)
        rejoined = time.monotonic() - continued_at
        wait_until(lambda: time.monotonic() - continued_at >= rejoined + AFTER_CONT_S,
                   "acks after the rejoin", AFTER_CONT_S + 5 + rejoined)
    finally:
        producer.stop(ADMIN_TIMEOUT_S)

    sent = len(producer.sent_at)
    assert producer.failed == {}, f"{len(producer.failed)} delivery errors, e.g. " \
                                  f"{list(producer.failed.items())[:5]}"
    assert producer.acks() == sent

    acked = sorted(producer.acked_at.values())
    during = [stopped_at] + [t for t in acked if stopped_at <= t <= continued_at] + [continued_at]
    stall_s = max(b - a for a, b in zip(during, during[1:]))
    late = sum(1 for t in acked if stopped_at + ACKS_LATE_FROM_S <= t <= continued_at)
    assert stall_s < ACK_GAP_MAX_S, f"no acknowledgement for {stall_s:.1f} s while stopped"
    assert late > 0, f"no acknowledgement between {ACKS_LATE_FROM_S:.0f} s after the stop " \
                     f"and SIGCONT"

    check_in_order(",".join(bootstraps), topic, sent)
    latencies = [producer.acked_at[s] - producer.sent_at[s] for s in range(sent)]
    longest = max(b - a for a, b in zip(acked, acked[1:]))
    print(f"stopped broker {victim} (follower of partition {written}, led by {leader}; "
          f"controller {controller}): out of every ISR {out_after:.1f} s after SIGSTOP, back "
          f"{rejoined:.1f} s after SIGCONT; {sent} records, {late} acked in the last "
          f"{STOPPED_S - ACKS_LATE_FROM_S:.0f} s of the stop; ack latency p50 "
          f"{percentile(latencies, 50) * 1000:.0f} ms, p99 {percentile(latencies, 99) * 1000:.0f}"
          f" ms, max {max(latencies) * 1000:.0f} ms; longest stall between acks "
          f"{longest:.1f} s ({stall_s:.1f} s while stopped); whole test "
          f"{time.monotonic() - started:.1f} s")


# -- 3. two of three down --------------------------------------------------------------------

def produce_batch(bootstrap: str, topic: str, seqs: range,
                  **settings) -> tuple[dict[int, tuple[int, int]], dict[str, int]]:
    """librdkafka's producer (acks=all, its default, plus `settings`) sends test records
    `seqs` over the partitions; returns where each acknowledged seq was put (partition,
    offset) and the failures by error."""
    producer = Producer({**rdkafka_base(bootstrap), "error_cb": ErrorLog(), **settings})
    acked: dict[int, tuple[int, int]] = {}
    failed: dict[str, int] = {}

    def delivered(err, msg) -> None:
        if err is None:
            acked[seq_of(msg.value())] = (msg.partition(), msg.offset())
        else:
            failed[err.name()] = failed.get(err.name(), 0) + 1

    for seq in seqs:
        r = make_record(seq)
        producer.produce(topic, key=r.key, value=r.value, headers=r.headers,
                         partition=seq % PARTITIONS, on_delivery=delivered)
    assert producer.flush(ADMIN_TIMEOUT_S + 60) == 0
    return acked, failed


def test_two_of_three_down_acknowledge_nothing(make_broker):
    started = time.monotonic()
    topic = "two-down"
    brokers, bootstraps, partitions = replicated_topic(make_broker, topic)
    bootstrap = ",".join(bootstraps)
    before, failed = produce_batch(bootstrap, topic, range(0, 300))
    assert (len(before), failed) == (300, {})

    survivor = partitions[0]["leader"]
    for node in NODES - {survivor}:
        brokers[node - 1].kill()
    killed_at = time.monotonic()

    # The partitions the dead brokers led have no leader that could take a write.
    for index, p in partitions.items():
        if p["leader"] != survivor:
            assert produce_v3(bootstraps[survivor - 1], topic, index, acks=-1,
                              timeout_ms=RAW_TIMEOUT_MS) == NOT_LEADER_OR_FOLLOWER
    # The survivor leads partition 0 and still counts the dead brokers in its ISR: only
    # the controller shrinks an ISR, and one voter of three decides nothing. An acks=all
    # write waits for them and is never acknowledged: at the request's timeout it is
    # answered REQUEST_TIMED_OUT, as Kafka answers it.
    raw = produce_v3(bootstraps[survivor - 1], topic, 0, acks=-1,
                     timeout_ms=RAW_TIMEOUT_MS, value=make_record(900).value,
                     answer_within_s=RAW_TIMEOUT_MS / 1000 + RAW_ANSWER_MARGIN_S)
    assert raw == REQUEST_TIMED_OUT, f"the survivor answered {raw} to an acks=all write alone"
    seen = metadata(bootstraps[survivor - 1])["topics"][topic]["partitions"]
    refused, failures = produce_batch(bootstrap, topic, range(1000, 1060),
                                      **{"message.timeout.ms": REFUSED_MESSAGE_TIMEOUT_MS})
    assert refused == {}, f"{len(refused)} records acknowledged with two brokers down"
    assert sum(failures.values()) == 60, failures
    refused_for = time.monotonic() - killed_at

    # Both back: the three agree again, the acknowledged records are all there.
    for node in NODES - {survivor}:
        brokers[node - 1].start()
        bootstraps[node - 1] = brokers[node - 1].bootstrap
    back_from = time.monotonic()
    # Registered again at their new addresses, as every broker shows; then in every ISR.
    wait_until(lambda: all_agree(bootstraps, 3, {topic: PARTITIONS}),
               "the restarted brokers registered again", CLUSTER_UP_S)
    wait_until(lambda: led_by(bootstraps, topic, NODES, 3), "all three back in every ISR",
               CLUSTER_UP_S)
    back = time.monotonic() - back_from
    bootstrap = ",".join(bootstraps)
    # The controller, back to a quorum, first fences the two (moving what they led to the
    # survivor), then unfences them and gives their partitions back: a write in between
    # may be answered NOT_ENOUGH_REPLICAS_AFTER_APPEND or NOT_LEADER_OR_FOLLOWER after it
    # was appended, and a plain producer's retry would then write it twice. The idempotent
    # producer's retry is answered as the first write was, so each record is there once.
    after, failed = produce_batch(bootstrap, topic, range(2000, 2300),
                                  **{"enable.idempotence": True})
    assert (len(after), failed) == (300, {})

    records = list(read_records(bootstrap, topic, PARTITIONS))
    next_offset = {p: 0 for p in range(PARTITIONS)}
    found: dict[int, list[tuple[int, int]]] = {}
    for r in records:
        assert r.offset == next_offset[r.partition], (r.partition, r.offset)
        next_offset[r.partition] = r.offset + 1
        found.setdefault(seq_of(r.value), []).append((r.partition, r.offset))
    acked = before | after
    wrong = sorted((seq, at, found.get(seq, [])) for seq, at in acked.items()
                   if len(found.get(seq, [])) != 1)
    assert not wrong, f"{len(wrong)} acknowledged records not read back once; (seq, acked " \
                      f"at, read at): {wrong[:10]}"
    unacked = sorted(seq for seq in found if seq not in acked)
    print(f"two of three down: a raw acks=-1 produce at the survivor: {raw}; ISR at the "
          f"survivor {[p['isr'] for p in seen.values()]}; librdkafka: {failures}; refused for "
          f"{refused_for:.1f} s; all back in every ISR {back:.1f} s after the restart; "
          f"{len(acked)} acked records read back once, {len(unacked)} unacknowledged ones "
          f"present; whole test {time.monotonic() - started:.1f} s")


# -- 4. a controlled shutdown ----------------------------------------------------------------

def test_a_leader_stopped_with_sigterm_hands_its_partitions_over_before_it_exits(make_broker):
    """SIGTERM to the leader of partition 0: before it exits, the controller has fenced it
    and the two others lead all its partitions. The session timeout (6 s of silence) cannot
    be what moved them: the others are asked the moment the process has exited. Records
    written before and after are all read back, and the broker, restarted, registers
    again and rejoins every ISR."""
    topic = "sigterm"
    brokers, bootstraps, partitions = replicated_topic(make_broker, topic)
    bootstrap = ",".join(bootstraps)
    before, failed = produce_batch(bootstrap, topic, range(0, 300))
    assert (len(before), failed) == (300, {})

    stopped = partitions[0]["leader"]
    others = NODES - {stopped}
    led = sorted(i for i, p in partitions.items() if p["leader"] == stopped)
    brokers[stopped - 1].stop()
    views = [metadata(bootstraps[n - 1]) for n in sorted(others)]
    for n, view in zip(sorted(others), views):
        assert stopped not in view["brokers"], \
            f"node {n} still lists the stopped broker {stopped}: {view['brokers']}"
        for i, p in view["topics"][topic]["partitions"].items():
            assert p["leader"] in others, \
                f"node {n}: partition {i} led by {p['leader']} after {stopped} stopped"
            assert stopped not in p["isr"], f"node {n}: partition {i} ISR {p['isr']}"
    text = brokers[stopped - 1].stderr_path.read_text("utf-8", "replace")
    assert "controlled shutdown: fenced" in text, "the stopped broker logged no handover"

    after, failed = produce_batch(bootstrap, topic, range(300, 600))
    assert (len(after), failed) == (300, {})
    brokers[stopped - 1].start()
    bootstraps[stopped - 1] = brokers[stopped - 1].bootstrap
    wait_until(lambda: led_by(bootstraps, topic, NODES, 3), "all three back in every ISR",
               CLUSTER_UP_S)
    check_in_order(",".join(bootstraps), topic, 600)
    print(f"node {stopped} led partitions {led}; handed over before it exited")
