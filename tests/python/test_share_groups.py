"""Share groups (queues for Kafka) as the Java KafkaShareConsumer runs them.

Goal: share consumers at client defaults on a 4-partition topic all receive work, more
of them than partitions; records a consumer acquired and never acknowledged (it was
SIGKILLed) go to another consumer once their lock expires, with their delivery count
up; a record released the delivery limit times (5) is archived and never delivered
again; acknowledged and archived records stay so through a broker crash.
Method: one broker per test, started with `--share-auto-offset-reset earliest` (so that
records produced before a consumer's first fetch are the group's, whatever the order)
and, where locks must expire, `--share-record-lock-duration-ms 3000`. The consumers are
threads of tests/java/share/ShareConsumerCheck.java (compiled here against the 4.x
client, the first with a share consumer), printing one JSON line per record; records
come from confluent-kafka. Every wait polls for its condition with a deadline.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer

from group_support import headway_cli
from java_support import JAVA_DIR, JavaClient
from support import create_topic, rdkafka_base, wait_until

SHARE_ARGS = ("--share-auto-offset-reset", "earliest")
LOCK_ARGS = ("--share-record-lock-duration-ms", "3000")
DEADLINE_S = 90.0
MAIN = "ShareConsumerCheck"
ADMIN = "ShareAdminCheck"


@pytest.fixture(scope="module")
def share_classes(tmp_path_factory) -> Path:
    """The share consumer program compiled against kafka-clients 4.x."""
    lib = JAVA_DIR / "lib-4"
    if not list(lib.glob("kafka-clients-*.jar")):
        pytest.fail(f"kafka-clients 4.x not set up in {lib}: run scripts/setup", pytrace=False)
    out = tmp_path_factory.mktemp("share-classes")
    sources = [JAVA_DIR / "share" / f"{MAIN}.java", JAVA_DIR / "share" / f"{ADMIN}.java",
               JAVA_DIR / "src" / "Json.java",
               JAVA_DIR / "src" / "Args.java"]
    subprocess.run(["javac", "-nowarn", "--release", "17", "-encoding", "UTF-8", "-d", str(out),
                    "-cp", f"{lib}/*", *map(str, sources)], check=True, timeout=300)
    return out


@pytest.fixture
def java(share_classes, tmp_path) -> JavaClient:
    return JavaClient("lib-4", str(share_classes), MAIN, tmp_path)


def produce(bootstrap: str, topic: str, values: list[str], partition: int | None = None,
            partitions: int = 1) -> None:
    producer = Producer(rdkafka_base(bootstrap))
    for i, v in enumerate(values):
        p = partition if partition is not None else i % partitions
        producer.produce(topic, value=v.encode(), partition=p)
    assert producer.flush(30) == 0, "records not delivered"


def records(proc) -> list[dict]:
    with proc._cond:
        return [e for e in proc.events if e.get("event") == "record"]


def wait_records(proc, predicate, what: str, deadline_s: float = DEADLINE_S) -> list[dict]:
    """Waits until the records so far satisfy `predicate`; returns them."""
    proc.wait_event(lambda e: predicate(records(proc)), deadline_s, what)
    return records(proc)


def consumer(java: JavaClient, bootstrap: str, topic: str, group: str, *extra: str):
    proc = java.start(MAIN, "--bootstrap", bootstrap, "--topic", topic, "--group", group,
                      *extra, stdin=True)
    proc.wait_event(lambda e: e.get("event") == "started", DEADLINE_S, "start")
    return proc


def share_metric(broker, name: str, group: str) -> float:
    """The value of `headway_<name>{group=...}` on the broker's /metrics."""
    url = f"http://{broker.metrics_address()}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    found = re.search(rf'^headway_{name}{{group="{group}"}} (\S+)$', text, re.MULTILINE)
    assert found, f"no headway_{name} for group {group}"
    return float(found.group(1))


def close(proc) -> None:
    proc.close_stdin()
    proc.wait_event(lambda e: e.get("event") == "closed", DEADLINE_S, "close")
    proc.kill()


def test_fifty_share_consumers_on_four_partitions_all_get_work(make_broker, java):
    broker = make_broker(*SHARE_ARGS)
    topic, consumers, partitions = "work", 50, 4
    create_topic(broker.bootstrap, topic, partitions)
    proc = consumer(java, broker.bootstrap, topic, "workers", "--consumers", str(consumers))
    produced: list[str] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        # A trickle of records, so that waiting consumers take turns, until every
        # consumer got some.
        while len({r["consumer"] for r in records(proc)}) < consumers:
            assert time.monotonic() < deadline, (
                f"consumers with work: {sorted({r['consumer'] for r in records(proc)})}")
            batch = [f"r{len(produced) + i}" for i in range(partitions)]
            produce(broker.bootstrap, topic, batch, partitions=partitions)
            produced.extend(batch)
            time.sleep(0.05)
        got = wait_records(proc, lambda rs: {r["value"] for r in rs} >= set(produced),
                           "every record")
        assert {r["value"] for r in got} == set(produced)
        # Accepted records are not delivered twice (locks last 30 s, longer than this).
        assert all(r["delivery"] == 1 for r in got), [r for r in got if r["delivery"] != 1]
    finally:
        close(proc)


