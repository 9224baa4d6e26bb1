//! The coordinators of a broker in a cluster: a group coordinator per partition of the
//! replicated `__consumer_offsets` this broker leads, a transaction coordinator per
//! partition of `__transaction_state`.
//!
//! - Each topic is created through the controller the first time a client looks for a
//!   coordinator of its kind (`Cluster::ensure_coordinator_topic`, the command from
//!   [`coordinator_topic_command`]), as Kafka does: compacted,
//!   `offsets_topic_num_partitions` (`transaction_state_log_num_partitions`)
//!   partitions, replicated on the smaller of 3 and the voters, and only once that many
//!   brokers are unfenced (a cluster starting up does not get an offsets topic on one
//!   broker).
//! - [`follow_coordinators`] watches the image: for each partition this broker leads
//!   (the image says so and the local replica has taken that role at that epoch), a
//!   coordinator is loaded; one whose partition went elsewhere is retired. A load
//!   first waits until the partition's high watermark reaches what its log held when
//!   this broker took over (a new leader starts its high watermark over; the records
//!   past it are the old leader's, which every in-sync replica gets), then replays the
//!   log: every commit, group and transaction state a coordinator acknowledged was on
//!   every in-sync replica, so the new one starts with them (and completes the
//!   transactions it finds prepared). Meanwhile the partition's keys answer
//!   `COORDINATOR_LOAD_IN_PROGRESS`.
//! - FindCoordinator answers the leader of the key's partition ([`coordinator_of`]).

use super::view::{self, Node, Refusal};
use headway_base::PartitionIndex;
use headway_broker::coordinator_shards::{partition_for, ToLoad};
use headway_broker::{Broker, BrokerError, Partition};
use headway_controller::{BrokerId, ClusterSettings, Command, Image};
use headway_group::GroupShards;
use headway_protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
use headway_protocol::kafka_protocol::ResponseError;
use headway_txn::{TxnShards, OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::watch;

/// How often the leaders are looked at again without a change of the image (a replica
/// takes its role a moment after the image gives it).
const LOOK_AGAIN: Duration = Duration::from_millis(200);
/// How long a load waits for the partition's high watermark before it gives up (the
/// next look asks for it again).
const LOAD_WAIT: Duration = Duration::from_secs(30);

/// The coordinators of one kind a broker runs, one per led partition of their
/// internal topic.
pub trait LedCoordinators: Send + Sync + 'static {
    /// The internal topic.
    const TOPIC: &'static str;
    /// Its partitions when the cluster creates it.
    fn partitions(settings: &ClusterSettings) -> i32;
    fn follow(&self, partitions: i32, leading: &[(i32, i32)]) -> Vec<ToLoad>;
    fn load(
        &self,
        what: ToLoad,
        log: Arc<Partition>,
    ) -> impl Future<Output = Result<bool, BrokerError>> + Send;
    fn load_failed(&self, what: ToLoad);
}

impl LedCoordinators for GroupShards {
    const TOPIC: &'static str = OFFSETS_TOPIC;
    fn partitions(settings: &ClusterSettings) -> i32 {
        settings.offsets_topic_partitions()
    }
    fn follow(&self, partitions: i32, leading: &[(i32, i32)]) -> Vec<ToLoad> {
        GroupShards::follow(self, partitions, leading)
    }
    fn load(
        &self,
        what: ToLoad,
        log: Arc<Partition>,
    ) -> impl Future<Output = Result<bool, BrokerError>> + Send {
        GroupShards::load(self, what, log)
    }
    fn load_failed(&self, what: ToLoad) {
        GroupShards::load_failed(self, what)
    }
}

impl LedCoordinators for TxnShards {
    const TOPIC: &'static str = TRANSACTION_STATE_TOPIC;
    fn partitions(settings: &ClusterSettings) -> i32 {
        settings.transaction_state_partitions()
    }
    fn follow(&self, partitions: i32, leading: &[(i32, i32)]) -> Vec<ToLoad> {
        TxnShards::follow(self, partitions, leading)
    }
    fn load(
        &self,
        what: ToLoad,
        log: Arc<Partition>,
    ) -> impl Future<Output = Result<bool, BrokerError>> + Send {
        TxnShards::load(self, what, log)
    }
    fn load_failed(&self, what: ToLoad) {
        TxnShards::load_failed(self, what)
    }
}

/// The command that creates the internal topic `topic` with `partitions` partitions;
/// `None` when the image has it. `voters` is the controller's voters (every broker).
pub fn coordinator_topic_command(
    image: &Image,
    voters: usize,
    settings: &ClusterSettings,
    (topic, partitions): (&str, i32),
    default_partitions: i32,
) -> Result<Option<Command>, Refusal> {
    if image.metadata.topics.contains_key(topic) {
        return Ok(None);
    }
    let factor = i16::try_from(voters.clamp(1, 3)).unwrap_or(3);
    let unfenced = image.metadata.unfenced_brokers().len();
    if unfenced < usize::from(factor.unsigned_abs()) {
        return Err((
            ResponseError::CoordinatorNotAvailable.code(),
            format!("{topic} waits for {factor} live brokers; {unfenced} are"),
        ));
    }
    let asked = CreatableTopic::default()
        .with_num_partitions(partitions)
        .with_replication_factor(factor);
    let assignment = view::plan_topic(&image.metadata, settings, &asked, default_partitions)?;
    let configs = BTreeMap::from([("cleanup.policy".to_string(), "compact".to_string())]);
    Ok(Some(Command::CreateTopic {
        name: topic.to_string(),
        id: uuid::Uuid::new_v4(),
        assignment,
        configs,
    }))
}

