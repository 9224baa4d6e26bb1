//! One partition: its log behind the single-writer mutex, its high watermark, and the
//! flusher task that performs group commit.
//!
//! Produce path: [`Partition::append`] validates the batches (CRC-32C) outside the
//! mutex, then takes the mutex only to assign offsets and write to the page cache.
//! The caller then awaits [`Partition::wait_durable`]. With `flush = sync` the flusher
//! task wakes, takes the log's [`headway_log::SyncSet`] (everything written so far),
//! syncs it on a blocking thread without holding the mutex, and publishes the new high
//! watermark; every append that arrived during one sync shares the next one. With
//! `sync_scope = broker` or `syncfs` the append queues the partition on the broker's
//! shared flusher instead (`crate::flusher`), which syncs every dirty partition in one
//! round.
//!
//! Fetch path: [`Partition::read_via`] locates the segment and position under the mutex
//! and reads with positional reads, bounded by the high watermark, so consumers only ever
//! see synced data: from the page cache on the caller's thread when every byte is there,
//! otherwise on the cold-read pool ([`crate::read_pool`]), one read per connection at a
//! time.
//!
//! Storage errors (`docs/storage-errors.md`): an append whose write fails (a full disk)
//! is undone by the log and refused, and the next append tries again; a failed fsync
//! takes the partition offline for good ([`Partition::fail`]); a read that finds a
//! damaged batch in a sealed segment refuses it and marks the segment for repair at
//! the next start. [`Partition::health`] shows all three.

use crate::flusher::{count_round, SharedFlusher};
use crate::producer_state::{is_idempotent, ProducerStates, SequenceCheck};
use crate::read_pool::ReadVia;
use crate::timings::Timings;
use crate::{BrokerError, FlushPolicy};
use bytes::Bytes;
use headway_log::{
    batch, BatchHeader, CorruptBatch, Log, LogConfig, LogError, Offset, RecoveryReport,
};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use tokio::sync::{watch, Notify};

/// A partition's number within its topic.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionIndex(pub i32);

/// What consumers and waiting producers observe of a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurableState {
    /// Offsets below it are synced (or written, with a weaker flush policy).
    pub high_watermark: Offset,
    /// A sync failed: the log is poisoned and nothing above the watermark will be acked.
    pub failed: bool,
}

/// The result of an append: where the batches went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: Offset,
    pub log_end_offset: Offset,
    pub log_start_offset: Offset,
}

/// A partition's storage health, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionHealth {
    /// The log is poisoned (a failed fsync, or a failed write that could not be
    /// undone): it accepts no writes until the broker restarts.
    pub offline: bool,
    /// Appends refused because a write failed and was undone (a full disk).
    pub write_refusals: u64,
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
    /// The read ran on the read threads (not from the page cache on the caller's thread).
    pub pooled: bool,
}

/// What the partition's mutex guards: the log and, checked and updated in the same
/// step as each append, the idempotent producers' state.
struct Slot {
    log: Log,
    producers: ProducerStates,
}

/// The producer-state snapshot in a partition directory (see `docs/log-format.md`).
const PRODUCER_SNAPSHOT: &str = "producer-state.snapshot";
/// The log start offset set by DeleteRecords, when it lies inside the first segment.
const LOG_START_OFFSET_FILE: &str = "log-start-offset";

pub struct Partition {
    topic: Arc<str>,
    index: PartitionIndex,
    flush: FlushPolicy,
    dir: PathBuf,
    /// The single writer. `None` once closed.
    log: Mutex<Option<Slot>>,
    durable: watch::Sender<DurableState>,
    log_start_offset: AtomicI64,
    /// Wakes the flusher; `Notify` keeps one permit, so no wake-up is lost.
    dirty: Notify,
    closed: AtomicBool,
    /// This partition, for queueing itself on a shared flusher.
    me: Weak<Partition>,
    /// Set when a broker-wide flusher syncs this partition instead of its own.
    pub(crate) shared: OnceLock<Arc<SharedFlusher>>,
    /// True while the partition waits in the shared flusher's queue.
    pub(crate) queued: AtomicBool,
    /// The log was poisoned (see [`PartitionHealth::offline`]).
    offline: AtomicBool,
    write_refusals: AtomicU64,
    corrupt_reads: AtomicU64,
    segments_to_repair: AtomicUsize,
    /// Bytes appended and not yet handed to a sync (`Log::unsynced_bytes`).
    unsynced: AtomicU64,
    /// The bound on `unsynced` past which producers wait (`partition_unsynced_bytes_max`).
    unsynced_max: AtomicU64,
    /// The broker's histograms, where the flusher records its syncs (none for a
    /// partition outside a broker, such as the group coordinator's offsets log).
    timings: OnceLock<Arc<Timings>>,
}

