//! `parallelism` (seed 003): a spike drained by few heavy or many light consumers.
//!
//! A spike of `--messages` messages is written at once; consumers, each assigned its
//! share of the partitions, process every message with a fixed amount of work and the
//! run ends when the spike is drained (or the time is up). The work models the seed's
//! I/O-bound handler: `--io-ms` of waiting plus `--cpu-ms` of computing, and a consumer
//! with a CPU share `s` takes `cpu-ms / s` for the latter. Both shapes have the same
//! CPU budget in all:
//!
//! - *few heavy*: `--heavy` consumers with share `--heavy-share`;
//! - *many light*: `--light` consumers with share `--light-share`;
//! - *many light, few partitions*: the same light consumers on a topic with only
//!   `--capped-partitions` partitions, so most of them get nothing: partitions cap
//!   parallelism (share groups, once headway has them, lift that cap).
//!
//! Reported: time to drain (first send to last message processed) and the end-to-end
//! latency percentiles, which include the processing.

use super::context::{Common, Ctx};
use super::{measure, without_lag, ConsumerSpec, Measured};
use crate::load::{self, Load, Reading, Run, Work};
use crate::report::Report;
use crate::report::RunReport;
use clap::Args;
use headway_client::{ConsumerConfig, StartOffset};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct ParallelismArgs {
    #[command(flatten)]
    pub common: Common,
    /// Messages in the spike [default: 5000; with --quick 300].
    #[arg(long)]
    pub messages: Option<u64>,
    /// Message size in bytes.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 16)]
    pub partitions: i32,
    /// Partitions in the capped run.
    #[arg(long, default_value_t = 4)]
    pub capped_partitions: i32,
    /// Waiting per message (I/O), in ms.
    #[arg(long, default_value_t = 4.0)]
    pub io_ms: f64,
    /// Computing per message at a full CPU, in ms.
    #[arg(long, default_value_t = 1.0)]
    pub cpu_ms: f64,
    /// Heavy consumers and the CPU share of each.
    #[arg(long, default_value_t = 4)]
    pub heavy: usize,
    #[arg(long, default_value_t = 0.5)]
    pub heavy_share: f64,
    /// Light consumers and the CPU share of each.
    #[arg(long, default_value_t = 16)]
    pub light: usize,
    #[arg(long, default_value_t = 0.125)]
    pub light_share: f64,
}

/// One run's consumers: how many, the CPU share of each, and the topic's partitions.
#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    consumers: usize,
    share: f64,
    partitions: i32,
}

/// What every run shares, settled before the first.
struct Plan {
    messages: u64,
    shapes: [Shape; 3],
    per_run: Duration,
}

pub async fn run(ctx: &Ctx, args: &ParallelismArgs) -> anyhow::Result<Report> {
    let plan = setup(ctx, args);
    let mut report = ctx.report(
        "parallelism",
        vec![format!(
            "spike of {} messages of {} B; work per message {} ms waiting + {} ms \
             computing / CPU share (simulated with sleeps); at most {:.1} s per run",
            plan.messages,
            args.size,
            args.io_ms,
            args.cpu_ms,
            plan.per_run.as_secs_f64()
        )],
    );
    let mut summary = Vec::new();
    for shape in plan.shapes {
        let (run, results, work) = run_shape(ctx, args, &plan, shape).await?;
        let (r, line) = summarize(&plan, shape, &run, results, work);
        summary.push(line);
        report.runs.push(r);
    }
    report.summary = json!({ "runs": summary });
    ctx.finish(report)
}

/// The spike's size, the three shapes and the time each run may take.
fn setup(ctx: &Ctx, args: &ParallelismArgs) -> Plan {
    let budget = ctx.duration(120.0, 8.0);
    let messages = args
        .messages
        .unwrap_or(if ctx.common.quick { 300 } else { 5000 });
    let shape = |name, consumers, share, partitions| Shape {
        name,
        consumers,
        share,
        partitions,
    };
    let shapes = [
        shape("few heavy", args.heavy, args.heavy_share, args.partitions),
        shape("many light", args.light, args.light_share, args.partitions),
        shape(
            "many light, few partitions",
            args.light,
            args.light_share,
            args.capped_partitions,
        ),
    ];
    let per_run = budget
        .saturating_sub(Duration::from_secs(1))
        .div_f64(shapes.len() as f64)
        .max(Duration::from_secs(1));
    Plan {
        messages,
        shapes,
        per_run,
    }
}

/// Writes the spike to a fresh topic and lets `shape`'s consumers drain it.
async fn run_shape(
    ctx: &Ctx,
    args: &ParallelismArgs,
    plan: &Plan,
    shape: Shape,
) -> anyhow::Result<(Arc<Run>, Measured, Work)> {
    let Shape {
        name: shape_name,
        consumers,
        share,
        partitions,
    } = shape;
    let name = format!("{shape_name}: {consumers} x {share} CPU, {partitions} partitions");
    let topic = load::topic_name("parallelism", &format!("p{partitions}"));
    load::create_topic(ctx.bootstrap(), &topic, partitions).await?;
    let work = Work {
        per_message: Duration::from_secs_f64((args.io_ms + args.cpu_ms / share) / 1000.0),
    };
    let mut specs = Vec::new();
    for i in 0..consumers {
        let mine: Vec<i32> = (0..partitions)
            .filter(|p| *p as usize % consumers == i)
            .collect();
        specs.push(ConsumerSpec {
            name: format!("consumer-{i}"),
            role: if mine.is_empty() { "idle" } else { "worker" },
            measured: true,
            consumer: load::consumer(
                ctx.bootstrap(),
                &topic,
                Some(mine),
                StartOffset::Latest,
                ConsumerConfig::default(),
            )
            .await?,
            work,
        });
    }
    let producer = load::stream_producer(ctx.bootstrap()).await?;
    let load = Load {
        topic,
        size: args.size,
        rate: None,
        count_max: Some(plan.messages),
        round_robin: Some(partitions),
    };
    let run = Run::new(
        "parallelism",
        &name,
        Reading::Split,
        ctx.broker_pid(),
        Duration::ZERO,
    );
    let results = measure(
        &run,
        vec![(producer, load)],
        specs,
        plan.per_run,
        Some(plan.messages),
    )
    .await;
    Ok((run, results, work))
}

/// The run's report and its line in the summary.
fn summarize(
    plan: &Plan,
    shape: Shape,
    run: &Run,
    results: Measured,
    work: Work,
) -> (RunReport, serde_json::Value) {
    let messages = plan.messages;
    let drain_s = run.drain_seconds();
    let busy = results
        .iter()
        .filter(|(m, _)| m.messages.load(std::sync::atomic::Ordering::Relaxed) > 0)
        .count();
    let params = json!({
        "shape": shape.name, "consumers": shape.consumers, "cpu_share": shape.share,
        "partitions": shape.partitions, "messages": messages,
        "work_ms": work.per_message.as_secs_f64() * 1000.0,
    });
    let r = run.report(
        params,
        without_lag(results),
        json!({"drain_s": drain_s, "busy_consumers": busy}),
    );
    let line = json!({
        "shape": shape.name, "consumers": shape.consumers, "partitions": shape.partitions,
        "busy_consumers": busy,
        "drain_s": drain_s,
        "drained": r.consume.messages >= messages,
        "e2e_p50_ms": r.e2e_latency_ms.p50, "e2e_p99_ms": r.e2e_latency_ms.p99,
        "e2e_max_ms": r.e2e_latency_ms.max,
    });
    (r, line)
}
