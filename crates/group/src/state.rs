//! The classic group protocol as a state machine over plain values.
//!
//! No I/O and no clock: every operation takes `now_ms`, and answers that must wait (a
//! JoinGroup until the rebalance completes, a follower's SyncGroup until the leader's)
//! are parked as one-shot senders inside the member and completed by later operations
//! or by [`Groups::tick`]. The coordinator wraps this in a mutex and drives the ticks.
//!
//! States, as in Kafka:
//!
//! ```text
//!  Empty ──join──▶ PreparingRebalance ──all joined / deadline──▶ CompletingRebalance
//!    ▲                   ▲        ▲                                      │ leader's SyncGroup
//!    │ last member       │ join,  └──────── member joins, leaves, ◀──── Stable
//!    └── leaves ─────────┘ leave            expires, or changes
//! ```
//!
//! Dead is not kept: a deleted or expired group is removed from the map.

use crate::consumer::state::ConsumerConfig;
use crate::consumer::topics::TopicsSource;
use crate::consumer::{
    ConsumerGroup, HeartbeatAnswer, HeartbeatRequest, MemberEpochIn, TopicsView,
};
use crate::migration::MigrationPolicy;
use crate::requests::{JoinRequest, JoinResult, JoinedMember, SyncRequest, SyncResult};
use crate::{GenerationId, GroupError};
use bytes::Bytes;
use headway_base::{Offset, ProducerId, TopicPartition};
use std::collections::{BTreeMap, HashMap};
use tokio::sync::oneshot;

mod convert;
pub mod durable;

/// Bounds and timings of the coordinator, with Kafka's defaults.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// Kafka's `group.initial.rebalance.delay.ms`: how long the first rebalance of an
    /// empty group waits for more members before completing.
    pub initial_rebalance_delay_ms: i64,
    pub session_timeout_min_ms: i32,
    pub session_timeout_max_ms: i32,
    /// Offsets of a group without members are removed after this long without a commit.
    pub offsets_retention_ms: i64,
    /// Longest metadata string stored with a committed offset.
    pub offset_metadata_bytes_max: usize,
    /// Members (and member ids handed out but not yet used) per group, Kafka's
    /// `group.max.size`. A new member past it gets GROUP_MAX_SIZE_REACHED.
    pub members_per_group_max: usize,
    /// Groups the coordinator holds. A JoinGroup or commit that would create one more
    /// gets COORDINATOR_NOT_AVAILABLE (retriable) until groups expire or are deleted.
    pub groups_max: usize,
    /// Kafka's `group.consumer.session.timeout.ms`: a consumer-protocol member that
    /// does not heartbeat for this long is fenced.
    pub consumer_session_timeout_ms: i64,
    /// Kafka's `group.consumer.heartbeat.interval.ms`, told to consumer-protocol
    /// members in each heartbeat answer.
    pub consumer_heartbeat_interval_ms: i32,
    /// Longest subscription regex accepted (`SubscribedTopicRegex`); a longer one gets
    /// INVALID_REGULAR_EXPRESSION. Bounds the compiled automaton and the work of
    /// matching it against every topic at each heartbeat.
    pub consumer_regex_bytes_max: usize,
    /// Kafka's `group.consumer.migration.policy`: which online conversions between
    /// classic and consumer groups are served ([`MigrationPolicy`]).
    pub migration_policy: MigrationPolicy,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            initial_rebalance_delay_ms: 3_000,
            session_timeout_min_ms: 6_000,
            session_timeout_max_ms: 1_800_000,
            offsets_retention_ms: 7 * 24 * 3600 * 1000,
            offset_metadata_bytes_max: 4096,
            members_per_group_max: 10_000,
            groups_max: 100_000,
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5_000,
            consumer_regex_bytes_max: 1024,
            migration_policy: MigrationPolicy::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl GroupState {
    /// The name Kafka tools print.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
        }
    }
}

/// A committed offset as the offsets log stores it ([`crate::offsets`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommit {
    pub offset: Offset,
    /// The leader epoch the consumer saw, if it sent one (the wire's -1 is `None`).
    pub leader_epoch: Option<i32>,
    pub metadata: Option<String>,
    pub commit_timestamp_ms: i64,
}

impl OffsetCommit {
    /// The commit whose record lies at `log_offset` in the offsets log.
    pub fn at(self, log_offset: Offset) -> CommittedOffset {
        CommittedOffset {
            log_offset,
            commit: self,
        }
    }
}

/// A committed offset in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// Position of this commit's record in the offsets log: of two commits for one
    /// partition, the later record wins, whichever finished syncing first.
    pub log_offset: Offset,
    pub commit: OffsetCommit,
}

/// A leader epoch from the wire or the offsets log, where -1 means none.
pub fn leader_epoch_from_wire(epoch: i32) -> Option<i32> {
    (epoch != -1).then_some(epoch)
}

/// The wire's and the offsets log's form of an optional leader epoch: -1 for none.
pub fn leader_epoch_to_wire(epoch: Option<i32>) -> i32 {
    epoch.unwrap_or(-1)
}

#[derive(Debug)]
pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    last_heartbeat_ms: i64,
    awaiting_join: Option<oneshot::Sender<JoinResult>>,
    awaiting_sync: Option<oneshot::Sender<SyncResult>>,
    /// Its member epoch in the consumer group this group was converted from, its
    /// generation until it rejoins (`convert`).
    epoch_before_downgrade: Option<GenerationId>,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    fn expired(&self, now_ms: i64) -> bool {
        self.awaiting_join.is_none()
            && self.awaiting_sync.is_none()
            && now_ms - self.last_heartbeat_ms > i64::from(self.session_timeout_ms)
    }
}

#[derive(Debug)]
pub struct Group {
    pub group_id: String,
    pub state: GroupState,
    pub generation_id: GenerationId,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader_id: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, with the time they lapse.
    pending_members: HashMap<String, i64>,
    /// group.instance.id to member id.
    static_members: HashMap<String, String>,
    rebalance_deadline_ms: i64,
    /// While an empty group's first rebalance waits for more members.
    initial_delay_deadline_ms: Option<i64>,
    pub offsets: BTreeMap<TopicPartition, CommittedOffset>,
    last_commit_ms: i64,
}

impl Group {
    fn new(group_id: &str, now_ms: i64) -> Group {
        Group {
            group_id: group_id.to_string(),
            state: GroupState::Empty,
            generation_id: GenerationId::INITIAL,
            protocol_type: None,
            protocol_name: None,
            leader_id: None,
            members: BTreeMap::new(),
            pending_members: HashMap::new(),
            static_members: HashMap::new(),
            rebalance_deadline_ms: 0,
            initial_delay_deadline_ms: None,
            offsets: BTreeMap::new(),
            last_commit_ms: now_ms,
        }
    }

    /// Protocols every member supports (all protocols when there are no members).
    fn candidates(&self) -> Option<Vec<String>> {
        let mut members = self.members.values();
        let first = members.next()?;
        let mut names: Vec<String> = first.protocols.iter().map(|(n, _)| n.clone()).collect();
        for m in members {
            names.retain(|n| m.protocols.iter().any(|(p, _)| p == n));
        }
        Some(names)
    }

    fn supports(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if protocols.is_empty() {
            return false;
        }
        match self.candidates() {
            None => true,
            Some(names) => {
                self.protocol_type.as_deref() == Some(protocol_type)
                    && protocols.iter().any(|(p, _)| names.contains(p))
            }
        }
    }

