//! Share groups as plain values: members with epochs and assignments (the `simple`
//! assignor), their share sessions, and the group's share-partitions. Driven by
//! explicit times (`now_ms`); the coordinator holds it behind a mutex.
//!
//! Assignment (`simple`): for each subscribed topic, the members subscribed to it in
//! member-id order. With at least as many partitions as members, partitions go round
//! robin, each to one member; with more members than partitions, member `i` gets
//! partition `i mod partitions`, so every member gets work and members share
//! partitions. The group epoch moves when membership or subscriptions change; a
//! member's epoch becomes the group epoch when it is sent its assignment.

use crate::partition::{MemberId, SharePartition, SharePartitionConfig};
use headway_base::{Offset, PartitionIndex, TopicPartition};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// `share.auto.offset.reset`: where a share-partition without state starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AutoOffsetReset {
    #[default]
    Latest,
    Earliest,
}

impl AutoOffsetReset {
    pub fn parse(value: &str) -> Option<AutoOffsetReset> {
        match value {
            "latest" => Some(AutoOffsetReset::Latest),
            "earliest" => Some(AutoOffsetReset::Earliest),
            _ => None,
        }
    }
}

/// Settings of every share group on this broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareConfig {
    pub partition: SharePartitionConfig,
    /// A member without a heartbeat this long is removed
    /// (`group.share.session.timeout.ms`).
    pub session_timeout_ms: i64,
    /// How often members heartbeat (`group.share.heartbeat.interval.ms`).
    pub heartbeat_interval_ms: i32,
    pub auto_offset_reset: AutoOffsetReset,
    /// Share sessions on this broker at most.
    pub sessions_max: usize,
    /// Members of one share group at most.
    pub members_max: usize,
    /// In a cluster the members are known to the group's coordinator, not to the
    /// leaders of its share-partitions: a share session opens for any member id and
    /// reads any partition it names that this broker leads, a fetch's fair share
    /// counts the sessions reading the partition, and a session unused for the
    /// group's session timeout closes (its locks go back to the group).
    pub members_elsewhere: bool,
}

impl Default for ShareConfig {
    fn default() -> Self {
        ShareConfig {
            partition: SharePartitionConfig::default(),
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            auto_offset_reset: AutoOffsetReset::Latest,
            sessions_max: 2_000,
            members_max: 1_000,
            members_elsewhere: false,
        }
    }
}

/// A share group's own settings (its GROUP config resource); `None` keeps the
/// broker's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShareOverrides {
    pub auto_offset_reset: Option<AutoOffsetReset>,
    pub record_lock_duration_ms: Option<i64>,
    pub session_timeout_ms: Option<i64>,
    pub heartbeat_interval_ms: Option<i32>,
}

impl ShareConfig {
    /// These settings with a group's own over them.
    pub fn with(self, overrides: &ShareOverrides) -> ShareConfig {
        let mut config = self;
        if let Some(reset) = overrides.auto_offset_reset {
            config.auto_offset_reset = reset;
        }
        if let Some(ms) = overrides.record_lock_duration_ms {
            config.partition.record_lock_duration_ms = ms;
        }
        if let Some(ms) = overrides.session_timeout_ms {
            config.session_timeout_ms = ms;
        }
        if let Some(ms) = overrides.heartbeat_interval_ms {
            config.heartbeat_interval_ms = ms;
        }
        config
    }
}

/// Expected failures, mapped to Kafka error codes by the server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareError {
    #[error("unknown member")]
    UnknownMemberId,
    #[error("member epoch {got} is not the member's epoch {expected}")]
    FencedMemberEpoch { got: i32, expected: i32 },
    #[error("invalid request: {0}")]
    InvalidRequest(&'static str),
    #[error("the group has its maximum of members")]
    GroupMaxSizeReached,
    #[error("no share session for this member")]
    ShareSessionNotFound,
    #[error("share session epoch {got}, expected {expected}")]
    InvalidShareSessionEpoch { got: i32, expected: i32 },
    #[error("the broker has its maximum of share sessions")]
    ShareSessionLimitReached,
    #[error("the group has members")]
    NonEmptyGroup,
    #[error("no such group")]
    GroupIdNotFound,
    #[error("the state log is not available")]
    CoordinatorNotAvailable,
}

/// A topic as the broker knows it, for assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicInfo {
    pub id: uuid::Uuid,
    pub partitions: u32,
}

/// A ShareGroupHeartbeat.
#[derive(Debug, Clone)]
pub struct Heartbeat {
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
}

