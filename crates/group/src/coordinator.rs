//! The group coordinator: [`Groups`] behind a mutex, a ticker for timeouts, and the
//! offsets log.
//!
//! The mutex is a `std` mutex held only for state-machine steps, never across I/O or an
//! `.await`: answers that must wait are one-shot channels completed by later steps.
//! Commits append to the offsets log (a [`Partition`] with the broker's flush policy and
//! group commit), wait until the record is durable, then update the in-memory offsets.
//!
//! Consumer-protocol groups (KIP-848) keep their state in the same log
//! ([`crate::consumer::durable`]): a step that changes a group appends the records it
//! changed while the mutex is held, so one group's records reach the log in the order
//! of its steps; a heartbeat is answered once they are durable, waited for without the
//! mutex. The log is replayed at start-up, so groups come back with their members,
//! epochs and assignments.

use crate::consumer::classic::{encode_assignment, encode_subscription};
use crate::consumer::durable::{self, GroupRecord, Recovery, Written};
use crate::consumer::{ConsumerGroup, HeartbeatAnswer, HeartbeatRequest, TopicsView};
use crate::offsets::{encode_batch, OffsetRecord};
use crate::requests::{JoinRequest, JoinResult, SyncRequest, SyncResult};
use crate::state::durable::{self as classic_durable, ClassicSnapshot, ClassicWritten};
use crate::state::{CommittedOffset, ConsumerOverrides, GroupConfig, Groups, OffsetCommit};
use crate::{GenerationId, GroupError};
use bytes::Bytes;
use headway_base::{now_ms, Offset, ProducerId, TopicPartition};
use headway_broker::{internal_log, BrokerError, FlushPolicy, Partition};
use headway_log::batch::validate_all;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::oneshot;

/// How often sessions, rebalance deadlines and offset expiry are checked.
const TICK: Duration = Duration::from_millis(100);

/// One partition's offset in an OffsetCommit.
#[derive(Debug, Clone)]
pub struct CommitEntry {
    pub topic_partition: TopicPartition,
    pub offset: Offset,
    /// `None` when the consumer sent none (the wire's -1).
    pub leader_epoch: Option<i32>,
    pub metadata: Option<String>,
}

#[derive(Debug, Clone)]
pub struct MemberSummary {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// The member's metadata for the group's protocol.
    pub metadata: Bytes,
    pub assignment: Bytes,
}

#[derive(Debug, Clone)]
pub struct GroupSummary {
    pub group_id: String,
    /// "classic" or "consumer" (the consumer protocol of KIP-848), as ListGroups v5
    /// names them.
    pub group_type: &'static str,
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol_name: String,
    pub members: Vec<MemberSummary>,
}

pub struct GroupCoordinator {
    groups: Mutex<Groups>,
    /// What the log holds of consumer-protocol groups. Locked only while `groups` is
    /// held (in that order), so it matches the log's order.
    written: Mutex<Written>,
    /// What the log holds of classic groups; locked only while `groups` and `written`
    /// are held (in that order).
    classic_written: Mutex<ClassicWritten>,
    log: Arc<Partition>,
    /// The leader epoch of the partition this coordinator serves ([`NO_EPOCH`] for a
    /// broker alone).
    epoch: i32,
    closed: AtomicBool,
}

pub use headway_broker::coordinator_shards::NO_EPOCH;

impl GroupCoordinator {
    /// Opens the offsets log under `data_dir/groups/offsets`, replays it, and starts
    /// the ticker (a broker alone). Must run inside a tokio runtime.
    pub async fn open(
        data_dir: &Path,
        flush: FlushPolicy,
        config: GroupConfig,
    ) -> Result<Arc<GroupCoordinator>, BrokerError> {
        let dir = data_dir.join("groups").join("offsets");
        let log = internal_log::open(dir, "__consumer_offsets", flush).await?;
        Self::serve(log, config, NO_EPOCH).await
    }

