//! Group commit's hand-off between the log and the flusher: which files must reach
//! the disk before offsets may be acknowledged.
//!
//! The log records what it writes in a [`Pending`] (the active segment's `.log`,
//! segments sealed by a roll, directory changes). [`crate::Log::sync_set`] turns that
//! record into a [`SyncSet`] under the log's lock, and the flusher syncs the set
//! without it. A `SyncSet` holds its files by `Arc`, so it stays valid when the log
//! rolls or deletes segments meanwhile; it is `Send` and is synced on any thread.
//!
//! Sets must be synced one after another, and the offsets of a set acknowledged only
//! when it and every earlier set synced: a set holds only the files written since
//! the previous one. A failed sync must never be retried (the kernel may have
//! dropped the dirty pages): the owner poisons the log instead.

use crate::LogError;
use headway_base::{durable_file, Offset};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Files to fsync so that every offset below `log_end_offset` is durable.
/// Taken under the log's lock by [`crate::Log::sync_set`]; synced without it.
#[derive(Debug)]
pub struct SyncSet {
    pub log_end_offset: Offset,
    /// Bytes appended since the previous set (what this sync writes back, at most).
    pub bytes: u64,
    /// Each file with its path, which a failure names.
    files: Vec<(Arc<File>, PathBuf)>,
    /// The directory, opened when synced (see [`durable_file::sync_dir`]).
    dir: Option<PathBuf>,
    sealed: Vec<Arc<AtomicBool>>,
}

impl SyncSet {
    /// True when nothing was written since the previous set.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.dir.is_none()
    }

    /// fdatasync every file (fsync for directories). Blocking. The error names the
    /// file whose sync failed; the caller must not retry (see the module doc).
    pub fn sync(&self) -> Result<(), LogError> {
        for (file, path) in &self.files {
            file.sync_data().map_err(LogError::io("fdatasync", path))?;
        }
        if let Some(dir) = &self.dir {
            durable_file::sync_dir(dir)?;
        }
        for durable in &self.sealed {
            durable.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Records that the set is durable because the caller synced the whole filesystem
    /// holding its files (`syncfs(2)` returned success after the set was taken), so
    /// that sealed segments are not synced again. Never call it after a failed sync.
    pub fn synced_by_filesystem(&self) {
        for durable in &self.sealed {
            durable.store(true, Ordering::Release);
        }
    }

    /// Number of files in the set, the directory included.
    pub fn file_count(&self) -> usize {
        self.files.len() + usize::from(self.dir.is_some())
    }
}

/// The files of a segment sealed by a roll, and whether a sync of them completed.
#[derive(Debug, Clone)]
pub(crate) struct SealedFiles {
    files: Vec<(Arc<File>, PathBuf)>,
    durable: Arc<AtomicBool>,
}

impl SealedFiles {
    pub fn new(files: Vec<(Arc<File>, PathBuf)>) -> SealedFiles {
        SealedFiles {
            files,
            durable: Arc::new(AtomicBool::new(false)),
        }
    }

    pub fn is_durable(&self) -> bool {
        self.durable.load(Ordering::Acquire)
    }

    /// Syncs the segment's files and the directory now, on the caller's thread.
    pub fn sync_now(&self, dir: &Path) -> Result<(), LogError> {
        for (file, path) in &self.files {
            file.sync_data().map_err(LogError::io("fdatasync", path))?;
        }
        durable_file::sync_dir(dir)?;
        self.durable.store(true, Ordering::Release);
        Ok(())
    }
}

/// What was written since the last [`SyncSet`] was taken. At most one sealed segment
/// waits here: a roll syncs the previously sealed segment inline when no set has
/// synced it yet (see `Log::roll`), so this stays bounded even when nobody syncs.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    /// The active segment's `.log` as the first append since the last set wrote it:
    /// held until synced even when the file cache closes its own copy meanwhile.
    active_log: Option<(Arc<File>, PathBuf)>,
    /// Bytes appended since the last set was taken.
    bytes: u64,
    sealed: Vec<SealedFiles>,
    dir: bool,
}

impl Pending {
    /// `bytes` were appended to the active segment's `.log`, through `file`.
    pub fn wrote_active(&mut self, bytes: u64, file: (Arc<File>, PathBuf)) {
        self.active_log.get_or_insert(file);
        self.bytes += bytes;
    }

    /// Nothing written, sealed or changed in the directory since the last set.
    pub fn is_clean(&self) -> bool {
        self.active_log.is_none() && self.sealed.is_empty() && !self.dir && self.bytes == 0
    }

    /// Bytes appended since the last set was taken.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Files were created or deleted in the directory.
    pub fn changed_dir(&mut self) {
        self.dir = true;
    }

    /// The active segment was sealed: its files replace the active `.log` in the next
    /// set, and the new segment's file entries make the directory dirty.
    pub fn sealed(&mut self, mut sealed: SealedFiles) {
        self.sealed.retain(|s| !s.is_durable());
        if let Some((file, path)) = self.active_log.take() {
            // Written through a descriptor the cache has closed since: sync that one
            // too, so that no written descriptor closes before its sync.
            if !sealed.files.iter().any(|(f, _)| Arc::ptr_eq(f, &file)) {
                sealed.files.push((file, path));
            }
        }
        self.sealed.push(sealed);
        self.dir = true;
    }

    /// Takes everything pending as a set.
    pub fn take(&mut self, dir: &Path, log_end_offset: Offset) -> SyncSet {
        let mut files = Vec::new();
        let mut sealed = Vec::new();
        for segment in self.sealed.drain(..).filter(|s| !s.is_durable()) {
            files.extend(segment.files);
            sealed.push(segment.durable);
        }
        files.extend(self.active_log.take());
        let dir = std::mem::take(&mut self.dir).then(|| dir.to_path_buf());
        SyncSet {
            log_end_offset,
            bytes: std::mem::take(&mut self.bytes),
            files,
            dir,
            sealed,
        }
    }
}
