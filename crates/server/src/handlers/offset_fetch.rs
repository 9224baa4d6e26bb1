//! OffsetFetch: a group's committed offsets, for given partitions or all of them.
//! v8+ asks for several groups at once. A partition without a commit answers -1.
//! With `require_stable` (v7+, sent by read_committed consumers), a named partition
//! for which an open transaction holds an offset answers UNSTABLE_OFFSET_COMMIT, which
//! the client retries until the transaction ends (KIP-447). From v9 a member of a
//! consumer-protocol group names itself and its epoch, which are checked as for a
//! commit (the group's error code answers a failed check).
//!
//! Needs Describe on the group; a named partition of a topic the principal may not
//! describe answers TOPIC_AUTHORIZATION_FAILED, and a request for all of the group's
//! offsets leaves such topics out, as Kafka does.

use crate::authorize;
use crate::call::{ready, Call, Handler, HandlerError, Reply};
use crate::errors::group_error_code;
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::{Operation, ResourceType};
use headway_base::{PartitionIndex, TopicPartition};
use headway_group::state::leader_epoch_to_wire;
use headway_group::{CommittedOffset, GroupCoordinator};
use headway_protocol::kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, Request};
use std::collections::BTreeMap;

pub const HANDLER: Handler = Handler {
    key: ApiKey::OffsetFetch,
    min_version: 1,
    max_version: 9,
    handle,
};

const MULTI_GROUP_MIN_VERSION: i16 = 8;
/// The first version with a top-level error code.
const TOP_LEVEL_ERROR_MIN_VERSION: i16 = 2;

/// Per topic, per partition: the committed offset, if any, or an error code.
type Found = BTreeMap<String, Vec<(PartitionIndex, Result<Option<CommittedOffset>, i16>)>>;

fn lookup(
    coordinator: &GroupCoordinator,
    group_id: &str,
    wanted: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
) -> Found {
    let mut found: Found = BTreeMap::new();
    match wanted {
        None => {
            for (key, offset) in coordinator.committed(group_id, None) {
                found
                    .entry(key.topic)
                    .or_default()
                    .push((key.partition, Ok(Some(offset))));
            }
        }
        Some(topics) => {
            for (topic, partitions) in topics {
                let keys: Vec<TopicPartition> = partitions
                    .iter()
                    .map(|p| TopicPartition::new(topic.clone(), PartitionIndex::new(*p)))
                    .collect();
                let committed: BTreeMap<TopicPartition, CommittedOffset> = coordinator
                    .committed(group_id, Some(&keys))
                    .into_iter()
                    .collect();
                let entry = found.entry(topic).or_default();
                for key in keys {
                    let offset = match require_stable && coordinator.has_pending(group_id, &key) {
                        true => Err(ResponseError::UnstableOffsetCommit.code()),
                        false => Ok(committed.get(&key).cloned()),
                    };
                    entry.push((key.partition, offset));
                }
            }
        }
    }
    found
}

/// Every named partition answered with `code` (OffsetFetch before v2).
fn refused_all(wanted: Option<Vec<(String, Vec<i32>)>>, code: i16) -> Found {
    wanted
        .unwrap_or_default()
        .into_iter()
        .map(|(topic, partitions)| {
            let refused = partitions
                .into_iter()
                .map(|p| (PartitionIndex::new(p), Err(code)))
                .collect();
            (topic, refused)
        })
        .collect()
}

fn parts(offset: Result<Option<CommittedOffset>, i16>) -> (i64, i32, Option<StrBytes>, i16) {
    match offset {
        Ok(Some(o)) => (
            o.commit.offset.value(),
            leader_epoch_to_wire(o.commit.leader_epoch),
            Some(StrBytes::from_string(o.commit.metadata.unwrap_or_default())),
            0,
        ),
        Ok(None) => (-1, -1, Some(StrBytes::default()), 0),
        Err(code) => (-1, -1, Some(StrBytes::default()), code),
    }
}

/// What the principal may see of what was found: the partitions of topics it may not
/// describe answer TOPIC_AUTHORIZATION_FAILED when named, and are left out otherwise.
fn authorized(call: &Call<'_>, found: Found, named: bool) -> Found {
    if !call.ctx.authorizer.enabled() {
        return found;
    }
    let subject = authorize::subject(call);
    let describe = |topic: &str| match named {
        true => subject.allowed(Operation::Describe, ResourceType::Topic, topic),
        false => subject.visible(Operation::Describe, ResourceType::Topic, topic),
    };
    found
        .into_iter()
        .filter_map(|(topic, partitions)| match describe(&topic) {
            true => Some((topic, partitions)),
            false if named => {
                let code = ResponseError::TopicAuthorizationFailed.code();
                let refused = partitions
                    .into_iter()
                    .map(|(p, _)| (p, Err(code)))
                    .collect();
                Some((topic, refused))
            }
            false => None,
        })
        .collect()
}

