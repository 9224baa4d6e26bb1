#!/usr/bin/env python3
"""The tail beside a catch-up replay from the remote tier, against the same replay from
the local disk and against the floor, in one run.

Each round runs `headway bench noisy-neighbour` (librdkafka light clients, a 1 GiB
backlog of the light topic, phases quiet / writer / catch-up) three ways, each on a
fresh broker and data directory:

- `remote`: the light topic tiered (`remote.storage.enable=true`,
  `local.retention.bytes=0`; 16 MiB segments in every mode), the broker's remote tier on `bench/s3mem` (an S3 server
  that keeps objects in memory, on this machine), and `--wait-tiered`: phase 3's
  catch-up consumer replays a backlog that lives only in the bucket;
- `local`: an untiered light topic; the catch-up consumer replays the cold backlog from
  the local disk (the lab's usual phase 3, catch-up only);
- `floor`: an untiered light topic and no broker neighbour; beside phase 3 runs
  `bench/replay_equivalent.py --send` on the backlog's files, the least a local replay
  can be (`docs/latency.md`, "The floor").

What each run's report holds is in `docs/bench.md`; this script adds the S3 server's
CPU seconds and peak memory over the run (its disk: none, it keeps objects in memory),
and the broker's CPU seconds, and writes one table of every run to `<out>/README.md`
(runs in `<out>/runs/`). The figure to compare is the tail consumers' end-to-end p99 in
phase 3 over phase 1 (`e2e_p99_catch_up_over_quiet`).

Usage: bench/tiered_catchup.py --out DIR [--rounds 3] [--modes remote,local,floor]
                               [--duration 90] [--scratch DIR]
                               [--headway target/release/headway]

Every run is bounded (the scenario's --duration, plus the wait for the upload) and stops
its broker and S3 server; the scratch directory is removed between runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUCKET = "headway-tier"
START_TIMEOUT_S = 60
# The light topic's segments, in every mode: small enough that all but about 32 MiB of
# the backlog leaves the local disk of a tiered topic (the active segment and the one
# sealed last stay until the next upload round).
SEGMENT_BYTES = 16 << 20
TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{what} did not listen on {port} within {START_TIMEOUT_S} s")


def cpu_seconds(pid: int) -> float:
    """User and system CPU of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def python_path() -> str:
    """This Python, relative to the repository when it is the repository's `.venv`."""
    try:
        return str(Path(sys.executable).relative_to(REPO))
    except ValueError:
        return sys.executable


def build_s3mem(scratch: Path) -> Path:
    binary = scratch.parent / "s3mem"
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=REPO / "bench" / "s3mem",
                   check=True)
    return binary


