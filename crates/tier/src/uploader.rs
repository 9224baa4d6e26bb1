//! The uploader: once a round (`remote_storage_upload_interval_ms`) it walks the
//! tiered topics' partitions this broker leads (or every one, for a broker alone) and
//! copies each sealed segment below the last stable offset that the bucket does not
//! hold yet, oldest first, one upload at a time. A partition's remote view is loaded
//! from a listing the first time the broker leads it in a leader epoch (so a new leader
//! carries on where the last one stopped, with no state of its own), and the orphans
//! found then are deleted. Remote segments wholly below the partition's log start
//! (retention, DeleteRecords) are deleted from the bucket too.

use crate::store::{RemoteSegment, RemoteStore, TierError};
use crate::TierSettings;
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
}

/// A partition's remote segments as this broker knows them, and the leader epoch it
/// learnt them in.
#[derive(Debug)]
struct Known {
    epoch: i32,
    dir: String,
    segments: BTreeMap<i64, RemoteSegment>,
}

/// The remote tier of one broker.
pub struct Tier {
    store: RemoteStore,
    stats: TierStats,
    /// By (topic id, partition).
    known: Mutex<HashMap<(uuid::Uuid, i32), Known>>,
}

impl Tier {
    pub fn new(store: RemoteStore) -> Arc<Tier> {
        Arc::new(Tier {
            store,
            stats: TierStats::default(),
            known: Mutex::new(HashMap::new()),
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
            if !topic.config().remote_storage_enable {
                continue;
            }
            for p in topic.partitions() {
                if p.unopened_cause().is_some() {
                    continue;
                }
                let key = (topic.id(), p.index().value());
                match self.partition_round(topic.id(), p).await {
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

    /// Uploads what one partition has sealed and the bucket lacks; deletes what its log
    /// start left behind. Answers the bytes still to upload.
    async fn partition_round(
        &self,
        topic_id: uuid::Uuid,
        p: &Arc<Partition>,
    ) -> Result<u64, RoundError> {
        let key = (topic_id, p.index().value());
        let sealed = {
            let p = Arc::clone(p);
            tokio::task::spawn_blocking(move || p.sealed_segments())
                .await
                .map_err(|e| RoundError::Tier(TierError::Settings(e.to_string())))?
        };
        let sealed = match sealed {
            Ok(sealed) => sealed,
            Err(BrokerError::NotLeaderOrFollower { .. }) => return Err(RoundError::NotLeading),
            Err(e) => {
                return Err(RoundError::Tier(TierError::Settings(format!(
                    "reading the partition's segments: {e}"
                ))))
            }
        };
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
            let Some(remote) = self.store.upload(&dir, segment, epoch, now_ms).await? else {
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

enum RoundError {
    /// This broker does not lead the partition (any more): what it knew is forgotten.
    NotLeading,
    Tier(TierError),
}

impl From<TierError> for RoundError {
    fn from(e: TierError) -> RoundError {
        RoundError::Tier(e)
    }
}
