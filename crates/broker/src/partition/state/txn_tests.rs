//! Transactions in the partition's bookkeeping, over values: the last stable offset,
//! markers, fencing, bounds, and the snapshot that carries open transactions across a
//! clean restart.

use super::*;
use crate::producer_state::tests::header;
use crate::producer_state::CompletedTxn;
use headway_base::limits;

fn empty() -> PartitionState {
    PartitionState::recovered(Offset::ZERO, Offset::ZERO, None, ProducerStates::default())
}

/// A transactional batch header of `records` records.
fn txn_header(producer_id: i64, epoch: i16, base_sequence: i32, records: i32) -> BatchHeader {
    let mut h = header(producer_id, epoch, base_sequence, records);
    h.attributes = 0x10;
    h
}

/// Appends `batch` as the log would; returns its base offset.
fn write(state: &mut PartitionState, batch: &BatchHeader, now_ms: i64) -> Offset {
    let AppendPlan::Write { base_offset } = state.plan_append(Some(batch)).unwrap() else {
        panic!("expected a write");
    };
    let end = base_offset.plus(i64::from(batch.last_offset_delta) + 1);
    state.appended(Some(batch), base_offset, end, now_ms);
    base_offset
}

/// Writes a marker as the shell does; returns its offset and the transaction it ended.
fn marker(
    state: &mut PartitionState,
    producer_id: i64,
    epoch: i16,
    coordinator_epoch: i32,
) -> Result<(Offset, Option<CompletedTxn>), SequenceError> {
    let (id, epoch) = (ProducerId::new(producer_id), ProducerEpoch::new(epoch));
    let at = state.plan_marker(id, epoch, coordinator_epoch)?;
    let done = state.marker_appended(id, epoch, coordinator_epoch, at, 0);
    Ok((at, done))
}

fn durable(state: &mut PartitionState) {
    let end = state.log_end_offset();
    state.durable_to(end);
}

#[test]
fn the_last_stable_offset_stops_at_the_oldest_open_transaction() {
    let mut s = empty();
    write(&mut s, &header(9, 0, 0, 2), 0); // 0..2, idempotent only
    let first_a = write(&mut s, &txn_header(1, 0, 0, 3), 10); // 2..5
    let first_b = write(&mut s, &txn_header(2, 0, 0, 1), 20); // 5
    write(&mut s, &txn_header(1, 0, 3, 1), 30); // 6, same transaction as first_a
    assert_eq!((first_a, first_b), (Offset::new(2), Offset::new(5)));
    assert_eq!(
        s.last_stable_offset(),
        Offset::ZERO,
        "never above the watermark"
    );
    durable(&mut s);
    assert_eq!(s.last_stable_offset(), first_a);
    assert_eq!(
        s.producers().oldest_ongoing(),
        Some((ProducerId::new(1), first_a, 10))
    );
    let (at, done) = marker(&mut s, 1, 0, 0).unwrap();
    assert_eq!(at, Offset::new(7));
    assert_eq!(
        done,
        Some(CompletedTxn {
            producer_id: ProducerId::new(1),
            first_offset: first_a
        })
    );
    assert_eq!(
        s.last_stable_offset(),
        first_b,
        "the next open one holds it"
    );
    marker(&mut s, 2, 0, 0).unwrap();
    assert_eq!(
        s.last_stable_offset(),
        Offset::new(7),
        "the watermark, below the markers"
    );
    durable(&mut s);
    assert_eq!(s.last_stable_offset(), Offset::new(9));
    assert_eq!(s.producers().oldest_ongoing(), None);
    // A marker with nothing open is written and ends nothing.
    let (at, done) = marker(&mut s, 1, 0, 0).unwrap();
    assert_eq!((at, done), (Offset::new(9), None));
    // The next transaction of the same producer opens again at its first batch.
    let again = write(&mut s, &txn_header(1, 0, 4, 1), 40);
    durable(&mut s);
    assert_eq!(s.last_stable_offset(), again);
}

