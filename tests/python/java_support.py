"""Running the Java programs of tests/java (clients' check programs and Kafka
applications) from the tests: each prints JSON lines on stdout, read here as events."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT

JAVA_DIR = REPO_ROOT / "tests" / "java"
JVM_OPTIONS = ["-XX:+UseSerialGC", "-Xmx512m",
               "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
               "-Dorg.slf4j.simpleLogger.showDateTime=true"]
JAVA_DEADLINE_S = 300.0


class JavaClient:
    """One set of Java libraries (tests/java/lib-*, made by scripts/setup from a
    tests/java/pom-*.xml) with the programs compiled against it (tests/java/classes-*):
    runs those programs."""

    def __init__(self, lib_dir: str, classes_dir: str, marker: str, log_dir: Path):
        lib, classes = JAVA_DIR / lib_dir, JAVA_DIR / classes_dir
        jars = sorted(lib.glob("kafka-clients-*.jar"))
        if not jars or not (classes / f"{marker}.class").is_file():
            pytest.fail(f"Java programs not set up ({lib}, {classes}): run scripts/setup",
                        pytrace=False)
        self.version = jars[0].name[len("kafka-clients-"):-len(".jar")]
        self.classpath = f"{classes}:{lib}/*"
        self.log_dir = log_dir
        self.runs = 0

    def command(self, main: str, *args: str) -> list[str]:
        return ["java", *JVM_OPTIONS, "-cp", self.classpath, main, *args]

    def _stderr_path(self, main: str) -> Path:
        self.runs += 1
        return self.log_dir / f"java-{self.runs}-{main}.stderr.log"

    def run(self, main: str, *args: str, timeout_s: float = JAVA_DEADLINE_S) -> list[dict]:
        """Runs a check program to its end; returns its JSON lines. Fails when it exits
        with an error, unless it reported that error as an event."""
        stderr_path = self._stderr_path(main)
        with open(stderr_path, "wb") as err:
            try:
                proc = subprocess.run(self.command(main, *args), stdout=subprocess.PIPE,
                                      stderr=err, timeout=timeout_s, cwd=self.log_dir)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{main} (kafka-clients {self.version}) did not finish "
                                     f"within {timeout_s:.0f} s\n{tail(stderr_path)}") from None
        events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        if proc.returncode != 0 and not any(e.get("event") == "error" for e in events):
            raise AssertionError(f"{main} (kafka-clients {self.version}) exited with "
                                 f"{proc.returncode}\n{tail(stderr_path)}")
        return events

    def start(self, main: str, *args: str, stdin: bool = False) -> "JavaProcess":
        """Starts a program in the background; with `stdin`, its standard input is a pipe
        that stays open until `JavaProcess.close_stdin`."""
        return JavaProcess(self, main, self.command(main, *args), self._stderr_path(main),
                           stdin)


class EventLog:
    """Events (dicts) from a check client, waited on with a deadline. `what` names the
    client in failures; subclasses say whether it still runs and what to show of it."""

    def __init__(self, what: str):
        self.what = what
        self.events: list[dict] = []
        self._cond = threading.Condition()

    def add(self, event: dict) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def gone(self) -> str | None:
        """Why the client can send no more events, if it can't."""
        return None

    def detail(self) -> str:
        """What to show of the client with a failure (e.g. the end of its stderr)."""
        return ""

    def wait_event(self, predicate, deadline_s: float, what: str) -> dict:
        """The first event matching predicate; fails on an "error" event, when the
        client is gone, or at the deadline."""
        deadline = time.monotonic() + deadline_s
        with self._cond:
            while True:
                for e in self.events:
                    if predicate(e):
                        return e
                    if e.get("event") == "error":
                        raise AssertionError(f"{self.what}: {e['error']}{self.detail()}")
                gone = self.gone()
                if gone is not None:
                    raise AssertionError(f"{self.what} {gone} before {what}{self.detail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self.what}: no {what} within {deadline_s:.0f} s; "
                                         f"events so far {self.events[-5:]}{self.detail()}")
                self._cond.wait(timeout=min(left, 0.5))


class LineProcess(EventLog):
    """A check program (of any language) running in the background; its JSON lines
    arrive as events. `what` names it in failures; its stderr goes to `stderr_path`."""

    def __init__(self, what: str, command: list[str], stderr_path: Path, cwd: Path,
                 stdin: bool = False):
        super().__init__(what)
        self.stderr_path = stderr_path
        with open(stderr_path, "wb") as err:
            self.proc = subprocess.Popen(command,
                                         stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=err, cwd=cwd)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.strip():
                self.add(json.loads(line))
        with self._cond:
            self._cond.notify_all()

    def gone(self) -> str | None:
        return None if self._reader.is_alive() else f"exited ({self.proc.poll()})"

    def detail(self) -> str:
        return f"\n{tail(self.stderr_path)}"

    def close_stdin(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()

    def finish(self, deadline_s: float) -> int:
        try:
            return self.proc.wait(timeout=deadline_s)
        finally:
            self.kill()

    def kill(self) -> None:
        kill(self.proc)
        self._reader.join(timeout=10)


class JavaProcess(LineProcess):
    """A Java check program running in the background."""

    def __init__(self, client: JavaClient, main: str, command: list[str], stderr_path: Path,
                 stdin: bool = False):
        super().__init__(f"{main} (kafka-clients {client.version})", command, stderr_path,
                         client.log_dir, stdin)


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except FileNotFoundError:
        return ""
    return f"--- last {len(text)} lines of {path} ---\n" + "\n".join(text)


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL, if it still runs, and reap."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)
