#!/usr/bin/env python3
"""Two broker binaries side by side on `headway bench acks --quick`, alternating.

Runs `<binary> bench acks --quick` for each binary in turn, `--runs` times each (before,
after, before, after, ...), so both see the same machine over the same minutes, and
writes a Markdown table of every run: the max-rate throughput and the paced publish p99
of each case, with the ratio of the medians (after over before) and their geometric mean.

Usage:
    bench/acks_compare.py --before OLD_BIN --after NEW_BIN [--runs 6] [--out FILE.md]
        [--label-before NAME] [--label-after NAME]

Each run takes about 16 s; six runs of each binary take about 3.5 minutes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run_once(binary: str, out_dir: Path) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [binary, "bench", "acks", "--quick", "--out", str(out_dir)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=300,
    )
    report = json.loads((out_dir / "acks-headway.json").read_text())
    cases: dict[str, dict[str, float]] = {}
    for run in report["runs"]:
        params = run["params"]
        if params.get("writer"):
            continue
        case = f"acks={params['acks']} {params['size']}B x{params['producers']}"
        entry = cases.setdefault(case, {})
        if params["phase"] == "max-rate":
            entry["max_rate"] = run["publish"]["msgs_per_s"]
        elif params["phase"] == "paced":
            entry["paced_p99"] = run["publish_latency_ms"]["p99"]
    return cases


def short_rate(value: float) -> str:
    return f"{value / 1000:.0f}k"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the broker binary before the change")
    parser.add_argument("--after", required=True, help="the broker binary after the change")
    parser.add_argument("--runs", type=int, default=6, help="runs of each binary [6]")
    parser.add_argument("--out", help="Markdown file for the table [stdout only]")
    parser.add_argument("--label-before", default="before")
    parser.add_argument("--label-after", default="after")
    args = parser.parse_args()

    started = datetime.datetime.now(datetime.timezone.utc)
    results: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="acks-compare-") as tmp:
        for i in range(args.runs):
            for which in ("before", "after"):
                binary = args.before if which == "before" else args.after
                print(f"[acks-compare] run {i + 1}/{args.runs}: {which}", file=sys.stderr, flush=True)
                results[which].append(run_once(binary, Path(tmp) / f"{which}-{i}"))
    finished = datetime.datetime.now(datetime.timezone.utc)

    cases = list(results["before"][0].keys())
    lines = [
        f"`headway bench acks --quick`, {args.label_before} and {args.label_after} alternating, "
        f"{args.runs} runs each, every run shown ({started:%Y-%m-%d %H:%M}-{finished:%H:%M} UTC, "
        f"`nproc` = {os.cpu_count()}, load average at the end "
        f"{os.getloadavg()[0]:.2f}); command: `bench/acks_compare.py --before <{args.label_before} binary> "
        f"--after <{args.label_after} binary> --runs {args.runs}`.",
        "",
        f"| case | max-rate msg/s {args.label_before} (runs) | {args.label_after} (runs) | ratio of medians "
        f"| paced publish p99 ms {args.label_before} | {args.label_after} | p99 ratio of medians |",
        "|---|---|---|---:|---|---|---:|",
    ]
    rate_ratios = []
    p99_ratios = []
    for case in cases:
        before_rates = [r[case]["max_rate"] for r in results["before"]]
        after_rates = [r[case]["max_rate"] for r in results["after"]]
        before_p99 = [r[case]["paced_p99"] for r in results["before"]]
        after_p99 = [r[case]["paced_p99"] for r in results["after"]]
        rate_ratio = statistics.median(after_rates) / statistics.median(before_rates)
        p99_ratio = statistics.median(after_p99) / statistics.median(before_p99)
        rate_ratios.append(rate_ratio)
        p99_ratios.append(p99_ratio)
        lines.append(
            f"| {case} | {'/'.join(map(short_rate, before_rates))} | "
            f"{'/'.join(map(short_rate, after_rates))} | {rate_ratio:.2f} | "
            f"{'/'.join(f'{v:.2f}' for v in before_p99)} | "
            f"{'/'.join(f'{v:.2f}' for v in after_p99)} | {p99_ratio:.2f} |"
        )
    geo = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))  # noqa: E731
    lines += [
        "",
        f"geometric mean of the max-rate ratios: {geo(rate_ratios):.3f}; "
        f"of the paced p99 ratios: {geo(p99_ratios):.3f}",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
