//! The Prometheus endpoint (`--metrics-listen HOST:PORT`, path `/metrics`): what every
//! bounded queue holds, its limit, and how often it was full, broker-wide and per
//! partition. Each scrape reads [`ServerStats`] and the partitions once and encodes a
//! fresh registry (`prometheus-client`'s text format); the counters and histograms it
//! shows live in the broker and its `ServerStats`; the registry lives for one scrape.
//!
//! Per-partition and per-group series are bounded: the first
//! `limits::METRICS_PARTITIONS_MAX` partitions and `limits::METRICS_GROUP_PARTITIONS_MAX`
//! group partitions (by name) have series, and a gauge counts the ones left out. Every
//! family, its labels and its bounds are listed in `docs/metrics.md`.
//!
//! The HTTP side is deliberately small: one request per connection. `GET /metrics`
//! answers 200 with the text format; `GET /healthz` 200 (the endpoint starts after
//! recovery, so serving means healthy); `GET /readyz` 200 when the listener accepts
//! and every partition is online, else 503 with the reasons; anything else 404. A
//! request head larger than 8 KiB or slower than 5 s closes the connection.

use crate::call::{Ctx, ServerStats};
use headway_base::limits;
use headway_broker::panics::{self, Component};
use headway_broker::{Broker, Partition, PartitionHealth, TrafficCounts};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const REQUEST_HEAD_BYTES_MAX: usize = 8 * 1024;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Binds `listen` and serves scrapes on a task until the process ends.
pub async fn start(listen: &str, ctx: Arc<Ctx>) -> std::io::Result<SocketAddr> {
    let addr = serve_http(listen, move |target| route(target, Arc::clone(&ctx))).await?;
    started();
    Ok(addr)
}

/// One answer of the broker's small HTTP endpoints (metrics and the console).
pub(crate) struct Reply {
    pub status: &'static str,
    pub content_type: &'static str,
    pub body: Cow<'static, [u8]>,
}

impl Reply {
    pub(crate) fn ok(content_type: &'static str, body: impl Into<Cow<'static, [u8]>>) -> Reply {
        Reply {
            status: "200 OK",
            content_type,
            body: body.into(),
        }
    }

    pub(crate) fn not_found(hint: &'static str) -> Reply {
        Reply {
            status: "404 Not Found",
            content_type: TEXT,
            body: hint.as_bytes().into(),
        }
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

/// Binds `listen` and answers, on a task until the process ends, one `GET` per
/// connection with `route(target)` (the request target, e.g. `/metrics`). A request
/// head larger than 8 KiB or slower than 5 s closes the connection.
pub(crate) async fn serve_http<F, Fut>(listen: &str, route: F) -> std::io::Result<SocketAddr>
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::io::Result<Reply>> + Send + 'static,
{
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let route = Arc::new(route);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let route = Arc::clone(&route);
            tokio::spawn(async move {
                let _ = tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, &*route)).await;
            });
        }
    });
    Ok(addr)
}

