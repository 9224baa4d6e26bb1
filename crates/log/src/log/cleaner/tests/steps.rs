//! Each step of a cleaning pass, on small deterministic logs.

use super::*;
use crate::log::cleaner::staging::{STAGING_DIR, STEPS_LEFT};
use tempfile::TempDir;

const SEGMENT_BYTES: u64 = 1024;

/// A log of small segments where ten keys are written over and over in every codec,
/// synced, with each batch's max timestamp its index (from 1000). Returns the log and
/// what was written (offset to record and timestamp).
fn overwritten_log(dir: &Path) -> (Log, BTreeMap<i64, (Kv, i64)>) {
    let (mut log, _) = Log::open(dir, log_config(SEGMENT_BYTES), NOW_MS).expect("open");
    let mut written = BTreeMap::new();
    for i in 0..60i64 {
        let records: Vec<Kv> = (0..3)
            .map(|j| {
                kv(
                    &format!("k{}", (i * 3 + j) % 10),
                    Some(&format!("value-{i}-{j}")),
                )
            })
            .collect();
        let timestamp_ms = 1_000 + i;
        let codec = CODECS[i as usize % CODECS.len()];
        let base = append(&mut log, codec, &records, timestamp_ms);
        for (j, record) in records.into_iter().enumerate() {
            written.insert(base + j as i64, (record, timestamp_ms));
        }
    }
    sync(&mut log);
    assert!(log.segment_count() > 4, "the test needs several segments");
    (log, written)
}

fn records(written: &BTreeMap<i64, (Kv, i64)>) -> BTreeMap<i64, Kv> {
    written.iter().map(|(o, (r, _))| (*o, r.clone())).collect()
}

fn active_base(log: &Log) -> i64 {
    *log.segments.keys().next_back().expect("a segment")
}

fn reopen(dir: &TempDir) -> Log {
    Log::open(dir.path(), log_config(SEGMENT_BYTES), NOW_MS)
        .expect("reopen")
        .0
}

#[test]
fn a_pass_keeps_each_keys_latest_record_at_its_offset() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, written) = overwritten_log(dir.path());
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    let segments_before = log.segment_count();
    let active = active_base(&log);
    let report = log.clean(&cleaner_config(), NOW_MS).expect("clean");
    check_cleaned(&log, &written, no_tombstone, "one pass");
    let got = survivors(&log);
    let sealed = records(&written)
        .range(..active)
        .map(|(o, r)| (*o, r.clone()))
        .collect();
    let latest = latest_per_key(&sealed);
    for (offset, (key, _)) in got.range(..active) {
        assert_eq!(
            latest[key.as_ref().expect("keyed")],
            *offset,
            "only the latest record of a key survives in the cleaned segments"
        );
    }
    assert!(
        written.range(active..).all(|(o, _)| got.contains_key(o)),
        "the active segment is not cleaned"
    );
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (start, end));
    assert_eq!(report.segments_replaced, segments_before - 1);
    assert_eq!(report.records_removed as usize, written.len() - got.len());
    assert_eq!(report.tombstones_removed, 0);
    assert!(report.bytes_read > 0 && report.bytes_written > 0);
    assert!(!report.map_full && !report.damaged);
    assert_eq!(report.dirty_ratio_before, 1.0);
    assert_eq!(report.dirty_ratio_after, 0.0);
    assert_eq!(report.first_dirty_offset.value(), active);
    let sizes: u64 = log.segments.values().map(|s| s.size_bytes()).sum();
    assert_eq!(log.size_bytes(), sizes);
    assert!(
        entries_ending(dir.path(), ".swap").is_empty() && !dir.path().join(".cleaning").exists()
    );

    // A second pass merges the small cleaned segments and removes nothing more.
    let segments_after_one = log.segment_count();
    let second = log.clean(&cleaner_config(), NOW_MS).expect("clean again");
    assert_eq!(second.records_removed, 0);
    assert!(log.segment_count() < segments_after_one, "{second:?}");
    assert_eq!(survivors(&log), got);

    // The cleaned segments survive a crash (the last sealed one is scanned in full,
    // gaps and all) and a clean shutdown.
    drop(log);
    let log = reopen(&dir);
    assert_eq!(survivors(&log), got);
    log.close().expect("close");
    let log = reopen(&dir);
    assert_eq!(survivors(&log), got);
}

