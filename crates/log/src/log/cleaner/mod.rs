//! The log cleaner of compacted topics, at the log level: one cleaning pass rewrites
//! the oldest sealed segments so that only the latest record of each key survives,
//! every survivor at its original offset. `docs/compaction.md` tells the whole story.
//!
//! A pass has three steps, so that the log's lock is held only for the cheap ones:
//! 1. [`Log::plan_cleaning`], under the lock: picks the cleanable segments (sealed,
//!    durable, never the active one, a prefix of the log from its start) and hands out
//!    their files in a [`CleaningPlan`].
//! 2. [`CleaningPlan::stage`], without the lock (`stage.rs`): reads the dirty segments'
//!    keys into an [`OffsetMap`](crate::compaction::OffsetMap), then writes the cleaned
//!    segments, grouped, into `<partition dir>/.cleaning/`.
//! 3. [`Log::install_next_group`], under the lock, once per group (`swap.rs`; the
//!    staging directory and what a crash leaves are `staging.rs`'s): swaps
//!    the group's cleaned segment in, crash-safely, if the group's segments are still
//!    the ones planned; then [`Log::finish_cleaning`], under the lock, and
//!    [`CleanedPass::remove_leftovers`] without it, which deletes the replaced files.
//!
//! [`Log::clean`] runs them in a row for a caller that holds the log alone.
//!
//! The log keeps the cleaner's state (`checkpoint.rs`): the first dirty offset, before
//! which the segments were cleaned, so that a pass reads only the keys of the segments
//! from there on (and rewrites the clean ones against them); and when each part of the
//! clean segments was first cleaned, which decides when its tombstones go. The state is
//! checkpointed after each pass, so a restart does not read every key again.
//!
//! One pass at a time per log: a plan taken while another is pending is refused.

pub(crate) mod checkpoint;
mod stage;
pub(crate) mod staging;
mod swap;
#[cfg(test)]
mod tests;

use checkpoint::CleanerState;

use crate::config::SEGMENT_OFFSETS_LIMIT;
use crate::log::Log;
use crate::LogError;
use headway_base::Offset;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Settings of a cleaning pass. The broker derives them from topic configs
/// (`delete.retention.ms`, `min.compaction.lag.ms`) and its cleaner settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanerConfig {
    /// Memory for the pass's key map (and, one eighth of it, for the idempotent
    /// producers it tracks). When the map is full, the pass stops reading keys at the
    /// segment boundary before and cleans only up to there.
    pub map_bytes_max: usize,
    /// A tombstone (a record with a null value) that is its key's latest record is
    /// removed by a pass that runs more than this long after the pass that first
    /// cleaned it (its horizon, `checkpoint.rs`).
    pub delete_retention_ms: u64,
    /// A segment whose newest record is younger than `now - min_compaction_lag_ms` is
    /// not cleaned (nor any after it).
    pub min_compaction_lag_ms: u64,
    /// The pass takes dirty segments until they hold this many bytes (at least one
    /// segment), which bounds its work: it reads the clean segments before them twice
    /// and the dirty ones twice, and writes about as much as it reads once.
    pub dirty_bytes_max: u64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            map_bytes_max: 128 << 20,
            delete_retention_ms: 24 * 3600 * 1000,
            min_compaction_lag_ms: 0,
            dirty_bytes_max: u64::MAX,
        }
    }
}

impl CleanerConfig {
    /// The horizon of the tombstones a pass at `now_ms` cleans for the first time.
    fn tombstone_horizon_ms(&self, now_ms: i64) -> i64 {
        let retention = i64::try_from(self.delete_retention_ms).unwrap_or(i64::MAX);
        now_ms.saturating_add(retention)
    }
}

/// What a cleaning pass did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanReport {
    /// Segments replaced by cleaned ones.
    pub segments_replaced: usize,
    /// Cleaned segments swapped in (one per group of replaced segments).
    pub segments_installed: usize,
    /// Groups with nothing to remove: their segments stay as they were.
    pub groups_unchanged: usize,
    /// Groups not swapped in because their segments changed meanwhile (retention or
    /// DeleteRecords removed some), or because an earlier group was not swapped in.
    pub groups_aborted: usize,
    /// Bytes of segments read (keys, then the rewrite).
    pub bytes_read: u64,
    /// Bytes of cleaned segments written (staged; unchanged groups included).
    pub bytes_written: u64,
    /// Records removed from the swapped-in segments, tombstones included.
    pub records_removed: u64,
    /// Tombstones removed because their horizon had passed.
    pub tombstones_removed: u64,
    /// The key map filled up: the pass cleaned less than it planned.
    pub map_full: bool,
    /// A damaged batch stopped the pass at its segment (the log's reads report it).
    pub damaged: bool,
    /// Dirty bytes over all sealed bytes, before and after the pass.
    pub dirty_ratio_before: f64,
    pub dirty_ratio_after: f64,
    /// Where the next pass starts reading keys.
    pub first_dirty_offset: Offset,
    /// When the earliest tombstone kept becomes removable (after the pass).
    pub tombstones_due_ms: Option<i64>,
}

