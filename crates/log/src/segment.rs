//! One segment: a `.log` file of record batches, its sparse offset index and time
//! index (kept in memory, appended to their files), and its bookkeeping (size, end
//! offset, largest timestamp).
//!
//! Lifecycle: created empty by a roll (or by opening an empty directory) or loaded
//! at open (`segment_load.rs`); appended to while it is the active segment (only then
//! are its index files open for writing); sealed by the next roll; deleted by
//! retention, or replaced by the log cleaner's rewrite of it (written as a new segment
//! in the cleaner's staging directory, sealed, and moved in). A `Segment` is owned by the `Log` and used under its lock; only its
//! `Arc<File>` handles escape, to sync sets and read slices.
//!
//! A segment holds no file open between uses (only while it is loaded): its files are
//! opened through the process's [`FileCache`], the active segment's for appending, so
//! an idle partition costs no open file and a hot one finds its files in the cache.
//!
//! Failed writes are undone: an append, a seal or a create that fails part-way (most
//! often `ENOSPC`) truncates every file it touched back to its previous length, or
//! removes the files it created, and reports `LogError::WriteRefused`; the segment's
//! in-memory state changes only after every write succeeded. Only when the undo itself
//! fails is the error a plain `LogError::Io`, on which the log poisons itself.

pub(crate) mod load;

use crate::batch::BatchHeader;
use crate::config::{SEALED_INDEX_THINNING, SHORT_WALK_CHUNK_BYTES};
use crate::file_cache::{self, without_readahead, FileCache, FileKind};
use crate::file_names::{file_name, INDEX_SUFFIX, LOG_SUFFIX, REPAIR_SUFFIX, TIME_INDEX_SUFFIX};
use crate::index::{self, OffsetIndex};
use crate::indexing::{BatchPlace, IndexCursor, NewEntries};
use crate::scan::{self, WalkOptions};
use crate::sync::SealedFiles;
use crate::time_index::{self, TimeIndex};
use crate::{LogError, ReadSlice};
use headway_base::Offset;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The three files of a segment.
#[derive(Debug, Clone)]
pub(crate) struct SegmentPaths {
    pub log: PathBuf,
    pub index: PathBuf,
    pub time_index: PathBuf,
    pub repair: PathBuf,
    /// The aborted-transaction index (`crate::txn_index`), present only when the
    /// segment holds an abort marker.
    pub txn_index: PathBuf,
}

impl SegmentPaths {
    pub fn new(dir: &Path, base_offset: i64) -> SegmentPaths {
        SegmentPaths {
            log: dir.join(file_name(base_offset, LOG_SUFFIX)),
            index: dir.join(file_name(base_offset, INDEX_SUFFIX)),
            time_index: dir.join(file_name(base_offset, TIME_INDEX_SUFFIX)),
            repair: dir.join(file_name(base_offset, REPAIR_SUFFIX)),
            txn_index: crate::txn_index::path(dir, base_offset),
        }
    }
}

/// The lengths of the active segment's index files (what a failed write is truncated
/// back to); the files themselves are in the [`FileCache`].
#[derive(Debug)]
struct IndexLengths {
    index_bytes: u64,
    time_index_bytes: u64,
}

#[derive(Debug)]
pub(crate) struct Segment {
    /// Unique in the process: the segment's key in the [`FileCache`], and what tells
    /// the cleaner that a segment it planned is still the same one.
    id: u64,
    base_offset: i64,
    paths: SegmentPaths,
    /// The `.log`, held open while the segment is loaded; `None` once it is in use:
    /// then opened on demand through the [`FileCache`].
    log_file: Option<Arc<File>>,
    size_bytes: u64,
    /// The offset after the segment's last batch; the base offset when empty.
    end_offset: i64,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    /// The in-memory indexes keep only every `SEALED_INDEX_THINNING`-th entry.
    thinned: bool,
    cursor: IndexCursor,
    /// When the segment got its first batch (or was loaded, for a non-empty
    /// segment found at open): the start of its age for `segment_ms_max`.
    created_ms: Option<i64>,
    /// `Some` while the segment is the active one (appended to).
    writers: Option<IndexLengths>,
}

