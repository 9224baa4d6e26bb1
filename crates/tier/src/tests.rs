//! Goal: what the uploader copies is what a remote read gives back. A real log on disk
//! (small segments) has its sealed segments uploaded to a bucket in memory, listed back,
//! and read from every offset: the batches are the local log's, byte for byte; an
//! upload cut before its commit is an orphan, not a segment; a commit whose file is
//! missing, or that cannot be read, does not count.

use crate::retention::Limits;
use crate::store::RemoteStore;
use crate::{IndexCache, Tier};
use bytes::Bytes;
use headway_base::Offset;
use headway_broker::partition::role::Role;
use headway_broker::Isolation;
use headway_log::batch::{validate_all, BatchIter};
use headway_log::{Log, LogConfig};
use object_store::path::Path;
use object_store::ObjectStoreExt;

/// One batch of one record at `offset` with a value of `value_bytes`.
pub(crate) fn batch(offset: i64, value_bytes: usize) -> Vec<u8> {
    let record = kafka_protocol::records::Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: kafka_protocol::records::TimestampType::Creation,
        offset,
        sequence: -1,
        timestamp: 1_700_000_000_000,
        key: None,
        value: Some(Bytes::from(vec![b'v'; value_bytes])),
        headers: Default::default(),
    };
    let mut out = bytes::BytesMut::new();
    kafka_protocol::records::RecordBatchEncoder::encode(
        &mut out,
        [&record],
        &kafka_protocol::records::RecordEncodeOptions {
            version: 2,
            compression: kafka_protocol::records::Compression::None,
        },
    )
    .unwrap();
    out.to_vec()
}

/// A log of `count` one-record batches of growing sizes in segments of about 4 KiB.
fn log_with(dir: &std::path::Path, count: usize) -> Log {
    let config = LogConfig {
        segment_bytes_max: 4096,
        index_interval_bytes: 512,
        ..LogConfig::default()
    };
    let (mut log, _) = Log::open(dir, config, 0).unwrap();
    for i in 0..count {
        let bytes = batch(0, 50 + (i * 37) % 900);
        let mut validated = validate_all(&bytes).unwrap().into_owned();
        log.append(&mut validated, 0).unwrap();
    }
    log
}

fn base_offsets(batches: &[u8]) -> Vec<i64> {
    BatchIter::new(batches)
        .map(|(h, _)| h.base_offset)
        .collect()
}

#[tokio::test]
async fn every_offset_of_an_uploaded_segment_reads_back_the_local_batches() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_with(dir.path(), 200);
    let sealed = log.sealed_segments(Offset::new(i64::MAX));
    assert!(sealed.len() >= 5, "{} sealed segments", sealed.len());
    let store = RemoteStore::in_memory();
    let at = store.partition_dir("t", uuid::Uuid::nil(), 0);
    for s in &sealed {
        store
            .upload(&at, s, 3, 0, None)
            .await
            .unwrap()
            .expect("the files are there");
    }
    let listing = store.list(&at).await.unwrap();
    assert!(listing.orphans.is_empty());
    assert_eq!(listing.segments.len(), sealed.len());
    let indexes = IndexCache::new(1 << 20);
    for s in &sealed {
        let remote = &listing.segments[&s.base_offset.value()];
        assert_eq!(remote.end_offset, s.end_offset.value());
        assert_eq!(remote.leader_epoch, 3);
        for offset in s.base_offset.value()..s.end_offset.value() {
            for max_bytes in [1, 700, 1 << 20] {
                let got = store
                    .read_batches(&at, remote, offset, max_bytes, &indexes)
                    .await
                    .unwrap();
                let local = log.locate(Offset::new(offset)).unwrap();
                let want = local.read(max_bytes, s.end_offset).unwrap();
                let got_offsets = base_offsets(&got);
                assert_eq!(got_offsets.first(), Some(&offset), "one-record batches");
                assert!(got.len() <= max_bytes || got_offsets.len() == 1);
                assert_eq!(got, want, "offset {offset}, max {max_bytes}");
            }
        }
        let past = store
            .read_batches(&at, remote, s.end_offset.value(), 1 << 20, &indexes)
            .await
            .unwrap();
        assert!(past.is_empty());
    }
    assert_eq!(
        indexes.held().0,
        sealed.len(),
        "each index read once and kept"
    );
}

#[tokio::test]
async fn a_cut_upload_is_an_orphan_and_a_commit_without_its_files_does_not_count() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_with(dir.path(), 60);
    let sealed = log.sealed_segments(Offset::new(i64::MAX));
    let store = RemoteStore::in_memory();
    let at = store.partition_dir("t", uuid::Uuid::nil(), 0);
    let kept = store
        .upload(&at, &sealed[0], -1, 0, None)
        .await
        .unwrap()
        .unwrap();
    let broken = store
        .upload(&at, &sealed[1], -1, 0, None)
        .await
        .unwrap()
        .unwrap();
    // An upload cut before its commit: a file and no commit.
    let cut = Path::from(format!(
        "{at}/{:020}-{}.log",
        sealed[2].base_offset.value(),
        "c".repeat(32)
    ));
    store
        .raw()
        .put(&cut, Bytes::from_static(b"partial").into())
        .await
        .unwrap();
    // A commit whose log file went.
    let gone = Path::from(format!("{at}/{}.log", broken.stem()));
    store.raw().delete(&gone).await.unwrap();
    // A commit object that is not a commit: its upload's objects are orphans.
    let garbled = store
        .upload(&at, &sealed[3], -1, 0, None)
        .await
        .unwrap()
        .unwrap();
    let garbled_commit = Path::from(format!("{at}/{}.segment", garbled.stem()));
    store
        .raw()
        .put(&garbled_commit, Bytes::from_static(b"{not json").into())
        .await
        .unwrap();
    let listing = store.list(&at).await.unwrap();
    assert_eq!(
        listing.segments.keys().copied().collect::<Vec<_>>(),
        vec![kept.base_offset]
    );
    assert!(listing.orphans.contains(&cut));
    let broken_commit = Path::from(format!("{at}/{}.segment", broken.stem()));
    assert!(listing.orphans.contains(&broken_commit));
    assert!(listing.orphans.contains(&garbled_commit));
    // Deleting a segment takes its commit first, then its files: nothing is left.
    for orphan in &listing.orphans {
        store.delete_object(orphan).await.unwrap();
    }
    store.delete(&at, &kept).await.unwrap();
    let listing = store.list(&at).await.unwrap();
    assert!(listing.segments.is_empty() && listing.orphans.is_empty());
}