/// A member's assignment: topic name to partitions.
pub type Assignment = BTreeMap<String, Vec<i32>>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub member_id: String,
    pub member_epoch: i32,
    /// Sent when it changed since the member last got it.
    pub assignment: Option<Assignment>,
}

#[derive(Debug, Clone)]
pub struct Member {
    pub member_id: MemberId,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: Vec<String>,
    pub assignment: Assignment,
    pub deadline_ms: i64,
}

#[derive(Debug, Clone)]
pub struct ShareGroup {
    pub group_id: String,
    pub group_epoch: i32,
    /// Read freely; changed only through [`ShareGroup::insert_member`],
    /// [`ShareGroup::assign`] and [`ShareGroup::remove_member`], which keep `sharing`.
    pub members: BTreeMap<MemberId, Member>,
    pub partitions: BTreeMap<TopicPartition, SharePartition>,
    /// How many members are assigned each partition, topic by topic: kept as
    /// assignments change, so that a fetch's fair share needs no walk of the members.
    sharing: BTreeMap<String, BTreeMap<i32, usize>>,
}

impl ShareGroup {
    fn new(group_id: &str) -> ShareGroup {
        ShareGroup {
            group_id: group_id.to_string(),
            group_epoch: 0,
            members: BTreeMap::new(),
            partitions: BTreeMap::new(),
            sharing: BTreeMap::new(),
        }
    }

    /// How many members are assigned `tp`.
    pub fn members_assigned(&self, tp: &TopicPartition) -> usize {
        self.sharing
            .get(&tp.topic)
            .and_then(|ps| ps.get(&tp.partition.value()))
            .copied()
            .unwrap_or(0)
    }

    /// Counts `assignment`'s partitions in (`gained`) or out of `sharing`.
    fn count(&mut self, assignment: &Assignment, gained: bool) {
        for (topic, partitions) in assignment {
            let counts = self.sharing.entry(topic.clone()).or_default();
            for p in partitions {
                let n = counts.entry(*p).or_insert(0);
                match gained {
                    true => *n += 1,
                    false => *n = n.saturating_sub(1),
                }
                if *n == 0 {
                    counts.remove(p);
                }
            }
            if counts.is_empty() {
                self.sharing.remove(topic);
            }
        }
    }

    /// Adds `member`, replacing one of the same id.
    fn insert_member(&mut self, member: Member) {
        self.count(&member.assignment, true);
        if let Some(old) = self.members.insert(Arc::clone(&member.member_id), member) {
            self.count(&old.assignment, false);
        }
    }

    /// Gives `member_id` `assignment` (a member the group has).
    fn assign(&mut self, member_id: &str, assignment: Assignment) {
        let Some(old) = self
            .members
            .get_mut(member_id)
            .map(|m| std::mem::replace(&mut m.assignment, assignment.clone()))
        else {
            return;
        };
        self.count(&old, false);
        self.count(&assignment, true);
    }

    fn remove_member(&mut self, member_id: &str) -> Option<Member> {
        let member = self.members.remove(member_id)?;
        self.count(&member.assignment, false);
        Some(member)
    }

    /// Kafka's share group states.
    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else {
            "Stable"
        }
    }

    /// The `simple` assignment of `member` (see the module documentation).
    fn assignment_of(&self, member: &str, topics: &BTreeMap<String, TopicInfo>) -> Assignment {
        let Some(m) = self.members.get(member) else {
            return Assignment::new();
        };
        let mut out = Assignment::new();
        for topic in &m.subscribed {
            let Some(info) = topics.get(topic) else {
                continue;
            };
            let partitions = info.partitions as usize;
            if partitions == 0 {
                continue;
            }
            let subscribers: Vec<&MemberId> = self
                .members
                .values()
                .filter(|o| o.subscribed.contains(topic))
                .map(|o| &o.member_id)
                .collect();
            let n = subscribers.len();
            let Some(i) = subscribers.iter().position(|id| &***id == member) else {
                continue;
            };
            let assigned: Vec<i32> = if n > partitions {
                vec![(i % partitions) as i32]
            } else {
                (0..partitions)
                    .filter(|p| p % n == i)
                    .map(|p| p as i32)
                    .collect()
            };
            out.insert(topic.clone(), assigned);
        }
        out
    }
}

/// A member's share session: the partitions it fetches, and the epoch the next
/// ShareFetch must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub next_epoch: i32,
    pub partitions: BTreeSet<(uuid::Uuid, i32)>,
    /// When the member last used it (ms since the epoch).
    pub used_ms: i64,
}

/// Every share group on this broker, and the share sessions.
#[derive(Debug)]
pub struct ShareGroups {
    pub config: ShareConfig,
    /// Groups' own settings over `config`, set or not before the group exists.
    overrides: BTreeMap<String, ShareOverrides>,
    groups: BTreeMap<String, ShareGroup>,
    sessions: BTreeMap<(String, MemberId), Session>,
}

