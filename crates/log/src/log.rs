//! The partition log: an ordered set of segments, the last one active. Owns offset
//! assignment, rolling, the record of what awaits a sync, reads and timestamp
//! lookups across segments, retention and shutdown. Opening is in `recovery.rs`.
//!
//! Durability invariant: every segment except the active one and the most recently
//! sealed one is synced. A roll keeps it by syncing the previously sealed segment
//! inline when no sync set has synced it yet (rare: two rolls within one sync
//! interval, or a broker that never syncs). Recovery after a crash relies on it to
//! scan only the last two segments.

pub(crate) mod cleaner;
mod truncate;

use self::cleaner::checkpoint::CleanerState;
use crate::batch::{self, BatchHeader, Validated};
use crate::config::{APPEND_BYTES_LIMIT, SEGMENT_OFFSETS_LIMIT};
use crate::recovery;
use crate::recovery::RecoveryReport;
use crate::segment::Segment;
use crate::sync::{Pending, SealedFiles};
use crate::txn_index::{self, AbortedTxn};
use crate::{LogConfig, LogError, ReadSlice, SyncSet};
use headway_base::Offset;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What an append wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset assigned to the first record of the first batch.
    pub base_offset: Offset,
    /// Offset of the last record of the last batch.
    pub last_offset: Offset,
    /// Log end offset after the append (`last_offset + 1`).
    pub log_end_offset: Offset,
}

/// A sealed segment as the remote tier uploads it: its offsets, size and files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedSegment {
    pub base_offset: Offset,
    /// One past its last offset.
    pub end_offset: Offset,
    pub size_bytes: u64,
    pub max_timestamp_ms: Option<i64>,
    /// The files to copy, by kind (`log`, `index`, `timeindex`, and `txnindex` when the
    /// segment holds an abort marker). A file deleted before it is read means the
    /// segment went (retention): the copy is dropped.
    pub files: Vec<(&'static str, PathBuf)>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    pub deleted_segments: usize,
    pub deleted_bytes: u64,
    pub log_start_offset: Offset,
}

pub struct Log {
    dir: PathBuf,
    /// The clean-shutdown marker of the last close is still on disk: nothing was
    /// written since (`recovery::recover`); the first append removes it.
    clean_marker: bool,
    config: LogConfig,
    /// By base offset; never empty, the last one is the active segment.
    segments: BTreeMap<i64, Segment>,
    log_end_offset: Offset,
    size_bytes: u64,
    pending: Pending,
    /// The most recently sealed segment's files, until a sync made them durable.
    last_sealed: Option<SealedFiles>,
    poisoned: bool,
    /// Appends refused in a row because a write failed and was undone (a full disk).
    refused_appends: u64,
    /// Base offsets of segments marked for repair since the log was opened.
    repair: BTreeSet<i64>,
    /// Where the log cleaner's next pass starts reading keys, and when the offsets
    /// before it were first cleaned (`cleaner/checkpoint.rs`).
    cleaner: CleanerState,
    /// Set while a cleaning pass is planned and not yet installed or dropped.
    cleaner_busy: Arc<AtomicBool>,
    /// The aborted-transaction index of each segment that has one, by base offset,
    /// sorted by marker offset (`txn_index.rs`).
    pub(crate) aborted: BTreeMap<i64, Vec<AbortedTxn>>,
    /// Segments whose `.txnindex` was appended to since it was last synced.
    aborted_unsynced: BTreeSet<i64>,
}

