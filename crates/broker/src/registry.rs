//! The broker: the registry of topics, the data directory, and background retention.
//!
//! Readers look topics up through a `std::sync::RwLock` held only for a map lookup.
//! Creations and deletions are serialized by an async mutex and do their disk work on
//! blocking threads, so an admin request never blocks a connection's reader.

use crate::cleaner::{Cleanable, LogCleaner};
use crate::config::{BrokerConfig, SyncScope, TopicConfig};
use crate::disk::{run_disk_checks, DiskSpace};
use crate::durability::{SyncCounters, SyncMeters};
use crate::flusher::SharedFlusher;
use crate::io::bulk_budget::BulkBudget;
use crate::io::read_pool::ReadPool;
use crate::io::timings::Timings;
use crate::open_files::{self, OpenFiles};
use crate::partition::Partition;
use crate::producer_ids::ProducerIds;
use crate::topic::{validate_topic_name, Topic};
use crate::{BrokerError, FlushPolicy};
use headway_base::{
    durable_file::{self, sync_dir},
    limits, Clock, PartitionIndex,
};
use headway_log::{FileCache, FileCacheStats};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, Weak};
use uuid::Uuid;

#[derive(Debug, Serialize, Deserialize)]
struct BrokerMeta {
    cluster_id: String,
}

pub struct Broker {
    config: BrokerConfig,
    cluster_id: String,
    topics_dir: PathBuf,
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    admin: tokio::sync::Mutex<()>,
    closed: AtomicBool,
    producer_ids: ProducerIds,
    /// Threads for reads that may wait for the disk (see [`crate::io::read_pool`]).
    read_pool: Arc<ReadPool>,
    /// The rate catch-up reads and large produces may take together.
    bulk: Arc<BulkBudget>,
    /// The log cleaner of compacted topics ([`crate::cleaner`]).
    cleaner: Arc<LogCleaner>,
    /// Logs of the broker's own that clients may read as internal topics of one
    /// partition (the group coordinator's offsets log, as `__consumer_offsets`): listed
    /// in Metadata, readable, compacted, never written or created by clients.
    internal: RwLock<BTreeMap<String, Arc<Partition>>>,
    /// Where acknowledgements, fetches and syncs spend their time.
    timings: Arc<Timings>,
    /// What this broker's flushers record: their sync counters and `timings`.
    sync_meters: SyncMeters,
    /// The broker-wide group commit, with `flush = sync` and a broker sync scope.
    shared_flusher: Option<Arc<SharedFlusher>>,
    /// The data directory's free space and the produce threshold.
    disk: Arc<DiskSpace>,
    /// The open files new partitions may take (`None`: no limit known).
    open_files: Option<OpenFiles>,
    /// Where the partitions, retention, producer-id expiry and the cleaner read the
    /// time: the system clock, or the one [`Broker::open_with_clock`] was given.
    clock: Clock,
    /// The broker is one of a cluster: every partition waits for the role the
    /// controller gives it before it serves clients ([`Broker::expect_roles`]).
    replicas: std::sync::atomic::AtomicBool,
    /// Held for the broker's lifetime: an exclusive lock on `<data_dir>/.lock`, so two
    /// brokers never write the same logs.
    _dir_lock: fs::File,
}

fn storage(context: &str, path: &Path, e: impl std::fmt::Display) -> BrokerError {
    BrokerError::Storage(format!("{context} {}: {e}", path.display()))
}

impl Broker {
    /// Opens the data directory, recovers every topic, and starts flushers and
    /// retention. Must run inside a tokio runtime.
    pub async fn open(config: BrokerConfig) -> Result<Arc<Broker>, BrokerError> {
        Broker::open_with_clock(config, Clock::system()).await
    }

