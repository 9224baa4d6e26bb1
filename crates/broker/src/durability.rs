//! Group commit's one contract, its per-partition flusher, and the counters of the syncs
//! a broker performed.
//!
//! A flusher sees what it makes durable only through [`SyncTarget`]: it takes the
//! target's sync set (everything written so far), syncs it off the async runtime, and
//! then either publishes the offset the set covers or fails the target. Two flushers
//! implement the loop: [`OwnFlusher`], one per partition (`sync_scope = partition`, and
//! the `interval` policy), and the broker-wide one in `crate::flusher`
//! (`sync_scope = broker` or `syncfs`). Neither knows the partition type, so the
//! partition depends on them and not the other way round.
//!
//! Failures follow one rule (`docs/storage-errors.md`): a failed sync is never
//! retried; [`SyncTarget::fail`] poisons the target and its flusher stops.
//!
//! [`SyncCounters`] belong to one broker instance ([`crate::Broker::sync_counters`]);
//! every flusher of that broker counts its rounds and sync calls there.

use crate::io::priority::BulkPriority;
use crate::io::timings::{Timings, SMALL_SYNC_BYTES};
use crate::FlushPolicy;
use headway_base::Offset;
use headway_log::SyncSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// What a flusher gets when it asks for a sync set.
pub(crate) enum SyncTake {
    /// Files to sync, up to `SyncSet::log_end_offset`.
    Set(SyncSet),
    /// Nothing written since the last set.
    Clean,
    /// Closed or failed: nothing more will be synced.
    Stopped,
}

impl SyncTake {
    /// The set, if there is anything to sync.
    pub(crate) fn into_set(self) -> Option<SyncSet> {
        match self {
            SyncTake::Set(set) => Some(set),
            SyncTake::Clean | SyncTake::Stopped => None,
        }
    }
}

/// The narrow contract between a flusher and what it makes durable (a partition).
pub(crate) trait SyncTarget: Send + Sync {
    /// Takes the files to sync for everything written so far.
    fn take_sync_set(&self) -> SyncTake;
    /// Everything below `offset` is on disk: acknowledge it and show it to readers.
    fn publish(&self, offset: Offset);
    /// A sync failed (`error` names the file): poison the target, stop accepting
    /// writes, never retry.
    fn fail(&self, error: &str);
    /// The target's topic, for injecting failures in tests.
    #[cfg(test)]
    fn topic(&self) -> &str;
}

/// Group-commit rounds and sync calls (fdatasync, fsync of a directory, syncfs) made by
/// one broker's flushers, whatever the scope. Logged at shutdown
/// (`sync_rounds`, `syncs`); the lab reads them to report syncs per second.
#[derive(Debug, Default)]
pub struct SyncCounters {
    rounds: AtomicU64,
    syncs: AtomicU64,
}

impl SyncCounters {
    /// (rounds, sync calls) since the broker opened.
    pub fn snapshot(&self) -> (u64, u64) {
        (
            self.rounds.load(Ordering::Relaxed),
            self.syncs.load(Ordering::Relaxed),
        )
    }

    pub(crate) fn count_round(&self, syncs: usize) {
        self.rounds.fetch_add(1, Ordering::Relaxed);
        self.syncs.fetch_add(syncs as u64, Ordering::Relaxed);
    }
}

/// Where a flusher records what it did: its broker's counters and stage histograms.
/// The default records nowhere (a partition outside a broker).
#[derive(Clone, Default)]
pub(crate) struct SyncMeters {
    pub(crate) counters: Arc<SyncCounters>,
    pub(crate) timings: Option<Arc<Timings>>,
    /// How a sync larger than [`SMALL_SYNC_BYTES`] is lowered: a heavy writer's sync
    /// queues its writes behind the small syncs of light partitions.
    pub(crate) large_syncs: BulkPriority,
}

impl SyncMeters {
    /// Syncs `set`, recording its duration. Blocking.
    pub(crate) fn sync(&self, set: &SyncSet) -> Result<(), String> {
        let start = Instant::now();
        let _idle = match set.bytes > SMALL_SYNC_BYTES {
            true => self.large_syncs.idle_io_while(),
            false => None,
        };
        // Catch-up reads let a small sync go first (`timings::SyncGate`).
        let _small = match (&self.timings, set.bytes <= SMALL_SYNC_BYTES) {
            (Some(timings), true) => Some(timings.small_syncs.small_sync()),
            _ => None,
        };
        let outcome = set.sync().map_err(|e| e.to_string());
        self.synced(set.bytes, start.elapsed());
        outcome
    }

    pub(crate) fn synced(&self, bytes: u64, elapsed: Duration) {
        if let Some(timings) = &self.timings {
            timings.synced(bytes, elapsed);
        }
    }

    pub(crate) fn count_round(&self, syncs: usize) {
        self.counters.count_round(syncs);
    }

    /// One partition's sync made `offsets` more offsets durable.
    pub(crate) fn published(&self, offsets: u64) {
        if let Some(timings) = &self.timings {
            timings.sync_records.observe(offsets as f64);
        }
    }
}

/// One partition's own group commit: with `flush = sync` it wakes when asked
/// ([`OwnFlusher::wake`]), with `flush = interval` on a timer; each time it syncs the
/// target's set on a blocking thread and publishes it. Every append that arrives during
/// one sync shares the next one.
pub(crate) struct OwnFlusher {
    policy: FlushPolicy,
    /// `Notify` keeps one permit, so no wake-up is lost.
    dirty: Notify,
    meters: OnceLock<SyncMeters>,
}

impl OwnFlusher {
    pub(crate) fn new(policy: FlushPolicy) -> OwnFlusher {
        OwnFlusher {
            policy,
            dirty: Notify::new(),
            meters: OnceLock::new(),
        }
    }

    /// Records syncs in `meters` (a broker's), from now on.
    pub(crate) fn measure(&self, meters: SyncMeters) {
        let _ = self.meters.set(meters);
    }

    /// The broker's meters, once [`OwnFlusher::measure`] set them.
    pub(crate) fn meters(&self) -> Option<&SyncMeters> {
        self.meters.get()
    }

    /// Asks for a sync of what was just written (and, at close, for the loop to look
    /// at the target again and see it stopped).
    pub(crate) fn wake(&self) {
        self.dirty.notify_one();
    }

    /// Runs until the target stops or a sync fails. Needs a tokio runtime.
    pub(crate) async fn run<T: SyncTarget + 'static>(self: Arc<Self>, target: Arc<T>) {
        loop {
            match self.policy {
                FlushPolicy::Sync => self.dirty.notified().await,
                FlushPolicy::Interval(every) => tokio::time::sleep(every).await,
                FlushPolicy::None => return,
            }
            let set = match target.take_sync_set() {
                SyncTake::Set(set) => set,
                SyncTake::Clean => continue,
                SyncTake::Stopped => return,
            };
            let synced = set.log_end_offset;
            let meters = self.meters.get().cloned().unwrap_or_default();
            let sync = move || {
                let outcome = meters.sync(&set);
                meters.count_round(set.file_count());
                outcome
            };
            match tokio::task::spawn_blocking(sync).await {
                Ok(Ok(())) => target.publish(synced),
                Ok(Err(e)) => return target.fail(&e),
                Err(e) => {
                    // The sync panicked: what it synced is unknown.
                    crate::panics::count_joined(crate::panics::Component::Flusher, &e);
                    return target.fail(&e.to_string());
                }
            }
        }
    }
}
