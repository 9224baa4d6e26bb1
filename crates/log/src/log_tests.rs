//! Tests of the whole log against a real directory: appends and reads, rolls,
//! retention, sync sets, poisoning, and recovery from crashes simulated by dropping
//! the log without `close` and then damaging its files.

use super::*;
use crate::batch::BatchIter;
use crate::config::SEALED_INDEX_THINNING;
use crate::testutil::{batch, seed, Rng};
use std::fs::OpenOptions;
use std::io::Write;
use tempfile::TempDir;

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
    let info = log.append(&mut bytes, NOW_MS).expect("append");
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
            .locate(Offset(offset))
            .unwrap()
            .read(1 << 30, Offset(i64::MAX))
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
        .join(crate::segment::file_name(base_offset, suffix))
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

#[test]
fn append_and_read_back_byte_for_byte() {
    let dir = TempDir::new().unwrap();
    let (mut log, report) = open(&dir, config());
    assert_eq!(report.segments, 1);
    assert_eq!(
        (report.log_start_offset, report.log_end_offset),
        (Offset(0), Offset(0))
    );
    let mut expected = Vec::new();
    for i in 0..50 {
        expected.extend(append_one(
            &mut log,
            1 + i % 7,
            10 + i * 13,
            NOW_MS + i as i64,
        ));
    }
    let log_end = log.log_end_offset().value();
    assert_eq!(log_end, (0..50).map(|i| 1 + i % 7).sum::<usize>() as i64);
    assert_eq!(log.size_bytes(), expected.len() as u64);
    assert_eq!(read_all(&log, 0), expected);
    let offsets = batch_offsets(&expected);
    assert!(
        offsets.windows(2).all(|w| w[1].0 == w[0].1 + 1),
        "offsets are dense"
    );
}

#[test]
fn one_append_of_several_batches() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, config());
    append_one(&mut log, 2, 10, NOW_MS);
    let mut bytes = [
        batch(3, 20, NOW_MS, 1),
        batch(1, 500, NOW_MS, 2),
        batch(4, 5, NOW_MS, 3),
    ]
    .concat();
    let info = log.append(&mut bytes, NOW_MS).unwrap();
    assert_eq!(
        (info.base_offset, info.last_offset, info.log_end_offset),
        (Offset(2), Offset(9), Offset(10))
    );
    assert_eq!(batch_offsets(&bytes), [(2, 4), (5, 5), (6, 9)]);
    assert_eq!(read_all(&log, 2), bytes);
}

#[test]
fn malformed_appends_are_refused() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, config());
    let good = batch(2, 10, NOW_MS, 0);
    assert!(matches!(
        log.append(&mut [], NOW_MS),
        Err(LogError::Batch(_))
    ));
    assert!(matches!(
        log.append(&mut good[..good.len() - 1].to_vec(), NOW_MS),
        Err(LogError::Batch(_))
    ));
    let mut old_magic = good.clone();
    old_magic[16] = 1;
    assert!(matches!(
        log.append(&mut old_magic, NOW_MS),
        Err(LogError::Batch(_))
    ));
    assert_eq!(log.log_end_offset(), Offset(0));
    assert!(!log.is_poisoned());
}

#[test]
fn read_from_inside_a_batch_returns_the_whole_batch() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, config());
    let batches: Vec<Vec<u8>> = (0..20)
        .map(|_| append_one(&mut log, 5, 40, NOW_MS))
        .collect();
    for offset in 0..100 {
        let bytes = log
            .locate(Offset(offset))
            .unwrap()
            .read(1, Offset(i64::MAX))
            .unwrap();
        assert_eq!(bytes, batches[offset as usize / 5], "offset {offset}");
    }
}

#[test]
fn max_bytes_stops_before_a_batch_that_does_not_fit() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, config());
    let batches: Vec<Vec<u8>> = (0..10)
        .map(|_| append_one(&mut log, 1, 100, NOW_MS))
        .collect();
    let size = batches[0].len();
    let read = |max_bytes| {
        log.locate(Offset(2))
            .unwrap()
            .read(max_bytes, Offset(i64::MAX))
            .unwrap()
    };
    assert_eq!(read(3 * size), batches[2..5].concat());
    assert_eq!(read(3 * size + size - 1), batches[2..5].concat());
    assert_eq!(
        read(size - 1),
        batches[2],
        "the first batch comes whole even when larger"
    );
    assert_eq!(read(0), batches[2]);
}

#[test]
fn first_batch_larger_than_the_read_ahead_is_read_whole() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, config());
    append_one(&mut log, 1, 100, NOW_MS);
    let big = append_one(&mut log, 3, 40_000, NOW_MS);
    let after = append_one(&mut log, 1, 100, NOW_MS);
    let bytes = log
        .locate(Offset(2))
        .unwrap()
        .read(10, Offset(i64::MAX))
        .unwrap();
    assert_eq!(bytes, big);
    let bytes = log
        .locate(Offset(1))
        .unwrap()
        .read(big.len() + after.len(), Offset(i64::MAX))
        .unwrap();
    assert_eq!(bytes, [big, after].concat());
}