def one_run(args, mode: str, label: str, s3mem: Path) -> dict:
    scratch = Path(args.scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    data = scratch / "data"
    data.mkdir(parents=True)
    logs = Path(args.out) / "runs" / label
    logs.mkdir(parents=True, exist_ok=True)
    s3 = None
    serve = [args.headway, "serve", "--data-dir", str(data)]
    port = free_port()
    serve += ["--listen", f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{free_port()}"]
    if mode == "remote":
        s3_port = free_port()
        s3 = subprocess.Popen([str(s3mem), "-listen", f"127.0.0.1:{s3_port}",
                               "-bucket", BUCKET], stdout=subprocess.DEVNULL,
                              stderr=open(logs / "s3mem.log", "w"))
        wait_port(s3_port, s3, "s3mem")
        serve += ["--remote-storage-endpoint", f"http://127.0.0.1:{s3_port}",
                  "--remote-storage-bucket", BUCKET,
                  "--remote-storage-access-key-id", "lab", "--remote-storage-prefix", "lab"]
    broker = subprocess.Popen(serve, stdout=subprocess.DEVNULL,
                              stderr=open(logs / "broker.log", "w"))
    try:
        wait_port(port, broker, "the broker")
        bench = [args.headway, "bench", "noisy-neighbour", "--duration", str(args.duration),
                 "--writer-mb-max", "16384", "--librdkafka", "-b", f"127.0.0.1:{port}",
                 "--broker-pid", str(broker.pid), "--label", label, "--out", str(logs),
                 "--evict-dir", str(data), "--light-config", f"segment.bytes={SEGMENT_BYTES}"]
        if mode == "remote":
            bench += ["--neighbours", "catch-up", "--light-config", "remote.storage.enable=true",
                      "--light-config", "local.retention.bytes=0", "--wait-tiered"]
        elif mode == "local":
            bench += ["--neighbours", "catch-up"]
        else:
            bench += ["--neighbours", "none", "--external-neighbour",
                      f"{python_path()} bench/replay_equivalent.py --send "
                      '"$HEADWAY_DATA_DIR/topics/$HEADWAY_LIGHT_TOPIC/0"']
        s3_cpu0 = cpu_seconds(s3.pid) if s3 else 0.0
        broker_cpu0 = cpu_seconds(broker.pid)
        print(f"== {label}: {' '.join(bench)}", flush=True)
        subprocess.run(bench, cwd=REPO, check=True)
        broker_cpu = cpu_seconds(broker.pid) - broker_cpu0
        s3_cpu = cpu_seconds(s3.pid) - s3_cpu0 if s3 else None
        s3_rss = peak_rss_mib(s3.pid) if s3 else None
    finally:
        stop(broker)
        if s3:
            stop(s3)
        shutil.rmtree(scratch, ignore_errors=True)
    report = json.loads(next(logs.glob("noisy-neighbour-*.json")).read_text())
    summary = report["summary"]
    phases = {p["phase"]: p for p in summary["phases"]}
    return {
        "label": label, "mode": mode,
        "quiet_p99": phases["quiet"]["e2e_p99_ms"],
        "catch_up_p99": phases["catch-up"]["e2e_p99_ms"],
        "ratio": summary["e2e_p99_catch_up_over_quiet"],
        "replay_mb_s": (summary.get("catch_up") or {}).get("replay_mb_per_s"),
        "replay_s": (summary.get("catch_up") or {}).get("replay_s"),
        "external": summary.get("external_neighbour"),
        "broker_cpu_s": broker_cpu, "s3_cpu_s": s3_cpu, "s3_peak_mib": s3_rss,
        "notes": report["notes"],
    }


def row(r: dict) -> str:
    replay = ""
    if r["replay_mb_s"] and r["replay_s"] is not None:
        replay = f"{r['replay_mb_s']:.0f} MB/s, {r['replay_s']:.1f} s"
    elif r["replay_mb_s"]:
        replay = f"{r['replay_mb_s']:.0f} MB/s, unfinished"
    elif r["external"]:
        replay = f"`replay_equivalent.py --send`, {r['external'].get('seconds', 0):.1f} s"
    s3 = "" if r["s3_cpu_s"] is None else f"{r['s3_cpu_s']:.1f} s, {r['s3_peak_mib']:.0f} MiB"
    return (f"| `{r['label']}` | {r['mode']} | {r['quiet_p99']:.2f} / {r['catch_up_p99']:.2f} | "
            f"{r['ratio']:.2f} | {replay} | {r['broker_cpu_s']:.1f} | {s3} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="remote,local,floor")
    parser.add_argument("--duration", type=int, default=90)
    parser.add_argument("--scratch", default=str(Path(tempfile.gettempdir()) / "tiered-lab" / "run"),
                        help="a directory for each run's data (removed between runs)")
    parser.add_argument("--headway", default=str(REPO / "target" / "release" / "headway"))
    args = parser.parse_args()
    modes = args.modes.split(",")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    s3mem = build_s3mem(Path(args.scratch))
    results = []
    for n in range(1, args.rounds + 1):
        for mode in modes:
            results.append(one_run(args, mode, f"{mode}-{n}", s3mem))
            print(row(results[-1]), flush=True)
    lines = [
        f"Command: `bench/tiered_catchup.py {' '.join(sys.argv[1:])}`; "
        f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| run | mode | e2e p99 quiet / catch-up ms | catch-up / quiet | replay | broker CPU s "
        "| S3 server CPU s, peak memory |",
        "|---|---|---|---:|---|---:|---|",
        *(row(r) for r in results),
    ]
    with open(Path(args.out) / "README.md", "a") as f:
        f.write("\n".join(lines) + "\n\n")
    (Path(args.out) / "results.json").write_text(json.dumps(results, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
