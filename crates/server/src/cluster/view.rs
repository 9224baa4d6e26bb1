//! The controller's metadata as Kafka's answers: plain functions of a [`Metadata`], no
//! I/O, so the tests drive them with a hand-made image (`tests.rs`).
//!
//! - Metadata and DescribeCluster: the registered, unfenced brokers with the endpoint of
//!   the listener the request came on, and each topic's partitions as the image holds
//!   them (no leader: `LEADER_NOT_AVAILABLE`; fenced replicas are offline).
//! - CreateTopics and CreatePartitions: the replica assignment to propose, from a manual
//!   assignment or from `headway_controller::placement`.
//! - The leader of a partition, for the `NOT_LEADER_OR_FOLLOWER` answers and their hints.

use headway_controller::metadata::{BrokerRecord, PartitionRecord, TopicRecord, NO_LEADER};
use headway_controller::placement::place;
use headway_controller::{BrokerId, ClusterSettings, Metadata};
use headway_protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
use headway_protocol::kafka_protocol::messages::metadata_response::{
    MetadataResponsePartition, MetadataResponseTopic,
};
use headway_protocol::kafka_protocol::messages::{self, TopicName};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;

/// "Authorized operations not requested", as Kafka encodes it.
const OPERATIONS_OMITTED: i32 = i32::MIN;

/// A Kafka error code and its message.
pub type Refusal = (i16, String);

/// Where clients reach a broker on one listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub id: BrokerId,
    pub host: String,
    pub port: i32,
}

/// `broker`'s endpoint on the listener named `listener`; its first one when it has none
/// of that name (brokers of one cluster normally name their listeners alike).
pub fn endpoint(broker: &BrokerRecord, listener: &str) -> Option<Node> {
    let found = broker
        .endpoints
        .iter()
        .find(|e| e.listener == listener)
        .or_else(|| broker.endpoints.first())?;
    Some(Node {
        id: broker.id,
        host: found.host.clone(),
        port: i32::from(found.port),
    })
}

/// The registered, unfenced brokers, by id, as clients of `listener` reach them.
pub fn live_nodes(meta: &Metadata, listener: &str) -> Vec<Node> {
    meta.brokers
        .values()
        .filter(|b| !b.fenced)
        .filter_map(|b| endpoint(b, listener))
        .collect()
}

/// The registered brokers among `ids`, fenced or not (a leader hint names one).
pub fn nodes_of(
    meta: &Metadata,
    ids: impl IntoIterator<Item = BrokerId>,
    listener: &str,
) -> Vec<Node> {
    let mut ids: Vec<BrokerId> = ids.into_iter().collect();
    ids.sort_unstable();
    ids.dedup();
    ids.iter()
        .filter_map(|id| meta.brokers.get(id))
        .filter_map(|b| endpoint(b, listener))
        .collect()
}

fn broker_ids(ids: &[BrokerId]) -> Vec<messages::BrokerId> {
    ids.iter().copied().map(messages::BrokerId).collect()
}

/// One partition as Metadata answers it.
pub fn partition_metadata(
    meta: &Metadata,
    index: i32,
    p: &PartitionRecord,
) -> MetadataResponsePartition {
    let offline: Vec<BrokerId> = p
        .replicas
        .iter()
        .copied()
        .filter(|r| meta.brokers.get(r).is_none_or(|b| b.fenced))
        .collect();
    let error = match p.leader {
        NO_LEADER => ResponseError::LeaderNotAvailable.code(),
        _ => 0,
    };
    MetadataResponsePartition::default()
        .with_error_code(error)
        .with_partition_index(index)
        .with_leader_id(messages::BrokerId(p.leader))
        .with_leader_epoch(p.leader_epoch)
        .with_replica_nodes(broker_ids(&p.replicas))
        .with_isr_nodes(broker_ids(&p.isr))
        .with_offline_replicas(broker_ids(&offline))
}

