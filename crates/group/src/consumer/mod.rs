//! Consumer groups of the broker-driven protocol (KIP-848: ConsumerGroupHeartbeat).
//!
//! - [`state`]: groups, members, epochs and incremental reconciliation as plain code
//!   over values; every step takes `now_ms` and the broker's topics as arguments.
//! - [`assignor`]: the server-side assignors, `uniform` and `range`.
//! - [`classic`]: classic members of a consumer group (online conversion).
//! - [`durable`]: the groups' records in the offsets log, and their recovery.
//! - [`topics`]: the broker's topics and assignments as the steps see them.
//!
//! Partitions are named by topic name inside; the wire's topic ids are converted by
//! the handlers with the [`TopicsView`] they pass in.

pub mod assignor;
pub mod classic;
pub mod state;
pub mod topics;

pub use assignor::Assignor;
pub use state::durable;
pub use state::{
    ConsumerGroup, ConsumerGroupState, ConsumerMember, HeartbeatAnswer, HeartbeatRequest,
    MemberEpochIn, MemberState,
};
pub use topics::{Assignment, TopicInfo, TopicsSource, TopicsView};
