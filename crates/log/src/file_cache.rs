//! Open files of segments as a bounded, counted resource.
//!
//! No segment holds its files open between uses: a sealed segment's `.log` (read by
//! fetches from behind the tail, timestamp look-ups and the cleaner) and the active
//! segment's three files (`.log`, `.index`, `.timeindex`, written by appends) are
//! opened on demand through this cache and closed when the least recently used of the
//! cache's files must make room for another. So a partition nobody writes or reads
//! holds no file, and a hot partition's files stay in the cache (one map look-up per
//! append). The cache holds at most its capacity of files (`open_files_max` less what
//! sockets and the rest take, set by the broker with [`FileCache::set_capacity`]);
//! hits, misses, evictions and the count of open files are counted for `/metrics`.
//!
//! Durability does not depend on the cache keeping a file: an append hands the
//! `.log` it wrote to the log's pending sync set (`crate::sync`), which holds that
//! descriptor until the flusher has synced it, so a file evicted before its sync is
//! closed only after it (the index files need no sync for acknowledgements: recovery
//! rebuilds them).
//!
//! Files are handed out as `Arc<File>`: a read that holds one keeps it valid even
//! when the cache evicts it meanwhile (the descriptor closes when the last holder
//! drops it), so an eviction never fails a read in progress; the count of files the
//! cache holds may then be briefly below the process's real count.
//!
//! Entries are keyed by the segment's identity (a number unique in the process), not
//! its path: a cleaned segment renamed over an old one's path is a new segment, and a
//! dropped segment (deleted by retention, replaced by the cleaner, closed)
//! [`forget`](FileCache::forget)s its entry, so the cache never keeps a deleted file's
//! space. Thread-safe: one mutex held for map operations only, never for an `open(2)`.

use crate::LogError;
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The capacity before a broker sets one: enough for tools and tests that open a few
/// logs, far below any process's usual limit.
pub const FILE_CACHE_DEFAULT_CAPACITY: usize = 1024;

/// What `/metrics` shows of the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileCacheStats {
    pub capacity: usize,
    /// Files the cache holds open now.
    pub open: usize,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
}

/// Which of a segment's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum FileKind {
    Log,
    Index,
    TimeIndex,
}

type Key = (u64, FileKind);

struct Entry {
    file: Arc<File>,
    used: u64,
    /// Opened for appending (the active segment's), not only for reading.
    writable: bool,
}

#[derive(Default)]
struct Entries {
    /// Segment id and file to its entry.
    files: HashMap<Key, Entry>,
    /// Tick of last use to key: the first is the least recently used.
    by_use: BTreeMap<u64, Key>,
    tick: u64,
}

impl Entries {
    /// The file of `key`, if held and (when `writable`) open for appending.
    fn touch(&mut self, key: Key, writable: bool) -> Option<Arc<File>> {
        self.tick += 1;
        let tick = self.tick;
        let entry = self
            .files
            .get_mut(&key)
            .filter(|e| e.writable || !writable)?;
        self.by_use.remove(&entry.used);
        entry.used = tick;
        self.by_use.insert(tick, key);
        Some(Arc::clone(&entry.file))
    }

    fn insert(&mut self, key: Key, file: Arc<File>, writable: bool) {
        self.remove(key);
        self.tick += 1;
        let used = self.tick;
        self.files.insert(
            key,
            Entry {
                file,
                used,
                writable,
            },
        );
        self.by_use.insert(used, key);
    }

    fn remove(&mut self, key: Key) -> bool {
        match self.files.remove(&key) {
            Some(entry) => {
                self.by_use.remove(&entry.used);
                true
            }
            None => false,
        }
    }
}

pub struct FileCache {
    entries: Mutex<Entries>,
    capacity: AtomicUsize,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    /// The use tick at the last [`FileCache::close_unused`]: files not used since are
    /// idle.
    mark: AtomicU64,
}

/// Identities of segments: each `Segment` value takes the next one.
static NEXT_SEGMENT_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) fn next_segment_id() -> u64 {
    NEXT_SEGMENT_ID.fetch_add(1, Ordering::Relaxed)
}