#[test]
fn the_active_and_the_unsynced_last_sealed_segments_are_not_cleaned() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = Log::open(dir.path(), log_config(SEGMENT_BYTES), NOW_MS).expect("open");
    for i in 0..40 {
        append(
            &mut log,
            Compression::None,
            &[kv("k", Some(&format!("v{i:040}")))],
            1_000,
        );
    }
    let sealed: Vec<Offset> = log.segments.keys().map(|b| Offset::new(*b)).collect();
    let sealed = &sealed[..sealed.len() - 1];
    let plan = log
        .plan_cleaning(&cleaner_config(), NOW_MS)
        .expect("a plan");
    assert_eq!(plan.segment_base_offsets(), sealed[..sealed.len() - 1]);
    assert!(
        log.plan_cleaning(&cleaner_config(), NOW_MS).is_none(),
        "one pass at a time"
    );
    drop(plan);
    sync(&mut log);
    let plan = log
        .plan_cleaning(&cleaner_config(), NOW_MS)
        .expect("a plan");
    assert_eq!(plan.segment_base_offsets(), sealed);
}

#[test]
fn a_fetch_inside_a_gap_returns_the_next_surviving_batch() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = overwritten_log(dir.path());
    log.clean(&cleaner_config(), NOW_MS).expect("clean");
    let headers = served_headers(&log);
    let got = survivors(&log);
    let (start, end) = (log.log_start_offset().value(), log.log_end_offset().value());
    let mut gaps = 0;
    for offset in start..=end {
        check_fetch(&log, &headers, offset, "cleaned");
        // A consumer skips records before its offset and batches without records.
        let next = got.range(offset..).next().map(|(o, _)| *o);
        assert_eq!(first_record_from(&log, offset), next, "fetch at {offset}");
        gaps += usize::from(!got.contains_key(&offset));
    }
    assert!(gaps > 0, "the test fetches inside gaps");
}

/// The first record at or after `offset` that a consumer fetching from there sees.
fn first_record_from(log: &Log, offset: i64) -> Option<i64> {
    let mut at = offset;
    while at < log.log_end_offset().value() {
        let slice = log.locate(Offset::new(at)).expect("locate");
        let bytes = slice.read(1 << 20, Offset::new(i64::MAX)).expect("read");
        for (header, batch) in BatchIter::new(&bytes) {
            if let Some((o, _)) = records_of(batch).into_iter().find(|(o, _)| *o >= offset) {
                return Some(o);
            }
            at = header.last_offset() + 1;
        }
    }
    None
}

#[test]
fn the_indexes_of_cleaned_segments_answer_right() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = overwritten_log(dir.path());
    log.clean(&cleaner_config(), NOW_MS).expect("clean");
    log.clean(&cleaner_config(), NOW_MS).expect("merge");
    check_time_lookups(&log, "after cleaning");
    log.close().expect("close");
    let log = reopen(&dir);
    check_time_lookups(&log, "with the moved indexes adopted");
    let paths: Vec<_> = log.segments.values().map(|s| s.paths().clone()).collect();
    log.close().expect("close");
    for paths in paths {
        std::fs::remove_file(&paths.index).expect("remove index");
        std::fs::remove_file(&paths.time_index).expect("remove time index");
    }
    let (log, report) = Log::open(dir.path(), log_config(SEGMENT_BYTES), NOW_MS).expect("open");
    assert!(report.rebuilt_indexes > 0);
    check_time_lookups(&log, "with the indexes rebuilt");
}

/// Timestamp lookups against a walk of every batch, and fetches at each offset.
fn check_time_lookups(log: &Log, context: &str) {
    let headers = served_headers(log);
    let last = headers
        .iter()
        .map(|h| h.max_timestamp)
        .max()
        .expect("batches");
    for timestamp_ms in 990..=last + 1 {
        check_timestamp(log, &headers, timestamp_ms, context);
    }
    for offset in log.log_start_offset().value()..=log.log_end_offset().value() {
        check_fetch(log, &headers, offset, context);
    }
}