    /// Replays `log` and serves from it: the broker's own offsets log, or a partition
    /// of a cluster's `__consumer_offsets` this broker leads at `epoch` (what its
    /// writes wait for then is every in-sync replica, and a change of leader fails
    /// them). Replays up to the high watermark: a new leader's loader waits until that
    /// reaches what the log held when it took over.
    pub async fn serve(
        log: Arc<Partition>,
        config: GroupConfig,
        epoch: i32,
    ) -> Result<Arc<GroupCoordinator>, BrokerError> {
        let mut groups = Groups::new(config);
        let mut recovery = Recovery::default();
        let mut classic = BTreeMap::new();
        let records = replay(&log, &mut groups, &mut recovery, &mut classic).await?;
        let now = now_ms();
        let consumer = recovery
            .finish(now)
            .map_err(|e| BrokerError::Storage(format!("offsets log: {e}")))?;
        let written = Written::recovered(&consumer);
        let members: usize = consumer.values().map(|c| c.members.len()).sum();
        let consumer_groups = consumer.len();
        groups.consumer.extend(consumer);
        let classic: BTreeMap<String, ClassicSnapshot> = classic
            .into_iter()
            .filter_map(|(id, s)| s.map(|s| (id, s)))
            .collect();
        for (id, snapshot) in &classic {
            groups.restore_classic(id, snapshot.clone(), now);
        }
        let classic_written = ClassicWritten::recovered(&groups, &classic);
        let classic_members: usize = classic.values().map(|s| s.members.len()).sum();
        let count: usize = groups.iter().map(|g| g.offsets.len()).sum();
        tracing::info!(
            partition = log.index().value(),
            epoch,
            records,
            groups = groups.iter().count(),
            offsets = count,
            consumer_groups,
            members,
            classic_groups = classic.len(),
            classic_members,
            "offsets log replayed"
        );
        let coordinator = Arc::new(GroupCoordinator {
            groups: Mutex::new(groups),
            written: Mutex::new(written),
            classic_written: Mutex::new(classic_written),
            log,
            epoch,
            closed: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&coordinator);
        let component = headway_broker::panics::Component::Coordinator;
        headway_broker::panics::spawn_restarting(component, "group ticker", move || {
            run_ticker(weak.clone())
        });
        Ok(coordinator)
    }

    /// The offsets log: one record per group, topic and partition, so the log cleaner
    /// keeps it to about one record per committed offset.
    pub fn offsets_log(&self) -> &Arc<Partition> {
        &self.log
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, Groups> {
        self.groups
            .lock()
            .expect("groups mutex poisoned by a panic")
    }

    /// The groups, unless this coordinator was retired: then `NOT_COORDINATOR`, so that
    /// no request waits on a coordinator whose ticker has stopped. Checked under the
    /// lock, which retiring takes after it marks the coordinator closed.
    fn serving(&self) -> Result<std::sync::MutexGuard<'_, Groups>, GroupError> {
        let groups = self.groups();
        if self.closed.load(Ordering::Acquire) {
            return Err(GroupError::NotCoordinator);
        }
        Ok(groups)
    }

    pub async fn join(&self, req: JoinRequest) -> JoinResult {
        let member_id = req.member_id.clone();
        let (reply, answer) = oneshot::channel();
        {
            // A classic join takes over an empty consumer-protocol group: its records go.
            let group_id = req.group_id.clone();
            let mut groups = match self.serving() {
                Ok(groups) => groups,
                Err(e) => {
                    return JoinResult {
                        error: Some(e),
                        generation_id: None,
                        member_id,
                        ..JoinResult::default()
                    }
                }
            };
            groups.join(req, reply, now_ms());
            let _ = self.persist_locked(&groups, &group_id, None);
        }
        answer.await.unwrap_or_else(|_| JoinResult {
            error: Some(GroupError::CoordinatorNotAvailable),
            generation_id: None,
            member_id,
            ..JoinResult::default()
        })
    }

    pub async fn sync(&self, req: SyncRequest) -> SyncResult {
        let (reply, answer) = oneshot::channel();
        let group_id = req.group_id.clone();
        match self.serving() {
            Ok(mut groups) => {
                // The leader's sync makes the group Stable: its record is appended (the
                // answers do not wait for it; a coordinator lost before it is durable
                // leaves the members to join again, as without the record).
                groups.sync(req, reply, now_ms());
                let _ = self.persist_locked(&groups, &group_id, None);
            }
            Err(e) => {
                return SyncResult {
                    error: Some(e),
                    ..SyncResult::default()
                }
            }
        }
        answer.await.unwrap_or_else(|_| SyncResult {
            error: Some(GroupError::CoordinatorNotAvailable),
            ..SyncResult::default()
        })
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        generation_id: Option<GenerationId>,
    ) -> Result<(), GroupError> {
        self.serving()?
            .heartbeat(group_id, member_id, instance, generation_id, now_ms())
    }

    pub fn leave(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let mut groups = self.serving()?;
        let results = groups.leave(group_id, members, now_ms());
        let _ = self.persist_locked(&groups, group_id, None);
        results
    }

    /// Commits offsets: answered once their record is durable in the offsets log.
    /// Returns one result per entry, or an error for the whole request.
    pub async fn commit(
        &self,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        generation_id: Option<GenerationId>,
        entries: Vec<CommitEntry>,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let committed: Vec<(String, i32)> = entries
            .iter()
            .map(|e| {
                let tp = &e.topic_partition;
                (tp.topic.clone(), tp.partition.value())
            })
            .collect();
        self.store(group_id, None, entries, |groups| {
            groups.check_commit_of(group_id, member_id, instance, generation_id, &committed)
        })
        .await
    }

    /// Commits offsets inside the transaction of `producer_id` (TxnOffsetCommit): they
    /// are durable once answered, but count (for OffsetFetch, for consumers) only once
    /// [`GroupCoordinator::end_transaction`] commits them. The transaction coordinator
    /// has checked that the producer's transaction is open and holds the group.
    pub async fn txn_commit(
        &self,
        producer_id: ProducerId,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        generation_id: Option<GenerationId>,
        entries: Vec<CommitEntry>,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let count = entries.len();
        self.store(group_id, Some(producer_id), entries, |groups| {
            groups.check_txn_commit(group_id, member_id, instance, generation_id, count)
        })
        .await
    }

    /// Checks a commit with `check`, appends its records (pending in a transaction or
    /// not), waits until they are durable, then applies them.
    async fn store(
        &self,
        group_id: &str,
        pending_in: Option<ProducerId>,
        entries: Vec<CommitEntry>,
        check: impl FnOnce(&Groups) -> Result<(), GroupError>,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let metadata_max = {
            let groups = self.serving()?;
            check(&groups)?;
            groups.config.offset_metadata_bytes_max
        };
        let now = now_ms();
        let (results, records) = commit_records(group_id, pending_in, &entries, metadata_max, now);
        if records.is_empty() {
            return Ok(results);
        }
        let base = self.append(&records).await?;
        let applied = at_offsets(records, base);
        let mut groups = self.groups();
        match pending_in {
            None => groups.apply_commit(group_id, applied, now),
            Some(producer_id) => groups.apply_pending(producer_id, group_id, applied),
        }
        Ok(results)
    }

    /// Ends the transaction of `producer_id` for its pending offsets: on commit they
    /// become the groups' committed offsets, on abort they go. One batch in the offsets
    /// log does it (tombstones for the pending records, and the offsets again as plain
    /// records on commit), durable before this returns. Ending a transaction that holds
    /// no offsets here (or was ended already: the transaction coordinator retries its
    /// markers after a crash) does nothing.
    pub async fn end_transaction(
        &self,
        producer_id: ProducerId,
        commit: bool,
    ) -> Result<(), GroupError> {
        let pending = self.groups().pending_of(producer_id);
        if pending.is_empty() {
            return Ok(());
        }
        let mut records: Vec<OffsetRecord> = pending
            .iter()
            .map(|(group_id, tp, _)| OffsetRecord {
                pending_in: Some(producer_id),
                group_id: group_id.clone(),
                topic_partition: tp.clone(),
                value: None,
            })
            .collect();
        if commit {
            records.extend(pending.iter().map(|(group_id, tp, offset)| OffsetRecord {
                pending_in: None,
                group_id: group_id.clone(),
                topic_partition: tp.clone(),
                value: Some(offset.commit.clone()),
            }));
        }
        let base = self.append(&records).await?;
        let now = now_ms();
        let mut groups = self.groups();
        let ended = pending.len();
        for (i, (group_id, tp, offset)) in pending.into_iter().enumerate() {
            groups.remove_pending(producer_id, &group_id, &tp, Some(offset.log_offset));
            if commit {
                let log_offset = base.plus((ended + i) as i64);
                groups.apply_commit(&group_id, vec![(tp, offset.commit.at(log_offset))], now);
            }
        }
        Ok(())
    }

    /// Whether an open transaction holds an offset for the group's partition
    /// (OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT then).
    pub fn has_pending(&self, group_id: &str, key: &TopicPartition) -> bool {
        self.groups().has_pending(group_id, key)
    }

    /// Appends records to the offsets log and waits until they are durable. Returns
    /// the log offset of the first.
    async fn append(&self, records: &[OffsetRecord]) -> Result<Offset, GroupError> {
        let appended = self.append_batch(&encode_batch(records, now_ms()))?;
        self.wait_durable(Some(appended.log_end_offset)).await?;
        Ok(appended.base_offset)
    }

    fn append_batch(&self, batch: &[u8]) -> Result<headway_broker::Appended, GroupError> {
        self.log
            .append(validate_all(batch), usize::MAX)
            .map_err(|e| {
                if let BrokerError::NotLeaderOrFollower { .. } = e {
                    return GroupError::NotCoordinator;
                }
                tracing::error!(error = %e, "appending to the offsets log failed");
                GroupError::CoordinatorNotAvailable
            })
    }

    /// Waits until the offsets log is durable up to `end` (nothing to wait for: `None`).
    async fn wait_durable(&self, end: Option<Offset>) -> Result<(), GroupError> {
        let Some(end) = end else { return Ok(()) };
        // In a cluster: every in-sync replica holds it; a change of leader fails it.
        let waited = self.log.wait_replicated(end, 1, self.epoch).await;
        waited.map_err(|e| match e {
            BrokerError::NotLeaderOrFollower { .. } => GroupError::NotCoordinator,
            e => {
                tracing::error!(error = %e, "syncing the offsets log failed");
                GroupError::CoordinatorNotAvailable
            }
        })
    }

    /// Appends the records that bring the log to the group `group_id` as `groups`
    /// holds it now, in one batch: its consumer-protocol records (tombstones if it is
    /// gone) and its classic record ([`classic_durable`]), with the groups mutex held
    /// by the caller. `member` names the consumer-protocol member a heartbeat moved.
    /// Returns the log end offset to wait for, if anything was appended.
    fn persist_locked(
        &self,
        groups: &Groups,
        group_id: &str,
        member: Option<&str>,
    ) -> Result<Option<Offset>, GroupError> {
        let mut written = self.written.lock().expect("written mutex poisoned");
        let changes = written.changes(group_id, groups.consumer.get(group_id), member);
        let mut classic_written = self.classic_written.lock().expect("written mutex poisoned");
        let classic = classic_written.change(groups, group_id);
        if changes.is_empty() && classic.is_none() {
            return Ok(None);
        }
        let records = changes.records().chain(classic.clone());
        let batch = internal_log::encode_batch(records, now_ms());
        let appended = self.append_batch(&batch)?;
        written.wrote(changes);
        if let Some(record) = &classic {
            classic_written.wrote(group_id, groups, record);
        }
        Ok(Some(appended.log_end_offset))
    }

    /// Whether a consumer-protocol group's epochs moved (or it came or went) since the
    /// log last heard of it; with the groups mutex held by the caller.
    fn moved_locked(&self, groups: &Groups, group_id: &str) -> bool {
        let written = self.written.lock().expect("written mutex poisoned");
        let now = groups
            .consumer
            .get(group_id)
            .map(|c| (c.group_epoch, c.assignment_epoch));
        written.epochs(group_id) != now
    }

    /// [`GroupCoordinator::persist_locked`] for every consumer-protocol group whose
    /// epochs moved or that went since the log last heard of it (the ticker fences
    /// members; a member's step without an epoch change is written by its heartbeat),
    /// and every classic group the ticker moved ([`ClassicWritten::moved`]).
    fn persist_moved_locked(&self, groups: &Groups) -> Option<Offset> {
        let mut moved: Vec<String> = {
            let written = self.written.lock().expect("written mutex poisoned");
            let gone = written
                .group_ids()
                .filter(|id| !groups.consumer.contains_key(*id))
                .cloned();
            let changed = groups.consumer.keys().filter(|id| {
                let c = &groups.consumer[*id];
                written.epochs(id) != Some((c.group_epoch, c.assignment_epoch))
            });
            gone.chain(changed.cloned()).collect()
        };
        moved.extend(
            self.classic_written
                .lock()
                .expect("written mutex poisoned")
                .moved(groups),
        );
        moved.sort_unstable();
        moved.dedup();
        let mut end = None;
        for group_id in moved {
            if let Ok(Some(e)) = self.persist_locked(groups, &group_id, None) {
                end = Some(e);
            }
        }
        end
    }

    /// Committed offsets of a group: all of them, or those of the given partitions
    /// (a partition without a commit is left out).
    pub fn committed(
        &self,
        group_id: &str,
        only: Option<&[TopicPartition]>,
    ) -> Vec<(TopicPartition, CommittedOffset)> {
        let groups = self.groups();
        let Some(group) = groups.get(group_id) else {
            return Vec::new();
        };
        match only {
            None => group
                .offsets
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            Some(keys) => keys
                .iter()
                .filter_map(|k| group.offsets.get(k).map(|v| (k.clone(), v.clone())))
                .collect(),
        }
    }

    /// Every group, without members: classic ones and consumer-protocol ones.
    pub fn list(&self) -> Vec<GroupSummary> {
        let groups = self.groups();
        let classic = groups
            .iter()
            .filter(|g| !groups.consumer.contains_key(&g.group_id))
            .map(|g| summary(g, false));
        let consumer = groups.consumer.values().map(|c| consumer_summary(c, false));
        let mut all: Vec<GroupSummary> = classic.chain(consumer).collect();
        all.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        all
    }

    /// A group as DescribeGroups shows it. A consumer-protocol group is described as
    /// Kafka does: protocol type "consumer", its assignor as the protocol, and each
    /// member's subscription and assignment in the classic consumer protocol's format.
    pub fn describe(&self, group_id: &str) -> Option<GroupSummary> {
        let groups = self.groups();
        match groups.consumer.get(group_id) {
            Some(c) => Some(consumer_summary(c, true)),
            None => groups.get(group_id).map(|g| summary(g, true)),
        }
    }

    /// Whether a group of any type holds this id (one namespace for all group types).
    pub fn group_exists(&self, group_id: &str) -> bool {
        let groups = self.groups();
        groups.get(group_id).is_some() || groups.consumer.contains_key(group_id)
    }

    /// Whether the id is a consumer-protocol group with members.
    pub fn is_consumer_group(&self, group_id: &str) -> bool {
        self.groups()
            .consumer
            .get(group_id)
            .is_some_and(|c| !c.members.is_empty())
    }

    /// Whether a commit naming this member must carry a member epoch (OffsetCommit
    /// v9+): a consumer group with members, unless the member is one of its classic
    /// members, which commit with their generation as classic consumers do.
    pub fn commits_with_member_epoch(&self, group_id: &str, member_id: &str) -> bool {
        self.groups().consumer.get(group_id).is_some_and(|c| {
            !c.members.is_empty() && c.members.get(member_id).is_none_or(|m| m.classic.is_none())
        })
    }

    /// Where the broker's topics are read when a classic member of a consumer group
    /// joins or heartbeats (online conversion, `docs/groups.md`).
    pub fn set_topics_source(&self, source: crate::consumer::TopicsSource) {
        self.groups().topics = source;
    }

    /// Handles a ConsumerGroupHeartbeat against the broker's `topics` now, answered
    /// once what it changed in the group is durable.
    pub async fn consumer_heartbeat(
        &self,
        req: &HeartbeatRequest,
        topics: &TopicsView,
    ) -> Result<HeartbeatAnswer, GroupError> {
        let (answer, end) = {
            let mut groups = self.serving()?;
            let answer = groups.consumer_heartbeat(req, topics, now_ms());
            let end = match &answer {
                Ok(HeartbeatAnswer::Member { member_id, .. })
                | Ok(HeartbeatAnswer::Left { member_id, .. }) => {
                    self.persist_locked(&groups, &req.group_id, Some(member_id))
                }
                // A refused heartbeat changes nothing durable unless it moved an epoch
                // (a rejoin that removed the member, then found the group full): a
                // stream of refused heartbeats costs no comparison of the whole group.
                Err(_) if !self.moved_locked(&groups, &req.group_id) => Ok(None),
                Err(_) => self.persist_locked(&groups, &req.group_id, None),
            };
            (answer, end)
        };
        self.wait_durable(end?).await?;
        answer
    }

    /// The heartbeat interval the members of a consumer-protocol group are told.
    pub fn consumer_heartbeat_interval_ms(&self, group_id: &str) -> i32 {
        self.groups()
            .consumer_config(group_id)
            .heartbeat_interval_ms
    }

    /// Sets a group's own consumer-protocol session timeout and heartbeat interval
    /// (from its GROUP config resource); they apply from the next heartbeat and tick.
    pub fn set_consumer_overrides(&self, group_id: &str, overrides: ConsumerOverrides) {
        self.groups().set_consumer_overrides(group_id, overrides);
    }

    /// A copy of a consumer-protocol group (ConsumerGroupDescribe).
    pub fn consumer_group(&self, group_id: &str) -> Option<ConsumerGroup> {
        self.groups().consumer.get(group_id).cloned()
    }

    /// Checks an OffsetFetch naming a member (v9+), see [`Groups::check_fetch`].
    pub fn check_fetch(
        &self,
        group_id: &str,
        member_id: Option<&str>,
        member_epoch: Option<i32>,
    ) -> Result<(), GroupError> {
        self.groups().check_fetch(group_id, member_id, member_epoch)
    }

    /// Deletes a group without members and tombstones its offsets.
    pub async fn delete(&self, group_id: &str) -> Result<(), GroupError> {
        let (keys, end) = {
            let mut groups = self.serving()?;
            let keys = groups.delete(group_id)?;
            (keys, self.persist_locked(&groups, group_id, None)?)
        };
        self.wait_durable(end).await?;
        let tombstones: Vec<OffsetRecord> = keys
            .into_iter()
            .map(|topic_partition| OffsetRecord {
                pending_in: None,
                group_id: group_id.to_string(),
                topic_partition,
                value: None,
            })
            .collect();
        if !tombstones.is_empty() {
            self.append(&tombstones).await?;
        }
        Ok(())
    }

    /// Closes the offsets log (syncing it). Blocking.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Err(e) = self.log.close() {
            tracing::error!(error = %e, "closing the offsets log");
        }
    }
}