    /// [`Broker::open`], reading the time from `clock` (a test drives retention,
    /// producer-id expiry and the cleaner with [`Clock::manual`]).
    pub async fn open_with_clock(
        config: BrokerConfig,
        clock: Clock,
    ) -> Result<Arc<Broker>, BrokerError> {
        config.validate().map_err(BrokerError::Storage)?;
        let broker = {
            let config = config.clone();
            tokio::task::spawn_blocking(move || Broker::load(config, clock))
                .await
                .map_err(|e| BrokerError::Storage(format!("start-up task failed: {e}")))??
        };
        let broker = Arc::new(broker);
        broker.size_file_cache();
        if let Some(flusher) = &broker.shared_flusher {
            flusher.start();
        }
        for topic in broker.topics() {
            topic
                .partitions()
                .iter()
                .for_each(|p| broker.start_flusher(p));
        }
        crate::io::timings::spawn_wake_probe(&broker.timings, tokio::runtime::Handle::current())
            .map_err(|e| BrokerError::Storage(format!("start the wake probe: {e}")))?;
        let weak = Arc::downgrade(&broker);
        let background = crate::panics::Component::Background;
        crate::panics::spawn_restarting(background, "retention", {
            let weak = weak.clone();
            move || run_retention(weak.clone())
        });
        crate::panics::spawn_restarting(background, "disk checks", {
            let weak = weak.clone();
            move || {
                let weak = weak.clone();
                run_disk_checks(move || weak.upgrade().map(|b| Arc::clone(b.disk_space())))
            }
        });
        crate::panics::spawn_restarting(background, "closing unused files", move || {
            close_unused_files(weak.clone())
        });
        if broker.config.log_cleaner_enabled {
            let cleaner = Arc::clone(&broker.cleaner);
            let weak = Arc::downgrade(&broker);
            let priority = broker.config.bulk_priority();
            std::thread::Builder::new()
                .name("log-cleaner".into())
                .spawn(move || cleaner.run(priority, || weak.upgrade().map(|b| b.compacted_logs())))
                .map_err(|e| BrokerError::Storage(format!("start the log cleaner: {e}")))?;
        }
        Ok(broker)
    }

