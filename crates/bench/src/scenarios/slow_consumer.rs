//! `slow-consumer` (seed 001): does one slow reader delay the others?
//!
//! A producer writes `--rate` messages per second of `--size` bytes (acks=all) to one
//! topic. Two runs of equal length:
//!
//! 1. *without*: `--fast` consumers read from the end.
//! 2. *with*: the same fast consumers, plus one slow consumer that reaches the broker
//!    through the delay proxy (`--delay-ms` each way, `--proxy-buffer-bytes` in flight
//!    per direction, which carries less than the stream, so it falls behind for good),
//!    plus, unless `--catch-up false`, a catch-up consumer that reads the topic from
//!    offset 0 at full speed (a backlog of `--backlog-mb` MiB is written before the
//!    runs).
//!
//! The backlog is cold when the catch-up consumer starts: after the prefill, and again
//! just before run 2, every file under `--evict-dir` (and the data directory of a broker
//! the scenario started) is written back and dropped from the page cache
//! ([`crate::evict`]), so the catch-up consumer reads from the disk.
//!
//! The figure that matters: the fast consumers' end-to-end p99 in run 2 divided by run
//! 1 (1.0 means the slow ones cost the others nothing), and the producer's rate in both.

use super::context::{Common, Ctx};
use super::{
    caught_up, disturber, evict_backlog, fast_consumers, measure, replay_seconds, with_lag,
};
use crate::evict::Evicted;
use crate::load::{self, Load, Reading, Run};
use crate::proxy::Proxy;
use crate::report::Report;
use crate::report::RunReport;
use clap::{ArgAction, Args};
use headway_client::StartOffset;
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct SlowConsumerArgs {
    #[command(flatten)]
    pub common: Common,
    /// Fast consumers.
    #[arg(long, default_value_t = 3)]
    pub fast: usize,
    /// Messages per second from the producer.
    #[arg(long, default_value_t = 4000.0)]
    pub rate: f64,
    /// Message size in bytes (seed 001 used 1 KiB; smaller did not reproduce it).
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    #[command(flatten)]
    pub readers: super::ReaderArgs,
    /// Add a consumer that reads the topic from offset 0 at full speed.
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    pub catch_up: bool,
    /// Backlog written before the runs for the catch-up consumer, in MiB [default: 256;
    /// with --quick 4].
    #[arg(long)]
    pub backlog_mb: Option<u64>,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 1)]
    pub partitions: i32,
}

/// Share of each run that is warm-up.
const WARMUP_FRACTION: f64 = 0.1;

/// The topic, its backlog and the proxy, set up before the first run.
struct Setup {
    topic: String,
    backlog_mb: u64,
    backlog_messages: u64,
    evict_dirs: Vec<PathBuf>,
    /// Whether the backlog is dropped from the page cache before run 2.
    evict: bool,
    prefill_s: f64,
    /// Lines for the report's notes, one per eviction.
    eviction_notes: Vec<String>,
    per_run: Duration,
    warmup: Duration,
    /// The slow consumer's way to the broker; kept until the runs are over.
    proxy: Proxy,
}

/// What the two runs found beyond their reports.
#[derive(Default)]
struct Outcome {
    /// What the eviction before run 2 did.
    evicted_before_run: Option<Evicted>,
    /// Seconds the catch-up consumer took to read what was there as run 2 started.
    caught_up_s: Option<f64>,
    /// Messages there as run 2 started.
    replayed: u64,
}

pub async fn run(ctx: &Ctx, args: &SlowConsumerArgs) -> anyhow::Result<Report> {
    let mut setup = setup(ctx, args).await?;
    let mut report = ctx.report("slow-consumer", vec![describe(args, &setup)]);
    let outcome = run_both(ctx, args, &mut setup, &mut report).await?;
    summarize(args, setup, &outcome, &mut report);
    ctx.finish(report)
}

/// Creates the topic, writes the backlog (and makes it cold), divides the time and
/// starts the delay proxy.
async fn setup(ctx: &Ctx, args: &SlowConsumerArgs) -> anyhow::Result<Setup> {
    let budget = ctx.duration(120.0, 10.0);
    let topic = load::topic_name("slow-consumer", "stream");
    load::create_topic(ctx.bootstrap(), &topic, args.partitions).await?;
    let backlog_mb = args
        .backlog_mb
        .unwrap_or(if ctx.common.quick { 4 } else { 256 });
    let backlog_messages = if args.catch_up {
        backlog_mb * 1024 * 1024 / args.size.max(1) as u64
    } else {
        0
    };
    let evict_dirs = args.readers.evict_dirs(ctx);
    let evict = backlog_messages > 0 && !evict_dirs.is_empty();
    let prefill_s =
        load::prefill_backlog(ctx.bootstrap(), &topic, backlog_messages, args.size).await?;
    let mut eviction_notes = Vec::new();
    if evict {
        // Writes the backlog back now, so that its write-back does not land in run 1.
        let (_, note) = evict_backlog("slow-consumer", &evict_dirs, "after the prefill").await?;
        eviction_notes.push(note);
    }
    // What is left of the budget, less a second for the eviction before run 2.
    let per_run = budget
        .saturating_sub(ctx.started.elapsed() + Duration::from_secs(1))
        .div_f64(2.0)
        .max(Duration::from_secs(2));
    // The first seconds of each run settle (connections, the JIT of a JVM broker, the
    // write-back of the backlog); they stay out of the percentiles, as the OpenMessaging
    // Benchmark's warm-up does, and still show in the latency-over-time plot.
    let warmup = if ctx.common.quick {
        Duration::ZERO
    } else {
        per_run.mul_f64(WARMUP_FRACTION)
    };
    let proxy = args.readers.proxy(ctx.bootstrap()).await?;
    Ok(Setup {
        topic,
        backlog_mb,
        backlog_messages,
        evict_dirs,
        evict,
        prefill_s,
        eviction_notes,
        per_run,
        warmup,
        proxy,
    })
}