/// The answer's topics from what was found. The legacy and the multi-group forms have
/// the same fields in different generated types, hence a macro.
macro_rules! answer_topics {
    ($found:expr, $topic:ident, $partition:ident) => {
        $found
            .into_iter()
            .map(|(topic, partitions)| {
                $topic::default()
                    .with_name(TopicName(StrBytes::from_string(topic)))
                    .with_partitions(
                        partitions
                            .into_iter()
                            .map(|(index, offset)| {
                                let (offset, epoch, metadata, code) = parts(offset);
                                $partition::default()
                                    .with_partition_index(index.value())
                                    .with_error_code(code)
                                    .with_committed_offset(offset)
                                    .with_committed_leader_epoch(epoch)
                                    .with_metadata(metadata)
                            })
                            .collect(),
                    )
            })
            .collect()
    };
}

/// The (topic, partitions) a request names; `None` asks for every committed offset.
fn wanted<T>(
    topics: Option<Vec<T>>,
    parts: impl Fn(T) -> (String, Vec<i32>),
) -> Option<Vec<(String, Vec<i32>)>> {
    topics.map(|ts| ts.into_iter().map(parts).collect())
}

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: OffsetFetchRequest = decode_body(request)?;
    if request.api_version() >= MULTI_GROUP_MIN_VERSION {
        let groups = body
            .groups
            .into_iter()
            .map(|g| {
                let member_epoch = Some(g.member_epoch).filter(|e| *e >= 0);
                let member_id = g.member_id.as_ref().map(|m| m.as_str());
                if let Some(code) = authorize::group_refusal(call, Operation::Describe, &g.group_id)
                {
                    return OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id)
                        .with_error_code(code);
                }
                let checked = ctx.groups.of(&g.group_id).and_then(|c| {
                    c.check_fetch(&g.group_id, member_id, member_epoch)?;
                    Ok(c)
                });
                let coordinator = match checked {
                    Ok(c) => c,
                    Err(e) => {
                        return OffsetFetchResponseGroup::default()
                            .with_group_id(g.group_id)
                            .with_error_code(group_error_code(e))
                    }
                };
                let asked = wanted(g.topics, |t| (t.name.to_string(), t.partition_indexes));
                let named = asked.is_some();
                let found = lookup(&coordinator, &g.group_id, asked, body.require_stable);
                let found = authorized(call, found, named);
                OffsetFetchResponseGroup::default()
                    .with_group_id(g.group_id)
                    .with_topics(answer_topics!(
                        found,
                        OffsetFetchResponseTopics,
                        OffsetFetchResponsePartitions
                    ))
            })
            .collect();
        return ready(request, &OffsetFetchResponse::default().with_groups(groups));
    }
    if let Some(code) = authorize::group_refusal(call, Operation::Describe, &body.group_id) {
        return ready(
            request,
            &OffsetFetchResponse::default().with_error_code(code),
        );
    }
    let asked = wanted(body.topics, |t| (t.name.to_string(), t.partition_indexes));
    let named = asked.is_some();
    let found = match ctx.groups.of(&body.group_id) {
        Ok(coordinator) => lookup(&coordinator, &body.group_id, asked, body.require_stable),
        // v2+ has a top-level error code; before it, each named partition carries it.
        Err(e) if request.api_version() >= TOP_LEVEL_ERROR_MIN_VERSION => {
            let code = group_error_code(e);
            let response = OffsetFetchResponse::default().with_error_code(code);
            return ready(request, &response);
        }
        Err(e) => refused_all(asked, group_error_code(e)),
    };
    let found = authorized(call, found, named);
    let topics = answer_topics!(
        found,
        OffsetFetchResponseTopic,
        OffsetFetchResponsePartition
    );
    ready(request, &OffsetFetchResponse::default().with_topics(topics))
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for OffsetFetchResponse {
    fn error_codes(&self, codes: &mut Codes) {
        codes.add(self.error_code);
        self.topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| codes.add(p.error_code));
        for g in &self.groups {
            codes.add(g.error_code);
            g.topics
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| codes.add(p.error_code));
        }
    }
}