/// A coordinator of one partition of a cluster's `__consumer_offsets`: retired when
/// another broker leads it. Its groups go with it, so whatever waited on them (a join
/// waiting for the rebalance) is answered, and its members find the new coordinator.
impl headway_broker::coordinator_shards::Shard for GroupCoordinator {
    fn retire(&self) {
        self.closed.store(true, Ordering::Release);
        let mut groups = self.groups();
        let config = groups.config.clone();
        let topics = groups.topics.clone();
        *groups = Groups::new(config);
        groups.topics = topics;
        tracing::info!(
            partition = self.log.index().value(),
            epoch = self.epoch,
            "group coordinator retired: the partition is led elsewhere"
        );
    }
}

fn summary(g: &crate::state::Group, with_members: bool) -> GroupSummary {
    let protocol = g.protocol_name.clone().unwrap_or_default();
    GroupSummary {
        group_id: g.group_id.clone(),
        state: g.state.name(),
        protocol_type: g.protocol_type.clone().unwrap_or_default(),
        protocol_name: protocol.clone(),
        group_type: "classic",
        members: if with_members {
            g.members
                .values()
                .map(|m| MemberSummary {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: m
                        .protocols
                        .iter()
                        .find(|(p, _)| *p == protocol)
                        .map(|(_, b)| b.clone())
                        .unwrap_or_default(),
                    assignment: m.assignment.clone(),
                })
                .collect()
        } else {
            Vec::new()
        },
    }
}

