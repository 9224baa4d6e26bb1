"""The history checker (tests/python/history.py) on histories written by hand: a clean one
has no anomaly, and each kind of anomaly is found where it was put. No broker."""

from __future__ import annotations

from history import ABORTED, COMMITTED, INDETERMINATE, Batch, History, check


def clean() -> History:
    h = History()
    for i in range(6):
        s = h.sent(writer=i % 2, partition=0, value=f"v{i}")
        s.offset = i
    h.sent(writer=0, partition=0, value="timed-out")  # indeterminate, not written
    h.final = {0: {i: f"v{i}" for i in range(6)}}
    h.final_start = {0: 0}
    h.polled("r1", [(0, 0, "v0"), (0, 1, "v1"), (0, 2, "v2")])
    h.polled("r1", [(0, 3, "v3")])
    return h


def test_a_clean_history_has_no_anomaly():
    assert check(clean()) == []


def test_each_anomaly_is_found():
    lost = clean()
    del lost.final[0][5]
    assert any(a.startswith("lost: v5") for a in check(lost))

    dup = clean()
    dup.final[0][6] = "v2"
    assert any(a.startswith("duplicate: v2") for a in check(dup))
    assert dup.client_resends == []


def test_a_resend_across_an_epoch_bump_is_the_clients_and_other_duplicates_are_not():
    def duplicated(second: Batch) -> History:
        h = clean()
        h.final[0][6] = "v2"
        h.final_start = {0: 0}
        h.log = {0: [Batch(i, i, 7, epoch=0) for i in range(6)] + [second]}
        return h

    # One producer, the copy under a later epoch: librdkafka's resend after its bump.
    bumped = duplicated(Batch(6, 6, 7, epoch=1))
    assert check(bumped) == []
    assert bumped.client_resends == ["v2: producer 7: 0/2 epoch 0, 0/6 epoch 1"]
    # Still duplicates: the same epoch (the broker should have known the resend), two
    # producers, a transactional batch, a batch without a producer id.
    for second in (Batch(6, 6, 7, epoch=0), Batch(6, 6, 8, epoch=1),
                   Batch(6, 6, 7, True, epoch=1), Batch(6, 6, -1, epoch=1)):
        h = duplicated(second)
        assert any(a.startswith("duplicate: v2") for a in check(h)), second
        assert h.client_resends == []


def test_more_anomalies_are_found():
    two_values = clean()
    two_values.polled("r2", [(0, 1, "v4")])
    assert any(a.startswith("inconsistent offset: 0/1") for a in check(two_values))

    out_of_order = clean()
    out_of_order.sends[2].offset, out_of_order.sends[4].offset = 4, 2
    out_of_order.final[0][2], out_of_order.final[0][4] = "v4", "v2"
    assert any(a.startswith("non-monotonic send: writer 0") for a in check(out_of_order))

    skipped = clean()
    skipped.polled("r1", [(0, 5, "v5")])
    assert any(a.startswith("skipped offset: r1") for a in check(skipped))

    back = clean()
    back.polled("r1", [(0, 1, "v1")])
    assert any(a.startswith("non-monotonic poll: r1") for a in check(back))
    assert check(back, group_readers={"r1"}) == []

    gap = clean()
    del gap.final[0][2]
    gap.sends[2].offset = None
    assert any(a.startswith("gap in the final read: 0/[2]") for a in check(gap))

    refused = clean()
    refused.sends[6].failed = True
    refused.final[0][6] = "timed-out"
    assert any(a.startswith("written after a definite failure") for a in check(refused))

    unknown = clean()
    unknown.final[0][6] = "never-sent"
    assert any(a.startswith("unknown value: never-sent") for a in check(unknown))


# -- transactions ----------------------------------------------------------------------------
#
# Writer 0 is idempotent; writer 5 is transactional (producer id 5). Partition 0's log:
# 0-1 v0 v1, 2-3 a0 a1 (transaction A), 4 A's commit marker, 5 b0 (transaction B), 6 B's
# abort marker, 7 v2. Partition 1: 0 a2, 1 A's commit marker, 2 b1, 3 B's abort marker.
# A's commit was asked for at t=100; B was aborted on purpose.

