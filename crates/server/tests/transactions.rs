//! Goal: the transaction coordinator's APIs answer on the wire as Kafka's do, and its
//! state survives a restart.
//!
//! Method: raw requests to an in-process broker: InitProducerId with a transactional
//! id, AddPartitionsToTxn (client and batched forms), AddOffsetsToTxn, EndTxn v3 and
//! v5, DescribeTransactions and ListTransactions, ApiVersions' features; then a
//! restart over the same data directory, and `__transaction_state` read as a topic.

mod common;

use common::*;
use headway_protocol::kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use headway_protocol::kafka_protocol::messages::*;
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use std::time::Instant;

const TOPIC: &str = "txn-out";

fn txn_id(id: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(id.to_string()))
}

async fn init(client: &mut Client, id: &str, timeout_ms: i32) -> InitProducerIdResponse {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(Some(txn_id(id)))
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    client.call(4, &request).await
}

fn topics(partitions: &[i32]) -> Vec<AddPartitionsToTxnTopic> {
    vec![AddPartitionsToTxnTopic::default()
        .with_name(topic_name(TOPIC))
        .with_partitions(partitions.to_vec())]
}

async fn add_v3(
    client: &mut Client,
    id: &str,
    producer: &InitProducerIdResponse,
    partitions: &[i32],
) -> Vec<i16> {
    let request = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id(id))
        .with_v3_and_below_producer_id(producer.producer_id)
        .with_v3_and_below_producer_epoch(producer.producer_epoch)
        .with_v3_and_below_topics(topics(partitions));
    let response = client.call(3, &request).await;
    response.results_by_topic_v3_and_below[0]
        .results_by_partition
        .iter()
        .map(|p| p.partition_error_code)
        .collect()
}

async fn end(
    client: &mut Client,
    version: i16,
    id: &str,
    producer_id: ProducerId,
    epoch: i16,
    commit: bool,
) -> EndTxnResponse {
    let request = EndTxnRequest::default()
        .with_transactional_id(txn_id(id))
        .with_producer_id(producer_id)
        .with_producer_epoch(epoch)
        .with_committed(commit);
    client.call(version, &request).await
}

async fn describe(
    client: &mut Client,
    id: &str,
) -> describe_transactions_response::TransactionState {
    let request = DescribeTransactionsRequest::default().with_transactional_ids(vec![txn_id(id)]);
    let mut response = client.call(0, &request).await;
    response.transaction_states.remove(0)
}

