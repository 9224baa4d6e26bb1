//! The transaction coordinator (KIP-98, with KIP-360's epoch bumps and KIP-890's
//! transactions version 2).
//!
//! - [`state`]: every transactional id's producer id, epoch, state, partitions and
//!   groups, and Kafka's transitions (InitProducerId, AddPartitionsToTxn,
//!   AddOffsetsToTxn, EndTxn, timeouts, expiry), as plain code over values driven by
//!   explicit times, tested without sockets or clocks.
//! - [`record`]: the record format of the coordinator's log, `__transaction_state`.
//! - [`TxnCoordinator`]: the state behind a mutex and its log: every change is
//!   answered once durable; the log is replayed at start-up and transactions found
//!   prepared are completed. Markers go through a [`MarkerWriter`], the data path's
//!   side, so this crate does no partition I/O of its own.
//! - [`TxnShards`]: which coordinator serves a transactional id: one on a broker
//!   alone, one per led partition of `__transaction_state` in a cluster.
//! - [`TxnSettings`]: the coordinator's section of the broker's settings.

mod coordinator;
mod error;
pub mod record;
mod settings;
mod shards;
pub mod state;

pub use coordinator::{
    is_coordinators_topic, ListFilter, MarkerFuture, MarkerWriter, ProducerIdSource,
    TxnCoordinator, TxnParts, COORDINATOR_EPOCH, OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC,
};
pub use error::TxnError;
pub use settings::TxnSettings;
pub use shards::TxnShards;
pub use state::{
    EndOutcome, ExpectedProducer, InitOutcome, TransactionResult, TxnConfig, TxnMetadata, TxnState,
};