fn consumer_summary(c: &ConsumerGroup, with_members: bool) -> GroupSummary {
    GroupSummary {
        group_id: c.group_id.clone(),
        group_type: "consumer",
        state: c.state().name(),
        protocol_type: "consumer".to_string(),
        protocol_name: c.assignor.name().to_string(),
        members: match with_members {
            false => Vec::new(),
            true => c
                .members
                .values()
                .map(|m| MemberSummary {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: encode_subscription(&m.subscribed),
                    assignment: encode_assignment(&m.assigned),
                })
                .collect(),
        },
    }
}

/// Rebuilds the committed offsets from the offsets log, gives the records of
/// consumer-protocol groups to `recovery`, and keeps the last record of each classic
/// group in `classic` (`None`: its tombstone). Returns the records read; a group record
/// that cannot be read is an error.
async fn replay(
    log: &Partition,
    groups: &mut Groups,
    recovery: &mut Recovery,
    classic: &mut BTreeMap<String, Option<ClassicSnapshot>>,
) -> Result<usize, BrokerError> {
    let mut failed = None;
    let read = internal_log::replay(log, |offset, key, value| {
        if let Some(key) = key
            .clone()
            .filter(|k| classic_durable::is_classic_record(k))
        {
            match classic_durable::decode(key, value) {
                Ok((group_id, snapshot)) => {
                    classic.insert(group_id, snapshot);
                }
                Err(e) if failed.is_none() => {
                    failed = Some(format!("offsets log record at offset {offset}: {e}"))
                }
                Err(_) => {}
            }
            return;
        }
        if let Some(key) = key.clone().filter(|k| durable::is_group_record(k)) {
            match GroupRecord::decode(key, value) {
                Ok(record) => recovery.apply(record),
                Err(e) if failed.is_none() => {
                    failed = Some(format!("offsets log record at offset {offset}: {e}"))
                }
                Err(_) => {}
            }
            return;
        }
        let Some(r) = OffsetRecord::decode(key, value) else {
            tracing::warn!(
                offset = offset.value(),
                "skipping an offsets record of an unknown format"
            );
            return;
        };
        let key = r.topic_partition;
        match (r.pending_in, r.value) {
            (None, Some(v)) => {
                let at = v.commit_timestamp_ms;
                groups.apply_commit(&r.group_id, vec![(key, v.at(offset))], at);
            }
            (None, None) => groups.apply_delete(&r.group_id, &key),
            (Some(producer_id), Some(v)) => {
                groups.apply_pending(producer_id, &r.group_id, vec![(key, v.at(offset))]);
            }
            (Some(producer_id), None) => {
                groups.remove_pending(producer_id, &r.group_id, &key, None);
            }
        }
    })
    .await?;
    match failed {
        None => Ok(read),
        Some(e) => Err(BrokerError::Storage(e)),
    }
}

