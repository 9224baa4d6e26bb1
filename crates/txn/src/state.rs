//! The transaction state machine: every transactional id's producer id, epoch, state
//! and partitions, and the transitions of Kafka's coordinator, as plain code over
//! values driven by explicit times. Nothing here does I/O.
//!
//! A transition that Kafka persists is done in two steps: the operation checks the
//! request against the current metadata and returns the metadata to persist (the id is
//! then *pending*: every other request for it gets CONCURRENT_TRANSACTIONS); once the
//! record is durable the coordinator calls [`Transactions::apply`] (or
//! [`Transactions::abandon`] when the write failed). A transaction in PrepareCommit or
//! PrepareAbort stays there until its markers are written and
//! [`Transactions::complete`]'s record is durable.
//!
//! Epochs (KIP-360, KIP-890): InitProducerId bumps the epoch (a new producer id once
//! the epoch is exhausted), an abort forced by the coordinator (InitProducerId while a
//! transaction is open, or a timeout) bumps it to fence the old producer, and with
//! transactions version 2 every EndTxn bumps it and returns the new one.

use crate::TxnError;
use headway_base::{ProducerEpoch, ProducerId, TopicPartition};
use std::collections::{BTreeSet, HashMap};

/// The largest epoch. An epoch at or past [`EPOCH_EXHAUSTED`] is not bumped further:
/// the transactional id gets a new producer id at epoch 0.
pub const EPOCH_MAX: i16 = i16::MAX;
/// Kafka's `isEpochExhausted`: one bump must stay possible for a fence.
pub const EPOCH_EXHAUSTED: i16 = i16::MAX - 1;
/// Longest transactional id or group id, in bytes
/// (`headway_base::limits::TRANSACTION_ID_BYTES_MAX`).
pub const ID_BYTES_MAX: usize = headway_base::limits::TRANSACTION_ID_BYTES_MAX;

fn check_id(transactional_id: &str) -> Result<(), TxnError> {
    if transactional_id.is_empty() || transactional_id.len() > ID_BYTES_MAX {
        return Err(TxnError::InvalidTransactionalId);
    }
    Ok(())
}

/// A transaction's state, with Kafka's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
}

impl TxnState {
    pub const ALL: [TxnState; 7] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
    ];

    /// The name DescribeTransactions and ListTransactions use.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
        }
    }

    pub fn from_name(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The state's byte in the coordinator's log (`crate::record`).
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<TxnState> {
        TxnState::ALL.get(usize::from(code)).copied()
    }

    fn is_prepare(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }

    fn is_complete_or_empty(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }
}

/// How a transaction ends: the control record its markers carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionResult {
    Commit,
    Abort,
}

/// One transactional id, as persisted in the coordinator's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    /// The producer id before the last rotation (KIP-360), for retries of it.
    pub last_producer_id: Option<ProducerId>,
    /// The epoch before the last bump by InitProducerId (KIP-360) or EndTxn (KIP-890).
    pub last_producer_epoch: Option<ProducerEpoch>,
    /// With transactions version 2, the producer id the id moves to when the
    /// transaction being completed exhausted the epoch.
    pub next_producer_id: Option<ProducerId>,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    /// Groups whose offsets are committed in the transaction (AddOffsetsToTxn).
    pub groups: BTreeSet<String>,
    /// When the open transaction began (its first partition), ms since the epoch.
    pub start_time_ms: Option<i64>,
    pub last_update_ms: i64,
    /// Whether the current (or last) transaction runs transactions version 2.
    pub version2: bool,
}

impl TxnMetadata {
    fn epoch(&self) -> i16 {
        self.producer_epoch.value()
    }

    /// The producer id and epoch the client continues with once this transaction is
    /// complete.
    pub fn next_producer(&self) -> (ProducerId, ProducerEpoch) {
        match self.next_producer_id {
            Some(id) => (id, ProducerEpoch::FIRST),
            None => (self.producer_id, self.producer_epoch),
        }
    }
}

/// The producer id and epoch that InitProducerId v3+ carries (KIP-360).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpectedProducer {
    pub producer_id: ProducerId,
    pub producer_epoch: Option<ProducerEpoch>,
}

