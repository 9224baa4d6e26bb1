#!/usr/bin/env python3
"""Turns the JSON reports of one lab run into PNG plots and a side-by-side Markdown table.

Usage: bench/plot.py DIR [--no-plots]

DIR holds `<scenario>-<label>.json` files written by `headway bench` (and by
bench/nats for NATS). Writes DIR/*.png (100 dpi) and DIR/summary.md, which compares
the labels (headway, kafka, kafka-fsync, nats) scenario by scenario and ends with the
figures the lab exists for. The table needs only the standard library; the plots need
matplotlib (bench/requirements.txt).
"""

import glob
import json
import os
import sys

ORDER = ["headway", "kafka", "kafka-fsync", "nats"]
COLORS = {"headway": "#1b7837", "kafka": "#2166ac", "kafka-fsync": "#67a9cf", "nats": "#b2182b",
          "headway-librdkafka": "#5aae61", "kafka-librdkafka": "#4393c3"}


def load(directory):
    reports = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path) as f:
            r = json.load(f)
        if not isinstance(r, dict) or "scenario" not in r or "runs" not in r:
            continue
        reports.setdefault(r["scenario"], {})[r["label"]] = r
    return reports


def labels_of(by_label):
    known = [l for l in ORDER if l in by_label]
    return known + sorted(l for l in by_label if l not in ORDER)


def fmt(x, digits=1):
    if x is None:
        return "-"
    if isinstance(x, float) and abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def size(n):
    return f"{n // 1024} KiB" if n >= 1024 else f"{n} B"


def ratio(a, b):
    return a / b if a is not None and b else None


def case_key(c):
    return (c["producers"], c["size"], {"0": 0, "1": 1, "all": 2}.get(c["acks"], 3))


# ---------------------------------------------------------------- tables


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def acks_section(by_label, closing):
    labels = labels_of(by_label)
    cases = {}
    for label in labels:
        for c in by_label[label]["summary"]["cases"]:
            cases.setdefault((c["producers"], c["size"], c["acks"]), {})[label] = c
    header = ["case"]
    for label in labels:
        header += [f"{label} max msg/s", f"{label} MB/s", f"{label} paced p50 / p99 ms",
                   f"{label} paced p99 beside a writer ms (writer MB/s)"]
    if "headway" in labels and "kafka" in labels:
        header += ["headway/kafka msg/s", "headway/kafka p99"]
    rows = []
    ratios = []
    for key in sorted(cases, key=lambda k: case_key({"producers": k[0], "size": k[1], "acks": k[2]})):
        per = cases[key]
        row = [f"acks={key[2]} {key[1]} B x{key[0]}"]
        for label in labels:
            c = per.get(label)
            if not c:
                row += ["-", "-", "-", "-"]
                continue
            beside = c.get("paced-beside-writer")
            row += [
                fmt(c["max-rate"]["publish_msgs_per_s"], 0),
                fmt(c["max-rate"]["publish_mb_per_s"]),
                f'{fmt(c["paced"]["publish_p50_ms"], 2)} / {fmt(c["paced"]["publish_p99_ms"], 2)}',
                f'{fmt(beside["publish_p99_ms"], 2)} ({fmt(beside["writer_mb_per_s"], 0)})' if beside else "-",
            ]
        if "headway" in per and "kafka" in per:
            t = ratio(per["headway"]["max-rate"]["publish_msgs_per_s"], per["kafka"]["max-rate"]["publish_msgs_per_s"])
            p = ratio(per["headway"]["paced"]["publish_p99_ms"], per["kafka"]["paced"]["publish_p99_ms"])
            row += [fmt(t, 2), fmt(p, 2)]
            ratios.append((row[0], t, p))
        rows.append(row)
    text = "## acks (seed 004)\n\nMax-rate throughput and publish latency (send to acknowledgement) when paced; "
    text += "full percentiles per run are in each broker's `acks-<label>.md`.\n\n" + table(header, rows)
    if ratios:
        closing.append("**acks, headway/Kafka** (throughput ratio at max rate; p99 ratio when paced, below 1 is better):")
        for name, t, p in ratios:
            closing.append(f"- {name}: throughput {fmt(t, 2)}x, p99 {fmt(p, 2)}x")
    return text


