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
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cluster_support import CLUSTER_UP_S, FENCED_WITHIN_S, NOT_LEADER_OR_FOLLOWER, all_agree, \
    metadata, produce_v3, start_cluster
from support import ADMIN_TIMEOUT_S, ErrorLog, raise_on_error, rdkafka_base, read_records, \
    wait_until


def registered_epoch(broker, start: int) -> int:
    """The epoch the broker's `start`-th run (1-based) registered at, from its log."""
    text = broker.stderr_path.read_text("utf-8", "replace")
    runs = text.split("### headway start #")
    found = re.findall(r"broker registered with the controller.*?epoch=(\d+)", runs[start])
    return int(found[-1]) if found else 0


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
