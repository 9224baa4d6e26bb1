//! Opening a partition directory: finding the segments, deciding how much to check,
//! repairing what a crash left behind, and the clean-shutdown marker.
//!
//! After a clean shutdown (`.clean_shutdown` present) every file was synced, so each
//! segment is adopted with a cheap check of its indexes and tail. After a crash, the
//! bytes that may not have reached the disk are in the last two segments only: the
//! active one, and the one sealed by the latest roll, because a roll syncs the
//! segment sealed before it unless a sync set already did (see `Log::roll`). Those
//! two are scanned in full and truncated after their last valid batch. If the
//! second-to-last then does not end where the last begins, the last holds only
//! unacknowledged data (acknowledging any of it needed a sync set that also synced
//! the segment before it) and is deleted. The repaired segments are synced, because
//! after a process crash their unsynced bytes may still sit in the page cache only.
//!
//! A segment with a `.repair` marker (left by a read that found a damaged batch in it,
//! or by an operator) is scanned in full whatever the shutdown was: it is truncated
//! before its first invalid batch, its indexes are rebuilt, and the marker is removed.
//!
//! First of all, a swap of cleaned segments that a crash interrupted is finished or
//! forgotten (`log/cleaner/staging.rs`): the cleaner's staging directory is deleted, and
//! each committed `.swap` file replaces the segments it covers.

use crate::file_names::{parse_file_name, INDEX_SUFFIX, LOG_SUFFIX, REPAIR_SUFFIX};
use crate::file_names::{TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX};
use crate::log::cleaner::staging::finish_interrupted_swaps;
use crate::segment::load::LoadOptions;
use crate::segment::{Segment, SegmentPaths};
use crate::{LogConfig, LogError};
use headway_base::{durable_file, Offset};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;

/// What [`crate::Log::open`] found and repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub segments: usize,
    /// False when the clean-shutdown marker was missing and the tail was scanned.
    pub clean_shutdown: bool,
    /// Bytes cut from torn or corrupt tails.
    pub truncated_bytes: u64,
    /// Index files (offset or time) that were missing or damaged and rebuilt.
    pub rebuilt_indexes: usize,
    /// Segments marked for repair (`Log::mark_for_repair`) that were scanned in full.
    pub repaired_segments: usize,
    pub log_start_offset: Offset,
    pub log_end_offset: Offset,
    /// Where a segment before the last was cut (a damaged batch found by its scan)
    /// while later segments were kept: the log holds nothing from here to the next
    /// segment. A replica cuts its log here before it follows anyone, and fetches the
    /// rest again (`Partition::set_role`); a broker alone keeps the later segments.
    pub hole_at: Option<Offset>,
}

/// Written by `Log::close` after everything was synced; removed by the next open.
pub(crate) const CLEAN_SHUTDOWN_FILE: &str = ".clean_shutdown";

/// Segments scanned in full after a crash: the active one and the last sealed one.
const SEGMENTS_SCANNED_AFTER_CRASH: usize = 2;

pub(crate) struct Recovered {
    /// The clean-shutdown marker is still there (see `Log::append`).
    pub clean_marker: bool,
    pub segments: BTreeMap<i64, Segment>,
    pub report: RecoveryReport,
}

/// Opens (creating if needed) the directory and recovers its segments.
pub(crate) fn recover(dir: &Path, config: &LogConfig, now_ms: i64) -> Result<Recovered, LogError> {
    create_dir_durably(dir)?;
    // Before the segments are listed: a cleaning swap interrupted by a crash is
    // finished, so that the list holds either the old segments or the cleaned one.
    let swaps = finish_interrupted_swaps(dir)?;
    let marker = dir.join(CLEAN_SHUTDOWN_FILE);
    let marked = marker
        .try_exists()
        .map_err(LogError::io("check", &marker))?;
    let bases = list_segments(dir)?;
    // A new log has nothing a crash could have damaged.
    let clean = marked || bases.is_empty();
    let mut report = RecoveryReport {
        clean_shutdown: clean,
        ..RecoveryReport::default()
    };
    let mut segments = load_segments(dir, &bases, clean, config, now_ms, &mut report)?;
    let created = segments.is_empty();
    if created {
        segments.insert(0, Segment::create(dir, 0)?);
    }
    if !clean {
        repair_chain(&mut segments, &mut report)?;
        for segment in segments.values().rev().take(SEGMENTS_SCANNED_AFTER_CRASH) {
            segment.sync_files()?;
        }
    }
    let mut active = segments.last_entry().expect("a log has a segment");
    active.get_mut().open_writers()?;
    report.log_end_offset = Offset::new(active.get().end_offset());
    // A log opened after a clean shutdown and adopted as it was keeps its marker: its
    // files are still exactly what the close synced, so a crash before the first
    // append leaves a clean log again, and the next start skips the scan. The first
    // append removes the marker (`Log::append`). Anything changed here (a repair, a
    // rebuilt index, a finished swap, a new segment) removes it now.
    let untouched = report.truncated_bytes == 0
        && report.rebuilt_indexes == 0
        && report.repaired_segments == 0
        && swaps == 0
        && !created;
    let keeps_marker = marked && untouched;
    if marked && !keeps_marker {
        std::fs::remove_file(&marker).map_err(LogError::io("remove", &marker))?;
    }
    if !keeps_marker {
        // Makes the marker's removal, new segments and deleted files durable before
        // anything is appended: a crash from now on must be detected as one.
        durable_file::sync_dir(dir)?;
    }
    report.segments = segments.len();
    // A cut before the last segment that the chain's repair took the later segments
    // after (a crash's torn tail) left no hole.
    let end = segments.values().last().map(Segment::end_offset);
    report.hole_at = report.hole_at.filter(|at| Some(at.value()) != end);
    report.log_start_offset = Offset::new(*segments.keys().next().expect("a log has a segment"));
    Ok(Recovered {
        segments,
        report,
        clean_marker: keeps_marker,
    })
}

