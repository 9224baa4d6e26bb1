//! Cutting the end of the log: whole batches go, the indexes follow, appends continue at
//! the new end, and the result is what the directory holds after a reopen.

use super::*;

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes_max: 1000,
        ..config()
    }
}

#[test]
fn a_cut_inside_a_batch_removes_the_whole_batch_and_appends_continue_there() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, small_segments());
    let batches: Vec<Vec<u8>> = (0..20)
        .map(|_| append_one(&mut log, 5, 60, NOW_MS))
        .collect();
    assert!(log.segment_count() > 3);
    assert_eq!(log.log_end_offset().value(), 100);

    // Offset 42 is inside the batch 40..=44: the log ends at 40 afterwards.
    let end = log.truncate_to(Offset::new(42), NOW_MS).unwrap();
    assert_eq!(end.value(), 40);
    assert_eq!(log.log_end_offset().value(), 40);
    assert_eq!(read_all(&log, 0), batches[..8].concat());
    assert!(matches!(
        log.locate(Offset::new(41)),
        Err(LogError::OffsetOutOfRange { .. })
    ));

    let appended = append_one(&mut log, 3, 60, NOW_MS);
    assert_eq!(batch_offsets(&appended), vec![(40, 42)]);
    let expected = [batches[..8].concat(), appended].concat();
    assert_eq!(read_all(&log, 0), expected);
    // Every offset still finds its batch through the rebuilt indexes.
    for offset in 0..43 {
        let bytes = log
            .locate(Offset::new(offset))
            .unwrap()
            .read(1 << 20, Offset::new(i64::MAX))
            .unwrap();
        let (first, _) = BatchIter::new(&bytes).next().expect("a batch");
        assert!(
            first.base_offset <= offset && offset <= first.last_offset(),
            "{offset}"
        );
    }

    log.close().unwrap();
    let (reopened, report) = open(&dir, small_segments());
    assert_eq!(report.log_end_offset.value(), 43);
    assert_eq!(read_all(&reopened, 0), expected);
}

#[test]
fn a_cut_at_a_segment_boundary_deletes_the_later_segments() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, small_segments());
    let batches: Vec<Vec<u8>> = (0..20)
        .map(|_| append_one(&mut log, 5, 60, NOW_MS))
        .collect();
    let bases: Vec<i64> = log.segments.keys().copied().collect();
    let boundary = bases[2];
    log.truncate_to(Offset::new(boundary), NOW_MS).unwrap();
    assert_eq!(log.log_end_offset().value(), boundary);
    assert_eq!(log.segment_count(), 2);
    for base in &bases[2..] {
        assert!(!segment_path(&dir, *base, "log").exists(), "{base}");
    }
    let kept = batches
        .iter()
        .take_while(|b| batch_offsets(b)[0].0 < boundary)
        .cloned()
        .collect::<Vec<_>>()
        .concat();
    assert_eq!(read_all(&log, 0), kept);
}

#[test]
fn a_cut_at_or_past_the_end_changes_nothing_and_below_the_start_empties_the_log() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, small_segments());
    for _ in 0..20 {
        append_one(&mut log, 5, 60, NOW_MS);
    }
    assert_eq!(
        log.truncate_to(Offset::new(100), NOW_MS).unwrap().value(),
        100
    );
    assert_eq!(
        log.truncate_to(Offset::new(500), NOW_MS).unwrap().value(),
        100
    );

    log.delete_segments_before(Offset::new(50)).unwrap();
    let start = log.log_start_offset().value();
    assert!(start > 0);
    let end = log.truncate_to(Offset::new(start - 3), NOW_MS).unwrap();
    assert_eq!(end.value(), start - 3);
    assert_eq!(log.log_start_offset().value(), start - 3);
    assert_eq!(log.size_bytes(), 0);
    let appended = append_one(&mut log, 2, 60, NOW_MS);
    assert_eq!(batch_offsets(&appended), vec![(start - 3, start - 2)]);
}

#[test]
fn a_crash_after_a_cut_recovers_what_the_cut_kept() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, small_segments());
    let batches: Vec<Vec<u8>> = (0..10)
        .map(|_| append_one(&mut log, 5, 60, NOW_MS))
        .collect();
    log.truncate_to(Offset::new(30), NOW_MS).unwrap();
    drop(log); // a crash: no close
    let (reopened, report) = open(&dir, small_segments());
    assert_eq!(report.log_end_offset.value(), 30);
    assert_eq!(read_all(&reopened, 0), batches[..6].concat());
}

