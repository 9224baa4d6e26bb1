//! The partition's bookkeeping over values: no log, no threads. The randomized test
//! prints its seed; replay a failure with `HEADWAY_PARTITION_STATE_SEED=<seed> cargo test
//! --release -p headway-broker random_`.

use super::*;
use crate::producer_state::tests::header;
use crate::producer_state::BATCHES_PER_PRODUCER;
use headway_base::ProducerId;
use std::collections::{BTreeMap, VecDeque};

fn empty() -> PartitionState {
    PartitionState::recovered(
        Offset::new(0),
        Offset::new(0),
        None,
        ProducerStates::default(),
    )
}

/// What the log does with a planned write of `records` offsets: appends at the end.
fn write(state: &mut PartitionState, batch: Option<&BatchHeader>, records: i64, now_ms: i64) {
    let AppendPlan::Write { base_offset } = state.plan_append(batch).unwrap() else {
        panic!("expected a write");
    };
    state.appended(batch, base_offset, base_offset.plus(records), now_ms);
}

#[test]
fn a_recovered_log_is_durable_to_its_end_and_keeps_a_stored_start_within_it() {
    let s = PartitionState::recovered(
        Offset::new(10),
        Offset::new(50),
        Some(Offset::new(30)),
        ProducerStates::default(),
    );
    assert_eq!(
        (s.log_start_offset(), s.high_watermark(), s.log_end_offset()),
        (Offset::new(30), Offset::new(50), Offset::new(50))
    );
    let below = PartitionState::recovered(
        Offset::new(10),
        Offset::new(50),
        Some(Offset::new(3)),
        Default::default(),
    );
    assert_eq!(below.log_start_offset(), Offset::new(10));
    let past = PartitionState::recovered(
        Offset::new(10),
        Offset::new(50),
        Some(Offset::new(90)),
        Default::default(),
    );
    assert_eq!(past.log_start_offset(), Offset::new(50));
    let none =
        PartitionState::recovered(Offset::new(10), Offset::new(50), None, Default::default());
    assert_eq!(none.log_start_offset(), Offset::new(10));
}

#[test]
fn writes_get_dense_offsets_and_the_watermark_waits_for_durability() {
    let mut s = empty();
    write(&mut s, None, 3, 1);
    write(&mut s, None, 2, 2);
    assert_eq!(s.log_end_offset(), Offset::new(5));
    assert_eq!(s.high_watermark(), Offset::new(0), "nothing synced yet");
    assert_eq!(s.durable_to(Offset::new(3)), Some(Offset::new(3)));
    assert_eq!(
        s.durable_to(Offset::new(2)),
        None,
        "an older sync never moves it back"
    );
    assert_eq!(s.durable_to(Offset::new(5)), Some(Offset::new(5)));
    assert_eq!(s.high_watermark(), Offset::new(5));
}

#[test]
#[should_panic(expected = "other than the partition's next one")]
fn a_log_that_skips_offsets_stops_the_partition() {
    let mut s = empty();
    write(&mut s, None, 3, 1);
    s.appended(None, Offset::new(4), Offset::new(5), 1);
}

#[test]
#[should_panic(expected = "past the log end")]
fn a_durable_offset_past_the_log_end_is_a_bug() {
    let mut s = empty();
    write(&mut s, None, 3, 1);
    s.durable_to(Offset::new(4));
}

#[test]
fn a_retried_batch_is_answered_with_its_first_offsets() {
    let mut s = empty();
    write(&mut s, None, 4, 1);
    let first = header(7, 0, 0, 3);
    write(&mut s, Some(&first), 3, 2);
    write(&mut s, Some(&header(7, 0, 3, 1)), 1, 3);
    assert_eq!(
        s.plan_append(Some(&first)),
        Ok(AppendPlan::Duplicate {
            base_offset: Offset::new(4),
            log_end_offset: Offset::new(7)
        })
    );
    assert!(matches!(
        s.plan_append(Some(&header(7, 0, 9, 1))),
        Err(SequenceError::OutOfOrderSequence {
            expected: 4,
            got: 9,
            ..
        })
    ));
    assert_eq!(s.log_end_offset(), Offset::new(8), "a plan changes nothing");
}

