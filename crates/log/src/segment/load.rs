//! Loading one segment at open. Two ways:
//!
//! - Adopt: read both index files, sanity-check them, and walk the batch headers from
//!   the last offset-index entry to the end of the `.log` (at most about
//!   `index_interval_bytes` plus one batch). The walk must end exactly at the end of
//!   the file with increasing offsets, and the time index must not point past the end.
//! - Scan: read the whole `.log`, validating every batch (lengths, CRC-32C, offsets
//!   increasing from the base offset), truncate the file at the first batch that
//!   fails, and rebuild both indexes from the scan. Index files whose contents differ
//!   from the rebuilt ones are rewritten and synced.
//!
//! Offsets increase but need not be dense: the log cleaner of compacted topics removes
//! whole batches, so a cleaned segment has gaps between its batches. Appends are still
//! dense; a batch that goes backwards, or repeats an offset, ends the segment.
//!
//! Recovery scans the segments that may hold bytes that never reached the disk (the
//! last two after a crash) and any segment that cannot be adopted.

use super::{relative, Segment, SegmentPaths};
use crate::batch::BatchHeader;
use crate::config::{SCAN_CHUNK_BYTES, SHORT_WALK_CHUNK_BYTES};
use crate::file_cache::without_readahead;
use crate::index::{IndexDamage, OffsetIndex};
use crate::indexing::{BatchPlace, IndexCursor};
use crate::scan::{self, WalkEnd, WalkOptions};
use crate::time_index::TimeIndex;
use crate::LogError;
use std::fs::File;
use std::io::{self, Write};
use std::ops::ControlFlow;
use std::path::Path;

#[derive(Debug, Clone, Copy)]
pub(crate) struct LoadOptions {
    /// Validate every batch and rebuild the indexes, even when they look sane.
    pub full_scan: bool,
    /// A later segment exists: a rebuilt time index ends with the sealing entry.
    pub sealed: bool,
    pub index_interval_bytes: u32,
    pub now_ms: i64,
}

/// What loading one segment repaired.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LoadReport {
    pub truncated_bytes: u64,
    pub rebuilt_indexes: usize,
}

/// Indexes a segment's batches during a full scan.
struct Rebuilder {
    base_offset: i64,
    /// The lowest base offset the next batch may have (the previous batch's end).
    expected_offset: i64,
    index_interval_bytes: u32,
    cursor: IndexCursor,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
}

impl Rebuilder {
    /// Indexes a valid batch, or stops at one that does not belong: its offset does
    /// not come after the previous batch, or it lies where index entries cannot point.
    fn visit(&mut self, position: u64, header: &BatchHeader) -> ControlFlow<()> {
        let size_bytes = header.total_bytes() as u64;
        let relative_offset = relative(self.base_offset, header.base_offset);
        let position = u32::try_from(position)
            .ok()
            .filter(|p| u64::from(*p) + size_bytes <= u64::from(u32::MAX));
        let (Some(relative_offset), Some(position)) = (relative_offset, position) else {
            return ControlFlow::Break(());
        };
        if header.base_offset < self.expected_offset {
            return ControlFlow::Break(());
        }
        let place = BatchPlace {
            relative_offset,
            position,
            size_bytes: size_bytes as u32,
            max_timestamp_ms: header.max_timestamp,
        };
        let new = self.cursor.observe(place, self.index_interval_bytes);
        new.push_into(&mut self.offset_index, &mut self.time_index);
        self.expected_offset = header.last_offset() + 1;
        ControlFlow::Continue(())
    }
}

/// The indexes and state a full scan produced.
struct Scanned {
    valid_bytes: u64,
    end: WalkEnd,
    end_offset: i64,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    cursor: IndexCursor,
}

