//! OffsetCommit: store a group's consumed positions. Answered after the commit's record
//! is durable in the offsets log. A member commits within its generation; a client
//! without a group membership (generation -1, no member id) may commit for a group that
//! has no members. Offsets of a topic that does not exist are refused with
//! UNKNOWN_TOPIC_OR_PARTITION, partition by partition, as Kafka does. In a group of
//! the consumer protocol (v9+) the generation field carries the member epoch, checked
//! against the member's (STALE_MEMBER_EPOCH, FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID).

use crate::authorize;
use crate::call::{pending, Call, Handler, HandlerError, Reply};
use crate::errors::{error_code, group_code, group_error_code};
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_base::{Offset, PartitionIndex, TopicPartition};
use headway_broker::BrokerError;
use headway_group::state::leader_epoch_from_wire;
use headway_group::{CommitEntry, GenerationId, GroupError};
use headway_protocol::kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, OffsetCommitRequest, OffsetCommitResponse,
};
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, Request};
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::OffsetCommit,
    min_version: 2,
    max_version: 9,
    handle,
};

/// From v9 the generation field is a consumer-protocol member's epoch; a member of such
/// a group must commit with v9 or later (UNSUPPORTED_VERSION below), as Kafka requires.
const MEMBER_EPOCH_MIN_VERSION: i16 = 9;

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: OffsetCommitRequest = decode_body(request)?;
    let asked = Asked::of(
        call,
        &body.group_id,
        None,
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
    let too_old = request.api_version() < MEMBER_EPOCH_MIN_VERSION
        && !body.member_id.is_empty()
        && ctx
            .groups
            .of(&body.group_id)
            .is_ok_and(|c| c.commits_with_member_epoch(&body.group_id, &body.member_id));
    let ctx = Arc::clone(ctx);
    pending(request, async move {
        let (refused, entries) = (asked.refused, asked.entries);
        let outcome = match entries.is_empty() {
            true => Ok(Vec::new()),
            false if too_old => Err(GroupError::UnsupportedVersion),
            false => match ctx.groups.of(&body.group_id) {
                Err(e) => Err(e),
                Ok(coordinator) => {
                    coordinator
                        .commit(
                            &body.group_id,
                            &body.member_id,
                            body.group_instance_id.as_deref(),
                            GenerationId::from_wire(body.generation_id_or_member_epoch),
                            entries,
                        )
                        .await
                }
            },
        };
        let committed = outcome.map_err(group_error_code);
        let mut codes = partition_codes(&refused, asked.unauthorized, committed);
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

/// The partitions a commit names, as (topic, [(partition, offset, leader epoch,
/// metadata)]) in request order.
pub(super) type Named = (String, Vec<(i32, i64, i32, Option<String>)>);

/// A commit's entries: those of existing topics, and for each named partition in
/// request order whether its topic exists.
pub(super) struct Asked {
    /// Per partition, in request order: `Some(code)` when it is refused before the
    /// commit (an unknown topic, a topic the principal may not read).
    pub refused: Vec<Option<i16>>,
    pub entries: Vec<CommitEntry>,
    /// GROUP_AUTHORIZATION_FAILED (or the transactional id's) for every partition.
    pub unauthorized: Option<i16>,
}

impl Asked {
    /// As Kafka does, offsets of a topic that does not exist are not stored: those
    /// partitions get UNKNOWN_TOPIC_OR_PARTITION and the others are committed. The
    /// principal needs Read on the group and on each topic (and Write on the
    /// transactional id of a transactional commit, `transactional`).
    pub fn of(
        call: &Call<'_>,
        group_id: &str,
        transactional: Option<&str>,
        topics: impl Iterator<Item = Named>,
    ) -> Asked {
        let unauthorized = transactional
            .and_then(|id| authorize::transactional_id_refusal(call, Operation::Write, id))
            .or_else(|| authorize::group_refusal(call, Operation::Read, group_id));
        let unknown = error_code(&BrokerError::UnknownTopicOrPartition {
            topic: String::new(),
            partition: None,
        });
        let mut refused = Vec::new();
        let mut entries = Vec::new();
        for (topic, partitions) in topics {
            let refusal = if !authorize::topic(call, Operation::Read, &topic) {
                Some(ResponseError::TopicAuthorizationFailed.code())
            } else {
                call.ctx.broker.topic(&topic).is_none().then_some(unknown)
            };
            for (partition, offset, leader_epoch, metadata) in partitions {
                refused.push(refusal);
                if refusal.is_none() && unauthorized.is_none() {
                    entries.push(CommitEntry {
                        topic_partition: TopicPartition::new(
                            topic.clone(),
                            PartitionIndex::new(partition),
                        ),
                        offset: Offset::new(offset),
                        leader_epoch: leader_epoch_from_wire(leader_epoch),
                        metadata,
                    });
                }
            }
        }
        Asked {
            refused,
            entries,
            unauthorized,
        }
    }
}

pub(super) fn partition_codes(
    asked_refused: &[Option<i16>],
    unauthorized: Option<i16>,
    committed: Result<Vec<Result<(), GroupError>>, i16>,
) -> impl Iterator<Item = i16> {
    let committed: Vec<i16> = match committed {
        Ok(results) => results.iter().map(|r| group_code(r.err())).collect(),
        Err(code) => vec![code; asked_refused.iter().filter(|r| r.is_none()).count()],
    };
    let mut committed = committed.into_iter();
    let codes: Vec<i16> = asked_refused
        .iter()
        .map(|refused| match (unauthorized, *refused) {
            (Some(code), _) | (None, Some(code)) => code,
            (None, None) => committed.next().unwrap_or(0),
        })
        .collect();
    codes.into_iter()
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for OffsetCommitResponse {
    fn error_codes(&self, codes: &mut Codes) {
        self.topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| codes.add(p.error_code));
    }
}
