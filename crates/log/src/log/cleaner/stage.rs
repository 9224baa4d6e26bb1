//! The heavy half of a cleaning pass, run without the log's lock on the files the plan
//! holds open: reading keys into the offset map, then writing each group's cleaned
//! segment into the staging directory. Touches nothing of the log's but that
//! directory, so a pass dropped half-way leaves only garbage that the next pass (or
//! the next open) deletes.
//!
//! Memory: the map's budget (`CleanerConfig::map_bytes_max`); one read window of
//! [`SCAN_CHUNK_BYTES`] (or one batch, when larger); one batch's records inflated
//! (at most [`RECORDS_SCAN_BYTES_MAX`](crate::records::RECORDS_SCAN_BYTES_MAX));
//! a write buffer of [`CLEANER_WRITE_BUFFER_BYTES`] plus one batch; and the staged
//! segment's in-memory indexes (24 bytes per `index_interval_bytes` written, about
//! 6 MiB for a 1 GiB segment at 4 KiB), freed when it is sealed.

use super::checkpoint::CleanerState;
use super::StagedCleaning;
use super::{earliest, groups, CleanReport, CleanerConfig, CleaningPlan, Planned};
use super::{staging, StagedGroup};
use crate::batch::BatchHeader;
use crate::compaction::{emptied, retain_records, OffsetMap, Retained, OFFSET_MAP_ENTRY_BYTES};
use crate::config::{CLEANER_WRITE_BUFFER_BYTES, SCAN_CHUNK_BYTES};
use crate::scan::{self, WalkEnd, WalkOptions};
use crate::segment::Segment;
use crate::LogError;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::Path;

/// The share of `map_bytes_max` (one part in this many) for idempotent producers.
const PRODUCER_SHARE: usize = 8;

/// Each key's latest offset in the mapped range, and each idempotent producer's last
/// batch from the log's start to the range's end.
struct Mapped {
    map: OffsetMap,
    /// Producer id to the base offset of its last batch.
    producers: HashMap<i64, i64>,
    /// Planned segments read whole: the pass cleans these.
    segments: usize,
    full: bool,
    damaged: bool,
}

/// Decides on each batch of a group and writes what stays into the staged segment.
struct GroupWriter<'a> {
    segment: Segment,
    buffer: Vec<u8>,
    headers: Vec<BatchHeader>,
    changed: bool,
    records_removed: u64,
    tombstones_removed: u64,
    /// The earliest horizon of a tombstone the group keeps.
    tombstones_due_ms: Option<i64>,
    bytes_written: u64,
    /// The group's base offset and the end offset of its last non-empty segment: the
    /// batches that start and end there stay (as headers alone, when none of their
    /// records does), so that the cleaned segment starts and ends where the group did:
    /// its index starts at its base offset as every segment's does, and recovery's
    /// chain check holds.
    base_offset: i64,
    end_offset: i64,
    /// The log's cleaner state at the plan: when the clean offsets' tombstones go.
    cleaner: &'a CleanerState,
    /// The horizon of the tombstones cleaned for the first time.
    horizon_ms: i64,
    index_interval_bytes: u32,
    now_ms: i64,
    mapped: &'a Mapped,
    throttle: &'a mut dyn FnMut(u64),
}

/// What became of a group.
enum Outcome {
    Staged(StagedGroup),
    Unchanged,
    /// A batch failed its checks: the pass stops before this group.
    Damaged,
}

fn is_idempotent(header: &BatchHeader) -> bool {
    header.producer_id >= 0 && header.base_sequence >= 0
}

