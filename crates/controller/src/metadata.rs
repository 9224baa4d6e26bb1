//! The cluster's metadata as plain values, and the decisions that change it.
//!
//! [`Metadata`] is the controller's state machine: broker registrations, topics with their
//! partitions (replicas, ISR, leader, epochs), the next producer-id block, ACLs, SCRAM
//! credentials and groups' own settings (Kafka's GROUP config resources). [`Metadata::apply`] decides one [`Command`] at the log index that carries
//! it and answers an [`Outcome`]; it does no I/O and reads no clock, so every voter that
//! applies the same log reaches the same state, and the tests drive it directly
//! (`metadata/tests.rs`).
//!
//! The rules follow Kafka's controller:
//! - A broker registers fenced; its epoch is the log index of its registration. A new
//!   incarnation replaces the old registration as a restart does.
//! - Fencing a broker takes it out of every ISR it is in, except where it is the last member
//!   (no unclean election: such a partition has no leader until that broker returns), and
//!   moves the leadership of its partitions to the first other replica in the ISR.
//! - Unfencing a broker gives it back the leadership of partitions left without a leader
//!   whose ISR holds it. It rejoins other ISRs through its leader (`AlterPartition`).
//! - Every change of a partition raises its partition epoch; a change of leader raises the
//!   leader epoch too.
//! - Commands may be delivered twice (a proposal retried after a timeout or a leader
//!   change), so each answers the same the second time: registration by incarnation,
//!   topic creation and deletion by topic id, new partitions by the total they make, an
//!   ISR change by the partition epoch it was made at; fencing, unfencing, ACL and
//!   credential upserts and a group's settings are the same applied twice. (A credential deleted twice answers
//!   `RESOURCE_NOT_FOUND` the second time.)
//! - New partitions need at least one unfenced replica, which leads them.

use kafka_protocol::ResponseError;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use uuid::Uuid;

/// A broker's id (`--node-id`), as Kafka numbers brokers.
pub type BrokerId = i32;

/// The leader of a partition that has none (every ISR member is fenced).
pub const NO_LEADER: BrokerId = -1;

/// The most producer ids one allocation hands out.
pub const PRODUCER_ID_BLOCK_MAX: i32 = 1_000_000;

/// One listener a broker serves clients on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// The listener's name (`PLAINTEXT`, `SASL_SSL`, or a name from the listener map).
    pub listener: String,
    pub host: String,
    pub port: u16,
    /// `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`.
    pub security_protocol: String,
}

/// A registered broker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRecord {
    pub id: BrokerId,
    /// Chosen by the broker at each start: a new incarnation is a restart.
    pub incarnation: Uuid,
    pub endpoints: Vec<Endpoint>,
    /// The log index of this registration; requests from an older registration are stale.
    pub epoch: i64,
    /// A fenced broker leads nothing and is in no ISR it could be removed from.
    pub fenced: bool,
    /// The broker asked to shut down (a controlled shutdown): it stays fenced, even
    /// while it is still heard from, until it registers again.
    #[serde(default)]
    pub shutting_down: bool,
}

/// One partition's replicas and their state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    /// The assigned replicas; the first is the preferred leader.
    pub replicas: Vec<BrokerId>,
    /// The in-sync replicas: the ones whose durable log reaches the high watermark.
    pub isr: Vec<BrokerId>,
    /// [`NO_LEADER`] when no ISR member is available.
    pub leader: BrokerId,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
}

/// A topic: its id, its settings as set at creation, its partitions by index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    pub id: Uuid,
    pub configs: BTreeMap<String, String>,
    pub partitions: Vec<PartitionRecord>,
}

/// One ACL binding, in Kafka's terms (the numbers are the wire enums).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AclRecord {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission: i8,
}

/// A SCRAM credential as the broker stores it (never the password).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramRecord {
    pub user: String,
    /// `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub mechanism: String,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

