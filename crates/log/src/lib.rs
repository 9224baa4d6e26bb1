//! The partition log: an append-only sequence of Kafka v2 record batches on disk.
//!
//! A [`Log`] owns one partition directory. The directory holds segments, each a
//! triple of files named by the segment's base offset zero-padded to 20 digits:
//! `00000000000000000000.log` (record batches stored verbatim, only the base offset
//! rewritten), `.index` (sparse offset index) and `.timeindex` (sparse time index).
//! `docs/log-format.md` specifies every file byte by byte.
//!
//! Lifecycle: [`Log::open`] recovers the directory (validates the tail by CRC-32C,
//! truncates a torn tail, rebuilds missing or damaged indexes), then the owner appends,
//! reads, syncs and enforces retention, and finally calls [`Log::close`], which syncs
//! everything and leaves a clean-shutdown marker so the next open can skip the scan.
//!
//! Storage errors (`docs/storage-errors.md`): a write that fails (a full disk) is
//! undone and the append refused with the log unchanged (`LogError::WriteRefused`);
//! a failed fsync, or an undo that fails, poisons the log for good. Reads of sealed
//! segments check each batch's CRC and report damage as a [`CorruptBatch`];
//! [`Log::mark_for_repair`] makes the next open scan and truncate such a segment.
//!
//! Thread-safety: a `Log` is a plain value with `&mut self` appends; the broker wraps
//! it in a mutex and is the partition's single writer. Expensive work is kept out of
//! that mutex: [`Log::sync_set`] hands out the files to fsync, and [`Log::locate`]
//! hands out a [`ReadSlice`] that is read with positional reads without the lock.
//!
//! Modules, from the top down:
//! - `log`: the [`Log`]: offset assignment, rolls, sync bookkeeping, reads across
//!   segments, timestamp lookups, retention, close; with `log/cleaner`, the cleaner
//!   of compacted topics (one pass: plan, stage cleaned segments, swap them in), whose
//!   `checkpoint` and `staging` the log and recovery use without the cleaner itself.
//! - `recovery`: opening a directory, the clean-shutdown marker, crash repair.
//! - `segment` (with `segment/load`): one segment's files and state; adopting or
//!   rebuilding its indexes at open.
//! - `file_names`: the names of a partition directory's files.
//! - `index`, `time_index`: the two sparse index formats, as plain values.
//! - `indexing`: the cadence that decides which batches get index entries.
//! - `scan`: chunked walks over a segment's batches (recovery, timestamp lookups).
//! - `read`: [`ReadSlice`], the lock-free fetch read.
//! - `sync`: [`SyncSet`] and the record of what awaits a sync.
//! - `file_cache`: [`FileCache`], the bounded set of sealed segments' open files.
//! - `txn_index`: the aborted-transaction index per segment (Kafka's `.txnindex`);
//!   `control`: transaction markers (control batches), written and read.
//! - `batch`: the v2 batch header; `config`: settings and size limits; `error`.

pub mod batch;
pub mod compaction;
mod config;
pub mod control;
mod error;
pub mod file_cache;
mod file_names;
mod index;
mod indexing;
pub mod leader_epochs;
#[allow(clippy::module_inception)]
mod log;
mod read;
pub mod records;
mod recovery;
mod scan;
mod segment;
mod sync;
#[cfg(test)]
mod testutil;
pub mod time_index;
pub mod txn_index;

pub use batch::{BatchError, BatchHeader};
pub use config::{LogConfig, APPEND_BYTES_LIMIT, SEGMENT_BYTES_LIMIT, SEGMENT_OFFSETS_LIMIT};
pub use error::{CorruptBatch, LogError};
pub use file_cache::{FileCache, FileCacheStats};
pub use log::cleaner::{CleanReport, CleanedPass, CleanerConfig, CleaningPlan, StagedCleaning};
pub use log::{AppendInfo, Log, RetentionReport, SealedSegment};
pub use read::ReadSlice;
pub use recovery::RecoveryReport;
pub use sync::SyncSet;
pub use txn_index::AbortedTxn;
