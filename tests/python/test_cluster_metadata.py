"""Three headway processes started as one cluster (--node-id, --controller-quorum-voters).

What runs: the controller voters elect a leader and every broker registers; Metadata and
DescribeCluster answer from the controller's metadata on every broker alike; an
AdminClient creates topics through the controller (placed over the three brokers, or
where a manual assignment puts them); a produce sent to a broker that does not lead the
partition is refused with NOT_LEADER_OR_FOLLOWER, and a client with default settings
produces to the leaders and reads back what it wrote. Replication is not wired yet: each
partition's records are on its leader only. A broker killed with SIGKILL is fenced within
the session timeout and its partitions are led by the others; restarted, it registers
again at a new epoch.

Metadata is asked of each broker with a raw request (v5), so the answer is that broker's
own, not whichever broker a client library picked.
"""

from __future__ import annotations

import re
import socket
import struct
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.record.memory_records import MemoryRecordsBuilder

from conftest import BrokerStartError
from kafka_frames import frame, read_response
from support import ADMIN_TIMEOUT_S, ErrorLog, raise_on_error, rdkafka_base, read_records, \
    wait_until

METADATA_KEY, PRODUCE_KEY = 3, 0
NOT_LEADER_OR_FOLLOWER = 6
# The controller fences a silent broker after 6 s; after 7 to 8 s when it led the
# controller (an election first). The margin is for a loaded machine.
FENCED_WITHIN_S = 20.0
CLUSTER_UP_S = 30.0


# -- raw requests ----------------------------------------------------------------------------

class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str):
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return values if len(values) > 1 else values[0]

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.at:self.at + n].decode()
        self.at += n
        return s

    def ints(self) -> list[int]:
        return [self.take(">i") for _ in range(self.take(">i"))]


def call(bootstrap: str, key: int, version: int, body: bytes) -> Reader:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(frame(key, version, body, correlation_id=11))
        response = read_response(sock)
    assert response is not None, f"{bootstrap}: connection closed without an answer"
    reader = Reader(response)
    assert reader.take(">i") == 11
    return reader


def metadata(bootstrap: str) -> dict:
    """Metadata v5 of every topic, as this one broker answers it."""
    r = call(bootstrap, METADATA_KEY, 5, struct.pack(">i?", -1, False))
    r.take(">i")  # throttle
    brokers = {}
    for _ in range(r.take(">i")):
        node, host, port, _rack = r.take(">i"), r.string(), r.take(">i"), r.string()
        brokers[node] = f"{host}:{port}"
    cluster_id, controller = r.string(), r.take(">i")
    topics = {}
    for _ in range(r.take(">i")):
        error, name, _internal = r.take(">h"), r.string(), r.take(">?")
        partitions = {}
        for _ in range(r.take(">i")):
            p_error, index, leader = r.take(">hii")
            replicas, isr, offline = r.ints(), r.ints(), r.ints()
            partitions[index] = dict(error=p_error, leader=leader,
                                     replicas=replicas, isr=isr, offline=offline)
        topics[name] = dict(error=error, partitions=partitions)
    return dict(brokers=brokers, cluster_id=cluster_id, controller=controller, topics=topics)


def produce_v3(bootstrap: str, topic: str, partition: int) -> int:
    """One valid batch sent with Produce v3 (acks=1); the partition's error code."""
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=int(time.time() * 1000), key=b"k", value=b"raw", headers=[])
    builder.close()
    records = builder.buffer()
    name = topic.encode()
    body = (struct.pack(">hhi", -1, 1, 10_000) + struct.pack(">i", 1)
            + struct.pack(">h", len(name)) + name + struct.pack(">i", 1)
            + struct.pack(">ii", partition, len(records)) + records)
    r = call(bootstrap, PRODUCE_KEY, 3, body)
    assert r.take(">i") == 1
    assert r.string() == topic
    assert r.take(">i") == 1
    index, error = r.take(">ih")
    assert index == partition
    return error


# -- the cluster -----------------------------------------------------------------------------

def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def start_cluster(make_broker, size: int = 3):
    """`size` brokers, nodes 1..size, each a controller voter on a port picked free; the
    whole start is tried again when a port was taken meanwhile."""
    for _attempt in range(3):
        voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(free_ports(size)))
        brokers = [make_broker("--node-id", str(i + 1), "--controller-quorum-voters", voters,
                               start=False) for i in range(size)]
        try:
            for b in brokers:
                b.start()
            return brokers
        except BrokerStartError as e:
            for b in brokers:
                b.kill()
            if "in use" not in str(e):
                raise
    raise AssertionError("no free voter ports in three tries")


def registered_epoch(broker, start: int) -> int:
    """The epoch the broker's `start`-th run (1-based) registered at, from its log."""
    text = broker.stderr_path.read_text("utf-8", "replace")
    runs = text.split("### headway start #")
    found = re.findall(r"broker registered with the controller.*?epoch=(\d+)", runs[start])
    return int(found[-1]) if found else 0


def all_agree(bootstraps: list[str], brokers: int, topics: dict[str, int] | None = None):
    """The brokers' Metadata when all of them show `brokers` brokers, one controller, and
    each of `topics` with its partition count, every partition led, identically."""
    answers = [metadata(b) for b in bootstraps]
    first = answers[0]
    for a in answers:
        if len(a["brokers"]) != brokers or a["controller"] < 0:
            return None
        if (a["brokers"], a["controller"], a["cluster_id"]) != \
                (first["brokers"], first["controller"], first["cluster_id"]):
            return None
        for name, count in (topics or {}).items():
            t = a["topics"].get(name)
            if t is None or len(t["partitions"]) != count or any(
                    p["leader"] < 0 for p in t["partitions"].values()):
                return None
            if t != first["topics"][name]:
                return None
    return first


