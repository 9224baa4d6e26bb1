//! A consumer-protocol group as a state machine over plain values.
//!
//! Three epochs drive it, as in KIP-848:
//!
//! - the **group epoch** moves whenever what the group should look like changes: a
//!   member joins, leaves or is fenced, a subscription changes, or a subscribed topic is
//!   created, deleted or gains partitions;
//! - the **assignment epoch** is the group epoch the target assignment was computed
//!   for; a heartbeat that finds it behind runs the assignor;
//! - each member's **member epoch** reaches the assignment epoch once the member has
//!   been reconciled to its target.
//!
//! Reconciliation is incremental. A member first keeps the partitions it shares with
//! its target and is asked to revoke the others (state `UnrevokedPartitions`, epoch
//! unchanged). Once a heartbeat's owned partitions show it let them go, it moves to the
//! assignment epoch and gets the partitions of its target that nobody else holds; the
//! ones still held by another member (which has not yet revoked them) come later
//! (`UnreleasedPartitions`). So a partition is never held by two members: `owners`
//! maps each held partition to its one member, and every step keeps it so.
//!
//! A member that does not heartbeat within the session timeout, or does not revoke
//! within its rebalance timeout, is fenced: removed, its partitions freed, the group
//! epoch moved. A static member (`InstanceId`) that leaves with epoch -2 keeps its
//! place and assignment until its session times out, so a restart moves nothing.

use super::assignor::{Assignor, AssignorMember};
use super::classic::ClassicMember;
use super::topics::{Assignment, TopicsView};
use crate::GroupError;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What a heartbeat's `MemberEpoch` says, converted from the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberEpochIn {
    /// 0: join (or rejoin after being fenced).
    Join,
    /// A member's current (or previous) epoch.
    Member(i32),
    /// -1: the member leaves.
    Leave,
    /// -2: a static member leaves for now and keeps its assignment until its session
    /// times out.
    StaticLeave,
}

impl MemberEpochIn {
    /// The wire's epoch; `None` for a value no client sends (below -2).
    pub fn from_wire(epoch: i32) -> Option<MemberEpochIn> {
        match epoch {
            0 => Some(MemberEpochIn::Join),
            -1 => Some(MemberEpochIn::Leave),
            -2 => Some(MemberEpochIn::StaticLeave),
            e if e > 0 => Some(MemberEpochIn::Member(e)),
            _ => None,
        }
    }
}

/// A ConsumerGroupHeartbeat, converted from the wire. Fields a client leaves null
/// (unchanged since its last heartbeat) are `None`.
#[derive(Debug, Clone)]
pub struct HeartbeatRequest {
    pub group_id: String,
    /// Empty on a v0 join: the broker chooses one.
    pub member_id: String,
    pub member_epoch: MemberEpochIn,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: Option<i32>,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// The partitions the member owns, by name (topic ids the broker does not know are
    /// left out by the handler).
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
}

/// A heartbeat's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeartbeatAnswer {
    Member {
        member_id: String,
        member_epoch: i32,
        /// Sent when it changed, or when the member's request showed it holds something
        /// else; `None` tells the member to keep what it has.
        assignment: Option<Assignment>,
    },
    /// The member left (epoch -1) or left for now as a static member (-2).
    Left {
        member_id: String,
        static_leave: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Holds its target at the assignment epoch.
    Stable,
    /// Must revoke partitions before it moves on.
    UnrevokedPartitions,
    /// At the assignment epoch, waiting for partitions other members still hold.
    UnreleasedPartitions,
}

impl MemberState {
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Stable => "stable",
            MemberState::UnrevokedPartitions => "unrevoked_partitions",
            MemberState::UnreleasedPartitions => "unreleased_partitions",
        }
    }
}

#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    regex: Option<regex_automata::meta::Regex>,
    /// The topics it subscribes to now: its names and the topics its regex matches.
    pub subscribed: BTreeSet<String>,
    /// What it holds and may consume.
    pub assigned: Assignment,
    /// What it must give up (held until its heartbeat shows it did).
    pub revoking: Assignment,
    /// The member epoch at which it was given each partition it holds: a commit at an
    /// older epoch is accepted for partitions it has held since then (as Kafka 4.3
    /// does), so a commit that crossed a heartbeat moving the member on is not refused.
    partition_epochs: HashMap<(String, i32), i32>,
    last_heartbeat_ms: i64,
    revocation_deadline_ms: Option<i64>,
    /// A static member that left with epoch -2 and may come back.
    pub left_static: bool,
    /// A member of the classic protocol (online conversion, [`classic`]).
    pub classic: Option<ClassicMember>,
}

