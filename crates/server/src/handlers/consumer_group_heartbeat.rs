//! ConsumerGroupHeartbeat (KIP-848): a member of a consumer-protocol group joins,
//! heartbeats, changes its subscription and leaves with this one request; the answer
//! carries its member epoch and, when it changed, its assignment. Topics are named by
//! id on the wire and by name in the group coordinator: both directions are converted
//! here with the broker's topics at this moment. v1 adds `SubscribedTopicRegex` and has
//! the client choose its member id.
//!
//! Needs Read on the group (GROUP_AUTHORIZATION_FAILED) and Describe on every topic it
//! names in its subscription (TOPIC_AUTHORIZATION_FAILED), as Kafka checks it.

use super::join_group::{client_host, client_id};
use crate::authorize;
use crate::call::{pending, ready, Call, Ctx, Handler, HandlerError, Reply};
use crate::errors::group_error_code;
use crate::requests::ErrorCodes;
use headway_auth::acl::Operation;
use headway_group::consumer::{
    Assignment, HeartbeatAnswer, HeartbeatRequest, MemberEpochIn, TopicInfo, TopicsView,
};
use headway_group::GroupError;
use headway_protocol::kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment as WireAssignment, TopicPartitions,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, Request};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::ConsumerGroupHeartbeat,
    min_version: 0,
    max_version: 1,
    handle,
};

/// The broker's topics by name, with their ids and partition counts.
pub(super) fn topics_view(ctx: &Ctx) -> TopicsView {
    topics_view_of(&ctx.broker)
}

/// The topics of `broker` by name, with their ids and partition counts.
pub(crate) fn topics_view_of(broker: &headway_broker::Broker) -> TopicsView {
    broker
        .topics()
        .into_iter()
        .map(|t| {
            let info = TopicInfo {
                id: t.id(),
                partitions: t.partitions().len() as i32,
            };
            (t.name().to_string(), info)
        })
        .collect()
}

/// The refusal of a group member's heartbeat: without Read on the group, or without
/// Describe on a topic of its subscription (each denial counted).
pub(super) fn subscription_refusal<'a>(
    call: &Call<'_>,
    group_id: &str,
    topics: impl Iterator<Item = &'a str>,
) -> Option<i16> {
    authorize::group_refusal(call, Operation::Read, group_id).or_else(|| {
        let denied = authorize::denied_topics(call, Operation::Describe, topics);
        (!denied.is_empty()).then_some(ResponseError::TopicAuthorizationFailed.code())
    })
}