async fn answer<F, Fut>(mut stream: TcpStream, route: &F) -> std::io::Result<()>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = std::io::Result<Reply>>,
{
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || head.len() + n > REQUEST_HEAD_BYTES_MAX {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let target = head
        .strip_prefix(b"GET ")
        .and_then(|rest| rest.split(|&b| b == b' ').next())
        .map(|t| String::from_utf8_lossy(t).into_owned());
    let reply = match target {
        Some(target) => route(target).await?,
        None => Reply {
            status: "405 Method Not Allowed",
            content_type: TEXT,
            body: b"only GET\n".as_slice().into(),
        },
    };
    let head = format!(
        "HTTP/1.1 {}\r\ncontent-type: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        reply.status,
        reply.content_type,
        reply.body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&reply.body).await?;
    stream.shutdown().await
}

async fn route(target: String, ctx: Arc<Ctx>) -> std::io::Result<Reply> {
    Ok(match target.as_str() {
        "/metrics" => {
            // A scrape reads the partitions' directories for their size: off the runtime.
            let body = tokio::task::spawn_blocking(move || render(&ctx))
                .await
                .map_err(std::io::Error::other)?;
            Reply::ok(
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                body.into_bytes(),
            )
        }
        "/healthz" => Reply::ok(TEXT, b"ok\n".as_slice()),
        "/readyz" => match not_ready(&ctx.stats, &ctx.broker) {
            reasons if reasons.is_empty() => Reply::ok(TEXT, b"ready\n".as_slice()),
            reasons => Reply {
                status: "503 Service Unavailable",
                content_type: TEXT,
                body: (reasons.join("\n") + "\n").into_bytes().into(),
            },
        },
        _ => Reply::not_found("try /metrics, /healthz or /readyz\n"),
    })
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let g = Gauge::<i64>::default();
    g.set(i64::try_from(value).unwrap_or(i64::MAX));
    registry.register(name, help, g);
}

fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let c = Counter::<u64>::default();
    c.inc_by(value);
    registry.register(name, help, c);
}

/// Why the broker is not ready, one line per reason; empty when it is: the listener
/// does not accept connections (starting or shutting down), or partitions are offline.
pub fn not_ready(stats: &ServerStats, broker: &Broker) -> Vec<String> {
    let mut reasons = Vec::new();
    if !stats.accepting.load(Ordering::Relaxed) {
        reasons.push("the listener does not accept connections".to_string());
    }
    let (threads, alive) = broker.read_pool().strength();
    if alive < threads {
        reasons.push(format!(
            "the read pool is below strength: {alive} of {threads} threads"
        ));
    }
    for topic in broker.topics() {
        for p in topic.partitions().iter().filter(|p| p.health().offline) {
            reasons.push(format!(
                "partition {}-{} is offline",
                topic.name(),
                p.index().value()
            ));
        }
    }
    reasons
}

