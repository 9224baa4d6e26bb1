//! `slow-lane` (seed 000): does one slow publish queue block the whole producer?
//!
//! One producer with `--lanes` lanes (12, as the seed's 12 publish threads) sends
//! `--size`-byte messages as fast as it can, in four runs: no slow lane and one slow
//! lane (lane `--slow-lane` sleeps `--lane-delay-ms` before each batch, holding its
//! in-flight slot, like a slow link), each with deflect-when-full on and off. The
//! report has each run's throughput and, per lane, its batches, full events, and the
//! waits and time the producer spent on it: with deflection off the slow lane paces
//! every batch; with it on the other lanes take the load.

use super::context::{Common, Ctx};
use super::{measure, without_lag, ConsumerSpec, Measured};
use crate::load::{self, Load, Reading, Run, Work};
use crate::report::Report;
use crate::report::RunReport;
use clap::Args;
use headway_client::{ConsumerConfig, Producer, ProducerConfig, StartOffset};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct SlowLaneArgs {
    #[command(flatten)]
    pub common: Common,
    /// Lanes of the producer.
    #[arg(long, default_value_t = 12)]
    pub lanes: usize,
    /// Which lane is slow.
    #[arg(long, default_value_t = 4)]
    pub slow_lane: usize,
    /// Delay before each batch on the slow lane, in ms.
    #[arg(long, default_value_t = 50)]
    pub lane_delay_ms: u64,
    /// Message size in bytes.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// acks setting (the seed ran with ACK=1).
    #[arg(long, default_value = "1")]
    pub acks: String,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 4)]
    pub partitions: i32,
    /// Seal a batch at this many bytes.
    #[arg(long, default_value_t = 64 * 1024)]
    pub batch_bytes: usize,
}

/// What every run shares, settled before the first.
struct Plan {
    acks: i16,
    /// (slow lane, deflection) of each run, in order.
    cases: [(bool, bool); 4],
    per_run: Duration,
}

pub async fn run(ctx: &Ctx, args: &SlowLaneArgs) -> anyhow::Result<Report> {
    let plan = setup(ctx, args)?;
    let mut report = ctx.report(
        "slow-lane",
        vec![format!(
            "one producer, {} lanes, {} in flight per lane, batches up to {} KiB, {} B \
             messages at full speed, acks={}; slow lane {} sleeps {} ms per batch; {:.1} s per run",
            args.lanes,
            ProducerConfig::default().lane_in_flight_max,
            args.batch_bytes / 1024,
            args.size,
            args.acks,
            args.slow_lane,
            args.lane_delay_ms,
            plan.per_run.as_secs_f64()
        )],
    );
    let mut summary = Vec::new();
    for (slow, deflect) in plan.cases {
        let (run, results, producer) = run_case(ctx, args, &plan, slow, deflect).await?;
        let (r, line) = summarize(args, slow, deflect, &run, results, &producer);
        summary.push(line);
        report.runs.push(r);
    }
    report.summary = json!({ "runs": summary });
    ctx.finish(report)
}

/// Checks the options and divides the time between the four runs.
fn setup(ctx: &Ctx, args: &SlowLaneArgs) -> anyhow::Result<Plan> {
    let budget = ctx.duration(120.0, 8.0);
    let acks = match args.acks.as_str() {
        "all" | "-1" => -1,
        "1" => 1,
        "0" => 0,
        other => anyhow::bail!("--acks must be 0, 1 or all, not {other:?}"),
    };
    anyhow::ensure!(
        args.slow_lane < args.lanes,
        "--slow-lane must be below --lanes"
    );
    let cases = [(false, true), (false, false), (true, false), (true, true)];
    let per_run = budget
        .saturating_sub(Duration::from_secs(2))
        .div_f64(cases.len() as f64)
        .max(Duration::from_millis(800));
    Ok(Plan {
        acks,
        cases,
        per_run,
    })
}

/// One run: a fresh producer (with or without the slow lane and deflection) and one
/// consumer, for the run's share of the time.
async fn run_case(
    ctx: &Ctx,
    args: &SlowLaneArgs,
    plan: &Plan,
    slow: bool,
    deflect: bool,
) -> anyhow::Result<(Arc<Run>, Measured, Arc<Producer>)> {
    let name = format!(
        "{}, deflect {}",
        if slow {
            "one slow lane"
        } else {
            "no slow lane"
        },
        if deflect { "on" } else { "off" }
    );
    let topic = load::topic_name("slow-lane", if slow { "slow" } else { "base" });
    load::create_topic(ctx.bootstrap(), &topic, args.partitions).await?;
    let mut lane_delays = vec![Duration::ZERO; args.lanes];
    if slow {
        lane_delays[args.slow_lane] = Duration::from_millis(args.lane_delay_ms);
    }
    let config = ProducerConfig {
        // The lab measures lanes and deflection as they were: not idempotent.
        idempotent: false,
        acks: plan.acks,
        lanes: args.lanes,
        deflect,
        batch_bytes_max: args.batch_bytes,
        buffer_bytes_max: 32 * 1024 * 1024,
        lane_delays,
        ..ProducerConfig::default()
    };
    let producer = load::producers(ctx.bootstrap(), 1, &config)
        .await?
        .remove(0);
    let consumer = load::consumer(
        ctx.bootstrap(),
        &topic,
        None,
        StartOffset::Latest,
        ConsumerConfig::default(),
    )
    .await?;
    let run = Run::new(
        "slow-lane",
        &name,
        Reading::Each,
        ctx.broker_pid(),
        Duration::ZERO,
    );
    let loads = vec![(
        producer.clone(),
        Load {
            topic,
            size: args.size,
            rate: None,
            count_max: None,
            round_robin: None,
        },
    )];
    let consumers = vec![ConsumerSpec {
        name: "consumer".into(),
        role: "fast",
        measured: true,
        consumer,
        work: Work::default(),
    }];
    let results = measure(&run, loads, consumers, plan.per_run, None).await;
    Ok((run, results, producer))
}

/// The run's report, with the producer's per-lane counts, and its line in the summary.
fn summarize(
    args: &SlowLaneArgs,
    slow: bool,
    deflect: bool,
    run: &Run,
    results: Measured,
    producer: &Producer,
) -> (RunReport, serde_json::Value) {
    let stats = producer.stats();
    let lanes: Vec<_> = stats
        .lanes
        .iter()
        .map(|l| {
            json!({
                "lane": l.lane, "batches": l.batches, "full_events": l.full_events,
                "wait_events": l.wait_events, "wait_ms": l.wait.as_secs_f64() * 1000.0,
            })
        })
        .collect();
    let params = json!({
        "slow": slow, "deflect": deflect, "lanes": args.lanes, "slow_lane": args.slow_lane,
        "lane_delay_ms": args.lane_delay_ms, "size": args.size, "acks": args.acks,
    });
    let extra = json!({
        "lanes": lanes,
        "buffer_full_events": stats.buffer_full_events,
        "batches": stats.batches,
    });
    let r = run.report(params, without_lag(results), extra);
    let line = json!({
        "slow": slow, "deflect": deflect,
        "publish_msgs_per_s": r.publish.msgs_per_s,
        "publish_mb_per_s": r.publish.mb_per_s,
        "full_events": stats.lanes.iter().map(|l| l.full_events).collect::<Vec<_>>(),
        "wait_events": stats.lanes.iter().map(|l| l.wait_events).collect::<Vec<_>>(),
    });
    (r, line)
}
