//! The data directory's free space and the threshold below which produces are refused
//! (`disk_free_bytes_min`), so that the broker's own small writes (committed offsets,
//! producer-id blocks, topic metadata, shutdown snapshots) still find room when clients
//! fill the disk.
//!
//! Cheap on the produce path: `statvfs(2)` runs on a task of its own every
//! [`DISK_CHECK_INTERVAL_MS`], never per produce. Between two measurements each produce
//! reserves its size from the last figure with one atomic add, so concurrent produces
//! cannot together overshoot the threshold; only other processes' writes (and the
//! broker's own metadata) go unaccounted until the next measurement.
//!
//! Thread-safe: shared by every connection as part of the [`crate::Broker`].

pub mod probe;

use crate::BrokerError;
use headway_base::limits::DISK_CHECK_INTERVAL_MS;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub struct DiskSpace {
    dir: PathBuf,
    min_bytes: u64,
    /// Free bytes (available to the broker's user) at the last measurement.
    measured_bytes: AtomicU64,
    /// Bytes of produces accepted since the last measurement.
    reserved_bytes: AtomicU64,
    /// Produces refused because of the threshold.
    refused: AtomicU64,
    /// The last measurement was below the threshold (for logging transitions only).
    below: AtomicBool,
}

/// What `/metrics` shows of the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskSnapshot {
    /// The last measurement minus what was produced since.
    pub free_bytes: u64,
    pub min_bytes: u64,
    pub produces_refused: u64,
}

impl DiskSpace {
    /// Measures `dir`'s filesystem once. Blocking.
    pub(crate) fn open(dir: &Path, min_bytes: u64) -> std::io::Result<DiskSpace> {
        let disk = DiskSpace {
            dir: dir.to_path_buf(),
            min_bytes,
            measured_bytes: AtomicU64::new(u64::MAX),
            reserved_bytes: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            below: AtomicBool::new(false),
        };
        disk.measure()?;
        Ok(disk)
    }

    /// Measures the free space now (`statvfs`). Blocking.
    pub fn measure(&self) -> std::io::Result<u64> {
        let stat = rustix::fs::statvfs(&self.dir)?;
        let free_bytes = stat.f_bavail.saturating_mul(stat.f_frsize);
        // What was reserved before this point is in the measurement (or about to be
        // written, a small error that the next measurement corrects).
        self.reserved_bytes.store(0, Ordering::Release);
        self.measured_bytes.store(free_bytes, Ordering::Release);
        let below = free_bytes < self.min_bytes;
        if self.below.swap(below, Ordering::AcqRel) != below {
            match below {
                true => {
                    tracing::warn!(dir = %self.dir.display(), free_bytes, disk_free_bytes_min = self.min_bytes,
                    "free space is below disk_free_bytes_min: produces are refused until space returns")
                }
                false => {
                    tracing::info!(dir = %self.dir.display(), free_bytes, disk_free_bytes_min = self.min_bytes,
                    "free space is back above disk_free_bytes_min: produces are accepted")
                }
            }
        }
        Ok(free_bytes)
    }

    /// Reserves room for a produce of `bytes`, or refuses it when it would take the free
    /// space below the threshold. Never blocks: two atomic operations.
    pub fn reserve(&self, bytes: usize) -> Result<(), BrokerError> {
        if self.min_bytes == 0 {
            return Ok(());
        }
        let bytes = bytes as u64;
        let reserved = self.reserved_bytes.fetch_add(bytes, Ordering::AcqRel) + bytes;
        let left = self
            .measured_bytes
            .load(Ordering::Acquire)
            .saturating_sub(reserved);
        if left >= self.min_bytes {
            return Ok(());
        }
        self.reserved_bytes.fetch_sub(bytes, Ordering::AcqRel);
        self.refused.fetch_add(1, Ordering::Relaxed);
        Err(BrokerError::DiskFree {
            free_bytes: left.saturating_add(bytes),
            min_bytes: self.min_bytes,
        })
    }

    pub fn snapshot(&self) -> DiskSnapshot {
        DiskSnapshot {
            free_bytes: self
                .measured_bytes
                .load(Ordering::Acquire)
                .saturating_sub(self.reserved_bytes.load(Ordering::Acquire)),
            min_bytes: self.min_bytes,
            produces_refused: self.refused.load(Ordering::Relaxed),
        }
    }
}

/// Measures the broker's disk every [`DISK_CHECK_INTERVAL_MS`] until the broker is
/// dropped: `disk` hands out the broker's `DiskSpace` while the broker lives (the
/// loop holds no reference to the broker between rounds). A failed measurement keeps
/// the previous figure and is logged once.
pub(crate) async fn run_disk_checks(disk: impl Fn() -> Option<Arc<DiskSpace>>) {
    let mut failing = false;
    loop {
        tokio::time::sleep(Duration::from_millis(DISK_CHECK_INTERVAL_MS)).await;
        let Some(disk) = disk() else { return };
        let Ok(measured) = tokio::task::spawn_blocking(move || disk.measure()).await else {
            return;
        };
        match measured {
            Ok(_) => failing = false,
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "measuring the data directory's free space failed");
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A disk whose last measurement said `free_bytes` (the directory is kept for
    /// later measurements).
    fn disk_with(free_bytes: u64, min_bytes: u64) -> (DiskSpace, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskSpace::open(dir.path(), min_bytes).unwrap();
        disk.measured_bytes.store(free_bytes, Ordering::Release);
        (disk, dir)
    }

    #[test]
    fn produces_reserve_their_size_until_the_threshold() {
        let (disk, _dir) = disk_with(1000, 600);
        disk.reserve(300).unwrap();
        disk.reserve(100).unwrap();
        let refused = disk.reserve(1).unwrap_err();
        assert!(matches!(
            refused,
            BrokerError::DiskFree {
                free_bytes: 600,
                min_bytes: 600
            }
        ));
        assert_eq!(disk.snapshot().free_bytes, 600);
        assert_eq!(disk.snapshot().produces_refused, 1);
    }

    #[test]
    fn a_new_measurement_replaces_the_reservations() {
        let (disk, _dir) = disk_with(1000, 600);
        disk.reserve(400).unwrap();
        assert!(disk.reserve(400).is_err());
        disk.measure().unwrap();
        // The temporary directory's disk has far more than 1000 bytes free.
        disk.reserve(400).unwrap();
    }

    #[test]
    fn zero_turns_the_check_off() {
        let (disk, _dir) = disk_with(0, 0);
        disk.reserve(usize::MAX).unwrap();
    }
}