async fn run_ticker(coordinator: Weak<GroupCoordinator>) {
    loop {
        tokio::time::sleep(TICK).await;
        let Some(c) = coordinator.upgrade() else {
            return;
        };
        if c.closed.load(Ordering::Acquire) {
            return;
        }
        let (expired, end) = {
            let mut groups = c.groups();
            let expired = groups.tick(now_ms());
            (expired, c.persist_moved_locked(&groups))
        };
        let _ = c.wait_durable(end).await;
        if !expired.is_empty() {
            let tombstones: Vec<OffsetRecord> = expired
                .into_iter()
                .map(|(group_id, topic_partition)| OffsetRecord {
                    pending_in: None,
                    group_id,
                    topic_partition,
                    value: None,
                })
                .collect();
            tracing::info!(offsets = tombstones.len(), "expired offsets of idle groups");
            let _ = c.append(&tombstones).await;
        }
    }
}

/// The records of a commit's entries, and one result per entry (an entry whose metadata
/// is too long is refused alone).
fn commit_records(
    group_id: &str,
    pending_in: Option<ProducerId>,
    entries: &[CommitEntry],
    metadata_max: usize,
    now: i64,
) -> (Vec<Result<(), GroupError>>, Vec<OffsetRecord>) {
    let results: Vec<Result<(), GroupError>> = entries
        .iter()
        .map(|e| match &e.metadata {
            Some(m) if m.len() > metadata_max => Err(GroupError::OffsetMetadataTooLarge),
            _ => Ok(()),
        })
        .collect();
    let records = entries
        .iter()
        .zip(&results)
        .filter(|(_, r)| r.is_ok())
        .map(|(e, _)| OffsetRecord {
            pending_in,
            group_id: group_id.to_string(),
            topic_partition: e.topic_partition.clone(),
            value: Some(OffsetCommit {
                offset: e.offset,
                leader_epoch: e.leader_epoch,
                metadata: e.metadata.clone(),
                commit_timestamp_ms: now,
            }),
        })
        .collect();
    (results, records)
}