    fn load(config: BrokerConfig, clock: Clock) -> Result<Broker, BrokerError> {
        let data_dir = config.data_dir.clone();
        let topics_dir = data_dir.join("topics");
        fs::create_dir_all(&topics_dir).map_err(|e| storage("create", &topics_dir, e))?;
        let lock_path = data_dir.join(".lock");
        let dir_lock =
            fs::File::create(&lock_path).map_err(|e| storage("create", &lock_path, e))?;
        dir_lock.try_lock().map_err(|_| {
            BrokerError::Storage(format!(
                "data directory {} is in use by another broker",
                data_dir.display()
            ))
        })?;
        let open_files = open_files::raise_limit()
            .map(|limit| OpenFiles::new(limit, config.connections_max, config.open_files_max));
        tracing::info!(
            limit = open_files.map(|f| f.limit),
            open_files_max = open_files.map(|f| f.files_max),
            "open files limit"
        );
        let cluster_id = load_cluster_id(&data_dir)?;
        let producer_ids = ProducerIds::open(&data_dir)?;
        let disk = DiskSpace::open(&data_dir, config.disk_free_bytes_min)
            .map_err(|e| storage("measure free space of", &data_dir, e))?;
        let timings = Arc::new(Timings::new());
        let sync_meters = SyncMeters {
            counters: Arc::new(SyncCounters::default()),
            timings: Some(Arc::clone(&timings)),
            large_syncs: config.bulk_priority(),
        };
        let shared_flusher = match (config.flush, config.sync_scope) {
            (FlushPolicy::Sync, SyncScope::Broker | SyncScope::Syncfs) => Some(
                SharedFlusher::new(config.sync_scope, &data_dir, sync_meters.clone())
                    .map_err(|e| storage("open", &data_dir, e))?,
            ),
            _ => None,
        };
        let mut topics = HashMap::new();
        for entry in fs::read_dir(&topics_dir).map_err(|e| storage("list", &topics_dir, e))? {
            let entry = entry.map_err(|e| storage("list", &topics_dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                tracing::info!(dir = %entry.path().display(), "removing unfinished create or delete");
                fs::remove_dir_all(entry.path())
                    .map_err(|e| storage("remove", &entry.path(), e))?;
                continue;
            }
            let (topic, reports) =
                match Topic::load(entry.path(), &config.log, config.flush, &clock) {
                    Ok(loaded) => loaded,
                    Err(error) => {
                        // One damaged topic keeps none of the others from being served.
                        tracing::error!(topic = %name, dir = %entry.path().display(), %error,
                        "topic could not be loaded; it is not served");
                        continue;
                    }
                };
            for (p, r) in reports.iter().map(|(p, r)| (p.value(), r)) {
                // Cutting a torn tail is worth a warning; a recovery that kept every
                // byte (after a crash, or with indexes rebuilt) is routine.
                if r.truncated_bytes > 0 {
                    tracing::warn!(topic = %name, partition = p, clean = r.clean_shutdown,
                        truncated_bytes = r.truncated_bytes, rebuilt_indexes = r.rebuilt_indexes,
                        log_end_offset = r.log_end_offset.value(), "recovered partition");
                } else if !r.clean_shutdown || r.rebuilt_indexes > 0 {
                    tracing::info!(topic = %name, partition = p, clean = r.clean_shutdown,
                        rebuilt_indexes = r.rebuilt_indexes,
                        log_end_offset = r.log_end_offset.value(), "recovered partition");
                }
            }
            topics.insert(name, topic);
        }
        tracing::info!(topics = topics.len(), data_dir = %data_dir.display(), "data directory loaded");
        let bulk = Arc::new(BulkBudget::new(config.bulk_budget(), Arc::clone(&timings)));
        let read_pool = ReadPool::new(
            config.read_threads,
            config.bulk_priority(),
            Arc::clone(&bulk),
        );
        let cleaner = Arc::new(LogCleaner::new(&config, Arc::clone(&bulk), clock.clone()));
        Ok(Broker {
            config,
            cluster_id,
            topics_dir,
            topics: RwLock::new(topics),
            admin: tokio::sync::Mutex::new(()),
            closed: AtomicBool::new(false),
            producer_ids,
            read_pool,
            bulk,
            cleaner,
            internal: RwLock::new(BTreeMap::new()),
            timings,
            sync_meters,
            shared_flusher,
            disk: Arc::new(disk),
            open_files,
            clock,
            replicas: std::sync::atomic::AtomicBool::new(false),
            _dir_lock: dir_lock,
        })
    }

    /// Starts group commit for a new or loaded partition: its own flusher, or the
    /// broker's shared one (`sync_scope`).
    /// The broker is one of a cluster: its partitions, those it holds and those it will
    /// create, serve no client until the controller's metadata gives each its role
    /// (`Partition::set_role`), so that nothing is acknowledged by a replica that does
    /// not know yet whether it leads. Internal logs are not partitions of the cluster's
    /// topics and stay as they are.
    pub fn expect_roles(&self) {
        self.replicas
            .store(true, std::sync::atomic::Ordering::Release);
        for topic in self.topics() {
            topic.partitions().iter().for_each(|p| p.expect_role());
        }
    }

    fn start_flusher(&self, partition: &Arc<Partition>) {
        if self.replicas.load(std::sync::atomic::Ordering::Acquire) {
            partition.expect_role();
        }
        partition.bound_unsynced(self.config.partition_unsynced_bytes_max);
        partition.measure_syncs(&self.sync_meters);
        match &self.shared_flusher {
            Some(flusher) => partition.join_shared_flusher(flusher),
            None => partition.start_flusher(),
        }
    }

    #[cfg(test)]
    pub(crate) fn shared_flusher(&self) -> Option<&Arc<SharedFlusher>> {
        self.shared_flusher.as_ref()
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    pub fn producer_ids(&self) -> &ProducerIds {
        &self.producer_ids
    }

    /// The data directory's free space; produces reserve their size here first.
    /// The broker's clock (the system clock in production).
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    pub fn disk_space(&self) -> &Arc<DiskSpace> {
        &self.disk
    }

    /// The budget of bulk work ([`crate::io::bulk_budget`]): catch-up reads and large
    /// produces.
    pub fn bulk_budget(&self) -> &Arc<BulkBudget> {
        &self.bulk
    }

    /// Group-commit rounds and sync calls of this broker's flushers.
    /// The log cleaner of compacted topics.
    pub fn cleaner(&self) -> &Arc<LogCleaner> {
        &self.cleaner
    }

    /// Refuses `partitions` new partitions that would not fit under the open files
    /// limit ([`crate::open_files`]).
    /// Gives the cache of sealed segments' files what `open_files_max` leaves beside
    /// the files held open now: at start-up and after partitions come or go.
    fn size_file_cache(&self) {
        if let (Some(budget), Some(held)) = (self.open_files, open_files::held_now()) {
            let capacity = budget.cache_capacity(held);
            FileCache::global().set_capacity(capacity);
            tracing::debug!(held, capacity, "sealed segment file cache sized");
        }
    }

    /// The cache of sealed segments' open files, for `/metrics`.
    pub fn file_cache_stats(&self) -> FileCacheStats {
        FileCache::global().stats()
    }

    /// The open files budget (`None`: no limit known).
    pub fn open_files_budget(&self) -> Option<OpenFiles> {
        self.open_files
    }

    fn check_open_files(&self, partitions: i32) -> Result<(), BrokerError> {
        match (self.open_files, open_files::held_now()) {
            (Some(budget), Some(open)) => {
                let existing: usize = self.topics().iter().map(|t| t.partitions().len()).sum();
                budget.check(open, existing as u64, partitions.max(0) as u64)
            }
            _ => Ok(()),
        }
    }

    /// Serves `log` as the internal topic `name` (one partition, compacted with the
    /// broker's default settings).
    pub fn add_internal_log(&self, name: &str, log: Arc<Partition>) {
        let mut internal = self.internal.write().expect("internal logs lock");
        internal.insert(name.to_string(), log);
    }

    /// The internal topics, by name.
    pub fn internal_logs(&self) -> Vec<(String, Arc<Partition>)> {
        let internal = self.internal.read().expect("internal logs lock");
        internal
            .iter()
            .map(|(n, p)| (n.clone(), Arc::clone(p)))
            .collect()
    }

    /// Partition `index` of a topic or of an internal topic, for reading only.
    pub fn readable_partition(
        &self,
        name: &str,
        index: PartitionIndex,
    ) -> Result<Arc<Partition>, BrokerError> {
        let internal = self.internal.read().expect("internal logs lock");
        match (internal.get(name), index.value()) {
            (Some(log), 0) => Ok(Arc::clone(log)),
            _ => self.partition(name, index),
        }
    }

    /// Whether `name` is an internal topic, which clients may not write.
    pub fn is_internal(&self, name: &str) -> bool {
        self.internal
            .read()
            .expect("internal logs lock")
            .contains_key(name)
    }

    /// Every partition of a topic whose `cleanup.policy` includes `compact`, and every
    /// internal log, with the settings of its cleaning passes.
    pub fn compacted_logs(&self) -> Vec<Cleanable> {
        let mut logs = Vec::new();
        if let Ok(defaults) = TopicConfig::from_overrides(&BTreeMap::new(), &self.config.log) {
            for (name, log) in self.internal_logs() {
                logs.push(Cleanable::of_topic(&name, log, &defaults, &self.config));
            }
        }
        for topic in self.topics() {
            let config = topic.config();
            if !config.cleanup_policy.compact {
                continue;
            }
            for p in topic
                .partitions()
                .iter()
                .filter(|p| p.unopened_cause().is_none())
            {
                let p = Arc::clone(p);
                logs.push(Cleanable::of_topic(topic.name(), p, &config, &self.config));
            }
        }
        logs
    }

    pub fn sync_counters(&self) -> &SyncCounters {
        &self.sync_meters.counters
    }

    /// The stage histograms ([`crate::io::timings`]).
    pub fn timings(&self) -> &Arc<Timings> {
        &self.timings
    }

    pub fn read_pool(&self) -> &Arc<ReadPool> {
        &self.read_pool
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().expect("topics lock").get(name).cloned()
    }

    /// The topic, or UNKNOWN_TOPIC_OR_PARTITION.
    pub fn existing_topic(&self, name: &str) -> Result<Arc<Topic>, BrokerError> {
        self.topic(name)
            .ok_or_else(|| BrokerError::UnknownTopicOrPartition {
                topic: name.to_string(),
                partition: None,
            })
    }

    /// Partition `index` of topic `name`, or UNKNOWN_TOPIC_OR_PARTITION naming both when
    /// the topic or the partition does not exist: the one lookup handlers use.
    pub fn partition(
        &self,
        name: &str,
        index: PartitionIndex,
    ) -> Result<Arc<Partition>, BrokerError> {
        self.topic(name)
            .and_then(|topic| topic.partition(index).cloned())
            .ok_or_else(|| BrokerError::UnknownTopicOrPartition {
                topic: name.to_string(),
                partition: Some(index),
            })
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        let topics = self.topics.read().expect("topics lock");
        topics.values().find(|t| t.id() == id).cloned()
    }

    /// All topics, sorted by name.
    pub fn topics(&self) -> Vec<Arc<Topic>> {
        let mut all: Vec<_> = self
            .topics
            .read()
            .expect("topics lock")
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| a.name().cmp(b.name()));
        all
    }

    /// Resolves the partition count and settings a create would use, without creating.
    pub fn plan_topic(
        &self,
        name: &str,
        partitions: Option<i32>,
        configs: &BTreeMap<String, String>,
    ) -> Result<(i32, TopicConfig), BrokerError> {
        validate_topic_name(name)?;
        let partitions = partitions.unwrap_or(self.config.default_partitions);
        if !(1..=limits::PARTITIONS_PER_TOPIC_MAX).contains(&partitions) {
            return Err(BrokerError::InvalidPartitions(partitions));
        }
        let config = TopicConfig::from_overrides(configs, &self.config.log)?;
        if self.topic(name).is_some() || self.is_internal(name) {
            return Err(BrokerError::TopicAlreadyExists(name.to_string()));
        }
        self.check_open_files(partitions)?;
        Ok((partitions, config))
    }

    /// Creates a topic. `partitions: None` uses the default partition count.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: Option<i32>,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>, BrokerError> {
        // A cluster's topics come with the controller's checks (`create_topic_with_id`).
        TopicConfig::from_overrides(&configs, &self.config.log)?
            .check_remote_storage(&self.config.log)?;
        self.create_topic_with_id(name, None, partitions, configs)
            .await
    }

