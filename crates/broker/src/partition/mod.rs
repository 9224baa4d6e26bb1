//! One partition: the shell around its log. It holds the single-writer mutex, the
//! watch that tells waiters about the high watermark, the hand-off to a flusher and
//! the side files; every decision about offsets is plain code in [`state`].
//!
//! ```text
//!   Partition (this file: mutex, watch, flusher hand-off, side files, counters)
//!     ├── state::PartitionState   offsets, producers, watermark, log start: values only
//!     ├── headway_log::Log        the segments on disk
//!     ├── durability::OwnFlusher  or flusher::SharedFlusher, through SyncTarget
//!     └── side_files              producer snapshot, log-start-offset
//! ```
//!
//! Produce path: [`Partition::append`] validates the batches (CRC-32C) outside the
//! mutex, then takes the mutex only to plan the append ([`PartitionState::plan_append`]:
//! the next offset, or the original offsets of an idempotent retry), write to the page
//! cache and record it. The caller then awaits [`Partition::wait_durable`]. With
//! `flush = sync` the partition's flusher (`crate::durability`) takes the log's
//! [`headway_log::SyncSet`] (everything written so far), syncs it on a blocking thread
//! without holding the mutex, and publishes the new high watermark; every append that
//! arrived during one sync shares the next one. With `sync_scope = broker` or `syncfs`
//! the append queues the partition on the broker's shared flusher instead
//! (`crate::flusher`), which syncs every dirty partition in one round.
//!
//! Fetch path: [`Partition::read_via`] locates the data under the mutex, bounded by the
//! high watermark, so consumers only ever see synced data, and hands the located slice
//! to `crate::io::read_route`, which decides between the page cache on the caller's thread
//! and the read threads.
//!
//! The high watermark and the log start offset live in the state, under the mutex, and
//! are mirrored where readers look without the mutex: the watch ([`DurableState`]) and
//! an atomic. One move skips the mutex: a flusher that synced publishes at once (the
//! watch, and `synced_to`) so that acknowledgements never wait for an append in
//! progress, and the state takes `synced_to` in at the start of every step under the
//! mutex. So whatever the state decides on is never behind what readers saw.
//!
//! Transactions (`docs/transactions.md`): transactional batches are appended like
//! idempotent ones and open their producer's transaction in the state;
//! [`Partition::write_marker`] appends a commit or abort marker, ends it, and records
//! an abort in the log's aborted-transaction index. The first offset of the oldest
//! open transaction is mirrored in the watch beside the high watermark, so the last
//! stable offset (what read_committed fetches see) needs no mutex either, and waiting
//! fetches wake when it moves.
//!
//! Storage errors (`docs/storage-errors.md`): an append whose write fails (a full disk)
//! is undone by the log and refused, and the next append tries again; a failed fsync
//! takes the partition offline for good (`SyncTarget::fail`); a read that finds a
//! damaged batch in a sealed segment refuses it and marks the segment for repair at
//! the next start. [`Partition::health`] shows all three. A partition whose log
//! cannot be opened at start-up is registered offline without a log
//! ([`Partition::unopened`]), so that the broker serves the others.
//!
//! Time: the partition reads it from the [`Clock`] it was opened with (the broker's,
//! the system clock in production): an append's and a marker's time, a roll by segment
//! age, an idempotent producer's last append. Tests hand it a manual clock.

#[cfg(test)]
mod clock_tests;
pub mod probe;
mod replica;
pub mod role;
#[cfg(test)]
mod role_tests;
mod side_files;
#[cfg(test)]
mod start_tests;
pub mod state;
pub mod tiered;
#[cfg(test)]
mod tiered_tests;
mod traffic;
#[cfg(test)]
mod txn_tests;

/// A test-only fault: appends to a topic named here panic.
#[cfg(test)]
pub(crate) mod tests_fault {
    use std::sync::Mutex;

    static PANIC_TOPICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

    pub(crate) fn panic_appends_to(topic: &str) {
        PANIC_TOPICS.lock().unwrap().push(topic.to_string());
    }

    pub(crate) fn stop_panicking(topic: &str) {
        PANIC_TOPICS.lock().unwrap().retain(|t| t != topic);
    }

    pub(crate) fn maybe_panic(topic: &str) {
        if PANIC_TOPICS.lock().unwrap().iter().any(|t| t == topic) {
            panic!("an injected panic in the append to {topic}");
        }
    }
}

use crate::durability::{OwnFlusher, SyncMeters, SyncTake, SyncTarget};
use crate::flusher::SharedFlusher;
use crate::io::read_pool::ReadVia;
use crate::io::read_route;
use crate::producer_state::{is_idempotent, TransactionResult};
use crate::{BrokerError, FlushPolicy};
use bytes::Bytes;
use headway_base::{limits, Clock, Offset, PartitionIndex, ProducerEpoch, ProducerId};
use headway_log::control::{Marker, MarkerKind};
use headway_log::records::{self, Keyless};
use headway_log::{
    batch::{self, Validated},
    leader_epochs::LeaderEpochs,
    AbortedTxn, BatchHeader, CleanReport, CleanerConfig, CleaningPlan, CorruptBatch, Log,
    LogConfig, LogError, ReadSlice, RecoveryReport, StagedCleaning,
};
use replica::Replication;
use side_files::{
    load_producer_states, read_log_start_offset, read_remote_log_start, write_log_start_offset,
    write_producer_snapshot,
};
pub use state::DeleteRecordsTo;
use state::{AppendPlan, LogStartMove, PartitionState, ReadWindow};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use tokio::sync::watch;
use traffic::Traffic;
pub use traffic::TrafficCounts;

/// What consumers and waiting producers observe of a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurableState {
    /// Offsets below it are synced (or written, with a weaker flush policy).
    pub high_watermark: Offset,
    /// A sync failed: the log is poisoned and nothing above the watermark will be acked.
    pub failed: bool,
    /// The first offset of the oldest open transaction, if any: read_committed readers
    /// see nothing from it on.
    pub first_unstable_offset: Option<Offset>,
    /// The first offset of the oldest transaction whose marker is written but not yet
    /// below the high watermark, if any: until the marker is, the transaction's outcome
    /// is not durable here, so read_committed readers see nothing from it on (as
    /// Kafka's last stable offset waits for a marker's replication).
    pub completing_first: Option<Offset>,
    /// Offsets below it are synced on this broker's disk. The high watermark itself
    /// unless the partition is replicated, where the high watermark also waits for the
    /// other in-sync replicas.
    pub synced: Offset,
}

impl DurableState {
    /// What read_committed readers may see: below the high watermark and below every
    /// open transaction.
    pub fn last_stable_offset(&self) -> Offset {
        let first = match (self.first_unstable_offset, self.completing_first) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        state::last_stable_offset(first, self.high_watermark)
    }
}

/// What a read may show (Fetch's and ListOffsets' `isolation_level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Everything durable, up to the high watermark (Kafka's 0).
    #[default]
    ReadUncommitted,
    /// Only up to the last stable offset, with the aborted transactions named (1).
    ReadCommitted,
}

impl Isolation {
    /// The wire's `isolation_level`: 1 is read_committed, anything else the default.
    pub fn from_wire(level: i8) -> Isolation {
        match level {
            1 => Isolation::ReadCommitted,
            _ => Isolation::ReadUncommitted,
        }
    }
}