impl Partition {
    /// Opens and recovers the partition's log. Blocking: call from a blocking thread.
    pub fn open(
        dir: PathBuf,
        topic: Arc<str>,
        index: PartitionIndex,
        config: LogConfig,
        flush: FlushPolicy,
    ) -> Result<(Arc<Partition>, RecoveryReport), BrokerError> {
        let (mut log, report) =
            Log::open(&dir, config, crate::now_ms()).map_err(BrokerError::from_log)?;
        let producers = load_producer_states(&dir, &mut log)?;
        let segments_to_repair = log.segments_to_repair();
        let log_start_offset = read_log_start_offset(&dir).unwrap_or(0).clamp(
            report.log_start_offset.value(),
            report.log_end_offset.value(),
        );
        let (durable, _) = watch::channel(DurableState {
            high_watermark: report.log_end_offset,
            failed: false,
        });
        let partition = Arc::new_cyclic(|me| Partition {
            topic,
            index,
            flush,
            log_start_offset: AtomicI64::new(log_start_offset),
            dir,
            log: Mutex::new(Some(Slot { log, producers })),
            durable,
            dirty: Notify::new(),
            closed: AtomicBool::new(false),
            me: me.clone(),
            shared: OnceLock::new(),
            queued: AtomicBool::new(false),
            offline: AtomicBool::new(false),
            write_refusals: AtomicU64::new(0),
            corrupt_reads: AtomicU64::new(0),
            segments_to_repair: AtomicUsize::new(segments_to_repair),
            unsynced: AtomicU64::new(0),
            unsynced_max: AtomicU64::new(u64::MAX),
            timings: OnceLock::new(),
        });
        Ok((partition, report))
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
            tokio::spawn(Arc::clone(self).run_flusher());
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

    /// Records this partition's syncs in `timings` (a broker's), from now on.
    pub fn time_syncs(&self, timings: &Arc<Timings>) {
        let _ = self.timings.set(Arc::clone(timings));
    }

    /// Records a sync of `bytes` that took `elapsed`.
    pub(crate) fn synced(&self, bytes: u64, elapsed: std::time::Duration) {
        if let Some(timings) = self.timings.get() {
            timings.synced(bytes, elapsed);
        }
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

    /// Takes the log's sync set and notes that nothing waits for a sync any more.
    fn sync_set(&self) -> Result<headway_log::SyncSet, BrokerError> {
        self.with_log(|log| {
            let set = log.sync_set();
            self.unsynced.store(log.unsynced_bytes(), Ordering::Release);
            Ok(set)
        })
    }

    /// Asks for a sync of what was just appended: wakes this partition's flusher, or
    /// queues the partition on the shared one (once until its next round).
    fn request_sync(&self) {
        match self.shared.get() {
            None => self.dirty.notify_one(),
            Some(flusher) => {
                if !self.queued.swap(true, Ordering::AcqRel) {
                    if let Some(me) = self.me.upgrade() {
                        flusher.enqueue(me);
                    }
                }
            }
        }
    }

    /// The files to sync for everything appended so far, for the shared flusher;
    /// `None` when nothing is unsynced or the partition is closed or failed.
    pub(crate) fn take_sync_set(&self) -> Option<headway_log::SyncSet> {
        if self.closed.load(Ordering::Acquire) || self.durable.borrow().failed {
            return None;
        }
        let set = self.sync_set().ok()?;
        (!set.is_empty()).then_some(set)
    }

    fn with_slot<T>(
        &self,
        f: impl FnOnce(&mut Slot) -> Result<T, BrokerError>,
    ) -> Result<T, BrokerError> {
        let mut slot = self
            .log
            .lock()
            .expect("partition log mutex poisoned by a panic");
        let slot = slot.as_mut().ok_or_else(|| BrokerError::ShuttingDown {
            topic: self.topic.to_string(),
            partition: self.index.0,
        })?;
        f(slot)
    }

    fn with_log<T>(
        &self,
        f: impl FnOnce(&mut Log) -> Result<T, headway_log::LogError>,
    ) -> Result<T, BrokerError> {
        self.with_slot(|slot| f(&mut slot.log).map_err(BrokerError::from_log))
    }

    /// Validates and appends the batches of one produce request for this partition.
    /// Offsets are assigned here, under the mutex; the data is durable once
    /// [`Partition::wait_durable`] for `log_end_offset` returns. A retried batch of an
    /// idempotent producer is not appended again: the answer describes the original.
    pub fn append(
        &self,
        records: &[u8],
        max_message_bytes: usize,
    ) -> Result<Appended, BrokerError> {
        if records.len() > max_message_bytes {
            return Err(BrokerError::MessageTooLarge {
                size: records.len(),
                limit: max_message_bytes,
            });
        }
        let headers = batch::validate_all(records).map_err(BrokerError::Batch)?;
        if headers.iter().any(BatchHeader::is_transactional) {
            return Err(BrokerError::TransactionsUnsupported);
        }
        let idempotent = headers.first().filter(|h| is_idempotent(h)).copied();
        if idempotent.is_some() && headers.len() != 1 {
            return Err(BrokerError::InvalidRequest(
                "an idempotent produce must carry exactly one batch per partition".into(),
            ));
        }
        // The log rewrites base offsets in place; the request buffer is shared, so copy.
        let mut owned = records.to_vec();
        let now_ms = crate::now_ms();
        let appended = self.with_slot(|slot| {
            if let Some(header) = &idempotent {
                if let SequenceCheck::Duplicate { base_offset } = slot.producers.check(header)? {
                    let end = base_offset + i64::from(header.last_offset_delta) + 1;
                    return Ok((Offset(base_offset), Offset(end), false));
                }
            }
            let info = slot
                .log
                .append(&mut owned, now_ms)
                .map_err(|e| self.append_failed(&slot.log, e))?;
            if let Some(header) = &idempotent {
                slot.producers
                    .record(header, info.base_offset.value(), now_ms);
            }
            self.unsynced
                .store(slot.log.unsynced_bytes(), Ordering::Release);
            Ok((info.base_offset, info.log_end_offset, true))
        })?;
        let (base_offset, log_end_offset, written) = appended;
        if written {
            match self.flush {
                FlushPolicy::Sync => self.request_sync(),
                FlushPolicy::Interval(_) | FlushPolicy::None => self.publish(log_end_offset),
            }
        }
        Ok(Appended {
            base_offset,
            log_end_offset,
            log_start_offset: self.log_start_offset(),
        })
    }

    /// Counts a failed append: refused (the log is unchanged, the next append tries
    /// again) or one that poisoned the log (the partition is offline).
    fn append_failed(&self, log: &Log, error: LogError) -> BrokerError {
        if error.is_refused() {
            self.write_refusals.fetch_add(1, Ordering::Relaxed);
        } else if log.is_poisoned() && !self.offline.swap(true, Ordering::AcqRel) {
            tracing::error!(topic = %self.topic, partition = self.index.0, %error,
                "a write failed and could not be undone; the partition is offline until restart");
        }
        BrokerError::from_log(error)
    }

    /// The partition's storage health.
    pub fn health(&self) -> PartitionHealth {
        PartitionHealth {
            offline: self.offline.load(Ordering::Acquire) || self.durable.borrow().failed,
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
            Ok((path, Ok(true))) => tracing::error!(topic = %self.topic, partition = self.index.0,
                path = %path.display(), %corrupt,
                "stored record batch is corrupt; it is not served and the segment is marked for repair at the next start"),
            Ok((path, Err(e))) => tracing::error!(topic = %self.topic, partition = self.index.0,
                path = %path.display(), %corrupt, error = %e,
                "stored record batch is corrupt; marking the segment for repair failed"),
            _ => {}
        }
        BrokerError::CorruptData {
            topic: self.topic.to_string(),
            partition: self.index.0,
            offset,
            detail: corrupt.to_string(),
        }
    }

    /// DeleteRecords: makes `offset` (-1: the high watermark) the log start offset.
    /// Records below it are no longer served; whole segments below it are deleted.
    /// The new start is synced to disk before it takes effect. Blocking.
    pub fn delete_records(&self, offset: i64) -> Result<Offset, BrokerError> {
        let high_watermark = self.high_watermark();
        let target = if offset == -1 {
            high_watermark
        } else {
            Offset(offset)
        };
        let current = self.log_start_offset();
        if target.value() < 0 || target > high_watermark {
            return Err(BrokerError::OffsetOutOfRange {
                offset: target,
                log_start_offset: current,
                high_watermark,
            });
        }
        if target <= current {
            return Ok(current);
        }
        write_log_start_offset(&self.dir, target)?;
        self.log_start_offset
            .fetch_max(target.value(), Ordering::AcqRel);
        self.with_log(|log| log.delete_segments_before(target))?;
        Ok(target)
    }

    /// Forgets idempotent producers idle for longer than `idle_ms`.
    pub fn expire_producers(&self, now_ms: i64, idle_ms: i64) -> Result<usize, BrokerError> {
        self.with_slot(|slot| Ok(slot.producers.expire(now_ms, idle_ms)))
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
                self.topic, self.index.0
            )))
        }
    }

    pub(crate) fn publish(&self, high_watermark: Offset) {
        self.durable.send_if_modified(|s| {
            let advance = high_watermark > s.high_watermark;
            if advance {
                s.high_watermark = high_watermark;
            }
            advance
        });
    }

    pub fn high_watermark(&self) -> Offset {
        self.durable.borrow().high_watermark
    }

    pub fn log_start_offset(&self) -> Offset {
        Offset(self.log_start_offset.load(Ordering::Acquire))
    }

    pub fn log_end_offset(&self) -> Result<Offset, BrokerError> {
        self.with_log(|log| Ok(log.log_end_offset()))
    }

    /// A receiver that wakes when the high watermark moves (for long-polling fetches).
    pub fn watch(&self) -> watch::Receiver<DurableState> {
        self.durable.subscribe()
    }

    /// Reads whole batches from `offset`, at most about `max_bytes` (the first batch is
    /// always whole), never past the high watermark, on the runtime's blocking pool.
    /// For the broker's own reads (start-up replays, ListOffsets); fetches use
    /// [`Partition::read_via`].
    pub async fn read(&self, offset: Offset, max_bytes: usize) -> Result<ReadResult, BrokerError> {
        self.read_from(offset, max_bytes, None).await
    }

    /// [`Partition::read`] for a fetch. A tail read (less than `via.tail_bytes` behind
    /// the log's end) is served from the page cache on this thread when every byte is
    /// there (`via.cache_first`); any other read runs on the read pool, holding one of
    /// the connection's share permits while queued and running.
    pub async fn read_via(
        &self,
        offset: Offset,
        max_bytes: usize,
        via: &ReadVia,
    ) -> Result<ReadResult, BrokerError> {
        self.read_from(offset, max_bytes, Some(via)).await
    }

    async fn read_from(
        &self,
        offset: Offset,
        max_bytes: usize,
        via: Option<&ReadVia>,
    ) -> Result<ReadResult, BrokerError> {
        let high_watermark = self.high_watermark();
        let log_start_offset = self.log_start_offset();
        let result = |records, pooled| ReadResult {
            records,
            high_watermark,
            log_start_offset,
            pooled,
        };
        let empty = |records| result(records, false);
        if offset < log_start_offset {
            return Err(BrokerError::OffsetOutOfRange {
                offset,
                log_start_offset,
                high_watermark,
            });
        }
        if offset == high_watermark {
            return Ok(empty(Bytes::new()));
        }
        let slice = self.with_log(|log| log.locate(offset))?;
        if offset > high_watermark {
            // Written but not yet synced: nothing to show yet, and not an error.
            return Ok(empty(Bytes::new()));
        }
        let failed = |e: std::io::Error| match CorruptBatch::find(&e) {
            Some(corrupt) => self.corrupt_read(offset, corrupt),
            None => BrokerError::Storage(format!("read {}/{}: {e}", self.topic, self.index.0)),
        };
        let (records, pooled) = match via {
            None => tokio::task::spawn_blocking(move || slice.read(max_bytes, high_watermark))
                .await
                .map_err(|e| BrokerError::Storage(format!("read task failed: {e}")))?
                .map(|records| (records, false))
                .map_err(failed)?,
            Some(via) => {
                let tail = slice.behind_bytes() <= via.tail_bytes;
                let cached = match via.cache_first && tail {
                    true => slice
                        .read_cached(max_bytes, high_watermark)
                        .map_err(failed)?,
                    false => None,
                };
                match cached {
                    Some(records) => {
                        via.pool.stats().cached.fetch_add(1, Ordering::Relaxed);
                        (records, false)
                    }
                    None => {
                        let _turn = match &via.share {
                            Some(share) => {
                                Some(Arc::clone(share).acquire_owned().await.map_err(|_| {
                                    BrokerError::Storage("read share closed".into())
                                })?)
                            }
                            None => None,
                        };
                        let records = via
                            .pool
                            .run_bulk(move || slice.read(max_bytes, high_watermark))
                            .await
                            .map_err(|e| BrokerError::Storage(e.to_string()))?
                            .map_err(failed)?;
                        (records, true)
                    }
                }
            }
        };
        Ok(result(records, pooled))
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
        let report = self.with_log(|log| log.enforce_retention(now_ms))?;
        self.log_start_offset
            .fetch_max(report.log_start_offset.value(), Ordering::AcqRel);
        Ok(report.deleted_segments)
    }

    pub fn set_log_config(&self, config: LogConfig) -> Result<(), BrokerError> {
        self.with_log(|log| {
            log.set_config(config);
            Ok(())
        })
    }

    /// Syncs and closes the log. Produces waiting for durability are answered: their
    /// data is synced by the close. Blocking.
    pub fn close(&self) -> Result<(), BrokerError> {
        self.closed.store(true, Ordering::Release);
        self.dirty.notify_one();
        let slot = self
            .log
            .lock()
            .expect("partition log mutex poisoned")
            .take();
        let Some(Slot { log, producers }) = slot else {
            return Ok(());
        };
        let log_end_offset = log.log_end_offset();
        if !log.is_poisoned() {
            write_producer_snapshot(&self.dir, &producers, log_end_offset)?;
        }
        log.close().map_err(BrokerError::from_log)?;
        self.publish(log_end_offset);
        Ok(())
    }

    async fn run_flusher(self: Arc<Self>) {
        loop {
            match self.flush {
                FlushPolicy::Sync => self.dirty.notified().await,
                FlushPolicy::Interval(every) => tokio::time::sleep(every).await,
                FlushPolicy::None => return,
            }
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            let Ok(set) = self.sync_set() else {
                return;
            };
            if set.is_empty() {
                continue;
            }
            let synced = set.log_end_offset;
            let syncs = set.file_count();
            let me = Arc::clone(&self);
            let sync = move || {
                let start = std::time::Instant::now();
                let outcome = set.sync();
                me.synced(set.bytes, start.elapsed());
                count_round(syncs);
                outcome.map_err(|e| e.to_string())
            };
            match tokio::task::spawn_blocking(sync).await {
                Ok(Ok(())) => self.publish(synced),
                Ok(Err(e)) => return self.fail(&e),
                Err(e) => return self.fail(&e.to_string()),
            }
        }
    }

    /// An fsync failed. After a failed fsync the kernel may have dropped the dirty
    /// pages (or marked them clean without writing them), so retrying could
    /// acknowledge data that is not on disk: stop instead, until an operator restarts
    /// the broker (`docs/storage-errors.md`). `error` names the file.
    pub(crate) fn fail(&self, error: &str) {
        tracing::error!(topic = %self.topic, partition = self.index.0, dir = %self.dir.display(), %error,
            "fsync failed; the partition is offline and accepts no more writes until restart");
        self.offline.store(true, Ordering::Release);
        let _ = self.with_log(|log| {
            log.poison();
            Ok(())
        });
        self.durable.send_modify(|s| s.failed = true);
    }
}

