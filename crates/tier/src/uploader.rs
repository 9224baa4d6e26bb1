//! The uploader: once a round (`remote_storage_upload_interval_ms`) it walks the
//! tiered topics' partitions this broker leads (or every one, for a broker alone) and
//! copies each sealed segment below the last stable offset that the bucket does not
//! hold yet, oldest first, one upload at a time. A partition's remote view is loaded
//! from a listing the first time the broker leads it in a leader epoch (so a new leader
//! carries on where the last one stopped, with no state of its own), and the orphans
//! found then are deleted. Remote segments wholly below the partition's log start
//! (retention, DeleteRecords) are deleted from the bucket too. A follower uploads
//! nothing; its local limits delete the local copies the bucket holds, as its leader's
//! do, so that no replica's disk keeps what the tier holds.

use crate::retention::{self, Limits};
use crate::store::{RemoteSegment, RemoteStore, TierError};
use crate::{IndexCache, TierSettings};
use headway_base::{limits, Offset};
use headway_broker::io::bulk_budget::BulkBudget;
use headway_broker::partition::DeleteRecordsTo;
use headway_broker::{Broker, BrokerError, Partition};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::watch;

/// What the uploader did, for `/metrics` (`probe.rs`).
#[derive(Debug, Default)]
pub struct TierStats {
    pub uploaded_segments: AtomicU64,
    pub uploaded_bytes: AtomicU64,
    pub upload_failures: AtomicU64,
    pub deleted_segments: AtomicU64,
    pub orphans_deleted: AtomicU64,
    /// Bytes of sealed, stable segments not in the bucket yet, as the last round saw.
    pub lag_bytes: AtomicU64,
    /// Local segments deleted because the remote tier holds them.
    pub local_deleted_segments: AtomicU64,
    /// Fetches served from the remote tier, their bytes, and those that failed.
    pub fetches: AtomicU64,
    pub fetch_bytes: AtomicU64,
    pub fetch_failures: AtomicU64,
}

/// A partition's remote segments as this broker knows them, and the leader epoch it
/// learnt them in.
#[derive(Debug)]
pub(crate) struct Known {
    pub(crate) epoch: i32,
    pub(crate) dir: String,
    pub(crate) segments: BTreeMap<i64, RemoteSegment>,
}

/// The leader epoch of a view loaded by a read rather than by the uploader: the
/// uploader's next round lists the partition again (and deletes its orphans).
pub(crate) const LISTED_FOR_READ: i32 = i32::MIN;

/// The remote tier of one broker.
pub struct Tier {
    pub(crate) store: RemoteStore,
    pub(crate) stats: TierStats,
    /// By (topic id, partition).
    pub(crate) known: Mutex<HashMap<(uuid::Uuid, i32), Known>>,
    /// Copied `.index` and `.txnindex` files, for reads.
    pub(crate) indexes: IndexCache,
}

impl Tier {
    pub fn new(store: RemoteStore) -> Arc<Tier> {
        Arc::new(Tier {
            store,
            stats: TierStats::default(),
            known: Mutex::new(HashMap::new()),
            indexes: IndexCache::new(limits::REMOTE_INDEX_CACHE_BYTES_MAX),
        })
    }