/// The broker coordinating `key` by the internal topic `topic`: the leader of the key's
/// partition.
pub fn coordinator_id(image: &Image, topic: &str, key: &str) -> Result<BrokerId, Refusal> {
    let unavailable = |why: String| (ResponseError::CoordinatorNotAvailable.code(), why);
    let partitions = &image
        .metadata
        .topics
        .get(topic)
        .ok_or_else(|| unavailable(format!("{topic} does not exist yet")))?
        .partitions;
    let count = i32::try_from(partitions.len()).unwrap_or(i32::MAX);
    let index = partition_for(key, count);
    usize::try_from(index)
        .ok()
        .and_then(|i| partitions.get(i))
        .map(|p| p.leader)
        .filter(|l| *l >= 0)
        .ok_or_else(|| unavailable(format!("{topic}/{index} has no leader")))
}

/// The broker coordinating `key` by the internal topic `topic`, on the listener named
/// `listener`.
pub fn coordinator_of(
    image: &Image,
    topic: &str,
    key: &str,
    listener: &str,
) -> Result<Node, Refusal> {
    let leader = coordinator_id(image, topic, key)?;
    let unavailable = |why: String| (ResponseError::CoordinatorNotAvailable.code(), why);
    image
        .metadata
        .brokers
        .get(&leader)
        .and_then(|b| view::endpoint(b, listener))
        .ok_or_else(|| unavailable(format!("broker {leader} has no endpoint")))
}

/// Keeps `shards` serving the partitions of their topic this broker leads, until
/// `stopping`.
pub async fn follow_coordinators<C: LedCoordinators>(
    broker: Weak<Broker>,
    node_id: BrokerId,
    mut image: watch::Receiver<Arc<Image>>,
    shards: Arc<C>,
    mut stopping: watch::Receiver<bool>,
) {
    loop {
        {
            let Some(broker) = broker.upgrade() else {
                return;
            };
            let now = Arc::clone(&image.borrow_and_update());
            let (count, leading) = led_here(&broker, &now, C::TOPIC, node_id);
            for what in shards.follow(count, &leading) {
                let partition = broker.partition(C::TOPIC, PartitionIndex::new(what.index));
                match partition {
                    Ok(partition) => {
                        tokio::spawn(load(Arc::clone(&shards), what, partition));
                    }
                    Err(_) => shards.load_failed(what),
                }
            }
        }
        tokio::select! {
            changed = image.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(LOOK_AGAIN) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
    }
}

/// The partition count of `name` and the `(index, leader epoch)` of each partition
/// this broker leads: the image says so and the local replica has taken the role at
/// that epoch.
fn led_here(
    broker: &Broker,
    image: &Image,
    name: &str,
    node_id: BrokerId,
) -> (i32, Vec<(i32, i32)>) {
    let Some(topic) = image.metadata.topics.get(name) else {
        return (0, Vec::new());
    };
    let count = i32::try_from(topic.partitions.len()).unwrap_or(i32::MAX);
    let leading = (0..count)
        .zip(&topic.partitions)
        .filter(|(_, p)| p.leader == node_id)
        .filter_map(|(index, p)| {
            let local = broker.partition(name, PartitionIndex::new(index)).ok()?;
            match local.role_epoch() {
                Some((epoch, true)) if epoch == p.leader_epoch => Some((index, epoch)),
                _ => None,
            }
        })
        .collect();
    (count, leading)
}

/// Loads the coordinator of one partition: waits until its high watermark reaches the
/// log end it had at the start, then replays it.
async fn load<C: LedCoordinators>(shards: Arc<C>, what: ToLoad, partition: Arc<Partition>) {
    let topic = C::TOPIC;
    let started = std::time::Instant::now();
    let end = match partition.log_end_offset() {
        Ok(end) => end,
        Err(e) => {
            tracing::warn!(topic, partition = what.index, error = %e, "coordinator partition unreadable");
            shards.load_failed(what);
            return;
        }
    };
    let caught_up = tokio::time::timeout(LOAD_WAIT, partition.wait_replicated(end, 1, what.epoch));
    match caught_up.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::info!(topic, partition = what.index, epoch = what.epoch, error = %e,
                "coordinator partition changed hands while loading");
            shards.load_failed(what);
            return;
        }
        Err(_) => {
            tracing::warn!(
                topic,
                partition = what.index,
                epoch = what.epoch,
                end = end.value(),
                "coordinator partition's high watermark did not reach its log end; loading again"
            );
            shards.load_failed(what);
            return;
        }
    }
    match shards.load(what, partition).await {
        Ok(serving) => tracing::info!(
            topic,
            partition = what.index,
            epoch = what.epoch,
            serving,
            ms = started.elapsed().as_millis() as u64,
            "coordinator loaded"
        ),
        Err(e) => {
            tracing::error!(topic, partition = what.index, error = %e, "loading a coordinator failed")
        }
    }
}
