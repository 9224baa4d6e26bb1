"""Fixtures that run a real headway broker for the compatibility suite.

Each test that asks for `broker` gets its own `headway serve` process on a fresh data
directory under pytest's tmp_path, listening on an ephemeral loopback port. The fixture
waits for the broker's one stdout line (`headway listening on 127.0.0.1:PORT`) instead of
sleeping, and tears the process down whatever happens: SIGTERM first, SIGKILL if that does
not end it. A test that fails gets the tail of the broker's stderr in its report, and a
test fails when a broker it started panicked, even if the broker contained the panic.

The binary comes from $HEADWAY_BIN, default <repo>/target/release/headway.

`kafka_peer` runs Apache Kafka 4.3.1 (peers/kafka/start) once per test module, for tests
that hold headway's answers next to Kafka's; it skips, saying why, where peers/kafka/setup
has not assembled Kafka.
"""

from __future__ import annotations

import atexit
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
HEADWAY_BIN = Path(os.environ.get("HEADWAY_BIN", REPO_ROOT / "target" / "release" / "headway"))

# Generous: a cold start on two busy cores (CI builds in parallel) can be slow.
START_DEADLINE_S = 30.0
STOP_DEADLINE_S = 30.0
STDERR_TAIL_LINES = 60

LISTENING_RE = re.compile(rb"^headway listening on (\S+:\d+)\s*$")
# A panic's report in the broker's log (the hook's ERROR line, or Rust's default one).
PANICKED_RE = re.compile(r"thread '[^']*' panicked at ")
PANIC_CONTEXT_LINES = 25
# The log line of a broker started with metrics_listen (its port may be ephemeral).
METRICS_RE = re.compile(r"serving metrics at /metrics addr=(\S+:\d+)")

# Every broker process started in this session, so that none outlives pytest even when a
# fixture's teardown never runs (e.g. pytest itself is interrupted).
_LIVE_PROCESSES: set[subprocess.Popen] = set()


@atexit.register
def _kill_leftover_brokers() -> None:
    for proc in list(_LIVE_PROCESSES):
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


class BrokerStartError(RuntimeError):
    pass


