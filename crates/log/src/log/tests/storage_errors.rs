//! Tests of the log's storage-error paths against a real directory: a write that
//! fails part-way (a full disk, simulated by `SPACE_LEFT_BYTES`) is undone and the
//! log carries on; a batch damaged on disk in a sealed segment is refused by reads,
//! and the segment is repaired at the next open once marked.

use super::*;
use crate::segment::SPACE_LEFT_BYTES;
use crate::CorruptBatch;
use std::os::unix::fs::FileExt;

/// Appends a one-record batch stamped `i`; returns it as stored.
fn append(log: &mut Log, i: usize) -> Result<Vec<u8>, LogError> {
    let mut bytes = batch(1, 40, i as i64, i as u8);
    log.append(&mut bytes, NOW_MS).map(|_| bytes)
}

fn read_from(log: &Log, offset: i64) -> std::io::Result<bytes::Bytes> {
    log.locate(Offset::new(offset))
        .unwrap()
        .read(1 << 30, Offset::new(i64::MAX))
}

/// Everything in the log, reading on from each read's last batch.
fn read_all(log: &Log) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset().value();
    while offset < log.log_end_offset().value() {
        let bytes = read_from(log, offset).unwrap();
        let (last, _) = BatchIter::new(&bytes).last().expect("a batch");
        offset = last.last_offset() + 1;
        out.extend_from_slice(&bytes);
    }
    out
}

/// The sizes of every file in the directory, by name.
fn file_sizes(dir: &TempDir) -> Vec<(String, u64)> {
    let mut sizes: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.file_name().into_string().unwrap(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    sizes.sort();
    sizes
}

/// With `space_left_bytes` of room, one append must be refused and leave every file
/// and the log end as they were; with room again, the log goes on and reopens whole.
/// Returns the refusal.
fn refused_then_resumed(segment_bytes_max: u64, written: usize, space_left_bytes: u64) -> LogError {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(
        dir.path(),
        LogConfig {
            segment_bytes_max,
            ..config()
        },
        NOW_MS,
    )
    .unwrap();
    let mut stored: Vec<u8> = Vec::new();
    for i in 0..written {
        stored.extend(append(&mut log, i).unwrap());
    }
    let files_before = file_sizes(&dir);
    let end_before = log.log_end_offset();

    SPACE_LEFT_BYTES.set(Some(space_left_bytes));
    let refused = append(&mut log, written);
    SPACE_LEFT_BYTES.set(None);

    let error = refused.expect_err("the append does not fit the space left");
    assert!(error.is_refused(), "{error}");
    assert!(!log.is_poisoned());
    assert_eq!(log.log_end_offset(), end_before);
    // Nothing partial stays on disk. A roll that failed removed the segment it had
    // created; a roll that succeeded before the append's own write failed leaves the
    // new, empty active segment, which the next append uses.
    let empty_next = |(name, size): &(String, u64)| {
        *size == 0 && name.starts_with(&crate::file_names::file_name(end_before.value(), ""))
    };
    let mut files_after = file_sizes(&dir);
    files_after.retain(|f| files_before.contains(f) || !empty_next(f));
    assert_eq!(files_after, files_before, "nothing partial stays on disk");
    assert_eq!(read_all(&log), stored, "reads go on as before");

    for i in written..written + 20 {
        stored.extend(append(&mut log, i).unwrap());
    }
    assert_eq!(read_all(&log), stored);
    log.close().unwrap();
    let (log, report) = Log::open(
        dir.path(),
        LogConfig {
            segment_bytes_max,
            ..config()
        },
        NOW_MS,
    )
    .unwrap();
    assert!(report.clean_shutdown);
    assert_eq!(report.truncated_bytes, 0);
    assert_eq!(report.rebuilt_indexes, 0, "index files match the log");
    assert_eq!(read_all(&log), stored);
    error
}

/// The file a refused write was to.
fn refused_path(error: &LogError) -> String {
    match error {
        LogError::WriteRefused { path, .. } => path.display().to_string(),
        other => panic!("not a refusal: {other}"),
    }
}

#[test]
fn a_log_write_that_fails_part_way_is_undone_and_appends_resume() {
    // 30 bytes of a batch of about 110 reach the file before ENOSPC.
    let error = refused_then_resumed(1 << 20, 10, 30);
    assert!(refused_path(&error).ends_with(".log"), "{error}");
}

#[test]
fn an_index_write_that_fails_is_undone_with_the_log_write() {
    // The tenth batch crosses an index interval: its `.log` write fits, its offset
    // index entry gets 3 of 8 bytes.
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(dir.path(), config(), NOW_MS).unwrap();
    let batch_bytes = append(&mut log, 0).unwrap().len();
    drop(log);
    let per_interval = 256usize.div_ceil(batch_bytes);
    let error = refused_then_resumed(1 << 20, per_interval, batch_bytes as u64 + 3);
    assert!(refused_path(&error).ends_with(".index"), "{error}");
}

#[test]
fn a_roll_whose_writes_fail_leaves_the_log_as_it_was() {
    // `n` batches fill a segment and the next one rolls. With 5 the segment's largest
    // timestamp grew since its last time-index entry, so sealing it writes one, which
    // finds no room (or 5 of its 12 bytes); with 4 nothing is due and the append's
    // own write is refused after the roll.
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(dir.path(), config(), NOW_MS).unwrap();
    let batch_bytes = append(&mut log, 0).unwrap().len() as u64;
    drop(log);
    for (n, file) in [
        (4, "00000000000000000004.log"),
        (5, "00000000000000000000.timeindex"),
    ] {
        for space_left_bytes in [0, 5] {
            let error = refused_then_resumed(n * batch_bytes, n as usize, space_left_bytes);
            assert!(refused_path(&error).ends_with(file), "{error}");
        }
    }
}

#[test]
fn a_failed_write_is_logged_once_per_run_of_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = Log::open(dir.path(), config(), NOW_MS).unwrap();
    SPACE_LEFT_BYTES.set(Some(0));
    for i in 0..3 {
        assert!(append(&mut log, i).unwrap_err().is_refused());
    }
    assert_eq!(log.refused_appends, 3);
    SPACE_LEFT_BYTES.set(None);
    append(&mut log, 3).unwrap();
    assert_eq!(log.refused_appends, 0);
    assert_eq!(log.log_end_offset(), Offset::new(1));
}