impl Segment {
    /// Opens an existing segment and brings it to a consistent state.
    pub(crate) fn load(
        dir: &Path,
        base_offset: i64,
        options: LoadOptions,
    ) -> Result<(Segment, LoadReport), LogError> {
        let paths = SegmentPaths::new(dir, base_offset);
        let log_file = super::open_for_append(&paths.log, false)?;
        let mut segment = Segment::empty(paths, base_offset, log_file);
        segment.size_bytes = segment
            .held_log()
            .metadata()
            .map_err(LogError::io("stat", &segment.paths.log))?
            .len();
        if segment.size_bytes > 0 {
            segment.created_ms = Some(options.now_ms);
        }
        let offset_index = read_index(&segment.paths.index, |b| {
            OffsetIndex::decode(b, segment.size_bytes)
        })?;
        let time_index = read_index(&segment.paths.time_index, TimeIndex::decode)?;
        let adoptable = !options.full_scan && segment.size_bytes <= u64::from(u32::MAX);
        if let (true, Some(oi), Some(ti)) = (adoptable, &offset_index, &time_index) {
            if segment.adopt(oi.clone(), ti.clone())? {
                without_readahead(segment.held_log());
                return Ok((segment, LoadReport::default()));
            }
        }
        let report = segment.rebuild(offset_index, time_index, options)?;
        // Scanned with the kernel's readahead; served without it.
        without_readahead(segment.held_log());
        Ok((segment, report))
    }

    /// Takes the loaded indexes if the tail of the log agrees with them.
    fn adopt(
        &mut self,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
    ) -> Result<bool, LogError> {
        let last = offset_index.last();
        let mut cursor = IndexCursor::resume(last, &time_index, self.size_bytes);
        let base = self.base_offset;
        let mut expected = base + last.map_or(0, |e| i64::from(e.relative_offset));
        let options = WalkOptions {
            validate: false,
            chunk_bytes: SHORT_WALK_CHUNK_BYTES,
        };
        let start = last.map_or(0, |e| u64::from(e.position));
        let walked = scan::walk(
            self.held_log(),
            start,
            self.size_bytes,
            options,
            |_, header| match relative(base, header.base_offset) {
                Some(rel) if header.base_offset >= expected && header.last_offset_delta >= 0 => {
                    expected = header.last_offset() + 1;
                    cursor.note(rel, header.max_timestamp);
                    ControlFlow::Continue(())
                }
                _ => ControlFlow::Break(()),
            },
        )
        .map_err(LogError::io("read", &self.paths.log))?;
        let time_check = time_index.check_end(expected - base);
        if walked.end != WalkEnd::End || time_check.is_err() {
            tracing::warn!(path = %self.paths.log.display(), end = ?walked.end, time_index = ?time_check,
                "segment tail disagrees with its indexes; scanning it");
            return Ok(false);
        }
        self.end_offset = expected;
        self.offset_index = offset_index;
        self.time_index = time_index;
        self.cursor = cursor;
        Ok(true)
    }

    /// Scans the whole log, truncates it after its last valid batch, and stores
    /// rebuilt indexes where the loaded ones differ.
    fn rebuild(
        &mut self,
        loaded_index: Option<OffsetIndex>,
        loaded_time_index: Option<TimeIndex>,
        options: LoadOptions,
    ) -> Result<LoadReport, LogError> {
        let scanned = self.scan(options)?;
        let mut report = LoadReport::default();
        if scanned.valid_bytes < self.size_bytes {
            report.truncated_bytes = self.size_bytes - scanned.valid_bytes;
            tracing::warn!(path = %self.paths.log.display(), position = scanned.valid_bytes,
                truncated_bytes = report.truncated_bytes, reason = ?scanned.end, "truncating the segment's torn or corrupt tail");
            self.truncate(scanned.valid_bytes)?;
        }
        report.rebuilt_indexes = self.store_rebuilt(&loaded_index, &loaded_time_index, &scanned)?;
        self.end_offset = scanned.end_offset;
        self.offset_index = scanned.offset_index;
        self.time_index = scanned.time_index;
        self.cursor = scanned.cursor;
        Ok(report)
    }