#[test]
fn tombstones_stay_for_the_delete_retention_after_their_first_cleaning_across_restarts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = Log::open(dir.path(), log_config(SEGMENT_BYTES), NOW_MS).expect("open");
    let value = |k: &str| kv(k, Some(&"v".repeat(100)));
    let old = append(&mut log, Compression::None, &[value("a")], 1_000);
    let tombstone = append(&mut log, Compression::Lz4, &[kv("a", None)], 2_000);
    for i in 0..30 {
        append(
            &mut log,
            Compression::None,
            &[value(&format!("f{i}"))],
            3_000,
        );
    }
    sync(&mut log);
    let config = CleanerConfig {
        delete_retention_ms: 10_000,
        ..cleaner_config()
    };
    let keys_of_a = |log: &Log| -> Vec<i64> {
        let got = survivors(log);
        got.iter()
            .filter(|(_, (k, _))| k.as_deref() == Some("a"))
            .map(|(o, _)| *o)
            .collect()
    };
    // The tombstone's record is far older than the retention, but it was never
    // cleaned: the first pass keeps it, whatever its timestamp.
    let report = log.clean(&config, 100_000).expect("clean");
    assert_eq!(report.tombstones_removed, 0);
    assert_eq!(report.tombstones_due_ms, Some(110_000));
    assert_eq!(
        keys_of_a(&log),
        vec![tombstone],
        "the older value goes first"
    );
    let first_dirty = log.first_dirty_offset();
    assert!(first_dirty.value() > tombstone);
    // Reopened, the log remembers what was cleaned and when.
    log.close().expect("close");
    let (mut log, _) = Log::open(dir.path(), log_config(SEGMENT_BYTES), NOW_MS).expect("open");
    assert_eq!(log.first_dirty_offset(), first_dirty);
    assert_eq!(log.tombstones_due_ms(), Some(110_000));
    let report = log.clean(&config, 110_000).expect("clean at the horizon");
    assert_eq!(
        (report.tombstones_removed, keys_of_a(&log)),
        (0, vec![tombstone])
    );
    let report = log.clean(&config, 110_001).expect("clean past the horizon");
    assert_eq!(report.tombstones_removed, 1);
    assert_eq!(report.tombstones_due_ms, None);
    assert_eq!(keys_of_a(&log), Vec::<i64>::new());
    assert!(old < tombstone);
}

#[test]
fn a_restarted_log_reads_only_the_keys_cleaned_since_its_checkpoint() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = Log::open(dir.path(), log_config(SEGMENT_BYTES), NOW_MS).expect("open");
    let value = |k: usize| kv(&format!("k{}", k % 10), Some(&"v".repeat(100)));
    for i in 0..60 {
        append(&mut log, Compression::None, &[value(i)], 1_000);
    }
    sync(&mut log);
    let first = log.clean(&cleaner_config(), NOW_MS).expect("clean");
    assert!(first.segments_installed > 0);
    let cleaned_to = log.first_dirty_offset();
    for i in 0..30 {
        append(&mut log, Compression::None, &[value(i)], 1_000);
    }
    sync(&mut log);
    drop(log); // as a crash would leave it, with no clean close
    let (mut log, _) = Log::open(dir.path(), log_config(SEGMENT_BYTES), NOW_MS).expect("reopen");
    assert_eq!(log.first_dirty_offset(), cleaned_to);
    let dirty_ratio = log.dirty_ratio();
    assert!(
        dirty_ratio > 0.0 && dirty_ratio < 1.0,
        "only what came after the pass is dirty: {dirty_ratio}"
    );
    let second = log.clean(&cleaner_config(), NOW_MS).expect("clean");
    let keys = survivors(&log);
    let latest: BTreeMap<String, i64> = keys
        .iter()
        .filter_map(|(o, (k, _))| Some((k.clone()?, *o)))
        .collect();
    assert_eq!(latest.len(), 10, "each key once: {keys:?}");
    assert!(second.first_dirty_offset > cleaned_to);
    // A lost or damaged checkpoint reads as a log never cleaned.
    drop(log);
    std::fs::write(dir.path().join("cleaner-checkpoint"), "garbage").expect("write");
    let (log, _) = Log::open(dir.path(), log_config(SEGMENT_BYTES), NOW_MS).expect("reopen");
    assert_eq!(log.first_dirty_offset(), log.log_start_offset());
}

#[test]
fn a_producers_last_batch_stays_even_when_its_records_go() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = Log::open(dir.path(), log_config(4096), NOW_MS).expect("open");
    let idempotent = |log: &mut Log, sequence: i32| {
        let mut batch = keyed_batch(
            Compression::Zstd,
            &[kv("x", Some("p"))],
            1_000,
            Some((7, sequence)),
        );
        log.append(&mut batch, NOW_MS)
            .expect("append")
            .base_offset
            .value()
    };
    // The first batch of a segment stays (as a header alone): start with another one.
    append(
        &mut log,
        Compression::None,
        &[kv("first", Some("f"))],
        1_000,
    );
    let first = idempotent(&mut log, 0);
    let last = idempotent(&mut log, 1);
    append(
        &mut log,
        Compression::None,
        &[kv("x", Some("later"))],
        1_000,
    );
    for i in 0..60 {
        append(
            &mut log,
            Compression::None,
            &[kv(&format!("f{i}"), Some(&"v".repeat(100)))],
            1_000,
        );
    }
    sync(&mut log);
    let report = log.clean(&cleaner_config(), NOW_MS).expect("clean");
    assert_eq!(report.records_removed, 2);
    let headers = served_headers(&log);
    assert!(
        headers.iter().all(|h| h.base_offset != first),
        "an earlier batch of the producer goes"
    );
    let kept = headers
        .iter()
        .find(|h| h.base_offset == last)
        .expect("the producer's last batch stays");
    assert_eq!(
        (kept.producer_id, kept.base_sequence, kept.records_count),
        (7, 1, 0)
    );
}