#[test]
fn delete_records_moves_the_start_only_forward_and_never_past_the_watermark() {
    let mut s = empty();
    write(&mut s, None, 10, 1);
    s.durable_to(Offset::new(6));
    assert!(matches!(
        s.plan_delete_records(DeleteRecordsTo::Offset(Offset::new(7))),
        Err(BrokerError::OffsetOutOfRange {
            offset,
            high_watermark,
            ..
        }) if offset == Offset::new(7) && high_watermark == Offset::new(6)
    ));
    assert!(s
        .plan_delete_records(DeleteRecordsTo::Offset(Offset::new(-2)))
        .is_err());
    assert_eq!(
        s.plan_delete_records(DeleteRecordsTo::Offset(Offset::new(4)))
            .unwrap(),
        LogStartMove::To(Offset::new(4))
    );
    assert_eq!(s.delete_records_moved(Offset::new(4)), Offset::new(4));
    assert_eq!(
        s.plan_delete_records(DeleteRecordsTo::Offset(Offset::new(2)))
            .unwrap(),
        LogStartMove::Unchanged(Offset::new(4))
    );
    assert_eq!(
        s.plan_delete_records(DeleteRecordsTo::from_wire(-1))
            .unwrap(),
        LogStartMove::To(Offset::new(6))
    );
    assert_eq!(
        s.retention_moved(Offset::new(2)),
        Offset::new(4),
        "never backwards"
    );
    assert_eq!(s.retention_moved(Offset::new(5)), Offset::new(5));
}

#[test]
fn reads_stop_at_the_watermark() {
    let window = |offset| ReadWindow::of(Offset::new(offset), Offset::new(2), Offset::new(5));
    assert!(matches!(
        window(1),
        Err(BrokerError::OffsetOutOfRange { .. })
    ));
    assert_eq!(window(2).unwrap(), ReadWindow::Durable);
    assert_eq!(window(5).unwrap(), ReadWindow::AtHighWatermark);
    assert_eq!(window(6).unwrap(), ReadWindow::NotDurable);
}

#[test]
fn idle_producers_expire_with_the_time_passed_in() {
    let mut s = empty();
    write(&mut s, Some(&header(1, 0, 0, 1)), 1, 1_000);
    write(&mut s, Some(&header(2, 0, 0, 1)), 1, 5_000);
    assert_eq!(s.expire_producers(6_000, 2_000), 1);
    assert!(
        s.producers().get(ProducerId::new(1)).is_none()
            && s.producers().get(ProducerId::new(2)).is_some()
    );
}

/// One idempotent producer as a client sees it: its epoch, next sequence and the
/// batches it may still retry, with the offsets they got.
#[derive(Default)]
struct Client {
    epoch: i16,
    next_sequence: i32,
    sent: VecDeque<(BatchHeader, Offset, Offset)>,
}

/// The seed of the randomized test: `HEADWAY_PARTITION_STATE_SEED`, or a fresh one.
fn seed() -> u64 {
    match std::env::var("HEADWAY_PARTITION_STATE_SEED") {
        Ok(seed) => seed
            .trim()
            .parse()
            .expect("HEADWAY_PARTITION_STATE_SEED is a u64"),
        Err(_) => fastrand::u64(..),
    }
}

