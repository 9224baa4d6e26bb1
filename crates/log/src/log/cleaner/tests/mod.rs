//! Tests of the log cleaner against a real directory, on keyed batches built by a
//! third-party encoder and read back through the log's own fetch path:
//! - `steps`: each step of a pass (plan, stage, swap), reads across gaps, the indexes
//!   of cleaned segments, tombstones, producers, races with retention, and a swap
//!   stopped at every one of its steps;
//! - `property`: the randomized model (seeded; `CLEANER_SEED` replays a run);
//! - `aborted`: the aborted-transaction index of cleaned segments;
//! - `crash`: a child process cleaning in a loop, killed with SIGKILL at random moments.

use super::*;
use crate::batch::BatchIter;
use crate::testutil::{decoded, encoded_batch, TestRecord, CODECS};
use crate::LogConfig;
use headway_base::Offset;
use kafka_protocol::records::Compression;
use std::collections::BTreeMap;
use std::path::Path;

mod aborted;
mod crash;
mod property;
mod steps;

const NOW_MS: i64 = 1_000_000;

fn log_config(segment_bytes_max: u64) -> LogConfig {
    LogConfig {
        segment_bytes_max,
        segment_ms_max: u64::MAX,
        retention_bytes_max: None,
        retention_ms_max: None,
        index_interval_bytes: 256,
    }
}

fn cleaner_config() -> CleanerConfig {
    CleanerConfig {
        map_bytes_max: 1 << 20,
        delete_retention_ms: u64::MAX,
        min_compaction_lag_ms: 0,
        dirty_bytes_max: u64::MAX,
    }
}

/// A record as the tests write and read it: key, value (`None`: a tombstone).
type Kv = (Option<String>, Option<String>);

fn kv(key: &str, value: Option<&str>) -> Kv {
    (Some(key.to_string()), value.map(str::to_string))
}

/// One batch holding `records`, all stamped `timestamp_ms`; from an idempotent
/// producer `(id, first sequence)` when given.
fn keyed_batch(
    compression: Compression,
    records: &[Kv],
    timestamp_ms: i64,
    producer: Option<(i64, i32)>,
) -> Vec<u8> {
    let records: Vec<TestRecord> = records
        .iter()
        .map(|(key, value)| (key.clone(), value.clone(), timestamp_ms))
        .collect();
    let producer = producer.map_or((-1, -1, 0), |(id, sequence)| (id, 0, sequence));
    let batch = encoded_batch(compression, 0, &records, producer);
    assert_eq!(BatchIter::new(&batch).count(), 1, "one batch");
    batch
}

/// Appends one batch; returns its base offset.
fn append(log: &mut Log, compression: Compression, records: &[Kv], timestamp_ms: i64) -> i64 {
    let mut batch = keyed_batch(compression, records, timestamp_ms, None);
    log.append(&mut batch, NOW_MS)
        .expect("append")
        .base_offset
        .value()
}

/// Syncs everything appended, so that every sealed segment is durable.
fn sync(log: &mut Log) {
    log.sync_set().sync().expect("sync");
}

/// Every batch from the log start to its end, read through the fetch path.
fn read_batches(log: &Log) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset().value();
    while offset < log.log_end_offset().value() {
        let bytes = log
            .locate(Offset::new(offset))
            .expect("locate")
            .read(1 << 20, Offset::new(i64::MAX))
            .expect("read");
        let mut last = None;
        for (header, batch) in BatchIter::new(&bytes) {
            crate::batch::validate(batch).expect("a valid batch");
            out.push(batch.to_vec());
            last = Some(header.last_offset());
        }
        offset = last.expect("a read before the log end returns a batch") + 1;
    }
    out
}

/// The records of a batch as a third-party decoder reads them.
fn records_of(batch: &[u8]) -> Vec<(i64, Kv)> {
    decoded(batch)
        .into_iter()
        .map(|(offset, key, value)| (offset, (key, value)))
        .collect()
}

/// Every record the log serves, by offset; panics on an offset served twice or out of
/// order, or on a batch whose offsets overlap the previous one.
fn survivors(log: &Log) -> BTreeMap<i64, Kv> {
    let mut out = BTreeMap::new();
    let mut previous_end = i64::MIN;
    for batch in read_batches(log) {
        let header = crate::BatchHeader::parse(&batch).expect("header");
        assert!(
            header.base_offset > previous_end,
            "batch {} overlaps the previous one, which ended at {previous_end}",
            header.base_offset
        );
        previous_end = header.last_offset();
        for (offset, record) in records_of(&batch) {
            assert!(
                (header.base_offset..=header.last_offset()).contains(&offset),
                "record {offset} outside its batch"
            );
            let last = out.keys().next_back().copied().unwrap_or(i64::MIN);
            assert!(offset > last, "offsets increase: {offset} after {last}");
            out.insert(offset, record);
        }
    }
    out
}

