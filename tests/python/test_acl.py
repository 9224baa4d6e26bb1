"""ACLs with real clients over an SSL listener with client certificates.

Goal: with the authorizer on, a principal gets exactly what the ACLs give it, as Kafka's
authorizer decides: alice, allowed Read on topic `a` and group `g`, consumes `a` in `g`,
gets TOPIC_AUTHORIZATION_FAILED on `b` and on a produce to `a` (nothing appended), and
does not see `b` in Metadata; the super user manages the ACLs over the wire (CreateAcls,
DescribeAcls, DeleteAcls), a deletion takes effect on the next request, and ACLs survive a
restart.
Method: trustme makes a CA and client certificates for the admin and alice; the broker
requires client certificates and names each connection `User:` + the certificate's
subject (RFC 2253, as Kafka's default principal builder); the admin is a super user.
librdkafka (confluent-kafka) at its defaults plus the TLS settings. Every wait has a
deadline.
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                   AclPermissionType, AdminClient, AlterConfigOpType,
                                   ConfigEntry, ConfigResource, NewPartitions,
                                   OffsetSpec, ResourcePatternType, ResourceType)
from confluent_kafka import IsolationLevel
from cryptography import x509

from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from support import Delivery, produce_records, rdkafka_base
from test_tls import listener_address

RECORDS = 500
DEADLINE_S = 30.0


class Certificates:
    """A CA, the broker's certificate, and a client certificate per user, as PEM files."""

    def __init__(self, directory: Path):
        import trustme
        self.dir = directory
        self.ca = trustme.CA()
        self.ca_file = self._write("ca.pem", self.ca.cert_pem.bytes())
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        self.server_cert = self._write("server.pem",
                                       b"".join(c.bytes() for c in server.cert_chain_pems))
        self.server_key = self._write("server.key", server.private_key_pem.bytes())
        self.principals: dict[str, str] = {}
        self.files: dict[str, tuple[str, str]] = {}
        for user in ("admin", "alice"):
            leaf = self.ca.issue_cert(f"{user}@example.com", common_name=user)
            cert = self._write(f"{user}.pem", b"".join(c.bytes() for c in leaf.cert_chain_pems))
            key = self._write(f"{user}.key", leaf.private_key_pem.bytes())
            self.files[user] = (cert, key)
            subject = x509.load_pem_x509_certificate(leaf.cert_chain_pems[0].bytes()).subject
            # RFC 4514 (RFC 2253's successor) orders and writes the name as Java does.
            self.principals[user] = "User:" + subject.rfc4514_string()

    def _write(self, name: str, data: bytes) -> str:
        path = self.dir / name
        path.write_bytes(data)
        return str(path)

    def settings(self, user: str) -> dict:
        cert, key = self.files[user]
        return {"security.protocol": "ssl", "ssl.ca.location": self.ca_file,
                "ssl.certificate.location": cert, "ssl.key.location": key}


def client(address: str, certs: Certificates, user: str) -> dict:
    return {**rdkafka_base(address), **certs.settings(user)}


def acl_broker(make_broker, certs: Certificates, *extra: str,
               listeners: str = "SSL://127.0.0.1:0"):
    """A broker with the ACL authorizer, requiring client certificates on its SSL
    listener, the admin a super user."""
    return make_broker("--listeners", listeners,
                       "--ssl-certificate-file", certs.server_cert,
                       "--ssl-key-file", certs.server_key,
                       "--ssl-client-ca-file", certs.ca_file,
                       "--authorizer", "acl",
                       "--super-users", certs.principals["admin"], *extra)


def restarted_address(broker, old: str) -> str:
    """The SSL listener's address once the restarted broker printed a new one (its
    output file keeps the first start's lines)."""
    deadline = time.monotonic() + DEADLINE_S
    while (address := listener_address(broker, "SSL")) == old:
        assert time.monotonic() < deadline, "the restarted broker printed no SSL listener"
        time.sleep(0.05)
    return address


def alice_reads(topic: str, principal: str) -> list[AclBinding]:
    return [
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, "g", ResourcePatternType.LITERAL, principal, "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
    ]


def wait_all(futures: dict) -> None:
    for future in futures.values():
        future.result(timeout=DEADLINE_S)


def alice_topics(address: str, certs: Certificates) -> set[str]:
    admin = AdminClient(client(address, certs, "alice"))
    return set(admin.list_topics(timeout=DEADLINE_S).topics)