/// The offsets of records appended from `base`, by partition.
fn at_offsets(records: Vec<OffsetRecord>, base: Offset) -> Vec<(TopicPartition, CommittedOffset)> {
    records
        .into_iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let committed = r.value?.at(base.plus(i as i64));
            Some((r.topic_partition, committed))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::{Assignment, MemberEpochIn};
    use headway_base::PartitionIndex;

    fn entry(topic: &str, partition: i32, offset: i64) -> CommitEntry {
        CommitEntry {
            topic_partition: tp(topic, partition),
            offset: Offset::new(offset),
            leader_epoch: None,
            metadata: None,
        }
    }

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition::new(topic, PartitionIndex::new(partition))
    }

    async fn open(dir: &Path) -> Arc<GroupCoordinator> {
        GroupCoordinator::open(dir, FlushPolicy::Sync, GroupConfig::default())
            .await
            .expect("open")
    }

    /// A new member's JoinGroup to group "g".
    fn first_join() -> JoinRequest {
        JoinRequest {
            group_id: "g".into(),
            member_id: String::new(),
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "h".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::new())],
            require_known_member_id: false,
        }
    }

    #[tokio::test]
    async fn a_retired_coordinator_answers_not_coordinator_at_once() {
        use headway_broker::coordinator_shards::Shard;
        let dir = tempfile::tempdir().expect("temp dir");
        let c = open(dir.path()).await;
        c.retire();
        // A join would wait for the ticker to end the rebalance; the ticker has stopped.
        let answered = tokio::time::timeout(Duration::from_secs(10), c.join(first_join()))
            .await
            .expect("a join on a retired coordinator is answered");
        assert_eq!(answered.error, Some(GroupError::NotCoordinator));
        assert_eq!(
            c.heartbeat("g", "m", None, None),
            Err(GroupError::NotCoordinator)
        );
        let entry = CommitEntry {
            topic_partition: TopicPartition::new("t".to_string(), PartitionIndex::new(0)),
            offset: Offset::new(1),
            leader_epoch: None,
            metadata: None,
        };
        let commit = c.commit("g", "", None, None, vec![entry]).await;
        assert_eq!(commit.err(), Some(GroupError::NotCoordinator));
        c.close();
    }

    fn committed_offset(c: &GroupCoordinator, group: &str, key: &TopicPartition) -> Option<i64> {
        c.committed(group, Some(std::slice::from_ref(key)))
            .first()
            .map(|(_, o)| o.commit.offset.value())
    }

    #[tokio::test]
    async fn offsets_in_a_transaction_count_only_once_it_commits_across_restarts() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (committer, aborter) = (ProducerId::new(10), ProducerId::new(11));
        let (a, b) = (tp("in", 0), tp("in", 1));
        {
            let c = open(dir.path()).await;
            c.commit("g", "", None, None, vec![entry("in", 0, 5)])
                .await
                .expect("plain commit");
            let results = c
                .txn_commit(committer, "g", "", None, None, vec![entry("in", 0, 8)])
                .await
                .expect("txn commit");
            assert_eq!(results, vec![Ok(())]);
            c.txn_commit(aborter, "g", "", None, None, vec![entry("in", 1, 3)])
                .await
                .expect("txn commit");
            assert_eq!(
                committed_offset(&c, "g", &a),
                Some(5),
                "pending is not committed"
            );
            assert_eq!(committed_offset(&c, "g", &b), None);
            assert!(c.has_pending("g", &a) && c.has_pending("g", &b));
            c.close();
        }
        // Reopened with both transactions open: still pending, nothing committed.
        {
            let c = open(dir.path()).await;
            assert_eq!(committed_offset(&c, "g", &a), Some(5));
            assert!(c.has_pending("g", &a) && c.has_pending("g", &b));
            c.end_transaction(committer, true).await.expect("commit");
            c.end_transaction(aborter, false).await.expect("abort");
            // A marker written again after a crash finds nothing to do.
            c.end_transaction(committer, true).await.expect("again");
            assert_eq!(committed_offset(&c, "g", &a), Some(8));
            assert_eq!(committed_offset(&c, "g", &b), None, "aborted");
            assert!(!c.has_pending("g", &a) && !c.has_pending("g", &b));
            c.close();
        }
        let c = open(dir.path()).await;
        assert_eq!(committed_offset(&c, "g", &a), Some(8));
        assert_eq!(committed_offset(&c, "g", &b), None);
        assert!(!c.has_pending("g", &a) && !c.has_pending("g", &b));
        assert_eq!(c.groups().pending_len(), 0);
        c.close();
    }

    fn consumer_request(member_id: &str, epoch: i32, owned: Assignment) -> HeartbeatRequest {
        HeartbeatRequest {
            group_id: "cg".into(),
            member_id: member_id.into(),
            member_epoch: MemberEpochIn::from_wire(epoch).expect("an epoch"),
            instance_id: None,
            rack_id: None,
            rebalance_timeout_ms: Some(30_000),
            subscribed_topic_names: Some(vec!["t".into()]),
            subscribed_topic_regex: None,
            server_assignor: None,
            owned: Some(owned),
            client_id: "c".into(),
            client_host: "h".into(),
        }
    }

    /// Heartbeats both members until the group is stable; returns (id, epoch, owned).
    async fn settle(c: &GroupCoordinator, topics: &TopicsView) -> Vec<(String, i32, Assignment)> {
        let mut members = vec![
            ("m1".to_string(), 0, Assignment::new()),
            ("m2".to_string(), 0, Assignment::new()),
        ];
        for _ in 0..10 {
            for (id, epoch, owned) in members.iter_mut() {
                let req = consumer_request(id, *epoch, owned.clone());
                match c.consumer_heartbeat(&req, topics).await.expect("beat") {
                    HeartbeatAnswer::Member {
                        member_epoch,
                        assignment,
                        ..
                    } => {
                        *epoch = member_epoch;
                        if let Some(a) = assignment {
                            *owned = a;
                        }
                    }
                    HeartbeatAnswer::Left { .. } => panic!("left"),
                }
            }
        }
        let group = c.consumer_group("cg").expect("group");
        assert_eq!(group.state(), crate::consumer::ConsumerGroupState::Stable);
        members
    }

    /// Goal: consumer-protocol groups survive a restart, and a torn batch at the end of
    /// the offsets log is ignored. Method: two members settle, the coordinator closes,
    /// half a batch is appended to the log's segment, and the reopened coordinator
    /// answers the members' next heartbeats at their epochs with nothing moved.
    #[tokio::test]
    async fn consumer_groups_come_back_after_a_restart_and_a_torn_tail() {
        let dir = tempfile::tempdir().expect("temp dir");
        let topics: TopicsView = [(
            "t".to_string(),
            crate::consumer::TopicInfo {
                id: uuid::Uuid::from_u128(1),
                partitions: 4,
            },
        )]
        .into();
        let c = open(dir.path()).await;
        let members = settle(&c, &topics).await;
        let before = c.consumer_group("cg").expect("group");
        c.close();
        drop(c);
        let segment = std::fs::read_dir(dir.path().join("groups").join("offsets"))
            .expect("log dir")
            .map(|e| e.expect("entry").path())
            .find(|p| p.extension().is_some_and(|e| e == "log"))
            .expect("a segment");
        let torn = durable::project(&before)
            .into_iter()
            .map(|(k, v)| (k.encode(), Some(v.encode())));
        let torn = internal_log::encode_batch(torn, 0);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&segment)
            .expect("segment");
        std::io::Write::write_all(&mut file, &torn[..torn.len() / 2]).expect("torn tail");
        drop(file);

        let c = open(dir.path()).await;
        let after = c.consumer_group("cg").expect("recovered");
        assert_eq!(durable::project(&after), durable::project(&before));
        for (id, epoch, owned) in &members {
            let req = consumer_request(id, *epoch, owned.clone());
            let answer = c.consumer_heartbeat(&req, &topics).await.expect("beat");
            assert_eq!(
                answer,
                HeartbeatAnswer::Member {
                    member_id: id.clone(),
                    member_epoch: *epoch,
                    assignment: None,
                }
            );
        }
        c.close();
    }

    /// A SyncGroup of group "g".
    fn sync_request(
        member: &str,
        generation: Option<GenerationId>,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncRequest {
        SyncRequest {
            group_id: "g".into(),
            generation_id: generation,
            member_id: member.into(),
            group_instance_id: None,
            protocol_type: None,
            protocol_name: None,
            assignments,
        }
    }

    /// A classic group's members carry on across a restart of its coordinator (as
    /// across a move to another broker): their heartbeats, syncs and commits at their
    /// generation are accepted by the new one. Once the group is emptied and deleted,
    /// the next start has no trace of it.
    #[tokio::test]
    async fn classic_groups_members_carry_on_after_a_restart() {
        let dir = tempfile::tempdir().expect("temp dir");
        let c = open(dir.path()).await;
        let joined = c.join(first_join()).await;
        assert_eq!(joined.error, None);
        let (member, generation) = (joined.member_id.clone(), joined.generation_id);
        let assignment = vec![(member.clone(), Bytes::from_static(b"all of t"))];
        let synced = c.sync(sync_request(&member, generation, assignment)).await;
        assert_eq!(synced.error, None);
        c.commit("g", &member, None, generation, vec![entry("t", 0, 5)])
            .await
            .expect("commit")[0]
            .expect("committed");
        c.close();
        drop(c);

        let c = open(dir.path()).await;
        assert_eq!(c.heartbeat("g", &member, None, generation), Ok(()));
        let again = c.sync(sync_request(&member, generation, vec![])).await;
        assert_eq!(
            (again.error, &again.assignment[..]),
            (None, &b"all of t"[..])
        );
        let results = c
            .commit("g", &member, None, generation, vec![entry("t", 0, 9)])
            .await
            .expect("commit");
        assert_eq!(results, vec![Ok(())]);
        let summary = c.describe("g").expect("described");
        assert_eq!((summary.state, summary.members.len()), ("Stable", 1));
        // The member leaves, the group is deleted: after another restart it is gone.
        c.leave("g", &[(member.clone(), None)]).expect("left")[0].expect("known member");
        c.delete("g").await.expect("deleted");
        c.close();
        drop(c);
        let c = open(dir.path()).await;
        assert!(c.describe("g").is_none(), "a deleted group stays deleted");
        assert_eq!(
            c.heartbeat("g", &member, None, generation),
            Err(GroupError::UnknownMemberId)
        );
        c.close();
    }

    #[tokio::test]
    async fn a_group_record_that_cannot_be_read_stops_start_up_with_a_clear_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let c = open(dir.path()).await;
        // A member's current assignment record whose value is cut short.
        let key = Bytes::from_static(&[8, 0, 2, b'c', b'g', 0, 1, b'm']);
        let batch = internal_log::encode_batch([(key, Some(Bytes::from_static(&[0, 0])))], 0);
        let appended = c.append_batch(&batch).expect("append");
        c.wait_durable(Some(appended.log_end_offset))
            .await
            .expect("durable");
        c.close();
        drop(c);
        let err = GroupCoordinator::open(dir.path(), FlushPolicy::Sync, GroupConfig::default())
            .await
            .err()
            .expect("refused");
        let text = err.to_string();
        assert!(
            text.contains("offset 0")
                && text.contains("current assignment of a member")
                && text.contains("cut short"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_producer_that_names_no_member_may_commit_to_a_group_with_members() {
        let dir = tempfile::tempdir().expect("temp dir");
        let c = open(dir.path()).await;
        let (tx, _rx) = oneshot::channel();
        c.groups().join(first_join(), tx, now_ms());
        let producer = ProducerId::new(1);
        let named = c
            .txn_commit(
                producer,
                "g",
                "stranger",
                None,
                Some(GenerationId::INITIAL),
                vec![entry("in", 0, 1)],
            )
            .await;
        assert!(
            named.is_err(),
            "a member id the group does not know is refused"
        );
        let anonymous = c
            .txn_commit(producer, "g", "", None, None, vec![entry("in", 0, 1)])
            .await;
        assert_eq!(anonymous, Ok(vec![Ok(())]));
        c.close();
    }
}
