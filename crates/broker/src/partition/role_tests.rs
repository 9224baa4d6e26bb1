//! A leader and its followers, as partitions on disk in one process: the leader's
//! answers to follower fetches are handed to the followers as the replica fetcher
//! hands them over the network.
//! Goal: show that a leader acknowledges only what every in-sync replica synced, that
//! followers hold the leader's batches byte for byte with its epochs, producers and
//! transactions, that a deposed leader's divergent tail is cut and replaced, and that the
//! ISR and `min.insync.replicas` decide what acks=all answers. Method: real logs with
//! their own flushers (`flush = sync`), waiting on the partitions' watches with timeouts.

use super::role::{ReplicaFetch, ReplicaRead, Role};
use super::txn_tests::{encoded, plain_batch};
use super::*;
use crate::io::bulk_budget::BulkBudget;
use crate::io::read_pool::{ReadPool, ReadVia};
use headway_log::batch::validate_all;
use std::path::Path;
use std::time::Duration;

const MAX: usize = 1 << 20;
const PATIENCE: Duration = Duration::from_secs(30);
const LAG_MAX_MS: i64 = 10_000;

fn open(dir: &Path) -> Arc<Partition> {
    open_with(dir, LogConfig::default()).0
}

fn open_with(dir: &Path, config: LogConfig) -> (Arc<Partition>, RecoveryReport) {
    let (partition, report) = Partition::open(
        dir.to_path_buf(),
        "t".into(),
        PartitionIndex::new(0),
        config,
        FlushPolicy::Sync,
        Clock::system(),
    )
    .unwrap();
    partition.start_flusher();
    (partition, report)
}

pub(super) fn via() -> ReadVia {
    let budget = crate::BrokerConfig::default().bulk_budget();
    ReadVia {
        pool: ReadPool::new(
            1,
            crate::io::priority::BulkPriority::UNCHANGED,
            Arc::new(BulkBudget::new(budget, Arc::default())),
        ),
        cache_first: true,
        tail_bytes: u64::MAX,
    }
}

fn leader(epoch: i32, replicas: &[i32], isr: &[i32]) -> Role {
    Role::Leader {
        epoch,
        partition_epoch: 0,
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
    }
}

fn follower(epoch: i32, of: i32) -> Role {
    Role::Follower {
        epoch,
        partition_epoch: 0,
        leader: Some(of),
    }
}

fn now() -> i64 {
    Clock::system().time_ms()
}

async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// One fetch of `replica` (partition `f`) from `l`, handed back as the fetcher would:
/// appended, or cut on a divergence. Waits for the follower's own sync first, as a
/// follower fetches only from a synced end. Answers whether records or a cut came back.
async fn replicate_once(l: &Partition, f: &Partition, replica: i32) -> bool {
    within("the follower's sync", f.wait_synced_to_end())
        .await
        .unwrap();
    let position = f.fetch_position().unwrap();
    assert!(position.synced);
    let fetch = ReplicaFetch {
        replica,
        fetch_offset: position.offset,
        current_leader_epoch: Some(position.leader_epoch),
        last_fetched_epoch: position.last_fetched_epoch,
        max_bytes: MAX,
    };
    match l.read_for_replica(&fetch, &via(), now()).await.unwrap() {
        ReplicaRead::Records(read) => {
            let had = !read.records.is_empty();
            f.append_as_follower(&read.records, read.high_watermark, position.leader_epoch)
                .unwrap();
            had
        }
        ReplicaRead::Diverging {
            epoch, end_offset, ..
        } => {
            f.truncate_diverging(position.leader_epoch, epoch, end_offset)
                .unwrap();
            true
        }
    }
}

/// Fetches until a round brings nothing and the follower has taken in the leader's
/// high watermark.
async fn catch_up(l: &Partition, f: &Partition, replica: i32) {
    for _ in 0..100 {
        if !replicate_once(l, f, replica).await && f.high_watermark() == l.high_watermark() {
            return;
        }
    }
    panic!("the follower did not catch up in 100 rounds");
}

async fn all_records(p: &Partition) -> Bytes {
    p.read(p.log_start_offset(), 64 << 20)
        .await
        .unwrap()
        .records
}

