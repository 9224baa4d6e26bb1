"""The history checker (tests/python/history.py) on histories written by hand: a clean one
has no anomaly, and each kind of anomaly is found where it was put. No broker."""

from __future__ import annotations

from history import History, check


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
