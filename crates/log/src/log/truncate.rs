//! Cutting the end of a log: what a follower does when its leader's history diverged
//! from its own (the batches a deposed leader wrote and no one else kept).
//!
//! [`Log::truncate_to`] removes every batch that holds an offset at or after the target,
//! whole: a batch that straddles the target goes too, so the new log end may be below
//! it. The work is done with the pieces recovery already trusts:
//! 1. what stays is synced first (the cut must not leave unsynced bytes below the new end
//!    that no sync set knows of, since the log is opened afresh at step 4);
//! 2. the segments starting at or after the target are deleted;
//! 3. the segment the target falls in is cut at the boundary of its first batch ending
//!    at or after the target, and marked for repair, so that opening it scans it in full
//!    and rebuilds its indexes;
//! 4. the log is opened again from its directory, and that segment is the active one.
//!
//! A target at or before the log start empties the log, which then starts at the target
//! (Kafka's "truncate fully and start at").

use super::Log;
use crate::batch::{BatchHeader, BATCH_HEADER_BYTES as HEADER_BYTES};
use crate::segment::Segment;
use crate::LogError;
use headway_base::Offset;
use std::os::unix::fs::FileExt;

impl Log {
    /// Removes every batch holding an offset at or after `offset`, and answers the new
    /// log end offset (at most `offset`). A target at or past the log end changes nothing.
    pub fn truncate_to(&mut self, offset: Offset, now_ms: i64) -> Result<Offset, LogError> {
        if self.poisoned {
            return Err(LogError::Poisoned {
                path: self.dir.clone(),
            });
        }
        if offset >= self.log_end_offset {
            return Ok(self.log_end_offset);
        }
        let result = self.cut(offset);
        if result.is_err() {
            self.poison();
        }
        result?;
        let config = self.config.clone();
        let (reopened, report) = Log::open(&self.dir, config, now_ms)?;
        tracing::info!(
            dir = %self.dir.display(),
            target = offset.value(),
            log_end_offset = report.log_end_offset.value(),
            "log truncated"
        );
        *self = reopened;
        Ok(self.log_end_offset)
    }

    fn cut(&mut self, offset: Offset) -> Result<(), LogError> {
        if let Some(sealed) = self.last_sealed.take().filter(|s| !s.is_durable()) {
            sealed.sync_now(&self.dir)?;
        }
        self.active().sync_files()?;
        self.sync_aborted()?;
        if self.clean_marker {
            crate::recovery::remove_clean_marker(&self.dir)?;
            self.clean_marker = false;
        }
        if offset <= self.log_start_offset() {
            for segment in self.segments.values() {
                segment.delete()?;
            }
            // The log starts again, empty, at `offset`.
            drop(Segment::create(&self.dir, offset.value())?);
            return self.sync_dir();
        }
        let doomed: Vec<i64> = self
            .segments
            .range(offset.value()..)
            .map(|(base, _)| *base)
            .collect();
        for base in doomed.iter().rev() {
            self.segments[base].delete()?;
        }
        let (_, segment) = self
            .segments
            .range(..offset.value())
            .next_back()
            .expect("a target above the log start falls in a segment");
        if let Some(position) = first_batch_reaching(segment, offset)? {
            let file = segment.log_file()?;
            let path = &segment.paths().log;
            file.set_len(position)
                .map_err(LogError::io("truncate", path))?;
            file.sync_all().map_err(LogError::io("sync", path))?;
            segment.mark_for_repair()?;
        }
        self.sync_dir()
    }
}

/// The byte position of the first batch in `segment` whose last offset is at or after
/// `offset`, or `None` when every batch ends before it.
fn first_batch_reaching(segment: &Segment, offset: Offset) -> Result<Option<u64>, LogError> {
    let file = segment.log_file()?;
    let path = &segment.paths().log;
    let size = segment.size_bytes();
    let mut position = 0u64;
    let mut header = [0u8; HEADER_BYTES];
    while position + HEADER_BYTES as u64 <= size {
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