/// The states Kafka's tools print for a consumer group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerGroupState {
    Empty,
    Assigning,
    Reconciling,
    Stable,
}

impl ConsumerGroupState {
    pub fn name(self) -> &'static str {
        match self {
            ConsumerGroupState::Empty => "Empty",
            ConsumerGroupState::Assigning => "Assigning",
            ConsumerGroupState::Reconciling => "Reconciling",
            ConsumerGroupState::Stable => "Stable",
        }
    }
}

/// Timings and bounds a group step needs (from `GroupConfig`).
#[derive(Debug, Clone, Copy)]
pub struct ConsumerConfig {
    pub session_timeout_ms: i64,
    pub heartbeat_interval_ms: i32,
    pub members_max: usize,
    pub regex_bytes_max: usize,
}

#[derive(Debug, Clone)]
pub struct ConsumerGroup {
    pub group_id: String,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: Assignor,
    pub members: BTreeMap<String, ConsumerMember>,
    /// The target assignment, computed at `assignment_epoch`.
    pub target: BTreeMap<String, Assignment>,
    /// group.instance.id to member id.
    static_members: HashMap<String, String>,
    /// Partition count of every subscribed topic, when the group epoch last moved for it.
    subscribed_topics: BTreeMap<String, i32>,
    /// Who holds each held partition (assigned or being revoked): at most one member.
    owners: HashMap<(String, i32), String>,
}

fn partitions(a: &Assignment) -> impl Iterator<Item = (&String, i32)> {
    a.iter().flat_map(|(t, ps)| ps.iter().map(move |p| (t, *p)))
}

fn contains(a: &Assignment, topic: &str, p: i32) -> bool {
    a.get(topic).is_some_and(|ps| ps.contains(&p))
}

fn insert(a: &mut Assignment, topic: &str, p: i32) {
    a.entry(topic.to_string()).or_default().insert(p);
}

/// `a` minus the partitions of `b`, without empty topics.
fn minus(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = Assignment::new();
    for (t, p) in partitions(a) {
        if !contains(b, t, p) {
            insert(&mut out, t, p);
        }
    }
    out
}

/// The subscription regex, matched against whole topic names (as Kafka's RE2/J
/// `matches`).
fn compile_regex(regex: &str, bytes_max: usize) -> Result<regex_automata::meta::Regex, GroupError> {
    if regex.len() > bytes_max {
        return Err(GroupError::InvalidRegularExpression);
    }
    regex_automata::meta::Regex::new(&format!("^(?:{regex})$"))
        .map_err(|_| GroupError::InvalidRegularExpression)
}

impl ConsumerMember {
    fn new(member_id: String, req: &HeartbeatRequest) -> ConsumerMember {
        let mut member =
            ConsumerMember::blank(member_id, req.client_id.clone(), req.client_host.clone());
        member.instance_id = req.instance_id.clone();
        member
    }

    fn blank(member_id: String, client_id: String, client_host: String) -> ConsumerMember {
        ConsumerMember {
            member_id,
            instance_id: None,
            rack_id: None,
            client_id,
            client_host,
            member_epoch: 0,
            previous_member_epoch: 0,
            state: MemberState::Stable,
            rebalance_timeout_ms: 0,
            server_assignor: None,
            subscribed_topic_names: Vec::new(),
            subscribed_topic_regex: None,
            regex: None,
            subscribed: BTreeSet::new(),
            assigned: Assignment::new(),
            revoking: Assignment::new(),
            partition_epochs: HashMap::new(),
            last_heartbeat_ms: 0,
            revocation_deadline_ms: None,
            left_static: false,
            classic: None,
        }
    }

    /// Topics of `topics` it subscribes to: its names, and the names its regex matches.
    fn resolve(&self, topics: &TopicsView) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self.subscribed_topic_names.iter().cloned().collect();
        if let Some(re) = &self.regex {
            out.extend(topics.keys().filter(|t| re.is_match(t.as_str())).cloned());
        }
        out
    }
}

impl ConsumerGroup {
    pub fn new(group_id: &str) -> ConsumerGroup {
        ConsumerGroup {
            group_id: group_id.to_string(),
            group_epoch: 0,
            assignment_epoch: 0,
            assignor: Assignor::default(),
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            static_members: HashMap::new(),
            subscribed_topics: BTreeMap::new(),
            owners: HashMap::new(),
        }
    }