def consume(address: str, certs: Certificates, topic: str, expected: int,
            settings: dict | None = None, reported: bool = False) -> tuple[int, list]:
    """alice consumes `topic` in group `g` until `expected` records or an error: the
    count read and the errors met (with `reported`, also those of the error callback)."""
    errors: list = []
    extra = {**(settings or {}), **({"error_cb": errors.append} if reported else {})}
    consumer = Consumer({**client(address, certs, "alice"), "group.id": "g",
                         "auto.offset.reset": "earliest", **extra})
    consumer.subscribe([topic])
    deadline = time.monotonic() + DEADLINE_S
    read = 0
    try:
        while time.monotonic() < deadline and read < expected and not errors:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                errors.append(message.error())
            else:
                read += 1
        return read, errors
    finally:
        consumer.close()


def test_acls_decide_what_a_certificate_user_may_do(make_broker, tmp_path):
    certs = Certificates(tmp_path)
    broker = acl_broker(make_broker, certs, "--metrics-listen", "127.0.0.1:0")
    address = listener_address(broker, "SSL")
    admin = AdminClient(client(address, certs, "admin"))
    wait_all(admin.create_topics([NewTopic(t, 1, 1) for t in ("a", "b")]))
    for topic in ("a", "b"):
        producer = Producer({**client(address, certs, "admin"), "acks": "all"})
        delivery = Delivery()
        produce_records(producer, topic, range(RECORDS), delivery)
        assert len(delivery.acked) == RECORDS and not delivery.failed, delivery.failed[:3]

    # Before any ACL alice sees nothing.
    assert alice_topics(address, certs) & {"a", "b"} == set()

    alice = certs.principals["alice"]
    wait_all(admin.create_acls(alice_reads("a", alice)))

    assert consume(address, certs, "a", RECORDS) == (RECORDS, [])
    topics = alice_topics(address, certs)
    assert "a" in topics and "b" not in topics, topics
    read, errors = consume(address, certs, "b", 1)
    assert read == 0 and errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, \
        errors

    # No Write: the produce fails and nothing is appended.
    producer = Producer({**client(address, certs, "alice"), "message.timeout.ms": 10_000})
    delivery = Delivery()
    produce_records(producer, "a", range(3), delivery)
    assert not delivery.acked and delivery.failed
    assert all(e.startswith("TOPIC_AUTHORIZATION_FAILED") for e in delivery.failed.values()), \
        delivery.failed
    watcher = Consumer({**client(address, certs, "admin"), "group.id": "admin"})
    high = watcher.get_watermark_offsets(TopicPartition("a", 0), timeout=DEADLINE_S)[1]
    watcher.close()
    assert high == RECORDS

    # DescribeAcls with a filter finds alice's topic ACL only.
    topic_filter = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, alice,
                                    None, AclOperation.ANY, AclPermissionType.ANY)
    found = admin.describe_acls(topic_filter).result(timeout=DEADLINE_S)
    assert [(b.name, b.operation) for b in found] == [("a", AclOperation.READ)], found

    # Denials are counted by resource type.
    with urllib.request.urlopen(f"http://{broker.metrics_address()}/metrics", timeout=10) as r:
        text = r.read().decode()
    assert 'headway_authorization_denials_total{resource_type="Topic"}' in text

    # ACLs survive a restart.
    broker.restart()
    address = restarted_address(broker, address)
    topics = alice_topics(address, certs)
    assert "a" in topics and "b" not in topics, topics

    # A deletion takes effect on the next request.
    admin = AdminClient(client(address, certs, "admin"))
    deleted = admin.delete_acls([topic_filter])
    removed = list(deleted.values())[0].result(timeout=DEADLINE_S)
    assert [(b.name, b.principal) for b in removed] == [("a", alice)]
    assert "a" not in alice_topics(address, certs)


def refusal(future) -> int | None:
    """The Kafka error code a future of the admin client failed with, or None."""
    try:
        future.result(timeout=DEADLINE_S)
    except KafkaException as e:
        return e.args[0].code()
    return None


def only(futures: dict):
    assert len(futures) == 1, futures
    return next(iter(futures.values()))


def retention(admin: AdminClient, topic: str) -> str:
    resource = ConfigResource("topic", topic)
    configs = only(admin.describe_configs([resource])).result(timeout=DEADLINE_S)
    return configs["retention.ms"].value


def low_watermark(address: str, certs: Certificates, topic: str) -> int:
    watcher = Consumer({**client(address, certs, "admin"), "group.id": "watcher"})
    try:
        return watcher.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S)[0]
    finally:
        watcher.close()


def committed_groups(admin: AdminClient) -> set[str]:
    listed = admin.list_consumer_groups().result(timeout=DEADLINE_S)
    return {g.group_id for g in listed.valid}