/// The report's first note: the load and the readers.
fn describe(args: &SlowConsumerArgs, setup: &Setup) -> String {
    let backlog_mb = setup.backlog_mb;
    format!(
        "producer: {} msg/s of {} B, acks=all, {} partition(s); {} fast consumers; \
         slow consumer behind a proxy adding {} ms each way with {} KiB per direction; \
         catch-up consumer: {}; {:.1} s per run, the first {:.1} s of each left out of \
         the percentiles (warm-up); prefill {:.1} s",
        args.rate,
        args.size,
        args.partitions,
        args.fast,
        args.readers.delay_ms,
        args.readers.proxy_buffer_bytes / 1024,
        if !args.catch_up {
            "none".into()
        } else if setup.evict {
            format!(
                "from offset 0 over a {backlog_mb} MiB backlog, cold (dropped from the \
                 page cache before run 2)"
            )
        } else {
            format!(
                "from offset 0 over a {backlog_mb} MiB backlog, not evicted (no \
                 --evict-dir): it may be read from the page cache"
            )
        },
        setup.per_run.as_secs_f64(),
        setup.warmup.as_secs_f64(),
        setup.prefill_s
    )
}

/// Run 1 (fast consumers only), the eviction, then run 2 (with the slow readers); adds
/// both runs to `report`.
async fn run_both(
    ctx: &Ctx,
    args: &SlowConsumerArgs,
    setup: &mut Setup,
    report: &mut Report,
) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::default();
    let mut read_before = setup.backlog_messages;
    for with_slow in [false, true] {
        if with_slow && setup.evict {
            // Run 1 left the backlog where it was; this pass also writes back what run 1
            // wrote, so the catch-up consumer starts on cold data.
            let (evicted, note) =
                evict_backlog("slow-consumer", &setup.evict_dirs, "before run 2").await?;
            setup.eviction_notes.push(note);
            outcome.evicted_before_run = Some(evicted);
        }
        let (run_report, published, replay) =
            run_one(ctx, args, setup, with_slow, read_before).await?;
        if let Some(caught_up_s) = replay {
            outcome.caught_up_s = caught_up_s;
            outcome.replayed = read_before;
        }
        read_before += published;
        report.runs.push(run_report);
    }
    Ok(outcome)
}

/// One run: its report, the messages published, and (run 2 with a catch-up consumer)
/// when that consumer had read the `read_before` messages there at the start.
async fn run_one(
    ctx: &Ctx,
    args: &SlowConsumerArgs,
    setup: &Setup,
    with_slow: bool,
    read_before: u64,
) -> anyhow::Result<(RunReport, u64, Option<Option<f64>>)> {
    let topic = &setup.topic;
    let name = if with_slow {
        "with slow consumers"
    } else {
        "fast consumers only"
    };
    let mut consumers = fast_consumers(ctx.bootstrap(), topic, args.fast).await?;
    if with_slow {
        let proxied = setup.proxy.addr.to_string();
        consumers.push(disturber(&proxied, topic, "slow", "slow", StartOffset::Latest).await?);
        if args.catch_up {
            consumers.push(
                disturber(
                    ctx.bootstrap(),
                    topic,
                    "catch-up",
                    "catch-up",
                    StartOffset::Earliest,
                )
                .await?,
            );
        }
    }
    let producer = load::stream_producer(ctx.bootstrap()).await?;
    // Created once every consumer is connected, so that the run's clock and rates
    // start with the load.
    let run = Run::new(
        "slow-consumer",
        name,
        Reading::Each,
        ctx.broker_pid(),
        setup.warmup,
    );
    let loads = vec![(
        producer,
        Load {
            topic: topic.clone(),
            size: args.size,
            rate: Some(args.rate),
            count_max: None,
            round_robin: None,
        },
    )];
    // When the catch-up consumer has read what was there as run 2 started: the time
    // its cold replay took, which its average rate over the run hides.
    let watcher = (with_slow && args.catch_up)
        .then(|| tokio::spawn(caught_up(Arc::clone(&run), "catch-up", read_before)));
    let results = measure(&run, loads, consumers, setup.per_run, None).await;
    let replay = match watcher {
        Some(watcher) => Some(replay_seconds(Some(watcher)).await),
        None => None,
    };
    let published = run.meter.published.load(Ordering::Relaxed);
    let results = with_lag(results, read_before, published);
    let params = json!({
        "with_slow": with_slow, "fast": args.fast, "rate": args.rate, "size": args.size,
        "delay_ms": args.readers.delay_ms, "catch_up": with_slow && args.catch_up,
        "partitions": args.partitions,
    });
    Ok((run.report(params, results, json!({})), published, replay))
}

