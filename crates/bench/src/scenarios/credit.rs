//! `credit` (seed 002): where should the consumer's credit window be refilled, and by
//! how much?
//!
//! A backlog of small messages (`--size`, 100 B) is written in small batches
//! (`--batch-bytes`, so that a small credit still means a small fetch), then read from
//! offset 0, over and over for an equal time per configuration of the credit window;
//! the figure is messages read per second. Each message costs `--work-us` of busy CPU
//! (1 µs by default), so that consuming takes time the next fetch can overlap with, as
//! any real consumer's processing does; with no work at all the window barely matters.
//!
//! - *Stall test* (seed: "start with 200 credits, add 100 when down to X"): window
//!   `--stall-window-bytes` (256 KiB, small enough that processing one refill takes
//!   about as long as a fetch round trip), increment half the window, refill threshold
//!   swept from 0 up, the consumer reaching the broker through the delay proxy with
//!   `--stall-delay-ms` (1 ms) each way, a LAN's round trip. A threshold of 0 lets the
//!   window run dry before a fetch is sent.
//! - *Amortization test* ("add X when down to 200 − X"): the client's default window,
//!   threshold window − X, increment X swept from tiny to half the window. Small X
//!   means a fetch per few records.
//!
//! The client's defaults (threshold and increment both half the window) are the last
//! point of the amortization sweep, and the stall sweep's last point has the same
//! proportions, so the plot shows whether they sit on the plateau.

use super::context::{Common, Ctx};
use crate::latency::Recorder;
use crate::load::{self};
use crate::proxy::{Proxy, ProxyConfig};
use crate::report::Report;
use crate::report::{Rate, RunReport};
use clap::Args;
use headway_client::{ConsumerConfig, ProducerConfig, StartOffset, WindowState};
use serde_json::json;
use std::time::{Duration, Instant};

#[derive(Args, Debug, Clone)]
pub struct CreditArgs {
    #[command(flatten)]
    pub common: Common,
    /// Message size in bytes (the seed used about 50 B payloads).
    #[arg(long, default_value_t = 100)]
    pub size: usize,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 4)]
    pub partitions: i32,
    /// Backlog to read (again and again until a point's time is up), in MB [default:
    /// 64; with --quick 3].
    #[arg(long)]
    pub backlog_mb: Option<u64>,
    /// Batch size of the backlog's producer.
    #[arg(long, default_value_t = 4096)]
    pub batch_bytes: usize,
    /// The consumer's window in the amortization test [default: the client's default].
    #[arg(long)]
    pub window_bytes: Option<usize>,
    /// The consumer's window in the stall test. Smaller than the default so that a
    /// refill's worth of messages takes about as long to process as a fetch takes to
    /// come back, which is when running dry shows.
    #[arg(long, default_value_t = 256 * 1024)]
    pub stall_window_bytes: usize,
    /// In the stall test the consumer reaches the broker through the delay proxy with
    /// this delay each way, in ms, a LAN's round trip instead of loopback's (0: direct).
    #[arg(long, default_value_t = 1)]
    pub stall_delay_ms: u64,
    /// Busy work per message in µs, standing in for processing.
    #[arg(long, default_value_t = 1.0)]
    pub work_us: f64,
}

/// Refill thresholds of the stall test, as fractions of the window.
const STALL_THRESHOLDS: [f64; 8] = [
    0.0,
    1.0 / 1024.0,
    1.0 / 256.0,
    1.0 / 64.0,
    1.0 / 16.0,
    1.0 / 8.0,
    1.0 / 4.0,
    1.0 / 2.0,
];
/// Refill increments of the amortization test, as fractions of the window.
const AMORTIZATION_INCREMENTS: [f64; 7] = [
    1.0 / 2048.0,
    1.0 / 512.0,
    1.0 / 128.0,
    1.0 / 32.0,
    1.0 / 8.0,
    1.0 / 4.0,
    1.0 / 2.0,
];

struct Point {
    test: &'static str,
    window_bytes: usize,
    threshold_bytes: usize,
    increment_bytes: usize,
}

/// The backlog, the points to measure and the way to the broker, set up before the
/// first point.
struct Setup {
    /// The amortization test's window.
    window: usize,
    topic: String,
    messages: u64,
    points: Vec<Point>,
    /// The delay proxy the stall test's consumer goes through (`None`: direct); kept
    /// until the last point is measured.
    _stall_proxy: Option<Proxy>,
    stall_bootstrap: String,
    per_point: Duration,
}