/// Creates `dir` and any missing ancestors, syncing each new directory's parent so
/// that the new entries survive a crash (acknowledged data in a directory whose own
/// entry was lost would be lost with it).
fn create_dir_durably(dir: &Path) -> Result<(), LogError> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(LogError::io("create directory", dir))?;
    for created in missing.iter().rev() {
        let parent = created
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        durable_file::sync_dir(parent)?;
    }
    Ok(())
}

fn load_segments(
    dir: &Path,
    bases: &[i64],
    clean: bool,
    config: &LogConfig,
    now_ms: i64,
    report: &mut RecoveryReport,
) -> Result<BTreeMap<i64, Segment>, LogError> {
    let scan_from = match clean {
        true => bases.len(),
        false => bases.len().saturating_sub(SEGMENTS_SCANNED_AFTER_CRASH),
    };
    let mut segments = BTreeMap::new();
    for (i, &base) in bases.iter().enumerate() {
        let repair = SegmentPaths::new(dir, base).repair;
        let marked = repair
            .try_exists()
            .map_err(LogError::io("check", &repair))?;
        let options = LoadOptions {
            full_scan: i >= scan_from || marked,
            sealed: i + 1 < bases.len(),
            index_interval_bytes: config.index_interval_bytes,
            now_ms,
        };
        let (segment, load) = Segment::load(dir, base, options)?;
        if load.truncated_bytes > 0 && i + 1 < bases.len() && report.hole_at.is_none() {
            report.hole_at = Some(Offset::new(segment.end_offset()));
        }
        report.truncated_bytes += load.truncated_bytes;
        report.rebuilt_indexes += load.rebuilt_indexes;
        if marked {
            // The scan synced what it truncated and rebuilt; the directory sync at
            // the end of the open makes the marker's removal durable.
            tracing::warn!(path = %segment.paths().log.display(), truncated_bytes = load.truncated_bytes,
                end_offset = segment.end_offset(), "segment marked for repair was scanned and repaired");
            std::fs::remove_file(&repair).map_err(LogError::io("remove", &repair))?;
            report.repaired_segments += 1;
        }
        segments.insert(base, segment);
    }
    warn_about_gaps(&segments);
    Ok(segments)
}

/// Deletes trailing segments that do not start where the segment before them ends:
/// after a crash they hold only data that was never acknowledged.
fn repair_chain(
    segments: &mut BTreeMap<i64, Segment>,
    report: &mut RecoveryReport,
) -> Result<(), LogError> {
    while segments.len() >= 2 {
        let mut newest = segments.values().rev();
        let last = newest.next().expect("two segments");
        let previous = newest.next().expect("two segments");
        if previous.end_offset() == last.base_offset() {
            return Ok(());
        }
        tracing::warn!(path = %last.paths().log.display(), previous_end_offset = previous.end_offset(),
            "the segment before the last one lost its tail in a crash; deleting the last segment");
        let (_, last) = segments.pop_last().expect("two segments");
        report.truncated_bytes += last.size_bytes();
        last.delete()?;
    }
    Ok(())
}

fn warn_about_gaps(segments: &BTreeMap<i64, Segment>) {
    let mut pairs = segments.values().zip(segments.values().skip(1));
    if let Some((previous, next)) = pairs.find(|(p, n)| p.end_offset() != n.base_offset()) {
        tracing::warn!(path = %previous.paths().log.display(), end_offset = previous.end_offset(),
            next_base_offset = next.base_offset(), "segments do not chain; reads skip the gap");
    }
}

/// The base offsets of the directory's segments, ascending. Deletes index (and
/// repair marker) files whose `.log` is gone (left by a crash during retention); ignores other files.
fn list_segments(dir: &Path) -> Result<Vec<i64>, LogError> {
    let mut logs = Vec::new();
    let mut indexes = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(LogError::io("list", dir))? {
        let entry = entry.map_err(LogError::io("list", dir))?;
        let name = entry.file_name();
        let Some((base, suffix)) = name.to_str().and_then(parse_file_name) else {
            continue;
        };
        match suffix {
            LOG_SUFFIX => logs.push(base),
            INDEX_SUFFIX | TIME_INDEX_SUFFIX | REPAIR_SUFFIX | TXN_INDEX_SUFFIX => {
                indexes.push((base, entry.path()))
            }
            _ => {}
        }
    }
    logs.sort_unstable();
    for (base, path) in indexes {
        if logs.binary_search(&base).is_err() {
            tracing::warn!(path = %path.display(), "deleting an index file without a segment");
            std::fs::remove_file(&path).map_err(LogError::io("delete", &path))?;
        }
    }
    Ok(logs)
}

/// Removes the clean-shutdown marker before the first write after an open that kept
/// it, and makes the removal durable: from now on a crash must be seen as one.
pub(crate) fn remove_clean_marker(dir: &Path) -> Result<(), LogError> {
    let marker = dir.join(CLEAN_SHUTDOWN_FILE);
    std::fs::remove_file(&marker).map_err(LogError::io("remove", &marker))?;
    Ok(durable_file::sync_dir(dir)?)
}

/// Writes the clean-shutdown marker and syncs it and the directory.
pub(crate) fn write_clean_marker(dir: &Path) -> Result<(), LogError> {
    let marker = dir.join(CLEAN_SHUTDOWN_FILE);
    let file = File::create(&marker).map_err(LogError::io("create", &marker))?;
    file.sync_all().map_err(LogError::io("sync", &marker))?;
    Ok(durable_file::sync_dir(dir)?)
}
