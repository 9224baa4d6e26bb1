"""scripts/setup on a machine that lacks what the suite needs.

Goal: setup brings the JDK and Maven itself when `java`, `javac` and `mvn` are not on PATH,
and they are then found where the tests look (setup's tools directory, which scripts/test
puts first on PATH); without Go, the one prerequisite setup cannot install, it stops at
once with one line naming the version and where the suite needs it, before installing or
linking anything.
Method: setup runs with a PATH made of one directory of links to every program on the
caller's PATH except the hidden ones (so java and mvn stay hidden even when they live in
/usr/bin with everything else) and a tools directory of the test's own. Where Debian's
openjdk-17-jdk-headless and maven are already installed, setup finds them through dpkg
instead of on PATH; where they are not, it installs them with apt-get (CI runs as root).
Every other step of setup is already done by then (scripts/test runs setup first), so a
run takes seconds.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT

SETUP = REPO_ROOT / "scripts" / "setup"
# Generous: where the JDK and Maven are not installed, setup installs them from Debian.
SETUP_TIMEOUT_S = 900.0
GO_VERSION_NEEDED = re.search(
    r"^go (\S+)$", (REPO_ROOT / "tests" / "go" / "go.mod").read_text(), re.MULTILINE
).group(1)


def path_without(tmp_path: Path, hidden: set[str]) -> Path:
    """A directory of links to the first of each program on PATH, except `hidden`."""
    farm = tmp_path / "path"
    farm.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        try:
            entries = list(os.scandir(directory or "."))
        except OSError:
            continue
        for entry in entries:
            link = farm / entry.name
            if entry.name in hidden or link.exists() or link.is_symlink():
                continue
            if entry.is_file() and os.access(entry.path, os.X_OK):
                link.symlink_to(os.path.abspath(entry.path))
    return farm


def run_setup(path: str, tools_bin: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=path, HEADWAY_TOOLS_BIN=str(tools_bin))
    return subprocess.run([str(SETUP)], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=SETUP_TIMEOUT_S)


def test_setup_brings_java_and_maven_when_path_has_neither(tmp_path):
    farm = path_without(tmp_path, {"java", "javac", "mvn"})
    for name in ("java", "javac", "mvn"):
        assert not (farm / name).exists(), f"{name} is still on the test's PATH"
    tools_bin = tmp_path / "tools" / "bin"

    result = run_setup(str(farm), tools_bin)
    assert result.returncode == 0, (
        f"scripts/setup failed (exit {result.returncode}) without java and mvn on PATH:\n"
        f"{result.stdout}\n{result.stderr}")
    # It says where each came from.
    for name in ("javac", "mvn"):
        said = rf"^setup: (no usable {name} on PATH|{name} from )"
        assert re.search(said, result.stdout, re.MULTILINE), result.stdout

    # Found, and working, where the tests look for them.
    tests_path = f"{tools_bin}{os.pathsep}{farm}"
    env = dict(os.environ, PATH=tests_path)
    env.pop("JAVA_HOME", None)
    java = subprocess.run(["java", "-version"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert java.returncode == 0 and "version" in java.stderr, java.stderr
    javac = subprocess.run(["javac", "-version"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert javac.returncode == 0 and javac.stdout.startswith("javac "), javac.stderr
    mvn = subprocess.run(["mvn", "-v"], env=env, capture_output=True, text=True, timeout=120)
    assert mvn.returncode == 0 and "Apache Maven" in mvn.stdout, mvn.stdout + mvn.stderr


@pytest.mark.parametrize("go", ["missing", "too old"])
def test_setup_without_go_stops_at_once_with_one_line(tmp_path, go):
    farm = path_without(tmp_path, {"go", "gofmt", "java", "javac", "mvn"})
    if go == "too old":
        fake = farm / "go"
        fake.write_text("#!/bin/sh\necho 'go version go1.19.8 linux/amd64'\n")
        fake.chmod(0o755)
    tools_bin = tmp_path / "tools" / "bin"

    result = run_setup(str(farm), tools_bin)
    assert result.returncode != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got:\n{result.stderr}"
    line = lines[0]
    assert f"Go {GO_VERSION_NEEDED} or newer" in line, line
    assert "tests/go" in line and "https://go.dev/dl" in line, line
    if go == "too old":
        assert "1.19.8" in line, line
    # Nothing was done before it stopped: no step reported, nothing installed or linked.
    assert result.stdout == "", result.stdout
    assert not tools_bin.parent.exists()