    pub fn state(&self) -> ConsumerGroupState {
        if self.members.is_empty() {
            ConsumerGroupState::Empty
        } else if self.group_epoch > self.assignment_epoch {
            ConsumerGroupState::Assigning
        } else if self
            .members
            .values()
            .any(|m| m.member_epoch != self.assignment_epoch || m.state != MemberState::Stable)
        {
            ConsumerGroupState::Reconciling
        } else {
            ConsumerGroupState::Stable
        }
    }

    /// The member holding a partition, if any.
    pub fn owner(&self, topic: &str, partition: i32) -> Option<&str> {
        self.owners
            .get(&(topic.to_string(), partition))
            .map(String::as_str)
    }

    /// Checks a request's fields before anything changes, as Kafka does.
    fn validate(&self, req: &HeartbeatRequest, config: &ConsumerConfig) -> Result<(), GroupError> {
        if req.group_id.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        match req.member_epoch {
            MemberEpochIn::Join => {
                let subscribed =
                    req.subscribed_topic_names.is_some() || req.subscribed_topic_regex.is_some();
                if req.rebalance_timeout_ms.is_none() || !subscribed {
                    return Err(GroupError::InvalidRequest);
                }
                if req.owned.as_ref().is_some_and(|o| !o.is_empty()) {
                    return Err(GroupError::InvalidRequest);
                }
            }
            MemberEpochIn::StaticLeave if req.instance_id.is_none() => {
                return Err(GroupError::InvalidRequest)
            }
            _ if req.member_id.is_empty() => return Err(GroupError::InvalidRequest),
            _ => {}
        }
        if let Some(name) = &req.server_assignor {
            if Assignor::from_name(name).is_none() {
                return Err(GroupError::UnsupportedAssignor);
            }
        }
        if let Some(re) = req
            .subscribed_topic_regex
            .as_deref()
            .filter(|r| !r.is_empty())
        {
            compile_regex(re, config.regex_bytes_max)?;
        }
        Ok(())
    }

    /// Handles a heartbeat: joins, leaves, subscription changes, assignment and
    /// reconciliation of the member. `topics` is the broker's topic list now.
    pub fn heartbeat(
        &mut self,
        req: &HeartbeatRequest,
        topics: &TopicsView,
        config: &ConsumerConfig,
        now_ms: i64,
    ) -> Result<HeartbeatAnswer, GroupError> {
        self.validate(req, config)?;
        let member_id = match req.member_epoch {
            MemberEpochIn::Leave => return self.leave(&req.member_id, req.instance_id.as_deref()),
            MemberEpochIn::StaticLeave => return self.static_leave(req, now_ms),
            MemberEpochIn::Join => self.join(req, config)?,
            MemberEpochIn::Member(epoch) => {
                self.check_epoch(req, epoch)?;
                req.member_id.clone()
            }
        };
        let before = self.members[&member_id].assigned.clone();
        let joined = req.member_epoch == MemberEpochIn::Join;
        self.update_member(&member_id, req, topics, config, now_ms)?;
        self.refresh_topics(topics);
        if self.group_epoch > self.assignment_epoch {
            self.compute_target(topics);
        }
        self.reconcile(&member_id, req.owned.as_ref(), now_ms);
        let member = &self.members[&member_id];
        let owned_differs = req.owned.as_ref().is_some_and(|o| *o != member.assigned);
        let send = joined || owned_differs || member.assigned != before;
        Ok(HeartbeatAnswer::Member {
            member_id,
            member_epoch: member.member_epoch,
            assignment: send.then(|| member.assigned.clone()),
        })
    }