def slow_consumer_section(by_label, closing):
    labels = labels_of(by_label)
    header = [
        "broker",
        "fast p99 without ms",
        "fast p99 with ms",
        "with / without",
        "fast p50 without / with ms",
        "publish msg/s without / with",
        "publish with / without",
        "slow consumer msg/s, p99 ms",
        "backlog MiB",
        "cold",
        "catch-up msg/s, MB/s",
        "catch-up replay s, MB/s",
        "catch-up read",
        "broker RSS max MiB",
    ]
    rows = []
    for label in labels:
        r = by_label[label]
        s = r["summary"]
        slow = s.get("slow") or {}
        catch = s.get("catch_up") or {}
        rss = [run.get("broker_rss_mib_max") for run in r["runs"] if run.get("broker_rss_mib_max")]
        publish_ratio = s.get("publish_with_over_without")
        if publish_ratio is None:
            publish_ratio = ratio(s.get("publish_msgs_per_s_with"), s.get("publish_msgs_per_s_without"))
        backlog = s.get("backlog_mb")
        if backlog is None and s.get("backlog_messages"):
            # Reports from before backlog_mb: messages of the run's size.
            backlog = s["backlog_messages"] * r["runs"][0]["params"].get("size", 1024) / 2**20
        evicted = s.get("evicted")
        rows.append([
            label,
            fmt(s["fast_e2e_p99_ms_without"], 2),
            fmt(s["fast_e2e_p99_ms_with"], 2),
            fmt(s["fast_p99_with_over_without"], 2),
            f'{fmt(s["fast_e2e_p50_ms_without"], 2)} / {fmt(s["fast_e2e_p50_ms_with"], 2)}',
            f'{fmt(s["publish_msgs_per_s_without"], 0)} / {fmt(s["publish_msgs_per_s_with"], 0)}',
            fmt(publish_ratio, 3),
            f'{fmt(slow.get("msgs_per_s"), 0)}, {fmt(slow.get("e2e_p99_ms"), 0)}' if slow else "-",
            fmt(float(backlog), 0) if backlog else "-",
            "-" if evicted is None or not catch else ("yes" if evicted else "no"),
            f'{fmt(catch.get("msgs_per_s"), 0)}, {fmt(catch.get("mb_per_s"), 1)}' if catch else "-",
            (f'{fmt(catch["replay_s"], 1)}, {fmt(catch.get("replay_mb_per_s"), 1)}' if catch.get("replay_s") is not None
             else ("not done" if "replay_s" in catch else "-")),
            f'{catch["read_fraction"] * 100:.0f}% ({catch.get("messages", 0):,} msgs)' if catch.get("read_fraction") is not None else "-",
            fmt(max(rss), 0) if rss else "-",
        ])
        closing.append(
            f"**slow-consumer, {label}**: fast consumers' p99 {fmt(s['fast_e2e_p99_ms_with'], 2)} ms with the slow "
            f"ones / {fmt(s['fast_e2e_p99_ms_without'], 2)} ms without = {fmt(s['fast_p99_with_over_without'], 2)}x "
            f"(target at most 1.1); producer {fmt(publish_ratio, 3)}x (target at least 0.95)"
        )
    return ("## slow-consumer (seed 001)\n\nEnd-to-end latency of the fast consumers, without and with a consumer behind "
            "the 200 ms delay proxy (and, for Kafka-protocol brokers, a catch-up consumer reading from offset 0 over the "
            "backlog; \"cold\": its files were dropped from the page cache before the run). \"catch-up replay\": time "
            "it took to read what was there when the run started (backlog and run 1), and that rate; \"catch-up read\": "
            "share of all there was to read that it read before the run ended.\n\n" + table(header, rows))


