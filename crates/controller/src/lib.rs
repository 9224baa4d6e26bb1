//! The cluster's metadata controller.
//!
//! Brokers started with `--controller-quorum-voters` form one Raft group (on openraft)
//! whose replicated state is the cluster's metadata: broker registrations, topics and
//! their partitions (replicas, ISR, leader, epochs), producer-id blocks, ACLs and SCRAM
//! credentials. The layers, bottom up:
//! - [`metadata`]: the state as plain values and the decisions that change it, no I/O;
//! - [`placement`]: where a new partition's replicas go;
//! - [`consensus`]: openraft's storage (a durable log file, the vote, snapshots), the state
//!   machine over [`metadata::Metadata`] and the controller listener between voters;
//! - [`liveness`]: the leader fences brokers it stops hearing from and unfences the ones
//!   that return;
//! - [`controller`]: one running voter as the broker uses it: start, read the metadata,
//!   propose a change;
//! - [`settings`]: the cluster's section of the broker's settings.
//!
//! A broker started without `--controller-quorum-voters` runs none of this.

pub mod consensus;
pub mod controller;
pub mod liveness;
pub mod metadata;
pub mod placement;
pub mod settings;

pub use consensus::network::Decision;
pub use consensus::state_machine::Image;
pub use consensus::Tuning;
pub use controller::{parse_voters, Controller, ControllerError, ControllerSettings, Voter};
pub use metadata::{BrokerId, Command, Metadata, Outcome};
pub use settings::{ClusterSettings, Membership};
