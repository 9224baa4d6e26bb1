//! The broker in a cluster: its controller voter, its registration, and its view of the
//! cluster's metadata.
//!
//! Started by `Server::bind` when `controller_quorum_voters` is set, after the Kafka
//! listeners are bound (their advertised endpoints are what the broker registers):
//! 1. the [`Controller`] voter starts on this node's voter address, its directory
//!    `<data_dir>/controller/` (beside `topics/`, so the topic loader never sees it);
//! 2. a task proposes `RegisterBroker` with a fresh incarnation and the endpoints,
//!    retrying until the controller decides it (a quorum may not be up yet);
//! 3. the reconciler ([`reconcile`]) keeps the local topics in step with the image and
//!    gives each replica its role ([`roles`]): leader, or follower whose replica fetcher
//!    copies from its leader;
//! 4. a task proposes the ISR changes of the partitions this broker leads;
//! 5. the group and transaction coordinators follow the partitions of
//!    `__consumer_offsets` and `__transaction_state` this broker leads
//!    ([`coordinators`]), and producer ids come in blocks from the controller
//!    ([`producer_ids`]);
//! 6. a transaction's checks and markers reach the brokers that coordinate it or lead
//!    its partitions ([`transactions`], over [`peers`]).
//!
//! Handlers read the image through [`Cluster::image`] and change it through
//! [`Cluster::decide`]; [`view`] turns the image into Kafka's answers.

pub mod coordinators;
pub mod peers;
pub mod producer_ids;
pub mod reconcile;
pub mod roles;
pub mod share_state;
pub mod transactions;
pub mod view;

#[cfg(test)]
mod tests;

use crate::replica_fetcher::ReplicaFetchers;
use coordinators::LedCoordinators;
use headway_base::{limits, PartitionIndex};
use headway_broker::{Broker, BrokerError};
use headway_controller::metadata::Endpoint;
use headway_controller::{
    BrokerId, ClusterSettings, Command, Controller, ControllerSettings, Image, Membership, Outcome,
    Tuning,
};
use headway_protocol::kafka_protocol::ResponseError;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use view::Refusal;

/// The controller's directory inside the data directory.
pub const CONTROLLER_DIR: &str = "controller";

/// How long an answer waits for this voter to apply a decision it learnt of.
const APPLY_WAIT: Duration = Duration::from_secs(10);

/// This broker's part in the cluster.
pub struct Cluster {
    controller: Controller,
    node_id: BrokerId,
    settings: ClusterSettings,
    cluster_id: String,
    /// This start's registration (a new one at every start).
    incarnation: uuid::Uuid,
    /// Voters of the controller: every broker of the cluster.
    voters: usize,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
    /// Turned true when the broker stops: the replica fetchers end.
    stopping: watch::Sender<bool>,
    /// Connections to the other brokers for transactions' checks and markers.
    peers: peers::Peers,
    /// The share state stores of the partitions of `__share_group_state` this broker
    /// leads ([`share_state`]).
    share_stores: std::sync::OnceLock<Arc<headway_share::state_store::StateStores>>,
}

