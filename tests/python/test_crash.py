"""Crash safety: what headway acknowledged with acks=all survives a SIGKILL.

Goal: headway answers acks=all only after fsync, so no acknowledged record may be lost
when the process dies, recovery must cut any torn tail cleanly (dense offsets, no corrupt
batch served), and the recovered log must accept new appends that survive the next crash.
Method: four rounds on one data directory. In each, a librdkafka producer thread sends test
records as fast as it can, recording every successful delivery report; once some thousands
are acknowledged the broker is SIGKILLed mid-stream, the producer purges what is left, and
the broker restarts on the same data directory. Finally every partition is read from the
beginning with CRC checks on: offsets must be dense from 0, every record must decode to a
well-formed test record, and every acknowledged record must sit at the partition and
offset its delivery report gave. Records that were sent but not acknowledged may or may
not be there.
"""

from __future__ import annotations

import time

from support import (BackgroundProducer, Delivery, check_records, consume_all, create_topic,
                     make_record, wait_for_topic)

PARTITIONS = 4
ROUNDS = 4
# Each round kills at a different point: some thousands of acknowledged records in.
ACKS_BEFORE_KILL = [5_000, 2_000, 7_000, 3_500]
# Each round numbers its records from a different base, so rounds never share a seq.
ROUND_SEQ_BASE = 10_000_000
ACK_DEADLINE_S = 120.0


def crash_round(broker, topic: str, round_index: int) -> Delivery:
    producer = BackgroundProducer(broker.bootstrap, topic, round_index * ROUND_SEQ_BASE)
    producer.start()
    deadline = time.monotonic() + ACK_DEADLINE_S
    while producer.acked_count() < ACKS_BEFORE_KILL[round_index]:
        broker.check_alive()
        if producer.error is not None or time.monotonic() > deadline:
            producer.stop()
            raise AssertionError(
                f"round {round_index}: only {producer.acked_count()} acks within "
                f"{ACK_DEADLINE_S:.0f} s; failures: {list(producer.delivery.failed.items())[:5]}")
        time.sleep(0.002)  # kill soon after the threshold, while requests are in flight
    broker.kill()
    producer.stop()
    d = producer.delivery
    print(f"round {round_index}: sent {producer.sent}, acked {len(d.acked)}, "
          f"unacknowledged {producer.sent - len(d.acked)}")
    # Failures before the kill would mean the broker rejected writes while it was healthy.
    healthy_failures = {s: e for s, e in d.failed.items()
                        if "PURGE" not in e and "TRANSPORT" not in e
                        and "TIMED_OUT" not in e and "ALL_BROKERS_DOWN" not in e}
    assert not healthy_failures, f"round {round_index}: deliveries failed before the crash: " \
                                 f"{list(healthy_failures.items())[:5]}"
    return d


def test_acked_records_survive_sigkill(broker):
    topic = "crash-safety"
    create_topic(broker.bootstrap, topic, PARTITIONS)

    acked: dict[int, tuple[int, int]] = {}
    for round_index in range(ROUNDS):
        delivery = crash_round(broker, topic, round_index)
        acked.update(delivery.acked)
        broker.start()  # same data directory, new port
        # The topic must come back as it was created, before anything could auto-create it.
        wait_for_topic(broker.bootstrap, topic, PARTITIONS)

    records = consume_all(broker.bootstrap, topic, PARTITIONS)
    verdict = check_records(records, PARTITIONS)
    found = {(r.partition, r.offset): r.value for r in records}
    missing = []
    for seq, (partition, offset) in sorted(acked.items()):
        value = found.get((partition, offset))
        if value != make_record(seq).value:
            missing.append(f"seq {seq} acked at partition {partition} offset {offset}, read "
                           f"{value[:24] if value else 'nothing'!r}")
    if missing:
        verdict.problems.append(f"{len(missing)} of {len(acked)} acknowledged records lost "
                                f"or changed:")
        verdict.problems.extend(missing)
    print(f"read {len(records)} records; {len(acked)} were acknowledged")
    verdict.assert_ok(f"after {ROUNDS} SIGKILLs and restarts")