impl CleaningPlan {
    /// Reads the keys of the dirty segments and writes the cleaned segments into the
    /// staging directory. Blocking and heavy: call it without the log's lock.
    /// `throttle` is called with the bytes of each read or write as it happens, so the
    /// caller can pace the pass against an I/O budget.
    pub fn stage(
        self,
        config: &CleanerConfig,
        now_ms: i64,
        throttle: &mut dyn FnMut(u64),
    ) -> Result<StagedCleaning, LogError> {
        let staging = staging::create_staging(&self.dir)?;
        let mut report = CleanReport {
            dirty_ratio_before: self.dirty_ratio_before,
            ..CleanReport::default()
        };
        let mapped = self.map_keys(config, throttle, &mut report)?;
        report.map_full = mapped.full;
        report.damaged = mapped.damaged;
        let cleaned = &self.segments[..mapped.segments];
        let mut staged = Vec::new();
        let mut complete = true;
        let mut tombstones_due_ms = None;
        for group in groups(cleaned, self.segment_bytes_max) {
            let segments = &cleaned[group];
            let writer =
                GroupWriter::start(&staging, segments, &self, config, now_ms, &mapped, throttle);
            let Some(writer) = writer? else { continue };
            let (outcome, due) = writer.write(segments, &staging, &mut report)?;
            tombstones_due_ms = earliest(tombstones_due_ms, due);
            match outcome {
                Outcome::Staged(group) => staged.push(group),
                Outcome::Unchanged => report.groups_unchanged += 1,
                Outcome::Damaged => {
                    report.damaged = true;
                    complete = false;
                    break;
                }
            }
        }
        let first_dirty_offset = cleaned.last().map(|s| s.end_offset).filter(|_| complete);
        Ok(StagedCleaning {
            dir: self.dir,
            groups: staged.into(),
            first_dirty_offset,
            horizon_ms: config.tombstone_horizon_ms(now_ms),
            tombstones_due_ms,
            stopped: false,
            now_ms,
            report,
            busy: self.busy,
        })
    }

    /// Reads the planned segments in order: the clean ones' batch headers (for the
    /// producers), the dirty ones' records (for the keys), until the map is full, a
    /// batch is damaged, or every segment was read.
    fn map_keys(
        &self,
        config: &CleanerConfig,
        throttle: &mut dyn FnMut(u64),
        report: &mut CleanReport,
    ) -> Result<Mapped, LogError> {
        let producers_max = (config.map_bytes_max / PRODUCER_SHARE / OFFSET_MAP_ENTRY_BYTES).max(1);
        let keys_bytes_max = config.map_bytes_max - config.map_bytes_max / PRODUCER_SHARE;
        let mut mapped = Mapped {
            map: OffsetMap::new(keys_bytes_max),
            producers: HashMap::new(),
            segments: 0,
            full: false,
            damaged: false,
        };
        for (i, segment) in self.segments.iter().enumerate() {
            let dirty = segment.base_offset >= self.cleaner.first_dirty_offset;
            let options = WalkOptions {
                validate: dirty,
                chunk_bytes: SCAN_CHUNK_BYTES,
            };
            let mut full = false;
            let walked = scan::walk_batches(
                &segment.file,
                0,
                segment.size_bytes,
                options,
                |_, header, bytes| {
                    full = !mapped.note_producer(header, producers_max)
                        || (dirty && !mapped.note_keys(header, bytes));
                    match full {
                        true => ControlFlow::Break(()),
                        false => ControlFlow::Continue(()),
                    }
                },
            )
            .map_err(LogError::io("read", &segment.path))?;
            report.bytes_read += walked.position;
            throttle(walked.position);
            if full {
                mapped.full = true;
                tracing::info!(path = %segment.path.display(), keys = mapped.map.len(),
                    "the cleaner's key map is full; this pass cleans the segments before this one");
                break;
            }
            if walked.end != WalkEnd::End {
                mapped.damaged = true;
                tracing::warn!(path = %segment.path.display(), position = walked.position, end = ?walked.end,
                    "the cleaner found a damaged batch; this pass cleans the segments before this one");
                break;
            }
            mapped.segments = i + 1;
        }
        Ok(mapped)
    }
}

impl Mapped {
    /// Notes the batch as its producer's last so far. False when the producer is new
    /// and the producers' share of the budget is used up.
    fn note_producer(&mut self, header: &BatchHeader, producers_max: usize) -> bool {
        if !is_idempotent(header) {
            return true;
        }
        let known = self.producers.contains_key(&header.producer_id);
        if !known && self.producers.len() >= producers_max {
            return false;
        }
        self.producers
            .insert(header.producer_id, header.base_offset);
        true
    }