def test_three_brokers_share_metadata_topics_and_fencing(make_broker):
    started = time.monotonic()
    brokers = start_cluster(make_broker)
    bootstraps = [b.bootstrap for b in brokers]
    md = wait_until(lambda: all_agree(bootstraps, 3), "three brokers, one controller",
                    CLUSTER_UP_S)
    assert sorted(md["brokers"]) == [1, 2, 3]
    assert md["controller"] in (1, 2, 3)
    assert md["cluster_id"]
    up = time.monotonic() - started

    admin = AdminClient(rdkafka_base(",".join(bootstraps)))
    described = admin.describe_cluster(request_timeout=ADMIN_TIMEOUT_S).result(
        timeout=ADMIN_TIMEOUT_S)
    assert sorted(n.id for n in described.nodes) == [1, 2, 3]
    assert described.controller.id == md["controller"]

    raise_on_error(admin.create_topics(
        [NewTopic("spread", num_partitions=6, replication_factor=3),
         NewTopic("manual", num_partitions=2, replication_factor=-1,
                  replica_assignment=[[2, 3], [3, 1]])],
        operation_timeout=ADMIN_TIMEOUT_S, request_timeout=ADMIN_TIMEOUT_S))
    md = wait_until(lambda: all_agree(bootstraps, 3, {"spread": 6, "manual": 2}),
                    "every broker agrees on the new topics", CLUSTER_UP_S)
    spread = md["topics"]["spread"]["partitions"]
    for p in spread.values():
        assert sorted(p["replicas"]) == [1, 2, 3], p
        assert sorted(p["isr"]) == [1, 2, 3], p
        assert p["leader"] == p["replicas"][0], p
        assert p["offline"] == [], p
    leaders = [spread[i]["leader"] for i in range(6)]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3], leaders
    manual = md["topics"]["manual"]["partitions"]
    assert [manual[i]["replicas"] for i in range(2)] == [[2, 3], [3, 1]]
    assert [manual[i]["leader"] for i in range(2)] == [2, 3]

    # A produce sent to a broker that does not lead the partition.
    leader = spread[0]["leader"]
    other = next(b for i, b in enumerate(bootstraps, 1) if i != leader)
    assert produce_v3(other, "spread", 0) == NOT_LEADER_OR_FOLLOWER
    by_node = dict(enumerate(bootstraps, 1))
    # The leader takes it once its reconciler has created the partition here.
    wait_until(lambda: produce_v3(by_node[leader], "spread", 0) == 0,
               "the leader accepts a produce", CLUSTER_UP_S)

    # A client with default settings finds the leaders and reads back what it wrote
    # (one copy for now: the followers do not fetch yet).
    errors = ErrorLog()
    producer = Producer({**rdkafka_base(",".join(bootstraps)), "error_cb": errors})
    failed: list[str] = []

    def delivered(err, _msg):
        if err is not None:
            failed.append(str(err))

    sent = 60
    for seq in range(sent):
        producer.produce("spread", key=str(seq).encode(), value=f"v{seq}".encode(),
                         partition=seq % 6, on_delivery=delivered)
    assert producer.flush(ADMIN_TIMEOUT_S) == 0, errors.summary()
    assert failed == [], failed
    values = sorted(r.value for r in read_records(",".join(bootstraps), "spread", 6,
                                                  expected=sent + 1))
    assert values == sorted([b"raw"] + [f"v{seq}".encode() for seq in range(sent)])

    # SIGKILL broker 3: the others fence it and move its partitions.
    victim = brokers[2]
    epoch_before = registered_epoch(victim, 1)
    assert epoch_before > 0
    victim.kill()
    killed = time.monotonic()

    def fenced():
        answers = [metadata(b) for b in bootstraps[:2]]
        for a in answers:
            if sorted(a["brokers"]) != [1, 2]:
                return None
            for t in ("spread", "manual"):
                ps = a["topics"][t]["partitions"].values()
                if any(p["leader"] not in (1, 2) for p in ps):
                    return None
        return answers[0]

    md = wait_until(fenced, "broker 3 fenced and its partitions led by 1 and 2",
                    FENCED_WITHIN_S)
    fenced_after = time.monotonic() - killed
    for p in md["topics"]["spread"]["partitions"].values():
        assert p["offline"] == [3], p
        assert 3 not in p["isr"], p
    assert md["topics"]["manual"]["partitions"][1]["leader"] == 1

    # Restarted, it registers again, at a new epoch, and every broker shows it.
    victim.start()
    bootstraps[2] = victim.bootstrap
    wait_until(lambda: all_agree(bootstraps, 3), "broker 3 back in every broker's Metadata",
               CLUSTER_UP_S)
    epoch_after = wait_until(lambda: registered_epoch(victim, 2), "broker 3 registered again",
                             CLUSTER_UP_S)
    assert epoch_after > epoch_before
    print(f"cluster up in {up:.1f} s; broker 3 fenced {fenced_after:.1f} s after SIGKILL; "
          f"registered at epoch {epoch_before}, then {epoch_after}; "
          f"whole test {time.monotonic() - started:.1f} s")
