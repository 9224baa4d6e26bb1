"""The `headway` CLI's consumer against three brokers: `headway consume -e` reads every
record and exits, however the partitions' leaders fall.

Goal: the consumer runs one fetcher per partition leader and splits its credit window
between them; no fetcher may starve another. A consumer whose window let two fetchers
take it all left the third waiting for credit that an empty long poll handed back and took
again at once: if the third leader held records, none of them were printed; if it led an
empty partition, that partition's high watermark stayed unknown and `-e` never ended.
Which fetcher starved depended on the order of a hash map, so a run hung now and then.
Once none starved, a run now and then ended early, without one leader's records: a
fetch answer moved its partitions' positions before its records were buffered, and
`-e` took the consumer for caught up in between.
Method: three brokers (`start_cluster`), a topic of 6 partitions at replication factor 3
whose leaders are spread over the three, 1,000 records from librdkafka's producer on 5 of
the partitions (the 6th stays empty, so `-e` must learn an empty partition's high
watermark from its leader too). `headway consume --from-beginning -e` reads the topic 10
times; each run must exit with status 0 within its deadline, having printed every record
once, at dense offsets from 0 in each partition.
"""

from __future__ import annotations

import os
import subprocess
import time

from confluent_kafka import Producer

from cluster_support import cluster_with_topic
from conftest import HEADWAY_BIN
from support import ADMIN_TIMEOUT_S, ErrorLog, rdkafka_base

TOPIC = "cli-three-leaders"
PARTITIONS = 6
FILLED_PARTITIONS = 5
RECORDS = 1_000
RUNS = 10
# One run reads 1,000 small records; well under a second when it works. The margin is
# for a loaded machine, and a hang ends the test at the first run that hits it.
CONSUME_DEADLINE_S = 20.0


def client_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("HEADWAY_")}


def produce(bootstrap: str) -> dict[int, int]:
    """RECORDS records over the first FILLED_PARTITIONS partitions, each acknowledged;
    returns the count per partition."""
    errors = ErrorLog()
    producer = Producer({**rdkafka_base(bootstrap), "error_cb": errors})
    failed: list[str] = []

    def delivered(err, _msg):
        if err is not None:
            failed.append(str(err))

    counts: dict[int, int] = {}
    for seq in range(RECORDS):
        partition = seq % FILLED_PARTITIONS
        counts[partition] = counts.get(partition, 0) + 1
        producer.produce(TOPIC, value=f"v{seq}".encode(), partition=partition,
                         on_delivery=delivered)
    assert producer.flush(ADMIN_TIMEOUT_S) == 0, errors.summary()
    assert failed == [], failed
    return counts


def consume(bootstrap: str, run: int) -> list[tuple[int, int, str]]:
    """(partition, offset, value) of every record `headway consume -e` printed."""
    try:
        proc = subprocess.run(
            [str(HEADWAY_BIN), "consume", TOPIC, "-b", bootstrap, "--from-beginning", "-e",
             "-q", "-f", "{partition} {offset} {value}"],
            capture_output=True, timeout=CONSUME_DEADLINE_S, env=client_env())
    except subprocess.TimeoutExpired as e:
        printed = len((e.stdout or b"").splitlines())
        raise AssertionError(f"run {run}: `headway consume -e` still running after "
                             f"{CONSUME_DEADLINE_S} s, {printed} of {RECORDS} records "
                             f"printed") from None
    assert proc.returncode == 0, f"run {run}: {proc.stderr.decode()}"
    rows = []
    for line in proc.stdout.decode().splitlines():
        partition, offset, value = line.split(" ", 2)
        rows.append((int(partition), int(offset), value))
    return rows


def test_consume_to_the_end_reads_every_record_from_three_leaders(make_broker):
    brokers, bootstraps, partitions = cluster_with_topic(make_broker, TOPIC, PARTITIONS)
    leaders = {p["leader"] for p in partitions.values()}
    # The controller spreads the leaders; three fetchers is the case under test.
    assert leaders == {1, 2, 3}, partitions
    counts = produce(",".join(bootstraps))

    expected = sorted((p, offset) for p, n in counts.items() for offset in range(n))
    values = sorted(f"v{seq}" for seq in range(RECORDS))
    took = []
    for run in range(RUNS):
        started = time.monotonic()
        rows = consume(",".join(bootstraps), run)
        took.append(time.monotonic() - started)
        assert sorted((p, o) for p, o, _ in rows) == expected, f"run {run}"
        assert sorted(v for _, _, v in rows) == values, f"run {run}"
    print(f"\n{RUNS} runs of `headway consume -e` over {len(leaders)} leaders: "
          f"{min(took):.2f} to {max(took):.2f} s each")