#[test]
fn limit_offset_trims_the_read() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, config());
    let batches: Vec<Vec<u8>> = (0..6)
        .map(|_| append_one(&mut log, 2, 30, NOW_MS))
        .collect();
    let read = |from, limit| {
        log.locate(Offset(from))
            .unwrap()
            .read(1 << 20, Offset(limit))
            .unwrap()
    };
    assert_eq!(read(0, 4), batches[0..2].concat());
    assert_eq!(
        read(0, 5),
        batches[0..3].concat(),
        "a batch starting below the limit is whole"
    );
    assert_eq!(read(3, 4), batches[1]);
    assert!(read(4, 4).is_empty());
    assert!(
        read(12, i64::MAX).is_empty(),
        "at the log end the slice is empty"
    );
}

#[test]
fn locate_outside_the_log_is_out_of_range() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, config());
    append_one(&mut log, 3, 10, NOW_MS);
    assert!(matches!(
        log.locate(Offset(4)),
        Err(LogError::OffsetOutOfRange {
            offset: Offset(4),
            log_start_offset: Offset(0),
            log_end_offset: Offset(3)
        })
    ));
    assert!(matches!(
        log.locate(Offset(-1)),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    let slice = log.locate(Offset(3)).unwrap();
    assert_eq!(slice.fetch_offset(), Offset(3));
    assert_eq!(slice.len_bytes(), 0);
}

#[test]
fn a_slice_sees_only_what_was_written_when_it_was_taken() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, config());
    let first = append_one(&mut log, 1, 10, NOW_MS);
    let slice = log.locate(Offset(0)).unwrap();
    append_one(&mut log, 1, 10, NOW_MS);
    assert_eq!(slice.read(1 << 20, Offset(i64::MAX)).unwrap(), first);
}

#[test]
fn roll_by_size_and_read_across_segments() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 2000,
            ..config()
        },
    );
    let mut expected = Vec::new();
    for i in 0..40 {
        expected.extend(append_one(&mut log, 1 + i % 3, 100, NOW_MS));
    }
    assert!(log.segment_count() >= 5, "{} segments", log.segment_count());
    for segment in log.segments.values() {
        assert!(segment.size_bytes() <= 2000);
        assert!(segment_path(&dir, segment.base_offset(), "log").exists());
    }
    let bases: Vec<i64> = log.segments.keys().copied().collect();
    let ends: Vec<i64> = log.segments.values().map(Segment::end_offset).collect();
    assert_eq!(
        &bases[1..],
        &ends[..ends.len() - 1],
        "each segment starts where the previous ends"
    );
    assert_eq!(read_all(&log, 0), expected);
    // A read at a segment's base offset lands in that segment.
    let bytes = log
        .locate(Offset(bases[2]))
        .unwrap()
        .read(1, Offset(i64::MAX))
        .unwrap();
    assert_eq!(batch_offsets(&bytes)[0].0, bases[2]);
}

#[test]
fn a_batch_larger_than_a_segment_gets_its_own_segment() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 500,
            ..config()
        },
    );
    append_one(&mut log, 1, 10, NOW_MS);
    let big = append_one(&mut log, 1, 2000, NOW_MS);
    append_one(&mut log, 1, 10, NOW_MS);
    assert_eq!(log.segment_count(), 3);
    assert_eq!(
        log.locate(Offset(1))
            .unwrap()
            .read(1, Offset(i64::MAX))
            .unwrap(),
        big
    );
}

#[test]
fn roll_by_age() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_ms_max: 1000,
            ..config()
        },
    );
    let mut bytes = batch(1, 10, NOW_MS, 0);
    log.append(&mut bytes, NOW_MS).unwrap();
    log.append(&mut bytes, NOW_MS + 999).unwrap();
    assert_eq!(log.segment_count(), 1);
    log.append(&mut bytes, NOW_MS + 1000).unwrap();
    assert_eq!(log.segment_count(), 2);
    // The new segment's age counts from its first append.
    log.append(&mut bytes, NOW_MS + 1999).unwrap();
    assert_eq!(log.segment_count(), 2);
    log.append(&mut bytes, NOW_MS + 2000).unwrap();
    assert_eq!(log.segment_count(), 3);
    assert_eq!(
        batch_offsets(&read_all(&log, 0)),
        [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]
    );
}

