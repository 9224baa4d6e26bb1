//! The log's expected failures, as values.
use crate::{BatchError, Offset};
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
    /// A previous fsync or write failed. The log refuses further writes rather than
    /// retry, because after a failed fsync the kernel may have dropped dirty pages.
    #[error("log {path} is poisoned after an I/O failure and accepts no writes")]
    Poisoned { path: PathBuf },
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

impl LogError {
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
}
