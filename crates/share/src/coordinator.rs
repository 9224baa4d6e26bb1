//! The share coordinator: [`ShareGroups`] behind a mutex, a ticker for session
//! timeouts and lock expiry, and the share state log.
//!
//! The mutex is a `std` mutex held only for state steps, never across an `.await`.
//! A change the state log keeps (an acknowledgement, the start offset moving, records
//! archived) is appended to the log while the mutex is held, so snapshots of one
//! share-partition reach the log in the order they were taken; the caller then waits,
//! without the mutex, until the record is durable before it answers.

use crate::group::{
    Heartbeat, HeartbeatAnswer, ShareConfig, ShareError, ShareGroups, ShareOverrides, TopicInfo,
};
use crate::partition::Snapshot;
use crate::partition::{AckError, AcknowledgeType, Acquired, LogBatch, MemberId, SharePartition};
use crate::state_log::{encode_batch, StateRecord, Written};
use headway_base::{now_ms, Offset, TopicPartition};
use headway_broker::{internal_log, BrokerError, FlushPolicy, Partition};
use headway_log::batch::validate_all;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// How often sessions and locks are checked.
const TICK: Duration = Duration::from_millis(100);

/// Where clients read the share state log.
pub const SHARE_STATE_TOPIC: &str = "__share_group_state";

/// One acknowledgement range of a request.
#[derive(Debug, Clone)]
pub struct AckBatch {
    pub first: Offset,
    pub last: Offset,
    /// One type for the whole range, or one per offset.
    pub types: Vec<i8>,
}

/// Why a partition's acknowledgements failed (INVALID_RECORD_STATE, or the state log).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AckFailure {
    #[error(transparent)]
    Record(#[from] AckError),
    #[error("acknowledge type {0} is not known")]
    UnknownType(i8),
    #[error(transparent)]
    Share(#[from] ShareError),
}

#[derive(Debug, Clone)]
pub struct MemberSummary {
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: Vec<String>,
    pub assignment: BTreeMap<String, Vec<i32>>,
}

#[derive(Debug, Clone)]
pub struct PartitionSummary {
    pub topic_partition: TopicPartition,
    pub start_offset: Offset,
    pub end_offset: Offset,
    pub in_flight: u64,
    pub acquired: u64,
    /// In-flight records acknowledged or archived.
    pub done: u64,
    pub redeliveries: u64,
    pub archived: u64,
    /// Since the broker started: records delivered, accepted, released and rejected.
    pub deliveries: u64,
    pub accepted: u64,
    pub released: u64,
    pub rejected: u64,
}

#[derive(Debug, Clone)]
pub struct ShareGroupSummary {
    pub group_id: String,
    pub state: &'static str,
    pub group_epoch: i32,
    pub member_count: usize,
    /// Empty in [`ShareCoordinator::list`].
    pub members: Vec<MemberSummary>,
    pub partitions: Vec<PartitionSummary>,
}

/// What a write of share-partition state leaves to wait for.
pub type Durable = Pin<Box<dyn Future<Output = Result<(), ShareError>> + Send>>;

/// In a cluster: the replicated share state (`__share_group_state`), reached through
/// the leaders of its partitions.
pub trait RemoteState: Send + Sync + 'static {
    /// Writes snapshots (each with its [`Written`]); resolves once they are kept.
    fn write(&self, records: Vec<StateRecord>) -> Durable;
    /// The share-partition's last snapshot, read by the data partition's leader at
    /// `leader_epoch` (which fences writes of older leaders from then on).
    fn read(
        &self,
        group_id: &str,
        tp: &TopicPartition,
        leader_epoch: i32,
    ) -> Pin<Box<dyn Future<Output = Result<Option<Snapshot>, ShareError>> + Send>>;
}

/// Where a coordinator keeps its share-partitions' state.
enum Keeper {
    /// A broker alone: its own state log.
    Log(Arc<Partition>),
    /// A cluster: the replicated state; `loaded` holds the leader epoch at which each
    /// share-partition here was read from it, `sequence` orders this broker's writes.
    Remote {
        state: Arc<dyn RemoteState>,
        loaded: Mutex<HashMap<(String, TopicPartition), i32>>,
        sequence: AtomicI64,
    },
}

/// A write made under the mutex, waited for (or left to finish) after it.
enum Pending {
    Nothing,
    Log(Arc<Partition>, Offset),
    Remote(Durable),
}

