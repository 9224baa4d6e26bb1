//! TxnOffsetCommit: a transactional producer commits a consumer group's offsets inside
//! its transaction (`sendOffsetsToTransaction`). The transaction coordinator first
//! checks the producer and that the group's offsets are in its open transaction (with
//! transactions version 2, v5+, the commit adds them itself); the group coordinator
//! then checks the member (KIP-447: generation and member id when the producer sends
//! them) and stores the offsets as pending in the transaction, answered once durable.
//! They count once the transaction commits. Offsets of a topic that does not exist get
//! UNKNOWN_TOPIC_OR_PARTITION, as in OffsetCommit.

use super::offset_commit::{partition_codes, Asked};
use crate::call::{pending, Call, Handler, HandlerError, Reply};
use crate::errors::txn_error_code;
use crate::requests::ErrorCodes;
use headway_base::{ProducerEpoch, ProducerId};
use headway_group::GenerationId;
use headway_protocol::kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use headway_protocol::{decode_body, Request};
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::TxnOffsetCommit,
    min_version: 0,
    max_version: 5,
    handle,
};

/// Lowest version of a producer running transactions version 2.
const TRANSACTIONS_V2_MIN_VERSION: i16 = 5;

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: TxnOffsetCommitRequest = decode_body(request)?;
    let implicit_add = request.api_version() >= TRANSACTIONS_V2_MIN_VERSION;
    let asked = Asked::of(
        call,
        &body.group_id,
        Some(&body.transactional_id),
        body.topics.iter().map(|t| {
            let partitions = t.partitions.iter().map(|p| {
                (
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    p.committed_metadata.as_ref().map(|m| m.to_string()),
                )
            });
            (t.name.to_string(), partitions.collect())
        }),
    );
    let ctx = Arc::clone(ctx);
    pending(request, async move {
        let (refused, entries) = (asked.refused, asked.entries);
        let producer_id = ProducerId::new(body.producer_id.0);
        let checked = crate::txn_checks::check_offset_commit(
            &ctx,
            &body.transactional_id,
            producer_id,
            ProducerEpoch::new(body.producer_epoch),
            &body.group_id,
            implicit_add,
        )
        .await
        .map_err(|e| txn_error_code(&e));
        let committed = match (checked, entries.is_empty()) {
            _ if asked.unauthorized.is_some() => Ok(Vec::new()),
            (Err(code), _) => Err(code),
            (Ok(()), true) => Ok(Vec::new()),
            (Ok(()), false) => match ctx.groups.of(&body.group_id) {
                Err(e) => Err(crate::errors::group_error_code(e)),
                Ok(coordinator) => coordinator
                    .txn_commit(
                        producer_id,
                        &body.group_id,
                        &body.member_id,
                        body.group_instance_id.as_deref(),
                        GenerationId::from_wire(body.generation_id),
                        entries,
                    )
                    .await
                    .map_err(crate::errors::group_error_code),
            },
        };
        let mut codes = partition_codes(&refused, asked.unauthorized, committed);
        let topics = body
            .topics
            .into_iter()
            .map(|t| {
                let partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        TxnOffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(codes.next().unwrap_or(0))
                    })
                    .collect();
                TxnOffsetCommitResponseTopic::default()
                    .with_name(t.name)
                    .with_partitions(partitions)
            })
            .collect();
        TxnOffsetCommitResponse::default().with_topics(topics)
    })
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for TxnOffsetCommitResponse {}
