//! The consumer group's side of its classic members ([`super::super::classic`]):
//! conversion from a classic group, and JoinGroup, SyncGroup and Heartbeat served
//! with the consumer protocol's state. A child of `state`, so it sees the group's
//! internals.

use super::{ConsumerGroup, ConsumerMember, MemberState};
use crate::consumer::classic::{decode_subscription, encode_assignment, ClassicMember, Converted};
use crate::consumer::topics::TopicsView;
use crate::requests::{JoinRequest, JoinResult};
use crate::{GenerationId, GroupError};
use bytes::Bytes;

impl ConsumerGroup {
    /// Whether a member of the consumer protocol is left (classic members aside).
    pub fn has_consumer_members(&self) -> bool {
        self.members.values().any(|m| m.classic.is_none())
    }

    /// A consumer group made of a stable classic group's members at its generation:
    /// each keeps its subscription and the partitions it was given, which are its
    /// target until the next assignment. A partition given twice stays with the first.
    pub fn from_classic(
        group_id: &str,
        generation: i32,
        members: Vec<Converted>,
        topics: &TopicsView,
        now_ms: i64,
    ) -> ConsumerGroup {
        let mut group = ConsumerGroup::new(group_id);
        group.group_epoch = generation;
        group.assignment_epoch = generation;
        for c in members {
            let mut m = ConsumerMember::blank(c.member_id.clone(), c.client_id, c.client_host);
            m.instance_id = c.instance_id;
            m.member_epoch = generation;
            m.previous_member_epoch = generation;
            m.rebalance_timeout_ms = c.rebalance_timeout_ms;
            m.subscribed_topic_names = c.topics;
            m.subscribed = m.resolve(topics);
            m.last_heartbeat_ms = now_ms;
            for (t, ps) in &c.assigned {
                for p in ps {
                    let key = (t.clone(), *p);
                    if group.owners.contains_key(&key) {
                        continue;
                    }
                    group.owners.insert(key.clone(), c.member_id.clone());
                    m.assigned.entry(t.clone()).or_default().insert(*p);
                    m.partition_epochs.insert(key, generation);
                }
            }
            m.classic = Some(c.classic);
            if let Some(instance) = &m.instance_id {
                group
                    .static_members
                    .insert(instance.clone(), c.member_id.clone());
            }
            group.target.insert(c.member_id.clone(), m.assigned.clone());
            group.members.insert(c.member_id, m);
        }
        group.refresh_topics(topics);
        // The conversion itself is no change of what the group should look like.
        group.group_epoch = generation;
        group
    }

    /// A classic member's JoinGroup: joins or updates it, reconciles it with the owned
    /// partitions its metadata lists, and answers at once. `member_id` is the member's
    /// id (a new one chosen by the caller for a new member).
    pub fn classic_join(
        &mut self,
        req: &JoinRequest,
        member_id: &str,
        topics: &TopicsView,
        members_max: usize,
        now_ms: i64,
    ) -> JoinResult {
        let error = |e: GroupError| JoinResult {
            error: Some(e),
            generation_id: None,
            member_id: member_id.to_string(),
            ..JoinResult::default()
        };
        if req.protocol_type != "consumer" || req.protocols.is_empty() {
            return error(GroupError::InconsistentGroupProtocol);
        }
        let Some(subscription) = decode_subscription(&req.protocols[0].1) else {
            return error(GroupError::InconsistentGroupProtocol);
        };
        // The protocol every classic member supports, the joiner's preference first.
        let others = self
            .members
            .values()
            .filter(|m| m.member_id != member_id)
            .filter_map(|m| m.classic.as_ref());
        let mut names: Vec<&str> = req.protocols.iter().map(|(n, _)| n.as_str()).collect();
        for c in others {
            names.retain(|n| c.protocols.iter().any(|(p, _)| p == n));
        }
        let Some(protocol) = names.first().map(|n| n.to_string()) else {
            return error(GroupError::InconsistentGroupProtocol);
        };
        if let Some(instance) = &req.group_instance_id {
            match self.static_members.get(instance).cloned() {
                Some(current) if current != member_id => self.remove_member(&current),
                _ => {}
            }
        }
        if self
            .members
            .get(member_id)
            .is_some_and(|m| m.classic.is_none())
        {
            // A member of the consumer protocol does not join with JoinGroup.
            return error(GroupError::InconsistentGroupProtocol);
        }
        if !self.members.contains_key(member_id) {
            if self.members.len() >= members_max {
                return error(GroupError::GroupMaxSizeReached);
            }
            let mut m = ConsumerMember::blank(
                member_id.to_string(),
                req.client_id.clone(),
                req.client_host.clone(),
            );
            m.instance_id = req.group_instance_id.clone();
            if let Some(instance) = &m.instance_id {
                self.static_members
                    .insert(instance.clone(), member_id.to_string());
            }
            self.members.insert(member_id.to_string(), m);
            self.group_epoch += 1;
        }
        let member = self.members.get_mut(member_id).expect("member present");
        member.last_heartbeat_ms = now_ms;
        member.rebalance_timeout_ms = req.rebalance_timeout_ms;
        member.classic = Some(ClassicMember {
            protocols: req.protocols.clone(),
            protocol: protocol.clone(),
            session_timeout_ms: req.session_timeout_ms,
        });
        member.subscribed_topic_names = subscription.topics;
        let subscribed = member.resolve(topics);
        if subscribed != member.subscribed {
            member.subscribed = subscribed;
            self.group_epoch += 1;
        }
        self.refresh_topics(topics);
        if self.group_epoch > self.assignment_epoch {
            self.compute_target(topics);
        }
        let owned = Some(&subscription.owned);
        self.reconcile(member_id, owned, now_ms);
        if self.members[member_id].state == MemberState::UnrevokedPartitions {
            // Its metadata may already show it let them go (an eager client revokes
            // everything before it rejoins).
            self.reconcile(member_id, owned, now_ms);
        }
        let member = &self.members[member_id];
        JoinResult {
            error: None,
            generation_id: Some(GenerationId::new(member.member_epoch)),
            protocol_type: Some("consumer".to_string()),
            protocol_name: Some(protocol),
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
        }
    }