/// The metrics text for one scrape. Blocking: reads the partitions' directories.
pub fn render(ctx: &Ctx) -> String {
    let (stats, broker) = (&*ctx.stats, &*ctx.broker);
    let s = stats.snapshot();
    let mut r = Registry::with_prefix("headway");
    stats.requests.register(&mut r);
    ctx.authorizer.register(&mut r);
    ctx.sasl.register(&mut r);
    register_open_files(&mut r, broker);
    let t = broker.timings();
    r.register(
        "produce_stage_seconds",
        "Where produce acknowledgements spend their time, by stage and request size (docs/latency.md)",
        t.produce.clone(),
    );
    r.register(
        "fetch_stage_seconds",
        "Where fetches spend their time, by stage and kind: tail or catch_up (docs/latency.md)",
        t.fetch.clone(),
    );
    r.register(
        "sync_seconds",
        "Duration of one partition's sync by the flusher, by the bytes it carried",
        t.sync.clone(),
    );
    r.register(
        "runtime_wake_seconds",
        "How long a task woken from outside the runtime waited for a worker thread: busy workers or a busy CPU (docs/latency.md)",
        t.runtime_wake.clone(),
    );
    r.register(
        "sync_bytes",
        "Bytes one partition's sync by the flusher carried",
        t.sync_bytes.clone(),
    );
    r.register(
        "sync_records",
        "Offsets (records and markers) made durable by each sync of one partition: how many produces shared it",
        t.sync_records.clone(),
    );
    let open = s.connections.len() as u64;
    gauge(&mut r, "connections", "Open client connections", open);
    counter(
        &mut r,
        "connections_accepted",
        "Connections accepted",
        s.connections_accepted,
    );
    gauge(
        &mut r,
        "connections_reader_paused",
        "Connections whose request window is full, so their socket is not read",
        s.connections.iter().filter(|c| c.reader_paused).count() as u64,
    );
    counter(
        &mut r,
        "window_full_events",
        "Times a connection's request window was full (since start)",
        s.window_full_events,
    );
    gauge(
        &mut r,
        "requests_in_flight",
        "Requests read whose responses are not written yet, all connections",
        s.connections.iter().map(|c| c.in_flight as u64).sum(),
    );
    gauge(
        &mut r,
        "outbound_bytes_held",
        "Bytes of fetch responses read and not yet written, all connections",
        s.outbound_bytes_held as u64,
    );
    gauge(
        &mut r,
        "outbound_bytes_max",
        "Limit of outbound_bytes_held (outbound_bytes_max)",
        s.outbound_bytes_max as u64,
    );
    gauge(
        &mut r,
        "connection_outbound_bytes_held_max",
        "Outbound bytes held by the connection holding the most",
        s.connections
            .iter()
            .map(|c| c.outbound_bytes_held as u64)
            .max()
            .unwrap_or(0),
    );
    gauge(
        &mut r,
        "request_bytes_held",
        "Bytes of requests being read or handled: frames and decoded values",
        s.request_bytes_held as u64,
    );
    gauge(
        &mut r,
        "request_bytes_max",
        "Limit of request_bytes_held (request_bytes_in_flight_max)",
        s.request_bytes_max as u64,
    );
    counter(
        &mut r,
        "requests_refused",
        "Connections closed for a request that could not be decoded safely",
        s.requests_refused,
    );
    counter(
        &mut r,
        "request_body_timeouts",
        "Connections closed because a request body did not arrive in request_body_timeout_ms",
        s.request_body_timeouts,
    );
    counter(
        &mut r,
        "tls_handshake_failures",
        "Connections to SSL listeners closed because their TLS handshake failed or did not finish in time",
        stats.tls_handshake_failures.load(Ordering::Relaxed),
    );
    counter(
        &mut r,
        "request_budget_waits",
        "Times a connection waited for the request budget",
        s.request_budget_waits,
    );
    // Every budget: how often it was found short and how long callers waited.
    let budgets = [
        (
            &stats.request_bytes.probe,
            "request_budget",
            "request budget (request_bytes_in_flight_max)",
            "frames over 8 KiB",
        ),
        (
            stats.outbound.probe(),
            "outbound_budget",
            "broker-wide outbound budget (outbound_bytes_max)",
            "fetches",
        ),
        (
            stats.outbound.connections_probe(),
            "connection_outbound_budget",
            "outbound budget of a connection (connection_outbound_bytes_max), any connection",
            "fetches",
        ),
        (
            &stats.read_share_probe,
            "read_share",
            "share of the read threads of a connection, any connection",
            "fetch reads",
        ),
        (
            &stats.connection_slots_probe,
            "connection_slots",
            "connection limit (connections_max)",
            "the listener",
        ),
    ];
    for (probe, name, budget, who) in budgets {
        probe.register(&mut r, name, budget, who);
    }
    counter(
        &mut r,
        "unsynced_holds",
        "Times a producer waited because a partition had more than partition_unsynced_bytes_max unsynced",
        s.unsynced_holds,
    );
    gauge(
        &mut r,
        "read_threads",
        "Threads for cold reads",
        s.reads.threads as u64,
    );
    let (_, alive) = broker.read_pool().strength();
    gauge(
        &mut r,
        "read_threads_alive",
        "Read threads running (below read_threads: the pool is below strength, /readyz)",
        alive as u64,
    );
    register_panics(&mut r);
    gauge(
        &mut r,
        "read_queue",
        "Cold reads waiting for a thread",
        s.reads.queued as u64,
    );
    r.register(
        "read_queue_wait_seconds",
        "How long each cold read (or large produce) waited in the read threads' queue",
        broker.read_pool().stats().queue_wait.clone(),
    );
    gauge(
        &mut r,
        "read_running",
        "Cold reads running",
        s.reads.running as u64,
    );
    counter(
        &mut r,
        "reads_cached",
        "Fetch reads served from the page cache",
        s.reads.cached,
    );
    counter(
        &mut r,
        "reads_pooled",
        "Fetch reads sent to the read threads",
        s.reads.pooled,
    );
    counter(
        &mut r,
        "reads_pooled_cached",
        "Reads catching up that the page cache held whole: read on the read threads without the bulk budget",
        s.reads.pooled_cached,
    );
    let budget = broker.bulk_budget().snapshot();
    let rates = Family::<Vec<(String, String)>, Gauge>::default();
    for (work, rate) in [
        ("read", budget.read_bytes_per_sec),
        ("write", budget.write_bytes_per_sec),
    ] {
        let labels = vec![("work".to_string(), work.to_string())];
        rates.get_or_create(&labels).set(rate as i64);
    }
    r.register(
        "bulk_rate_bytes",
        "Current rate of bulk work, bytes/s, for catch-up reads (work=read) and large produces and the log cleaner (work=write): adapts to the latency of light work (docs/sync.md)",
        rates,
    );
    counter(
        &mut r,
        "bulk_rate_decreases",
        "Times light work slower than light_latency_target_ms halved the bulk rates",
        budget.decreases,
    );
    counter(
        &mut r,
        "bulk_waits",
        "Catch-up reads and large produces that waited for the bulk budget",
        budget.waits,
    );
    counter(
        &mut r,
        "bulk_sync_yields",
        "Disk reads of catch-up reads that first waited for small syncs in progress (bulk_read_sync_wait_us)",
        broker.bulk_budget().sync_yields(),
    );
    if let Some(send) = &stats.bulk_send {
        let send = send.stats();
        counter(
            &mut r,
            "bulk_send_answers",
            "Answers of 256 KiB and more written by the SCHED_IDLE bulk send threads (bulk_send_threads)",
            send.answers.load(Ordering::Relaxed),
        );
        counter(
            &mut r,
            "bulk_send_bytes",
            "Bytes the bulk send threads wrote to sockets",
            send.bytes.load(Ordering::Relaxed),
        );
        counter(
            &mut r,
            "bulk_send_socket_full",
            "Times a socket was full under a bulk send and its writer waited for room on the runtime",
            send.socket_full.load(Ordering::Relaxed),
        );
    }

    let disk = broker.disk_space().snapshot();
    gauge(
        &mut r,
        "disk_free_bytes",
        "Free bytes of the data directory's filesystem (last measurement minus what was produced since)",
        disk.free_bytes,
    );
    gauge(
        &mut r,
        "disk_free_bytes_min",
        "Produces are refused below this many free bytes (disk_free_bytes_min; 0: off)",
        disk.min_bytes,
    );
    counter(
        &mut r,
        "produces_refused_disk_free",
        "Produces refused because free space was below disk_free_bytes_min",
        disk.produces_refused,
    );

    register_partitions(&mut r, broker);
    register_topics(&mut r, broker);
    register_groups(&mut r, ctx);
    register_share_groups(&mut r, ctx);
    register_process(&mut r);
    register_cleaner(&mut r, broker);
    let mut text = String::new();
    encode(&mut text, &r).expect("writing to a String cannot fail");
    text
}

