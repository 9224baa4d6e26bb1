//! The state machine's transitions, each persisted step applied as the coordinator
//! does once its record is durable.

use super::*;
use headway_base::PartitionIndex;

const T: &str = "txn";

fn tp(topic: &str, p: i32) -> TopicPartition {
    TopicPartition::new(topic, PartitionIndex::new(p))
}

fn pid(id: i64) -> ProducerId {
    ProducerId::new(id)
}

fn epoch(e: i16) -> ProducerEpoch {
    ProducerEpoch::new(e)
}

fn loaded(config: TxnConfig) -> Transactions {
    let mut txns = Transactions::new(config);
    txns.loaded();
    txns
}

/// A coordinator with `T` initialised: producer 1, epoch 0.
fn initialised() -> Transactions {
    let mut txns = loaded(TxnConfig::default());
    init(&mut txns, None, 1);
    txns
}

fn init(txns: &mut Transactions, expected: Option<ExpectedProducer>, fresh: i64) -> TxnMetadata {
    match txns
        .init_producer_id(T, 60_000, expected, pid(fresh), 0)
        .unwrap()
    {
        InitOutcome::Write(meta) => {
            txns.apply(meta.clone());
            meta
        }
        other => panic!("expected a write, got {other:?}"),
    }
}

fn add(txns: &mut Transactions, e: i16, partitions: &[TopicPartition], now: i64) {
    if let Some(meta) = txns
        .add_partitions(T, pid(1), epoch(e), partitions, now)
        .unwrap()
    {
        txns.apply(meta);
    }
}

fn end(
    txns: &mut Transactions,
    id: i64,
    e: i16,
    result: TransactionResult,
    version2: bool,
) -> Result<EndOutcome, TxnError> {
    txns.end_txn(T, pid(id), epoch(e), result, version2, None, 10)
}

fn prepare_and_complete(txns: &mut Transactions, outcome: EndOutcome) -> TxnMetadata {
    let EndOutcome::Prepare(meta) = outcome else {
        panic!("expected a prepare, got {outcome:?}");
    };
    txns.apply(meta);
    let done = txns.complete(T, 20).expect("prepared");
    txns.apply(done.clone());
    done
}

