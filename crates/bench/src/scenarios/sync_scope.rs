//! `sync-scope`: is group commit better run per partition or once for the whole broker?
//! Compares the broker's `sync_scope` settings (`partition`, `broker`, `syncfs`; see
//! `docs/sync.md`). Only a broker the scenario starts can be switched, so each run
//! starts its own headway broker with `serve --sync-scope SCOPE` and stops it after;
//! the sync counters the broker logs at shutdown then belong to that run alone. With
//! `--bootstrap` the given broker is measured once, as it is configured.
//!
//! - *interference*: a light producer sends `--light-rate` small messages per second
//!   (acks=all) to a one-partition topic, alone, then next to a heavy writer on another
//!   topic (max rate, batches of `--heavy-batch-bytes`, acks=all). Read: the light
//!   producer's publish p50/p99/p99.9 with and without the heavy writer, per scope.
//! - *scale*: `--producers` producers send `--size`-byte messages at max rate
//!   (acks=all), spread one by one over P partitions, for each P of `--partitions`.
//!   Read: throughput, publish p99, and syncs per second.
//!
//! Within each case the scopes run one after another, so that a shared machine's drift
//! spreads over all of them rather than favouring one.

use super::context::{Common, Ctx};
use super::measure;
use crate::load::{self, Load, Reading, Run};
use crate::report::Report;
use crate::report::RunReport;
use crate::target::Target;
use clap::Args;
use headway_client::ProducerConfig;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Debug, Clone)]
pub struct SyncScopeArgs {
    #[command(flatten)]
    pub common: Common,
    /// Settings to compare [default: partition,broker,syncfs; with --quick
    /// partition,broker].
    #[arg(long, value_delimiter = ',')]
    pub scopes: Vec<String>,
    /// Partition counts of the scale runs [default: 1,4,16,64; with --quick 1,16].
    #[arg(long, value_delimiter = ',')]
    pub partitions: Vec<i32>,
    /// Producers in the scale runs (each with its own connection and lanes).
    #[arg(long, default_value_t = 4)]
    pub producers: usize,
    /// Message size of the scale runs, bytes.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Messages per second of the light producer.
    #[arg(long, default_value_t = 500.0)]
    pub light_rate: f64,
    /// Message size of the light producer, bytes.
    #[arg(long, default_value_t = 100)]
    pub light_size: usize,
    /// Message size of the heavy writer, bytes.
    #[arg(long, default_value_t = 16 * 1024)]
    pub heavy_size: usize,
    /// The heavy writer seals a batch once it holds this many bytes (so a batch may
    /// exceed it by one message; keep the sum under the topic's max.message.bytes).
    #[arg(long, default_value_t = 1_000_000)]
    pub heavy_batch_bytes: usize,
    /// How long an open batch waits for more records, in ms.
    #[arg(long, default_value_t = 1)]
    pub linger_ms: u64,
}

/// Time a run needs besides its load (broker start and stop, topics, connections,
/// the heavy writer's last acknowledgements), estimated.
const RUN_OVERHEAD: Duration = Duration::from_millis(1200);
/// The heavy writer runs this long before the light producer's run starts.
const HEAVY_RAMP: Duration = Duration::from_millis(300);
/// Client memory for records in a scale run, shared by its producers.
const BUFFER_BYTES_TOTAL: usize = 32 * 1024 * 1024;
/// How long the heavy writer may take to have its last batches acknowledged.
const HEAVY_FINISH_MAX: Duration = Duration::from_secs(30);

/// `headway bench sync-scope`: builds its own context, since its brokers are started
/// per run rather than once for the scenario.
pub async fn main(args: SyncScopeArgs) -> anyhow::Result<Report> {
    let bin = std::env::current_exe()?;
    let given = args.common.bootstrap.clone();
    let target = Target::open(
        Some(given.as_deref().unwrap_or("started per run")),
        &bin,
        None,
    )?;
    let label = args
        .common
        .label
        .clone()
        .unwrap_or_else(|| if given.is_some() { "broker" } else { "headway" }.into());
    let ctx = Ctx {
        common: args.common.clone(),
        target,
        label,
        started_at: crate::report::utc_now(),
        started: Instant::now(),
    };
    run(&ctx, &args, &bin).await
}

