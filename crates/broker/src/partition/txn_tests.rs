//! Goal: a partition's open transactions (so its last stable offset) and its aborted
//! transactions are right after every kind of reopen: a clean close (the producer
//! snapshot), a crash before any snapshot (the replay of the log), and a crash that
//! lost the tail holding a marker (its entry must go, its transaction reopen).
//!
//! Method: transactional batches built by kafka-protocol's encoder, markers through
//! [`Partition::write_marker`], and the partition reopened on its directory. A
//! "crash" drops the partition without closing it: no snapshot, no clean-shutdown
//! marker, so recovery scans the tail and the producers' state is replayed.

use super::*;
use crate::BrokerError;
use bytes::BytesMut;
use headway_base::{ProducerEpoch, ProducerId};
use headway_log::batch::validate_all;
use headway_log::LogConfig;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use std::path::Path;

const MAX: usize = 1 << 20;

/// One transactional batch of `count` records from `producer_id` at `epoch`.
fn txn_batch(producer_id: i64, epoch: i16, sequence: i32, count: usize) -> Vec<u8> {
    encoded(true, producer_id, epoch, sequence, count)
}

/// One batch of a plain producer.
pub(crate) fn plain_batch() -> Vec<u8> {
    encoded(false, -1, -1, -1, 1)
}

pub(crate) fn encoded(
    transactional: bool,
    producer_id: i64,
    epoch: i16,
    sequence: i32,
    count: usize,
) -> Vec<u8> {
    let records: Vec<Record> = (0..count)
        .map(|i| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: if sequence < 0 {
                -1
            } else {
                sequence + i as i32
            },
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(bytes::Bytes::from(format!("v{i}"))),
            headers: Default::default(),
        })
        .collect();
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut out, &records, &options).unwrap();
    out.to_vec()
}

fn open(dir: &Path, flush: FlushPolicy) -> Arc<Partition> {
    Partition::open(
        dir.to_path_buf(),
        "t".into(),
        PartitionIndex::new(0),
        LogConfig::default(),
        flush,
        Clock::system(),
    )
    .unwrap()
    .0
}

fn marker(p: &Partition, producer_id: i64, result: TransactionResult) -> Offset {
    p.write_marker(
        ProducerId::new(producer_id),
        ProducerEpoch::new(0),
        result,
        0,
    )
    .unwrap()
}

fn aborted(p: &Partition) -> Vec<(i64, i64, i64)> {
    p.aborted_transactions(Offset::ZERO, Offset::new(i64::MAX), 100)
        .unwrap()
        .iter()
        .map(|t| {
            (
                t.producer_id.value(),
                t.first_offset.value(),
                t.last_offset.value(),
            )
        })
        .collect()
}

fn lso(p: &Partition) -> i64 {
    p.last_stable_offset().value()
}

#[test]
fn open_and_aborted_transactions_survive_every_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), FlushPolicy::None);
    p.append(validate_all(&txn_batch(1, 0, 0, 2)), MAX).unwrap(); // 0..2
    p.append(validate_all(&plain_batch()), MAX).unwrap(); // 2
    p.append(validate_all(&txn_batch(2, 0, 0, 2)), MAX).unwrap(); // 3..5
    assert_eq!(p.high_watermark(), Offset::new(5));
    assert_eq!(lso(&p), 0);
    let (id, first, _) = p.oldest_ongoing_transaction().unwrap();
    assert_eq!((id, first), (ProducerId::new(1), Offset::ZERO));

    // A crash before any snapshot: the replay finds both transactions open.
    drop(p);
    let p = open(dir.path(), FlushPolicy::None);
    assert_eq!(lso(&p), 0, "replayed: producer 1's transaction is open");
    assert_eq!(marker(&p, 1, TransactionResult::Abort), Offset::new(5));
    assert_eq!(lso(&p), 3, "producer 2's transaction holds it now");
    assert_eq!(aborted(&p), [(1, 0, 5)]);

    // A crash after the abort: the entry and the open transaction come back.
    drop(p);
    let p = open(dir.path(), FlushPolicy::None);
    assert_eq!((lso(&p), aborted(&p)), (3, vec![(1, 0, 5)]));
    assert_eq!(marker(&p, 2, TransactionResult::Commit), Offset::new(6));
    assert_eq!(lso(&p), 7);
    assert_eq!(p.oldest_ongoing_transaction(), None);

    // A clean close: the snapshot (format 2) holds the state, no replay needed.
    p.close().unwrap();
    let p = open(dir.path(), FlushPolicy::None);
    assert_eq!((lso(&p), aborted(&p)), (7, vec![(1, 0, 5)]));
    // A producer fenced by the marker's epoch stays fenced across the restart.
    p.write_marker(
        ProducerId::new(2),
        ProducerEpoch::new(3),
        TransactionResult::Abort,
        0,
    )
    .unwrap();
    p.close().unwrap();
    let p = open(dir.path(), FlushPolicy::None);
    assert!(matches!(
        p.append(validate_all(&txn_batch(2, 2, 0, 1)), MAX),
        Err(BrokerError::Sequence(
            crate::producer_state::SequenceError::InvalidProducerEpoch { .. }
        ))
    ));
    p.close().unwrap();
}