/// Rebuilds the idempotent producers' state: the snapshot written at the last clean
/// shutdown, then every batch after it. Without a usable snapshot, the whole log is
/// scanned. Blocking.
///
/// A damaged batch ends the scan there and marks its segment for repair: the log is
/// repaired at the next start, and producers whose batches lie past the damage get
/// UNKNOWN_PRODUCER_ID or a sequence error and reset, as after expiry.
fn load_producer_states(
    dir: &std::path::Path,
    log: &mut Log,
) -> Result<ProducerStates, BrokerError> {
    let end = log.log_end_offset();
    let (mut states, from) = match std::fs::read(dir.join(PRODUCER_SNAPSHOT))
        .ok()
        .and_then(|b| ProducerStates::decode(&b))
    {
        Some((states, at)) if at <= end.value() => {
            (states, Offset(at.max(log.log_start_offset().value())))
        }
        _ => (ProducerStates::default(), log.log_start_offset()),
    };
    let mut offset = from;
    while offset < end {
        let slice = log.locate(offset).map_err(BrokerError::from_log)?;
        let data = match slice.read(1024 * 1024, end) {
            Ok(data) => data,
            Err(e) => match CorruptBatch::find(&e) {
                Some(corrupt) => {
                    tracing::error!(dir = %dir.display(), %corrupt,
                        "stored record batch is corrupt; the segment is marked for repair at the next start");
                    log.mark_for_repair(corrupt.segment_base_offset)
                        .map_err(BrokerError::from_log)?;
                    break;
                }
                None => {
                    return Err(BrokerError::Storage(format!(
                        "scan {} for producer state: {e}",
                        dir.display()
                    )))
                }
            },
        };
        if data.is_empty() {
            break;
        }
        for (header, _) in batch::BatchIter::new(&data) {
            if header.last_offset() >= offset.value() {
                states.record(&header, header.base_offset, header.max_timestamp);
            }
            offset = Offset(header.last_offset() + 1);
        }
    }
    Ok(states)
}