/// Offset minus base offset, if it fits an index entry.
pub(crate) fn relative(base_offset: i64, offset: i64) -> Option<u32> {
    offset
        .checked_sub(base_offset)
        .and_then(|r| u32::try_from(r).ok())
}

fn open_for_append(path: &Path, create: bool) -> Result<Arc<File>, LogError> {
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(create)
        .open(path)
        .map_err(LogError::io("open", path))?;
    Ok(Arc::new(file))
}

#[cfg(test)]
thread_local! {
    /// Bytes this thread's segment writes may still make; a write past it writes
    /// what fits and fails with `ENOSPC`, as a full disk does. `None`: no limit.
    /// Lets tests drive the undo path without filling a disk.
    pub(crate) static SPACE_LEFT_BYTES: std::cell::Cell<Option<u64>> =
        const { std::cell::Cell::new(None) };
}

/// Appends `bytes` to `file`. On failure, part of them may have been written: the
/// caller undoes that ([`undo_to`]) before it reports the write as refused.
fn write_to(file: &File, bytes: &[u8], path: &Path) -> Result<(), LogError> {
    let mut file = file;
    #[cfg(test)]
    if let Some(left) = SPACE_LEFT_BYTES.get() {
        let fits = usize::try_from(left).unwrap_or(usize::MAX).min(bytes.len());
        SPACE_LEFT_BYTES.set(Some(left - fits as u64));
        if fits < bytes.len() {
            file.write_all(&bytes[..fits])
                .map_err(LogError::refused("write to", path))?;
            let full = io::Error::from(rustix::io::Errno::NOSPC);
            return Err(LogError::refused("write to", path)(full));
        }
    }
    file.write_all(bytes)
        .map_err(LogError::refused("write to", path))
}

/// Truncates `file` back to `len` bytes, undoing a write that failed part-way.
/// A failure here leaves the file's contents unknown: a plain I/O error.
fn undo_to(file: &File, len: u64, path: &Path) -> Result<(), LogError> {
    file.set_len(len)
        .map_err(LogError::io("undo a failed write to", path))
}

