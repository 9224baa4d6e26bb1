//! `stuck-consumer`: does a client that never reads its socket cost the
//! others anything, or grow the broker's memory?
//!
//! A producer writes `--rate` messages per second of `--size` bytes (acks=all) to a
//! `--partitions`-partition topic; `--fast` consumers read from the end. A backlog of
//! `--backlog-mb` MiB is written first, so that offset 0 has data to send. Two runs, each
//! producing the same number of messages (at least `--produce-mb` MiB):
//!
//! 1. *without*: the fast consumers only.
//! 2. *with*: the same, plus `--stuck` stuck clients. A stuck client is a raw TCP
//!    connection with a small receive buffer that writes Fetch requests for every
//!    partition from offset 0, one after the other, and never reads an answer. The
//!    broker has up to 50 MiB to send for each of them at once; what it does with that
//!    (buffer it, or stop reading the connection) shows in its resident memory.
//!
//! A guard samples the broker's resident memory every 100 ms during run 2; past
//! `--rss-limit-mib` it disconnects the stuck clients, so that a broker that buffers
//! their answers cannot take the machine down, and the summary says so.
//!
//! The figures that matter: the fast consumers' end-to-end p99 with over without, the
//! producer's rate with over without, and the broker's peak resident memory in run 2.

use super::context::{Common, Ctx};
use super::{fast_consumers, measure, without_lag};
use crate::load::{self, Load, Reading, Run};
use crate::report::Report;
use crate::report::RunReport;
use bytes::{BufMut, Bytes, BytesMut};
use clap::Args;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, RequestHeader, TopicName};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};

#[derive(Args, Debug, Clone)]
pub struct StuckConsumerArgs {
    #[command(flatten)]
    pub common: Common,
    /// Fast consumers, reading from the end.
    #[arg(long, default_value_t = 3)]
    pub fast: usize,
    /// Messages per second from the producer [default: 25000; with --quick 5000].
    #[arg(long)]
    pub rate: Option<f64>,
    /// Message size in bytes.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 4)]
    pub partitions: i32,
    /// Stuck clients in run 2.
    #[arg(long, default_value_t = 2)]
    pub stuck: usize,
    /// MiB each run produces at least [default: 1024; with --quick 8]. Runs are longer
    /// when `--duration` leaves room.
    #[arg(long)]
    pub produce_mb: Option<u64>,
    /// Backlog written before the runs, in MiB, for the stuck clients' fetches from
    /// offset 0 [default: 256; with --quick 4].
    #[arg(long)]
    pub backlog_mb: Option<u64>,
    /// Fetch requests each stuck client writes at most (it stops earlier when the
    /// broker stops reading them).
    #[arg(long, default_value_t = 100_000)]
    pub stuck_requests: u64,
    /// Broker resident memory (MiB) past which the stuck clients are disconnected.
    #[arg(long, default_value_t = 4096.0)]
    pub rss_limit_mib: f64,
}

/// Share of each run that is warm-up.
const WARMUP_FRACTION: f64 = 0.1;
/// The Fetch version the stuck clients speak: topics by name, no session needed.
const FETCH_VERSION: i16 = 11;
/// `max_bytes` and `partition_max_bytes` of the stuck clients' fetches.
const FETCH_BYTES: i32 = 50 * 1024 * 1024;
/// The stuck clients' receive buffer (the kernel doubles it).
const STUCK_RCVBUF: u32 = 4 * 1024;
/// A write that has not finished after this long counts as blocked.
const BLOCKED_AFTER: Duration = Duration::from_secs(1);
/// How often the guard reads the broker's resident memory.
const GUARD_INTERVAL: Duration = Duration::from_millis(100);
/// How long connecting a stuck client may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A quick run's shortest run, so that there is something to measure.
const QUICK_RUN_S: f64 = 3.0;

const MIB: u64 = 1024 * 1024;

