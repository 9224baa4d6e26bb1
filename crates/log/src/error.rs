use crate::{BatchError, Offset};
use std::path::PathBuf;

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
}
