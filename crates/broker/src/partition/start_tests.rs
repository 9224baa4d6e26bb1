//! Start-up with a damaged data directory: one partition that cannot be opened, a
//! topic that cannot be loaded, or leftovers of an interrupted creation never keep
//! the broker from starting and serving everything else.
//!
//! Goal: each damage is confined to what it touches. Method: create topics with a
//! broker, stop it, damage the directory as a crash or a failing disk would, start a
//! broker again and check what it serves, refuses and reports.

use super::txn_tests::plain_batch;
use crate::{Broker, BrokerConfig, BrokerError};
use headway_base::PartitionIndex;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;

const MAX: usize = 1 << 20;

async fn broker_on(dir: &Path) -> Arc<Broker> {
    Broker::open(BrokerConfig {
        data_dir: dir.to_path_buf(),
        ..BrokerConfig::default()
    })
    .await
    .unwrap()
}

/// A broker on `dir` with the given topics (name, partitions), then stopped.
async fn stopped_with(dir: &Path, topics: &[(&str, i32)]) {
    let broker = broker_on(dir).await;
    for (name, partitions) in topics {
        broker
            .create_topic(name, Some(*partitions), BTreeMap::new())
            .await
            .unwrap();
    }
    broker.shutdown().await;
}

fn partition_dir(dir: &Path, topic: &str, p: i32) -> std::path::PathBuf {
    dir.join("topics").join(topic).join(p.to_string())
}

/// Appends one batch and waits until it is durable.
async fn write_one(broker: &Broker, topic: &str, p: i32) -> Result<(), BrokerError> {
    let partition = broker.partition(topic, PartitionIndex::new(p))?;
    let appended = partition.append(&plain_batch(), MAX)?;
    partition.wait_durable(appended.log_end_offset).await
}

#[tokio::test]
async fn a_partition_that_cannot_be_opened_is_offline_and_the_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    stopped_with(dir.path(), &[("t", 3), ("other", 1)]).await;
    // Partition 1's log file becomes a directory: opening it fails whatever the user.
    let log = partition_dir(dir.path(), "t", 1).join("00000000000000000000.log");
    fs::remove_file(&log).unwrap();
    fs::create_dir(&log).unwrap();
    // Partition 2's directory is gone.
    fs::remove_dir_all(partition_dir(dir.path(), "t", 2)).unwrap();

    let broker = broker_on(dir.path()).await;
    for (p, cause) in [(1, "00000000000000000000.log"), (2, "is missing")] {
        let bad = broker.partition("t", PartitionIndex::new(p)).unwrap();
        assert!(
            bad.unopened_cause().unwrap().contains(cause),
            "{p}: {:?}",
            bad.unopened_cause()
        );
        let health = bad.health();
        assert!(health.offline && health.unopened, "{p}: {health:?}");
        match bad.append(&plain_batch(), MAX) {
            Err(BrokerError::Storage(message)) => assert!(message.contains("offline"), "{message}"),
            other => panic!("append to an unopened partition: {other:?}"),
        }
        let via = crate::io::read_pool::ReadVia {
            pool: Arc::clone(broker.read_pool()),
            cache_first: true,
            tail_bytes: u64::MAX,
        };
        match bad
            .read_via(headway_base::Offset::ZERO, MAX, &via, Default::default())
            .await
        {
            Err(BrokerError::Storage(message)) => assert!(message.contains("offline"), "{message}"),
            other => panic!("read of an unopened partition: {other:?}"),
        }
    }
    write_one(&broker, "t", 0).await.unwrap();
    write_one(&broker, "other", 0).await.unwrap();
    assert!(
        !broker
            .partition("t", PartitionIndex::new(0))
            .unwrap()
            .health()
            .offline
    );
    broker.shutdown().await;
    drop(broker);

    // Still reported at the next start, and nothing was created in its place.
    let broker = broker_on(dir.path()).await;
    let bad = broker.partition("t", PartitionIndex::new(2)).unwrap();
    assert!(bad.unopened_cause().is_some());
    assert!(!partition_dir(dir.path(), "t", 2).exists());
    broker.shutdown().await;
}

