//! `acks` (seed 004): what durability costs. For acks=0, 1 and all, 100 B and 1 KiB
//! messages, and one producer or 128 concurrent ones, two runs each:
//!
//! - *max rate*: producers send as fast as the client takes records, for throughput.
//!   Publish latency there includes waiting in the client's buffer, so it mostly shows
//!   the queue, as in any closed-loop test at saturation.
//! - *paced*: the same producers send `--rate` messages per second in all, for latency
//!   at a load every broker sustains (the 2,000 msg/s of the design brief's figures).
//! - *paced beside a writer* (acks=all cases, unless `--beside-writer false`): the paced
//!   run again while a heavy writer ([`super::heavy_writer`]) sends 16 KiB messages as
//!   fast as the broker takes them to another topic, as brokers run beside other work.
//!   The figure that matters: its publish p99 over the paced run's.
//!
//! One producer uses the client's default 4 lanes; 128 producers use one lane each
//! (128 connections, like the 128 clients of the seed). One consumer reads every
//! partition from the end, for the consume rate and end-to-end latency.

use super::context::{Common, Ctx};
use super::heavy_writer::HeavyWriter;
use super::{measure, without_lag, ConsumerSpec};
use crate::load::{self, Load, Reading, Run, Work};
use crate::report::Report;
use clap::Args;
use headway_client::{ConsumerConfig, ProducerConfig, StartOffset};
use serde_json::json;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct AcksArgs {
    #[command(flatten)]
    pub common: Common,
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
    /// Run each acks=all case's paced run a second time beside a heavy writer.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub beside_writer: bool,
    /// Most the heavy writer writes per run, in MiB [default: 2048; with --quick 16].
    #[arg(long)]
    pub writer_mb_max: Option<u64>,
}

/// Client memory for records, shared by all producers of a case, so that 128
/// producers at full speed do not buffer 128 times the default.
const BUFFER_BYTES_TOTAL: usize = 32 * 1024 * 1024;
/// Time a case needs besides its runs (topic, connections, drain), estimated.
const CASE_OVERHEAD: Duration = Duration::from_millis(700);
/// The heavy writer's message size.
const WRITER_SIZE: usize = 16 * 1024;

/// The runs of one case: at max rate, paced, and paced beside a heavy writer.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    MaxRate,
    Paced,
    PacedBesideWriter,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::MaxRate => "max-rate",
            Phase::Paced => "paced",
            Phase::PacedBesideWriter => "paced-beside-writer",
        }
    }

    /// The runs of a case with `acks`.
    fn of_case(acks: i16, beside_writer: bool) -> &'static [Phase] {
        match beside_writer && acks == -1 {
            true => &[Phase::MaxRate, Phase::Paced, Phase::PacedBesideWriter],
            false => &[Phase::MaxRate, Phase::Paced],
        }
    }
}

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
    let runs: usize = cases
        .iter()
        .map(|c| Phase::of_case(c.3, args.beside_writer).len())
        .sum();
    let per_run = budget
        .saturating_sub(CASE_OVERHEAD * cases.len() as u32)
        .div_f64(runs as f64)
        .max(Duration::from_millis(400));
    let writer_mb_max = args
        .writer_mb_max
        .unwrap_or(if ctx.common.quick { 16 } else { 2048 });
    let writer_topic = load::topic_name("acks", "writer");
    if runs > 2 * cases.len() {
        load::create_topic(ctx.bootstrap(), &writer_topic, 1).await?;
    }
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
            "each case: {:.1} s at max rate, then {:.1} s paced at {} msg/s in all{}; \
             {} partitions; linger {} ms; 1 producer has 4 lanes, 128 producers 1 lane each; \
             the first tenth of each run is warm-up, left out of the percentiles",
            per_run.as_secs_f64(),
            per_run.as_secs_f64(),
            args.rate,
            match args.beside_writer {
                true => format!(
                    ", then with acks=all paced again beside a writer of {WRITER_SIZE} B \
                     messages at max rate (acks=all, up to {writer_mb_max} MiB, another topic)"
                ),
                false => String::new(),
            },
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
        for &phase in Phase::of_case(acks, args.beside_writer) {
            let rate = (phase != Phase::MaxRate).then_some(args.rate);
            let name = format!(
                "acks={acks_name} {size}B x{producers} {}{}",
                rate.map_or("max rate".into(), |r| format!("{r:.0} msg/s")),
                match phase {
                    Phase::PacedBesideWriter => " beside a writer",
                    _ => "",
                }
            );
            let writer = match phase {
                Phase::PacedBesideWriter => Some(
                    HeavyWriter::connect(
                        ctx.bootstrap(),
                        &writer_topic,
                        WRITER_SIZE,
                        writer_mb_max,
                    )
                    .await?,
                ),
                _ => None,
            };
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
            let writer =
                writer.map(|w| tokio::spawn(w.write("acks", ctx.broker_pid(), warmup, per_run)));
            let results = measure(&run, loads, consumers, per_run, None).await;
            let writer_json = match writer {
                Some(task) => task.await?,
                None => serde_json::Value::Null,
            };
            let params = json!({
                "acks": acks_name, "size": size, "producers": producers,
                "phase": phase.name(), "rate": rate, "partitions": args.partitions,
                "linger_ms": args.linger_ms, "writer": writer_json.is_object(),
            });
            let extra = json!({ "writer": writer_json });
            let r = run.report(params, without_lag(results), extra);
            case[phase.name()] = json!({
                "publish_msgs_per_s": r.publish.msgs_per_s,
                "publish_mb_per_s": r.publish.mb_per_s,
                "publish_p50_ms": r.publish_latency_ms.p50,
                "publish_p99_ms": r.publish_latency_ms.p99,
                "e2e_p50_ms": r.e2e_latency_ms.p50,
                "e2e_p99_ms": r.e2e_latency_ms.p99,
                "errors": r.publish_errors,
                "writer_mb_per_s": writer_json["mb_per_s"],
            });
            report.runs.push(r);
        }
        let paced_p99 = |phase: Phase| case[phase.name()]["publish_p99_ms"].as_f64();
        if let (Some(beside), Some(alone)) =
            (paced_p99(Phase::PacedBesideWriter), paced_p99(Phase::Paced))
        {
            case["publish_p99_beside_writer_over_paced"] = json!(beside / alone.max(1e-3));
        }
        summary.push(case);
    }
    report.summary = json!({ "cases": summary });
    ctx.finish(report)
}