#[test]
fn a_new_id_gets_a_fresh_producer_and_each_init_bumps_the_epoch() {
    let mut txns = initialised();
    let meta = txns.get(T).unwrap();
    assert_eq!((meta.producer_id, meta.producer_epoch), (pid(1), epoch(0)));
    assert_eq!(meta.state, TxnState::Empty);
    let again = init(&mut txns, None, 99);
    assert_eq!(
        (again.producer_id, again.producer_epoch),
        (pid(1), epoch(1))
    );
    // The producer of epoch 0 is a zombie now.
    assert_eq!(
        txns.add_partitions(T, pid(1), epoch(0), &[tp("a", 0)], 0),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(
        txns.add_partitions(T, pid(2), epoch(1), &[tp("a", 0)], 0),
        Err(TxnError::InvalidProducerIdMapping)
    );
}

#[test]
fn requests_during_a_pending_write_get_concurrent_transactions() {
    let mut txns = initialised();
    let pending = txns
        .add_partitions(T, pid(1), epoch(0), &[tp("a", 0)], 5)
        .unwrap()
        .expect("a change");
    assert_eq!(
        txns.add_partitions(T, pid(1), epoch(0), &[tp("a", 1)], 5),
        Err(TxnError::ConcurrentTransactions)
    );
    assert_eq!(
        txns.init_producer_id(T, 1000, None, pid(7), 5),
        Err(TxnError::ConcurrentTransactions)
    );
    // A failed write leaves the state as it was, and requests proceed.
    txns.abandon(T);
    assert_eq!(txns.get(T).unwrap().state, TxnState::Empty);
    txns.apply(pending);
    assert_eq!(txns.get(T).unwrap().state, TxnState::Ongoing);
    assert_eq!(txns.get(T).unwrap().start_time_ms, Some(5));
}

#[test]
fn timeouts_above_the_maximum_and_empty_ids_are_refused() {
    let mut txns = loaded(TxnConfig::default());
    assert_eq!(
        txns.init_producer_id(T, 900_001, None, pid(1), 0),
        Err(TxnError::InvalidTransactionTimeout {
            timeout_ms: 900_001,
            max_ms: 900_000
        })
    );
    assert!(matches!(
        txns.init_producer_id(T, 0, None, pid(1), 0),
        Err(TxnError::InvalidTransactionTimeout { .. })
    ));
    assert_eq!(
        txns.init_producer_id("", 1000, None, pid(1), 0),
        Err(TxnError::InvalidTransactionalId)
    );
    let long = "x".repeat(ID_BYTES_MAX + 1);
    assert_eq!(
        txns.init_producer_id(&long, 1000, None, pid(1), 0),
        Err(TxnError::InvalidTransactionalId)
    );
    init(&mut txns, None, 1);
    let offsets = tp("__consumer_offsets", 0);
    assert_eq!(
        txns.add_offsets(T, pid(1), epoch(0), &long, &offsets, 0),
        Err(TxnError::InvalidGroupId)
    );
}

#[test]
fn nothing_is_served_while_the_log_loads() {
    let mut txns = Transactions::new(TxnConfig::default());
    assert_eq!(
        txns.init_producer_id(T, 1000, None, pid(1), 0),
        Err(TxnError::CoordinatorLoadInProgress)
    );
    assert_eq!(
        txns.add_partitions(T, pid(1), epoch(0), &[], 0),
        Err(TxnError::CoordinatorLoadInProgress)
    );
}

#[test]
fn a_commit_prepares_completes_and_answers_its_retries() {
    let mut txns = initialised();
    add(&mut txns, 0, &[tp("a", 0), tp("b", 1)], 5);
    // Adding what is already in changes nothing.
    assert_eq!(
        txns.add_partitions(T, pid(1), epoch(0), &[tp("a", 0)], 6),
        Ok(None)
    );
    let outcome = end(&mut txns, 1, 0, TransactionResult::Commit, false).unwrap();
    let EndOutcome::Prepare(prepared) = outcome.clone() else {
        panic!("{outcome:?}")
    };
    assert_eq!(prepared.state, TxnState::PrepareCommit);
    assert_eq!(
        prepared.producer_epoch,
        epoch(0),
        "version 1 keeps the epoch"
    );
    assert_eq!(prepared.partitions.len(), 2);
    txns.apply(prepared);
    // While the markers are written, the transaction is busy.
    assert_eq!(
        end(&mut txns, 1, 0, TransactionResult::Commit, false),
        Err(TxnError::ConcurrentTransactions)
    );
    assert_eq!(
        end(&mut txns, 1, 0, TransactionResult::Abort, false),
        Err(TxnError::InvalidTxnState)
    );
    assert_eq!(
        txns.add_partitions(T, pid(1), epoch(0), &[tp("c", 0)], 7),
        Err(TxnError::ConcurrentTransactions)
    );
    let done = txns.complete(T, 20).unwrap();
    txns.apply(done.clone());
    assert_eq!(done.state, TxnState::CompleteCommit);
    assert!(done.partitions.is_empty());
    assert_eq!(done.start_time_ms, None);
    // A retried commit is answered; an abort of it is not valid.
    assert_eq!(
        end(&mut txns, 1, 0, TransactionResult::Commit, false),
        Ok(EndOutcome::Done(pid(1), epoch(0)))
    );
    assert_eq!(
        end(&mut txns, 1, 0, TransactionResult::Abort, false),
        Err(TxnError::InvalidTxnState)
    );
    // Ending with nothing open is not valid in version 1.
    let mut fresh = initialised();
    assert_eq!(
        end(&mut fresh, 1, 0, TransactionResult::Commit, false),
        Err(TxnError::InvalidTxnState)
    );
    assert_eq!(
        end(&mut fresh, 1, 1, TransactionResult::Commit, false),
        Err(TxnError::ProducerFenced)
    );
}

#[test]
fn init_while_a_transaction_is_open_aborts_it_first_and_fences_the_old_producer() {
    let mut txns = initialised();
    add(&mut txns, 0, &[tp("a", 0)], 5);
    let outcome = txns.init_producer_id(T, 60_000, None, pid(9), 6).unwrap();
    let InitOutcome::AbortFirst(abort) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(abort.state, TxnState::PrepareAbort);
    assert_eq!(
        abort.producer_epoch,
        epoch(1),
        "the abort's markers fence epoch 0"
    );
    assert_eq!(abort.partitions.len(), 1);
    txns.apply(abort);
    assert_eq!(
        txns.init_producer_id(T, 60_000, None, pid(9), 7),
        Err(TxnError::ConcurrentTransactions),
        "the client retries until the abort is complete"
    );
    let done = txns.complete(T, 8).unwrap();
    assert_eq!(done.state, TxnState::CompleteAbort);
    txns.apply(done);
    let meta = init(&mut txns, None, 9);
    assert_eq!((meta.producer_id, meta.producer_epoch), (pid(1), epoch(2)));
    assert_eq!(
        end(&mut txns, 1, 0, TransactionResult::Commit, false),
        Err(TxnError::ProducerFenced)
    );
}

#[test]
fn kip_360_recovery_bumps_retries_and_fences() {
    let mut txns = initialised();
    let current = |e: i16| {
        Some(ExpectedProducer {
            producer_id: pid(1),
            producer_epoch: Some(epoch(e)),
        })
    };
    let meta = init(&mut txns, current(0), 50);
    assert_eq!(meta.producer_epoch, epoch(1));
    assert_eq!(meta.last_producer_epoch, Some(epoch(0)));
    // The answer was lost and the producer asks again with its old epoch.
    let meta = init(&mut txns, current(0), 50);
    assert_eq!(meta.producer_epoch, epoch(1), "a retry does not bump again");
    // An epoch that is neither current nor the last is a zombie.
    txns.apply(meta);
    assert_eq!(
        txns.init_producer_id(T, 60_000, current(5), pid(50), 0),
        Err(TxnError::ProducerFenced)
    );
    let other = Some(ExpectedProducer {
        producer_id: pid(77),
        producer_epoch: Some(epoch(1)),
    });
    assert_eq!(
        txns.init_producer_id(T, 60_000, other, pid(50), 0),
        Err(TxnError::ProducerFenced)
    );
}

#[test]
fn an_exhausted_epoch_moves_the_id_to_a_new_producer() {
    let mut txns = initialised();
    let mut meta = txns.get(T).unwrap().clone();
    meta.producer_epoch = epoch(EPOCH_EXHAUSTED);
    txns.apply(meta);
    let rotated = init(&mut txns, None, 42);
    assert_eq!(
        (rotated.producer_id, rotated.producer_epoch),
        (pid(42), epoch(0))
    );
    assert_eq!(rotated.last_producer_id, Some(pid(1)));
    // A retry naming the old producer gets the same answer, not a fence.
    let retried = init(
        &mut txns,
        Some(ExpectedProducer {
            producer_id: pid(1),
            producer_epoch: Some(epoch(EPOCH_EXHAUSTED)),
        }),
        43,
    );
    assert_eq!(
        (retried.producer_id, retried.producer_epoch),
        (pid(42), epoch(0))
    );
}

#[test]
fn version_1_produce_needs_the_partition_added_first() {
    let mut txns = initialised();
    let a = tp("a", 0);
    assert_eq!(
        txns.check_produce(T, pid(1), epoch(0), &a, false, 1),
        Err(TxnError::InvalidTxnState)
    );
    add(&mut txns, 0, std::slice::from_ref(&a), 1);
    assert_eq!(
        txns.check_produce(T, pid(1), epoch(0), &a, false, 2),
        Ok(None)
    );
    assert_eq!(
        txns.check_produce(T, pid(1), epoch(0), &tp("a", 1), false, 2),
        Err(TxnError::InvalidTxnState)
    );
    // A zombie's produce gets the produce path's code.
    init_with_abort(&mut txns);
    assert_eq!(
        txns.check_produce(T, pid(1), epoch(0), &a, false, 3),
        Err(TxnError::InvalidProducerEpoch)
    );
    assert_eq!(
        txns.check_produce(T, pid(5), epoch(0), &a, false, 3),
        Err(TxnError::InvalidProducerIdMapping)
    );
}

/// InitProducerId over an open transaction: abort it, complete, init again.
fn init_with_abort(txns: &mut Transactions) {
    let InitOutcome::AbortFirst(abort) = txns.init_producer_id(T, 60_000, None, pid(9), 0).unwrap()
    else {
        panic!("expected an abort first")
    };
    txns.apply(abort);
    let done = txns.complete(T, 0).unwrap();
    txns.apply(done);
    init(txns, None, 9);
}

#[test]
fn verify_only_reports_each_partition() {
    let mut txns = initialised();
    add(&mut txns, 0, &[tp("a", 0)], 1);
    assert_eq!(
        txns.verify_partitions(T, pid(1), epoch(0), &[tp("a", 0), tp("a", 1)]),
        Ok(vec![Ok(()), Err(TxnError::InvalidTxnState)])
    );
    assert_eq!(
        txns.verify_partitions(T, pid(1), epoch(3), &[tp("a", 0)]),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(
        txns.verify_partitions("unknown", pid(1), epoch(0), &[tp("a", 0)]),
        Err(TxnError::InvalidProducerIdMapping)
    );
}

#[test]
fn add_offsets_adds_the_offsets_partition_and_the_group() {
    let mut txns = initialised();
    let offsets = tp("__consumer_offsets", 0);
    let meta = txns
        .add_offsets(T, pid(1), epoch(0), "billing", &offsets, 1)
        .unwrap()
        .unwrap();
    assert!(meta.partitions.contains(&offsets));
    assert!(meta.groups.contains("billing"));
    assert_eq!(meta.state, TxnState::Ongoing);
    txns.apply(meta);
    assert_eq!(
        txns.add_offsets(T, pid(1), epoch(0), "billing", &offsets, 2),
        Ok(None)
    );
}

#[test]
fn version_2_produce_adds_its_partition_and_every_end_bumps_the_epoch() {
    let mut txns = initialised();
    let a = tp("a", 0);
    let added = txns
        .check_produce(T, pid(1), epoch(0), &a, true, 1)
        .unwrap()
        .expect("the produce adds the partition");
    assert!(added.version2);
    assert_eq!(added.state, TxnState::Ongoing);
    txns.apply(added);
    assert_eq!(
        txns.check_produce(T, pid(1), epoch(0), &a, true, 2),
        Ok(None)
    );
    let outcome = end(&mut txns, 1, 0, TransactionResult::Commit, true).unwrap();
    let EndOutcome::Prepare(prepared) = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        prepared.producer_epoch,
        epoch(1),
        "markers carry the bumped epoch"
    );
    assert_eq!(prepared.next_producer(), (pid(1), epoch(1)));
    let done = prepare_and_complete(&mut txns, outcome);
    assert_eq!(done.state, TxnState::CompleteCommit);
    // The end's answer was lost: the retry names the epoch before the bump.
    assert_eq!(
        end(&mut txns, 1, 0, TransactionResult::Commit, true),
        Ok(EndOutcome::Done(pid(1), epoch(1)))
    );
    assert_eq!(
        end(&mut txns, 1, 0, TransactionResult::Abort, true),
        Err(TxnError::InvalidTxnState)
    );
    // The old epoch cannot produce into the next transaction.
    assert_eq!(
        txns.check_produce(T, pid(1), epoch(0), &a, true, 3),
        Err(TxnError::InvalidProducerEpoch)
    );
    // An abort with nothing added still bumps the epoch.
    let outcome = end(&mut txns, 1, 1, TransactionResult::Abort, true).unwrap();
    let done = prepare_and_complete(&mut txns, outcome);
    assert_eq!(
        (done.state, done.producer_epoch),
        (TxnState::CompleteAbort, epoch(2))
    );
}

#[test]
fn version_2_end_at_an_exhausted_epoch_moves_to_the_next_producer() {
    let mut txns = initialised();
    let mut meta = txns.get(T).unwrap().clone();
    meta.producer_epoch = epoch(EPOCH_EXHAUSTED);
    txns.apply(meta);
    let a = tp("a", 0);
    let added = txns
        .check_produce(T, pid(1), epoch(EPOCH_EXHAUSTED), &a, true, 1)
        .unwrap()
        .unwrap();
    txns.apply(added);
    assert!(txns.end_needs_fresh_id(T, true));
    let outcome = txns
        .end_txn(
            T,
            pid(1),
            epoch(EPOCH_EXHAUSTED),
            TransactionResult::Commit,
            true,
            Some(pid(8)),
            5,
        )
        .unwrap();
    let EndOutcome::Prepare(prepared) = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(prepared.producer_epoch, epoch(EPOCH_MAX));
    assert_eq!(prepared.next_producer(), (pid(8), epoch(0)));
    let done = prepare_and_complete(&mut txns, outcome);
    assert_eq!((done.producer_id, done.producer_epoch), (pid(8), epoch(0)));
    assert_eq!(
        end(
            &mut txns,
            1,
            EPOCH_EXHAUSTED,
            TransactionResult::Commit,
            true
        ),
        Ok(EndOutcome::Done(pid(8), epoch(0))),
        "a retry naming the old producer is answered with the new one"
    );
}

#[test]
fn open_transactions_time_out_fenced_and_idle_ids_expire() {
    let config = TxnConfig {
        transactional_id_expiration_ms: 1_000,
        ..TxnConfig::default()
    };
    let mut txns = loaded(config);
    let meta = match txns.init_producer_id(T, 100, None, pid(1), 0).unwrap() {
        InitOutcome::Write(m) => m,
        other => panic!("{other:?}"),
    };
    txns.apply(meta);
    add(&mut txns, 0, &[tp("a", 0)], 10);
    assert_eq!(txns.expire(110), Expired::default(), "not yet past 100 ms");
    let expired = txns.expire(111);
    assert_eq!(expired.ids, Vec::<String>::new());
    let [abort] = expired.aborts.as_slice() else {
        panic!("{expired:?}")
    };
    assert_eq!(abort.state, TxnState::PrepareAbort);
    assert_eq!(abort.producer_epoch, epoch(1));
    assert_eq!(
        txns.expire(200),
        Expired::default(),
        "pending ids are skipped"
    );
    txns.apply(abort.clone());
    let done = txns.complete(T, 200).unwrap();
    txns.apply(done);
    // The producer that let it time out is fenced.
    assert_eq!(
        end(&mut txns, 1, 0, TransactionResult::Commit, false),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(txns.expire(1_200), Expired::default());
    let expired = txns.expire(1_201);
    assert_eq!(expired.ids, vec![T.to_string()]);
    txns.remove(T);
    assert!(txns.get(T).is_none());
}

#[test]
fn bounds_refuse_more_ids_partitions_and_groups() {
    let config = TxnConfig {
        transactional_ids_max: 1,
        partitions_per_transaction_max: 2,
        groups_per_transaction_max: 1,
        ..TxnConfig::default()
    };
    let mut txns = loaded(config);
    init(&mut txns, None, 1);
    assert_eq!(
        txns.init_producer_id("other", 1000, None, pid(2), 0),
        Err(TxnError::LimitReached {
            what: "transactional ids",
            limit: 1
        })
    );
    add(&mut txns, 0, &[tp("a", 0), tp("a", 1)], 1);
    assert!(matches!(
        txns.add_partitions(T, pid(1), epoch(0), &[tp("a", 2)], 2),
        Err(TxnError::LimitReached { limit: 2, .. })
    ));
    // A refused request leaves nothing pending.
    assert_eq!(
        txns.add_partitions(T, pid(1), epoch(0), &[tp("a", 1)], 2),
        Ok(None)
    );
    let mut txns = loaded(TxnConfig {
        transaction_entries_max: 1,
        ..TxnConfig::default()
    });
    init(&mut txns, None, 1);
    add(&mut txns, 0, &[tp("a", 0)], 1);
    assert!(matches!(
        txns.add_partitions(T, pid(1), epoch(0), &[tp("a", 1)], 2),
        Err(TxnError::LimitReached { limit: 1, .. })
    ));
}

#[test]
fn states_and_their_codes_round_trip() {
    for s in TxnState::ALL {
        assert_eq!(TxnState::from_code(s.code()), Some(s));
        assert_eq!(TxnState::from_name(s.name()), Some(s));
    }
    assert_eq!(TxnState::from_code(7), None);
    assert_eq!(TxnState::from_name("Nope"), None);
}

#[test]
fn a_version_2_producer_fenced_by_a_timeout_is_told_so() {
    let mut txns = initialised();
    let added = txns
        .check_produce(T, pid(1), epoch(0), &tp("a", 0), true, 0)
        .unwrap()
        .unwrap();
    txns.apply(added);
    let expired = txns.expire(60_001);
    let [abort] = expired.aborts.as_slice() else {
        panic!("{expired:?}")
    };
    txns.apply(abort.clone());
    let done = txns.complete(T, 60_002).unwrap();
    txns.apply(done);
    assert_eq!(
        end(&mut txns, 1, 0, TransactionResult::Commit, true),
        Err(TxnError::ProducerFenced)
    );
}

#[test]
fn offset_commits_need_the_group_or_add_it_with_version_2() {
    let mut txns = initialised();
    let offsets = tp("__consumer_offsets", 0);
    assert_eq!(
        txns.check_offset_commit(T, pid(1), epoch(0), "g", &offsets, false, 1),
        Err(TxnError::InvalidTxnState)
    );
    let added = txns
        .check_offset_commit(T, pid(1), epoch(0), "g", &offsets, true, 1)
        .unwrap()
        .expect("version 2 adds the group");
    assert!(added.groups.contains("g") && added.partitions.contains(&offsets));
    assert!(added.version2);
    txns.apply(added);
    assert_eq!(
        txns.check_offset_commit(T, pid(1), epoch(0), "g", &offsets, false, 2),
        Ok(None)
    );
    assert_eq!(
        txns.check_offset_commit(T, pid(1), epoch(3), "g", &offsets, false, 2),
        Err(TxnError::ProducerFenced)
    );
}

#[test]
fn a_version_2_end_while_the_previous_markers_are_written_is_retried() {
    let mut txns = initialised();
    let added = txns
        .check_produce(T, pid(1), epoch(0), &tp("a", 0), true, 1)
        .unwrap()
        .expect("added");
    txns.apply(added);
    let EndOutcome::Prepare(prepared) =
        end(&mut txns, 1, 0, TransactionResult::Commit, true).unwrap()
    else {
        panic!("a prepare")
    };
    // PrepareCommit is durable; its markers are still being written. The producer
    // already has the bumped epoch and ends its next (empty) transaction.
    txns.apply(prepared);
    for result in [TransactionResult::Abort, TransactionResult::Commit] {
        assert_eq!(
            end(&mut txns, 1, 1, result, true),
            Err(TxnError::ConcurrentTransactions),
            "{result:?}"
        );
    }
    assert_eq!(
        txns.check_produce(T, pid(1), epoch(1), &tp("a", 0), true, 2),
        Err(TxnError::ConcurrentTransactions)
    );
    let done = txns.complete(T, 20).expect("prepared");
    txns.apply(done);
    let outcome = end(&mut txns, 1, 1, TransactionResult::Abort, true).unwrap();
    assert!(matches!(outcome, EndOutcome::Prepare(_)), "{outcome:?}");
}
