//! Cutting the end of a log: what a follower does when its leader's history diverged
//! from its own (the batches a deposed leader wrote and no one else kept), or when it is
//! so far behind that it starts again at its leader's log start.
//!
//! [`Log::truncate_to`] removes every batch that holds an offset at or after the target,
//! whole: a batch that straddles the target goes too, so the new log end may be below
//! it. [`Log::truncate_fully_and_start_at`] empties the log, which then starts at the
//! target (above or below its old end). Both work with the pieces recovery already
//! trusts, in an order where a crash at any step leaves a log recovery opens as a prefix
//! of the old one (or the empty new one), never with divergent batches behind a gap:
//! 1. what stays is synced (nothing unsynced may stay that no sync set knows of, since
//!    the log is opened afresh at the end);
//! 2. the segment the target falls in (the keeper) is marked for repair, durably, so the
//!    next open scans it in full and rebuilds its indexes whatever else happened;
//!    for a full truncation, the new empty segment is created first instead;
//! 3. the segments after the keeper are deleted, newest first, and the directory synced;
//! 4. the keeper is cut at the boundary of its first batch ending at or after the target,
//!    and synced;
//! 5. the log is opened again from its directory.
//!
//! A follower does not trust a truncation to be done before a crash: after a restart it
//! asks its leader again (OffsetForLeaderEpoch) and cuts again.

