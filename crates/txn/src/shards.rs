//! The transaction coordinators of a broker ([`TxnShards`]): one for every
//! transactional id on a broker alone; in a cluster one per partition of
//! `__transaction_state` this broker leads (`headway_broker::coordinator_shards` has
//! the rule). Handlers ask [`TxnShards::of`] for an id's coordinator and answer
//! `NOT_COORDINATOR` or `COORDINATOR_LOAD_IN_PROGRESS` when this broker has none.

use crate::coordinator::{ListFilter, ProducerIdSource, TxnCoordinator, TxnParts};
use crate::state::TxnMetadata;
use crate::TxnError;
use headway_base::ProducerId;
use headway_broker::coordinator_shards::{Shards, ToLoad, Unserved};
use headway_broker::{BrokerError, Partition};
use std::sync::Arc;

pub struct TxnShards {
    shards: Shards<TxnCoordinator>,
    /// What each coordinator loaded later is given.
    parts: TxnParts,
}

impl From<Unserved> for TxnError {
    fn from(u: Unserved) -> TxnError {
        match u {
            Unserved::NotCoordinator => TxnError::NotCoordinator,
            Unserved::Loading => TxnError::CoordinatorLoadInProgress,
        }
    }
}

impl TxnShards {
    /// A broker alone: `coordinator` serves every transactional id.
    pub fn alone(coordinator: Arc<TxnCoordinator>, parts: TxnParts) -> TxnShards {
        TxnShards {
            shards: Shards::alone(coordinator),
            parts,
        }
    }

    /// A broker in a cluster: ids are served once their partitions are loaded.
    pub fn clustered(parts: TxnParts) -> TxnShards {
        TxnShards {
            shards: Shards::clustered(),
            parts,
        }
    }

    pub fn is_clustered(&self) -> bool {
        self.shards.is_clustered()
    }

    /// The coordinator of `transactional_id` on this broker.
    pub fn of(&self, transactional_id: &str) -> Result<Arc<TxnCoordinator>, TxnError> {
        Ok(self.shards.of(transactional_id)?)
    }

    /// A producer id never handed out before (idempotent producers ask any broker).
    pub async fn allocate_id(&self) -> Result<ProducerId, TxnError> {
        let source: Arc<dyn ProducerIdSource> = Arc::clone(&self.parts.producer_ids);
        tokio::task::spawn_blocking(move || source.allocate())
            .await
            .unwrap_or(Err(TxnError::CoordinatorNotAvailable))
    }

    /// See [`Shards::follow`].
    pub fn follow(&self, partitions: i32, leading: &[(i32, i32)]) -> Vec<ToLoad> {
        self.shards.follow(partitions, leading)
    }

    /// Replays `log`, the partition `what` names, and serves its ids from then on;
    /// completes the transactions it finds prepared.
    pub async fn load(&self, what: ToLoad, log: Arc<Partition>) -> Result<bool, BrokerError> {
        match TxnCoordinator::serve(log, what.epoch, self.parts.clone()).await {
            Ok(coordinator) => Ok(self.shards.loaded(what, coordinator)),
            Err(e) => {
                self.shards.load_failed(what);
                Err(e)
            }
        }
    }

    /// A load that did not finish; asked for again at the next [`TxnShards::follow`].
    pub fn load_failed(&self, what: ToLoad) {
        self.shards.load_failed(what);
    }

    /// DescribeTransactions: each id's metadata from its coordinator here.
    pub fn describe(&self, transactional_ids: &[String]) -> Vec<Result<TxnMetadata, TxnError>> {
        transactional_ids
            .iter()
            .map(|id| {
                let coordinator = self.of(id)?;
                let mut one = coordinator.describe(std::slice::from_ref(id));
                one.pop().unwrap_or(Err(TxnError::TransactionalIdNotFound))
            })
            .collect()
    }

    /// ListTransactions: the ids of every coordinator here that pass the filter (a
    /// cluster's brokers each list their own, as Kafka's do).
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<TxnMetadata>, TxnError> {
        let mut all = Vec::new();
        for coordinator in self.shards.all() {
            all.extend(coordinator.list(filter)?);
        }
        all.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        Ok(all)
    }

    /// Closes a broker alone's log; retires a cluster's coordinators.
    pub fn close(&self) {
        if self.is_clustered() {
            self.shards.retire_all();
        } else {
            for c in self.shards.all() {
                c.close();
            }
        }
    }
}