/// Writes the producer-state snapshot atomically (temporary file, fsync, rename).
fn write_producer_snapshot(
    dir: &std::path::Path,
    states: &ProducerStates,
    log_end_offset: Offset,
) -> Result<(), BrokerError> {
    let path = dir.join(PRODUCER_SNAPSHOT);
    let tmp = dir.join(format!("{PRODUCER_SNAPSHOT}.tmp"));
    let bytes = states.encode(log_end_offset.value());
    std::fs::File::create(&tmp)
        .and_then(|mut f| {
            std::io::Write::write_all(&mut f, &bytes)?;
            f.sync_all()
        })
        .and_then(|_| std::fs::rename(&tmp, &path))
        .map_err(|e| BrokerError::Storage(format!("write {}: {e}", path.display())))
}

fn read_log_start_offset(dir: &std::path::Path) -> Option<i64> {
    let bytes = std::fs::read(dir.join(LOG_START_OFFSET_FILE)).ok()?;
    Some(i64::from_be_bytes(bytes.get(..8)?.try_into().ok()?))
}

/// Writes the DeleteRecords start offset atomically (temporary file, fsync, rename).
fn write_log_start_offset(dir: &std::path::Path, offset: Offset) -> Result<(), BrokerError> {
    let path = dir.join(LOG_START_OFFSET_FILE);
    let tmp = dir.join(format!("{LOG_START_OFFSET_FILE}.tmp"));
    std::fs::File::create(&tmp)
        .and_then(|mut f| {
            std::io::Write::write_all(&mut f, &offset.value().to_be_bytes())?;
            f.sync_all()
        })
        .and_then(|_| std::fs::rename(&tmp, &path))
        .map_err(|e| BrokerError::Storage(format!("write {}: {e}", path.display())))?;
    crate::topic::sync_dir(dir)
}
