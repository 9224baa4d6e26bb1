/// Settings of one partition log. The broker derives them from topic configs
/// (`segment.bytes`, `segment.ms`, `retention.bytes`, `retention.ms`,
/// `index.interval.bytes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Roll to a new segment before an append would grow the active one past this.
    pub segment_bytes_max: u64,
    /// Roll to a new segment once the active one is older than this.
    pub segment_ms_max: u64,
    /// Delete the oldest segments while the log is larger than this. `None`: no limit.
    pub retention_bytes_max: Option<u64>,
    /// Delete segments whose newest record is older than this. `None`: keep forever.
    pub retention_ms_max: Option<u64>,
    /// Add an offset-index and time-index entry after this many bytes of batches.
    pub index_interval_bytes: u32,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes_max: 1 << 30,
            segment_ms_max: 7 * 24 * 3600 * 1000,
            retention_bytes_max: None,
            retention_ms_max: Some(7 * 24 * 3600 * 1000),
            index_interval_bytes: 4096,
        }
    }
}
