//! A consumer group member: subscribes to topics, takes part in rebalances (classic
//! protocol, range assignment when it leads), reads its partitions through the
//! credit-window [`Consumer`], and commits what was consumed.
//!
//! A background task owns the membership: join (with the MEMBER_ID_REQUIRED round),
//! sync, then heartbeats every third of the session timeout and commits every
//! `auto_commit` interval. When a heartbeat says the group is rebalancing, the task
//! commits, drops the partition consumer and joins again. [`GroupConsumer::next`]
//! reads from whichever partition consumer the current generation has. Each member
//! talks to the coordinator over a connection of its own (see `one_generation`).

use crate::cluster::{Cluster, EARLIEST, LATEST};
use crate::connection::Connection;
use crate::consumer::{ConsumedRecord, Consumer, ConsumerConfig, StartOffset};
use crate::error::{check, ClientError};
use crate::groups::decode_assignment;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedPartitions;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, GroupId, HeartbeatRequest,
    JoinGroupRequest, LeaveGroupRequest, OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

#[derive(Debug, Clone)]
pub struct GroupConfig {
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub auto_commit: Duration,
    /// Where to start in a partition the group has no committed offset for.
    pub reset: StartOffset,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            session_timeout: Duration::from_secs(45),
            rebalance_timeout: Duration::from_secs(60),
            auto_commit: Duration::from_secs(5),
            reset: StartOffset::Latest,
        }
    }
}

const PROTOCOL_TYPE: &str = "consumer";
const ASSIGNOR: &str = "range";

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Next offset to consume, per partition, of the current generation.
type Positions = HashMap<(Arc<str>, i32), i64>;

struct Shared {
    consumer: Mutex<Option<Arc<Consumer>>>,
    positions: Mutex<Positions>,
    changed: Notify,
}

pub struct GroupConsumer {
    shared: Arc<Shared>,
    membership: tokio::task::JoinHandle<()>,
    cluster: Arc<Cluster>,
    group: String,
    member: Arc<Mutex<(String, i32)>>,
}

impl GroupConsumer {
    /// Joins `group` subscribed to `topics`; partitions arrive with the first generation.
    pub async fn subscribe(
        cluster: Arc<Cluster>,
        group: &str,
        topics: Vec<String>,
        consumer_config: ConsumerConfig,
        config: GroupConfig,
    ) -> Result<GroupConsumer, ClientError> {
        for t in &topics {
            cluster.topic(t).await?;
        }
        let shared = Arc::new(Shared {
            consumer: Mutex::new(None),
            positions: Mutex::new(HashMap::new()),
            changed: Notify::new(),
        });
        let member = Arc::new(Mutex::new((String::new(), -1)));
        let membership = Membership {
            cluster: Arc::clone(&cluster),
            group: group.to_string(),
            topics,
            consumer_config,
            config,
            shared: Arc::clone(&shared),
            member: Arc::clone(&member),
        };
        Ok(GroupConsumer {
            shared,
            membership: tokio::spawn(membership.run()),
            cluster,
            group: group.to_string(),
            member,
        })
    }

    /// The next record of the partitions this member holds now.
    pub async fn next(&self) -> ConsumedRecord {
        loop {
            let changed = self.shared.changed.notified();
            let consumer = self.shared.consumer.lock().expect("group lock").clone();
            let record = match consumer {
                Some(c) => tokio::select! {
                    r = c.next() => Some(r),
                    _ = changed => None,
                },
                None => {
                    changed.await;
                    None
                }
            };
            if let Some(r) = record {
                let mut positions = self.shared.positions.lock().expect("group lock");
                // Only positions of the current generation's partitions are kept.
                if let Some(p) = positions.get_mut(&(Arc::clone(&r.topic), r.partition)) {
                    *p = (*p).max(r.offset + 1);
                    return r;
                }
            }
        }
    }

    /// True when this member holds partitions and has consumed each to the end seen
    /// in its latest fetch.
    pub fn caught_up(&self) -> bool {
        let consumer = self.shared.consumer.lock().expect("group lock").clone();
        consumer.is_some_and(|c| c.caught_up())
    }

    /// The next buffered record, if any, without waiting.
    pub fn try_next(&self) -> Option<ConsumedRecord> {
        let consumer = self.shared.consumer.lock().expect("group lock").clone()?;
        let r = consumer.try_next()?;
        let mut positions = self.shared.positions.lock().expect("group lock");
        let p = positions.get_mut(&(Arc::clone(&r.topic), r.partition))?;
        *p = (*p).max(r.offset + 1);
        Some(r)
    }