/// One topic as Metadata answers it: its id and every partition.
pub fn topic_metadata(meta: &Metadata, name: &str, topic: &TopicRecord) -> MetadataResponseTopic {
    let partitions = topic
        .partitions
        .iter()
        .enumerate()
        .map(|(i, p)| partition_metadata(meta, i32::try_from(i).unwrap_or(i32::MAX), p))
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(name.to_string()))))
        .with_topic_id(topic.id)
        .with_is_internal(headway_txn::is_coordinators_topic(name))
        .with_partitions(partitions)
        .with_topic_authorized_operations(OPERATIONS_OMITTED)
}

/// The topic named `name`, or with id `id`.
pub fn find_topic<'a>(
    meta: &'a Metadata,
    name: Option<&str>,
    id: uuid::Uuid,
) -> Option<(&'a str, &'a TopicRecord)> {
    match name {
        Some(name) => meta
            .topics
            .get_key_value(name)
            .map(|(n, t)| (n.as_str(), t)),
        None => meta
            .topics
            .iter()
            .find(|(_, t)| t.id == id)
            .map(|(n, t)| (n.as_str(), t)),
    }
}

/// The partition's leader and leader epoch when `node` does not lead it; `None` when it
/// does, or when the image has no such partition (the local answer stands then).
pub fn led_elsewhere(
    meta: &Metadata,
    node: BrokerId,
    topic: &str,
    partition: i32,
) -> Option<(BrokerId, i32)> {
    let p = meta.partition(topic, partition)?;
    (p.leader != node).then_some((p.leader, p.leader_epoch))
}

/// NOT_LEADER_OR_FOLLOWER, as Kafka numbers it.
const NOT_LEADER_OR_FOLLOWER: i16 = 6;

/// KIP-951's hints in a produce answer (v10+): each partition refused with
/// `NOT_LEADER_OR_FOLLOWER` names its current leader and epoch, and the answer carries
/// the endpoints of those leaders, so the client need not ask Metadata first.
pub fn produce_hints(meta: &Metadata, response: &mut messages::ProduceResponse, listener: &str) {
    let mut leaders = Vec::new();
    for topic in &mut response.responses {
        for p in &mut topic.partition_responses {
            if p.error_code != NOT_LEADER_OR_FOLLOWER {
                continue;
            }
            if let Some(record) = meta.partition(&topic.name, p.index) {
                p.current_leader = messages::produce_response::LeaderIdAndEpoch::default()
                    .with_leader_id(messages::BrokerId(record.leader))
                    .with_leader_epoch(record.leader_epoch);
                leaders.push(record.leader);
            }
        }
    }
    response.node_endpoints = nodes_of(meta, leaders, listener)
        .into_iter()
        .map(|n| {
            messages::produce_response::NodeEndpoint::default()
                .with_node_id(messages::BrokerId(n.id))
                .with_host(StrBytes::from_string(n.host))
                .with_port(n.port)
        })
        .collect();
}

/// KIP-951's hints in a fetch answer: the current leader of each partition refused with
/// `NOT_LEADER_OR_FOLLOWER` (v12+), and those leaders' endpoints (v16+).
pub fn fetch_hints(
    meta: &Metadata,
    response: &mut messages::FetchResponse,
    listener: &str,
    version: i16,
) {
    if version < 12 {
        return;
    }
    let mut leaders = Vec::new();
    for topic in &mut response.responses {
        let name = match version >= 13 {
            true => find_topic(meta, None, topic.topic_id).map(|(n, _)| n.to_string()),
            false => Some(topic.topic.to_string()),
        };
        let Some(name) = name else { continue };
        for p in &mut topic.partitions {
            if p.error_code != NOT_LEADER_OR_FOLLOWER {
                continue;
            }
            if let Some(record) = meta.partition(&name, p.partition_index) {
                p.current_leader = messages::fetch_response::LeaderIdAndEpoch::default()
                    .with_leader_id(messages::BrokerId(record.leader))
                    .with_leader_epoch(record.leader_epoch);
                leaders.push(record.leader);
            }
        }
    }
    if version >= 16 {
        response.node_endpoints = nodes_of(meta, leaders, listener)
            .into_iter()
            .map(|n| {
                messages::fetch_response::NodeEndpoint::default()
                    .with_node_id(messages::BrokerId(n.id))
                    .with_host(StrBytes::from_string(n.host))
                    .with_port(n.port)
            })
            .collect();
    }
}