    /// The protocol most members prefer among those all support.
    fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidates()?;
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some((name, _)) = m.protocols.iter().find(|(p, _)| candidates.contains(p)) {
                *votes.entry(name).or_default() += 1;
            }
        }
        // Ties go to the candidate listed first by the first member.
        candidates
            .iter()
            .max_by_key(|c| {
                (
                    votes.get(c.as_str()).copied().unwrap_or(0),
                    std::cmp::Reverse(candidates.iter().position(|x| x == *c)),
                )
            })
            .cloned()
    }

    fn all_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.awaiting_join.is_some())
    }

    fn join_result(&self, member_id: &str) -> JoinResult {
        let is_leader = self.leader_id.as_deref() == Some(member_id);
        let protocol = self.protocol_name.clone().unwrap_or_default();
        JoinResult {
            error: None,
            generation_id: Some(self.generation_id),
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader_id.clone().unwrap_or_default(),
            member_id: member_id.to_string(),
            members: if is_leader {
                self.members
                    .values()
                    .map(|m| JoinedMember {
                        member_id: m.member_id.clone(),
                        group_instance_id: m.group_instance_id.clone(),
                        metadata: m.metadata_for(&protocol),
                    })
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    fn prepare_rebalance(&mut self, config: &GroupConfig, now_ms: i64) {
        if self.state == GroupState::CompletingRebalance {
            for m in self.members.values_mut() {
                if let Some(reply) = m.awaiting_sync.take() {
                    let _ = reply.send(SyncResult::error(GroupError::RebalanceInProgress));
                }
            }
        }
        let rebalance_timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0);
        self.rebalance_deadline_ms = now_ms + i64::from(rebalance_timeout);
        if self.state == GroupState::Empty {
            let delay = config
                .initial_rebalance_delay_ms
                .min(i64::from(rebalance_timeout));
            self.initial_delay_deadline_ms = Some(now_ms + delay);
        }
        if self.state != GroupState::PreparingRebalance {
            tracing::debug!(group = %self.group_id, generation = self.generation_id.value(), "preparing rebalance");
        }
        self.state = GroupState::PreparingRebalance;
    }

    fn maybe_complete_join(&mut self, now_ms: i64) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        let delay_over = self.initial_delay_deadline_ms.is_none_or(|d| now_ms >= d);
        if (self.all_joined() && delay_over) || now_ms >= self.rebalance_deadline_ms {
            self.complete_join(now_ms);
        }
    }

    fn complete_join(&mut self, now_ms: i64) {
        // Dynamic members that did not rejoin in time leave; static ones stay until
        // their session expires, so a restarting static member keeps its place.
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none() && m.group_instance_id.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for id in gone {
            self.remove_member(&id);
        }
        self.initial_delay_deadline_ms = None;
        self.generation_id = self.generation_id.next();
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.protocol_name = None;
            self.leader_id = None;
            return;
        }
        self.protocol_name = self.select_protocol();
        let leader_still_here = self
            .leader_id
            .as_ref()
            .is_some_and(|l| self.members.contains_key(l));
        if !leader_still_here {
            let joined = self.members.values().find(|m| m.awaiting_join.is_some());
            self.leader_id = joined
                .or(self.members.values().next())
                .map(|m| m.member_id.clone());
        }
        self.state = GroupState::CompletingRebalance;
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let result = self.join_result(&id);
            let member = self.members.get_mut(&id).expect("member listed");
            member.assignment = Bytes::new();
            member.epoch_before_downgrade = None;
            member.last_heartbeat_ms = now_ms;
            if let Some(reply) = member.awaiting_join.take() {
                let _ = reply.send(result);
            }
        }
        tracing::info!(group = %self.group_id, generation = self.generation_id.value(), members = self.members.len(),
            protocol = ?self.protocol_name, "rebalance completed");
    }

    fn remove_member(&mut self, member_id: &str) {
        if let Some(m) = self.members.remove(member_id) {
            if let Some(instance) = &m.group_instance_id {
                if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                    self.static_members.remove(instance);
                }
            }
            if let Some(reply) = m.awaiting_join {
                let _ = reply.send(JoinResult::error(GroupError::UnknownMemberId, member_id));
            }
            if let Some(reply) = m.awaiting_sync {
                let _ = reply.send(SyncResult::error(GroupError::UnknownMemberId));
            }
        }
    }

    /// After members left or expired: rebalance, or finish the one under way.
    fn members_changed(&mut self, config: &GroupConfig, now_ms: i64) {
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                if self.members.is_empty() {
                    self.state = GroupState::Empty;
                    self.generation_id = self.generation_id.next();
                    self.leader_id = None;
                    self.protocol_name = None;
                } else {
                    self.prepare_rebalance(config, now_ms);
                }
            }
            GroupState::PreparingRebalance => self.maybe_complete_join(now_ms),
            GroupState::Empty => {}
        }
    }

    /// Checks member id, static instance and generation. `generation_id: None` skips
    /// the generation check (the member is not yet in one).
    fn check_member(
        &self,
        member_id: &str,
        instance: Option<&str>,
        generation_id: Option<GenerationId>,
    ) -> Result<(), GroupError> {
        if let Some(instance) = instance {
            match self.static_members.get(instance) {
                Some(current) if current != member_id => return Err(GroupError::FencedInstanceId),
                _ => {}
            }
        }
        let Some(member) = self.members.get(member_id) else {
            return Err(GroupError::UnknownMemberId);
        };
        let current =
            |g: GenerationId| g == self.generation_id || Some(g) == member.epoch_before_downgrade;
        if generation_id.is_some_and(|g| !current(g)) {
            return Err(GroupError::IllegalGeneration);
        }
        Ok(())
    }
}

/// Every group of the broker.
#[derive(Debug, Default)]
pub struct Groups {
    pub config: GroupConfig,
    groups: BTreeMap<String, Group>,
    /// Offsets committed inside transactions that have not ended, by the transaction's
    /// producer id: they count only once it commits (`TxnOffsetCommit`).
    pending: BTreeMap<ProducerId, BTreeMap<(String, TopicPartition), CommittedOffset>>,
    /// How many offsets `pending` holds.
    pending_len: usize,
    /// For each group partition in `pending`, how many transactions hold it: an
    /// OffsetFetch asking for stable offsets looks here, not through every transaction.
    pending_holders: HashMap<(String, TopicPartition), usize>,
    /// Groups of the consumer protocol (KIP-848), in the same namespace as `groups`:
    /// a group id is of one type at a time; it changes type when empty, or online as
    /// `config.migration_policy` allows (`convert`). Their committed offsets are kept
    /// in `groups`, under the same id.
    pub consumer: BTreeMap<String, ConsumerGroup>,
    /// The broker's topics, read when a classic member of a consumer group joins or
    /// heartbeats.
    pub topics: TopicsSource,
    /// Per-group settings of consumer-protocol groups (the GROUP config resource's
    /// `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms`), over
    /// `config`'s; read at each heartbeat and tick, so a change applies from the next.
    consumer_overrides: HashMap<String, ConsumerOverrides>,
}

/// A consumer-protocol group's own timings; `None` keeps the broker's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerOverrides {
    pub session_timeout_ms: Option<i64>,
    pub heartbeat_interval_ms: Option<i32>,
}

/// Offsets pending in open transactions, at most; a TxnOffsetCommit past it is refused
/// (bounds the coordinator's memory; a transaction's offsets go when it ends).
pub const PENDING_TXN_OFFSETS_MAX: usize = 100_000;

fn consumer_config(config: &GroupConfig, overrides: Option<&ConsumerOverrides>) -> ConsumerConfig {
    let overrides = overrides.copied().unwrap_or_default();
    ConsumerConfig {
        session_timeout_ms: overrides
            .session_timeout_ms
            .unwrap_or(config.consumer_session_timeout_ms),
        heartbeat_interval_ms: overrides
            .heartbeat_interval_ms
            .unwrap_or(config.consumer_heartbeat_interval_ms),
        members_max: config.members_per_group_max,
        regex_bytes_max: config.consumer_regex_bytes_max,
    }
}

fn new_member_id(prefix: &str) -> String {
    let prefix = if prefix.is_empty() { "member" } else { prefix };
    format!("{prefix}-{}", uuid::Uuid::new_v4())
}

impl Groups {
    pub fn new(config: GroupConfig) -> Groups {
        Groups {
            config,
            groups: BTreeMap::new(),
            pending: BTreeMap::new(),
            pending_len: 0,
            pending_holders: HashMap::new(),
            consumer: BTreeMap::new(),
            topics: TopicsSource::default(),
            consumer_overrides: HashMap::new(),
        }
    }

    /// Sets a group's own consumer-protocol timings (all `None`: the broker's again).
    /// The group need not exist: the settings wait for it.
    pub fn set_consumer_overrides(&mut self, group_id: &str, overrides: ConsumerOverrides) {
        if overrides == ConsumerOverrides::default() {
            self.consumer_overrides.remove(group_id);
        } else {
            self.consumer_overrides
                .insert(group_id.to_string(), overrides);
        }
    }

