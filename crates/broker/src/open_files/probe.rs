//! The open files probe: the process's open files against the logs' budget
//! ([`super::OpenFiles`]), and the cache of segment files (`headway_log::FileCache`).

use super::open_now;
use crate::probe::{counter, gauge};
use crate::Broker;
use prometheus_client::registry::Registry;

/// Registers `headway_open_files*` and `headway_file_cache_*`.
pub fn register(r: &mut Registry, broker: &Broker) {
    if let Some(open) = open_now() {
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