def stuck_consumer_section(by_label, closing):
    labels = labels_of(by_label)
    header = [
        "broker",
        "fast p99 without ms",
        "fast p99 with ms",
        "with / without",
        "publish msg/s without / with",
        "publish with / without",
        "broker RSS max MiB without / with",
        "produced MiB with",
        "stuck: requests written, blocked, closed by broker",
    ]
    rows = []
    for label in labels:
        s = by_label[label]["summary"]
        written = s.get("stuck_requests_written")
        stuck = f'{f"{written:,}" if isinstance(written, int) else "-"}, {s.get("stuck_write_blocked", "-")}, {s.get("stuck_closed_by_broker", "-")} of {s.get("stuck_clients", "-")}'
        if s.get("rss_limit_hit"):
            stuck += f' (disconnected at the {fmt(s.get("rss_limit_mib"), 0)} MiB guard)'
        rows.append([
            label,
            fmt(s["fast_e2e_p99_ms_without"], 2),
            fmt(s["fast_e2e_p99_ms_with"], 2),
            fmt(s["fast_p99_with_over_without"], 2),
            f'{fmt(s["publish_msgs_per_s_without"], 0)} / {fmt(s["publish_msgs_per_s_with"], 0)}',
            fmt(s.get("publish_with_over_without"), 3),
            f'{fmt(s.get("broker_rss_mib_max_without"), 0)} / {fmt(s.get("broker_rss_mib_max_with"), 0)}',
            fmt(s.get("produced_mb_with"), 0),
            stuck,
        ])
        closing.append(
            f"**stuck-consumer, {label}**: fast consumers' p99 {fmt(s['fast_e2e_p99_ms_with'], 2)} ms with stuck clients "
            f"/ {fmt(s['fast_e2e_p99_ms_without'], 2)} ms without = {fmt(s['fast_p99_with_over_without'], 2)}x (target at most 1.1); "
            f"producer {fmt(s.get('publish_with_over_without'), 3)}x; broker RSS max {fmt(s.get('broker_rss_mib_max_with'), 0)} MiB "
            f"(target under 256) while {fmt(s.get('produced_mb_with'), 0)} MiB were produced"
        )
    return ("## stuck-consumer\n\nFast consumers and the producer without and with clients that send fetches "
            "(NATS: subscribe) and never read their socket; the broker's peak resident memory in each run. \"blocked\": stuck "
            "clients whose writes the broker stopped accepting.\n\n" + table(header, rows))


def slow_lane_section(by_label, closing):
    labels = labels_of(by_label)
    names = [run["name"] for run in by_label[labels[0]]["runs"]]
    header = ["run"]
    for label in labels:
        header += [f"{label} MB/s", f"{label} slow-lane full / waits"]
    rows = []
    for name in names:
        row = [name]
        for label in labels:
            run = next((x for x in by_label[label]["runs"] if x["name"] == name), None)
            if not run:
                row += ["-", "-"]
                continue
            slow = run["params"]["slow_lane"]
            lane = next((l for l in run["extra"]["lanes"] if l["lane"] == slow), None)
            row += [fmt(run["publish"]["mb_per_s"]), f'{lane["full_events"]} / {lane["wait_events"]}' if lane else "-"]
            if run["params"]["slow"]:
                closing_line = f"**slow-lane, {label}**: {name}: {fmt(run['publish']['mb_per_s'])} MB/s"
                closing.append(closing_line)
        rows.append(row)
    return "## slow-lane (seed 000)\n\nOne producer, 12 lanes, full speed; lane 4 sleeps before each batch when slowed.\n\n" + table(header, rows)