impl Pending {
    async fn wait(self) -> Result<(), ShareError> {
        match self {
            Pending::Nothing => Ok(()),
            Pending::Log(log, end) => log.wait_durable(end).await.map_err(|e| {
                tracing::error!(error = %e, "syncing the share state log failed");
                ShareError::CoordinatorNotAvailable
            }),
            Pending::Remote(durable) => durable.await,
        }
    }

    /// Nobody waits: the log's flusher makes it durable, a remote write runs on.
    fn detach(self) {
        if let Pending::Remote(durable) = self {
            tokio::spawn(async move {
                if let Err(e) = durable.await {
                    tracing::debug!(error = %e, "a share state write nobody waited for failed");
                }
            });
        }
    }
}

pub struct ShareCoordinator {
    groups: Mutex<ShareGroups>,
    keeper: Keeper,
    /// Notified when records become available again (a lock expired, a release), so
    /// waiting fetches look again.
    released: Notify,
}

impl ShareCoordinator {
    /// Opens the share state log under `data_dir/share/state`, replays it, and starts
    /// the ticker. Must run inside a tokio runtime.
    pub async fn open(
        data_dir: &Path,
        flush: FlushPolicy,
        config: ShareConfig,
    ) -> Result<Arc<ShareCoordinator>, BrokerError> {
        let dir = data_dir.join("share").join("state");
        let log = internal_log::open(dir, SHARE_STATE_TOPIC, flush).await?;
        let mut groups = ShareGroups::new(config);
        let records = replay(&log, &mut groups).await?;
        tracing::info!(
            records,
            groups = groups.iter().count(),
            "share state log replayed"
        );
        Ok(ShareCoordinator::start(groups, Keeper::Log(log)))
    }

    /// A coordinator in a cluster: its share-partitions' state is read from and written
    /// to the replicated share state through `state`. Must run inside a tokio runtime.
    pub fn clustered(config: ShareConfig, state: Arc<dyn RemoteState>) -> Arc<ShareCoordinator> {
        // Sequences start at the clock's microseconds: a restarted broker's writes
        // still come after its earlier ones.
        let sequence = now_ms().saturating_mul(1000);
        let keeper = Keeper::Remote {
            state,
            loaded: Mutex::new(HashMap::new()),
            sequence: AtomicI64::new(sequence),
        };
        ShareCoordinator::start(ShareGroups::new(config), keeper)
    }

    fn start(groups: ShareGroups, keeper: Keeper) -> Arc<ShareCoordinator> {
        let coordinator = Arc::new(ShareCoordinator {
            groups: Mutex::new(groups),
            keeper,
            released: Notify::new(),
        });
        let weak = Arc::downgrade(&coordinator);
        let component = headway_broker::panics::Component::Coordinator;
        headway_broker::panics::spawn_restarting(component, "share-group ticker", move || {
            run_ticker(weak.clone())
        });
        coordinator
    }

    /// The share state log, compacted by key like a topic (a broker alone).
    pub fn state_log(&self) -> Option<&Arc<Partition>> {
        match &self.keeper {
            Keeper::Log(log) => Some(log),
            Keeper::Remote { .. } => None,
        }
    }

    /// In a cluster: makes sure the share-partition of `group_id` for `tp`, which this
    /// broker leads at `leader_epoch`, holds the replicated state as of that epoch (read
    /// once per epoch; what an earlier leadership left here is dropped). A broker
    /// alone has it all from its log.
    pub async fn ensure_loaded(
        &self,
        group_id: &str,
        tp: &TopicPartition,
        leader_epoch: i32,
    ) -> Result<(), ShareError> {
        let Keeper::Remote { state, loaded, .. } = &self.keeper else {
            return Ok(());
        };
        let key = (group_id.to_string(), tp.clone());
        if lock(loaded).get(&key) == Some(&leader_epoch) {
            return Ok(());
        }
        // No lock across the read: a slow store delays only its own share-partitions.
        // Of two fetches reading at once, the first to get here restores the state;
        // the other finds it loaded and keeps what the first (and its acquisitions) made.
        let snapshot = state.read(group_id, tp, leader_epoch).await?;
        let mut groups = self.groups();
        let mut loaded = lock(loaded);
        if loaded.get(&key) == Some(&leader_epoch) {
            return Ok(());
        }
        groups.forget(group_id, tp);
        if let Some(s) = &snapshot {
            let config = groups.group_config(group_id).partition;
            groups.restore(
                group_id,
                tp.clone(),
                SharePartition::from_snapshot(config, s),
            );
        }
        loaded.insert(key, leader_epoch);
        tracing::debug!(group = group_id, %tp, leader_epoch, found = snapshot.is_some(), "share-partition state loaded");
        Ok(())
    }