/// The log cleaner's work, per compacted partition (one label set per partition of a
/// compacted topic, and the offsets log).
fn register_cleaner(r: &mut Registry, broker: &Broker) {
    type Labelled = Family<Vec<(String, String)>, Gauge>;
    type LabelledF = Family<Vec<(String, String)>, Gauge<f64, AtomicU64>>;
    let ratio = LabelledF::default();
    let (passes, read, written, removed) = (
        Labelled::default(),
        Labelled::default(),
        Labelled::default(),
        Labelled::default(),
    );
    let last = LabelledF::default();
    for (topic, partition, s) in broker.cleaner().snapshot() {
        let labels = vec![
            ("topic".to_string(), topic),
            ("partition".to_string(), partition.to_string()),
        ];
        ratio.get_or_create(&labels).set(s.dirty_ratio);
        passes.get_or_create(&labels).set(s.passes as i64);
        read.get_or_create(&labels).set(s.bytes_read as i64);
        written.get_or_create(&labels).set(s.bytes_written as i64);
        removed.get_or_create(&labels).set(s.records_removed as i64);
        if let Some(ms) = s.last_cleaned_ms {
            last.get_or_create(&labels).set(ms as f64 / 1000.0);
        }
    }
    r.register(
        "cleaner_dirty_ratio",
        "Share of a compacted partition's sealed bytes not cleaned yet (min.cleanable.dirty.ratio is compared with it)",
        ratio,
    );
    r.register(
        "cleaner_passes",
        "Cleaning passes of the partition since start",
        passes,
    );
    r.register(
        "cleaner_bytes_read",
        "Bytes the cleaner read from the partition since start",
        read,
    );
    r.register(
        "cleaner_bytes_written",
        "Bytes of cleaned segments the cleaner wrote for the partition since start",
        written,
    );
    r.register(
        "cleaner_records_removed",
        "Records the cleaner removed from the partition since start",
        removed,
    );
    r.register(
        "cleaner_last_pass_timestamp_seconds",
        "When the partition's last cleaning pass ended, seconds since the epoch",
        last,
    );
}

