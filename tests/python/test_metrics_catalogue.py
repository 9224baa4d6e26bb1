"""/metrics against its catalogue, the "At a glance" table of docs/metrics.md.

Goal: every family a broker serves is in the catalogue, every family in the catalogue is
served once the broker has done the work it describes, and the file the catalogue names
for a family (its component's probe) exists and names the family.
Method: a broker with metrics on an ephemeral port, bulk send threads (whose families
exist only with them) and a cleaner that looks every 200 ms. A 2-partition topic and a
compacted topic get records from a librdkafka producer; a group consumer reads the first
and commits; a transactional producer holds a transaction open during the scrape. The
families served are the `# TYPE` lines of that scrape (an empty family has none); the
few that need work this test does not do (an ACL authorizer, a finished cleaning pass,
a share group) may be missing and nothing else.
"""

from __future__ import annotations

import re
import time
import urllib.request

from confluent_kafka import Consumer, Producer

from conftest import REPO_ROOT
from support import create_topic, rdkafka_base, wait_until

CATALOGUE = REPO_ROOT / "docs" / "metrics.md"
TOPIC = "catalogued"
COMPACTED = "catalogued-compacted"
RECORDS = 200
DEADLINE_S = 60.0

# Families served only after work this test does not do.
CONDITIONAL = {
    "authorization_denials",  # an ACL authorizer (test_acl.py)
    "cleaner_last_pass_timestamp_seconds",  # a cleaning pass that ended
} | {  # a remote tier (test_tiered_storage.py)
    f"remote_{what}"
    for what in ("uploaded_segments", "uploaded_bytes", "upload_failures", "deleted_segments",
                 "orphans_deleted", "local_deleted_segments", "fetches", "fetch_bytes",
                 "fetch_failures", "upload_lag_bytes", "segments", "bytes")
} | {  # a share group (test_share_groups.py)
    f"share_group_{what}"
    for what in ("members", "in_flight_records", "acquired_records", "redelivered_records",
                 "archived_records", "delivered_records", "acknowledged_records",
                 "released_records", "rejected_records")
}

TYPE_RE = re.compile(r"^# TYPE headway_(\w+) (\w+)$", re.MULTILINE)
NAME_RE = re.compile(r"`([a-z_]+)`")
PATH_RE = re.compile(r"`([\w/.]+\.rs)`")


def catalogue() -> dict[str, str]:
    """Family (without `_total`) -> the file that defines it, from the table."""
    text = CATALOGUE.read_text()
    table = text[text.index("| family | labels | what | defined in |"):]
    table = table[:table.index("\n\n")]
    families: dict[str, str] = {}
    for row in table.splitlines()[2:]:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        assert len(cells) == 4, row
        [path] = PATH_RE.findall(cells[3]) or [None]
        assert path, f"no file in {row}"
        for name in NAME_RE.findall(cells[0]):
            name = re.sub(r"_total$", "", name)
            assert name not in families, f"{name} twice in the catalogue"
            families[name] = path
    return families


def served(address: str) -> set[str]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        return set(m.group(1) for m in TYPE_RE.finditer(response.read().decode()))


def make_traffic(bootstrap: str) -> None:
    create_topic(bootstrap, TOPIC, 2)
    create_topic(bootstrap, COMPACTED, 1, **{"cleanup.policy": "compact"})
    producer = Producer(rdkafka_base(bootstrap) | {"acks": "all"})
    for i in range(RECORDS):
        producer.produce(TOPIC, key=str(i % 7), value=f"v{i}")
        producer.produce(COMPACTED, key=str(i % 7), value=f"v{i}")
    assert producer.flush(DEADLINE_S) == 0
    consumer = Consumer(rdkafka_base(bootstrap) | {
        "group.id": "catalogued", "auto.offset.reset": "earliest",
        "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    got, deadline = 0, time.monotonic() + DEADLINE_S
    while got < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and not message.error():
            got += 1
    assert got == RECORDS, got
    consumer.commit(asynchronous=False)
    consumer.close()


def test_every_family_served_is_catalogued_with_the_probe_that_defines_it(make_broker):
    broker = make_broker("--metrics-listen", "127.0.0.1:0", "--bulk-send-threads", "1",
                         "--log-cleaner-backoff-ms", "200")
    make_traffic(broker.bootstrap)
    txn = Producer(rdkafka_base(broker.bootstrap) | {"transactional.id": "catalogued-txn"})
    txn.init_transactions(DEADLINE_S)
    txn.begin_transaction()
    txn.produce(TOPIC, value=b"open")
    assert txn.flush(DEADLINE_S) == 0

    families = catalogue()
    address = broker.metrics_address()
    seen: list[set[str]] = []

    def all_served() -> bool:
        seen.append(served(address))
        return not (set(families) - seen[-1] - CONDITIONAL)

    try:
        wait_until(all_served, "every unconditional family served", DEADLINE_S)
    except AssertionError:
        missing = sorted(set(families) - seen[-1] - CONDITIONAL)
        raise AssertionError(f"catalogued families not served: {missing}") from None
    txn.commit_transaction(DEADLINE_S)

    uncatalogued = sorted(seen[-1] - set(families))
    assert not uncatalogued, f"served families missing from {CATALOGUE.name}: {uncatalogued}"
    for name, path in families.items():
        source = REPO_ROOT / path
        assert source.is_file(), f"{name}: {path} does not exist"
        # A budget's families are named by the budget (`<budget>_exhausted`).
        stem = re.sub(r"_(exhausted|wait_seconds)$", "", name)
        assert stem in source.read_text(), f"{name}: {path} does not name it"