/// A sealed segment as the plan saw it.
#[derive(Debug, Clone)]
pub(crate) struct Planned {
    pub base_offset: i64,
    pub end_offset: i64,
    pub size_bytes: u64,
    /// The segment's identity ([`Segment::id`](crate::segment::Segment)).
    pub id: u64,
    /// Held for the whole pass: the cache may close its own handle meanwhile.
    pub file: Arc<File>,
    pub path: PathBuf,
}

/// Marks the log's cleaner as busy while it lives.
#[derive(Debug)]
struct Busy(Arc<AtomicBool>);

impl Busy {
    fn take(flag: &Arc<AtomicBool>) -> Option<Busy> {
        flag.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| Busy(flag.clone()))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// The segments a pass cleans, taken under the log's lock; staged without it.
#[derive(Debug)]
pub struct CleaningPlan {
    dir: PathBuf,
    /// Cleanable segments from the log's start, ascending.
    segments: Vec<Planned>,
    /// The log's cleaner state when the plan was taken.
    cleaner: CleanerState,
    index_interval_bytes: u32,
    segment_bytes_max: u64,
    dirty_ratio_before: f64,
    busy: Busy,
}

/// One group's cleaned segment, staged in the staging directory.
#[derive(Debug)]
pub(crate) struct StagedGroup {
    pub base_offset: i64,
    /// The group replaces the segments whose base offsets lie in `base_offset..end_bound`.
    pub end_bound: i64,
    /// The segments it replaces: base offsets and the identities the plan saw.
    pub replaces: Vec<(i64, u64)>,
    pub records_removed: u64,
    pub tombstones_removed: u64,
}

/// The cleaned segments of a pass, staged and ready to be swapped in.
#[derive(Debug)]
pub struct StagedCleaning {
    dir: PathBuf,
    /// The groups not yet swapped in, in offset order.
    groups: std::collections::VecDeque<StagedGroup>,
    /// Where the next pass starts reading keys, once every group is swapped in.
    first_dirty_offset: Option<i64>,
    /// The horizon of the tombstones this pass cleans for the first time.
    horizon_ms: i64,
    /// The earliest horizon of a tombstone the staged groups keep.
    tombstones_due_ms: Option<i64>,
    /// A group was not swapped in and ended the pass.
    stopped: bool,
    now_ms: i64,
    report: CleanReport,
    busy: Busy,
}

/// A pass whose groups are all swapped in (or skipped): its report, and the staging
/// directory, which holds the replaced segments' files until
/// [`CleanedPass::remove_leftovers`] deletes them.
#[derive(Debug)]
pub struct CleanedPass {
    dir: PathBuf,
    report: CleanReport,
    /// The log's cleaner state to checkpoint, when the pass changed it.
    checkpoint: Option<CleanerState>,
    _busy: Busy,
}

impl CleanedPass {
    pub fn report(&self) -> &CleanReport {
        &self.report
    }

    /// Checkpoints the log's cleaner state and deletes the staging directory with the
    /// replaced segments' files (what frees their disk space). Blocking: call it
    /// without the log's lock. The next pass can be planned once this is done (or the
    /// value dropped, which leaves the files to the next pass or the next open, and the
    /// checkpoint as it was).
    pub fn remove_leftovers(self) -> Result<CleanReport, LogError> {
        if let Some(state) = &self.checkpoint {
            state.store(&self.dir)?;
        }
        staging::remove_staging(&self.dir)?;
        Ok(self.report)
    }
}

impl Log {
    /// Plans a cleaning pass: the sealed and durable segments from the log's start,
    /// stopping before a segment marked for repair or younger than the compaction lag,
    /// with dirty segments up to `config.dirty_bytes_max`. Cheap: call it under the
    /// log's lock. `None` when there is nothing to clean, the log is poisoned, or
    /// another pass is pending.
    pub fn plan_cleaning(&self, config: &CleanerConfig, now_ms: i64) -> Option<CleaningPlan> {
        if self.poisoned {
            return None;
        }
        let busy = Busy::take(&self.cleaner_busy)?;
        let lag = i64::try_from(config.min_compaction_lag_ms).unwrap_or(i64::MAX);
        let lag_cutoff_ms = now_ms.saturating_sub(lag);
        let mut segments = Vec::new();
        let mut dirty_bytes = 0u64;
        for segment in self.segments.values().take(self.durable_sealed_segments()) {
            let too_young = config.min_compaction_lag_ms > 0
                && segment
                    .max_timestamp_ms()
                    .is_some_and(|t| t > lag_cutoff_ms);
            if too_young || self.repair.contains(&segment.base_offset()) {
                break;
            }
            if segment.base_offset() >= self.cleaner.first_dirty_offset {
                let over = dirty_bytes + segment.size_bytes() > config.dirty_bytes_max;
                if dirty_bytes > 0 && over {
                    break;
                }
                dirty_bytes += segment.size_bytes();
            }
            // A file that cannot be opened now ends the plan here; the next pass retries.
            let Ok(file) = segment.log_file() else {
                break;
            };
            segments.push(Planned {
                base_offset: segment.base_offset(),
                end_offset: segment.end_offset(),
                size_bytes: segment.size_bytes(),
                id: segment.id(),
                file,
                path: segment.paths().log.clone(),
            });
        }
        if segments.is_empty() {
            return None;
        }
        Some(CleaningPlan {
            dir: self.dir.clone(),
            segments,
            cleaner: self.cleaner.clone(),
            index_interval_bytes: self.config.index_interval_bytes,
            segment_bytes_max: self.config.segment_bytes_max,
            dirty_ratio_before: self.dirty_ratio(),
            busy,
        })
    }

