"""franz-go's own pkg/kgo test suite, bounded subsets, against one headway broker and
against three headway brokers started as one cluster.

Goal, one broker: the tests of franz-go's suite (the release pinned in tests/go/go.mod)
named in KGO_TESTS pass against one headway broker with default settings: the share group
tests TestShareGroupETL (two levels of share groups, each set to
`share.auto.offset.reset=earliest` and `share.record.lock.duration.ms=15000` through
IncrementalAlterConfigs on their GROUP config resource, consuming half a million records
with accepts, releases, rejects and consumers killed mid-way) and TestShareGroupAckOnClose.

Goal, three brokers: the 29 tests named in KGO_CLUSTER_TESTS (produce, consume, metadata
and admin tests: topics created and deleted, partitions added, records produced, fetched,
paused, purged and listed by offset and time; three group tests, a KIP-848 regex
subscription among them; none begins a transaction, since the transaction coordinator
is not clustered yet) pass against three brokers
started as tests/python/cluster_support.py `start_cluster` does, with KGO_SEEDS
naming all three and KGO_TEST_RF=3: every topic the suite creates is replicated to all
three brokers, and franz-go's producer (acks=all by default) waits for the followers.

Method: the suite is compiled with `go test -c` from the module cache (no copy of it is
kept here) and run with KGO_SEEDS and KGO_TEST_RF, `-test.run` limited to the subset,
under `-test.timeout`; a test passes when the suite's exit status is 0 and each test of
the subset reports PASS.

The whole suite (about 150 tests, the group, share group and transaction tests among
them) runs only when asked, against the three brokers at KGO_TEST_RF=3 (`rf3`) or one
broker at KGO_TEST_RF=1 (`one_broker`), from the suite's package directory as `go test`
would, under a 40 minute `-test.timeout`:
`HEADWAY_KGO_FULL=1 pytest tests/python/test_franz_go_kgo.py -k 'full and rf3'`.
HEADWAY_KGO_LOG names the file the suite's output goes to (default: the test's temporary
directory); HEADWAY_KGO_RUN and HEADWAY_KGO_SKIP are passed as `-test.run` and
`-test.skip`. It fails, listing the failed tests, unless every test passed;
bench/results/kgo-rf3.md records such runs and why each failure fails.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from cluster_support import CLUSTER_UP_S, all_agree, start_cluster
from go_support import build_kgo_suite, franz_go_module_dir
from support import wait_until

KGO_TESTS = ("TestShareGroupETL", "TestShareGroupAckOnClose")
SUITE_TIMEOUT_S = 600

# Topics created at KGO_TEST_RF, produced to and read from their leaders; no group joined,
# no transaction begun.
KGO_CLUSTER_TESTS = (
    "TestAddRemovePartitions", "TestClient_Produce", "TestClient_ProduceLargeMessages",
    "TestConsumeMaxDecompressBatchBytes", "TestConsumeRegex", "TestConsumeTopicRetrieval",
    "TestConsumeTopicRetrieval_Many", "TestDirectPartitionPurge",
    "TestEachTopicPreservesTopicID", "TestHookPollStart", "TestIssue1034", "TestIssue325",
    "TestIssue337", "TestIssue434", "TestIssue648", "TestIssue769", "TestIssue810",
    "TestIssue831", "TestIssue865", "TestIssueFetchLargerThanBrokerMaxReadBytes",
    "TestIssueProduceSyncManualPartitionNegativeDoesNotPanic", "TestLookbackMilli",
    "TestPauseIssue489", "TestPauseIssueOct2023", "TestPing", "TestPooling",
    # Groups, whose coordinators lead their partitions of the replicated __consumer_offsets.
    "Test848RegexBrokerResolves", "TestGroupSimple", "TestUnknownGroupOffsetFetchPinned",
)
CLUSTER_SUITE_TIMEOUT_S = 600
FULL_SUITE_TIMEOUT_S = 2400


@pytest.fixture(scope="module")
def kgo_suite(tmp_path_factory) -> Path:
    return build_kgo_suite(tmp_path_factory)


def kgo_env(seeds: list[str], rf: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGO_")}
    env.update({"KGO_SEEDS": ",".join(seeds), "KGO_TEST_RF": str(rf)})
    return env


def summary_of(stdout: str) -> str:
    summary = [line for line in stdout.splitlines()
               if line.startswith(("--- ", "    ", "FAIL", "PASS", "panic"))]
    return "\n".join(summary[-80:]) or stdout[-4000:]


def run_subset(kgo_suite: Path, tmp_path: Path, seeds: list[str], rf: int,
               names: tuple[str, ...], timeout_s: int) -> None:
    run = "^(" + "|".join(names) + ")$"
    result = subprocess.run([str(kgo_suite), "-test.run", run, "-test.v",
                             "-test.timeout", f"{timeout_s}s"],
                            cwd=tmp_path, env=kgo_env(seeds, rf), capture_output=True,
                            text=True, timeout=timeout_s + 60)
    shown = summary_of(result.stdout)
    assert result.returncode == 0, f"kgo suite exited {result.returncode}\n{shown}"
    for name in names:
        assert f"--- PASS: {name} " in result.stdout, f"{name} did not pass\n{shown}"


def started_cluster(make_broker) -> list[str]:
    """Three brokers as one cluster, once every one of them shows all three."""
    brokers = start_cluster(make_broker)
    bootstraps = [b.bootstrap for b in brokers]
    wait_until(lambda: all_agree(bootstraps, 3), "three brokers, one controller",
               CLUSTER_UP_S)
    return bootstraps


def test_franz_go_kgo_share_group_tests_pass(make_broker, kgo_suite, tmp_path):
    broker = make_broker()
    run_subset(kgo_suite, tmp_path, [broker.bootstrap], 1, KGO_TESTS, SUITE_TIMEOUT_S)


def test_franz_go_kgo_cluster_tests_pass_at_rf3(make_broker, kgo_suite, tmp_path):
    seeds = started_cluster(make_broker)
    run_subset(kgo_suite, tmp_path, seeds, 3, KGO_CLUSTER_TESTS, CLUSTER_SUITE_TIMEOUT_S)


@pytest.mark.skipif(os.environ.get("HEADWAY_KGO_FULL") != "1",
                    reason="the whole kgo suite runs only with HEADWAY_KGO_FULL=1")
@pytest.mark.parametrize("brokers", [3, 1], ids=["rf3", "one_broker"])
@pytest.mark.timeout(FULL_SUITE_TIMEOUT_S + 300)
def test_franz_go_kgo_full_suite(make_broker, kgo_suite, tmp_path, brokers):
    if brokers == 3:
        seeds = started_cluster(make_broker)
    else:
        seeds = [make_broker().bootstrap]
    log = Path(os.environ.get("HEADWAY_KGO_LOG") or tmp_path / "kgo-full.log")
    with open(log, "w") as out:
        result = subprocess.run([str(kgo_suite), "-test.v",
                                 "-test.run", os.environ.get("HEADWAY_KGO_RUN", ""),
                                 "-test.skip", os.environ.get("HEADWAY_KGO_SKIP", ""),
                                 "-test.timeout", f"{FULL_SUITE_TIMEOUT_S}s"],
                                cwd=franz_go_module_dir() / "pkg" / "kgo",
                                env=kgo_env(seeds, brokers), stdout=out,
                                stderr=subprocess.STDOUT, timeout=FULL_SUITE_TIMEOUT_S + 120)
    text = log.read_text("utf-8", "replace")
    passed = re.findall(r"^--- PASS: (\S+)", text, re.M)
    failed = re.findall(r"^--- FAIL: (\S+)", text, re.M)
    skipped = re.findall(r"^--- SKIP: (\S+)", text, re.M)
    counts = f"{len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped; log {log}"
    assert result.returncode == 0 and not failed, \
        f"kgo suite exited {result.returncode}: {counts}\nfailed: {' '.join(failed)}"