#[test]
fn retention_by_size_advances_the_log_start_offset() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 1000,
            ..config()
        },
    );
    let batches: Vec<Vec<u8>> = (0..30)
        .map(|_| append_one(&mut log, 2, 100, NOW_MS))
        .collect();
    let segments_before = log.segment_count();
    let size_before = log.size_bytes();
    log.set_config(LogConfig {
        retention_bytes_max: Some(3000),
        ..log.config().clone()
    });
    let report = log.enforce_retention(NOW_MS).unwrap();
    assert!(report.deleted_segments > 0);
    assert!(log.size_bytes() <= 3000);
    assert_eq!(log.size_bytes(), size_before - report.deleted_bytes);
    assert_eq!(
        log.segment_count(),
        segments_before - report.deleted_segments
    );
    let start = log.log_start_offset();
    assert_eq!(report.log_start_offset, start);
    assert_eq!(start.value(), *log.segments.keys().next().unwrap());
    assert!(!segment_path(&dir, 0, "log").exists());
    assert!(!segment_path(&dir, 0, "index").exists());
    assert!(matches!(
        log.locate(Offset(start.value() - 1)),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    let first_kept = start.value() as usize / 2;
    assert_eq!(
        read_all(&log, start.value()),
        batches[first_kept..].concat()
    );
    // Nothing more to delete; the dir change goes into the next sync set.
    assert_eq!(log.enforce_retention(NOW_MS).unwrap().deleted_segments, 0);
    assert!(log.sync_set().file_count() >= 1);
}

#[test]
fn delete_segments_before_keeps_the_segment_holding_the_offset() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 1000,
            ..config()
        },
    );
    for _ in 0..30 {
        append_one(&mut log, 2, 100, NOW_MS);
    }
    let bases: Vec<i64> = log.segments.keys().copied().collect();
    assert!(bases.len() > 3);
    // An offset inside the third segment: the first two go, the third stays.
    let inside_third = bases[2] + 1;
    let report = log.delete_segments_before(Offset(inside_third)).unwrap();
    assert_eq!(report.deleted_segments, 2);
    assert_eq!(log.log_start_offset().value(), bases[2]);
    assert!(!segment_path(&dir, bases[0], "log").exists());
    // Never the active segment, even for an offset past it.
    log.delete_segments_before(Offset(i64::MAX)).unwrap();
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.log_end_offset().value(), 60);
}

#[test]
fn max_timestamp_spans_segments() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 1000,
            ..config()
        },
    );
    assert_eq!(log.max_timestamp_ms(), None);
    for ts in [5_000, 9_000, 7_000, 8_000, 6_000, 6_500, 6_600, 6_700] {
        append_one(&mut log, 2, 100, ts);
    }
    assert!(log.segment_count() > 1);
    assert_eq!(log.max_timestamp_ms(), Some(9_000));
}

#[test]
fn retention_by_age_keeps_the_active_segment() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 1000,
            retention_ms_max: Some(10_000),
            ..config()
        },
    );
    for i in 0..10 {
        append_one(&mut log, 1, 300, NOW_MS + i * 1000);
    }
    let segments: Vec<(i64, i64)> = log
        .segments
        .values()
        .map(|s| (s.base_offset(), s.retention_timestamp_ms()))
        .collect();
    assert!(segments.len() >= 3);
    assert_eq!(
        log.enforce_retention(NOW_MS + 10_000)
            .unwrap()
            .deleted_segments,
        0
    );
    // At NOW + 12_500 the cutoff is NOW + 2_500: segments whose newest batch is older go.
    let report = log.enforce_retention(NOW_MS + 12_500).unwrap();
    let expected_gone = segments
        .iter()
        .take_while(|(_, newest)| *newest < NOW_MS + 2_500)
        .count();
    assert_eq!(report.deleted_segments, expected_gone);
    assert_eq!(log.log_start_offset().value(), segments[expected_gone].0);
    // Far in the future everything but the active segment goes.
    log.enforce_retention(NOW_MS + 1_000_000).unwrap();
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.log_start_offset().value(), segments.last().unwrap().0);
    assert_eq!(log.log_end_offset(), Offset(10));
}

#[test]
fn a_deleted_segment_stays_readable_through_an_open_slice() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 500,
            retention_bytes_max: Some(0),
            ..config()
        },
    );
    let first = append_one(&mut log, 1, 300, NOW_MS);
    append_one(&mut log, 1, 300, NOW_MS);
    let slice = log.locate(Offset(0)).unwrap();
    assert_eq!(log.enforce_retention(NOW_MS).unwrap().deleted_segments, 1);
    assert_eq!(slice.read(1 << 20, Offset(i64::MAX)).unwrap(), first);
}

#[test]
fn reopen_after_clean_close() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 3000,
            ..config()
        },
    );
    let mut expected = Vec::new();
    for i in 0..40 {
        expected.extend(append_one(&mut log, 1 + i % 4, 90, NOW_MS + i as i64));
    }
    let (end, segments) = (log.log_end_offset(), log.segment_count());
    log.close().unwrap();
    assert!(dir.path().join(recovery::CLEAN_SHUTDOWN_FILE).exists());
    let (mut log, report) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 3000,
            ..config()
        },
    );
    assert!(report.clean_shutdown);
    assert_eq!((report.truncated_bytes, report.rebuilt_indexes), (0, 0));
    assert_eq!(
        (report.segments, report.log_end_offset, log.log_end_offset()),
        (segments, end, end)
    );
    assert!(
        !dir.path().join(recovery::CLEAN_SHUTDOWN_FILE).exists(),
        "the marker is consumed"
    );
    assert_eq!(read_all(&log, 0), expected);
    expected.extend(append_one(&mut log, 2, 10, NOW_MS));
    assert_eq!(read_all(&log, 0), expected);
    drop(log);
    let (_, report) = open(&dir, config());
    assert!(
        !report.clean_shutdown,
        "a log dropped without close is recovered as after a crash"
    );
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

fn active_log_path(dir: &TempDir) -> PathBuf {
    let (log, _) = open(dir, config());
    let base = *log.segments.keys().next_back().unwrap();
    drop(log);
    segment_path(dir, base, "log")
}