/// The topic, its backlog and the shape of both runs, settled before the first.
struct Setup {
    topic: String,
    rate: f64,
    size: usize,
    backlog_mb: u64,
    prefill_s: f64,
    /// Messages each run produces.
    count: u64,
    /// How long `count` takes at `rate`.
    nominal: Duration,
    /// The longest a run's load may take.
    load_cap: Duration,
    warmup: Duration,
    pid: Option<u32>,
}

pub async fn run(ctx: &Ctx, args: &StuckConsumerArgs) -> anyhow::Result<Report> {
    let setup = setup(ctx, args).await?;
    let mut report = ctx.report("stuck-consumer", describe(args, &setup));
    let mut stuck_summary = StuckSummary::default();
    for with_stuck in [false, true] {
        let (run_report, stuck) = run_one(ctx, args, &setup, with_stuck).await?;
        if let Some(stuck) = stuck {
            stuck_summary = stuck;
        }
        report.runs.push(run_report);
    }
    summarize(args, &setup, &stuck_summary, &mut report);
    ctx.finish(report)
}

/// Creates the topic, writes the backlog and sizes the runs.
async fn setup(ctx: &Ctx, args: &StuckConsumerArgs) -> anyhow::Result<Setup> {
    let quick = ctx.common.quick;
    let rate = args
        .rate
        .unwrap_or(if quick { 5_000.0 } else { 25_000.0 })
        .max(1.0);
    let size = args.size.max(load::STAMP_BYTES);
    let produce_mb = args.produce_mb.unwrap_or(if quick { 8 } else { 1024 });
    let backlog_mb = args.backlog_mb.unwrap_or(if quick { 4 } else { 256 });
    let topic = load::topic_name("stuck-consumer", "stream");
    load::create_topic(ctx.bootstrap(), &topic, args.partitions).await?;
    let backlog_messages = backlog_mb * MIB / size as u64;
    let prefill_s = load::prefill_backlog(ctx.bootstrap(), &topic, backlog_messages, size).await?;
    // Each run produces `count` messages: --produce-mb at least, more when --duration
    // leaves room for longer runs.
    let share_s = match ctx.common.duration {
        Some(_) => ctx.remaining(0.0, 0.0).as_secs_f64().max(1.0) / 2.0 - 0.5,
        None if quick => QUICK_RUN_S,
        None => 0.0,
    };
    let count = (produce_mb * MIB)
        .div_ceil(size as u64)
        .max((rate * share_s) as u64)
        .max(1);
    let nominal = Duration::from_secs_f64(count as f64 / rate);
    // A broker that slows the producer down gets half as long again, and no longer.
    let load_cap = nominal.mul_f64(1.5) + Duration::from_secs(5);
    let warmup = if quick {
        Duration::ZERO
    } else {
        nominal.mul_f64(WARMUP_FRACTION)
    };
    Ok(Setup {
        topic,
        rate,
        size,
        backlog_mb,
        prefill_s,
        count,
        nominal,
        load_cap,
        warmup,
        pid: ctx.broker_pid(),
    })
}

/// The report's notes: the load, the stuck clients, and what cannot be measured.
fn describe(args: &StuckConsumerArgs, setup: &Setup) -> Vec<String> {
    let Setup {
        rate,
        size,
        count,
        backlog_mb,
        prefill_s,
        ..
    } = *setup;
    let mut notes = vec![format!(
        "producer: {rate} msg/s of {size} B, acks=all, {} partitions, {count} messages \
         ({:.0} MiB) per run, about {:.1} s at that rate (at most {:.1} s); {} fast \
         consumers from the end; the first {:.1} s of each run left out of the percentiles \
         (warm-up); backlog {backlog_mb} MiB written before the runs in {prefill_s:.1} s",
        args.partitions,
        (count * size as u64) as f64 / MIB as f64,
        setup.nominal.as_secs_f64(),
        setup.load_cap.as_secs_f64(),
        args.fast,
        setup.warmup.as_secs_f64(),
    )];
    notes.push(format!(
        "stuck clients: {} raw connections with a {} KiB receive buffer, each writing up to \
         {} Fetch v{FETCH_VERSION} requests (every partition from offset 0, max_wait_ms \
         500, min_bytes 1, max_bytes and partition_max_bytes {} MiB) and never reading; \
         disconnected if the broker's resident memory passes {} MiB",
        args.stuck,
        STUCK_RCVBUF / 1024,
        args.stuck_requests,
        FETCH_BYTES as u64 / MIB,
        args.rss_limit_mib
    ));
    if setup.pid.is_none() {
        notes.push(
            "broker process unknown (no --broker-pid): no resident-memory readings, no guard"
                .into(),
        );
    }
    notes
}

