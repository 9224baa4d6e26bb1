//! The log cleaner's probe: its work per compacted partition (one label set per
//! partition of a compacted topic, and the offsets log), read from
//! [`LogCleaner::snapshot`] at each scrape.

use super::LogCleaner;
use crate::probe::{partition_labels, FloatGauges, Gauges};
use prometheus_client::registry::Registry;

/// Registers `headway_cleaner_*`.
pub fn register(r: &mut Registry, cleaner: &LogCleaner) {
    let ratio = FloatGauges::default();
    let (passes, read, written, removed) = (
        Gauges::default(),
        Gauges::default(),
        Gauges::default(),
        Gauges::default(),
    );
    let last = FloatGauges::default();
    for (topic, partition, s) in cleaner.snapshot() {
        let labels = partition_labels(&topic, partition);
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