/// The coordinator's settings and bounds.
#[derive(Debug, Clone)]
pub struct TxnConfig {
    /// Largest `transaction.timeout.ms` a producer may ask for.
    pub transaction_max_timeout_ms: i32,
    /// An id with no open transaction and no request for this long is removed.
    pub transactional_id_expiration_ms: i64,
    pub transactional_ids_max: usize,
    pub partitions_per_transaction_max: usize,
    pub groups_per_transaction_max: usize,
    /// Partitions and groups in all open transactions together.
    pub transaction_entries_max: usize,
}

impl Default for TxnConfig {
    fn default() -> Self {
        use headway_base::limits;
        TxnConfig {
            transaction_max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 7 * 24 * 3600 * 1000,
            transactional_ids_max: limits::TRANSACTIONAL_IDS_MAX,
            partitions_per_transaction_max: limits::PARTITIONS_PER_TRANSACTION_MAX,
            groups_per_transaction_max: limits::GROUPS_PER_TRANSACTION_MAX,
            transaction_entries_max: limits::TRANSACTION_ENTRIES_MAX,
        }
    }
}

/// What InitProducerId does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitOutcome {
    /// Persist the metadata, then answer with its producer id and epoch.
    Write(TxnMetadata),
    /// The open transaction is aborted first (its epoch bumped to fence the old
    /// producer): persist this PrepareAbort, complete it, and answer
    /// CONCURRENT_TRANSACTIONS so the client retries.
    AbortFirst(TxnMetadata),
}

/// What EndTxn does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndOutcome {
    /// Persist this PrepareCommit or PrepareAbort, answer with
    /// [`TxnMetadata::next_producer`], then write the markers and complete.
    Prepare(TxnMetadata),
    /// A retry of an end already complete: answer at once with this producer.
    Done(ProducerId, ProducerEpoch),
}

/// What the timeout task does next.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Expired {
    /// Open past their timeout: persist these PrepareAborts (fenced), then complete.
    pub aborts: Vec<TxnMetadata>,
    /// Idle past `transactional_id_expiration_ms`: persist a tombstone, then
    /// [`Transactions::remove`].
    pub ids: Vec<String>,
}

#[derive(Debug)]
struct Entry {
    meta: TxnMetadata,
    /// A record of this id is being written.
    pending: bool,
    /// The metadata is in the log (false only while a new id's first record is written).
    durable: bool,
}

/// Every transactional id. Not thread-safe: the coordinator holds it behind a mutex.
#[derive(Debug)]
pub struct Transactions {
    pub config: TxnConfig,
    ids: HashMap<String, Entry>,
    /// Partitions and groups over every id's metadata (`transaction_entries_max`).
    entries_total: usize,
    loading: bool,
}

/// What an id's metadata counts against `transaction_entries_max`.
fn entries(meta: &TxnMetadata) -> usize {
    meta.partitions.len() + meta.groups.len()
}

fn bump(epoch: ProducerEpoch) -> ProducerEpoch {
    ProducerEpoch::new(epoch.value().saturating_add(1))
}

impl Transactions {
    /// An empty coordinator that is still loading its log: every request gets
    /// COORDINATOR_LOAD_IN_PROGRESS until [`Transactions::loaded`].
    pub fn new(config: TxnConfig) -> Transactions {
        Transactions {
            config,
            ids: HashMap::new(),
            entries_total: 0,
            loading: true,
        }
    }

    pub fn loaded(&mut self) {
        self.loading = false;
    }

    pub fn is_loading(&self) -> bool {
        self.loading
    }

    pub fn get(&self, transactional_id: &str) -> Option<&TxnMetadata> {
        self.ids
            .get(transactional_id)
            .filter(|e| e.durable)
            .map(|e| &e.meta)
    }