impl Log {
    /// Opens (creating if needed) the log in `dir` and recovers it.
    pub fn open(
        dir: &Path,
        config: LogConfig,
        now_ms: i64,
    ) -> Result<(Log, RecoveryReport), LogError> {
        let config = config.clamped();
        let recovered = recovery::recover(dir, &config, now_ms)?;
        let report = recovered.report;
        let mut segments = recovered.segments;
        // Every segment but the last (the active one) is sealed: recovery is done with
        // their full indexes, so keep only what lookups need.
        let active = segments.keys().next_back().copied();
        segments
            .iter_mut()
            .filter(|(base, _)| Some(**base) != active)
            .for_each(|(_, segment)| segment.thin_indexes());
        tracing::debug!(dir = %dir.display(), ?report, "log opened");
        let cleaner = CleanerState::at_open(dir, &segments, report.log_start_offset.value());
        let ends = segments.iter().map(|(base, s)| (*base, s.end_offset()));
        let aborted = txn_index::load(dir, ends)?;
        let log = Log {
            dir: dir.to_path_buf(),
            clean_marker: recovered.clean_marker,
            config,
            size_bytes: segments.values().map(Segment::size_bytes).sum(),
            segments,
            log_end_offset: report.log_end_offset,
            pending: Pending::default(),
            last_sealed: None,
            poisoned: false,
            refused_appends: 0,
            repair: BTreeSet::new(),
            cleaner,
            cleaner_busy: Arc::new(AtomicBool::new(false)),
            aborted,
            aborted_unsynced: BTreeSet::new(),
        };
        Ok((log, report))
    }

    /// Appends one or more whole batches checked by `batch::validate_all`, using the
    /// headers read then. Assigns consecutive offsets, rewriting each batch's base
    /// offset in `batches` (bytes and headers), writes them with one write, and updates
    /// the indexes.
    /// Rolls first when the active segment is full or too old.
    ///
    /// A write that fails (a full disk) is undone and the append fails with
    /// `LogError::WriteRefused`: the log is unchanged and later appends may succeed.
    /// Any other I/O failure poisons the log.
    pub fn append(
        &mut self,
        validated: &mut Validated<Vec<u8>>,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        self.write_batches(validated, now_ms, Offsets::Assign)
    }

    /// Appends batches copied from a leader, keeping their offsets: the first must start
    /// at or after the log end and each after the one before it (a compacted leader's
    /// batches leave gaps), otherwise the append is refused with
    /// `LogError::NotContiguous` and nothing is written.
    pub fn append_replicated(
        &mut self,
        validated: &mut Validated<Vec<u8>>,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        let mut expected = self.log_end_offset;
        for header in validated.headers() {
            if header.base_offset < expected.value() {
                return Err(LogError::NotContiguous {
                    expected,
                    found: Offset::new(header.base_offset),
                });
            }
            expected = Offset::new(header.last_offset() + 1);
        }
        self.write_batches(validated, now_ms, Offsets::Keep)
    }

    fn write_batches(
        &mut self,
        validated: &mut Validated<Vec<u8>>,
        now_ms: i64,
        offsets: Offsets,
    ) -> Result<AppendInfo, LogError> {
        if self.poisoned {
            return Err(LogError::Poisoned {
                path: self.dir.clone(),
            });
        }
        let offset_count = match offsets {
            Offsets::Assign => validated.offset_count(),
            // A leader's batches may leave gaps: they reach to the end of the last one.
            Offsets::Keep => validated.headers().last().map_or(0, |last| {
                last.last_offset() + 1 - self.log_end_offset.value()
            }),
        };
        let Validated { bytes, headers, .. } = validated;
        let batches = bytes.as_mut_slice();
        debug_assert_eq!(
            headers.iter().map(BatchHeader::total_bytes).sum::<usize>(),
            batches.len(),
            "the headers cover the bytes"
        );
        if self.clean_marker {
            recovery::remove_clean_marker(&self.dir)?;
            self.clean_marker = false;
        }
        if batches.len() > APPEND_BYTES_LIMIT || offset_count > i64::from(u32::MAX) {
            return Err(LogError::AppendTooLarge {
                size_bytes: batches.len(),
                offset_count,
            });
        }
        if self.should_roll(batches.len() as u64, offset_count, now_ms) {
            let rolled = self.roll();
            self.check_write(rolled)?;
        }
        let base_offset = self.log_end_offset;
        if offsets == Offsets::Assign {
            assign_offsets(batches, headers, base_offset.value());
        }
        let interval = self.config.index_interval_bytes;
        let appended = self.active_mut().append(batches, headers, interval, now_ms);
        let written = self.check_write(appended)?;
        if self.refused_appends > 0 {
            tracing::info!(dir = %self.dir.display(), refused_appends = self.refused_appends,
                "appends succeed again");
            self.refused_appends = 0;
        }
        self.log_end_offset = base_offset.plus(offset_count);
        self.size_bytes += batches.len() as u64;
        let path = self.active().paths().log.clone();
        self.pending
            .wrote_active(batches.len() as u64, (written, path));
        Ok(AppendInfo {
            base_offset: headers
                .first()
                .map_or(base_offset, |first| Offset::new(first.base_offset)),
            last_offset: self.log_end_offset.plus(-1),
            log_end_offset: self.log_end_offset,
        })
    }

