//! OffsetForLeaderEpoch (KIP-101, KIP-320): where a leader epoch ended in the
//! partition's log, so that a consumer can tell whether its position survived a change
//! of leader, and a follower where its log parts from its leader's. Answered by the
//! partition's leader from its epoch history (`docs/cluster.md`); a partition on a
//! broker that runs alone has been led by epoch 0 from its start. The request's current
//! leader epoch (v2+) is checked first (`FENCED_LEADER_EPOCH`, `UNKNOWN_LEADER_EPOCH`).
//! A follower's request (a replica id, v3+) needs `ClusterAction` on the cluster, a
//! consumer's `Describe` on the topic. In a cluster, a partition the controller's
//! metadata has led by another broker answers `NOT_LEADER_OR_FOLLOWER`.

use crate::authorize;
use crate::call::{ready, Call, Handler, HandlerError, Reply};
use crate::errors::error_code;
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_base::PartitionIndex;
use headway_broker::BrokerError;
use headway_log::leader_epochs::{UNDEFINED_EPOCH, UNDEFINED_OFFSET};
use headway_protocol::kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
};
use headway_protocol::{decode_body, Request};

pub const HANDLER: Handler = Handler {
    key: ApiKey::OffsetForLeaderEpoch,
    min_version: 2,
    max_version: 4,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let body: OffsetForLeaderEpochRequest = decode_body(request)?;
    let follower = body.replica_id.0 >= 0;
    let cluster_action = !follower || authorize::cluster(call, Operation::ClusterAction);
    let mut topics = Vec::with_capacity(body.topics.len());
    for t in body.topics {
        let describable = authorize::topic(call, Operation::Describe, &t.topic);
        let partitions = t
            .partitions
            .into_iter()
            .map(|p| {
                let answer = EpochEndOffset::default().with_partition(p.partition);
                let found = if !cluster_action {
                    Err(authorize::cluster_denied())
                } else if !describable {
                    Err(authorize::topic_denied(&t.topic))
                } else {
                    end_offset(
                        call,
                        &t.topic,
                        p.partition,
                        p.current_leader_epoch,
                        p.leader_epoch,
                    )
                };
                match found {
                    Ok((epoch, end_offset)) => {
                        answer.with_leader_epoch(epoch).with_end_offset(end_offset)
                    }
                    Err(e) => answer
                        .with_error_code(error_code(&e))
                        .with_leader_epoch(UNDEFINED_EPOCH)
                        .with_end_offset(UNDEFINED_OFFSET),
                }
            })
            .collect();
        topics.push(
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic)
                .with_partitions(partitions),
        );
    }
    let response = OffsetForLeaderEpochResponse::default().with_topics(topics);
    ready(request, &response)
}

/// The end of `leader_epoch` in one partition's log, after the leader checks.
fn end_offset(
    call: &Call<'_>,
    topic: &str,
    partition: i32,
    current_leader_epoch: i32,
    leader_epoch: i32,
) -> Result<(i32, i64), BrokerError> {
    // In a cluster, the controller's metadata says who leads, before any role is set.
    if let Some(not_leader) = call
        .ctx
        .cluster
        .as_ref()
        .and_then(|c| c.not_leader(topic, partition))
    {
        return Err(not_leader);
    }
    let partition = call
        .ctx
        .broker
        .readable_partition(topic, PartitionIndex::new(partition))?;
    partition.check_leading()?;
    partition.check_leader_epoch(Some(current_leader_epoch))?;
    partition.end_offset_for_epoch(leader_epoch)
}

impl ErrorCodes for OffsetForLeaderEpochResponse {
    fn error_codes(&self, codes: &mut Codes) {
        self.topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| codes.add(p.error_code));
    }
}
