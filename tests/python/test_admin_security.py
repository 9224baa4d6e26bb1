"""Security administration over the wire: SCRAM users (DescribeUserScramCredentials,
AlterUserScramCredentials) and ACLs (CreateAcls, DescribeAcls, DeleteAcls), from the Java
Admin client and from `headway user` and `headway acl` against a running broker.

Goal: a super user makes a SCRAM user with the Java Admin client (kafka-clients 3.9 and
4.x) over SASL_SSL, sees it described with its mechanism and iterations, and librdkafka
then authenticates as that user and produces; once the credential is deleted, the user's
next authentication fails. The super user creates, lists (with a filter) and deletes
ACLs; a user who is not a super user gets CLUSTER_AUTHORIZATION_FAILED for each of these
calls. The CLI does the same round trip against a running broker.
Method: the first users (the super user `admin` and an ordinary user `bob`) are added
with `headway user --data-dir` before the broker starts; the broker runs the ACL
authorizer with `User:admin` as its super user. The Java program is
tests/java/src/SecurityAdminCheck.java, compiled here against each client version.
Every wait has a deadline.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from group_support import headway_cli
from java_support import JAVA_DIR, JavaClient
from support import Delivery, produce_records, rdkafka_base
from test_sasl import add_user, authentication_error, sasl_settings
from test_tls import Pki, listener_address

MAIN = "SecurityAdminCheck"
JAVA_LIBS = {"3.9": "lib-3.9", "4": "lib-4"}
ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
BOB, BOB_PASSWORD = "bob", "bob-secret"
RECORDS = 200
TIMEOUT_S = 30.0


@pytest.fixture(scope="module", params=sorted(JAVA_LIBS), ids=lambda v: f"kafka-clients-{v}")
def java_classes(request, tmp_path_factory) -> tuple[str, Path]:
    """SecurityAdminCheck compiled against one kafka-clients version."""
    lib = JAVA_DIR / JAVA_LIBS[request.param]
    if not list(lib.glob("kafka-clients-*.jar")):
        pytest.fail(f"kafka-clients not set up in {lib}: run scripts/setup", pytrace=False)
    out = tmp_path_factory.mktemp(f"security-classes-{request.param}")
    sources = [JAVA_DIR / "src" / f"{MAIN}.java", JAVA_DIR / "src" / "Json.java",
               JAVA_DIR / "src" / "Args.java"]
    subprocess.run(["javac", "-nowarn", "--release", "17", "-encoding", "UTF-8", "-d", str(out),
                    "-cp", f"{lib}/*", *map(str, sources)], check=True, timeout=300)
    return JAVA_LIBS[request.param], out


@pytest.fixture
def java(java_classes, tmp_path) -> JavaClient:
    lib, classes = java_classes
    return JavaClient(lib, str(classes), MAIN, tmp_path)


@pytest.fixture
def secured_broker(make_broker, tmp_path):
    """SASL_SSL with the ACL authorizer; users admin (super user) and bob."""
    pki = Pki(tmp_path)
    broker = make_broker("--listeners", "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                         "--ssl-certificate-file", pki.server_cert,
                         "--ssl-key-file", pki.server_key,
                         "--authorizer", "acl", "--super-users", f"User:{ADMIN}",
                         start=False)
    broker.data_dir.mkdir(parents=True, exist_ok=True)
    add_user(broker, ADMIN, ADMIN_PASSWORD)
    add_user(broker, BOB, BOB_PASSWORD)
    broker.start()
    return broker, pki, listener_address(broker, "SASL_SSL")


def java_sasl(pki: Pki, user: str, password: str) -> list[str]:
    jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user}" password="{password}";')
    settings = ["security.protocol=SASL_SSL", "ssl.truststore.type=PEM",
                f"ssl.truststore.location={pki.ca_file}", "sasl.mechanism=SCRAM-SHA-512",
                f"sasl.jaas.config={jaas}"]
    return [arg for s in settings for arg in ("--set", s)]


def steps(java: JavaClient, address: str, pki: Pki, user: str, password: str,
          command: str, *args: str) -> dict[str, dict]:
    events = java.run(MAIN, "--bootstrap", address, command, *args,
                      *java_sasl(pki, user, password))
    assert events and "steps" in events[-1], events
    return {s["step"]: s for s in events[-1]["steps"]}


def ok(step: dict):
    assert step["ok"], step.get("error")
    return step["result"]


def rdkafka_admin(address: str, pki: Pki) -> AdminClient:
    return AdminClient({**rdkafka_base(address),
                        **sasl_settings("SASL_SSL", "SCRAM-SHA-512", pki, ADMIN,
                                        ADMIN_PASSWORD)})


def test_the_java_admin_client_makes_a_scram_user_that_then_authenticates(secured_broker,
                                                                          java):
    broker, pki, address = secured_broker
    as_admin = (java, address, pki, ADMIN, ADMIN_PASSWORD)
    user, password, topic = "carol", "carol-secret", "carol-topic"
    added = steps(*as_admin, "scram-add", "--user", user, "--password", password,
                  "--mechanism", "SCRAM-SHA-512", "--iterations", "8192")
    ok(added["upsert"])
    described = steps(*as_admin, "scram-describe", "--user", user)
    expected = [{"mechanism": "SCRAM-SHA-512", "iterations": 8192}]
    assert ok(described["all"])[user] == expected
    assert ok(described["all"])[ADMIN] == [{"mechanism": "SCRAM-SHA-256", "iterations": 4096},
                                           {"mechanism": "SCRAM-SHA-512", "iterations": 4096}]
    assert ok(described["user"]) == expected

    admin = rdkafka_admin(address, pki)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=TIMEOUT_S)
    write = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{user}",
                       "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    for future in admin.create_acls([write]).values():
        future.result(timeout=TIMEOUT_S)
    settings = sasl_settings("SASL_SSL", "SCRAM-SHA-512", pki, user, password)
    producer = Producer({**rdkafka_base(address), **settings, "acks": "all"})
    delivery = Delivery()
    produce_records(producer, topic, range(RECORDS), delivery)
    assert len(delivery.acked) == RECORDS and not delivery.failed, delivery.failed[:3]

    ok(steps(*as_admin, "scram-delete", "--user", user, "--mechanism", "SCRAM-SHA-512")["delete"])
    error = authentication_error(address, settings)
    assert error is not None and error.code() == KafkaError._AUTHENTICATION, error
    gone = steps(*as_admin, "scram-describe", "--user", user)
    assert user not in ok(gone["all"])
    assert not gone["user"]["ok"] and "ResourceNotFoundException" in gone["user"]["error"]
    again = steps(*as_admin, "scram-delete", "--user", user, "--mechanism", "SCRAM-SHA-512")
    assert "ResourceNotFoundException" in again["delete"]["error"]
    few = steps(*as_admin, "scram-add", "--user", user, "--password", password,
                "--mechanism", "SCRAM-SHA-256", "--iterations", "4095")
    assert "UnacceptableCredentialException" in few["upsert"]["error"]


def test_the_java_admin_client_manages_acls_and_others_are_refused(secured_broker, java):
    broker, pki, address = secured_broker
    principal = "User:alice"
    acls = ("--principal", principal, "--topic", "orders", "--group", "billing")
    done = steps(java, address, pki, ADMIN, ADMIN_PASSWORD, "acls", *acls)
    ok(done["create"])
    read = {"principal": principal, "host": "*", "operation": "READ", "permission": "ALLOW",
            "pattern_type": "LITERAL"}
    assert ok(done["describe-topic"]) == [{**read, "resource_type": "TOPIC", "name": "orders"}]
    assert ok(done["delete-topic"]) == [{**read, "resource_type": "TOPIC", "name": "orders"}]
    assert ok(done["describe-all"]) == [{**read, "resource_type": "GROUP", "name": "billing"}]

    as_bob = (java, address, pki, BOB, BOB_PASSWORD)
    refused = {**steps(*as_bob, "acls", *acls),
               **steps(*as_bob, "scram-describe", "--user", BOB),
               **steps(*as_bob, "scram-add", "--user", "eve", "--password", "x",
                       "--mechanism", "SCRAM-SHA-512", "--iterations", "4096"),
               **steps(*as_bob, "scram-delete", "--user", ADMIN, "--mechanism",
                       "SCRAM-SHA-512")}
    assert set(refused) == {"create", "describe-topic", "delete-topic", "describe-all", "all",
                            "user", "upsert", "delete"}
    for name, step in refused.items():
        assert not step["ok"] and "ClusterAuthorizationException" in step["error"], (name, step)
    # Nothing bob asked for happened.
    left = steps(java, address, pki, ADMIN, ADMIN_PASSWORD, "scram-describe", "--user", ADMIN)
    assert "eve" not in ok(left["all"]) and len(ok(left["user"])) == 2
    assert len(ok(steps(java, address, pki, ADMIN, ADMIN_PASSWORD, "acls", *acls)[
        "describe-all"])) == 1


def acl_rows(bootstrap: str, *args: str) -> list[list[str]]:
    lines = headway_cli("acl", "-b", bootstrap, *args).splitlines()
    assert lines[0].split() == ["RESOURCE_TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST",
                                "OPERATION", "PERMISSION"], lines
    return [line.split() for line in lines[1:]]


def test_headway_user_and_acl_round_trip_against_a_running_broker(make_broker):
    broker = make_broker("--listeners", "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                         "--authorizer", "acl", "--super-users", "User:ANONYMOUS")
    bootstrap = listener_address(broker, "PLAINTEXT")
    sasl_address = listener_address(broker, "SASL_PLAINTEXT")
    settings = sasl_settings("SASL_PLAINTEXT", "SCRAM-SHA-256", None, "dave", "dave-secret")
    assert authentication_error(sasl_address, settings) is not None, "no such user yet"

    out = headway_cli("user", "-b", bootstrap, "add", "dave", "--password", "dave-secret",
                      "--iterations", "8192")
    assert out.split() == ["dave", "SCRAM-SHA-256", "dave", "SCRAM-SHA-512"]
    assert headway_cli("user", "-b", bootstrap, "list").split() == \
        ["dave", "SCRAM-SHA-256:8192,SCRAM-SHA-512:8192"]
    assert authentication_error(sasl_address, settings) is None

    acl_rows(bootstrap, "add", "--allow-principal", "User:dave", "--operation", "Read",
             "--operation", "Describe", "--topic", "t", "--group", "g")
    acl_rows(bootstrap, "add", "--deny-principal", "User:dave", "--operation", "Write",
             "--topic", "secret-", "--resource-pattern-type", "prefixed")
    assert len(acl_rows(bootstrap, "list")) == 5
    assert acl_rows(bootstrap, "list", "--topic", "t") == [
        ["TOPIC", "t", "LITERAL", "User:dave", "*", "READ", "ALLOW"],
        ["TOPIC", "t", "LITERAL", "User:dave", "*", "DESCRIBE", "ALLOW"]]
    assert acl_rows(bootstrap, "list", "--topic", "secret-",
                    "--resource-pattern-type", "prefixed") == [
        ["TOPIC", "secret-", "PREFIXED", "User:dave", "*", "WRITE", "DENY"]]
    deleted = acl_rows(bootstrap, "delete", "--topic", "t", "--operation", "read")
    assert deleted == [["TOPIC", "t", "LITERAL", "User:dave", "*", "READ", "ALLOW"]]
    acl_rows(bootstrap, "delete", "--group", "g")
    assert len(acl_rows(bootstrap, "list")) == 2

    headway_cli("user", "-b", bootstrap, "delete", "dave")
    assert headway_cli("user", "-b", bootstrap, "list").strip() == ""
    assert authentication_error(sasl_address, settings) is not None, "deleted"
    missing = subprocess.run([str(broker.binary), "user", "-b", bootstrap, "delete", "dave"],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "no such credential" in missing.stderr
