//! Tests of the whole log against a real directory, one file per concern, all on the
//! fixture below (built on `crate::testutil`'s batches and seeded generator):
//! - `aborted`: the aborted-transaction index;
//! - `append_read`: appends and reads;
//! - `rolls`: rolling to a new segment;
//! - `retention`: retention and deletion;
//! - `recovery`: reopening after a clean close or a crash, and the randomized model;
//! - `indexes`: the offset and time indexes;
//! - `sync_sets`: sync sets and poisoning;
//! - `storage_errors`: writes refused by a full disk, and damaged sealed segments;
//! - `truncate`: cutting the end of the log.

use super::*;
use crate::batch::BatchIter;
use crate::config::SEALED_INDEX_THINNING;
use crate::testutil::AppendBytes;
use crate::testutil::{batch, seed, Rng};
use std::fs::OpenOptions;
use std::io::Write;
use tempfile::TempDir;

mod aborted;
mod append_read;
mod indexes;
mod recovery;
mod retention;
mod rolls;
mod storage_errors;
mod sync_sets;
mod truncate;

const NOW_MS: i64 = 1_000_000;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 1 << 20,
        segment_ms_max: u64::MAX,
        retention_bytes_max: None,
        retention_ms_max: None,
        index_interval_bytes: 256,
    }
}

fn open(dir: &TempDir, config: LogConfig) -> (Log, RecoveryReport) {
    Log::open(dir.path(), config, NOW_MS).expect("open")
}

/// Appends one batch; returns it as stored (base offset rewritten).
fn append_one(log: &mut Log, records: usize, value_bytes: usize, timestamp_ms: i64) -> Vec<u8> {
    let mut bytes = batch(records, value_bytes, timestamp_ms, records as u8);
    let end_before = log.log_end_offset();
    let info = log.append_bytes(&mut bytes, NOW_MS).expect("append");
    assert_eq!(info.base_offset, end_before);
    assert_eq!(
        info.last_offset.value(),
        end_before.value() + records as i64 - 1
    );
    assert_eq!(info.log_end_offset.value(), info.last_offset.value() + 1);
    bytes
}

/// Reads everything from `from` to the log end, segment by segment.
fn read_all(log: &Log, from: i64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = from;
    while offset < log.log_end_offset().value() {
        let bytes = log
            .locate(Offset::new(offset))
            .unwrap()
            .read(1 << 30, Offset::new(i64::MAX))
            .unwrap();
        let (header, _) = BatchIter::new(&bytes)
            .last()
            .expect("a read before the log end returns a batch");
        offset = header.last_offset() + 1;
        out.extend_from_slice(&bytes);
    }
    out
}

/// (base offset, last offset) of each batch in `bytes`.
fn batch_offsets(bytes: &[u8]) -> Vec<(i64, i64)> {
    BatchIter::new(bytes)
        .map(|(h, _)| (h.base_offset, h.last_offset()))
        .collect()
}

fn segment_path(dir: &TempDir, base_offset: i64, suffix: &str) -> PathBuf {
    dir.path()
        .join(crate::file_names::file_name(base_offset, suffix))
}

fn append_garbage(path: &Path, bytes: &[u8]) {
    OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

/// Writes `count` batches, then drops the log without closing it (a crash).
fn crashed_log(dir: &TempDir, config: LogConfig, count: usize) -> Vec<Vec<u8>> {
    let (mut log, _) = open(dir, config);
    let batches = (0..count)
        .map(|i| append_one(&mut log, 1 + i % 3, 80, NOW_MS + i as i64))
        .collect();
    drop(log);
    batches
}
