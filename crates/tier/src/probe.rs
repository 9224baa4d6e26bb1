//! The remote tier's `/metrics` families, read from the uploader's counters at each
//! scrape (`docs/metrics.md`).

use crate::Tier;
use headway_broker::probe::{counter, gauge};
use prometheus_client::registry::Registry;
use std::sync::atomic::Ordering;

pub fn register(registry: &mut Registry, tier: &Tier) {
    let s = tier.stats();
    let read = |v: &std::sync::atomic::AtomicU64| v.load(Ordering::Relaxed);
    let counters = [
        (
            "remote_uploaded_segments",
            "Segments copied to the remote tier",
            &s.uploaded_segments,
        ),
        (
            "remote_uploaded_bytes",
            "Bytes of segments copied to the remote tier",
            &s.uploaded_bytes,
        ),
        (
            "remote_upload_failures",
            "Partition rounds of the uploader that failed and are tried again",
            &s.upload_failures,
        ),
        (
            "remote_deleted_segments",
            "Remote segments deleted because the log start passed them",
            &s.deleted_segments,
        ),
        (
            "remote_orphans_deleted",
            "Objects of uploads or deletes cut short, deleted",
            &s.orphans_deleted,
        ),
        (
            "remote_local_deleted_segments",
            "Local segments deleted past the local retention because the remote tier holds them",
            &s.local_deleted_segments,
        ),
        (
            "remote_fetches",
            "Fetches of a partition before its local log, served from the remote tier",
            &s.fetches,
        ),
        (
            "remote_fetch_bytes",
            "Bytes of records read from the remote tier for fetches",
            &s.fetch_bytes,
        ),
        (
            "remote_fetch_failures",
            "Remote tier reads that failed or timed out (answered KAFKA_STORAGE_ERROR)",
            &s.fetch_failures,
        ),
    ];
    for (name, help, value) in counters {
        counter(registry, name, help, read(value));
    }
    gauge(
        registry,
        "remote_upload_lag_bytes",
        "Bytes of sealed, stable segments not yet in the remote tier",
        read(&s.lag_bytes),
    );
    let (segments, bytes) = tier.held();
    gauge(
        registry,
        "remote_segments",
        "Remote segments of the partitions this broker leads",
        segments,
    );
    gauge(
        registry,
        "remote_bytes",
        "Bytes of the remote segments of the partitions this broker leads",
        bytes,
    );
}
