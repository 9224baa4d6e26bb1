//! Share groups (queues for Kafka): consumers share partitions, each record is
//! acquired under a time-limited lock and acknowledged on its own.
//!
//! - [`partition`]: one share-partition's in-flight records (start and end offsets,
//!   runs of records with a state and a delivery count), plain values over an
//!   injected clock.
//! - [`group`]: share groups' members, epochs and `simple` assignment, share
//!   sessions, and each group's share-partitions, plain values too.
//! - [`state_log`]: the record format of share-partition state in the broker's own
//!   log.
//! - [`state_store`]: in a cluster, the replicated share state the partitions'
//!   leaders write to and read from.
//! - [`ShareCoordinator`]: the state behind a mutex, a ticker for session timeouts and
//!   lock expiry, and the state log, replayed at start-up.
//! - [`probe`]: the share groups' members and records on `/metrics`.
//! - [`ShareSettings`]: the coordinator's section of the broker's settings.

mod coordinator;
pub mod group;
pub mod partition;
pub mod probe;
mod settings;
pub mod state_log;
pub mod state_store;

pub use coordinator::{
    AckBatch, AckFailure, Durable, MemberSummary, PartitionSummary, RemoteState, ShareCoordinator,
    ShareGroupSummary, SHARE_STATE_TOPIC,
};
pub use group::{
    AutoOffsetReset, Heartbeat, HeartbeatAnswer, ShareConfig, ShareError, ShareOverrides, TopicInfo,
};
pub use partition::{AcknowledgeType, Acquired, LogBatch, MemberId, SharePartitionConfig};
pub use settings::ShareSettings;
