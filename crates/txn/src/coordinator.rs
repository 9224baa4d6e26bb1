//! The transaction coordinator: [`Transactions`] behind a mutex, its log, the task that
//! completes prepared transactions, and the task that aborts timed-out ones.
//!
//! The mutex is a `std` mutex held only for state-machine steps, never across I/O or
//! an `.await`. A state change is persisted before it is answered: the step marks the
//! id pending, the record is appended to the log and waited on until durable, then the
//! step's result is applied. An EndTxn is answered once its PrepareCommit or
//! PrepareAbort is durable; a task then writes the markers through the
//! [`MarkerWriter`] (again and again with a backoff until they are written) and
//! persists CompleteCommit or CompleteAbort. At start-up the log is replayed in the
//! background (requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS) and every
//! transaction found prepared is completed the same way.
//!
//! In a cluster each partition of the replicated `__transaction_state` this broker
//! leads has a coordinator of its own ([`TxnCoordinator::serve`], routed by
//! [`crate::TxnShards`]): its records wait for every in-sync replica, its markers
//! carry the partition's leader epoch as the coordinator epoch, and once the partition
//! moves it is retired and answers `NOT_COORDINATOR`.

use crate::record::{encode_batch, TxnRecord};
use crate::state::{
    EndOutcome, ExpectedProducer, InitOutcome, TransactionResult, Transactions, TxnConfig,
    TxnMetadata, TxnState,
};
use crate::TxnError;
use headway_base::{now_ms, ProducerEpoch, ProducerId, TopicPartition};
use headway_broker::coordinator_shards::{Shard, NO_EPOCH};
use headway_broker::panics::{self, Component};
use headway_broker::{internal_log, Broker, BrokerError, FlushPolicy, Partition};
use headway_log::batch::validate_all;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::watch;

/// The internal topic clients read the coordinator's log as.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";
/// The topic whose partitions hold groups' offsets: a transaction that commits a
/// group's offsets holds the group's partition of it (partition 0 on a broker alone,
/// which keeps one offsets log).
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// Whether `name` is one of the internal topics the coordinators write (in a cluster,
/// replicated topics; clients may read them, never write or create them).
pub fn is_coordinators_topic(name: &str) -> bool {
    // The last: where the share crate keeps share-partitions' state (its
    // `SHARE_STATE_TOPIC`, a crate this one does not use).
    name == OFFSETS_TOPIC || name == TRANSACTION_STATE_TOPIC || name == "__share_group_state"
}

/// Markers carry the coordinator's epoch, which only grows when another coordinator
/// takes over: on a broker alone, always this one; in a cluster, the leader epoch of
/// the coordinator's partition of `__transaction_state`.
pub const COORDINATOR_EPOCH: i32 = 0;
/// First wait before a failed marker write or record is tried again; doubles up to
/// [`RETRY_BACKOFF_MAX`].
const RETRY_BACKOFF: Duration = Duration::from_millis(100);
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What [`MarkerWriter::write_markers`] returns.
pub type MarkerFuture<'a> = Pin<Box<dyn Future<Output = Result<(), TxnError>> + Send + 'a>>;

/// Writes a transaction's markers into its partitions: the data path's side of the
/// coordinator.
pub trait MarkerWriter: Send + Sync {
    /// Writes a commit or abort marker of `producer_id` at `producer_epoch` into each
    /// partition and resolves once every one is durable. After a failure or a restart
    /// it is called again with the same arguments, so a partition may see the same
    /// marker twice and must accept the second (the producer has no open transaction
    /// there any more). With transactions version 2 the epoch is one above the one the
    /// producer wrote its batches with (the end bumped it).
    fn write_markers<'a>(
        &'a self,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        result: TransactionResult,
        coordinator_epoch: i32,
        partitions: &'a [TopicPartition],
    ) -> MarkerFuture<'a>;
}

/// Where new producer ids come from.
pub trait ProducerIdSource: Send + Sync {
    /// A producer id never handed out before. May block (a synced reservation).
    fn allocate(&self) -> Result<ProducerId, TxnError>;
}

/// The broker's producer ids, held weakly: the coordinator's tasks (a marker write
/// retried forever) never keep the broker, and its data directory's lock, alive.
impl ProducerIdSource for Weak<Broker> {
    fn allocate(&self) -> Result<ProducerId, TxnError> {
        let broker = self.upgrade().ok_or(TxnError::CoordinatorNotAvailable)?;
        broker.producer_ids().allocate().map_err(|e| {
            tracing::error!(error = %e, "allocating a producer id failed");
            TxnError::CoordinatorNotAvailable
        })
    }
}

