//! A replicated partition's role as plain values: what the controller assigned, and
//! what the role keeps between syncs and fetches (the leader's replica set, the
//! follower's view of its leader). `role` does the partition's steps with them.

use crate::replication::{ReplicaId, ReplicaSet};
use headway_base::Offset;

/// The role the controller gave this broker for a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Leader {
        /// The leader epoch; every batch this leader appends carries it.
        epoch: i32,
        /// The partition epoch of the controller's state the role came from (an ISR
        /// change must name it).
        partition_epoch: i32,
        replicas: Vec<ReplicaId>,
        isr: Vec<ReplicaId>,
    },
    Follower {
        epoch: i32,
        partition_epoch: i32,
        /// The leader, if the partition has one.
        leader: Option<ReplicaId>,
    },
}

impl Role {
    pub(super) fn epoch(&self) -> i32 {
        match self {
            Role::Leader { epoch, .. } | Role::Follower { epoch, .. } => *epoch,
        }
    }
}

/// The role and what it keeps, under the partition's replication mutex.
pub(super) struct Replication {
    pub(super) me: ReplicaId,
    pub(super) epoch: i32,
    pub(super) partition_epoch: i32,
    pub(super) kind: Kind,
    /// Truncations so far: a sync taken before the latest one covers a log that is
    /// gone.
    pub(super) truncations: u64,
    /// `truncations` when the running sync took its set.
    pub(super) sync_taken_at: u64,
}

pub(super) enum Kind {
    Leader(ReplicaSet),
    Follower {
        leader: Option<ReplicaId>,
        /// The leader's high watermark, as its last answer said.
        leader_high_watermark: Offset,
        /// This broker's synced end.
        synced: Offset,
    },
}

impl Replication {
    /// This broker synced its log up to `synced`: the high watermark that allows.
    pub(super) fn synced(&mut self, synced: Offset) -> Offset {
        match &mut self.kind {
            Kind::Leader(set) => {
                set.synced(synced);
                set.high_watermark()
            }
            Kind::Follower {
                leader_high_watermark,
                synced: own,
                ..
            } => {
                *own = (*own).max(synced);
                (*leader_high_watermark).min(*own)
            }
        }
    }

    /// A flusher took a sync set of the current log.
    pub(super) fn sync_taken(&mut self) {
        self.sync_taken_at = self.truncations;
    }

    /// The running sync covers the current log (no truncation since it took its set).
    pub(super) fn sync_still_counts(&self) -> bool {
        self.sync_taken_at == self.truncations
    }

    pub(super) fn leader_hint(&self) -> Option<ReplicaId> {
        match &self.kind {
            Kind::Leader(_) => Some(self.me),
            Kind::Follower { leader, .. } => *leader,
        }
    }
}