def credit_section(by_label, closing):
    labels = labels_of(by_label)
    text = "## credit (seed 002)\n\nMessages per second read from a backlog against the consumer's refill threshold (stall test, increment half the window) and refill increment (amortization test, threshold window minus increment). The last row of each is the client's default.\n\n"
    for test, key in [("stall", "threshold_bytes"), ("amortization", "increment_bytes")]:
        points = by_label[labels[0]]["summary"][test]
        header = [key.replace("_", " ")] + [f"{l} msg/s" for l in labels]
        rows = []
        for i, p in enumerate(points):
            row = [f"{p[key]:,}"]
            for label in labels:
                pts = by_label[label]["summary"][test]
                row.append(fmt(pts[i]["msgs_per_s"], 0) if i < len(pts) else "-")
            rows.append(row)
        text += f"{test} test:\n\n" + table(header, rows) + "\n"
        for label in labels:
            pts = by_label[label]["summary"][test]
            best = max(p["msgs_per_s"] for p in pts)
            shape = ", ".join(f"{size(p[key])}: {p['msgs_per_s'] / best:.2f}" for p in pts)
            closing.append(f"**credit {test}, {label}** (msg/s relative to the best point, by {key.replace('_bytes', '')}): {shape}")
    return text


def parallelism_section(by_label, closing):
    labels = labels_of(by_label)
    names = [x["shape"] for x in by_label[labels[0]]["summary"]["runs"]]
    header = ["shape"]
    for label in labels:
        header += [f"{label} drain s", f"{label} busy consumers", f"{label} e2e p50 / p99 ms"]
    rows = []
    for name in names:
        row = [name]
        for label in labels:
            x = next((r for r in by_label[label]["summary"]["runs"] if r["shape"] == name), None)
            if not x:
                row += ["-", "-", "-"]
                continue
            row += [
                fmt(x["drain_s"], 2) + ("" if x.get("drained", True) else " (not drained)"),
                f'{x["busy_consumers"]} of {x["consumers"]}',
                f'{fmt(x["e2e_p50_ms"], 0)} / {fmt(x["e2e_p99_ms"], 0)}',
            ]
        rows.append(row)
    return "## parallelism (seed 003)\n\nA spike drained by consumers that each process a message with fixed work; time from the first send to the last message processed.\n\n" + table(header, rows)


def noisy_neighbour_section(by_label, closing):
    labels = labels_of(by_label)
    header = [
        "broker (clients)",
        "publish p99 quiet / writer / catch-up ms",
        "writer / quiet",
        "catch-up / quiet",
        "fast e2e p99 quiet / writer / catch-up ms",
        "writer / quiet",
        "catch-up / quiet",
        "writer MB/s",
        "catch-up replay MB/s",
    ]
    rows = []
    for label in labels:
        s = by_label[label]["summary"]
        ph = {p["phase"]: p for p in s["phases"]}
        three = ["quiet", "writer", "catch-up"]
        writer = s.get("writer") or {}
        catch = s.get("catch_up") or {}
        replay = catch.get("replay_mb_per_s")
        rows.append([
            label,
            " / ".join(fmt(ph[p]["publish_p99_ms"], 2) for p in three),
            fmt(s["publish_p99_writer_over_quiet"], 2),
            fmt(s["publish_p99_catch_up_over_quiet"], 2),
            " / ".join(fmt(ph[p]["e2e_p99_ms"], 2) for p in three),
            fmt(s["e2e_p99_writer_over_quiet"], 2),
            fmt(s["e2e_p99_catch_up_over_quiet"], 2),
            fmt(writer.get("mb_per_s"), 0),
            (fmt(replay, 0) + ("" if catch.get("replay_finished") else " (not done)")) if replay is not None else "-",
        ])
        closing.append(
            f"**noisy-neighbour, {label}**: publish p99 beside the writer {fmt(s['publish_p99_writer_over_quiet'], 2)}x "
            f"quiet (target at most 2), fast consumers' p99 beside the readers {fmt(s['e2e_p99_catch_up_over_quiet'], 2)}x "
            f"(target at most 1.1); writer {fmt(writer.get('mb_per_s'), 0)} MB/s, replay {fmt(replay, 0)} MB/s"
        )
    return ("## noisy-neighbour\n\nA light producer (2,000 msg/s of 1 KiB, acks=all) and three tail consumers: quiet, beside a "
            "full-speed writer on another topic, and beside a cold catch-up reader, a 200 ms-delayed reader and a stuck one. "
            "Ratios are p99 with the neighbour over quiet.\n\n" + table(header, rows))