/// ListTransactions' filters; empty ones match everything.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub states: Vec<TxnState>,
    pub producer_ids: Vec<ProducerId>,
    /// Only transactions open at least this long (v1).
    pub duration_min_ms: Option<i64>,
}

pub struct TxnCoordinator {
    txns: Mutex<Transactions>,
    log: Arc<Partition>,
    markers: Arc<dyn MarkerWriter>,
    producer_ids: Arc<dyn ProducerIdSource>,
    check_interval: Duration,
    /// The leader epoch of the partition this coordinator serves ([`NO_EPOCH`] on a
    /// broker alone).
    epoch: i32,
    /// Retired: the partition is led elsewhere now.
    retired: AtomicBool,
    shutdown: watch::Sender<bool>,
    loaded: watch::Sender<bool>,
}

/// What a coordinator is given besides its log.
#[derive(Clone)]
pub struct TxnParts {
    pub config: TxnConfig,
    /// How often timed-out transactions are looked for.
    pub check_interval: Duration,
    pub markers: Arc<dyn MarkerWriter>,
    pub producer_ids: Arc<dyn ProducerIdSource>,
}

impl TxnCoordinator {
    /// Opens the log under `data_dir/transactions/state`, starts replaying it in the
    /// background, then completes the transactions found prepared and checks timeouts
    /// every `check_interval` (a broker alone). Must run inside a tokio runtime.
    pub async fn open(
        data_dir: &Path,
        flush: FlushPolicy,
        parts: TxnParts,
    ) -> Result<Arc<TxnCoordinator>, BrokerError> {
        let dir = data_dir.join("transactions").join("state");
        let log = internal_log::open(dir, TRANSACTION_STATE_TOPIC, flush).await?;
        let coordinator = Self::new(log, NO_EPOCH, parts);
        let loading = Arc::clone(&coordinator);
        panics::spawn_supervised(Component::Coordinator, async move {
            if let Err(e) = loading.load().await {
                // Requests keep getting COORDINATOR_LOAD_IN_PROGRESS: better than
                // answering from a state that misses what the log holds.
                tracing::error!(error = %e, "replaying the transaction log failed");
            }
        });
        Ok(coordinator)
    }

    /// Replays `log`, a partition of a cluster's `__transaction_state` this broker
    /// leads at `epoch`, and serves from it: its writes wait for every in-sync replica
    /// and a change of leader fails them. Replays up to the high watermark: the loader
    /// waits until that reaches what the log held when this broker took over.
    pub async fn serve(
        log: Arc<Partition>,
        epoch: i32,
        parts: TxnParts,
    ) -> Result<Arc<TxnCoordinator>, BrokerError> {
        let coordinator = Self::new(log, epoch, parts);
        Arc::clone(&coordinator).load().await?;
        Ok(coordinator)
    }

    fn new(log: Arc<Partition>, epoch: i32, parts: TxnParts) -> Arc<TxnCoordinator> {
        Arc::new(TxnCoordinator {
            txns: Mutex::new(Transactions::new(parts.config)),
            log,
            markers: parts.markers,
            producer_ids: parts.producer_ids,
            check_interval: parts.check_interval,
            epoch,
            retired: AtomicBool::new(false),
            shutdown: watch::channel(false).0,
            loaded: watch::channel(false).0,
        })
    }

    /// The coordinator's log, served as `__transaction_state` and compacted by key.
    pub fn state_log(&self) -> &Arc<Partition> {
        &self.log
    }

    /// Resolves once the log is replayed (immediately after).
    pub async fn wait_loaded(&self) {
        let mut loaded = self.loaded.subscribe();
        let _ = loaded.wait_for(|l| *l).await;
    }

