//! Where the time of an acknowledgement and of a fetch goes: one histogram per stage,
//! so that a slow tail can be pinned on a stage (`docs/latency.md`).
//!
//! Stages of a produce with acks=1/all, for each partition it writes:
//! - `read`: from the frame's length prefix to its last byte (the request's own upload);
//! - `handle`: from the last byte to the append (decoding, the bulk budget for a large
//!   request, and any time the thread handling the connection did not run);
//! - `append`: `Partition::append` (validation, the partition's mutex, the page-cache write);
//! - `durable`: from the append to the high watermark covering it (waiting for the sync
//!   in progress, if any, then for the sync that carries it);
//! - `reply`: from the last partition durable to the response written to the socket
//!   (the writer's turn, encoding, earlier replies of the connection, the write itself);
//! - `total`: from the length prefix to the response written.
//!
//! Stages of a fetch: `wait` (the long poll: until data arrived, or `max_wait_ms`),
//! `read` (the reads from the log), `reply` and `total` as for produce.
//!
//! A sync (`sync`): one flusher sync of one partition (fdatasync of its files), labelled
//! by the bytes it carried.
//!
//! Produce stages are labelled by the request's size, fetch stages by whether a read
//! went to the read threads (a catch-up read) or not (the tail), so a light client's
//! tail is not averaged away by a heavy one's.
//!
//! A wake (`runtime_wake`): how long a task woken from outside the runtime waited for a
//! worker thread, as a light connection woken by its socket or by a sync waits when the
//! workers are busy or the CPU is taken. A thread of its own spawns a task every 10 ms
//! ([`spawn_wake_probe`]) and the task notes the time since it was spawned. Each broker has its own ([`Timings`],
//! `Broker::timings`); `/metrics` shows them as `headway_produce_stage_seconds`,
//! `headway_fetch_stage_seconds` and `headway_sync_seconds`. The slowest small sync is
//! also part of the bulk budget's latency signal ([`Timings::light_latency`]).

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::exponential_buckets;
pub use prometheus_client::metrics::histogram::Histogram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// A produce request partition of at most this many bytes counts as small: the bulk
/// threshold.
pub const SMALL_REQUEST_BYTES: usize = headway_base::limits::BULK_PRODUCE_BYTES_MIN;
/// A sync carrying at most this many bytes counts as small.
pub const SMALL_SYNC_BYTES: u64 = 256 * 1024;

/// Label pairs of one histogram.
pub type Labels = Vec<(&'static str, &'static str)>;
/// Histograms by labels, as `/metrics` encodes them.
pub type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// 25 µs to 3.3 s, doubling.
fn new_histogram() -> Histogram {
    Histogram::new(exponential_buckets(25e-6, 2.0, 18))
}

/// The latency signal: the slowest light work noted since it was last taken.
#[derive(Debug, Default)]
pub struct LatencySignal {
    max_us: AtomicU64,
    count: AtomicU64,
}

