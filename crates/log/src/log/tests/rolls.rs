//! Rolling to a new segment: by size, by age, for a batch larger than a segment, and
//! before relative offsets overflow; the segment size limit.

use super::*;

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
        .locate(Offset::new(bases[2]))
        .unwrap()
        .read(1, Offset::new(i64::MAX))
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
        log.locate(Offset::new(1))
            .unwrap()
            .read(1, Offset::new(i64::MAX))
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
    log.append_bytes(&mut bytes, NOW_MS).unwrap();
    log.append_bytes(&mut bytes, NOW_MS + 999).unwrap();
    assert_eq!(log.segment_count(), 1);
    log.append_bytes(&mut bytes, NOW_MS + 1000).unwrap();
    assert_eq!(log.segment_count(), 2);
    // The new segment's age counts from its first append.
    log.append_bytes(&mut bytes, NOW_MS + 1999).unwrap();
    assert_eq!(log.segment_count(), 2);
    log.append_bytes(&mut bytes, NOW_MS + 2000).unwrap();
    assert_eq!(log.segment_count(), 3);
    assert_eq!(
        batch_offsets(&read_all(&log, 0)),
        [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]
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
    log.append_bytes(&mut wide.clone(), NOW_MS).unwrap();
    assert_eq!(log.log_end_offset().value(), i64::from(i32::MAX));
    log.append_bytes(&mut batch(1, 10, NOW_MS, 0), NOW_MS)
        .unwrap();
    assert_eq!(
        log.segment_count(),
        1,
        "relative offset i32::MAX still fits"
    );
    log.append_bytes(&mut batch(1, 10, NOW_MS, 0), NOW_MS)
        .unwrap();
    assert_eq!(log.segment_count(), 2);
    assert_eq!(
        *log.segments.keys().next_back().unwrap(),
        i64::from(i32::MAX) + 1
    );
    let too_wide = [wide.clone(), wide.clone(), wide].concat();
    assert!(matches!(
        log.append_bytes(&mut too_wide.clone(), NOW_MS),
        Err(LogError::AppendTooLarge { .. })
    ));
    assert!(!log.is_poisoned());
}

#[test]
fn no_segment_holds_its_log_file_open_and_every_one_goes_through_the_cache() {
    let dir = TempDir::new().unwrap();
    let small = LogConfig {
        segment_bytes_max: 2000,
        ..config()
    };
    let (mut log, _) = open(&dir, small.clone());
    let mut expected = Vec::new();
    for i in 0..40 {
        expected.extend(append_one(&mut log, 1 + i % 3, 100, NOW_MS));
    }
    let held = |log: &Log| log.segments.values().filter(|s| s.holds_log_open()).count();
    assert!(log.segment_count() >= 5);
    assert_eq!(held(&log), 0, "not even the active segment");
    // Reads of sealed segments open their files through the cache (other tests share
    // it, so its counters only grow).
    let before = crate::FileCache::global().stats();
    assert_eq!(read_all(&log, 0), expected);
    let after = crate::FileCache::global().stats();
    assert!(after.hits + after.misses >= before.hits + before.misses + 4);
    log.close().unwrap();

    // Reopened: the same, and reads still see every batch.
    let (log, _) = open(&dir, small);
    assert_eq!(held(&log), 0);
    assert_eq!(read_all(&log, 0), expected);
}

#[test]
fn an_active_segment_closed_by_the_cache_is_reopened_and_its_written_file_kept_until_synced() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, config());
    let mut expected = append_one(&mut log, 2, 50, NOW_MS);
    let active = log.active().id();
    // The cache closes the active segment's files (as under pressure): the next
    // append reopens them, and the sync set holds the descriptor written first.
    crate::FileCache::global().forget(active);
    expected.extend(append_one(&mut log, 3, 50, NOW_MS));
    crate::FileCache::global().forget(active);
    assert_eq!(read_all(&log, 0), expected);
    let set = log.sync_set();
    assert_eq!(set.log_end_offset, Offset::new(5));
    assert_eq!(set.file_count(), 1, "the .log written, once");
    set.sync().unwrap();
    assert!(log.sync_set().is_empty());
    log.close().unwrap();
    let (log, report) = open(&dir, config());
    assert!(report.clean_shutdown);
    assert_eq!(read_all(&log, 0), expected);
}

#[test]
fn a_log_untouched_since_a_clean_close_closes_without_writing() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, config());
    let expected = append_one(&mut log, 2, 50, NOW_MS);
    assert!(!log.untouched_since_clean_close());
    log.close().unwrap();
    let (log, _) = open(&dir, config());
    assert!(log.untouched_since_clean_close());
    // A close that wrote the marker again would truncate it.
    let marker = dir.path().join(crate::recovery::CLEAN_SHUTDOWN_FILE);
    std::fs::write(&marker, b"left").unwrap();
    log.close().unwrap();
    assert_eq!(
        std::fs::read(&marker).unwrap(),
        b"left",
        "the marker of the last close stands"
    );
    let (log, report) = open(&dir, config());
    assert!(report.clean_shutdown);
    assert_eq!(read_all(&log, 0), expected);
}