/// One run, with or without the stuck clients: its report, and (with them) what they
/// did.
async fn run_one(
    ctx: &Ctx,
    args: &StuckConsumerArgs,
    setup: &Setup,
    with_stuck: bool,
) -> anyhow::Result<(RunReport, Option<StuckSummary>)> {
    let topic = &setup.topic;
    let name = if with_stuck {
        "with stuck clients"
    } else {
        "fast consumers only"
    };
    let consumers = fast_consumers(ctx.bootstrap(), topic, args.fast).await?;
    let mut sockets = Vec::new();
    if with_stuck {
        for i in 0..args.stuck {
            sockets.push((format!("stuck-{i}"), connect_stuck(ctx.bootstrap()).await?));
        }
    }
    let producer = load::stream_producer(ctx.bootstrap()).await?;
    let run = Run::new(
        "stuck-consumer",
        name,
        Reading::Each,
        setup.pid,
        setup.warmup,
    );
    let mut stuck: Vec<(Arc<StuckStats>, JoinHandle<()>)> = sockets
        .into_iter()
        .map(|(name, stream)| {
            spawn_stuck(stream, topic, args.partitions, args.stuck_requests, name)
        })
        .collect();
    let guard = Arc::new(Guard::new(run.origin));
    let guard_task = match (with_stuck, setup.pid) {
        (true, Some(pid)) => Some(tokio::spawn(Arc::clone(&guard).watch(
            pid,
            args.rss_limit_mib,
            stuck.iter().map(|(_, t)| t.abort_handle()).collect(),
        ))),
        _ => None,
    };
    let loads = vec![(
        producer,
        Load {
            topic: topic.clone(),
            size: setup.size,
            rate: Some(setup.rate),
            count_max: Some(setup.count),
            round_robin: None,
        },
    )];
    let done_at = setup.count * args.fast as u64;
    let results = measure(&run, loads, consumers, setup.load_cap, Some(done_at)).await;
    if let Some(task) = guard_task {
        task.abort();
    }
    // Closes the stuck sockets.
    for (_, task) in &stuck {
        task.abort();
    }
    for (_, task) in &mut stuck {
        let _ = task.await;
    }
    let stuck_json: Vec<_> = stuck.iter().map(|(s, _)| s.json()).collect();
    let stuck_summary = with_stuck.then(|| StuckSummary::of(&stuck, &guard));
    let params = json!({
        "with_stuck": with_stuck, "stuck": if with_stuck { args.stuck } else { 0 },
        "fast": args.fast, "rate": setup.rate, "size": setup.size,
        "partitions": args.partitions, "messages": setup.count,
    });
    let extra = json!({
        "stuck": stuck_json,
        "rss_limit_hit_at_s": stuck_summary.as_ref().and_then(|s| s.limit_hit_at_s),
    });
    let mut run_report = run.report(params, without_lag(results), extra);
    if let Some(guarded) = guard.max_mib() {
        run_report.broker_rss_mib_max = Some(
            run_report
                .broker_rss_mib_max
                .map_or(guarded, |m| m.max(guarded)),
        );
    }
    Ok((run_report, stuck_summary))
}