/// The result of an append: where the batches went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: Offset,
    pub log_end_offset: Offset,
    pub log_start_offset: Offset,
    /// The leader epoch the batches were appended at (-1 on a broker that runs alone):
    /// what [`Partition::wait_acknowledged`] checks the role against.
    pub leader_epoch: i32,
}

/// A partition's storage health, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionHealth {
    /// The log is poisoned (a failed fsync, or a failed write that could not be
    /// undone): it accepts no writes until the broker restarts.
    pub offline: bool,
    /// Appends refused because a write failed and was undone (a full disk).
    pub write_refusals: u64,
    /// The log could not be opened at start-up (also `offline`).
    pub unopened: bool,
    /// Reads refused because a stored batch failed its CRC.
    pub corrupt_reads: u64,
    /// Segments marked for repair at the next start.
    pub segments_to_repair: usize,
}

#[derive(Debug, Clone)]
pub struct ReadResult {
    pub records: Bytes,
    pub high_watermark: Offset,
    pub log_start_offset: Offset,
    pub last_stable_offset: Offset,
    /// For read_committed, the aborted transactions overlapping the records (their
    /// producer and first offset are what a client needs); `None` for
    /// read_uncommitted, as Kafka answers.
    pub aborted: Option<Vec<AbortedTxn>>,
    /// The read ran on the read threads (not from the page cache on the caller's thread).
    pub pooled: bool,
}

/// What the partition's mutex guards: the log and, checked and updated in the same
/// step as each append, the partition's bookkeeping.
struct Slot {
    log: Log,
    state: PartitionState,
    /// Which leader epoch wrote which offsets (empty until the partition is replicated).
    epochs: LeaderEpochs,
    /// Where recovery left a hole below the log end (`RecoveryReport::hole_at`), until
    /// the partition's first replicated role cuts the log there.
    hole_at: Option<Offset>,
}

/// What a partition shows before its first step: from its recovered log, or nothing
/// for one that could not be opened.
struct Shell {
    high_watermark: Offset,
    log_start_offset: Offset,
    first_unstable_offset: Option<Offset>,
    segments_to_repair: usize,
    unopened: Option<String>,
}

/// A read located under the mutex, to be run without it.
enum ReadStart {
    /// Nothing to read: an empty answer.
    Nothing(ReadResult),
    /// Read the slice up to the bounds' high watermark.
    Located(ReadSlice, ReadBounds),
}

/// The offsets a read saw when it started; its answer carries them.
#[derive(Clone, Copy)]
struct ReadBounds {
    high_watermark: Offset,
    log_start_offset: Offset,
    last_stable_offset: Offset,
    isolation: Isolation,
    /// A follower's read: up to the leader's log end, whatever is durable.
    replica_limit: Option<Offset>,
}

impl ReadBounds {
    /// Where the read stops: the high watermark, or the last stable offset (a
    /// follower's read: the log end).
    fn limit(&self) -> Offset {
        if let Some(limit) = self.replica_limit {
            return limit;
        }
        match self.isolation {
            Isolation::ReadUncommitted => self.high_watermark,
            Isolation::ReadCommitted => self.last_stable_offset,
        }
    }

    fn answer(self, records: Bytes, pooled: bool) -> ReadResult {
        ReadResult {
            records,
            high_watermark: self.high_watermark,
            log_start_offset: self.log_start_offset,
            last_stable_offset: self.last_stable_offset,
            aborted: (self.isolation == Isolation::ReadCommitted).then(Vec::new),
            pooled,
        }
    }
}

pub struct Partition {
    topic: Arc<str>,
    index: PartitionIndex,
    flush: FlushPolicy,
    dir: PathBuf,
    /// The single writer. `None` once closed.
    log: Mutex<Option<Slot>>,
    /// Held by DeleteRecords from its plan to its move, around the side file's write
    /// (done outside `log`, so appends do not wait for its sync): two calls at once
    /// would otherwise share the file's temporary copy (one of them failing) or write
    /// the file in either order, so that a smaller start written last came back at the
    /// next open.
    delete_records: Mutex<()>,
    /// Mirrors the state's high watermark (and failure) for waiters and readers.
    durable: watch::Sender<DurableState>,
    /// Transactions whose marker is written here and not yet below the high watermark:
    /// marker offset -> the transaction's first offset. Behind `durable`'s
    /// `completing_first`; entries go as the high watermark passes their markers. At
    /// most `TRANSACTIONS_PER_PARTITION_MAX` entries (`completing_at` folds past it).
    completing: Mutex<BTreeMap<Offset, Offset>>,
    /// How many markers `completing_at` folded into the newest entry because the map
    /// was full (the high watermark stood still across that many markers).
    completing_folded: AtomicU64,
    /// The log end, moved at every append while this broker leads the partition in a
    /// cluster: what wakes its followers' waiting fetches, so that a follower copies a
    /// write while the leader syncs it instead of after.
    appended: watch::Sender<Offset>,
    /// Mirrors the state's log start offset for readers.
    log_start_offset: AtomicI64,
    /// The highest offset a flusher reported synced on this broker, published without
    /// the mutex.
    synced_to: AtomicI64,
    /// The highest high watermark published without the mutex (what was synced, or for
    /// a replicated partition what its in-sync replicas allow); the state takes it in
    /// at the start of every step under the mutex.
    high_watermark_to: AtomicI64,
    /// The partition's role in a cluster; `None` on a broker that runs alone. Locked
    /// after `log` when both are held.
    replication: Mutex<Option<Replication>>,
    /// A role was set: reads, appends and syncs consult `replication`.
    replicated: AtomicBool,
    /// This broker leads the partition (meaningful once `replicated`).
    leading: AtomicBool,
    /// The leader epoch stamped on appended batches, or -1 (not replicated, or not
    /// leading): read under `log`, changed under it.
    stamp_epoch: std::sync::atomic::AtomicI32,
    /// The partition's own group commit (unused when a shared flusher syncs it).
    own: Arc<OwnFlusher>,
    closed: AtomicBool,
    /// This partition, for queueing itself on a shared flusher.
    me: Weak<Partition>,
    /// Set when a broker-wide flusher syncs this partition instead of its own.
    pub(crate) shared: OnceLock<Arc<SharedFlusher>>,
    /// True while the partition waits in the shared flusher's queue.
    pub(crate) queued: AtomicBool,
    /// The log was poisoned, or never opened (see [`PartitionHealth::offline`]).
    offline: AtomicBool,
    /// Why the log could not be opened at start-up ([`Partition::unopened`]).
    unopened: Option<String>,
    write_refusals: AtomicU64,
    corrupt_reads: AtomicU64,
    segments_to_repair: AtomicUsize,
    /// Bytes appended and not yet handed to a sync (`Log::unsynced_bytes`).
    unsynced: AtomicU64,
    /// The bound on `unsynced` past which producers wait (`partition_unsynced_bytes_max`).
    unsynced_max: AtomicU64,
    /// The topic is compacted: every record must have a key.
    keys_required: AtomicBool,
    /// The topic is tiered (`remote.storage.enable`): a follower's log start follows
    /// its leader's (`tiered.rs`).
    tiered: AtomicBool,
    traffic: Traffic,
    /// Where appends and markers read the time (their timestamps, a roll by age, an
    /// idempotent producer's last append): the system clock in production.
    clock: Clock,
}