    /// A joining member's id: a new member, a static member replacing its earlier self,
    /// or a member rejoining (fenced, or restarted with its id) starting afresh.
    fn join(
        &mut self,
        req: &HeartbeatRequest,
        config: &ConsumerConfig,
    ) -> Result<String, GroupError> {
        if let Some(instance) = &req.instance_id {
            if let Some(previous) = self.static_members.get(instance).cloned() {
                if previous != req.member_id {
                    let left = self.members.get(&previous).is_some_and(|m| m.left_static);
                    if !left {
                        return Err(GroupError::UnreleasedInstanceId);
                    }
                    let member_id = self.take_new_member_id(req);
                    self.replace_static(&previous, &member_id);
                    return Ok(member_id);
                }
            }
        }
        if !req.member_id.is_empty() && self.members.contains_key(&req.member_id) {
            // Rejoining with epoch 0: the member gave up everything it held (a client
            // does so when fenced), so it starts afresh.
            self.remove_member(&req.member_id.clone());
        }
        if self.members.len() >= config.members_max {
            return Err(GroupError::GroupMaxSizeReached);
        }
        let member_id = self.take_new_member_id(req);
        self.members.insert(
            member_id.clone(),
            ConsumerMember::new(member_id.clone(), req),
        );
        if let Some(instance) = &req.instance_id {
            self.static_members
                .insert(instance.clone(), member_id.clone());
        }
        self.group_epoch += 1;
        Ok(member_id)
    }

    fn take_new_member_id(&self, req: &HeartbeatRequest) -> String {
        match req.member_id.is_empty() {
            true => uuid::Uuid::new_v4().to_string(),
            false => req.member_id.clone(),
        }
    }

    /// A static member rejoined under a new member id: it takes its earlier self's
    /// place, epoch and partitions, and nothing moves.
    fn replace_static(&mut self, previous: &str, member_id: &str) {
        let mut member = self.members.remove(previous).expect("static member listed");
        member.member_id = member_id.to_string();
        member.left_static = false;
        for (t, p) in partitions(&member.assigned).chain(partitions(&member.revoking)) {
            self.owners.insert((t.clone(), p), member_id.to_string());
        }
        if let Some(target) = self.target.remove(previous) {
            self.target.insert(member_id.to_string(), target);
        }
        if let Some(instance) = &member.instance_id {
            self.static_members
                .insert(instance.clone(), member_id.to_string());
        }
        self.members.insert(member_id.to_string(), member);
    }

    /// A member heartbeats at its epoch, or at its previous epoch when it missed the
    /// answer that moved it on and owns nothing it should not (Kafka's rule).
    fn check_epoch(&self, req: &HeartbeatRequest, epoch: i32) -> Result<(), GroupError> {
        let member = self
            .members
            .get(&req.member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if req.instance_id.is_some() && req.instance_id != member.instance_id {
            return Err(GroupError::FencedInstanceId);
        }
        if epoch == member.member_epoch {
            return Ok(());
        }
        let missed_answer = epoch == member.previous_member_epoch
            && req
                .owned
                .as_ref()
                .is_some_and(|o| partitions(o).all(|(t, p)| contains(&member.assigned, t, p)));
        match missed_answer {
            true => Ok(()),
            false => Err(GroupError::FencedMemberEpoch),
        }
    }

    fn update_member(
        &mut self,
        member_id: &str,
        req: &HeartbeatRequest,
        topics: &TopicsView,
        config: &ConsumerConfig,
        now_ms: i64,
    ) -> Result<(), GroupError> {
        let member = self.members.get_mut(member_id).expect("member present");
        member.last_heartbeat_ms = now_ms;
        member.left_static = false;
        if let Some(t) = req.rebalance_timeout_ms {
            member.rebalance_timeout_ms = t;
        }
        if req.rack_id.is_some() {
            member.rack_id = req.rack_id.clone();
        }
        if let Some(a) = &req.server_assignor {
            member.server_assignor = Some(a.clone());
        }
        if let Some(names) = &req.subscribed_topic_names {
            member.subscribed_topic_names = names.clone();
        }
        if let Some(re) = &req.subscribed_topic_regex {
            let re = Some(re.clone()).filter(|r| !r.is_empty());
            if re != member.subscribed_topic_regex {
                member.regex = re
                    .as_deref()
                    .map(|r| compile_regex(r, config.regex_bytes_max))
                    .transpose()?;
                member.subscribed_topic_regex = re;
            }
        }
        let subscribed = member.resolve(topics);
        if subscribed != member.subscribed {
            member.subscribed = subscribed;
            self.group_epoch += 1;
        }
        Ok(())
    }

    /// Moves the group epoch when a subscribed topic appeared, went or changed its
    /// partition count, and re-resolves every member's regex against `topics`.
    fn refresh_topics(&mut self, topics: &TopicsView) {
        let mut changed = false;
        for member in self.members.values_mut() {
            if member.regex.is_some() {
                let subscribed = member.resolve(topics);
                if subscribed != member.subscribed {
                    member.subscribed = subscribed;
                    changed = true;
                }
            }
        }
        let now: BTreeMap<String, i32> = self
            .members
            .values()
            .flat_map(|m| m.subscribed.iter())
            .filter_map(|t| topics.get(t).map(|info| (t.clone(), info.partitions)))
            .collect();
        if changed || now != self.subscribed_topics {
            self.subscribed_topics = now;
            self.group_epoch += 1;
        }
    }

    /// Runs the assignor the members prefer (most votes; `uniform` by default).
    fn compute_target(&mut self, topics: &TopicsView) {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = &m.server_assignor {
                *votes.entry(a.as_str()).or_default() += 1;
            }
        }
        let preferred = votes
            .into_iter()
            .max_by_key(|(name, n)| (*n, std::cmp::Reverse(*name)));
        self.assignor = preferred
            .and_then(|(name, _)| Assignor::from_name(name))
            .unwrap_or_default();
        let empty = Assignment::new();
        let members: Vec<AssignorMember<'_>> = self
            .members
            .values()
            .map(|m| AssignorMember {
                member_id: &m.member_id,
                instance_id: m.instance_id.as_deref(),
                subscribed: &m.subscribed,
                previous: self.target.get(&m.member_id).unwrap_or(&empty),
            })
            .collect();
        self.target = self.assignor.assign(&members, topics);
        self.assignment_epoch = self.group_epoch;
        tracing::debug!(group = %self.group_id, epoch = self.group_epoch, assignor = self.assignor.name(), "target assignment computed");
    }

