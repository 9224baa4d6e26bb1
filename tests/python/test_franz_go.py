"""franz-go, the Go client, against headway with its default settings.

Goal: franz-go (github.com/twmb/franz-go/pkg/kgo, pinned in tests/go/go.mod) works with
headway as it comes: its idempotent producer (on by default) gets a producer id and every
record is stored exactly once at the offset it was acknowledged with; its consumer group
(classic protocol, franz-go's default cooperative-sticky balancer) reads every record
once and commits; the committed offsets are what `headway group describe` shows, and a
later run of the same group reads only what was produced since, also after the broker
was SIGKILLed and restarted.
Method: tests/go/cmd/franzcheck (built once per session with `go build`, default build
cache) produces keyed test records, consumes them in a group until every partition's
position reaches the listed end offset, commits, and prints a JSON summary, which the
tests assert on. What franz-go wrote is then read back independently with librdkafka and
checked byte for byte with support.check_records.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import HEADWAY_BIN
from go_support import build_go_command
from support import check_all_present, check_records, consume_all, create_topic

GROUP_ARGS = ("--group-initial-rebalance-delay-ms", "0")
PARTITIONS = 3
RECORDS = 3_000
MORE_RECORDS = 700
# franzcheck's own deadline, and a little more for the process as a whole.
FRANZCHECK_DEADLINE_S = 180
FRANZCHECK_TIMEOUT_S = FRANZCHECK_DEADLINE_S + 60.0
CLI_TIMEOUT_S = 60.0


@pytest.fixture(scope="session")
def franzcheck(tmp_path_factory) -> Path:
    """tests/go/cmd/franzcheck, built once per session."""
    return build_go_command(tmp_path_factory, "franzcheck")


def run_franzcheck(binary: Path, bootstrap: str, topic: str, group: str, first: int,
                   count: int) -> dict:
    """Runs one franzcheck pass and returns its summary; fails with its stderr (franz-go's
    warnings) when it reported an error."""
    args = [str(binary), "-brokers", bootstrap, "-topic", topic, "-group", group,
            "-from", str(first), "-count", str(count), "-timeout", f"{FRANZCHECK_DEADLINE_S}s"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=FRANZCHECK_TIMEOUT_S)
    try:
        summary = json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"franzcheck exited {result.returncode} without a summary\n"
                    f"stdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-4000:]}",
                    pytrace=False)
    if result.returncode != 0 or summary["error_count"]:
        shown = "\n  ".join(summary["errors"])
        raise AssertionError(
            f"franzcheck -from {first} -count {count}: exit {result.returncode}, "
            f"{summary['error_count']} errors:\n  {shown}\n"
            f"summary: {json.dumps({k: v for k, v in summary.items() if k != 'errors'})}\n"
            f"franz-go log (warnings and errors):\n{result.stderr[-4000:]}")
    return summary


def by_partition(offsets: dict) -> dict[int, int]:
    """JSON object keys are strings; partitions are ints."""
    return {int(p): o for p, o in (offsets or {}).items()}


def check_pass(summary: dict, first: int, count: int, ends_before: dict[int, int]) -> None:
    """What every franzcheck pass must show: `count` records acknowledged by an idempotent
    producer, exactly those records read once, and the commit at the log end."""
    ends = by_partition(summary["end_offsets"])
    assert set(ends) == set(range(PARTITIONS)), summary
    assert summary["produced"] == count, summary
    if count:
        assert summary["producer_id"] >= 0 and summary["producer_epoch"] >= 0, (
            f"franz-go's default producer is idempotent: expected a producer id, "
            f"got {summary['producer_id']}/{summary['producer_epoch']}")
    # The partition and offset each record was acknowledged with are where the log put it:
    # new records sit right after the previous end, densely.
    for p, ps in by_partition(summary["produced_partitions"]).items():
        assert ps["first_offset"] == ends_before.get(p, 0), (p, ps, ends_before)
        assert ps["last_offset"] - ps["first_offset"] + 1 == ps["count"], (p, ps)
        assert ps["last_offset"] + 1 == ends[p], (p, ps, ends)
    assert sum(ends.values()) - sum(ends_before.values()) == count, (ends, ends_before)
    assert by_partition(summary["committed_before"]) == ends_before, summary
    assert summary["consumed"] == count, summary
    for key in ("duplicates", "duplicate_offsets", "unexpected", "missing", "malformed",
                "produced_elsewhere"):
        assert summary[key] == 0, (key, summary)
    assert by_partition(summary["committed_after"]) == ends, (
        f"committed offsets {summary['committed_after']} are not the log end offsets {ends}")


def describe_committed(bootstrap: str, group: str, topic: str) -> tuple[str, dict]:
    """`headway group describe GROUP`: the group's state line and, per partition of
    `topic`, (committed, log end, lag) as the CLI prints them ('-' for none)."""
    result = subprocess.run([str(HEADWAY_BIN), "group", "describe", group,
                             "-b", bootstrap], capture_output=True, text=True,
                            timeout=CLI_TIMEOUT_S)
    assert result.returncode == 0, f"headway group describe failed: {result.stderr}"
    lines = result.stdout.splitlines()
    rows: dict[int, tuple[str, str, str]] = {}
    header = next((i for i, line in enumerate(lines) if line.split()[:2] == ["TOPIC", "PARTITION"]),
                  None)
    assert header is not None, f"no partition table in:\n{result.stdout}"
    for line in lines[header + 1:]:
        cells = line.split()
        if len(cells) >= 5 and cells[0] == topic:
            rows[int(cells[1])] = (cells[2], cells[3], cells[4])
    return lines[0] if lines else "", rows


def assert_described_at_end(bootstrap: str, group: str, topic: str,
                            ends: dict[int, int]) -> None:
    state, rows = describe_committed(bootstrap, group, topic)
    assert state.startswith(f"group {group}: Empty"), (
        f"franzcheck left the group, so it should be Empty: {state!r}")
    want = {p: (str(ends[p]), str(ends[p]), "0") for p in range(PARTITIONS)}
    assert rows == want, f"headway group describe {group}: {rows} (want {want})"


def test_produce_and_group_consume(make_broker, franzcheck):
    broker = make_broker(*GROUP_ARGS)
    topic, group = "franz", "franz-group"
    create_topic(broker.bootstrap, topic, PARTITIONS)

    first = run_franzcheck(franzcheck, broker.bootstrap, topic, group, 0, RECORDS)
    check_pass(first, 0, RECORDS, {})
    ends = by_partition(first["end_offsets"])
    assert_described_at_end(broker.bootstrap, group, topic, ends)

    # What franz-go wrote, read back by another client: dense offsets, every record byte
    # for byte, each once.
    records = consume_all(broker.bootstrap, topic, PARTITIONS, expected=RECORDS)
    verdict = check_records(records, PARTITIONS)
    check_all_present(verdict, RECORDS)
    verdict.assert_ok("records written by franz-go")

    # The same group again: it resumes from its commits and reads only the new records.
    second = run_franzcheck(franzcheck, broker.bootstrap, topic, group, RECORDS, MORE_RECORDS)
    check_pass(second, RECORDS, MORE_RECORDS, ends)
    ends = by_partition(second["end_offsets"])
    assert_described_at_end(broker.bootstrap, group, topic, ends)

    # And with nothing new: it joins, is assigned every partition, reads nothing.
    third = run_franzcheck(franzcheck, broker.bootstrap, topic, group, RECORDS + MORE_RECORDS, 0)
    check_pass(third, RECORDS + MORE_RECORDS, 0, ends)
    broker.check_alive()


def test_commits_survive_sigkill(make_broker, franzcheck):
    broker = make_broker(*GROUP_ARGS)
    topic, group = "franz-crash", "franz-crash-group"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    first = run_franzcheck(franzcheck, broker.bootstrap, topic, group, 0, RECORDS)
    check_pass(first, 0, RECORDS, {})
    ends = by_partition(first["end_offsets"])

    broker.kill()
    assert broker.returncode == -signal.SIGKILL, broker.returncode
    broker.start()

    # Acknowledged records and acknowledged commits are both durable: the group reads
    # exactly the records produced after the restart, and the producer's new id is not
    # confused with the old one's state.
    second = run_franzcheck(franzcheck, broker.bootstrap, topic, group, RECORDS, MORE_RECORDS)
    check_pass(second, RECORDS, MORE_RECORDS, ends)
    assert second["producer_id"] != first["producer_id"], (
        f"producer id {first['producer_id']} handed out again after a restart")
    assert_described_at_end(broker.bootstrap, group, topic, by_partition(second["end_offsets"]))
    records = consume_all(broker.bootstrap, topic, PARTITIONS, expected=RECORDS + MORE_RECORDS)
    verdict = check_records(records, PARTITIONS)
    check_all_present(verdict, RECORDS + MORE_RECORDS)
    verdict.assert_ok("records written by franz-go across a crash")
    broker.check_alive()
