//! Open files as a counted resource: the broker raises its own limit at start-up, and a
//! topic or partitions that would take the process past it are refused whole before
//! anything is created, instead of failing part-way (and leaving a data directory that
//! can no longer be opened under the same limit).
//!
//! No partition holds a file open between uses: every segment file (the active
//! segment's log, offset index and time index, sealed segments' logs) is opened
//! through the log's bounded [`FileCache`], which closes the least recently used when
//! it needs room. One file per partition is still counted: a partition written holds
//! the `.log` it wrote until its flusher has synced it, even when the cache closed its
//! own copy meanwhile ([`FILES_PER_PARTITION`]). Sockets take one file each.
//!
//! What the limit leaves after a reserve for connections (`connections_max`, at most
//! half the limit) and [`limits::OPEN_FILES_HEADROOM`] for the rest (directories
//! synced, side files, the metrics listener) is `open_files_max` (or the configured
//! figure, when lower). New partitions are refused whole when the partitions would
//! then count more files than `open_files_max` leaves beside the files open outside
//! the cache. The cache's capacity is what `open_files_max` leaves beside the files
//! held open outside it, at least [`limits::FILE_CACHE_CAPACITY_MIN`]; the broker sets
//! it at start-up and after every change to the set of partitions.

pub mod probe;

use crate::BrokerError;
use headway_base::limits;
use headway_log::FileCache;
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Files a partition counts for: the `.log` a write holds until its sync (its other
/// files, and this one between writes, are the cache's).
pub const FILES_PER_PARTITION: u64 = 1;

/// Raises the soft limit on open files to the hard limit; returns the soft limit in
/// force afterwards (`None`: unlimited, or the limit could not be read).
pub fn raise_limit() -> Option<u64> {
    let limit = getrlimit(Resource::Nofile);
    if let (Some(current), Some(hard)) = (limit.current, limit.maximum) {
        if current < hard {
            let raised = Rlimit {
                current: Some(hard),
                maximum: Some(hard),
            };
            if let Err(error) = setrlimit(Resource::Nofile, raised) {
                let error = std::io::Error::from(error);
                tracing::warn!(current, hard, %error, "could not raise the open files limit");
            }
        }
    }
    getrlimit(Resource::Nofile).current
}

/// Files this process has open now (`/proc/self/fd`); `None` where that is not there.
pub fn open_now() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    Some(entries.count() as u64)
}

/// Files open now outside the cache of sealed segments' files: those a new partition
/// cannot take back (`None` where `/proc/self/fd` is not there).
pub fn held_now() -> Option<u64> {
    let cached = FileCache::global().stats().open as u64;
    open_now().map(|open| open.saturating_sub(cached))
}

/// The files a broker may still open for new partitions: plain code over the figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles {
    /// The process's soft limit.
    pub limit: u64,
    /// Kept for connections.
    pub reserve: u64,
    /// Files the broker's logs may hold open at once (`open_files_max`).
    pub files_max: u64,
}

impl OpenFiles {
    /// The budget under `limit`, with `configured` (`open_files_max`) as a lower cap.
    pub fn new(limit: u64, connections_max: usize, configured: Option<u64>) -> OpenFiles {
        let connections = (connections_max as u64).min(limit / 2);
        let reserve = connections + limits::OPEN_FILES_HEADROOM;
        let derived = limit.saturating_sub(reserve);
        OpenFiles {
            limit,
            reserve,
            files_max: configured.map_or(derived, |c| c.min(derived)),
        }
    }

    /// Capacity of the cache of sealed segments' files beside `held` files open
    /// outside it.
    pub fn cache_capacity(&self, held: u64) -> usize {
        let room = self.files_max.saturating_sub(held);
        usize::try_from(room)
            .unwrap_or(usize::MAX)
            .max(limits::FILE_CACHE_CAPACITY_MIN)
    }

    /// Whether `partitions` new partitions fit beside `open` files held open (outside
    /// the cache, which gives its files back) and the `existing` partitions.
    pub fn check(&self, open: u64, existing: u64, partitions: u64) -> Result<(), BrokerError> {
        let needed = partitions.saturating_mul(FILES_PER_PARTITION);
        let counted = existing.saturating_mul(FILES_PER_PARTITION);
        let available = self.files_max.saturating_sub(open.saturating_add(counted));
        match needed <= available {
            true => Ok(()),
            false => Err(BrokerError::OpenFilesLimit {
                partitions,
                needed,
                available,
                limit: self.limit,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_fit_what_the_limit_leaves_after_open_files_and_the_reserve() {
        // 20,000 files, 10,000 connections: 10,000 + headroom kept back.
        let budget = OpenFiles::new(20_000, 10_000, None);
        let room = 20_000 - 10_000 - limits::OPEN_FILES_HEADROOM - 100 - 500;
        let fits = room / FILES_PER_PARTITION;
        assert!(budget.check(100, 500, fits).is_ok());
        match budget.check(100, 500, fits + 1) {
            Err(BrokerError::OpenFilesLimit {
                needed,
                available,
                limit,
                ..
            }) => {
                assert_eq!((needed, available, limit), (fits + 1, room, 20_000));
            }
            other => panic!("{other:?}"),
        }
        // A small limit keeps at most half of it for connections.
        let small = OpenFiles::new(1024, 10_000, None);
        assert_eq!(small.reserve, 512 + limits::OPEN_FILES_HEADROOM);
        assert!(small.check(2000, 0, 1).is_err(), "more open than the limit");
        assert!(small.check(10, 440, 1).is_err(), "too many partitions");
        assert!(small.check(10, 400, 1).is_ok());
    }

    #[test]
    fn the_cache_of_sealed_files_gets_what_the_held_files_leave() {
        let budget = OpenFiles::new(20_000, 10_000, None);
        let files_max = 20_000 - 10_000 - limits::OPEN_FILES_HEADROOM;
        assert_eq!(budget.files_max, files_max);
        assert_eq!(budget.cache_capacity(1_000), (files_max - 1_000) as usize);
        // Never below the floor, even when the held files take everything.
        assert_eq!(
            budget.cache_capacity(files_max + 5),
            limits::FILE_CACHE_CAPACITY_MIN
        );
        // A configured open_files_max only lowers the budget.
        assert_eq!(OpenFiles::new(20_000, 100, Some(4_000)).files_max, 4_000);
        assert_eq!(
            OpenFiles::new(2_048, 100, Some(1 << 40)).files_max,
            2_048 - 164
        );
    }
}