/// After recovery: the log holds exactly `kept`, offsets dense, and appends continue.
fn assert_recovered(dir: &TempDir, kept: &[Vec<u8>]) -> RecoveryReport {
    let (mut log, report) = open(
        dir,
        LogConfig {
            segment_bytes_max: 2000,
            ..config()
        },
    );
    let expected = kept.concat();
    assert_eq!(read_all(&log, 0), expected);
    let end = batch_offsets(&expected)
        .last()
        .map_or(0, |(_, last)| last + 1);
    assert_eq!(log.log_end_offset().value(), end);
    assert_eq!(report.log_end_offset.value(), end);
    let next = append_one(&mut log, 2, 10, NOW_MS);
    assert_eq!(batch_offsets(&next), [(end, end + 1)]);
    assert_eq!(read_all(&log, 0), [expected, next].concat());
    report
}

#[test]
fn recovery_truncates_a_torn_last_batch() {
    let dir = TempDir::new().unwrap();
    let batches = crashed_log(
        &dir,
        LogConfig {
            segment_bytes_max: 2000,
            ..config()
        },
        30,
    );
    let path = active_log_path(&dir);
    let len = file_len(&path);
    let last_len = batches.last().unwrap().len() as u64;
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - last_len / 2)
        .unwrap();
    let report = assert_recovered(&dir, &batches[..29]);
    assert!(!report.clean_shutdown);
    assert_eq!(report.truncated_bytes, last_len - last_len / 2);
}

#[test]
fn recovery_cuts_garbage_after_the_last_batch() {
    for garbage in [
        vec![0u8; 5],
        vec![0u8; 100],
        vec![0xff; 3000],
        b"not a record batch at all, just text".repeat(4),
    ] {
        let dir = TempDir::new().unwrap();
        let batches = crashed_log(
            &dir,
            LogConfig {
                segment_bytes_max: 2000,
                ..config()
            },
            12,
        );
        append_garbage(&active_log_path(&dir), &garbage);
        let report = assert_recovered(&dir, &batches);
        assert_eq!(report.truncated_bytes, garbage.len() as u64);
    }
}

#[test]
fn recovery_cuts_a_last_batch_with_a_bad_crc() {
    let dir = TempDir::new().unwrap();
    let batches = crashed_log(&dir, config(), 10);
    let path = active_log_path(&dir);
    let len = file_len(&path);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, b"X", len - 3).unwrap();
    let report = assert_recovered(&dir, &batches[..9]);
    assert_eq!(report.truncated_bytes, batches[9].len() as u64);
}

#[test]
fn a_crash_right_after_a_roll_keeps_everything_written() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 1000,
            ..config()
        },
    );
    let batches: Vec<Vec<u8>> = (0..3)
        .map(|_| append_one(&mut log, 1, 400, NOW_MS))
        .collect();
    assert_eq!(log.segment_count(), 2);
    drop(log);
    let report = assert_recovered(&dir, &batches);
    assert_eq!((report.truncated_bytes, report.segments), (0, 2));
}

#[test]
fn a_torn_sealed_segment_takes_the_later_segment_with_it() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 1000,
            ..config()
        },
    );
    let batches: Vec<Vec<u8>> = (0..5)
        .map(|_| append_one(&mut log, 1, 400, NOW_MS))
        .collect();
    let bases: Vec<i64> = log.segments.keys().copied().collect();
    assert_eq!(bases, [0, 2, 4]);
    drop(log);
    // The segment sealed last loses its last batch, as if its pages never reached
    // the disk; the segment after it can hold nothing acknowledged.
    let sealed = segment_path(&dir, 2, "log");
    OpenOptions::new()
        .write(true)
        .open(&sealed)
        .unwrap()
        .set_len(file_len(&sealed) - 10)
        .unwrap();
    let report = assert_recovered(&dir, &batches[..3]);
    assert_eq!(report.segments, 2);
    assert!(!segment_path(&dir, 4, "log").exists());
    assert!(!segment_path(&dir, 4, "index").exists());
}