    pub fn log_start_offset(&self) -> Offset {
        Offset::new(*self.segments.keys().next().expect("a log has a segment"))
    }

    pub fn log_end_offset(&self) -> Offset {
        self.log_end_offset
    }

    /// Total bytes of all segment `.log` files.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Applies new settings; they take effect at the next roll or retention pass.
    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config.clamped();
    }

    /// Number of segments, the active one included.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// True once an I/O failure (or the owner) poisoned the log.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Takes every file written since the previous call (the active segment, segments
    /// rolled since, their indexes, and the directory when files were created) together
    /// with the log end offset at this moment. Syncing the set makes every offset below
    /// `SyncSet::log_end_offset` durable.
    pub fn sync_set(&mut self) -> SyncSet {
        let dir = self.dir.as_path();
        self.pending.take(dir, self.log_end_offset)
    }

    /// True when nothing changed since the clean close this log was opened after: its
    /// clean-shutdown marker is still true, so a close has nothing to sync or write.
    pub fn untouched_since_clean_close(&self) -> bool {
        self.clean_marker
            && self.pending.is_clean()
            && self.last_sealed.is_none()
            && self.aborted_unsynced.is_empty()
    }

    /// Bytes appended since the last [`Log::sync_set`]: what the next sync writes.
    pub fn unsynced_bytes(&self) -> u64 {
        self.pending.bytes()
    }

    /// Marks the log poisoned: every later append fails with `LogError::Poisoned`.
    pub fn poison(&mut self) {
        if !self.poisoned {
            tracing::error!(dir = %self.dir.display(), "log poisoned; it accepts no more writes");
        }
        self.poisoned = true;
    }

    /// Marks the segment with base offset `segment_base_offset` as damaged (a read
    /// found a batch in it that fails its CRC): the next open scans it in full and
    /// truncates it before the damage (`docs/storage-errors.md`). The marker is durable
    /// when this returns. Returns false when the segment was marked already, or is gone.
    pub fn mark_for_repair(&mut self, segment_base_offset: Offset) -> Result<bool, LogError> {
        let segment_base_offset = segment_base_offset.value();
        let Some(segment) = self.segments.get(&segment_base_offset) else {
            return Ok(false);
        };
        if self.repair.contains(&segment_base_offset) {
            return Ok(false);
        }
        segment.mark_for_repair()?;
        self.sync_dir()?;
        self.repair.insert(segment_base_offset);
        Ok(true)
    }

    /// Segments marked for repair since the log was opened (and not deleted since).
    pub fn segments_to_repair(&self) -> usize {
        self.repair.len()
    }

    /// The `.log` file of the segment with this base offset (for error reports).
    pub fn segment_path(&self, segment_base_offset: Offset) -> PathBuf {
        let name = crate::file_names::file_name(segment_base_offset.value(), "log");
        self.dir.join(name)
    }

    /// Finds where a read at `offset` starts. `log_start_offset <= offset <= log_end_offset`,
    /// otherwise `OffsetOutOfRange`. At the log end offset the slice is empty.
    pub fn locate(&self, offset: Offset) -> Result<ReadSlice, LogError> {
        let log_start_offset = self.log_start_offset();
        if offset < log_start_offset || offset > self.log_end_offset {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset,
                log_end_offset: self.log_end_offset(),
            });
        }
        let interval = self.config.index_interval_bytes;
        let (_, segment) = self
            .segments
            .range(..=offset.value())
            .next_back()
            .expect("offset is at or past the first base offset");
        // An offset past a sealed segment's end lies in a gap left by a repaired
        // corruption: read on from the next segment instead of returning nothing.
        let (base, slice) = match self.segments.range(offset.value() + 1..).next() {
            Some((base, next)) if offset.value() >= segment.end_offset() => {
                (*base, next.read_slice(offset, interval)?)
            }
            _ => (segment.base_offset(), segment.read_slice(offset, interval)?),
        };
        let later: u64 = self
            .segments
            .range(base + 1..)
            .map(|(_, s)| s.size_bytes())
            .sum();
        let behind = slice.len_bytes() + later;
        Ok(slice.with_behind_bytes(behind))
    }

    /// The largest record timestamp in the log, if any batch carries one
    /// (ListOffsets with the "max timestamp" spec).
    pub fn max_timestamp_ms(&self) -> Option<i64> {
        self.segments
            .values()
            .filter_map(Segment::max_timestamp_ms)
            .max()
    }

    /// The first batch whose max timestamp is at or after `timestamp_ms`:
    /// its base offset and max timestamp. `None` when every batch is older.
    pub fn offset_for_timestamp(
        &self,
        timestamp_ms: i64,
    ) -> Result<Option<(Offset, i64)>, LogError> {
        for segment in self.segments.values() {
            if let Some((offset, max_timestamp_ms)) = segment.find_timestamp(timestamp_ms)? {
                return Ok(Some((Offset::new(offset), max_timestamp_ms)));
            }
        }
        Ok(None)
    }

    /// The sealed segments (every one but the active) that end at or before `to`,
    /// oldest first.
    pub fn sealed_segments(&self, to: Offset) -> Vec<SealedSegment> {
        let active = self.segments.keys().next_back().copied();
        self.segments
            .iter()
            .filter(|(base, s)| Some(**base) != active && s.end_offset() <= to.value())
            .map(|(base, s)| {
                let paths = s.paths();
                let mut files = vec![
                    ("log", paths.log.clone()),
                    ("index", paths.index.clone()),
                    ("timeindex", paths.time_index.clone()),
                ];
                if self.aborted.contains_key(base) {
                    files.push(("txnindex", paths.txn_index.clone()));
                }
                SealedSegment {
                    base_offset: Offset::new(*base),
                    end_offset: Offset::new(s.end_offset()),
                    size_bytes: s.size_bytes(),
                    max_timestamp_ms: s.max_timestamp_ms(),
                    files,
                }
            })
            .collect()
    }

    /// Records an aborted transaction whose abort marker the log now holds, in the
    /// index of the segment holding the marker (`txn_index.rs`). The file is synced by
    /// [`Log::sync_aborted`] or at close. Returns false when the entry was known (the
    /// broker replays markers at open). A write that fails poisons the log: the marker
    /// is in the log and its entry must not go missing; the next open replays it.
    pub fn add_aborted(&mut self, txn: AbortedTxn) -> Result<bool, LogError> {
        let marker = txn.last_offset.value();
        let Some((&base, segment)) = self.segments.range(..=marker).next_back() else {
            return Ok(false);
        };
        assert!(
            marker < segment.end_offset() && txn.first_offset <= txn.last_offset,
            "an aborted transaction {txn:?} whose marker is not in the log"
        );
        let entries = self.aborted.entry(base).or_default();
        if entries.iter().any(|e| e.last_offset == txn.last_offset) {
            return Ok(false);
        }
        if let Err(e) = txn_index::append(&self.dir, base, &txn) {
            self.poison();
            return Err(e);
        }
        let at = entries.partition_point(|e| e.last_offset < txn.last_offset);
        entries.insert(at, txn);
        self.aborted_unsynced.insert(base);
        Ok(true)
    }

    /// The aborted transactions that overlap `[from, to)`: marker at or after `from`,
    /// first offset before `to`; at most `max`, by marker offset.
    pub fn aborted_transactions(&self, from: Offset, to: Offset, max: usize) -> Vec<AbortedTxn> {
        // An entry sits in its marker's segment, which is at or after the segment
        // holding `from` when the marker is at or after `from`.
        let first_segment = self
            .segments
            .range(..=from.value())
            .next_back()
            .map_or(i64::MIN, |(base, _)| *base);
        self.aborted
            .range(first_segment..)
            .flat_map(|(_, entries)| entries.iter())
            .filter(|e| e.last_offset >= from && e.first_offset < to)
            .take(max)
            .copied()
            .collect()
    }

    /// Every aborted-transaction entry the log holds (tests and tools).
    pub fn aborted_count(&self) -> usize {
        self.aborted.values().map(Vec::len).sum()
    }

    /// Syncs the aborted-transaction index files appended to since their last sync.
    pub fn sync_aborted(&mut self) -> Result<(), LogError> {
        while let Some(base) = self.aborted_unsynced.pop_first() {
            if self.segments.contains_key(&base) {
                txn_index::sync(&self.dir, base)?;
            }
        }
        Ok(())
    }

    /// Deletes the oldest non-active segments past `retention_bytes_max` or
    /// `retention_ms_max`, and advances the log start offset.
    pub fn enforce_retention(&mut self, now_ms: i64) -> Result<RetentionReport, LogError> {
        self.delete_oldest_while(|log| log.expired_segment(now_ms))
    }

    /// Deletes the non-active segments that hold only offsets below `offset` (whole
    /// segments: a segment that `offset` falls inside stays). Used by DeleteRecords,
    /// whose finer logical start offset the broker keeps itself.
    pub fn delete_segments_before(&mut self, offset: Offset) -> Result<RetentionReport, LogError> {
        self.delete_oldest_while(|log| {
            let mut bases = log.segments.keys();
            let oldest = *bases.next()?;
            let next = *bases.next()?;
            (next <= offset.value()).then_some(oldest)
        })
    }

    fn delete_oldest_while(
        &mut self,
        mut next: impl FnMut(&Log) -> Option<i64>,
    ) -> Result<RetentionReport, LogError> {
        let mut report = RetentionReport::default();
        while let Some(base_offset) = next(self) {
            self.segments[&base_offset].delete()?;
            let segment = self
                .segments
                .remove(&base_offset)
                .expect("the segment just deleted");
            let size_bytes = segment.size_bytes();
            self.size_bytes -= size_bytes;
            self.repair.remove(&base_offset);
            self.aborted.remove(&base_offset);
            self.aborted_unsynced.remove(&base_offset);
            self.pending.changed_dir();
            report.deleted_segments += 1;
            report.deleted_bytes += size_bytes;
        }
        report.log_start_offset = self.log_start_offset();
        if report.deleted_segments > 0 {
            tracing::debug!(dir = %self.dir.display(), ?report, "retention deleted segments");
        }
        Ok(report)
    }

    /// Syncs all files and writes the clean-shutdown marker.
    ///
    /// A poisoned log is closed without the marker (its files may not hold what
    /// was written), and the result is `LogError::Poisoned`.
    pub fn close(mut self) -> Result<(), LogError> {
        if self.poisoned {
            return Err(LogError::Poisoned {
                path: self.dir.clone(),
            });
        }
        if self.untouched_since_clean_close() {
            // The marker of the last clean close still stands for these files.
            tracing::debug!(dir = %self.dir.display(), "log closed untouched");
            return Ok(());
        }
        // Sync sets still in flight on other threads may not have finished: sync
        // everything that can be dirty, which by the durability invariant is the
        // last sealed segment and the active one.
        if let Some(sealed) = self.last_sealed.take().filter(|s| !s.is_durable()) {
            sealed.sync_now(&self.dir)?;
        }
        self.active().sync_files()?;
        self.sync_aborted()?;
        self.sync_dir()?;
        recovery::write_clean_marker(&self.dir)?;
        tracing::debug!(dir = %self.dir.display(), log_end_offset = self.log_end_offset.value(), "log closed cleanly");
        Ok(())
    }

    fn active(&self) -> &Segment {
        self.segments
            .values()
            .next_back()
            .expect("a log has a segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log has a segment")
    }

    /// Passes a write's result on: a refused (undone) write is counted and logged
    /// once per run of refusals; any other failure poisons the log.
    fn check_write<T>(&mut self, result: Result<T, LogError>) -> Result<T, LogError> {
        match &result {
            Ok(_) => {}
            Err(e) if e.is_refused() => {
                if self.refused_appends == 0 {
                    tracing::warn!(dir = %self.dir.display(), error = %e,
                        "append refused; the log is unchanged and appends resume once writes succeed");
                }
                self.refused_appends += 1;
            }
            Err(_) => self.poison(),
        }
        result
    }

    /// Whether the active segment must be sealed before an append of `size_bytes`
    /// spanning `offset_count` offsets. An empty segment never rolls.
    fn should_roll(&self, size_bytes: u64, offset_count: i64, now_ms: i64) -> bool {
        let active = self.active();
        if active.is_empty() {
            return false;
        }
        let full = active.size_bytes() + size_bytes > self.config.segment_bytes_max;
        let old = active.age_ms(now_ms) >= self.config.segment_ms_max_i64();
        let last_relative_offset =
            self.log_end_offset.value() + offset_count - 1 - active.base_offset();
        full || old || last_relative_offset > SEGMENT_OFFSETS_LIMIT
    }

    /// Seals the active segment and starts a new one at the log end offset. The new
    /// segment is created before the active one is sealed, so that a write refused on
    /// the way (a full disk) leaves the log as it was.
    fn roll(&mut self) -> Result<(), LogError> {
        if let Some(previous) = self.last_sealed.take().filter(|s| !s.is_durable()) {
            // Keeps the durability invariant: at most one sealed segment is unsynced.
            previous.sync_now(&self.dir)?;
        }
        let segment = Segment::create(&self.dir, self.log_end_offset.value())?;
        let sealed = match self.active_mut().seal() {
            Ok(sealed) => sealed,
            Err(e) => {
                segment.delete()?;
                return Err(e);
            }
        };
        tracing::debug!(dir = %self.dir.display(), base_offset = self.log_end_offset.value(), "rolled to a new segment");
        self.segments.insert(self.log_end_offset.value(), segment);
        self.pending.sealed(sealed.clone());
        self.last_sealed = Some(sealed);
        Ok(())
    }

    /// The base offset of the oldest segment if retention deletes it now. Never the
    /// active segment.
    fn expired_segment(&self, now_ms: i64) -> Option<i64> {
        let mut segments = self.segments.values();
        let oldest = segments.next()?;
        segments.next()?;
        let over_size = self
            .config
            .retention_bytes_max
            .is_some_and(|max| self.size_bytes > max);
        let expired = self
            .config
            .retention_cutoff_ms(now_ms)
            .is_some_and(|cutoff| oldest.retention_timestamp_ms() < cutoff);
        (over_size || expired).then_some(oldest.base_offset())
    }

    /// Syncs the partition directory (files created, renamed or removed in it).
    pub(crate) fn sync_dir(&self) -> Result<(), LogError> {
        Ok(headway_base::durable_file::sync_dir(&self.dir)?)
    }
}

/// Whether an append gives its batches their offsets or keeps the leader's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offsets {
    Assign,
    Keep,
}

/// Gives the batches consecutive offsets from `base_offset`, in the bytes and in
/// the parsed headers.
fn assign_offsets(batches: &mut [u8], headers: &mut [BatchHeader], base_offset: i64) {
    let mut position = 0;
    let mut next_offset = base_offset;
    for header in headers {
        batch::set_base_offset(&mut batches[position..], next_offset);
        header.base_offset = next_offset;
        next_offset = header.last_offset() + 1;
        position += header.total_bytes();
    }
}

#[cfg(test)]
mod tests;
