"""Shared pieces of the tests that run several headway processes as one cluster
(--node-id, --controller-quorum-voters): starting the brokers on free voter ports, raw
Metadata and Produce requests asked of one broker (so the answer is that broker's own, not
whichever broker a client library picked), and waits for the brokers to agree on the
leaders and in-sync replicas of a topic.
"""

from __future__ import annotations

import socket
import struct
import time

from confluent_kafka.admin import AdminClient, NewTopic
from kafka.record.memory_records import MemoryRecordsBuilder

from conftest import BrokerStartError
from kafka_frames import frame, read_response
from support import ADMIN_TIMEOUT_S, raise_on_error, rdkafka_base, wait_until

METADATA_KEY, PRODUCE_KEY, DESCRIBE_CONFIGS_KEY = 3, 0, 32
GROUP_RESOURCE = 32
NOT_LEADER_OR_FOLLOWER = 6
# The controller fences a silent broker after 6 s; after 7 to 8 s when it led the
# controller (an election first). The margin is for a loaded machine.
FENCED_WITHIN_S = 20.0
CLUSTER_UP_S = 30.0
# How long a raw request waits for its answer.
CALL_TIMEOUT_S = 10.0


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


def call(bootstrap: str, key: int, version: int, body: bytes,
         timeout_s: float = CALL_TIMEOUT_S) -> Reader:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
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


def group_configs(bootstrap: str, group: str) -> dict[str, tuple[str | None, int]]:
    """DescribeConfigs v1 of a GROUP resource, as this one broker answers it: each
    setting's value and source (8: set on the group)."""
    name = group.encode()
    body = (struct.pack(">ib", 1, GROUP_RESOURCE) + struct.pack(">h", len(name)) + name
            + struct.pack(">i?", -1, False))
    r = call(bootstrap, DESCRIBE_CONFIGS_KEY, 1, body)
    r.take(">i")  # throttle
    assert r.take(">i") == 1
    error, message = r.take(">h"), r.string()
    assert error == 0, (error, message)
    r.take(">b")
    assert r.string() == group
    configs = {}
    for _ in range(r.take(">i")):
        key, value = r.string(), r.string()
        _read_only, source, _sensitive = r.take(">?b?")
        for _ in range(r.take(">i")):  # synonyms
            r.string(), r.string(), r.take(">b")
        configs[key] = (value, source)
    return configs


def produce_v3(bootstrap: str, topic: str, partition: int, acks: int = 1,
               timeout_ms: int = 10_000, value: bytes = b"raw",
               answer_within_s: float | None = None) -> int:
    """One valid batch of one record sent with Produce v3; the partition's error code.
    The answer is awaited `answer_within_s` (default: the request's timeout and
    CALL_TIMEOUT_S more); TimeoutError when none came."""
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=int(time.time() * 1000), key=b"k", value=value, headers=[])
    builder.close()
    records = builder.buffer()
    name = topic.encode()
    body = (struct.pack(">hhi", -1, acks, timeout_ms) + struct.pack(">i", 1)
            + struct.pack(">h", len(name)) + name + struct.pack(">i", 1)
            + struct.pack(">ii", partition, len(records)) + records)
    if answer_within_s is None:
        answer_within_s = CALL_TIMEOUT_S + timeout_ms / 1000
    r = call(bootstrap, PRODUCE_KEY, 3, body, timeout_s=answer_within_s)
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


def free_port_on(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start_cluster(make_broker, size: int = 3, hosts: dict[int, str] | None = None,
                  groups: dict[int, int] | None = None,
                  env: dict[int, dict[str, str]] | None = None,
                  before_start=None, args: list[str] | None = None):
    """`size` brokers, nodes 1..size, each a controller voter on a port picked free; the
    whole start is tried again when a port was taken meanwhile. With `hosts` node N
    listens (Kafka and controller listeners) on its own loopback address hosts[N]
    instead of 127.0.0.1; with `groups` it runs as group id groups[N] (root only), so
    that packet filter rules can tell its sockets from the others'. `env` adds node N's
    environment variables env[N] (kept across its restarts); `before_start(node,
    broker)` is called before each broker's first start (e.g. to mount its data
    directory); `args` are every broker's further command-line arguments."""
    for _attempt in range(3):
        if hosts is None:
            voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(free_ports(size)))
        else:
            voters = ",".join(f"{n}@{hosts[n]}:{free_port_on(hosts[n])}"
                              for n in range(1, size + 1))
        placed = [{} if hosts is None else {"listen": f"{hosts[i + 1]}:0"}
                  for i in range(size)]
        for i in range(size):
            if groups is not None:
                placed[i]["group"] = groups[i + 1]
            if env is not None:
                placed[i]["env"] = env[i + 1]
        brokers = [make_broker("--node-id", str(i + 1), "--controller-quorum-voters", voters,
                               *(args or []), start=False, **placed[i]) for i in range(size)]
        try:
            for node, b in enumerate(brokers, 1):
                if before_start is not None:
                    before_start(node, b)
                b.start()
            return brokers
        except BrokerStartError as e:
            for b in brokers:
                b.kill()
            if "in use" not in str(e):
                raise
    raise AssertionError("no free voter ports in three tries")


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


def led_by(bootstraps: list[str], topic: str, alive: set[int], isr_size: int):
    """The partitions of `topic` (index -> Metadata of the partition) when every partition
    is led by a live broker and has `isr_size` replicas in sync, as every live broker
    answers. `bootstraps[node - 1]` is node's address; only live nodes are asked."""
    answers = [metadata(bootstraps[node - 1]) for node in sorted(alive)]
    first = answers[0]["topics"].get(topic)
    if first is None:
        return None
    for a in answers:
        t = a["topics"].get(topic)
        if t != first:
            return None
        for p in t["partitions"].values():
            if p["leader"] not in alive or len(p["isr"]) != isr_size:
                return None
    return first["partitions"]


def cluster_with_topic(make_broker, topic: str, partitions: int,
                       config: dict[str, str] | None = None,
                       hosts: dict[int, str] | None = None,
                       groups: dict[int, int] | None = None,
                       env: dict[int, dict[str, str]] | None = None,
                       before_start=None, args: list[str] | None = None):
    """Three brokers agreeing on one controller and `topic` (`partitions` partitions,
    replication factor 3, `config` its settings), every partition led with all three in
    sync; returns the brokers, their addresses and the topic's partitions as Metadata
    shows them. `hosts`, `groups`, `env`, `before_start` and `args` place the brokers as
    start_cluster does."""
    brokers = start_cluster(make_broker, hosts=hosts, groups=groups, env=env,
                            before_start=before_start, args=args)
    bootstraps = [b.bootstrap for b in brokers]
    wait_until(lambda: all_agree(bootstraps, 3), "three brokers, one controller", CLUSTER_UP_S)
    admin = AdminClient(rdkafka_base(",".join(bootstraps)))
    raise_on_error(admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=3, config=config or {})],
        operation_timeout=ADMIN_TIMEOUT_S, request_timeout=ADMIN_TIMEOUT_S))
    led = wait_until(lambda: led_by(bootstraps, topic, {1, 2, 3}, 3),
                     "the topic led, ISR 3", CLUSTER_UP_S)
    return brokers, bootstraps, led
