//! In a cluster: the share-partition state of the replicated `__share_group_state`,
//! one [`StateStore`] per partition of it this broker leads ([`StateStores`] routes a
//! share-partition's key to its partition: Kafka's hash of
//! `group:topic:partition`).
//!
//! The leaders of the data partitions keep the share-partitions and write each change
//! here as a whole snapshot ([`crate::RemoteState`]); a store keeps the last one per
//! share-partition, in its log (the [`crate::state_log`] format, version 1) and in
//! memory, and answers a write once every in-sync replica has it. A new leader of a
//! data partition reads the snapshot before it serves the share-partition.
//!
//! Which snapshot is newest is decided by its [`Written`]: a snapshot of an older
//! leader epoch than the store has seen (written, or read by a newer leader) is refused
//! with `FENCED_LEADER_EPOCH`, so a deposed leader cannot overwrite what its successor
//! started from; within one epoch a lower sequence is an older snapshot that reached
//! the store late, and is dropped (answered as kept: a newer one is).

use crate::partition::Snapshot;
use crate::state_log::{encode_batch, StateRecord, Written};
use crate::ShareError;
use headway_base::{now_ms, Offset, TopicPartition};
use headway_broker::coordinator_shards::{partition_for, Shard, Shards, ToLoad, Unserved};
use headway_broker::{internal_log, BrokerError, Partition};
use headway_log::batch::validate_all;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Why a store refused a share-partition's read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("this broker does not lead the share state partition")]
    NotCoordinator,
    #[error("the share state partition is loading")]
    Loading,
    #[error("a newer leader of the data partition has the share-partition")]
    FencedLeaderEpoch,
    #[error("the share state could not be written")]
    Unavailable,
}

impl From<Unserved> for StoreError {
    fn from(u: Unserved) -> StoreError {
        match u {
            Unserved::NotCoordinator => StoreError::NotCoordinator,
            Unserved::Loading => StoreError::Loading,
        }
    }
}

/// A share-partition's key in the store.
type Key = (String, TopicPartition);

#[derive(Debug, Clone)]
struct Entry {
    /// The newest writer seen, or the newest leader epoch that read it.
    written: Written,
    snapshot: Option<Snapshot>,
}

/// The share state of one partition of `__share_group_state` this broker leads.
pub struct StateStore {
    log: Arc<Partition>,
    /// The partition's leader epoch when this broker loaded it.
    epoch: i32,
    entries: Mutex<HashMap<Key, Entry>>,
    retired: AtomicBool,
}

impl Shard for StateStore {
    fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }
}

impl StateStore {
    /// Replays `log` (a partition this broker leads at `epoch`) and serves it.
    pub async fn serve(log: Arc<Partition>, epoch: i32) -> Result<Arc<StateStore>, BrokerError> {
        let mut entries: HashMap<Key, Entry> = HashMap::new();
        internal_log::replay(&log, |_, key, value| {
            let Some(record) = StateRecord::decode(key, value) else {
                tracing::warn!("skipping a share state record this version does not understand");
                return;
            };
            let key = (record.group_id, record.topic_partition);
            match (record.snapshot, record.written) {
                (Some(snapshot), Some(written)) => {
                    entries.insert(
                        key,
                        Entry {
                            written,
                            snapshot: Some(snapshot),
                        },
                    );
                }
                _ => {
                    entries.remove(&key);
                }
            }
        })
        .await?;
        Ok(Arc::new(StateStore {
            log,
            epoch,
            entries: Mutex::new(entries),
            retired: AtomicBool::new(false),
        }))
    }

    fn entries(&self) -> Result<MutexGuard<'_, HashMap<Key, Entry>>, StoreError> {
        if self.retired.load(Ordering::Acquire) {
            return Err(StoreError::NotCoordinator);
        }
        Ok(self.entries.lock().expect("share state store lock"))
    }

    /// The share-partition's snapshot for its data partition's leader at
    /// `leader_epoch`; writes of older epochs are refused from now on.
    pub fn read(
        &self,
        group_id: &str,
        tp: &TopicPartition,
        leader_epoch: i32,
    ) -> Result<Option<Snapshot>, StoreError> {
        let mut entries = self.entries()?;
        let key = (group_id.to_string(), tp.clone());
        let entry = entries.entry(key).or_insert(Entry {
            written: Written {
                leader_epoch,
                sequence: i64::MIN,
            },
            snapshot: None,
        });
        if leader_epoch < entry.written.leader_epoch {
            return Err(StoreError::FencedLeaderEpoch);
        }
        if leader_epoch > entry.written.leader_epoch {
            entry.written = Written {
                leader_epoch,
                sequence: i64::MIN,
            };
        }
        Ok(entry.snapshot.clone())
    }

    /// Keeps the records newer than what the store has, answering each once every
    /// in-sync replica holds it: a result per record, in order. A tombstone without a
    /// writer deletes whatever is there.
    pub async fn write(&self, records: Vec<StateRecord>) -> Vec<Result<(), StoreError>> {
        let mut results = Vec::with_capacity(records.len());
        let end = {
            let mut entries = match self.entries() {
                Ok(e) => e,
                Err(e) => return vec![Err(e); records.len()],
            };
            let mut kept = Vec::new();
            for record in records {
                let key = (record.group_id.clone(), record.topic_partition.clone());
                let result = match (record.written, entries.get(&key)) {
                    (None, _) => {
                        entries.remove(&key);
                        kept.push(record);
                        Ok(true)
                    }
                    (Some(w), Some(e)) if w.leader_epoch < e.written.leader_epoch => {
                        Err(StoreError::FencedLeaderEpoch)
                    }
                    (Some(w), Some(e)) if w <= e.written => Ok(false),
                    (Some(w), _) => {
                        entries.insert(
                            key,
                            Entry {
                                written: w,
                                snapshot: record.snapshot.clone(),
                            },
                        );
                        kept.push(record);
                        Ok(true)
                    }
                };
                results.push(result.map(|_| ()));
            }
            if kept.is_empty() {
                return results;
            }
            let batch = encode_batch(&kept, now_ms());
            match self.log.append(validate_all(&batch), usize::MAX) {
                Ok(appended) => appended.log_end_offset,
                Err(e) => {
                    tracing::error!(error = %e, "appending to the share state failed");
                    return vec![Err(StoreError::Unavailable); results.len()];
                }
            }
        };
        if let Err(e) = self.wait_replicated(end).await {
            for r in results.iter_mut().filter(|r| r.is_ok()) {
                *r = Err(e);
            }
        }
        results
    }

    async fn wait_replicated(&self, end: Offset) -> Result<(), StoreError> {
        self.log
            .wait_replicated(end, 1, self.epoch)
            .await
            .map_err(|e| match e {
                BrokerError::NotLeaderOrFollower { .. } => StoreError::NotCoordinator,
                e => {
                    tracing::error!(error = %e, "replicating the share state failed");
                    StoreError::Unavailable
                }
            })
    }
}

