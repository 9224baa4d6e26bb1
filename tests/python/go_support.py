"""Building the Go programs of tests/go (franz-go's check programs) for the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT

GO_MODULE_DIR = REPO_ROOT / "tests" / "go"
# A cold build compiles franz-go and the standard library on two busy cores.
GO_BUILD_TIMEOUT_S = 900.0


def build_go_command(tmp_path_factory, name: str) -> Path:
    """Builds tests/go/cmd/<name> into a temporary directory; fails (never skips) when
    Go is missing, since franz-go is one of the clients headway must serve."""
    go = shutil.which("go")
    if go is None:
        pytest.fail("the Go toolchain is not installed: install Go (1.26 or newer, see "
                    "tests/go/go.mod), then run scripts/setup-go", pytrace=False)
    out = tmp_path_factory.mktemp(name) / name
    # GOTOOLCHAIN=local: never download another toolchain in the middle of a test run.
    # -mod=readonly: go.mod and go.sum are the pins; a build must not rewrite them.
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly -buildvcs=false"}
    result = subprocess.run([go, "build", "-o", str(out), f"./cmd/{name}"],
                            cwd=GO_MODULE_DIR, env=env, capture_output=True, text=True,
                            timeout=GO_BUILD_TIMEOUT_S)
    if result.returncode != 0:
        pytest.fail(f"go build ./cmd/{name} failed (exit {result.returncode}); "
                    f"did scripts/setup-go run?\n{result.stderr}", pytrace=False)
    return out


def franz_go_module_dir() -> Path:
    """The franz-go module pinned in tests/go/go.mod, as scripts/setup-go downloaded it
    into the module cache (read-only)."""
    go = shutil.which("go")
    if go is None:
        pytest.fail("the Go toolchain is not installed: install Go (1.26 or newer, see "
                    "tests/go/go.mod), then run scripts/setup-go", pytrace=False)
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly -buildvcs=false"}
    found = subprocess.run([go, "list", "-m", "-f", "{{.Dir}}", "github.com/twmb/franz-go"],
                           cwd=GO_MODULE_DIR, env=env, capture_output=True, text=True,
                           timeout=120)
    module_dir = found.stdout.strip()
    if found.returncode != 0 or not module_dir:
        pytest.fail(f"the franz-go module is not downloaded; did scripts/setup-go run?\n"
                    f"{found.stderr}", pytrace=False)
    return Path(module_dir)


def build_kgo_suite(tmp_path_factory) -> Path:
    """Compiles franz-go's own pkg/kgo test suite (`go test -c`) from the franz-go module
    pinned in tests/go/go.mod; returns the test binary. Its tests run against the broker
    named by KGO_SEEDS; a run of the whole suite runs in franz_go_module_dir() / "pkg/kgo",
    as `go test` would (one test reads the package's source)."""
    go = shutil.which("go")
    module_dir = franz_go_module_dir()
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly -buildvcs=false"}
    out = tmp_path_factory.mktemp("kgo") / "kgo.test"
    result = subprocess.run([go, "test", "-c", "-o", str(out), "./pkg/kgo"], cwd=module_dir,
                            env=env, capture_output=True, text=True,
                            timeout=GO_BUILD_TIMEOUT_S)
    if result.returncode != 0:
        pytest.fail(f"go test -c ./pkg/kgo failed (exit {result.returncode})\n"
                    f"{result.stderr}", pytrace=False)
    return out
