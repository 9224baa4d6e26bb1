//! Goal: the data path of transactions through the real Fetch and ListOffsets
//! handlers: read_committed fetches stop at the last stable offset, name the aborted
//! transactions of the records they return, and a waiting read_committed fetch is
//! answered when a marker moves the last stable offset; read_uncommitted is unchanged.
//!
//! Method: an in-process broker whose `Broker` the test keeps. Transactional batches
//! (kafka-protocol's encoder, transactional=true) are appended to the partition and
//! markers written with `Partition::write_marker`, as the transaction coordinator
//! will; a plain batch goes through Produce; reads go over the wire.

mod common;

use bytes::Bytes;
use common::*;
use headway_base::{Offset, PartitionIndex, ProducerEpoch, ProducerId};
use headway_broker::{Broker, BrokerConfig, Partition, TransactionResult};
use headway_protocol::kafka_protocol::messages::*;
use headway_protocol::kafka_protocol::records::{Record, RecordBatchDecoder, TimestampType};
use headway_server::{Server, ServerConfig};
use std::sync::Arc;

const FETCH_VERSION: i16 = 12;

fn txn_batch(producer_id: i64, sequence: i32, values: &[&str]) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: true,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: sequence + i as i32,
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: Default::default(),
        })
        .collect();
    encode(&records)
}

/// Appends and waits until durable.
async fn append(partition: &Partition, records: &[u8]) {
    let appended = partition
        .append(headway_log::batch::validate_all(records), 1 << 20)
        .unwrap();
    partition
        .wait_durable(appended.log_end_offset)
        .await
        .unwrap();
}

async fn marker(partition: &Partition, producer_id: i64, result: TransactionResult) -> i64 {
    let offset = partition
        .write_marker(
            ProducerId::new(producer_id),
            ProducerEpoch::new(0),
            result,
            0,
        )
        .unwrap();
    partition.wait_durable(offset.next()).await.unwrap();
    offset.value()
}

fn fetch(offset: i64, max_wait_ms: i32, isolation: i8) -> FetchRequest {
    fetch_request("txn", offset, max_wait_ms, 1).with_isolation_level(isolation)
}

/// What a fetch answered: (offset, is a control record) of each record, the last
/// stable offset, and the aborted transactions as (producer id, first offset).
type Answer = (Vec<(i64, bool)>, i64, Option<Vec<(i64, i64)>>);

fn answer(response: &FetchResponse) -> Answer {
    let p = &response.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    let mut buf = p.records.clone().unwrap_or_default();
    let records = RecordBatchDecoder::decode_all(&mut buf)
        .unwrap()
        .into_iter()
        .flat_map(|set| set.records)
        .map(|r| (r.offset, r.control))
        .collect();
    let aborted = p.aborted_transactions.as_ref().map(|list| {
        list.iter()
            .map(|t| (t.producer_id.0, t.first_offset))
            .collect()
    });
    (records, p.last_stable_offset, aborted)
}

async fn latest(client: &mut Client, isolation: i8) -> i64 {
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(isolation)
        .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
            .with_name(topic_name("txn"))
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(-1),
            ])]);
    let response = client.call(5, &request).await;
    response.topics[0].partitions[0].offset
}

fn offsets(range: std::ops::Range<i64>) -> Vec<(i64, bool)> {
    range.map(|o| (o, false)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_stops_at_the_last_stable_offset_and_names_aborted_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig {
        data_dir: dir.path().to_path_buf(),
        listen: "127.0.0.1:0".into(),
        ..BrokerConfig::default()
    };
    let broker: Arc<Broker> = Broker::open(config).await.unwrap();
    let server = Server::bind(Arc::clone(&broker), ServerConfig::default())
        .await
        .unwrap();
    let (addr, handle) = (server.local_addr(), server.handle());
    let task = tokio::spawn(server.run());
    let mut client = Client {
        stream: tokio::net::TcpStream::connect(addr).await.unwrap(),
        next_correlation_id: 1,
    };
    create_topic(&mut client, "txn", 1).await;
    let partition = broker.partition("txn", PartitionIndex::new(0)).unwrap();

    append(&partition, &txn_batch(1, 0, &["a0", "a1"])).await; // 0..2, producer 1
    let produced = client
        .call(9, &produce_request("txn", 0, -1, batch(&["plain"])))
        .await;
    assert_eq!(partition_response(&produced).base_offset, 2);
    append(&partition, &txn_batch(2, 0, &["b0", "b1"])).await; // 3..5, producer 2

    // Both transactions open: read_committed sees nothing, read_uncommitted all.
    let committed = answer(&client.call(FETCH_VERSION, &fetch(0, 0, 1)).await);
    assert_eq!(committed, (vec![], 0, Some(vec![])));
    let uncommitted = answer(&client.call(FETCH_VERSION, &fetch(0, 0, 0)).await);
    assert_eq!(uncommitted, (offsets(0..5), 0, None));
    assert_eq!(latest(&mut client, 1).await, 0);
    assert_eq!(latest(&mut client, 0).await, 5);

    // A read_committed fetch waiting for data is answered when the abort marker moves
    // the last stable offset to producer 2's transaction.
    let waiting = client.send(FETCH_VERSION, &fetch(0, 20_000, 1)).await;
    assert_eq!(marker(&partition, 1, TransactionResult::Abort).await, 5);
    let (id, response): (i32, FetchResponse) = client.recv(FETCH_VERSION).await;
    assert_eq!(id, waiting);
    assert_eq!(answer(&response), (offsets(0..3), 3, Some(vec![(1, 0)])));
    assert_eq!(latest(&mut client, 1).await, 3);

    // Producer 2 commits: everything is stable; the aborted one is still named for
    // every range that holds its records or its marker, and only those.
    assert_eq!(marker(&partition, 2, TransactionResult::Commit).await, 6);
    let mut all = offsets(0..5);
    all.extend([(5, true), (6, true)]);
    let committed = answer(&client.call(FETCH_VERSION, &fetch(0, 0, 1)).await);
    assert_eq!(committed, (all.clone(), 7, Some(vec![(1, 0)])));
    let from_three = answer(&client.call(FETCH_VERSION, &fetch(3, 0, 1)).await);
    assert_eq!(
        from_three.2,
        Some(vec![(1, 0)]),
        "its marker is in the range"
    );
    let from_six = answer(&client.call(FETCH_VERSION, &fetch(6, 0, 1)).await);
    assert_eq!(from_six, (vec![(6, true)], 7, Some(vec![])));
    assert_eq!(latest(&mut client, 1).await, 7);
    assert_eq!(Offset::new(7), partition.last_stable_offset());
    let uncommitted = answer(&client.call(FETCH_VERSION, &fetch(0, 0, 0)).await);
    assert_eq!(uncommitted, (all, 7, None));

    // A transactional batch whose request names no transactional id is refused: the
    // coordinator cannot vouch for it (INVALID_REQUEST), and the log is unchanged.
    let refused = client
        .call(9, &produce_request("txn", 0, -1, txn_batch(3, 0, &["c"])))
        .await;
    assert_eq!(partition_response(&refused).error_code, 42);
    assert_eq!(Offset::new(7), partition.last_stable_offset());

    handle.shutdown();
    tokio::time::timeout(DEADLINE, task).await.unwrap().unwrap();
}