    fn groups(&self) -> MutexGuard<'_, ShareGroups> {
        self.groups
            .lock()
            .expect("share groups mutex poisoned by a panic")
    }

    pub fn config(&self) -> ShareConfig {
        self.groups().config
    }

    /// The settings of one share group: the broker's with the group's own over them.
    pub fn group_config(&self, group_id: &str) -> ShareConfig {
        self.groups().group_config(group_id)
    }

    /// Sets a share group's own settings (from its GROUP config resource).
    pub fn set_overrides(&self, group_id: &str, overrides: ShareOverrides) {
        self.groups().set_overrides(group_id, overrides);
    }

    /// Whether a share group of this id exists (one group-id namespace with consumer
    /// groups).
    pub fn group_exists(&self, group_id: &str) -> bool {
        self.groups().get(group_id).is_some()
    }

    /// The topics a member subscribes to (none for an unknown member).
    pub fn subscription(&self, group_id: &str, member_id: &str) -> Vec<String> {
        self.groups()
            .get(group_id)
            .and_then(|g| g.members.get(member_id))
            .map(|m| m.subscribed.clone())
            .unwrap_or_default()
    }

    /// The partitions assigned to a member, by topic (none for an unknown member).
    pub fn assignment(&self, group_id: &str, member_id: &str) -> BTreeMap<String, Vec<i32>> {
        self.groups()
            .get(group_id)
            .and_then(|g| g.members.get(member_id))
            .map(|m| m.assignment.clone())
            .unwrap_or_default()
    }

    /// Notified when records may have become available again: a waiting fetch makes
    /// its `notified()` future before it looks, so it misses no release.
    pub fn released(&self) -> &Notify {
        &self.released
    }

    pub fn heartbeat(
        &self,
        hb: Heartbeat,
        topics: &BTreeMap<String, TopicInfo>,
    ) -> Result<HeartbeatAnswer, ShareError> {
        let leaving = hb.member_epoch == -1;
        let answer = self.groups().heartbeat(hb, topics, now_ms());
        if leaving {
            self.released.notify_waiters();
        }
        answer
    }

    /// Makes the share-partitions of an assignment that have no state yet, starting
    /// where `share.auto.offset.reset` says, and writes them: a share group starting at
    /// "latest" starts when its members are assigned, not at their first fetch.
    /// `partitions` holds each one's log start and high watermark.
    pub async fn initialize(
        &self,
        group_id: &str,
        partitions: &[(TopicPartition, Offset, Offset)],
    ) -> Result<(), ShareError> {
        let end = {
            let mut groups = self.groups();
            let mut changed = Vec::new();
            for (tp, log_start, hw) in partitions {
                if groups.partition_mut(group_id, tp, *log_start, *hw).1 {
                    changed.push(tp.clone());
                }
            }
            self.write_locked(&mut groups, group_id, &changed)?
        };
        end.wait().await
    }

    /// A ShareFetch or ShareAcknowledge's share session step (see
    /// [`ShareGroups::session_step`]). Closing a session (-1) releases nothing yet:
    /// the request's acknowledgements apply first, then
    /// [`ShareCoordinator::release_member`].
    pub fn session_step(
        &self,
        group_id: &str,
        member_id: &str,
        epoch: i32,
        add: &[(uuid::Uuid, i32)],
        forget: &[(uuid::Uuid, i32)],
    ) -> Result<Vec<(uuid::Uuid, i32)>, ShareError> {
        self.groups()
            .session_step(group_id, member_id, epoch, add, forget, now_ms())
    }

    /// Every lock the member holds in the group goes back to the others (its share
    /// session closed, as Kafka does).
    pub fn release_member(&self, group_id: &str, member_id: &str) {
        let mut groups = self.groups();
        let tps: Vec<TopicPartition> = groups
            .get(group_id)
            .map(|g| g.partitions.keys().cloned().collect())
            .unwrap_or_default();
        for tp in tps {
            if let Some(p) = groups.partition(group_id, &tp) {
                p.release_member(member_id);
            }
        }
        drop(groups);
        self.released.notify_waiters();
    }

    /// Where the next read for `group_id`'s share-partition of `tp` starts, if
    /// anything can be acquired there (the share-partition is made if needed).
    pub fn next_fetch_offset(
        &self,
        group_id: &str,
        tp: &TopicPartition,
        log_start: Offset,
        high_watermark: Offset,
    ) -> Option<Offset> {
        let mut groups = self.groups();
        let (p, changed) = groups.partition_mut(group_id, tp, log_start, high_watermark);
        let next = p.next_fetch_offset().filter(|o| *o < high_watermark);
        if changed {
            // Written now; a later acknowledgement waits for it to be durable.
            if let Ok(pending) = self.write_locked(&mut groups, group_id, std::slice::from_ref(tp))
            {
                pending.detach();
            }
        }
        next
    }

    /// Acquires records of what a read returned for `member`.
    ///
    /// When several members are assigned the partition, one fetch takes at most a fair
    /// share of the records waiting in it (see [`fair_share`]): a spike is spread over
    /// every member instead of being taken whole by the first to fetch while the others
    /// wait.
    /// `key` is the partition's topic id and index.
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &self,
        group_id: &str,
        member: &MemberId,
        tp: &TopicPartition,
        key: (uuid::Uuid, i32),
        batches: &[LogBatch],
        max_records: u32,
        high_watermark: Offset,
    ) -> Vec<Acquired> {
        let mut groups = self.groups();
        let sharing = groups.sharing(group_id, tp, key);
        let Some(p) = groups.partition(group_id, tp) else {
            return Vec::new();
        };
        let start = p.start_offset();
        let max_records = max_records.min(fair_share(p.start_offset(), high_watermark, sharing));
        let acquired = p.acquire(member, batches, max_records, now_ms());
        if p.start_offset() != start {
            if let Ok(pending) = self.write_locked(&mut groups, group_id, std::slice::from_ref(tp))
            {
                pending.detach();
            }
        }
        acquired
    }

    /// Applies a member's acknowledgements, partition by partition, and answers once
    /// their state is durable. A partition's acknowledgements apply in order; the
    /// first refused one stops that partition's (the ones before it stand).
    pub async fn acknowledge(
        &self,
        group_id: &str,
        member_id: &str,
        acks: Vec<(TopicPartition, Vec<AckBatch>)>,
    ) -> Vec<(TopicPartition, Result<(), AckFailure>)> {
        let now = now_ms();
        let (mut results, end) = {
            let mut groups = self.groups();
            let mut results = Vec::with_capacity(acks.len());
            let mut changed = Vec::new();
            for (tp, batches) in acks {
                let result = match groups.partition(group_id, &tp) {
                    None => Err(AckFailure::Record(AckError::NotAcquired {
                        first: batches.first().map_or(Offset::ZERO, |b| b.first),
                        last: batches.first().map_or(Offset::ZERO, |b| b.last),
                    })),
                    Some(p) => {
                        let mut durable = false;
                        let r = apply_acks(p, member_id, &batches, now, &mut durable);
                        if durable {
                            changed.push(tp.clone());
                        }
                        r
                    }
                };
                results.push((tp, result));
            }
            let end = self.write_locked(&mut groups, group_id, &changed);
            (results, end)
        };
        self.released.notify_waiters();
        let written = match end {
            Ok(end) => end.wait().await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            for (_, r) in results.iter_mut() {
                if r.is_ok() {
                    *r = Err(AckFailure::Share(e.clone()));
                }
            }
        }
        results
    }

    /// Deletes a share group without members and tombstones its state.
    pub async fn delete(&self, group_id: &str) -> Result<(), ShareError> {
        let end = {
            let mut groups = self.groups();
            let tps = groups.delete(group_id)?;
            self.append(tombstones(group_id, &tps))?
        };
        end.wait().await
    }

    /// The start offset of each share-partition of a group with state
    /// (DescribeShareGroupOffsets); `None` for an unknown group.
    pub fn offsets(&self, group_id: &str) -> Option<Vec<(TopicPartition, Offset)>> {
        self.groups().get(group_id).map(|g| {
            g.partitions
                .iter()
                .map(|(tp, p)| (tp.clone(), p.start_offset()))
                .collect()
        })
    }

    /// Sets share-partitions' start offsets in a group without members, durably
    /// (AlterShareGroupOffsets).
    pub async fn alter_offsets(
        &self,
        group_id: &str,
        offsets: &[(TopicPartition, Offset)],
    ) -> Result<(), ShareError> {
        let end = {
            let mut groups = self.groups();
            let changed = groups.alter_offsets(group_id, offsets)?;
            self.write_locked(&mut groups, group_id, &changed)?
        };
        end.wait().await
    }

    /// Deletes the share-partition state of `topics` in a group without members,
    /// durably (DeleteShareGroupOffsets). Returns the share-partitions deleted.
    pub async fn delete_offsets(
        &self,
        group_id: &str,
        topics: &[String],
    ) -> Result<Vec<TopicPartition>, ShareError> {
        let (gone, end) = {
            let mut groups = self.groups();
            let gone = groups.delete_offsets(group_id, topics)?;
            let end = self.append(tombstones(group_id, &gone))?;
            (gone, end)
        };
        end.wait().await?;
        Ok(gone)
    }

    /// Every share group, by id, without members.
    pub fn list(&self) -> Vec<ShareGroupSummary> {
        self.groups().iter().map(|g| summary(g, false)).collect()
    }

    pub fn describe(&self, group_id: &str) -> Option<ShareGroupSummary> {
        self.groups().get(group_id).map(|g| summary(g, true))
    }

    /// Share sessions open now.
    pub fn sessions(&self) -> usize {
        self.groups().sessions()
    }

    /// Writes the snapshots of `changed` share-partitions of `group_id`, under the
    /// mutex (so one share-partition's snapshots are taken, and numbered, in order).
    fn write_locked(
        &self,
        groups: &mut ShareGroups,
        group_id: &str,
        changed: &[TopicPartition],
    ) -> Result<Pending, ShareError> {
        let records: Vec<StateRecord> = changed
            .iter()
            .filter_map(|tp| {
                let p = groups.partition(group_id, tp)?;
                Some(StateRecord {
                    group_id: group_id.to_string(),
                    topic_partition: tp.clone(),
                    snapshot: Some(p.snapshot()),
                    written: None,
                })
            })
            .collect();
        self.append(records)
    }

    /// Writes `records`: to the log, or, in a cluster, to the replicated state, each
    /// marked with the leader epoch its share-partition was loaded at (one not loaded
    /// here is not written: this broker does not lead it) and the next sequence.
    fn append(&self, mut records: Vec<StateRecord>) -> Result<Pending, ShareError> {
        if records.is_empty() {
            return Ok(Pending::Nothing);
        }
        match &self.keeper {
            Keeper::Log(log) => {
                let batch = encode_batch(&records, now_ms());
                let appended = log.append(validate_all(&batch), usize::MAX).map_err(|e| {
                    tracing::error!(error = %e, "appending to the share state log failed");
                    ShareError::CoordinatorNotAvailable
                })?;
                Ok(Pending::Log(Arc::clone(log), appended.log_end_offset))
            }
            Keeper::Remote {
                state,
                loaded,
                sequence,
                ..
            } => {
                let loaded = lock(loaded);
                records.retain_mut(|r| {
                    let key = (r.group_id.clone(), r.topic_partition.clone());
                    let Some(&leader_epoch) = loaded.get(&key) else {
                        return false;
                    };
                    r.written = Some(Written {
                        leader_epoch,
                        sequence: sequence.fetch_add(1, Ordering::Relaxed),
                    });
                    true
                });
                if records.is_empty() {
                    return Ok(Pending::Nothing);
                }
                Ok(Pending::Remote(state.write(records)))
            }
        }
    }

    fn tick(&self) {
        let now = now_ms();
        let mut groups = self.groups();
        let (released, changed) = groups.tick(now);
        let mut by_group: BTreeMap<String, Vec<TopicPartition>> = BTreeMap::new();
        for (g, tp) in changed {
            by_group.entry(g).or_default().push(tp);
        }
        for (g, tps) in by_group {
            // Durable when the flusher gets to it; nobody waits for it.
            if let Ok(pending) = self.write_locked(&mut groups, &g, &tps) {
                pending.detach();
            }
        }
        drop(groups);
        if released > 0 {
            self.released.notify_waiters();
        }
    }
}

