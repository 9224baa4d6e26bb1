#!/usr/bin/env python3
"""What a cold sequential read does to a small durable write on the same disk.

A loop appends 4 KiB to a file and calls fdatasync after each append (a light producer
with flush = sync), alone and then beside a reader that reads a cold file of --file-mb
MiB in 1 MiB preads (a catch-up consumer): with the kernel's readahead, without it
(POSIX_FADV_RANDOM, as headway reads segments), and paced at fixed rates. It prints the
fdatasync percentiles of each case and the reader's rate, and with --out writes them as
a Markdown table.

Usage: bench/disk_contention.py [--dir DIR] [--file-mb 1024] [--seconds 8] [--out FILE]

DIR must be on the disk to measure (default: a temporary directory under /tmp). The file
is written once, synced and dropped from the page cache before every case. Every case
is bounded by --seconds; the script removes what it wrote.
"""

import argparse
import multiprocessing
import os
import platform
import tempfile
import time

MIB = 1024 * 1024


def fsync_loop(path, seconds, out):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    block = b"x" * 4096
    latencies = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        os.write(fd, block)
        start = time.perf_counter()
        os.fdatasync(fd)
        latencies.append(time.perf_counter() - start)
        time.sleep(0.0005)
    os.close(fd)
    os.unlink(path)
    out.put(latencies)


def drop_from_cache(path):
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def cold_read(path, seconds, rate_mib, readahead, out, read_bytes=MIB):
    fd = os.open(path, os.O_RDONLY)
    if not readahead:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    size = os.fstat(fd).st_size
    offset, reads = 0, 0
    start = time.monotonic()
    while time.monotonic() - start < seconds and offset < size:
        os.pread(fd, read_bytes, offset)
        offset += read_bytes
        reads += 1
        if rate_mib:
            ahead = start + reads * read_bytes / MIB / rate_mib - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    os.close(fd)
    out.put((offset, time.monotonic() - start))


def percentile(sorted_values, fraction):
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


def run_case(directory, big, seconds, reader):
    drop_from_cache(big)
    results = multiprocessing.Queue()
    reads = multiprocessing.Queue()
    writer = multiprocessing.Process(
        target=fsync_loop, args=(os.path.join(directory, "append.tmp"), seconds, results)
    )
    procs = [writer]
    if reader is not None:
        rate, readahead, read_bytes = reader
        procs.append(
            multiprocessing.Process(target=cold_read, args=(big, seconds, rate, readahead, reads, read_bytes))
        )
    for p in procs:
        p.start()
    latencies = sorted(results.get(timeout=seconds + 60))
    read = reads.get(timeout=seconds + 60) if reader is not None else None
    for p in procs:
        p.join(timeout=60)
    ms = lambda f: percentile(latencies, f) * 1000
    return {
        "syncs": len(latencies),
        "p50": ms(0.5),
        "p99": ms(0.99),
        "p999": ms(0.999),
        "max": latencies[-1] * 1000,
        "read_mb_s": None if read is None else read[0] / 1e6 / read[1],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default=None)
    parser.add_argument("--file-mb", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="disk-contention-", dir=args.dir)
    big = os.path.join(directory, "cold.bin")
    print(f"writing {args.file_mb} MiB to {big}", flush=True)
    chunk = os.urandom(MIB)
    with open(big, "wb") as f:
        for _ in range(args.file_mb):
            f.write(chunk)
    cases = [
        ("alone", None),
        ("beside a cold read, readahead on", (0, True, MIB)),
        ("beside a cold read, readahead off", (0, False, MIB)),
        ("beside a cold read, readahead off, 256 KiB reads", (0, False, 256 * 1024)),
        ("beside a cold read, readahead off, 128 KiB reads", (0, False, 128 * 1024)),
        ("beside a cold read, readahead on, 200 MiB/s", (200, True, MIB)),
        ("beside a cold read, readahead on, 50 MiB/s", (50, True, MIB)),
    ]
    rows = []
    try:
        for name, reader in cases:
            result = run_case(directory, big, args.seconds, reader)
            rows.append((name, result))
            read = "-" if result["read_mb_s"] is None else f"{result['read_mb_s']:.0f}"
            print(
                f"{name:45s} fdatasync p50 {result['p50']:.2f} p99 {result['p99']:.2f} "
                f"p99.9 {result['p999']:.2f} max {result['max']:.1f} ms; read {read} MB/s",
                flush=True,
            )
    finally:
        os.unlink(big)
        os.rmdir(directory)
    if args.out:
        with open(args.out, "a") as f:
            f.write(
                f"\n### {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
                f"{os.cpu_count()} cores, {platform.release()}, load average "
                f"{os.getloadavg()[0]:.1f}\n\n"
                f"`bench/disk_contention.py --file-mb {args.file_mb} --seconds {args.seconds:g}`\n\n"
                "| case | fdatasync p50 ms | p99 ms | p99.9 ms | max ms | read MB/s |\n"
                "|---|---|---|---|---|---|\n"
            )
            for name, r in rows:
                read = "-" if r["read_mb_s"] is None else f"{r['read_mb_s']:.0f}"
                f.write(
                    f"| {name} | {r['p50']:.2f} | {r['p99']:.2f} | {r['p999']:.2f} | "
                    f"{r['max']:.1f} | {read} |\n"
                )


if __name__ == "__main__":
    main()