/// The summary (run 2 against run 1), a note if the guard disconnected the stuck
/// clients, and a line on stderr.
fn summarize(
    args: &StuckConsumerArgs,
    setup: &Setup,
    stuck_summary: &StuckSummary,
    report: &mut Report,
) {
    if let Some(at) = stuck_summary.limit_hit_at_s {
        report.notes.push(format!(
            "the broker's resident memory passed {} MiB {at:.1} s into run 2: the stuck \
             clients were disconnected then, so the rest of run 2 ran without them",
            args.rss_limit_mib
        ));
    }
    report.summary = summary(
        report,
        stuck_summary,
        args,
        setup.backlog_mb,
        setup.prefill_s,
    );
    let s = &report.summary;
    let mib = |key: &str| s[key].as_f64().map_or("-".into(), |v| format!("{v:.0}"));
    eprintln!(
        "[stuck-consumer] fast p99 {:.2} ms without, {:.2} ms with ({:.2}x); publish {:.3}x; \
         broker RSS max {} MiB without, {} MiB with; {} MiB produced with; stuck clients \
         wrote {} requests, {} blocked, {} closed by the broker",
        s["fast_e2e_p99_ms_without"].as_f64().unwrap_or(0.0),
        s["fast_e2e_p99_ms_with"].as_f64().unwrap_or(0.0),
        s["fast_p99_with_over_without"].as_f64().unwrap_or(0.0),
        s["publish_with_over_without"].as_f64().unwrap_or(0.0),
        mib("broker_rss_mib_max_without"),
        mib("broker_rss_mib_max_with"),
        mib("produced_mb_with"),
        stuck_summary.requests_written,
        stuck_summary.write_blocked,
        stuck_summary.closed_by_broker,
    );
}

fn summary(
    report: &Report,
    stuck: &StuckSummary,
    args: &StuckConsumerArgs,
    backlog_mb: u64,
    prefill_s: f64,
) -> serde_json::Value {
    let (without, with) = (&report.runs[0], &report.runs[1]);
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let mib = |bytes: u64| bytes as f64 / MIB as f64;
    json!({
        "fast_e2e_p99_ms_without": without.e2e_latency_ms.p99,
        "fast_e2e_p99_ms_with": with.e2e_latency_ms.p99,
        "fast_p99_with_over_without": ratio(with.e2e_latency_ms.p99, without.e2e_latency_ms.p99),
        "fast_e2e_p50_ms_without": without.e2e_latency_ms.p50,
        "fast_e2e_p50_ms_with": with.e2e_latency_ms.p50,
        "publish_msgs_per_s_without": without.publish.msgs_per_s,
        "publish_msgs_per_s_with": with.publish.msgs_per_s,
        "publish_with_over_without": ratio(with.publish.msgs_per_s, without.publish.msgs_per_s),
        "publish_p99_ms_without": without.publish_latency_ms.p99,
        "publish_p99_ms_with": with.publish_latency_ms.p99,
        "produced_mb_without": mib(without.publish.bytes),
        "produced_mb_with": mib(with.publish.bytes),
        "broker_rss_mib_max_without": without.broker_rss_mib_max,
        "broker_rss_mib_max_with": with.broker_rss_mib_max,
        "stuck_clients": stuck.clients,
        "stuck_requests_written": stuck.requests_written,
        "stuck_write_blocked": stuck.write_blocked,
        "stuck_closed_by_broker": stuck.closed_by_broker,
        "rss_limit_mib": args.rss_limit_mib,
        "rss_limit_hit": stuck.limit_hit_at_s.is_some(),
        "backlog_mb": backlog_mb,
        "prefill_s": prefill_s,
    })
}

#[derive(Debug, Default)]
struct StuckSummary {
    clients: usize,
    requests_written: u64,
    write_blocked: usize,
    closed_by_broker: usize,
    limit_hit_at_s: Option<f64>,
}