impl Cluster {
    /// Starts the controller voter, then the registration and the reconciler.
    pub async fn start(
        membership: Membership,
        settings: ClusterSettings,
        broker: &Arc<Broker>,
        endpoints: Vec<Endpoint>,
    ) -> std::io::Result<Arc<Cluster>> {
        let node_id = i32::try_from(membership.node_id)
            .map_err(|_| std::io::Error::other("node id out of range"))?;
        let cluster_id = cluster_id(&membership);
        let voters = membership.voters.len();
        let controller = Controller::start(ControllerSettings {
            node_id: membership.node_id,
            voters: membership.voters,
            dir: broker.config().data_dir.join(CONTROLLER_DIR),
            tuning: Tuning::default(),
        })
        .await
        .map_err(|e| std::io::Error::other(format!("starting the controller voter: {e}")))?;
        let incarnation = uuid::Uuid::new_v4();
        let (registered_tx, registered) = watch::channel(false);
        let (stopping, stopped) = watch::channel(false);
        let fetchers = Arc::new(ReplicaFetchers::new(node_id, Default::default(), stopped));
        let mut cluster = Cluster {
            node_id,
            settings,
            cluster_id,
            incarnation,
            voters,
            tasks: std::sync::Mutex::new(Vec::new()),
            controller,
            stopping,
            peers: peers::Peers::new(node_id, Default::default()),
            share_stores: std::sync::OnceLock::new(),
        };
        let register = Command::RegisterBroker {
            id: node_id,
            incarnation,
            endpoints,
        };
        let reconciler = reconcile::Reconciler::new(
            Arc::downgrade(broker),
            node_id,
            incarnation,
            cluster.controller.metadata(),
            fetchers,
        );
        cluster
            .tasks_mut()
            .push(tokio::spawn(reconciler.run(registered)));
        let cluster = Arc::new(cluster);
        let weak = Arc::downgrade(&cluster);
        // Spawned once the cluster is whole: the proposer ends when it cannot upgrade its
        // reference, and a reference handed out while the cluster is being built (as
        // `Arc::new_cyclic` does) cannot be upgraded yet. Spawned from inside, the task
        // could run its first round before construction ended and stop for good, leaving
        // a broker that never proposes an ISR change, so a follower that fell out never
        // came back in.
        let proposer = roles::propose_isr_changes(Arc::downgrade(broker), node_id, weak.clone());
        cluster
            .tasks
            .lock()
            .expect("cluster tasks lock")
            .push(tokio::spawn(proposer));
        let task = tokio::spawn(async move {
            register_until_decided(weak, register, registered_tx).await;
        });
        // The registration task ends on its own; it needs no handle kept.
        drop(task);
        Ok(cluster)
    }

    fn tasks_mut(&mut self) -> &mut Vec<JoinHandle<()>> {
        self.tasks.get_mut().expect("cluster tasks lock")
    }

    /// Serves the keys of the partitions of `C`'s internal topic this broker leads
    /// ([`coordinators`]) until the broker stops.
    pub fn follow_coordinators<C: LedCoordinators>(&self, broker: &Arc<Broker>, shards: Arc<C>) {
        let task = coordinators::follow_coordinators(
            Arc::downgrade(broker),
            self.node_id,
            self.controller.metadata(),
            shards,
            self.stopping.subscribe(),
        );
        let mut tasks = self.tasks.lock().expect("cluster tasks lock");
        tasks.push(tokio::spawn(task));
    }

    /// Creates `C`'s internal topic through the controller unless the image has it
    /// ([`coordinators`]).
    pub async fn ensure_coordinator_topic<C: LedCoordinators>(
        &self,
        default_partitions: i32,
    ) -> Result<(), Refusal> {
        let image = self.image();
        let partitions = C::partitions(&self.settings);
        let command = coordinators::coordinator_topic_command(
            &image,
            self.voters,
            &self.settings,
            (C::TOPIC, partitions),
            default_partitions,
        )?;
        let Some(command) = command else {
            return Ok(());
        };
        match self.decide(command).await? {
            Outcome::Refused { code, .. } if code == ResponseError::TopicAlreadyExists.code() => {
                Ok(())
            }
            Outcome::Refused { code, message } => Err((code, message)),
            _ => {
                tracing::info!(
                    topic = C::TOPIC,
                    partitions,
                    "created a coordinators' topic"
                );
                Ok(())
            }
        }
    }

    /// Serves the partitions of `__share_group_state` this broker leads with `stores`
    /// ([`share_state`]) until the broker stops.
    pub fn serve_share_state(
        &self,
        broker: &Arc<Broker>,
        stores: Arc<headway_share::state_store::StateStores>,
    ) {
        let _ = self.share_stores.set(Arc::clone(&stores));
        self.follow_coordinators(broker, stores);
    }