use super::Log;
use crate::batch::{BatchHeader, BATCH_HEADER_BYTES};
use crate::segment::Segment;
use crate::LogError;
use headway_base::Offset;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Log {
    /// Removes every batch holding an offset at or after `offset`, and answers the new
    /// log end offset (at most `offset`). A target at or past the log end changes
    /// nothing; one at or before the log start empties the log, which starts at it.
    pub fn truncate_to(&mut self, offset: Offset, now_ms: i64) -> Result<Offset, LogError> {
        if offset >= self.log_end_offset {
            self.refuse_while_busy()?;
            return Ok(self.log_end_offset);
        }
        if offset <= self.log_start_offset() {
            return self.truncate_fully_and_start_at(offset, now_ms);
        }
        self.rewrite(now_ms, |log| log.cut(offset))
    }

    /// Empties the log, which starts again at `offset` (a follower whose whole log is
    /// below its leader's log start, or diverged from its first offset).
    pub fn truncate_fully_and_start_at(
        &mut self,
        offset: Offset,
        now_ms: i64,
    ) -> Result<Offset, LogError> {
        self.rewrite(now_ms, |log| log.start_over(offset))
    }

    fn refuse_while_busy(&self) -> Result<(), LogError> {
        if self.poisoned {
            return Err(LogError::Poisoned {
                path: self.dir.clone(),
            });
        }
        if self.cleaner_busy.load(Ordering::Acquire) {
            return Err(LogError::CleanerBusy {
                path: self.dir.clone(),
            });
        }
        Ok(())
    }

    /// Syncs what stays, changes the files with `change`, and opens the log again. Any
    /// failure on the way poisons the log: its files are no longer what it holds.
    fn rewrite(
        &mut self,
        now_ms: i64,
        change: impl FnOnce(&mut Log) -> Result<(), LogError>,
    ) -> Result<Offset, LogError> {
        self.refuse_while_busy()?;
        let end_before = self.log_end_offset;
        let changed = self.sync_everything().and_then(|()| change(self));
        let reopened = changed.and_then(|()| Log::open(&self.dir, self.config.clone(), now_ms));
        let (mut reopened, report) = match reopened {
            Ok(opened) => opened,
            Err(e) => {
                self.poison();
                return Err(e);
            }
        };
        reopened.cleaner_busy = Arc::clone(&self.cleaner_busy);
        tracing::info!(
            dir = %self.dir.display(),
            log_end_offset_before = end_before.value(),
            log_start_offset = report.log_start_offset.value(),
            log_end_offset = report.log_end_offset.value(),
            "log truncated"
        );
        *self = reopened;
        Ok(self.log_end_offset)
    }

    fn sync_everything(&mut self) -> Result<(), LogError> {
        if let Some(sealed) = self.last_sealed.take().filter(|s| !s.is_durable()) {
            sealed.sync_now(&self.dir)?;
        }
        self.active().sync_files()?;
        self.sync_aborted()?;
        if self.clean_marker {
            crate::recovery::remove_clean_marker(&self.dir)?;
            self.clean_marker = false;
        }
        Ok(())
    }

    /// Deletes the segments with a base offset above `keep`, newest first, and syncs the
    /// directory.
    fn delete_after(&mut self, keep: i64) -> Result<(), LogError> {
        let doomed: Vec<i64> = self
            .segments
            .range(keep + 1..)
            .map(|(base, _)| *base)
            .collect();
        for base in doomed.iter().rev() {
            self.segments[base].delete()?;
        }
        self.sync_dir()
    }

    /// Steps 2 to 4 for a target above the log start and below its end.
    fn cut(&mut self, offset: Offset) -> Result<(), LogError> {
        let (&keep, keeper) = self
            .segments
            .range(..offset.value())
            .next_back()
            .expect("a target above the log start falls in a segment");
        keeper.mark_for_repair()?;
        self.sync_dir()?;
        self.delete_after(keep)?;
        let keeper = &self.segments[&keep];
        if let Some(position) = first_batch_reaching(keeper, offset)? {
            cut_at(keeper, position)?;
        }
        Ok(())
    }

    /// Steps 2 to 4 for a full truncation: the log becomes one empty segment at `offset`.
    fn start_over(&mut self, offset: Offset) -> Result<(), LogError> {
        if self.segments.contains_key(&offset.value()) {
            // A segment already starts there: it is kept, emptied.
            let keeper = &self.segments[&offset.value()];
            keeper.mark_for_repair()?;
            self.sync_dir()?;
            self.delete_after(offset.value())?;
            for base in self.segments.range(..offset.value()).map(|(b, _)| *b) {
                self.segments[&base].delete()?;
            }
            self.sync_dir()?;
            return cut_at(&self.segments[&offset.value()], 0);
        }
        // The new, empty segment first: a crash from here on opens a log that starts at
        // `offset` or at the old start (a prefix of the old log), never an empty
        // directory that would start at 0.
        drop(Segment::create(&self.dir, offset.value())?);
        self.sync_dir()?;
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        for base in bases.iter().rev() {
            self.segments[base].delete()?;
        }
        self.sync_dir()
    }
}

/// Cuts `segment`'s `.log` at `position` and syncs it. Opened for writing here: a
/// sealed segment's own handle is read-only, and a truncation may fall in one.
fn cut_at(segment: &Segment, position: u64) -> Result<(), LogError> {
    let path = &segment.paths().log;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(LogError::io("open", path))?;
    file.set_len(position)
        .map_err(LogError::io("truncate", path))?;
    file.sync_all().map_err(LogError::io("sync", path))
}

/// The byte position of the first batch in `segment` whose last offset is at or after
/// `offset`, or `None` when every batch ends before it.
fn first_batch_reaching(segment: &Segment, offset: Offset) -> Result<Option<u64>, LogError> {
    let file = segment.log_file()?;
    let path = &segment.paths().log;
    let size = segment.size_bytes();
    let mut position = 0u64;
    let mut header = [0u8; BATCH_HEADER_BYTES];
    while position + BATCH_HEADER_BYTES as u64 <= size {
        file.read_exact_at(&mut header, position)
            .map_err(LogError::io("read", path))?;
        let parsed = BatchHeader::parse(&header)?;
        if parsed.last_offset() >= offset.value() {
            return Ok(Some(position));
        }
        position += parsed.total_bytes() as u64;
    }
    Ok(None)
}