    /// Creates a topic under the id `id` when given (a cluster's topic keeps the id the
    /// controller gave it on every broker), a new one otherwise.
    pub async fn create_topic_with_id(
        &self,
        name: &str,
        id: Option<Uuid>,
        partitions: Option<i32>,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>, BrokerError> {
        let _admin = self.admin.lock().await;
        let (partitions, config) = self.plan_topic(name, partitions, &configs)?;
        let (dir, flush, owned_name) =
            (self.topics_dir.clone(), self.config.flush, name.to_string());
        let clock = self.clock.clone();
        let topic = tokio::task::spawn_blocking(move || {
            Topic::create(&dir, &owned_name, id, partitions, config, flush, &clock)
        })
        .await
        .map_err(|e| BrokerError::Storage(format!("create task failed: {e}")))??;
        topic
            .partitions()
            .iter()
            .for_each(|p| self.start_flusher(p));
        self.topics
            .write()
            .expect("topics lock")
            .insert(name.to_string(), Arc::clone(&topic));
        self.size_file_cache();
        tracing::info!(topic = name, partitions, "topic created");
        Ok(topic)
    }

    /// Returns the topic, creating it with defaults when auto-creation is on.
    pub async fn topic_or_create(&self, name: &str) -> Result<Arc<Topic>, BrokerError> {
        if let Some(topic) = self.topic(name) {
            return Ok(topic);
        }
        if !self.config.auto_create_topics {
            return Err(BrokerError::UnknownTopicOrPartition {
                topic: name.to_string(),
                partition: None,
            });
        }
        match self.create_topic(name, None, BTreeMap::new()).await {
            Err(BrokerError::TopicAlreadyExists(_)) => self.existing_topic(name),
            other => other,
        }
    }

    /// Grows a topic to `count` partitions (CreatePartitions). Existing partitions and
    /// their data stay; new ones start empty.
    pub async fn add_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), BrokerError> {
        let _admin = self.admin.lock().await;
        let topic = self.existing_topic(name)?;
        let current = topic.partitions().len() as i32;
        if count <= current || count > limits::PARTITIONS_PER_TOPIC_MAX {
            return Err(BrokerError::InvalidPartitions(count));
        }
        self.check_open_files(count - current)?;
        if validate_only {
            return Ok(());
        }
        let flush = self.config.flush;
        let grown = tokio::task::spawn_blocking(move || topic.with_partitions(count, flush))
            .await
            .map_err(|e| BrokerError::Storage(format!("create partitions task failed: {e}")))??;
        for p in &grown.partitions()[current as usize..] {
            self.start_flusher(p);
        }
        self.topics
            .write()
            .expect("topics lock")
            .insert(name.to_string(), grown);
        self.size_file_cache();
        tracing::info!(topic = name, partitions = count, "partitions added");
        Ok(())
    }