    pub fn iter(&self) -> impl Iterator<Item = &TxnMetadata> {
        self.ids.values().filter(|e| e.durable).map(|e| &e.meta)
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Replays one record of the log: the id's metadata, or its removal.
    pub fn replay(&mut self, transactional_id: &str, meta: Option<TxnMetadata>) {
        match meta {
            Some(meta) => self.apply(meta),
            None => self.remove(transactional_id),
        }
    }

    /// The persisted metadata is durable: it becomes the id's state.
    pub fn apply(&mut self, meta: TxnMetadata) {
        self.remove(&meta.transactional_id);
        self.entries_total += entries(&meta);
        let entry = Entry {
            meta,
            pending: false,
            durable: true,
        };
        self.ids.insert(entry.meta.transactional_id.clone(), entry);
    }

    /// Writing the record failed: the id keeps its state (a new one is forgotten).
    pub fn abandon(&mut self, transactional_id: &str) {
        match self.ids.get_mut(transactional_id) {
            Some(e) if e.durable => e.pending = false,
            Some(_) => self.remove(transactional_id),
            None => {}
        }
    }

    /// The id's tombstone is durable.
    pub fn remove(&mut self, transactional_id: &str) {
        if let Some(old) = self.ids.remove(transactional_id) {
            self.entries_total -= entries(&old.meta);
        }
    }

    /// The entry of an id a producer names, ready for a transition.
    fn entry_for(&mut self, transactional_id: &str) -> Result<&mut Entry, TxnError> {
        if self.loading {
            return Err(TxnError::CoordinatorLoadInProgress);
        }
        check_id(transactional_id)?;
        self.ids
            .get_mut(transactional_id)
            .ok_or(TxnError::InvalidProducerIdMapping)
    }

    /// InitProducerId with a transactional id. `fresh_id` is used when the id is new
    /// or its epoch is exhausted.
    pub fn init_producer_id(
        &mut self,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<ExpectedProducer>,
        fresh_id: ProducerId,
        now_ms: i64,
    ) -> Result<InitOutcome, TxnError> {
        if self.loading {
            return Err(TxnError::CoordinatorLoadInProgress);
        }
        check_id(transactional_id)?;
        let max_ms = self.config.transaction_max_timeout_ms;
        if timeout_ms <= 0 || timeout_ms > max_ms {
            return Err(TxnError::InvalidTransactionTimeout { timeout_ms, max_ms });
        }
        let Some(entry) = self.ids.get_mut(transactional_id) else {
            if self.ids.len() >= self.config.transactional_ids_max {
                return Err(TxnError::LimitReached {
                    what: "transactional ids",
                    limit: self.config.transactional_ids_max,
                });
            }
            let meta = TxnMetadata {
                transactional_id: transactional_id.to_string(),
                producer_id: fresh_id,
                producer_epoch: ProducerEpoch::FIRST,
                last_producer_id: None,
                last_producer_epoch: None,
                next_producer_id: None,
                timeout_ms,
                state: TxnState::Empty,
                partitions: BTreeSet::new(),
                groups: BTreeSet::new(),
                start_time_ms: None,
                last_update_ms: now_ms,
                version2: false,
            };
            let entry = Entry {
                meta: meta.clone(),
                pending: true,
                durable: false,
            };
            self.ids.insert(transactional_id.to_string(), entry);
            return Ok(InitOutcome::Write(meta));
        };
        if entry.pending || !entry.durable {
            return Err(TxnError::ConcurrentTransactions);
        }
        let meta = &entry.meta;
        if let Some(expected) = expected {
            let retried_rotation = Some(expected.producer_id) == meta.last_producer_id
                && expected
                    .producer_epoch
                    .is_some_and(|e| e.value() >= EPOCH_EXHAUSTED);
            if expected.producer_id != meta.producer_id && !retried_rotation {
                return Err(TxnError::ProducerFenced);
            }
        }
        let mut next = meta.clone();
        next.last_update_ms = now_ms;
        next.timeout_ms = timeout_ms;
        match meta.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                return Err(TxnError::ConcurrentTransactions)
            }
            TxnState::Ongoing => {
                next.producer_epoch = bump(meta.producer_epoch);
                next.last_producer_epoch = None;
                next.state = TxnState::PrepareAbort;
                next.timeout_ms = meta.timeout_ms;
                entry.pending = true;
                return Ok(InitOutcome::AbortFirst(next));
            }
            TxnState::Empty
            | TxnState::CompleteCommit
            | TxnState::CompleteAbort
            | TxnState::Dead => {}
        }
        let expected_epoch = expected.and_then(|e| e.producer_epoch);
        let retry_after_rotation =
            expected.is_some_and(|e| Some(e.producer_id) == meta.last_producer_id);
        if retry_after_rotation {
            // The answer to an earlier rotation was lost: the same id and epoch again.
        } else if meta.epoch() >= EPOCH_EXHAUSTED
            && expected_epoch.is_none_or(|e| e == meta.producer_epoch)
        {
            next.last_producer_id = Some(meta.producer_id);
            next.last_producer_epoch = Some(meta.producer_epoch);
            next.producer_id = fresh_id;
            next.producer_epoch = ProducerEpoch::FIRST;
        } else {
            match expected_epoch {
                None => {
                    next.last_producer_epoch = Some(meta.producer_epoch);
                    next.producer_epoch = bump(meta.producer_epoch);
                }
                Some(e) if e == meta.producer_epoch => {
                    next.last_producer_epoch = Some(meta.producer_epoch);
                    next.producer_epoch = bump(meta.producer_epoch);
                }
                // A retry of a bump whose answer was lost: the current epoch again.
                Some(e) if Some(e) == meta.last_producer_epoch => {}
                Some(_) => return Err(TxnError::ProducerFenced),
            }
        }
        next.state = TxnState::Empty;
        next.partitions.clear();
        next.groups.clear();
        next.start_time_ms = None;
        next.next_producer_id = None;
        next.version2 = false;
        entry.pending = true;
        Ok(InitOutcome::Write(next))
    }

    /// Checks that `producer_id` and `producer_epoch` are the id's current producer
    /// and that no state change is in progress.
    fn check_producer(
        entry: &Entry,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
    ) -> Result<(), TxnError> {
        if entry.meta.producer_id != producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if entry.meta.producer_epoch != producer_epoch {
            return Err(TxnError::ProducerFenced);
        }
        if entry.pending || !entry.durable || entry.meta.state.is_prepare() {
            return Err(TxnError::ConcurrentTransactions);
        }
        Ok(())
    }

    /// Adds partitions (and the group, for AddOffsetsToTxn) to the id's transaction,
    /// opening it if none is open. `None` when nothing changes.
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        partitions: &[TopicPartition],
        group_id: Option<&str>,
        version2: bool,
        now_ms: i64,
    ) -> Result<Option<TxnMetadata>, TxnError> {
        let (partitions_max, groups_max, total_max) = (
            self.config.partitions_per_transaction_max,
            self.config.groups_per_transaction_max,
            self.config.transaction_entries_max,
        );
        let total = self.entries_total;
        let entry = self.entry_for(transactional_id)?;
        Self::check_producer(entry, producer_id, producer_epoch)?;
        let meta = &entry.meta;
        let open = meta.state == TxnState::Ongoing;
        let new_partitions = partitions
            .iter()
            .filter(|tp| !open || !meta.partitions.contains(tp))
            .count();
        let new_group = group_id.is_some_and(|g| !open || !meta.groups.contains(g));
        if new_partitions == 0 && !new_group && open {
            return Ok(None);
        }
        let mut next = meta.clone();
        if !open {
            next.partitions.clear();
            next.groups.clear();
            next.start_time_ms = Some(now_ms);
            next.state = TxnState::Ongoing;
            next.version2 = version2;
        }
        next.partitions.extend(partitions.iter().cloned());
        if next.partitions.len() > partitions_max {
            return Err(TxnError::LimitReached {
                what: "partitions in one transaction",
                limit: partitions_max,
            });
        }
        if let Some(g) = group_id {
            next.groups.insert(g.to_string());
            if next.groups.len() > groups_max {
                return Err(TxnError::LimitReached {
                    what: "groups in one transaction",
                    limit: groups_max,
                });
            }
        }
        if total - entries(meta) + entries(&next) > total_max {
            return Err(TxnError::LimitReached {
                what: "partitions and groups in all open transactions",
                limit: total_max,
            });
        }
        next.last_update_ms = now_ms;
        entry.pending = true;
        Ok(Some(next))
    }

    /// AddPartitionsToTxn (v0-v3 from clients, v4+ without verify-only).
    pub fn add_partitions(
        &mut self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        partitions: &[TopicPartition],
        now_ms: i64,
    ) -> Result<Option<TxnMetadata>, TxnError> {
        self.add(
            transactional_id,
            producer_id,
            producer_epoch,
            partitions,
            None,
            false,
            now_ms,
        )
    }

    /// AddOffsetsToTxn: the group's offsets partition joins the transaction, and the
    /// group is remembered with it.
    pub fn add_offsets(
        &mut self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        group_id: &str,
        offsets_partition: &TopicPartition,
        now_ms: i64,
    ) -> Result<Option<TxnMetadata>, TxnError> {
        let ids = (transactional_id, producer_id, producer_epoch);
        self.add_group(ids, group_id, offsets_partition, false, now_ms)
    }

    /// Adds `group_id` and its offsets partition to the id's transaction, by an
    /// AddOffsetsToTxn or (`implicit`) a version-2 TxnOffsetCommit.
    fn add_group(
        &mut self,
        (transactional_id, producer_id, producer_epoch): (&str, ProducerId, ProducerEpoch),
        group_id: &str,
        offsets_partition: &TopicPartition,
        implicit: bool,
        now_ms: i64,
    ) -> Result<Option<TxnMetadata>, TxnError> {
        if group_id.is_empty() || group_id.len() > ID_BYTES_MAX {
            return Err(TxnError::InvalidGroupId);
        }
        self.add(
            transactional_id,
            producer_id,
            producer_epoch,
            std::slice::from_ref(offsets_partition),
            Some(group_id),
            implicit,
            now_ms,
        )
    }

    /// AddPartitionsToTxn v4+ with verify-only: whether each partition is in the id's
    /// open transaction (INVALID_TXN_STATE for one that is not).
    pub fn verify_partitions(
        &mut self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        partitions: &[TopicPartition],
    ) -> Result<Vec<Result<(), TxnError>>, TxnError> {
        let entry = self.entry_for(transactional_id)?;
        Self::check_producer(entry, producer_id, producer_epoch)?;
        let meta = &entry.meta;
        Ok(partitions
            .iter()
            .map(|tp| {
                if meta.state == TxnState::Ongoing && meta.partitions.contains(tp) {
                    Ok(())
                } else {
                    Err(TxnError::InvalidTxnState)
                }
            })
            .collect())
    }

    /// The produce path's check of a transactional batch: the partition must be in
    /// the id's open transaction. With transactions version 2 (`implicit_add`) the
    /// produce adds it: `Some` is the metadata to persist before the batch is
    /// appended. An epoch that is not the current one is INVALID_PRODUCER_EPOCH, the
    /// code every client understands on a produce.
    pub fn check_produce(
        &mut self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        tp: &TopicPartition,
        implicit_add: bool,
        now_ms: i64,
    ) -> Result<Option<TxnMetadata>, TxnError> {
        let entry = self.entry_for(transactional_id)?;
        match Self::check_producer(entry, producer_id, producer_epoch) {
            Err(TxnError::ProducerFenced) => return Err(TxnError::InvalidProducerEpoch),
            other => other?,
        }
        if entry.meta.state == TxnState::Ongoing && entry.meta.partitions.contains(tp) {
            return Ok(None);
        }
        if !implicit_add {
            return Err(TxnError::InvalidTxnState);
        }
        self.add(
            transactional_id,
            producer_id,
            producer_epoch,
            std::slice::from_ref(tp),
            None,
            true,
            now_ms,
        )
    }

    /// TxnOffsetCommit's check: the group's offsets must be in the id's open
    /// transaction (AddOffsetsToTxn, version 1). With transactions version 2
    /// (`implicit_add`, TxnOffsetCommit v5+) the commit adds the group and its offsets
    /// partition itself: `Some` is the metadata to persist before the offsets are
    /// staged. Errors as [`Transactions::check_produce`]'s, but PRODUCER_FENCED for an
    /// old epoch, as Kafka answers TxnOffsetCommit.
    #[allow(clippy::too_many_arguments)]
    pub fn check_offset_commit(
        &mut self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        group_id: &str,
        offsets_partition: &TopicPartition,
        implicit_add: bool,
        now_ms: i64,
    ) -> Result<Option<TxnMetadata>, TxnError> {
        let entry = self.entry_for(transactional_id)?;
        Self::check_producer(entry, producer_id, producer_epoch)?;
        if entry.meta.state == TxnState::Ongoing && entry.meta.groups.contains(group_id) {
            return Ok(None);
        }
        if !implicit_add {
            return Err(TxnError::InvalidTxnState);
        }
        let ids = (transactional_id, producer_id, producer_epoch);
        self.add_group(ids, group_id, offsets_partition, true, now_ms)
    }

    /// Whether EndTxn for this id will move it to a new producer id (transactions
    /// version 2 with the epoch exhausted): the coordinator allocates one first.
    pub fn end_needs_fresh_id(&self, transactional_id: &str, version2: bool) -> bool {
        version2
            && self
                .get(transactional_id)
                .is_some_and(|m| m.epoch() >= EPOCH_EXHAUSTED)
    }

    /// EndTxn. `version2` is EndTxn v5+: the epoch is bumped at every end and the
    /// answer carries the producer id and epoch the client continues with.
    #[allow(clippy::too_many_arguments)]
    pub fn end_txn(
        &mut self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        result: TransactionResult,
        version2: bool,
        fresh_id: Option<ProducerId>,
        now_ms: i64,
    ) -> Result<EndOutcome, TxnError> {
        let entry = self.entry_for(transactional_id)?;
        let meta = &entry.meta;
        let state = meta.state;
        let request_epoch = producer_epoch.value();
        // Transactions version 2: a retry names the epoch before the end's bump, or the
        // last producer id when the bump rotated it. A fence (timeout, InitProducerId)
        // leaves no last epoch, so the fenced producer is told so.
        let retry_on_bump = meta.version2
            && request_epoch.checked_add(1) == Some(meta.epoch())
            && meta.last_producer_epoch == Some(producer_epoch);
        let retry_on_rotation = meta.version2
            && Some(producer_id) == meta.last_producer_id
            && request_epoch >= EPOCH_EXHAUSTED
            && meta.producer_epoch == ProducerEpoch::FIRST;
        if meta.producer_id != producer_id && !retry_on_rotation {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        let retry = if meta.version2
            && matches!(
                state,
                TxnState::PrepareCommit
                    | TxnState::PrepareAbort
                    | TxnState::CompleteCommit
                    | TxnState::CompleteAbort
            )
            && (retry_on_bump || retry_on_rotation)
        {
            true
        } else if meta.producer_epoch != producer_epoch {
            return Err(TxnError::ProducerFenced);
        } else {
            // Version 1: the same epoch in a completed state is a retry; version 2
            // with the current epoch in a completed state is a new (empty) transaction.
            !version2 && !meta.version2 && state.is_complete_or_empty() && state != TxnState::Empty
        };
        if entry.pending || !entry.durable {
            return Err(TxnError::ConcurrentTransactions);
        }
        let matches = |s: TxnState| match result {
            TransactionResult::Commit => {
                matches!(s, TxnState::PrepareCommit | TxnState::CompleteCommit)
            }
            TransactionResult::Abort => {
                matches!(s, TxnState::PrepareAbort | TxnState::CompleteAbort)
            }
        };
        let prepare = match state {
            TxnState::Ongoing => true,
            TxnState::PrepareCommit | TxnState::PrepareAbort if matches(state) => {
                return Err(TxnError::ConcurrentTransactions)
            }
            // Transactions version 2: the end already gave the producer its bumped
            // epoch, so it may end its next transaction (an empty abort, say) while the
            // previous one's markers are still being written; it retries.
            TxnState::PrepareCommit | TxnState::PrepareAbort if version2 && !retry => {
                return Err(TxnError::ConcurrentTransactions)
            }
            TxnState::CompleteCommit | TxnState::CompleteAbort if retry => {
                if matches(state) {
                    let (id, epoch) = (meta.producer_id, meta.producer_epoch);
                    return Ok(EndOutcome::Done(id, epoch));
                }
                return Err(TxnError::InvalidTxnState);
            }
            // Transactions version 2 may abort a transaction that added nothing: the
            // epoch is still bumped, so the producer starts afresh.
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
                if version2 && result == TransactionResult::Abort =>
            {
                true
            }
            _ => false,
        };
        if !prepare {
            return Err(TxnError::InvalidTxnState);
        }
        let mut next = meta.clone();
        if !state.is_prepare() && state != TxnState::Ongoing {
            next.partitions.clear();
            next.groups.clear();
            next.start_time_ms = Some(now_ms);
        }
        next.state = match result {
            TransactionResult::Commit => TxnState::PrepareCommit,
            TransactionResult::Abort => TxnState::PrepareAbort,
        };
        if version2 {
            next.version2 = true;
            next.last_producer_epoch = Some(meta.producer_epoch);
            next.producer_epoch = bump(meta.producer_epoch);
            if meta.epoch() >= EPOCH_EXHAUSTED {
                next.next_producer_id = fresh_id;
            }
        }
        next.last_update_ms = now_ms;
        entry.pending = true;
        Ok(EndOutcome::Prepare(next))
    }

    /// The markers of the id's prepared transaction are written: the metadata of
    /// CompleteCommit or CompleteAbort to persist. `None` if it is not prepared.
    pub fn complete(&mut self, transactional_id: &str, now_ms: i64) -> Option<TxnMetadata> {
        let entry = self.ids.get_mut(transactional_id)?;
        let meta = &entry.meta;
        let state = match meta.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            _ => return None,
        };
        let mut next = meta.clone();
        next.state = state;
        next.partitions.clear();
        next.groups.clear();
        next.start_time_ms = None;
        next.last_update_ms = now_ms;
        if let Some(id) = next.next_producer_id.take() {
            next.last_producer_id = Some(meta.producer_id);
            next.last_producer_epoch = Some(meta.producer_epoch);
            next.producer_id = id;
            next.producer_epoch = ProducerEpoch::FIRST;
        }
        entry.pending = true;
        Some(next)
    }

    /// Ids in PrepareCommit or PrepareAbort (found at start-up): their markers must
    /// be written again and the transactions completed.
    pub fn prepared(&self) -> Vec<TxnMetadata> {
        self.iter()
            .filter(|m| m.state.is_prepare())
            .cloned()
            .collect()
    }

    /// Transactions open longer than their timeout, fenced and aborted, and ids idle
    /// past the expiration. Every id returned is pending until applied or removed.
    pub fn expire(&mut self, now_ms: i64) -> Expired {
        let expiration_ms = self.config.transactional_id_expiration_ms;
        let mut expired = Expired::default();
        if self.loading {
            return expired;
        }
        for (id, entry) in self.ids.iter_mut() {
            if entry.pending || !entry.durable {
                continue;
            }
            let meta = &entry.meta;
            match meta.state {
                TxnState::Ongoing => {
                    let started = meta.start_time_ms.unwrap_or(meta.last_update_ms);
                    if now_ms - started > i64::from(meta.timeout_ms) {
                        let mut next = meta.clone();
                        // Fence the producer that let the transaction time out, so its
                        // late writes are refused (Kafka's epoch fence).
                        if meta.epoch() < EPOCH_MAX {
                            next.producer_epoch = bump(meta.producer_epoch);
                        }
                        next.last_producer_epoch = None;
                        next.state = TxnState::PrepareAbort;
                        next.last_update_ms = now_ms;
                        entry.pending = true;
                        expired.aborts.push(next);
                    }
                }
                s if (s.is_complete_or_empty() || s == TxnState::Dead)
                    && now_ms - meta.last_update_ms > expiration_ms =>
                {
                    entry.pending = true;
                    expired.ids.push(id.clone());
                }
                _ => {}
            }
        }
        expired
    }
}

#[cfg(test)]
mod tests;