def test_admin_requests_are_refused_without_their_acls_and_change_nothing(make_broker, tmp_path):
    """Goal: DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs,
    IncrementalAlterConfigs, DeleteRecords, DescribeGroups and DeleteGroups are checked
    as Kafka checks them: alice, without the ACL each needs, gets the resource's
    authorization error and nothing changes; with the ACLs each works.
    Method: librdkafka's AdminClient as alice; the super user checks the effects."""
    certs = Certificates(tmp_path)
    broker = acl_broker(make_broker, certs)
    address = listener_address(broker, "SSL")
    admin = AdminClient(client(address, certs, "admin"))
    wait_all(admin.create_topics([NewTopic("t", 2, 1)]))
    producer = Producer({**client(address, certs, "admin"), "acks": "all"})
    delivery = Delivery()
    produce_records(producer, "t", range(RECORDS), delivery)
    assert len(delivery.acked) == RECORDS and not delivery.failed, delivery.failed[:3]
    committer = Consumer({**client(address, certs, "admin"), "group.id": "grp"})
    committer.commit(offsets=[TopicPartition("t", 0, 7)], asynchronous=False)
    committer.close()
    before = retention(admin, "t")

    principal = certs.principals["alice"]

    def allow(kind, name, operation):
        return AclBinding(kind, name, ResourcePatternType.LITERAL, principal, "*",
                          operation, AclPermissionType.ALLOW)

    # alice may describe the topic (librdkafka looks up its leader first), no more.
    wait_all(admin.create_acls([allow(ResourceType.TOPIC, "t", AclOperation.DESCRIBE)]))
    alice = AdminClient(client(address, certs, "alice"))
    topic_denied = KafkaError.TOPIC_AUTHORIZATION_FAILED
    group_denied = KafkaError.GROUP_AUTHORIZATION_FAILED
    cluster_denied = KafkaError.CLUSTER_AUTHORIZATION_FAILED
    new_retention = [ConfigEntry("retention.ms", "123456",
                                 incremental_operation=AlterConfigOpType.SET)]

    assert refusal(only(alice.delete_topics(["t"]))) == topic_denied
    assert refusal(only(alice.create_partitions([NewPartitions("t", 3)]))) == topic_denied
    assert refusal(only(alice.describe_configs([ConfigResource("topic", "t")]))) == topic_denied
    assert refusal(only(alice.describe_configs([ConfigResource("broker", "1")]))) == \
        cluster_denied
    assert refusal(only(alice.incremental_alter_configs(
        [ConfigResource("topic", "t", incremental_configs=new_retention)]))) == topic_denied
    assert refusal(only(alice.alter_configs(
        [ConfigResource("topic", "t", set_config={"retention.ms": "123456"})]))) == topic_denied
    assert refusal(only(alice.delete_records([TopicPartition("t", 0, 50)]))) == topic_denied
    assert refusal(only(alice.describe_consumer_groups(["grp"]))) == group_denied
    assert refusal(only(alice.delete_consumer_groups(["grp"]))) == group_denied

    # Nothing changed.
    metadata = admin.list_topics(timeout=DEADLINE_S)
    assert len(metadata.topics["t"].partitions) == 2
    assert retention(admin, "t") == before != "123456"
    assert low_watermark(address, certs, "t") == 0
    assert "grp" in committed_groups(admin)

    # With the ACLs each works.
    wait_all(admin.create_acls([
        allow(ResourceType.TOPIC, "t", AclOperation.DELETE),
        allow(ResourceType.TOPIC, "t", AclOperation.ALTER),
        allow(ResourceType.TOPIC, "t", AclOperation.ALTER_CONFIGS),
        allow(ResourceType.GROUP, "grp", AclOperation.DELETE),
        allow(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE_CONFIGS),
    ]))
    only(alice.describe_configs([ConfigResource("broker", "1")])).result(timeout=DEADLINE_S)
    only(alice.incremental_alter_configs(
        [ConfigResource("topic", "t", incremental_configs=new_retention)])
    ).result(timeout=DEADLINE_S)
    assert retention(admin, "t") == "123456"
    assert retention(alice, "t") == "123456"
    only(alice.create_partitions([NewPartitions("t", 3)])).result(timeout=DEADLINE_S)
    assert len(admin.list_topics(timeout=DEADLINE_S).topics["t"].partitions) == 3
    deleted = only(alice.delete_records([TopicPartition("t", 0, 50)])).result(timeout=DEADLINE_S)
    assert deleted.low_watermark == 50
    assert low_watermark(address, certs, "t") == 50
    described = only(alice.describe_consumer_groups(["grp"])).result(timeout=DEADLINE_S)
    assert described.group_id == "grp"
    only(alice.delete_consumer_groups(["grp"])).result(timeout=DEADLINE_S)
    assert "grp" not in committed_groups(admin)
    only(alice.delete_topics(["t"])).result(timeout=DEADLINE_S)
    deadline = time.monotonic() + DEADLINE_S
    while "t" in admin.list_topics(timeout=DEADLINE_S).topics:
        assert time.monotonic() < deadline, "the topic was not deleted"
        time.sleep(0.05)