/// The latest record of each key in `written` (offset to record).
fn latest_per_key(written: &BTreeMap<i64, Kv>) -> BTreeMap<String, i64> {
    let mut latest = BTreeMap::new();
    for (offset, (key, _)) in written {
        if let Some(key) = key {
            latest.insert(key.clone(), *offset);
        }
    }
    latest
}

/// Files and directories in `dir` whose names end with `suffix`.
fn entries_ending(dir: &Path, suffix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(suffix))
        .collect()
}

/// What every record written (offset to record and its batch's max timestamp) may
/// have become in the log after cleaning passes that may have removed the tombstones
/// for which `removable(offset, timestamp)` holds, checked against what the log serves:
/// - every record served is the one written at its offset (no mix of old and new);
/// - a record is gone only if a later record of its key was written, or it is a
///   removable tombstone; records without a key all stay;
/// - a key's latest record is gone only as such a tombstone, and then nothing of the
///   key is served (no older value comes back).
fn check_cleaned(
    log: &Log,
    written: &BTreeMap<i64, (Kv, i64)>,
    removable: impl Fn(i64, i64) -> bool,
    context: &str,
) {
    let got = survivors(log);
    let next_offset = written.keys().next_back().map_or(0, |o| o + 1);
    assert_eq!(
        log.log_end_offset().value(),
        next_offset,
        "{context}: log end offset"
    );
    for (offset, record) in &got {
        let expected = written.get(offset).map(|(r, _)| r);
        assert_eq!(expected, Some(record), "{context}: record at {offset}");
    }
    let latest = latest_per_key(&written.iter().map(|(o, (r, _))| (*o, r.clone())).collect());
    for (offset, ((key, value), timestamp_ms)) in written.range(log.log_start_offset().value()..) {
        if got.contains_key(offset) {
            continue;
        }
        let Some(key) = key else {
            panic!("{context}: record {offset} without a key was removed");
        };
        let expired_tombstone = value.is_none() && removable(*offset, *timestamp_ms);
        let superseded = latest[key] > *offset;
        assert!(
            superseded || expired_tombstone,
            "{context}: record {offset} of key {key} was removed, yet it is the key's latest and not an expired tombstone"
        );
        if !superseded {
            let served = got
                .values()
                .any(|(k, _)| k.as_deref() == Some(key.as_str()));
            assert!(
                !served,
                "{context}: key {key}'s tombstone at {offset} was removed while older records of the key are served"
            );
        }
    }
}

/// For passes that removed no tombstone.
fn no_tombstone(_offset: i64, _timestamp_ms: i64) -> bool {
    false
}

/// The headers of every batch the log serves, in order.
fn served_headers(log: &Log) -> Vec<crate::BatchHeader> {
    read_batches(log)
        .iter()
        .map(|b| crate::BatchHeader::parse(b).expect("header"))
        .collect()
}

/// A fetch at `offset` starts with the first batch (of `headers`, all the log serves)
/// that ends at or after it; nothing at the log end.
fn check_fetch(log: &Log, headers: &[crate::BatchHeader], offset: i64, context: &str) {
    let bytes = log
        .locate(Offset::new(offset))
        .expect("locate")
        .read(1, Offset::new(i64::MAX))
        .expect("read");
    let first = BatchIter::new(&bytes).next().map(|(h, _)| h.base_offset);
    let expected = headers
        .iter()
        .find(|h| h.last_offset() >= offset)
        .map(|h| h.base_offset);
    assert_eq!(first, expected, "{context}: fetch at {offset}");
}

/// A timestamp lookup finds the first batch (of `headers`) whose max timestamp is at
/// or after `timestamp_ms`.
fn check_timestamp(log: &Log, headers: &[crate::BatchHeader], timestamp_ms: i64, context: &str) {
    let expected = headers
        .iter()
        .find(|h| h.max_timestamp >= timestamp_ms)
        .map(|h| (Offset::new(h.base_offset), h.max_timestamp));
    let found = log.offset_for_timestamp(timestamp_ms).expect("lookup");
    assert_eq!(found, expected, "{context}: timestamp {timestamp_ms}");
}