    /// Changes a topic's explicit settings with `change`, validating the result
    /// (IncrementalAlterConfigs and AlterConfigs).
    pub async fn alter_topic_config(
        &self,
        name: &str,
        change: impl FnOnce(&mut BTreeMap<String, String>) -> Result<(), BrokerError>,
        validate_only: bool,
    ) -> Result<(), BrokerError> {
        let _admin = self.admin.lock().await;
        let topic = self.existing_topic(name)?;
        let mut overrides = topic.config().overrides;
        change(&mut overrides)?;
        let config = TopicConfig::from_overrides(&overrides, &self.config.log)?;
        config.check_remote_storage(&self.config.log)?;
        config.check_still_tiered(&topic.config())?;
        if validate_only {
            return Ok(());
        }
        tokio::task::spawn_blocking(move || topic.set_config(config))
            .await
            .map_err(|e| BrokerError::Storage(format!("alter config task failed: {e}")))??;
        tracing::info!(topic = name, ?overrides, "topic settings changed");
        Ok(())
    }

    /// Deletes a topic: it disappears from metadata at once; its files are removed
    /// after its logs are closed.
    pub async fn delete_topic(&self, name: &str) -> Result<(), BrokerError> {
        let _admin = self.admin.lock().await;
        let topic = self
            .topics
            .write()
            .expect("topics lock")
            .remove(name)
            .ok_or_else(|| BrokerError::UnknownTopicOrPartition {
                topic: name.to_string(),
                partition: None,
            })?;
        let grave = self
            .topics_dir
            .join(format!(".deleted-{}", Uuid::new_v4().simple()));
        let topics_dir = self.topics_dir.clone();
        tokio::task::spawn_blocking(move || -> Result<(), BrokerError> {
            for p in topic.partitions() {
                if let Err(e) = p.close() {
                    tracing::warn!(topic = topic.name(), error = %e, "closing deleted partition");
                }
            }
            fs::rename(topic.dir(), &grave).map_err(|e| storage("rename", topic.dir(), e))?;
            sync_dir(&topics_dir)?;
            fs::remove_dir_all(&grave).map_err(|e| storage("remove", &grave, e))
        })
        .await
        .map_err(|e| BrokerError::Storage(format!("delete task failed: {e}")))??;
        self.size_file_cache();
        tracing::info!(topic = name, "topic deleted");
        Ok(())
    }