#[test]
fn missing_indexes_are_rebuilt() {
    for (suffix, clean) in [
        ("index", true),
        ("timeindex", true),
        ("index", false),
        ("timeindex", false),
    ] {
        let dir = TempDir::new().unwrap();
        let config = LogConfig {
            segment_bytes_max: 2000,
            index_interval_bytes: 100,
            ..config()
        };
        let (mut log, _) = open(&dir, config.clone());
        let batches: Vec<Vec<u8>> = (0..30)
            .map(|i| append_one(&mut log, 2, 100, NOW_MS + 10 * i))
            .collect();
        let indexes: Vec<(i64, Vec<u8>, Vec<u8>)> = log
            .segments
            .values()
            .map(|s| {
                (
                    s.base_offset(),
                    s.offset_index_bytes(),
                    s.time_index_bytes(),
                )
            })
            .collect();
        let lookup = log.offset_for_timestamp(NOW_MS + 155).unwrap();
        if clean {
            log.close().unwrap();
        } else {
            drop(log);
        }
        for (base, _, _) in &indexes {
            std::fs::remove_file(segment_path(&dir, *base, suffix)).unwrap();
        }
        let (log, report) = open(&dir, config);
        assert!(
            report.rebuilt_indexes >= indexes.len(),
            "{suffix} clean={clean}: {report:?}"
        );
        assert_eq!(read_all(&log, 0), batches.concat());
        assert_eq!(log.offset_for_timestamp(NOW_MS + 155).unwrap(), lookup);
        let last = indexes.len() - 1;
        for (i, ((base, index, time_index), segment)) in
            indexes.iter().zip(log.segments.values()).enumerate()
        {
            assert_eq!(&segment.offset_index_bytes(), index, "segment {base}");
            assert_eq!(&segment.time_index_bytes(), time_index, "segment {base}");
            // The rebuilt file holds every entry; a sealed segment keeps every 16th in
            // memory.
            let (entry_bytes, in_memory) = match suffix {
                "index" => (8, index),
                _ => (12, time_index),
            };
            let file = std::fs::read(segment_path(&dir, *base, suffix)).unwrap();
            let keep_every = if i == last { 1 } else { SEALED_INDEX_THINNING };
            let thinned: Vec<u8> = file
                .chunks(entry_bytes)
                .step_by(keep_every)
                .flatten()
                .copied()
                .collect();
            assert_eq!(&thinned, in_memory, "segment {base}");
            assert!(file.len() >= in_memory.len());
        }
    }
}

/// Damages the file at a path.
type Damage = fn(&Path);

#[test]
fn damaged_indexes_are_rebuilt() {
    let damages: [(&str, Damage); 4] = [
        ("index", |p| append_garbage(p, b"abc")),
        ("index", |p| append_garbage(p, &[0xff; 8])),
        ("timeindex", |p| append_garbage(p, &[0u8; 12])),
        ("index", |p| std::fs::write(p, [0u8; 64]).unwrap()),
    ];
    for (suffix, damage) in damages {
        let dir = TempDir::new().unwrap();
        let config = LogConfig {
            segment_bytes_max: 2000,
            index_interval_bytes: 100,
            ..config()
        };
        let (mut log, _) = open(&dir, config.clone());
        let batches: Vec<Vec<u8>> = (0..30)
            .map(|i| append_one(&mut log, 2, 100, NOW_MS + 10 * i))
            .collect();
        let lookup = log.offset_for_timestamp(NOW_MS + 205).unwrap();
        log.close().unwrap();
        damage(&segment_path(&dir, 0, suffix));
        let (log, report) = open(&dir, config);
        assert!(report.clean_shutdown);
        assert_eq!(report.rebuilt_indexes, 1, "{suffix}");
        assert_eq!(read_all(&log, 0), batches.concat());
        assert_eq!(log.offset_for_timestamp(NOW_MS + 205).unwrap(), lookup);
    }
}

#[test]
fn stray_index_files_are_deleted() {
    let dir = TempDir::new().unwrap();
    crashed_log(&dir, config(), 3);
    std::fs::write(segment_path(&dir, 77, "index"), [1, 2, 3]).unwrap();
    std::fs::write(segment_path(&dir, 77, "timeindex"), []).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "kept").unwrap();
    let (log, _) = open(&dir, config());
    assert!(!segment_path(&dir, 77, "index").exists());
    assert!(!segment_path(&dir, 77, "timeindex").exists());
    assert!(dir.path().join("notes.txt").exists());
    assert_eq!(log.segment_count(), 1);
}

#[test]
fn offset_for_timestamp_finds_the_first_batch_at_or_after() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 1500,
            index_interval_bytes: 150,
            ..config()
        },
    );
    // Timestamps rise by 10 per batch, with one batch from the past in between.
    let mut stamps = Vec::new();
    for i in 0..40i64 {
        let timestamp = if i == 20 {
            NOW_MS - 5000
        } else {
            NOW_MS + 10 * i
        };
        let bytes = append_one(&mut log, 1, 100, timestamp);
        stamps.push((batch_offsets(&bytes)[0].0, timestamp));
    }
    assert!(log.segment_count() > 3);
    let expected = |target: i64| {
        stamps
            .iter()
            .find(|(_, t)| *t >= target)
            .map(|(o, t)| (Offset(*o), *t))
    };
    for target in [
        i64::MIN,
        NOW_MS - 6000,
        NOW_MS,
        NOW_MS + 1,
        NOW_MS + 195,
        NOW_MS + 200,
        NOW_MS + 201,
        NOW_MS + 390,
        NOW_MS + 391,
    ] {
        assert_eq!(
            log.offset_for_timestamp(target).unwrap(),
            expected(target),
            "target {target}"
        );
    }
    assert_eq!(log.offset_for_timestamp(NOW_MS + 391).unwrap(), None);
}

#[test]
fn sync_sets_hold_what_was_written_since_the_last_one() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 1000,
            ..config()
        },
    );
    assert!(log.sync_set().is_empty(), "open leaves everything synced");
    append_one(&mut log, 1, 100, NOW_MS);
    let set = log.sync_set();
    assert_eq!((set.file_count(), set.log_end_offset), (1, Offset(1)));
    set.sync().unwrap();
    let set = log.sync_set();
    assert!(set.is_empty());
    assert_eq!(set.log_end_offset, Offset(1));
    // A roll: the sealed segment's three files, the new active log, and the directory.
    append_one(&mut log, 1, 900, NOW_MS);
    let set = log.sync_set();
    assert_eq!((set.file_count(), set.log_end_offset), (5, Offset(2)));
    set.sync().unwrap();
    assert!(log.sync_set().is_empty());
}

