//! DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets: a
//! share group's start offsets (SPSO) per share-partition, as the Java Admin client's
//! `listShareGroupOffsets`, `alterShareGroupOffsets` and `deleteShareGroupOffsets`
//! use them. Alter and delete are for groups without members (NON_EMPTY_GROUP
//! otherwise); both are durable through the share state log before they are answered.
//!
//! Authorization, as Kafka's: describing needs Describe on the group and on each topic,
//! altering Read on the group and on each topic, deleting Delete on the group and Read
//! on each topic. A refused group is GROUP_AUTHORIZATION_FAILED, a refused topic's
//! partitions TOPIC_AUTHORIZATION_FAILED and left as they were.
//!
//! DescribeShareGroupOffsets version 1 adds each share-partition's lag
//! ([`headway_protocol::share_lag`]): the records from its start offset to the high
//! watermark, less those in flight already acknowledged or archived; -1 where it has
//! no state.

use crate::authorize;
use crate::call::{pending, ready, Call, Ctx, Handler, HandlerError, Reply};
use crate::errors::share_error_code;
use crate::requests::ErrorCodes;
use bytes::Bytes;
use headway_auth::acl::Operation;
use headway_base::{Offset, PartitionIndex, TopicPartition};
use headway_protocol::kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
};
use headway_protocol::kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic;
use headway_protocol::kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
};
use headway_protocol::kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, ApiKey,
    DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponse, TopicName,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::share_lag::{
    decode_describe_share_group_offsets, DescribeShareGroupOffsetsAnswer,
};
use headway_protocol::{decode_body, Request};
use headway_share::{PartitionSummary, ShareError};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const DESCRIBE: Handler = Handler {
    key: ApiKey::DescribeShareGroupOffsets,
    min_version: 0,
    max_version: 1,
    handle: describe,
};

pub const ALTER: Handler = Handler {
    key: ApiKey::AlterShareGroupOffsets,
    min_version: 0,
    max_version: 0,
    handle: alter,
};

pub const DELETE: Handler = Handler {
    key: ApiKey::DeleteShareGroupOffsets,
    min_version: 0,
    max_version: 0,
    handle: delete,
};

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn message(e: &ShareError) -> Option<StrBytes> {
    Some(StrBytes::from_string(e.to_string()))
}

/// Whether `topic` has partition `index` on this broker.
fn partition_exists(ctx: &Ctx, topic: &str, index: i32) -> bool {
    ctx.broker
        .topic(topic)
        .is_some_and(|t| t.partition(PartitionIndex::new(index)).is_some())
}

/// The tagged field with headway's counts of a share-partition: records in flight,
/// acquired now, archived and redelivered, four big-endian u64 (read by
/// `headway_client::SharePartitionStats`; other clients skip an unknown tag).
const SHARE_PARTITION_STATS_TAG: i32 = 0x4857;

fn stats(s: &PartitionSummary) -> Bytes {
    let mut out = Vec::with_capacity(32);
    for v in [s.in_flight, s.acquired, s.archived, s.redeliveries] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    Bytes::from(out)
}

/// Adds headway's share-partition counts as a tagged field.
fn with_stats(
    mut out: DescribeShareGroupOffsetsResponsePartition,
    s: &PartitionSummary,
) -> DescribeShareGroupOffsetsResponsePartition {
    out.unknown_tagged_fields
        .insert(SHARE_PARTITION_STATS_TAG, stats(s));
    out
}

/// A share-partition's lag: the records from its start offset to the high watermark,
/// less those in flight already acknowledged or archived.
fn lag(ctx: &Ctx, s: &PartitionSummary) -> i64 {
    let tp = &s.topic_partition;
    let Ok(p) = ctx.broker.partition(&tp.topic, tp.partition) else {
        return -1;
    };
    let waiting = (p.high_watermark().value() - s.start_offset.value()).max(0);
    (waiting - s.done.min(i64::MAX as u64) as i64).max(0)
}