    /// Rewrites the index files that differ from the rebuilt indexes. Returns how
    /// many were missing or damaged, as opposed to only running past a truncation.
    fn store_rebuilt(
        &self,
        loaded_index: &Option<OffsetIndex>,
        loaded_time_index: &Option<TimeIndex>,
        scanned: &Scanned,
    ) -> Result<usize, LogError> {
        let index_rebuilt = loaded_index.clone().is_none_or(|mut kept| {
            kept.truncate_to_log_bytes(scanned.valid_bytes);
            kept != scanned.offset_index
        });
        let time_index_rebuilt = loaded_time_index.clone().is_none_or(|mut kept| {
            kept.truncate_to_end(scanned.end_offset - self.base_offset);
            kept != scanned.time_index
        });
        if loaded_index.as_ref() != Some(&scanned.offset_index) {
            store(&self.paths.index, &scanned.offset_index.encode())?;
        }
        if loaded_time_index.as_ref() != Some(&scanned.time_index) {
            store(&self.paths.time_index, &scanned.time_index.encode())?;
        }
        Ok(usize::from(index_rebuilt) + usize::from(time_index_rebuilt))
    }

    /// Validates every batch from the start and indexes it as an append would.
    fn scan(&self, options: LoadOptions) -> Result<Scanned, LogError> {
        let mut rebuilder = Rebuilder {
            base_offset: self.base_offset,
            expected_offset: self.base_offset,
            index_interval_bytes: options.index_interval_bytes,
            cursor: IndexCursor::new(),
            offset_index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
        };
        let walk_options = WalkOptions {
            validate: true,
            chunk_bytes: SCAN_CHUNK_BYTES,
        };
        let walked = scan::walk(
            self.held_log(),
            0,
            self.size_bytes,
            walk_options,
            |position, header| rebuilder.visit(position, header),
        )
        .map_err(LogError::io("read", &self.paths.log))?;
        if options.sealed {
            let sealed = rebuilder.cursor.seal();
            sealed
                .into_iter()
                .for_each(|e| rebuilder.time_index.push(e));
        }
        Ok(Scanned {
            valid_bytes: walked.position,
            end: walked.end,
            end_offset: rebuilder.expected_offset,
            offset_index: rebuilder.offset_index,
            time_index: rebuilder.time_index,
            cursor: rebuilder.cursor,
        })
    }

    fn truncate(&mut self, valid_bytes: u64) -> Result<(), LogError> {
        let path = &self.paths.log;
        self.held_log()
            .set_len(valid_bytes)
            .map_err(LogError::io("truncate", path))?;
        self.held_log()
            .sync_data()
            .map_err(LogError::io("sync", path))?;
        self.size_bytes = valid_bytes;
        Ok(())
    }
}

/// Reads and decodes an index file: `None` when it is missing or fails its checks.
fn read_index<T>(
    path: &Path,
    decode: impl FnOnce(&[u8]) -> Result<T, IndexDamage>,
) -> Result<Option<T>, LogError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            tracing::warn!(path = %path.display(), "index file missing; rebuilding it");
            return Ok(None);
        }
        Err(e) => return Err(LogError::io("read", path)(e)),
    };
    match decode(&bytes) {
        Ok(index) => Ok(Some(index)),
        Err(damage) => {
            tracing::warn!(path = %path.display(), %damage, "index file damaged; rebuilding it");
            Ok(None)
        }
    }
}

/// Replaces an index file's contents and syncs it.
fn store(path: &Path, bytes: &[u8]) -> Result<(), LogError> {
    let mut file = File::create(path).map_err(LogError::io("create", path))?;
    file.write_all(bytes)
        .map_err(LogError::io("write to", path))?;
    file.sync_data().map_err(LogError::io("sync", path))?;
    Ok(())
}