/// The state stores of this broker: one per partition of `__share_group_state` it
/// leads.
pub struct StateStores {
    shards: Shards<StateStore>,
}

impl Default for StateStores {
    fn default() -> Self {
        StateStores {
            shards: Shards::clustered(),
        }
    }
}

impl StateStores {
    /// The store key of a share-partition, hashed to pick its partition.
    pub fn key(group_id: &str, tp: &TopicPartition) -> String {
        format!("{group_id}:{}:{}", tp.topic, tp.partition.value())
    }

    /// The partition of `__share_group_state` that keeps a share-partition.
    pub fn partition_of(group_id: &str, tp: &TopicPartition, partitions: i32) -> i32 {
        partition_for(&Self::key(group_id, tp), partitions)
    }

    /// The store of partition `index`, if this broker serves it now.
    pub fn at(&self, index: i32) -> Result<Arc<StateStore>, StoreError> {
        Ok(self.shards.at(index)?)
    }

    /// See [`Shards::follow`].
    pub fn follow(&self, partitions: i32, leading: &[(i32, i32)]) -> Vec<ToLoad> {
        self.shards.follow(partitions, leading)
    }

    /// Replays `log`, the partition `what` names, and serves it from then on.
    pub async fn load(&self, what: ToLoad, log: Arc<Partition>) -> Result<bool, BrokerError> {
        match StateStore::serve(log, what.epoch).await {
            Ok(store) => Ok(self.shards.loaded(what, store)),
            Err(e) => {
                self.shards.load_failed(what);
                Err(e)
            }
        }
    }

    /// A load that did not finish; asked for again at the next [`StateStores::follow`].
    pub fn load_failed(&self, what: ToLoad) {
        self.shards.load_failed(what);
    }
}

impl From<StoreError> for ShareError {
    fn from(_: StoreError) -> ShareError {
        ShareError::CoordinatorNotAvailable
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::topic_partition;
    use headway_broker::FlushPolicy;

    fn snapshot(start: i64) -> Option<Snapshot> {
        Some(Snapshot {
            start_offset: Offset::new(start),
            state_epoch: 0,
            runs: Vec::new(),
        })
    }

    fn record(start: i64, leader_epoch: i32, sequence: i64) -> StateRecord {
        StateRecord {
            group_id: "g".into(),
            topic_partition: topic_partition("t", 0),
            snapshot: snapshot(start),
            written: Some(Written {
                leader_epoch,
                sequence,
            }),
        }
    }

    #[tokio::test]
    async fn the_newest_snapshot_is_kept_and_a_deposed_leader_is_fenced_after_a_reload() {
        let dir = tempfile::tempdir().unwrap();
        let log = internal_log::open(
            dir.path().join("s"),
            "__share_group_state",
            FlushPolicy::Sync,
        )
        .await
        .unwrap();
        let tp = topic_partition("t", 0);
        let store = StateStore::serve(Arc::clone(&log), 0).await.unwrap();
        assert_eq!(store.read("g", &tp, 3), Ok(None));
        assert_eq!(store.write(vec![record(10, 3, 2)]).await, vec![Ok(())]);
        // An older snapshot of the same leader arriving late is dropped, not refused.
        assert_eq!(store.write(vec![record(5, 3, 1)]).await, vec![Ok(())]);
        assert_eq!(store.read("g", &tp, 3), Ok(snapshot(10)));
        // A new leader reads at epoch 4: the old one's later writes are refused.
        assert_eq!(store.read("g", &tp, 4), Ok(snapshot(10)));
        assert_eq!(
            store.write(vec![record(20, 3, 9)]).await,
            vec![Err(StoreError::FencedLeaderEpoch)]
        );
        assert_eq!(store.write(vec![record(12, 4, 1)]).await, vec![Ok(())]);
        assert_eq!(store.read("g", &tp, 2), Err(StoreError::FencedLeaderEpoch));

        // Another broker loads the partition: the same newest snapshot, the same fence.
        let again = StateStore::serve(log, 1).await.unwrap();
        assert_eq!(again.read("g", &tp, 4), Ok(snapshot(12)));
        assert_eq!(
            again.write(vec![record(30, 3, 10)]).await,
            vec![Err(StoreError::FencedLeaderEpoch)]
        );
        again.retire();
        assert_eq!(again.read("g", &tp, 4), Err(StoreError::NotCoordinator));
    }
}