    /// Moves a member towards its target: revoke first, then take what is free.
    fn reconcile(&mut self, member_id: &str, owned: Option<&Assignment>, now_ms: i64) {
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let assignment_epoch = self.assignment_epoch;
        let member = self.members.get_mut(member_id).expect("member present");
        if member.state == MemberState::UnrevokedPartitions {
            let released = owned
                .is_some_and(|o| partitions(o).all(|(t, p)| !contains(&member.revoking, t, p)));
            if !released {
                // Keep asking; partitions that left its target since are revoked too.
                let more = minus(&member.assigned, &target);
                for (t, p) in partitions(&more) {
                    insert(&mut member.revoking, t, p);
                }
                member.assigned = minus(&member.assigned, &more);
                return;
            }
            for (t, p) in partitions(&member.revoking) {
                self.owners.remove(&(t.clone(), p));
                member.partition_epochs.remove(&(t.clone(), p));
            }
            member.revoking.clear();
            member.revocation_deadline_ms = None;
            member.state = MemberState::Stable;
        }
        if member.member_epoch == assignment_epoch && member.state == MemberState::Stable {
            return;
        }
        let revoke = minus(&member.assigned, &target);
        if !revoke.is_empty() {
            member.assigned = minus(&member.assigned, &revoke);
            member.revoking = revoke;
            member.state = MemberState::UnrevokedPartitions;
            member.revocation_deadline_ms = Some(now_ms + i64::from(member.rebalance_timeout_ms));
            return;
        }
        let mut unreleased = false;
        for (t, p) in partitions(&target) {
            if contains(&member.assigned, t, p) {
                continue;
            }
            match self.owners.get(&(t.clone(), p)) {
                Some(other) if other != member_id => unreleased = true,
                _ => {
                    self.owners.insert((t.clone(), p), member_id.to_string());
                    insert(&mut member.assigned, t, p);
                    member
                        .partition_epochs
                        .insert((t.clone(), p), assignment_epoch);
                }
            }
        }
        if member.member_epoch != assignment_epoch {
            member.previous_member_epoch = member.member_epoch;
            member.member_epoch = assignment_epoch;
        }
        member.state = match unreleased {
            true => MemberState::UnreleasedPartitions,
            false => MemberState::Stable,
        };
    }

    fn leave(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
    ) -> Result<HeartbeatAnswer, GroupError> {
        let id = match instance.and_then(|i| self.static_members.get(i)) {
            Some(current) if !member_id.is_empty() && current != member_id => {
                return Err(GroupError::FencedInstanceId)
            }
            Some(current) => current.clone(),
            None => member_id.to_string(),
        };
        if !self.members.contains_key(&id) {
            return Err(GroupError::UnknownMemberId);
        }
        self.remove_member(&id);
        Ok(HeartbeatAnswer::Left {
            member_id: id,
            static_leave: false,
        })
    }

