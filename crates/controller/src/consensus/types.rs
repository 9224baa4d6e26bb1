//! The controller group's openraft type configuration and the aliases the other modules
//! use.

use crate::metadata::{Command, Outcome};

openraft::declare_raft_types!(
    /// The controller group's types: commands in, outcomes out, voters numbered by node id
    /// and reached at their controller listener.
    pub Types:
        D = Command,
        R = Outcome,
        NodeId = u64,
        Node = openraft::BasicNode,
        LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>,
);

pub type Entry = <Types as openraft::RaftTypeConfig>::Entry;
pub type LogId = openraft::alias::LogIdOf<Types>;
pub type Vote = openraft::alias::VoteOf<Types>;