    /// The share state stores this broker runs.
    pub fn share_stores(&self) -> Option<&Arc<headway_share::state_store::StateStores>> {
        self.share_stores.get()
    }

    /// Keeps the groups' settings in `store` and in the coordinators those of the
    /// image ([`crate::group_configs::follow`]) until the broker stops.
    pub fn follow_group_configs(
        &self,
        store: Arc<crate::group_configs::GroupConfigStore>,
        groups: Arc<headway_group::GroupShards>,
        shares: Arc<headway_share::ShareCoordinator>,
    ) {
        let task = crate::group_configs::follow(self.controller.metadata(), store, groups, shares);
        let mut tasks = self.tasks.lock().expect("cluster tasks lock");
        tasks.push(tokio::spawn(task));
    }

    /// Makes `settings` a group's whole settings through the controller.
    pub async fn set_group_configs(
        &self,
        group_id: &str,
        settings: &crate::group_configs::Settings,
    ) -> Result<(), BrokerError> {
        let command = Command::SetGroupConfigs {
            group: group_id.to_string(),
            configs: settings.clone(),
        };
        match self.decide(command).await {
            Ok(Outcome::Refused { code, message }) | Err((code, message)) => {
                Err(BrokerError::ControllerRefused {
                    code,
                    reason: message,
                })
            }
            Ok(_) => Ok(()),
        }
    }

    /// The connections to the other brokers.
    pub fn peers(&self) -> &peers::Peers {
        &self.peers
    }

    pub fn node_id(&self) -> BrokerId {
        self.node_id
    }

    /// One id for every broker of the cluster: derived from the voters, which they all
    /// share (each broker's own data directory holds an id of its own, for a broker
    /// alone).
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    pub fn settings(&self) -> &ClusterSettings {
        &self.settings
    }

    /// The metadata as this voter applied it.
    pub fn image(&self) -> Arc<Image> {
        Arc::clone(&self.controller.metadata().borrow())
    }

    /// The controller's leader as this voter knows it; -1 when there is none.
    pub fn controller_id(&self) -> BrokerId {
        self.controller
            .leader()
            .and_then(|id| i32::try_from(id).ok())
            .unwrap_or(-1)
    }

    /// `NOT_LEADER_OR_FOLLOWER` when the image has the partition led by another broker
    /// (or by none); `None` when this broker leads it or the image does not know it.
    pub fn not_leader(&self, topic: &str, partition: i32) -> Option<BrokerError> {
        let image = self.image();
        view::led_elsewhere(&image.metadata, self.node_id, topic, partition).map(|(leader, _)| {
            BrokerError::NotLeaderOrFollower {
                topic: topic.to_string(),
                partition: PartitionIndex::new(partition),
                leader: (leader >= 0).then_some(leader),
            }
        })
    }

    /// Decides `command` through the controller and waits until this voter has applied
    /// it, so that this broker's next answers show it.
    pub async fn decide(&self, command: Command) -> Result<Outcome, Refusal> {
        let what = command.to_string();
        let decision = self.controller.propose(command).await.map_err(|e| {
            tracing::warn!(command = %what, error = %e, "controller proposal failed");
            (ResponseError::RequestTimedOut.code(), e.to_string())
        })?;
        let mut image = self.controller.metadata();
        let applied = tokio::time::timeout(
            APPLY_WAIT,
            image.wait_for(|i| i.applied_index >= decision.index),
        )
        .await;
        if applied.is_err() {
            tracing::warn!(command = %what, index = decision.index, "decided but not yet applied here");
        }
        tracing::debug!(command = %what, outcome = %decision.outcome, "decided");
        Ok(decision.outcome)
    }