impl StuckSummary {
    /// What the stuck clients did in run 2, and when the guard stopped them.
    fn of(stuck: &[(Arc<StuckStats>, JoinHandle<()>)], guard: &Guard) -> StuckSummary {
        StuckSummary {
            clients: stuck.len(),
            requests_written: stuck
                .iter()
                .map(|(s, _)| s.requests_written.load(Ordering::Relaxed))
                .sum(),
            write_blocked: stuck
                .iter()
                .filter(|(s, _)| s.write_blocked.load(Ordering::Relaxed))
                .count(),
            closed_by_broker: stuck
                .iter()
                .filter(|(s, _)| s.closed_by_broker.load(Ordering::Relaxed))
                .count(),
            limit_hit_at_s: *guard.hit_at_s.lock().expect("guard lock"),
        }
    }
}

/// What one stuck client did.
pub(crate) struct StuckStats {
    name: String,
    requests_written: AtomicU64,
    bytes_written: AtomicU64,
    /// A write did not finish within [`BLOCKED_AFTER`]: the broker stopped reading.
    write_blocked: AtomicBool,
    /// A write failed: the broker closed the connection.
    closed_by_broker: AtomicBool,
}

impl StuckStats {
    fn new(name: String) -> StuckStats {
        StuckStats {
            name,
            requests_written: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            write_blocked: AtomicBool::new(false),
            closed_by_broker: AtomicBool::new(false),
        }
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        json!({
            "name": self.name,
            "requests_written": self.requests_written.load(Ordering::Relaxed),
            "bytes_written": self.bytes_written.load(Ordering::Relaxed),
            "write_blocked": self.write_blocked.load(Ordering::Relaxed),
            "closed_by_broker": self.closed_by_broker.load(Ordering::Relaxed),
        })
    }
}

/// Makes a connected client stuck: it writes `requests` Fetch requests for every
/// partition of `topic` (`partitions` of them) from offset 0 and never reads an answer,
/// until the task is aborted.
pub(crate) fn spawn_stuck(
    stream: TcpStream,
    topic: &str,
    partitions: i32,
    requests: u64,
    name: String,
) -> (Arc<StuckStats>, JoinHandle<()>) {
    let stats = Arc::new(StuckStats::new(name));
    let task = tokio::spawn(write_fetches(
        stream,
        topic.to_string(),
        partitions,
        requests,
        Arc::clone(&stats),
    ));
    (stats, task)
}

/// Connects with a small receive buffer, set before connecting so that the window the
/// client advertises stays small from the first packet.
pub(crate) async fn connect_stuck(bootstrap: &str) -> anyhow::Result<TcpStream> {
    let addr = tokio::net::lookup_host(bootstrap)
        .await?
        .next()
        .ok_or_else(|| anyhow::anyhow!("{bootstrap} does not resolve"))?;
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_recv_buffer_size(STUCK_RCVBUF)?;
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(addr))
        .await
        .map_err(|_| anyhow::anyhow!("connecting a stuck client to {addr} timed out"))??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Writes up to `requests` Fetch requests and never reads; then holds the connection
/// open until the task is aborted. A write that blocks is waited for (that is the
/// broker pushing back); a write that fails means the broker closed the connection.
async fn write_fetches(
    mut stream: TcpStream,
    topic: String,
    partitions: i32,
    requests: u64,
    stats: Arc<StuckStats>,
) {
    for i in 0..requests {
        let frame = match fetch_frame(i as i32, &topic, partitions) {
            Ok(frame) => frame,
            Err(e) => {
                tracing::warn!(error = %e, "encoding a fetch request failed");
                break;
            }
        };
        let write = stream.write_all(&frame);
        tokio::pin!(write);
        let outcome = tokio::select! {
            outcome = &mut write => outcome,
            _ = tokio::time::sleep(BLOCKED_AFTER) => {
                stats.write_blocked.store(true, Ordering::Relaxed);
                write.await
            }
        };
        if outcome.is_err() {
            stats.closed_by_broker.store(true, Ordering::Relaxed);
            return;
        }
        stats.requests_written.fetch_add(1, Ordering::Relaxed);
        stats
            .bytes_written
            .fetch_add(frame.len() as u64, Ordering::Relaxed);
    }
    // Never reads: the answers stay in the socket's buffers, and the rest with the
    // broker, until the run ends and the task (and with it the socket) is dropped.
    std::future::pending::<()>().await;
}