fn describe(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body = decode_describe_share_group_offsets(request)?;
    // Each partition's lag, by group, topic and partition position (version 1).
    let mut lags: Vec<Vec<Vec<i64>>> = Vec::new();
    let groups = body
        .groups
        .into_iter()
        .map(|g| {
            lags.push(Vec::new());
            if let Some(code) = authorize::group_refusal(call, Operation::Describe, &g.group_id) {
                return DescribeShareGroupOffsetsResponseGroup::default()
                    .with_group_id(g.group_id)
                    .with_error_code(code);
            }
            let Some(described) = ctx.shares.describe(&g.group_id) else {
                return DescribeShareGroupOffsetsResponseGroup::default()
                    .with_group_id(g.group_id)
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(message(&ShareError::GroupIdNotFound));
            };
            let group_lags = lags.last_mut().expect("pushed above");
            let state: BTreeMap<TopicPartition, PartitionSummary> = described
                .partitions
                .into_iter()
                .map(|p| (p.topic_partition.clone(), p))
                .collect();
            // Asked for topics (or, with none named, every share-partition with state).
            let asked: Vec<(String, Vec<i32>)> = match g.topics {
                Some(topics) => topics
                    .into_iter()
                    .map(|t| (t.topic_name.to_string(), t.partitions))
                    .collect(),
                None => {
                    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                    for tp in state.keys() {
                        by_topic
                            .entry(tp.topic.clone())
                            .or_default()
                            .push(tp.partition.value());
                    }
                    by_topic.into_iter().collect()
                }
            };
            let topics = asked
                .into_iter()
                .map(|(topic, partitions)| {
                    let id = ctx.broker.topic(&topic).map(|t| t.id()).unwrap_or_default();
                    let refused = authorize::topic_refusal(call, Operation::Describe, &topic);
                    let (partitions, topic_lags): (Vec<_>, Vec<_>) = partitions
                        .into_iter()
                        .map(|p| {
                            let out = DescribeShareGroupOffsetsResponsePartition::default()
                                .with_partition_index(p)
                                .with_leader_epoch(0);
                            if let Some(code) = refused {
                                return (out.with_start_offset(-1).with_error_code(code), -1);
                            }
                            if !partition_exists(ctx, &topic, p) {
                                let code = ResponseError::UnknownTopicOrPartition.code();
                                return (out.with_start_offset(-1).with_error_code(code), -1);
                            }
                            let tp = TopicPartition::new(topic.as_str(), PartitionIndex::new(p));
                            match state.get(&tp) {
                                // -1 on the wire: no state for this share-partition.
                                None => (out.with_start_offset(-1), -1),
                                Some(s) => (
                                    with_stats(out.with_start_offset(s.start_offset.value()), s),
                                    lag(ctx, s),
                                ),
                            }
                        })
                        .unzip();
                    group_lags.push(topic_lags);
                    DescribeShareGroupOffsetsResponseTopic::default()
                        .with_topic_name(name(&topic))
                        .with_topic_id(id)
                        .with_partitions(partitions)
                })
                .collect();
            DescribeShareGroupOffsetsResponseGroup::default()
                .with_group_id(g.group_id)
                .with_topics(topics)
        })
        .collect();
    let answer = DescribeShareGroupOffsetsAnswer {
        body: DescribeShareGroupOffsetsResponse::default().with_groups(groups),
        lags,
    };
    ready(request, &answer)
}