fn epochs_of(records: &[u8]) -> Vec<i32> {
    batch::BatchIter::new(records)
        .map(|(h, _)| h.partition_leader_epoch)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_acknowledges_only_what_every_in_sync_replica_synced() {
    let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (l, f) = (open(ld.path()), open(fd.path()));
    l.set_role(1, leader(1, &[1, 2], &[1, 2]), now()).unwrap();
    f.set_role(2, follower(1, 1), now()).unwrap();
    for _ in 0..3 {
        l.append(validate_all(&plain_batch()), MAX).unwrap();
    }
    let end = Offset::new(3);
    within("the leader's sync", l.wait_synced_here(end))
        .await
        .unwrap();
    assert_eq!(
        l.high_watermark(),
        Offset::ZERO,
        "synced on the leader, not yet on the follower: nothing is acknowledged"
    );
    let acked = {
        let l = Arc::clone(&l);
        tokio::spawn(async move { l.wait_replicated(end, 2, 1).await })
    };
    catch_up(&l, &f, 2).await;
    within("acks=all", acked).await.unwrap().unwrap();
    assert_eq!(l.high_watermark(), end);
    assert_eq!(f.high_watermark(), end, "the follower learnt the leader's");
    let (lr, fr) = (all_records(&l).await, all_records(&f).await);
    assert_eq!(
        lr, fr,
        "the follower holds the leader's batches byte for byte"
    );
    assert_eq!(
        epochs_of(&lr),
        vec![1, 1, 1],
        "each batch carries the leader's epoch"
    );
    assert_eq!(f.end_offset_for_epoch(1).unwrap(), (1, 3));

    // Clients are sent to the leader.
    let refused = f.append(validate_all(&plain_batch()), MAX).unwrap_err();
    assert!(
        matches!(
            refused,
            BrokerError::NotLeaderOrFollower {
                leader: Some(1),
                ..
            }
        ),
        "{refused:?}"
    );
    let refused = f
        .read_via(Offset::ZERO, MAX, &via(), Isolation::ReadUncommitted)
        .await
        .unwrap_err();
    assert!(matches!(refused, BrokerError::NotLeaderOrFollower { .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_divergent_tail_is_cut_and_replaced() {
    let (ad, bd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (open(ad.path()), open(bd.path()));
    a.set_role(1, leader(1, &[1, 2], &[1, 2]), now()).unwrap();
    b.set_role(2, follower(1, 1), now()).unwrap();
    for _ in 0..2 {
        a.append(validate_all(&plain_batch()), MAX).unwrap();
    }
    // The leader's own sync first: until it is done the high watermark stays behind
    // even once the follower holds both batches, and the catch-up may stop there.
    within("the leader's sync", a.wait_synced_here(Offset::new(2)))
        .await
        .unwrap();
    catch_up(&a, &b, 2).await;
    assert_eq!(a.high_watermark(), Offset::new(2));
    // Two more on the leader, which no one copies before it is deposed.
    for _ in 0..2 {
        a.append(validate_all(&plain_batch()), MAX).unwrap();
    }
    within("the old leader's sync", a.wait_synced_here(Offset::new(4)))
        .await
        .unwrap();
    let waiting = {
        let a = Arc::clone(&a);
        tokio::spawn(async move { a.wait_acknowledged(Offset::new(4), true, 1, 1).await })
    };
    b.set_role(2, leader(2, &[1, 2], &[1, 2]), now()).unwrap();
    a.set_role(1, follower(2, 2), now()).unwrap();
    let deposed = within("the deposed leader's answer", waiting)
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(
            deposed,
            BrokerError::NotLeaderOrFollower {
                leader: Some(2),
                ..
            }
        ),
        "a write waiting on a deposed leader is never acknowledged: {deposed:?}"
    );
    b.append(validate_all(&plain_batch()), MAX).unwrap();
    let position = a.fetch_position().unwrap();
    assert_eq!(
        (position.offset, position.last_fetched_epoch),
        (Offset::new(4), Some(1))
    );
    catch_up(&b, &a, 1).await;
    let (ar, br) = (all_records(&a).await, all_records(&b).await);
    assert_eq!(
        ar, br,
        "the divergent tail was replaced by the new leader's batches"
    );
    assert_eq!(epochs_of(&br), vec![1, 1, 2]);
    assert_eq!(a.log_end_offset().unwrap(), Offset::new(3));
    assert_eq!(a.end_offset_for_epoch(1).unwrap(), (1, 2));
    assert_eq!(b.high_watermark(), Offset::new(3));

    // The cut and the history survive a restart.
    a.close().unwrap();
    let reopened = open(ad.path());
    assert_eq!(reopened.log_end_offset().unwrap(), Offset::new(3));
    assert_eq!(reopened.end_offset_for_epoch(1).unwrap(), (1, 2));
    assert_eq!(all_records(&reopened).await, br);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_stops_leaves_the_isr_and_min_insync_decides_acks_all() {
    let dir = tempfile::tempdir().unwrap();
    let l = open(dir.path());
    let start = now();
    l.set_role(1, leader(1, &[1, 2], &[1, 2]), start).unwrap();
    l.append(validate_all(&plain_batch()), MAX).unwrap();
    within("the leader's sync", l.wait_synced_here(Offset::new(1)))
        .await
        .unwrap();
    assert_eq!(
        l.isr_proposal(start + LAG_MAX_MS, LAG_MAX_MS),
        None,
        "not yet lagging"
    );
    let proposal = l
        .isr_proposal(start + LAG_MAX_MS + 1, LAG_MAX_MS)
        .expect("a follower silent for longer than the lag bound leaves");
    assert_eq!((proposal.leader_epoch, proposal.isr.clone()), (1, vec![1]));
    assert_eq!(
        l.isr_proposal(start + LAG_MAX_MS + 2, LAG_MAX_MS),
        None,
        "one at a time"
    );
    l.isr_refused();
    assert!(l.isr_proposal(start + LAG_MAX_MS + 3, LAG_MAX_MS).is_some());
    assert_eq!(
        l.high_watermark(),
        Offset::ZERO,
        "the silent follower still counts"
    );
    // The controller's metadata shows the smaller ISR: acks=all no longer waits for it.
    l.set_role(1, leader(1, &[1, 2], &[1]), now()).unwrap();
    assert_eq!(l.high_watermark(), Offset::new(1));
    assert_eq!(l.in_sync_replicas(), Some(1));
    within(
        "acks=all with min.insync.replicas=1",
        l.wait_replicated(Offset::new(1), 1, 1),
    )
    .await
    .unwrap();
    let after = within(
        "acks=all with min.insync.replicas=2",
        l.wait_replicated(Offset::new(1), 2, 1),
    )
    .await
    .unwrap_err();
    assert!(matches!(
        after,
        BrokerError::NotEnoughReplicasAfterAppend {
            in_sync: 1,
            required: 2
        }
    ));
    assert!(matches!(
        l.require_in_sync(2).unwrap_err(),
        BrokerError::NotEnoughReplicas {
            in_sync: 1,
            required: 2
        }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetches_from_other_epochs_are_refused_and_stale_roles_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let l = open(dir.path());
    l.set_role(1, leader(3, &[1, 2], &[1, 2]), now()).unwrap();
    let fetch = |epoch| ReplicaFetch {
        replica: 2,
        fetch_offset: Offset::ZERO,
        current_leader_epoch: Some(epoch),
        last_fetched_epoch: None,
        max_bytes: MAX,
    };
    let old = l
        .read_for_replica(&fetch(2), &via(), now())
        .await
        .unwrap_err();
    assert!(matches!(
        old,
        BrokerError::FencedLeaderEpoch {
            given: 2,
            current: 3
        }
    ));
    let new = l
        .read_for_replica(&fetch(4), &via(), now())
        .await
        .unwrap_err();
    assert!(matches!(
        new,
        BrokerError::UnknownLeaderEpoch {
            given: 4,
            current: 3
        }
    ));
    l.set_role(1, follower(2, 2), now()).unwrap();
    assert_eq!(
        l.role_epoch(),
        Some((3, true)),
        "an older epoch's role changes nothing"
    );
    l.append(validate_all(&plain_batch()), MAX).unwrap();
    let records = all_records(&l).await;
    assert!(
        records.is_empty(),
        "not acknowledged: the follower has not fetched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_takes_in_the_leaders_producers_and_answers_their_retries_as_leader() {
    let (ad, bd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (open(ad.path()), open(bd.path()));
    a.set_role(1, leader(1, &[1, 2], &[1, 2]), now()).unwrap();
    b.set_role(2, follower(1, 1), now()).unwrap();
    let idempotent = encoded(false, 7, 0, 0, 2);
    let first = a.append(validate_all(&idempotent), MAX).unwrap();
    let transactional = encoded(true, 8, 0, 0, 1);
    a.append(validate_all(&transactional), MAX).unwrap();
    catch_up(&a, &b, 2).await;
    assert_eq!(
        b.last_stable_offset(),
        Offset::new(2),
        "the follower sees the leader's open transaction"
    );
    b.set_role(2, leader(2, &[1, 2], &[2]), now()).unwrap();
    let retry = b.append(validate_all(&idempotent), MAX).unwrap();
    assert_eq!(
        retry.base_offset, first.base_offset,
        "the new leader knows the producer's batch from the old one"
    );
    assert_eq!(
        b.log_end_offset().unwrap(),
        Offset::new(3),
        "and did not append it again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hole_recovery_left_in_a_sealed_segment_is_cut_before_the_first_role() {
    let dir = tempfile::tempdir().unwrap();
    // Every batch in a segment of its own.
    let open_small = || {
        let config = LogConfig {
            segment_bytes_max: 1,
            ..LogConfig::default()
        };
        open_with(dir.path(), config)
    };
    let (p, _) = open_small();
    for _ in 0..3 {
        p.append(validate_all(&plain_batch()), MAX).unwrap();
    }
    within("the appends' sync", p.wait_synced_here(Offset::new(3)))
        .await
        .unwrap();
    p.close().unwrap();
    drop(p);
    // The first segment's batch is damaged, and the segment marked for repair (as a
    // read that found it does): the next open cuts it and keeps the segments after it.
    let segment = dir.path().join(format!("{:020}.log", 0));
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[40] ^= 0x01;
    std::fs::write(&segment, &bytes).unwrap();
    std::fs::write(dir.path().join(format!("{:020}.repair", 0)), b"").unwrap();
    let (p, report) = open_small();
    assert_eq!(report.hole_at, Some(Offset::ZERO));
    assert_eq!(p.log_end_offset().unwrap(), Offset::new(3));
    // As a follower it holds nothing past the hole, so it fetches the rest again.
    p.set_role(2, follower(1, 1), now()).unwrap();
    assert_eq!(p.log_end_offset().unwrap(), Offset::ZERO);
    assert_eq!(p.fetch_position().unwrap().offset, Offset::ZERO);
}

/// One follower fetch of at most one batch (`max_bytes` 1), appended as the fetcher
/// would. Answers the follower's log end after it.
async fn fetch_one_batch(l: &Partition, f: &Partition, replica: i32) -> Offset {
    within("the follower's sync", f.wait_synced_to_end())
        .await
        .unwrap();
    let position = f.fetch_position().unwrap();
    let fetch = ReplicaFetch {
        replica,
        fetch_offset: position.offset,
        current_leader_epoch: Some(position.leader_epoch),
        last_fetched_epoch: position.last_fetched_epoch,
        max_bytes: 1,
    };
    let ReplicaRead::Records(read) = l.read_for_replica(&fetch, &via(), now()).await.unwrap()
    else {
        panic!("no divergence here");
    };
    f.append_as_follower(&read.records, read.high_watermark, position.leader_epoch)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_leader_keeps_a_transaction_unstable_until_its_marker_is_replicated() {
    let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    {
        // Before the restart: a transaction (0..2) and its commit marker (2), synced here.
        let l = open(ld.path());
        l.append(validate_all(&encoded(true, 7, 0, 0, 2)), MAX)
            .unwrap();
        let marker = l
            .write_marker(
                ProducerId::new(7),
                ProducerEpoch::new(0),
                TransactionResult::Commit,
                0,
            )
            .unwrap();
        assert_eq!(marker, Offset::new(2));
        within("the sync", l.wait_synced_here(Offset::new(3)))
            .await
            .unwrap();
        l.close().unwrap();
    }
    let l = open(ld.path());
    let f = open(fd.path());
    l.set_role(1, leader(1, &[1, 2], &[1, 2]), now()).unwrap();
    f.set_role(2, follower(1, 1), now()).unwrap();
    assert_eq!(fetch_one_batch(&l, &f, 2).await, Offset::new(2), "the data");
    // This fetch tells the leader the follower holds the data, not the marker: the
    // high watermark stands between them.
    assert_eq!(
        fetch_one_batch(&l, &f, 2).await,
        Offset::new(3),
        "the marker"
    );
    let mut watch = l.watch();
    within(
        "the high watermark at 2",
        watch.wait_for(|s| s.high_watermark == Offset::new(2)),
    )
    .await
    .unwrap();
    assert_eq!(
        l.last_stable_offset(),
        Offset::ZERO,
        "the marker is not replicated: the transaction's outcome is not durable"
    );
    fetch_one_batch(&l, &f, 2).await;
    within(
        "the high watermark at 3",
        watch.wait_for(|s| s.high_watermark == Offset::new(3)),
    )
    .await
    .unwrap();
    assert_eq!(l.last_stable_offset(), Offset::new(3));
}