    /// The member id and generation of the current membership ("" and -1 before it).
    pub fn membership(&self) -> (String, i32) {
        self.member.lock().expect("group lock").clone()
    }

    /// Commits what was consumed, then leaves the group. If the group is already
    /// rebalancing (another member left first), the commit is tried again once this
    /// member is out, as a commit outside any membership, which the coordinator accepts
    /// when no member is left; otherwise the next owner of these partitions starts at
    /// the last accepted commit (at least once).
    pub async fn close(self) -> Result<(), ClientError> {
        self.membership.abort();
        let (member_id, generation) = self.membership();
        if member_id.is_empty() {
            return Ok(());
        }
        let coordinator = self.cluster.coordinator(&self.group).await?;
        let positions = self.shared.positions.lock().expect("group lock").clone();
        let committed = commit(
            &coordinator,
            &self.group,
            &member_id,
            generation,
            &positions,
        )
        .await;
        // v3+ names leaving members in `members` (the client speaks LeaveGroup 3-4).
        let leave = LeaveGroupRequest::default()
            .with_group_id(GroupId(str_bytes(&self.group)))
            .with_members(vec![
                MemberIdentity::default().with_member_id(str_bytes(&member_id))
            ]);
        let left = coordinator
            .request(&leave)
            .await
            .and_then(|r| check(r.error_code, None));
        if let Err(e) = committed {
            if let Err(again) = commit(&coordinator, &self.group, "", -1, &positions).await {
                tracing::warn!(group = %self.group, first = %e, error = %again,
                    "offsets not committed at close: the group's next member starts at its last commit");
            }
        }
        left
    }
}

impl Drop for GroupConsumer {
    fn drop(&mut self) {
        self.membership.abort();
    }
}

struct Membership {
    cluster: Arc<Cluster>,
    group: String,
    topics: Vec<String>,
    consumer_config: ConsumerConfig,
    config: GroupConfig,
    shared: Arc<Shared>,
    member: Arc<Mutex<(String, i32)>>,
}

/// A generation's outcome: this member's id, the generation, its partitions.
struct Generation {
    member_id: String,
    generation: i32,
    assigned: Vec<(String, Vec<i32>)>,
}