#[test]
fn a_marker_written_but_not_synced_is_kept_or_lost_whole() {
    let dir = tempfile::tempdir().unwrap();
    // `sync` without a flusher: nothing becomes durable until the reopen.
    let p = open(dir.path(), FlushPolicy::Sync);
    p.append(validate_all(&txn_batch(3, 0, 0, 2)), MAX).unwrap(); // 0..2
    assert_eq!(lso(&p), 0, "nothing durable yet");
    assert_eq!(marker(&p, 3, TransactionResult::Abort), Offset::new(2));
    assert_eq!(aborted(&p), [(3, 0, 2)]);
    assert_eq!(lso(&p), 0, "the watermark bounds it");
    drop(p);

    // The page cache kept the marker: it is recovered with its entry.
    let p = open(dir.path(), FlushPolicy::Sync);
    assert_eq!((lso(&p), aborted(&p)), (3, vec![(3, 0, 2)]));
    drop(p);

    // The disk lost the marker: its entry goes and the transaction is open again.
    let log = dir.path().join(format!("{:020}.log", 0));
    let len = std::fs::metadata(&log).unwrap().len();
    let marker_bytes = headway_log::control::Marker {
        producer_id: ProducerId::new(3),
        producer_epoch: ProducerEpoch::FIRST,
        kind: headway_log::control::MarkerKind::Abort,
        coordinator_epoch: 0,
        timestamp_ms: 0,
    }
    .encode()
    .len() as u64;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(len - marker_bytes)
        .unwrap();
    let p = open(dir.path(), FlushPolicy::Sync);
    assert_eq!(p.high_watermark(), Offset::new(2));
    assert_eq!(lso(&p), 0, "the transaction is open again");
    assert!(aborted(&p).is_empty());
    assert_eq!(
        p.oldest_ongoing_transaction()
            .map(|(id, first, _)| (id, first)),
        Some((ProducerId::new(3), Offset::ZERO))
    );
}

#[test]
fn a_transaction_stays_unstable_until_its_marker_is_below_the_high_watermark() {
    let dir = tempfile::tempdir().unwrap();
    // `sync` without a flusher: the test says what is synced.
    let p = open(dir.path(), FlushPolicy::Sync);
    p.append(validate_all(&txn_batch(4, 0, 0, 2)), MAX).unwrap(); // 0..2
    p.append(validate_all(&plain_batch()), MAX).unwrap(); // 2
    p.publish_synced(Offset::new(3));
    assert_eq!((p.high_watermark().value(), lso(&p)), (3, 0), "open");
    // The marker is written, not durable: the outcome is not durable either, so
    // read_committed readers stay before the transaction (Kafka's last stable offset).
    assert_eq!(marker(&p, 4, TransactionResult::Commit), Offset::new(3));
    assert_eq!(lso(&p), 0, "the marker is above the high watermark");
    p.publish_synced(Offset::new(4));
    assert_eq!(lso(&p), 4, "the marker is durable");

    // Two transactions end; the high watermark passes the first marker only.
    p.append(validate_all(&txn_batch(5, 0, 0, 1)), MAX).unwrap(); // 4
    p.append(validate_all(&txn_batch(6, 0, 0, 1)), MAX).unwrap(); // 5
    assert_eq!(marker(&p, 5, TransactionResult::Abort), Offset::new(6));
    assert_eq!(marker(&p, 6, TransactionResult::Commit), Offset::new(7));
    p.publish_synced(Offset::new(6));
    assert_eq!(lso(&p), 4, "both markers above the watermark");
    p.publish_synced(Offset::new(7));
    assert_eq!(lso(&p), 5, "producer 6's marker still above it");
    p.publish_synced(Offset::new(8));
    assert_eq!(lso(&p), 8);
}

