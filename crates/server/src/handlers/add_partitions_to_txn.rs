//! AddPartitionsToTxn: partitions join a transaction before the producer writes to
//! them (transactions version 1).
//!
//! v0-v3 are the client's form: one transactional id. v4+ is the batched form Kafka's
//! brokers send, several ids at once, each either adding its partitions or, with
//! `verify_only`, asking whether they are already in the transaction (one error per
//! partition). Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION and the
//! others of the same transaction OPERATION_NOT_ATTEMPTED, as Kafka answers; an
//! add is answered once it is durable in the coordinator's log.
//!
//! Authorization, as Kafka's: v0-v3 need Write on the transactional id (every
//! partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise) and on each topic (the
//! partitions of the others TOPIC_AUTHORIZATION_FAILED, before unknown topics are
//! looked for, and the rest OPERATION_NOT_ATTEMPTED); v4+, a broker's form, needs
//! ClusterAction on the cluster (CLUSTER_AUTHORIZATION_FAILED for the whole request).

use crate::authorize;
use crate::call::{pending, ready, Call, Ctx, Handler, HandlerError, Reply};
use crate::errors::txn_error_code;
use crate::requests::ErrorCodes;
use headway_auth::acl::Operation;
use headway_base::{PartitionIndex, ProducerEpoch, ProducerId, TopicPartition};
use headway_protocol::kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use headway_protocol::kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use headway_protocol::kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, TopicName,
};
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, Request};
use std::collections::BTreeSet;
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::AddPartitionsToTxn,
    min_version: 0,
    max_version: 5,
    handle,
};

/// From v4 the request carries several transactions.
const BATCHED_MIN_VERSION: i16 = 4;

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let body: AddPartitionsToTxnRequest = decode_body(request)?;
    let ctx = Arc::clone(call.ctx);
    let batched = request.api_version() >= BATCHED_MIN_VERSION;
    if batched {
        if let Some(code) = authorize::cluster_refusal(call, Operation::ClusterAction) {
            return ready(
                request,
                &AddPartitionsToTxnResponse::default().with_error_code(code),
            );
        }
    }
    let refused = match batched {
        true => Refused::default(),
        false => Refused {
            transactional_id: authorize::transactional_id_refusal(
                call,
                Operation::Write,
                &body.v3_and_below_transactional_id,
            )
            .is_some(),
            topics: authorize::denied_topics(
                call,
                Operation::Write,
                body.v3_and_below_topics.iter().map(|t| t.name.as_str()),
            ),
        },
    };
    if batched {
        // Another broker's checks, all over one connection: each starts now rather
        // than when its reply's turn comes, so they do not wait on each other's writes.
        // A task that did not finish answers no transaction, which the asking broker
        // takes as its coordinator not answering.
        let work = tokio::spawn(async move {
            let mut results = Vec::with_capacity(body.transactions.len());
            for txn in body.transactions {
                let topic_results = add_one(&ctx, &txn, &Refused::default()).await;
                results.push(
                    AddPartitionsToTxnResult::default()
                        .with_transactional_id(txn.transactional_id)
                        .with_topic_results(topic_results),
                );
            }
            AddPartitionsToTxnResponse::default().with_results_by_transaction(results)
        });
        return pending(request, async move { work.await.unwrap_or_default() });
    }
    pending(request, async move {
        {
            let txn = AddPartitionsToTxnTransaction::default()
                .with_transactional_id(body.v3_and_below_transactional_id)
                .with_producer_id(body.v3_and_below_producer_id)
                .with_producer_epoch(body.v3_and_below_producer_epoch)
                .with_topics(body.v3_and_below_topics);
            let topic_results = add_one(&ctx, &txn, &refused).await;
            AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topic_results)
        }
    })
}

/// What the principal may not do in a transaction's adds.
#[derive(Default)]
struct Refused {
    /// Write on the transactional id.
    transactional_id: bool,
    /// The topics it may not write.
    topics: BTreeSet<String>,
}

fn partitions_of(topics: &[AddPartitionsToTxnTopic]) -> Vec<TopicPartition> {
    topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| TopicPartition::new(t.name.to_string(), PartitionIndex::new(*p)))
        })
        .collect()
}

/// Whether `tp` exists: in a cluster by the metadata (this broker may hold no replica
/// of it, as it may not of the group's partition of `__consumer_offsets`).
fn partition_exists(ctx: &Ctx, tp: &TopicPartition) -> bool {
    match &ctx.cluster {
        Some(cluster) => cluster
            .image()
            .metadata
            .topics
            .get(&tp.topic)
            .is_some_and(|t| {
                usize::try_from(tp.partition.value()).is_ok_and(|i| i < t.partitions.len())
            }),
        None => ctx.broker.partition(&tp.topic, tp.partition).is_ok(),
    }
}

/// One transaction's adds (or verification): one code per partition, in the
/// request's order.
async fn add_one(
    ctx: &Ctx,
    txn: &AddPartitionsToTxnTransaction,
    refused: &Refused,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let partitions = partitions_of(&txn.topics);
    // Per partition, the error that stops the whole add, if any.
    let stopped: Vec<Option<i16>> = partitions
        .iter()
        .map(|tp| {
            if refused.topics.contains(&tp.topic) {
                Some(ResponseError::TopicAuthorizationFailed.code())
            } else if !partition_exists(ctx, tp) {
                Some(ResponseError::UnknownTopicOrPartition.code())
            } else {
                None
            }
        })
        .collect();
    let (id, producer_id, epoch) = (
        txn.transactional_id.as_str(),
        ProducerId::new(txn.producer_id.0),
        ProducerEpoch::new(txn.producer_epoch),
    );
    let codes: Vec<i16> = if refused.transactional_id {
        let code = ResponseError::TransactionalIdAuthorizationFailed.code();
        vec![code; partitions.len()]
    } else if stopped.iter().any(Option::is_some) {
        stopped
            .iter()
            .map(|s| s.unwrap_or(ResponseError::OperationNotAttempted.code()))
            .collect()
    } else if let Err(e) = ctx.txns.of(id) {
        vec![txn_error_code(&e); partitions.len()]
    } else if txn.verify_only {
        let verified = ctx
            .txns
            .of(id)
            .and_then(|c| c.verify_partitions(id, producer_id, epoch, &partitions));
        match verified {
            Ok(each) => each
                .iter()
                .map(|r| r.as_ref().err().map_or(0, txn_error_code))
                .collect(),
            Err(e) => vec![txn_error_code(&e); partitions.len()],
        }
    } else {
        let added = match ctx.txns.of(id) {
            Ok(c) => c.add_partitions(id, producer_id, epoch, &partitions).await,
            Err(e) => Err(e),
        };
        let code = match added {
            Ok(()) => 0,
            Err(e) => txn_error_code(&e),
        };
        vec![code; partitions.len()]
    };
    let mut codes = codes.into_iter();
    txn.topics
        .iter()
        .map(|t| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(TopicName(t.name.0.clone()))
                .with_results_by_partition(
                    t.partitions
                        .iter()
                        .map(|p| {
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(*p)
                                .with_partition_error_code(codes.next().unwrap_or(0))
                        })
                        .collect(),
                )
        })
        .collect()
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for AddPartitionsToTxnResponse {}
