//! DescribeTransactions: each transactional id's state, producer, timeout, start time
//! and partitions (TRANSACTIONAL_ID_NOT_FOUND for an unknown id). Each id needs Describe
//! on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); its partitions of topics the principal
//! may not describe are left out, as Kafka does.

use crate::authorize;
use crate::authorizer::Subject;
use crate::call::{ready, Call, Handler, HandlerError, Reply};
use crate::errors::txn_error_code;
use crate::requests::ErrorCodes;
use headway_auth::acl::{Operation, ResourceType};
use headway_base::{ProducerEpoch, ProducerId};
use headway_protocol::kafka_protocol::messages::describe_transactions_response::{
    TopicData, TransactionState,
};
use headway_protocol::kafka_protocol::messages::{
    self, ApiKey, DescribeTransactionsRequest, DescribeTransactionsResponse, TopicName,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::{decode_body, Request};
use headway_txn::TxnMetadata;
use std::collections::BTreeMap;

pub const HANDLER: Handler = Handler {
    key: ApiKey::DescribeTransactions,
    min_version: 0,
    max_version: 0,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let body: DescribeTransactionsRequest = decode_body(request)?;
    let ids: Vec<String> = body
        .transactional_ids
        .iter()
        .map(|id| id.to_string())
        .collect();
    let refused: Vec<Option<i16>> = ids
        .iter()
        .map(|id| authorize::transactional_id_refusal(call, Operation::Describe, id))
        .collect();
    let described = call.ctx.txns.describe(&ids);
    let subject = authorize::subject(call);
    let states = body
        .transactional_ids
        .into_iter()
        .zip(described)
        .zip(refused)
        .map(|((id, result), refused)| match (refused, result) {
            (Some(code), _) => TransactionState::default()
                .with_transactional_id(id)
                .with_error_code(code)
                .with_producer_id(messages::ProducerId(-1))
                .with_producer_epoch(-1)
                .with_transaction_start_time_ms(-1),
            (None, Ok(meta)) => state(&meta, &subject).with_transactional_id(id),
            (None, Err(e)) => TransactionState::default()
                .with_transactional_id(id)
                .with_error_code(txn_error_code(&e))
                .with_producer_id(messages::ProducerId(-1))
                .with_producer_epoch(-1)
                .with_transaction_start_time_ms(-1),
        })
        .collect();
    ready(
        request,
        &DescribeTransactionsResponse::default().with_transaction_states(states),
    )
}

fn state(meta: &TxnMetadata, subject: &Subject) -> TransactionState {
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    let describable =
        |topic: &str| subject.visible(Operation::Describe, ResourceType::Topic, topic);
    for tp in meta.partitions.iter().filter(|tp| describable(&tp.topic)) {
        topics
            .entry(tp.topic.as_str())
            .or_default()
            .push(tp.partition.value());
    }
    TransactionState::default()
        .with_transaction_state(StrBytes::from_static_str(meta.state.name()))
        .with_transaction_timeout_ms(meta.timeout_ms)
        .with_transaction_start_time_ms(meta.start_time_ms.unwrap_or(-1))
        .with_producer_id(messages::ProducerId(ProducerId::to_wire(Some(
            meta.producer_id,
        ))))
        .with_producer_epoch(ProducerEpoch::to_wire(Some(meta.producer_epoch)))
        .with_topics(
            topics
                .into_iter()
                .map(|(topic, partitions)| {
                    TopicData::default()
                        .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                        .with_partitions(partitions)
                })
                .collect(),
        )
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for DescribeTransactionsResponse {}