#[test]
fn markers_waiting_for_the_high_watermark_are_bounded_and_only_ever_hold_readers_longer() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), FlushPolicy::Sync);
    let max = headway_base::limits::TRANSACTIONS_PER_PARTITION_MAX as i64;
    // As if that many transactions (first offsets 0, 2, 4, ...) ended with markers
    // (1, 3, 5, ...) that the high watermark has not reached.
    for i in 0..=max {
        p.completing_at(Offset::new(2 * i + 1), Offset::new(2 * i));
    }
    assert_eq!(p.completing.lock().unwrap().len(), max as usize);
    assert_eq!(p.completing_folded(), 1);
    // The last two folded into one entry: the later marker, the earlier first offset.
    let newest = p
        .completing
        .lock()
        .unwrap()
        .last_key_value()
        .map(|(m, f)| (*m, *f));
    assert_eq!(
        newest,
        Some((Offset::new(2 * max + 1), Offset::new(2 * max - 2)))
    );
    assert_eq!(p.watch().borrow().completing_first, Some(Offset::ZERO));
}

#[test]
fn a_cut_log_keeps_readers_waiting_only_as_far_as_its_new_end() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), FlushPolicy::Sync);
    let entries = |p: &Partition| -> Vec<(i64, i64)> {
        let completing = p.completing.lock().unwrap();
        completing
            .iter()
            .map(|(m, f)| (m.value(), f.value()))
            .collect()
    };
    p.completing_at(Offset::new(5), Offset::new(1));
    p.completing_at(Offset::new(10), Offset::new(7));
    p.completing_at(Offset::new(12), Offset::new(4));
    // Markers 10 and 12 are cut away: one entry waits for the new end, with the
    // earlier first offset of the two.
    p.completing_cut(Offset::new(9));
    assert_eq!(entries(&p), vec![(5, 1), (8, 4)]);
    assert_eq!(p.watch().borrow().completing_first, Some(Offset::new(1)));
    p.completing_cut(Offset::ZERO);
    assert!(entries(&p).is_empty(), "an empty log holds no marker");
    assert_eq!(p.watch().borrow().completing_first, None);
}

#[test]
fn control_batches_and_transactional_batches_without_a_producer_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), FlushPolicy::None);
    let marker = headway_log::control::Marker {
        producer_id: ProducerId::new(1),
        producer_epoch: ProducerEpoch::FIRST,
        kind: headway_log::control::MarkerKind::Commit,
        coordinator_epoch: 0,
        timestamp_ms: 0,
    }
    .encode();
    assert!(matches!(
        p.append(validate_all(&marker), MAX),
        Err(BrokerError::InvalidRequest(_))
    ));
    assert!(matches!(
        p.append(validate_all(&txn_batch(-1, -1, -1, 1)), MAX),
        Err(BrokerError::InvalidRequest(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_committed_read_is_shortened_until_its_aborted_transactions_fit() {
    use crate::io::bulk_budget::BulkBudget;
    use crate::io::read_pool::{ReadPool, ReadVia};
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), FlushPolicy::None);
    let most = limits::ABORTED_TRANSACTIONS_PER_FETCH_MAX;
    for i in 0..=most as i32 {
        p.append(validate_all(&txn_batch(1, 0, i, 1)), MAX).unwrap();
        marker(&p, 1, TransactionResult::Abort);
    }
    let budget = crate::BrokerConfig::default().bulk_budget();
    let via = ReadVia {
        pool: ReadPool::new(
            1,
            crate::io::priority::BulkPriority::UNCHANGED,
            Arc::new(BulkBudget::new(budget, Arc::default())),
        ),
        cache_first: true,
        tail_bytes: u64::MAX,
    };
    let all_bytes = 64 << 20;
    let read = p
        .read_via(Offset::ZERO, all_bytes, &via, Isolation::ReadCommitted)
        .await
        .unwrap();
    let named = read
        .aborted
        .expect("read_committed names aborted transactions");
    let (end, _) = records_end(&read.records).expect("records");
    assert!(end < p.last_stable_offset(), "the read was shortened");
    assert!(named.len() <= most && !named.is_empty());
    assert_eq!(
        named,
        p.aborted_transactions(Offset::ZERO, end, usize::MAX)
            .unwrap(),
        "every aborted transaction in the records is named"
    );
    // read_uncommitted reads it all and names none.
    let read = p
        .read_via(Offset::ZERO, all_bytes, &via, Isolation::ReadUncommitted)
        .await
        .unwrap();
    assert!(read.aborted.is_none());
    assert_eq!(records_end(&read.records).unwrap().0, p.high_watermark());
}
