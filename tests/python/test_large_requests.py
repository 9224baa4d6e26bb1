"""Produce requests larger than 64 KiB from real clients: transactional, idempotent and
plain, compressed and not.

Goal: the broker handles a produce request over 64 KiB on one of its read threads rather
than on the connection's task (`crates/broker/src/read_pool.rs`); what a produce needs
there must work as it does on the task: a transactional produce's check with the
transaction coordinator, the idempotent producer's sequence checks, compressed batches.
Each client here runs with the batching settings that make its requests large, and
everything it wrote is read back and compared byte for byte: nothing lost, duplicated or
changed, the records of aborted transactions invisible to read_committed readers (and in
the log for read_uncommitted ones); without transactions, every partition's offsets run
on densely from 0.

- librdkafka (confluent-kafka), linger.ms=50 and batch.size=1000000: four transactions of
  300 records of 1 KiB, the third aborted, 900 records read back read_committed.
- kcat -P -X linger.ms=100 -X batch.size=1000000: 4,000 records of 1,000 bytes.
- kafka-clients 3.9 and 4.x, batch.size=1048576 and linger.ms=50, 12 partitions:
  transactions committed and aborted (tests/java/src/SizedProducerCheck.java).
- franz-go at its defaults (snappy, 1 MB batches, idempotent): transactions committed and
  aborted, every record of a transaction handed to the client before it flushes
  (tests/go/cmd/franzsized).
- The matrix: each client (librdkafka, kafka-clients 3.9 and 4.x, franz-go) with those
  batch settings, as an idempotent, a transactional (one transaction of three aborted)
  and a plain (enable.idempotence=false, acks=all) producer, uncompressed and compressed
  (librdkafka lz4, kafka-clients and franz-go zstd): 3,000 records of 1,000 bytes over 6
  partitions. The whole module runs in about a minute on two cores.

franz-go's transaction after an aborted one may wait 5 s: its first produce can arrive
while the abort's markers are still being written, and the broker answers
NOT_ENOUGH_REPLICAS, as Kafka does (`crates/server/src/handlers/produce.rs`), on which
franz-go refreshes its metadata, at most once per 5 s (its metadata min age).

Method: one broker per test, with /metrics. After the producer finished, and before any
fetch, the broker's read threads have run only large produces: their job count
(`read_queue_wait_seconds_count`, minus `reads_pooled`, which fetches count) must be
above zero, so the requests really were over 64 KiB. The records are the suite's sized
test records (support.sized_record, half of each value pseudo-random so that compression
leaves the batches large), read back with librdkafka and checked with check_sized. Every
test ends by checking the broker is running and logged no panic.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer

from go_support import build_go_command
from java_support import JavaClient
from support import (FLUSH_TIMEOUT_S, Consumed, Delivery, create_topic, rdkafka_base,
                     read_records, seq_of, sized_record)
from test_kcat import describe, kcat

JAVA_CLIENTS = {"3.9": ("lib-3.9", "classes-3.9"), "4": ("lib-4", "classes-4")}
METRICS_ARGS = ("--metrics-listen", "127.0.0.1:0")
FRANZ_TIMEOUT_S = 180.0

# The large-batch settings of each client.
RDKAFKA_BATCHING = {"linger.ms": 50, "batch.size": 1_000_000}
JAVA_BATCHING = ("--set", "batch.size=1048576", "--set", "linger.ms=50")

# The matrix: records, their size, partitions; transactional cells abort transaction 1
# of three.
MATRIX_COUNT = 3_000
MATRIX_VALUE_BYTES = 1_000
MATRIX_PARTITIONS = 6
MATRIX_PER_TXN = 1_000
MATRIX_ABORTED = (1,)
CODECS = {"librdkafka": "lz4", "java": "zstd", "franz-go": "zstd"}
MODES = ("idempotent", "transactional", "plain")


# -- the broker ------------------------------------------------------------------------------

def scrape(broker) -> dict[str, float]:
    """The broker's /metrics, each family summed over its labels."""
    url = f"http://{broker.metrics_address()}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, value = line.rsplit(" ", 1)
        name = name.split("{", 1)[0]
        values[name] = values.get(name, 0.0) + float(value)
    return values


def large_produces(broker) -> int:
    """Jobs the read threads ran that were not fetch reads: before any fetch, the produce
    requests over 64 KiB."""
    m = scrape(broker)
    return int(m.get("headway_read_queue_wait_seconds_count", 0)
               - m.get("headway_reads_pooled_total", 0))


def assert_large(broker, what: str) -> int:
    count = large_produces(broker)
    print(f"{what}: {count} produce requests over 64 KiB")
    assert count > 0, (f"{what}: no produce request over 64 KiB reached the broker; the "
                       f"test no longer tests large requests")
    return count


