//! The broker's log cleaner over real partitions: which logs it picks, and that a pass
//! leaves each key's latest record at its offset. Every assertion is on state; waits
//! have generous bounds and never decide an outcome by how long something took.

use super::*;
use crate::{Broker, BrokerConfig};
use bytes::Bytes;
use headway_base::{Offset, PartitionIndex};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use std::collections::BTreeMap;

/// One batch of one record, written now.
fn keyed(key: &str, value: &str) -> Vec<u8> {
    keyed_at(key, value, headway_base::now_ms())
}

/// One batch of one record with this timestamp.
fn keyed_at(key: &str, value: &str, timestamp: i64) -> Vec<u8> {
    batch_of(key, Some(value), timestamp)
}

/// One batch of one record deleting `key`, written now.
fn tombstone(key: &str) -> Vec<u8> {
    batch_of(key, None, headway_base::now_ms())
}

fn batch_of(key: &str, value: Option<&str>, timestamp: i64) -> Vec<u8> {
    let record = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: 0,
        timestamp,
        key: Some(Bytes::from(key.to_string())),
        value: value.map(|v| Bytes::from(v.to_string())),
        headers: Default::default(),
    };
    let mut out = bytes::BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut out, [&record], &options).unwrap();
    out.to_vec()
}

/// Every record of the partition from its start: (offset, key, value, with
/// [`NULL`] for a tombstone's). A batch the cleaner emptied holds no records but still
/// advances the offset.
async fn read_all(p: &Partition) -> Vec<(i64, String, String)> {
    let mut out = Vec::new();
    let mut offset = p.log_start_offset();
    while offset < p.high_watermark() {
        let read = p.read(offset, 1 << 20).await.unwrap();
        let mut rest = read.records.clone();
        assert!(
            !rest.is_empty(),
            "a read from {offset} below {}",
            p.high_watermark()
        );
        while !rest.is_empty() {
            let header = headway_log::BatchHeader::parse(&rest).unwrap();
            let mut batch = rest.split_to(header.total_bytes());
            for set in RecordBatchDecoder::decode_all(&mut batch).unwrap() {
                for r in set.records {
                    let text = |b: Option<Bytes>| {
                        b.map_or(NULL.to_string(), |b| String::from_utf8(b.to_vec()).unwrap())
                    };
                    out.push((r.offset, text(r.key), text(r.value)));
                }
            }
            offset = Offset::new(header.last_offset() + 1);
        }
    }
    out
}

/// A tombstone's value as [`read_all`] shows it.
const NULL: &str = "(null)";

async fn broker(dir: &std::path::Path) -> std::sync::Arc<Broker> {
    Broker::open(BrokerConfig {
        data_dir: dir.to_path_buf(),
        // The test drives the rounds itself.
        log_cleaner_enabled: false,
        ..BrokerConfig::default()
    })
    .await
    .unwrap()
}