fn file_len(file: &File, path: &Path) -> Result<u64, LogError> {
    Ok(file.metadata().map_err(LogError::io("stat", path))?.len())
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

impl Segment {
    /// Creates the files of a new, empty, active segment.
    /// On failure (a full disk: the directory may need a block) the files already
    /// created are removed again and the error is `LogError::WriteRefused`.
    pub fn create(dir: &Path, base_offset: i64) -> Result<Segment, LogError> {
        let paths = SegmentPaths::new(dir, base_offset);
        // Nothing to undo when the `.log` itself cannot be created (and it may not
        // be this segment's to remove).
        let log = OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .open(&paths.log)
            .map_err(LogError::refused("create", &paths.log))?;
        without_readahead(&log);
        let created = (|| {
            for path in [&paths.index, &paths.time_index] {
                File::create(path).map_err(LogError::refused("create", path))?;
            }
            let mut segment = Segment::empty(paths.clone(), base_offset, Arc::new(log));
            segment.open_writers()?;
            Ok(segment)
        })();
        if created.is_err() {
            for path in [&paths.log, &paths.index, &paths.time_index] {
                remove_if_present(path).map_err(LogError::io("undo the creation of", path))?;
            }
        }
        created
    }

    fn empty(paths: SegmentPaths, base_offset: i64, log_file: Arc<File>) -> Segment {
        Segment {
            id: file_cache::next_segment_id(),
            base_offset,
            paths,
            log_file: Some(log_file),
            size_bytes: 0,
            end_offset: base_offset,
            offset_index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            thinned: false,
            cursor: IndexCursor::new(),
            created_ms: None,
            writers: None,
        }
    }

    /// Opens the index files for appending (creating them if missing) to learn their
    /// lengths: the segment becomes the active one. Its files, the `.log` held since its
    /// load or creation too, are closed again: the first append opens them through the
    /// [`FileCache`], so a partition opened and not written holds none.
    pub fn open_writers(&mut self) -> Result<(), LogError> {
        let index = open_for_append(&self.paths.index, true)?;
        let time_index = open_for_append(&self.paths.time_index, true)?;
        self.writers = Some(IndexLengths {
            index_bytes: file_len(&index, &self.paths.index)?,
            time_index_bytes: file_len(&time_index, &self.paths.time_index)?,
        });
        self.log_file = None;
        Ok(())
    }

    /// The active segment's file `kind`, open for appending, through the cache. A
    /// failure to open it refuses the write (`LogError::WriteRefused`).
    fn writable(&self, kind: FileKind) -> Result<Arc<File>, LogError> {
        let path = match kind {
            FileKind::Log => &self.paths.log,
            FileKind::Index => &self.paths.index,
            FileKind::TimeIndex => &self.paths.time_index,
        };
        FileCache::global()
            .get_writable(self.id, kind, path)
            .map_err(LogError::refused("open", path))
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.size_bytes == 0
    }

    /// The `.log`: the one held open while loading, or through the cache (open for
    /// appending when the segment is the active one).
    pub fn log_file(&self) -> Result<Arc<File>, LogError> {
        match (&self.log_file, &self.writers) {
            (Some(file), _) => Ok(Arc::clone(file)),
            (None, Some(_)) => self.writable(FileKind::Log),
            (None, None) => FileCache::global().get(self.id, &self.paths.log),
        }
    }

    /// The `.log` held open by a segment being loaded.
    fn held_log(&self) -> &Arc<File> {
        self.log_file
            .as_ref()
            .expect("a segment being loaded holds its .log open")
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn paths(&self) -> &SegmentPaths {
        &self.paths
    }

    /// Milliseconds since the segment got its first batch; 0 while empty.
    pub fn age_ms(&self, now_ms: i64) -> i64 {
        self.created_ms
            .map_or(0, |created| now_ms.saturating_sub(created))
    }

    /// The largest batch max timestamp in the segment, if any batch carries one.
    pub fn max_timestamp_ms(&self) -> Option<i64> {
        Some(self.cursor.max_timestamp_ms()).filter(|t| *t >= 0)
    }

    /// The timestamp retention compares against: the largest batch max timestamp,
    /// or, when no batch carries a timestamp, the time the segment got its first
    /// batch or was loaded (the log never reads a clock, so it has nothing better).
    pub fn retention_timestamp_ms(&self) -> i64 {
        match self.cursor.max_timestamp_ms() {
            t if t >= 0 => t,
            _ => self.created_ms.unwrap_or(i64::MAX),
        }
    }

    /// Appends batches whose base offsets the log already assigned: one write to the
    /// `.log`, then one write per index file when the batches add entries. The
    /// in-memory state changes only when every write succeeded; a failed write is
    /// undone (`LogError::WriteRefused`). Returns the `.log` written, which the sync
    /// set holds until it is synced.
    pub fn append(
        &mut self,
        bytes: &[u8],
        batches: &[BatchHeader],
        index_interval_bytes: u32,
        now_ms: i64,
    ) -> Result<Arc<File>, LogError> {
        let (cursor, new, size_bytes) = self.plan(batches, index_interval_bytes);
        assert_eq!(
            size_bytes - self.size_bytes,
            bytes.len() as u64,
            "batch headers must cover the appended bytes"
        );
        let log = self.write(bytes, &new)?;
        self.size_bytes = size_bytes;
        self.end_offset = batches.last().expect("an append has batches").last_offset() + 1;
        self.cursor = cursor;
        self.created_ms.get_or_insert(now_ms);
        for entries in new {
            entries.push_into(&mut self.offset_index, &mut self.time_index);
        }
        Ok(log)
    }

    /// The indexing state, the index entries and the segment size after `batches`,
    /// computed without changing the segment.
    fn plan(
        &self,
        batches: &[BatchHeader],
        index_interval_bytes: u32,
    ) -> (IndexCursor, Vec<NewEntries>, u64) {
        let mut cursor = self.cursor.clone();
        let mut new = Vec::with_capacity(batches.len());
        let mut position = self.size_bytes;
        for header in batches {
            let place = BatchPlace {
                relative_offset: relative(self.base_offset, header.base_offset)
                    .expect("the log rolls before relative offsets overflow"),
                position: u32::try_from(position).expect("segments stay below 4 GiB"),
                size_bytes: header.total_bytes() as u32,
                max_timestamp_ms: header.max_timestamp,
            };
            new.push(cursor.observe(place, index_interval_bytes));
            position += header.total_bytes() as u64;
        }
        (cursor, new, position)
    }

    /// Writes the batches and index entries. Every file is opened (through the cache)
    /// before anything is written, so that a failed open refuses the write with
    /// nothing to undo.
    fn write(&mut self, bytes: &[u8], new: &[NewEntries]) -> Result<Arc<File>, LogError> {
        let offsets: Vec<_> = new.iter().filter_map(|n| n.offset).collect();
        let index_bytes = index::encode_entries(&offsets);
        let times: Vec<_> = new.iter().filter_map(|n| n.time).collect();
        let time_index_bytes = time_index::encode_entries(&times);
        let log = self.writable(FileKind::Log)?;
        let index = (!index_bytes.is_empty())
            .then(|| self.writable(FileKind::Index))
            .transpose()?;
        let time = (!time_index_bytes.is_empty())
            .then(|| self.writable(FileKind::TimeIndex))
            .transpose()?;
        let lengths = self
            .writers
            .as_ref()
            .expect("only the active segment is appended to");
        let written = write_to(&log, bytes, &self.paths.log)
            .and_then(|()| match &index {
                Some(file) => write_to(file, &index_bytes, &self.paths.index),
                None => Ok(()),
            })
            .and_then(|()| match &time {
                Some(file) => write_to(file, &time_index_bytes, &self.paths.time_index),
                None => Ok(()),
            });
        if let Err(e) = written {
            undo_to(&log, self.size_bytes, &self.paths.log)?;
            if let Some(file) = &index {
                undo_to(file, lengths.index_bytes, &self.paths.index)?;
            }
            if let Some(file) = &time {
                undo_to(file, lengths.time_index_bytes, &self.paths.time_index)?;
            }
            return Err(e);
        }
        let lengths = self.writers.as_mut().expect("checked above");
        lengths.index_bytes += index_bytes.len() as u64;
        lengths.time_index_bytes += time_index_bytes.len() as u64;
        Ok(log)
    }

    /// Ends the segment's life as the active one: writes the final time-index entry
    /// and returns the files that must be synced before anything after it is
    /// acknowledged. When the entry cannot be written the segment stays active and
    /// unchanged (`LogError::WriteRefused`).
    pub fn seal(&mut self) -> Result<SealedFiles, LogError> {
        let log = self.writable(FileKind::Log)?;
        let index = self.writable(FileKind::Index)?;
        let time = self.writable(FileKind::TimeIndex)?;
        let mut cursor = self.cursor.clone();
        if let Some(entry) = cursor.seal() {
            let lengths = self
                .writers
                .as_ref()
                .expect("only the active segment is sealed");
            if let Err(e) = write_to(&time, &entry.encode(), &self.paths.time_index) {
                undo_to(&time, lengths.time_index_bytes, &self.paths.time_index)?;
                return Err(e);
            }
            self.time_index.push(entry);
        }
        self.cursor = cursor;
        self.writers = None;
        self.thin_indexes();
        Ok(SealedFiles::new(vec![
            (log, self.paths.log.clone()),
            (index, self.paths.index.clone()),
            (time, self.paths.time_index.clone()),
        ]))
    }

    /// Frees most of a sealed segment's in-memory index entries (see
    /// `SEALED_INDEX_THINNING`; the index files keep every entry) and lets go of the
    /// `.log` held since its load, which reads then open through the [`FileCache`].
    pub fn thin_indexes(&mut self) {
        self.log_file = None;
        if !self.thinned {
            self.offset_index.thin(SEALED_INDEX_THINNING);
            self.time_index.thin(SEALED_INDEX_THINNING);
            self.thinned = true;
        }
    }

    /// Syncs the `.log` and both index files (at open after a crash, and at close).
    pub fn sync_files(&self) -> Result<(), LogError> {
        self.log_file()?
            .sync_data()
            .map_err(LogError::io("sync", &self.paths.log))?;
        for path in [&self.paths.index, &self.paths.time_index] {
            let file = File::open(path).map_err(LogError::io("open", path))?;
            file.sync_data().map_err(LogError::io("sync", path))?;
        }
        Ok(())
    }

    /// A slice to read `offset` from: at the index entry at or below it; at the
    /// segment's start when `offset` precedes the segment; at its end (empty) when
    /// `offset` is at or past the segment's end.
    pub fn read_slice(
        &self,
        offset: Offset,
        index_interval_bytes: u32,
    ) -> Result<ReadSlice, LogError> {
        let start_position = match offset.value() {
            o if o >= self.end_offset => self.size_bytes,
            o if o <= self.base_offset => 0,
            o => self
                .offset_index
                .position_for(relative(self.base_offset, o).unwrap_or(u32::MAX)),
        };
        // The read's first buffer covers the distance from the index entry it starts at.
        let interval = match self.thinned {
            true => index_interval_bytes.saturating_mul(SEALED_INDEX_THINNING as u32),
            false => index_interval_bytes,
        };
        // Batches of the active segment were checked by their append moments ago (or
        // by recovery); a sealed segment may have rotted on disk since: check them.
        Ok(ReadSlice::new(
            self.log_file()?,
            start_position,
            self.size_bytes,
            offset,
            interval,
        )
        .verified(self.writers.is_none(), self.base_offset))
    }

    /// The first batch whose max timestamp is at or after `timestamp_ms`: its base
    /// offset and max timestamp.
    pub fn find_timestamp(&self, timestamp_ms: i64) -> Result<Option<(i64, i64)>, LogError> {
        if self.cursor.max_timestamp_ms() < timestamp_ms {
            return Ok(None);
        }
        let start = self.time_index.floor(timestamp_ms).map_or(0, |entry| {
            self.offset_index.position_for(entry.relative_offset)
        });
        let options = WalkOptions {
            validate: false,
            chunk_bytes: SHORT_WALK_CHUNK_BYTES,
        };
        let mut found = None;
        scan::walk(
            &*self.log_file()?,
            start,
            self.size_bytes,
            options,
            |_, header| {
                if header.max_timestamp < timestamp_ms {
                    return ControlFlow::Continue(());
                }
                found = Some((header.base_offset, header.max_timestamp));
                ControlFlow::Break(())
            },
        )
        .map_err(LogError::io("read", &self.paths.log))?;
        Ok(found)
    }

    /// Marks the segment for a full scan at the next open (an empty `.repair` file,
    /// synced with its directory by the caller). Idempotent.
    pub fn mark_for_repair(&self) -> Result<(), LogError> {
        let path = &self.paths.repair;
        let file = File::create(path).map_err(LogError::io("create", path))?;
        file.sync_all().map_err(LogError::io("sync", path))
    }

    /// Removes the segment's files: the `.log` first, so that a crash in between
    /// leaves only index files without a log, which the next open deletes.
    pub fn delete(&self) -> Result<(), LogError> {
        remove_if_present(&self.paths.log).map_err(LogError::io("delete", &self.paths.log))?;
        for path in [
            &self.paths.index,
            &self.paths.time_index,
            &self.paths.repair,
            &self.paths.txn_index,
        ] {
            remove_if_present(path).map_err(LogError::io("delete", path))?;
        }
        Ok(())
    }
}

impl Drop for Segment {
    /// A segment that goes (deleted, replaced by the cleaner, closed) closes its
    /// cached files, so the cache never keeps a deleted file's space.
    fn drop(&mut self) {
        FileCache::global().forget(self.id);
    }
}

#[cfg(test)]
impl Segment {
    /// The segment holds its `.log` open itself (not through the cache).
    pub fn holds_log_open(&self) -> bool {
        self.log_file.is_some()
    }

    /// Entries of the in-memory offset and time indexes.
    pub fn index_entries(&self) -> (usize, usize) {
        (self.offset_index.len(), self.time_index.len())
    }

    pub fn offset_index_bytes(&self) -> Vec<u8> {
        self.offset_index.encode()
    }

    pub fn time_index_bytes(&self) -> Vec<u8> {
        self.time_index.encode()
    }
}