    /// The classic member checked against its id, static instance and generation.
    fn classic_member(
        &self,
        member_id: &str,
        instance: Option<&str>,
        generation: Option<GenerationId>,
    ) -> Result<&ConsumerMember, GroupError> {
        let member = self
            .members
            .get(member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if instance.is_some() && instance != member.instance_id.as_deref() {
            return Err(GroupError::FencedInstanceId);
        }
        if member.classic.is_none() {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        if generation.is_some_and(|g| g.value() != member.member_epoch) {
            return Err(GroupError::IllegalGeneration);
        }
        Ok(member)
    }

    /// A classic member's SyncGroup: what it holds now, in the consumer protocol's
    /// format, with the protocol it was told at its join.
    pub fn classic_sync(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
        generation: Option<GenerationId>,
        protocol_name: Option<&str>,
        now_ms: i64,
    ) -> Result<(String, Bytes), GroupError> {
        let member = self.classic_member(member_id, instance, generation)?;
        let protocol = member.classic.as_ref().expect("classic").protocol.clone();
        if protocol_name.is_some_and(|p| p != protocol) {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        let assignment = encode_assignment(&member.assigned);
        self.members
            .get_mut(member_id)
            .expect("present")
            .last_heartbeat_ms = now_ms;
        Ok((protocol, assignment))
    }

    /// A classic member's Heartbeat: REBALANCE_IN_PROGRESS while it should rejoin to
    /// move towards its target (the target is computed first if it is behind).
    pub fn classic_heartbeat(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
        generation: Option<GenerationId>,
        topics: &TopicsView,
        now_ms: i64,
    ) -> Result<(), GroupError> {
        self.classic_member(member_id, instance, generation)?;
        self.members
            .get_mut(member_id)
            .expect("present")
            .last_heartbeat_ms = now_ms;
        self.refresh_topics(topics);
        if self.group_epoch > self.assignment_epoch {
            self.compute_target(topics);
        }
        match self.classic_should_rejoin(member_id) {
            true => Err(GroupError::RebalanceInProgress),
            false => Ok(()),
        }
    }

    /// Whether a rejoin would change what the member holds: it must revoke, it is
    /// behind the assignment epoch, or a partition of its target it waits for is free.
    fn classic_should_rejoin(&self, member_id: &str) -> bool {
        let member = &self.members[member_id];
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        match member.state {
            MemberState::UnrevokedPartitions => true,
            _ if member.member_epoch != self.assignment_epoch => true,
            MemberState::UnreleasedPartitions => target.iter().any(|(t, ps)| {
                ps.iter().any(|p| {
                    !member.assigned.get(t).is_some_and(|a| a.contains(p))
                        && self.owner(t, *p).is_none()
                })
            }),
            MemberState::Stable => false,
        }
    }

    /// A classic member's LeaveGroup (by member id, or by static instance).
    pub fn classic_leave(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
    ) -> Result<(), GroupError> {
        let id = match instance.and_then(|i| self.static_members.get(i)) {
            Some(current) if !member_id.is_empty() && current != member_id => {
                return Err(GroupError::FencedInstanceId)
            }
            Some(current) => current.clone(),
            None if instance.is_some() => return Err(GroupError::UnknownMemberId),
            None => member_id.to_string(),
        };
        match self.members.get(&id) {
            None => Err(GroupError::UnknownMemberId),
            Some(m) if m.classic.is_none() => Err(GroupError::InconsistentGroupProtocol),
            Some(_) => {
                self.remove_member(&id);
                Ok(())
            }
        }
    }
}