    /// A controlled shutdown, before the broker closes its logs: the controller fences
    /// this broker at once (`ShutdownBroker`), which hands the partitions it leads to
    /// other in-sync replicas and takes it out of every ISR, so clients and followers
    /// move on without waiting for the session timeout. Waits for the decision at most
    /// `CONTROLLED_SHUTDOWN_WAIT_MS`; without it (no controller quorum) the broker stops
    /// all the same, and the others fence it once it is silent.
    pub async fn shut_down(&self) {
        let image = self.image();
        let registered = image
            .metadata
            .brokers
            .get(&self.node_id)
            .filter(|b| b.incarnation == self.incarnation && !b.fenced);
        let Some(me) = registered else {
            return;
        };
        let led = image
            .metadata
            .topics
            .values()
            .flat_map(|t| &t.partitions)
            .filter(|p| p.leader == self.node_id)
            .count();
        let command = Command::ShutdownBroker {
            id: self.node_id,
            epoch: me.epoch,
        };
        let wait = Duration::from_millis(limits::CONTROLLED_SHUTDOWN_WAIT_MS);
        match tokio::time::timeout(wait, self.decide(command)).await {
            Ok(Ok(Outcome::Done)) => {
                tracing::info!(
                    partitions_led = led,
                    "controlled shutdown: fenced, this broker's partitions handed over"
                )
            }
            Ok(Ok(outcome)) => {
                tracing::warn!(%outcome, "controlled shutdown refused; stopping all the same")
            }
            Ok(Err((_, reason))) => {
                tracing::warn!(%reason, "controlled shutdown not decided; stopping all the same")
            }
            Err(_) => tracing::warn!(
                wait_ms = limits::CONTROLLED_SHUTDOWN_WAIT_MS,
                "controlled shutdown not decided in time; stopping all the same"
            ),
        }
    }

    /// Stops the reconciler before the broker closes its logs. The voter runs on until
    /// the process ends: its log is synced at every append.
    pub fn stop_reconciling(&self) {
        self.stopping.send_replace(true);
        for task in self.tasks.lock().expect("cluster tasks lock").iter() {
            task.abort();
        }
    }
}

impl roles::Controls for Cluster {
    fn image(&self) -> Arc<Image> {
        Cluster::image(self)
    }

    async fn decide(&self, command: Command) -> Option<Outcome> {
        Cluster::decide(self, command).await.ok()
    }
}

/// Proposes this broker's registration until the controller decides it: a voter started
/// before a quorum of the others finds no leader at first.
async fn register_until_decided(
    cluster: std::sync::Weak<Cluster>,
    command: Command,
    registered: watch::Sender<bool>,
) {
    let mut attempts = 0u32;
    loop {
        let Some(cluster) = cluster.upgrade() else {
            return;
        };
        attempts += 1;
        match cluster.decide(command.clone()).await {
            Ok(Outcome::Registered { epoch }) => {
                tracing::info!(
                    node_id = cluster.node_id(),
                    epoch,
                    attempts,
                    "broker registered with the controller"
                );
                registered.send_replace(true);
                return;
            }
            Ok(other) => {
                tracing::error!(outcome = %other, "the controller refused this broker's registration");
                return;
            }
            Err((_, error)) => {
                tracing::info!(%error, attempts, "registration not decided yet; retrying");
            }
        }
        drop(cluster);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A cluster id shared by every broker started with the same voters: a hash of them,
/// in Kafka's form (22 characters of URL-safe base64 of 16 bytes).
fn cluster_id(membership: &Membership) -> String {
    let mut voters: Vec<String> = membership
        .voters
        .iter()
        .map(|v| format!("{}@{}", v.id, v.addr))
        .collect();
    voters.sort();
    let text = voters.join(",");
    let fnv = |seed: u64| {
        text.bytes().fold(seed, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_be_bytes());
    bytes[8..].copy_from_slice(&fnv(0x84222325_cbf29ce4).to_be_bytes());
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(22);
    let mut bits = 0u32;
    let mut acc = 0u32;
    for byte in bytes {
        acc = (acc << 8) | u32::from(byte);
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(char::from(ALPHABET[((acc >> bits) & 63) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((acc << (6 - bits)) & 63) as usize]));
    }
    out
}