class Broker:
    """One headway broker on one data directory; it may be stopped and started again.

    Attributes: `bootstrap` ("127.0.0.1:PORT" of the running instance), `data_dir`,
    `stderr_path` (all starts append to it), `returncode` (of the last exited instance).
    `listen` is the address each start listens on: by default a new ephemeral port each
    time, or a fixed "127.0.0.1:PORT" for clients that must find the broker again after a
    restart. `group`, when set, is the group id the process runs as (root only): packet
    filter rules can then tell its sockets from others' (`-m owner --gid-owner`).
    """

    def __init__(self, binary: Path, data_dir: Path, log_dir: Path, extra_args: list[str],
                 extra_env: dict[str, str] | None = None, listen: str = "127.0.0.1:0",
                 open_files_max: int | None = None, group: int | None = None):
        self.binary = binary
        self.open_files_max = open_files_max
        self.group = group
        self.data_dir = data_dir
        self.listen = listen
        self.extra_args = list(extra_args)
        self.extra_env = dict(extra_env or {})
        self.stderr_path = log_dir / "headway.stderr.log"
        self.stdout_path = log_dir / "headway.stdout.log"
        self.bootstrap: str | None = None
        self.returncode: int | None = None
        self.starts = 0
        self._proc: subprocess.Popen | None = None
        self._stdout_thread: threading.Thread | None = None
        # True while the running instance is expected to be alive; False once we signalled it.
        self._expected_alive = False
        self.unexpected_exit: str | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def _limit_files(self) -> None:
        """In the child before exec: the soft and hard open files limit, when asked."""
        if self.open_files_max is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files_max,) * 2)

    def start(self) -> "Broker":
        assert self._proc is None or self._proc.poll() is not None, "broker already running"
        self.starts += 1
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [str(self.binary), "serve", "--data-dir", str(self.data_dir),
                "--listen", self.listen, *self.extra_args]
        # The broker reads every setting from HEADWAY_<NAME> too: keep the caller's
        # environment (HEADWAY_BIN, a stray HEADWAY_DATA_DIR...) out of it, except the
        # log filter HEADWAY_LOG (e.g. HEADWAY_LOG=info,headway_server::handlers=debug)
        # and the deliberately broken high watermark that proves the fault tests'
        # checker catches lost writes (HEADWAY_UNSAFE_HIGH_WATERMARK, docs/cluster.md).
        passed = ("HEADWAY_LOG", "HEADWAY_UNSAFE_HIGH_WATERMARK")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("HEADWAY_") or k in passed}
        env["NO_COLOR"] = "1"  # plain log lines in the stderr file
        env.update(self.extra_env)
        with open(self.stderr_path, "ab") as err:
            err.write(f"### headway start #{self.starts}: {' '.join(args)}\n".encode())
            err.flush()
            self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=err, env=env, preexec_fn=self._limit_files,
                                          group=self.group)
        _LIVE_PROCESSES.add(self._proc)
        self.returncode = None
        self.bootstrap = None
        self._expected_alive = True

        listening = threading.Event()
        found: list[str] = []
        proc = self._proc

        def pump_stdout() -> None:
            # Reads stdout to its end so the broker can never block on a full pipe.
            with open(self.stdout_path, "ab") as out:
                for line in proc.stdout:
                    out.write(line)
                    out.flush()
                    m = LISTENING_RE.match(line)
                    if m and not found:
                        found.append(m.group(1).decode())
                        listening.set()

        self._stdout_thread = threading.Thread(target=pump_stdout, daemon=True,
                                               name=f"headway-stdout-{self.starts}")
        self._stdout_thread.start()

        deadline = time.monotonic() + START_DEADLINE_S
        while not listening.wait(timeout=0.05):
            if proc.poll() is not None:
                self._expected_alive = False  # reported here, not again at teardown
                self._reap()
                raise BrokerStartError(
                    f"headway exited with code {proc.returncode} before listening\n"
                    f"{self.stderr_tail()}")
            if time.monotonic() > deadline:
                self._signal_and_wait(signal.SIGKILL)
                raise BrokerStartError(
                    f"headway did not print 'headway listening on ...' within "
                    f"{START_DEADLINE_S:.0f} s\n{self.stderr_tail()}")
        self.bootstrap = found[0]
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = STOP_DEADLINE_S) -> int:
        """SIGTERM (or `sig`), wait for exit; returns the exit code. SIGKILL and fail if
        the broker is still running after timeout_s."""
        if not self.running:
            return self.returncode
        code = self._signal_and_wait(sig, timeout_s)
        if code is None:
            self._signal_and_wait(signal.SIGKILL)
            raise AssertionError(f"headway did not exit within {timeout_s:.0f} s of "
                                 f"{signal.Signals(sig).name}\n{self.stderr_tail()}")
        return code

    def kill(self) -> int:
        """SIGKILL (a crash as far as the broker can tell), wait for exit."""
        if not self.running:
            return self.returncode
        return self._signal_and_wait(signal.SIGKILL)

    def restart(self) -> "Broker":
        """Stops the running instance (SIGTERM) if any, starts a new one on the same data
        directory. Unless `listen` fixes it, the port is a new ephemeral one: use
        `bootstrap` again afterwards."""
        if self.running:
            self.stop()
        return self.start()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def metrics_address(self) -> str:
        """HOST:PORT of the running instance's /metrics endpoint (started with
        metrics_listen); the broker logs it before it prints its listening line."""
        found = METRICS_RE.findall(self.stderr_path.read_text("utf-8", "replace"))
        assert found, f"no metrics address in the broker's log\n{self.stderr_tail()}"
        return found[-1]

    def check_alive(self) -> None:
        """Raises if the broker exited although nobody stopped it."""
        if self._proc is not None and self._expected_alive and self._proc.poll() is not None:
            self._expected_alive = False  # reported here, not again at teardown
            self._reap()
            raise AssertionError(f"headway exited on its own with code {self.returncode}\n"
                                 f"{self.stderr_tail()}")

    # -- internals -----------------------------------------------------------------------

    def _signal_and_wait(self, sig: int, timeout_s: float = STOP_DEADLINE_S) -> int | None:
        proc = self._proc
        if proc.poll() is None:
            self._expected_alive = False
            proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        self._reap()
        return self.returncode

    def _reap(self) -> None:
        proc = self._proc
        if proc.poll() is None:
            return
        if self._expected_alive and self.unexpected_exit is None:
            self.unexpected_exit = f"exited on its own with code {proc.returncode}"
        self._expected_alive = False
        self.returncode = proc.returncode
        if self._stdout_thread is not None:
            self._stdout_thread.join(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()
        _LIVE_PROCESSES.discard(proc)

    def shutdown_for_teardown(self) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is not None:
            self._reap()
            return
        if self._signal_and_wait(signal.SIGTERM) is None:
            self._signal_and_wait(signal.SIGKILL)
            self.unexpected_exit = f"did not exit within {STOP_DEADLINE_S:.0f} s of SIGTERM"

    def panics(self) -> str:
        """The broker's panic reports (each with the lines after it), or "" if none."""
        try:
            text = self.stderr_path.read_bytes().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""
        lines = text.splitlines()
        found = [i for i, line in enumerate(lines) if PANICKED_RE.search(line)]
        return "\n---\n".join("\n".join(lines[i:i + PANIC_CONTEXT_LINES]) for i in found[:5])

    def stderr_tail(self, lines: int = STDERR_TAIL_LINES) -> str:
        try:
            text = self.stderr_path.read_bytes().decode("utf-8", "replace")
        except FileNotFoundError:
            return "(no stderr captured)"
        tail = text.splitlines()[-lines:]
        return f"--- last {len(tail)} lines of {self.stderr_path} ---\n" + "\n".join(tail)

    def __repr__(self) -> str:
        return f"Broker(bootstrap={self.bootstrap!r}, data_dir={str(self.data_dir)!r})"


def _require_binary() -> Path:
    if not HEADWAY_BIN.is_file() or not os.access(HEADWAY_BIN, os.X_OK):
        pytest.fail(f"headway binary not found at {HEADWAY_BIN}: run "
                    f"'cargo build --release -p headway' or set HEADWAY_BIN", pytrace=False)
    return HEADWAY_BIN


@pytest.fixture
def make_broker(request, tmp_path):
    """Factory: make_broker(*extra_args, env=None, start=True, listen=...,
    open_files_max=None, group=None) -> Broker. Each call gets its own data directory; every
    broker is shut down after the test. `env` adds environment variables (the broker's own
    HEADWAY_* are otherwise removed); `listen` fixes the address (see Broker);
    `open_files_max` sets the broker process's open files limit (soft and hard); `group`
    the group id it runs as (see Broker)."""
    brokers: list[Broker] = []
    request.node.headway_brokers = brokers

    def factory(*extra_args: str, env: dict[str, str] | None = None, start: bool = True,
                listen: str = "127.0.0.1:0", open_files_max: int | None = None,
                group: int | None = None) -> Broker:
        binary = _require_binary()
        index = len(brokers)
        base = tmp_path / f"broker{index}"
        broker = Broker(binary, base / "data", base, list(extra_args), env, listen,
                        open_files_max, group)
        brokers.append(broker)
        return broker.start() if start else broker

    yield factory
    for broker in brokers:
        broker.shutdown_for_teardown()
    # A broker that died while the test expected it alive is a broker bug even when the
    # test's own assertions happened to pass.
    died = [f"broker{i} {b.unexpected_exit}" for i, b in enumerate(brokers) if b.unexpected_exit]
    if died:
        pytest.fail("headway " + "; ".join(died), pytrace=False)
    # A panic is a bug even when the broker contained it (the job failed alone) and the
    # test's own assertions passed.
    panicked = [f"broker{i}:\n{b.panics()}" for i, b in enumerate(brokers) if b.panics()]
    if panicked:
        pytest.fail("headway panicked\n" + "\n".join(panicked), pytrace=False)


@pytest.fixture
def broker(make_broker) -> Broker:
    """A running broker with default settings."""
    return make_broker()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    brokers = getattr(item, "headway_brokers", None)
    if not brokers or not report.failed:
        return
    for i, b in enumerate(brokers):
        state = b.bootstrap if b.running else f"exit code {b.returncode}"
        report.sections.append((f"headway broker{i} stderr ({state})", b.stderr_tail()))


# -- Apache Kafka as a peer ------------------------------------------------------------------

KAFKA_PEER_DIR = REPO_ROOT / "peers" / "kafka"


class KafkaPeer:
    """One Kafka 4.3.1 broker started by peers/kafka/start; `bootstrap` is its address."""

    def __init__(self, data_dir: Path, port: int):
        self.data_dir = data_dir
        self.bootstrap = f"127.0.0.1:{port}"

    def log_tail(self, lines: int = STDERR_TAIL_LINES) -> str:
        try:
            text = (self.data_dir / "kafka.log").read_text("utf-8", "replace")
        except FileNotFoundError:
            return "(no kafka.log)"
        return "\n".join(text.splitlines()[-lines:])


def kafka_peer_missing() -> str | None:
    """Why a Kafka broker cannot be started here, or None when it can."""
    if not (KAFKA_PEER_DIR / "lib" / ".complete").is_file():
        return ("Kafka 4.3.1 is not assembled in peers/kafka/lib: run scripts/setup "
                "(or peers/kafka/setup alone)")
    for tool in ("java", "kcat"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not on PATH: peers/kafka/start needs it (run scripts/setup)"
    return None


@pytest.fixture(scope="module")
def kafka_peer(tmp_path_factory) -> KafkaPeer:
    """A Kafka 4.3.1 broker shared by the tests of one module (a JVM start takes seconds),
    stopped after them; skipped, saying why, where Kafka is not set up."""
    missing = kafka_peer_missing()
    if missing:
        pytest.skip(missing)
    data_dir = tmp_path_factory.mktemp("kafka")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = subprocess.run([str(KAFKA_PEER_DIR / "start"), str(data_dir), str(port)],
                             capture_output=True, text=True, timeout=300)
    if started.returncode != 0:
        subprocess.run([str(KAFKA_PEER_DIR / "stop"), str(data_dir)], capture_output=True,
                       timeout=120)
        pytest.fail(f"peers/kafka/start failed:\n{started.stdout}\n{started.stderr}",
                    pytrace=False)
    peer = KafkaPeer(data_dir, port)
    try:
        yield peer
    finally:
        subprocess.run([str(KAFKA_PEER_DIR / "stop"), str(data_dir)], capture_output=True,
                       timeout=120)