def clean_txn() -> History:
    h = History()
    for i, offset in enumerate([0, 1, 7]):
        h.sent(writer=0, partition=0, value=f"v{i}").offset = offset
    a = h.began(writer=5, number=0)
    for value, partition, offset in [("a0", 0, 2), ("a1", 0, 3), ("a2", 1, 0)]:
        h.sent(5, partition, value, txn=a).offset = offset
    a.commit_at, a.outcome = 100.0, COMMITTED
    b = h.began(writer=5, number=1)
    for value, partition, offset in [("b0", 0, 5), ("b1", 1, 2)]:
        h.sent(5, partition, value, txn=b).offset = offset
    b.outcome = ABORTED
    h.final = {0: {0: "v0", 1: "v1", 2: "a0", 3: "a1", 7: "v2"}, 1: {0: "a2"}}
    h.final_start = {0: 0, 1: 0}
    h.final_end = {0: 8, 1: 4}
    h.log = {
        0: [Batch(0, 1), Batch(2, 3, 5, True), Batch(4, 4, 5, True, "commit"),
            Batch(5, 5, 5, True), Batch(6, 6, 5, True, "abort"), Batch(7, 7)],
        1: [Batch(0, 0, 5, True), Batch(1, 1, 5, True, "commit"), Batch(2, 2, 5, True),
            Batch(3, 3, 5, True, "abort")],
    }
    h.committed_readers = {"rc", "member"}
    # read_committed: skips the markers and B's data; after A's commit was asked for.
    h.polled("rc", [(0, 0, "v0"), (0, 1, "v1")], at=90.0)
    h.polled("rc", [(0, 2, "a0"), (0, 3, "a1"), (1, 0, "a2"), (0, 7, "v2")], at=100.5)
    # read_uncommitted: skips only the markers; sees A before its commit and B.
    h.polled("ru", [(0, 0, "v0"), (0, 1, "v1"), (0, 2, "a0"), (1, 0, "a2")], at=50.0)
    h.polled("ru", [(0, 3, "a1"), (0, 5, "b0"), (1, 2, "b1"), (0, 7, "v2")], at=60.0)
    h.polled("member", [(1, 0, "a2"), (0, 7, "v2")], at=101.0)
    return h


def found(history: History, prefix: str, **kwargs) -> bool:
    return any(a.startswith(prefix) for a in check(history, **kwargs))


def test_a_clean_transactional_history_has_no_anomaly():
    assert check(clean_txn(), group_readers={"member"}) == []
    # Indeterminate transactions may be in the final read whole, or not at all.
    h = clean_txn()
    h.txns[0].outcome = INDETERMINATE
    h.txns[1].commit_at, h.txns[1].outcome = 110.0, INDETERMINATE
    assert check(h, group_readers={"member"}) == []


def test_each_transactional_anomaly_is_found():
    g1a_poll = clean_txn()
    g1a_poll.polled("member", [(1, 2, "b1")], at=120.0)
    assert found(g1a_poll, "aborted read (G1a): member read b1 of writer 5 transaction 1",
                 group_readers={"member"})
    # The same read by a read_uncommitted reader is no anomaly.
    g1a_poll.committed_readers = {"rc"}
    assert check(g1a_poll, group_readers={"member"}) == []

    g1a_final = clean_txn()
    g1a_final.final[0][5] = "b0"
    assert found(g1a_final, "aborted read (G1a): the final read holds 1 of 2 values of "
                 "writer 5 transaction 1")

    early = clean_txn()
    early.polled("member", [(0, 3, "a1")], at=99.0)
    assert found(early, "uncommitted read: member read a1 of writer 5 transaction 0",
                 group_readers={"member"})

    partial = clean_txn()
    del partial.final[1][0]
    partial.sends[5].offset = None  # a2 never acknowledged: only the transaction tells
    assert found(partial, "partial transaction: the final read holds 2 of 3 values of "
                 "writer 5 transaction 0")
    partial.txns[0].outcome = INDETERMINATE
    assert found(partial, "partial transaction")

    gone = clean_txn()
    for offset in (2, 3):
        del gone.final[0][offset]
    del gone.final[1][0]
    for s in gone.txns[0].sends:
        s.offset = None
    assert found(gone, "lost committed transaction: none of the 3 values of writer 5 "
                 "transaction 0")
    assert found(gone, "gap in the final read: 0/[2, 3]")

    # A read_uncommitted reader skipping aborted data skipped a record it should have had.
    skipped = clean_txn()
    skipped.polls["ru"] = [r for r in skipped.polls["ru"] if r[2] != "b0"]
    skipped.read_at["ru"] = skipped.read_at["ru"][:len(skipped.polls["ru"])]
    assert found(skipped, "skipped offset: ru read 0/7 after 3")
    # A read_committed reader skipping committed data did too.
    skipped_rc = clean_txn()
    skipped_rc.polls["rc"] = [r for r in skipped_rc.polls["rc"] if r[2] != "a1"]
    assert found(skipped_rc, "skipped offset: rc read 0/7 after 2")

    left_open = clean_txn()
    left_open.log[1].append(Batch(4, 4, 5, True))
    left_open.final_end[1] = 5
    assert found(left_open, "transaction left open: 1/4 onwards, producer 5")

    # Without the log map the markers are not known: their offsets are gaps.
    unmapped = clean_txn()
    unmapped.log = {}
    assert found(unmapped, "gap in the final read: 0/[4, 5, 6]")

    at_marker = clean_txn()
    at_marker.final[0][4] = "v3"
    at_marker.sent(writer=0, partition=0, value="v3")
    assert found(at_marker, "inconsistent offset: the final read has values at markers 0/[4]")