/// The cluster's metadata: what every voter's state machine holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    pub brokers: BTreeMap<BrokerId, BrokerRecord>,
    pub topics: BTreeMap<String, TopicRecord>,
    /// The first producer id of the next block handed out.
    pub next_producer_id: i64,
    pub acls: BTreeSet<AclRecord>,
    /// By user, then mechanism.
    pub scram: BTreeMap<String, BTreeMap<String, ScramRecord>>,
    /// Groups' own settings (GROUP config resources), by group id, then Kafka name;
    /// checked by the broker that proposed them. A group without settings is absent.
    #[serde(default)]
    pub group_configs: BTreeMap<String, BTreeMap<String, String>>,
}

/// A change to the metadata, as proposed to the controller and written to its log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// A broker starts (or restarts, with a new incarnation).
    RegisterBroker {
        id: BrokerId,
        incarnation: Uuid,
        endpoints: Vec<Endpoint>,
    },
    /// The broker stopped heartbeating, or shut down.
    FenceBroker {
        id: BrokerId,
        epoch: i64,
    },
    /// The broker is shutting down (a controlled shutdown): it is fenced at once, so its
    /// partitions are led by other in-sync replicas before it stops, and stays fenced
    /// until it registers again.
    ShutdownBroker {
        id: BrokerId,
        epoch: i64,
    },
    /// The broker caught up with the metadata and heartbeats.
    UnfenceBroker {
        id: BrokerId,
        epoch: i64,
    },
    CreateTopic {
        name: String,
        id: Uuid,
        /// The replicas of each partition, by index; the first of each is its preferred leader.
        assignment: Vec<Vec<BrokerId>>,
        configs: BTreeMap<String, String>,
    },
    /// Deletes the topic `name` if it is still the one with `id` (a retry, or a topic
    /// created again under the name since, changes nothing).
    DeleteTopic {
        name: String,
        id: Uuid,
    },
    /// Partitions appended to a topic, which then has `total` (a retry changes nothing).
    CreatePartitions {
        name: String,
        assignment: Vec<Vec<BrokerId>>,
        total: i32,
    },
    /// A partition's leader changes its ISR (Kafka's AlterPartition).
    AlterPartition {
        topic: String,
        partition: i32,
        /// The leader asking, at its registration epoch.
        broker: BrokerId,
        broker_epoch: i64,
        /// The partition state the leader saw.
        leader_epoch: i32,
        partition_epoch: i32,
        isr: Vec<BrokerId>,
    },
    /// Give each partition back to its preferred leader where that one is in the ISR and
    /// unfenced.
    ElectPreferredLeaders,
    /// A block of producer ids for one broker to hand out.
    AllocateProducerIds {
        broker: BrokerId,
        broker_epoch: i64,
        count: i32,
    },
    CreateAcls {
        acls: Vec<AclRecord>,
    },
    DeleteAcls {
        acls: Vec<AclRecord>,
    },
    UpsertScram {
        credential: ScramRecord,
    },
    DeleteScram {
        user: String,
        mechanism: String,
    },
    /// A group's settings become `configs` (none: the group has no settings of its own).
    SetGroupConfigs {
        group: String,
        configs: BTreeMap<String, String>,
    },
}

/// What applying a command answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Done,
    /// The broker's epoch after registration.
    Registered {
        epoch: i64,
    },
    /// The partition as it now stands.
    Partition(PartitionRecord),
    /// Producer ids `first .. first + count` belong to the asking broker.
    ProducerIds {
        first: i64,
        count: i32,
    },
    /// The change was refused with this Kafka error code; nothing changed.
    Refused {
        code: i16,
        message: String,
    },
}

