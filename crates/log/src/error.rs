//! The log's expected failures, as values.
use crate::BatchError;
use headway_base::{durable_file::DurableFileError, Offset};
use std::path::{Path, PathBuf};

/// Expected failures of the log. The broker maps each to a Kafka error code in one place.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{context} {path}: {source}")]
    Io {
        context: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        offset: Offset,
        log_start_offset: Offset,
        log_end_offset: Offset,
    },
    #[error("invalid record batch: {0}")]
    Batch(#[from] BatchError),
    /// A write failed (most often `ENOSPC`: the disk is full) and was undone: every
    /// file is back at its length before the append, so the log is exactly as it was
    /// and later appends may succeed. Not a poisoning failure: a write that never
    /// reached the page cache leaves nothing unknown behind, unlike a failed fsync.
    #[error("{context} {path} failed and was undone, the log is unchanged: {source}")]
    WriteRefused {
        context: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A previous fsync failed, or a failed write could not be undone. The log refuses further writes rather than
    /// retry, because after a failed fsync the kernel may have dropped dirty pages.
    #[error("log {path} is poisoned after an I/O failure and accepts no writes")]
    Poisoned { path: PathBuf },
    /// A cleaning pass is planned or running on the log: a truncation waits for it.
    #[error("log {path} is being cleaned; truncate it after the pass")]
    CleanerBusy { path: PathBuf },
    /// Batches copied from a leader must continue the log: each starts at or after the
    /// end of what comes before it.
    #[error("a replicated append must start at offset {expected} or later, not {found}")]
    NotContiguous { expected: Offset, found: Offset },
    /// One append must fit one segment: at most `APPEND_BYTES_LIMIT` bytes and a span
    /// of offsets that relative offsets (u32) can address.
    #[error(
        "append of {size_bytes} bytes spanning {offset_count} offsets is too large for one segment"
    )]
    AppendTooLarge {
        size_bytes: usize,
        offset_count: i64,
    },
}

/// A stored batch that fails its CRC-32C or length checks when read back from a
/// sealed segment. Carried inside the `std::io::Error` (kind `InvalidData`) that
/// [`crate::ReadSlice::read`] returns, so the reader can tell damage from I/O errors
/// (`CorruptBatch::find`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt record batch at byte {position} of segment {segment_base_offset} (offsets {base_offset}..={last_offset}): {error}")]
pub struct CorruptBatch {
    /// Base offset of the segment holding the batch (its file name).
    pub segment_base_offset: Offset,
    /// Byte position of the batch in the segment's `.log`.
    pub position: u64,
    /// The offsets the batch header claims (untrusted: the header may be the damage).
    pub base_offset: Offset,
    pub last_offset: Offset,
    pub error: BatchError,
}

impl CorruptBatch {
    /// The `CorruptBatch` inside an I/O error returned by a read, if that is its cause.
    pub fn find(error: &std::io::Error) -> Option<&CorruptBatch> {
        error.get_ref()?.downcast_ref::<CorruptBatch>()
    }

    pub(crate) fn into_io(self) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidData, self)
    }
}

impl From<DurableFileError> for LogError {
    fn from(e: DurableFileError) -> LogError {
        LogError::Io {
            context: e.context,
            path: e.path,
            source: e.source,
        }
    }
}

impl LogError {
    /// True when the failed operation was undone and left the log as it was.
    pub fn is_refused(&self) -> bool {
        matches!(self, LogError::WriteRefused { .. })
    }

    /// Wraps an I/O error with what was being done and to which file.
    pub(crate) fn io(
        context: &'static str,
        path: &Path,
    ) -> impl FnOnce(std::io::Error) -> LogError {
        let path = path.to_path_buf();
        move |source| LogError::Io {
            context,
            path,
            source,
        }
    }

    /// Like [`LogError::io`], for a write that was undone.
    pub(crate) fn refused(
        context: &'static str,
        path: &Path,
    ) -> impl FnOnce(std::io::Error) -> LogError {
        let path = path.to_path_buf();
        move |source| LogError::WriteRefused {
            context,
            path,
            source,
        }
    }
}