def assert_no_panic(broker) -> None:
    """The broker runs and logged no panic (its panic hook logs "thread '...' panicked
    at ..." for every one, caught or not)."""
    broker.check_alive()
    log = broker.stderr_path.read_text("utf-8", "replace")
    lines = [line for line in log.splitlines() if "panicked" in line]
    assert not lines, "the broker panicked:\n" + "\n".join(lines[:20])


# -- reading back ----------------------------------------------------------------------------

def read_back(bootstrap: str, topic: str, partitions: int, expected: int,
              isolation: str = "read_committed") -> list[Consumed]:
    records = list(read_records(bootstrap, topic, partitions, expected=expected,
                                settings={"isolation.level": isolation}))
    assert len(records) == expected, (
        f"{isolation} read {len(records)} records of {topic}, expected {expected}")
    return records


def check_sized(records: list[Consumed], value_bytes: int, expected: set[int],
                partitions: int, value_of=None, dense: bool = False) -> None:
    """Each record of `expected` read exactly once, equal byte for byte to the sized test
    record (or, with value_of, to that value and no headers); in each partition, offsets
    and sequence numbers rise (a producer's records in its order), and with `dense` the
    offsets run on from 0 without a gap (a log without transaction markers); every
    partition got some."""
    problems: list[str] = []
    seen: dict[int, tuple[int, int]] = {}
    last: dict[int, tuple[int, int]] = {}
    for r in records:
        where = f"partition {r.partition} offset {r.offset}"
        try:
            seq = seq_of(r.value)
        except ValueError as e:
            problems.append(f"{where}: {e}")
            continue
        if seq in seen:
            problems.append(f"{where}: seq {seq} again (first at {seen[seq]})")
        seen.setdefault(seq, (r.partition, r.offset))
        if seq not in expected:
            problems.append(f"{where}: seq {seq} was not to be read (aborted or never sent)")
        if value_of is None:
            want = sized_record(seq, value_bytes)
            if (r.key, r.value, r.headers) != (want.key, want.value, want.headers):
                problems.append(f"{where}: seq {seq} differs from what was sent: key "
                                f"{r.key!r}, {len(r.value)} value bytes, headers {r.headers}")
        elif (r.key, r.value) != (b"key-%08d" % seq, value_of(seq)):
            problems.append(f"{where}: seq {seq} differs from what was sent")
        prev = last.get(r.partition)
        if prev is not None and (r.offset <= prev[0] or seq <= prev[1]):
            problems.append(f"{where}: seq {seq} after offset {prev[0]} seq {prev[1]}")
        if dense and r.offset != (prev[0] + 1 if prev is not None else 0):
            problems.append(f"{where}: not right after offset {prev and prev[0]}")
        last[r.partition] = (r.offset, seq)
    missing = sorted(expected - set(seen))
    if missing:
        problems.append(f"{len(missing)} records missing, first {missing[:10]}")
    if len(last) != partitions:
        problems.append(f"records in partitions {sorted(last)} of {partitions}")
    assert not problems, f"{len(problems)} problems:\n  " + "\n  ".join(problems[:30])


