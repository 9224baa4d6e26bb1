//! The one way headway replaces a file durably, and the one directory sync. Its users:
//! the broker's side files (a partition's producer-state snapshot and
//! `log-start-offset`, a topic's `topic.json`, the data directory's `meta.json` and
//! `producer-ids`), the security store and group settings, the log cleaner's checkpoint
//! and the log's aborted-transaction indexes.
//!
//! [`replace`] writes the new contents to `<name>.tmp` next to the file, syncs it,
//! renames it over the file and syncs the directory. A crash at any step leaves either
//! the old file or the new one, never a mix: the rename is atomic, and it only happens
//! once the new contents are on disk. The directory sync makes the rename itself
//! durable, so a file that was acknowledged (a DeleteRecords start, a reserved block of
//! producer ids) is still there after a power loss. A failed write removes the
//! temporary file and leaves the old file as it was. [`replace_leaving_dir_unsynced`]
//! is the same without the directory sync, for a caller that replaces several files of
//! one directory and syncs it once after the last.
//!
//! Every directory sync goes through [`sync_dir`], so a failure to sync one reads the
//! same everywhere. Failures are [`DurableFileError`]s naming the step and the file.
//! Blocking: call from a blocking thread.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A durable write that failed: which step (`write`, `sync directory`), on which path,
/// and the I/O error. After a failed [`replace`] the file keeps its old contents.
#[derive(Debug, thiserror::Error)]
#[error("{context} {path}: {source}")]
pub struct DurableFileError {
    pub context: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Replaces `path` with `bytes` durably (temporary file, fsync, rename, fsync of the
/// directory). Calls that replace the same file must not overlap: they share its
/// temporary file, and their renames would land in either order (the partition's
/// DeleteRecords lock is one such caller's order).
pub fn replace(path: &Path, bytes: &[u8]) -> Result<(), DurableFileError> {
    replace_with(path, |file| file.write_all(bytes))?;
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => sync_dir(dir),
        _ => sync_dir(Path::new(".")),
    }
}

/// [`replace`] without the directory sync: the new contents are on disk, but the
/// rename becomes durable only when the caller syncs the directory.
pub fn replace_leaving_dir_unsynced(path: &Path, bytes: &[u8]) -> Result<(), DurableFileError> {
    replace_with(path, |file| file.write_all(bytes))
}

/// Writes, syncs and renames the temporary file, with the contents written by `write`.
/// When a step fails, the temporary file is removed and `path` keeps its old contents.
fn replace_with(
    path: &Path,
    write: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> Result<(), DurableFileError> {
    let tmp = temporary(path);
    let written = File::create(&tmp).and_then(|mut file| {
        write(&mut file)?;
        file.sync_all()
    });
    if let Err(e) = written.and_then(|_| fs::rename(&tmp, path)) {
        // Best effort: a leftover temporary file is harmless, it is overwritten by
        // the next replace and never read.
        let _ = fs::remove_file(&tmp);
        return Err(storage("write", path, e));
    }
    Ok(())
}

/// Syncs a directory, so that files created, renamed or removed in it stay so after a
/// crash. The directory is opened for the purpose: no one holds a descriptor of a
/// directory between syncs (they are rare: files created or deleted), which saves one
/// open file per partition. A directory's entries are metadata the filesystem
/// journals, so a sync through a new descriptor covers every change made before it.
pub fn sync_dir(dir: &Path) -> Result<(), DurableFileError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| storage("sync directory", dir, e))
}

/// `<name>.tmp` next to `path`.
fn temporary(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

fn storage(context: &'static str, path: &Path, source: std::io::Error) -> DurableFileError {
    DurableFileError {
        context,
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replace_swaps_the_whole_contents_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("side-file");
        replace(&path, b"first").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"first");
        replace(&path, b"2nd").unwrap();
        assert_eq!(
            fs::read(&path).unwrap(),
            b"2nd",
            "shorter contents replace, not overlay"
        );
        assert!(!dir.path().join("side-file.tmp").exists());
        assert_eq!(temporary(&path), dir.path().join("side-file.tmp"));
    }

    #[test]
    fn a_failed_write_never_replaces_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("side-file");
        replace(&path, b"old").unwrap();
        let failed = replace_with(&path, |file| {
            file.write_all(b"half of the new")?;
            Err(std::io::Error::other("disk full"))
        });
        assert!(matches!(failed, Err(ref e) if e.to_string().contains("disk full")));
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert!(
            !dir.path().join("side-file.tmp").exists(),
            "the temporary file is removed"
        );
    }

    #[test]
    fn a_temporary_file_that_cannot_be_created_leaves_the_target_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("side-file");
        replace(&path, b"old").unwrap();
        // A directory where the temporary file goes: creating it fails.
        fs::create_dir(dir.path().join("side-file.tmp")).unwrap();
        assert!(replace(&path, b"new").is_err());
        assert_eq!(fs::read(&path).unwrap(), b"old");
    }

    #[test]
    fn a_replace_leaving_the_directory_unsynced_writes_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.txnindex");
        replace_leaving_dir_unsynced(&path, b"entries").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"entries");
        assert!(!dir
            .path()
            .join("00000000000000000000.txnindex.tmp")
            .exists());
    }

    #[test]
    fn a_missing_directory_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gone").join("side-file");
        assert!(replace(&path, b"x").is_err());
        assert!(sync_dir(&dir.path().join("gone")).is_err());
    }
}