    /// Swaps the next staged group in, crash-safely (`swap.rs`); true while groups
    /// remain. Under the log's lock, for about three directory syncs: a caller that
    /// shares the log takes the lock once per group. A group whose segments all went
    /// meanwhile is skipped; one whose segments changed otherwise ends the pass there
    /// (a later group may have removed a tombstone whose older records the skipped
    /// group still holds). A failure after a group's commit point poisons the log: the
    /// next open finishes the swap.
    pub fn install_next_group(&mut self, staged: &mut StagedCleaning) -> Result<bool, LogError> {
        if self.poisoned {
            return Err(LogError::Poisoned {
                path: self.dir.clone(),
            });
        }
        let Some(group) = staged.groups.pop_front().filter(|_| !staged.stopped) else {
            return Ok(false);
        };
        let report = &mut staged.report;
        match self.group_state(&group) {
            GroupState::Gone => report.groups_aborted += 1,
            GroupState::Changed => {
                report.groups_aborted += 1 + staged.groups.len();
                staged.stopped = true;
            }
            GroupState::AsPlanned => {
                self.swap_in(&group, staged.now_ms)?;
                report.segments_replaced += group.replaces.len();
                report.segments_installed += 1;
                report.records_removed += group.records_removed;
                report.tombstones_removed += group.tombstones_removed;
            }
        }
        Ok(!staged.stopped && !staged.groups.is_empty())
    }

    /// Ends a pass whose groups were installed (cheap, under the log's lock): moves the
    /// first dirty offset when every group is in, notes the horizon of what it cleaned
    /// first, and reports. Groups not installed yet count as aborted.
    pub fn finish_cleaning(&mut self, staged: StagedCleaning) -> CleanedPass {
        let mut report = staged.report;
        let complete = !staged.stopped && staged.groups.is_empty();
        if !staged.stopped {
            report.groups_aborted += staged.groups.len();
        }
        let before = self.cleaner.clone();
        if let Some(first_dirty) = staged.first_dirty_offset.filter(|_| complete) {
            self.cleaner
                .cleaned(first_dirty, staged.horizon_ms, staged.now_ms);
        }
        // A pass that did not finish leaves earlier tombstones' due time standing.
        self.cleaner.tombstones_due_ms = match complete {
            true => staged.tombstones_due_ms,
            false => earliest(before.tombstones_due_ms, staged.tombstones_due_ms),
        };
        self.cleaner.forget_below(self.log_start_offset().value());
        report.dirty_ratio_after = self.dirty_ratio();
        report.first_dirty_offset = Offset::new(self.cleaner.first_dirty_offset);
        report.tombstones_due_ms = self.cleaner.tombstones_due_ms;
        tracing::debug!(dir = %self.dir.display(), ?report, "cleaning pass done");
        CleanedPass {
            dir: staged.dir,
            report,
            checkpoint: (self.cleaner != before).then(|| self.cleaner.clone()),
            _busy: staged.busy,
        }
    }

    /// Installs every staged group and finishes the pass, deleting the leftovers, all
    /// under one borrow: for a caller that holds the log alone.
    pub fn install_cleaned(&mut self, mut staged: StagedCleaning) -> Result<CleanReport, LogError> {
        while self.install_next_group(&mut staged)? {}
        self.finish_cleaning(staged).remove_leftovers()
    }

