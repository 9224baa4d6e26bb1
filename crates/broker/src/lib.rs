//! The broker's state: topics, partitions, durability and limits, with no network code.
//!
//! - [`Broker`] is the registry of topics, loaded from the data directory at start-up
//!   and persisted on every create and delete. It also runs retention.
//! - [`Topic`] holds a topic's id, settings and partitions.
//! - [`Partition`] wraps one partition's [`headway_log::Log`]. Its mutex is the
//!   partition's single writer: offsets are assigned there and nowhere else, by the
//!   plain bookkeeping of [`partition::state`] (offsets, idempotent producers, high
//!   watermark, log start offset; unit-tested over values). Side files are written
//!   with one helper (`headway_base::durable_file`).
//! - Group commit (`durability`): a flusher task per partition, or with
//!   `sync_scope = broker` (or `syncfs`) one for every partition of the broker in
//!   shared rounds (`flusher`; `docs/sync.md` has the measurements). Every append that
//!   happened while the previous fsync ran shares the next one, and the high watermark
//!   (what consumers may read and what acks wait for) advances only after the sync
//!   returns. Flushers see a partition only through `durability::SyncTarget`.
//! - [`producer_state`] remembers each idempotent producer's last batches per
//!   partition, so retries are answered with their original offsets, and its open
//!   transaction there (the bound of the last stable offset); [`producer_ids`]
//!   hands out producer ids that stay unique across restarts.
//! - [`internal_log`] opens, writes and replays the logs the broker keeps for itself
//!   (committed offsets, transaction state).
//! - [`coordinator_shards`] says which coordinator serves a key: one for every key on
//!   a broker alone, one per led partition of the internal topic in a cluster.
//! - [`io`] schedules the broker's I/O: `io::read_pool` runs reads that may wait for
//!   the disk on threads of their own, one read per connection at a time; reads of
//!   cached data skip it (`io::read_route` decides which way a fetch's read goes);
//!   `io::bulk_budget` and `io::priority` keep bulk work from delaying light work,
//!   and `io::timings` measures where the time goes.
//! - [`panics`] keeps a panic in one job from taking anything else with it, and
//!   counts it.
//! - [`DiskSpace`] measures the data directory's free space and refuses produces
//!   below `disk_free_bytes_min`.
//! - [`replication`] is a replicated partition's leader-side bookkeeping as plain values
//!   (followers' durable ends, the ISR, the high watermark they allow); the cluster
//!   (`docs/cluster.md`) drives it.
//! - [`probe`] holds what every component's probe registers its `/metrics` families
//!   with; each component's probe sits beside it (`partition::probe`,
//!   `cleaner::probe`, `io::probe`, ...).
//! - [`config`] is every setting with its default; `headway_base::limits` is every
//!   hard bound.
//!
//! Everything here is thread-safe and shared as `Arc`s by the server's connections.

pub mod cleaner;
pub mod config;
pub mod coordinator_shards;
pub mod disk;
mod durability;
mod error;
mod flusher;
pub mod internal_log;
pub mod io;
pub mod listeners;
pub mod open_files;
pub mod panics;
pub mod partition;
pub mod probe;
pub mod producer_ids;
pub mod producer_state;
mod registry;
pub mod replication;
mod topic;

pub use config::{BrokerConfig, FlushPolicy, SyncScope, TopicConfig};
pub use disk::{DiskSnapshot, DiskSpace};
pub use durability::SyncCounters;
pub use error::BrokerError;
pub use headway_log::{AbortedTxn, BatchError, BatchHeader};
pub use partition::{Appended, Isolation, Partition, PartitionHealth, ReadResult, TrafficCounts};
pub use producer_state::TransactionResult;
pub use registry::Broker;
pub use topic::{validate_topic_name, Topic};
