//! Storage errors as clients and operators see them.
//!
//! Goal: a batch damaged on disk in a sealed segment is never served: a fetch at it
//! gets CORRUPT_MESSAGE, the batches before and after it are still served, `/metrics`
//! counts the refused read and the segment marked for repair, and a restart truncates
//! the segment before the damage so that fetches go on from the next segment. A
//! produce below `disk_free_bytes_min` gets KAFKA_STORAGE_ERROR and is counted.
//! Method: a broker on a temporary directory with tiny segments; one byte of a stored
//! batch is flipped in the segment file; raw Kafka requests and `/metrics` scrapes.
//! (A real full disk, with librdkafka, is in `tests/python/test_storage_errors.py`.)

mod common;

use common::*;
use headway_protocol::kafka_protocol::messages::FetchResponse;
use std::os::unix::fs::FileExt;
use std::path::Path;

const TOPIC: &str = "rot";
const CORRUPT_MESSAGE: i16 = 2;
const KAFKA_STORAGE_ERROR: i16 = 56;

fn assert_metric(metrics: &str, line: &str) {
    assert!(
        metrics.lines().any(|l| l == line),
        "{line:?} in:\n{metrics}"
    );
}

/// (error code, values with their offsets) of a fetch of partition 0 at `offset`.
async fn fetch(client: &mut Client, offset: i64) -> (i16, Vec<(i64, String)>) {
    let response: FetchResponse = client.call(12, &fetch_request(TOPIC, offset, 0, 1)).await;
    let partition = &response.responses[0].partitions[0];
    let values = partition
        .records
        .as_ref()
        .map(values_of)
        .unwrap_or_default();
    (partition.error_code, values)
}

