"""Per-group settings: Kafka's GROUP config resource (type 32), from real admin clients.

Goal: the Java Admin client's incrementalAlterConfigs on a GROUP resource sets
`share.auto.offset.reset=earliest` on one share group, whose share consumer then reads
a topic's records produced before it started, while a share group on the broker's
default (latest) gets only records produced after it joined; describeConfigs shows the
broker's values as DEFAULT_CONFIG and the group's as DYNAMIC_GROUP_CONFIG (the wire's GROUP_CONFIG, 8); the setting survives
a broker restart and still applies; unknown names and values outside the broker's
bounds are refused with INVALID_CONFIG; kafka-python's admin (DescribeConfigs and the
older AlterConfigs) and `headway group config` see and set the same settings.
Method: brokers on the default `share.auto.offset.reset` (latest); the Java programs of
test_share_groups.py (tests/java/share/ShareAdminCheck.java and ShareConsumerCheck.java,
kafka-clients 4.x). The latest group is shown a trickle of marker records until it
receives one, so no wait depends on when its partition started. Every wait polls for
its condition with a deadline.
"""

from __future__ import annotations

import time

import json
import subprocess

from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from group_support import HEADWAY_BIN, headway_cli
from support import create_topic
from test_share_groups import (  # noqa: F401 (fixtures)
    DEADLINE_S, admin, close, consumer, java, produce, records, share_classes,
    wait_records)


def described(java, bootstrap: str, group: str) -> dict[str, tuple[str, str]]:
    events = admin(java, bootstrap, group, "describe-config")
    assert events and all(e["event"] == "config" for e in events), events
    return {e["name"]: (e["value"], e["source"]) for e in events}


def test_one_share_group_starts_at_earliest_while_the_broker_default_stays_latest(
        make_broker, java):
    broker = make_broker()
    topic = "backlog"
    create_topic(broker.bootstrap, topic, 1)
    backlog = [f"old{i}" for i in range(10)]
    produce(broker.bootstrap, topic, backlog, partition=0)

    before = described(java, broker.bootstrap, "etl")
    assert before["share.auto.offset.reset"] == ("latest", "DEFAULT_CONFIG"), before
    assert before["share.record.lock.duration.ms"] == ("30000", "DEFAULT_CONFIG"), before
    assert "consumer.session.timeout.ms" in before, before
    assert admin(java, broker.bootstrap, "etl", "set-config", "--key",
                 "share.auto.offset.reset", "--value", "earliest") == [{"event": "altered"}]
    after = described(java, broker.bootstrap, "etl")
    assert after["share.auto.offset.reset"] == ("earliest", "DYNAMIC_GROUP_CONFIG"), after
    assert after["share.record.lock.duration.ms"] == ("30000", "DEFAULT_CONFIG"), after
    other = described(java, broker.bootstrap, "live")
    assert other["share.auto.offset.reset"] == ("latest", "DEFAULT_CONFIG"), other

    etl = consumer(java, broker.bootstrap, topic, "etl")
    try:
        got = wait_records(etl, lambda rs: {r["value"] for r in rs} >= set(backlog),
                           "the backlog in the earliest group")
    finally:
        close(etl)
    assert {r["value"] for r in got} == set(backlog)

    live = consumer(java, broker.bootstrap, topic, "live")
    markers: list[str] = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not records(live):
            assert time.monotonic() < deadline, "the latest group never got a new record"
            markers.append(f"new{len(markers)}")
            produce(broker.bootstrap, topic, [markers[-1]], partition=0)
            time.sleep(0.2)
    finally:
        close(live)
    seen = {r["value"] for r in records(live)}
    assert seen and seen <= set(markers), f"the latest group read the backlog: {seen}"

    # Durable, and applied again after a restart: the earliest group starts a new topic
    # at its beginning.
    broker.restart()
    again = described(java, broker.bootstrap, "etl")
    assert again["share.auto.offset.reset"] == ("earliest", "DYNAMIC_GROUP_CONFIG"), again
    create_topic(broker.bootstrap, "second", 1)
    produce(broker.bootstrap, "second", ["s0", "s1", "s2"], partition=0)
    etl = consumer(java, broker.bootstrap, "second", "etl")
    try:
        got = wait_records(etl, lambda rs: {r["value"] for r in rs} >= {"s0", "s1", "s2"},
                           "a new topic's records after the restart")
    finally:
        close(etl)

    # Deleting the setting goes back to the broker's value.
    assert admin(java, broker.bootstrap, "etl", "delete-config", "--key",
                 "share.auto.offset.reset") == [{"event": "altered"}]
    deleted = described(java, broker.bootstrap, "etl")
    assert deleted["share.auto.offset.reset"] == ("latest", "DEFAULT_CONFIG"), deleted


