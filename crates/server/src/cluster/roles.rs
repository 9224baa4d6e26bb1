//! Each replica's role from the controller's image, and the leader's ISR changes back to
//! the controller.
//!
//! ```text
//!   image ──reconcile──> apply_partition_state ──> Partition::set_role (blocking thread)
//!                                              └─> ReplicaFetchers::follow / unfollow
//!   every ISR_CHECK_MS: each partition this broker leads ──> Partition::isr_proposal
//!        ──> AlterPartition through the controller ──> the image ──> set_role (same
//!            epoch: the ISR taken in) ── or refused ──> Partition::isr_refused
//! ```
//!
//! A follower fetches from its leader's first plaintext endpoint (the replica fetcher
//! has no TLS or SASL yet); a partition without a leader follows no one until the image
//! names one.

use crate::replica_fetcher::ReplicaFetchers;
use headway_base::{limits, Clock};
use headway_broker::partition::role::Role;
use headway_broker::{Broker, Partition};
use headway_controller::metadata::{PartitionRecord, NO_LEADER};
use headway_controller::{BrokerId, Command, Image, Metadata, Outcome};
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The role the image gives broker `me` for a partition in `state`.
pub fn role_of(me: BrokerId, state: &PartitionRecord) -> Role {
    if state.leader == me {
        Role::Leader {
            epoch: state.leader_epoch,
            partition_epoch: state.partition_epoch,
            replicas: state.replicas.clone(),
            isr: state.isr.clone(),
        }
    } else {
        Role::Follower {
            epoch: state.leader_epoch,
            partition_epoch: state.partition_epoch,
            leader: (state.leader != NO_LEADER).then_some(state.leader),
        }
    }
}

/// Where broker `id` takes replica fetches: its first plaintext endpoint.
pub fn fetch_address(meta: &Metadata, id: BrokerId) -> Option<String> {
    let broker = meta.brokers.get(&id)?;
    broker
        .endpoints
        .iter()
        .find(|e| e.security_protocol == "PLAINTEXT")
        .map(|e| format!("{}:{}", e.host, e.port))
}

/// Gives `partition` the role `state` says for broker `me`, and starts or stops copying
/// it from its leader.
pub async fn apply_partition_state(
    me: BrokerId,
    partition: &Arc<Partition>,
    state: &PartitionRecord,
    meta: &Metadata,
    fetchers: &ReplicaFetchers,
    clock: &Clock,
) {
    let role = role_of(me, state);
    let (owned, now_ms) = (Arc::clone(partition), clock.time_ms());
    let set = {
        let role = role.clone();
        tokio::task::spawn_blocking(move || owned.set_role(me, role, now_ms)).await
    };
    match set {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(topic = partition.topic(), partition = partition.index().value(),
                error = %e, "the partition could not take its role");
            return;
        }
        Err(e) => {
            tracing::error!(topic = partition.topic(), partition = partition.index().value(),
                error = %e, "setting the partition's role failed");
            return;
        }
    }
    match role {
        Role::Follower {
            leader: Some(leader),
            ..
        } => match fetch_address(meta, leader) {
            Some(address) => fetchers.follow(Arc::clone(partition), leader, &address),
            None => {
                tracing::warn!(
                    topic = partition.topic(),
                    partition = partition.index().value(),
                    leader,
                    "the leader has no plaintext endpoint to fetch from"
                );
                fetchers.unfollow(partition.topic(), partition.index());
            }
        },
        _ => fetchers.unfollow(partition.topic(), partition.index()),
    }
}

/// How often a leader looks for followers to take out of or into the ISR.
const ISR_CHECK_MS: u64 = 250;

/// What the ISR proposer needs of the cluster: its image and a way to decide a command.
pub trait Controls: Send + Sync + 'static {
    fn image(&self) -> Arc<Image>;
    /// Decides `command` through the controller; `None` when it could not be sent.
    fn decide(&self, command: Command) -> impl Future<Output = Option<Outcome>> + Send;
}

/// Proposes the ISR changes of the partitions this broker leads, until the broker or
/// the cluster is gone.
pub async fn propose_isr_changes<C: Controls>(
    broker: Weak<Broker>,
    me: BrokerId,
    cluster: Weak<C>,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(ISR_CHECK_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let lag_max_ms = limits::REPLICA_LAG_TIME_MAX_MS_DEFAULT as i64;
    loop {
        tick.tick().await;
        let (Some(broker), Some(cluster)) = (broker.upgrade(), cluster.upgrade()) else {
            return;
        };
        let Some(broker_epoch) = cluster.image().metadata.brokers.get(&me).map(|b| b.epoch) else {
            continue;
        };
        let now_ms = broker.clock().time_ms();
        let mut proposals = Vec::new();
        for topic in broker.topics() {
            for partition in topic.partitions() {
                if partition.role_epoch().is_some_and(|(_, leading)| leading) {
                    if let Some(proposal) = partition.isr_proposal(now_ms, lag_max_ms) {
                        proposals.push((Arc::clone(partition), proposal));
                    }
                }
            }
        }
        drop(broker);
        for (partition, proposal) in proposals {
            let command = Command::AlterPartition {
                topic: partition.topic().to_string(),
                partition: partition.index().value(),
                broker: me,
                broker_epoch,
                leader_epoch: proposal.leader_epoch,
                partition_epoch: proposal.partition_epoch,
                isr: proposal.isr.clone(),
            };
            match cluster.decide(command).await {
                Some(Outcome::Partition(decided)) => {
                    tracing::info!(topic = partition.topic(), partition = partition.index().value(),
                        isr = ?decided.isr, partition_epoch = decided.partition_epoch,
                        "ISR changed");
                }
                None => {
                    // No answer: the proposal may still be decided, so it keeps counting
                    // until the image shows what became of it.
                    tracing::info!(topic = partition.topic(), partition = partition.index().value(),
                        proposed = ?proposal.isr, "ISR change not answered");
                    partition.isr_refused();
                }
                Some(other) => {
                    tracing::info!(topic = partition.topic(), partition = partition.index().value(),
                        proposed = ?proposal.isr, outcome = %other, "ISR change refused");
                    // The image is applied up to the refusal: its ISR is the controller's.
                    let image = cluster.image();
                    let record = image
                        .metadata
                        .topics
                        .get(partition.topic())
                        .and_then(|t| t.partitions.get(partition.index().value() as usize));
                    match record {
                        Some(r) => partition.isr_refused_at(r.leader_epoch, &r.isr),
                        None => partition.isr_refused(),
                    }
                }
            }
        }
    }
}
