//! The aborted-transaction index across cleaning: a cleaned segment takes over the
//! entries of the segments it replaces, also when the swap is stopped at any step and
//! finished by the next open.

use super::*;
use crate::control::{Marker, MarkerKind};
use crate::log::cleaner::staging::STEPS_LEFT;
use crate::AbortedTxn;
use headway_base::{ProducerEpoch, ProducerId};

const SEGMENT_BYTES: u64 = 1024;

/// Keys overwritten again and again, with an abort marker (and its index entry) after
/// every fifth batch, over many small segments. Returns the log and its entries.
fn log_with_aborts(dir: &Path) -> (Log, Vec<AbortedTxn>) {
    let (mut log, _) = Log::open(dir, log_config(SEGMENT_BYTES), NOW_MS).expect("open");
    let mut entries = Vec::new();
    for i in 0..60i64 {
        let records = [kv(&format!("k{}", i % 7), Some(&format!("value-{i}")))];
        let base = append(&mut log, Compression::None, &records, 1_000 + i);
        if i % 5 == 4 {
            let mut marker = Marker {
                producer_id: ProducerId::new(i),
                producer_epoch: ProducerEpoch::FIRST,
                kind: MarkerKind::Abort,
                coordinator_epoch: 0,
                timestamp_ms: 1_000 + i,
            }
            .encode();
            let at = log.append(&mut marker, NOW_MS).expect("marker").base_offset;
            let entry = AbortedTxn {
                producer_id: ProducerId::new(i),
                first_offset: Offset::new(base),
                last_offset: at,
            };
            assert!(log.add_aborted(entry).expect("index"));
            entries.push(entry);
        }
    }
    sync(&mut log);
    assert!(log.segment_count() > 4, "the test needs several segments");
    (log, entries)
}

/// Every entry, and each in the segment holding its marker.
fn check_entries(log: &Log, entries: &[AbortedTxn], context: &str) {
    let all = log.aborted_transactions(Offset::ZERO, Offset::new(i64::MAX), 1000);
    assert_eq!(all, entries, "{context}");
    for (base, held) in &log.aborted {
        let segment = &log.segments[base];
        for e in held {
            let marker = e.last_offset.value();
            assert!(
                marker >= segment.base_offset() && marker < segment.end_offset(),
                "{context}: an entry outside its marker's segment"
            );
        }
    }
    let files = entries_ending(log.dir(), ".txnindex");
    assert_eq!(
        files.len(),
        log.aborted.len(),
        "{context}: one file per segment with entries"
    );
}

#[test]
fn cleaning_keeps_every_entry_even_when_a_swap_is_stopped_at_any_step() {
    for steps in 0.. {
        assert!(steps < 500, "the swap ends");
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut log, entries) = log_with_aborts(dir.path());
        STEPS_LEFT.set(Some(steps));
        let cleaned = log.clean(&cleaner_config(), NOW_MS);
        STEPS_LEFT.set(None);
        drop(log);
        let context = format!("stopped after {steps} steps");
        let (log, _) = Log::open(dir.path(), log_config(SEGMENT_BYTES), NOW_MS).expect("open");
        check_entries(&log, &entries, &context);
        if let Ok(report) = cleaned {
            assert!(
                report.segments_replaced > 1,
                "{context}: the pass merged segments"
            );
            break;
        }
    }
}