    fn static_leave(
        &mut self,
        req: &HeartbeatRequest,
        now_ms: i64,
    ) -> Result<HeartbeatAnswer, GroupError> {
        let member = self
            .members
            .get_mut(&req.member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if member.instance_id != req.instance_id {
            return Err(GroupError::FencedInstanceId);
        }
        member.left_static = true;
        member.last_heartbeat_ms = now_ms;
        Ok(HeartbeatAnswer::Left {
            member_id: req.member_id.clone(),
            static_leave: true,
        })
    }

    /// Removes a member (left, fenced or expired) and frees what it held.
    pub fn remove_member(&mut self, member_id: &str) {
        let Some(m) = self.members.remove(member_id) else {
            return;
        };
        for (t, p) in partitions(&m.assigned).chain(partitions(&m.revoking)) {
            self.owners.remove(&(t.clone(), p));
        }
        self.target.remove(member_id);
        if let Some(instance) = &m.instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        self.group_epoch += 1;
    }

    /// Fences members whose session or revocation time is up. Returns how many.
    pub fn tick(&mut self, config: &ConsumerConfig, now_ms: i64) -> usize {
        let fenced: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                let session = m.classic.as_ref().map_or(config.session_timeout_ms, |c| {
                    i64::from(c.session_timeout_ms)
                });
                now_ms - m.last_heartbeat_ms > session
                    || m.revocation_deadline_ms.is_some_and(|d| now_ms > d)
            })
            .map(|m| m.member_id.clone())
            .collect();
        for id in &fenced {
            tracing::info!(group = %self.group_id, member = %id, "consumer group member fenced: session or rebalance timeout");
            self.remove_member(id);
        }
        fenced.len()
    }

    /// Checks an OffsetCommit (or an OffsetFetch naming a member) against the member's
    /// epoch: a newer epoch than the member's is fenced, an older one is stale.
    /// `member_epoch: None` (the wire's -1) is an admin or a consumer outside the group,
    /// allowed only while the group has no members.
    pub fn check_member_epoch(
        &self,
        member_id: &str,
        member_epoch: Option<i32>,
    ) -> Result<(), GroupError> {
        let Some(epoch) = member_epoch else {
            return match self.members.is_empty() {
                true => Ok(()),
                false => Err(GroupError::UnknownMemberId),
            };
        };
        let member = self
            .members
            .get(member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if member.classic.is_some() && epoch != member.member_epoch {
            // A classic member's epoch is its generation.
            return Err(GroupError::IllegalGeneration);
        }
        match epoch.cmp(&member.member_epoch) {
            std::cmp::Ordering::Greater => Err(GroupError::FencedMemberEpoch),
            std::cmp::Ordering::Less => Err(GroupError::StaleMemberEpoch),
            std::cmp::Ordering::Equal => Ok(()),
        }
    }

    /// Checks an OffsetCommit of a member: at its epoch; or at an older epoch, for
    /// partitions it has held since that epoch or earlier (STALE_MEMBER_EPOCH for any
    /// other). Anything else is as [`ConsumerGroup::check_member_epoch`].
    pub fn check_commit(
        &self,
        member_id: &str,
        member_epoch: Option<i32>,
        committed: &[(String, i32)],
    ) -> Result<(), GroupError> {
        match self.check_member_epoch(member_id, member_epoch) {
            Err(GroupError::StaleMemberEpoch) => {
                let member = &self.members[member_id];
                let epoch = member_epoch.expect("a stale epoch is an epoch");
                let held_since = |tp: &(String, i32)| {
                    member.partition_epochs.get(tp).is_some_and(|e| *e <= epoch)
                };
                match committed.iter().all(held_since) {
                    true => Ok(()),
                    false => Err(GroupError::StaleMemberEpoch),
                }
            }
            other => other,
        }
    }

    /// Panics if a partition is held by two members or `owners` disagrees with the
    /// members: the invariant every step keeps.
    pub fn assert_owners(&self) {
        let mut held = 0;
        for m in self.members.values() {
            for (t, p) in partitions(&m.assigned).chain(partitions(&m.revoking)) {
                held += 1;
                assert_eq!(self.owner(t, p), Some(m.member_id.as_str()), "{t}-{p}");
            }
        }
        assert_eq!(held, self.owners.len(), "a partition held twice");
    }
}

mod classic_members;

/// The durable form of these groups: a child module, so it reads and rebuilds the
/// fields the steps keep private.
pub mod durable;

#[cfg(test)]
mod tests;