fn settings(policy: &str) -> BTreeMap<String, String> {
    [("cleanup.policy", policy), ("segment.bytes", "1024")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn a_round_cleans_compacted_partitions_and_keeps_each_keys_latest_record() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    broker
        .create_topic("table", Some(1), settings("compact"))
        .await
        .unwrap();
    broker
        .create_topic("stream", Some(1), settings("delete"))
        .await
        .unwrap();
    let compacted = broker.compacted_logs();
    assert_eq!(compacted.len(), 1, "only the compacted topic's partition");
    assert_eq!(compacted[0].topic, "table");

    // 400 updates of 10 keys, in segments of about 1 KiB.
    let p = broker.partition("table", PartitionIndex::new(0)).unwrap();
    let mut latest = BTreeMap::new();
    let mut end = Offset::new(0);
    for i in 0..400 {
        let (key, value) = (format!("key-{}", i % 10), format!("value-{i}"));
        let appended = p.append(&keyed(&key, &value), 1 << 20).unwrap();
        latest.insert(key, (appended.base_offset.value(), value));
        end = appended.log_end_offset;
    }
    tokio::time::timeout(std::time::Duration::from_secs(30), p.wait_durable(end))
        .await
        .expect("durable within the deadline")
        .unwrap();
    let before = read_all(&p).await;
    assert_eq!(before.len(), 400);
    assert!(p.dirty_ratio().unwrap() > 0.9, "nothing cleaned yet");

    let cleaner = broker.cleaner();
    let ran = tokio::task::spawn_blocking({
        let cleaner = std::sync::Arc::clone(cleaner);
        move || cleaner.round(&compacted)
    })
    .await
    .unwrap();
    assert!(ran, "a pass ran");

    let after = read_all(&p).await;
    assert!(
        after.len() < 100,
        "superseded records are gone: {} left",
        after.len()
    );
    assert!(
        after.windows(2).all(|w| w[0].0 < w[1].0),
        "offsets increase"
    );
    // Every record left is one that was written at that offset; each key's latest
    // record is there, at its own offset.
    for (offset, key, value) in &after {
        let written = &before[*offset as usize];
        assert_eq!((&written.1, &written.2), (key, value), "offset {offset}");
    }
    for (key, (offset, value)) in &latest {
        assert!(
            after.contains(&(*offset, key.clone(), value.clone())),
            "{key}"
        );
    }
    let stats = cleaner.snapshot();
    assert_eq!(stats.len(), 1);
    let (topic, partition, done) = &stats[0];
    assert_eq!((topic.as_str(), *partition), ("table", 0));
    assert_eq!(done.passes, 1);
    assert!(done.records_removed >= 300, "{done:?}");
    assert!(done.dirty_ratio < 0.5, "{done:?}");
    // Once the partition is no longer a candidate (its topic deleted), its figures go.
    broker.delete_topic("table").await.unwrap();
    let logs = broker.compacted_logs();
    assert!(logs.is_empty());
    let cleaner = std::sync::Arc::clone(cleaner);
    tokio::task::spawn_blocking(move || {
        cleaner.round(&logs);
        assert!(cleaner.snapshot().is_empty(), "{:?}", cleaner.snapshot());
    })
    .await
    .unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn a_partition_under_its_dirty_ratio_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let mut config = settings("compact");
    config.insert("min.cleanable.dirty.ratio".into(), "1.0".into());
    broker.create_topic("lazy", Some(1), config).await.unwrap();
    let p = broker.partition("lazy", PartitionIndex::new(0)).unwrap();
    let mut end = Offset::new(0);
    for i in 0..50 {
        end = p
            .append(&keyed("same", &format!("v{i}")), 1 << 20)
            .unwrap()
            .log_end_offset;
    }
    tokio::time::timeout(std::time::Duration::from_secs(30), p.wait_durable(end))
        .await
        .expect("durable within the deadline")
        .unwrap();
    assert_eq!(p.dirty_ratio().unwrap(), 1.0, "nothing cleaned yet");
    let logs = broker.compacted_logs();
    let cleaner = std::sync::Arc::clone(broker.cleaner());
    let ran = tokio::task::spawn_blocking(move || cleaner.round(&logs))
        .await
        .unwrap();
    assert!(!ran, "below min.cleanable.dirty.ratio nothing is cleaned");
    assert_eq!(read_all(&p).await.len(), 50);
    broker.shutdown().await;
}

#[tokio::test]
async fn a_log_past_its_max_compaction_lag_is_cleaned_below_its_dirty_ratio() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let mut config = settings("compact");
    config.insert("min.cleanable.dirty.ratio".into(), "1.0".into());
    config.insert("max.compaction.lag.ms".into(), "60000".into());
    broker.create_topic("late", Some(1), config).await.unwrap();
    let p = broker.partition("late", PartitionIndex::new(0)).unwrap();
    // Written an hour ago (by their timestamps): past the lag of a minute.
    let an_hour_ago = headway_base::now_ms() - 3_600_000;
    let mut end = Offset::new(0);
    for i in 0..50 {
        let batch = keyed_at("same", &format!("v{i}"), an_hour_ago);
        end = p.append(&batch, 1 << 20).unwrap().log_end_offset;
    }
    tokio::time::timeout(std::time::Duration::from_secs(30), p.wait_durable(end))
        .await
        .expect("durable within the deadline")
        .unwrap();
    let logs = broker.compacted_logs();
    let cleaner = std::sync::Arc::clone(broker.cleaner());
    let ran = tokio::task::spawn_blocking(move || cleaner.round(&logs))
        .await
        .unwrap();
    assert!(
        ran,
        "past max.compaction.lag.ms the log is cleaned though its ratio is 1.0"
    );
    assert!(read_all(&p).await.len() < 50);
    broker.shutdown().await;
}

#[tokio::test]
async fn a_tombstone_goes_once_its_horizon_passed_even_with_nothing_dirty() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let mut config = settings("compact");
    config.insert("delete.retention.ms".into(), "200".into());
    broker
        .create_topic("deletes", Some(1), config)
        .await
        .unwrap();
    let p = broker.partition("deletes", PartitionIndex::new(0)).unwrap();
    p.append(&keyed("gone", "v"), 1 << 20).unwrap();
    let deleted_at = p.append(&tombstone("gone"), 1 << 20).unwrap().base_offset;
    let mut end = Offset::new(0);
    for i in 0..100 {
        let batch = keyed(&format!("key-{i}"), "filler");
        end = p.append(&batch, 1 << 20).unwrap().log_end_offset;
    }
    tokio::time::timeout(std::time::Duration::from_secs(30), p.wait_durable(end))
        .await
        .expect("durable within the deadline")
        .unwrap();
    let round = || {
        let logs = broker.compacted_logs();
        let cleaner = std::sync::Arc::clone(broker.cleaner());
        tokio::task::spawn_blocking(move || cleaner.round(&logs))
    };
    let of_gone = |records: Vec<(i64, String, String)>| -> Vec<(i64, String)> {
        records
            .into_iter()
            .filter(|(_, k, _)| k == "gone")
            .map(|(o, _, v)| (o, v))
            .collect()
    };
    assert!(round().await.unwrap(), "the first pass runs");
    assert_eq!(
        of_gone(read_all(&p).await),
        vec![(deleted_at.value(), NULL.to_string())],
        "the first cleaning keeps the tombstone and removes what it deletes"
    );
    let due = p.tombstones_due_ms().unwrap().expect("a tombstone is due");
    assert!(p.dirty_ratio().unwrap() < 0.5);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while headway_base::now_ms() <= due {
        assert!(
            std::time::Instant::now() < deadline,
            "the clock passes {due}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        round().await.unwrap(),
        "a pass runs for the tombstone alone"
    );
    assert_eq!(of_gone(read_all(&p).await), vec![]);
    assert_eq!(p.tombstones_due_ms().unwrap(), None);
    assert_eq!(read_all(&p).await.len(), 100, "the other keys stay");
    broker.shutdown().await;
}