#[test]
fn unchanged_segments_are_not_swapped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = Log::open(dir.path(), log_config(SEGMENT_BYTES), NOW_MS).expect("open");
    for i in 0..8 {
        append(
            &mut log,
            Compression::None,
            &[kv(&format!("k{i}"), Some(&"v".repeat(600)))],
            1_000,
        );
    }
    sync(&mut log);
    let before = survivors(&log);
    let segments: Vec<_> = log.segments.values().map(|s| s.id()).collect();
    let report = log.clean(&cleaner_config(), NOW_MS).expect("clean");
    assert_eq!(report.segments_installed, 0);
    assert_eq!(report.groups_unchanged, log.segment_count() - 1);
    let after: Vec<_> = log.segments.values().map(|s| s.id()).collect();
    assert_eq!(segments, after, "the same segments, none swapped");
    assert_eq!(survivors(&log), before);
}

#[test]
fn groups_whose_segments_went_meanwhile_are_not_swapped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, written) = overwritten_log(dir.path());
    // All of the first group goes: it is skipped, the others are swapped in.
    let plan = log.plan_cleaning(&cleaner_config(), NOW_MS).expect("plan");
    let staged = plan
        .stage(&cleaner_config(), NOW_MS, &mut |_| {})
        .expect("stage");
    assert_eq!(staged.groups[0].replaces.len(), 1);
    let second = *log.segments.keys().nth(1).expect("segments");
    log.delete_segments_before(Offset::new(second))
        .expect("delete");
    let report = log.install_cleaned(staged).expect("install");
    assert_eq!(report.groups_aborted, 1);
    assert!(report.segments_installed > 0);
    check_cleaned(&log, &written, no_tombstone, "first group deleted");

    // Part of a group goes: that group and every later one stay as they were.
    let plan = log.plan_cleaning(&cleaner_config(), NOW_MS).expect("plan");
    let staged = plan
        .stage(&cleaner_config(), NOW_MS, &mut |_| {})
        .expect("stage");
    assert!(
        staged.groups[0].replaces.len() > 1,
        "the second pass merges segments"
    );
    let groups = staged.groups.len();
    let before = survivors(&log);
    let second = *log.segments.keys().nth(1).expect("segments");
    log.delete_segments_before(Offset::new(second))
        .expect("delete");
    let report = log.install_cleaned(staged).expect("install");
    assert_eq!(
        (report.groups_aborted, report.segments_installed),
        (groups, 0)
    );
    let start = log.log_start_offset().value();
    let expected: BTreeMap<i64, Kv> = before
        .range(start..)
        .map(|(o, r)| (*o, r.clone()))
        .collect();
    assert_eq!(survivors(&log), expected);
    assert!(!dir.path().join(".cleaning").exists());
}

#[test]
fn a_full_key_map_stops_at_a_segment_boundary_and_later_passes_go_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = Log::open(dir.path(), log_config(SEGMENT_BYTES), NOW_MS).expect("open");
    let mut written = BTreeMap::new();
    for i in 0..120i64 {
        let record = kv(&format!("k{}", i % 40), Some(&"v".repeat(100)));
        let base = append(
            &mut log,
            Compression::None,
            std::slice::from_ref(&record),
            1_000,
        );
        written.insert(base, (record, 1_000));
    }
    sync(&mut log);
    // Room for 16 keys (and two producers): a segment holds at most 8 records.
    let config = CleanerConfig {
        map_bytes_max: crate::compaction::OFFSET_MAP_ENTRY_BYTES * 18,
        ..cleaner_config()
    };
    let active = active_base(&log);
    let mut passes = 0;
    let mut full = false;
    while log.first_dirty_offset().value() < active {
        let report = log.clean(&config, NOW_MS).expect("clean");
        full |= report.map_full;
        check_cleaned(&log, &written, no_tombstone, &format!("pass {passes}"));
        passes += 1;
        assert!(passes < 40, "passes make progress: {report:?}");
    }
    assert!(full && passes > 1, "the map filled up");
    let got = survivors(&log);
    let sealed = records(&written)
        .range(..active)
        .map(|(o, r)| (*o, r.clone()))
        .collect();
    let latest = latest_per_key(&sealed);
    for (offset, (key, _)) in got.range(..active) {
        assert_eq!(
            latest[key.as_ref().expect("keyed")],
            *offset,
            "only the latest stays"
        );
    }
}

