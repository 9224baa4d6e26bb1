//! CONTRACT STUB: signatures are fixed, bodies to be implemented.
use crate::{LogConfig, LogError, Offset, ReadSlice, SyncSet};
use std::path::{Path, PathBuf};

/// What an append wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset assigned to the first record of the first batch.
    pub base_offset: Offset,
    /// Offset of the last record of the last batch.
    pub last_offset: Offset,
    /// Log end offset after the append (`last_offset + 1`).
    pub log_end_offset: Offset,
}

/// What [`Log::open`] found and repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub segments: usize,
    /// False when the clean-shutdown marker was missing and the tail was scanned.
    pub clean_shutdown: bool,
    /// Bytes cut from torn or corrupt tails.
    pub truncated_bytes: u64,
    /// Index files (offset or time) that were missing or damaged and rebuilt.
    pub rebuilt_indexes: usize,
    pub log_start_offset: Offset,
    pub log_end_offset: Offset,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    pub deleted_segments: usize,
    pub deleted_bytes: u64,
    pub log_start_offset: Offset,
}

pub struct Log {
    dir: PathBuf,
}

impl Log {
    /// Opens (creating if needed) the log in `dir` and recovers it.
    pub fn open(dir: &Path, config: LogConfig, now_ms: i64) -> Result<(Log, RecoveryReport), LogError> {
        let _ = (dir, config, now_ms);
        todo!()
    }

    /// Appends one or more whole batches that the caller has already validated
    /// (`batch::validate_all`). Assigns consecutive offsets, rewriting each batch's
    /// base offset in `batches`, writes them with one write, and updates the indexes.
    /// Rolls first when the active segment is full or too old.
    pub fn append(&mut self, batches: &mut [u8], now_ms: i64) -> Result<AppendInfo, LogError> {
        let _ = (batches, now_ms);
        todo!()
    }

    pub fn log_start_offset(&self) -> Offset {
        todo!()
    }

    pub fn log_end_offset(&self) -> Offset {
        todo!()
    }

    /// Total bytes of all segment `.log` files.
    pub fn size_bytes(&self) -> u64 {
        todo!()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &LogConfig {
        todo!()
    }

    /// Applies new settings; they take effect at the next roll or retention pass.
    pub fn set_config(&mut self, config: LogConfig) {
        let _ = config;
        todo!()
    }

    /// Takes every file written since the previous call (the active segment, segments
    /// rolled since, their indexes, and the directory when files were created) together
    /// with the log end offset at this moment. Syncing the set makes every offset below
    /// `SyncSet::log_end_offset` durable.
    pub fn sync_set(&mut self) -> SyncSet {
        todo!()
    }

    /// Marks the log poisoned: every later append fails with `LogError::Poisoned`.
    pub fn poison(&mut self) {
        todo!()
    }

    /// Finds where a read at `offset` starts. `log_start_offset <= offset <= log_end_offset`,
    /// otherwise `OffsetOutOfRange`. At the log end offset the slice is empty.
    pub fn locate(&self, offset: Offset) -> Result<ReadSlice, LogError> {
        let _ = offset;
        todo!()
    }

    /// The first batch whose max timestamp is at or after `timestamp_ms`:
    /// its base offset and max timestamp. `None` when every batch is older.
    pub fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<(Offset, i64)>, LogError> {
        let _ = timestamp_ms;
        todo!()
    }

    /// Deletes the oldest non-active segments past `retention_bytes_max` or
    /// `retention_ms_max`, and advances the log start offset.
    pub fn enforce_retention(&mut self, now_ms: i64) -> Result<RetentionReport, LogError> {
        let _ = now_ms;
        todo!()
    }

    /// Syncs all files and writes the clean-shutdown marker.
    pub fn close(self) -> Result<(), LogError> {
        todo!()
    }
}
