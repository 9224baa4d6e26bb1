//! OffsetCommit: store a group's consumed positions. Answered after the commit's record
//! is durable in the offsets log. A member commits within its generation; a client
//! without a group membership (generation -1, no member id) may commit for a group that
//! has no members. Offsets of a topic that does not exist are refused with
//! UNKNOWN_TOPIC_OR_PARTITION, partition by partition, as Kafka does.

use super::{pending, Call, Handler, HandlerError, Reply};
use crate::errors::{error_code, group_code, group_error_code};
use headway_broker::{BrokerError, Offset, PartitionIndex, TopicPartition};
use headway_group::state::leader_epoch_from_wire;
use headway_group::{CommitEntry, GenerationId};
use headway_protocol::kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, OffsetCommitRequest, OffsetCommitResponse,
};
use headway_protocol::{decode_body, Request};
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::OffsetCommit,
    min_version: 2,
    max_version: 8,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: OffsetCommitRequest = decode_body(request)?;
    let entries: Vec<CommitEntry> = body
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| CommitEntry {
                topic_partition: TopicPartition::new(
                    t.name.to_string(),
                    PartitionIndex::new(p.partition_index),
                ),
                offset: Offset::new(p.committed_offset),
                leader_epoch: leader_epoch_from_wire(p.committed_leader_epoch),
                metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
            })
        })
        .collect();
    // As Kafka does, offsets of a topic that does not exist are not stored: those
    // partitions get UNKNOWN_TOPIC_OR_PARTITION and the others are committed.
    let known: Vec<bool> = entries
        .iter()
        .map(|e| ctx.broker.topic(&e.topic_partition.topic).is_some())
        .collect();
    let entries: Vec<CommitEntry> = entries
        .into_iter()
        .zip(&known)
        .filter_map(|(e, known)| known.then_some(e))
        .collect();
    let ctx = Arc::clone(ctx);
    pending(request, async move {
        let outcome = match entries.is_empty() {
            true => Ok(Vec::new()),
            false => {
                ctx.groups
                    .commit(
                        &body.group_id,
                        &body.member_id,
                        body.group_instance_id.as_deref(),
                        GenerationId::from_wire(body.generation_id_or_member_epoch),
                        entries,
                    )
                    .await
            }
        };
        // One code per partition, in request order.
        let committed: Vec<i16> = match outcome {
            Ok(results) => results.iter().map(|r| group_code(r.err())).collect(),
            Err(e) => vec![group_error_code(e); known.iter().filter(|k| **k).count()],
        };
        let mut committed = committed.into_iter();
        let unknown = error_code(&BrokerError::UnknownTopicOrPartition {
            topic: String::new(),
            partition: None,
        });
        let mut codes = known.into_iter().map(|known| match known {
            true => committed.next().unwrap_or(0),
            false => unknown,
        });
        let topics = body
            .topics
            .into_iter()
            .map(|t| {
                let partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(codes.next().unwrap_or(0))
                    })
                    .collect();
                OffsetCommitResponseTopic::default()
                    .with_name(t.name)
                    .with_partitions(partitions)
            })
            .collect();
        OffsetCommitResponse::default().with_topics(topics)
    })
}