    pub fn get(&self, group_id: &str) -> Option<&Group> {
        self.groups.get(group_id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Group> {
        self.groups.values()
    }

    /// Handles a JoinGroup. The answer goes to `reply`, now or when the rebalance ends.
    pub fn join(&mut self, req: JoinRequest, reply: oneshot::Sender<JoinResult>, now_ms: i64) {
        if let Err(e) = self.check_join(&req) {
            let _ = reply.send(JoinResult::error(e, &req.member_id));
            return;
        }
        // A consumer-protocol group with members serves classic members as the
        // migration policy allows (`convert`); an empty one becomes classic.
        match self.consumer.get(&req.group_id) {
            Some(c) if !c.members.is_empty() => {
                let result = match self.config.migration_policy {
                    MigrationPolicy::Disabled => {
                        JoinResult::error(GroupError::InconsistentGroupProtocol, &req.member_id)
                    }
                    _ => self.join_consumer(req, now_ms),
                };
                let _ = reply.send(result);
                return;
            }
            Some(_) => {
                self.consumer.remove(&req.group_id);
            }
            None => {}
        }
        if !req.member_id.is_empty() && !self.groups.contains_key(&req.group_id) {
            let _ = reply.send(JoinResult::error(
                GroupError::UnknownMemberId,
                &req.member_id,
            ));
            return;
        }
        if let Err(e) = self.check_room_for_group(&req.group_id) {
            let _ = reply.send(JoinResult::error(e, &req.member_id));
            return;
        }
        let config = self.config.clone();
        let group = self
            .groups
            .entry(req.group_id.clone())
            .or_insert_with(|| Group::new(&req.group_id, now_ms));
        if !group.supports(&req.protocol_type, &req.protocols) {
            let _ = reply.send(JoinResult::error(
                GroupError::InconsistentGroupProtocol,
                &req.member_id,
            ));
            return;
        }
        if req.member_id.is_empty() {
            join_new_member(group, &config, req, reply, now_ms);
        } else {
            join_known_member(group, &config, req, reply, now_ms);
        }
        group.maybe_complete_join(now_ms);
    }

    /// Refuses to create a group past `groups_max`.
    fn check_room_for_group(&self, group_id: &str) -> Result<(), GroupError> {
        if self.groups.contains_key(group_id) || self.groups.len() < self.config.groups_max {
            return Ok(());
        }
        tracing::warn!(
            group = group_id,
            groups = self.groups.len(),
            "group limit reached: refusing a new group"
        );
        Err(GroupError::CoordinatorNotAvailable)
    }

    fn check_join(&self, req: &JoinRequest) -> Result<(), GroupError> {
        if req.group_id.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        let range = self.config.session_timeout_min_ms..=self.config.session_timeout_max_ms;
        if !range.contains(&req.session_timeout_ms) {
            return Err(GroupError::InvalidSessionTimeout);
        }
        Ok(())
    }

    /// Handles a SyncGroup. The answer goes to `reply`, now or when the leader syncs.
    pub fn sync(&mut self, req: SyncRequest, reply: oneshot::Sender<SyncResult>, now_ms: i64) {
        if let Some(result) = self.sync_consumer(&req, now_ms) {
            let _ = reply.send(result);
            return;
        }
        let Some(group) = self.groups.get_mut(&req.group_id) else {
            let _ = reply.send(SyncResult::error(GroupError::UnknownMemberId));
            return;
        };
        if let Err(e) = group.check_member(
            &req.member_id,
            req.group_instance_id.as_deref(),
            req.generation_id,
        ) {
            let _ = reply.send(SyncResult::error(e));
            return;
        }
        let mismatch =
            |given: &Option<String>, ours: &Option<String>| given.is_some() && given != ours;
        if mismatch(&req.protocol_type, &group.protocol_type)
            || mismatch(&req.protocol_name, &group.protocol_name)
        {
            let _ = reply.send(SyncResult::error(GroupError::InconsistentGroupProtocol));
            return;
        }
        match group.state {
            GroupState::Empty => {
                let _ = reply.send(SyncResult::error(GroupError::UnknownMemberId));
            }
            GroupState::PreparingRebalance => {
                let _ = reply.send(SyncResult::error(GroupError::RebalanceInProgress));
            }
            GroupState::CompletingRebalance => {
                let member = group.members.get_mut(&req.member_id).expect("checked");
                member.awaiting_sync = Some(reply);
                member.last_heartbeat_ms = now_ms;
                if group.leader_id.as_deref() == Some(req.member_id.as_str()) {
                    let mut assignments: HashMap<String, Bytes> =
                        req.assignments.into_iter().collect();
                    for m in group.members.values_mut() {
                        m.assignment = assignments.remove(&m.member_id).unwrap_or_default();
                    }
                    group.state = GroupState::Stable;
                    for m in group.members.values_mut() {
                        if let Some(reply) = m.awaiting_sync.take() {
                            let _ = reply.send(SyncResult {
                                error: None,
                                protocol_type: group.protocol_type.clone(),
                                protocol_name: group.protocol_name.clone(),
                                assignment: m.assignment.clone(),
                            });
                        }
                    }
                }
            }
            GroupState::Stable => {
                let member = &group.members[&req.member_id];
                let _ = reply.send(SyncResult {
                    error: None,
                    protocol_type: group.protocol_type.clone(),
                    protocol_name: group.protocol_name.clone(),
                    assignment: member.assignment.clone(),
                });
            }
        }
    }

    pub fn heartbeat(
        &mut self,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        generation_id: Option<GenerationId>,
        now_ms: i64,
    ) -> Result<(), GroupError> {
        if let Some(result) =
            self.heartbeat_consumer(group_id, member_id, instance, generation_id, now_ms)
        {
            return result;
        }
        let group = self
            .groups
            .get_mut(group_id)
            .ok_or(GroupError::UnknownMemberId)?;
        group.check_member(member_id, instance, generation_id)?;
        group
            .members
            .get_mut(member_id)
            .expect("checked")
            .last_heartbeat_ms = now_ms;
        match group.state {
            GroupState::Empty => Err(GroupError::UnknownMemberId),
            GroupState::PreparingRebalance => Err(GroupError::RebalanceInProgress),
            GroupState::CompletingRebalance | GroupState::Stable => Ok(()),
        }
    }

    /// Removes members; returns one result per (member id, instance id) given.
    pub fn leave(
        &mut self,
        group_id: &str,
        leaving: &[(String, Option<String>)],
        now_ms: i64,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        if let Some(results) = self.leave_consumer(group_id, leaving) {
            return Ok(results);
        }
        let config = self.config.clone();
        let group = self
            .groups
            .get_mut(group_id)
            .ok_or(GroupError::UnknownMemberId)?;
        let mut removed = false;
        let results = leaving
            .iter()
            .map(|(member_id, instance)| {
                let target = match instance {
                    Some(instance) => match group.static_members.get(instance) {
                        Some(current) if !member_id.is_empty() && current != member_id => {
                            return Err(GroupError::FencedInstanceId)
                        }
                        Some(current) => current.clone(),
                        None => return Err(GroupError::UnknownMemberId),
                    },
                    None => member_id.clone(),
                };
                if group.members.contains_key(&target) {
                    group.remove_member(&target);
                    removed = true;
                    Ok(())
                } else if group.pending_members.remove(&target).is_some() {
                    Ok(())
                } else {
                    Err(GroupError::UnknownMemberId)
                }
            })
            .collect();
        if removed {
            group.members_changed(&config, now_ms);
        }
        Ok(results)
    }

    /// Checks that a commit may be applied: a member of the current generation (an
    /// unknown member: UNKNOWN_MEMBER_ID; another generation, or none: ILLEGAL_GENERATION;
    /// while the group completes a rebalance: REBALANCE_IN_PROGRESS), or a commit without
    /// a generation to a group without members. Partition ownership is not checked, as
    /// Kafka does not for classic groups.
    pub fn check_commit(
        &self,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        generation_id: Option<GenerationId>,
    ) -> Result<(), GroupError> {
        if group_id.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        if let Some(c) = self.consumer.get(group_id) {
            let anonymous = generation_id.is_none() && member_id.is_empty();
            if !(anonymous && c.members.is_empty()) {
                return c.check_member_epoch(member_id, generation_id.map(GenerationId::value));
            }
        }
        let Some(group) = self.groups.get(group_id) else {
            self.check_room_for_group(group_id)?;
            return if generation_id.is_none() {
                Ok(())
            } else {
                Err(GroupError::IllegalGeneration)
            };
        };
        // As Kafka's classic groups do: without a generation, offsets are committed from
        // outside the group (an admin reset, a consumer that assigns itself partitions),
        // which only a group without members takes, whatever member id is named.
        if generation_id.is_none() && group.members.is_empty() {
            return Ok(());
        }
        if generation_id.is_none() && member_id.is_empty() && instance.is_none() {
            return Err(GroupError::UnknownMemberId);
        }
        // A member commits in its current generation only: naming none (-1) is not a
        // way around the check.
        group.check_member(member_id, instance, generation_id)?;
        if generation_id.is_none() {
            return Err(GroupError::IllegalGeneration);
        }
        // A member of the current generation may commit while the group prepares a
        // rebalance: that is when an eager consumer commits what it consumed before it
        // rejoins and gives its partitions up (Kafka accepts these commits too). Once
        // every member has rejoined (CompletingRebalance) the generation is about to
        // change and a commit could land after the new owner fetched its offsets.
        match group.state {
            GroupState::CompletingRebalance => Err(GroupError::RebalanceInProgress),
            _ => Ok(()),
        }
    }

    /// Checks a commit of the given partitions: as [`Groups::check_commit`], except
    /// that a member of a consumer-protocol group may commit at an older epoch the
    /// partitions it has held since ([`ConsumerGroup::check_commit`]).
    pub fn check_commit_of(
        &self,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        generation_id: Option<GenerationId>,
        committed: &[(String, i32)],
    ) -> Result<(), GroupError> {
        let anonymous = generation_id.is_none() && member_id.is_empty();
        match self.consumer.get(group_id) {
            Some(c) if !(anonymous && c.members.is_empty()) => {
                c.check_commit(member_id, generation_id.map(GenerationId::value), committed)
            }
            _ => self.check_commit(group_id, member_id, instance, generation_id),
        }
    }

    /// Checks that offsets may be committed inside a transaction: as a plain commit,
    /// except that a producer that names no member (no generation, no member id, as the
    /// `sendOffsetsToTransaction(offsets, groupId)` form sends) may commit to a group
    /// with members, as Kafka allows; and that there is room for `count` more pending
    /// offsets.
    pub fn check_txn_commit(
        &self,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        generation_id: Option<GenerationId>,
        count: usize,
    ) -> Result<(), GroupError> {
        if self.pending_len + count > PENDING_TXN_OFFSETS_MAX {
            return Err(GroupError::TooManyPendingOffsets);
        }
        let anonymous = generation_id.is_none() && member_id.is_empty() && instance.is_none();
        match self.groups.get(group_id) {
            Some(_) if anonymous => Ok(()),
            _ => self.check_commit(group_id, member_id, instance, generation_id),
        }
    }

    /// Records offsets committed inside the transaction of `producer_id` (already
    /// durable in the offsets log); they count once it commits.
    pub fn apply_pending(
        &mut self,
        producer_id: ProducerId,
        group_id: &str,
        offsets: Vec<(TopicPartition, CommittedOffset)>,
    ) {
        let pending = self.pending.entry(producer_id).or_default();
        for (key, offset) in offsets {
            let key = (group_id.to_string(), key);
            match pending.get(&key) {
                Some(current) if current.log_offset > offset.log_offset => {}
                Some(_) => {
                    pending.insert(key, offset);
                }
                None => {
                    *self.pending_holders.entry(key.clone()).or_default() += 1;
                    pending.insert(key, offset);
                    self.pending_len += 1;
                }
            }
        }
    }

    /// The offsets pending in the transaction of `producer_id`.
    pub fn pending_of(
        &self,
        producer_id: ProducerId,
    ) -> Vec<(String, TopicPartition, CommittedOffset)> {
        self.pending.get(&producer_id).map_or_else(Vec::new, |p| {
            p.iter()
                .map(|((group, tp), offset)| (group.clone(), tp.clone(), offset.clone()))
                .collect()
        })
    }

    /// Forgets a pending offset (its transaction ended), unless a later one replaced
    /// it: `at_or_before` is the log offset of the pending record that was ended.
    pub fn remove_pending(
        &mut self,
        producer_id: ProducerId,
        group_id: &str,
        key: &TopicPartition,
        at_or_before: Option<Offset>,
    ) {
        let Some(pending) = self.pending.get_mut(&producer_id) else {
            return;
        };
        let key = (group_id.to_string(), key.clone());
        let ended = pending
            .get(&key)
            .is_some_and(|p| at_or_before.is_none_or(|at| p.log_offset <= at));
        if ended {
            pending.remove(&key);
            self.pending_len -= 1;
            if let Some(holders) = self.pending_holders.get_mut(&key) {
                *holders -= 1;
                if *holders == 0 {
                    self.pending_holders.remove(&key);
                }
            }
        }
        if pending.is_empty() {
            self.pending.remove(&producer_id);
        }
    }

    /// Whether an open transaction holds an offset for the partition of the group:
    /// a fetch that asks for stable offsets is then told to retry.
    pub fn has_pending(&self, group_id: &str, key: &TopicPartition) -> bool {
        let key = (group_id.to_string(), key.clone());
        self.pending_holders.contains_key(&key)
    }

    /// Offsets pending in open transactions.
    pub fn pending_len(&self) -> usize {
        self.pending_len
    }

    /// Records committed offsets (already durable in the offsets log).
    pub fn apply_commit(
        &mut self,
        group_id: &str,
        offsets: Vec<(TopicPartition, CommittedOffset)>,
        now_ms: i64,
    ) {
        let group = self
            .groups
            .entry(group_id.to_string())
            .or_insert_with(|| Group::new(group_id, now_ms));
        group.last_commit_ms = group.last_commit_ms.max(now_ms);
        for (key, offset) in offsets {
            match group.offsets.get(&key) {
                Some(current) if current.log_offset > offset.log_offset => {}
                _ => {
                    group.offsets.insert(key, offset);
                }
            }
        }
    }

    /// Removes committed offsets (replaying a tombstone from the offsets log).
    pub fn apply_delete(&mut self, group_id: &str, key: &TopicPartition) {
        if let Some(group) = self.groups.get_mut(group_id) {
            group.offsets.remove(key);
            if group.offsets.is_empty() && group.members.is_empty() {
                self.groups.remove(group_id);
            }
        }
    }

    /// Deletes a group without members; returns the offsets to tombstone.
    pub fn delete(&mut self, group_id: &str) -> Result<Vec<TopicPartition>, GroupError> {
        if let Some(c) = self.consumer.get(group_id) {
            if !c.members.is_empty() {
                return Err(GroupError::NonEmptyGroup);
            }
            self.consumer.remove(group_id);
            if !self.groups.contains_key(group_id) {
                return Ok(Vec::new());
            }
        }
        let group = self
            .groups
            .get(group_id)
            .ok_or(GroupError::GroupIdNotFound)?;
        if !group.members.is_empty() || group.state != GroupState::Empty {
            return Err(GroupError::NonEmptyGroup);
        }
        let group = self.groups.remove(group_id).expect("present");
        Ok(group.offsets.into_keys().collect())
    }

    /// Expires sessions and pending member ids, completes rebalances whose time is up,
    /// and expires the offsets of groups without members. Returns the expired offsets
    /// (group, topic partition) so the caller can tombstone them.
    pub fn tick(&mut self, now_ms: i64) -> Vec<(String, TopicPartition)> {
        let config = self.config.clone();
        let mut fenced = Vec::new();
        for c in self.consumer.values_mut() {
            let consumer_config =
                consumer_config(&self.config, self.consumer_overrides.get(&c.group_id));
            if c.tick(&consumer_config, now_ms) > 0 {
                fenced.push(c.group_id.clone());
            }
        }
        for id in fenced {
            self.maybe_downgrade(&id, now_ms);
        }
        let mut expired_offsets = Vec::new();
        let mut dead = Vec::new();
        for group in self.groups.values_mut() {
            group
                .pending_members
                .retain(|_, deadline| *deadline > now_ms);
            let expired: Vec<String> = group
                .members
                .values()
                .filter(|m| m.expired(now_ms))
                .map(|m| m.member_id.clone())
                .collect();
            for id in &expired {
                tracing::info!(group = %group.group_id, member = %id, "session expired");
                group.remove_member(id);
            }
            if !expired.is_empty() {
                group.members_changed(&config, now_ms);
            }
            group.maybe_complete_join(now_ms);
            let consumers = self
                .consumer
                .get(&group.group_id)
                .is_some_and(|c| !c.members.is_empty());
            let idle = group.members.is_empty() && group.state == GroupState::Empty && !consumers;
            if idle && now_ms - group.last_commit_ms > config.offsets_retention_ms {
                let keys = std::mem::take(&mut group.offsets);
                expired_offsets.extend(keys.into_keys().map(|k| (group.group_id.clone(), k)));
                dead.push(group.group_id.clone());
            }
        }
        for id in dead {
            self.groups.remove(&id);
        }
        // An empty consumer group lasts as long as its offsets do.
        let groups = &self.groups;
        self.consumer
            .retain(|id, c| !c.members.is_empty() || groups.contains_key(id));
        expired_offsets
    }

    /// The timings and bounds of one consumer-protocol group: the broker's, with the
    /// group's own settings over them.
    pub fn consumer_config(&self, group_id: &str) -> ConsumerConfig {
        consumer_config(&self.config, self.consumer_overrides.get(group_id))
    }

    /// Handles a ConsumerGroupHeartbeat. A classic group with members is converted as
    /// the migration policy allows (`convert`; GROUP_ID_NOT_FOUND when it does not, as
    /// Kafka answers); a heartbeat other than a join for a group this broker does not
    /// hold gets UNKNOWN_MEMBER_ID, and the client rejoins.
    pub fn consumer_heartbeat(
        &mut self,
        req: &HeartbeatRequest,
        topics: &TopicsView,
        now_ms: i64,
    ) -> Result<HeartbeatAnswer, GroupError> {
        if req.group_id.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        if self
            .groups
            .get(&req.group_id)
            .is_some_and(|g| !g.members.is_empty() || g.state != GroupState::Empty)
        {
            self.upgrade(req, topics, now_ms)?;
        }
        if !self.consumer.contains_key(&req.group_id) {
            if req.member_epoch != MemberEpochIn::Join {
                return Err(GroupError::UnknownMemberId);
            }
            let groups = self.groups.len() + self.consumer.len();
            if !self.groups.contains_key(&req.group_id) && groups >= self.config.groups_max {
                return Err(GroupError::CoordinatorNotAvailable);
            }
        }
        let config = self.consumer_config(&req.group_id);
        let group = self
            .consumer
            .entry(req.group_id.clone())
            .or_insert_with(|| ConsumerGroup::new(&req.group_id));
        let answer = group.heartbeat(req, topics, &config, now_ms);
        if group.members.is_empty() && !self.groups.contains_key(&req.group_id) {
            self.consumer.remove(&req.group_id);
        }
        if let Ok(HeartbeatAnswer::Left {
            static_leave: false,
            ..
        }) = answer
        {
            self.maybe_downgrade(&req.group_id, now_ms);
        }
        answer
    }

    /// Checks an OffsetFetch that names a member (v9+): a consumer group's member at
    /// its epoch. Classic groups and fetches naming no member are not checked.
    pub fn check_fetch(
        &self,
        group_id: &str,
        member_id: Option<&str>,
        member_epoch: Option<i32>,
    ) -> Result<(), GroupError> {
        match (self.consumer.get(group_id), member_id) {
            (Some(c), Some(member_id)) => c.check_member_epoch(member_id, member_epoch),
            _ => Ok(()),
        }
    }
}

fn add_member(
    group: &mut Group,
    req: &JoinRequest,
    member_id: String,
    reply: oneshot::Sender<JoinResult>,
    now_ms: i64,
) {
    if group.members.is_empty() {
        group.protocol_type = Some(req.protocol_type.clone());
    }
    if let Some(instance) = &req.group_instance_id {
        group
            .static_members
            .insert(instance.clone(), member_id.clone());
    }
    group.members.insert(
        member_id.clone(),
        Member {
            member_id,
            group_instance_id: req.group_instance_id.clone(),
            client_id: req.client_id.clone(),
            client_host: req.client_host.clone(),
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            protocols: req.protocols.clone(),
            assignment: Bytes::new(),
            last_heartbeat_ms: now_ms,
            awaiting_join: Some(reply),
            awaiting_sync: None,
            epoch_before_downgrade: None,
        },
    );
}

fn join_new_member(
    group: &mut Group,
    config: &GroupConfig,
    req: JoinRequest,
    reply: oneshot::Sender<JoinResult>,
    now_ms: i64,
) {
    if let Some(instance) = req.group_instance_id.clone() {
        if let Some(old_id) = group.static_members.get(&instance).cloned() {
            return rejoin_static_member(group, config, req, old_id, reply, now_ms);
        }
        if group.members.len() + group.pending_members.len() >= config.members_per_group_max {
            let _ = reply.send(JoinResult::error(
                GroupError::GroupMaxSizeReached,
                &req.member_id,
            ));
            return;
        }
        let id = new_member_id(&instance);
        add_member(group, &req, id, reply, now_ms);
        group.prepare_rebalance(config, now_ms);
        return;
    }
    if group.members.len() + group.pending_members.len() >= config.members_per_group_max {
        tracing::warn!(group = %group.group_id, members = group.members.len(), "group is full: refusing a new member");
        let _ = reply.send(JoinResult::error(
            GroupError::GroupMaxSizeReached,
            &req.member_id,
        ));
        return;
    }
    let id = new_member_id(&req.client_id);
    if req.require_known_member_id {
        group
            .pending_members
            .insert(id.clone(), now_ms + i64::from(req.session_timeout_ms));
        let _ = reply.send(JoinResult::error(GroupError::MemberIdRequired, &id));
        return;
    }
    add_member(group, &req, id, reply, now_ms);
    if group.state != GroupState::PreparingRebalance {
        group.prepare_rebalance(config, now_ms);
    }
}

/// A static member came back with a new session (its old member id is fenced). In a
/// stable group with unchanged protocols it gets its old assignment without a rebalance.
fn rejoin_static_member(
    group: &mut Group,
    config: &GroupConfig,
    req: JoinRequest,
    old_id: String,
    reply: oneshot::Sender<JoinResult>,
    now_ms: i64,
) {
    let mut member = group
        .members
        .remove(&old_id)
        .expect("static members map to members");
    if let Some(old) = member.awaiting_join.take() {
        let _ = old.send(JoinResult::error(GroupError::FencedInstanceId, &old_id));
    }
    if let Some(old) = member.awaiting_sync.take() {
        let _ = old.send(SyncResult::error(GroupError::FencedInstanceId));
    }
    let new_id = new_member_id(req.group_instance_id.as_deref().unwrap_or_default());
    let unchanged = member.protocols == req.protocols;
    member.member_id = new_id.clone();
    member.client_id = req.client_id.clone();
    member.client_host = req.client_host.clone();
    member.session_timeout_ms = req.session_timeout_ms;
    member.rebalance_timeout_ms = req.rebalance_timeout_ms;
    member.protocols = req.protocols.clone();
    member.last_heartbeat_ms = now_ms;
    group.members.insert(new_id.clone(), member);
    group.static_members.insert(
        req.group_instance_id.clone().expect("static"),
        new_id.clone(),
    );
    if group.leader_id.as_deref() == Some(old_id.as_str()) {
        group.leader_id = Some(new_id.clone());
    }
    if group.state == GroupState::Stable && unchanged {
        tracing::info!(group = %group.group_id, member = %new_id, "static member rejoined without a rebalance");
        let mut result = group.join_result(&new_id);
        result.members.clear();
        let _ = reply.send(result);
        return;
    }
    group
        .members
        .get_mut(&new_id)
        .expect("inserted")
        .awaiting_join = Some(reply);
    if group.state != GroupState::PreparingRebalance {
        group.prepare_rebalance(config, now_ms);
    }
}

fn join_known_member(
    group: &mut Group,
    config: &GroupConfig,
    req: JoinRequest,
    reply: oneshot::Sender<JoinResult>,
    now_ms: i64,
) {
    if group.pending_members.remove(&req.member_id).is_some() {
        add_member(group, &req, req.member_id.clone(), reply, now_ms);
        if group.state != GroupState::PreparingRebalance {
            group.prepare_rebalance(config, now_ms);
        }
        return;
    }
    if let Err(e) = group.check_member(&req.member_id, req.group_instance_id.as_deref(), None) {
        let _ = reply.send(JoinResult::error(e, &req.member_id));
        return;
    }
    let is_leader = group.leader_id.as_deref() == Some(req.member_id.as_str());
    let state = group.state;
    let member = group.members.get_mut(&req.member_id).expect("checked");
    let unchanged = member.protocols == req.protocols;
    member.protocols = req.protocols;
    member.session_timeout_ms = req.session_timeout_ms;
    member.rebalance_timeout_ms = req.rebalance_timeout_ms;
    member.last_heartbeat_ms = now_ms;
    // A member that rejoins with nothing changed gets the current generation back; a
    // leader rejoining a stable group, or any change, starts a rebalance.
    let current = match state {
        GroupState::CompletingRebalance => unchanged,
        GroupState::Stable => unchanged && !is_leader,
        _ => false,
    };
    if state == GroupState::PreparingRebalance {
        if let Some(old) = member.awaiting_join.replace(reply) {
            let _ = old.send(JoinResult::error(
                GroupError::RebalanceInProgress,
                &req.member_id,
            ));
        }
    } else if current {
        let _ = reply.send(group.join_result(&req.member_id));
    } else {
        member.awaiting_join = Some(reply);
        group.prepare_rebalance(config, now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headway_base::PartitionIndex;

    /// The generation a request names, as the handlers convert it (-1 is none).
    fn generation(value: i32) -> Option<GenerationId> {
        GenerationId::from_wire(value)
    }

    fn config() -> GroupConfig {
        GroupConfig {
            initial_rebalance_delay_ms: 0,
            ..GroupConfig::default()
        }
    }

    fn join_req(member_id: &str, instance: Option<&str>, protocols: &[&str]) -> JoinRequest {
        JoinRequest {
            group_id: "g".into(),
            member_id: member_id.into(),
            group_instance_id: instance.map(str::to_string),
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".into(),
            protocols: protocols
                .iter()
                .map(|p| (p.to_string(), Bytes::from(format!("meta-{p}"))))
                .collect(),
            require_known_member_id: true,
        }
    }

    pub(super) fn join(
        groups: &mut Groups,
        req: JoinRequest,
        now: i64,
    ) -> oneshot::Receiver<JoinResult> {
        let (tx, rx) = oneshot::channel();
        groups.join(req, tx, now);
        rx
    }

    /// Joins a new dynamic member through the MEMBER_ID_REQUIRED round.
    pub(super) fn join_new(
        groups: &mut Groups,
        protocols: &[&str],
        now: i64,
    ) -> (String, oneshot::Receiver<JoinResult>) {
        let mut first = join(groups, join_req("", None, protocols), now);
        let answer = first.try_recv().expect("answered at once");
        assert_eq!(answer.error, Some(GroupError::MemberIdRequired));
        let id = answer.member_id;
        (
            id.clone(),
            join(groups, join_req(&id, None, protocols), now),
        )
    }

    pub(super) fn sync(
        groups: &mut Groups,
        member: &str,
        generation: Option<GenerationId>,
        assignments: Vec<(String, Bytes)>,
        now: i64,
    ) -> oneshot::Receiver<SyncResult> {
        let (tx, rx) = oneshot::channel();
        let req = SyncRequest {
            group_id: "g".into(),
            generation_id: generation,
            member_id: member.into(),
            group_instance_id: None,
            protocol_type: None,
            protocol_name: None,
            assignments,
        };
        groups.sync(req, tx, now);
        rx
    }

    #[test]
    fn two_members_join_sync_and_become_stable() {
        let mut groups = Groups::new(config());
        let (a, mut ja) = join_new(&mut groups, &["range", "roundrobin"], 0);
        // A alone completes the first rebalance (no initial delay here).
        let ra = ja.try_recv().unwrap();
        assert_eq!(
            (ra.error, ra.generation_id, ra.leader.as_str()),
            (None, generation(1), a.as_str())
        );
        let mut sa = sync(
            &mut groups,
            &a,
            generation(1),
            vec![(a.clone(), Bytes::from("all"))],
            0,
        );
        assert_eq!(sa.try_recv().unwrap().assignment, Bytes::from("all"));
        assert_eq!(groups.get("g").unwrap().state, GroupState::Stable);

        // B joins: the group rebalances; A learns it from its heartbeat and rejoins.
        let (b, mut jb) = join_new(&mut groups, &["roundrobin"], 1);
        assert!(jb.try_recv().is_err(), "B waits for A to rejoin");
        assert_eq!(
            groups.heartbeat("g", &a, None, generation(1), 2),
            Err(GroupError::RebalanceInProgress)
        );
        let mut ja = join(&mut groups, join_req(&a, None, &["range", "roundrobin"]), 3);
        let (ra, rb) = (ja.try_recv().unwrap(), jb.try_recv().unwrap());
        assert_eq!(ra.generation_id, generation(2));
        assert_eq!(
            ra.protocol_name.as_deref(),
            Some("roundrobin"),
            "the protocol both support"
        );
        assert_eq!(ra.members.len(), 2, "the leader sees every member");
        assert!(rb.members.is_empty());
        let mut sb = sync(&mut groups, &b, generation(2), vec![], 4);
        assert!(sb.try_recv().is_err(), "a follower waits for the leader");
        let mut sa = sync(
            &mut groups,
            &a,
            generation(2),
            vec![
                (a.clone(), Bytes::from("p0")),
                (b.clone(), Bytes::from("p1")),
            ],
            5,
        );
        assert_eq!(sa.try_recv().unwrap().assignment, Bytes::from("p0"));
        assert_eq!(sb.try_recv().unwrap().assignment, Bytes::from("p1"));
        assert_eq!(
            groups.heartbeat("g", &b, None, generation(1), 6),
            Err(GroupError::IllegalGeneration)
        );
        assert_eq!(groups.heartbeat("g", &b, None, generation(2), 6), Ok(()));
    }

    /// Forms a group of two members that joined within the initial delay (100 ms).
    pub(super) fn two_member_group(groups: &mut Groups) -> (String, String, Option<GenerationId>) {
        let (a, mut ja) = join_new(groups, &["range"], 0);
        let (b, mut jb) = join_new(groups, &["range"], 10);
        groups.tick(100);
        let (ra, rb) = (ja.try_recv().unwrap(), jb.try_recv().unwrap());
        assert_eq!(ra.generation_id, rb.generation_id);
        let leader = ra.leader.clone();
        sync(
            groups,
            if leader == a { &b } else { &a },
            ra.generation_id,
            vec![],
            100,
        );
        sync(groups, &leader, ra.generation_id, vec![], 100);
        assert_eq!(groups.get("g").unwrap().state, GroupState::Stable);
        (a, b, ra.generation_id)
    }

    pub(super) fn delayed() -> GroupConfig {
        GroupConfig {
            initial_rebalance_delay_ms: 100,
            ..GroupConfig::default()
        }
    }

    #[test]
    fn an_expired_member_is_removed_and_the_group_rebalances() {
        let mut groups = Groups::new(delayed());
        let (a, b, gen) = two_member_group(&mut groups);
        // A keeps heartbeating, B goes silent past its 10 s session.
        for t in (1..=12).map(|s| s * 1000) {
            let _ = groups.heartbeat("g", &a, None, gen, t);
            groups.tick(t);
        }
        let g = groups.get("g").unwrap();
        assert!(!g.members.contains_key(&b));
        assert_eq!(g.state, GroupState::PreparingRebalance);
        let mut ja = join(&mut groups, join_req(&a, None, &["range"]), 12_500);
        let ra = ja.try_recv().unwrap();
        assert_eq!(
            (ra.generation_id, ra.members.len()),
            (gen.map(GenerationId::next), 1)
        );
    }

    #[test]
    fn members_commit_while_the_group_prepares_a_rebalance_not_while_it_completes() {
        let mut groups = Groups::new(delayed());
        let (a, b, gen) = two_member_group(&mut groups);
        // C joins: the group prepares a rebalance; A and B may still commit what they
        // consumed in their generation before they rejoin.
        let (_c, mut jc) = join_new(&mut groups, &["range"], 1_000);
        assert_eq!(
            groups.get("g").unwrap().state,
            GroupState::PreparingRebalance
        );
        assert_eq!(groups.check_commit("g", &a, None, gen), Ok(()));
        assert_eq!(
            groups.check_commit("g", &a, None, gen.map(|g| GenerationId::new(g.value() - 1))),
            Err(GroupError::IllegalGeneration)
        );
        let mut ja = join(&mut groups, join_req(&a, None, &["range"]), 1_100);
        let mut jb = join(&mut groups, join_req(&b, None, &["range"]), 1_200);
        let (ra, _, _) = (
            ja.try_recv().unwrap(),
            jb.try_recv().unwrap(),
            jc.try_recv().unwrap(),
        );
        assert_eq!(
            groups.get("g").unwrap().state,
            GroupState::CompletingRebalance
        );
        assert_eq!(
            groups.check_commit("g", &a, None, ra.generation_id),
            Err(GroupError::RebalanceInProgress)
        );
    }

    #[test]
    fn a_rebalance_completes_at_its_deadline_without_the_silent_member() {
        let mut groups = Groups::new(delayed());
        let (a, b, gen) = two_member_group(&mut groups);
        // C joins; A rejoins; B keeps heartbeating but never rejoins, so the rebalance
        // ends at its 30 s deadline.
        let (_c, mut jc) = join_new(&mut groups, &["range"], 1_000);
        let mut ja = join(&mut groups, join_req(&a, None, &["range"]), 1_100);
        for t in (2..=30).map(|s| s * 1000) {
            assert_eq!(
                groups.heartbeat("g", &b, None, gen, t),
                Err(GroupError::RebalanceInProgress)
            );
            groups.tick(t);
        }
        assert!(jc.try_recv().is_err());
        groups.tick(31_001);
        let (rc, ra) = (jc.try_recv().unwrap(), ja.try_recv().unwrap());
        assert_eq!(rc.generation_id, gen.map(GenerationId::next));
        let leader = if ra.leader == a { ra } else { rc };
        assert_eq!(leader.members.len(), 2, "B was dropped");
        assert!(!groups.get("g").unwrap().members.contains_key(&b));
    }

    #[test]
    fn a_static_member_restarting_keeps_its_assignment_without_a_rebalance() {
        let mut groups = Groups::new(config());
        let mut j = join(&mut groups, join_req("", Some("host-1"), &["range"]), 0);
        let first = j.try_recv().unwrap();
        assert_eq!(first.error, None, "static members skip MEMBER_ID_REQUIRED");
        sync(
            &mut groups,
            &first.member_id,
            generation(1),
            vec![(first.member_id.clone(), Bytes::from("p0-p5"))],
            0,
        );
        // The process restarts and joins again with an empty member id.
        let mut j = join(&mut groups, join_req("", Some("host-1"), &["range"]), 5_000);
        let again = j.try_recv().unwrap();
        assert_eq!(again.error, None);
        assert_eq!(again.generation_id, generation(1), "no new generation");
        assert_ne!(again.member_id, first.member_id);
        assert_eq!(groups.get("g").unwrap().state, GroupState::Stable);
        let mut s = sync(&mut groups, &again.member_id, generation(1), vec![], 5_001);
        assert_eq!(s.try_recv().unwrap().assignment, Bytes::from("p0-p5"));
        // The old incarnation is fenced.
        assert_eq!(
            groups.heartbeat("g", &first.member_id, Some("host-1"), generation(1), 5_002),
            Err(GroupError::FencedInstanceId)
        );
    }

    #[test]
    fn protocols_must_overlap_and_unknown_members_are_refused() {
        let mut groups = Groups::new(config());
        let (_a, mut ja) = join_new(&mut groups, &["range"], 0);
        ja.try_recv().unwrap();
        let mut j = join(&mut groups, join_req("", None, &["cooperative-sticky"]), 1);
        assert_eq!(
            j.try_recv().unwrap().error,
            Some(GroupError::InconsistentGroupProtocol)
        );
        let mut j = join(&mut groups, join_req("nobody", None, &["range"]), 1);
        assert_eq!(
            j.try_recv().unwrap().error,
            Some(GroupError::UnknownMemberId)
        );
        assert_eq!(
            groups.heartbeat("g", "nobody", None, generation(1), 1),
            Err(GroupError::UnknownMemberId)
        );
    }

    #[test]
    fn leaving_members_empty_the_group_and_commits_check_generations() {
        let mut groups = Groups::new(config());
        let (a, mut ja) = join_new(&mut groups, &["range"], 0);
        let gen = ja.try_recv().unwrap().generation_id;
        sync(&mut groups, &a, gen, vec![], 0);
        assert_eq!(groups.check_commit("g", &a, None, gen), Ok(()));
        assert_eq!(
            groups.check_commit("g", &a, None, gen.map(GenerationId::next)),
            Err(GroupError::IllegalGeneration)
        );
        assert_eq!(
            groups.check_commit("g", "", None, None),
            Err(GroupError::UnknownMemberId)
        );
        assert_eq!(groups.delete("g"), Err(GroupError::NonEmptyGroup));
        let results = groups
            .leave("g", &[(a.clone(), None), ("ghost".into(), None)], 1)
            .unwrap();
        assert_eq!(results, vec![Ok(()), Err(GroupError::UnknownMemberId)]);
        assert_eq!(groups.get("g").unwrap().state, GroupState::Empty);
        assert_eq!(groups.check_commit("g", "", None, None), Ok(()));
        assert_eq!(groups.delete("g"), Ok(vec![]));
    }

    #[test]
    fn commits_are_checked_as_kafka_checks_a_classic_groups() {
        let mut groups = Groups::new(delayed());
        let (a, b, gen) = two_member_group(&mut groups);
        let older = gen.map(|g| GenerationId::new(g.value() - 1));
        assert_eq!(groups.check_commit("g", &a, None, gen), Ok(()));
        // Another generation, or none, from a member: ILLEGAL_GENERATION; naming no
        // generation does not skip the check.
        for other in [older, gen.map(GenerationId::next), None] {
            assert_eq!(
                groups.check_commit("g", &a, None, other),
                Err(GroupError::IllegalGeneration),
                "{other:?}"
            );
        }
        // A member the group does not know, with or without a generation; nobody named.
        for other in [gen, None] {
            assert_eq!(
                groups.check_commit("g", "ghost", None, other),
                Err(GroupError::UnknownMemberId)
            );
        }
        assert_eq!(
            groups.check_commit("g", "", None, None),
            Err(GroupError::UnknownMemberId)
        );

        // B leaves: the group prepares a rebalance. A may commit in its generation
        // until it rejoins; B, fenced, may not.
        groups.leave("g", &[(b.clone(), None)], 1_000).unwrap();
        assert_eq!(
            groups.get("g").unwrap().state,
            GroupState::PreparingRebalance
        );
        assert_eq!(groups.check_commit("g", &a, None, gen), Ok(()));
        assert_eq!(
            groups.check_commit("g", &b, None, gen),
            Err(GroupError::UnknownMemberId)
        );
        // A rejoins: the next generation completes; A's commits of the one before are
        // refused, and until the leader's SyncGroup, so are those of the new one.
        let mut ja = join(&mut groups, join_req(&a, None, &["range"]), 1_100);
        let next = ja.try_recv().unwrap().generation_id;
        assert_eq!(next, gen.map(GenerationId::next));
        assert_eq!(
            groups.check_commit("g", &a, None, gen),
            Err(GroupError::IllegalGeneration)
        );
        assert_eq!(
            groups.check_commit("g", &a, None, next),
            Err(GroupError::RebalanceInProgress)
        );
        sync(&mut groups, &a, next, vec![], 1_200);
        assert_eq!(groups.check_commit("g", &a, None, next), Ok(()));

        // Once the group has no members, a commit without a generation is taken
        // whatever member id it names; one with a generation is not.
        groups.leave("g", &[(a.clone(), None)], 1_300).unwrap();
        assert_eq!(groups.get("g").unwrap().state, GroupState::Empty);
        assert_eq!(groups.check_commit("g", &a, None, None), Ok(()));
        assert_eq!(groups.check_commit("g", "", None, None), Ok(()));
        assert_eq!(
            groups.check_commit("g", &a, None, next),
            Err(GroupError::UnknownMemberId)
        );
    }

    #[test]
    fn offsets_of_an_idle_group_expire() {
        let mut groups = Groups::new(GroupConfig {
            offsets_retention_ms: 1_000,
            ..config()
        });
        let offset = OffsetCommit {
            offset: Offset::new(42),
            leader_epoch: None,
            metadata: None,
            commit_timestamp_ms: 0,
        }
        .at(Offset::ZERO);
        let key = TopicPartition::new("t", PartitionIndex::new(0));
        groups.apply_commit("g", vec![(key.clone(), offset)], 0);
        assert!(groups.tick(500).is_empty());
        assert_eq!(groups.tick(1_500), vec![("g".to_string(), key)]);
        assert!(groups.get("g").is_none());
    }

    #[test]
    fn groups_and_members_are_bounded() {
        let mut groups = Groups::new(GroupConfig {
            members_per_group_max: 1,
            groups_max: 1,
            ..config()
        });
        let (_a, mut ja) = join_new(&mut groups, &["range"], 0);
        assert_eq!(ja.try_recv().unwrap().error, None);
        let mut full = join(&mut groups, join_req("", None, &["range"]), 1);
        assert_eq!(
            full.try_recv().unwrap().error,
            Some(GroupError::GroupMaxSizeReached)
        );
        let mut other = join(
            &mut groups,
            JoinRequest {
                group_id: "h".into(),
                ..join_req("", None, &["range"])
            },
            1,
        );
        assert_eq!(
            other.try_recv().unwrap().error,
            Some(GroupError::CoordinatorNotAvailable)
        );
        assert_eq!(
            groups.check_commit("h", "", None, None),
            Err(GroupError::CoordinatorNotAvailable)
        );
        assert_eq!(
            groups.check_commit("g", "", None, None),
            Err(GroupError::UnknownMemberId)
        );
    }

    #[test]
    fn the_initial_delay_waits_for_more_members() {
        let mut groups = Groups::new(GroupConfig {
            initial_rebalance_delay_ms: 3_000,
            ..GroupConfig::default()
        });
        let (_a, mut ja) = join_new(&mut groups, &["range"], 0);
        assert!(ja.try_recv().is_err(), "the first rebalance waits");
        let (_b, mut jb) = join_new(&mut groups, &["range"], 1_000);
        groups.tick(2_999);
        assert!(jb.try_recv().is_err());
        groups.tick(3_000);
        let (ra, rb) = (ja.try_recv().unwrap(), jb.try_recv().unwrap());
        assert_eq!(
            (ra.generation_id, rb.generation_id),
            (generation(1), generation(1))
        );
        assert_eq!(
            ra.members.len() + rb.members.len(),
            2,
            "the leader sees both"
        );
    }

    pub(super) fn consumer_join(member_id: &str) -> HeartbeatRequest {
        HeartbeatRequest {
            group_id: "g".into(),
            member_id: member_id.into(),
            member_epoch: MemberEpochIn::Join,
            instance_id: None,
            rack_id: None,
            rebalance_timeout_ms: Some(30_000),
            subscribed_topic_names: Some(vec!["t".into()]),
            subscribed_topic_regex: None,
            server_assignor: None,
            owned: None,
            client_id: "c".into(),
            client_host: "h".into(),
        }
    }

    fn topic_t() -> TopicsView {
        let info = crate::consumer::TopicInfo {
            id: uuid::Uuid::from_u128(1),
            partitions: 2,
        };
        [("t".to_string(), info)].into()
    }

    #[test]
    fn a_group_s_own_session_timeout_fences_its_members_and_no_one_else_s() {
        let mut groups = Groups::new(config());
        groups.set_consumer_overrides(
            "short",
            ConsumerOverrides {
                session_timeout_ms: Some(10_000),
                heartbeat_interval_ms: Some(2_000),
            },
        );
        for group in ["short", "long"] {
            let req = HeartbeatRequest {
                group_id: group.into(),
                ..consumer_join("m")
            };
            groups.consumer_heartbeat(&req, &topic_t(), 0).unwrap();
        }
        assert_eq!(groups.consumer_config("short").heartbeat_interval_ms, 2_000);
        assert_eq!(groups.consumer_config("long").heartbeat_interval_ms, 5_000);
        groups.tick(10_001);
        assert!(
            groups
                .consumer
                .get("short")
                .is_none_or(|g| g.members.is_empty()),
            "fenced after 10 s"
        );
        assert_eq!(
            groups.consumer["long"].members.len(),
            1,
            "the broker's 45 s"
        );
        groups.set_consumer_overrides("short", ConsumerOverrides::default());
        assert_eq!(groups.consumer_config("short").session_timeout_ms, 45_000);
    }

    #[test]
    fn classic_and_consumer_groups_share_one_namespace_and_switch_when_empty() {
        // Without online conversion (`convert`'s tests have it).
        let mut groups = Groups::new(GroupConfig {
            migration_policy: MigrationPolicy::Disabled,
            ..config()
        });
        // A consumer group with a member: classic joins are refused, commits are
        // checked against member epochs.
        let answer = groups
            .consumer_heartbeat(&consumer_join("m"), &topic_t(), 0)
            .expect("join");
        let HeartbeatAnswer::Member { member_epoch, .. } = answer else {
            panic!("joined: {answer:?}");
        };
        let refused = join(&mut groups, join_req("", None, &["range"]), 1)
            .try_recv()
            .expect("answered");
        assert_eq!(refused.error, Some(GroupError::InconsistentGroupProtocol));
        let epoch = |e: i32| Some(GenerationId::new(e));
        assert_eq!(
            groups.check_commit("g", "m", None, epoch(member_epoch)),
            Ok(())
        );
        assert_eq!(
            groups.check_commit("g", "m", None, epoch(member_epoch + 1)),
            Err(GroupError::FencedMemberEpoch)
        );
        assert_eq!(
            groups.check_commit("g", "", None, None),
            Err(GroupError::UnknownMemberId),
            "no commits from outside while it has members"
        );
        assert_eq!(
            groups.check_fetch("g", Some("m"), Some(member_epoch)),
            Ok(())
        );
        assert_eq!(
            groups.check_fetch("g", Some("x"), Some(1)),
            Err(GroupError::UnknownMemberId)
        );
        assert_eq!(groups.delete("g"), Err(GroupError::NonEmptyGroup));
        // Emptied, it becomes a classic group on a classic join...
        let mut leave = consumer_join("m");
        leave.member_epoch = MemberEpochIn::Leave;
        groups
            .consumer_heartbeat(&leave, &topic_t(), 2)
            .expect("leave");
        let (_, _joined) = join_new(&mut groups, &["range"], 3);
        assert!(!groups.consumer.contains_key("g"));
        // ...and a classic group with members is not a consumer group.
        assert_eq!(
            groups.consumer_heartbeat(&consumer_join("n"), &topic_t(), 4),
            Err(GroupError::GroupIdNotFound)
        );
        // A heartbeat for a group the broker does not hold (after a restart) makes the
        // member rejoin.
        let mut beat = consumer_join("m");
        beat.group_id = "other".into();
        beat.member_epoch = MemberEpochIn::Member(3);
        assert_eq!(
            groups.consumer_heartbeat(&beat, &topic_t(), 5),
            Err(GroupError::UnknownMemberId)
        );
    }

    #[test]
    fn a_partition_stays_pending_while_any_transaction_holds_it() {
        let mut groups = Groups::new(config());
        let tp = TopicPartition::new("in", PartitionIndex::new(0));
        let at = |log_offset: i64| {
            OffsetCommit {
                offset: Offset::new(10),
                leader_epoch: None,
                metadata: None,
                commit_timestamp_ms: 0,
            }
            .at(Offset::new(log_offset))
        };
        let (first, second) = (ProducerId::new(1), ProducerId::new(2));
        groups.apply_pending(first, "g", vec![(tp.clone(), at(1))]);
        groups.apply_pending(first, "g", vec![(tp.clone(), at(3))]);
        groups.apply_pending(second, "g", vec![(tp.clone(), at(2))]);
        assert_eq!(groups.pending_len(), 2, "one offset per transaction");
        assert!(groups.has_pending("g", &tp) && !groups.has_pending("other", &tp));
        // The first transaction's end covers up to its record at 1: the replacing
        // record at 3 stays pending.
        groups.remove_pending(first, "g", &tp, Some(Offset::new(1)));
        assert_eq!(groups.pending_len(), 2);
        groups.remove_pending(first, "g", &tp, None);
        assert!(
            groups.has_pending("g", &tp),
            "the second transaction still holds it"
        );
        groups.remove_pending(second, "g", &tp, None);
        assert!(!groups.has_pending("g", &tp));
        assert_eq!(groups.pending_len(), 0);
    }
}
