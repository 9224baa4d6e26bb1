"""franz-go's own pkg/kgo test suite, a bounded subset, against headway.

Goal: the tests of franz-go's suite (the release pinned in tests/go/go.mod) named in
KGO_TESTS pass against one headway broker with default settings: the share group tests
TestShareGroupETL (two levels of share groups, each set to `share.auto.offset.reset=
earliest` and `share.record.lock.duration.ms=15000` through IncrementalAlterConfigs on
their GROUP config resource, consuming half a million records with accepts, releases,
rejects and consumers killed mid-way) and TestShareGroupAckOnClose.
Method: the suite is compiled with `go test -c` from the module cache (no copy of it is
kept here) and run with KGO_SEEDS pointing at the broker and KGO_TEST_RF=1 (one broker),
`-test.run` limited to the subset, under `-test.timeout`; the test passes when the
suite's exit status is 0 and each test of the subset reports PASS.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from go_support import build_kgo_suite

KGO_TESTS = ("TestShareGroupETL", "TestShareGroupAckOnClose")
SUITE_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def kgo_suite(tmp_path_factory) -> Path:
    return build_kgo_suite(tmp_path_factory)


def test_franz_go_kgo_share_group_tests_pass(make_broker, kgo_suite, tmp_path):
    broker = make_broker()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KGO_")}
    env.update({"KGO_SEEDS": broker.bootstrap, "KGO_TEST_RF": "1"})
    run = "^(" + "|".join(KGO_TESTS) + ")$"
    result = subprocess.run([str(kgo_suite), "-test.run", run, "-test.v",
                             "-test.timeout", f"{SUITE_TIMEOUT_S}s"],
                            cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=SUITE_TIMEOUT_S + 60)
    summary = [line for line in result.stdout.splitlines()
               if line.startswith(("--- ", "    share_test.go", "FAIL", "PASS", "panic"))]
    shown = "\n".join(summary[-60:]) or result.stdout[-4000:]
    assert result.returncode == 0, f"kgo suite exited {result.returncode}\n{shown}"
    for name in KGO_TESTS:
        assert f"--- PASS: {name} " in result.stdout, f"{name} did not pass\n{shown}"
