//! Goal: an idempotent producer's retried batch is stored once and answered with its
//! original offset, before and after a clean restart and a crash; gaps, fenced epochs
//! and transactional producers get the right Kafka error codes.
//!
//! Method: raw Produce requests with hand-built batches carrying a producer id, epoch
//! and sequence, against an in-process broker restarted on the same data directory.
//! "Crash" aborts the server without its shutdown sequence, so no producer-state
//! snapshot is written and state must be rebuilt from the log.

mod common;

use bytes::Bytes;
use common::*;
use headway_protocol::kafka_protocol::messages::*;
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::records::{Record, TimestampType};

fn idempotent_batch(producer_id: i64, epoch: i16, base_sequence: i32, values: &[&str]) -> Bytes {
    producer_batch(producer_id, epoch, base_sequence, values, false)
}

fn producer_batch(
    producer_id: i64,
    epoch: i16,
    base_sequence: i32,
    values: &[&str],
    transactional: bool,
) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: base_sequence + i as i32,
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: Default::default(),
        })
        .collect();
    encode(&records)
}

async fn produce(client: &mut Client, records: Bytes) -> (i16, i64) {
    let response = client
        .call(9, &produce_request("idem", 0, -1, records))
        .await;
    let p = partition_response(&response);
    (p.error_code, p.base_offset)
}

async fn all_values(client: &mut Client) -> Vec<(i64, String)> {
    let response = client.call(12, &fetch_request("idem", 0, 0, 1)).await;
    values_of(
        response.responses[0].partitions[0]
            .records
            .as_ref()
            .unwrap(),
    )
}

async fn init_producer_id(
    client: &mut Client,
    transactional_id: Option<&str>,
) -> InitProducerIdResponse {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(
            transactional_id.map(|t| TransactionalId(StrBytes::from_string(t.into()))),
        )
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    client.call(4, &request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_stored_once_and_bad_sequences_refused() {
    let broker = TestBroker::start().await;
    let mut client = broker.client().await;
    create_topic(&mut client, "idem", 1).await;
    let init = init_producer_id(&mut client, None).await;
    assert_eq!(init.error_code, 0);
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    assert!(pid >= 0);
    let other = init_producer_id(&mut client, None).await;
    assert_ne!(other.producer_id.0, pid, "every call gets a fresh id");

    let first = idempotent_batch(pid, epoch, 0, &["a", "b"]);
    assert_eq!(produce(&mut client, first.clone()).await, (0, 0));
    assert_eq!(
        produce(&mut client, first.clone()).await,
        (0, 0),
        "a retry gets the original offset"
    );
    assert_eq!(
        produce(&mut client, idempotent_batch(pid, epoch, 2, &["c"])).await,
        (0, 2)
    );
    assert_eq!(
        produce(&mut client, first).await,
        (0, 0),
        "still recognised after a later batch"
    );
    assert_eq!(
        produce(&mut client, idempotent_batch(pid, epoch, 9, &["gap"]))
            .await
            .0,
        45,
        "OUT_OF_ORDER_SEQUENCE_NUMBER"
    );
    assert_eq!(
        produce(&mut client, idempotent_batch(pid, epoch - 1, 3, &["old"]))
            .await
            .0,
        47,
        "INVALID_PRODUCER_EPOCH"
    );
    assert_eq!(
        produce(&mut client, idempotent_batch(pid + 100, 0, 7, &["lost"]))
            .await
            .0,
        59,
        "UNKNOWN_PRODUCER_ID"
    );
    assert_eq!(
        all_values(&mut client).await,
        vec![(0, "a".into()), (1, "b".into()), (2, "c".into())],
        "the log holds every batch once"
    );

    // A transactional id gets its producer from the transaction coordinator; a
    // transactional batch in a produce that names no transactional id is refused
    // (the coordinator cannot vouch for it) and nothing of it is stored.
    let transactional = init_producer_id(&mut client, Some("tx-1")).await;
    assert_eq!(transactional.error_code, 0);
    assert_ne!(transactional.producer_id.0, pid);
    let txn_batch = producer_batch(transactional.producer_id.0, 0, 0, &["t"], true);
    assert_eq!(
        produce(&mut client, txn_batch).await.0,
        42,
        "INVALID_REQUEST: a transactional batch without the request's transactional id"
    );
    assert_eq!(all_values(&mut client).await.len(), 3, "nothing stored");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_state_survives_a_clean_restart_and_a_crash() {
    let broker = TestBroker::start().await;
    let mut client = broker.client().await;
    create_topic(&mut client, "idem", 1).await;
    let pid = init_producer_id(&mut client, None).await.producer_id.0;
    let b0 = idempotent_batch(pid, 0, 0, &["x0", "x1"]);
    assert_eq!(produce(&mut client, b0.clone()).await, (0, 0));

    // Clean restart: state comes from the snapshot.
    let dir = broker.stop_keeping_data().await;
    let broker = TestBroker::start_in(dir).await;
    let mut client = broker.client().await;
    assert_eq!(
        produce(&mut client, b0.clone()).await,
        (0, 0),
        "a replayed batch is a duplicate"
    );
    let b1 = idempotent_batch(pid, 0, 2, &["x2"]);
    assert_eq!(
        produce(&mut client, b1.clone()).await,
        (0, 2),
        "the sequence continues"
    );
    let next_pid = init_producer_id(&mut client, None).await.producer_id.0;
    assert!(
        next_pid > pid,
        "producer ids are not reused after a restart"
    );

    // Crash: no snapshot of the batch after the restart; state is rebuilt from the log.
    let dir = broker.crash().await;
    let broker = TestBroker::start_in(dir).await;
    let mut client = broker.client().await;
    assert_eq!(
        produce(&mut client, b1).await,
        (0, 2),
        "recognised after a crash"
    );
    assert_eq!(
        produce(&mut client, idempotent_batch(pid, 0, 3, &["x3"])).await,
        (0, 3)
    );
    assert_eq!(
        produce(&mut client, idempotent_batch(pid, 0, 9, &["gap"]))
            .await
            .0,
        45
    );
    let values: Vec<String> = all_values(&mut client)
        .await
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(values, vec!["x0", "x1", "x2", "x3"]);
    broker.stop().await;
}
