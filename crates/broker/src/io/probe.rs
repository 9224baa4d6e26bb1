//! The I/O scheduling probe: where produces, fetches and syncs spend their time
//! ([`super::timings`]), the read threads and their queue ([`super::read_pool`]), and
//! the bulk budget's rates ([`super::bulk_budget`]). Each function registers the
//! families of one of them; the histograms are the components' own (a scrape encodes
//! them, it does not copy them), the rest is read at the scrape.

use super::bulk_budget::BulkBudget;
use super::read_pool::ReadPool;
use super::timings::Timings;
use crate::probe::{counter, gauge, labels, Gauges};
use prometheus_client::registry::Registry;

/// Registers the stage and sync histograms (`docs/latency.md`).
pub fn register_timings(r: &mut Registry, t: &Timings) {
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
}

/// Registers the read threads' strength, queue and routing counts.
pub fn register_read_pool(r: &mut Registry, pool: &ReadPool) {
    let reads = pool.snapshot();
    gauge(
        r,
        "read_threads",
        "Threads for cold reads",
        reads.threads as u64,
    );
    let (_, alive) = pool.strength();
    gauge(
        r,
        "read_threads_alive",
        "Read threads running (below read_threads: the pool is below strength, /readyz)",
        alive as u64,
    );
    gauge(
        r,
        "read_queue",
        "Cold reads waiting for a thread",
        reads.queued as u64,
    );
    r.register(
        "read_queue_wait_seconds",
        "How long each cold read (or large produce) waited in the read threads' queue",
        pool.stats().queue_wait.clone(),
    );
    gauge(
        r,
        "read_running",
        "Cold reads running",
        reads.running as u64,
    );
    counter(
        r,
        "reads_cached",
        "Fetch reads served from the page cache",
        reads.cached,
    );
    counter(
        r,
        "reads_pooled",
        "Fetch reads sent to the read threads",
        reads.pooled,
    );
    counter(
        r,
        "reads_pooled_cached",
        "Reads catching up that the page cache held whole: read on the read threads without the bulk budget",
        reads.pooled_cached,
    );
}

/// Registers the bulk budget's current rates and how often they were cut or waited on
/// (`docs/sync.md`).
pub fn register_bulk_budget(r: &mut Registry, bulk: &BulkBudget) {
    let budget = bulk.snapshot();
    let rates = Gauges::default();
    for (work, rate) in [
        ("read", budget.read_bytes_per_sec),
        ("write", budget.write_bytes_per_sec),
    ] {
        rates
            .get_or_create(&labels([("work", work)]))
            .set(rate as i64);
    }
    r.register(
        "bulk_rate_bytes",
        "Current rate of bulk work, bytes/s, for catch-up reads (work=read) and large produces and the log cleaner (work=write): adapts to the latency of light work (docs/sync.md)",
        rates,
    );
    counter(
        r,
        "bulk_rate_decreases",
        "Times light work slower than light_latency_target_ms halved the bulk rates",
        budget.decreases,
    );
    counter(
        r,
        "bulk_waits",
        "Catch-up reads and large produces that waited for the bulk budget",
        budget.waits,
    );
    counter(
        r,
        "bulk_sync_yields",
        "Disk reads of catch-up reads that first waited for small syncs in progress (bulk_read_sync_wait_us)",
        bulk.sync_yields(),
    );
}