impl Partition {
    /// Opens and recovers the partition's log. Blocking: call from a blocking thread.
    pub fn open(
        dir: PathBuf,
        topic: Arc<str>,
        index: PartitionIndex,
        config: LogConfig,
        flush: FlushPolicy,
        clock: Clock,
    ) -> Result<(Arc<Partition>, RecoveryReport), BrokerError> {
        let (mut log, report) =
            Log::open(&dir, config, clock.time_ms()).map_err(BrokerError::from_log)?;
        let producers = load_producer_states(&dir, &mut log)?;
        let mut epochs = LeaderEpochs::open(&dir).map_err(BrokerError::from_log)?;
        // Recovery may have cut a torn tail: epochs that began past the end are gone.
        epochs
            .truncate_from_end(report.log_end_offset)
            .map_err(BrokerError::from_log)?;
        let segments_to_repair = log.segments_to_repair();
        // A tiered partition whose oldest segments were left to the remote tier starts
        // before its local log does.
        let (floor, stored) = match read_remote_log_start(&dir) {
            Some(remote) => {
                let stored = read_log_start_offset(&dir).map_or(remote, |s| s.max(remote));
                (Offset::ZERO, Some(stored))
            }
            None => (report.log_start_offset, read_log_start_offset(&dir)),
        };
        let state = PartitionState::recovered(floor, report.log_end_offset, stored, producers);
        let shell = Shell {
            high_watermark: state.high_watermark(),
            log_start_offset: state.log_start_offset(),
            first_unstable_offset: state.first_unstable_offset(),
            segments_to_repair,
            unopened: None,
        };
        let slot = Some(Slot {
            log,
            state,
            epochs,
            hole_at: report.hole_at,
        });
        let partition = Partition::assemble(dir, topic, index, flush, clock, slot, shell);
        Ok((partition, report))
    }

    /// A partition whose log could not be opened (`cause`): registered offline, so
    /// that the broker serves every other partition. It holds no log: produces and
    /// fetches are answered `KAFKA_STORAGE_ERROR` naming the cause, Metadata shows it
    /// without a leader, `/metrics` counts it, until an operator repairs the directory
    /// and restarts the broker (`docs/storage-errors.md`).
    pub fn unopened(
        dir: PathBuf,
        topic: Arc<str>,
        index: PartitionIndex,
        flush: FlushPolicy,
        clock: Clock,
        cause: String,
    ) -> Arc<Partition> {
        let shell = Shell {
            high_watermark: Offset::ZERO,
            log_start_offset: Offset::ZERO,
            first_unstable_offset: None,
            segments_to_repair: 0,
            unopened: Some(cause),
        };
        Partition::assemble(dir, topic, index, flush, clock, None, shell)
    }

    fn assemble(
        dir: PathBuf,
        topic: Arc<str>,
        index: PartitionIndex,
        flush: FlushPolicy,
        clock: Clock,
        slot: Option<Slot>,
        shell: Shell,
    ) -> Arc<Partition> {
        let unopened = shell.unopened.is_some();
        let (durable, _) = watch::channel(DurableState {
            high_watermark: shell.high_watermark,
            failed: unopened,
            first_unstable_offset: shell.first_unstable_offset,
            completing_first: None,
            synced: shell.high_watermark,
        });
        let (appended, _) = watch::channel(Offset::ZERO);
        Arc::new_cyclic(|me| Partition {
            topic,
            index,
            flush,
            appended,
            log_start_offset: AtomicI64::new(shell.log_start_offset.value()),
            synced_to: AtomicI64::new(shell.high_watermark.value()),
            high_watermark_to: AtomicI64::new(shell.high_watermark.value()),
            replication: Mutex::new(None),
            replicated: AtomicBool::new(false),
            leading: AtomicBool::new(false),
            stamp_epoch: std::sync::atomic::AtomicI32::new(-1),
            dir,
            log: Mutex::new(slot),
            delete_records: Mutex::new(()),
            durable,
            completing: Mutex::new(BTreeMap::new()),
            completing_folded: AtomicU64::new(0),
            own: Arc::new(OwnFlusher::new(flush)),
            closed: AtomicBool::new(unopened),
            me: me.clone(),
            shared: OnceLock::new(),
            queued: AtomicBool::new(false),
            offline: AtomicBool::new(unopened),
            unopened: shell.unopened,
            write_refusals: AtomicU64::new(0),
            corrupt_reads: AtomicU64::new(0),
            segments_to_repair: AtomicUsize::new(shell.segments_to_repair),
            unsynced: AtomicU64::new(0),
            unsynced_max: AtomicU64::new(u64::MAX),
            keys_required: AtomicBool::new(false),
            tiered: AtomicBool::new(false),
            traffic: Traffic::default(),
            clock,
        })
    }

    /// Why the partition's log could not be opened at start-up, if it could not.
    pub fn unopened_cause(&self) -> Option<&str> {
        self.unopened.as_deref()
    }

