#!/usr/bin/env python3
"""The lab's `scale` scenario: what partitions cost headway and Apache Kafka 4.3.1 on one
broker, side by side.

For each partition count (default 1, 100, 1,000, 10,000), each broker (headway; Kafka 4.3.1
in KRaft mode, single node, through peers/kafka/start) and each round (--rounds), on a
fresh data directory:

1. starts the broker with the process's open files limit set to --nofile; creates one topic
   of N partitions (CreateTopics with up to 1,000, then CreatePartitions in steps of 1,000,
   the same requests for both brokers) and waits until Metadata lists all N with a leader;
2. *idle*: 5 s later, the broker process's RSS (/proc/PID/status) and open files
   (/proc/PID/fd);
3. *load*: one librdkafka producer (confluent-kafka) writes keyed 1 KiB records (keys
   `key-<i>`, librdkafka's default partitioner), acks=all, linger 5 ms, for --seconds;
   records acknowledged per second (counted to the end of the final flush) and the p50 /
   p99 of each record's delivery latency (librdkafka's own, from produce() to its ack);
   RSS and open files sampled every 0.5 s (peak and the last sample);
4. *stop*: a clean stop (SIGTERM; Kafka: peers/kafka/stop), timed;
5. *start*: the broker started again on the same data; start-up is the time from the
   process's start (its start time in /proc/PID/stat: for Kafka the JVM's, so the start
   script's own checks do not count) until Metadata lists all N partitions with a leader;
   then RSS and open files of that idle restarted broker, and its stop, timed.

The 1-minute load average is recorded at the start of each point and after its load (the
machine may be shared). Every point is one JSON line appended to --out-dir/scale.jsonl as
soon as it is done (data directories are deleted only at the end of the run, so that
deleting 10,000 partitions does not weigh on the next point); a point that fails is written too, with its error, and the run goes on.
Every wait has a deadline, and the whole run is bounded by --max-minutes; brokers started
here are stopped however the script ends.

Kafka runs with the settings peers/kafka/start writes (Kafka's defaults for a single node)
and its default heap (-Xms1g -Xmx1g); the only thing 10,000 partitions need on one broker is
the open files limit (--nofile, given to both brokers). headway runs with
`connections_max = 1000` (so its open files budget is not kept for connections) and
otherwise its defaults.

At the end, plots and a markdown table are written by bench/scale_lab_plot.py (matplotlib,
in bench/.venv, installed from bench/requirements.txt when missing).

Usage (from the repository, with the test virtualenv of scripts/setup):
    cargo build --release -p headway
    .venv/bin/python bench/scale_lab.py [--rounds 2] [--seconds 20]
        [--partitions 1 100 1000 10000] [--brokers headway kafka]
        [--out-dir bench/results/scale/lab] [--smoke]

--smoke: 1 and 10 partitions, 3 s of load, one round, results to a temporary directory.
"""

import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

REPO = Path(__file__).resolve().parent.parent
LISTENING = re.compile(rb"^headway listening on (\S+:\d+)")
TOPIC = "scale"
VALUE = b"v" * 1024
NOFILE = 20000
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Timeout(Exception):
    pass


def limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def seconds_since_start(pid: int) -> float:
    """Seconds since the process started (its start time in /proc/PID/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    start_ticks = int(stat[stat.rindex(")") + 2:].split()[19])
    return time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / CLK_TCK


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def wait_metadata(bootstrap: str, partitions: int, deadline_s: float) -> None:
    """Until Metadata lists TOPIC with `partitions` partitions, each with a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000,
                         "log_level": 4})
    end = time.monotonic() + deadline_s
    last = "no answer"
    while time.monotonic() < end:
        try:
            md = admin.list_topics(TOPIC, timeout=5)
            t = md.topics.get(TOPIC)
            if t is not None and t.error is None:
                led = sum(1 for p in t.partitions.values() if p.leader >= 0 and p.error is None)
                if led == partitions and len(t.partitions) == partitions:
                    return
                last = f"{led} of {partitions} partitions with a leader"
            else:
                last = f"topic error {t.error if t else 'missing'}"
        except KafkaException as e:
            last = str(e)
        time.sleep(0.05)
    raise Timeout(f"Metadata not complete after {deadline_s} s: {last}")


