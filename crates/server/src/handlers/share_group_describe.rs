//! ShareGroupDescribe: a share group's state, epochs and members with their
//! assignments. Each group needs Describe on it, and its topics are checked as a
//! consumer group's are (ConsumerGroupDescribe).

use super::consumer_group_heartbeat::topics_hidden;
use crate::authorize;
use crate::call::{ready, Call, Handler, HandlerError, Reply};
use crate::requests::ErrorCodes;
use headway_auth::acl::Operation;
use headway_protocol::kafka_protocol::messages::share_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, ShareGroupDescribeRequest, ShareGroupDescribeResponse, TopicName,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, Request};

pub const HANDLER: Handler = Handler {
    key: ApiKey::ShareGroupDescribe,
    min_version: 1,
    max_version: 1,
    handle,
};

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: ShareGroupDescribeRequest = decode_body(request)?;
    let subject = authorize::subject(call);
    let groups = body
        .group_ids
        .into_iter()
        .map(|id| {
            if let Some(code) = authorize::group_refusal(call, Operation::Describe, &id) {
                return DescribedGroup::default()
                    .with_group_id(id)
                    .with_error_code(code)
                    .with_authorized_operations(i32::MIN);
            }
            if let Some(code) = super::share_group_heartbeat::coordinated_elsewhere(ctx, &id) {
                return DescribedGroup::default()
                    .with_group_id(id)
                    .with_error_code(code)
                    .with_authorized_operations(i32::MIN);
            }
            let Some(g) = ctx.shares.describe(&id) else {
                return DescribedGroup::default()
                    .with_group_id(id)
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_group_state(StrBytes::from_static_str("Dead"));
            };
            let named = g.members.iter().flat_map(|m| {
                m.subscribed
                    .iter()
                    .chain(m.assignment.keys())
                    .map(String::as_str)
            });
            if let Some((code, message)) = topics_hidden(&subject, named) {
                return DescribedGroup::default()
                    .with_group_id(id)
                    .with_error_code(code)
                    .with_error_message(Some(message))
                    .with_authorized_operations(i32::MIN);
            }
            let members = g
                .members
                .into_iter()
                .map(|m| {
                    let assigned = m
                        .assignment
                        .iter()
                        .filter_map(|(topic, partitions)| {
                            let t = ctx.broker.topic(topic)?;
                            Some(
                                TopicPartitions::default()
                                    .with_topic_id(t.id())
                                    .with_topic_name(name(topic))
                                    .with_partitions(partitions.clone()),
                            )
                        })
                        .collect();
                    Member::default()
                        .with_member_id(StrBytes::from_string(m.member_id))
                        .with_rack_id(m.rack_id.map(StrBytes::from_string))
                        .with_member_epoch(m.member_epoch)
                        .with_client_id(StrBytes::from_string(m.client_id))
                        .with_client_host(StrBytes::from_string(m.client_host))
                        .with_subscribed_topic_names(m.subscribed.iter().map(|t| name(t)).collect())
                        .with_assignment(Assignment::default().with_topic_partitions(assigned))
                })
                .collect();
            DescribedGroup::default()
                .with_group_id(id)
                .with_group_state(StrBytes::from_static_str(g.state))
                .with_group_epoch(g.group_epoch)
                .with_assignment_epoch(g.group_epoch)
                .with_assignor_name(StrBytes::from_static_str("simple"))
                .with_members(members)
                .with_authorized_operations(i32::MIN)
        })
        .collect();
    ready(
        request,
        &ShareGroupDescribeResponse::default().with_groups(groups),
    )
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for ShareGroupDescribeResponse {}