#[test]
fn a_swap_stopped_at_any_step_leaves_the_old_segments_or_the_cleaned_ones() {
    let reference = {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut log, _) = overwritten_log(dir.path());
        log.clean(&cleaner_config(), NOW_MS).expect("clean");
        survivors(&log)
    };
    for steps in 0.. {
        assert!(steps < 500, "the swap ends");
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut log, written) = overwritten_log(dir.path());
        let before = survivors(&log);
        STEPS_LEFT.set(Some(steps));
        let cleaned = log.clean(&cleaner_config(), NOW_MS);
        STEPS_LEFT.set(None);
        drop(log);
        // Recovery itself may stop part-way too; the open after it finishes the job.
        STEPS_LEFT.set(Some(steps % 3));
        let reopened = Log::open(dir.path(), log_config(SEGMENT_BYTES), NOW_MS);
        STEPS_LEFT.set(None);
        let log = reopened.map_or_else(|_| reopen(&dir), |(log, _)| log);
        let context = format!("stopped after {steps} steps");
        assert!(entries_ending(dir.path(), ".swap").is_empty(), "{context}");
        assert!(!dir.path().join(".cleaning").exists(), "{context}");
        check_cleaned(&log, &written, no_tombstone, &context);
        let got = survivors(&log);
        for segment in log.segments.values() {
            let range = segment.base_offset()..segment.end_offset();
            let part = |m: &BTreeMap<i64, Kv>| -> Vec<i64> {
                m.range(range.clone()).map(|(o, _)| *o).collect()
            };
            assert!(
                part(&got) == part(&before) || part(&got) == part(&reference),
                "{context}: segment {} is neither the old one nor the cleaned one",
                segment.base_offset()
            );
        }
        if cleaned.is_ok() {
            assert_eq!(got, reference);
            break;
        }
    }
}

#[test]
fn a_staging_directory_left_by_a_crash_is_deleted_at_open() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (log, _) = overwritten_log(dir.path());
    let before = survivors(&log);
    drop(log);
    let staging = dir.path().join(".cleaning");
    std::fs::create_dir(&staging).expect("create");
    std::fs::write(staging.join("00000000000000000000.log"), b"half a segment").expect("write");
    let log = reopen(&dir);
    assert!(!staging.exists());
    assert_eq!(survivors(&log), before);
}

#[test]
fn groups_go_in_one_at_a_time_while_appends_go_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, mut written) = overwritten_log(dir.path());
    let plan = log.plan_cleaning(&cleaner_config(), NOW_MS).expect("plan");
    let mut staged = plan
        .stage(&cleaner_config(), NOW_MS, &mut |_| {})
        .expect("stage");
    let groups = staged.groups.len();
    assert!(groups > 2, "the test needs several groups");
    let mut installed = 0;
    loop {
        // What the broker does between two groups, with the log's lock released.
        for i in 0..3 {
            let record = kv(
                &format!("k{i}"),
                Some(&format!("meanwhile-{installed}-{i}")),
            );
            let base = append(
                &mut log,
                Compression::Gzip,
                std::slice::from_ref(&record),
                2_000,
            );
            written.insert(base, (record, 2_000));
        }
        sync(&mut log);
        check_cleaned(
            &log,
            &written,
            no_tombstone,
            &format!("{installed} groups in"),
        );
        installed += 1;
        if !log.install_next_group(&mut staged).expect("install") {
            break;
        }
    }
    assert_eq!(installed, groups);
    let done = log.finish_cleaning(staged);
    assert_eq!(done.report().segments_installed, groups);
    assert!(
        log.plan_cleaning(&cleaner_config(), NOW_MS).is_none(),
        "no pass while the last one's leftovers remain"
    );
    assert!(dir.path().join(STAGING_DIR).exists());
    done.remove_leftovers().expect("remove leftovers");
    assert!(!dir.path().join(STAGING_DIR).exists());
    check_cleaned(&log, &written, no_tombstone, "all groups in");
    drop(log);
    check_cleaned(&reopen(&dir), &written, no_tombstone, "reopened");
}