#[test]
fn pending_syncs_stay_bounded_when_nobody_syncs() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 500,
            ..config()
        },
    );
    for _ in 0..20 {
        append_one(&mut log, 1, 400, NOW_MS);
    }
    assert_eq!(log.segment_count(), 20);
    // Each roll synced the segment sealed before it, so one sealed segment waits.
    assert_eq!(log.sync_set().file_count(), 5);
}

#[test]
fn a_poisoned_log_refuses_appends() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, config());
    let written = append_one(&mut log, 1, 10, NOW_MS);
    log.poison();
    assert!(log.is_poisoned());
    let mut bytes = batch(1, 10, NOW_MS, 0);
    assert!(matches!(
        log.append(&mut bytes, NOW_MS),
        Err(LogError::Poisoned { .. })
    ));
    assert_eq!(log.log_end_offset(), Offset(1));
    assert_eq!(
        log.locate(Offset(0)).unwrap().read(100, Offset(1)).unwrap(),
        written,
        "reads still work"
    );
    assert!(matches!(log.close(), Err(LogError::Poisoned { .. })));
    let (_, report) = open(&dir, config());
    assert!(
        !report.clean_shutdown,
        "a poisoned log leaves no clean-shutdown marker"
    );
}

#[test]
fn segment_bytes_max_is_clamped() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: u64::MAX,
            ..config()
        },
    );
    assert_eq!(log.config().segment_bytes_max, crate::SEGMENT_BYTES_LIMIT);
    log.set_config(LogConfig {
        segment_bytes_max: 1 << 40,
        ..config()
    });
    assert_eq!(log.config().segment_bytes_max, crate::SEGMENT_BYTES_LIMIT);
}

/// Goal: whatever the sequence of appends, rolls, crashes and reopens, the log holds
/// exactly the batches appended, in order, with dense offsets, and every offset reads
/// back the batch that holds it. Method: random batch sizes, segment sizes and index
/// intervals; occasional clean closes, crashes (drop) and crashes with a torn tail;
/// a model of the expected batches checked after every reopen.
#[test]
fn randomized_appends_rolls_and_reopens() {
    let mut rng = Rng::new(seed("randomized_appends_rolls_and_reopens"));
    let dir = TempDir::new().unwrap();
    let random_config = |rng: &mut Rng| LogConfig {
        segment_bytes_max: rng.range(200, 6000),
        index_interval_bytes: rng.range(0, 1500) as u32,
        ..config()
    };
    let mut model: Vec<Vec<u8>> = Vec::new();
    let (mut log, _) = open(&dir, random_config(&mut rng));
    for round in 0..12 {
        for _ in 0..rng.range(1, 60) {
            let count = rng.range(1, 4);
            let mut bytes: Vec<u8> = (0..count)
                .flat_map(|_| {
                    batch(
                        rng.range(1, 6) as usize,
                        rng.range(0, 700) as usize,
                        NOW_MS,
                        rng.next_u64() as u8,
                    )
                })
                .collect();
            log.append(&mut bytes, NOW_MS).unwrap();
            model.extend(BatchIter::new(&bytes).map(|(_, b)| b.to_vec()));
        }
        check_against_model(&log, &model, &mut rng);
        match rng.range(0, 3) {
            0 => log.close().unwrap(),
            1 => drop(log),
            _ => {
                let path = segment_path(&dir, *log.segments.keys().next_back().unwrap(), "log");
                drop(log);
                let torn = rng.range(1, 80) as usize;
                if file_len(&path) > 0 {
                    let last = model.pop().unwrap();
                    let len = file_len(&path) - last.len() as u64;
                    OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .unwrap()
                        .set_len(len)
                        .unwrap();
                    append_garbage(&path, &last[..torn.min(last.len() - 1)]);
                }
            }
        }
        let (reopened, report) = open(&dir, random_config(&mut rng));
        log = reopened;
        assert_eq!(report.log_end_offset, log.log_end_offset(), "round {round}");
        check_against_model(&log, &model, &mut rng);
    }
}

fn check_against_model(log: &Log, model: &[Vec<u8>], rng: &mut Rng) {
    assert_eq!(read_all(log, 0), model.concat());
    let offsets: Vec<(i64, i64)> = model.iter().map(|b| batch_offsets(b)[0]).collect();
    assert!(
        offsets.windows(2).all(|w| w[1].0 == w[0].1 + 1),
        "dense offsets"
    );
    for _ in 0..20 {
        let Some(end) = offsets.last().map(|(_, last)| last + 1) else {
            return;
        };
        let offset = rng.range(0, end as u64) as i64;
        let at = offsets
            .iter()
            .position(|(base, last)| (*base..=*last).contains(&offset))
            .unwrap();
        let bytes = log
            .locate(Offset(offset))
            .unwrap()
            .read(0, Offset(i64::MAX))
            .unwrap();
        assert_eq!(bytes, model[at], "offset {offset}");
    }
}

