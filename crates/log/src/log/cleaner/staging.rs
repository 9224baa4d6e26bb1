//! The cleaner's files beside the segments, and what a crash leaves of them: the
//! staging directory `.cleaning` where a pass writes cleaned segments, the
//! `<base>.<end>.swap` file of a swap past its commit point (`swap`), and finishing
//! such a swap at the next open.
//!
//! At open, before the segments are listed ([`finish_interrupted_swaps`]): the staging
//! directory is deleted (a swap that had not reached its commit point is forgotten),
//! and for each `<base>.<end>.swap` every segment file whose base offset lies in
//! `[base, end)` is deleted (`.log` files first; indexes too, since they may be the old
//! segment's), then the swap is renamed to `<base>.log`, whose indexes the load
//! rebuilds. Both are idempotent, so a crash during recovery is recovered the same way.

use crate::file_names::{file_name, parse_file_name};
use crate::file_names::{INDEX_SUFFIX, LOG_SUFFIX, REPAIR_SUFFIX, TIME_INDEX_SUFFIX};
use crate::{txn_index, LogError};
use headway_base::durable_file;
use std::io;
use std::path::{Path, PathBuf};

/// The staging directory inside a partition directory.
pub(crate) const STAGING_DIR: &str = ".cleaning";
/// Where the replaced segments' files wait, inside the staging directory.
pub(super) const REPLACED_DIR: &str = "replaced";

#[cfg(test)]
thread_local! {
    /// Steps of a swap (or of its recovery) this thread may still take; at zero the
    /// next step fails as if the process had died there. `None`: no limit. Lets tests
    /// stop a swap at every point without killing a process.
    pub(crate) static STEPS_LEFT: std::cell::Cell<Option<u32>> =
        const { std::cell::Cell::new(None) };
}

/// A point between two file operations of a swap, where a test may stop it.
pub(super) fn crash_point() -> Result<(), LogError> {
    #[cfg(test)]
    if let Some(left) = STEPS_LEFT.get() {
        if left == 0 {
            let stop = io::Error::other("simulated crash");
            return Err(LogError::io("stop", Path::new("a cleaning swap"))(stop));
        }
        STEPS_LEFT.set(Some(left - 1));
    }
    Ok(())
}

/// `<base, 20 digits>.<end, 20 digits>.swap`.
pub(super) fn swap_name(base_offset: i64, end_bound: i64) -> String {
    format!("{base_offset:020}.{end_bound:020}.swap")
}

/// The base offset and end bound of a swap file's name.
fn parse_swap_name(name: &str) -> Option<(i64, i64)> {
    let (base, end) = name.strip_suffix(".swap")?.split_once('.')?;
    let digits = |s: &str| s.len() == 20 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(base) || !digits(end) {
        return None;
    }
    let parsed = (base.parse().ok()?, end.parse().ok()?);
    (swap_name(parsed.0, parsed.1) == name).then_some(parsed)
}

fn remove_if_present(path: &Path) -> Result<(), LogError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other.map_err(LogError::io("delete", path)),
    }
}

pub(super) fn rename(from: &Path, to: &Path) -> Result<(), LogError> {
    std::fs::rename(from, to).map_err(LogError::io("rename", from))
}

/// An empty staging directory in `dir`, whatever an earlier pass left there.
pub(super) fn create_staging(dir: &Path) -> Result<PathBuf, LogError> {
    remove_staging(dir)?;
    let staging = dir.join(STAGING_DIR);
    let replaced = staging.join(REPLACED_DIR);
    std::fs::create_dir_all(&replaced).map_err(LogError::io("create directory", &replaced))?;
    Ok(staging)
}

/// Deletes the staging directory and what it holds, if present.
pub(super) fn remove_staging(dir: &Path) -> Result<(), LogError> {
    let staging = dir.join(STAGING_DIR);
    match std::fs::remove_dir_all(&staging) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other.map_err(LogError::io("delete", &staging)),
    }
}

/// Deletes the staging directory and finishes every committed swap in `dir` (see the
/// module doc). Returns how many swaps it finished.
pub(crate) fn finish_interrupted_swaps(dir: &Path) -> Result<usize, LogError> {
    remove_staging(dir)?;
    let mut swaps = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(LogError::io("list", dir))? {
        let entry = entry.map_err(LogError::io("list", dir))?;
        if let Some((base, end)) = entry.file_name().to_str().and_then(parse_swap_name) {
            swaps.push((base, end, entry.path()));
        }
    }
    swaps.sort_unstable();
    for (base_offset, end_bound, swap) in &swaps {
        let replaced = segment_files(dir, *base_offset..*end_bound)?;
        tracing::warn!(swap = %swap.display(), replaced = replaced.len(),
            "finishing a swap of cleaned segments that a crash interrupted");
        for path in replaced {
            remove_if_present(&path)?;
            crash_point()?;
        }
        // The cleaned segment holds the replaced segments' markers, so their entries.
        let indexed = txn_index::files_in(dir, *base_offset..*end_bound)?;
        if !indexed.is_empty() {
            txn_index::merge_files(dir, &indexed, *base_offset)?;
        }
        let log = dir.join(file_name(*base_offset, LOG_SUFFIX));
        rename(swap, &log)?;
        crash_point()?;
    }
    if !swaps.is_empty() {
        durable_file::sync_dir(dir)?;
    }
    Ok(swaps.len())
}

/// The files of the segments whose base offsets lie in `bases`, `.log` files first.
fn segment_files(dir: &Path, bases: std::ops::Range<i64>) -> Result<Vec<PathBuf>, LogError> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(LogError::io("list", dir))? {
        let entry = entry.map_err(LogError::io("list", dir))?;
        let name = entry.file_name();
        let Some((base, suffix)) = name.to_str().and_then(parse_file_name) else {
            continue;
        };
        let ours = matches!(
            suffix,
            LOG_SUFFIX | INDEX_SUFFIX | TIME_INDEX_SUFFIX | REPAIR_SUFFIX
        );
        if ours && bases.contains(&base) {
            files.push((suffix != LOG_SUFFIX, entry.path()));
        }
    }
    files.sort();
    Ok(files.into_iter().map(|(_, path)| path).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_names_round_trip_and_nothing_else_parses() {
        let name = swap_name(42, 1_000);
        assert_eq!(name, "00000000000000000042.00000000000000001000.swap");
        assert_eq!(parse_swap_name(&name), Some((42, 1_000)));
        assert_eq!(parse_swap_name("00000000000000000042.log"), None);
        assert_eq!(parse_swap_name("42.1000.swap"), None);
        assert_eq!(
            parse_swap_name("00000000000000000042.0000000000000000100x.swap"),
            None
        );
        assert_eq!(
            parse_file_name(&name).map(|(_, s)| s == LOG_SUFFIX),
            Some(false)
        );
    }
}
