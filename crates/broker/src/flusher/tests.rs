//! The broker-wide flusher (`sync_scope = broker` and `syncfs`). Every assertion is on
//! state (high watermarks, failure flags, append results); waits have generous bounds
//! and never decide an outcome by how long something took.

use super::*;
use crate::partition::{DeleteRecordsTo, Partition};
use crate::{Broker, BrokerConfig, BrokerError, FlushPolicy};
use headway_base::{Clock, PartitionIndex};
use headway_log::LogConfig;
use std::collections::BTreeMap;
use std::time::Duration;

/// Generous: tests share two cores with builds.
const DEADLINE: Duration = Duration::from_secs(30);

/// One valid v2 batch holding `records` records with `value` as each value.
fn batch(records: usize, value: &[u8]) -> Vec<u8> {
    fn varint(out: &mut Vec<u8>, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            out.push(z as u8 | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }
    let mut body = Vec::new();
    for i in 0..records {
        let mut r = vec![0u8]; // attributes
        varint(&mut r, 0); // timestamp delta
        varint(&mut r, i as i64); // offset delta
        varint(&mut r, -1); // no key
        varint(&mut r, value.len() as i64);
        r.extend_from_slice(value);
        varint(&mut r, 0); // no headers
        varint(&mut body, r.len() as i64);
        body.extend(r);
    }
    let now = headway_base::now_ms();
    let mut out = Vec::new();
    out.extend(0i64.to_be_bytes()); // base offset
    out.extend(((49 + body.len()) as i32).to_be_bytes()); // batch length
    out.extend(0i32.to_be_bytes()); // leader epoch
    out.push(2); // magic
    out.extend(0u32.to_be_bytes()); // crc, below
    out.extend(0i16.to_be_bytes()); // attributes
    out.extend(((records - 1) as i32).to_be_bytes());
    out.extend(now.to_be_bytes());
    out.extend(now.to_be_bytes());
    out.extend((-1i64).to_be_bytes()); // producer id
    out.extend((-1i16).to_be_bytes()); // producer epoch
    out.extend((-1i32).to_be_bytes()); // base sequence
    out.extend((records as i32).to_be_bytes());
    out.extend(body);
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out
}

const MAX: usize = 1 << 20;

async fn durable(p: &Partition, offset: Offset) -> Result<(), BrokerError> {
    tokio::time::timeout(DEADLINE, p.wait_durable(offset))
        .await
        .expect("the partition neither synced nor failed")
}

async fn broker(dir: &tempfile::TempDir, scope: SyncScope) -> Arc<Broker> {
    Broker::open(BrokerConfig {
        data_dir: dir.path().to_path_buf(),
        sync_scope: scope,
        ..BrokerConfig::default()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_acknowledged_before_the_shared_round_syncs_it() {
    let dir = tempfile::tempdir().unwrap();
    let flusher = SharedFlusher::new(SyncScope::Broker, dir.path(), SyncMeters::default()).unwrap();
    let mut partitions = Vec::new();
    for i in 0..3 {
        let (p, _) = Partition::open(
            dir.path().join(i.to_string()),
            "t".into(),
            PartitionIndex::new(i),
            LogConfig::default(),
            FlushPolicy::Sync,
            Clock::system(),
        )
        .unwrap();
        p.join_shared_flusher(&flusher);
        partitions.push(p);
    }
    let mut ends = Vec::new();
    for p in &partitions {
        ends.push(p.append(&batch(5, b"v"), MAX).unwrap().log_end_offset);
        // Written, queued once, not synced: the watermark (what acks wait for and
        // consumers see) has not moved.
        p.append(&batch(2, b"w"), MAX).unwrap();
        assert!(p.queued.load(Ordering::Acquire));
        assert_eq!(p.high_watermark(), Offset::new(0));
    }
    assert_eq!(flusher.queue.lock().unwrap().len(), 3);
    flusher.start();
    for p in &partitions {
        durable(p, Offset::new(7)).await.unwrap();
        assert_eq!(p.high_watermark(), Offset::new(7));
        assert_eq!(p.high_watermark(), p.log_end_offset().unwrap());
    }
    assert!(ends.iter().all(|e| *e == Offset::new(5)));
    flusher.stop();
}

async fn produce_to_many_partitions_is_acknowledged(scope: SyncScope) {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(&dir, scope).await;
    assert!(broker.shared_flusher().is_some());
    let topic = broker
        .create_topic("many", Some(32), BTreeMap::new())
        .await
        .unwrap();
    // Several rounds' worth: every partition written three times, acks awaited
    // together, as one produce request with many partitions does.
    for round in 1..=3i64 {
        let waits = topic.partitions().iter().map(|p| {
            let end = p.append(&batch(4, b"record"), MAX).unwrap().log_end_offset;
            assert_eq!(end, Offset::new(4 * round));
            async move { durable(p, end).await }
        });
        for outcome in futures::future::join_all(waits).await {
            outcome.unwrap();
        }
    }
    for p in topic.partitions() {
        assert_eq!(p.high_watermark(), Offset::new(12));
    }
    let (rounds, syncs) = broker.sync_counters().snapshot();
    assert!(rounds >= 1 && syncs >= 1);
    broker.shutdown().await;
    // After a restart every acknowledged record is there.
    drop(broker);
    let broker = self::broker(&dir, scope).await;
    let topic = broker.topic("many").unwrap();
    for p in topic.partitions() {
        assert_eq!(p.high_watermark(), Offset::new(12));
    }
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_scope_acknowledges_a_produce_to_many_partitions() {
    produce_to_many_partitions_is_acknowledged(SyncScope::Broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syncfs_scope_acknowledges_a_produce_to_many_partitions() {
    produce_to_many_partitions_is_acknowledged(SyncScope::Syncfs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_sync_poisons_its_partition_and_not_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(&dir, SyncScope::Broker).await;
    let good = broker
        .create_topic("good", Some(4), BTreeMap::new())
        .await
        .unwrap();
    let bad = broker
        .create_topic("bad", Some(1), BTreeMap::new())
        .await
        .unwrap();
    broker.shared_flusher().unwrap().fail_syncs_of("bad");
    let bad_p = &bad.partitions()[0];
    let bad_end = bad_p
        .append(&batch(3, b"lost"), MAX)
        .unwrap()
        .log_end_offset;
    let mut good_ends = Vec::new();
    for p in good.partitions() {
        good_ends.push(p.append(&batch(3, b"kept"), MAX).unwrap().log_end_offset);
    }
    assert!(durable(bad_p, bad_end).await.is_err());
    for (p, end) in good.partitions().iter().zip(&good_ends) {
        durable(p, *end).await.unwrap();
    }
    // Poisoned: nothing above the synced offset was acknowledged, no retry, and no
    // more writes.
    assert_eq!(bad_p.high_watermark(), Offset::new(0));
    assert!(bad_p.watch().borrow().failed);
    assert!(bad_p.health().offline, "the failure shows on /metrics");
    assert!(matches!(
        bad_p.append(&batch(1, b"more"), MAX),
        Err(BrokerError::Storage(_))
    ));
    // The others keep acknowledging in later rounds.
    for p in good.partitions() {
        let end = p.append(&batch(2, b"again"), MAX).unwrap().log_end_offset;
        durable(p, end).await.unwrap();
        assert_eq!(p.high_watermark(), Offset::new(5));
        assert!(!p.watch().borrow().failed);
        assert!(!p.health().offline);
    }
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_scope_keeps_one_flusher_per_partition() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(&dir, SyncScope::Partition).await;
    assert!(broker.shared_flusher().is_none());
    let topic = broker
        .create_topic("own", Some(3), BTreeMap::new())
        .await
        .unwrap();
    for p in topic.partitions() {
        let end = p.append(&batch(2, b"x"), MAX).unwrap().log_end_offset;
        durable(p, end).await.unwrap();
        assert!(p.shared.get().is_none());
        assert!(!p.queued.load(Ordering::Acquire));
    }
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_added_later_join_the_shared_flusher() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(&dir, SyncScope::Broker).await;
    broker
        .create_topic("grow", Some(1), BTreeMap::new())
        .await
        .unwrap();
    broker.add_partitions("grow", 3, false).await.unwrap();
    let topic = broker.topic("grow").unwrap();
    for p in topic.partitions() {
        assert!(p.shared.get().is_some());
        let end = p.append(&batch(1, b"y"), MAX).unwrap().log_end_offset;
        durable(p, end).await.unwrap();
    }
    broker.shutdown().await;
}

/// A partition of its own in `dir`, with no flusher started.
fn lone_partition(dir: &tempfile::TempDir, flush: FlushPolicy) -> Arc<Partition> {
    let (p, _) = Partition::open(
        dir.path().join("0"),
        "t".into(),
        PartitionIndex::new(0),
        LogConfig::default(),
        flush,
        Clock::system(),
    )
    .unwrap();
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_past_its_unsynced_bound_holds_its_producer_until_a_sync_takes_the_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let p = lone_partition(&dir, FlushPolicy::Sync);
    let one = batch(10, &[7u8; 50]);
    p.bound_unsynced(one.len() as u64 + 1);
    // The flusher is not running yet: appends pile up unsynced.
    p.append(&one, MAX).unwrap();
    assert_eq!(p.unsynced_bytes(), one.len() as u64);
    assert!(!p.over_unsynced_bound());
    let end = p.append(&one, MAX).unwrap().log_end_offset;
    assert_eq!(p.unsynced_bytes(), 2 * one.len() as u64);
    assert!(p.over_unsynced_bound());
    let mut held = Box::pin(p.wait_unsynced_within_bound());
    assert!(
        futures::poll!(held.as_mut()).is_pending(),
        "nothing synced: the producer waits"
    );
    p.start_flusher();
    tokio::time::timeout(DEADLINE, held)
        .await
        .expect("the sync took the bytes and released the producer");
    assert!(!p.over_unsynced_bound());
    durable(&p, end).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_round_takes_a_partitions_unsynced_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let p = lone_partition(&dir, FlushPolicy::Sync);
    let one = batch(10, &[7u8; 50]);
    p.bound_unsynced(one.len() as u64 + 1);
    p.append(&one, MAX).unwrap();
    p.append(&one, MAX).unwrap();
    assert!(p.over_unsynced_bound());
    // What a shared flusher's round does (the partition has no flusher of its own).
    let set = p.take_sync_set().into_set().expect("unsynced appends");
    assert_eq!(set.bytes, 2 * one.len() as u64);
    assert_eq!(p.unsynced_bytes(), 0);
    assert!(!p.over_unsynced_bound());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_bound_nothing_holds_producers() {
    let dir = tempfile::tempdir().unwrap();
    let p = lone_partition(&dir, FlushPolicy::Interval(Duration::from_secs(3600)));
    p.bound_unsynced(1);
    for _ in 0..3 {
        p.append(&batch(10, b"v"), MAX).unwrap();
    }
    assert!(p.unsynced_bytes() > 1);
    assert!(
        !p.over_unsynced_bound(),
        "the bound applies to flush = sync only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_broker_counts_its_own_syncs() {
    for scope in [SyncScope::Partition, SyncScope::Broker] {
        let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (a, b) = (broker(&dir_a, scope).await, broker(&dir_b, scope).await);
        let topic = a
            .create_topic("counted", Some(2), BTreeMap::new())
            .await
            .unwrap();
        for p in topic.partitions() {
            let end = p.append(&batch(3, b"c"), MAX).unwrap().log_end_offset;
            durable(p, end).await.unwrap();
        }
        let (rounds, syncs) = a.sync_counters().snapshot();
        assert!(
            rounds >= 1 && syncs >= rounds,
            "{scope}: {rounds} rounds, {syncs} syncs"
        );
        assert_eq!(
            b.sync_counters().snapshot(),
            (0, 0),
            "{scope}: another broker's"
        );
        a.shutdown().await;
        b.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_at_once_leave_the_largest_start_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let p = lone_partition(&dir, FlushPolicy::Sync);
    p.start_flusher();
    let end = p.append(&batch(200, b"v"), MAX).unwrap().log_end_offset;
    durable(&p, end).await.unwrap();
    // Calls on threads of their own, in every order: the side file must end with the
    // largest start, which is what the partition serves.
    for round in 0..20i64 {
        let targets: Vec<i64> = (0..8)
            .map(|i| 1 + round * 9 + (i * 5 + round) % 9)
            .collect();
        let calls: Vec<_> = targets
            .iter()
            .map(|&t| {
                let p = Arc::clone(&p);
                std::thread::spawn(move || {
                    let to = DeleteRecordsTo::Offset(Offset::new(t));
                    p.delete_records(to).unwrap()
                })
            })
            .collect();
        for call in calls {
            call.join().unwrap();
        }
        let largest = *targets.iter().max().unwrap();
        assert_eq!(p.log_start_offset(), Offset::new(largest), "round {round}");
        // The side file holds the start as a big-endian i64.
        let stored = std::fs::read(dir.path().join("0").join("log-start-offset"));
        let stored = i64::from_be_bytes(stored.expect("the side file")[..8].try_into().unwrap());
        assert_eq!(stored, largest, "round {round}");
    }
    p.close().unwrap();
}