def test_a_killed_consumers_records_go_to_another_after_the_lock_expires(make_broker, java):
    broker = make_broker(*SHARE_ARGS, *LOCK_ARGS)
    topic = "locks"
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [f"v{i}" for i in range(20)], partition=0)
    holder = consumer(java, broker.bootstrap, topic, "g", "--hold", "true")
    held = wait_records(holder, lambda rs: len(rs) > 0, "records to hold")
    holder.wait_event(lambda e: e.get("event") == "holding", DEADLINE_S, "holding")
    held = {r["offset"] for r in records(holder)}
    holder.kill()  # SIGKILL: no acknowledgement, no leave, its locks stay until they expire
    other = consumer(java, broker.bootstrap, topic, "g")
    try:
        got = wait_records(other, lambda rs: {r["offset"] for r in rs} >= held,
                           f"offsets {sorted(held)} held by the killed consumer")
        redelivered = [r for r in got if r["offset"] in held]
        assert all(r["delivery"] >= 2 for r in redelivered), redelivered
        assert {r["offset"] for r in got} == set(range(20))
    finally:
        close(other)


def test_a_record_released_the_delivery_limit_times_is_archived_through_a_crash(
        make_broker, java):
    broker = make_broker(*SHARE_ARGS, "--metrics-listen", "127.0.0.1:0")
    topic = "poison"
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, ["poison-1", "good-1"], partition=0)
    proc = consumer(java, broker.bootstrap, topic, "g", "--release-prefix", "poison")
    try:
        got = wait_records(proc, lambda rs: any(r["value"] == "good-1" for r in rs)
                           and any(r["value"] == "poison-1" and r["delivery"] == 5 for r in rs),
                           "poison-1 delivered 5 times, and good-1")
        # A later record comes after the archived one: were it still available, the
        # fetch that acquires good-2 would hand it out too.
        produce(broker.bootstrap, topic, ["good-2"], partition=0)
        got = wait_records(proc, lambda rs: any(r["value"] == "good-2" for r in rs), "good-2")
        poison = [r["delivery"] for r in got if r["value"] == "poison-1"]
        assert poison == [1, 2, 3, 4, 5]
        assert share_metric(broker, "share_group_archived_records", "g") == 1
        assert share_metric(broker, "share_group_redelivered_records", "g") == 4
    finally:
        close(proc)
    broker.kill()
    broker.start()
    produce(broker.bootstrap, topic, ["good-3"], partition=0)
    proc = consumer(java, broker.bootstrap, topic, "g")
    try:
        got = wait_records(proc, lambda rs: any(r["value"] == "good-3" for r in rs), "good-3")
        assert [r["value"] for r in got] == ["good-3"]
    finally:
        close(proc)


def admin(java: JavaClient, bootstrap: str, group: str, op: str, *extra: str) -> list[dict]:
    """One Java Admin call (tests/java/share/ShareAdminCheck.java); its JSON lines."""
    return java.run(ADMIN, "--bootstrap", bootstrap, "--group", group, "--op", op, *extra)