/// A partition of small segments, with its own flusher (`flush = sync`).
fn partition(dir: &std::path::Path) -> std::sync::Arc<headway_broker::Partition> {
    let config = LogConfig {
        segment_bytes_max: 4096,
        ..LogConfig::default()
    };
    let (p, _) = headway_broker::Partition::open(
        dir.to_path_buf(),
        "t".into(),
        headway_base::PartitionIndex::new(0),
        config,
        headway_broker::FlushPolicy::Sync,
        headway_base::Clock::system(),
    )
    .unwrap();
    p.start_flusher();
    p
}

fn leader(epoch: i32, replicas: &[i32], isr: &[i32]) -> Role {
    Role::Leader {
        epoch,
        partition_epoch: 0,
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_whose_log_starts_later_takes_the_buckets_start() {
    let now = || headway_base::Clock::system().time_ms();
    let topic_id = uuid::Uuid::new_v4();
    let limits = Limits {
        retention_ms: -1,
        retention_bytes: -1,
        local_retention_ms: -2,
        local_retention_bytes: 0,
    };
    let tier = Tier::new(RemoteStore::in_memory());

    // Leader 1 at epoch 1 uploads its sealed segments and deletes their local copies.
    let a_dir = tempfile::tempdir().unwrap();
    let a = partition(a_dir.path());
    a.set_role(1, leader(1, &[1], &[1]), now()).unwrap();
    let mut end = Offset::ZERO;
    for _ in 0..40 {
        let bytes = batch(0, 300);
        end = a
            .append(validate_all(&bytes), 1 << 20)
            .unwrap()
            .log_end_offset;
    }
    a.wait_durable(end).await.unwrap();
    assert!(tier
        .partition_round(topic_id, &a, &limits, None)
        .await
        .is_ok());
    let local_start = a.local_log().unwrap().start_offset;
    assert!(local_start > Offset::ZERO, "local copies deleted");
    assert_eq!(a.log_start_offset(), Offset::ZERO);

    // Broker 2 copied the log from leader 1's local log: it started over there. Made
    // leader at epoch 2, its first round lists the bucket and takes the bucket's start.
    let b_dir = tempfile::tempdir().unwrap();
    let b = partition(b_dir.path());
    let follower = Role::Follower {
        epoch: 1,
        partition_epoch: 0,
        leader: Some(1),
    };
    b.set_role(2, follower, now()).unwrap();
    b.start_over_at(1, local_start).unwrap();
    b.set_role(2, leader(2, &[1, 2], &[2]), now()).unwrap();
    assert_eq!(b.log_start_offset(), local_start);
    assert!(tier
        .partition_round(topic_id, &b, &limits, None)
        .await
        .is_ok());
    assert_eq!(
        b.log_start_offset(),
        Offset::ZERO,
        "the bucket's start taken"
    );
    let budget = headway_broker::io::bulk_budget::BulkBudget::new(
        headway_broker::BrokerConfig::default().bulk_budget(),
        std::sync::Arc::default(),
    );
    let read = tier
        .read(
            topic_id,
            &b,
            Offset::ZERO,
            1 << 20,
            Isolation::ReadUncommitted,
            &budget,
        )
        .await
        .unwrap();
    assert_eq!(base_offsets(&read.records).first(), Some(&0));
    assert_eq!(read.log_start_offset, Offset::ZERO);

    // The start survives a restart.
    drop(b);
    let b = partition(b_dir.path());
    assert_eq!(b.log_start_offset(), Offset::ZERO);
    assert_eq!(b.local_log().unwrap().start_offset, local_start);
}

#[tokio::test]
async fn uploads_wait_for_the_bulk_budget_and_are_charged_to_it() {
    use headway_broker::io::bulk_budget::{BudgetConfig, BulkBudget};
    use headway_broker::io::timings::Timings;
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let log = log_with(dir.path(), 200);
    let sealed = log.sealed_segments(Offset::new(i64::MAX));
    // 8 KiB a second, and four segments of about 4 KiB each: the reads must wait.
    let rate = 8.0 * 1024.0;
    let budget = BulkBudget::new(
        BudgetConfig {
            min_bytes_per_sec: rate,
            max_bytes_per_sec: rate,
            read_max_bytes_per_sec: rate,
            target: Duration::from_millis(10),
            interval: Duration::from_millis(100),
            read_sync_wait: Duration::ZERO,
        },
        std::sync::Arc::new(Timings::new()),
    );
    let store = RemoteStore::in_memory();
    let at = store.partition_dir("t", uuid::Uuid::nil(), 0);
    for s in &sealed[..4] {
        let remote = store
            .upload(&at, s, 0, 0, Some(&budget))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(remote.size_bytes, s.size_bytes);
    }
    assert!(budget.snapshot().waits > 0, "{:?}", budget.snapshot());
}
