//! The Prometheus endpoint (`--metrics-listen HOST:PORT`, path `/metrics`): what every
//! bounded queue holds, its limit, and how often it was full, broker-wide and per
//! partition. Each scrape reads [`ServerStats`] and the partitions once and encodes a
//! fresh registry (`prometheus-client`'s text format); the counters and histograms it
//! shows live in the broker and its `ServerStats`; the registry lives for one scrape.
//!
//! The HTTP side is deliberately small: one request per connection, `GET /metrics`
//! answered with 200, anything else with 404; a request head larger than 8 KiB or slower
//! than 5 s closes the connection.

use crate::stats::ServerStats;
use headway_broker::{Broker, PartitionHealth};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const REQUEST_HEAD_BYTES_MAX: usize = 8 * 1024;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Binds `listen` and serves scrapes on a task until the process ends.
pub async fn start(
    listen: &str,
    stats: Arc<ServerStats>,
    broker: Arc<Broker>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let (stats, broker) = (Arc::clone(&stats), Arc::clone(&broker));
            tokio::spawn(async move {
                let _ =
                    tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, &stats, &broker)).await;
            });
        }
    });
    Ok(addr)
}

async fn answer(
    mut stream: TcpStream,
    stats: &ServerStats,
    broker: &Broker,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || head.len() + n > REQUEST_HEAD_BYTES_MAX {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let (status, content_type, body) = if head.starts_with(b"GET /metrics ") {
        (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            render(stats, broker),
        )
    } else {
        ("404 Not Found", "text/plain", "try /metrics\n".to_string())
    };
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
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

/// The metrics text for one scrape.
pub fn render(stats: &ServerStats, broker: &Broker) -> String {
    let s = stats.snapshot();
    let mut r = Registry::with_prefix("headway");
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
    gauge(
        &mut r,
        "read_queue",
        "Cold reads waiting for a thread",
        s.reads.queued as u64,
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
    let budget = broker.bulk_budget().snapshot();
    gauge(
        &mut r,
        "bulk_rate_bytes",
        "Current rate of bulk work (catch-up reads and large produces), bytes/s: adapts to the latency of light work (docs/sync.md)",
        budget.rate_bytes_per_sec as u64,
    );
    counter(
        &mut r,
        "bulk_rate_decreases",
        "Times light work slower than light_latency_target_ms halved the bulk rate",
        budget.decreases,
    );
    counter(
        &mut r,
        "bulk_waits",
        "Catch-up reads and large produces that waited for the bulk budget",
        budget.waits,
    );

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

    let high_watermark = Family::<Vec<(String, String)>, Gauge>::default();
    let log_start = Family::<Vec<(String, String)>, Gauge>::default();
    let offline = Family::<Vec<(String, String)>, Gauge>::default();
    let to_repair = Family::<Vec<(String, String)>, Gauge>::default();
    let mut totals = PartitionHealth::default();
    let mut offline_count = 0u64;
    for topic in broker.topics() {
        for p in topic.partitions() {
            let labels = vec![
                ("topic".to_string(), topic.name().to_string()),
                ("partition".to_string(), p.index().value().to_string()),
            ];
            high_watermark
                .get_or_create(&labels)
                .set(p.high_watermark().value());
            log_start
                .get_or_create(&labels)
                .set(p.log_start_offset().value());
            let health = p.health();
            offline
                .get_or_create(&labels)
                .set(i64::from(health.offline));
            to_repair
                .get_or_create(&labels)
                .set(health.segments_to_repair as i64);
            offline_count += u64::from(health.offline);
            totals.write_refusals += health.write_refusals;
            totals.corrupt_reads += health.corrupt_reads;
            totals.segments_to_repair += health.segments_to_repair;
        }
    }
    gauge(
        &mut r,
        "partitions_offline",
        "Partitions whose log failed an fsync (or could not undo a failed write) and accept no writes until restart",
        offline_count,
    );
    counter(
        &mut r,
        "log_write_refusals",
        "Appends refused because a write failed (a full disk) and was undone, all partitions",
        totals.write_refusals,
    );
    counter(
        &mut r,
        "corrupt_batch_reads",
        "Reads refused because a stored batch failed its CRC, all partitions",
        totals.corrupt_reads,
    );
    gauge(
        &mut r,
        "segments_to_repair",
        "Segments marked for repair at the next start, all partitions",
        totals.segments_to_repair as u64,
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