    /// Closes every partition: syncs all logs and writes their clean-shutdown markers.
    /// Partitions not written since they were opened close without any I/O; the
    /// others close on [`limits::SHUTDOWN_CLOSE_THREADS`] threads at once, so that their
    /// syncs overlap on the disk instead of queueing one after another.
    pub async fn shutdown(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.cleaner.stop();
        let partitions: Vec<(Arc<Topic>, Arc<Partition>)> = self
            .topics()
            .into_iter()
            .flat_map(|t| {
                t.partitions()
                    .iter()
                    .map(|p| (Arc::clone(&t), Arc::clone(p)))
                    .collect::<Vec<_>>()
            })
            .collect();
        let _ = tokio::task::spawn_blocking(move || close_all(&partitions)).await;
        if let Some(flusher) = &self.shared_flusher {
            flusher.stop();
        }
        let (sync_rounds, syncs) = self.sync_counters().snapshot();
        tracing::info!(
            sync_scope = %self.config.sync_scope,
            sync_rounds,
            syncs,
            "all partitions closed"
        );
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.cleaner.stop();
        if let Some(flusher) = &self.shared_flusher {
            flusher.stop();
        }
    }
}

/// Closes `partitions` on up to [`limits::SHUTDOWN_CLOSE_THREADS`] threads. Blocking.
fn close_all(partitions: &[(Arc<Topic>, Arc<Partition>)]) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = limits::SHUTDOWN_CLOSE_THREADS.min(partitions.len()).max(1);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while let Some((topic, p)) = partitions.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if let Err(e) = p.close() {
                        tracing::error!(topic = topic.name(), partition = p.index().value(), error = %e, "close failed");
                    }
                }
            });
        }
    });
}