/// One broker for one run.
struct Broker {
    target: Target,
    bootstrap: String,
}

impl Broker {
    fn start(ctx: &Ctx, bin: &Path, scope: &str) -> anyhow::Result<Broker> {
        let target = match &ctx.common.bootstrap {
            Some(b) => Target::open(Some(b), bin, None)?,
            None => Target::open_with(
                None,
                bin,
                ctx.common.data_dir.as_deref(),
                &["--sync-scope".into(), scope.into()],
            )?,
        };
        Ok(Broker {
            bootstrap: target.bootstrap.clone(),
            target,
        })
    }

    fn pid(&self, ctx: &Ctx) -> Option<u32> {
        self.target.pid().or(ctx.common.broker_pid)
    }

    /// Stops a started broker; its (rounds, syncs) counters, when it logged them.
    async fn stop(self) -> Option<(u64, u64)> {
        let log = tokio::task::spawn_blocking(move || self.target.stop())
            .await
            .ok()??;
        parse_counters(&log)
    }
}

/// The `sync_rounds=` and `syncs=` fields of the broker's shutdown line.
fn parse_counters(log: &str) -> Option<(u64, u64)> {
    let line = strip_ansi(log.lines().rev().find(|l| l.contains("sync_rounds"))?);
    let field = |name: &str| -> Option<u64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))?
            .parse()
            .ok()
    };
    Some((field("sync_rounds")?, field("syncs")?))
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn per_second(count: Option<(u64, u64)>, seconds: f64) -> (Option<f64>, Option<f64>) {
    match count {
        Some((rounds, syncs)) => (
            Some(rounds as f64 / seconds.max(1e-3)),
            Some(syncs as f64 / seconds.max(1e-3)),
        ),
        None => (None, None),
    }
}

/// The scopes and partition counts to run, and the time each run takes.
struct Plan {
    scopes: Vec<String>,
    partitions: Vec<i32>,
    per_run: Duration,
    warmup: Duration,
}

pub async fn run(ctx: &Ctx, args: &SyncScopeArgs, bin: &Path) -> anyhow::Result<Report> {
    let plan = setup(ctx, args);
    let mut report = ctx.report("sync-scope", describe(args, &plan));
    let interference = interference_runs(ctx, args, bin, &plan, &mut report).await?;
    let scale = scale_runs(ctx, args, bin, &plan, &mut report).await?;
    report.summary = json!({ "interference": interference, "scale": scale });
    summarize(ctx, report)
}

/// The scopes and partition counts (from the options, else by `--quick`) and the time
/// each run gets.
fn setup(ctx: &Ctx, args: &SyncScopeArgs) -> Plan {
    let quick = ctx.common.quick;
    let scopes: Vec<String> = if ctx.common.bootstrap.is_some() {
        vec!["given".into()]
    } else if !args.scopes.is_empty() {
        args.scopes.clone()
    } else if quick {
        vec!["partition".into(), "broker".into()]
    } else {
        vec!["partition".into(), "broker".into(), "syncfs".into()]
    };
    let partitions = if !args.partitions.is_empty() {
        args.partitions.clone()
    } else if quick {
        vec![1, 16]
    } else {
        vec![1, 4, 16, 64]
    };
    let budget = ctx.duration(300.0, 12.0);
    let runs = scopes.len() * (2 + partitions.len());
    let per_run = budget
        .saturating_sub(RUN_OVERHEAD * runs as u32)
        .div_f64(runs as f64)
        .max(Duration::from_millis(500));
    let warmup = if quick { Duration::ZERO } else { per_run / 10 };
    Plan {
        scopes,
        partitions,
        per_run,
        warmup,
    }
}