impl Membership {
    async fn run(self) {
        let mut member_id = String::new();
        let mut backoff = self.cluster.config().retry_backoff;
        loop {
            match self.one_generation(&mut member_id).await {
                Ok(()) => backoff = self.cluster.config().retry_backoff,
                Err(e) => {
                    tracing::warn!(group = %self.group, error = %e, "group membership failed; joining again");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.cluster.config().retry_backoff_max);
                }
            }
            *self.shared.consumer.lock().expect("group lock") = None;
            self.shared.changed.notify_waiters();
        }
    }

    /// Joins, consumes until the group rebalances, commits. `member_id` is kept across
    /// generations and cleared when the coordinator no longer knows it.
    async fn one_generation(&self, member_id: &mut String) -> Result<(), ClientError> {
        // A connection of this member's own: a JoinGroup waits at the coordinator until
        // the rebalance completes, and on a shared connection it would hold back other
        // members' heartbeats queued behind it, so they would never learn to rejoin.
        let addr = self.cluster.coordinator_addr(&self.group).await?;
        let coordinator = self.cluster.open_connection(&addr, 4).await?;
        let joined = match self.join(&coordinator, member_id).await {
            Err(ClientError::Broker { code, .. })
                if code == ResponseError::UnknownMemberId.code() =>
            {
                member_id.clear();
                return Ok(());
            }
            other => other?,
        };
        *self.member.lock().expect("group lock") = (joined.member_id.clone(), joined.generation);
        let positions = self.start_positions(&coordinator, &joined.assigned).await?;
        let assignment = positions
            .iter()
            .map(|((t, p), offset)| (t.to_string(), *p, StartOffset::At(*offset)))
            .collect();
        let consumer = Arc::new(
            Consumer::assign(
                Arc::clone(&self.cluster),
                self.consumer_config.clone(),
                assignment,
            )
            .await?,
        );
        *self.shared.positions.lock().expect("group lock") = positions;
        *self.shared.consumer.lock().expect("group lock") = Some(consumer);
        self.shared.changed.notify_waiters();
        self.heartbeat_until_rebalance(&coordinator, &joined).await
    }

    async fn heartbeat_until_rebalance(
        &self,
        coordinator: &Connection,
        joined: &Generation,
    ) -> Result<(), ClientError> {
        let interval = self.config.session_timeout / 3;
        let mut last_commit = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(interval).await;
            if last_commit.elapsed() >= self.config.auto_commit {
                let positions = self.shared.positions.lock().expect("group lock").clone();
                commit(
                    coordinator,
                    &self.group,
                    &joined.member_id,
                    joined.generation,
                    &positions,
                )
                .await?;
                last_commit = tokio::time::Instant::now();
            }
            let heartbeat = HeartbeatRequest::default()
                .with_group_id(GroupId(str_bytes(&self.group)))
                .with_generation_id(joined.generation)
                .with_member_id(str_bytes(&joined.member_id));
            let code = coordinator.request(&heartbeat).await?.error_code;
            if code == ResponseError::RebalanceInProgress.code() {
                let positions = self.shared.positions.lock().expect("group lock").clone();
                // A commit during a rebalance may be refused; the next owner then
                // starts at the last commit that went through (at least once).
                let _ = commit(
                    coordinator,
                    &self.group,
                    &joined.member_id,
                    joined.generation,
                    &positions,
                )
                .await;
                return Ok(());
            }
            check(code, None)?;
        }
    }

    async fn join(
        &self,
        coordinator: &Connection,
        member_id: &mut String,
    ) -> Result<Generation, ClientError> {
        let subscription = versioned(
            0,
            &ConsumerProtocolSubscription::default()
                .with_topics(self.topics.iter().map(|t| str_bytes(t)).collect()),
        )?;
        loop {
            let request = JoinGroupRequest::default()
                .with_group_id(GroupId(str_bytes(&self.group)))
                .with_session_timeout_ms(self.config.session_timeout.as_millis() as i32)
                .with_rebalance_timeout_ms(self.config.rebalance_timeout.as_millis() as i32)
                .with_member_id(str_bytes(member_id))
                .with_protocol_type(str_bytes(PROTOCOL_TYPE))
                .with_protocols(vec![JoinGroupRequestProtocol::default()
                    .with_name(str_bytes(ASSIGNOR))
                    .with_metadata(subscription.clone())]);
            let response = coordinator.request(&request).await?;
            if response.error_code == ResponseError::MemberIdRequired.code() {
                *member_id = response.member_id.to_string();
                continue;
            }
            check(response.error_code, None)?;
            *member_id = response.member_id.to_string();
            let assignments = if response.leader == response.member_id {
                self.assign(&response.members).await?
            } else {
                Vec::new()
            };
            let sync = SyncGroupRequest::default()
                .with_group_id(GroupId(str_bytes(&self.group)))
                .with_generation_id(response.generation_id)
                .with_member_id(str_bytes(member_id))
                .with_protocol_type(Some(str_bytes(PROTOCOL_TYPE)))
                .with_protocol_name(Some(str_bytes(ASSIGNOR)))
                .with_assignments(assignments);
            let synced = coordinator.request(&sync).await?;
            check(synced.error_code, None)?;
            return Ok(Generation {
                member_id: member_id.clone(),
                generation: response.generation_id,
                assigned: decode_assignment(synced.assignment),
            });
        }
    }

    /// The leader's range assignment: per topic, members subscribed to it in member
    /// id order get consecutive ranges of partitions, the first ones one more.
    async fn assign(
        &self,
        members: &[kafka_protocol::messages::join_group_response::JoinGroupResponseMember],
    ) -> Result<Vec<SyncGroupRequestAssignment>, ClientError> {
        let mut subscribers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for m in members {
            for topic in decode_subscription(m.metadata.clone()) {
                subscribers
                    .entry(topic)
                    .or_default()
                    .push(m.member_id.to_string());
            }
        }
        let mut plan: BTreeMap<String, BTreeMap<String, Vec<i32>>> = members
            .iter()
            .map(|m| (m.member_id.to_string(), BTreeMap::new()))
            .collect();
        for (topic, mut ids) in subscribers {
            ids.sort();
            let partitions = self.cluster.topic(&topic).await?.leaders.len() as i32;
            for (member, range) in ids.iter().zip(ranges(partitions, ids.len() as i32)) {
                plan.entry(member.clone())
                    .or_default()
                    .insert(topic.clone(), range.collect());
            }
        }
        plan.into_iter()
            .map(|(member, topics)| {
                let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(
                    topics
                        .into_iter()
                        .map(|(t, ps)| {
                            AssignedPartitions::default()
                                .with_topic(TopicName(str_bytes(&t)))
                                .with_partitions(ps)
                        })
                        .collect(),
                );
                Ok(SyncGroupRequestAssignment::default()
                    .with_member_id(str_bytes(&member))
                    .with_assignment(versioned(0, &assignment)?))
            })
            .collect()
    }

    /// Committed offsets of the assigned partitions, or the reset position.
    async fn start_positions(
        &self,
        coordinator: &Connection,
        assigned: &[(String, Vec<i32>)],
    ) -> Result<Positions, ClientError> {
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(str_bytes(&self.group)))
            .with_topics(Some(
                assigned
                    .iter()
                    .map(|(t, ps)| {
                        OffsetFetchRequestTopic::default()
                            .with_name(TopicName(str_bytes(t)))
                            .with_partition_indexes(ps.clone())
                    })
                    .collect(),
            ));
        let response = coordinator.request(&request).await?;
        check(response.error_code, None)?;
        let committed: HashMap<(String, i32), i64> = response
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| ((t.name.to_string(), p.partition_index), p.committed_offset))
            })
            .filter(|(_, offset)| *offset >= 0)
            .collect();
        let mut positions = HashMap::new();
        for (topic, partitions) in assigned {
            for p in partitions {
                let offset = match committed.get(&(topic.clone(), *p)) {
                    Some(offset) => *offset,
                    None => match self.config.reset {
                        StartOffset::Earliest => {
                            self.cluster.list_offset(topic, *p, EARLIEST).await?
                        }
                        StartOffset::Latest => self.cluster.list_offset(topic, *p, LATEST).await?,
                        StartOffset::At(offset) => offset,
                    },
                };
                positions.insert((Arc::from(topic.as_str()), *p), offset);
            }
        }
        Ok(positions)
    }
}