def test_transactions_need_write_on_their_id_and_read_on_the_group(make_broker, tmp_path):
    """Goal: AddOffsetsToTxn needs Read on the group and EndTxn Write on the
    transactional id, with Kafka's error codes; a refused commit commits nothing.
    Method: librdkafka's transactional producer as alice, allowed Write on topic `t` and
    on transactional id `tx`; the super user revokes the id's ACL before the commit and
    reads the last stable offset."""
    certs = Certificates(tmp_path)
    broker = acl_broker(make_broker, certs)
    address = listener_address(broker, "SSL")
    admin = AdminClient(client(address, certs, "admin"))
    wait_all(admin.create_topics([NewTopic("t", 1, 1)]))
    principal = certs.principals["alice"]
    txn_acl = AclBinding(ResourceType.TRANSACTIONAL_ID, "tx", ResourcePatternType.LITERAL,
                         principal, "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    wait_all(admin.create_acls([
        txn_acl,
        AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, principal, "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW),
    ]))
    producer = Producer({**client(address, certs, "alice"), "transactional.id": "tx"})
    producer.init_transactions(DEADLINE_S)
    group = Consumer({**client(address, certs, "alice"), "group.id": "grp"})
    metadata = group.consumer_group_metadata()
    group.close()

    # AddOffsetsToTxn without Read on the group.
    producer.begin_transaction()
    producer.produce("t", value=b"x")
    assert producer.flush(DEADLINE_S) == 0
    try:
        producer.send_offsets_to_transaction([TopicPartition("t", 0, 1)], metadata, DEADLINE_S)
        raise AssertionError("offsets sent without Read on the group")
    except KafkaException as e:
        assert e.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED, e
    producer.abort_transaction(DEADLINE_S)

    # EndTxn after Write on the transactional id was revoked.
    producer.begin_transaction()
    for i in range(10):
        producer.produce("t", value=b"%d" % i)
    assert producer.flush(DEADLINE_S) == 0
    txn_filter = AclBindingFilter(ResourceType.TRANSACTIONAL_ID, "tx",
                                  ResourcePatternType.LITERAL, principal, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    only(admin.delete_acls([txn_filter])).result(timeout=DEADLINE_S)
    try:
        producer.commit_transaction(DEADLINE_S)
        raise AssertionError("committed without Write on the transactional id")
    except KafkaException as e:
        assert e.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, e
    # Nothing was committed: the last stable offset is still before the open transaction.
    stable = only(admin.list_offsets({TopicPartition("t", 0): OffsetSpec.latest()},
                                     isolation_level=IsolationLevel.READ_COMMITTED))
    assert stable.result(timeout=DEADLINE_S).offset <= 2  # 12 had it been committed


def test_a_consumer_protocol_member_needs_read_on_its_group(make_broker, tmp_path):
    """Goal: ConsumerGroupHeartbeat (KIP-848) needs Read on the group, as Kafka checks it.
    Method: librdkafka with `group.protocol=consumer` as alice, allowed Read on the topic
    and Describe on the group (FindCoordinator and OffsetFetch pass): refused with
    GROUP_AUTHORIZATION_FAILED, then, with Read on the group, it reads every record."""
    certs = Certificates(tmp_path)
    broker = acl_broker(make_broker, certs)
    address = listener_address(broker, "SSL")
    admin = AdminClient(client(address, certs, "admin"))
    wait_all(admin.create_topics([NewTopic("a", 1, 1)]))
    producer = Producer({**client(address, certs, "admin"), "acks": "all"})
    delivery = Delivery()
    produce_records(producer, "a", range(RECORDS), delivery)
    assert len(delivery.acked) == RECORDS and not delivery.failed
    principal = certs.principals["alice"]
    topic_read, group_read = alice_reads("a", principal)
    group_describe = AclBinding(ResourceType.GROUP, "g", ResourcePatternType.LITERAL, principal,
                                "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    wait_all(admin.create_acls([topic_read, group_describe]))

    def consume848(expected: int) -> tuple[int, list]:
        return consume(address, certs, "a", expected, {"group.protocol": "consumer"},
                       reported=True)

    read, errors = consume848(1)
    assert read == 0 and errors, errors
    # librdkafka makes the heartbeat's refusal a fatal error that names it.
    assert errors[0].code() == KafkaError._FATAL, errors
    assert "ConsumerGroupHeartbeat" in errors[0].str(), errors
    assert "Group authorization failed" in errors[0].str(), errors
    wait_all(admin.create_acls([group_read]))
    assert consume848(RECORDS) == (RECORDS, [])
