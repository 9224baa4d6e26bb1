//! Settings of one partition log, and every limit the log works within: the ones
//! that keep its on-disk formats valid and the ones that bound its buffers.

/// Largest segment the log creates. Offset-index entries store file positions as
/// u32, and Kafka's own limit for `segment.bytes` is `i32::MAX`; keeping segments at
/// or below it means every batch position fits an index entry. A larger
/// `segment_bytes_max` is clamped to this value.
pub const SEGMENT_BYTES_LIMIT: u64 = i32::MAX as u64;

/// Largest span of offsets one segment holds. Index entries store offsets relative
/// to the segment's base offset as u32; like Kafka, the log rolls before a segment's
/// relative offsets would pass `i32::MAX`, which leaves room for the last batch's span.
pub const SEGMENT_OFFSETS_LIMIT: i64 = i32::MAX as i64;

/// Largest single append, in bytes: one append lands in one segment, so it must fit
/// the positions an index entry can hold. Larger appends fail with
/// [`crate::LogError::AppendTooLarge`]; the broker's request limits are far below it.
pub const APPEND_BYTES_LIMIT: usize = i32::MAX as usize;

/// Bytes read at a time by a full scan. A batch larger than this is read whole, and
/// never more than the bytes the file region holds, so a corrupt length field cannot
/// make the walk allocate more than the file's size.
pub(crate) const SCAN_CHUNK_BYTES: usize = 1 << 20;

/// Bytes the log cleaner buffers before it writes them to the cleaned segment it
/// stages (plus one batch, when larger): a pass writes in large steps yet holds no
/// whole segment in memory. It reads in steps of [`SCAN_CHUNK_BYTES`].
pub(crate) const CLEANER_WRITE_BUFFER_BYTES: usize = 1 << 20;

/// Bytes read at a time by short walks (a segment's tail, a timestamp lookup), which
/// usually cover about one `index_interval_bytes`.
pub(crate) const SHORT_WALK_CHUNK_BYTES: usize = 64 << 10;

/// Most bytes one blocking read asks the disk for at a time: a fetch from cold data
/// (a consumer catching up) is read in requests this large, one after another, so
/// that a light producer's sync on the same disk waits behind at most one of them.
/// Beside a cold 1 GiB read on this machine's disk, 4 KiB appends with `fdatasync` had
/// a p99 of 1.4-2.2 ms with 1 MiB reads, 0.8-1.1 ms with 256 KiB reads and 0.7-0.9 ms
/// with 128 KiB reads, while the reader got 0.78-1.1, 0.62-0.81 and 0.52-0.68 GB/s
/// (`bench/results/disk-contention.md`).
pub(crate) const DISK_READ_BYTES_MAX: usize = 256 << 10;

/// Bytes read past `index_interval_bytes + max_bytes`, so that the walk from the
/// index entry usually ends on a batch boundary inside the buffer.
pub(crate) const READ_SLACK_BYTES: usize = 4096;

/// A sealed segment keeps every this-many-th index entry in memory (the files keep
/// them all): 24 bytes per 16 × `index_interval_bytes` of log (about 384 KiB per GiB
/// at 4 KiB) instead of per interval (6 MiB per GiB). A read in a sealed segment then
/// starts up to 16 intervals (64 KiB) before its batch and walks forward; only readers
/// catching up read there.
pub(crate) const SEALED_INDEX_THINNING: usize = 16;

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

impl LogConfig {
    /// The settings with `segment_bytes_max` clamped to [`SEGMENT_BYTES_LIMIT`].
    pub(crate) fn clamped(mut self) -> LogConfig {
        self.segment_bytes_max = self.segment_bytes_max.min(SEGMENT_BYTES_LIMIT);
        self
    }

    /// `segment_ms_max` as a signed duration, saturating.
    pub(crate) fn segment_ms_max_i64(&self) -> i64 {
        i64::try_from(self.segment_ms_max).unwrap_or(i64::MAX)
    }

    /// The timestamp before which a segment's newest record has expired, if any.
    pub(crate) fn retention_cutoff_ms(&self, now_ms: i64) -> Option<i64> {
        let retention_ms = self.retention_ms_max?;
        Some(now_ms.saturating_sub(i64::try_from(retention_ms).unwrap_or(i64::MAX)))
    }
}