/// The replication factor a CreateTopics entry asks for, -1 resolved.
pub fn replication_factor(meta: &Metadata, settings: &ClusterSettings, asked: i16) -> i16 {
    match asked {
        -1 => settings.replication_factor(meta.brokers.len()),
        n => n,
    }
}

/// The assignment to propose for a new topic: the manual one, checked as Kafka checks
/// one (no partition count or replication factor beside it, partitions numbered from
/// 0 without gaps), or placed on the unfenced brokers. `default_partitions` resolves
/// a partition count of -1.
pub fn plan_topic(
    meta: &Metadata,
    settings: &ClusterSettings,
    topic: &CreatableTopic,
    default_partitions: i32,
) -> Result<Vec<Vec<BrokerId>>, Refusal> {
    if !topic.assignments.is_empty() {
        if topic.num_partitions != -1 || topic.replication_factor != -1 {
            return Err((
                ResponseError::InvalidRequest.code(),
                "a manual replica assignment comes without a partition count or replication factor"
                    .into(),
            ));
        }
        let count = topic.assignments.len();
        let mut assignment: Vec<Option<Vec<BrokerId>>> = vec![None; count];
        for a in &topic.assignments {
            let slot = usize::try_from(a.partition_index)
                .ok()
                .filter(|&i| i < count && assignment[i].is_none())
                .ok_or_else(|| {
                    (
                        ResponseError::InvalidReplicaAssignment.code(),
                        format!(
                            "partition {} is not one of 0..{count}, or is assigned twice",
                            a.partition_index
                        ),
                    )
                })?;
            assignment[slot] = Some(a.broker_ids.iter().map(|b| b.0).collect());
        }
        return Ok(assignment.into_iter().flatten().collect());
    }
    let partitions = match topic.num_partitions {
        -1 => default_partitions,
        n => n,
    };
    let factor = replication_factor(meta, settings, topic.replication_factor);
    place(
        &meta.unfenced_brokers(),
        0,
        partitions,
        factor,
        meta.topics.len(),
    )
    .map_err(|e| (e.code, e.message))
}

/// The replicas of the partitions CreatePartitions adds to `name` to make `count`: the
/// manual assignment, or placed like the topic's first ones.
pub fn plan_new_partitions(
    meta: &Metadata,
    name: &str,
    count: i32,
    manual: Option<Vec<Vec<BrokerId>>>,
) -> Result<Vec<Vec<BrokerId>>, Refusal> {
    let Some(topic) = meta.topics.get(name) else {
        return Err((
            ResponseError::UnknownTopicOrPartition.code(),
            format!("no topic {name:?}"),
        ));
    };
    let current = i32::try_from(topic.partitions.len()).unwrap_or(i32::MAX);
    if count <= current {
        return Err((
            ResponseError::InvalidPartitions.code(),
            format!("topic {name:?} has {current} partitions; {count} does not add any"),
        ));
    }
    if let Some(manual) = manual {
        if i32::try_from(manual.len()).ok() != Some(count - current) {
            return Err((
                ResponseError::InvalidReplicaAssignment.code(),
                format!(
                    "{} assignments for {} new partitions",
                    manual.len(),
                    count - current
                ),
            ));
        }
        return Ok(manual);
    }
    let factor = topic
        .partitions
        .first()
        .map_or(1, |p| i16::try_from(p.replicas.len()).unwrap_or(i16::MAX));
    let start = meta
        .topics
        .keys()
        .position(|n| n == name)
        .unwrap_or_default();
    place(
        &meta.unfenced_brokers(),
        current,
        count - current,
        factor,
        start,
    )
    .map_err(|e| (e.code, e.message))
}