/// What reading the backlog for one point's time gave.
struct Measured {
    started: Instant,
    seconds: f64,
    read: u64,
    bytes: u64,
    /// Passes that read the whole backlog.
    passes: u64,
    refills: u64,
    /// The last consumer's window at the end of its pass.
    window_state: WindowState,
}

pub async fn run(ctx: &Ctx, args: &CreditArgs) -> anyhow::Result<Report> {
    let setup = setup(ctx, args).await?;
    let mut report = ctx.report(
        "credit",
        vec![format!(
            "backlog: {} messages of {} B in {} partitions, written in batches of \
             up to {} B; window {} KiB in the stall test, {} KiB in the amortization test; \
             the stall test's consumer goes through a proxy adding {} ms each way; \
             each point reads from offset 0, again and again, \
             for {:.1} s; busy work per message {} µs",
            setup.messages,
            args.size,
            args.partitions,
            args.batch_bytes,
            args.stall_window_bytes / 1024,
            setup.window / 1024,
            args.stall_delay_ms,
            setup.per_point.as_secs_f64(),
            args.work_us
        )],
    );
    let (mut stall, mut amortization) = (Vec::new(), Vec::new());
    for point in &setup.points {
        let measured = measure_point(ctx, args, &setup, point).await?;
        let (r, entry) = summarize(point, measured);
        match point.test {
            "stall" => stall.push(entry),
            _ => amortization.push(entry),
        }
        report.runs.push(r);
    }
    let defaults = ConsumerConfig::default();
    report.summary = json!({
        "window_bytes": setup.window,
        "stall_window_bytes": args.stall_window_bytes,
        "stall_delay_ms": args.stall_delay_ms,
        "default_threshold_bytes": defaults.refill_threshold_bytes,
        "default_increment_bytes": defaults.refill_increment_bytes,
        "backlog_messages": setup.messages,
        "stall": stall,
        "amortization": amortization,
    });
    drop(setup);
    ctx.finish(report)
}

/// Writes the backlog, lists the points and starts the stall test's proxy.
async fn setup(ctx: &Ctx, args: &CreditArgs) -> anyhow::Result<Setup> {
    let budget = ctx.duration(120.0, 10.0);
    let window = args
        .window_bytes
        .unwrap_or(ConsumerConfig::default().window_bytes);
    let topic = load::topic_name("credit", "backlog");
    load::create_topic(ctx.bootstrap(), &topic, args.partitions).await?;
    let backlog_mb = args
        .backlog_mb
        .unwrap_or(if ctx.common.quick { 3 } else { 64 });
    let messages = backlog_mb * 1_000_000 / args.size.max(1) as u64;
    let prefill_config = ProducerConfig {
        // The lab measures lanes and deflection as they were: not idempotent.
        idempotent: false,
        acks: 1,
        batch_bytes_max: args.batch_bytes,
        ..ProducerConfig::default()
    };
    let prefill_s =
        load::prefill(ctx.bootstrap(), &topic, messages, args.size, prefill_config).await?;
    let points = points(args.stall_window_bytes, window);
    // A fetch over loopback returns in a fraction of a millisecond, so running dry
    // would cost almost nothing; the seed's stall needs a round trip that is not small
    // against the time it takes to process one refill.
    let stall_proxy = if args.stall_delay_ms > 0 {
        Some(
            Proxy::start(ProxyConfig {
                upstream: ctx.bootstrap().to_string(),
                delay: Duration::from_millis(args.stall_delay_ms),
                buffer_bytes: 8 * 1024 * 1024,
                kafka: true,
                ..ProxyConfig::default()
            })
            .await?,
        )
    } else {
        None
    };
    let stall_bootstrap = stall_proxy
        .as_ref()
        .map_or(ctx.bootstrap().to_string(), |p| p.addr.to_string());
    let per_point = budget
        .saturating_sub(Duration::from_secs_f64(prefill_s + 1.0))
        .div_f64(points.len() as f64)
        .max(Duration::from_millis(300));
    Ok(Setup {
        window,
        topic,
        messages,
        points,
        _stall_proxy: stall_proxy,
        stall_bootstrap,
        per_point,
    })
}