def start_offsets(java: JavaClient, bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    events = admin(java, bootstrap, group, "list-offsets")
    assert all(e["event"] == "offset" for e in events), events
    return {(e["topic"], e["partition"]): e["start"] for e in events}


def test_admin_lists_alters_and_deletes_share_group_offsets(make_broker, java):
    """The Java Admin client's listShareGroupOffsets, alterShareGroupOffsets and
    deleteShareGroupOffsets, describeShareGroups and listGroups for share groups: an
    alter while the group has a member is refused (NON_EMPTY_GROUP); after the member
    left, an alter to offset 4 makes the next consumer start at 4; after a delete the
    group starts over where share.auto.offset.reset says."""
    broker = make_broker(*SHARE_ARGS)
    topic, group = "offsets", "g"
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [f"v{i}" for i in range(10)], partition=0)
    proc = consumer(java, broker.bootstrap, topic, group)
    try:
        wait_records(proc, lambda rs: {r["offset"] for r in rs} >= set(range(10)), "ten records")
        refused = admin(java, broker.bootstrap, group, "alter", "--topic", topic,
                        "--partition", "0", "--offset", "4")
        assert refused[-1]["event"] == "error", refused
        assert refused[-1]["error"] == "GroupNotEmptyException", refused
        [described] = admin(java, broker.bootstrap, group, "describe")
        assert described["state"] == "Stable", described
        assert [m["assigned"] for m in described["members"]] == [[f"{topic}-0"]], described
        listed = admin(java, broker.bootstrap, group, "list-groups")
        assert {"event": "listed", "group": group, "type": "Share"} in listed, listed
    finally:
        close(proc)
    # Every record was accepted (implicitly, by the polls and the commit before closing).
    wait_until(lambda: start_offsets(java, broker.bootstrap, group) == {(topic, 0): 10},
             "the start offset at 10")
    altered = admin(java, broker.bootstrap, group, "alter", "--topic", topic,
                    "--partition", "0", "--offset", "4")
    assert altered == [{"event": "altered"}], altered
    # Six records from the start offset to the log end wait (DescribeShareGroupOffsets
    # v1's lag).
    offsets = admin(java, broker.bootstrap, group, "list-offsets")
    assert [(e["topic"], e["partition"], e["start"], e["lag"]) for e in offsets] == [
        (topic, 0, 4, 6)], offsets
    proc = consumer(java, broker.bootstrap, topic, group)
    try:
        got = wait_records(proc, lambda rs: {r["offset"] for r in rs} >= set(range(4, 10)),
                           "offsets 4 to 9 again")
        assert sorted(r["offset"] for r in got) == list(range(4, 10))
        assert all(r["delivery"] == 1 for r in got), got
    finally:
        close(proc)
    assert admin(java, broker.bootstrap, group, "delete", "--topic", topic) == [
        {"event": "deleted"}]
    assert start_offsets(java, broker.bootstrap, group) == {}
    proc = consumer(java, broker.bootstrap, topic, group)
    try:
        got = wait_records(proc, lambda rs: {r["offset"] for r in rs} >= set(range(10)),
                           "every record again, from earliest")
        assert sorted(r["offset"] for r in got) == list(range(10))
    finally:
        close(proc)


def share_describe(bootstrap: str, group: str) -> dict:
    """`headway group describe GROUP --format json` of a share group."""
    return json.loads(headway_cli("group", "describe", group, "-b", bootstrap,
                                  "--format", "json"))


def test_group_describe_and_metrics_show_share_group_records(make_broker, java):
    """`headway group describe` of a share group shows its member, and per
    share-partition the records in flight and acquired: a consumer holding the twenty
    records it got holds all twenty. /metrics counts the records another group's
    consumer got and accepted (implicitly: at its next poll, or at the commit it makes
    before closing; the Java client accepts nothing at close itself)."""
    broker = make_broker(*SHARE_ARGS, "--metrics-listen", "127.0.0.1:0")
    topic = "shown"
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [f"v{i}" for i in range(20)], partition=0)
    holder = consumer(java, broker.bootstrap, topic, "held", "--hold", "true")
    try:
        holder.wait_event(lambda e: e.get("event") == "holding", DEADLINE_S, "holding")
        held = len(records(holder))
        assert held > 0
        d = share_describe(broker.bootstrap, "held")
        assert d["state"] == "Stable", d
        assert [(m["client_id"], m["assignment"]) for m in d["members"]] == [
            ("share-0", [[topic, [0]]])], d
        [p] = d["partitions"]
        assert (p["topic"], p["partition"], p["start_offset"]) == (topic, 0, 0), p
        assert p["stats"] == {"in_flight": held, "acquired": held, "archived": 0,
                              "redelivered": 0}, p
        text = headway_cli("group", "describe", "held", "-b", broker.bootstrap)
        assert text.startswith("share group held: Stable, group epoch"), text
    finally:
        holder.kill()
    proc = consumer(java, broker.bootstrap, topic, "counted")
    try:
        wait_records(proc, lambda rs: len(rs) >= 20, "twenty records")
    finally:
        close(proc)
    got = len(records(proc))
    assert got == 20, records(proc)
    # What the client was told of its acknowledgements (the callback's lines), shown if
    # the broker's count never gets there.
    with proc._cond:
        told = [e for e in proc.events if e.get("event") in ("acknowledged", "error")]
    seen: list[float] = []

    def counted() -> bool:
        seen.append(share_metric(broker, "share_group_acknowledged_records", "counted"))
        return seen[-1] == got

    try:
        wait_until(counted, "every record consumed counted as acknowledged")
    except AssertionError as e:
        raise AssertionError(f"{e}; last count {seen[-1] if seen else None}, "
                             f"the client's acknowledgements: {told}") from None
    assert share_metric(broker, "share_group_delivered_records", "counted") == got
    assert share_metric(broker, "share_group_released_records", "counted") == 0
    assert share_metric(broker, "share_group_rejected_records", "counted") == 0
