//! ShareGroupHeartbeat: a share group member joins (epoch 0), stays (its current
//! epoch), or leaves (-1); the answer carries its `simple` assignment when it changed.
//! The share-partitions of an assignment get their state (from
//! `share.auto.offset.reset`) before the answer goes out, so records produced after
//! a member was assigned are the group's.
//!
//! Needs Read on the group and Describe on each topic of the subscription, as a
//! consumer group's heartbeat does.

use crate::call::Ctx;
use crate::call::{pending, ready, Call, Handler, HandlerError, Reply};
use crate::errors::{group_error_code, share_error_code};
use crate::requests::ErrorCodes;
use headway_base::TopicPartition;
use headway_protocol::kafka_protocol::messages::share_group_heartbeat_response::{
    Assignment, TopicPartitions,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, Request};
use headway_share::{Heartbeat, TopicInfo};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::ShareGroupHeartbeat,
    min_version: 1,
    max_version: 1,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let (ctx, peer) = (call.ctx, call.conn.peer);
    let body: ShareGroupHeartbeatRequest = decode_body(request)?;
    if let Some(code) = coordinated_elsewhere(ctx, &body.group_id) {
        let response = ShareGroupHeartbeatResponse::default()
            .with_error_code(code)
            .with_member_epoch(body.member_epoch);
        return ready(request, &response);
    }
    if let Some(code) = super::consumer_group_heartbeat::subscription_refusal(
        call,
        &body.group_id,
        body.subscribed_topic_names
            .iter()
            .flatten()
            .map(|t| t.as_str()),
    ) {
        let response = ShareGroupHeartbeatResponse::default()
            .with_error_code(code)
            .with_member_epoch(body.member_epoch);
        return ready(request, &response);
    }
    let subscribed: Option<Vec<String>> = body
        .subscribed_topic_names
        .map(|names| names.iter().map(|n| n.to_string()).collect());
    let group_id = body.group_id.to_string();
    let hb = Heartbeat {
        group_id: group_id.clone(),
        member_id: body.member_id.to_string(),
        member_epoch: body.member_epoch,
        rack_id: body.rack_id.map(|r| r.to_string()),
        subscribed_topic_names: subscribed,
        client_id: request
            .header
            .client_id
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default(),
        client_host: format!("/{}", peer.ip()),
    };
    // One namespace of group ids: a consumer group's id is not a share group's.
    if ctx.groups.group_exists(&group_id) {
        let message = format!("group {group_id} is a consumer group, not a share group");
        let response = ShareGroupHeartbeatResponse::default()
            .with_error_code(ResponseError::GroupIdNotFound.code())
            .with_error_message(Some(StrBytes::from_string(message)))
            .with_member_epoch(body.member_epoch);
        return ready(request, &response);
    }
    let interval_ms = ctx.shares.group_config(&group_id).heartbeat_interval_ms;
    // Every topic any member of the group subscribes to could be in this member's
    // assignment only if it subscribes too, so its own topics are enough.
    let topics = known_topics(ctx, &ctx.shares, &group_id, &hb);
    let answer = ctx.shares.heartbeat(hb, &topics);
    let ctx = Arc::clone(ctx);
    pending(request, async move {
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                return ShareGroupHeartbeatResponse::default()
                    .with_error_code(share_error_code(&e))
                    .with_error_message(Some(StrBytes::from_string(e.to_string())))
                    .with_member_epoch(body.member_epoch)
                    .with_member_id(Some(body.member_id))
            }
        };
        let mut assignment = None;
        if let Some(assigned) = &answer.assignment {
            let mut partitions = Vec::new();
            let mut wire = Vec::new();
            for (topic, indexes) in assigned {
                let Some(t) = ctx.broker.topic(topic) else {
                    continue;
                };
                for &i in indexes {
                    // A share-partition's state is kept by the partition's leader.
                    let led_elsewhere = ctx
                        .cluster
                        .as_ref()
                        .is_some_and(|c| c.not_leader(topic, i).is_some());
                    if led_elsewhere {
                        continue;
                    }
                    if let Some(p) = t.partition(headway_base::PartitionIndex::new(i)) {
                        let tp = TopicPartition::new(topic.as_str(), p.index());
                        // In a cluster its state is read first; when the state cannot
                        // be read now, the first fetch starts it.
                        if let Some((epoch, true)) = p.role_epoch() {
                            if let Err(e) = ctx.shares.ensure_loaded(&group_id, &tp, epoch).await {
                                tracing::debug!(group = %group_id, %tp, error = %e, "share-partition not started at assignment");
                                continue;
                            }
                        }
                        partitions.push((tp, p.log_start_offset(), p.high_watermark()));
                    }
                }
                wire.push(
                    TopicPartitions::default()
                        .with_topic_id(t.id())
                        .with_partitions(indexes.clone()),
                );
            }
            if let Err(e) = ctx.shares.initialize(&group_id, &partitions).await {
                return ShareGroupHeartbeatResponse::default()
                    .with_error_code(share_error_code(&e))
                    .with_member_epoch(body.member_epoch)
                    .with_member_id(Some(body.member_id));
            }
            assignment = Some(Assignment::default().with_topic_partitions(wire));
        }
        ShareGroupHeartbeatResponse::default()
            .with_member_id(Some(StrBytes::from_string(answer.member_id)))
            .with_member_epoch(answer.member_epoch)
            .with_heartbeat_interval_ms(interval_ms)
            .with_assignment(assignment)
    })
}

/// In a cluster, where a share group's members are known to the group's coordinator
/// (the leader of its partition of `__consumer_offsets`, as for a consumer group): the
/// code that answers a membership request for `group_id` on another broker
/// (NOT_COORDINATOR, or COORDINATOR_LOAD_IN_PROGRESS while this one loads).
pub(crate) fn coordinated_elsewhere(ctx: &Ctx, group_id: &str) -> Option<i16> {
    ctx.cluster.as_ref()?;
    ctx.groups.of(group_id).err().map(group_error_code)
}

/// The topics (id and partition count) the member subscribes to, from the request
/// or, for a heartbeat without a subscription, from the member's last one.
fn known_topics(
    ctx: &crate::call::Ctx,
    shares: &headway_share::ShareCoordinator,
    group_id: &str,
    hb: &Heartbeat,
) -> BTreeMap<String, TopicInfo> {
    let names = match &hb.subscribed_topic_names {
        Some(names) => names.clone(),
        None => shares.subscription(group_id, &hb.member_id),
    };
    names
        .into_iter()
        .filter_map(|name| {
            let t = ctx.broker.topic(&name)?;
            let info = TopicInfo {
                id: t.id(),
                partitions: t.partitions().len() as u32,
            };
            Some((name, info))
        })
        .collect()
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for ShareGroupHeartbeatResponse {}