SECTIONS = [
    ("acks", acks_section),
    ("slow-consumer", slow_consumer_section),
    ("stuck-consumer", stuck_consumer_section),
    ("noisy-neighbour", noisy_neighbour_section),
    ("slow-lane", slow_lane_section),
    ("credit", credit_section),
    ("parallelism", parallelism_section),
]


def summary_markdown(reports, directory):
    any_report = next(iter(next(iter(reports.values())).values()))
    lines = [
        f"# Lab run {os.path.basename(os.path.normpath(directory))}",
        "",
        f"{any_report['cores']} cores; every broker on loopback on this machine, measured in one run with the same client (crates/client) unless noted. Plots: the PNG files beside this one.",
        "",
    ]
    notes = set()
    for by_label in reports.values():
        for r in by_label.values():
            for n in r.get("notes", []):
                if "durab" in n or "fsync" in n or "sync" in n or "NATS" in n:
                    notes.add(f"{r['label']}: {n}")
    for n in sorted(notes):
        lines.append(f"- {n}")
    lines.append("")
    closing = []
    for scenario, section in SECTIONS:
        if scenario in reports:
            try:
                lines.append(section(reports[scenario], closing))
            except (KeyError, IndexError, TypeError) as e:
                lines.append(f"## {scenario}\n\n(report incomplete: {e!r})\n")
    lines.append("## Commands\n")
    for scenario, by_label in reports.items():
        for label in labels_of(by_label):
            lines.append(f"- `{by_label[label]['command']}`")
    lines.append("")
    lines.append("## Closing figures\n")
    lines += closing
    lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------- plots