    /// One whole cleaning pass (plan, stage, install) for a caller that holds the log
    /// alone. An empty report when there is nothing to clean.
    pub fn clean(&mut self, config: &CleanerConfig, now_ms: i64) -> Result<CleanReport, LogError> {
        let Some(plan) = self.plan_cleaning(config, now_ms) else {
            return Ok(CleanReport {
                dirty_ratio_before: self.dirty_ratio(),
                dirty_ratio_after: self.dirty_ratio(),
                first_dirty_offset: Offset::new(self.cleaner.first_dirty_offset),
                tombstones_due_ms: self.cleaner.tombstones_due_ms,
                ..CleanReport::default()
            });
        };
        let staged = plan.stage(config, now_ms, &mut |_| {})?;
        self.install_cleaned(staged)
    }

    /// The newest record timestamp of the first dirty segment a pass could take (sealed
    /// and durable), if there is one: once it is older than `max.compaction.lag.ms`,
    /// every record of that segment has waited at least that long to be compacted.
    pub fn first_dirty_max_timestamp(&self) -> Option<i64> {
        self.segments
            .values()
            .take(self.durable_sealed_segments())
            .find(|segment| segment.base_offset() >= self.cleaner.first_dirty_offset)
            .and_then(|segment| segment.max_timestamp_ms())
    }

    /// Bytes of sealed segments at or past the first dirty offset, over all sealed
    /// bytes: the share of the log a pass would read keys from. 0 without sealed bytes.
    pub fn dirty_ratio(&self) -> f64 {
        let sealed = self.segments.values().take(self.segments.len() - 1);
        let (mut dirty, mut total) = (0u64, 0u64);
        for segment in sealed {
            total += segment.size_bytes();
            if segment.base_offset() >= self.cleaner.first_dirty_offset {
                dirty += segment.size_bytes();
            }
        }
        match total {
            0 => 0.0,
            _ => dirty as f64 / total as f64,
        }
    }

    /// Where the next cleaning pass starts reading keys.
    pub fn first_dirty_offset(&self) -> Offset {
        Offset::new(self.cleaner.first_dirty_offset)
    }

    /// When a tombstone the cleaner kept becomes removable: a pass then removes it, even
    /// when nothing is dirty.
    pub fn tombstones_due_ms(&self) -> Option<i64> {
        self.cleaner.tombstones_due_ms
    }

    /// Sealed segments whose files are durable: all but the active segment and, until
    /// a sync made it durable, the one sealed last.
    fn durable_sealed_segments(&self) -> usize {
        let sealed = self.segments.len() - 1;
        let unsynced = self.last_sealed.as_ref().is_some_and(|s| !s.is_durable());
        sealed.saturating_sub(usize::from(unsynced))
    }

    /// Whether the segments a staged group replaces are still the ones planned.
    fn group_state(&self, group: &StagedGroup) -> GroupState {
        let active = self.active().base_offset();
        let present: Vec<(i64, u64)> = self
            .segments
            .range(group.base_offset..group.end_bound)
            .map(|(base, segment)| (*base, segment.id()))
            .collect();
        if present.is_empty() {
            return GroupState::Gone;
        }
        let same = present.len() == group.replaces.len()
            && present
                .iter()
                .zip(&group.replaces)
                .all(|((base, id), (planned, planned_id))| {
                    base == planned
                        && id == planned_id
                        && *base != active
                        && !self.repair.contains(base)
                });
        match same {
            true => GroupState::AsPlanned,
            false => GroupState::Changed,
        }
    }
}

enum GroupState {
    AsPlanned,
    /// Every segment of the group was deleted (by retention or DeleteRecords).
    Gone,
    Changed,
}

impl CleaningPlan {
    /// The base offsets of the planned segments.
    pub fn segment_base_offsets(&self) -> Vec<Offset> {
        self.segments
            .iter()
            .map(|s| Offset::new(s.base_offset))
            .collect()
    }
}

/// Consecutive planned segments that are cleaned into one segment: at most
/// `segment_bytes_max` bytes before cleaning, and offsets that one segment's index
/// entries can address.
fn groups(segments: &[Planned], segment_bytes_max: u64) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let (mut start, mut size_bytes) = (0, 0u64);
    for (i, segment) in segments.iter().enumerate() {
        let span = segment.end_offset - 1 - segments[start].base_offset;
        let full = size_bytes + segment.size_bytes > segment_bytes_max;
        if i > start && (full || span > SEGMENT_OFFSETS_LIMIT) {
            groups.push(start..i);
            (start, size_bytes) = (i, 0);
        }
        size_bytes += segment.size_bytes;
    }
    if start < segments.len() {
        groups.push(start..segments.len());
    }
    groups
}

/// The earlier of two times, either of which may be absent.
fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
