//! The process's probe: resident memory, open file descriptors and uptime, from
//! `/proc` (Linux; the first two are absent elsewhere). Uptime counts from
//! [`started`], when the metrics endpoint began serving (after the broker's recovery).

use headway_broker::probe::gauge;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::OnceLock;
use std::time::Instant;

/// The page size of Linux on x86-64 and of most arm64 kernels; `statm` counts pages.
const PAGE_BYTES: u64 = 4096;

/// Registers `headway_process_*`.
pub fn register(r: &mut Registry) {
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

/// When the metrics endpoint started (the first call: `metrics::start` makes it).
pub fn started() -> Instant {
    static STARTED: OnceLock<Instant> = OnceLock::new();
    *STARTED.get_or_init(Instant::now)
}

/// Resident pages (the second field of /proc/self/statm) times the page size.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * PAGE_BYTES)
}