/// The records that delete share-partitions' state from the log.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().expect("share state mutex poisoned by a panic")
}

fn tombstones(group_id: &str, tps: &[TopicPartition]) -> Vec<StateRecord> {
    tps.iter()
        .map(|tp| StateRecord {
            group_id: group_id.to_string(),
            topic_partition: tp.clone(),
            snapshot: None,
            written: None,
        })
        .collect()
}

/// The most records one fetch may acquire from a share-partition that `sharing` members
/// are assigned: the records from its start offset to the high watermark (in flight or
/// not yet read), divided among them, rounded up, and at least one. With one member it
/// is everything; as the records are acknowledged the share shrinks with them.
fn fair_share(start: Offset, high_watermark: Offset, sharing: usize) -> u32 {
    let waiting = (high_watermark.value() - start.value()).max(1) as u64;
    let members = sharing.max(1) as u64;
    waiting.div_ceil(members).min(u64::from(u32::MAX)) as u32
}

/// Applies one partition's acknowledgement batches in order.
fn apply_acks(
    p: &mut SharePartition,
    member_id: &str,
    batches: &[AckBatch],
    now_ms: i64,
    durable: &mut bool,
) -> Result<(), AckFailure> {
    for b in batches {
        let kind = |t: i8| AcknowledgeType::from_wire(t).ok_or(AckFailure::UnknownType(t));
        match b.types.as_slice() {
            [] => return Err(AckFailure::UnknownType(-1)),
            [one] => *durable |= p.acknowledge(member_id, b.first, b.last, kind(*one)?, now_ms)?,
            types => {
                let records = i128::from(b.last.value()) - i128::from(b.first.value()) + 1;
                if records != types.len() as i128 {
                    return Err(AckFailure::Record(AckError::BadRange {
                        first: b.first,
                        last: b.last,
                    }));
                }
                for (i, t) in types.iter().enumerate() {
                    let at = b.first.plus(i as i64);
                    *durable |= p.acknowledge(member_id, at, at, kind(*t)?, now_ms)?;
                }
            }
        }
    }
    Ok(())
}