def test_unknown_names_and_values_outside_the_bounds_are_invalid_config(make_broker, java):
    broker = make_broker()
    for key, value in [("share.auto.offset.resett", "earliest"),
                       ("share.auto.offset.reset", "sometime"),
                       ("share.record.lock.duration.ms", "1000"),
                       ("share.record.lock.duration.ms", "600000"),
                       ("consumer.session.timeout.ms", "1000"),
                       ("retention.ms", "1000")]:
        events = admin(java, broker.bootstrap, "g", "set-config", "--key", key, "--value", value)
        assert [e.get("error") for e in events] == ["InvalidConfigurationException"], (
            key, value, events)
    # A value within the bounds is taken, and nothing refused was kept.
    assert admin(java, broker.bootstrap, "g", "set-config", "--key",
                 "share.record.lock.duration.ms", "--value", "20000") == [{"event": "altered"}]
    configs = described(java, broker.bootstrap, "g")
    assert configs["share.record.lock.duration.ms"] == ("20000", "DYNAMIC_GROUP_CONFIG"), configs
    assert configs["share.auto.offset.reset"] == ("latest", "DEFAULT_CONFIG"), configs
    assert configs["consumer.session.timeout.ms"] == ("45000", "DEFAULT_CONFIG"), configs


def test_kafka_python_describes_and_sets_group_configs(make_broker, java):
    """kafka-python's IncrementalAlterConfigs and older AlterConfigs (which replaces the
    group's whole set) on a GROUP resource, and its DescribeConfigs."""
    broker = make_broker()
    group = ConfigResourceType.GROUP
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert client.alter_configs([ConfigResource(
            group, "py", configs={"share.session.timeout.ms": "50000"})]) == {
                "group": {"py": "OK"}}
        refused = client.alter_configs(
            [ConfigResource(group, "py", configs={"bogus": "1"})], raise_on_unknown=False)
        assert "InvalidConfigurationError" in refused["group"]["py"], refused
        assert client.alter_configs([ConfigResource(
            group, "py", configs={"share.heartbeat.interval.ms": "6000"})],
            incremental=False) == {"group": {"py": "OK"}}
        modified = client.describe_configs([ConfigResource(group, "py")])["group"]["py"]
        every = client.describe_configs([ConfigResource(group, "py")],
                                        config_filter="all")["group"]["py"]
    finally:
        client.close()
    # kafka-python's AlterConfigs sends the group's other set keys along (the request
    # replaces the whole set), so both are kept.
    assert {k: (v["value"], v["config_source"]) for k, v in modified.items()} == {
        "share.heartbeat.interval.ms": ("6000", "DYNAMIC_GROUP_CONFIG"),
        "share.session.timeout.ms": ("50000", "DYNAMIC_GROUP_CONFIG")}, modified
    assert every["share.auto.offset.reset"]["value"] == "latest", every
    assert every["share.record.lock.duration.ms"]["config_source"] == "DEFAULT_CONFIG", every
    configs = described(java, broker.bootstrap, "py")
    assert configs["share.heartbeat.interval.ms"] == ("6000", "DYNAMIC_GROUP_CONFIG"), configs


def test_headway_group_config_shows_sets_and_deletes(make_broker, java):
    broker = make_broker()
    b = ("-b", broker.bootstrap)
    table = headway_cli("group", "config", "jobs", *b)
    lines = table.splitlines()
    assert lines[0].split() == ["NAME", "VALUE", "SOURCE"], table
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert rows["share.auto.offset.reset"] == ["latest", "DEFAULT_CONFIG"], table

    shown = json.loads(headway_cli("group", "config", "jobs", *b, "--format", "json",
                                   "--set", "share.auto.offset.reset=earliest",
                                   "--set", "consumer.heartbeat.interval.ms=6000"))
    assert shown["group"] == "jobs", shown
    configs = {c["name"]: (c["value"], c["source"]) for c in shown["configs"]}
    assert configs["share.auto.offset.reset"] == ("earliest", "GROUP_CONFIG"), configs
    assert configs["consumer.heartbeat.interval.ms"] == ("6000", "GROUP_CONFIG"), configs
    java_view = described(java, broker.bootstrap, "jobs")
    assert java_view["share.auto.offset.reset"] == ("earliest", "DYNAMIC_GROUP_CONFIG")

    shown = json.loads(headway_cli("group", "config", "jobs", *b, "--format", "json",
                                   "--delete", "consumer.heartbeat.interval.ms"))
    configs = {c["name"]: (c["value"], c["source"]) for c in shown["configs"]}
    assert configs["consumer.heartbeat.interval.ms"] == ("5000", "DEFAULT_CONFIG"), configs
    assert configs["share.auto.offset.reset"] == ("earliest", "GROUP_CONFIG"), configs

    refused = subprocess.run([str(HEADWAY_BIN), "group", "config", "jobs", *b,
                              "--set", "share.record.lock.duration.ms=1"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1, refused
    assert "INVALID_CONFIG" in refused.stderr, refused.stderr