impl LatencySignal {
    pub const fn new() -> LatencySignal {
        LatencySignal {
            max_us: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Light work took `elapsed`.
    pub fn note(&self, elapsed: Duration) {
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.max_us.fetch_max(us, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// The slowest light work since the last call, if there was any.
    pub fn take(&self) -> Option<Duration> {
        let count = self.count.swap(0, Ordering::Relaxed);
        let max = self.max_us.swap(0, Ordering::Relaxed);
        (count > 0).then(|| Duration::from_micros(max))
    }
}

/// Small syncs in progress, which catch-up reads let go first: a read thread waits
/// before each disk read of at most 256 KiB while one is in progress
/// ([`SyncGate::wait_clear`]), so a small sync's writes and its disk-cache flush queue
/// behind at most the one read already on the disk, not behind each read that follows.
/// The wait is bounded, so catching up always progresses, however many light
/// partitions keep syncing.
#[derive(Default)]
pub struct SyncGate {
    in_flight: Mutex<usize>,
    cleared: Condvar,
    /// Disk reads that waited for a small sync.
    waits: AtomicU64,
}

/// A small sync in progress; it ends when this is dropped.
pub struct SmallSync<'a>(&'a SyncGate);

impl Drop for SmallSync<'_> {
    fn drop(&mut self) {
        let mut in_flight = self.0.in_flight.lock().expect("sync gate lock");
        *in_flight -= 1;
        if *in_flight == 0 {
            self.0.cleared.notify_all();
        }
    }
}

impl SyncGate {
    /// A small sync starts.
    pub fn small_sync(&self) -> SmallSync<'_> {
        *self.in_flight.lock().expect("sync gate lock") += 1;
        SmallSync(self)
    }

    /// Small syncs in progress now.
    pub fn in_flight(&self) -> usize {
        *self.in_flight.lock().expect("sync gate lock")
    }

    /// Waits until no small sync is in progress, or `max` has passed. Returns whether
    /// it waited.
    pub fn wait_clear(&self, max: Duration) -> bool {
        if max.is_zero() {
            return false;
        }
        let in_flight = self.in_flight.lock().expect("sync gate lock");
        if *in_flight == 0 {
            return false;
        }
        self.waits.fetch_add(1, Ordering::Relaxed);
        let _ = self
            .cleared
            .wait_timeout_while(in_flight, max, |n| *n > 0)
            .expect("sync gate lock");
        true
    }

    /// Disk reads that waited for a small sync.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }
}

/// One produce size class's stages.
#[derive(Clone)]
pub struct ProduceStages {
    pub read: Histogram,
    pub handle: Histogram,
    pub append: Histogram,
    pub durable: Histogram,
    pub reply: Histogram,
    pub total: Histogram,
}

/// One fetch kind's stages.
#[derive(Clone)]
pub struct FetchStages {
    pub wait: Histogram,
    pub read: Histogram,
    pub reply: Histogram,
    pub total: Histogram,
}

/// Every stage histogram of one broker.
pub struct Timings {
    pub produce: Histograms,
    pub fetch: Histograms,
    pub sync: Histograms,
    /// Bytes carried by each sync, 4 KiB to 128 MiB doubling.
    pub sync_bytes: Histogram,
    /// Offsets (records and markers) one partition's sync made durable, 1 to 1 Mi
    /// doubling: how many acknowledgements shared it.
    pub sync_records: Histogram,
    produce_small: ProduceStages,
    produce_large: ProduceStages,
    fetch_tail: FetchStages,
    fetch_catch_up: FetchStages,
    sync_small: Histogram,
    sync_large: Histogram,
    /// The slowest light work (a small sync, a small produce's wait to be durable)
    /// since the bulk budget last looked.
    pub light_latency: LatencySignal,
    /// From a task spawned from outside the runtime to its first poll, 5 µs to about
    /// 5 s doubling ([`spawn_wake_probe`]).
    pub runtime_wake: Histogram,
    /// Small syncs in progress, which catch-up reads wait for.
    pub small_syncs: SyncGate,
}

fn get(family: &Histograms, labels: &[(&'static str, &'static str)]) -> Histogram {
    family.get_or_create(&labels.to_vec()).clone()
}

impl Default for Timings {
    fn default() -> Timings {
        Timings::new()
    }
}

impl Timings {
    pub fn new() -> Timings {
        let produce = Histograms::new_with_constructor(new_histogram as fn() -> Histogram);
        let fetch = Histograms::new_with_constructor(new_histogram as fn() -> Histogram);
        let sync = Histograms::new_with_constructor(new_histogram as fn() -> Histogram);
        let produce_stages = |size| ProduceStages {
            read: get(&produce, &[("stage", "read"), ("size", size)]),
            handle: get(&produce, &[("stage", "handle"), ("size", size)]),
            append: get(&produce, &[("stage", "append"), ("size", size)]),
            durable: get(&produce, &[("stage", "durable"), ("size", size)]),
            reply: get(&produce, &[("stage", "reply"), ("size", size)]),
            total: get(&produce, &[("stage", "total"), ("size", size)]),
        };
        let fetch_stages = |kind| FetchStages {
            wait: get(&fetch, &[("stage", "wait"), ("kind", kind)]),
            read: get(&fetch, &[("stage", "read"), ("kind", kind)]),
            reply: get(&fetch, &[("stage", "reply"), ("kind", kind)]),
            total: get(&fetch, &[("stage", "total"), ("kind", kind)]),
        };
        Timings {
            produce_small: produce_stages("small"),
            produce_large: produce_stages("large"),
            fetch_tail: fetch_stages("tail"),
            fetch_catch_up: fetch_stages("catch_up"),
            sync_small: get(&sync, &[("size", "small")]),
            sync_large: get(&sync, &[("size", "large")]),
            light_latency: LatencySignal::new(),
            runtime_wake: Histogram::new(exponential_buckets(5e-6, 2.0, 20)),
            small_syncs: SyncGate::default(),
            sync_bytes: Histogram::new(exponential_buckets(4096.0, 2.0, 16)),
            sync_records: Histogram::new(exponential_buckets(1.0, 2.0, 21)),
            produce,
            fetch,
            sync,
        }
    }

    /// The stages of a produce carrying `bytes` for its largest partition.
    pub fn produce(&self, bytes: usize) -> &ProduceStages {
        match bytes <= SMALL_REQUEST_BYTES {
            true => &self.produce_small,
            false => &self.produce_large,
        }
    }