/// Describes `id` until its state is `state`.
async fn wait_for_state(client: &mut Client, id: &str, state: &str) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let now = describe(client, id).await;
        if now.transaction_state.as_str() == state {
            return;
        }
        assert!(Instant::now() < deadline, "{id}: {now:?}, not {state}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_commits_and_its_state_survives_a_restart() {
    let broker = TestBroker::start().await;
    let mut client = broker.client().await;
    create_topic(&mut client, TOPIC, 2).await;

    let producer = init(&mut client, "t1", 60_000).await;
    assert_eq!(producer.error_code, 0);
    assert_eq!(producer.producer_epoch, 0);
    assert_eq!(
        add_v3(&mut client, "t1", &producer, &[0, 1]).await,
        vec![0, 0]
    );
    // An unknown partition is refused, and the others of the request not attempted.
    assert_eq!(
        add_v3(&mut client, "t1", &producer, &[1, 9]).await,
        vec![
            ResponseError::OperationNotAttempted.code(),
            ResponseError::UnknownTopicOrPartition.code()
        ]
    );
    let offsets = AddOffsetsToTxnRequest::default()
        .with_transactional_id(txn_id("t1"))
        .with_producer_id(producer.producer_id)
        .with_producer_epoch(producer.producer_epoch)
        .with_group_id(GroupId(StrBytes::from_static_str("billing")));
    assert_eq!(client.call(3, &offsets).await.error_code, 0);

    let open = describe(&mut client, "t1").await;
    assert_eq!(open.error_code, 0);
    assert_eq!(open.transaction_state.as_str(), "Ongoing");
    assert_eq!(open.transaction_timeout_ms, 60_000);
    assert!(open.transaction_start_time_ms > 0);
    let mut described: Vec<(String, Vec<i32>)> = open
        .topics
        .iter()
        .map(|t| (t.topic.to_string(), t.partitions.clone()))
        .collect();
    described.sort();
    assert_eq!(
        described,
        vec![
            ("__consumer_offsets".to_string(), vec![0]),
            (TOPIC.to_string(), vec![0, 1])
        ]
    );
    let listed = client
        .call(
            1,
            &ListTransactionsRequest::default()
                .with_state_filters(vec![StrBytes::from_static_str("Ongoing")])
                .with_duration_filter(-1),
        )
        .await;
    assert_eq!(listed.transaction_states.len(), 1);
    assert_eq!(listed.transaction_states[0].transactional_id.as_str(), "t1");

    let ended = end(&mut client, 3, "t1", producer.producer_id, 0, true).await;
    assert_eq!(ended.error_code, 0);
    wait_for_state(&mut client, "t1", "CompleteCommit").await;
    let retried = end(&mut client, 3, "t1", producer.producer_id, 0, true).await;
    assert_eq!(retried.error_code, 0, "a retried commit is answered");
    // A second producer with the same id fences the first.
    let second = init(&mut client, "t1", 60_000).await;
    assert_eq!(
        (second.producer_id, second.producer_epoch),
        (producer.producer_id, 1)
    );
    assert_eq!(
        add_v3(&mut client, "t1", &producer, &[0]).await,
        vec![ResponseError::ProducerFenced.code()]
    );

    // Restarted, the id keeps its producer and epoch.
    let dir = broker.stop_keeping_data().await;
    let broker = TestBroker::start_in(dir).await;
    let mut client = broker.client().await;
    wait_for_state(&mut client, "t1", "Empty").await;
    let after = describe(&mut client, "t1").await;
    assert_eq!(
        (after.producer_id, after.producer_epoch),
        (producer.producer_id, 1)
    );
    assert_eq!(
        describe(&mut client, "nobody").await.error_code,
        ResponseError::TransactionalIdNotFound.code()
    );
    // The coordinator's log is readable as an internal topic.
    let fetched = client
        .call(12, &fetch_request("__transaction_state", 0, 0, 1))
        .await;
    let records = &fetched.responses[0].partitions[0];
    assert_eq!(records.error_code, 0);
    assert!(records.high_watermark > 0);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_txn_v5_bumps_the_epoch_and_batched_adds_verify() {
    let broker = TestBroker::start().await;
    let mut client = broker.client().await;
    create_topic(&mut client, TOPIC, 1).await;
    let producer = init(&mut client, "t2", 60_000).await;
    assert_eq!(producer.error_code, 0);

    let batched = |verify_only: bool, epoch: i16| {
        AddPartitionsToTxnRequest::default().with_transactions(vec![
            AddPartitionsToTxnTransaction::default()
                .with_transactional_id(txn_id("t2"))
                .with_producer_id(producer.producer_id)
                .with_producer_epoch(epoch)
                .with_verify_only(verify_only)
                .with_topics(topics(&[0])),
        ])
    };
    let code = |r: &AddPartitionsToTxnResponse| {
        r.results_by_transaction[0].topic_results[0].results_by_partition[0].partition_error_code
    };
    let verified = client.call(5, &batched(true, 0)).await;
    assert_eq!(code(&verified), ResponseError::InvalidTxnState.code());
    assert_eq!(code(&client.call(5, &batched(false, 0)).await), 0);
    assert_eq!(code(&client.call(5, &batched(true, 0)).await), 0);

    let ended = end(&mut client, 5, "t2", producer.producer_id, 0, false).await;
    assert_eq!(ended.error_code, 0);
    assert_eq!(
        (ended.producer_id, ended.producer_epoch),
        (producer.producer_id, 1)
    );
    wait_for_state(&mut client, "t2", "CompleteAbort").await;
    // A retry with the old epoch gets the same answer; the new epoch begins the next
    // transaction.
    let old = end(&mut client, 5, "t2", producer.producer_id, 0, false).await;
    assert_eq!(old.error_code, 0, "a retry of the end is answered");
    assert_eq!(old.producer_epoch, 1);
    assert_eq!(code(&client.call(5, &batched(false, 1)).await), 0);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_transaction_is_aborted_after_its_timeout() {
    let broker = TestBroker::start_with(|c| {
        c.server.txn.transaction_abort_timed_out_check_interval_ms = 20;
    })
    .await;
    let mut client = broker.client().await;
    create_topic(&mut client, TOPIC, 1).await;
    let producer = init(&mut client, "t3", 100).await;
    assert_eq!(add_v3(&mut client, "t3", &producer, &[0]).await, vec![0]);
    wait_for_state(&mut client, "t3", "CompleteAbort").await;
    let fenced = describe(&mut client, "t3").await;
    assert_eq!(fenced.producer_epoch, 1, "the abandoned producer is fenced");
    let late = end(&mut client, 3, "t3", producer.producer_id, 0, true).await;
    assert_eq!(late.error_code, ResponseError::ProducerFenced.code());
    let too_long = init(&mut client, "t4", 900_001).await;
    assert_eq!(
        too_long.error_code,
        ResponseError::InvalidTransactionTimeout.code()
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_finalizes_transaction_version_2() {
    let broker = TestBroker::start().await;
    let mut client = broker.client().await;
    let v4 = client.call(4, &ApiVersionsRequest::default()).await;
    let feature = v4
        .finalized_features
        .iter()
        .find(|f| f.name.as_str() == "transaction.version")
        .expect("transaction.version finalized");
    assert_eq!(feature.max_version_level, 2);
    assert!(v4.finalized_features_epoch >= 0);
    let supported = v4
        .supported_features
        .iter()
        .find(|f| f.name.as_str() == "transaction.version")
        .expect("transaction.version supported");
    assert_eq!((supported.min_version, supported.max_version), (0, 2));
    let end_txn = v4
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::EndTxn as i16)
        .expect("EndTxn served");
    assert_eq!(end_txn.max_version, 5);
    // v3 clients refuse a supported range starting at 0: it is left out for them.
    let v3 = client.call(3, &ApiVersionsRequest::default()).await;
    assert!(v3.supported_features.is_empty());
    let finalized: Vec<&str> = v3
        .finalized_features
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(
        finalized,
        ["transaction.version", "group.version", "share.version"]
    );
    broker.stop().await;
}