/// A group description's check on its topics, as Kafka's: the topics its members
/// subscribe to or are assigned must all be describable, or the group is answered
/// TOPIC_AUTHORIZATION_FAILED with no members. What is refused is not counted.
pub(super) fn topics_hidden<'a>(
    subject: &crate::authorizer::Subject,
    mut topics: impl Iterator<Item = &'a str>,
) -> Option<(i16, StrBytes)> {
    use headway_auth::acl::ResourceType;
    topics
        .any(|t| !subject.visible(Operation::Describe, ResourceType::Topic, t))
        .then(|| {
            (
                ResponseError::TopicAuthorizationFailed.code(),
                StrBytes::from_static_str(
                    "the group has topics the client is not authorized to describe",
                ),
            )
        })
}

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let (ctx, peer) = (call.ctx, call.conn.peer);
    let body: ConsumerGroupHeartbeatRequest = decode_body(request)?;
    if let Some(code) = subscription_refusal(
        call,
        &body.group_id,
        body.subscribed_topic_names
            .iter()
            .flatten()
            .map(|t| t.as_str()),
    ) {
        let response = ConsumerGroupHeartbeatResponse::default()
            .with_member_epoch(body.member_epoch)
            .with_error_code(code);
        return ready(request, &response);
    }
    let topics = topics_view(ctx);
    let names: BTreeMap<_, _> = topics.iter().map(|(n, t)| (t.id, n.clone())).collect();
    let owned = body.topic_partitions.map(|tps| {
        let mut owned = Assignment::new();
        for tp in tps {
            if let Some(name) = names.get(&tp.topic_id) {
                owned
                    .entry(name.clone())
                    .or_default()
                    .extend(tp.partitions.iter().copied());
            }
        }
        owned
    });
    let response = ConsumerGroupHeartbeatResponse::default().with_member_epoch(body.member_epoch);
    let Some(member_epoch) = MemberEpochIn::from_wire(body.member_epoch) else {
        let code = group_error_code(GroupError::InvalidRequest);
        return ready(request, &response.with_error_code(code));
    };
    let req = HeartbeatRequest {
        group_id: body.group_id.to_string(),
        member_id: body.member_id.to_string(),
        member_epoch,
        instance_id: body.instance_id.map(|s| s.to_string()),
        rack_id: body.rack_id.map(|s| s.to_string()),
        // -1 on the wire: unchanged since the last heartbeat.
        rebalance_timeout_ms: Some(body.rebalance_timeout_ms).filter(|t| *t >= 0),
        subscribed_topic_names: body
            .subscribed_topic_names
            .map(|ts| ts.into_iter().map(|t| t.to_string()).collect()),
        subscribed_topic_regex: body.subscribed_topic_regex.map(|s| s.to_string()),
        server_assignor: body.server_assignor.map(|s| s.to_string()),
        owned,
        client_id: client_id(request),
        client_host: client_host(peer),
    };
    // One namespace of group ids: a share group's id is not a consumer group's.
    if ctx.shares.group_exists(&req.group_id) {
        let message = format!(
            "group {} is a share group, not a consumer group",
            req.group_id
        );
        let response = response
            .with_error_code(group_error_code(GroupError::GroupIdNotFound))
            .with_error_message(Some(StrBytes::from_string(message)));
        return ready(request, &response);
    }
    let ctx = Arc::clone(ctx);
    pending(request, async move {
        let answer = match ctx.groups.of(&req.group_id) {
            Ok(coordinator) => coordinator.consumer_heartbeat(&req, &topics).await,
            Err(e) => Err(e),
        };
        encode(&ctx, &req.group_id, response, answer, &topics)
    })
}

/// The answer of a heartbeat, with topic names turned back into ids.
fn encode(
    ctx: &Ctx,
    group_id: &str,
    response: ConsumerGroupHeartbeatResponse,
    answer: Result<HeartbeatAnswer, GroupError>,
    topics: &TopicsView,
) -> ConsumerGroupHeartbeatResponse {
    match answer {
        Err(e) => response
            .with_error_code(group_error_code(e))
            .with_error_message(Some(StrBytes::from_string(e.to_string()))),
        Ok(HeartbeatAnswer::Left {
            member_id,
            static_leave,
        }) => response
            .with_member_id(Some(StrBytes::from_string(member_id)))
            .with_member_epoch(if static_leave { -2 } else { -1 }),
        Ok(HeartbeatAnswer::Member {
            member_id,
            member_epoch,
            assignment,
        }) => response
            .with_member_id(Some(StrBytes::from_string(member_id)))
            .with_member_epoch(member_epoch)
            .with_heartbeat_interval_ms(
                ctx.groups
                    .of(group_id)
                    .map_or(ctx.groups.default_heartbeat_interval_ms(), |c| {
                        c.consumer_heartbeat_interval_ms(group_id)
                    }),
            )
            .with_assignment(assignment.map(|a| {
                WireAssignment::default().with_topic_partitions(
                    a.into_iter()
                        .filter_map(|(name, ps)| {
                            let id = topics.get(&name)?.id;
                            Some(
                                TopicPartitions::default()
                                    .with_topic_id(id)
                                    .with_partitions(ps.into_iter().collect()),
                            )
                        })
                        .collect(),
                )
            })),
    }
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for ConsumerGroupHeartbeatResponse {}