/// `records` records as a leader stored them, from `base_offset`.
fn leader_batch(base_offset: i64, records: usize) -> Vec<u8> {
    let mut bytes = batch(records, 60, NOW_MS, records as u8);
    crate::batch::set_base_offset(&mut bytes, base_offset);
    bytes
}

fn append_replicated(log: &mut Log, bytes: &[u8]) -> Result<AppendInfo, LogError> {
    let mut validated = crate::batch::validate_all(bytes)
        .map_err(|invalid| LogError::Batch(invalid.error))?
        .into_owned();
    log.append_replicated(&mut validated, NOW_MS)
}

#[test]
fn a_replica_keeps_its_leaders_offsets_and_gaps_and_refuses_an_overlap_whole() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, small_segments());
    let first = [leader_batch(0, 5), leader_batch(5, 3)].concat();
    let info = append_replicated(&mut log, &first).unwrap();
    assert_eq!(
        (info.base_offset.value(), info.log_end_offset.value()),
        (0, 8)
    );

    let overlap = leader_batch(7, 2);
    assert!(matches!(
        append_replicated(&mut log, &overlap),
        Err(LogError::NotContiguous { expected, found })
            if expected.value() == 8 && found.value() == 7
    ));
    let overlap_inside = [leader_batch(8, 2), leader_batch(9, 2)].concat();
    assert!(matches!(
        append_replicated(&mut log, &overlap_inside),
        Err(LogError::NotContiguous { .. })
    ));
    assert_eq!(
        log.log_end_offset().value(),
        8,
        "a refused append writes nothing"
    );

    // A compacted leader's batches leave gaps, which the replica keeps.
    let gaps = [leader_batch(10, 2), leader_batch(15, 1)].concat();
    let info = append_replicated(&mut log, &gaps).unwrap();
    assert_eq!(
        (info.base_offset.value(), info.log_end_offset.value()),
        (10, 16)
    );
    assert_eq!(batch_offsets(&read_all(&log, 8)), vec![(10, 11), (15, 15)]);

    // After a cut the replica continues from its new end with the leader's batches.
    log.truncate_to(Offset::new(6), NOW_MS).unwrap();
    assert_eq!(log.log_end_offset().value(), 5);
    let again = leader_batch(5, 4);
    append_replicated(&mut log, &again).unwrap();
    assert_eq!(read_all(&log, 0), [leader_batch(0, 5), again].concat());
}

#[test]
fn a_full_truncation_starts_the_log_over_above_or_below_its_end() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, small_segments());
    for _ in 0..20 {
        append_one(&mut log, 5, 60, NOW_MS);
    }
    let end = log
        .truncate_fully_and_start_at(Offset::new(500), NOW_MS)
        .unwrap();
    assert_eq!(end.value(), 500);
    assert_eq!(
        (log.log_start_offset().value(), log.segment_count()),
        (500, 1)
    );
    let info = append_replicated(&mut log, &leader_batch(500, 3)).unwrap();
    assert_eq!(info.log_end_offset.value(), 503);
    log.truncate_fully_and_start_at(Offset::new(500), NOW_MS)
        .unwrap();
    let bounds = (log.log_start_offset().value(), log.log_end_offset().value());
    assert_eq!(bounds, (500, 500));
    assert_eq!(log.size_bytes(), 0);
    drop(log); // a crash
    let (_, report) = open(&dir, small_segments());
    let bounds = (
        report.log_start_offset.value(),
        report.log_end_offset.value(),
    );
    assert_eq!(bounds, (500, 500));
}

#[test]
fn a_truncation_waits_for_a_cleaning_pass() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, small_segments());
    for _ in 0..4 {
        append_one(&mut log, 5, 60, NOW_MS);
    }
    log.cleaner_busy
        .store(true, std::sync::atomic::Ordering::Release);
    assert!(matches!(
        log.truncate_to(Offset::new(3), NOW_MS),
        Err(LogError::CleanerBusy { .. })
    ));
    assert_eq!(log.log_end_offset().value(), 20);
    log.cleaner_busy
        .store(false, std::sync::atomic::Ordering::Release);
    assert_eq!(log.truncate_to(Offset::new(3), NOW_MS).unwrap().value(), 0);
}
