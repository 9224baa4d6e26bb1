//! Swapping a cleaned segment in for the segments it replaces, so that a crash at any
//! moment leaves either the old segments or the cleaned one, never a mix.
//!
//! The cleaned segment of a group replacing the segments whose base offsets lie in
//! `[base, end)` is staged as `.cleaning/<base>.log` (with its `.index` and
//! `.timeindex`), synced. Under the log's lock, once the group's segments are checked
//! to be the ones planned:
//! 1. rename `.cleaning/<base>.log` to `<base>.<end>.swap` in the partition directory
//!    and sync the directory: the commit point, after which the swap is finished even
//!    across a crash;
//! 2. move the old segments' files (each `.log` first) into `.cleaning/replaced/`,
//!    move the staged indexes to `<base>.index` and `<base>.timeindex`, and sync the
//!    directory;
//! 3. rename `<base>.<end>.swap` to `<base>.log`, and leave the directory to the next
//!    sync set (until then a crash leaves the `.swap`, which recovery finishes);
//! 4. load the new segment (adopting the moved indexes) in place of the old ones.
//!
//! Moving the old files aside is a rename; deleting them, which frees their extents and
//! took several milliseconds per segment on this machine's disk, happens when the pass
//! is over, without the log's lock (`CleanedPass::remove_leftovers`). The lock is held
//! for two directory syncs and a few renames per group.
//!
//! The aborted-transaction indexes (`.txnindex`) of the replaced segments stay in
//! place through steps 1 and 2 and are merged into `<base>.txnindex` before step 3;
//! recovery merges them the same way before it renames the swap.
//!
//! What a crash leaves behind is finished at the next open by `staging`.

use super::staging::{crash_point, rename, swap_name, REPLACED_DIR, STAGING_DIR};
use super::StagedGroup;
use crate::log::Log;
use crate::segment::load::LoadOptions;
use crate::segment::{Segment, SegmentPaths};
use crate::{txn_index, LogError};
use std::io;
use std::path::Path;

impl Log {
    /// Swaps a staged group in (steps 1 to 4 of the module doc). A failure before the
    /// commit point leaves the log as it was; after it, the log is poisoned and the
    /// next open finishes the swap.
    pub(super) fn swap_in(&mut self, group: &StagedGroup, now_ms: i64) -> Result<(), LogError> {
        let staged = SegmentPaths::new(&self.dir.join(STAGING_DIR), group.base_offset);
        let swap = self.dir.join(swap_name(group.base_offset, group.end_bound));
        crash_point()?;
        rename(&staged.log, &swap)?;
        let finished = self.finish_swap(group, &staged, &swap, now_ms);
        if finished.is_err() {
            self.poison();
        }
        finished
    }

    fn finish_swap(
        &mut self,
        group: &StagedGroup,
        staged: &SegmentPaths,
        swap: &Path,
        now_ms: i64,
    ) -> Result<(), LogError> {
        self.sync_dir()?;
        crash_point()?;
        let replaced = self.dir.join(STAGING_DIR).join(REPLACED_DIR);
        for (base_offset, _) in &group.replaces {
            move_aside(self.segments[base_offset].paths(), &replaced)?;
            crash_point()?;
        }
        let target = SegmentPaths::new(&self.dir, group.base_offset);
        rename(&staged.index, &target.index)?;
        rename(&staged.time_index, &target.time_index)?;
        let bases: Vec<i64> = group.replaces.iter().map(|(base, _)| *base).collect();
        let aborted = txn_index::merge_files(&self.dir, &bases, group.base_offset)?;
        crash_point()?;
        self.sync_dir()?;
        rename(swap, &target.log)?;
        crash_point()?;
        self.pending.changed_dir();
        let options = LoadOptions {
            full_scan: false,
            sealed: true,
            index_interval_bytes: self.config.index_interval_bytes,
            now_ms,
        };
        let (mut segment, _) = Segment::load(&self.dir, group.base_offset, options)?;
        segment.thin_indexes();
        for (base_offset, _) in &group.replaces {
            let old = self
                .segments
                .remove(base_offset)
                .expect("the group's segments were checked");
            self.size_bytes -= old.size_bytes();
            self.repair.remove(base_offset);
            self.aborted.remove(base_offset);
        }
        if !aborted.is_empty() {
            self.aborted.insert(group.base_offset, aborted);
        }
        self.size_bytes += segment.size_bytes();
        self.segments.insert(group.base_offset, segment);
        Ok(())
    }
}

/// Moves a replaced segment's files (the `.log` first) into `replaced`.
fn move_aside(paths: &SegmentPaths, replaced: &Path) -> Result<(), LogError> {
    for path in [&paths.log, &paths.index, &paths.time_index, &paths.repair] {
        let name = path.file_name().expect("a segment file has a name");
        match std::fs::rename(path, replaced.join(name)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            other => other.map_err(LogError::io("rename", path))?,
        }
    }
    Ok(())
}