def plots(reports, directory):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(os.path.join(directory, name), dpi=100)
        plt.close(fig)

    def bars(ax, groups, series, ylabel, log=False):
        width = 0.8 / max(1, len(series))
        for i, (label, values) in enumerate(series):
            xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
            ax.bar(xs, [v or 0 for v in values], width, label=label, color=COLORS.get(label))
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(groups, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)

    if "acks" in reports:
        by_label = reports["acks"]
        labels = labels_of(by_label)
        keys = sorted({(c["producers"], c["size"], c["acks"]) for l in labels for c in by_label[l]["summary"]["cases"]},
                      key=lambda k: case_key({"producers": k[0], "size": k[1], "acks": k[2]}))
        names = [f"acks={k[2]} {k[1]}B x{k[0]}" for k in keys]

        def value(label, key, phase, field):
            c = next((c for c in by_label[label]["summary"]["cases"] if (c["producers"], c["size"], c["acks"]) == key), None)
            return c[phase][field] if c else None

        fig, axes = plt.subplots(2, 1, figsize=(10, 8))
        bars(axes[0], names, [(l, [value(l, k, "max-rate", "publish_mb_per_s") for k in keys]) for l in labels], "MB/s at max rate")
        axes[0].set_title("acks: throughput")
        bars(axes[1], names, [(l, [value(l, k, "paced", "publish_p99_ms") for k in keys]) for l in labels], "publish p99 ms (paced)", log=True)
        axes[1].set_title("acks: publish latency p99 at the paced rate")
        save(fig, "acks.png")

        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        pct = ["p50", "p90", "p99", "p999", "max"]
        for ax, field, title in [(axes[0], "publish_latency_ms", "publish"), (axes[1], "e2e_latency_ms", "end-to-end")]:
            series = []
            for l in labels:
                run = next((r for r in by_label[l]["runs"] if r["params"]["acks"] == "all" and r["params"]["size"] == 1024
                            and r["params"]["producers"] == 1 and r["params"]["phase"] == "paced"), None)
                series.append((l, [run[field][p] if run else None for p in pct]))
            bars(ax, pct, series, "ms", log=True)
            ax.set_title(f"acks=all, 1 KiB, 1 producer, paced: {title}")
        save(fig, "acks-percentiles.png")

    if "slow-consumer" in reports:
        by_label = reports["slow-consumer"]
        labels = labels_of(by_label)
        fig, axes = plt.subplots(len(labels), 1, figsize=(9, 2.3 * len(labels)), squeeze=False)
        for ax, l in zip(axes[:, 0], labels):
            for run, style in zip(by_label[l]["runs"], ["-", "--"]):
                pts = [p for p in run["series"] if p["e2e_p99_ms"] > 0]
                ax.plot([p["t"] for p in pts], [p["e2e_p99_ms"] for p in pts], style, label=f"{run['name']}: p99",
                        color=COLORS.get(l))
            ax.set_yscale("log")
            ax.set_ylabel("fast e2e ms")
            ax.set_title(f"slow-consumer, {l}: fast consumers' end-to-end latency per second")
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3)
        axes[-1, 0].set_xlabel("second of the run")
        save(fig, "slow-consumer-latency.png")

        fig, ax = plt.subplots(figsize=(10, 4))
        pct = ["p50", "p90", "p99", "p999", "max"]
        groups, series = [], []
        for l in labels:
            for run in by_label[l]["runs"]:
                series.append((f"{l}: {run['name']}", [run["e2e_latency_ms"][p] for p in pct]))
        width = 0.8 / max(1, len(series))
        for i, (name, values) in enumerate(series):
            xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(pct))]
            ax.bar(xs, values, width, label=name, color=COLORS.get(name.split(":")[0]),
                   alpha=1.0 if "only" in name else 0.55, hatch="" if "only" in name else "//")
        ax.set_xticks(range(len(pct)))
        ax.set_xticklabels(pct)
        ax.set_yscale("log")
        ax.set_ylabel("fast consumers' e2e ms")
        ax.legend(fontsize=7)
        ax.grid(axis="y", alpha=0.3)
        ax.set_title("slow-consumer: fast consumers' percentiles without (solid) and with (hatched) slow consumers")
        save(fig, "slow-consumer-percentiles.png")

    if "stuck-consumer" in reports:
        by_label = reports["stuck-consumer"]
        labels = labels_of(by_label)
        fig, axes = plt.subplots(1, 3, figsize=(13, 4))
        runs = ["without", "with"]

        def get(l, key):
            return by_label[l]["summary"].get(key)

        bars(axes[0], runs, [(l, [get(l, f"fast_e2e_p99_ms_{r}") for r in runs]) for l in labels], "fast e2e p99 ms", log=True)
        axes[0].set_title("stuck-consumer: fast consumers' p99")
        bars(axes[1], runs, [(l, [get(l, f"publish_msgs_per_s_{r}") for r in runs]) for l in labels], "publish msg/s")
        axes[1].set_title("stuck-consumer: producer rate")
        bars(axes[2], runs, [(l, [get(l, f"broker_rss_mib_max_{r}") for r in runs]) for l in labels], "broker RSS max MiB")
        axes[2].axhline(256, color="grey", linestyle=":", linewidth=1)
        axes[2].set_title("stuck-consumer: broker memory (target: 256)")
        save(fig, "stuck-consumer.png")

        fig, axes = plt.subplots(len(labels), 1, figsize=(9, 2.3 * len(labels)), squeeze=False)
        for ax, l in zip(axes[:, 0], labels):
            for run, style in zip(by_label[l]["runs"], ["-", "--"]):
                pts = [p for p in run["series"] if p["e2e_p99_ms"] > 0]
                ax.plot([p["t"] for p in pts], [p["e2e_p99_ms"] for p in pts], style, label=f"{run['name']}: p99",
                        color=COLORS.get(l))
            ax.set_yscale("log")
            ax.set_ylabel("fast e2e ms")
            ax.set_title(f"stuck-consumer, {l}: fast consumers' end-to-end latency per second")
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3)
        axes[-1, 0].set_xlabel("second of the run")
        save(fig, "stuck-consumer-latency.png")

    if "noisy-neighbour" in reports:
        by_label = reports["noisy-neighbour"]
        labels = labels_of(by_label)
        fig, axes = plt.subplots(len(labels), 2, figsize=(12, 2.4 * len(labels)), squeeze=False)
        for row, l in zip(axes, labels):
            offset = 0
            for run in by_label[l]["runs"]:
                pts = [p for p in run["series"] if p["publish_p99_ms"] > 0 or p["e2e_p99_ms"] > 0]
                for ax, key in [(row[0], "publish_p99_ms"), (row[1], "e2e_p99_ms")]:
                    ax.plot([offset + p["t"] for p in pts if p[key] > 0], [p[key] for p in pts if p[key] > 0],
                            label=run["name"])
                    ax.axvline(offset, color="grey", linewidth=0.5)
                offset += int(run["duration_s"]) + 1
            for ax, what in [(row[0], "publish p99 ms"), (row[1], "fast e2e p99 ms")]:
                ax.set_yscale("log")
                ax.set_ylabel(what)
                ax.set_title(f"noisy-neighbour, {l}: {what} per second", fontsize=9)
                ax.legend(fontsize=7)
                ax.grid(alpha=0.3)
        for ax in axes[-1]:
            ax.set_xlabel("second (phases back to back)")
        save(fig, "noisy-neighbour.png")

    if "slow-lane" in reports:
        by_label = reports["slow-lane"]
        labels = labels_of(by_label)
        names = [run["name"] for run in by_label[labels[0]]["runs"]]
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        bars(axes[0], names, [(l, [next((r["publish"]["mb_per_s"] for r in by_label[l]["runs"] if r["name"] == n), None)
                                   for n in names]) for l in labels], "MB/s")
        axes[0].set_title("slow-lane: producer throughput")
        l0 = labels[0]
        for run in by_label[l0]["runs"]:
            lanes = run["extra"]["lanes"]
            axes[1].plot([x["lane"] for x in lanes], [x["full_events"] for x in lanes], marker="o", label=run["name"])
        axes[1].set_xlabel("lane")
        axes[1].set_ylabel("full events")
        axes[1].set_title(f"slow-lane: full events per lane ({l0})")
        axes[1].legend(fontsize=7)
        axes[1].grid(alpha=0.3)
        save(fig, "slow-lane.png")

    if "credit" in reports:
        by_label = reports["credit"]
        labels = labels_of(by_label)
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for ax, test, key, title in [(axes[0], "stall", "threshold_bytes", "stall test: refill threshold"),
                                     (axes[1], "amortization", "increment_bytes", "amortization test: refill increment")]:
            for l in labels:
                pts = by_label[l]["summary"][test]
                xs = [max(p[key], 1024) / 1024 for p in pts]
                ax.plot(xs, [p["msgs_per_s"] for p in pts], marker="o", label=l, color=COLORS.get(l))
            ax.set_xscale("log", base=2)
            ax.set_xlabel(f"{key.replace('_bytes', '')} KiB (0 shown at 1)")
            ax.set_ylabel("messages/s")
            ax.set_ylim(bottom=0)
            ax.set_title(f"credit, {title}")
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
        save(fig, "credit.png")

    if "parallelism" in reports:
        by_label = reports["parallelism"]
        labels = labels_of(by_label)
        shapes = [x["shape"] for x in by_label[labels[0]]["summary"]["runs"]]

        def get(l, s, f):
            return next((x[f] for x in by_label[l]["summary"]["runs"] if x["shape"] == s), None)

        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        bars(axes[0], shapes, [(l, [get(l, s, "drain_s") for s in shapes]) for l in labels], "seconds to drain")
        axes[0].set_title("parallelism: time to drain the spike")
        bars(axes[1], shapes, [(l, [get(l, s, "e2e_p99_ms") for s in shapes]) for l in labels], "e2e p99 ms")
        axes[1].set_title("parallelism: end-to-end p99")
        save(fig, "parallelism.png")


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    directory = sys.argv[1]
    reports = load(directory)
    if not reports:
        print(f"plot: no reports in {directory}", file=sys.stderr)
        return 1
    with open(os.path.join(directory, "summary.md"), "w") as f:
        f.write(summary_markdown(reports, directory))
    if "--no-plots" not in sys.argv:
        plots(reports, directory)
    print(f"plot: wrote {directory}/summary.md" + ("" if "--no-plots" in sys.argv else " and the PNG plots"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