#[test]
fn open_creates_missing_directories_and_reports_a_new_log_as_clean() {
    let dir = TempDir::new().unwrap();
    let nested = dir.path().join("topic-0").join("deeper");
    let (log, report) = Log::open(&nested, config(), NOW_MS).unwrap();
    assert!(report.clean_shutdown);
    assert_eq!(
        (
            report.segments,
            report.truncated_bytes,
            report.rebuilt_indexes
        ),
        (1, 0, 0)
    );
    assert!(nested.join("00000000000000000000.log").exists());
    assert!(nested.join("00000000000000000000.index").exists());
    assert!(nested.join("00000000000000000000.timeindex").exists());
    assert_eq!(log.dir(), nested);
}

/// Goal: bytes on disk are data, never a reason to panic or loop. Method: fill a
/// segment's three files with random bytes (sometimes after valid batches) and open
/// and read the log.
#[test]
fn random_garbage_in_segment_files_is_repaired_without_panicking() {
    let mut rng = Rng::new(seed(
        "random_garbage_in_segment_files_is_repaired_without_panicking",
    ));
    for _ in 0..30 {
        let dir = TempDir::new().unwrap();
        let valid = crashed_log(&dir, config(), rng.range(0, 4) as usize);
        let garbage = |rng: &mut Rng| -> Vec<u8> {
            (0..rng.range(0, 400))
                .map(|_| rng.next_u64() as u8)
                .collect()
        };
        append_garbage(&segment_path(&dir, 0, "log"), &garbage(&mut rng));
        for suffix in ["index", "timeindex"] {
            std::fs::write(segment_path(&dir, 0, suffix), garbage(&mut rng)).unwrap();
        }
        let (mut log, report) = open(&dir, config());
        assert!(!report.clean_shutdown);
        assert_eq!(read_all(&log, 0), valid.concat());
        append_one(&mut log, 1, 10, NOW_MS);
    }
}

#[test]
fn reads_of_corrupt_segment_bytes_fail_instead_of_hanging() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            index_interval_bytes: 1 << 20,
            ..config()
        },
    );
    let batches: Vec<Vec<u8>> = (0..5)
        .map(|_| append_one(&mut log, 1, 50, NOW_MS))
        .collect();
    // Corrupt the length of the second batch behind the log's back.
    let file = OpenOptions::new()
        .write(true)
        .open(segment_path(&dir, 0, "log"))
        .unwrap();
    let at = batches[0].len() as u64 + 8;
    for length in [i32::MAX, -5, 3] {
        std::os::unix::fs::FileExt::write_all_at(&file, &length.to_be_bytes(), at).unwrap();
        let error = log
            .locate(Offset(3))
            .unwrap()
            .read(1 << 20, Offset(i64::MAX))
            .unwrap_err();
        assert_eq!(
            error.kind(),
            std::io::ErrorKind::InvalidData,
            "length {length}"
        );
    }
    assert_eq!(
        log.locate(Offset(0))
            .unwrap()
            .read(0, Offset(i64::MAX))
            .unwrap(),
        batches[0]
    );
}

#[test]
fn a_gap_left_by_a_repaired_middle_segment_is_skipped_by_reads() {
    let dir = TempDir::new().unwrap();
    let config = LogConfig {
        segment_bytes_max: 1000,
        ..config()
    };
    let (mut log, _) = open(&dir, config.clone());
    let batches: Vec<Vec<u8>> = (0..6)
        .map(|_| append_one(&mut log, 1, 200, NOW_MS))
        .collect();
    assert_eq!(log.segments.keys().copied().collect::<Vec<_>>(), [0, 3]);
    log.close().unwrap();
    // Corrupt the second batch of segment 0 and lose its index: the scan that rebuilds
    // the index truncates the segment there, leaving offsets 1 and 2 unreadable.
    let file = OpenOptions::new()
        .write(true)
        .open(segment_path(&dir, 0, "log"))
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, b"X", batches[0].len() as u64 + 40).unwrap();
    std::fs::remove_file(segment_path(&dir, 0, "index")).unwrap();
    let (log, report) = open(&dir, config);
    assert_eq!(
        report.truncated_bytes,
        (batches[1].len() + batches[2].len()) as u64
    );
    let read = |offset| {
        log.locate(Offset(offset))
            .unwrap()
            .read(0, Offset(i64::MAX))
            .unwrap()
    };
    assert_eq!(read(0), batches[0]);
    assert_eq!(
        read(1),
        batches[3],
        "a read in the gap continues at the next segment"
    );
    assert_eq!(
        read_all(&log, 0),
        [&batches[..1], &batches[3..]].concat().concat()
    );
}