/// Random appends (plain and idempotent), syncs that report out of order, retries,
/// out-of-order sequences, new epochs, DeleteRecords, retention and expiry, checking
/// the invariants after every step against a model of the log and of the clients.
#[test]
fn random_operations_keep_the_invariants() {
    let seed = seed();
    // Shown when the test fails (the harness prints a failing test's output).
    eprintln!("seed {seed}: replay with HEADWAY_PARTITION_STATE_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut s = empty();
    let mut now_ms = 0i64;
    // The log as the test sees it: the end, and the sync sets taken but not yet done.
    let mut log_end = Offset::new(0);
    let mut pending_syncs: Vec<Offset> = Vec::new();
    let mut clients: BTreeMap<i64, Client> = BTreeMap::new();
    for step in 0..20_000 {
        let before = s.clone();
        now_ms += rng.i64(0..50);
        match rng.u8(0..100) {
            0..=24 => {
                let records = rng.i64(1..20);
                write(&mut s, None, records, now_ms);
                log_end = log_end.plus(records);
            }
            25..=49 => {
                let id = rng.i64(0..4);
                let client = clients.entry(id).or_default();
                let records = rng.i32(1..6);
                let h = header(id, client.epoch, client.next_sequence, records);
                let plan = s.plan_append(Some(&h)).unwrap_or_else(|e| {
                    panic!("step {step}: in-order batch of producer {id} refused: {e}")
                });
                assert_eq!(
                    plan,
                    AppendPlan::Write {
                        base_offset: log_end
                    },
                    "step {step}"
                );
                let end = log_end.plus(i64::from(records));
                s.appended(Some(&h), log_end, end, now_ms);
                client.sent.push_back((h, log_end, end));
                if client.sent.len() > BATCHES_PER_PRODUCER {
                    client.sent.pop_front();
                }
                client.next_sequence += records;
                log_end = end;
            }
            50..=59 => {
                // A retry of one of the last batches: its first offsets, nothing written.
                let senders: Vec<&Client> =
                    clients.values().filter(|c| !c.sent.is_empty()).collect();
                if senders.is_empty() {
                    continue;
                }
                let client = senders[rng.usize(..senders.len())];
                let (h, base, end) = client.sent[rng.usize(..client.sent.len())];
                assert_eq!(
                    s.plan_append(Some(&h)),
                    Ok(AppendPlan::Duplicate {
                        base_offset: base,
                        log_end_offset: end
                    }),
                    "step {step}"
                );
            }
            60..=62 => {
                // A gap in the sequence is refused.
                if let Some((&id, client)) = clients.iter().find(|(_, c)| !c.sent.is_empty()) {
                    let gap = header(id, client.epoch, client.next_sequence + 1, 1);
                    assert!(s.plan_append(Some(&gap)).is_err(), "step {step}");
                }
            }
            63..=64 => {
                // A new epoch starts at sequence 0 and forgets the old batches.
                let id = rng.i64(0..4);
                let client = clients.entry(id).or_default();
                client.epoch += 1;
                client.next_sequence = 0;
                client.sent.clear();
            }
            65..=79 => pending_syncs.push(log_end),
            80..=89 => {
                if !pending_syncs.is_empty() {
                    let synced = pending_syncs.swap_remove(rng.usize(..pending_syncs.len()));
                    let moved = s.durable_to(synced);
                    assert_eq!(moved.is_some(), synced > before.high_watermark());
                }
            }
            90..=94 => {
                let to = match rng.u8(0..4) {
                    0 => DeleteRecordsTo::HighWatermark,
                    _ => DeleteRecordsTo::Offset(Offset::new(rng.i64(-1..=log_end.value() + 1))),
                };
                match s.plan_delete_records(to) {
                    Ok(LogStartMove::To(target)) => {
                        assert!(target > before.log_start_offset());
                        s.delete_records_moved(target);
                    }
                    Ok(LogStartMove::Unchanged(at)) => assert_eq!(at, s.log_start_offset()),
                    Err(BrokerError::OffsetOutOfRange { offset, .. }) => {
                        assert!(offset.value() < 0 || offset > s.high_watermark())
                    }
                    Err(e) => panic!("step {step}: {e}"),
                }
            }
            95..=97 => {
                // Retention deletes whole segments of durable data.
                let start = s.log_start_offset().value();
                let to = rng.i64(start..=s.high_watermark().value());
                s.retention_moved(Offset::new(to));
            }
            _ => {
                let idle_ms = rng.i64(100..5_000);
                s.expire_producers(now_ms, idle_ms);
                // A client whose state expired starts over, as after UNKNOWN_PRODUCER_ID.
                for (id, client) in clients.iter_mut() {
                    if s.producers().get(ProducerId::new(*id)).is_none() {
                        *client = Client::default();
                    }
                }
            }
        }
        assert_eq!(
            s.log_end_offset(),
            log_end,
            "step {step}: offsets are dense"
        );
        assert!(s.log_start_offset() <= s.high_watermark(), "step {step}");
        assert!(s.high_watermark() <= s.log_end_offset(), "step {step}");
        assert!(s.high_watermark() >= before.high_watermark(), "step {step}");
        assert!(
            s.log_start_offset() >= before.log_start_offset(),
            "step {step}"
        );
        assert!(s.log_end_offset() >= before.log_end_offset(), "step {step}");
    }
}
