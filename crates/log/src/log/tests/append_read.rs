//! Appends and reads: offsets assigned densely, reads bounded by bytes and offsets,
//! slices that see what was there when taken, and cached reads that match blocking ones.

use super::*;

#[test]
fn append_and_read_back_byte_for_byte() {
    let dir = TempDir::new().unwrap();
    let (mut log, report) = open(&dir, config());
    assert_eq!(report.segments, 1);
    assert_eq!(
        (report.log_start_offset, report.log_end_offset),
        (Offset::new(0), Offset::new(0))
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
    let info = log.append_bytes(&mut bytes, NOW_MS).unwrap();
    assert_eq!(
        (info.base_offset, info.last_offset, info.log_end_offset),
        (Offset::new(2), Offset::new(9), Offset::new(10))
    );
    assert_eq!(batch_offsets(&bytes), [(2, 4), (5, 5), (6, 9)]);
    assert_eq!(read_all(&log, 2), bytes);
}

#[test]
fn malformed_appends_are_refused() {
    // A log appends only what `batch::validate_all` accepted; these never get that far.
    let good = batch(2, 10, NOW_MS, 0);
    assert!(batch::validate_all(&[]).is_err());
    assert!(batch::validate_all(&good[..good.len() - 1]).is_err());
    let mut old_magic = good.clone();
    old_magic[16] = 1;
    assert!(batch::validate_all(&old_magic).is_err());
    assert!(batch::validate_all(&good).is_ok());
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
            .locate(Offset::new(offset))
            .unwrap()
            .read(1, Offset::new(i64::MAX))
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
        log.locate(Offset::new(2))
            .unwrap()
            .read(max_bytes, Offset::new(i64::MAX))
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
        .locate(Offset::new(2))
        .unwrap()
        .read(10, Offset::new(i64::MAX))
        .unwrap();
    assert_eq!(bytes, big);
    let bytes = log
        .locate(Offset::new(1))
        .unwrap()
        .read(big.len() + after.len(), Offset::new(i64::MAX))
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
        log.locate(Offset::new(from))
            .unwrap()
            .read(1 << 20, Offset::new(limit))
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
        log.locate(Offset::new(4)),
        Err(LogError::OffsetOutOfRange {
            offset,
            log_start_offset,
            log_end_offset,
        }) if (offset, log_start_offset, log_end_offset)
            == (Offset::new(4), Offset::new(0), Offset::new(3))
    ));
    assert!(matches!(
        log.locate(Offset::new(-1)),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    let slice = log.locate(Offset::new(3)).unwrap();
    assert_eq!(slice.fetch_offset(), Offset::new(3));
    assert_eq!(slice.len_bytes(), 0);
}

#[test]
fn a_slice_sees_only_what_was_written_when_it_was_taken() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, config());
    let first = append_one(&mut log, 1, 10, NOW_MS);
    let slice = log.locate(Offset::new(0)).unwrap();
    append_one(&mut log, 1, 10, NOW_MS);
    assert_eq!(slice.read(1 << 20, Offset::new(i64::MAX)).unwrap(), first);
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
    assert_eq!(log.locate(Offset::new(0)).unwrap().behind_bytes(), total);
    assert_eq!(log.locate(end).unwrap().behind_bytes(), 0);
    let mut cached_hits = 0;
    for offset in 0..end.value() {
        let slice = log.locate(Offset::new(offset)).unwrap();
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
        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed);
    }
    let slice = log.locate(Offset::new(0)).unwrap();
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
