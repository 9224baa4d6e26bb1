"""Three headway processes as one cluster, replicating: what a producer was told is
written survives the loss of the broker that led it.

What runs: a topic at replication factor 3 takes records from librdkafka's producer at
its defaults (acks=all); the leader of a partition is killed with SIGKILL; the others
elect new leaders from the in-sync replicas and every acknowledged record is read back
from the two that remain, byte for byte. Records produced while a broker is down are
acknowledged by the two in-sync replicas; the killed broker, restarted, copies what it
missed (a follower's catch-up), rejoins every ISR, and once the first new leader is killed
too, the records are read back from it and the other survivor.
"""

from __future__ import annotations

import time

from confluent_kafka import Producer

from cluster_support import CLUSTER_UP_S, FENCED_WITHIN_S, cluster_with_topic, led_by
from support import ADMIN_TIMEOUT_S, ErrorLog, rdkafka_base, read_records, wait_until

TOPIC = "replicated"
PARTITIONS = 3


def produce(bootstrap: str, first: int, count: int) -> None:
    """`count` records numbered from `first`, spread over the partitions, each
    acknowledged (acks=all, librdkafka's default)."""
    errors = ErrorLog()
    producer = Producer({**rdkafka_base(bootstrap), "error_cb": errors})
    failed: list[str] = []

    def delivered(err, _msg):
        if err is not None:
            failed.append(str(err))

    for seq in range(first, first + count):
        producer.produce(TOPIC, key=str(seq).encode(), value=f"v{seq}".encode(),
                         partition=seq % PARTITIONS, on_delivery=delivered)
    assert producer.flush(ADMIN_TIMEOUT_S) == 0, errors.summary()
    assert failed == [], failed


def values_from(bootstrap: str, expected: int) -> list[bytes]:
    return sorted(r.value for r in read_records(bootstrap, TOPIC, PARTITIONS,
                                                expected=expected))


def expected_values(count: int) -> list[bytes]:
    return sorted(f"v{seq}".encode() for seq in range(count))


def test_acknowledged_records_survive_the_leaders_sigkill(make_broker):
    started = time.monotonic()
    brokers, bootstraps, partitions = cluster_with_topic(make_broker, TOPIC, PARTITIONS)

    first_batch = 300
    produce(",".join(bootstraps), 0, first_batch)

    # The leader of partition 0 dies; every acknowledged record is on the other two.
    victim = partitions[0]["leader"]
    brokers[victim - 1].kill()
    killed = time.monotonic()
    alive = {1, 2, 3} - {victim}
    survivors = [bootstraps[n - 1] for n in sorted(alive)]
    wait_until(lambda: led_by(bootstraps, TOPIC, alive, 2),
               "new leaders among the survivors, ISR 2", FENCED_WITHIN_S)
    failover = time.monotonic() - killed
    assert values_from(",".join(survivors), first_batch) == expected_values(first_batch)

    # Two in-sync replicas acknowledge what comes while the third is down.
    second_batch = 200
    produce(",".join(survivors), first_batch, second_batch)
    total = first_batch + second_batch

    # Back, the killed broker copies what it missed and rejoins every ISR.
    brokers[victim - 1].start()
    bootstraps[victim - 1] = brokers[victim - 1].bootstrap
    rejoined_from = time.monotonic()
    partitions = wait_until(lambda: led_by(bootstraps, TOPIC, {1, 2, 3}, 3),
                            "the restarted broker back in every ISR", CLUSTER_UP_S)
    rejoined = time.monotonic() - rejoined_from

    # The first new leader dies too: the restarted broker holds everything.
    second_victim = partitions[0]["leader"]
    brokers[second_victim - 1].kill()
    alive = {1, 2, 3} - {second_victim}
    survivors = [bootstraps[n - 1] for n in sorted(alive)]
    wait_until(lambda: led_by(bootstraps, TOPIC, alive, 2), "leaders among the last two",
               FENCED_WITHIN_S)
    assert values_from(",".join(survivors), total) == expected_values(total)
    print(f"new leaders {failover:.1f} s after the SIGKILL; the restarted broker back in "
          f"every ISR after {rejoined:.1f} s; whole test {time.monotonic() - started:.1f} s")