def create_topic(bootstrap: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    first = min(1000, partitions)
    admin.create_topics([NewTopic(TOPIC, first, 1)], request_timeout=120)[TOPIC].result(180)
    count = first
    while count < partitions:
        # Each step waits until the previous one is in Metadata.
        wait_metadata(bootstrap, count, 180)
        count = min(count + 1000, partitions)
        admin.create_partitions([NewPartitions(TOPIC, count)],
                                request_timeout=120)[TOPIC].result(180)
    wait_metadata(bootstrap, partitions, 300)


def load(bootstrap: str, seconds: float, pid: int) -> dict:
    """Keyed 1 KiB records, acks=all, for `seconds`, sampling the broker meanwhile."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "message.timeout.ms": 60000, "log_level": 4})
    latencies: list[float] = []
    failed = [0]
    samples: list[tuple[float, int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            try:
                samples.append((rss_mib(pid), open_files(pid)))
            except OSError:
                pass

    def delivered(err, msg) -> None:
        if err is None:
            latencies.append(msg.latency())
        else:
            failed[0] += 1

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    began = time.monotonic()
    i = 0
    while time.monotonic() - began < seconds:
        try:
            producer.produce(TOPIC, key=b"key-%d" % i, value=VALUE, on_delivery=delivered)
            i += 1
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(90)
    elapsed = time.monotonic() - began
    done.set()
    sampler.join(5)
    latencies.sort()

    def pct(q: float) -> float | None:
        if not latencies:
            return None
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 1)

    return {"load_msgs_per_s": round(len(latencies) / elapsed),
            "load_acked": len(latencies), "load_failed": failed[0], "load_unsent": left,
            "load_elapsed_s": round(elapsed, 1),
            "load_p50_ms": pct(0.50), "load_p99_ms": pct(0.99),
            "load_rss_mib_peak": max((s[0] for s in samples), default=None),
            "load_rss_mib_last": samples[-1][0] if samples else None,
            "load_open_files_peak": max((s[1] for s in samples), default=None),
            "load_open_files_last": samples[-1][1] if samples else None}


class Headway:
    name = "headway"

    def __init__(self, binary: str, work: Path):
        self.binary = binary
        self.data = work / "data"
        self.config = work / "headway.toml"
        self.config.write_text("connections_max = 1000\n")
        self.log = open(work / "headway.log", "ab")
        self.proc: subprocess.Popen | None = None
        self.port = free_port()

    def start(self) -> str:
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--data-dir", str(self.data), "--listen",
             f"127.0.0.1:{self.port}", "--config", str(self.config)],
            stdout=subprocess.PIPE, stderr=self.log, preexec_fn=limit_files)
        found = threading.Event()

        def drain(stdout) -> None:
            for line in stdout:
                if LISTENING.match(line):
                    found.set()

        threading.Thread(target=drain, args=(self.proc.stdout,), daemon=True).start()
        end = time.monotonic() + 300
        while not found.wait(0.05):
            if self.proc.poll() is not None:
                raise RuntimeError(f"headway exited with {self.proc.returncode} while starting")
            if time.monotonic() > end:
                raise Timeout("headway not listening after 300 s")
        return f"127.0.0.1:{self.port}"

    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> float:
        began = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
            raise Timeout("headway still running 300 s after SIGTERM (killed)")
        self.proc = None
        return time.monotonic() - began

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


class Kafka:
    name = "kafka"

    def __init__(self, peers: Path, work: Path):
        self.peers = peers
        self.dir = work / "kafka"
        self.port = free_port()
        self.running = False

    def start(self) -> str:
        env = dict(os.environ, KAFKA_START_TIMEOUT="300")
        subprocess.run([str(self.peers / "start"), str(self.dir), str(self.port)],
                       check=True, env=env, preexec_fn=limit_files, timeout=360,
                       stdout=subprocess.DEVNULL)
        self.running = True
        return f"127.0.0.1:{self.port}"

    def pid(self) -> int:
        return int((self.dir / "kafka.pid").read_text())

    def stop(self) -> float:
        began = time.monotonic()
        env = dict(os.environ, KAFKA_STOP_TIMEOUT="300")
        out = subprocess.run([str(self.peers / "stop"), str(self.dir)], check=True, env=env,
                             timeout=360, capture_output=True, text=True)
        self.running = False
        if "SIGKILL" in out.stderr:
            raise Timeout("Kafka still running 300 s after SIGTERM (killed)")
        return time.monotonic() - began

    def kill(self) -> None:
        if self.running:
            env = dict(os.environ, KAFKA_STOP_TIMEOUT="30")
            subprocess.run([str(self.peers / "stop"), str(self.dir)], env=env, timeout=120,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.running = False


def point(broker, partitions: int, seconds: float) -> dict:
    r: dict = {}
    r["load1_before"] = load1()
    bootstrap = broker.start()
    began = time.monotonic()
    create_topic(bootstrap, partitions)
    r["create_s"] = round(time.monotonic() - began, 2)
    time.sleep(5)
    pid = broker.pid()
    r["idle_rss_mib"], r["idle_open_files"] = rss_mib(pid), open_files(pid)
    r.update(load(bootstrap, seconds, pid))
    r["load1_after_load"] = load1()
    r["stop_after_load_s"] = round(broker.stop(), 2)
    bootstrap = broker.start()
    pid = broker.pid()
    wait_metadata(bootstrap, partitions, 600)
    r["start_s"] = round(seconds_since_start(pid), 2)
    time.sleep(5)
    r["restarted_rss_mib"], r["restarted_open_files"] = rss_mib(pid), open_files(pid)
    r["stop_idle_s"] = round(broker.stop(), 2)
    return r


def main() -> None:
    global NOFILE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--headway", default="target/release/headway")
    ap.add_argument("--kafka", default=str(REPO / "peers" / "kafka"),
                    help="peers/kafka (its start and stop scripts)")
    ap.add_argument("--partitions", type=int, nargs="+", default=[1, 100, 1000, 10000])
    ap.add_argument("--brokers", nargs="+", default=["headway", "kafka"],
                    choices=["headway", "kafka"])
    ap.add_argument("--seconds", type=float, default=20, help="load per point")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--nofile", type=int, default=NOFILE)
    ap.add_argument("--max-minutes", type=float, default=60,
                    help="the whole run stops (brokers stopped) after this long")
    ap.add_argument("--out-dir", default=None,
                    help="default bench/results/scale/lab (a temporary one with --smoke)")
    ap.add_argument("--label", default="", help="written on every point, e.g. the round's name")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--smoke", action="store_true",
                    help="1 and 10 partitions, 3 s of load, one round")
    args = ap.parse_args()
    NOFILE = args.nofile
    if args.smoke:
        args.partitions, args.seconds, args.rounds = [1, 10], 3, 1
    smoke_dir = None
    if args.out_dir is None:
        if args.smoke:
            smoke_dir = tempfile.mkdtemp(prefix="headway-scale-smoke-")
            args.out_dir = smoke_dir
        else:
            args.out_dir = str(REPO / "bench" / "results" / "scale" / "lab")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / "scale.jsonl"

    def overrun(_sig, _frame):
        raise Timeout(f"the run went over --max-minutes {args.max_minutes}")

    signal.signal(signal.SIGALRM, overrun)
    signal.alarm(int(args.max_minutes * 60))
    failures = 0
    # Data directories are deleted at the end: deleting 10,000 partitions' directories takes
    # minutes of disk work here, which would weigh on the next point.
    scratch: list[Path] = []
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        for rnd in range(1, args.rounds + 1):
            for n in args.partitions:
                for name in args.brokers:
                    work = Path(tempfile.mkdtemp(prefix=f"headway-scale-{name}-"))
                    broker = (Headway(args.headway, work) if name == "headway"
                              else Kafka(Path(args.kafka), work))
                    r = {"run": started, "label": args.label, "round": rnd, "broker": name,
                         "partitions": n, "seconds": args.seconds, "cores": os.cpu_count(),
                         "nofile": NOFILE}
                    print(f"scale: round {rnd}, {name}, {n} partitions", file=sys.stderr,
                          flush=True)
                    try:
                        r.update(point(broker, n, args.seconds))
                    except Timeout as e:
                        if "max-minutes" in str(e):
                            raise
                        r["error"] = str(e)
                    except Exception as e:  # a bad point is recorded, the run goes on
                        r["error"] = f"{type(e).__name__}: {e}"
                    finally:
                        broker.kill()
                        scratch.append(work)
                    failures += "error" in r
                    print(json.dumps(r), flush=True)
                    with open(out, "a") as f:
                        f.write(json.dumps(r) + "\n")
    finally:
        signal.alarm(0)
        for work in scratch:
            shutil.rmtree(work, ignore_errors=True)
    if not args.no_plots:
        plot(out, out_dir)
    if smoke_dir:
        shutil.rmtree(smoke_dir, ignore_errors=True)
    sys.exit(1 if failures else 0)


def plot(jsonl: Path, out_dir: Path) -> None:
    venv = REPO / "bench" / ".venv"
    python = venv / "bin" / "python"
    ok = python.exists() and subprocess.run([str(python), "-c", "import matplotlib"],
                                            capture_output=True).returncode == 0
    if not ok:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-r",
                        str(REPO / "bench" / "requirements.txt")], check=True, timeout=600)
    subprocess.run([str(python), str(REPO / "bench" / "scale_lab_plot.py"), str(jsonl),
                    "--out-dir", str(out_dir)], check=True, timeout=300)


if __name__ == "__main__":
    main()