    /// The stages of a fetch; `catch_up` when one of its reads went to the read threads.
    pub fn fetch(&self, catch_up: bool) -> &FetchStages {
        match catch_up {
            true => &self.fetch_catch_up,
            false => &self.fetch_tail,
        }
    }

    /// A flusher synced `bytes` in `elapsed`: recorded, and a small sync feeds the
    /// bulk budget's latency signal.
    pub fn synced(&self, bytes: u64, elapsed: Duration) {
        self.sync_bytes.observe(bytes as f64);
        match bytes <= SMALL_SYNC_BYTES {
            true => {
                observe(&self.sync_small, elapsed);
                self.light_latency.note(elapsed);
            }
            false => observe(&self.sync_large, elapsed),
        }
    }
}

/// How often the wake probe spawns a task.
const WAKE_PROBE_INTERVAL: Duration = Duration::from_millis(10);

/// Starts the thread that measures how long the runtime of `runtime` takes to start a
/// task woken from outside it (`Timings::runtime_wake`). The thread ends once the
/// timings are dropped or the runtime is gone.
pub fn spawn_wake_probe(
    timings: &std::sync::Arc<Timings>,
    runtime: tokio::runtime::Handle,
) -> std::io::Result<()> {
    let timings = std::sync::Arc::downgrade(timings);
    std::thread::Builder::new()
        .name("wake-probe".into())
        .spawn(move || loop {
            std::thread::sleep(WAKE_PROBE_INTERVAL);
            let Some(timings) = timings.upgrade() else {
                return;
            };
            let spawned = std::time::Instant::now();
            let probe = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                runtime.spawn(async move { observe(&timings.runtime_wake, spawned.elapsed()) })
            }));
            if probe.is_err() {
                return;
            }
        })
        .map(|_| ())
}

/// Records `elapsed` in `histogram`, in seconds.
pub fn observe(histogram: &Histogram, elapsed: Duration) {
    histogram.observe(elapsed.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signal_is_the_slowest_light_work_since_it_was_last_taken() {
        let signal = LatencySignal::new();
        assert_eq!(signal.take(), None, "no sync, no signal");
        signal.note(Duration::from_millis(3));
        signal.note(Duration::from_millis(30));
        signal.note(Duration::from_millis(1));
        assert_eq!(signal.take(), Some(Duration::from_millis(30)));
        assert_eq!(signal.take(), None);
    }

    #[test]
    fn reads_wait_for_small_syncs_in_progress_and_no_longer_than_their_bound() {
        let gate = std::sync::Arc::new(SyncGate::default());
        assert!(
            !gate.wait_clear(Duration::from_secs(60)),
            "no sync, no wait"
        );
        let sync = gate.small_sync();
        let second = gate.small_sync();
        assert_eq!(gate.in_flight(), 2);
        // Bounded: with syncs that never end, a read goes on after its bound.
        assert!(gate.wait_clear(Duration::from_millis(5)));
        assert!(!gate.wait_clear(Duration::ZERO), "a zero bound never waits");
        drop(second);
        assert_eq!(gate.in_flight(), 1);
        // A waiting read is let go when the last sync ends, well before its bound.
        let reader = {
            let gate = std::sync::Arc::clone(&gate);
            std::thread::spawn(move || {
                let started = std::time::Instant::now();
                gate.wait_clear(Duration::from_secs(600));
                started.elapsed()
            })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while gate.waits() < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "the read never waited"
            );
            std::thread::yield_now();
        }
        drop(sync);
        let waited = reader.join().unwrap();
        assert!(waited < Duration::from_secs(300), "{waited:?}");
        assert_eq!(gate.in_flight(), 0);
        assert_eq!(gate.waits(), 2);
    }

    #[test]
    fn the_wake_probe_measures_the_runtime_and_ends_with_the_timings() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let timings = std::sync::Arc::new(Timings::new());
        spawn_wake_probe(&timings, runtime.handle().clone()).unwrap();
        let count = |t: &Timings| {
            let mut text = String::new();
            let mut registry = prometheus_client::registry::Registry::default();
            registry.register("wake", "", t.runtime_wake.clone());
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            text.lines()
                .find_map(|l| l.strip_prefix("wake_count "))
                .and_then(|n| n.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while count(&timings) < 3 {
            assert!(std::time::Instant::now() < deadline, "no wake measured");
            std::thread::sleep(Duration::from_millis(10));
        }
        // The probe holds the timings only while it spawns.
        let weak = std::sync::Arc::downgrade(&timings);
        drop(timings);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while weak.upgrade().is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "the probe kept the timings"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
