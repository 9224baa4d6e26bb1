//! Online conversion between classic groups and consumer groups (KIP-848's upgrade
//! and downgrade), governed by [`MigrationPolicy`]:
//!
//! - **upgrade**: the first ConsumerGroupHeartbeat (epoch 0) to a stable classic group
//!   of the `consumer` protocol type turns it into a consumer group. Its members stay,
//!   as classic members of the consumer group, with the subscriptions and partitions
//!   the classic group gave them, so nothing moves until the broker's assignor runs
//!   for the newcomer;
//! - while a consumer group has classic members, their JoinGroup, SyncGroup, Heartbeat
//!   and LeaveGroup are served by it (`consumer::classic`);
//! - **downgrade**: when the last consumer-protocol member of a group leaves (or is
//!   fenced) and classic members remain, it becomes a classic group again at a new
//!   rebalance, the members keeping their partitions until they rejoin.
//!
//! Committed offsets live under the group id in `Groups::groups` throughout.
//! A child of `state`, so it sees the classic group's internals.

use super::{Group, GroupState, Groups, Member};
use crate::consumer::classic::{decode_assignment, decode_subscription, encode_assignment};
use crate::consumer::classic::{ClassicMember, Converted};
use crate::consumer::{ConsumerGroup, HeartbeatRequest, MemberEpochIn, TopicsView};
use crate::migration::MigrationPolicy;
use crate::requests::{JoinRequest, JoinResult, SyncRequest, SyncResult};
use crate::{GenerationId, GroupError};

impl Groups {
    /// Whether a classic request for this group is served by its consumer group: it
    /// has members and the policy allows mixed groups.
    fn served_by_consumer(&self, group_id: &str) -> bool {
        self.config.migration_policy != MigrationPolicy::Disabled
            && self
                .consumer
                .get(group_id)
                .is_some_and(|c| !c.members.is_empty())
    }