fn summary(g: &crate::group::ShareGroup, members: bool) -> ShareGroupSummary {
    ShareGroupSummary {
        group_id: g.group_id.clone(),
        state: g.state(),
        group_epoch: g.group_epoch,
        member_count: g.members.len(),
        members: if members {
            g.members
                .values()
                .map(|m| MemberSummary {
                    member_id: m.member_id.to_string(),
                    member_epoch: m.member_epoch,
                    rack_id: m.rack_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed: m.subscribed.clone(),
                    assignment: m.assignment.clone(),
                })
                .collect()
        } else {
            Vec::new()
        },
        partitions: g
            .partitions
            .iter()
            .map(|(tp, p)| PartitionSummary {
                topic_partition: tp.clone(),
                start_offset: p.start_offset(),
                end_offset: p.end_offset(),
                in_flight: p.in_flight(),
                acquired: p.acquired(),
                done: p.done(),
                redeliveries: p.redeliveries,
                archived: p.archived,
                deliveries: p.deliveries,
                accepted: p.accepted,
                released: p.released,
                rejected: p.rejected,
            })
            .collect(),
    }
}

/// Replays the state log into `groups`: the last record of each key wins.
async fn replay(log: &Partition, groups: &mut ShareGroups) -> Result<usize, BrokerError> {
    let config = groups.config.partition;
    internal_log::replay(log, |_, key, value| {
        let Some(record) = StateRecord::decode(key, value) else {
            tracing::warn!("skipping a share state record this version does not understand");
            return;
        };
        match record.snapshot {
            Some(s) => groups.restore(
                &record.group_id,
                record.topic_partition,
                SharePartition::from_snapshot(config, &s),
            ),
            None => groups.forget(&record.group_id, &record.topic_partition),
        }
    })
    .await
}

