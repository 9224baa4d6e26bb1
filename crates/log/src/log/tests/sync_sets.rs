//! Sync sets (what awaits an fsync), their bound when nobody syncs, and the poisoned
//! log that refuses appends.

use super::*;

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
    assert_eq!((set.file_count(), set.log_end_offset), (1, Offset::new(1)));
    set.sync().unwrap();
    let set = log.sync_set();
    assert!(set.is_empty());
    assert_eq!(set.log_end_offset, Offset::new(1));
    // A roll: the sealed segment's three files, the new active log, and the directory.
    append_one(&mut log, 1, 900, NOW_MS);
    let set = log.sync_set();
    assert_eq!((set.file_count(), set.log_end_offset), (5, Offset::new(2)));
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
        log.append_bytes(&mut bytes, NOW_MS),
        Err(LogError::Poisoned { .. })
    ));
    assert_eq!(log.log_end_offset(), Offset::new(1));
    assert_eq!(
        log.locate(Offset::new(0))
            .unwrap()
            .read(100, Offset::new(1))
            .unwrap(),
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
