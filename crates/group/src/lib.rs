//! Consumer groups: the classic group coordinator and committed offsets.
//!
//! - [`state`]: the group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//!   generations, static membership, session and rebalance timeouts) as plain code over
//!   values, driven by explicit times, tested without sockets or clocks.
//! - [`requests`]: JoinGroup and SyncGroup as plain values, served by both kinds of group.
//! - [`consumer`]: groups of the consumer protocol (KIP-848), their assignors, and
//!   their durable form ([`consumer::durable`]).
//! - [`GenerationId`]: a group's generation, `None` where the wire says -1.
//! - [`MigrationPolicy`]: which online conversions between the two kinds of group are
//!   served (the conversions are `state::convert`).
//! - [`offsets`]: the record format of committed offsets in the broker's own log.
//! - [`GroupCoordinator`]: the state behind a mutex, a ticker for timeouts, and the
//!   offsets log: a commit is answered once its record is durable, and the log is
//!   replayed at start-up, so committed offsets survive restarts and crashes. So do
//!   consumer-protocol groups: a heartbeat is answered once what it changed is durable.
//! - [`GroupShards`]: which coordinator serves a group: the one of a broker alone, or
//!   in a cluster the one of the `__consumer_offsets` partition this broker leads.
//! - [`probe`]: the groups' committed offsets and lag on `/metrics`.
//! - [`GroupSettings`]: the coordinator's section of the broker's settings.

pub mod consumer;
mod coordinator;
mod error;
mod generation;
mod migration;
pub mod offsets;
pub mod probe;
pub mod requests;
mod settings;
mod shards;
pub mod state;

pub use consumer::TopicsSource;
pub use coordinator::{CommitEntry, GroupCoordinator, GroupSummary, MemberSummary, NO_EPOCH};
pub use error::GroupError;
pub use generation::GenerationId;
pub use migration::MigrationPolicy;
pub use requests::{JoinRequest, JoinResult, JoinedMember, SyncRequest, SyncResult};
pub use settings::GroupSettings;
pub use shards::GroupShards;
pub use state::{CommittedOffset, ConsumerOverrides, GroupConfig, GroupState, OffsetCommit};
