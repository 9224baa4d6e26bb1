#!/usr/bin/env python3
"""What a cold sequential read does to a small durable write on the same disk.

A loop appends 4 KiB to a file and calls fdatasync after each append (a light producer
with flush = sync), alone and then beside a reader that reads a cold file of --file-mb
MiB in 1 MiB preads (a catch-up consumer): with the kernel's readahead, without it
(POSIX_FADV_RANDOM, as headway reads segments), paced at fixed rates, and in the idle
I/O class (as headway's read threads submit it); and beside a heavy writer that appends
8 MiB and fdatasyncs it, in a loop, in the default and in the idle I/O class (as headway
syncs more than 256 KiB). It prints the fdatasync percentiles of each case and the
reader's or writer's rate, and with --out writes them as a Markdown table.

Usage: bench/disk_contention.py [--dir DIR] [--file-mb 1024] [--seconds 8] [--only TEXT]
                                [--out FILE]

DIR must be on the disk to measure (default: a temporary directory under /tmp). The file
is written once, synced and dropped from the page cache before every case. Every case
is bounded by --seconds; the script removes what it wrote.
"""

import argparse
import ctypes
import multiprocessing
import os
import platform
import tempfile
import time

MIB = 1024 * 1024
SYS_IOPRIO_SET = {"x86_64": 251, "aarch64": 30}.get(platform.machine())
IOPRIO_CLASS_IDLE = 3


def idle_io_class():
    """Puts the calling process in the idle I/O class (ioprio_set(2), who = process 0)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if SYS_IOPRIO_SET is None or libc.syscall(SYS_IOPRIO_SET, 1, 0, IOPRIO_CLASS_IDLE << 13) != 0:
        raise OSError(ctypes.get_errno(), "ioprio_set")


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


def cold_read(path, seconds, rate_mib, readahead, out, read_bytes=MIB, io_idle=False):
    if io_idle:
        idle_io_class()
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


def heavy_write(path, seconds, io_idle, out, sync_bytes=8 * MIB):
    if io_idle:
        idle_io_class()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    chunk = os.urandom(MIB)
    written = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        for _ in range(sync_bytes // MIB):
            os.write(fd, chunk)
        os.fdatasync(fd)
        written += sync_bytes
    os.close(fd)
    os.unlink(path)
    out.put((written, time.monotonic() - start))


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
    if reader is not None and reader[0] == "write":
        procs.append(
            multiprocessing.Process(
                target=heavy_write, args=(os.path.join(directory, "heavy.tmp"), seconds, reader[1], reads)
            )
        )
    elif reader is not None:
        rate, readahead, read_bytes, io_idle = reader
        procs.append(
            multiprocessing.Process(
                target=cold_read, args=(big, seconds, rate, readahead, reads, read_bytes, io_idle)
            )
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
    parser.add_argument("--only", default=None, help="run only the cases whose name contains this")
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
        ("beside a cold read, readahead on", (0, True, MIB, False)),
        ("beside a cold read, readahead off", (0, False, MIB, False)),
        ("beside a cold read, readahead off, 256 KiB reads", (0, False, 256 * 1024, False)),
        ("beside a cold read, readahead off, 256 KiB reads, idle I/O class", (0, False, 256 * 1024, True)),
        ("beside a cold read, readahead off, 128 KiB reads", (0, False, 128 * 1024, False)),
        ("beside a cold read, readahead off, 64 KiB reads", (0, False, 64 * 1024, False)),
        ("beside a cold read, readahead on, 200 MiB/s", (200, True, MIB, False)),
        ("beside a cold read, readahead on, 50 MiB/s", (50, True, MIB, False)),
        ("beside a writer syncing 8 MiB at a time", ("write", False)),
        ("beside a writer syncing 8 MiB at a time, idle I/O class", ("write", True)),
    ]
    if args.only:
        cases = [c for c in cases if c[1] is None or args.only in c[0]]
    rows = []
    try:
        for name, reader in cases:
            result = run_case(directory, big, args.seconds, reader)
            rows.append((name, result))
            read = "-" if result["read_mb_s"] is None else f"{result['read_mb_s']:.0f}"
            print(
                f"{name:45s} fdatasync p50 {result['p50']:.2f} p99 {result['p99']:.2f} "
                f"p99.9 {result['p999']:.2f} max {result['max']:.1f} ms; neighbour {read} MB/s",
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
                f"`bench/disk_contention.py --file-mb {args.file_mb} --seconds {args.seconds:g}"
                + (f" --only '{args.only}'" if args.only else "")
                + "`\n\n"
                "| case | fdatasync p50 ms | p99 ms | p99.9 ms | max ms | read or write MB/s |\n"
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