    fn txns(&self) -> MutexGuard<'_, Transactions> {
        self.txns
            .lock()
            .expect("transactions mutex poisoned by a panic")
    }

    /// The state, for a request's step: `NOT_COORDINATOR` once retired.
    fn state(&self) -> Result<MutexGuard<'_, Transactions>, TxnError> {
        self.serving()?;
        Ok(self.txns())
    }

    async fn load(self: Arc<Self>) -> Result<(), BrokerError> {
        let mut replayed = Transactions::new(self.txns().config.clone());
        let records = replay(&self.log, &mut replayed).await?;
        tracing::info!(
            partition = self.log.index().value(),
            epoch = self.epoch,
            records,
            transactional_ids = replayed.len(),
            "transaction log replayed"
        );
        replayed.loaded();
        let prepared = replayed.prepared();
        *self.txns() = replayed;
        self.loaded.send_replace(true);
        for meta in prepared {
            tracing::info!(
                transactional_id = meta.transactional_id,
                state = meta.state.name(),
                "completing a transaction prepared before the restart"
            );
            panics::spawn_supervised(
                Component::Coordinator,
                Arc::clone(&self).complete_transaction(meta),
            );
        }
        let (weak, interval) = (Arc::downgrade(&self), self.check_interval);
        panics::spawn_restarting(Component::Coordinator, "transaction expiry", move || {
            run_expiry(weak.clone(), interval)
        });
        Ok(())
    }

    /// `NOT_COORDINATOR` once retired, so that no request waits on a coordinator whose
    /// tasks have stopped.
    fn serving(&self) -> Result<(), TxnError> {
        match self.retired.load(Ordering::Acquire) {
            true => Err(TxnError::NotCoordinator),
            false => Ok(()),
        }
    }

    /// The epoch markers carry.
    fn coordinator_epoch(&self) -> i32 {
        match self.epoch {
            NO_EPOCH => COORDINATOR_EPOCH,
            epoch => epoch,
        }
    }

    /// Appends one record and waits until it is durable (in a cluster: on every
    /// in-sync replica).
    async fn append(&self, record: TxnRecord) -> Result<(), TxnError> {
        self.serving()?;
        let batch = encode_batch(std::slice::from_ref(&record), now_ms());
        let not_coordinator = |e: BrokerError, doing: &str| match e {
            BrokerError::NotLeaderOrFollower { .. } => TxnError::NotCoordinator,
            e => {
                tracing::error!(error = %e, "{doing} the transaction log failed");
                TxnError::CoordinatorNotAvailable
            }
        };
        let appended = self
            .log
            .append(validate_all(&batch), usize::MAX)
            .map_err(|e| not_coordinator(e, "appending to"))?;
        self.log
            .wait_replicated(appended.log_end_offset, 1, self.epoch)
            .await
            .map_err(|e| not_coordinator(e, "syncing"))
    }

    /// Persists a pending id's new metadata, then applies it (or, when the write
    /// failed, leaves the id as it was).
    async fn persist(&self, meta: TxnMetadata) -> Result<TxnMetadata, TxnError> {
        let record = TxnRecord {
            transactional_id: meta.transactional_id.clone(),
            value: Some(meta.clone()),
        };
        match self.append(record).await {
            Ok(()) => {
                self.txns().apply(meta.clone());
                Ok(meta)
            }
            Err(e) => {
                self.txns().abandon(&meta.transactional_id);
                Err(e)
            }
        }
    }

    /// Persists a step's change, if it made one.
    async fn persist_change(&self, change: Option<TxnMetadata>) -> Result<(), TxnError> {
        if let Some(meta) = change {
            self.persist(meta).await?;
        }
        Ok(())
    }

    /// A producer id never handed out before, from the coordinator's source (the
    /// broker's own counter alone, the controller's blocks in a cluster): transactional
    /// producers get theirs through [`TxnCoordinator::init_producer_id`], idempotent
    /// ones through this.
    pub async fn allocate_id(&self) -> Result<ProducerId, TxnError> {
        let source = Arc::clone(&self.producer_ids);
        tokio::task::spawn_blocking(move || source.allocate())
            .await
            .unwrap_or(Err(TxnError::CoordinatorNotAvailable))
    }

    /// InitProducerId with a transactional id: the producer id and epoch to use.
    pub async fn init_producer_id(
        self: &Arc<Self>,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<ExpectedProducer>,
    ) -> Result<(ProducerId, ProducerEpoch), TxnError> {
        // Drawn before the step, as it may sync; unused when the id keeps its own.
        let fresh = self.allocate_id().await?;
        let outcome = self.state()?.init_producer_id(
            transactional_id,
            timeout_ms,
            expected,
            fresh,
            now_ms(),
        )?;
        match outcome {
            InitOutcome::Write(meta) => {
                let meta = self.persist(meta).await?;
                Ok((meta.producer_id, meta.producer_epoch))
            }
            InitOutcome::AbortFirst(meta) => {
                let meta = self.persist(meta).await?;
                panics::spawn_supervised(
                    Component::Coordinator,
                    Arc::clone(self).complete_transaction(meta),
                );
                Err(TxnError::ConcurrentTransactions)
            }
        }
    }

    /// AddPartitionsToTxn: answered once the partitions are durably in the
    /// transaction.
    pub async fn add_partitions(
        &self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        partitions: &[TopicPartition],
    ) -> Result<(), TxnError> {
        let change = self.state()?.add_partitions(
            transactional_id,
            producer_id,
            producer_epoch,
            partitions,
            now_ms(),
        )?;
        self.persist_change(change).await
    }

    /// AddPartitionsToTxn v4+ with verify-only: one result per partition.
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        partitions: &[TopicPartition],
    ) -> Result<Vec<Result<(), TxnError>>, TxnError> {
        self.state()?
            .verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
    }

    /// AddOffsetsToTxn: the group's partition of [`OFFSETS_TOPIC`] (`offsets`) joins
    /// the transaction and the group is recorded in it.
    pub async fn add_offsets(
        &self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        group_id: &str,
        offsets: &TopicPartition,
    ) -> Result<(), TxnError> {
        let change = self.state()?.add_offsets(
            transactional_id,
            producer_id,
            producer_epoch,
            group_id,
            offsets,
            now_ms(),
        )?;
        self.persist_change(change).await
    }

    /// The produce path's check of a transactional batch for `tp`: the partition
    /// must be in the id's open transaction. With transactions version 2
    /// (`implicit_add`, Produce v12+) the produce adds it, durably, before this
    /// resolves (KIP-890); a partition already in the transaction resolves without
    /// waiting. Errors as Kafka answers a produce: INVALID_PRODUCER_EPOCH for an old
    /// epoch, INVALID_PRODUCER_ID_MAPPING, INVALID_TXN_STATE for a partition not added
    /// (version 1), CONCURRENT_TRANSACTIONS while the previous end completes.
    pub async fn check_produce(
        &self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        tp: &TopicPartition,
        implicit_add: bool,
    ) -> Result<(), TxnError> {
        let change = self.state()?.check_produce(
            transactional_id,
            producer_id,
            producer_epoch,
            tp,
            implicit_add,
            now_ms(),
        )?;
        self.persist_change(change).await
    }

    /// TxnOffsetCommit's check (for the group coordinator's handler): the group's
    /// offsets must be in the id's open transaction; with transactions version 2
    /// (`implicit_add`, TxnOffsetCommit v5+) the commit adds them, durably, before
    /// this resolves. PRODUCER_FENCED for an old epoch, INVALID_TXN_STATE for a group
    /// not added (version 1).
    pub async fn check_offset_commit(
        &self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        group_id: &str,
        offsets: &TopicPartition,
        implicit_add: bool,
    ) -> Result<(), TxnError> {
        let change = self.state()?.check_offset_commit(
            transactional_id,
            producer_id,
            producer_epoch,
            group_id,
            offsets,
            implicit_add,
            now_ms(),
        )?;
        self.persist_change(change).await
    }

    /// EndTxn: answered once the PrepareCommit or PrepareAbort is durable, with the
    /// producer id and epoch the producer continues with (new ones with transactions
    /// version 2, `version2` being EndTxn v5+). The markers are written after.
    pub async fn end_txn(
        self: &Arc<Self>,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        result: TransactionResult,
        version2: bool,
    ) -> Result<(ProducerId, ProducerEpoch), TxnError> {
        let fresh = if self.state()?.end_needs_fresh_id(transactional_id, version2) {
            Some(self.allocate_id().await?)
        } else {
            None
        };
        let outcome = self.state()?.end_txn(
            transactional_id,
            producer_id,
            producer_epoch,
            result,
            version2,
            fresh,
            now_ms(),
        )?;
        match outcome {
            EndOutcome::Done(id, epoch) => Ok((id, epoch)),
            EndOutcome::Prepare(meta) => {
                let meta = self.persist(meta).await?;
                let answer = meta.next_producer();
                panics::spawn_supervised(
                    Component::Coordinator,
                    Arc::clone(self).complete_transaction(meta),
                );
                Ok(answer)
            }
        }
    }

    /// DescribeTransactions: each id's metadata, or TRANSACTIONAL_ID_NOT_FOUND.
    pub fn describe(&self, transactional_ids: &[String]) -> Vec<Result<TxnMetadata, TxnError>> {
        let txns = match self.state() {
            Ok(txns) => txns,
            Err(e) => return transactional_ids.iter().map(|_| Err(e.clone())).collect(),
        };
        transactional_ids
            .iter()
            .map(|id| {
                if txns.is_loading() {
                    return Err(TxnError::CoordinatorLoadInProgress);
                }
                txns.get(id)
                    .cloned()
                    .ok_or(TxnError::TransactionalIdNotFound)
            })
            .collect()
    }

    /// ListTransactions: the ids that pass every filter.
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<TxnMetadata>, TxnError> {
        let txns = self.state()?;
        if txns.is_loading() {
            return Err(TxnError::CoordinatorLoadInProgress);
        }
        let now = now_ms();
        Ok(txns
            .iter()
            .filter(|m| filter.states.is_empty() || filter.states.contains(&m.state))
            .filter(|m| {
                filter.producer_ids.is_empty() || filter.producer_ids.contains(&m.producer_id)
            })
            .filter(|m| match filter.duration_min_ms {
                None => true,
                Some(min) => m.start_time_ms.is_some_and(|s| now - s >= min),
            })
            .cloned()
            .collect())
    }

    /// One id's metadata (tests and tools).
    pub fn get(&self, transactional_id: &str) -> Option<TxnMetadata> {
        self.txns().get(transactional_id).cloned()
    }

    /// Writes the markers of a prepared transaction, then persists its completion;
    /// both are tried again after a failure until they succeed or the coordinator
    /// closes.
    async fn complete_transaction(self: Arc<Self>, meta: TxnMetadata) {
        let result = match meta.state {
            TxnState::PrepareCommit => TransactionResult::Commit,
            TxnState::PrepareAbort => TransactionResult::Abort,
            _ => return,
        };
        let partitions: Vec<TopicPartition> = meta.partitions.iter().cloned().collect();
        let id = meta.transactional_id.as_str();
        let mut shutdown = self.shutdown.subscribe();
        let mut backoff = RETRY_BACKOFF;
        loop {
            let written = if partitions.is_empty() {
                Ok(())
            } else {
                let write = self.markers.write_markers(
                    meta.producer_id,
                    meta.producer_epoch,
                    result,
                    self.coordinator_epoch(),
                    &partitions,
                );
                tokio::select! {
                    written = write => written,
                    _ = closed(&mut shutdown) => return,
                }
            };
            let completed = match written {
                Ok(()) => {
                    let next = self.txns().complete(id, now_ms());
                    match next {
                        Some(next) => self.persist(next).await.map(|_| ()),
                        None => return,
                    }
                }
                Err(e) => Err(e),
            };
            match completed {
                Ok(()) => return,
                Err(e) => tracing::warn!(
                    transactional_id = id,
                    error = %e,
                    retry_in_ms = backoff.as_millis() as u64,
                    "completing a transaction failed; trying again"
                ),
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = closed(&mut shutdown) => return,
            }
            backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
        }
    }

    /// Aborts transactions past their timeout and removes ids idle past the
    /// expiration, once.
    async fn expire_once(self: &Arc<Self>) {
        let expired = self.txns().expire(now_ms());
        for meta in expired.aborts {
            tracing::info!(
                transactional_id = meta.transactional_id,
                timeout_ms = meta.timeout_ms,
                "aborting a transaction open past its timeout"
            );
            if let Ok(meta) = self.persist(meta).await {
                panics::spawn_supervised(
                    Component::Coordinator,
                    Arc::clone(self).complete_transaction(meta),
                );
            }
        }
        for id in expired.ids {
            let tombstone = TxnRecord {
                transactional_id: id.clone(),
                value: None,
            };
            match self.append(tombstone).await {
                Ok(()) => self.txns().remove(&id),
                Err(_) => self.txns().abandon(&id),
            }
        }
    }

    /// Stops the background tasks and closes the log (syncing it). Blocking; a broker
    /// alone's coordinator only (a cluster's are retired, their logs are the broker's).
    pub fn close(&self) {
        self.shutdown.send_replace(true);
        if let Err(e) = self.log.close() {
            tracing::error!(error = %e, "closing the transaction log");
        }
    }
}