/// The stall test's points (window `stall_window`), then the amortization test's
/// (window `window`).
fn points(stall_window: usize, window: usize) -> Vec<Point> {
    let frac = |window: usize, f: f64| ((window as f64 * f) as usize).max(1);
    let mut points: Vec<Point> = STALL_THRESHOLDS
        .iter()
        .map(|&f| Point {
            test: "stall",
            window_bytes: stall_window,
            threshold_bytes: if f == 0.0 { 0 } else { frac(stall_window, f) },
            increment_bytes: stall_window / 2,
        })
        .collect();
    points.extend(AMORTIZATION_INCREMENTS.iter().map(|&f| Point {
        test: "amortization",
        window_bytes: window,
        threshold_bytes: window - frac(window, f),
        increment_bytes: frac(window, f),
    }));
    points
}

/// Reads the backlog from offset 0 with `point`'s credit window until the point's
/// time is up.
async fn measure_point(
    ctx: &Ctx,
    args: &CreditArgs,
    setup: &Setup,
    point: &Point,
) -> anyhow::Result<Measured> {
    let config = ConsumerConfig {
        window_bytes: point.window_bytes,
        refill_threshold_bytes: point.threshold_bytes,
        refill_increment_bytes: point.increment_bytes,
        ..ConsumerConfig::default()
    };
    let messages = setup.messages;
    let started = Instant::now();
    let deadline = started + setup.per_point;
    let (mut read, mut bytes, mut passes) = (0u64, 0u64, 0u64);
    let mut refills = 0;
    let mut window_state = WindowState::default();
    // The backlog is read from the start again until the point's time is up, so
    // that every point is measured over about the same time.
    while Instant::now() < deadline {
        let bootstrap = if point.test == "stall" {
            setup.stall_bootstrap.as_str()
        } else {
            ctx.bootstrap()
        };
        let consumer = load::consumer(
            bootstrap,
            &setup.topic,
            None,
            StartOffset::Earliest,
            config.clone(),
        )
        .await?;
        let mut read_this_pass = 0;
        while read_this_pass < messages && Instant::now() < deadline {
            let record = match consumer.try_next() {
                Some(r) => r,
                None => {
                    match tokio::time::timeout(Duration::from_millis(20), consumer.next()).await {
                        Ok(r) => r,
                        Err(_) => continue,
                    }
                }
            };
            read_this_pass += 1;
            bytes += record.value.as_ref().map_or(0, |v| v.len() as u64);
            if args.work_us > 0.0 {
                spin(Duration::from_secs_f64(args.work_us / 1e6));
            }
        }
        read += read_this_pass;
        passes += u64::from(read_this_pass >= messages);
        window_state = consumer.window();
        refills += window_state.refills;
    }
    Ok(Measured {
        started,
        seconds: started.elapsed().as_secs_f64(),
        read,
        bytes,
        passes,
        refills,
        window_state,
    })
}

/// The point's report and its entry in the summary.
fn summarize(point: &Point, measured: Measured) -> (RunReport, serde_json::Value) {
    let Measured {
        started,
        seconds,
        read,
        bytes,
        passes,
        refills,
        window_state,
    } = measured;
    let name = format!(
        "{}: threshold {} B, increment {} B",
        point.test, point.threshold_bytes, point.increment_bytes
    );
    eprintln!(
        "[credit] {name}: {read} messages in {seconds:.2} s, {:.0} msg/s, {refills} refills",
        read as f64 / seconds,
    );
    let rate = Rate::new(read, bytes, seconds);
    let entry = json!({
        "threshold_bytes": point.threshold_bytes,
        "increment_bytes": point.increment_bytes,
        "msgs_per_s": rate.msgs_per_s,
        "refills": refills,
    });
    let empty = Recorder::new(started);
    let r = RunReport {
        name,
        params: json!({
            "test": point.test, "window_bytes": point.window_bytes,
            "threshold_bytes": point.threshold_bytes,
            "increment_bytes": point.increment_bytes,
        }),
        duration_s: seconds,
        consume: rate,
        e2e_latency_ms: empty.summary(),
        extra: json!({
            "passes": passes,
            "refills": refills,
            "overshoots": window_state.overshoots,
            "level_max_bytes": window_state.level_max_bytes,
            "level_at_refill_max_bytes": window_state.level_at_refill_max_bytes,
        }),
        ..RunReport::default()
    };
    (r, entry)
}

/// Busy-waits (processing that uses the CPU, unlike a sleep).
fn spin(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}