type Labelled = Family<Vec<(String, String)>, Gauge>;

fn partition_labels(topic: &str, partition: &Partition) -> Vec<(String, String)> {
    vec![
        ("topic".to_string(), topic.to_string()),
        (
            "partition".to_string(),
            partition.index().value().to_string(),
        ),
    ]
}

/// Per topic: bytes and records produced and fetched, for the first
/// `METRICS_TOPICS_MAX` topics by name; broker-wide totals over all of them.
fn register_topics(r: &mut Registry, broker: &Broker) {
    type Counters = Family<Vec<(String, String)>, Counter>;
    type TrafficFamilies = [(&'static str, &'static str, fn(&TrafficCounts) -> u64); 4];
    let families: TrafficFamilies = [
        (
            "topic_bytes_in",
            "Bytes of record batches appended by producers, by topic",
            |t| t.bytes_in,
        ),
        (
            "topic_records_in",
            "Records appended by producers, by topic",
            |t| t.records_in,
        ),
        (
            "topic_bytes_out",
            "Bytes of record batches read by fetches, by topic",
            |t| t.bytes_out,
        ),
        (
            "topic_records_out",
            "Records read by fetches (markers included), by topic",
            |t| t.records_out,
        ),
    ];
    let counters: Vec<Counters> = families.iter().map(|_| Counters::default()).collect();
    let mut total = TrafficCounts::default();
    for (seen, topic) in broker.topics().iter().enumerate() {
        let mut sum = TrafficCounts::default();
        for p in topic.partitions() {
            sum += p.traffic();
        }
        total += sum;
        if seen >= limits::METRICS_TOPICS_MAX {
            continue;
        }
        let labels = vec![("topic".to_string(), topic.name().to_string())];
        for ((_, _, value), family) in families.iter().zip(&counters) {
            family.get_or_create(&labels).inc_by(value(&sum));
        }
    }
    for ((name, help, value), family) in families.iter().zip(counters) {
        r.register(*name, *help, family);
        let name = name.trim_start_matches("topic_");
        let help = format!("{}, all topics", help.trim_end_matches(", by topic"));
        counter(r, name, &help, value(&total));
    }
}