/// The summary (run 2 against run 1), the eviction notes, and a line on stderr.
fn summarize(args: &SlowConsumerArgs, setup: Setup, outcome: &Outcome, report: &mut Report) {
    let Outcome {
        caught_up_s,
        replayed,
        ..
    } = *outcome;
    let fast_p99 = |i: usize| {
        let run = &report.runs[i];
        run.e2e_latency_ms.p99
    };
    let (without, with) = (fast_p99(0), fast_p99(1));
    let role = |role: &str| {
        report.runs[1]
            .consumers
            .iter()
            .find(|c| c.role == role)
            .map(|c| {
                let read = c.consume.messages;
                let available = read + c.lag_end.unwrap_or(0);
                json!({
                    "msgs_per_s": c.consume.msgs_per_s,
                    "mb_per_s": c.consume.mb_per_s,
                    "e2e_p99_ms": c.e2e_latency_ms.p99,
                    "lag_end": c.lag_end,
                    "messages": read,
                    "read_fraction": if available > 0 { read as f64 / available as f64 } else { 0.0 },
                    "replay_messages": replayed,
                    "replay_s": caught_up_s,
                    "replay_mb_per_s": caught_up_s
                        .filter(|s| *s > 0.0)
                        .map(|s| (replayed * args.size as u64) as f64 / 1e6 / s),
                })
            })
    };
    let publish = |i: usize| report.runs[i].publish.msgs_per_s;
    let evicted = outcome.evicted_before_run.clone().unwrap_or_default();
    report.summary = json!({
        "fast_e2e_p99_ms_without": without,
        "fast_e2e_p99_ms_with": with,
        "fast_p99_with_over_without": if without > 0.0 { with / without } else { 0.0 },
        "fast_e2e_p50_ms_without": report.runs[0].e2e_latency_ms.p50,
        "fast_e2e_p50_ms_with": report.runs[1].e2e_latency_ms.p50,
        "publish_msgs_per_s_without": report.runs[0].publish.msgs_per_s,
        "publish_msgs_per_s_with": report.runs[1].publish.msgs_per_s,
        "publish_with_over_without": if publish(0) > 0.0 { publish(1) / publish(0) } else { 0.0 },
        "publish_p99_ms_without": report.runs[0].publish_latency_ms.p99,
        "publish_p99_ms_with": report.runs[1].publish_latency_ms.p99,
        "slow": role("slow"),
        "catch_up": role("catch-up"),
        "backlog_messages": setup.backlog_messages,
        "backlog_mb": if args.catch_up { setup.backlog_mb } else { 0 },
        "prefill_s": setup.prefill_s,
        "evicted": setup.evict,
        "evicted_files": evicted.files,
        "evicted_bytes": evicted.bytes,
    });
    report.notes.extend(setup.eviction_notes);
    let catch_up = catch_up_line(report, outcome, args.size);
    eprintln!(
        "[slow-consumer] fast p99 {without:.2} ms without, {with:.2} ms with ({:.2}x); \
         publish {:.3}x{catch_up}",
        report.summary["fast_p99_with_over_without"]
            .as_f64()
            .unwrap_or(0.0),
        report.summary["publish_with_over_without"]
            .as_f64()
            .unwrap_or(0.0),
    );
    drop(setup.proxy);
}

/// How the catch-up consumer fared in run 2, for the line on stderr (empty without one).
fn catch_up_line(report: &Report, outcome: &Outcome, size: usize) -> String {
    let Outcome {
        caught_up_s,
        replayed,
        ..
    } = *outcome;
    report.runs[1]
        .consumers
        .iter()
        .find(|c| c.role == "catch-up")
        .map_or(String::new(), |c| {
            let read = c.consume.messages;
            let available = read + c.lag_end.unwrap_or(0);
            format!(
                "; catch-up consumer {:.0} msg/s ({:.1} MB/s), read {read} of {available} \
                 messages ({:.0}%), {}",
                c.consume.msgs_per_s,
                c.consume.mb_per_s,
                100.0 * read as f64 / available.max(1) as f64,
                match caught_up_s {
                    Some(s) => format!(
                        "replayed the {replayed} messages there at the start of run 2 in \
                         {s:.1} s ({:.1} MB/s)",
                        (replayed * size as u64) as f64 / 1e6 / s.max(1e-3)
                    ),
                    None => format!(
                        "did not replay the {replayed} messages there at the start of run 2"
                    ),
                }
            )
        })
}