#[tokio::test]
async fn a_topic_that_cannot_be_loaded_keeps_no_other_from_being_served() {
    let dir = tempfile::tempdir().unwrap();
    stopped_with(dir.path(), &[("damaged", 2), ("fine", 1)]).await;
    fs::write(dir.path().join("topics/damaged/topic.json"), b"{ not json").unwrap();
    let broker = broker_on(dir.path()).await;
    assert!(broker.topic("damaged").is_none());
    write_one(&broker, "fine", 0).await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn leftovers_of_an_interrupted_creation_are_removed_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    stopped_with(dir.path(), &[("grown", 2)]).await;
    let topics = dir.path().join("topics");
    // A topic creation that never reached its rename.
    fs::create_dir_all(topics.join(".creating-0123/0")).unwrap();
    // A CreatePartitions that made directories but never recorded the new count.
    fs::create_dir_all(topics.join("grown/.creating-2")).unwrap();
    fs::create_dir_all(topics.join("grown/2")).unwrap();
    fs::write(topics.join("grown/2/00000000000000000000.log"), b"").unwrap();
    // A directory past the count that holds records is never removed.
    fs::create_dir_all(topics.join("grown/7")).unwrap();
    fs::write(topics.join("grown/7/00000000000000000000.log"), b"records").unwrap();

    let broker = broker_on(dir.path()).await;
    assert!(!topics.join(".creating-0123").exists());
    assert!(!topics.join("grown/.creating-2").exists());
    assert!(!topics.join("grown/2").exists());
    assert!(topics.join("grown/7/00000000000000000000.log").exists());
    assert_eq!(broker.topic("grown").unwrap().partitions().len(), 2);
    write_one(&broker, "grown", 1).await.unwrap();
    // Growing it now makes a fresh partition 2.
    broker.add_partitions("grown", 3, false).await.unwrap();
    write_one(&broker, "grown", 2).await.unwrap();
    broker.shutdown().await;
    drop(broker);

    let broker = broker_on(dir.path()).await;
    let p2 = broker.partition("grown", PartitionIndex::new(2)).unwrap();
    assert_eq!(p2.high_watermark().value(), 1);
    assert!(fs::read_dir(topics.join("grown")).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with('.')));
    broker.shutdown().await;
}

#[tokio::test]
async fn a_partition_with_empty_files_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    stopped_with(dir.path(), &[("half", 2)]).await;
    // A creation cut short by a power loss: files created, nothing in them, no marker.
    let p1 = partition_dir(dir.path(), "half", 1);
    for entry in fs::read_dir(&p1).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_string_lossy().starts_with('.') {
            fs::remove_file(&path).unwrap();
        } else {
            fs::File::create(&path).unwrap();
        }
    }
    let broker = broker_on(dir.path()).await;
    write_one(&broker, "half", 1).await.unwrap();
    write_one(&broker, "half", 0).await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn an_append_that_panics_takes_only_its_partition_offline() {
    crate::panics::install_hook();
    let dir = tempfile::tempdir().unwrap();
    let broker = broker_on(dir.path()).await;
    for name in ["doomed", "fine"] {
        broker
            .create_topic(name, Some(2), BTreeMap::new())
            .await
            .unwrap();
    }
    write_one(&broker, "doomed", 0).await.unwrap();
    let before = crate::panics::caught(crate::panics::Component::Append);
    super::tests_fault::panic_appends_to("doomed");
    let doomed = broker.partition("doomed", PartitionIndex::new(0)).unwrap();
    let refused = doomed.append(&plain_batch(), MAX);
    assert!(
        matches!(refused, Err(BrokerError::Storage(_))),
        "{refused:?}"
    );
    assert_eq!(
        crate::panics::caught(crate::panics::Component::Append),
        before + 1
    );
    assert!(doomed.health().offline, "the partition is offline");
    super::tests_fault::stop_panicking("doomed");
    // What was durable before stays; later appends are refused (the log is poisoned),
    // and the mutex the panic happened under still serves.
    assert_eq!(doomed.high_watermark().value(), 1);
    assert!(matches!(
        doomed.append(&plain_batch(), MAX),
        Err(BrokerError::Storage(_))
    ));
    assert_eq!(
        crate::panics::caught(crate::panics::Component::Append),
        before + 1
    );
    // Every other partition, of this topic and others, goes on.
    write_one(&broker, "fine", 0).await.unwrap();
    broker.shutdown().await;
}