    /// Notes each keyed record of the batch as its key's latest. Transaction markers
    /// and transactional batches are not noted: a record of an aborted transaction
    /// must not remove an older committed one (their batches are kept whole). A batch
    /// whose records cannot be walked is not noted either (it is kept whole, and the
    /// older records of its keys stay). False when the map filled up.
    fn note_keys(&mut self, header: &BatchHeader, bytes: &[u8]) -> bool {
        if header.is_control() || header.is_transactional() {
            return true;
        }
        let mut refused = false;
        let map = &mut self.map;
        let _ = retain_records(bytes, |record| {
            if let Some(key) = record.key {
                refused |= map.note(key, record.offset).is_err();
            }
            true
        });
        !refused
    }

    /// Whether the batch must stay in the log even when none of its records does:
    /// it is its idempotent producer's last, which the producer state rebuilt from the
    /// log needs.
    fn producers_last(&self, header: &BatchHeader) -> bool {
        is_idempotent(header)
            && self.producers.get(&header.producer_id) == Some(&header.base_offset)
    }
}

impl<'a> GroupWriter<'a> {
    /// A writer for the group's cleaned segment in the staging directory; `None` when
    /// the group holds no batch at all.
    fn start(
        staging: &Path,
        segments: &[Planned],
        plan: &'a CleaningPlan,
        config: &CleanerConfig,
        now_ms: i64,
        mapped: &'a Mapped,
        throttle: &'a mut dyn FnMut(u64),
    ) -> Result<Option<GroupWriter<'a>>, LogError> {
        let Some(last) = segments.iter().rev().find(|s| s.size_bytes > 0) else {
            return Ok(None);
        };
        let base_offset = segments[0].base_offset;
        Ok(Some(GroupWriter {
            segment: Segment::create(staging, base_offset)?,
            buffer: Vec::new(),
            headers: Vec::new(),
            // Several segments become one even when no record goes.
            changed: segments.len() > 1,
            records_removed: 0,
            tombstones_removed: 0,
            tombstones_due_ms: None,
            bytes_written: 0,
            base_offset,
            end_offset: last.end_offset,
            cleaner: &plan.cleaner,
            horizon_ms: config.tombstone_horizon_ms(now_ms),
            index_interval_bytes: plan.index_interval_bytes,
            now_ms,
            mapped,
            throttle,
        }))
    }

    /// Walks the group's batches, writes what stays, and seals and syncs the staged
    /// segment (or deletes it when nothing changed). Also the earliest horizon of a
    /// tombstone it keeps.
    fn write(
        mut self,
        segments: &[Planned],
        staging: &Path,
        report: &mut CleanReport,
    ) -> Result<(Outcome, Option<i64>), LogError> {
        let mut failed = None;
        for planned in segments {
            let options = WalkOptions {
                validate: true,
                chunk_bytes: SCAN_CHUNK_BYTES,
            };
            let walked = scan::walk_batches(
                &planned.file,
                0,
                planned.size_bytes,
                options,
                |_, header, bytes| match self.batch(header, bytes) {
                    Ok(()) => ControlFlow::Continue(()),
                    Err(e) => {
                        failed = Some(e);
                        ControlFlow::Break(())
                    }
                },
            )
            .map_err(LogError::io("read", &planned.path))?;
            report.bytes_read += walked.position;
            (self.throttle)(walked.position);
            if let Some(e) = failed.take() {
                self.discard()?;
                return Err(e);
            }
            if walked.end != WalkEnd::End {
                tracing::warn!(path = %planned.path.display(), position = walked.position, end = ?walked.end,
                    "the cleaner found a damaged batch; its group is not cleaned");
                self.discard()?;
                return Ok((Outcome::Damaged, None));
            }
        }
        self.flush()?;
        report.bytes_written += self.bytes_written;
        let due = self.tombstones_due_ms;
        Ok((self.finish(segments, staging)?, due))
    }

    /// Decides on one batch and buffers what stays of it.
    fn batch(&mut self, header: &BatchHeader, bytes: &[u8]) -> Result<(), LogError> {
        let bound =
            header.base_offset == self.base_offset || header.last_offset() + 1 == self.end_offset;
        if header.is_control() || header.is_transactional() {
            return self.keep(bytes);
        }
        let (map, cleaner, now_ms) = (&self.mapped.map, self.cleaner, self.now_ms);
        let mut tombstones = 0u64;
        let mut due = self.tombstones_due_ms;
        let retained = retain_records(bytes, |record| {
            let Some(key) = record.key else {
                return true; // a record without a key cannot be compacted
            };
            if map.superseded(key, record.offset) {
                return false;
            }
            if !record.tombstone {
                return true;
            }
            let horizon_ms = cleaner.horizon_ms(record.offset);
            let expired = horizon_ms.is_some_and(|h| h < now_ms);
            tombstones += u64::from(expired);
            if !expired {
                due = earliest(due, Some(horizon_ms.unwrap_or(self.horizon_ms)));
            }
            !expired
        });
        self.tombstones_due_ms = due;
        let records = u64::try_from(header.records_count).unwrap_or(0);
        match retained {
            Ok(Retained::Whole) => self.keep(bytes),
            Err(error) => {
                tracing::warn!(base_offset = header.base_offset, %error, "the cleaner keeps a batch it cannot look into");
                self.keep(bytes)
            }
            Ok(Retained::Rewritten(rewritten)) => {
                let kept = BatchHeader::parse(&rewritten).map_or(0, |h| h.records_count);
                self.removed(
                    records.saturating_sub(u64::try_from(kept).unwrap_or(0)),
                    tombstones,
                );
                self.keep(&rewritten)
            }
            Ok(Retained::Empty) => {
                self.removed(records, tombstones);
                match bound || self.mapped.producers_last(header) {
                    true => self.keep(&emptied(bytes).expect("a batch that passed its checks")),
                    false => Ok(()),
                }
            }
        }
    }

    fn removed(&mut self, records: u64, tombstones: u64) {
        self.changed = true;
        self.records_removed += records;
        self.tombstones_removed += tombstones;
    }

    fn keep(&mut self, batch: &[u8]) -> Result<(), LogError> {
        let header = BatchHeader::parse(batch).expect("a batch that passed its checks");
        self.buffer.extend_from_slice(batch);
        self.headers.push(header);
        match self.buffer.len() >= CLEANER_WRITE_BUFFER_BYTES {
            true => self.flush(),
            false => Ok(()),
        }
    }

    fn flush(&mut self) -> Result<(), LogError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        self.segment.append(
            &self.buffer,
            &self.headers,
            self.index_interval_bytes,
            self.now_ms,
        )?;
        self.bytes_written += self.buffer.len() as u64;
        (self.throttle)(self.buffer.len() as u64);
        self.buffer.clear();
        self.headers.clear();
        Ok(())
    }

    /// Seals and syncs the staged segment; deletes it when nothing changed, or when
    /// it would not end where the group did (which would break the log's chain).
    fn finish(mut self, segments: &[Planned], staging: &Path) -> Result<Outcome, LogError> {
        if !self.changed {
            self.discard()?;
            return Ok(Outcome::Unchanged);
        }
        if self.segment.end_offset() != self.end_offset {
            tracing::error!(path = %self.segment.paths().log.display(), end_offset = self.segment.end_offset(),
                expected = self.end_offset, "a cleaned segment does not end where its group did; not swapping it in");
            self.discard()?;
            return Ok(Outcome::Damaged);
        }
        let sealed = self.segment.seal()?;
        sealed.sync_now(staging)?;
        let last = segments.last().expect("a group has segments");
        Ok(Outcome::Staged(StagedGroup {
            base_offset: segments[0].base_offset,
            end_bound: last.end_offset.max(last.base_offset + 1),
            replaces: segments.iter().map(|s| (s.base_offset, s.id)).collect(),
            records_removed: self.records_removed,
            tombstones_removed: self.tombstones_removed,
        }))
    }

    fn discard(self) -> Result<(), LogError> {
        self.segment.delete()
    }
}
