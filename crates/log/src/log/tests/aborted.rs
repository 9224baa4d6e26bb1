//! The aborted-transaction index through the log: entries follow their marker's
//! segment, are looked up by range, survive a clean close, are cut with a torn tail,
//! and go with their segment (retention, DeleteRecords) or into a cleaned segment.

use super::*;
use crate::control::{Marker, MarkerKind};
use headway_base::{ProducerEpoch, ProducerId};

/// Appends an abort marker for `producer_id`; returns its offset.
fn abort_marker(log: &mut Log, producer_id: i64) -> Offset {
    let mut bytes = Marker {
        producer_id: ProducerId::new(producer_id),
        producer_epoch: ProducerEpoch::FIRST,
        kind: MarkerKind::Abort,
        coordinator_epoch: 0,
        timestamp_ms: NOW_MS,
    }
    .encode();
    log.append(&mut bytes, NOW_MS).expect("append").base_offset
}

fn txn(producer_id: i64, first: Offset, last: Offset) -> AbortedTxn {
    AbortedTxn {
        producer_id: ProducerId::new(producer_id),
        first_offset: first,
        last_offset: last,
    }
}

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes_max: 1000,
        ..config()
    }
}

/// Writes `rounds` of (data, abort marker) into small segments; returns the entries.
fn aborted_log(log: &mut Log, rounds: i64) -> Vec<AbortedTxn> {
    (0..rounds)
        .map(|i| {
            let first = log.log_end_offset();
            append_one(log, 2, 100, NOW_MS);
            let marker = abort_marker(log, i);
            let entry = txn(i, first, marker);
            assert!(log.add_aborted(entry).unwrap());
            assert!(
                !log.add_aborted(entry).unwrap(),
                "known entries are kept once"
            );
            entry
        })
        .collect()
}

#[test]
fn entries_are_found_by_the_range_they_overlap() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, small_segments());
    let entries = aborted_log(&mut log, 12);
    assert!(log.segment_count() > 3, "the test needs several segments");
    let end = log.log_end_offset();
    assert_eq!(log.aborted_transactions(Offset::ZERO, end, 100), entries);
    assert_eq!(log.aborted_transactions(Offset::ZERO, end, 5), entries[..5]);
    // From inside the fourth transaction to its marker: that one only.
    let e = entries[3];
    let inside = e.first_offset.next();
    assert_eq!(log.aborted_transactions(inside, e.last_offset, 100), [e]);
    // A range past every marker overlaps none.
    assert!(log.aborted_transactions(end, end, 100).is_empty());
}

#[test]
fn entries_survive_a_clean_close_and_a_torn_marker_drops_its_entry() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, small_segments());
    let entries = aborted_log(&mut log, 6);
    log.close().unwrap();
    let (log, _) = open(&dir, small_segments());
    assert_eq!(
        log.aborted_transactions(Offset::ZERO, log.log_end_offset(), 100),
        entries
    );
    // A crash that keeps the entry but tears the marker off the log's tail.
    let last = *entries.last().unwrap();
    let active_base = *log.segments.keys().next_back().unwrap();
    drop(log);
    // Only a write can tear the tail, and the first write after an open consumes the
    // clean-shutdown marker that an open keeps while nothing is written.
    std::fs::remove_file(dir.path().join(crate::recovery::CLEAN_SHUTDOWN_FILE)).unwrap();
    let path = segment_path(&dir, active_base, "log");
    let len = std::fs::metadata(&path).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 5)
        .unwrap();
    let (log, report) = open(&dir, small_segments());
    assert!(!report.clean_shutdown);
    assert!(log.log_end_offset() <= last.last_offset);
    let found = log.aborted_transactions(Offset::ZERO, Offset::new(i64::MAX), 100);
    assert_eq!(found, entries[..entries.len() - 1]);
    assert_eq!(log.aborted_count(), entries.len() - 1);
}

#[test]
fn entries_go_with_their_segment() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(&dir, small_segments());
    let entries = aborted_log(&mut log, 12);
    let second = *log.segments.keys().nth(1).unwrap();
    let report = log.delete_segments_before(Offset::new(second)).unwrap();
    assert!(report.deleted_segments >= 1);
    let start = log.log_start_offset();
    let kept: Vec<AbortedTxn> = entries
        .iter()
        .filter(|e| e.last_offset >= start)
        .copied()
        .collect();
    assert!(kept.len() < entries.len());
    assert_eq!(
        log.aborted_transactions(Offset::ZERO, log.log_end_offset(), 100),
        kept
    );
    assert!(!segment_path(&dir, 0, "txnindex").exists());
    log.close().unwrap();
    let (log, _) = open(&dir, small_segments());
    assert_eq!(log.aborted_count(), kept.len());
}