/// Byte positions of the batches in a segment file.
fn batch_positions(path: &Path) -> Vec<u64> {
    let bytes = std::fs::read(path).unwrap();
    let mut positions = Vec::new();
    let mut at = 0;
    while at + 12 <= bytes.len() {
        positions.push(at as u64);
        at += 12 + i32::from_be_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
    }
    positions
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        match entry.file_type().unwrap().is_dir() {
            true => copy_dir(&entry.path(), &target),
            false => {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_batch_is_refused_reported_and_repaired_at_restart() {
    let broker = TestBroker::start_with(|c| {
        c.broker.metrics_listen = Some("127.0.0.1:0".into());
        c.broker.log.segment_bytes = 1000;
    })
    .await;
    let mut client = broker.client().await;
    create_topic(&mut client, TOPIC, 1).await;
    // Batches of three records, about 150 bytes each: several per segment.
    for i in 0..20 {
        let values = [format!("a{i}"), format!("b{i}"), format!("c{i}")];
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        let request = produce_request(TOPIC, 0, -1, batch(&values));
        let response = client.call(9, &request).await;
        assert_eq!(partition_response(&response).error_code, 0);
    }
    let partition_dir = broker.dir.path().join("topics").join(TOPIC).join("0");
    let first_segment = partition_dir.join(format!("{:020}.log", 0));
    let positions = batch_positions(&first_segment);
    assert!(
        positions.len() >= 3,
        "the first segment holds a few batches"
    );
    // The last byte of the second batch is a record's value: only the CRC notices.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&first_segment)
        .unwrap();
    let damaged = positions[2] - 1;
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, damaged).unwrap();
    file.write_all_at(&[byte[0] ^ 0x01], damaged).unwrap();

    // Before the damage: served. At it: refused. After it: served.
    let (code, values) = fetch(&mut client, 0).await;
    assert_eq!(code, 0);
    assert_eq!(
        values.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    let (code, values) = fetch(&mut client, 3).await;
    assert_eq!((code, values.len()), (CORRUPT_MESSAGE, 0));
    let (code, values) = fetch(&mut client, 6).await;
    assert_eq!(code, 0);
    assert_eq!(values[0].0, 6);

    let metrics = scrape(broker.server.metrics_addr.unwrap()).await;
    assert_metric(&metrics, "headway_corrupt_batch_reads_total 1");
    assert_metric(&metrics, "headway_segments_to_repair 1");
    assert_metric(
        &metrics,
        &format!("headway_partition_segments_to_repair{{topic=\"{TOPIC}\",partition=\"0\"}} 1"),
    );
    assert_metric(&metrics, "headway_partitions_offline 0");
    assert!(partition_dir.join(format!("{:020}.repair", 0)).exists());

    // Produces go on meanwhile: the damage is in a sealed segment.
    let request = produce_request(TOPIC, 0, -1, batch(&["after"]));
    let response = client.call(9, &request).await;
    assert_eq!(partition_response(&response).error_code, 0);
    drop(client);

    // A restart repairs: the first segment ends before the damaged batch, and a fetch
    // there goes on at the next segment.
    // The `/metrics` task keeps the stopped broker (and its directory lock) alive, so
    // the restart runs on a copy of the cleanly closed data directory.
    let dir = broker.stop_keeping_data().await;
    let copy = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), copy.path());
    let partition_dir = copy.path().join("topics").join(TOPIC).join("0");
    let broker = TestBroker::start_in(copy).await;
    let mut client = broker.client().await;
    let (code, values) = fetch(&mut client, 0).await;
    assert_eq!(code, 0);
    assert_eq!(
        values.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    let next_segment = positions.len() as i64 * 3;
    let (code, values) = fetch(&mut client, 3).await;
    assert_eq!(code, 0);
    assert_eq!(values[0].0, next_segment);
    assert!(!partition_dir.join(format!("{:020}.repair", 0)).exists());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_produce_below_disk_free_bytes_min_gets_kafka_storage_error() {
    let broker = TestBroker::start_with(|c| {
        c.broker.metrics_listen = Some("127.0.0.1:0".into());
        // More than any disk has free.
        c.broker.disk_free_bytes_min = u64::MAX / 2;
    })
    .await;
    let mut client = broker.client().await;
    create_topic(&mut client, TOPIC, 1).await;
    let request = produce_request(TOPIC, 0, -1, batch(&["refused"]));
    let response = client.call(9, &request).await;
    let partition = partition_response(&response);
    assert_eq!(partition.error_code, KAFKA_STORAGE_ERROR);
    let message = partition.error_message.as_deref().unwrap_or_default();
    assert!(message.contains("disk_free_bytes_min"), "{message}");
    let (code, values) = fetch(&mut client, 0).await;
    assert_eq!((code, values.len()), (0, 0), "nothing was written");

    let metrics = scrape(broker.server.metrics_addr.unwrap()).await;
    assert_metric(&metrics, "headway_produces_refused_disk_free_total 1");
    assert_metric(
        &metrics,
        &format!("headway_disk_free_bytes_min {}", u64::MAX / 2),
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_taken_offline_is_not_advertised_as_led() {
    use headway_protocol::kafka_protocol::messages::{MetadataRequest, MetadataResponse};
    let broker =
        TestBroker::start_with(|c| c.broker.metrics_listen = Some("127.0.0.1:0".into())).await;
    let mut client = broker.client().await;
    create_topic(&mut client, TOPIC, 2).await;
    let partition = {
        let b = broker.server.broker.upgrade().unwrap();
        b.partition(TOPIC, headway_base::PartitionIndex::new(1))
            .unwrap()
    };
    partition.take_offline("a failed fsync, as the flusher reports it");
    // No topic list: every topic.
    let all = MetadataRequest::default().with_topics(None);
    let metadata: MetadataResponse = client.call(12, &all).await;
    let topic = metadata
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == TOPIC))
        .unwrap();
    let by_index = |i: i32| {
        topic
            .partitions
            .iter()
            .find(|p| p.partition_index == i)
            .unwrap()
    };
    // Kafka's answer for a partition whose only replica is offline: clients stop
    // sending it produces and fetches, and keep using the others.
    assert_eq!(by_index(1).error_code, KAFKA_STORAGE_ERROR);
    assert_eq!(by_index(1).leader_id.0, -1);
    assert_eq!(by_index(1).offline_replicas.len(), 1);
    assert_eq!(by_index(0).error_code, 0);
    assert!(by_index(0).leader_id.0 >= 0, "partition 0 is led");
    let metrics = broker.server.metrics_addr.unwrap();
    let (status, body) = http_get(metrics, "/readyz").await;
    assert!(status.starts_with("HTTP/1.1 503"), "{status}");
    assert!(
        body.contains(&format!("partition {TOPIC}-1 is offline")),
        "{body}"
    );
    broker.stop().await;
}
