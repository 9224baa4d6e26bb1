#!/usr/bin/env python3
"""First reading of produce throughput: kcat (librdkafka) sends 1 KiB records into a
4-partition topic with acks=0 and with acks=all, against a fresh headway broker.

Usage: .venv/bin/python bench/produce_first_reading.py [--messages N] [--out FILE]

Prints one line per run and appends a Markdown table to the results file (default
bench/results/produce-first-reading.md) with the command, the machine's core count,
messages/s, MB/s, broker CPU seconds per GB and the broker's peak resident memory.
This is a first reading, not the lab: one client, one run per setting, no warm-up.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = os.environ.get("HEADWAY_BIN", str(REPO / "target/release/headway"))
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_peak_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_broker(data_dir):
    proc = subprocess.Popen(
        [BIN, "serve", "--data-dir", data_dir, "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if not line.startswith("headway listening on "):
        proc.kill()
        sys.exit(f"broker did not start: {line!r}")
    return proc, line.split()[-1]


def run(acks, messages, payload_file):
    with tempfile.TemporaryDirectory() as data_dir:
        broker, bootstrap = start_broker(data_dir)
        try:
            topic = f"bench-acks-{acks}"
            # kcat has no topic admin: create the 4-partition topic via auto-creation.
            subprocess.run(["kcat", "-b", bootstrap, "-L", "-t", topic],
                           check=True, capture_output=True)
            cpu_before = cpu_seconds(broker.pid)
            cmd = ["kcat", "-b", bootstrap, "-t", topic, "-P", "-X", f"acks={acks}",
                   "-l", payload_file]
            started = time.monotonic()
            subprocess.run(cmd, check=True)
            elapsed = time.monotonic() - started
            cpu = cpu_seconds(broker.pid) - cpu_before
            rss = rss_peak_mib(broker.pid)
        finally:
            broker.terminate()
            broker.wait(timeout=60)
    megabytes = messages * 1024 / 1e6
    return {
        "acks": acks, "messages": messages, "seconds": elapsed,
        "msg_per_s": messages / elapsed, "mb_per_s": megabytes / elapsed,
        "cpu_s_per_gb": cpu / (megabytes / 1000), "rss_peak_mib": rss,
        # Placeholders for what differs per run and machine: the broker's address and the
        # temporary file of records (RECORDS, 1 KiB lines).
        "command": " ".join(cmd[:1] + ["-b", "BOOTSTRAP"] + cmd[3:-1] + ["RECORDS"]),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--out", default=str(REPO / "bench/results/produce-first-reading.md"))
    args = parser.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        line = "x" * 1023 + "\n"  # 1 KiB per record including kcat's delimiter
        for _ in range(args.messages):
            f.write(line)
        payload_file = f.name
    os.environ["HEADWAY_DEFAULT_PARTITIONS"] = "4"
    results = []
    try:
        for acks in ("0", "all"):
            r = run(acks, args.messages, payload_file)
            results.append(r)
            print(f"acks={r['acks']:>3}: {r['msg_per_s']:>9.0f} msg/s {r['mb_per_s']:7.1f} MB/s "
                  f"cpu {r['cpu_s_per_gb']:.1f} s/GB rss peak {r['rss_peak_mib']:.0f} MiB", flush=True)
    finally:
        os.unlink(payload_file)
    ratio = results[1]["msg_per_s"] / results[0]["msg_per_s"]
    print(f"acks=all / acks=0 = {ratio:.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as f:
        f.write(f"\n## {time.strftime('%Y-%m-%d %H:%M:%S')} on {os.cpu_count()} cores\n\n")
        f.write(f"`.venv/bin/python bench/produce_first_reading.py --messages {args.messages}`, "
                f"records of 1 KiB into 4 partitions, one `kcat -P` per run, flush=sync\n\n")
        f.write("| acks | messages | seconds | msg/s | MB/s | broker CPU s/GB | broker RSS peak MiB |\n")
        f.write("|---|---|---|---|---|---|---|\n")
        for r in results:
            f.write(f"| {r['acks']} | {r['messages']} | {r['seconds']:.2f} | {r['msg_per_s']:.0f} | "
                    f"{r['mb_per_s']:.1f} | {r['cpu_s_per_gb']:.1f} | {r['rss_peak_mib']:.0f} |\n")
        f.write(f"\nacks=all / acks=0 throughput ratio: {ratio:.2f}. "
                f"Command per run (RECORDS: a file of 1 KiB lines): `{results[0]['command']}`\n")


if __name__ == "__main__":
    main()
