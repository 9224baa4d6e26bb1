"""ACLs on share groups, with the Java KafkaShareConsumer and Admin client.

Goal: ShareGroupHeartbeat needs Read on the group, DeleteShareGroupOffsets Delete on it,
DescribeConfigs and IncrementalAlterConfigs of its GROUP config resource DescribeConfigs
and AlterConfigs on it, as Kafka checks them: a principal without them is refused with
the authorization error and nothing changes; with them each works.
Method: the broker has an SSL listener whose client-certificate user is a super user (it
creates the topic and the ACLs, with librdkafka) and a PLAINTEXT listener whose clients
act as User:ANONYMOUS, given ACLs one by one; the Java programs of
tests/java/share (compiled as test_share_groups.py does) connect there. Every wait has a
deadline.
"""

from __future__ import annotations

from confluent_kafka import Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from java_support import JavaClient
from test_acl import Certificates, acl_broker, client, wait_all
from test_share_groups import (DEADLINE_S, MAIN, SHARE_ARGS, admin, close, consumer,
                               share_classes, start_offsets, wait_records)  # noqa: F401
from test_tls import listener_address

ANONYMOUS = "User:ANONYMOUS"


def allow(kind, name: str, operation) -> AclBinding:
    return AclBinding(kind, name, ResourcePatternType.LITERAL, ANONYMOUS, "*", operation,
                      AclPermissionType.ALLOW)


def test_share_groups_need_read_to_consume_and_delete_to_delete_offsets(make_broker, tmp_path,
                                                                       share_classes):
    java = JavaClient("lib-4", str(share_classes), MAIN, tmp_path)
    certs = Certificates(tmp_path)
    broker = acl_broker(make_broker, certs, *SHARE_ARGS,
                        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0")
    plain = listener_address(broker, "PLAINTEXT")
    ssl = listener_address(broker, "SSL")
    super_admin = AdminClient(client(ssl, certs, "admin"))
    topic, group = "s", "sg"
    wait_all(super_admin.create_topics([NewTopic(topic, 1, 1)]))
    producer = Producer(client(ssl, certs, "admin"))
    for i in range(10):
        producer.produce(topic, value=b"v%d" % i, partition=0)
    assert producer.flush(DEADLINE_S) == 0
    # Read on the topic, Describe on the group (FindCoordinator), no Read on the group.
    wait_all(super_admin.create_acls([allow(ResourceType.TOPIC, topic, AclOperation.READ),
                                      allow(ResourceType.GROUP, group, AclOperation.DESCRIBE)]))

    proc = consumer(java, plain, topic, group)
    try:
        refused = proc.wait_event(lambda e: e.get("event") == "error", DEADLINE_S,
                                  "the share consumer's error")
        assert "GroupAuthorizationException" in refused["error"], refused
    finally:
        proc.kill()
    # The refused member made no group.
    listed = admin(java, plain, group, "list-offsets")
    assert listed[-1].get("error") == "GroupIdNotFoundException", listed

    wait_all(super_admin.create_acls([allow(ResourceType.GROUP, group, AclOperation.READ)]))
    proc = consumer(java, plain, topic, group)
    try:
        wait_records(proc, lambda rs: {r["offset"] for r in rs} >= set(range(10)), "ten records")
    finally:
        close(proc)
    # The group has state for the partition (its start offset: 10 once the close's
    # acknowledgements are in, 0 before).
    before = start_offsets(java, plain, group)
    assert set(before) == {(topic, 0)}, before

    # Deleting the group's offsets needs Delete on the group.
    refused = admin(java, plain, group, "delete", "--topic", topic)
    assert refused[-1]["event"] == "error", refused
    assert refused[-1]["error"] == "GroupAuthorizationException", refused
    assert set(start_offsets(java, plain, group)) == {(topic, 0)}
    wait_all(super_admin.create_acls([allow(ResourceType.GROUP, group, AclOperation.DELETE)]))
    assert admin(java, plain, group, "delete", "--topic", topic) == [{"event": "deleted"}]
    assert start_offsets(java, plain, group) == {}


def test_group_configs_need_describe_configs_and_alter_configs_on_the_group(
        make_broker, tmp_path, share_classes):
    """DescribeConfigs of a GROUP resource needs DescribeConfigs on the group, and
    IncrementalAlterConfigs AlterConfigs on it, as Kafka checks them; a refused change
    leaves the group's settings as they were."""
    java = JavaClient("lib-4", str(share_classes), MAIN, tmp_path)
    certs = Certificates(tmp_path)
    broker = acl_broker(make_broker, certs,
                        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0")
    plain = listener_address(broker, "PLAINTEXT")
    ssl = listener_address(broker, "SSL")
    super_admin = AdminClient(client(ssl, certs, "admin"))
    group = "configured"
    set_earliest = ("set-config", "--key", "share.auto.offset.reset", "--value", "earliest")

    for op in [("describe-config",), set_earliest]:
        refused = admin(java, plain, group, *op)
        assert [e.get("error") for e in refused] == ["GroupAuthorizationException"], (op, refused)

    wait_all(super_admin.create_acls(
        [allow(ResourceType.GROUP, group, AclOperation.DESCRIBE_CONFIGS)]))
    refused = admin(java, plain, group, *set_earliest)
    assert [e.get("error") for e in refused] == ["GroupAuthorizationException"], refused
    shown = {e["name"]: e["value"] for e in admin(java, plain, group, "describe-config")}
    assert shown["share.auto.offset.reset"] == "latest", shown
    # Another group's settings stay closed.
    other = admin(java, plain, "other", "describe-config")
    assert [e.get("error") for e in other] == ["GroupAuthorizationException"], other

    wait_all(super_admin.create_acls(
        [allow(ResourceType.GROUP, group, AclOperation.ALTER_CONFIGS)]))
    assert admin(java, plain, group, *set_earliest) == [{"event": "altered"}]
    shown = {e["name"]: e["value"] for e in admin(java, plain, group, "describe-config")}
    assert shown["share.auto.offset.reset"] == "earliest", shown