/// A log of three sealed segments of `per_segment` batches and an active one, with
/// one payload byte of batch `damaged` (of the first segment) flipped on disk.
/// Returns the log, the stored batches and the damaged batch's offset.
fn log_with_a_damaged_batch(dir: &TempDir, damaged: usize) -> (Log, Vec<Vec<u8>>, i64) {
    let per_segment = 5;
    let (mut log, _) = Log::open(dir.path(), config(), NOW_MS).unwrap();
    let batch_bytes = append(&mut log, 0).unwrap().len() as u64;
    drop(log);
    std::fs::remove_dir_all(dir.path()).unwrap();
    let segment_bytes_max = per_segment as u64 * batch_bytes;
    let (mut log, _) = Log::open(
        dir.path(),
        LogConfig {
            segment_bytes_max,
            ..config()
        },
        NOW_MS,
    )
    .unwrap();
    let stored: Vec<Vec<u8>> = (0..3 * per_segment + 2)
        .map(|i| append(&mut log, i).unwrap())
        .collect();
    assert_eq!(log.segment_count(), 4);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(log.segment_path(Offset::ZERO))
        .unwrap();
    let position = damaged as u64 * batch_bytes + batch_bytes - 1;
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, position).unwrap();
    file.write_all_at(&[byte[0] ^ 0x40], position).unwrap();
    (log, stored, damaged as i64)
}

#[test]
fn a_damaged_batch_in_a_sealed_segment_is_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let (log, stored, damaged) = log_with_a_damaged_batch(&dir, 2);
    // A read from the start stops before the damaged batch.
    let before = read_from(&log, 0).unwrap();
    assert_eq!(before.to_vec(), stored[..2].concat());
    // A read at the damaged batch fails, naming it.
    let error = read_from(&log, damaged).unwrap_err();
    let corrupt = CorruptBatch::find(&error).expect("a CorruptBatch");
    assert_eq!(corrupt.segment_base_offset, Offset::ZERO);
    assert_eq!(
        (corrupt.base_offset, corrupt.last_offset),
        (Offset::new(damaged), Offset::new(damaged))
    );
    assert_eq!(corrupt.position, 2 * stored[0].len() as u64);
    assert!(matches!(
        corrupt.error,
        crate::BatchError::CrcMismatch { .. }
    ));
    // Batches after it, and other segments, are served.
    assert_eq!(
        read_from(&log, damaged + 1).unwrap().to_vec(),
        stored[3..5].concat()
    );
    assert_eq!(read_from(&log, 5).unwrap().to_vec(), stored[5..10].concat());
}

#[test]
fn a_segment_marked_for_repair_is_truncated_before_the_damage_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, stored, damaged) = log_with_a_damaged_batch(&dir, 2);
    assert!(log.mark_for_repair(Offset::ZERO).unwrap());
    assert!(!log.mark_for_repair(Offset::ZERO).unwrap(), "marked once");
    assert!(
        !log.mark_for_repair(Offset::new(12_345)).unwrap(),
        "no such segment"
    );
    assert_eq!(log.segments_to_repair(), 1);
    let marker = dir.path().join(crate::file_names::file_name(0, "repair"));
    assert!(marker.exists());
    log.close().unwrap();

    // A clean shutdown adopts segments without checking their CRCs; the marker
    // makes the open scan this one.
    let (log, report) = Log::open(dir.path(), config(), NOW_MS).unwrap();
    assert_eq!(report.repaired_segments, 1);
    assert_eq!(report.truncated_bytes, 3 * stored[0].len() as u64);
    assert!(!marker.exists());
    assert_eq!(log.segments_to_repair(), 0);
    // What was before the damage stays; a read in the gap goes on at the next segment.
    assert_eq!(read_from(&log, 0).unwrap().to_vec(), stored[..2].concat());
    assert_eq!(
        read_from(&log, damaged).unwrap().to_vec(),
        stored[5..10].concat()
    );
    log.close().unwrap();
    let (_, report) = Log::open(dir.path(), config(), NOW_MS).unwrap();
    assert_eq!(report.repaired_segments, 0, "the marker is gone");
}