/// Per partition: offsets, size on disk and health, for the first
/// `METRICS_PARTITIONS_MAX` partitions (topics by name); totals over all of them.
fn register_partitions(r: &mut Registry, broker: &Broker) {
    let (high_watermark, log_start, log_end) = (
        Labelled::default(),
        Labelled::default(),
        Labelled::default(),
    );
    let (size, offline, to_repair) = (
        Labelled::default(),
        Labelled::default(),
        Labelled::default(),
    );
    let (last_stable, open_txn_age) = (Labelled::default(), Labelled::default());
    let now_ms = headway_base::now_ms();
    let mut totals = PartitionHealth::default();
    let (mut offline_count, mut seen, mut size_total) = (0u64, 0usize, 0u64);
    let mut unopened_count = 0u64;
    let topics_dir = broker.config().data_dir.join("topics");
    for topic in broker.topics() {
        for p in topic.partitions() {
            let health = p.health();
            offline_count += u64::from(health.offline);
            unopened_count += u64::from(health.unopened);
            totals.write_refusals += health.write_refusals;
            totals.corrupt_reads += health.corrupt_reads;
            totals.segments_to_repair += health.segments_to_repair;
            seen += 1;
            if seen > limits::METRICS_PARTITIONS_MAX {
                continue;
            }
            let labels = partition_labels(topic.name(), p);
            high_watermark
                .get_or_create(&labels)
                .set(p.high_watermark().value());
            log_start
                .get_or_create(&labels)
                .set(p.log_start_offset().value());
            if let Ok(end) = p.log_end_offset() {
                log_end.get_or_create(&labels).set(end.value());
            }
            last_stable
                .get_or_create(&labels)
                .set(p.last_stable_offset().value());
            if let Some((_, _, started_ms)) = p.oldest_ongoing_transaction() {
                open_txn_age
                    .get_or_create(&labels)
                    .set(now_ms.saturating_sub(started_ms).max(0));
            }
            let dir = topics_dir
                .join(topic.name())
                .join(p.index().value().to_string());
            let bytes = dir_bytes(&dir);
            size_total += bytes;
            size.get_or_create(&labels).set(as_gauge(bytes));
            offline
                .get_or_create(&labels)
                .set(i64::from(health.offline));
            to_repair
                .get_or_create(&labels)
                .set(health.segments_to_repair as i64);
        }
    }
    gauge(
        r,
        "partitions",
        "Partitions of every topic (the offsets log not included)",
        seen as u64,
    );
    gauge(
        r,
        "partitions_omitted",
        "Partitions without per-partition series: those past limits::METRICS_PARTITIONS_MAX",
        seen.saturating_sub(limits::METRICS_PARTITIONS_MAX) as u64,
    );
    gauge(
        r,
        "partitions_offline",
        "Partitions whose log failed an fsync (or could not undo a failed write, or could not be opened at start-up) and accept no writes until restart",
        offline_count,
    );
    gauge(
        r,
        "partitions_unopened",
        "Partitions whose log could not be opened at start-up: offline, the others served",
        unopened_count,
    );
    counter(
        r,
        "log_write_refusals",
        "Appends refused because a write failed (a full disk) and was undone, all partitions",
        totals.write_refusals,
    );
    counter(
        r,
        "corrupt_batch_reads",
        "Reads refused because a stored batch failed its CRC, all partitions",
        totals.corrupt_reads,
    );
    gauge(
        r,
        "segments_to_repair",
        "Segments marked for repair at the next start, all partitions",
        totals.segments_to_repair as u64,
    );
    gauge(
        r,
        "log_size_bytes",
        "Bytes on disk of the partitions with series (their directories' files)",
        size_total,
    );
    r.register(
        "partition_offline",
        "1 when the partition's log failed an fsync and accepts no writes until restart",
        offline,
    );
    r.register(
        "partition_segments_to_repair",
        "Segments of the partition marked for repair at the next start (a stored batch failed its CRC)",
        to_repair,
    );
    r.register(
        "partition_high_watermark",
        "Offset below which records are durable and readable",
        high_watermark,
    );
    r.register(
        "partition_log_start_offset",
        "First offset still in the log",
        log_start,
    );
    r.register(
        "partition_log_end_offset",
        "Offset the next appended record gets (durable or not)",
        log_end,
    );
    r.register(
        "partition_last_stable_offset",
        "Offset below which every transaction is decided: what read_committed consumers may read",
        last_stable,
    );
    r.register(
        "partition_oldest_open_transaction_ms",
        "Age of the oldest transaction open on the partition (only partitions with one); it holds the last stable offset back until it ends or times out",
        open_txn_age,
    );
    r.register(
        "partition_size_bytes",
        "Bytes on disk of the partition's directory: segments, indexes and side files",
        size,
    );
}

