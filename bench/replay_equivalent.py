#!/usr/bin/env python3
"""The least work a catch-up replay can be, done without the broker.

Reads a partition's segment files the way headway reads them for a consumer catching
up (no readahead, POSIX_FADV_RANDOM; preads of 256 KiB one after another) and, with
--send, writes every chunk into a loopback TCP connection whose other end, a second
process, reads and drops it, as a consumer would before parsing anything. With
--rate-mb it holds itself to that many MB/s. It prints what it moved and how fast.

Meant as the external neighbour of `headway bench noisy-neighbour` (its
`--external-neighbour`): beside the light clients, it shows what the disk and the
loopback sockets alone cost them, with no broker code on the path:

    headway bench noisy-neighbour ... --evict-dir DATA --neighbours none \\
        --external-neighbour 'bench/replay_equivalent.py --send "$HEADWAY_DATA_DIR/topics/$HEADWAY_LIGHT_TOPIC/0"'

Usage: bench/replay_equivalent.py [--send] [--rate-mb MB] [--chunk-kib 256] PATH...

A PATH that is a directory stands for its `.log` files, in name order (segments are
named by their base offset, zero-padded). Files are read as they are: evict them first
(the scenario's --evict-dir does) to read the disk.
"""

import argparse
import os
import socket
import sys
import time
from multiprocessing import Process

KIB = 1024


def files_of(paths):
    for path in paths:
        if os.path.isdir(path):
            names = sorted(n for n in os.listdir(path) if n.endswith(".log"))
            yield from (os.path.join(path, n) for n in names)
        else:
            yield path


def drain(port):
    """The receiving end: reads the connection until it closes and drops the bytes."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        buf = bytearray(1024 * KIB)
        while s.recv_into(buf):
            pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--send", action="store_true", help="write the bytes into a loopback socket")
    ap.add_argument("--rate-mb", type=float, default=0.0, help="at most this many MB/s (0: no cap)")
    ap.add_argument("--chunk-kib", type=int, default=256)
    args = ap.parse_args()

    sock = receiver = None
    if args.send:
        listener = socket.create_server(("127.0.0.1", 0))
        receiver = Process(target=drain, args=(listener.getsockname()[1],), daemon=True)
        receiver.start()
        sock, _ = listener.accept()
        listener.close()

    buf = bytearray(args.chunk_kib * KIB)
    view = memoryview(buf)
    moved = 0
    start = time.monotonic()
    for path in files_of(args.paths):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            position = 0
            while True:
                n = os.preadv(fd, [buf], position)
                if n == 0:
                    break
                position += n
                moved += n
                if sock is not None:
                    sock.sendall(view[:n])
                if args.rate_mb > 0:
                    ahead = moved / (args.rate_mb * 1e6) - (time.monotonic() - start)
                    if ahead > 0:
                        time.sleep(ahead)
        finally:
            os.close(fd)
    if sock is not None:
        sock.close()
        receiver.join(timeout=30)
    seconds = max(time.monotonic() - start, 1e-9)
    print(
        f"replay-equivalent: {moved / 1e6:.0f} MB in {seconds:.2f} s, {moved / 1e6 / seconds:.0f} MB/s"
        f"{' through a loopback socket' if sock is not None else ''}",
        file=sys.stderr,
        flush=True,
    )


if __name__ == "__main__":
    main()