/// Partition ranges for `members` consumers of `partitions` partitions.
fn ranges(partitions: i32, members: i32) -> Vec<std::ops::Range<i32>> {
    let (per, extra) = (partitions / members.max(1), partitions % members.max(1));
    (0..members)
        .map(|i| {
            let start = i * per + i.min(extra);
            start..start + per + i32::from(i < extra)
        })
        .collect()
}

async fn commit(
    coordinator: &Connection,
    group: &str,
    member_id: &str,
    generation: i32,
    positions: &Positions,
) -> Result<(), ClientError> {
    if positions.is_empty() {
        return Ok(());
    }
    let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for ((topic, partition), offset) in positions {
        by_topic.entry(topic).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(*partition)
                .with_committed_offset(*offset)
                .with_committed_leader_epoch(-1),
        );
    }
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(str_bytes(group)))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(str_bytes(member_id))
        .with_retention_time_ms(-1)
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(str_bytes(t)))
                        .with_partitions(ps)
                })
                .collect(),
        );
    let response = coordinator.request(&request).await?;
    for t in response.topics {
        for p in t.partitions {
            check(p.error_code, None)?;
        }
    }
    Ok(())
}

/// A consumer-protocol message: its version, then its body at that version.
fn versioned<T: Encodable>(version: i16, message: &T) -> Result<Bytes, ClientError> {
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    message
        .encode(&mut buf, version)
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
    Ok(buf.freeze())
}

fn decode_subscription(mut bytes: Bytes) -> Vec<String> {
    if bytes.len() < 2 {
        return Vec::new();
    }
    let version = bytes.get_i16().clamp(0, 3);
    ConsumerProtocolSubscription::decode(&mut bytes, version)
        .map(|s| s.topics.into_iter().map(|t| t.to_string()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_every_partition_once() {
        assert_eq!(ranges(6, 3), vec![0..2, 2..4, 4..6]);
        assert_eq!(ranges(7, 3), vec![0..3, 3..5, 5..7]);
        assert_eq!(ranges(2, 3), vec![0..1, 1..2, 2..2]);
    }

    #[test]
    fn subscriptions_and_assignments_round_trip() {
        let s = versioned(
            0,
            &ConsumerProtocolSubscription::default()
                .with_topics(vec![str_bytes("a"), str_bytes("b")]),
        )
        .unwrap();
        assert_eq!(decode_subscription(s), vec!["a", "b"]);
        let a = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
            AssignedPartitions::default()
                .with_topic(TopicName(str_bytes("a")))
                .with_partitions(vec![0, 2]),
        ]);
        assert_eq!(
            decode_assignment(versioned(0, &a).unwrap()),
            vec![("a".to_string(), vec![0, 2])]
        );
    }
}