/// A one-record batch whose offsets span `last_offset_delta + 1` (as compaction
/// leaves them), with its CRC recomputed.
fn sparse_batch(last_offset_delta: i32) -> Vec<u8> {
    let mut bytes = batch(1, 10, NOW_MS, 0);
    bytes[23..27].copy_from_slice(&last_offset_delta.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[21..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    bytes
}

#[test]
fn roll_before_relative_offsets_overflow() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, config());
    let wide = sparse_batch(i32::MAX - 1);
    log.append(&mut wide.clone(), NOW_MS).unwrap();
    assert_eq!(log.log_end_offset().value(), i64::from(i32::MAX));
    log.append(&mut batch(1, 10, NOW_MS, 0), NOW_MS).unwrap();
    assert_eq!(
        log.segment_count(),
        1,
        "relative offset i32::MAX still fits"
    );
    log.append(&mut batch(1, 10, NOW_MS, 0), NOW_MS).unwrap();
    assert_eq!(log.segment_count(), 2);
    assert_eq!(
        *log.segments.keys().next_back().unwrap(),
        i64::from(i32::MAX) + 1
    );
    let too_wide = [wide.clone(), wide.clone(), wide].concat();
    assert!(matches!(
        log.append(&mut too_wide.clone(), NOW_MS),
        Err(LogError::AppendTooLarge { .. })
    ));
    assert!(!log.is_poisoned());
}

#[test]
fn handles_cross_threads() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<Log>();
    send::<SyncSet>();
    send_sync::<ReadSlice>();
}

#[test]
fn cached_reads_return_what_blocking_reads_return_or_give_up() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, config());
    for i in 0..40 {
        append_one(&mut log, 3, 50 + i, NOW_MS);
    }
    let end = log.log_end_offset();
    let total: u64 = read_all(&log, 0).len() as u64;
    assert_eq!(log.locate(Offset(0)).unwrap().behind_bytes(), total);
    assert_eq!(log.locate(end).unwrap().behind_bytes(), 0);
    let mut cached_hits = 0;
    for offset in 0..end.value() {
        let slice = log.locate(Offset(offset)).unwrap();
        for max_bytes in [1, 500, 1 << 20] {
            let blocking = slice.read(max_bytes, end).unwrap();
            // Just read, so the pages are cached: where the kernel supports RWF_NOWAIT
            // the cached read succeeds, and it must agree byte for byte.
            if let Some(cached) = slice.read_cached(max_bytes, end).unwrap() {
                assert_eq!(cached, blocking, "offset {offset}, max_bytes {max_bytes}");
                cached_hits += 1;
            }
        }
    }
    // Written back and dropped from the page cache: a cached read may give up (it must
    // not block or return anything different); the blocking read still returns the data.
    let sync = log.sync_set();
    sync.sync().unwrap();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let file = std::fs::File::open(entry.unwrap().path()).unwrap();
        // SAFETY: a plain advice call on a descriptor `file` keeps open.
        unsafe {
            libc::posix_fadvise(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
                0,
                libc::POSIX_FADV_DONTNEED,
            )
        };
    }
    let slice = log.locate(Offset(0)).unwrap();
    let cold = slice.read_cached(1 << 20, end).unwrap();
    let blocking = slice.read(1 << 20, end).unwrap();
    assert!(!blocking.is_empty());
    println!(
        "cached reads that succeeded: {cached_hits}; after eviction: {}",
        cold.is_some()
    );
    if let Some(cold) = cold {
        assert_eq!(cold, blocking);
    }
}

#[test]
fn sealed_segments_keep_a_sixteenth_of_their_index_in_memory_and_read_the_same() {
    let dir = TempDir::new().unwrap();
    let config = LogConfig {
        segment_bytes_max: 32 * 1024,
        index_interval_bytes: 256,
        ..config()
    };
    let (mut log, _) = open(&dir, config.clone());
    let batches: Vec<Vec<u8>> = (0..400)
        .map(|i| append_one(&mut log, 3, 100, NOW_MS + i))
        .collect();
    let check = |log: &Log| {
        let segments: Vec<_> = log.segments.values().collect();
        assert!(segments.len() >= 4, "{} segments", segments.len());
        for (i, segment) in segments.iter().enumerate() {
            let (offsets, times) = segment.index_entries();
            let on_disk = |suffix| {
                std::fs::read(segment_path(&dir, segment.base_offset(), suffix))
                    .unwrap()
                    .len()
            };
            let (full_offsets, full_times) = (on_disk("index") / 8, on_disk("timeindex") / 12);
            if i + 1 < segments.len() {
                assert_eq!(offsets, full_offsets.div_ceil(SEALED_INDEX_THINNING));
                assert_eq!(times, full_times.div_ceil(SEALED_INDEX_THINNING));
                assert!(full_offsets > 2 * SEALED_INDEX_THINNING, "{full_offsets}");
            } else {
                assert_eq!(
                    offsets, full_offsets,
                    "the active segment keeps every entry"
                );
            }
        }
        // Every offset reads back its own batch, and the whole log byte for byte.
        for offset in 0..log.log_end_offset().value() {
            let bytes = log
                .locate(Offset(offset))
                .unwrap()
                .read(1, Offset(i64::MAX))
                .unwrap();
            assert_eq!(bytes, batches[offset as usize / 3], "offset {offset}");
        }
        assert_eq!(read_all(log, 0), batches.concat());
        for i in [0, 1, 57, 200, 399] {
            let (offset, _) = log.offset_for_timestamp(NOW_MS + i).unwrap().unwrap();
            assert_eq!(offset.value(), 3 * i, "timestamp +{i}");
        }
    };
    check(&log);
    log.close().unwrap();
    let (log, _) = open(&dir, config);
    check(&log);
}