impl ShareGroups {
    pub fn new(config: ShareConfig) -> ShareGroups {
        ShareGroups {
            config,
            overrides: BTreeMap::new(),
            groups: BTreeMap::new(),
            sessions: BTreeMap::new(),
        }
    }

    /// The settings of one share group: the broker's, with the group's own over them.
    pub fn group_config(&self, group_id: &str) -> ShareConfig {
        match self.overrides.get(group_id) {
            Some(o) => self.config.with(o),
            None => self.config,
        }
    }

    /// Sets a share group's own settings (all `None`: the broker's again). The next
    /// heartbeat answers with the heartbeat interval and keeps the session timeout,
    /// the next share-partition made starts where the reset says, and the group's
    /// share-partitions lock records they acquire from now on for the new duration
    /// (records already acquired keep their deadline).
    pub fn set_overrides(&mut self, group_id: &str, overrides: ShareOverrides) {
        if overrides == ShareOverrides::default() {
            self.overrides.remove(group_id);
        } else {
            self.overrides.insert(group_id.to_string(), overrides);
        }
        let config = self.group_config(group_id).partition;
        if let Some(group) = self.groups.get_mut(group_id) {
            for p in group.partitions.values_mut() {
                p.set_config(config);
            }
        }
    }

    pub fn get(&self, group_id: &str) -> Option<&ShareGroup> {
        self.groups.get(group_id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &ShareGroup> {
        self.groups.values()
    }

    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// A share-partition's state, for replay at start-up.
    pub fn restore(&mut self, group_id: &str, tp: TopicPartition, partition: SharePartition) {
        self.groups
            .entry(group_id.to_string())
            .or_insert_with(|| ShareGroup::new(group_id))
            .partitions
            .insert(tp, partition);
    }

    /// A share-partition's state was deleted (replay of a tombstone).
    pub fn forget(&mut self, group_id: &str, tp: &TopicPartition) {
        if let Some(g) = self.groups.get_mut(group_id) {
            g.partitions.remove(tp);
        }
    }

    pub fn heartbeat(
        &mut self,
        hb: Heartbeat,
        topics: &BTreeMap<String, TopicInfo>,
        now_ms: i64,
    ) -> Result<HeartbeatAnswer, ShareError> {
        let deadline_ms = now_ms.saturating_add(self.group_config(&hb.group_id).session_timeout_ms);
        if hb.member_epoch == -1 {
            self.leave(&hb.group_id, &hb.member_id);
            return Ok(HeartbeatAnswer {
                member_id: hb.member_id,
                member_epoch: -1,
                assignment: None,
            });
        }
        if hb.group_id.is_empty() {
            return Err(ShareError::InvalidRequest("a share group needs an id"));
        }
        let members_max = self.config.members_max;
        if !self.groups.contains_key(&hb.group_id)
            && self.groups.len() >= headway_base::limits::SHARE_GROUPS_MAX
        {
            return Err(ShareError::CoordinatorNotAvailable);
        }
        let group = self
            .groups
            .entry(hb.group_id.clone())
            .or_insert_with(|| ShareGroup::new(&hb.group_id));
        let member_id: MemberId = if hb.member_id.is_empty() {
            Arc::from(uuid::Uuid::new_v4().to_string())
        } else {
            Arc::from(hb.member_id.as_str())
        };
        match (hb.member_epoch, group.members.get_mut(&member_id)) {
            (0, existing) => {
                let subscribed = hb.subscribed_topic_names.ok_or(ShareError::InvalidRequest(
                    "a joining member names its topics",
                ))?;
                if existing.is_none() && group.members.len() >= members_max {
                    return Err(ShareError::GroupMaxSizeReached);
                }
                group.group_epoch += 1;
                group.insert_member(Member {
                    member_id: Arc::clone(&member_id),
                    member_epoch: 0,
                    rack_id: hb.rack_id,
                    client_id: hb.client_id,
                    client_host: hb.client_host,
                    subscribed,
                    assignment: Assignment::new(),
                    deadline_ms,
                });
            }
            (_, None) => return Err(ShareError::UnknownMemberId),
            (epoch, Some(m)) if epoch != m.member_epoch => {
                return Err(ShareError::FencedMemberEpoch {
                    got: epoch,
                    expected: m.member_epoch,
                })
            }
            (_, Some(m)) => {
                m.deadline_ms = deadline_ms;
                if let Some(subscribed) = hb.subscribed_topic_names {
                    if subscribed != m.subscribed {
                        m.subscribed = subscribed;
                        group.group_epoch += 1;
                    }
                }
            }
        }
        let assignment = group.assignment_of(&member_id, topics);
        let group_epoch = group.group_epoch;
        let m = group.members.get_mut(&member_id).expect("inserted above");
        let changed = m.assignment != assignment || m.member_epoch == 0;
        if changed || m.member_epoch < group_epoch {
            m.member_epoch = group_epoch;
        }
        let member_epoch = m.member_epoch;
        let sent = changed.then(|| assignment.clone());
        group.assign(&member_id, assignment);
        Ok(HeartbeatAnswer {
            member_id: member_id.to_string(),
            member_epoch,
            assignment: sent,
        })
    }

    /// Removes a member: its locks are released and its share session closed.
    /// Returns the share-partitions whose state changed.
    pub fn leave(&mut self, group_id: &str, member_id: &str) -> Vec<TopicPartition> {
        self.sessions
            .retain(|(g, m), _| !(g == group_id && &**m == member_id));
        let Some(group) = self.groups.get_mut(group_id) else {
            return Vec::new();
        };
        if group.remove_member(member_id).is_some() {
            group.group_epoch += 1;
        }
        if group.members.is_empty() && group.partitions.is_empty() {
            // Nothing durable: the group goes with its last member.
            self.groups.remove(group_id);
            return Vec::new();
        }
        let mut changed = Vec::new();
        for (tp, p) in group.partitions.iter_mut() {
            let archived = p.archived;
            if p.release_member(member_id) > 0 && p.archived != archived {
                changed.push(tp.clone());
            }
        }
        changed
    }

    /// Members past their session timeout leave; expired locks are released.
    /// Returns the share-partitions whose durable state changed, by group.
    pub fn tick(&mut self, now_ms: i64) -> (usize, Vec<(String, TopicPartition)>) {
        let expired: Vec<(String, MemberId)> = self
            .groups
            .values()
            .flat_map(|g| {
                g.members
                    .values()
                    .filter(|m| m.deadline_ms <= now_ms)
                    .map(|m| (g.group_id.clone(), Arc::clone(&m.member_id)))
            })
            .collect();
        let mut changed = Vec::new();
        for (group_id, member_id) in &expired {
            tracing::info!(group = %group_id, member = %member_id, "share group member session expired");
            for tp in self.leave(group_id, member_id) {
                changed.push((group_id.clone(), tp));
            }
        }
        if self.config.members_elsewhere {
            let idle: Vec<(String, MemberId)> = self
                .sessions
                .iter()
                .filter(|((g, _), s)| now_ms - s.used_ms >= self.group_config(g).session_timeout_ms)
                .map(|(key, _)| key.clone())
                .collect();
            for (group_id, member_id) in &idle {
                tracing::info!(group = %group_id, member = %member_id, "idle share session closed");
                for tp in self.leave(group_id, member_id) {
                    changed.push((group_id.clone(), tp));
                }
            }
        }
        let mut released = 0;
        for g in self.groups.values_mut() {
            for (tp, p) in g.partitions.iter_mut() {
                let archived = p.archived;
                let n = p.expire_locks(now_ms);
                released += n as usize;
                if n > 0 && p.archived != archived {
                    changed.push((g.group_id.clone(), tp.clone()));
                }
            }
        }
        changed.sort();
        changed.dedup();
        (released, changed)
    }

    /// A ShareFetch or ShareAcknowledge's session step: epoch 0 opens a session (with
    /// `add` as its partitions), -1 closes it (releasing the member's locks), any other
    /// must be the session's next epoch. Returns the session's partitions afterwards.
    pub fn session_step(
        &mut self,
        group_id: &str,
        member_id: &str,
        epoch: i32,
        add: &[(uuid::Uuid, i32)],
        forget: &[(uuid::Uuid, i32)],
        now_ms: i64,
    ) -> Result<Vec<(uuid::Uuid, i32)>, ShareError> {
        let member: MemberId = Arc::from(member_id);
        let key = (group_id.to_string(), member);
        match epoch {
            0 => {
                // Only a member of the group opens a session: share-partition state is
                // made for the group's members, not for whoever names a group. (In a
                // cluster the group's coordinator knows them, not this broker.)
                let member = self
                    .groups
                    .get(group_id)
                    .and_then(|g| g.members.get(member_id));
                if member.is_none() && !self.config.members_elsewhere {
                    return Err(ShareError::UnknownMemberId);
                }
                if !self.sessions.contains_key(&key)
                    && self.sessions.len() >= self.config.sessions_max
                {
                    return Err(ShareError::ShareSessionLimitReached);
                }
                let partitions = add.iter().copied().collect();
                self.sessions.insert(
                    key,
                    Session {
                        next_epoch: 1,
                        partitions,
                        used_ms: now_ms,
                    },
                );
                Ok(add.to_vec())
            }
            -1 => {
                let session = self
                    .sessions
                    .remove(&key)
                    .ok_or(ShareError::ShareSessionNotFound)?;
                Ok(session.partitions.into_iter().collect())
            }
            _ => {
                let session = self
                    .sessions
                    .get_mut(&key)
                    .ok_or(ShareError::ShareSessionNotFound)?;
                if epoch != session.next_epoch {
                    return Err(ShareError::InvalidShareSessionEpoch {
                        got: epoch,
                        expected: session.next_epoch,
                    });
                }
                session.next_epoch = if epoch == i32::MAX { 1 } else { epoch + 1 };
                session.used_ms = now_ms;
                session.partitions.extend(add.iter().copied());
                for f in forget {
                    session.partitions.remove(f);
                }
                Ok(session.partitions.iter().copied().collect())
            }
        }
    }

    /// How many members share `tp` (topic id and index) of `group_id`: the members
    /// assigned it, or, when the members are known elsewhere, the open sessions that
    /// read it. At least one.
    pub fn sharing(&self, group_id: &str, tp: &TopicPartition, key: (uuid::Uuid, i32)) -> usize {
        let n = if self.config.members_elsewhere {
            self.sessions
                .iter()
                .filter(|((g, _), s)| g == group_id && s.partitions.contains(&key))
                .count()
        } else {
            self.groups
                .get(group_id)
                .map_or(1, |g| g.members_assigned(tp))
        };
        n.max(1)
    }

    /// The share-partition of `group_id` for `tp`, made (starting where
    /// `share.auto.offset.reset` says, between `log_start` and `high_watermark`) if it
    /// has no state yet; its start moves up if the log's start passed it. Returns it,
    /// and whether it was made or moved (its state needs writing).
    pub fn partition_mut(
        &mut self,
        group_id: &str,
        tp: &TopicPartition,
        log_start: Offset,
        high_watermark: Offset,
    ) -> (&mut SharePartition, bool) {
        let config = self.group_config(group_id);
        let group = self
            .groups
            .entry(group_id.to_string())
            .or_insert_with(|| ShareGroup::new(group_id));
        let mut made = false;
        let p = group.partitions.entry(tp.clone()).or_insert_with(|| {
            made = true;
            let start = match config.auto_offset_reset {
                AutoOffsetReset::Latest => high_watermark,
                AutoOffsetReset::Earliest => log_start,
            };
            SharePartition::new(config.partition, start)
        });
        let moved = p.log_start_moved(log_start);
        (p, made || moved)
    }

    /// The share-partition of `group_id` for `tp`, if it has state.
    pub fn partition(
        &mut self,
        group_id: &str,
        tp: &TopicPartition,
    ) -> Option<&mut SharePartition> {
        self.groups.get_mut(group_id)?.partitions.get_mut(tp)
    }

    /// Deletes a share group without members; returns its share-partitions (to write
    /// tombstones for).
    pub fn delete(&mut self, group_id: &str) -> Result<Vec<TopicPartition>, ShareError> {
        let group = self
            .groups
            .get(group_id)
            .ok_or(ShareError::GroupIdNotFound)?;
        if !group.members.is_empty() {
            return Err(ShareError::NonEmptyGroup);
        }
        let group = self.groups.remove(group_id).expect("found above");
        Ok(group.partitions.into_keys().collect())
    }
}

impl ShareGroups {
    /// Sets the start offset of share-partitions of a group without members
    /// (AlterShareGroupOffsets): each one's in-flight state is dropped, it starts over
    /// at the given offset with its state epoch up. A group not known yet is made.
    /// Returns the share-partitions changed (to write).
    pub fn alter_offsets(
        &mut self,
        group_id: &str,
        offsets: &[(TopicPartition, Offset)],
    ) -> Result<Vec<TopicPartition>, ShareError> {
        if self
            .groups
            .get(group_id)
            .is_some_and(|g| !g.members.is_empty())
        {
            return Err(ShareError::NonEmptyGroup);
        }
        let config = self.group_config(group_id).partition;
        let group = self
            .groups
            .entry(group_id.to_string())
            .or_insert_with(|| ShareGroup::new(group_id));
        for (tp, offset) in offsets {
            let epoch = group.partitions.get(tp).map_or(0, |p| p.state_epoch() + 1);
            group.partitions.insert(
                tp.clone(),
                SharePartition::with_epoch(config, *offset, epoch),
            );
        }
        Ok(offsets.iter().map(|(tp, _)| tp.clone()).collect())
    }

    /// Deletes the state of every share-partition of `topics` in a group without
    /// members (DeleteShareGroupOffsets). Returns the share-partitions deleted (to write
    /// tombstones for).
    pub fn delete_offsets(
        &mut self,
        group_id: &str,
        topics: &[String],
    ) -> Result<Vec<TopicPartition>, ShareError> {
        let group = self
            .groups
            .get_mut(group_id)
            .ok_or(ShareError::GroupIdNotFound)?;
        if !group.members.is_empty() {
            return Err(ShareError::NonEmptyGroup);
        }
        let gone: Vec<TopicPartition> = group
            .partitions
            .keys()
            .filter(|tp| topics.contains(&tp.topic))
            .cloned()
            .collect();
        for tp in &gone {
            group.partitions.remove(tp);
        }
        Ok(gone)
    }
}

/// A topic partition from a topic name and index.
pub fn topic_partition(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, PartitionIndex::new(partition))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topics(partitions: u32) -> BTreeMap<String, TopicInfo> {
        BTreeMap::from([(
            "t".to_string(),
            TopicInfo {
                id: uuid::Uuid::nil(),
                partitions,
            },
        )])
    }

    fn join(groups: &mut ShareGroups, member: &str, partitions: u32) -> HeartbeatAnswer {
        join_group(groups, "g", member, partitions).unwrap()
    }

    fn join_group(
        groups: &mut ShareGroups,
        group_id: &str,
        member: &str,
        partitions: u32,
    ) -> Result<HeartbeatAnswer, ShareError> {
        groups.heartbeat(
            Heartbeat {
                group_id: group_id.into(),
                member_id: member.into(),
                member_epoch: 0,
                rack_id: None,
                subscribed_topic_names: Some(vec!["t".into()]),
                client_id: "c".into(),
                client_host: "h".into(),
            },
            &topics(partitions),
            0,
        )
    }

    #[test]
    fn a_new_group_past_the_bound_is_refused_and_known_ones_go_on() {
        let mut groups = ShareGroups::new(ShareConfig::default());
        for i in 0..headway_base::limits::SHARE_GROUPS_MAX {
            join_group(&mut groups, &format!("g{i}"), "m", 1).unwrap();
        }
        let refused = join_group(&mut groups, "one-more", "m", 1).unwrap_err();
        assert_eq!(refused, ShareError::CoordinatorNotAvailable);
        assert!(
            join_group(&mut groups, "g0", "m2", 1).is_ok(),
            "an existing group grows"
        );
    }

    fn beat(groups: &mut ShareGroups, member: &str, epoch: i32, now_ms: i64) -> HeartbeatAnswer {
        groups
            .heartbeat(
                Heartbeat {
                    group_id: "g".into(),
                    member_id: member.into(),
                    member_epoch: epoch,
                    rack_id: None,
                    subscribed_topic_names: None,
                    client_id: "c".into(),
                    client_host: "h".into(),
                },
                &topics(4),
                now_ms,
            )
            .unwrap()
    }

    /// The count kept per partition equals a walk of the members' assignments.
    fn assert_sharing_matches_the_members(groups: &ShareGroups) {
        let Some(g) = groups.get("g") else { return };
        for p in 0..4 {
            let tp = topic_partition("t", p);
            let walked = g
                .members
                .values()
                .filter(|m| m.assignment.get("t").is_some_and(|ps| ps.contains(&p)))
                .count();
            assert_eq!(g.members_assigned(&tp), walked, "partition {p}");
        }
    }

    #[test]
    fn the_members_sharing_a_partition_are_counted_as_assignments_change() {
        let mut groups = ShareGroups::new(ShareConfig::default());
        let tp0 = topic_partition("t", 0);
        let epoch =
            |groups: &ShareGroups, n: &str| groups.get("g").unwrap().members[n].member_epoch;
        for n in ["a", "b", "c", "d", "e", "f"] {
            join(&mut groups, n, 4);
            assert_sharing_matches_the_members(&groups);
        }
        // Members settle on the group's epoch; assignments move as they do.
        for n in ["a", "b", "c", "d", "e", "f"] {
            let e = epoch(&groups, n);
            beat(&mut groups, n, e, 1);
            assert_sharing_matches_the_members(&groups);
        }
        let g = groups.get("g").unwrap();
        let total: usize = (0..4)
            .map(|p| g.members_assigned(&topic_partition("t", p)))
            .sum();
        assert!(total >= 6, "every member has a partition: {total}");
        assert!(g.members_assigned(&tp0) >= 1);
        // A member rejoining with epoch 0 replaces itself; leaving takes it out.
        join(&mut groups, "c", 4);
        assert_sharing_matches_the_members(&groups);
        groups.leave("g", "a");
        groups.leave("g", "b");
        assert_sharing_matches_the_members(&groups);
        for n in ["c", "d", "e", "f"] {
            groups.leave("g", n);
        }
        assert!(groups.get("g").is_none_or(|g| g.sharing.is_empty()));
    }

    #[test]
    fn more_members_than_partitions_all_get_work() {
        let mut groups = ShareGroups::new(ShareConfig::default());
        let names: Vec<String> = (0..10).map(|i| format!("m{i:02}")).collect();
        for n in &names {
            join(&mut groups, n, 4);
        }
        let mut covered = BTreeSet::new();
        for n in &names {
            let epoch = groups.get("g").unwrap().members[n.as_str()].member_epoch;
            let answer = beat(&mut groups, n, epoch, 1);
            let assignment = answer.assignment.unwrap_or_else(|| {
                groups.get("g").unwrap().members[n.as_str()]
                    .assignment
                    .clone()
            });
            assert_eq!(assignment["t"].len(), 1, "{n} gets one partition");
            covered.extend(assignment["t"].iter().copied());
        }
        assert_eq!(covered, BTreeSet::from([0, 1, 2, 3]));
    }

    #[test]
    fn fewer_members_split_the_partitions() {
        let mut groups = ShareGroups::new(ShareConfig::default());
        let a = join(&mut groups, "a", 4);
        assert_eq!(a.assignment.unwrap()["t"], vec![0, 1, 2, 3]);
        join(&mut groups, "b", 4);
        let a = beat(&mut groups, "a", a.member_epoch, 1);
        assert_eq!(a.assignment.unwrap()["t"], vec![0, 2]);
        assert_eq!(a.member_epoch, 2);
        // Nothing changed: no assignment sent, and a stale epoch is fenced.
        assert_eq!(beat(&mut groups, "a", 2, 2).assignment, None);
        let stale = groups.heartbeat(
            Heartbeat {
                group_id: "g".into(),
                member_id: "a".into(),
                member_epoch: 1,
                rack_id: None,
                subscribed_topic_names: None,
                client_id: String::new(),
                client_host: String::new(),
            },
            &topics(4),
            3,
        );
        assert!(matches!(stale, Err(ShareError::FencedMemberEpoch { .. })));
    }

    #[test]
    fn a_silent_member_is_removed_after_the_session_timeout_and_its_locks_released() {
        let mut groups = ShareGroups::new(ShareConfig::default());
        join(&mut groups, "a", 1);
        let tp = topic_partition("t", 0);
        let (p, made) = groups.partition_mut("g", &tp, Offset::new(0), Offset::new(0));
        assert!(made);
        let member: MemberId = Arc::from("a");
        let batch = crate::partition::LogBatch {
            first: Offset::new(0),
            last: Offset::new(4),
            skip: false,
        };
        assert_eq!(p.acquire(&member, &[batch], 100, 0).len(), 1);
        groups.tick(44_999);
        assert_eq!(groups.get("g").unwrap().members.len(), 1);
        groups.tick(45_000);
        assert_eq!(groups.get("g").unwrap().members.len(), 0);
        assert_eq!(groups.partition("g", &tp).unwrap().acquired(), 0);
    }

    #[test]
    fn with_members_elsewhere_sessions_open_for_any_member_share_and_close_when_idle() {
        let mut groups = ShareGroups::new(ShareConfig {
            members_elsewhere: true,
            ..ShareConfig::default()
        });
        let tp = topic_partition("t", 0);
        let key = (uuid::Uuid::from_u128(7), 0);
        // No member joined here: the group's coordinator knows them.
        assert_eq!(
            groups.session_step("g", "a", 0, &[key], &[], 0),
            Ok(vec![key])
        );
        assert_eq!(
            groups.session_step("g", "b", 0, &[key], &[], 0),
            Ok(vec![key])
        );
        assert_eq!(groups.sharing("g", &tp, key), 2);
        assert_eq!(groups.sharing("g", &tp, (uuid::Uuid::nil(), 0)), 1);

        let (p, _) = groups.partition_mut("g", &tp, Offset::new(0), Offset::new(0));
        let batch = crate::partition::LogBatch {
            first: Offset::new(0),
            last: Offset::new(4),
            skip: false,
        };
        // Locked until 70 s: only closing `b`'s session gives the records back sooner.
        assert_eq!(p.acquire(&Arc::from("b"), &[batch], 100, 40_000).len(), 1);
        // `a` keeps using its session; `b` falls silent past the session timeout.
        assert!(groups.session_step("g", "a", 1, &[], &[], 40_000).is_ok());
        groups.tick(44_999);
        assert_eq!(groups.sessions(), 2);
        assert_eq!(groups.partition("g", &tp).unwrap().acquired(), 5);
        groups.tick(45_000);
        assert_eq!(groups.sessions(), 1);
        assert_eq!(groups.partition("g", &tp).unwrap().acquired(), 0);
        assert_eq!(groups.sharing("g", &tp, key), 1);
        groups.tick(85_000);
        assert_eq!(groups.sessions(), 0);
    }

    #[test]
    fn share_sessions_check_their_epochs_and_are_bounded() {
        let mut groups = ShareGroups::new(ShareConfig {
            sessions_max: 1,
            ..ShareConfig::default()
        });
        let p = (uuid::Uuid::nil(), 0);
        assert_eq!(
            groups.session_step("g", "a", 0, &[p], &[], 0),
            Err(ShareError::UnknownMemberId)
        );
        join(&mut groups, "a", 1);
        join(&mut groups, "b", 1);
        assert_eq!(groups.session_step("g", "a", 0, &[p], &[], 0), Ok(vec![p]));
        assert_eq!(
            groups.session_step("g", "a", 2, &[], &[], 0),
            Err(ShareError::InvalidShareSessionEpoch {
                got: 2,
                expected: 1
            })
        );
        assert_eq!(groups.session_step("g", "a", 1, &[], &[], 0), Ok(vec![p]));
        assert_eq!(groups.session_step("g", "a", 2, &[], &[p], 0), Ok(vec![]));
        assert_eq!(
            groups.session_step("g", "b", 0, &[p], &[], 0),
            Err(ShareError::ShareSessionLimitReached)
        );
        assert_eq!(groups.session_step("g", "a", -1, &[], &[], 0), Ok(vec![]));
        assert_eq!(
            groups.session_step("g", "a", 1, &[], &[], 0),
            Err(ShareError::ShareSessionNotFound)
        );
    }

    #[test]
    fn a_group_s_own_settings_apply_to_it_alone_and_from_the_next_step() {
        let mut groups = ShareGroups::new(ShareConfig::default());
        let tp = topic_partition("t", 0);
        let (log_start, hw) = (Offset::new(10), Offset::new(50));
        // Set before the group exists: its first share-partition starts at the log start.
        groups.set_overrides(
            "early",
            ShareOverrides {
                auto_offset_reset: Some(AutoOffsetReset::Earliest),
                record_lock_duration_ms: Some(20_000),
                heartbeat_interval_ms: Some(7_000),
                session_timeout_ms: Some(50_000),
            },
        );
        assert_eq!(
            groups
                .partition_mut("early", &tp, log_start, hw)
                .0
                .start_offset(),
            log_start
        );
        assert_eq!(
            groups
                .partition_mut("late", &tp, log_start, hw)
                .0
                .start_offset(),
            hw
        );
        assert_eq!(groups.group_config("early").heartbeat_interval_ms, 7_000);
        assert_eq!(groups.group_config("late").heartbeat_interval_ms, 5_000);
        assert_eq!(groups.group_config("early").session_timeout_ms, 50_000);

        // A new lock duration applies to the next acquisition of a partition that exists.
        let batch = |first: i64, last: i64| crate::partition::LogBatch {
            first: Offset::new(first),
            last: Offset::new(last),
            skip: false,
        };
        let member: MemberId = Arc::from("m");
        let p = groups.partition_mut("late", &tp, log_start, hw).0;
        p.acquire(&member, &[batch(50, 50)], 10, 1_000);
        assert_eq!(p.next_deadline_ms(), Some(31_000), "the broker's 30 s");
        groups.set_overrides(
            "late",
            ShareOverrides {
                record_lock_duration_ms: Some(15_000),
                ..ShareOverrides::default()
            },
        );
        let p = groups.partition("late", &tp).unwrap();
        assert_eq!(
            p.next_deadline_ms(),
            Some(31_000),
            "a held lock keeps its deadline"
        );
        let got = p.acquire(&member, &[batch(51, 51)], 10, 2_000);
        assert_eq!(got.len(), 1);
        assert_eq!(p.next_deadline_ms(), Some(17_000), "the group's 15 s");

        // Removing every setting goes back to the broker's, and so do the partitions.
        groups.set_overrides("late", ShareOverrides::default());
        assert_eq!(groups.group_config("late"), groups.config);
        let p = groups.partition("late", &tp).unwrap();
        assert_eq!(p.config().record_lock_duration_ms, 30_000);
    }
}
