//! `acks` (seed 004): what durability costs. For acks=0, 1 and all, 100 B and 1 KiB
//! messages, and one producer or 128 concurrent ones, two runs each:
//!
//! - *max rate*: producers send as fast as the client takes records, for throughput.
//!   Publish latency there includes waiting in the client's buffer, so it mostly shows
//!   the queue, as in any closed-loop test at saturation.
//! - *paced*: the same producers send `--rate` messages per second in all, for latency
//!   at a load every broker sustains (the 2,000 msg/s of the design brief's figures).
//!
//! One producer uses the client's default 4 lanes; 128 producers use one lane each
//! (128 connections, like the 128 clients of the seed). One consumer reads every
//! partition from the end, for the consume rate and end-to-end latency.

use super::{measure, without_lag, ConsumerSpec};
use crate::load::{self, Load, Reading, Run, Work};
use crate::{Ctx, Report};
use clap::Args;
use headway_client::{ConsumerConfig, ProducerConfig, StartOffset};
use serde_json::json;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct AcksArgs {
    #[command(flatten)]
    pub common: crate::Common,
    /// Messages per second in all during the paced runs.
    #[arg(long, default_value_t = 2000.0)]
    pub rate: f64,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 4)]
    pub partitions: i32,
    /// Message sizes in bytes.
    #[arg(long, value_delimiter = ',', default_values_t = [100, 1024])]
    pub sizes: Vec<usize>,
    /// Producer counts.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 128])]
    pub producers: Vec<usize>,
    /// acks settings: 0, 1, all.
    #[arg(long, value_delimiter = ',', default_values_t = ["0".to_string(), "1".to_string(), "all".to_string()])]
    pub acks: Vec<String>,
    /// How long an open batch waits for more records, in ms (the OpenMessaging
    /// Benchmark's Kafka driver uses 1).
    #[arg(long, default_value_t = 1)]
    pub linger_ms: u64,
}

/// Client memory for records, shared by all producers of a case, so that 128
/// producers at full speed do not buffer 128 times the default.
const BUFFER_BYTES_TOTAL: usize = 32 * 1024 * 1024;
/// Time a case needs besides its two runs (topic, connections, drain), estimated.
const CASE_OVERHEAD: Duration = Duration::from_millis(700);

fn parse_acks(acks: &str) -> anyhow::Result<i16> {
    match acks {
        "all" | "-1" => Ok(-1),
        "1" => Ok(1),
        "0" => Ok(0),
        other => anyhow::bail!("acks must be 0, 1 or all, not {other:?}"),
    }
}

pub async fn run(ctx: &Ctx, args: &AcksArgs) -> anyhow::Result<Report> {
    let budget = ctx.duration(120.0, 14.0);
    let mut cases = Vec::new();
    for &producers in &args.producers {
        for &size in &args.sizes {
            for acks in &args.acks {
                cases.push((producers, size, acks.clone(), parse_acks(acks)?));
            }
        }
    }
    let per_run = budget
        .saturating_sub(CASE_OVERHEAD * cases.len() as u32)
        .div_f64(2.0 * cases.len() as f64)
        .max(Duration::from_millis(400));
    // The first tenth of each run stays out of the percentiles (connections and a JVM
    // broker's JIT settling); the series still shows it.
    let warmup = if ctx.common.quick {
        Duration::ZERO
    } else {
        per_run / 10
    };
    let mut report = ctx.report(
        "acks",
        vec![format!(
            "each case: {:.1} s at max rate, then {:.1} s paced at {} msg/s in all; \
             {} partitions; linger {} ms; 1 producer has 4 lanes, 128 producers 1 lane each; \
             the first tenth of each run is warm-up, left out of the percentiles",
            per_run.as_secs_f64(),
            per_run.as_secs_f64(),
            args.rate,
            args.partitions,
            args.linger_ms
        )],
    );
    let mut summary = Vec::new();
    for (producers, size, acks_name, acks) in cases {
        let topic = load::topic_name("acks", &format!("a{acks_name}-s{size}-p{producers}"));
        load::create_topic(ctx.bootstrap(), &topic, args.partitions).await?;
        let batch_bytes_max = ProducerConfig::default().batch_bytes_max;
        let config = ProducerConfig {
            // The lab measures lanes and deflection as they were: not idempotent.
            idempotent: false,
            acks,
            linger: Duration::from_millis(args.linger_ms),
            lanes: if producers == 1 { 4 } else { 1 },
            buffer_bytes_max: (BUFFER_BYTES_TOTAL / producers).max(2 * batch_bytes_max),
            ..ProducerConfig::default()
        };
        let clients = load::producers(ctx.bootstrap(), producers, &config).await?;
        let mut case = json!({"acks": acks_name, "size": size, "producers": producers});
        for (phase, rate) in [("max-rate", None), ("paced", Some(args.rate))] {
            let name = format!(
                "acks={acks_name} {size}B x{producers} {}",
                rate.map_or("max rate".into(), |r| format!("{r:.0} msg/s"))
            );
            let consumer = load::consumer(
                ctx.bootstrap(),
                &topic,
                None,
                StartOffset::Latest,
                ConsumerConfig::default(),
            )
            .await?;
            let run = Run::new("acks", &name, Reading::Each, ctx.broker_pid(), warmup);
            let loads = clients
                .iter()
                .map(|p| {
                    let load = Load {
                        topic: topic.clone(),
                        size,
                        rate: rate.map(|r| r / producers as f64),
                        count_max: None,
                        round_robin: None,
                    };
                    (p.clone(), load)
                })
                .collect();
            let consumers = vec![ConsumerSpec {
                name: "consumer".into(),
                role: "fast",
                measured: true,
                consumer,
                work: Work::default(),
            }];
            let results = measure(&run, loads, consumers, per_run, None).await;
            let params = json!({
                "acks": acks_name, "size": size, "producers": producers, "phase": phase,
                "rate": rate, "partitions": args.partitions, "linger_ms": args.linger_ms,
            });
            let r = run.report(params, without_lag(results), json!({}));
            case[phase] = json!({
                "publish_msgs_per_s": r.publish.msgs_per_s,
                "publish_mb_per_s": r.publish.mb_per_s,
                "publish_p50_ms": r.publish_latency_ms.p50,
                "publish_p99_ms": r.publish_latency_ms.p99,
                "e2e_p50_ms": r.e2e_latency_ms.p50,
                "e2e_p99_ms": r.e2e_latency_ms.p99,
                "errors": r.publish_errors,
            });
            report.runs.push(r);
        }
        summary.push(case);
    }
    report.summary = json!({ "cases": summary });
    ctx.finish(report)
}
