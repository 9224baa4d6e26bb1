//! ConsumerGroupDescribe (KIP-848): a consumer-protocol group's epochs, assignor and
//! members, each with its subscription, current assignment and target assignment.
//! A group id that is not a consumer-protocol group answers GROUP_ID_NOT_FOUND, as
//! Kafka does. Each group needs Describe on it (GROUP_AUTHORIZATION_FAILED), and a
//! group with a topic the principal may not describe is answered
//! TOPIC_AUTHORIZATION_FAILED without its members, as Kafka does.

use super::consumer_group_heartbeat::{topics_hidden, topics_view};
use crate::authorize;
use crate::call::{ready, Call, Handler, HandlerError, Reply};
use crate::errors::group_error_code;
use crate::requests::ErrorCodes;
use headway_auth::acl::Operation;
use headway_group::consumer::{Assignment, TopicsView};
use headway_group::GroupError;
use headway_protocol::kafka_protocol::messages::consumer_group_describe_response::{
    Assignment as WireAssignment, DescribedGroup, Member, TopicPartitions,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, TopicName,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::{decode_body, Request};

pub const HANDLER: Handler = Handler {
    key: ApiKey::ConsumerGroupDescribe,
    min_version: 0,
    max_version: 1,
    handle,
};

/// Kafka's "not authorized operations requested" value.
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;
/// `MemberType` of a member of the consumer protocol (v1).
const MEMBER_TYPE_CONSUMER: i8 = 1;
/// `MemberType` of a classic member of a consumer group (online conversion, v1).
const MEMBER_TYPE_CLASSIC: i8 = 0;

fn wire(assignment: &Assignment, topics: &TopicsView) -> WireAssignment {
    WireAssignment::default().with_topic_partitions(
        assignment
            .iter()
            .filter_map(|(name, ps)| {
                let id = topics.get(name)?.id;
                Some(
                    TopicPartitions::default()
                        .with_topic_id(id)
                        .with_topic_name(TopicName(StrBytes::from_string(name.clone())))
                        .with_partitions(ps.iter().copied().collect()),
                )
            })
            .collect(),
    )
}

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: ConsumerGroupDescribeRequest = decode_body(request)?;
    let topics = topics_view(ctx);
    let subject = authorize::subject(call);
    let groups = body
        .group_ids
        .into_iter()
        .map(|id| {
            let described = DescribedGroup::default()
                .with_group_id(id.clone())
                .with_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
            if let Some(code) = authorize::group_refusal(call, Operation::Describe, &id) {
                return described.with_error_code(code);
            }
            let coordinator = match ctx.groups.of(&id) {
                Ok(c) => c,
                Err(e) => return described.with_error_code(group_error_code(e)),
            };
            let Some(g) = coordinator.consumer_group(&id) else {
                let e = GroupError::GroupIdNotFound;
                let message = format!("group {} is not a consumer group", id.as_str());
                return described
                    .with_group_state(StrBytes::from_static_str("Dead"))
                    .with_error_code(group_error_code(e))
                    .with_error_message(Some(StrBytes::from_string(message)));
            };
            let empty = Assignment::new();
            let named = g.members.values().flat_map(|m| {
                let target = g.target.get(&m.member_id).unwrap_or(&empty);
                m.subscribed_topic_names
                    .iter()
                    .chain(m.assigned.keys())
                    .chain(target.keys())
                    .map(String::as_str)
            });
            if let Some((code, message)) = topics_hidden(&subject, named) {
                return described
                    .with_error_code(code)
                    .with_error_message(Some(message));
            }
            let members = g
                .members
                .values()
                .map(|m| {
                    Member::default()
                        .with_member_id(StrBytes::from_string(m.member_id.clone()))
                        .with_instance_id(m.instance_id.clone().map(StrBytes::from_string))
                        .with_rack_id(m.rack_id.clone().map(StrBytes::from_string))
                        .with_member_epoch(m.member_epoch)
                        .with_client_id(StrBytes::from_string(m.client_id.clone()))
                        .with_client_host(StrBytes::from_string(m.client_host.clone()))
                        .with_subscribed_topic_names(
                            m.subscribed_topic_names
                                .iter()
                                .map(|t| TopicName(StrBytes::from_string(t.clone())))
                                .collect(),
                        )
                        .with_subscribed_topic_regex(
                            m.subscribed_topic_regex.clone().map(StrBytes::from_string),
                        )
                        .with_assignment(wire(&m.assigned, &topics))
                        .with_target_assignment(wire(
                            g.target.get(&m.member_id).unwrap_or(&empty),
                            &topics,
                        ))
                        .with_member_type(match m.classic {
                            Some(_) => MEMBER_TYPE_CLASSIC,
                            None => MEMBER_TYPE_CONSUMER,
                        })
                })
                .collect();
            described
                .with_group_state(StrBytes::from_static_str(g.state().name()))
                .with_group_epoch(g.group_epoch)
                .with_assignment_epoch(g.assignment_epoch)
                .with_assignor_name(StrBytes::from_static_str(g.assignor.name()))
                .with_members(members)
        })
        .collect();
    ready(
        request,
        &ConsumerGroupDescribeResponse::default().with_groups(groups),
    )
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for ConsumerGroupDescribeResponse {}
