#!/usr/bin/env python3
"""What one hostile connection can make a broker hold through waiting long polls.

The client sends REQUESTS pipelined Fetch requests (v4), each naming one partition NAMES
times with a long max_wait, and never reads its socket. The broker keeps a summary of
every partition named while each answer waits. The script reports the broker's resident
memory before, at its peak while the client holds its requests, and how many bytes the
client managed to send.

Usage: bench/long_poll_memory.py HEADWAY_BINARY [--requests 128] [--names 180000]
Prints one JSON line; the run is bounded (--hold-s, default 20 s).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import subprocess
import tempfile
import threading
import time


def fetch_v4(correlation_id: int, topic: bytes, names: int, max_wait_ms: int) -> bytes:
    header = struct.pack(">hhih", 1, 4, correlation_id, -1)
    partition = struct.pack(">iqi", 0, 0, 1024)
    body = (struct.pack(">iiiib", -1, max_wait_ms, 1, 1 << 20, 0)
            + struct.pack(">i", 1) + struct.pack(">h", len(topic)) + topic
            + struct.pack(">i", names) + partition * names)
    message = header + body
    return struct.pack(">i", len(message)) + message


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary")
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--names", type=int, default=180_000)
    parser.add_argument("--hold-s", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        broker = subprocess.Popen(
            [args.binary, "serve", "--data-dir", data, "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            line = broker.stdout.readline().decode()
            address = line.strip().rsplit(" ", 1)[1]
            host, port = address.rsplit(":", 1)
            created = subprocess.run([args.binary, "topic", "create", "lp", "-p", "1", "-b",
                                      address], capture_output=True, timeout=60)
            assert created.returncode == 0, created.stderr
            time.sleep(1.0)
            before = rss_bytes(broker.pid)
            sock = socket.create_connection((host, int(port)))
            sent = [0]

            def send() -> None:
                try:
                    for i in range(args.requests):
                        frame = fetch_v4(i + 1, b"lp", args.names, 30_000)
                        sock.sendall(frame)
                        sent[0] += len(frame)
                except OSError:
                    pass

            sender = threading.Thread(target=send, daemon=True)
            sender.start()
            peak, deadline = before, time.monotonic() + args.hold_s
            while time.monotonic() < deadline:
                peak = max(peak, rss_bytes(broker.pid))
                time.sleep(0.05)
            sock.close()
            print(json.dumps({
                "requests": args.requests, "names": args.names,
                "client_sent_mib": round(sent[0] / 2**20, 1),
                "rss_before_mib": round(before / 2**20, 1),
                "rss_peak_mib": round(peak / 2**20, 1),
                "held_mib": round((peak - before) / 2**20, 1),
            }))
        finally:
            broker.terminate()
            broker.wait(timeout=60)


if __name__ == "__main__":
    main()