/// One length-prefixed Fetch request for every partition of `topic` from offset 0.
fn fetch_frame(correlation_id: i32, topic: &str, partitions: i32) -> anyhow::Result<Bytes> {
    let partitions = (0..partitions)
        .map(|p| {
            FetchPartition::default()
                .with_partition(p)
                .with_current_leader_epoch(-1)
                .with_fetch_offset(0)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(FETCH_BYTES)
        })
        .collect();
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(FETCH_BYTES)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(partitions)]);
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Fetch as i16)
        .with_request_api_version(FETCH_VERSION)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("headway-bench-stuck")));
    let header_version = FetchRequest::header_version(FETCH_VERSION);
    let size = header.compute_size(header_version)? + request.compute_size(FETCH_VERSION)?;
    let mut buf = BytesMut::with_capacity(4 + size);
    buf.put_i32(size as i32);
    header.encode(&mut buf, header_version)?;
    request.encode(&mut buf, FETCH_VERSION)?;
    Ok(buf.freeze())
}

/// Watches the broker's resident memory during run 2 and disconnects the stuck clients
/// once it passes the limit.
struct Guard {
    origin: Instant,
    max_kib: AtomicU64,
    hit_at_s: Mutex<Option<f64>>,
}

impl Guard {
    fn new(origin: Instant) -> Guard {
        Guard {
            origin,
            max_kib: AtomicU64::new(0),
            hit_at_s: Mutex::new(None),
        }
    }

    fn max_mib(&self) -> Option<f64> {
        let kib = self.max_kib.load(Ordering::Relaxed);
        (kib > 0).then(|| kib as f64 / 1024.0)
    }

    /// Runs until aborted.
    async fn watch(self: Arc<Self>, pid: u32, limit_mib: f64, stuck: Vec<AbortHandle>) {
        let mut tick = tokio::time::interval(GUARD_INTERVAL);
        loop {
            tick.tick().await;
            let Some(rss) = crate::target::rss_mib(pid) else {
                continue;
            };
            self.max_kib
                .fetch_max((rss * 1024.0) as u64, Ordering::Relaxed);
            if rss > limit_mib {
                let mut hit = self.hit_at_s.lock().expect("guard lock");
                if hit.is_none() {
                    *hit = Some(self.origin.elapsed().as_secs_f64());
                    eprintln!(
                        "[stuck-consumer] broker resident memory {rss:.0} MiB passed \
                         {limit_mib} MiB: disconnecting the stuck clients"
                    );
                    for task in &stuck {
                        task.abort();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::protocol::Decodable;

    #[test]
    fn fetch_frame_decodes_as_fetch_v11_from_offset_0() {
        let frame = fetch_frame(7, "bench-topic", 4).unwrap();
        let mut body = frame.slice(4..);
        assert_eq!(
            u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize,
            body.len()
        );
        let header =
            RequestHeader::decode(&mut body, FetchRequest::header_version(FETCH_VERSION)).unwrap();
        assert_eq!(header.request_api_key, ApiKey::Fetch as i16);
        assert_eq!(header.request_api_version, FETCH_VERSION);
        assert_eq!(header.correlation_id, 7);
        let request = FetchRequest::decode(&mut body, FETCH_VERSION).unwrap();
        assert_eq!(request.max_bytes, FETCH_BYTES);
        assert_eq!(request.topics.len(), 1);
        assert_eq!(request.topics[0].topic.0.as_str(), "bench-topic");
        let partitions = &request.topics[0].partitions;
        assert_eq!(partitions.len(), 4);
        assert!(partitions.iter().all(|p| p.fetch_offset == 0));
    }
}