async fn run_ticker(coordinator: Weak<ShareCoordinator>) {
    let mut interval = tokio::time::interval(TICK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let Some(c) = coordinator.upgrade() else {
            return;
        };
        c.tick();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::topic_partition;

    /// The topic id and index the tests' share-partitions are named by on the wire.
    const KEY: (uuid::Uuid, i32) = (uuid::Uuid::nil(), 0);

    fn batch(first: i64, last: i64) -> LogBatch {
        LogBatch {
            first: Offset::new(first),
            last: Offset::new(last),
            skip: false,
        }
    }

    fn ack(first: i64, last: i64, t: i8) -> AckBatch {
        AckBatch {
            first: Offset::new(first),
            last: Offset::new(last),
            types: vec![t],
        }
    }

    /// Goal: altered and deleted offsets are durable, and refused while the group has
    /// members. Method: alter two share-partitions of a new group, delete one topic's
    /// state, reopen the log and check what is left; then join a member and try again.
    #[tokio::test]
    async fn altered_and_deleted_offsets_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let config = ShareConfig::default();
        let (a, b) = (topic_partition("a", 0), topic_partition("b", 1));
        {
            let c = ShareCoordinator::open(dir.path(), FlushPolicy::Sync, config)
                .await
                .unwrap();
            c.alter_offsets(
                "g",
                &[(a.clone(), Offset::new(7)), (b.clone(), Offset::new(3))],
            )
            .await
            .unwrap();
            assert_eq!(
                c.offsets("g").unwrap(),
                vec![(a.clone(), Offset::new(7)), (b.clone(), Offset::new(3))]
            );
            let gone = c.delete_offsets("g", &["b".to_string()]).await.unwrap();
            assert_eq!(gone, vec![b.clone()]);
            assert_eq!(
                c.delete_offsets("nope", &["b".to_string()]).await,
                Err(ShareError::GroupIdNotFound)
            );
        }
        let c = ShareCoordinator::open(dir.path(), FlushPolicy::Sync, config)
            .await
            .unwrap();
        assert_eq!(c.offsets("g").unwrap(), vec![(a.clone(), Offset::new(7))]);
        // A fetch starts at the altered offset, whatever the reset policy says.
        assert_eq!(
            c.next_fetch_offset("g", &a, Offset::ZERO, Offset::new(20)),
            Some(Offset::new(7))
        );
        let topics = BTreeMap::from([(
            "a".to_string(),
            TopicInfo {
                id: uuid::Uuid::from_u128(1),
                partitions: 1,
            },
        )]);
        c.heartbeat(
            Heartbeat {
                group_id: "g".to_string(),
                member_id: "m".to_string(),
                member_epoch: 0,
                rack_id: None,
                client_id: "c".to_string(),
                client_host: "h".to_string(),
                subscribed_topic_names: Some(vec!["a".to_string()]),
            },
            &topics,
        )
        .unwrap();
        assert_eq!(
            c.assignment("g", "m"),
            BTreeMap::from([("a".to_string(), vec![0])])
        );
        assert!(c.assignment("g", "nobody").is_empty());
        assert_eq!(
            c.alter_offsets("g", &[(a.clone(), Offset::ZERO)]).await,
            Err(ShareError::NonEmptyGroup)
        );
        assert_eq!(
            c.delete_offsets("g", &["a".to_string()]).await,
            Err(ShareError::NonEmptyGroup)
        );
        assert_eq!(c.offsets("g").unwrap(), vec![(a, Offset::new(7))]);
    }

    /// Goal: a spike on a partition that five members share is spread over all five,
    /// not taken whole by the first to fetch; a lone member still gets everything.
    /// Method: five members join a group on a one-partition topic; each fetches from a
    /// read of 100 records with room for 500; then the share shrinks as records are
    /// acknowledged.
    #[tokio::test]
    async fn members_sharing_a_partition_each_acquire_a_fair_share() {
        let dir = tempfile::tempdir().unwrap();
        let config = ShareConfig {
            auto_offset_reset: crate::group::AutoOffsetReset::Earliest,
            ..ShareConfig::default()
        };
        let c = ShareCoordinator::open(dir.path(), FlushPolicy::Sync, config)
            .await
            .unwrap();
        let tp = topic_partition("t", 0);
        let topics = BTreeMap::from([(
            "t".to_string(),
            TopicInfo {
                id: uuid::Uuid::from_u128(1),
                partitions: 1,
            },
        )]);
        let join = |member: &str| {
            c.heartbeat(
                Heartbeat {
                    group_id: "g".to_string(),
                    member_id: member.to_string(),
                    member_epoch: 0,
                    rack_id: None,
                    client_id: "c".to_string(),
                    client_host: "h".to_string(),
                    subscribed_topic_names: Some(vec!["t".to_string()]),
                },
                &topics,
            )
            .unwrap();
        };
        join("m0");
        let hw = Offset::new(100);
        assert_eq!(
            c.next_fetch_offset("g", &tp, Offset::ZERO, hw),
            Some(Offset::ZERO)
        );
        // Alone, a member takes the whole read.
        let alone = c.acquire("g", &Arc::from("m0"), &tp, KEY, &[batch(0, 99)], 500, hw);
        assert_eq!(
            alone
                .iter()
                .map(|a| a.last.value() - a.first.value() + 1)
                .sum::<i64>(),
            100
        );
        c.release_member("g", "m0");
        for m in ["m1", "m2", "m3", "m4"] {
            join(m);
        }
        for m in ["m0", "m1", "m2", "m3", "m4"] {
            assert_eq!(
                c.assignment("g", m),
                BTreeMap::from([("t".to_string(), vec![0])])
            );
        }
        let mut taken = Vec::new();
        for m in ["m0", "m1", "m2", "m3", "m4"] {
            let got = c.acquire("g", &Arc::from(m), &tp, KEY, &[batch(0, 99)], 500, hw);
            let records: i64 = got
                .iter()
                .map(|a| a.last.value() - a.first.value() + 1)
                .sum();
            taken.push(records);
        }
        assert_eq!(taken, vec![20, 20, 20, 20, 20]);
        // m0 and m1 accept theirs, m2 releases its twenty: the start offset moves to
        // 40, and 60 records from there to the high watermark make shares of 12.
        for (m, first, kind) in [("m0", 0, 1), ("m1", 20, 1), ("m2", 40, 2)] {
            let results = c
                .acknowledge(
                    "g",
                    m,
                    vec![(tp.clone(), vec![ack(first, first + 19, kind)])],
                )
                .await;
            assert_eq!(results[0].1, Ok(()));
        }
        let got = c.acquire("g", &Arc::from("m0"), &tp, KEY, &[batch(40, 99)], 500, hw);
        assert_eq!(
            got.iter()
                .map(|a| (a.first.value(), a.last.value()))
                .collect::<Vec<_>>(),
            vec![(40, 51)]
        );
    }

    #[test]
    fn a_fair_share_is_the_waiting_records_over_the_members_rounded_up() {
        let share = |start, hw, members| fair_share(Offset::new(start), Offset::new(hw), members);
        assert_eq!(share(0, 100, 5), 20);
        assert_eq!(share(0, 101, 5), 21);
        assert_eq!(share(0, 100, 1), 100);
        assert_eq!(share(0, 100, 0), 100);
        assert_eq!(share(50, 100, 5), 10);
        assert_eq!(share(100, 100, 3), 1);
        assert_eq!(share(0, 3, 50), 1);
    }

    /// Goal: share-partition state survives a crash. Method: acknowledge through one
    /// coordinator, drop it without closing (as a crash would), open another on the
    /// same directory, and check the replayed state.
    #[tokio::test]
    async fn state_is_replayed_after_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let config = ShareConfig {
            auto_offset_reset: crate::group::AutoOffsetReset::Earliest,
            ..ShareConfig::default()
        };
        let tp = topic_partition("t", 0);
        {
            let c = ShareCoordinator::open(dir.path(), FlushPolicy::Sync, config)
                .await
                .unwrap();
            let member: MemberId = Arc::from("m");
            assert_eq!(
                c.next_fetch_offset("g", &tp, Offset::ZERO, Offset::new(10)),
                Some(Offset::ZERO)
            );
            let got = c.acquire("g", &member, &tp, KEY, &[batch(0, 9)], 100, Offset::new(10));
            assert_eq!(got.len(), 1);
            let results = c
                .acknowledge(
                    "g",
                    "m",
                    vec![(tp.clone(), vec![ack(0, 2, 1), ack(3, 3, 3), ack(5, 5, 2)])],
                )
                .await;
            assert_eq!(results[0].1, Ok(()));
            // Someone else's acknowledgement is refused.
            let results = c
                .acknowledge("g", "x", vec![(tp.clone(), vec![ack(6, 6, 1)])])
                .await;
            assert!(results[0].1.is_err());
        }
        let c = ShareCoordinator::open(dir.path(), FlushPolicy::Sync, config)
            .await
            .unwrap();
        let d = c.describe("g").expect("the group is back");
        let p = &d.partitions[0];
        assert_eq!(p.start_offset, Offset::new(4));
        assert_eq!(p.end_offset, Offset::new(10));
        assert_eq!(p.acquired, 0);
        assert!(c.group_exists("g"));
        // Offsets 4..=9 were acquired and not acknowledged: available again, delivered
        // once before.
        assert_eq!(
            c.next_fetch_offset("g", &tp, Offset::ZERO, Offset::new(10)),
            Some(Offset::new(4))
        );
        let got = c.acquire(
            "g",
            &Arc::from("n"),
            &tp,
            KEY,
            &[batch(0, 9)],
            100,
            Offset::new(10),
        );
        assert_eq!(
            got.iter().map(|a| a.delivery_count).collect::<Vec<_>>(),
            vec![2]
        );
    }
}
