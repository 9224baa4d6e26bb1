//! The controller's Raft group, on openraft: the type configuration, the durable log
//! store, the state machine over [`Metadata`](crate::metadata::Metadata) and the network
//! between voters.
//!
//! Standard Raft leader ids (one leader per term) and pre-vote are configured in
//! [`raft_config`]: a voter that was cut off does not raise the term of the others when it
//! returns.

pub mod log_store;
pub mod network;
pub mod state_machine;
pub mod types;

use std::sync::Arc;

/// The timings and log bounds of the controller group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// How often the leader reaches every voter when there is nothing to replicate.
    pub heartbeat_ms: u64,
    /// A voter that hears from no leader for a time drawn between these two starts an
    /// election (after a pre-vote round).
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// An unfenced broker the leader has not heard from for this long is fenced.
    pub session_timeout_ms: u64,
    /// A snapshot every this many entries ...
    pub snapshot_every_entries: u64,
    /// ... keeping this many entries before it for voters slightly behind.
    pub log_kept_after_snapshot: u64,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            heartbeat_ms: headway_base::limits::CONTROLLER_HEARTBEAT_MS_DEFAULT,
            election_min_ms: headway_base::limits::CONTROLLER_ELECTION_MIN_MS_DEFAULT,
            election_max_ms: headway_base::limits::CONTROLLER_ELECTION_MAX_MS_DEFAULT,
            session_timeout_ms: headway_base::limits::BROKER_SESSION_TIMEOUT_MS_DEFAULT,
            snapshot_every_entries: headway_base::limits::CONTROLLER_SNAPSHOT_EVERY_ENTRIES,
            log_kept_after_snapshot: headway_base::limits::CONTROLLER_LOG_KEPT_AFTER_SNAPSHOT,
        }
    }
}

/// The openraft settings of the controller group.
pub fn raft_config(tuning: Tuning) -> Result<Arc<openraft::Config>, openraft::ConfigError> {
    let config = openraft::Config {
        cluster_name: "headway-controller".into(),
        heartbeat_interval: tuning.heartbeat_ms,
        election_timeout_min: tuning.election_min_ms,
        election_timeout_max: tuning.election_max_ms,
        enable_pre_vote: Some(true),
        // A snapshot every few hundred entries keeps the log, and the memory it takes, small.
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(tuning.snapshot_every_entries),
        max_in_snapshot_log_to_keep: tuning.log_kept_after_snapshot,
        ..Default::default()
    };
    Ok(Arc::new(config.validate()?))
}