fn load_cluster_id(data_dir: &Path) -> Result<String, BrokerError> {
    let path = data_dir.join("meta.json");
    if let Ok(text) = fs::read_to_string(&path) {
        let meta: BrokerMeta =
            serde_json::from_str(&text).map_err(|e| storage("parse", &path, e))?;
        return Ok(meta.cluster_id);
    }
    let meta = BrokerMeta {
        cluster_id: Uuid::new_v4().simple().to_string(),
    };
    let text = serde_json::to_string(&meta).expect("serializes");
    durable_file::replace(&path, text.as_bytes())?;
    Ok(meta.cluster_id)
}

/// Closes, every [`limits::FILE_CACHE_IDLE_CLOSE_MS`], the segment files not used since
/// the previous round: an idle partition's files are closed one to two periods after
/// its last append or read.
async fn close_unused_files(broker: Weak<Broker>) {
    let every = std::time::Duration::from_millis(limits::FILE_CACHE_IDLE_CLOSE_MS);
    loop {
        tokio::time::sleep(every).await;
        match broker.upgrade() {
            Some(b) if !b.closed.load(Ordering::Acquire) => {}
            _ => return,
        }
        let closed = FileCache::global().close_unused();
        if closed > 0 {
            tracing::debug!(closed, "closed idle segment files");
        }
    }
}

async fn run_retention(broker: Weak<Broker>) {
    let every = match broker.upgrade() {
        Some(b) => std::time::Duration::from_millis(b.config.retention_check_interval_ms.max(10)),
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(b) = broker.upgrade() else { return };
        if b.closed.load(Ordering::Acquire) {
            return;
        }
        let round = retention_round(&b);
        drop(b);
        let _ = tokio::task::spawn_blocking(round).await;
    }
}

