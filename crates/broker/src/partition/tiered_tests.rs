//! A tiered partition's local deletion: the log start stays before the local log,
//! reads in between are the remote tier's, and a reopen keeps both starts.

use super::role_tests::via;
use super::txn_tests::plain_batch;
use super::{Isolation, Partition};
use crate::partition::DeleteRecordsTo;
use crate::{BrokerError, FlushPolicy};
use headway_base::{Clock, Offset, PartitionIndex};
use headway_log::batch::validate_all;
use headway_log::LogConfig;
use std::path::Path;
use std::sync::Arc;

const MAX: usize = 1 << 20;

fn open(dir: &Path) -> Arc<Partition> {
    let config = LogConfig {
        segment_bytes_max: 400,
        ..LogConfig::default()
    };
    let (p, _) = Partition::open(
        dir.to_path_buf(),
        "t".into(),
        PartitionIndex::new(0),
        config,
        FlushPolicy::None,
        Clock::system(),
    )
    .unwrap();
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_deletion_keeps_the_log_start_and_sends_earlier_reads_to_the_remote_tier() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path());
    for _ in 0..40 {
        p.append(validate_all(&plain_batch()), MAX).unwrap();
    }
    let local = p.local_log().unwrap();
    assert!(local.sealed.len() >= 4, "{} sealed", local.sealed.len());
    let to = local.sealed[2].end_offset;
    assert_eq!(p.delete_local_segments(to).unwrap(), 3);
    assert_eq!(p.log_start_offset(), Offset::ZERO, "the log start stays");
    assert_eq!(p.local_log().unwrap().start_offset, to);
    let via = via();
    match p
        .read_via(Offset::new(1), MAX, &via, Isolation::ReadUncommitted)
        .await
    {
        Err(BrokerError::InRemoteTier {
            offset,
            local_start_offset,
            ..
        }) => assert_eq!((offset, local_start_offset), (Offset::new(1), to)),
        other => panic!("a read before the local log: {other:?}"),
    }
    let read = p
        .read_via(to, MAX, &via, Isolation::ReadUncommitted)
        .await
        .unwrap();
    assert!(!read.records.is_empty());
    assert_eq!(read.log_start_offset, Offset::ZERO);

    // Reopened (a crash: no clean close), the log still starts at 0.
    drop(p);
    let p = open(dir.path());
    assert_eq!(p.log_start_offset(), Offset::ZERO);
    assert_eq!(p.local_log().unwrap().start_offset, to);

    // Retention (or DeleteRecords) moves the log start past the local log's start.
    let past = Offset::new(to.value() + 2);
    p.delete_records(DeleteRecordsTo::Offset(past)).unwrap();
    drop(p);
    let p = open(dir.path());
    assert_eq!(
        p.log_start_offset(),
        past,
        "the moved start survives a reopen"
    );
}

#[tokio::test]
async fn an_untiered_partition_still_starts_at_its_local_log() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path());
    for _ in 0..40 {
        p.append(validate_all(&plain_batch()), MAX).unwrap();
    }
    let first = p.local_log().unwrap().sealed[0].end_offset;
    // DeleteRecords' whole-segment deletion moves the local log and the log start.
    p.delete_records(DeleteRecordsTo::Offset(first)).unwrap();
    drop(p);
    let p = open(dir.path());
    assert_eq!(p.log_start_offset(), first);
    assert_eq!(p.local_log().unwrap().start_offset, first);
}

#[test]
fn a_tiered_followers_log_start_follows_its_leaders_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path());
    for _ in 0..40 {
        p.append(validate_all(&plain_batch()), MAX).unwrap();
    }
    // An untiered topic's log start is its own.
    p.follow_log_start(Offset::new(5)).unwrap();
    assert_eq!(p.log_start_offset(), Offset::ZERO);

    p.set_tiered(true);
    // The leader's retention moved its start: the follower's moves too.
    p.follow_log_start(Offset::new(5)).unwrap();
    assert_eq!(p.log_start_offset(), Offset::new(5));
    // Past the follower's high watermark: not yet.
    let hw = p.high_watermark();
    p.follow_log_start(Offset::new(hw.value() + 1)).unwrap();
    assert_eq!(p.log_start_offset(), Offset::new(5));
    // A leader whose log starts earlier (in its remote tier): the follower takes it,
    // and keeps it across a reopen.
    p.follow_log_start(Offset::new(2)).unwrap();
    assert_eq!(p.log_start_offset(), Offset::new(2));
    drop(p);
    let p = open(dir.path());
    assert_eq!(p.log_start_offset(), Offset::new(2));
}