def committed_seqs(count: int, per_txn: int, aborted: tuple[int, ...]) -> set[int]:
    return {seq for seq in range(count) if seq // per_txn not in aborted}


def check_transactional(broker, topic: str, partitions: int, count: int, value_bytes: int,
                        per_txn: int, aborted: tuple[int, ...]) -> None:
    """read_committed readers see the committed transactions' records; read_uncommitted
    ones see every record, the aborted ones too (they reached the log)."""
    visible = committed_seqs(count, per_txn, aborted)
    check_sized(read_back(broker.bootstrap, topic, partitions, len(visible)), value_bytes,
                visible, partitions)
    everything = read_back(broker.bootstrap, topic, partitions, count, "read_uncommitted")
    check_sized(everything, value_bytes, set(range(count)), partitions)


# -- librdkafka ------------------------------------------------------------------------------

def rdkafka_produce(bootstrap: str, topic: str, count: int, value_bytes: int, config: dict,
                    per_txn: int | None = None, aborted: tuple[int, ...] = ()) -> None:
    """Sends sized records 0..count-1 with a librdkafka producer with `config`; with
    per_txn (config has a transactional.id), in transactions of that many records, those
    whose index is in `aborted` flushed and then aborted. Fails unless every record was
    acknowledged."""
    delivery = Delivery()
    producer = Producer({**rdkafka_base(bootstrap), **config})
    transactional = per_txn is not None
    if transactional:
        producer.init_transactions(60)
    per_txn = per_txn or count
    for index, first in enumerate(range(0, count, per_txn)):
        if transactional:
            producer.begin_transaction()
        for seq in range(first, min(count, first + per_txn)):
            r = sized_record(seq, value_bytes)
            while True:
                try:
                    producer.produce(topic, key=r.key, value=r.value, headers=r.headers,
                                     on_delivery=delivery.callback)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        if not transactional:
            continue
        if index in aborted:
            # The records reach the log first, so readers have something to skip.
            assert producer.flush(FLUSH_TIMEOUT_S) == 0
            producer.abort_transaction(60)
        else:
            producer.commit_transaction(60)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0, "records left undelivered"
    assert not delivery.failed, f"failed deliveries: {list(delivery.failed.items())[:5]}"
    assert len(delivery.acked) == count, f"{len(delivery.acked)} of {count} acknowledged"


def test_librdkafka_transactions_of_large_requests(make_broker):
    broker = make_broker(*METRICS_ARGS)
    topic, partitions, per_txn, value_bytes = "rdkafka-txn", 3, 300, 1024
    create_topic(broker.bootstrap, topic, partitions)
    rdkafka_produce(broker.bootstrap, topic, 4 * per_txn, value_bytes,
                    {**RDKAFKA_BATCHING, "transactional.id": "rdkafka-large"},
                    per_txn=per_txn, aborted=(2,))
    assert_large(broker, "librdkafka transactions")
    visible = committed_seqs(4 * per_txn, per_txn, (2,))
    assert len(visible) == 900
    check_transactional(broker, topic, partitions, 4 * per_txn, value_bytes, per_txn, (2,))
    assert_no_panic(broker)


def kcat_value(seq: int) -> bytes:
    """1,000 bytes a line can carry: the seq prefix, then the hex of a sized value's
    filler."""
    return (b"seq=%010d;" % seq + sized_record(seq, 1000).value[15:].hex().encode())[:1000]


def test_kcat_large_batches(make_broker):
    broker = make_broker(*METRICS_ARGS)
    topic, partitions, count = "kcat-large", 4, 4_000
    create_topic(broker.bootstrap, topic, partitions)
    lines = b"".join(b"key-%08d:%s\n" % (seq, kcat_value(seq)) for seq in range(count))
    proc = kcat("-b", broker.bootstrap, "-P", "-t", topic, "-K", ":", "-X", "acks=all",
                "-X", "linger.ms=100", "-X", "batch.size=1000000", stdin=lines)
    assert proc.returncode == 0, describe(proc)
    assert_large(broker, "kcat")
    records = read_back(broker.bootstrap, topic, partitions, count)
    check_sized(records, 1000, set(range(count)), partitions, value_of=kcat_value, dense=True)
    assert_no_panic(broker)


# -- kafka-clients ---------------------------------------------------------------------------

@pytest.fixture(params=sorted(JAVA_CLIENTS), ids=lambda k: f"kafka-clients-{k}")
def java(request, tmp_path) -> JavaClient:
    lib, classes = JAVA_CLIENTS[request.param]
    return JavaClient(lib, classes, "SizedProducerCheck", tmp_path)


def java_produce(java: JavaClient, bootstrap: str, topic: str, count: int, value_bytes: int,
                 *settings: str, transactional_id: str | None = None,
                 per_txn: int | None = None, aborted: tuple[int, ...] = ()) -> dict:
    args = ["--bootstrap", bootstrap, "--topic", topic, "--count", str(count),
            "--value-bytes", str(value_bytes), *settings]
    if transactional_id is not None:
        args += ["--transactional-id", transactional_id, "--per-transaction", str(per_txn),
                 "--abort", ",".join(map(str, aborted))]
    events = java.run("SizedProducerCheck", *args)
    done = events[-1] if events else {}
    assert done.get("event") == "done", f"kafka-clients {java.version}: {events[-1:]}"
    assert done["acked"] == count and not done["failed"], done
    return done


def test_java_transactions_of_large_requests(make_broker, java):
    broker = make_broker(*METRICS_ARGS)
    topic, partitions, count, per_txn, aborted = "java-txn", 12, 4_800, 1_200, (2,)
    create_topic(broker.bootstrap, topic, partitions)
    done = java_produce(java, broker.bootstrap, topic, count, 1024, *JAVA_BATCHING,
                        transactional_id="java-large", per_txn=per_txn, aborted=aborted)
    assert (done["committed"], done["aborted"]) == (3, 1), done
    assert_large(broker, f"kafka-clients {java.version} transactions")
    check_transactional(broker, topic, partitions, count, 1024, per_txn, aborted)
    assert_no_panic(broker)


# -- franz-go --------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def franzsized(tmp_path_factory) -> Path:
    """tests/go/cmd/franzsized, built once per session."""
    return build_go_command(tmp_path_factory, "franzsized")


def franz_produce(binary: Path, bootstrap: str, topic: str, count: int, value_bytes: int,
                  *flags: str, txn_id: str | None = None, per_txn: int | None = None,
                  aborted: tuple[int, ...] = ()) -> dict:
    args = [str(binary), "-brokers", bootstrap, "-topic", topic, "-count", str(count),
            "-value-bytes", str(value_bytes), "-timeout", f"{FRANZ_TIMEOUT_S:.0f}s", *flags]
    if txn_id is not None:
        args += ["-txn-id", txn_id, "-per-txn", str(per_txn),
                 "-abort", ",".join(map(str, aborted))]
    result = subprocess.run(args, capture_output=True, text=True, timeout=FRANZ_TIMEOUT_S + 60)
    try:
        summary = json.loads(result.stdout)
    except json.JSONDecodeError:
        summary = None
    assert result.returncode == 0 and summary is not None, (
        f"franzsized exited {result.returncode}: {result.stdout[-2000:]}\n"
        f"franz-go log:\n{result.stderr[-4000:]}")
    return summary


def test_franz_go_transactions_of_large_requests(make_broker, franzsized):
    broker = make_broker(*METRICS_ARGS)
    topic, partitions, count, per_txn, aborted = "franz-txn", 6, 6_000, 2_000, (1,)
    create_topic(broker.bootstrap, topic, partitions)
    summary = franz_produce(franzsized, broker.bootstrap, topic, count, 1024,
                            txn_id="franz-large", per_txn=per_txn, aborted=aborted)
    assert (summary["committed"], summary["aborted"]) == (2, 1), summary
    assert_large(broker, "franz-go transactions")
    check_transactional(broker, topic, partitions, count, 1024, per_txn, aborted)
    assert_no_panic(broker)


# -- the matrix ------------------------------------------------------------------------------

MATRIX_CLIENTS = ["librdkafka", "kafka-clients-3.9", "kafka-clients-4", "franz-go"]


@pytest.mark.parametrize("compressed", [False, True], ids=["uncompressed", "compressed"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("client", MATRIX_CLIENTS)
def test_large_request_matrix(make_broker, request, tmp_path, client, mode, compressed):
    broker = make_broker(*METRICS_ARGS)
    topic = "matrix"
    count, value_bytes, per_txn = MATRIX_COUNT, MATRIX_VALUE_BYTES, MATRIX_PER_TXN
    create_topic(broker.bootstrap, topic, MATRIX_PARTITIONS)
    kind = "franz-go" if client == "franz-go" else (
        "librdkafka" if client == "librdkafka" else "java")
    codec = CODECS[kind] if compressed else "none"
    transactional = mode == "transactional"
    txn = {"per_txn": per_txn, "aborted": MATRIX_ABORTED} if transactional else {}

    if kind == "librdkafka":
        config = {**RDKAFKA_BATCHING, "compression.type": codec, "acks": "all"}
        if mode == "transactional":
            config["transactional.id"] = "matrix"
        else:
            config["enable.idempotence"] = mode == "idempotent"
        rdkafka_produce(broker.bootstrap, topic, count, value_bytes, config, **txn)
    elif kind == "java":
        lib, classes = JAVA_CLIENTS[client.removeprefix("kafka-clients-")]
        java = JavaClient(lib, classes, "SizedProducerCheck", tmp_path)
        settings = [*JAVA_BATCHING, "--set", f"compression.type={codec}", "--set", "acks=all"]
        if mode != "transactional":
            settings += ["--set", f"enable.idempotence={str(mode == 'idempotent').lower()}"]
        java_produce(java, broker.bootstrap, topic, count, value_bytes, *settings,
                     transactional_id="matrix" if transactional else None, **txn)
    else:
        flags = ["-compression", codec] + (["-plain"] if mode == "plain" else [])
        franz_produce(request.getfixturevalue("franzsized"), broker.bootstrap, topic, count,
                      value_bytes, *flags, txn_id="matrix" if transactional else None, **txn)

    assert_large(broker, f"{client} {mode} {codec}")
    if transactional:
        check_transactional(broker, topic, MATRIX_PARTITIONS, count, value_bytes, per_txn,
                            MATRIX_ABORTED)
    else:
        records = read_back(broker.bootstrap, topic, MATRIX_PARTITIONS, count)
        check_sized(records, value_bytes, set(range(count)), MATRIX_PARTITIONS, dense=True)
    assert_no_panic(broker)
