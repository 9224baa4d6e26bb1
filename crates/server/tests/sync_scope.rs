//! Goal: with a broker-wide group commit (`sync_scope = broker` and `syncfs`), a produce
//! request spanning many partitions is acknowledged with acks=all, offsets stay dense
//! per partition, the high watermark covers every acknowledged record, and after an
//! unclean restart they are all there. (That acks wait for the sync itself is tested
//! against the flusher in `crates/broker/src/flusher_tests.rs`.)
//!
//! Method: an in-process broker on an ephemeral port with the scope set, raw Kafka
//! requests over a socket; assertions on answers and high watermarks only.

mod common;

use common::*;
use headway_broker::{BrokerConfig, SyncScope};
use headway_protocol::kafka_protocol::messages::*;
use headway_server::Server;

const PARTITIONS: i32 = 12;

async fn start(dir: tempfile::TempDir, scope: SyncScope) -> TestBroker {
    let config = BrokerConfig {
        data_dir: dir.path().to_path_buf(),
        listen: "127.0.0.1:0".into(),
        sync_scope: scope,
        ..BrokerConfig::default()
    };
    headway_broker::panics::install_hook();
    let server = Server::start(config.into()).await.unwrap();
    TestBroker {
        addr: server.addr,
        server,
        dir,
    }
}

/// One acks=all produce carrying a batch of `values` for every partition.
fn produce_all(topic: &str, values: &[&str]) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(topic_name(topic))
            .with_partition_data(
                (0..PARTITIONS)
                    .map(|p| {
                        produce_request::PartitionProduceData::default()
                            .with_index(p)
                            .with_records(Some(batch(values)))
                    })
                    .collect(),
            )])
}

/// Every partition's high watermark, from one fetch at offset 0 that does not wait.
async fn high_watermarks(client: &mut Client, topic: &str) -> Vec<i64> {
    let request = fetch_every_partition(topic, PARTITIONS, 0, 0, 1 << 20, 1024);
    let response = client.call(12, &request).await;
    let mut marks: Vec<(i32, i64)> = response.responses[0]
        .partitions
        .iter()
        .map(|p| {
            assert_eq!(p.error_code, 0);
            (p.partition_index, p.high_watermark)
        })
        .collect();
    marks.sort();
    marks.into_iter().map(|(_, hw)| hw).collect()
}

async fn many_partitions_in_one_produce(scope: SyncScope) {
    let broker = start(tempfile::tempdir().unwrap(), scope).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "spread", PARTITIONS).await;
    // Pipelined: later requests are appended while earlier ones wait for their round.
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(
            client
                .send(9, &produce_all("spread", &["a", "b", "c"]))
                .await,
        );
    }
    for (i, id) in ids.iter().enumerate() {
        let (got, response) = client.recv::<ProduceResponse>(9).await;
        assert_eq!(got, *id);
        let partitions = &response.responses[0].partition_responses;
        assert_eq!(partitions.len(), PARTITIONS as usize);
        for p in partitions {
            assert_eq!(p.error_code, 0, "partition {}", p.index);
            assert_eq!(p.base_offset, 3 * i as i64, "partition {}", p.index);
        }
    }
    // Acknowledged means synced: the watermark covers everything acknowledged.
    assert_eq!(
        high_watermarks(&mut client, "spread").await,
        vec![15; PARTITIONS as usize]
    );
    drop(client);
    let dir = broker.crash().await;
    let broker = start(dir, scope).await;
    let mut client = broker.client().await;
    assert_eq!(
        high_watermarks(&mut client, "spread").await,
        vec![15; PARTITIONS as usize]
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_scope_acknowledges_a_produce_to_many_partitions() {
    many_partitions_in_one_produce(SyncScope::Broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syncfs_scope_acknowledges_a_produce_to_many_partitions() {
    many_partitions_in_one_produce(SyncScope::Syncfs).await;
}