/// Log lines name a command by its kind and subject, not its whole content.
impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::RegisterBroker { id, .. } => write!(f, "register broker {id}"),
            Command::FenceBroker { id, .. } => write!(f, "fence broker {id}"),
            Command::ShutdownBroker { id, .. } => write!(f, "shut down broker {id}"),
            Command::UnfenceBroker { id, .. } => write!(f, "unfence broker {id}"),
            Command::CreateTopic { name, .. } => write!(f, "create topic {name}"),
            Command::DeleteTopic { name, .. } => write!(f, "delete topic {name}"),
            Command::CreatePartitions { name, .. } => write!(f, "create partitions of {name}"),
            Command::AlterPartition {
                topic, partition, ..
            } => write!(f, "alter partition {topic}-{partition}"),
            Command::ElectPreferredLeaders => write!(f, "elect preferred leaders"),
            Command::AllocateProducerIds { broker, .. } => {
                write!(f, "allocate producer ids to broker {broker}")
            }
            Command::CreateAcls { acls } => write!(f, "create {} ACLs", acls.len()),
            Command::DeleteAcls { acls } => write!(f, "delete {} ACLs", acls.len()),
            Command::UpsertScram { credential } => {
                write!(
                    f,
                    "set {} credential of {}",
                    credential.mechanism, credential.user
                )
            }
            Command::DeleteScram { user, mechanism } => {
                write!(f, "delete {mechanism} credential of {user}")
            }
            Command::SetGroupConfigs { group, configs } => {
                write!(f, "set {} configs of group {group}", configs.len())
            }
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Done => write!(f, "done"),
            Outcome::Registered { epoch } => write!(f, "registered at epoch {epoch}"),
            Outcome::Partition(p) => write!(
                f,
                "leader {} epoch {} isr {:?} partition epoch {}",
                p.leader, p.leader_epoch, p.isr, p.partition_epoch
            ),
            Outcome::ProducerIds { first, count } => {
                write!(f, "producer ids {first}..{}", first + i64::from(*count))
            }
            Outcome::Refused { code, message } => write!(f, "refused ({code}): {message}"),
        }
    }
}

impl Outcome {
    fn refused(error: ResponseError, message: impl Into<String>) -> Outcome {
        Outcome::Refused {
            code: error.code(),
            message: message.into(),
        }
    }
}

impl Metadata {
    /// Decides `command`, written at log `index`, and answers what happened.
    pub fn apply(&mut self, index: u64, command: &Command) -> Outcome {
        match command {
            Command::RegisterBroker {
                id,
                incarnation,
                endpoints,
            } => self.register_broker(index, *id, *incarnation, endpoints),
            Command::FenceBroker { id, epoch } => match self.current_broker(*id, *epoch) {
                Err(refused) => refused,
                Ok(_) => {
                    self.fence(*id);
                    Outcome::Done
                }
            },
            Command::ShutdownBroker { id, epoch } => match self.current_broker(*id, *epoch) {
                Err(refused) => refused,
                Ok(_) => {
                    if let Some(broker) = self.brokers.get_mut(id) {
                        broker.shutting_down = true;
                    }
                    self.fence(*id);
                    Outcome::Done
                }
            },
            Command::UnfenceBroker { id, epoch } => match self.current_broker(*id, *epoch) {
                Err(refused) => refused,
                Ok(broker) if broker.shutting_down => Outcome::refused(
                    ResponseError::BrokerIdNotRegistered,
                    format!("broker {id} is shutting down; it registers again to return"),
                ),
                Ok(_) => {
                    self.unfence(*id);
                    Outcome::Done
                }
            },
            Command::CreateTopic {
                name,
                id,
                assignment,
                configs,
            } => self.create_topic(name, *id, assignment, configs),
            Command::DeleteTopic { name, id } => {
                if self.topics.get(name).is_some_and(|t| t.id == *id) {
                    self.topics.remove(name);
                }
                Outcome::Done
            }
            Command::CreatePartitions {
                name,
                assignment,
                total,
            } => self.create_partitions(name, assignment, *total),
            Command::AlterPartition {
                topic,
                partition,
                broker,
                broker_epoch,
                leader_epoch,
                partition_epoch,
                isr,
            } => self.alter_partition(
                topic,
                *partition,
                (*broker, *broker_epoch),
                (*leader_epoch, *partition_epoch),
                isr,
            ),
            Command::ElectPreferredLeaders => {
                self.elect_preferred_leaders();
                Outcome::Done
            }
            Command::AllocateProducerIds {
                broker,
                broker_epoch,
                count,
            } => {
                if let Err(refused) = self.current_broker(*broker, *broker_epoch) {
                    return refused;
                }
                if !(1..=PRODUCER_ID_BLOCK_MAX).contains(count) {
                    return Outcome::refused(
                        ResponseError::InvalidRequest,
                        format!("a producer-id block holds 1 to {PRODUCER_ID_BLOCK_MAX} ids, not {count}"),
                    );
                }
                let first = self.next_producer_id;
                self.next_producer_id += i64::from(*count);
                Outcome::ProducerIds {
                    first,
                    count: *count,
                }
            }
            Command::CreateAcls { acls } => {
                self.acls.extend(acls.iter().cloned());
                Outcome::Done
            }
            Command::DeleteAcls { acls } => {
                for acl in acls {
                    self.acls.remove(acl);
                }
                Outcome::Done
            }
            Command::UpsertScram { credential } => {
                self.scram
                    .entry(credential.user.clone())
                    .or_default()
                    .insert(credential.mechanism.clone(), credential.clone());
                Outcome::Done
            }
            Command::DeleteScram { user, mechanism } => {
                let removed = self
                    .scram
                    .get_mut(user)
                    .and_then(|by_mechanism| by_mechanism.remove(mechanism));
                if self.scram.get(user).is_some_and(BTreeMap::is_empty) {
                    self.scram.remove(user);
                }
                match removed {
                    Some(_) => Outcome::Done,
                    None => Outcome::refused(
                        ResponseError::ResourceNotFound,
                        format!("no {mechanism} credential for {user:?}"),
                    ),
                }
            }
            Command::SetGroupConfigs { group, configs } => {
                if configs.is_empty() {
                    self.group_configs.remove(group);
                } else {
                    self.group_configs.insert(group.clone(), configs.clone());
                }
                Outcome::Done
            }
        }
    }

