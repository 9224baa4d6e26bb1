//! The group coordinator: [`Groups`] behind a mutex, a ticker for timeouts, and the
//! offsets log.
//!
//! The mutex is a `std` mutex held only for state-machine steps, never across I/O or an
//! `.await`: answers that must wait are one-shot channels completed by later steps.
//! Commits append to the offsets log (a [`Partition`] with the broker's flush policy and
//! group commit), wait until the record is durable, then update the in-memory offsets.

use crate::offsets::{encode_batch, OffsetRecord};
use crate::state::{
    CommittedOffset, GroupConfig, Groups, JoinRequest, JoinResult, OffsetCommit, SyncRequest,
    SyncResult,
};
use crate::{GenerationId, GroupError};
use bytes::Bytes;
use headway_broker::{internal_log, BrokerError, FlushPolicy, Offset, Partition, TopicPartition};
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
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol_name: String,
    pub members: Vec<MemberSummary>,
}

pub struct GroupCoordinator {
    groups: Mutex<Groups>,
    log: Arc<Partition>,
    closed: AtomicBool,
}

fn now_ms() -> i64 {
    headway_broker::now_ms()
}

impl GroupCoordinator {
    /// Opens the offsets log under `data_dir/groups/offsets`, replays it, and starts
    /// the ticker. Must run inside a tokio runtime.
    pub async fn open(
        data_dir: &Path,
        flush: FlushPolicy,
        config: GroupConfig,
    ) -> Result<Arc<GroupCoordinator>, BrokerError> {
        let dir = data_dir.join("groups").join("offsets");
        let log = internal_log::open(dir, "__consumer_offsets", flush).await?;
        let mut groups = Groups::new(config);
        let records = replay(&log, &mut groups).await?;
        let count: usize = groups.iter().map(|g| g.offsets.len()).sum();
        tracing::info!(
            records,
            groups = groups.iter().count(),
            offsets = count,
            "offsets log replayed"
        );
        let coordinator = Arc::new(GroupCoordinator {
            groups: Mutex::new(groups),
            log,
            closed: AtomicBool::new(false),
        });
        tokio::spawn(run_ticker(Arc::downgrade(&coordinator)));
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

    pub async fn join(&self, req: JoinRequest) -> JoinResult {
        let member_id = req.member_id.clone();
        let (reply, answer) = oneshot::channel();
        self.groups().join(req, reply, now_ms());
        answer.await.unwrap_or_else(|_| JoinResult {
            error: Some(GroupError::CoordinatorNotAvailable),
            generation_id: None,
            member_id,
            ..JoinResult::default()
        })
    }

    pub async fn sync(&self, req: SyncRequest) -> SyncResult {
        let (reply, answer) = oneshot::channel();
        self.groups().sync(req, reply, now_ms());
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
        self.groups()
            .heartbeat(group_id, member_id, instance, generation_id, now_ms())
    }

    pub fn leave(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        self.groups().leave(group_id, members, now_ms())
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
        let metadata_max = {
            let groups = self.groups();
            groups.check_commit(group_id, member_id, instance, generation_id)?;
            groups.config.offset_metadata_bytes_max
        };
        let now = now_ms();
        let results: Vec<Result<(), GroupError>> = entries
            .iter()
            .map(|e| match &e.metadata {
                Some(m) if m.len() > metadata_max => Err(GroupError::OffsetMetadataTooLarge),
                _ => Ok(()),
            })
            .collect();
        let records: Vec<OffsetRecord> = entries
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.is_ok())
            .map(|(e, _)| OffsetRecord {
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
        if records.is_empty() {
            return Ok(results);
        }
        let base = self.append(&records).await?;
        let applied = records
            .into_iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let committed = r.value?.at(base.plus(i as i64));
                Some((r.topic_partition, committed))
            })
            .collect();
        self.groups().apply_commit(group_id, applied, now);
        Ok(results)
    }

    /// Appends records to the offsets log and waits until they are durable. Returns
    /// the log offset of the first.
    async fn append(&self, records: &[OffsetRecord]) -> Result<Offset, GroupError> {
        let batch = encode_batch(records, now_ms());
        let appended = self.log.append(&batch, usize::MAX).map_err(|e| {
            tracing::error!(error = %e, "appending to the offsets log failed");
            GroupError::CoordinatorNotAvailable
        })?;
        self.log
            .wait_durable(appended.log_end_offset)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "syncing the offsets log failed");
                GroupError::CoordinatorNotAvailable
            })?;
        Ok(appended.base_offset)
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

    /// Every group, without members.
    pub fn list(&self) -> Vec<GroupSummary> {
        self.groups().iter().map(|g| summary(g, false)).collect()
    }

    pub fn describe(&self, group_id: &str) -> Option<GroupSummary> {
        self.groups().get(group_id).map(|g| summary(g, true))
    }

    /// Deletes a group without members and tombstones its offsets.
    pub async fn delete(&self, group_id: &str) -> Result<(), GroupError> {
        let keys = self.groups().delete(group_id)?;
        let tombstones: Vec<OffsetRecord> = keys
            .into_iter()
            .map(|topic_partition| OffsetRecord {
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

fn summary(g: &crate::state::Group, with_members: bool) -> GroupSummary {
    let protocol = g.protocol_name.clone().unwrap_or_default();
    GroupSummary {
        group_id: g.group_id.clone(),
        state: g.state.name(),
        protocol_type: g.protocol_type.clone().unwrap_or_default(),
        protocol_name: protocol.clone(),
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

/// Rebuilds the committed offsets from the offsets log. Returns the records read.
async fn replay(log: &Partition, groups: &mut Groups) -> Result<usize, BrokerError> {
    internal_log::replay(log, |offset, key, value| {
        let Some(r) = OffsetRecord::decode(key, value) else {
            tracing::warn!(
                offset = offset.value(),
                "skipping an offsets record of an unknown format"
            );
            return;
        };
        let key = r.topic_partition;
        match r.value {
            Some(v) => {
                let at = v.commit_timestamp_ms;
                groups.apply_commit(&r.group_id, vec![(key, v.at(offset))], at);
            }
            None => groups.apply_delete(&r.group_id, &key),
        }
    })
    .await
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
        let expired = c.groups().tick(now_ms());
        if !expired.is_empty() {
            let tombstones: Vec<OffsetRecord> = expired
                .into_iter()
                .map(|(group_id, topic_partition)| OffsetRecord {
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