/// Bytes of the files directly in `dir` (a partition's segments, indexes and side
/// files); a file that vanishes meanwhile (retention, cleaning) counts as 0.
pub(crate) fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

fn as_gauge(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Per group and partition: the committed offset and the lag behind the high
/// watermark, for the first `METRICS_GROUP_PARTITIONS_MAX` (groups by id).
fn register_groups(r: &mut Registry, ctx: &Ctx) {
    let (committed, lag) = (Labelled::default(), Labelled::default());
    let mut groups = ctx.groups.list();
    groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    let mut seen = 0usize;
    for group in &groups {
        let mut offsets = ctx.groups.committed(&group.group_id, None);
        offsets.sort_by(|a, b| a.0.cmp(&b.0));
        for (tp, offset) in offsets {
            seen += 1;
            if seen > limits::METRICS_GROUP_PARTITIONS_MAX {
                continue;
            }
            let labels = vec![
                ("group".to_string(), group.group_id.clone()),
                ("topic".to_string(), tp.topic.clone()),
                ("partition".to_string(), tp.partition.value().to_string()),
            ];
            let at = offset.commit.offset.value();
            committed.get_or_create(&labels).set(at);
            // A deleted topic's commits stay until they expire: no lag to show.
            if let Ok(p) = ctx.broker.partition(&tp.topic, tp.partition) {
                let behind = p.high_watermark().value().saturating_sub(at).max(0);
                lag.get_or_create(&labels).set(behind);
            }
        }
    }
    gauge(
        r,
        "groups",
        "Consumer groups known to the coordinator",
        groups.len() as u64,
    );
    gauge(
        r,
        "group_partitions_omitted",
        "Committed group partitions without series: those past limits::METRICS_GROUP_PARTITIONS_MAX",
        seen.saturating_sub(limits::METRICS_GROUP_PARTITIONS_MAX) as u64,
    );
    r.register(
        "group_committed_offset",
        "The group's committed offset for the partition",
        committed,
    );
    r.register(
        "group_lag",
        "Records between the group's committed offset and the partition's high watermark (0 when the commit is ahead)",
        lag,
    );
}

/// Per share group (the first `METRICS_SHARE_GROUPS_MAX` by id): members, records in
/// flight and acquired, and records redelivered, archived, delivered, accepted,
/// released and rejected since the broker started.
fn register_share_groups(r: &mut Registry, ctx: &Ctx) {
    let families: [(&str, &str); 9] = [
        ("share_group_members", "Members of the share group"),
        (
            "share_group_in_flight_records",
            "Records between the share-partition start and end offsets, over the group's partitions",
        ),
        (
            "share_group_acquired_records",
            "Records acquired by a member now, over the group's partitions",
        ),
        (
            "share_group_redelivered_records",
            "Deliveries beyond a record's first since the broker started",
        ),
        (
            "share_group_archived_records",
            "Records archived (rejected, or at the delivery count limit) since the broker started",
        ),
        (
            "share_group_delivered_records",
            "Records acquired by members (every delivery) since the broker started",
        ),
        (
            "share_group_acknowledged_records",
            "Records members acknowledged as accepted since the broker started",
        ),
        (
            "share_group_released_records",
            "Records members released since the broker started",
        ),
        (
            "share_group_rejected_records",
            "Records members rejected since the broker started",
        ),
    ];
    let values: Vec<Labelled> = families.iter().map(|_| Labelled::default()).collect();
    let groups = ctx.shares.list();
    for g in groups.iter().take(limits::METRICS_SHARE_GROUPS_MAX) {
        let labels = vec![("group".to_string(), g.group_id.clone())];
        let sum = |f: fn(&headway_share::PartitionSummary) -> u64| {
            as_gauge(g.partitions.iter().map(f).sum())
        };
        let row = [
            g.member_count as i64,
            sum(|p| p.in_flight),
            sum(|p| p.acquired),
            sum(|p| p.redeliveries),
            sum(|p| p.archived),
            sum(|p| p.deliveries),
            sum(|p| p.accepted),
            sum(|p| p.released),
            sum(|p| p.rejected),
        ];
        for (family, value) in values.iter().zip(row) {
            family.get_or_create(&labels).set(value);
        }
    }
    gauge(
        r,
        "share_groups",
        "Share groups known to the share coordinator",
        groups.len() as u64,
    );
    gauge(
        r,
        "share_sessions",
        "Open share sessions",
        ctx.shares.sessions() as u64,
    );
    for ((name, help), family) in families.into_iter().zip(values) {
        r.register(name, help, family);
    }
}

/// The process: resident memory, open files and uptime, from /proc (Linux; absent
/// elsewhere).
/// `headway_panics_total{component}`: panics caught where the broker runs jobs
/// (`headway_broker::panics`); each failed its own job only.
fn register_panics(r: &mut Registry) {
    let family = Family::<Vec<(String, String)>, Counter>::default();
    for component in Component::ALL {
        let labels = vec![("component".to_string(), component.label().to_string())];
        family
            .get_or_create(&labels)
            .inc_by(panics::caught(component));
    }
    r.register(
        "panics",
        "Panics caught per component; each failed only its own job (a request, a read, a round)",
        family,
    );
}

fn register_process(r: &mut Registry) {
    if let Some(bytes) = resident_bytes() {
        gauge(
            r,
            "process_resident_memory_bytes",
            "Resident memory (/proc/self/statm)",
            bytes,
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        gauge(
            r,
            "process_open_fds",
            "Open file descriptors: files and sockets (/proc/self/fd)",
            fds.count() as u64,
        );
    }
    let uptime = Gauge::<f64, AtomicU64>::default();
    uptime.set(started().elapsed().as_secs_f64());
    r.register(
        "process_uptime_seconds",
        "Seconds since the broker started serving",
        uptime,
    );
}

/// When the endpoint started (after the broker's recovery).
fn started() -> std::time::Instant {
    static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *STARTED.get_or_init(std::time::Instant::now)
}

/// Resident pages (the second field of /proc/self/statm) times the page size.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * PAGE_BYTES)
}

/// The page size of Linux on x86-64 and of most arm64 kernels; `statm` counts pages.
const PAGE_BYTES: u64 = 4096;

/// Open files: the process's count and budget, and the cache of segment files
/// (`headway_log::FileCache`).
fn register_open_files(r: &mut Registry, broker: &Broker) {
    if let Some(open) = headway_broker::open_files::open_now() {
        gauge(
            r,
            "open_files",
            "Files the process has open now (/proc/self/fd)",
            open,
        );
    }
    if let Some(budget) = broker.open_files_budget() {
        gauge(
            r,
            "open_files_max",
            "Files the logs may hold open: the open files limit less the connections' reserve, or open_files_max when lower",
            budget.files_max,
        );
    }
    let cache = broker.file_cache_stats();
    gauge(
        r,
        "file_cache_open",
        "Segment files (active and sealed) the cache holds open",
        cache.open as u64,
    );
    gauge(
        r,
        "file_cache_capacity",
        "Most segment files the cache holds open: what open_files_max leaves beside the files held outside it",
        cache.capacity as u64,
    );
    counter(
        r,
        "file_cache_hits",
        "Uses of a segment file (appends, reads) that found it open in the cache",
        cache.hits,
    );
    counter(
        r,
        "file_cache_misses",
        "Uses of a segment file (appends, reads) that opened it",
        cache.misses,
    );
    counter(
        r,
        "file_cache_evictions",
        "Segment files closed to make room in the cache",
        cache.evictions,
    );
}
