//! ShareAcknowledge: a share group member acknowledges records it acquired (accept,
//! release, reject, or a gap), outside a fetch. It carries the member's share session
//! epoch: the session must be open (epoch 0 is refused), and -1 closes it once the
//! acknowledgements are applied, releasing the member's other locks. Answered once
//! the resulting state is durable. Authorized as ShareFetch is: Read on the group and
//! on each topic acknowledged.
//!
//! Versions 1 and 2 ([`headway_protocol::share_v2`]): version 2 carries IsRenewAck (the
//! acknowledgements hold renewals, type 4, which any version applies) and answers with
//! the lock duration (AcquisitionLockTimeoutMs), from which the client times its
//! renewals.

use super::share_fetch::{ack_batch, acknowledge, named, refuse_acks, unreadable, Acks};
use crate::authorize;
use crate::call::{pending, Call, Handler, HandlerError, Reply};
use crate::errors::share_error_code;
use crate::requests::ErrorCodes;
use headway_auth::acl::Operation;
use headway_protocol::kafka_protocol::messages::share_acknowledge_response::{
    LeaderIdAndEpoch, PartitionData, ShareAcknowledgeTopicResponse,
};
use headway_protocol::kafka_protocol::messages::{ApiKey, ShareAcknowledgeResponse};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::share_v2::{decode_share_acknowledge, ShareAcknowledgeAnswer};
use headway_protocol::Request;
use headway_share::ShareError;
use std::collections::BTreeMap;
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::ShareAcknowledge,
    min_version: 1,
    max_version: 2,
    handle,
};

fn error_response(code: i16, message: String) -> ShareAcknowledgeAnswer {
    ShareAcknowledgeAnswer {
        body: ShareAcknowledgeResponse::default()
            .with_error_code(code)
            .with_error_message(Some(StrBytes::from_string(message))),
        acquisition_lock_timeout_ms: 0,
    }
}

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    // IsRenewAck only tells what the acknowledgements hold; they are applied alike.
    let (body, _is_renew_ack) = decode_share_acknowledge(request)?;
    let (Some(group_id), Some(member_id)) = (body.group_id.clone(), body.member_id.clone()) else {
        let e = error_response(
            ResponseError::InvalidRequest.code(),
            "an acknowledgement names its group and member".into(),
        );
        return pending(request, async move { e });
    };
    let (group_id, member_id) = (group_id.to_string(), member_id.to_string());
    if let Some(code) = authorize::group_refusal(call, Operation::Read, &group_id) {
        let e = error_response(code, format!("not authorized to read group {group_id}"));
        return pending(request, async move { e });
    }
    let epoch = body.share_session_epoch;
    let session = match epoch {
        0 => Err(ShareError::InvalidShareSessionEpoch {
            got: 0,
            expected: 1,
        }),
        _ => ctx
            .shares
            .session_step(&group_id, &member_id, epoch, &[], &[]),
    };
    tracing::debug!(group = %group_id, member = %member_id, epoch, ok = session.is_ok(), "share acknowledge");
    if let Err(e) = session {
        let body = error_response(share_error_code(&e), e.to_string());
        return pending(request, async move { body });
    }
    let mut acks: Acks = body
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                let batches = p
                    .acknowledgement_batches
                    .iter()
                    .map(|b| ack_batch(b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                    .collect();
                ((t.topic_id, p.partition_index), batches)
            })
        })
        .map(|(key, batches)| (key, named(ctx, key.0, key.1), batches))
        .collect();
    let denied = unreadable(call, acks.iter().map(|((id, _), ..)| *id));
    let refused = refuse_acks(&mut acks, &denied);
    let ctx = Arc::clone(ctx);
    pending(request, async move {
        let mut codes = acknowledge(&ctx.shares, &group_id, &member_id, acks).await;
        codes.extend(refused);
        tracing::debug!(group = %group_id, member = %member_id, epoch, ?codes, "share acknowledge applied");
        if epoch == -1 {
            ctx.shares.release_member(&group_id, &member_id);
        }
        let node_id = ctx.broker.config().node_id;
        let mut by_topic: BTreeMap<uuid::Uuid, Vec<PartitionData>> = BTreeMap::new();
        for ((id, index), code) in codes {
            by_topic.entry(id).or_default().push(
                PartitionData::default()
                    .with_partition_index(index)
                    .with_error_code(code)
                    .with_current_leader(
                        LeaderIdAndEpoch::default()
                            .with_leader_id(node_id)
                            .with_leader_epoch(0),
                    ),
            );
        }
        let lock_ms = ctx
            .shares
            .group_config(&group_id)
            .partition
            .record_lock_duration_ms;
        ShareAcknowledgeAnswer {
            body: ShareAcknowledgeResponse::default().with_responses(
                by_topic
                    .into_iter()
                    .map(|(id, partitions)| {
                        ShareAcknowledgeTopicResponse::default()
                            .with_topic_id(id)
                            .with_partitions(partitions)
                    })
                    .collect(),
            ),
            acquisition_lock_timeout_ms: lock_ms.min(i64::from(i32::MAX)) as i32,
        }
    })
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for ShareAcknowledgeAnswer {}
