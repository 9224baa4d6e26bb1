//! Open files of sealed segments as a bounded, counted resource.
//!
//! A sealed segment's `.log` is read only by fetches from behind the tail, timestamp
//! look-ups and the cleaner, so it is not held open: it is opened on demand through
//! this cache and closed when the least recently used of the cache's files must make
//! room for another. The active segment's files are not in the cache: they stay open
//! while the segment is written. The cache holds at most its capacity of files
//! (`open_files_max` less what the active segments and sockets take, set by the
//! broker with [`FileCache::set_capacity`]); hits, misses, evictions and the count
//! of open files are counted for `/metrics`.
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
use std::fs::File;
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

#[derive(Default)]
struct Entries {
    /// Segment id to its file and the tick of its last use.
    files: HashMap<u64, (Arc<File>, u64)>,
    /// Tick of last use to segment id: the first is the least recently used.
    by_use: BTreeMap<u64, u64>,
    tick: u64,
}

impl Entries {
    fn touch(&mut self, id: u64) -> Option<Arc<File>> {
        self.tick += 1;
        let tick = self.tick;
        let (file, used) = self.files.get_mut(&id)?;
        self.by_use.remove(used);
        *used = tick;
        self.by_use.insert(tick, id);
        Some(Arc::clone(file))
    }

    fn remove(&mut self, id: u64) -> bool {
        match self.files.remove(&id) {
            Some((_, used)) => {
                self.by_use.remove(&used);
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
        }
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

    /// The open file of segment `id` at `path` (read-only), opened if the cache does
    /// not hold it.
    pub(crate) fn get(&self, id: u64, path: &Path) -> Result<Arc<File>, LogError> {
        if let Some(file) = self.lock().touch(id) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(file);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let opened = File::open(path).map_err(LogError::io("open", path))?;
        crate::segment::without_readahead(&opened);
        let mut entries = self.lock();
        // Another reader may have opened it meanwhile: keep one.
        if let Some(file) = entries.touch(id) {
            return Ok(file);
        }
        let file = Arc::new(opened);
        let tick = entries.tick;
        entries.files.insert(id, (Arc::clone(&file), tick));
        entries.by_use.insert(tick, id);
        self.evict_over_capacity(&mut entries);
        Ok(file)
    }

    /// Closes segment `id`'s file if the cache holds it (the segment is gone).
    pub(crate) fn forget(&self, id: u64) {
        self.lock().remove(id);
    }

    fn evict_over_capacity(&self, entries: &mut Entries) {
        let capacity = self.capacity.load(Ordering::Relaxed);
        while entries.files.len() > capacity {
            let Some((_, id)) = entries.by_use.pop_first() else {
                break;
            };
            entries.files.remove(&id);
            self.evictions.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().expect("file cache mutex poisoned")
    }
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
}