    /// Connects to the bucket and runs the uploader until `shutdown` turns true or
    /// the broker goes. `None` when no remote tier is configured.
    pub fn start(
        broker: &Arc<Broker>,
        settings: &TierSettings,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<Option<Arc<Tier>>, TierError> {
        if !settings.enabled() {
            return Ok(None);
        }
        let tier = Tier::new(RemoteStore::connect(settings)?);
        let every = Duration::from_millis(settings.remote_storage_upload_interval_ms);
        let (broker, running): (Weak<Broker>, _) = (Arc::downgrade(broker), Arc::clone(&tier));
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = shutdown.wait_for(|down| *down) => return,
                }
                let Some(broker) = broker.upgrade() else {
                    return;
                };
                running.round(&broker).await;
            }
        });
        tracing::info!(endpoint = %settings.remote_storage_endpoint,
            bucket = %settings.remote_storage_bucket, "remote tier on");
        Ok(Some(tier))
    }

    pub fn stats(&self) -> &TierStats {
        &self.stats
    }

    /// Remote segments known here, and their bytes.
    pub fn held(&self) -> (u64, u64) {
        let known = self.known.lock().expect("tier mutex poisoned");
        known
            .values()
            .flat_map(|k| k.segments.values())
            .fold((0, 0), |(n, bytes), s| (n + 1, bytes + s.size_bytes))
    }

    /// A partition's remote segments as known here (empty until its first round).
    pub fn remote_segments(&self, topic_id: uuid::Uuid, partition: i32) -> Vec<RemoteSegment> {
        let known = self.known.lock().expect("tier mutex poisoned");
        known
            .get(&(topic_id, partition))
            .map(|k| k.segments.values().cloned().collect())
            .unwrap_or_default()
    }

    /// One round over every tiered partition. Errors are logged and counted; the next
    /// round tries again.
    pub async fn round(&self, broker: &Broker) {
        let mut lag = 0u64;
        for topic in broker.topics() {
            let limits = {
                let config = topic.config();
                if !config.remote_storage_enable {
                    continue;
                }
                Limits {
                    retention_ms: config.retention_ms,
                    retention_bytes: config.retention_bytes,
                    local_retention_ms: config.local_retention_ms,
                    local_retention_bytes: config.local_retention_bytes,
                }
            };
            for p in topic.partitions() {
                if p.unopened_cause().is_some() {
                    continue;
                }
                let key = (topic.id(), p.index().value());
                if let Some((_, false)) = p.role_epoch() {
                    self.known.lock().expect("tier mutex poisoned").remove(&key);
                    if let Err(error) = self.follower_round(topic.id(), p, &limits).await {
                        tracing::warn!(topic = p.topic(), partition = key.1, %error,
                            "remote tier: a follower's local deletion will try again next round");
                    }
                    continue;
                }
                let budget = broker.bulk_budget();
                match self
                    .partition_round(topic.id(), p, &limits, Some(budget))
                    .await
                {
                    Ok(left) => lag += left,
                    Err(RoundError::NotLeading) => {
                        self.known.lock().expect("tier mutex poisoned").remove(&key);
                    }
                    Err(RoundError::Tier(error)) => {
                        self.stats.upload_failures.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(topic = p.topic(), partition = key.1, %error,
                            "remote tier: will try again next round");
                    }
                }
            }
        }
        self.stats.lag_bytes.store(lag, Ordering::Relaxed);
    }

    /// Uploads what one partition has sealed and the bucket lacks, applies its
    /// retention (`retention.rs`), and deletes what its log start left behind. Answers
    /// the bytes still to upload.
    pub(crate) async fn partition_round(
        &self,
        topic_id: uuid::Uuid,
        p: &Arc<Partition>,
        limits: &Limits,
        budget: Option<&BulkBudget>,
    ) -> Result<u64, RoundError> {
        let key = (topic_id, p.index().value());
        let sealed = blocking(p, |p| p.sealed_segments()).await?;
        let epoch = p.leading_epoch();
        let fresh = {
            let known = self.known.lock().expect("tier mutex poisoned");
            known.get(&key).is_none_or(|k| k.epoch != epoch)
        };
        if fresh {
            let dir = self.store.partition_dir(p.topic(), topic_id, key.1);
            let listing = self.store.list(&dir).await?;
            for orphan in &listing.orphans {
                self.store.delete_object(orphan).await?;
                self.stats.orphans_deleted.fetch_add(1, Ordering::Relaxed);
            }
            if !listing.orphans.is_empty() {
                tracing::info!(
                    topic = p.topic(),
                    partition = key.1,
                    orphans = listing.orphans.len(),
                    "remote tier: deleted objects of uploads cut short"
                );
            }
            if epoch >= 0 {
                if let Some(start) = remote_start_reaching(&listing.segments, p.log_start_offset())
                {
                    blocking(p, move |p| p.take_remote_start(start)).await?;
                }
            }
            let known = Known {
                epoch,
                dir,
                segments: listing.segments,
            };
            self.known
                .lock()
                .expect("tier mutex poisoned")
                .insert(key, known);
        }
        let (dir, remote_end) = {
            let known = self.known.lock().expect("tier mutex poisoned");
            let k = &known[&key];
            let end = k.segments.values().map(|s| s.end_offset).max();
            (k.dir.clone(), end.unwrap_or(i64::MIN))
        };
        let mut left: u64 = sealed
            .iter()
            .filter(|s| s.end_offset.value() > remote_end)
            .map(|s| s.size_bytes)
            .sum();
        for segment in sealed.iter().filter(|s| s.end_offset.value() > remote_end) {
            let now_ms = headway_base::now_ms();
            let Some(remote) = self
                .store
                .upload(&dir, segment, epoch, now_ms, budget)
                .await?
            else {
                continue;
            };
            left -= segment.size_bytes;
            self.stats.uploaded_segments.fetch_add(1, Ordering::Relaxed);
            self.stats
                .uploaded_bytes
                .fetch_add(remote.size_bytes, Ordering::Relaxed);
            tracing::debug!(
                topic = p.topic(),
                partition = key.1,
                base_offset = remote.base_offset,
                end_offset = remote.end_offset,
                bytes = remote.size_bytes,
                "remote tier: segment uploaded"
            );
            let mut known = self.known.lock().expect("tier mutex poisoned");
            if let Some(k) = known.get_mut(&key) {
                k.segments.insert(remote.base_offset, remote);
            }
        }
        self.apply_retention(p, &key, limits).await?;
        let start = p.log_start_offset().value();
        let gone: Vec<RemoteSegment> = {
            let known = self.known.lock().expect("tier mutex poisoned");
            known[&key]
                .segments
                .values()
                .filter(|s| s.end_offset <= start)
                .cloned()
                .collect()
        };
        for segment in gone {
            self.store.delete(&dir, &segment).await?;
            self.stats.deleted_segments.fetch_add(1, Ordering::Relaxed);
            let mut known = self.known.lock().expect("tier mutex poisoned");
            if let Some(k) = known.get_mut(&key) {
                k.segments.remove(&segment.base_offset);
            }
        }
        Ok(left)
    }
}