    /// The brokers that are registered and not fenced, by id.
    pub fn unfenced_brokers(&self) -> Vec<BrokerId> {
        self.brokers
            .values()
            .filter(|broker| !broker.fenced)
            .map(|broker| broker.id)
            .collect()
    }

    /// The partition `topic`/`partition`, if it exists.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionRecord> {
        let index = usize::try_from(partition).ok()?;
        self.topics.get(topic)?.partitions.get(index)
    }

    fn register_broker(
        &mut self,
        index: u64,
        id: BrokerId,
        incarnation: Uuid,
        endpoints: &[Endpoint],
    ) -> Outcome {
        if id < 0 {
            return Outcome::refused(
                ResponseError::InvalidRequest,
                format!("broker id {id} is negative"),
            );
        }
        if let Some(existing) = self.brokers.get(&id) {
            if existing.incarnation == incarnation {
                return Outcome::Registered {
                    epoch: existing.epoch,
                };
            }
            // A restart: the old incarnation leads nothing from now on.
            self.fence(id);
        }
        let epoch = i64::try_from(index).unwrap_or(i64::MAX);
        self.brokers.insert(
            id,
            BrokerRecord {
                id,
                incarnation,
                endpoints: endpoints.to_vec(),
                epoch,
                fenced: true,
                shutting_down: false,
            },
        );
        Outcome::Registered { epoch }
    }

    fn current_broker(&self, id: BrokerId, epoch: i64) -> Result<&BrokerRecord, Outcome> {
        match self.brokers.get(&id) {
            None => Err(Outcome::refused(
                ResponseError::BrokerIdNotRegistered,
                format!("broker {id} is not registered"),
            )),
            Some(broker) if broker.epoch != epoch => Err(Outcome::refused(
                ResponseError::StaleBrokerEpoch,
                format!(
                    "broker {id} is registered at epoch {}, not {epoch}",
                    broker.epoch
                ),
            )),
            Some(broker) => Ok(broker),
        }
    }

    fn is_unfenced(&self, id: BrokerId) -> bool {
        self.brokers.get(&id).is_some_and(|broker| !broker.fenced)
    }

    fn fence(&mut self, id: BrokerId) {
        if let Some(broker) = self.brokers.get_mut(&id) {
            broker.fenced = true;
        }
        let unfenced: BTreeSet<BrokerId> = self.unfenced_brokers().into_iter().collect();
        for partition in self.topics.values_mut().flat_map(|t| &mut t.partitions) {
            let shrinks = partition.isr.len() > 1 && partition.isr.contains(&id);
            if !shrinks && partition.leader != id {
                continue;
            }
            if shrinks {
                partition.isr.retain(|replica| *replica != id);
            }
            if partition.leader == id {
                let next = partition
                    .replicas
                    .iter()
                    .copied()
                    .find(|r| *r != id && partition.isr.contains(r) && unfenced.contains(r));
                partition.leader = next.unwrap_or(NO_LEADER);
                partition.leader_epoch += 1;
            }
            partition.partition_epoch += 1;
        }
    }

    fn unfence(&mut self, id: BrokerId) {
        if let Some(broker) = self.brokers.get_mut(&id) {
            broker.fenced = false;
        }
        for partition in self.topics.values_mut().flat_map(|t| &mut t.partitions) {
            if partition.leader == NO_LEADER && partition.isr.contains(&id) {
                partition.leader = id;
                partition.leader_epoch += 1;
                partition.partition_epoch += 1;
            }
        }
    }

    fn elect_preferred_leaders(&mut self) {
        let unfenced: BTreeSet<BrokerId> = self.unfenced_brokers().into_iter().collect();
        for partition in self.topics.values_mut().flat_map(|t| &mut t.partitions) {
            let Some(&preferred) = partition.replicas.first() else {
                continue;
            };
            if partition.leader != preferred
                && partition.isr.contains(&preferred)
                && unfenced.contains(&preferred)
            {
                partition.leader = preferred;
                partition.leader_epoch += 1;
                partition.partition_epoch += 1;
            }
        }
    }

    /// New partitions for `assignment`, or why it is refused.
    fn new_partitions(
        &self,
        assignment: &[Vec<BrokerId>],
    ) -> Result<Vec<PartitionRecord>, Outcome> {
        if assignment.is_empty() {
            return Err(Outcome::refused(
                ResponseError::InvalidPartitions,
                "at least one partition is needed",
            ));
        }
        let replication_factor = assignment[0].len();
        let mut partitions = Vec::with_capacity(assignment.len());
        for (index, replicas) in assignment.iter().enumerate() {
            if replicas.is_empty() || replicas.len() != replication_factor {
                return Err(Outcome::refused(
                    ResponseError::InvalidReplicaAssignment,
                    format!(
                        "partition {index} has {} replicas where the first has {replication_factor}",
                        replicas.len()
                    ),
                ));
            }
            let distinct: BTreeSet<_> = replicas.iter().collect();
            if distinct.len() != replicas.len() {
                return Err(Outcome::refused(
                    ResponseError::InvalidReplicaAssignment,
                    format!("partition {index} names a broker twice: {replicas:?}"),
                ));
            }
            if let Some(unknown) = replicas.iter().find(|r| !self.brokers.contains_key(r)) {
                return Err(Outcome::refused(
                    ResponseError::InvalidReplicaAssignment,
                    format!("partition {index} names broker {unknown}, which is not registered"),
                ));
            }
            let isr: Vec<BrokerId> = replicas
                .iter()
                .copied()
                .filter(|r| self.is_unfenced(*r))
                .collect();
            let Some(&leader) = isr.first() else {
                return Err(Outcome::refused(
                    ResponseError::InvalidReplicaAssignment,
                    format!("every replica of partition {index} is fenced: {replicas:?}"),
                ));
            };
            partitions.push(PartitionRecord {
                replicas: replicas.clone(),
                isr,
                leader,
                leader_epoch: 0,
                partition_epoch: 0,
            });
        }
        Ok(partitions)
    }

    fn create_topic(
        &mut self,
        name: &str,
        id: Uuid,
        assignment: &[Vec<BrokerId>],
        configs: &BTreeMap<String, String>,
    ) -> Outcome {
        if let Some(existing) = self.topics.get(name) {
            if existing.id == id {
                return Outcome::Done;
            }
            return Outcome::refused(
                ResponseError::TopicAlreadyExists,
                format!("topic {name:?} already exists"),
            );
        }
        if name.is_empty() {
            return Outcome::refused(ResponseError::InvalidTopicException, "empty topic name");
        }
        match self.new_partitions(assignment) {
            Err(refused) => refused,
            Ok(partitions) => {
                self.topics.insert(
                    name.to_string(),
                    TopicRecord {
                        id,
                        configs: configs.clone(),
                        partitions,
                    },
                );
                Outcome::Done
            }
        }
    }

    fn create_partitions(
        &mut self,
        name: &str,
        assignment: &[Vec<BrokerId>],
        total: i32,
    ) -> Outcome {
        let Some(topic) = self.topics.get(name) else {
            return Outcome::refused(
                ResponseError::UnknownTopicOrPartition,
                format!("no topic {name:?}"),
            );
        };
        let count = topic.partitions.len();
        if usize::try_from(total).is_ok_and(|total| total == count) {
            return Outcome::Done;
        }
        if usize::try_from(total).ok() != Some(count + assignment.len()) {
            return Outcome::refused(
                ResponseError::InvalidPartitions,
                format!(
                    "topic {name:?} has {count} partitions; {} more do not make {total}",
                    assignment.len()
                ),
            );
        }
        let replication_factor = topic.partitions.first().map_or(0, |p| p.replicas.len());
        if assignment
            .first()
            .is_some_and(|replicas| replicas.len() != replication_factor)
        {
            return Outcome::refused(
                ResponseError::InvalidReplicaAssignment,
                format!("new partitions of {name:?} need {replication_factor} replicas each"),
            );
        }
        match self.new_partitions(assignment) {
            Err(refused) => refused,
            Ok(partitions) => {
                if let Some(topic) = self.topics.get_mut(name) {
                    topic.partitions.extend(partitions);
                }
                Outcome::Done
            }
        }
    }

    fn alter_partition(
        &mut self,
        topic: &str,
        index: i32,
        (broker, broker_epoch): (BrokerId, i64),
        (leader_epoch, partition_epoch): (i32, i32),
        isr: &[BrokerId],
    ) -> Outcome {
        if let Err(refused) = self.current_broker(broker, broker_epoch) {
            return refused;
        }
        let Some(current) = self.partition(topic, index) else {
            return Outcome::refused(
                ResponseError::UnknownTopicOrPartition,
                format!("no partition {topic}-{index}"),
            );
        };
        if current.leader_epoch != leader_epoch {
            return Outcome::refused(
                ResponseError::FencedLeaderEpoch,
                format!(
                    "{topic}-{index} is at leader epoch {}, not {leader_epoch}",
                    current.leader_epoch
                ),
            );
        }
        if current.leader != broker {
            return Outcome::refused(
                ResponseError::InvalidRequest,
                format!("{topic}-{index} is led by {}, not {broker}", current.leader),
            );
        }
        // In the replicas' order; the replicas are distinct (`new_partitions`).
        let requested: Vec<BrokerId> = current
            .replicas
            .iter()
            .copied()
            .filter(|r| isr.contains(r))
            .collect();
        let retried = partition_epoch.checked_add(1) == Some(current.partition_epoch);
        if retried && current.isr == requested {
            // The same change, delivered again: answer what it decided.
            return Outcome::Partition(current.clone());
        }
        if current.partition_epoch != partition_epoch {
            return Outcome::refused(
                ResponseError::InvalidUpdateVersion,
                format!(
                    "{topic}-{index} is at partition epoch {}, not {partition_epoch}",
                    current.partition_epoch
                ),
            );
        }
        if !isr.contains(&broker) {
            return Outcome::refused(
                ResponseError::InvalidRequest,
                format!("the ISR of {topic}-{index} must hold its leader {broker}"),
            );
        }
        if let Some(ineligible) = isr
            .iter()
            .find(|r| !current.replicas.contains(r) || !self.is_unfenced(**r))
        {
            return Outcome::refused(
                ResponseError::IneligibleReplica,
                format!("broker {ineligible} cannot join the ISR of {topic}-{index}"),
            );
        }
        let isr_ordered = requested;
        match self
            .topics
            .get_mut(topic)
            .and_then(|t| t.partitions.get_mut(usize::try_from(index).ok()?))
        {
            Some(partition) => {
                partition.isr = isr_ordered;
                partition.partition_epoch += 1;
                Outcome::Partition(partition.clone())
            }
            None => Outcome::refused(ResponseError::UnknownTopicOrPartition, "no partition"),
        }
    }
}

#[cfg(test)]
mod tests;
