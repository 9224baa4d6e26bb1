//! The partitions' probe: per partition its offsets, size on disk and health, per
//! topic the traffic produced and fetched ([`super::TrafficCounts`]), and broker-wide
//! totals over all of them. Per-partition series are bounded by
//! `limits::METRICS_PARTITIONS_MAX` (topics by name), per-topic series by
//! `limits::METRICS_TOPICS_MAX`; the totals count every partition.
//!
//! Blocking: reads each listed partition's directory for its size.

use super::{Partition, PartitionHealth, TrafficCounts};
use crate::probe::{as_gauge, counter, gauge, labels, partition_labels, Bounded, Counters, Gauges};
use crate::Broker;
use headway_base::limits;
use prometheus_client::registry::Registry;
use std::path::Path;

/// Registers the partition families, then the topic traffic families.
pub fn register(r: &mut Registry, broker: &Broker) {
    register_partitions(r, broker);
    register_topics(r, broker);
}

/// Bytes of the files directly in `dir` (a partition's segments, indexes and side
/// files); a file that vanishes meanwhile (retention, cleaning) counts as 0.
pub fn dir_bytes(dir: &Path) -> u64 {
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

/// One gauge family per partition series.
#[derive(Default)]
struct PartitionSeries {
    high_watermark: Gauges,
    log_start: Gauges,
    log_end: Gauges,
    last_stable: Gauges,
    open_txn_age: Gauges,
    size: Gauges,
    offline: Gauges,
    to_repair: Gauges,
}

impl PartitionSeries {
    /// Sets one partition's series; returns its size on disk.
    fn set(
        &self,
        topic: &str,
        p: &Partition,
        health: &PartitionHealth,
        dir: &Path,
        now_ms: i64,
    ) -> u64 {
        let labels = partition_labels(topic, p.index().value());
        self.high_watermark
            .get_or_create(&labels)
            .set(p.high_watermark().value());
        self.log_start
            .get_or_create(&labels)
            .set(p.log_start_offset().value());
        if let Ok(end) = p.log_end_offset() {
            self.log_end.get_or_create(&labels).set(end.value());
        }
        self.last_stable
            .get_or_create(&labels)
            .set(p.last_stable_offset().value());
        if let Some((_, _, started_ms)) = p.oldest_ongoing_transaction() {
            self.open_txn_age
                .get_or_create(&labels)
                .set(now_ms.saturating_sub(started_ms).max(0));
        }
        let bytes = dir_bytes(dir);
        self.size.get_or_create(&labels).set(as_gauge(bytes));
        self.offline
            .get_or_create(&labels)
            .set(i64::from(health.offline));
        self.to_repair
            .get_or_create(&labels)
            .set(health.segments_to_repair as i64);
        bytes
    }

    fn register(self, r: &mut Registry) {
        r.register(
            "partition_offline",
            "1 when the partition's log failed an fsync and accepts no writes until restart",
            self.offline,
        );
        r.register(
            "partition_segments_to_repair",
            "Segments of the partition marked for repair at the next start (a stored batch failed its CRC)",
            self.to_repair,
        );
        r.register(
            "partition_high_watermark",
            "Offset below which records are durable and readable",
            self.high_watermark,
        );
        r.register(
            "partition_log_start_offset",
            "First offset still in the log",
            self.log_start,
        );
        r.register(
            "partition_log_end_offset",
            "Offset the next appended record gets (durable or not)",
            self.log_end,
        );
        r.register(
            "partition_last_stable_offset",
            "Offset below which every transaction is decided: what read_committed consumers may read",
            self.last_stable,
        );
        r.register(
            "partition_oldest_open_transaction_ms",
            "Age of the oldest transaction open on the partition (only partitions with one); it holds the last stable offset back until it ends or times out",
            self.open_txn_age,
        );
        r.register(
            "partition_size_bytes",
            "Bytes on disk of the partition's directory: segments, indexes and side files",
            self.size,
        );
    }
}

/// Per partition: offsets, size on disk and health, for the first
/// `METRICS_PARTITIONS_MAX` partitions (topics by name); totals over all of them.
fn register_partitions(r: &mut Registry, broker: &Broker) {
    let series = PartitionSeries::default();
    let now_ms = headway_base::now_ms();
    let mut totals = PartitionHealth::default();
    let mut bound = Bounded::new(limits::METRICS_PARTITIONS_MAX);
    let (mut offline_count, mut unopened_count, mut size_total) = (0u64, 0u64, 0u64);
    let topics_dir = broker.config().data_dir.join("topics");
    for topic in broker.topics() {
        for p in topic.partitions() {
            let health = p.health();
            offline_count += u64::from(health.offline);
            unopened_count += u64::from(health.unopened);
            totals.write_refusals += health.write_refusals;
            totals.corrupt_reads += health.corrupt_reads;
            totals.segments_to_repair += health.segments_to_repair;
            if !bound.admit() {
                continue;
            }
            let dir = topics_dir
                .join(topic.name())
                .join(p.index().value().to_string());
            size_total += series.set(topic.name(), p, &health, &dir, now_ms);
        }
    }
    gauge(
        r,
        "partitions",
        "Partitions of every topic (the offsets log not included)",
        bound.seen() as u64,
    );
    gauge(
        r,
        "partitions_omitted",
        "Partitions without per-partition series: those past limits::METRICS_PARTITIONS_MAX",
        bound.omitted() as u64,
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
    series.register(r);
}

/// Per topic: bytes and records produced and fetched, for the first
/// `METRICS_TOPICS_MAX` topics by name; broker-wide totals over all of them.
fn register_topics(r: &mut Registry, broker: &Broker) {
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
    let mut bound = Bounded::new(limits::METRICS_TOPICS_MAX);
    for topic in broker.topics() {
        let mut sum = TrafficCounts::default();
        for p in topic.partitions() {
            sum += p.traffic();
        }
        total += sum;
        if !bound.admit() {
            continue;
        }
        let labels = labels([("topic", topic.name())]);
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