impl Shard for TxnCoordinator {
    /// Stops answering (`NOT_COORDINATOR`) and stops the tasks: completions and
    /// expiry are the new leader's now, which finds the prepared transactions in the
    /// log and completes them.
    fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        self.shutdown.send_replace(true);
    }
}

/// Rebuilds every id's state from the log. Returns the records read.
async fn replay(log: &Partition, txns: &mut Transactions) -> Result<usize, BrokerError> {
    internal_log::replay(log, |offset, key, value| {
        match TxnRecord::decode(key, value) {
            Some(r) => txns.replay(&r.transactional_id, r.value),
            None => tracing::warn!(
                offset = offset.value(),
                "skipping a transaction record of an unknown format"
            ),
        }
    })
    .await
}

/// Resolves once the coordinator closes.
async fn closed(shutdown: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not `Send`; drop it here, not in the caller.
    let _ = shutdown.wait_for(|down| *down).await;
}

async fn run_expiry(coordinator: Weak<TxnCoordinator>, interval: Duration) {
    let mut shutdown = match coordinator.upgrade() {
        Some(c) => c.shutdown.subscribe(),
        None => return,
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = closed(&mut shutdown) => return,
        }
        let Some(c) = coordinator.upgrade() else {
            return;
        };
        c.expire_once().await;
    }
}