/// The report's notes: how the runs are made.
fn describe(args: &SyncScopeArgs, plan: &Plan) -> Vec<String> {
    vec![
        format!(
            "each run starts its own headway broker (flush=sync) with the run's \
             --sync-scope, and stops it after; {:.1} s of load per run; the first tenth \
             is warm-up, left out of the percentiles",
            plan.per_run.as_secs_f64()
        ),
        format!(
            "interference: light producer {} msg/s of {} B, acks=all, linger {} ms, on \
             its own topic; heavy writer at max rate, {} B messages in batches up to {} B, \
             acks=all, on another topic, started {} ms before the light run",
            args.light_rate,
            args.light_size,
            args.linger_ms,
            args.heavy_size,
            args.heavy_batch_bytes,
            HEAVY_RAMP.as_millis()
        ),
        format!(
            "scale: {} producers at max rate, {} B messages, acks=all, linger {} ms, \
             spread one by one over the partitions",
            args.producers, args.size, args.linger_ms
        ),
        "syncs/s: fdatasync and fsync calls (one syncfs per round with syncfs) the \
         broker made during the run, over its load time; the producers' last \
         acknowledgements after the load are included"
            .into(),
    ]
}

/// The interference case for every scope, alone then beside the heavy writer: adds the
/// runs to `report` and returns the summary's lines.
async fn interference_runs(
    ctx: &Ctx,
    args: &SyncScopeArgs,
    bin: &Path,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<Vec<Value>> {
    let mut interference = Vec::new();
    for heavy in [false, true] {
        for scope in &plan.scopes {
            let broker = Broker::start(ctx, bin, scope)?;
            let name = format!(
                "{scope}: light {}",
                if heavy { "+ heavy writer" } else { "alone" }
            );
            let (r, heavy_report) =
                interference_run(ctx, args, &broker, &name, heavy, plan.per_run, plan.warmup)
                    .await?;
            let counters = broker.stop().await;
            let (r, line) = interference_line(scope, heavy, r, heavy_report, counters);
            interference.push(line);
            report.runs.push(r);
        }
    }
    Ok(interference)
}

/// One interference run's summary line, and its report with the broker's sync counters
/// and the heavy writer's figures added.
fn interference_line(
    scope: &str,
    heavy: bool,
    mut r: RunReport,
    heavy_report: Option<RunReport>,
    counters: Option<(u64, u64)>,
) -> (RunReport, Value) {
    let (rounds_per_s, syncs_per_s) = per_second(counters, r.duration_s);
    let line = json!({
        "scope": scope, "heavy": heavy,
        "light_msgs_per_s": r.publish.msgs_per_s,
        "light_p50_ms": r.publish_latency_ms.p50,
        "light_p99_ms": r.publish_latency_ms.p99,
        "light_p999_ms": r.publish_latency_ms.p999,
        "light_max_ms": r.publish_latency_ms.max,
        "light_errors": r.publish_errors,
        "heavy_mb_per_s": heavy_report.as_ref().map(|h| h.publish.mb_per_s),
        "heavy_p99_ms": heavy_report.as_ref().map(|h| h.publish_latency_ms.p99),
        "rounds_per_s": rounds_per_s, "syncs_per_s": syncs_per_s,
    });
    r.extra = json!({
        "sync_rounds_per_s": rounds_per_s, "syncs_per_s": syncs_per_s,
        "heavy": heavy_report.map(|h| json!({
            "publish_mb_per_s": h.publish.mb_per_s,
            "publish_msgs_per_s": h.publish.msgs_per_s,
            "publish_latency_ms": h.publish_latency_ms,
            "errors": h.publish_errors,
        })),
    });
    (r, line)
}

/// The scale case for every partition count and scope: adds the runs to `report` and
/// returns the summary's lines.
async fn scale_runs(
    ctx: &Ctx,
    args: &SyncScopeArgs,
    bin: &Path,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<Vec<Value>> {
    let mut scale = Vec::new();
    for &count in &plan.partitions {
        for scope in &plan.scopes {
            let broker = Broker::start(ctx, bin, scope)?;
            let name = format!("{scope}: {count} partitions");
            let mut r =
                scale_run(ctx, args, &broker, &name, count, plan.per_run, plan.warmup).await?;
            let counters = broker.stop().await;
            let (rounds_per_s, syncs_per_s) = per_second(counters, r.duration_s);
            scale.push(json!({
                "scope": scope, "partitions": count,
                "msgs_per_s": r.publish.msgs_per_s,
                "mb_per_s": r.publish.mb_per_s,
                "p50_ms": r.publish_latency_ms.p50,
                "p99_ms": r.publish_latency_ms.p99,
                "p999_ms": r.publish_latency_ms.p999,
                "errors": r.publish_errors,
                "rounds_per_s": rounds_per_s, "syncs_per_s": syncs_per_s,
            }));
            r.extra = json!({"sync_rounds_per_s": rounds_per_s, "syncs_per_s": syncs_per_s});
            report.runs.push(r);
        }
    }
    Ok(scale)
}

/// Writes the report, then appends the two comparison tables to its Markdown.
fn summarize(ctx: &Ctx, report: Report) -> anyhow::Result<Report> {
    let report = ctx.finish(report)?;
    let md = ctx
        .common
        .out
        .join(format!("{}-{}.md", report.scenario, report.label));
    let mut text = std::fs::read_to_string(&md)?;
    text.push_str(&comparison(&report.summary));
    std::fs::write(&md, text)?;
    Ok(report)
}

async fn interference_run(
    ctx: &Ctx,
    args: &SyncScopeArgs,
    broker: &Broker,
    name: &str,
    heavy: bool,
    per_run: Duration,
    warmup: Duration,
) -> anyhow::Result<(RunReport, Option<RunReport>)> {
    let bootstrap = broker.bootstrap.as_str();
    let light_topic = load::topic_name("sync-scope", "light");
    load::create_topic(bootstrap, &light_topic, 1).await?;
    let light_config = ProducerConfig {
        // The lab measures lanes and deflection as they were: not idempotent.
        idempotent: false,
        acks: -1,
        linger: Duration::from_millis(args.linger_ms),
        ..ProducerConfig::default()
    };
    let light = load::producers(bootstrap, 1, &light_config)
        .await?
        .remove(0);
    let mut heavy_task = None;
    if heavy {
        let heavy_topic = load::topic_name("sync-scope", "heavy");
        load::create_topic(bootstrap, &heavy_topic, 1).await?;
        let config = ProducerConfig {
            // The lab measures lanes and deflection as they were: not idempotent.
            idempotent: false,
            acks: -1,
            linger: Duration::from_millis(args.linger_ms),
            batch_bytes_max: args.heavy_batch_bytes,
            buffer_bytes_max: 8 * args.heavy_batch_bytes,
            ..ProducerConfig::default()
        };
        let producer = load::producers(bootstrap, 1, &config).await?.remove(0);
        let heavy_run = Run::new(
            "sync-scope",
            &format!("{name} (heavy writer)"),
            Reading::Each,
            broker.pid(ctx),
            warmup,
        );
        let load = Load {
            topic: heavy_topic,
            size: args.heavy_size,
            rate: None,
            count_max: None,
            round_robin: None,
        };
        let task = tokio::spawn(load::produce(producer, load, Arc::clone(&heavy_run)));
        heavy_task = Some((heavy_run, task));
        tokio::time::sleep(HEAVY_RAMP).await;
    }
    let run = Run::new("sync-scope", name, Reading::Each, broker.pid(ctx), warmup);
    let load = Load {
        topic: light_topic,
        size: args.light_size,
        rate: Some(args.light_rate),
        count_max: None,
        round_robin: None,
    };
    measure(&run, vec![(light, load)], Vec::new(), per_run, None).await;
    let params = json!({
        "phase": "interference", "heavy": heavy, "light_rate": args.light_rate,
        "light_size": args.light_size, "heavy_size": args.heavy_size,
        "heavy_batch_bytes": args.heavy_batch_bytes, "linger_ms": args.linger_ms,
    });
    let light_report = run.report(params, Vec::new(), json!({}));
    let heavy_report = match heavy_task {
        None => None,
        Some((heavy_run, task)) => {
            // Marks the heavy writer's time as up; it then waits for its last acks.
            heavy_run.progress(Instant::now(), None).await;
            let abort = task.abort_handle();
            if tokio::time::timeout(HEAVY_FINISH_MAX, task).await.is_err() {
                tracing::warn!("the heavy writer was still waiting for acknowledgements");
                abort.abort();
            }
            heavy_run.drain(Duration::ZERO).await;
            Some(heavy_run.report(json!({"phase": "heavy"}), Vec::new(), json!({})))
        }
    };
    Ok((light_report, heavy_report))
}

async fn scale_run(
    ctx: &Ctx,
    args: &SyncScopeArgs,
    broker: &Broker,
    name: &str,
    partitions: i32,
    per_run: Duration,
    warmup: Duration,
) -> anyhow::Result<RunReport> {
    let bootstrap = broker.bootstrap.as_str();
    let topic = load::topic_name("sync-scope", &format!("p{partitions}"));
    load::create_topic(bootstrap, &topic, partitions).await?;
    let batch_bytes_max = ProducerConfig::default().batch_bytes_max;
    let config = ProducerConfig {
        // The lab measures lanes and deflection as they were: not idempotent.
        idempotent: false,
        acks: -1,
        linger: Duration::from_millis(args.linger_ms),
        buffer_bytes_max: (BUFFER_BYTES_TOTAL / args.producers.max(1)).max(2 * batch_bytes_max),
        ..ProducerConfig::default()
    };
    let producers = load::producers(bootstrap, args.producers, &config).await?;
    let run = Run::new("sync-scope", name, Reading::Each, broker.pid(ctx), warmup);
    let loads = producers
        .into_iter()
        .map(|p| {
            let load = Load {
                topic: topic.clone(),
                size: args.size,
                rate: None,
                count_max: None,
                round_robin: Some(partitions),
            };
            (p, load)
        })
        .collect();
    measure(&run, loads, Vec::new(), per_run, None).await;
    let params = json!({
        "phase": "scale", "partitions": partitions, "producers": args.producers,
        "size": args.size, "linger_ms": args.linger_ms,
    });
    Ok(run.report(params, Vec::new(), json!({})))
}

fn num(v: &Value, key: &str) -> String {
    v[key].as_f64().map_or("-".into(), |x| {
        if x >= 100.0 {
            format!("{x:.0}")
        } else {
            format!("{x:.2}")
        }
    })
}

/// The figures the scenario exists for, as two Markdown tables.
fn comparison(summary: &Value) -> String {
    let mut s = String::from(
        "\n## Interference: the light producer's publish latency\n\n\
         | scope | heavy writer | light msg/s | p50 ms | p99 ms | p99.9 ms | max ms | heavy MB/s | syncs/s |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in summary["interference"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r["scope"].as_str().unwrap_or("?"),
            if r["heavy"].as_bool() == Some(true) {
                "yes"
            } else {
                "no"
            },
            num(r, "light_msgs_per_s"),
            num(r, "light_p50_ms"),
            num(r, "light_p99_ms"),
            num(r, "light_p999_ms"),
            num(r, "light_max_ms"),
            num(r, "heavy_mb_per_s"),
            num(r, "syncs_per_s"),
        );
    }
    s.push_str(
        "\n## Scale: acks=all at max rate\n\n\
         | scope | partitions | msg/s | MB/s | p50 ms | p99 ms | rounds/s | syncs/s |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in summary["scale"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r["scope"].as_str().unwrap_or("?"),
            r["partitions"],
            num(r, "msgs_per_s"),
            num(r, "mb_per_s"),
            num(r, "p50_ms"),
            num(r, "p99_ms"),
            num(r, "rounds_per_s"),
            num(r, "syncs_per_s"),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_from_the_shutdown_line() {
        let plain = "2026-11-22T09:00:00Z  INFO headway_broker::registry: all partitions \
                     closed sync_scope=broker sync_rounds=812 syncs=1650\n";
        assert_eq!(parse_counters(plain), Some((812, 1650)));
        let colored = "\u{1b}[2m2026\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m all partitions closed \
                       \u{1b}[3msync_rounds\u{1b}[0m\u{1b}[2m=\u{1b}[0m7 \
                       \u{1b}[3msyncs\u{1b}[0m\u{1b}[2m=\u{1b}[0m9";
        assert_eq!(parse_counters(colored), Some((7, 9)));
        assert_eq!(parse_counters("no such line"), None);
    }
}