    /// The error for any use of a partition that could not be opened.
    fn unopened_error(&self, cause: &str) -> BrokerError {
        BrokerError::Storage(format!(
            "partition {}/{} is offline: its log could not be opened at start-up ({cause})",
            self.topic, self.index
        ))
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn index(&self) -> PartitionIndex {
        self.index
    }

    /// Starts the flusher for the sync and interval policies. Needs a tokio runtime.
    pub fn start_flusher(self: &Arc<Self>) {
        if self.flush != FlushPolicy::None {
            let (own, me) = (Arc::clone(&self.own), Arc::clone(self));
            let flusher = crate::panics::Component::Flusher;
            crate::panics::spawn_restarting(flusher, "partition flusher", move || {
                Arc::clone(&own).run(Arc::clone(&me))
            });
        }
    }

    /// Hands the partition's syncs to a broker-wide flusher (`flush = sync` only),
    /// instead of [`Partition::start_flusher`].
    pub(crate) fn join_shared_flusher(&self, flusher: &Arc<SharedFlusher>) {
        if self.flush == FlushPolicy::Sync {
            let _ = self.shared.set(Arc::clone(flusher));
        }
    }

    /// Bounds the bytes appended and not yet handed to a sync (`flush = sync` only):
    /// see [`Partition::over_unsynced_bound`].
    pub fn bound_unsynced(&self, bytes: u64) {
        if self.flush == FlushPolicy::Sync {
            self.unsynced_max.store(bytes, Ordering::Relaxed);
        }
    }

    /// Records this partition's own syncs in `meters` (a broker's), from now on.
    pub(crate) fn measure_syncs(&self, meters: &SyncMeters) {
        self.own.measure(meters.clone());
    }

    /// Bytes appended and not yet handed to a sync.
    pub fn unsynced_bytes(&self) -> u64 {
        self.unsynced.load(Ordering::Acquire)
    }

    /// True when more bytes wait for a sync than the partition's bound: the producer
    /// that appended last should wait ([`Partition::wait_unsynced_within_bound`])
    /// before it appends again, so that no sync carries more than about the bound.
    pub fn over_unsynced_bound(&self) -> bool {
        self.unsynced_bytes() > self.unsynced_max.load(Ordering::Relaxed)
    }

    /// Waits until the bytes waiting for a sync are within the bound again: a sync took
    /// them and finished. Returns at once when the log failed or closed.
    pub async fn wait_unsynced_within_bound(&self) {
        let mut rx = self.durable.subscribe();
        while self.over_unsynced_bound() && !self.closed.load(Ordering::Acquire) {
            if rx.borrow_and_update().failed || rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Asks for a sync of what was just appended: wakes this partition's flusher, or
    /// queues the partition on the shared one (once until its next round).
    fn request_sync(&self) {
        match self.shared.get() {
            None => self.own.wake(),
            Some(flusher) => {
                if !self.queued.swap(true, Ordering::AcqRel) {
                    if let Some(me) = self.me.upgrade() {
                        flusher.enqueue(me);
                    }
                }
            }
        }
    }

    fn with_slot<T>(
        &self,
        f: impl FnOnce(&mut Slot) -> Result<T, BrokerError>,
    ) -> Result<T, BrokerError> {
        let Ok(mut slot) = self.log.lock() else {
            // A panic while the log was held (outside the append's own catch): what it
            // left is unknown, so the partition serves nothing more until restart.
            if !self.offline.swap(true, Ordering::AcqRel) {
                tracing::error!(topic = %self.topic, partition = self.index.value(),
                    "a panic interrupted the partition's writer; the partition is offline until restart");
                self.durable.send_modify(|s| s.failed = true);
            }
            return Err(self.panicked_error());
        };
        let slot = slot.as_mut().ok_or_else(|| match &self.unopened {
            Some(cause) => self.unopened_error(cause),
            None => BrokerError::ShuttingDown {
                topic: self.topic.to_string(),
                partition: self.index,
            },
        })?;
        self.take_in_synced(&mut slot.state);
        f(slot)
    }

    fn with_log<T>(
        &self,
        f: impl FnOnce(&mut Log) -> Result<T, headway_log::LogError>,
    ) -> Result<T, BrokerError> {
        self.with_slot(|slot| f(&mut slot.log).map_err(BrokerError::from_log))
    }

    /// Appends the batches of one produce request for this partition, as
    /// `batch::validate_all` found them: the size limit answers first, then a
    /// validation error, then the checks on the headers (control, transactional,
    /// idempotent, keys). Offsets are assigned here, under the mutex; the data is
    /// durable once [`Partition::wait_durable`] for `log_end_offset` returns. A retried
    /// batch of an idempotent producer is not appended again: the answer describes the
    /// original.
    pub fn append(
        &self,
        validation: batch::Validation<'_>,
        max_message_bytes: usize,
    ) -> Result<Appended, BrokerError> {
        let size = match &validation {
            Ok(validated) => validated.len(),
            Err(invalid) => invalid.len,
        };
        if size > max_message_bytes {
            return Err(BrokerError::MessageTooLarge {
                size,
                limit: max_message_bytes,
            });
        }
        self.check_leading()?;
        let validated = validation.map_err(|invalid| BrokerError::Batch(invalid.error))?;
        let (records, headers) = (validated.bytes(), validated.headers());
        if headers.iter().any(|h| h.is_control()) {
            return Err(BrokerError::InvalidRequest(
                "control batches are written by the transaction coordinator, not produced".into(),
            ));
        }
        if headers
            .iter()
            .any(|h| h.is_transactional() && !is_idempotent(h))
        {
            return Err(BrokerError::InvalidRequest(
                "a transactional batch must carry a producer id and sequence".into(),
            ));
        }
        if self.keys_required.load(Ordering::Relaxed) {
            self.require_keys(records, headers)?;
        }
        let idempotent = headers.first().filter(|h| is_idempotent(h)).copied();
        if idempotent.is_some() && headers.len() != 1 {
            return Err(BrokerError::InvalidRequest(
                "an idempotent produce must carry exactly one batch per partition".into(),
            ));
        }
        // The log rewrites base offsets in place; the request buffer is shared, so copy.
        let mut owned = validated.into_owned();
        let now_ms = self.clock.time_ms();
        let appended = self.with_slot(|slot| {
            let append = || {
                #[cfg(test)]
                tests_fault::maybe_panic(&self.topic);
                self.append_under_lock(slot, idempotent.as_ref(), &mut owned, now_ms)
            };
            crate::panics::catch(crate::panics::Component::Append, append)
                .unwrap_or_else(|_| Err(self.panicked_under_lock(slot)))
        })?;
        let (base_offset, log_end_offset, written, leader_epoch) = appended;
        if written {
            self.traffic.took_in(owned.len(), owned.headers());
            if self.flush == FlushPolicy::Sync {
                self.request_sync();
            }
        }
        Ok(Appended {
            base_offset,
            log_end_offset,
            log_start_offset: self.log_start_offset(),
            leader_epoch,
        })
    }

    /// The append proper, under the mutex: `(base offset, log end, written, leader
    /// epoch)`.
    fn append_under_lock(
        &self,
        slot: &mut Slot,
        idempotent: Option<&BatchHeader>,
        owned: &mut Validated<Vec<u8>>,
        now_ms: i64,
    ) -> Result<(Offset, Offset, bool, i32), BrokerError> {
        let planned = slot.state.plan_append(idempotent)?;
        if let AppendPlan::Duplicate {
            base_offset,
            log_end_offset,
        } = planned
        {
            let epoch = self.stamping_epoch();
            return Ok((base_offset, log_end_offset, false, epoch));
        }
        let epoch = self.stamp(owned)?;
        let info = slot
            .log
            .append(owned, now_ms)
            .map_err(|e| self.append_failed(&slot.log, e))?;
        slot.state
            .appended(idempotent, info.base_offset, info.log_end_offset, now_ms);
        self.wrote(slot, info.log_end_offset);
        Ok((info.base_offset, info.log_end_offset, true, epoch))
    }

    /// An append panicked under the mutex: what it wrote is unknown, so the partition
    /// goes offline as after a failed fsync (no more writes, waiters fail) until an
    /// operator restarts the broker, whose recovery checks the log.
    fn panicked_under_lock(&self, slot: &mut Slot) -> BrokerError {
        slot.log.poison();
        if !self.offline.swap(true, Ordering::AcqRel) {
            tracing::error!(topic = %self.topic, partition = self.index.value(),
                "an append panicked; the partition is offline until restart");
        }
        self.durable.send_modify(|s| s.failed = true);
        self.panicked_error()
    }

    fn panicked_error(&self) -> BrokerError {
        BrokerError::Storage(format!(
            "partition {}/{} is offline after a panic in its writer",
            self.topic,
            self.index.value()
        ))
    }

    /// After an append (batches or a marker) under the mutex: counts the bytes that
    /// wait for a sync, shows the open transactions to readers, and, with no sync to
    /// wait for, moves the high watermark.
    fn wrote(&self, slot: &mut Slot, log_end_offset: Offset) {
        self.unsynced
            .store(slot.log.unsynced_bytes(), Ordering::Release);
        let first_unstable = slot.state.first_unstable_offset();
        self.durable.send_if_modified(|s| {
            let changed = s.first_unstable_offset != first_unstable;
            s.first_unstable_offset = first_unstable;
            changed
        });
        if self.leading.load(Ordering::Acquire) {
            self.appended.send_replace(log_end_offset);
        }
        if self.flush != FlushPolicy::Sync {
            // No sync to wait for: written is as durable as it gets.
            self.publish_durable(log_end_offset, false);
            self.take_in_synced(&mut slot.state);
        }
    }

    /// Writes a transaction marker for `producer_id` (a control batch, as Kafka writes
    /// it): its open transaction here, if any, ends; an abort is recorded in the
    /// aborted-transaction index. Returns the marker's offset; it is durable once
    /// [`Partition::wait_durable`] for the offset after it returns. A marker for a
    /// producer with nothing open is written all the same (readers skip it). Refused
    /// when `epoch` is older than the producer's (INVALID_PRODUCER_EPOCH) or
    /// `coordinator_epoch` older than the last marker's. Blocking.
    pub fn write_marker(
        &self,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        result: TransactionResult,
        coordinator_epoch: i32,
    ) -> Result<Offset, BrokerError> {
        let now_ms = self.clock.time_ms();
        let kind = match result {
            TransactionResult::Commit => MarkerKind::Commit,
            TransactionResult::Abort => MarkerKind::Abort,
        };
        let bytes = Marker {
            producer_id,
            producer_epoch: epoch,
            kind,
            coordinator_epoch,
            timestamp_ms: now_ms,
        }
        .encode();
        let mut marker = batch::validate_all(&bytes)
            .map_err(|invalid| BrokerError::Batch(invalid.error))?
            .into_owned();
        let offset = self.with_slot(|slot| {
            slot.state
                .plan_marker(producer_id, epoch, coordinator_epoch)?;
            self.stamp(&mut marker)?;
            let info = slot
                .log
                .append(&mut marker, now_ms)
                .map_err(|e| self.append_failed(&slot.log, e))?;
            let completed = slot.state.marker_appended(
                producer_id,
                epoch,
                coordinator_epoch,
                info.base_offset,
                now_ms,
            );
            if let Some(txn) = &completed {
                // Before `wrote` shows the transaction as no longer open.
                self.completing_at(info.base_offset, txn.first_offset);
            }
            if let (TransactionResult::Abort, Some(txn)) = (result, completed) {
                let aborted = AbortedTxn {
                    producer_id,
                    first_offset: txn.first_offset,
                    last_offset: info.base_offset,
                };
                slot.log
                    .add_aborted(aborted)
                    .map_err(|e| self.append_failed(&slot.log, e))?;
            }
            self.wrote(slot, info.log_end_offset);
            Ok(info.base_offset)
        })?;
        if self.flush == FlushPolicy::Sync {
            self.request_sync();
        }
        Ok(offset)
    }

    /// Offsets below it are durable and in no open transaction: the end of what
    /// read_committed readers see. Without the mutex.
    pub fn last_stable_offset(&self) -> Offset {
        self.durable.borrow().last_stable_offset()
    }

    /// The oldest transaction open here: its producer, first offset and when its
    /// first batch came (ms). For `/metrics` and the coordinator's timeouts.
    pub fn oldest_ongoing_transaction(&self) -> Option<(ProducerId, Offset, i64)> {
        self.with_slot(|slot| Ok(slot.state.producers().oldest_ongoing()))
            .ok()
            .flatten()
    }

    /// The aborted transactions overlapping `[from, to)`, at most `max`, by marker
    /// offset.
    pub fn aborted_transactions(
        &self,
        from: Offset,
        to: Offset,
        max: usize,
    ) -> Result<Vec<AbortedTxn>, BrokerError> {
        self.with_log(|log| Ok(log.aborted_transactions(from, to, max)))
    }

    /// Counts a failed append: refused (the log is unchanged, the next append tries
    /// again) or one that poisoned the log (the partition is offline).
    fn append_failed(&self, log: &Log, error: LogError) -> BrokerError {
        if error.is_refused() {
            self.write_refusals.fetch_add(1, Ordering::Relaxed);
        } else if log.is_poisoned() && !self.offline.swap(true, Ordering::AcqRel) {
            tracing::error!(topic = %self.topic, partition = self.index.value(), %error,
                "a write failed and could not be undone; the partition is offline until restart");
        }
        BrokerError::from_log(error)
    }

    /// The partition's storage health.
    pub fn health(&self) -> PartitionHealth {
        PartitionHealth {
            offline: self.offline.load(Ordering::Acquire) || self.durable.borrow().failed,
            unopened: self.unopened.is_some(),
            write_refusals: self.write_refusals.load(Ordering::Relaxed),
            corrupt_reads: self.corrupt_reads.load(Ordering::Relaxed),
            segments_to_repair: self.segments_to_repair.load(Ordering::Relaxed),
        }
    }

    /// A read found a damaged batch: counts it, marks its segment for repair (once;
    /// a rare event, so the marker's fsync runs on the caller's thread) and says so.
    fn corrupt_read(&self, offset: Offset, corrupt: &CorruptBatch) -> BrokerError {
        self.corrupt_reads.fetch_add(1, Ordering::Relaxed);
        let marked = self.with_log(|log| {
            let path = log.segment_path(corrupt.segment_base_offset);
            let marked = log.mark_for_repair(corrupt.segment_base_offset);
            self.segments_to_repair
                .store(log.segments_to_repair(), Ordering::Relaxed);
            Ok((path, marked))
        });
        match marked {
            Ok((path, Ok(true))) => {
                tracing::error!(topic = %self.topic, partition = self.index.value(),
                path = %path.display(), %corrupt,
                "stored record batch is corrupt; it is not served and the segment is marked for repair at the next start")
            }
            Ok((path, Err(e))) => {
                tracing::error!(topic = %self.topic, partition = self.index.value(),
                path = %path.display(), %corrupt, error = %e,
                "stored record batch is corrupt; marking the segment for repair failed")
            }
            _ => {}
        }
        BrokerError::CorruptData {
            topic: self.topic.to_string(),
            partition: self.index,
            offset,
            detail: corrupt.to_string(),
        }
    }

    /// DeleteRecords: makes `to` (an offset, or the high watermark) the log start
    /// offset. Records below it are no longer served; whole segments below it are
    /// deleted. The new start is synced to disk before it takes effect, outside the
    /// mutex so appends do not wait for that sync. Blocking.
    pub fn delete_records(&self, to: DeleteRecordsTo) -> Result<Offset, BrokerError> {
        let _one_at_a_time = self
            .delete_records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let target = match self.with_slot(|slot| slot.state.plan_delete_records(to))? {
            LogStartMove::Unchanged(current) => return Ok(current),
            LogStartMove::To(target) => target,
        };
        write_log_start_offset(&self.dir, target)?;
        self.with_slot(|slot| {
            let start = slot.state.delete_records_moved(target);
            self.log_start_offset
                .store(start.value(), Ordering::Release);
            slot.epochs
                .truncate_from_start(start)
                .map_err(BrokerError::from_log)?;
            slot.log
                .delete_segments_before(target)
                .map_err(BrokerError::from_log)
        })?;
        Ok(target)
    }

    /// Forgets idempotent producers idle for longer than `idle_ms` at `now_ms`.
    pub fn expire_producers(&self, now_ms: i64, idle_ms: i64) -> Result<usize, BrokerError> {
        self.with_slot(|slot| Ok(slot.state.expire_producers(now_ms, idle_ms)))
    }

    /// Waits until every offset below `offset` is durable, or the log failed.
    pub async fn wait_durable(&self, offset: Offset) -> Result<(), BrokerError> {
        let mut rx = self.durable.subscribe();
        let state = *rx
            .wait_for(|s| s.failed || s.high_watermark >= offset)
            .await
            .map_err(|_| BrokerError::Storage("partition dropped".into()))?;
        if state.high_watermark >= offset {
            Ok(())
        } else {
            Err(BrokerError::Storage(format!(
                "{}/{}: log failed before offset {offset} was synced",
                self.topic, self.index
            )))
        }
    }

    /// Everything below `offset` is durable: moves the state's high watermark and, if
    /// it moved, its mirror. Called under the mutex.
    fn durable_to(&self, state: &mut PartitionState, offset: Offset) {
        if let Some(high_watermark) = state.durable_to(offset) {
            self.mirror_high_watermark(high_watermark);
        }
    }

    /// Shows a new high watermark to readers and waiters (never backwards).
    fn mirror_high_watermark(&self, high_watermark: Offset) {
        self.durable.send_if_modified(|s| {
            let advance = high_watermark > s.high_watermark;
            if advance {
                s.high_watermark = high_watermark;
            }
            advance
        });
        self.publish_completing();
    }

    /// A transaction that began at `first` ended with the marker at `marker`: until
    /// the high watermark passes the marker, read_committed readers stop at `first`.
    /// Bounded: when `TRANSACTIONS_PER_PARTITION_MAX` markers already wait, the newest
    /// entry takes this one in (the later marker, the earlier first offset), so readers
    /// wait longer for the older transaction, never less for either; counted in
    /// [`Partition::completing_folded`].
    fn completing_at(&self, marker: Offset, first: Offset) {
        let mut completing = self.completing.lock().expect("completing mutex poisoned");
        if completing.len() >= headway_base::limits::TRANSACTIONS_PER_PARTITION_MAX {
            let (newest, newest_first) = completing.pop_last().expect("full, so not empty");
            completing.insert(marker.max(newest), first.min(newest_first));
            self.completing_folded.fetch_add(1, Ordering::Relaxed);
        } else {
            completing.insert(marker, first);
        }
        drop(completing);
        self.publish_completing();
    }

    /// The log was cut to end at `end`: the markers that waited above it are gone
    /// (their transactions are open again in the producer state, or come back with the
    /// leader's copy), so their entries wait for the high watermark to reach `end`
    /// instead, one entry holding the earliest first offset. Without this a cut
    /// follower could keep readers waiting for a marker offset its log no longer reaches.
    fn completing_cut(&self, end: Offset) {
        let mut completing = self.completing.lock().expect("completing mutex poisoned");
        let above = completing.split_off(&end);
        if let (Some(first), Some(last)) = (
            above.values().min(),
            (end.value() > 0).then(|| end.value() - 1),
        ) {
            let key = Offset::new(last);
            let held = completing.get(&key).copied().unwrap_or(*first);
            completing.insert(key, held.min(*first));
        }
        drop(completing);
        self.publish_completing();
    }

    /// Markers folded into another's entry because too many waited for the high
    /// watermark at once ([`Partition::completing_at`]).
    pub fn completing_folded(&self) -> u64 {
        self.completing_folded.load(Ordering::Relaxed)
    }

    /// Drops the completing transactions whose marker is below the high watermark and
    /// shows the oldest first offset of the others, in one step with the high watermark
    /// it was judged by.
    fn publish_completing(&self) {
        let mut completing = self.completing.lock().expect("completing mutex poisoned");
        if completing.is_empty() && self.durable.borrow().completing_first.is_none() {
            return;
        }
        self.durable.send_if_modified(|s| {
            *completing = completing.split_off(&s.high_watermark);
            let first = completing.values().min().copied();
            let changed = s.completing_first != first;
            s.completing_first = first;
            changed
        });
    }

    /// Bytes and records appended by producers and read by fetches since the
    /// partition was opened.
    pub fn traffic(&self) -> TrafficCounts {
        self.traffic.counts()
    }

    pub fn high_watermark(&self) -> Offset {
        self.durable.borrow().high_watermark
    }

    pub fn log_start_offset(&self) -> Offset {
        Offset::new(self.log_start_offset.load(Ordering::Acquire))
    }

    pub fn log_end_offset(&self) -> Result<Offset, BrokerError> {
        self.with_log(|log| Ok(log.log_end_offset()))
    }

    /// A receiver that wakes when the high watermark moves (for long-polling fetches).
    pub fn watch(&self) -> watch::Receiver<DurableState> {
        self.durable.subscribe()
    }

    /// A receiver that wakes at every append while this broker leads the partition
    /// (for followers' long-polling fetches, which read past the high watermark).
    pub fn watch_appends(&self) -> watch::Receiver<Offset> {
        self.appended.subscribe()
    }

    /// Reads whole batches from `offset`, at most about `max_bytes` (the first batch is
    /// always whole), never past the high watermark, on the runtime's blocking pool.
    /// For the broker's own reads (start-up replays, ListOffsets); fetches use
    /// [`Partition::read_via`].
    pub async fn read(&self, offset: Offset, max_bytes: usize) -> Result<ReadResult, BrokerError> {
        let (slice, bounds) = match self.start_read(offset, Isolation::ReadUncommitted, None)? {
            ReadStart::Nothing(empty) => return Ok(empty),
            ReadStart::Located(slice, bounds) => (slice, bounds),
        };
        let high_watermark = bounds.high_watermark;
        let records = tokio::task::spawn_blocking(move || slice.read(max_bytes, high_watermark))
            .await
            .map_err(|e| BrokerError::Storage(format!("read task failed: {e}")))?
            .map_err(|e| self.read_failed(offset, e))?;
        Ok(bounds.answer(records, false))
    }

    /// [`Partition::read`] for a fetch: the page cache on this thread or the read
    /// threads, as `crate::io::read_route` decides for `via`. With
    /// [`Isolation::ReadCommitted`] the read stops at the last stable offset and the
    /// answer names the aborted transactions its records overlap (at most
    /// [`limits::ABORTED_TRANSACTIONS_PER_FETCH_MAX`]: past it the read is shortened
    /// until they fit, so no aborted record goes unnamed).
    pub async fn read_via(
        &self,
        offset: Offset,
        max_bytes: usize,
        via: &ReadVia,
        isolation: Isolation,
    ) -> Result<ReadResult, BrokerError> {
        self.check_leading()?;
        self.read_bounded(offset, max_bytes, via, isolation, None)
            .await
    }

    /// [`Partition::read_via`] without the leader's check; a follower's read passes the
    /// leader's log end as `replica_limit`.
    async fn read_bounded(
        &self,
        offset: Offset,
        max_bytes: usize,
        via: &ReadVia,
        isolation: Isolation,
        replica_limit: Option<Offset>,
    ) -> Result<ReadResult, BrokerError> {
        let mut max_bytes = max_bytes;
        loop {
            let (slice, bounds) = match self.start_read(offset, isolation, replica_limit)? {
                ReadStart::Nothing(empty) => return Ok(empty),
                ReadStart::Located(slice, bounds) => (slice, bounds),
            };
            let failed = |e| self.read_failed(offset, e);
            let limit = bounds.limit();
            let (records, pooled) = read_route::read(slice, max_bytes, limit, via, failed).await?;
            let mut answer = bounds.answer(records, pooled);
            let Some((end, batches)) = records_end(&answer.records) else {
                self.traffic.gave_out(&answer.records);
                return Ok(answer);
            };
            if isolation == Isolation::ReadCommitted {
                let most = limits::ABORTED_TRANSACTIONS_PER_FETCH_MAX;
                let mut found = self.aborted_transactions(offset, end, most + 1)?;
                if found.len() > most && batches > 1 {
                    max_bytes /= 2;
                    continue;
                }
                found.truncate(most);
                answer.aborted = Some(found);
            }
            self.traffic.gave_out(&answer.records);
            return Ok(answer);
        }
    }

    /// Where a read at `offset` starts: refused below the log start, nothing at or
    /// past the limit (the high watermark, or the last stable offset), otherwise the
    /// located data. The offsets are those the readers see (the mirror), taken before
    /// the data is located.
    fn start_read(
        &self,
        offset: Offset,
        isolation: Isolation,
        replica_limit: Option<Offset>,
    ) -> Result<ReadStart, BrokerError> {
        if let Some(cause) = &self.unopened {
            return Err(self.unopened_error(cause));
        }
        let durable = *self.durable.borrow();
        let bounds = ReadBounds {
            high_watermark: durable.high_watermark,
            log_start_offset: self.log_start_offset(),
            last_stable_offset: durable.last_stable_offset(),
            isolation,
            replica_limit,
        };
        let nothing = || ReadStart::Nothing(bounds.answer(Bytes::new(), false));
        let window = ReadWindow::of(offset, bounds.log_start_offset, bounds.limit())?;
        if window == ReadWindow::AtHighWatermark {
            return Ok(nothing());
        }
        // Located even past the high watermark, so that an offset past the log's end
        // is refused.
        let slice = self
            .with_log(|log| log.locate(offset))
            .map_err(|e| match e {
                // At or past the log start but before the local log: a tiered partition's
                // oldest segments, which the remote tier serves.
                BrokerError::OffsetOutOfRange {
                    log_start_offset: local_start_offset,
                    ..
                } if offset < local_start_offset => BrokerError::InRemoteTier {
                    topic: self.topic.to_string(),
                    partition: self.index,
                    offset,
                    local_start_offset,
                },
                other => other,
            })?;
        Ok(match window {
            ReadWindow::Durable => ReadStart::Located(slice, bounds),
            // Written but not yet synced: nothing to show yet, and not an error.
            ReadWindow::NotDurable | ReadWindow::AtHighWatermark => nothing(),
        })
    }

    /// The error for a read at `offset` that failed: a damaged batch is counted and its
    /// segment marked for repair ([`Partition::corrupt_read`]).
    fn read_failed(&self, offset: Offset, e: std::io::Error) -> BrokerError {
        match CorruptBatch::find(&e) {
            Some(corrupt) => self.corrupt_read(offset, corrupt),
            None => BrokerError::Storage(format!("read {}/{}: {e}", self.topic, self.index)),
        }
    }

    /// The first offset whose batch has a timestamp at or after `timestamp_ms`,
    /// if it is below the high watermark. Blocking (reads the time index and segments).
    pub fn offset_for_timestamp(
        &self,
        timestamp_ms: i64,
    ) -> Result<Option<(Offset, i64)>, BrokerError> {
        let found = self.with_log(|log| log.offset_for_timestamp(timestamp_ms))?;
        Ok(found.filter(|(offset, _)| *offset < self.high_watermark()))
    }

    /// The largest record timestamp in the log, if any batch carries one.
    pub fn max_timestamp(&self) -> Result<Option<i64>, BrokerError> {
        self.with_log(|log| Ok(log.max_timestamp_ms()))
    }

    /// Deletes segments past the retention limits. Blocking.
    pub fn enforce_retention(&self, now_ms: i64) -> Result<usize, BrokerError> {
        self.with_slot(|slot| {
            let report = slot
                .log
                .enforce_retention(now_ms)
                .map_err(BrokerError::from_log)?;
            let start = slot.state.retention_moved(report.log_start_offset);
            self.log_start_offset
                .store(start.value(), Ordering::Release);
            // A replicated partition's epoch history starts where its log does.
            slot.epochs
                .truncate_from_start(start)
                .map_err(BrokerError::from_log)?;
            Ok(report.deleted_segments)
        })
    }

    /// The sealed segments whose every offset is below the last stable offset (so
    /// below the high watermark: durable everywhere it must be, with every
    /// transaction in them decided), oldest first: what the remote tier may copy.
    /// Answers `NOT_LEADER_OR_FOLLOWER` on a follower: only a leader uploads.
    pub fn sealed_segments(&self) -> Result<Vec<headway_log::SealedSegment>, BrokerError> {
        self.check_leading()?;
        let stable = self.last_stable_offset();
        self.with_log(|log| Ok(log.sealed_segments(stable)))
    }

    /// The share of the log a cleaning pass would read keys from (`Log::dirty_ratio`).
    pub fn dirty_ratio(&self) -> Result<f64, BrokerError> {
        self.with_log(|log| Ok(log.dirty_ratio()))
    }

    /// The newest timestamp of the first segment a cleaning pass would read keys from
    /// (`Log::first_dirty_max_timestamp`).
    pub fn first_dirty_max_timestamp(&self) -> Result<Option<i64>, BrokerError> {
        self.with_log(|log| Ok(log.first_dirty_max_timestamp()))
    }

    /// When a tombstone the cleaner kept becomes removable (`Log::tombstones_due_ms`).
    pub fn tombstones_due_ms(&self) -> Result<Option<i64>, BrokerError> {
        self.with_log(|log| Ok(log.tombstones_due_ms()))
    }

    /// Plans a cleaning pass under the mutex (cheap); `None`: nothing to clean. The
    /// plan is staged without the mutex, then [`Partition::install_cleaned`].
    pub fn plan_cleaning(
        &self,
        config: &CleanerConfig,
        now_ms: i64,
    ) -> Result<Option<CleaningPlan>, BrokerError> {
        self.with_log(|log| Ok(log.plan_cleaning(config, now_ms)))
    }

    /// Swaps a staged cleaning in under the mutex. Readers holding the replaced
    /// segments' files finish their reads on them. A failure past a group's commit
    /// point poisons the log (the next open completes the swap): the partition goes
    /// offline, as for a write that could not be undone.
    pub fn install_cleaned(&self, staged: StagedCleaning) -> Result<CleanReport, BrokerError> {
        self.with_slot(|slot| {
            slot.log.install_cleaned(staged).map_err(|error| {
                if slot.log.is_poisoned() && !self.offline.swap(true, Ordering::AcqRel) {
                    tracing::error!(topic = %self.topic, partition = self.index.value(), %error,
                        "a cleaned segment could not be swapped in; the partition is offline until restart");
                }
                BrokerError::from_log(error)
            })
        })
    }

    /// Whether every appended record must have a key (the topic is compacted).
    pub fn set_keys_required(&self, required: bool) {
        self.keys_required.store(required, Ordering::Relaxed);
    }

    /// Whether the topic is tiered, as its settings say.
    pub fn set_tiered(&self, tiered: bool) {
        self.tiered.store(tiered, Ordering::Relaxed);
    }

    /// Refuses the batches when a record has no key: a compacted topic keeps the
    /// latest record of each key, so a keyless one could never be kept or replaced.
    /// Indexes count records from the first batch of the request (Kafka's batch index
    /// when the request carries one batch, as clients send).
    fn require_keys(&self, records: &[u8], headers: &[BatchHeader]) -> Result<(), BrokerError> {
        let mut keyless = Keyless::default();
        let (mut at, mut first_index) = (0usize, 0u32);
        for header in headers {
            let batch = &records[at..at + header.total_bytes()];
            let found = records::keyless_records(batch).map_err(BrokerError::UnreadableRecords)?;
            keyless.count += found.count;
            let room = records::KEYLESS_NAMED_MAX - keyless.indexes.len();
            let named = found.indexes.iter().take(room);
            keyless
                .indexes
                .extend(named.map(|i| first_index.saturating_add(*i)));
            first_index = first_index.saturating_add(header.records_count.max(0) as u32);
            at += header.total_bytes();
        }
        match keyless.count {
            0 => Ok(()),
            _ => Err(BrokerError::KeylessRecords {
                topic: self.topic.to_string(),
                partition: self.index,
                keyless,
            }),
        }
    }

    pub fn set_log_config(&self, config: LogConfig) -> Result<(), BrokerError> {
        self.with_log(|log| {
            log.set_config(config);
            Ok(())
        })
    }

    /// Syncs and closes the log. Produces waiting for durability are answered: their
    /// data is synced by the close. A log not written since the clean close it was
    /// opened after has nothing to sync or write (its marker and producer snapshot
    /// still stand). Blocking.
    pub fn close(&self) -> Result<(), BrokerError> {
        self.closed.store(true, Ordering::Release);
        // The own flusher looks once more, finds the partition stopped, and ends.
        self.own.wake();
        let slot = self
            .log
            .lock()
            .expect("partition log mutex poisoned")
            .take();
        let Some(Slot { log, mut state, .. }) = slot else {
            return Ok(());
        };
        let log_end_offset = log.log_end_offset();
        let mut log = log;
        if !log.is_poisoned() && !log.untouched_since_clean_close() {
            // The snapshot says the markers before it need no replay at the next open,
            // so their index entries must be on disk first.
            log.sync_aborted().map_err(BrokerError::from_log)?;
            write_producer_snapshot(&self.dir, state.producers(), log_end_offset)?;
        }
        log.close().map_err(BrokerError::from_log)?;
        self.take_in_synced(&mut state);
        if !self.replicated.load(Ordering::Acquire) {
            // Alone, what is closed is synced; a replica's high watermark also waits
            // for the others.
            self.durable_to(&mut state, log_end_offset);
        }
        Ok(())
    }

    /// Takes the partition offline as a failed fsync does: no more writes, waiters for
    /// durability fail, the metadata shows no leader, until the broker restarts. The
    /// storage paths call this themselves; it is public for tests that need an
    /// offline partition without a failing disk.
    #[doc(hidden)]
    pub fn take_offline(&self, cause: &str) {
        self.fail_synced(cause);
    }

    /// Publishes what a flusher synced, without the mutex: waiters and readers see it
    /// at once, the state at its next step ([`Partition::take_in_synced`]).
    fn publish_synced(&self, offset: Offset) {
        self.publish_durable(offset, true);
    }

    /// Everything below `offset` is on this broker's disk (`from_sync`: a flusher's
    /// sync says so; otherwise the flush policy waits for none): publishes it, and the
    /// high watermark it allows (the same offset alone; a replicated partition's role
    /// decides).
    fn publish_durable(&self, offset: Offset, from_sync: bool) {
        let replication = self
            .replicated
            .load(Ordering::Acquire)
            .then(|| self.replication.lock().expect("replication mutex poisoned"));
        let mut replication = replication;
        let role = replication.as_deref_mut().and_then(Option::as_mut);
        if let Some(role) = &role {
            if from_sync && !role.sync_still_counts() {
                // The sync covered a log that a truncation has since replaced.
                return;
            }
        }
        let before = self.synced_to.fetch_max(offset.value(), Ordering::AcqRel);
        let meters = self.own.meters().filter(|_| from_sync);
        if let (Some(meters), Ok(more)) = (meters, u64::try_from(offset.value() - before)) {
            if more > 0 {
                meters.published(more);
            }
        }
        let synced = Offset::new(before).max(offset);
        let high_watermark = match role {
            None => synced,
            Some(role) => role.synced(synced),
        };
        self.publish_high_watermark(high_watermark, synced);
    }

    /// Shows a high watermark and this broker's synced end, published without the
    /// mutex, to readers and waiters (never backwards); the state takes the high
    /// watermark in at its next step.
    fn publish_high_watermark(&self, high_watermark: Offset, synced: Offset) {
        self.high_watermark_to
            .fetch_max(high_watermark.value(), Ordering::AcqRel);
        self.durable.send_if_modified(|s| {
            let mut changed = false;
            if high_watermark > s.high_watermark {
                s.high_watermark = high_watermark;
                changed = true;
            }
            if synced > s.synced {
                s.synced = synced;
                changed = true;
            }
            changed
        });
        self.publish_completing();
    }

    /// Brings the state's high watermark up to what was published. Under the mutex.
    fn take_in_synced(&self, state: &mut PartitionState) {
        let published = Offset::new(self.high_watermark_to.load(Ordering::Acquire));
        self.durable_to(state, published.min(state.log_end_offset()));
    }

    /// An fsync failed. After a failed fsync the kernel may have dropped the dirty
    /// pages (or marked them clean without writing them), so retrying could
    /// acknowledge data that is not on disk: stop instead, until an operator restarts
    /// the broker (`docs/storage-errors.md`). `error` names the file.
    fn fail_synced(&self, error: &str) {
        tracing::error!(topic = %self.topic, partition = self.index.value(), dir = %self.dir.display(), %error,
            "fsync failed; the partition is offline and accepts no more writes until restart");
        self.offline.store(true, Ordering::Release);
        let _ = self.with_log(|log| {
            log.poison();
            Ok(())
        });
        self.durable.send_modify(|s| s.failed = true);
    }
}

/// The offset after the last batch in `records`, and how many batches they hold;
/// `None` when they hold none.
fn records_end(records: &[u8]) -> Option<(Offset, usize)> {
    let (count, last) = batch::BatchIter::new(records).fold((0usize, None), |(n, _), (h, _)| {
        (n + 1, Some(h.last_offset()))
    });
    last.map(|last| (Offset::new(last).next(), count))
}

/// What the flushers see of a partition (`crate::durability`).
impl SyncTarget for Partition {
    fn take_sync_set(&self) -> SyncTake {
        // Cleared before the set is taken: an append after this point queues the
        // partition on a shared flusher again, for the next round.
        self.queued.store(false, Ordering::Release);
        if self.closed.load(Ordering::Acquire) || self.durable.borrow().failed {
            return SyncTake::Stopped;
        }
        let set = self.with_slot(|slot| {
            let log = &mut slot.log;
            if self.replicated.load(Ordering::Acquire) {
                if let Some(role) = self
                    .replication
                    .lock()
                    .expect("replication mutex poisoned")
                    .as_mut()
                {
                    role.sync_taken();
                }
            }
            let set = log.sync_set();
            // Nothing waits for a sync any more: producers held by the bound go on.
            self.unsynced.store(log.unsynced_bytes(), Ordering::Release);
            Ok(set)
        });
        match set {
            Ok(set) if set.is_empty() => SyncTake::Clean,
            Ok(set) => SyncTake::Set(set),
            Err(_) => SyncTake::Stopped,
        }
    }

    fn publish(&self, offset: Offset) {
        self.publish_synced(offset);
    }

    fn fail(&self, error: &str) {
        self.fail_synced(error);
    }

    #[cfg(test)]
    fn topic(&self) -> &str {
        &self.topic
    }
}
