"""Share groups at ShareFetch and ShareAcknowledge version 2, as the Java 4.x
KafkaShareConsumer uses them: the record-limit acquire mode and lock renewal.

Goal: a share consumer set to `share.acquire.mode=record_limit` (which needs version 2)
receives every record of a topic, never more than `max.poll.records` in one poll; a
consumer in explicit acknowledgement mode that holds records longer than the lock
duration but renews them (AcknowledgeType.RENEW) keeps them, so another consumer of the
group never gets them and the holder's final accept succeeds, while one that does not
renew loses them to the other consumer and its late accept is refused.
Method: one broker per test with `--share-auto-offset-reset earliest`, and a 3 s lock
for the renewal tests; consumers are tests/java/share/ShareConsumerCheck.java (compiled
against kafka-clients 4.x by test_share_groups.py's fixture), one JSON line per record,
per poll, per renewal and per acknowledgement; records come from confluent-kafka. Every
wait polls for its condition with a deadline.
"""

from __future__ import annotations

from confluent_kafka import Producer

from support import create_topic, rdkafka_base
from test_share_groups import (  # noqa: F401 (fixtures)
    DEADLINE_S, LOCK_ARGS, SHARE_ARGS, close, consumer, java, produce, records,
    share_classes, wait_records)


def events(proc, kind: str) -> list[dict]:
    with proc._cond:
        return [e for e in proc.events if e.get("event") == kind]


def test_record_limit_mode_gets_every_record_at_most_max_poll_records_a_poll(
        make_broker, java):
    broker = make_broker(*SHARE_ARGS)
    topic, partitions, total, max_poll = "limited", 2, 200, 7
    create_topic(broker.bootstrap, topic, partitions)
    # Large batches: a batch-optimized broker may hand out whole batches.
    producer = Producer({**rdkafka_base(broker.bootstrap), "linger.ms": 50})
    for i in range(total):
        producer.produce(topic, value=f"r{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0, "records not delivered"
    proc = consumer(java, broker.bootstrap, topic, "limited",
                    "--set", "share.acquire.mode=record_limit",
                    "--set", f"max.poll.records={max_poll}")
    try:
        got = wait_records(proc, lambda rs: len({r["value"] for r in rs}) >= total,
                           "every record")
    finally:
        close(proc)
    assert sorted({r["value"] for r in got}) == sorted(f"r{i}" for i in range(total))
    polls = [e["records"] for e in events(proc, "polled")]
    assert polls and max(polls) <= max_poll, polls
    assert sum(polls) == len(got)
    assert all(r["delivery"] == 1 for r in got), [r for r in got if r["delivery"] != 1]
    assert not events(proc, "error"), events(proc, "error")


def hold_beside_another(make_broker, java, renew: bool):
    """A holder takes five records and holds them 9 s (the lock is 3 s), renewing every
    second if `renew`, while a second consumer of the group polls (it got a record
    produced after it started, before the holder let go); returns both and the offsets
    held."""
    broker = make_broker(*SHARE_ARGS, *LOCK_ARGS)
    topic, group = "renewed", "g"
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [f"v{i}" for i in range(5)], partition=0)
    holder = consumer(java, broker.bootstrap, topic, group, "--hold-ms", "9000",
                      "--renew-every-ms", "1000" if renew else "0")
    holder.wait_event(lambda e: e.get("event") == "holding", DEADLINE_S, "holding")
    held = {r["offset"] for r in records(holder)}
    assert held == set(range(5)), records(holder)
    other = consumer(java, broker.bootstrap, topic, group)
    # Markers, of which the other consumer gets some (the holder may get some too).
    produce(broker.bootstrap, topic, [f"marker-{i}" for i in range(10)], partition=0)
    wait_records(other, lambda rs: any(r["value"].startswith("marker") for r in rs),
                 "a marker")
    assert not events(holder, "accepted"), "the other consumer was not polling during the hold"
    holder.wait_event(lambda e: e.get("event") == "accepted", DEADLINE_S, "accepted")
    return holder, other, held


def test_a_consumer_that_renews_its_locks_keeps_its_records(make_broker, java):
    holder, other, held = hold_beside_another(make_broker, java, renew=True)
    try:
        renewals = events(holder, "renewed")
        # A renewal about every second (each waits for its poll to hand the records
        # back), over a hold of three lock durations.
        assert len(renewals) >= 3 and all(e["back"] == len(held) for e in renewals), renewals
        [accepted] = events(holder, "accepted")
        assert accepted["held_ms"] >= 9000, accepted
        # The accept made after 9 s succeeded: the records were still the holder's,
        # so the other consumer, polling all along, never got them.
        acked = events(holder, "acknowledged")
        assert acked and all(e["error"] is None for e in acked), acked
        assert sum(e["records"] for e in acked) >= len(held), acked
        assert not [r for r in records(other) if r["offset"] in held], records(other)
    finally:
        close(holder)
        close(other)


def test_a_consumer_that_does_not_renew_loses_its_records(make_broker, java):
    holder, other, held = hold_beside_another(make_broker, java, renew=False)
    try:
        got = wait_records(other, lambda rs: {r["offset"] for r in rs} >= held,
                           f"offsets {sorted(held)} the holder let expire")
        assert all(r["delivery"] == 2 for r in got if r["offset"] in held), got
        assert not events(holder, "renewed")
        acked = events(holder, "acknowledged")
        assert acked and all(e["error"] is not None for e in acked), acked
    finally:
        close(holder)
        close(other)