impl Tier {
    /// Moves a tiered partition's log start past the segments its whole-log limits let
    /// go, then deletes the local copies its local limits let go that the tier holds.
    async fn apply_retention(
        &self,
        p: &Arc<Partition>,
        key: &(uuid::Uuid, i32),
        limits: &Limits,
    ) -> Result<(), RoundError> {
        let local = blocking(p, |p| p.local_log()).await?;
        let now_ms = headway_base::now_ms();
        let (start, remote_end) = {
            let known = self.known.lock().expect("tier mutex poisoned");
            let remote = &known[key].segments;
            let start = retention::log_start_for(
                p.log_start_offset().value(),
                remote,
                &local,
                limits,
                now_ms,
            );
            (
                start,
                retention::covered_to(remote, local.start_offset.value()),
            )
        };
        if let Some(start) = start {
            let to = DeleteRecordsTo::Offset(Offset::new(start));
            let moved = blocking(p, move |p| p.delete_records(to)).await?;
            tracing::info!(
                topic = p.topic(),
                partition = key.1,
                log_start = moved.value(),
                "remote tier: retention moved the log start"
            );
        }
        if let Some(local_start) = retention::local_start_for(&local, remote_end, limits, now_ms) {
            let to = Offset::new(local_start);
            let deleted = blocking(p, move |p| p.delete_local_segments(to)).await?;
            self.stats
                .local_deleted_segments
                .fetch_add(deleted as u64, Ordering::Relaxed);
        }
        Ok(())
    }
}

impl Tier {
    /// A follower's round: its local limits delete the local segments the bucket holds
    /// (as its leader's do), below its high watermark. The bucket is listed only when
    /// the limits would let something go, so a follower within them asks nothing.
    async fn follower_round(
        &self,
        topic_id: uuid::Uuid,
        p: &Arc<Partition>,
        limits: &Limits,
    ) -> Result<(), TierError> {
        let local = match blocking(p, |p| p.local_log()).await {
            Ok(local) => local,
            Err(RoundError::NotLeading) => return Ok(()),
            Err(RoundError::Tier(e)) => return Err(e),
        };
        let now_ms = headway_base::now_ms();
        if retention::local_start_for(&local, i64::MAX, limits, now_ms).is_none() {
            return Ok(());
        }
        let dir = self
            .store
            .partition_dir(p.topic(), topic_id, p.index().value());
        let listing = self.store.list(&dir).await?;
        let held = retention::covered_to(&listing.segments, local.start_offset.value())
            .min(p.high_watermark().value());
        let Some(local_start) = retention::local_start_for(&local, held, limits, now_ms) else {
            return Ok(());
        };
        let to = Offset::new(local_start);
        match blocking(p, move |p| p.delete_local_segments(to)).await {
            Ok(deleted) => {
                self.stats
                    .local_deleted_segments
                    .fetch_add(deleted as u64, Ordering::Relaxed);
                Ok(())
            }
            Err(RoundError::NotLeading) => Ok(()),
            Err(RoundError::Tier(e)) => Err(e),
        }
    }
}

/// The first remote offset, when the remote segments from it reach `to` without a gap:
/// a replicated partition's new leader whose log starts at `to` takes it as its start
/// (`Partition::take_remote_start`). A broker alone never does: its log start is its
/// own, and remote segments before it are retention's leftovers.
fn remote_start_reaching(segments: &BTreeMap<i64, RemoteSegment>, to: Offset) -> Option<Offset> {
    let first = *segments.keys().next()?;
    let mut reach = first;
    for s in segments.values() {
        if s.base_offset > reach {
            return None;
        }
        reach = reach.max(s.end_offset);
        if reach >= to.value() {
            return (first < to.value()).then_some(Offset::new(first));
        }
    }
    None
}

/// Runs `f` on the partition on a blocking thread (it touches files).
async fn blocking<T: Send + 'static>(
    p: &Arc<Partition>,
    f: impl FnOnce(&Partition) -> Result<T, BrokerError> + Send + 'static,
) -> Result<T, RoundError> {
    let p = Arc::clone(p);
    match tokio::task::spawn_blocking(move || f(&p)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(BrokerError::NotLeaderOrFollower { .. })) => Err(RoundError::NotLeading),
        Ok(Err(e)) => Err(RoundError::Tier(TierError::Local(e.to_string()))),
        Err(e) => Err(RoundError::Tier(TierError::Local(e.to_string()))),
    }
}

pub(crate) enum RoundError {
    /// This broker does not lead the partition (any more): what it knew is forgotten.
    NotLeading,
    Tier(TierError),
}

impl From<TierError> for RoundError {
    fn from(e: TierError) -> RoundError {
        RoundError::Tier(e)
    }
}
