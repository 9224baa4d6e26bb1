#!/usr/bin/env python3
"""Plots and a table for bench/scale_lab.py: cost against partitions, headway beside Kafka.

Reads the scale.jsonl written by bench/scale_lab.py and writes into --out-dir:
rss.png, open_files.png, throughput.png, p99.png, startup.png (every run a marker, the line
through the median of the runs) and table.md (median and, in brackets, the lowest and
highest of the runs; failed points counted, not averaged).

Usage: bench/.venv/bin/python bench/scale_lab_plot.py bench/results/scale/lab/scale.jsonl
           [--out-dir bench/results/scale/lab] [--run RUN ...]
"""

import argparse
import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"headway": "#1b7837", "kafka": "#2166ac"}
STYLES = {"idle_": "-", "load_": "--", "restarted_": ":"}


def points(rows, broker, key):
    by_n: dict[int, list[float]] = {}
    for r in rows:
        if r["broker"] == broker and r.get(key) is not None:
            by_n.setdefault(r["partitions"], []).append(r[key])
    return dict(sorted(by_n.items()))


def figure(rows, out: Path, name: str, title: str, ylabel: str, series, logy=False):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for broker in ("headway", "kafka"):
        for key, label, style in series:
            by_n = points(rows, broker, key)
            if not by_n:
                continue
            xs = [n for n, vs in by_n.items() for _ in vs]
            ys = [v for vs in by_n.values() for v in vs]
            ax.scatter(xs, ys, color=COLORS[broker], s=14, alpha=0.6)
            ax.plot(list(by_n), [statistics.median(vs) for vs in by_n.values()],
                    style, color=COLORS[broker], marker="o", ms=4,
                    label=f"{broker} {label}".strip())
    ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("partitions (one topic, one broker)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)


def cell(values, fmt):
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return fmt(med)
    return f"{fmt(med)} ({fmt(min(values))}–{fmt(max(values))})"


def table(rows) -> str:
    cols = [("load_msgs_per_s", "msg/s", lambda v: f"{v:,.0f}"),
            ("load_p99_ms", "p99 ms", lambda v: f"{v:,.0f}"),
            ("load_failed", "records failed", lambda v: f"{v:,.0f}"),
            ("idle_rss_mib", "RSS idle MiB", lambda v: f"{v:,.0f}"),
            ("load_rss_mib_peak", "RSS load peak MiB", lambda v: f"{v:,.0f}"),
            ("idle_open_files", "open files idle", lambda v: f"{v:,.0f}"),
            ("load_open_files_peak", "open files load peak", lambda v: f"{v:,.0f}"),
            ("restarted_open_files", "open files after restart", lambda v: f"{v:,.0f}"),
            ("create_s", "create s", lambda v: f"{v:.1f}"),
            ("stop_after_load_s", "stop s", lambda v: f"{v:.1f}"),
            ("start_s", "start s", lambda v: f"{v:.2f}")]
    lines = ["| broker | partitions | runs (failed) | " + " | ".join(c[1] for c in cols)
             + " | load average |",
             "|---|---:|---|" + "---:|" * len(cols) + "---|"]
    keys = sorted({(r["partitions"], r["broker"]) for r in rows})
    for n, broker in sorted(keys, key=lambda k: (k[1], k[0])):
        runs = [r for r in rows if r["broker"] == broker and r["partitions"] == n]
        good = [r for r in runs if "error" not in r]
        cells = [cell([r[k] for r in good if r.get(k) is not None], f) for k, _, f in cols]
        loads = [r.get("load1_before") for r in runs] + [r.get("load1_after_load") for r in runs]
        loads = [v for v in loads if v is not None]
        load = f"{min(loads):.1f}–{max(loads):.1f}" if loads else "-"
        lines.append(f"| {broker} | {n:,} | {len(runs)} ({len(runs) - len(good)}) | "
                     + " | ".join(cells) + f" | {load} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl")
    ap.add_argument("--out-dir", default=None)
    ap.add_argument("--run", nargs="*", help="only these runs (the `run` field)")
    args = ap.parse_args()
    out = Path(args.out_dir or Path(args.jsonl).parent)
    out.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in Path(args.jsonl).read_text().splitlines() if line]
    if args.run:
        rows = [r for r in rows if r["run"] in args.run]
    good = [r for r in rows if "error" not in r]
    figure(good, out, "rss.png", "Broker RSS", "MiB",
           [("idle_rss_mib", "idle", "-"), ("load_rss_mib_peak", "peak under load", "--")],
           logy=True)
    figure(good, out, "open_files.png", "Broker open files (/proc/PID/fd)", "open files",
           [("idle_open_files", "idle", "-"),
            ("load_open_files_peak", "peak under load", "--"),
            ("restarted_open_files", "idle after restart", ":")], logy=True)
    figure(good, out, "throughput.png",
           "Keyed 1 KiB records, acks=all, one librdkafka producer", "records/s",
           [("load_msgs_per_s", "", "-")], logy=True)
    figure(good, out, "p99.png",
           "Delivery latency p99 at full speed (keyed 1 KiB, acks=all)", "ms",
           [("load_p99_ms", "p99", "-"), ("load_p50_ms", "p50", "--")], logy=True)
    figure(good, out, "startup.png",
           "Start after a clean stop: process start to Metadata with every partition led",
           "s", [("start_s", "", "-")], logy=True)
    t = table(rows)
    (out / "table.md").write_text(t)
    print(t)


if __name__ == "__main__":
    main()