fn alter(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = Arc::clone(call.ctx);
    let body: AlterShareGroupOffsetsRequest = decode_body(request)?;
    if let Some(code) = authorize::group_refusal(call, Operation::Read, &body.group_id) {
        let response = AlterShareGroupOffsetsResponse::default().with_error_code(code);
        return ready(request, &response);
    }
    let denied = authorize::denied_topics(
        call,
        Operation::Read,
        body.topics.iter().map(|t| t.topic_name.as_str()),
    );
    pending(request, async move {
        let group_id = body.group_id.to_string();
        // Per partition: the code it gets if the alteration as a whole goes through.
        let mut codes: Vec<(String, Vec<(i32, i16)>)> = Vec::new();
        let mut offsets = Vec::new();
        for t in &body.topics {
            let topic = t.topic_name.to_string();
            let mut parts = Vec::new();
            for p in &t.partitions {
                let code = if denied.contains(&topic) {
                    ResponseError::TopicAuthorizationFailed.code()
                } else if !partition_exists(&ctx, &topic, p.partition_index) {
                    ResponseError::UnknownTopicOrPartition.code()
                } else if p.start_offset < 0 {
                    ResponseError::InvalidRequest.code()
                } else {
                    offsets.push((
                        TopicPartition::new(topic.as_str(), PartitionIndex::new(p.partition_index)),
                        Offset::new(p.start_offset),
                    ));
                    0
                };
                parts.push((p.partition_index, code));
            }
            codes.push((topic, parts));
        }
        let failed = if ctx.groups.group_exists(&group_id) {
            // One namespace of group ids: a consumer group is not a share group.
            Some(ShareError::GroupIdNotFound)
        } else {
            ctx.shares.alter_offsets(&group_id, &offsets).await.err()
        };
        let top = failed.as_ref().map_or(0, share_error_code);
        let responses = codes
            .into_iter()
            .map(|(topic, parts)| {
                let id = ctx.broker.topic(&topic).map(|t| t.id()).unwrap_or_default();
                let partitions = parts
                    .into_iter()
                    .map(|(index, code)| {
                        let code = if code == 0 { top } else { code };
                        AlterShareGroupOffsetsResponsePartition::default()
                            .with_partition_index(index)
                            .with_error_code(code)
                    })
                    .collect();
                AlterShareGroupOffsetsResponseTopic::default()
                    .with_topic_name(name(&topic))
                    .with_topic_id(id)
                    .with_partitions(partitions)
            })
            .collect();
        AlterShareGroupOffsetsResponse::default()
            .with_error_code(top)
            .with_error_message(failed.as_ref().and_then(message))
            .with_responses(responses)
    })
}

fn delete(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = Arc::clone(call.ctx);
    let body: DeleteShareGroupOffsetsRequest = decode_body(request)?;
    if let Some(code) = authorize::group_refusal(call, Operation::Delete, &body.group_id) {
        let response = DeleteShareGroupOffsetsResponse::default().with_error_code(code);
        return ready(request, &response);
    }
    let denied = authorize::denied_topics(
        call,
        Operation::Read,
        body.topics.iter().map(|t| t.topic_name.as_str()),
    );
    pending(request, async move {
        let group_id = body.group_id.to_string();
        let names: Vec<String> = body
            .topics
            .iter()
            .map(|t| t.topic_name.to_string())
            .collect();
        let known: Vec<String> = names
            .iter()
            .filter(|t| !denied.contains(*t) && ctx.broker.topic(t).is_some())
            .cloned()
            .collect();
        let failed = if ctx.groups.group_exists(&group_id) {
            Some(ShareError::GroupIdNotFound)
        } else {
            ctx.shares.delete_offsets(&group_id, &known).await.err()
        };
        let top = failed.as_ref().map_or(0, share_error_code);
        let responses = names
            .iter()
            .map(|topic| {
                let t = ctx.broker.topic(topic);
                let code = match &t {
                    _ if denied.contains(topic) => ResponseError::TopicAuthorizationFailed.code(),
                    None => ResponseError::UnknownTopicOrPartition.code(),
                    Some(_) => top,
                };
                DeleteShareGroupOffsetsResponseTopic::default()
                    .with_topic_name(name(topic))
                    .with_topic_id(t.map(|t| t.id()).unwrap_or_default())
                    .with_error_code(code)
            })
            .collect();
        DeleteShareGroupOffsetsResponse::default()
            .with_error_code(top)
            .with_error_message(failed.as_ref().and_then(message))
            .with_responses(responses)
    })
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for AlterShareGroupOffsetsResponse {}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for DeleteShareGroupOffsetsResponse {}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for DescribeShareGroupOffsetsAnswer {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the client reads the counts the broker writes. Method: encode a summary
    /// here and decode it with headway-client.
    #[test]
    fn the_client_reads_the_share_partition_counts() {
        assert_eq!(
            SHARE_PARTITION_STATS_TAG,
            headway_client::SHARE_PARTITION_STATS_TAG
        );
        let summary = PartitionSummary {
            topic_partition: TopicPartition::new("t", PartitionIndex::new(0)),
            start_offset: Offset::new(3),
            end_offset: Offset::new(10),
            in_flight: 7,
            acquired: 5,
            done: 1,
            redeliveries: 2,
            archived: 1,
            deliveries: 9,
            accepted: 2,
            released: 1,
            rejected: 1,
        };
        let got = headway_client::SharePartitionStats::decode(&stats(&summary)).unwrap();
        assert_eq!(
            (got.in_flight, got.acquired, got.archived, got.redelivered),
            (7, 5, 1, 2)
        );
    }
}