    /// A ConsumerGroupHeartbeat found a classic group with members: converts it when
    /// the policy allows and the group can be (GROUP_ID_NOT_FOUND otherwise, as Kafka
    /// answers); while it rebalances, COORDINATOR_NOT_AVAILABLE has the client retry.
    pub(super) fn upgrade(
        &mut self,
        req: &HeartbeatRequest,
        topics: &TopicsView,
        now_ms: i64,
    ) -> Result<(), GroupError> {
        let group = self.groups.get_mut(&req.group_id).expect("checked");
        let convertible = self.config.migration_policy.upgrades()
            && req.member_epoch == MemberEpochIn::Join
            && group.protocol_type.as_deref() == Some("consumer");
        if !convertible {
            return Err(GroupError::GroupIdNotFound);
        }
        if group.state != GroupState::Stable {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        if group.members.len() >= self.config.members_per_group_max {
            return Err(GroupError::GroupMaxSizeReached);
        }
        let protocol = group.protocol_name.clone().unwrap_or_default();
        let mut converted = Vec::with_capacity(group.members.len());
        for m in group.members.values() {
            let subscription = decode_subscription(&m.metadata_for(&protocol))
                .ok_or(GroupError::GroupIdNotFound)?;
            let assigned = decode_assignment(&m.assignment).ok_or(GroupError::GroupIdNotFound)?;
            converted.push(Converted {
                member_id: m.member_id.clone(),
                instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                classic: ClassicMember {
                    protocols: m.protocols.clone(),
                    protocol: protocol.clone(),
                    session_timeout_ms: m.session_timeout_ms,
                },
                topics: subscription.topics,
                assigned,
            });
        }
        let generation = group.generation_id.value();
        let consumer =
            ConsumerGroup::from_classic(&req.group_id, generation, converted, topics, now_ms);
        // The classic group keeps only the offsets.
        group.members.clear();
        group.pending_members.clear();
        group.static_members.clear();
        group.leader_id = None;
        group.protocol_name = None;
        group.state = GroupState::Empty;
        tracing::info!(group = %req.group_id, generation, members = consumer.members.len(),
            "classic group converted to a consumer group");
        self.consumer.insert(req.group_id.clone(), consumer);
        Ok(())
    }

    /// After a consumer-protocol member left or was fenced: a group with only classic
    /// members left becomes a classic group, which rebalances.
    pub(super) fn maybe_downgrade(&mut self, group_id: &str, now_ms: i64) {
        if !self.config.migration_policy.downgrades() {
            return;
        }
        let downgrade = self
            .consumer
            .get(group_id)
            .is_some_and(|c| !c.members.is_empty() && !c.has_consumer_members());
        if !downgrade {
            return;
        }
        let consumer = self.consumer.remove(group_id).expect("checked");
        let config = self.config.clone();
        let group = self
            .groups
            .entry(group_id.to_string())
            .or_insert_with(|| Group::new(group_id, now_ms));
        for m in consumer.members.into_values() {
            let classic = m.classic.expect("only classic members are left");
            if let Some(instance) = &m.instance_id {
                group
                    .static_members
                    .insert(instance.clone(), m.member_id.clone());
            }
            group.members.insert(
                m.member_id.clone(),
                Member {
                    member_id: m.member_id,
                    group_instance_id: m.instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout_ms: classic.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    protocols: classic.protocols,
                    assignment: encode_assignment(&m.assigned),
                    last_heartbeat_ms: now_ms,
                    awaiting_join: None,
                    awaiting_sync: None,
                    epoch_before_downgrade: Some(GenerationId::new(m.member_epoch)),
                },
            );
        }
        // Each member's epoch stays its generation until it rejoins (its heartbeat is
        // told REBALANCE_IN_PROGRESS, its commits accepted); the new generation is past
        // every member epoch.
        group.generation_id = GenerationId::new(consumer.assignment_epoch);
        group.protocol_type = Some("consumer".to_string());
        group.protocol_name = group.select_protocol();
        group.leader_id = None;
        group.state = GroupState::Stable;
        group.prepare_rebalance(&config, now_ms);
        tracing::info!(group = %group_id, members = group.members.len(),
            "consumer group converted to a classic group");
    }

    /// A classic JoinGroup to a consumer group with members.
    pub(super) fn join_consumer(&mut self, req: JoinRequest, now_ms: i64) -> JoinResult {
        let member_id = match req.member_id.is_empty() {
            false => req.member_id.clone(),
            true if req.group_instance_id.is_some() => {
                super::new_member_id(req.group_instance_id.as_deref().unwrap_or_default())
            }
            true if req.require_known_member_id => {
                return JoinResult::error(
                    GroupError::MemberIdRequired,
                    &super::new_member_id(&req.client_id),
                );
            }
            true => super::new_member_id(&req.client_id),
        };
        let topics = self.topics.get();
        let members_max = self.config.members_per_group_max;
        let group = self.consumer.get_mut(&req.group_id).expect("checked");
        group.classic_join(&req, &member_id, &topics, members_max, now_ms)
    }

    /// A SyncGroup served by a consumer group; `None` when the group is not one.
    pub(super) fn sync_consumer(&mut self, req: &SyncRequest, now_ms: i64) -> Option<SyncResult> {
        if !self.served_by_consumer(&req.group_id) {
            return None;
        }
        let group = self.consumer.get_mut(&req.group_id).expect("checked");
        if req
            .protocol_type
            .as_deref()
            .is_some_and(|t| t != "consumer")
        {
            return Some(SyncResult::error(GroupError::InconsistentGroupProtocol));
        }
        Some(
            match group.classic_sync(
                &req.member_id,
                req.group_instance_id.as_deref(),
                req.generation_id,
                req.protocol_name.as_deref(),
                now_ms,
            ) {
                Ok((protocol, assignment)) => SyncResult {
                    error: None,
                    protocol_type: Some("consumer".to_string()),
                    protocol_name: Some(protocol),
                    assignment,
                },
                Err(e) => SyncResult::error(e),
            },
        )
    }

    /// A Heartbeat served by a consumer group; `None` when the group is not one.
    pub(super) fn heartbeat_consumer(
        &mut self,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        generation_id: Option<GenerationId>,
        now_ms: i64,
    ) -> Option<Result<(), GroupError>> {
        if !self.served_by_consumer(group_id) {
            return None;
        }
        let topics = self.topics.get();
        let group = self.consumer.get_mut(group_id).expect("checked");
        Some(group.classic_heartbeat(member_id, instance, generation_id, &topics, now_ms))
    }

    /// A LeaveGroup served by a consumer group; `None` when the group is not one.
    pub(super) fn leave_consumer(
        &mut self,
        group_id: &str,
        leaving: &[(String, Option<String>)],
    ) -> Option<Vec<Result<(), GroupError>>> {
        if !self.served_by_consumer(group_id) {
            return None;
        }
        let group = self.consumer.get_mut(group_id).expect("checked");
        let results = leaving
            .iter()
            .map(|(member_id, instance)| {
                group
                    .classic_leave(member_id, instance.as_deref())
                    .map(|_| ())
            })
            .collect();
        Some(results)
    }
}

#[cfg(test)]
mod tests;
