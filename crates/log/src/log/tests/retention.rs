//! Retention and deletion: by size and by age, the log start offset, and slices that
//! keep a deleted segment readable.

use super::*;

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
        log.locate(Offset::new(start.value() - 1)),
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
    let report = log
        .delete_segments_before(Offset::new(inside_third))
        .unwrap();
    assert_eq!(report.deleted_segments, 2);
    assert_eq!(log.log_start_offset().value(), bases[2]);
    assert!(!segment_path(&dir, bases[0], "log").exists());
    // Never the active segment, even for an offset past it.
    log.delete_segments_before(Offset::new(i64::MAX)).unwrap();
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
    assert_eq!(log.log_end_offset(), Offset::new(10));
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
    let slice = log.locate(Offset::new(0)).unwrap();
    assert_eq!(log.enforce_retention(NOW_MS).unwrap().deleted_segments, 1);
    assert_eq!(slice.read(1 << 20, Offset::new(i64::MAX)).unwrap(), first);
}