impl FileCache {
    pub fn new(capacity: usize) -> FileCache {
        FileCache {
            entries: Mutex::new(Entries::default()),
            capacity: AtomicUsize::new(capacity.max(1)),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            mark: AtomicU64::new(0),
        }
    }

    /// Closes the files not used since the previous call (counted as evictions), and
    /// returns how many. Called on a timer, it closes the files of partitions idle for
    /// one to two periods, so that an idle broker holds few files even after every
    /// partition was written.
    pub fn close_unused(&self) -> usize {
        let mut entries = self.lock();
        let mark = self.mark.swap(entries.tick, Ordering::Relaxed);
        let mut closed = 0;
        while let Some((&used, &key)) = entries.by_use.first_key_value() {
            if used > mark {
                break;
            }
            entries.remove(key);
            closed += 1;
        }
        self.evictions.fetch_add(closed as u64, Ordering::Relaxed);
        closed
    }

    /// The process's cache, which every log's sealed segments use.
    pub fn global() -> &'static FileCache {
        static GLOBAL: OnceLock<FileCache> = OnceLock::new();
        GLOBAL.get_or_init(|| FileCache::new(FILE_CACHE_DEFAULT_CAPACITY))
    }

    /// Sets how many files the cache may hold (at least one), evicting at once what
    /// no longer fits.
    pub fn set_capacity(&self, capacity: usize) {
        self.capacity.store(capacity.max(1), Ordering::Relaxed);
        let mut entries = self.lock();
        self.evict_over_capacity(&mut entries);
    }

    pub fn stats(&self) -> FileCacheStats {
        FileCacheStats {
            capacity: self.capacity.load(Ordering::Relaxed),
            open: self.lock().files.len(),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }

    /// The open `.log` of segment `id` at `path` for reading, opened (read-only) if
    /// the cache does not hold it.
    pub(crate) fn get(&self, id: u64, path: &Path) -> Result<Arc<File>, LogError> {
        self.get_kind(id, FileKind::Log, path, false)
            .map_err(LogError::io("open", path))
    }

    /// The file `kind` of the active segment `id` at `path`, open for appending (and
    /// reading), opened if the cache does not hold it so. The caller maps the error:
    /// an open that fails (too many open files, a full disk's metadata) refuses an
    /// append, it does not poison the log.
    pub(crate) fn get_writable(
        &self,
        id: u64,
        kind: FileKind,
        path: &Path,
    ) -> std::io::Result<Arc<File>> {
        self.get_kind(id, kind, path, true)
    }

    fn get_kind(
        &self,
        id: u64,
        kind: FileKind,
        path: &Path,
        writable: bool,
    ) -> std::io::Result<Arc<File>> {
        let key = (id, kind);
        if let Some(file) = self.lock().touch(key, writable) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(file);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let opened = match writable {
            true => OpenOptions::new().read(true).append(true).open(path)?,
            false => File::open(path)?,
        };
        if kind == FileKind::Log {
            without_readahead(&opened);
        }
        let mut entries = self.lock();
        // Another thread may have opened it meanwhile: keep one.
        if let Some(file) = entries.touch(key, writable) {
            return Ok(file);
        }
        let file = Arc::new(opened);
        entries.insert(key, Arc::clone(&file), writable);
        self.evict_over_capacity(&mut entries);
        Ok(file)
    }

    /// Closes segment `id`'s files if the cache holds them (the segment is gone).
    pub(crate) fn forget(&self, id: u64) {
        let mut entries = self.lock();
        for kind in [FileKind::Log, FileKind::Index, FileKind::TimeIndex] {
            entries.remove((id, kind));
        }
    }

    fn evict_over_capacity(&self, entries: &mut Entries) {
        let capacity = self.capacity.load(Ordering::Relaxed);
        while entries.files.len() > capacity {
            let Some((_, key)) = entries.by_use.pop_first() else {
                break;
            };
            entries.files.remove(&key);
            self.evictions.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().expect("file cache mutex poisoned")
    }
}

/// Turns the kernel's readahead off for `file`'s reads (`POSIX_FADV_RANDOM`).
///
/// A fetch asks for what it reads (about a megabyte at a time), and the read threads
/// read it in one call. Readahead would add up to `read_ahead_kb` (often several MiB)
/// of reads the fetch did not ask for, queued on the disk in front of the flushers'
/// syncs: measured on a virtio disk, a cold 1 GiB sequential read raised the p99 of a
/// 4 KiB append plus `fdatasync` beside it from 0.4 ms to 5.5-6.0 ms with readahead,
/// and to 1.6-2.2 ms without, while reading three times faster
/// (`bench/results/disk-contention.md`). Advice only: a failure is ignored.
pub(crate) fn without_readahead(file: &File) {
    let _ = rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::Random);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn the_least_recently_used_file_is_closed_and_a_held_file_stays_readable() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<_> = (0..3)
            .map(|i| {
                let path = dir.path().join(format!("{i}.log"));
                std::fs::write(&path, format!("segment {i}")).unwrap();
                path
            })
            .collect();
        let cache = FileCache::new(2);
        let first = cache.get(1, &paths[0]).unwrap();
        cache.get(2, &paths[1]).unwrap();
        cache.get(1, &paths[0]).unwrap(); // 2 is now the least recently used
        cache.get(3, &paths[2]).unwrap();
        let stats = cache.stats();
        assert_eq!(
            (stats.open, stats.hits, stats.misses, stats.evictions),
            (2, 1, 3, 1)
        );
        cache.get(1, &paths[0]).unwrap();
        assert_eq!(cache.stats().hits, 2, "1 was kept, 2 was evicted");
        cache.get(2, &paths[1]).unwrap();
        assert_eq!(cache.stats().misses, 4);

        // 1 is evicted now, yet the handle taken before reads on.
        cache.set_capacity(1);
        assert_eq!(cache.stats().open, 1);
        let mut text = String::new();
        (&*first).read_to_string(&mut text).unwrap();
        assert_eq!(text, "segment 0");

        cache.forget(2);
        assert_eq!(cache.stats().open, 0);
        assert!(cache.get(9, &dir.path().join("missing.log")).is_err());
    }

    #[test]
    fn a_file_read_first_is_reopened_for_appending_and_counts_once() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("active.log");
        std::fs::write(&path, b"a").unwrap();
        let cache = FileCache::new(4);
        cache.get(1, &path).unwrap();
        let writable = cache.get_writable(1, FileKind::Log, &path).unwrap();
        (&*writable).write_all(b"b").unwrap();
        // The writable file serves reads too, and replaced the read-only one.
        cache.get(1, &path).unwrap();
        cache.get_writable(1, FileKind::Index, &path).unwrap();
        let stats = cache.stats();
        assert_eq!((stats.open, stats.hits, stats.misses), (2, 1, 3));
        assert_eq!(std::fs::read(&path).unwrap(), b"ab");
        cache.forget(1);
        assert_eq!(cache.stats().open, 0);
    }

    #[test]
    fn files_unused_between_two_calls_are_closed() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<_> = (0..3)
            .map(|i| {
                let path = dir.path().join(format!("{i}.log"));
                std::fs::write(&path, b"x").unwrap();
                path
            })
            .collect();
        let cache = FileCache::new(8);
        for (id, path) in paths.iter().enumerate() {
            cache.get(id as u64, path).unwrap();
        }
        assert_eq!(cache.close_unused(), 0, "the first round only marks");
        assert_eq!(cache.close_unused(), 3, "none used since the last round");
        cache.get(0, &paths[0]).unwrap();
        cache.get(1, &paths[1]).unwrap();
        assert_eq!(cache.close_unused(), 0, "both used since the last call");
        cache.get(1, &paths[1]).unwrap();
        assert_eq!(cache.close_unused(), 1, "0 was not used since");
        assert_eq!(cache.stats().open, 1);
        assert_eq!(cache.stats().evictions, 4);
    }
}
