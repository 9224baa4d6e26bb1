//! The group coordinators of a broker in a cluster: one per partition of the replicated
//! `__consumer_offsets` this broker leads.
//!
//! - The topic is created through the controller the first time a client looks for a
//!   group's coordinator (`Cluster::ensure_offsets_topic`, the command from
//!   [`offsets_topic_command`]), as Kafka does: compacted,
//!   `offsets_topic_num_partitions` partitions, replicated on the smaller of 3 and the
//!   voters, and only once that many brokers are unfenced (a cluster starting up does
//!   not get an offsets topic on one broker).
//! - [`follow_group_coordinators`] watches the image: for each partition this broker
//!   leads (the image says so and the local replica has taken that role at that epoch),
//!   a coordinator is loaded; one whose partition went elsewhere is retired. A load
//!   first waits until the partition's high watermark reaches what its log held when
//!   this broker took over (a new leader starts its high watermark over; the records
//!   past it are the old leader's, which every in-sync replica gets), then replays the
//!   log: every commit and group a coordinator acknowledged was on every in-sync
//!   replica, so the new one starts with them. Meanwhile the partition's groups answer
//!   `COORDINATOR_LOAD_IN_PROGRESS`.
//! - FindCoordinator answers the leader of the group's partition
//!   ([`group_coordinator`]).

use super::view::{self, Node, Refusal};
use headway_base::PartitionIndex;
use headway_broker::coordinator_shards::{partition_for, ToLoad};
use headway_broker::{Broker, Partition};
use headway_controller::{BrokerId, ClusterSettings, Command, Image};
use headway_group::GroupShards;
use headway_protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
use headway_protocol::kafka_protocol::ResponseError;
use headway_txn::OFFSETS_TOPIC;
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::watch;

/// How often the leaders are looked at again without a change of the image (a replica
/// takes its role a moment after the image gives it).
const LOOK_AGAIN: Duration = Duration::from_millis(200);
/// How long a load waits for the partition's high watermark before it gives up (the
/// next look asks for it again).
const LOAD_WAIT: Duration = Duration::from_secs(30);

/// The command that creates `__consumer_offsets`; `None` when the image has it.
/// `voters` is the controller's voters (every broker).
pub fn offsets_topic_command(
    image: &Image,
    voters: usize,
    settings: &ClusterSettings,
    default_partitions: i32,
) -> Result<Option<Command>, Refusal> {
    if image.metadata.topics.contains_key(OFFSETS_TOPIC) {
        return Ok(None);
    }
    let factor = i16::try_from(voters.clamp(1, 3)).unwrap_or(3);
    let unfenced = image.metadata.unfenced_brokers().len();
    if unfenced < usize::from(factor.unsigned_abs()) {
        return Err((
            ResponseError::CoordinatorNotAvailable.code(),
            format!("{OFFSETS_TOPIC} waits for {factor} live brokers; {unfenced} are"),
        ));
    }
    let asked = CreatableTopic::default()
        .with_num_partitions(settings.offsets_topic_partitions())
        .with_replication_factor(factor);
    let assignment = view::plan_topic(&image.metadata, settings, &asked, default_partitions)?;
    let configs = BTreeMap::from([("cleanup.policy".to_string(), "compact".to_string())]);
    Ok(Some(Command::CreateTopic {
        name: OFFSETS_TOPIC.to_string(),
        id: uuid::Uuid::new_v4(),
        assignment,
        configs,
    }))
}

/// The broker coordinating `group_id`, on the listener named `listener`: the leader of
/// its partition of `__consumer_offsets`.
pub fn group_coordinator(image: &Image, group_id: &str, listener: &str) -> Result<Node, Refusal> {
    let meta = &image.metadata;
    let unavailable = |why: String| (ResponseError::CoordinatorNotAvailable.code(), why);
    let topic = meta
        .topics
        .get(OFFSETS_TOPIC)
        .ok_or_else(|| unavailable(format!("{OFFSETS_TOPIC} does not exist yet")))?;
    let count = i32::try_from(topic.partitions.len()).unwrap_or(i32::MAX);
    let index = partition_for(group_id, count);
    let leader = usize::try_from(index)
        .ok()
        .and_then(|i| topic.partitions.get(i))
        .map(|p| p.leader)
        .filter(|l| *l >= 0)
        .ok_or_else(|| unavailable(format!("{OFFSETS_TOPIC}/{index} has no leader")))?;
    meta.brokers
        .get(&leader)
        .and_then(|b| view::endpoint(b, listener))
        .ok_or_else(|| unavailable(format!("broker {leader} has no endpoint")))
}

/// Keeps `groups` serving the partitions of `__consumer_offsets` this broker leads,
/// until `stopping`.
pub async fn follow_group_coordinators(
    broker: Weak<Broker>,
    node_id: BrokerId,
    mut image: watch::Receiver<Arc<Image>>,
    groups: Arc<GroupShards>,
    mut stopping: watch::Receiver<bool>,
) {
    loop {
        {
            let Some(broker) = broker.upgrade() else {
                return;
            };
            let now = Arc::clone(&image.borrow_and_update());
            let (count, leading) = led_here(&broker, &now, node_id);
            for what in groups.follow(count, &leading) {
                let partition = broker.partition(OFFSETS_TOPIC, PartitionIndex::new(what.index));
                match partition {
                    Ok(partition) => {
                        tokio::spawn(load(Arc::clone(&groups), what, partition));
                    }
                    Err(_) => groups.load_failed(what),
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

/// The partition count of `__consumer_offsets` and the `(index, leader epoch)` of each
/// partition this broker leads: the image says so and the local replica has taken the
/// role at that epoch.
fn led_here(broker: &Broker, image: &Image, node_id: BrokerId) -> (i32, Vec<(i32, i32)>) {
    let Some(topic) = image.metadata.topics.get(OFFSETS_TOPIC) else {
        return (0, Vec::new());
    };
    let count = i32::try_from(topic.partitions.len()).unwrap_or(i32::MAX);
    let leading = (0..count)
        .zip(&topic.partitions)
        .filter(|(_, p)| p.leader == node_id)
        .filter_map(|(index, p)| {
            let local = broker
                .partition(OFFSETS_TOPIC, PartitionIndex::new(index))
                .ok()?;
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
async fn load(groups: Arc<GroupShards>, what: ToLoad, partition: Arc<Partition>) {
    let started = std::time::Instant::now();
    let end = match partition.log_end_offset() {
        Ok(end) => end,
        Err(e) => {
            tracing::warn!(partition = what.index, error = %e, "offsets partition unreadable");
            groups.load_failed(what);
            return;
        }
    };
    let caught_up = tokio::time::timeout(LOAD_WAIT, partition.wait_replicated(end, 1, what.epoch));
    match caught_up.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::info!(partition = what.index, epoch = what.epoch, error = %e,
                "offsets partition changed hands while loading");
            groups.load_failed(what);
            return;
        }
        Err(_) => {
            tracing::warn!(
                partition = what.index,
                epoch = what.epoch,
                end = end.value(),
                "offsets partition's high watermark did not reach its log end; loading again"
            );
            groups.load_failed(what);
            return;
        }
    }
    match groups.load(what, partition).await {
        Ok(serving) => tracing::info!(
            partition = what.index,
            epoch = what.epoch,
            serving,
            ms = started.elapsed().as_millis() as u64,
            "group coordinator loaded"
        ),
        Err(e) => {
            tracing::error!(partition = what.index, error = %e, "loading a group coordinator failed")
        }
    }
}