#[test]
fn a_marker_at_a_newer_epoch_fences_the_older_one() {
    let mut s = empty();
    write(&mut s, &txn_header(1, 0, 0, 2), 0);
    // KIP-890: the coordinator ends the transaction with the epoch bumped.
    marker(&mut s, 1, 1, 0).unwrap();
    assert!(matches!(
        s.plan_append(Some(&txn_header(1, 0, 2, 1))),
        Err(SequenceError::InvalidProducerEpoch { .. })
    ));
    assert!(matches!(
        marker(&mut s, 1, 0, 0),
        Err(SequenceError::InvalidProducerEpoch { .. })
    ));
    assert!(
        matches!(
            s.plan_append(Some(&txn_header(1, 1, 2, 1))),
            Err(SequenceError::OutOfOrderSequence { expected: 0, .. })
        ),
        "the new epoch starts its sequence at 0"
    );
    write(&mut s, &txn_header(1, 1, 0, 1), 0);
    // A marker from an older coordinator is refused; the same or a newer one is not.
    marker(&mut s, 1, 1, 5).unwrap();
    assert!(matches!(
        marker(&mut s, 1, 1, 4),
        Err(SequenceError::CoordinatorFenced { .. })
    ));
    marker(&mut s, 1, 1, 5).unwrap();
}

#[test]
fn open_transactions_are_bounded_and_never_evicted_or_expired() {
    let mut s = empty();
    for id in 0..limits::TRANSACTIONS_PER_PARTITION_MAX as i64 {
        write(&mut s, &txn_header(id, 0, 0, 1), id);
    }
    let over = txn_header(-5 + i64::MAX, 0, 0, 1);
    assert!(matches!(
        s.plan_append(Some(&over)),
        Err(SequenceError::TooManyTransactions { .. })
    ));
    // Another batch of an open transaction is fine.
    write(&mut s, &txn_header(3, 0, 1, 1), 100);
    assert_eq!(s.expire_producers(1_000_000, 10), 0, "open ones stay");
    assert_eq!(
        s.producers().ongoing_count(),
        limits::TRANSACTIONS_PER_PARTITION_MAX
    );
    marker(&mut s, 3, 0, 0).unwrap();
    s.plan_append(Some(&over)).unwrap();
}

#[test]
fn the_snapshot_carries_open_transactions_and_old_snapshots_still_load() {
    let mut s = empty();
    write(&mut s, &header(7, 0, 0, 1), 5);
    let first = write(&mut s, &txn_header(1, 2, 0, 3), 10);
    write(&mut s, &txn_header(2, 0, 0, 1), 11);
    marker(&mut s, 2, 0, 3).unwrap();
    let end = s.log_end_offset();
    let bytes = s.producers().encode(end);
    let (loaded, at) = ProducerStates::decode(&bytes).expect("decodes");
    assert_eq!((&loaded, at), (s.producers(), end));
    assert_eq!(loaded.first_unstable_offset(), Some(first));
    let reopened = PartitionState::recovered(Offset::ZERO, end, None, loaded);
    assert_eq!(reopened.last_stable_offset(), first);
    // Format 1 (no transactions): the same producers, nothing open.
    let mut v1 = ProducerStates::default();
    v1.record(&header(7, 0, 0, 1), Offset::ZERO, 5);
    let mut old = Vec::new();
    old.extend_from_slice(&0x4857_5001u32.to_be_bytes());
    old.extend_from_slice(&1i64.to_be_bytes());
    old.extend_from_slice(&1u32.to_be_bytes());
    old.extend_from_slice(&7i64.to_be_bytes());
    old.extend_from_slice(&0i16.to_be_bytes());
    old.extend_from_slice(&5i64.to_be_bytes());
    old.push(1);
    old.extend_from_slice(&0i32.to_be_bytes());
    old.extend_from_slice(&0i32.to_be_bytes());
    old.extend_from_slice(&0i64.to_be_bytes());
    let crc = crc32c::crc32c(&old);
    old.extend_from_slice(&crc.to_be_bytes());
    assert_eq!(ProducerStates::decode(&old), Some((v1, Offset::new(1))));
}