/// One retention round, to run on a blocking thread: at the time the broker's clock
/// reads when it runs, it forgets idempotent producers idle longer than
/// `producer_id_expiration_ms` and deletes segments past their topic's retention
/// limits, in every partition that opened. It holds the topics, not the broker.
fn retention_round(broker: &Broker) -> impl FnOnce() + Send + 'static {
    let topics = broker.topics();
    let producer_idle_ms = broker.config.producer_id_expiration_ms;
    let remote_tier = broker.config.log.remote_storage_available;
    let clock = broker.clock.clone();
    move || {
        let now = clock.time_ms();
        for topic in topics {
            // The remote tier applies a tiered topic's retention where it keeps the
            // partition's tier (crates/tier): it knows the remote segments too. A
            // follower's log start follows its leader's, and its local copies go by
            // the tier's follower round.
            let tiered = remote_tier && topic.config().remote_storage_enable;
            // A partition that could not be opened has nothing to expire or delete.
            let opened = topic
                .partitions()
                .iter()
                .filter(|p| p.unopened_cause().is_none());
            for p in opened {
                if let Ok(n @ 1..) = p.expire_producers(now, producer_idle_ms) {
                    tracing::info!(
                        topic = topic.name(),
                        partition = p.index().value(),
                        producers = n,
                        "expired idle producer ids"
                    );
                }
                if tiered {
                    continue;
                }
                match p.enforce_retention(now) {
                    Ok(0) | Err(BrokerError::ShuttingDown { .. }) => {}
                    Ok(n) => tracing::info!(
                        topic = topic.name(),
                        partition = p.index().value(),
                        deleted_segments = n,
                        "retention"
                    ),
                    Err(e) => {
                        tracing::warn!(topic = topic.name(), error = %e, "retention failed")
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headway_base::Offset;

    #[tokio::test]
    async fn a_partition_is_found_by_topic_and_index_or_named_as_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let broker = Broker::open(BrokerConfig {
            data_dir: dir.path().to_path_buf(),
            ..BrokerConfig::default()
        })
        .await
        .unwrap();
        broker
            .create_topic("known", Some(2), BTreeMap::new())
            .await
            .unwrap();
        let found = broker.partition("known", PartitionIndex::new(1)).unwrap();
        assert_eq!((found.topic(), found.index().value()), ("known", 1));
        for (name, index) in [("known", 2), ("known", -1), ("unknown", 0)] {
            let index = PartitionIndex::new(index);
            match broker.partition(name, index) {
                Err(BrokerError::UnknownTopicOrPartition { topic, partition }) => {
                    assert_eq!((topic.as_str(), partition), (name, Some(index)))
                }
                other => panic!("{name}/{index}: {:?}", other.map(|p| p.index())),
            }
        }
        broker.shutdown().await;
    }

    #[tokio::test]
    async fn retention_deletes_a_segment_once_the_broker_clock_passes_retention_ms() {
        const WRITTEN_MS: i64 = 1_700_000_000_000;
        const RETENTION_MS: i64 = 60_000;
        let dir = tempfile::tempdir().unwrap();
        let clock = Clock::manual(WRITTEN_MS);
        let config = BrokerConfig {
            data_dir: dir.path().to_path_buf(),
            // The test runs the rounds itself.
            retention_check_interval_ms: 3_600_000,
            ..BrokerConfig::default()
        };
        let broker = Broker::open_with_clock(config, clock.clone())
            .await
            .unwrap();
        let settings = [("retention.ms", "60000"), ("segment.bytes", "1024")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        broker
            .create_topic("aging", Some(1), settings)
            .await
            .unwrap();
        let p = broker.partition("aging", PartitionIndex::new(0)).unwrap();
        // Records stamped when the clock started, in more than one segment.
        let mut end = p.high_watermark();
        for i in 0..20u32 {
            let value = bytes::Bytes::from(vec![b'v'; 200]);
            let key = bytes::Bytes::from(i.to_string());
            let batch = crate::internal_log::encode_batch([(key, Some(value))], WRITTEN_MS);
            end = p
                .append(headway_log::batch::validate_all(&batch), 1 << 20)
                .unwrap()
                .log_end_offset;
        }
        let durable = p.wait_durable(end);
        tokio::time::timeout(std::time::Duration::from_secs(30), durable)
            .await
            .unwrap()
            .unwrap();
        let round = || tokio::task::spawn_blocking(retention_round(&broker));
        // At the limit the records are not past it: nothing goes.
        for now in [WRITTEN_MS, WRITTEN_MS + RETENTION_MS] {
            clock.set_ms(now);
            round().await.unwrap();
            assert_eq!(p.log_start_offset(), Offset::new(0), "at {now}");
        }
        clock.set_ms(WRITTEN_MS + RETENTION_MS + 1);
        round().await.unwrap();
        // Every segment but the active one is gone.
        assert!(p.log_start_offset() > Offset::new(0));
        assert!(p.log_start_offset() < p.high_watermark());
        broker.shutdown().await;
    }
}
