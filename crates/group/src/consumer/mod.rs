//! Consumer groups of the broker-driven protocol (KIP-848: ConsumerGroupHeartbeat).
//!
//! - [`state`]: groups, members, epochs and incremental reconciliation as plain code
//!   over values; every step takes `now_ms` and the broker's topics as arguments.
//! - [`assignor`]: the server-side assignors, `uniform` and `range`.
//! - [`classic`]: classic members of a consumer group (online conversion).
//! - [`durable`]: the groups' records in the offsets log, and their recovery.
//!
//! Partitions are named by topic name inside; the wire's topic ids are converted by
//! the handlers with the [`TopicsView`] they pass in.

pub mod assignor;
pub mod classic;
pub mod state;

use std::collections::{BTreeMap, BTreeSet};

/// What the broker knows of a topic, as the assignors need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicInfo {
    pub id: uuid::Uuid,
    pub partitions: i32,
}

/// The broker's topics by name, as given to a heartbeat.
pub type TopicsView = BTreeMap<String, TopicInfo>;

/// Partitions by topic name.
pub type Assignment = BTreeMap<String, BTreeSet<i32>>;

pub use assignor::Assignor;
pub use state::durable;
pub use state::{
    ConsumerGroup, ConsumerGroupState, ConsumerMember, HeartbeatAnswer, HeartbeatRequest,
    MemberEpochIn, MemberState,
};
