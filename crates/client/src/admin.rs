//! Administration requests, for `headway topic|group|cluster` and any tool that manages a
//! Kafka-compatible cluster: topics (create, describe, alter configs, add partitions,
//! delete), configs of topics and brokers, offsets by time, group offset resets and
//! group deletes, and the cluster's brokers.
//!
//! Every call is one or a few requests on the cluster's shared connections; nothing here
//! keeps state. Metadata requests made here never auto-create a topic, so describing a
//! topic that does not exist fails with `UNKNOWN_TOPIC_OR_PARTITION` on any broker.
//! Failures of one topic or group in a batched request are returned per item, so a
//! caller can report which ones failed and why.

use crate::cluster::{Cluster, LATEST};
use crate::error::{check, ClientError};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    BrokerId, CreatePartitionsRequest, CreateTopicsRequest, DeleteGroupsRequest,
    DeleteTopicsRequest, DescribeClusterRequest, DescribeConfigsRequest, GroupId,
    IncrementalAlterConfigsRequest, ListOffsetsRequest, MetadataRequest, TopicName,
};
use kafka_protocol::protocol::{Request, StrBytes};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// How long the broker may take to apply a topic change before it answers.
const ADMIN_TIMEOUT_MS: i32 = 30_000;

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn topic_name(s: &str) -> TopicName {
    TopicName(str_bytes(s))
}

/// A topic to create. `partitions` and `replication_factor` of -1 take the broker's
/// defaults.
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: Vec<(String, String)>,
}

/// What the broker created.
#[derive(Debug, Clone, Serialize)]
pub struct CreatedTopic {
    pub name: String,
    /// -1 when the broker does not say (CreateTopics before v5).
    pub partitions: i32,
    pub replication_factor: i16,
}

/// One item of a batched request and its own result.
pub type ItemResult<T> = (String, Result<T, ClientError>);

#[derive(Debug, Clone, Serialize)]
pub struct BrokerDescription {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

impl BrokerDescription {
    fn new(node_id: BrokerId, host: StrBytes, port: i32, rack: Option<StrBytes>) -> Self {
        BrokerDescription {
            node_id: node_id.0,
            host: host.to_string(),
            port,
            rack: rack.map(|r| r.to_string()),
        }
    }

    fn sorted(brokers: impl Iterator<Item = BrokerDescription>) -> Vec<BrokerDescription> {
        let mut brokers: Vec<BrokerDescription> = brokers.collect();
        brokers.sort_by_key(|b| b.node_id);
        brokers
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PartitionDescription {
    pub partition: i32,
    /// -1 while the partition has no leader.
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopicDescription {
    pub name: String,
    /// Empty when the broker does not send topic ids (Metadata before v10).
    pub topic_id: String,
    pub internal: bool,
    /// Sorted by partition.
    pub partitions: Vec<PartitionDescription>,
}

impl TopicDescription {
    pub fn replication_factor(&self) -> usize {
        self.partitions.first().map_or(0, |p| p.replicas.len())
    }
}

/// The answer to a Metadata request.
#[derive(Debug, Clone)]
pub struct ClusterMetadata {
    pub cluster_id: Option<String>,
    pub controller_id: i32,
    pub brokers: Vec<BrokerDescription>,
    /// Sorted by name; only topics the broker described without an error.
    pub topics: Vec<TopicDescription>,
}

impl ClusterMetadata {
    fn broker_addr(&self, node_id: i32) -> Option<String> {
        self.brokers
            .iter()
            .find(|b| b.node_id == node_id)
            .map(|b| format!("{}:{}", b.host, b.port))
    }
}

/// The cluster as DescribeCluster (or, where it is not served, Metadata) tells it.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterDescription {
    pub cluster_id: Option<String>,
    pub controller_id: i32,
    pub brokers: Vec<BrokerDescription>,
}

/// Which kind of resource a config belongs to (Kafka's `ConfigResource.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigResource {
    Topic,
    Broker,
    /// A group's own settings (Kafka 4's `ConfigResource.Type.GROUP`).
    Group,
}

impl ConfigResource {
    fn code(self) -> i8 {
        match self {
            ConfigResource::Topic => 2,
            ConfigResource::Broker => 4,
            ConfigResource::Group => 32,
        }
    }
}

/// One config entry as DescribeConfigs tells it.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigEntry {
    pub name: String,
    /// `None` for sensitive values and for settings without a value.
    pub value: Option<String>,
    /// Kafka's `ConfigSource` name, e.g. `DYNAMIC_TOPIC_CONFIG` or `DEFAULT_CONFIG`.
    pub source: &'static str,
    pub read_only: bool,
    pub sensitive: bool,
}

/// Kafka's name of a DescribeConfigs `config_source` code.
fn config_source_name(code: i8) -> &'static str {
    match code {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        7 => "CLIENT_METRICS_CONFIG",
        8 => "GROUP_CONFIG",
        _ => "UNKNOWN",
    }
}

/// One change of IncrementalAlterConfigs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "operation", rename_all = "snake_case")]
pub enum ConfigChange {
    /// Sets a value.
    Set { name: String, value: String },
    /// Removes a value, so the default applies again.
    Delete { name: String },
}

impl ConfigChange {
    fn to_request(&self) -> AlterableConfig {
        match self {
            ConfigChange::Set { name, value } => AlterableConfig::default()
                .with_name(str_bytes(name))
                .with_config_operation(0)
                .with_value(Some(str_bytes(value))),
            // Kafka's clients send no value with a delete (the default is "").
            ConfigChange::Delete { name } => AlterableConfig::default()
                .with_name(str_bytes(name))
                .with_config_operation(1)
                .with_value(None),
        }
    }
}

/// Where a group's offsets are reset to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    Earliest,
    Latest,
    /// The first record with a timestamp at or after this many ms since the epoch, or
    /// the log end where there is none (as Kafka's tools do).
    Timestamp(i64),
    /// This offset, brought within the partition's earliest and latest offsets.
    Offset(i64),
}

/// One partition of an offset reset: where the group was and where it will be.
#[derive(Debug, Clone, Serialize)]
pub struct OffsetReset {
    pub topic: String,
    pub partition: i32,
    /// `None` where the group has no committed offset.
    pub current_offset: Option<i64>,
    pub new_offset: i64,
}

impl Cluster {
    /// Metadata of the given topics (every topic when `None`), never auto-creating one.
    /// A named topic the broker answers with an error fails the whole call.
    pub async fn metadata(
        &self,
        topics: Option<&[String]>,
    ) -> Result<ClusterMetadata, ClientError> {
        let request = MetadataRequest::default()
            .with_topics(topics.map(|names| {
                names
                    .iter()
                    .map(|t| {
                        kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                            .with_name(Some(topic_name(t)))
                    })
                    .collect()
            }))
            .with_allow_auto_topic_creation(false);
        let response = self
            .retry(|| async { self.any_broker().await?.request(&request).await })
            .await?;
        let mut described = Vec::new();
        for topic in response.topics {
            let name = topic.name.map(|n| n.to_string()).unwrap_or_default();
            if topic.error_code != 0 {
                if topics.is_some() {
                    return Err(ClientError::from_code(topic.error_code, None));
                }
                continue;
            }
            let mut partitions: Vec<PartitionDescription> = topic
                .partitions
                .into_iter()
                .map(|p| PartitionDescription {
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                    isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            described.push(TopicDescription {
                name,
                topic_id: if topic.topic_id.is_nil() {
                    String::new()
                } else {
                    topic.topic_id.to_string()
                },
                internal: topic.is_internal,
                partitions,
            });
        }
        described.sort_by(|a, b| a.name.cmp(&b.name));
        let brokers = BrokerDescription::sorted(
            response
                .brokers
                .into_iter()
                .map(|b| BrokerDescription::new(b.node_id, b.host, b.port, b.rack)),
        );
        Ok(ClusterMetadata {
            cluster_id: response.cluster_id.map(|c| c.to_string()),
            controller_id: response.controller_id.0,
            brokers,
            topics: described,
        })
    }

    /// One topic's metadata; `UNKNOWN_TOPIC_OR_PARTITION` when it does not exist.
    pub async fn describe_topic(
        &self,
        name: &str,
    ) -> Result<(ClusterMetadata, TopicDescription), ClientError> {
        let metadata = self.metadata(Some(&[name.to_string()])).await?;
        let topic = metadata
            .topics
            .iter()
            .find(|t| t.name == name)
            .cloned()
            .ok_or_else(|| {
                ClientError::from_code(
                    kafka_protocol::ResponseError::UnknownTopicOrPartition.code(),
                    None,
                )
            })?;
        Ok((metadata, topic))
    }

    /// The cluster id, controller and brokers: DescribeCluster where the broker serves
    /// it, else Metadata.
    pub async fn describe_cluster(&self) -> Result<ClusterDescription, ClientError> {
        let connection = self.any_broker().await?;
        if connection.version::<DescribeClusterRequest>().is_err() {
            let metadata = self.metadata(Some(&[])).await?;
            return Ok(ClusterDescription {
                cluster_id: metadata.cluster_id,
                controller_id: metadata.controller_id,
                brokers: metadata.brokers,
            });
        }
        let response = connection
            .request(&DescribeClusterRequest::default())
            .await?;
        check(response.error_code, response.error_message.as_deref())?;
        let brokers = BrokerDescription::sorted(
            response
                .brokers
                .into_iter()
                .map(|b| BrokerDescription::new(b.broker_id, b.host, b.port, b.rack)),
        );
        Ok(ClusterDescription {
            cluster_id: Some(response.cluster_id.to_string()),
            controller_id: response.controller_id.0,
            brokers,
        })
    }

    /// Creates a topic; `Ok(false)` when it already existed.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> Result<bool, ClientError> {
        let topic = NewTopic {
            name: name.to_string(),
            partitions,
            replication_factor: -1,
            configs: configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        let (_, result) = self
            .create_topics(std::slice::from_ref(&topic))
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Protocol("empty CreateTopics answer".into()))?;
        match result {
            Ok(_) => Ok(true),
            Err(ClientError::Broker { code, .. })
                if code == kafka_protocol::ResponseError::TopicAlreadyExists.code() =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Creates topics in one request; each gets its own result.
    pub async fn create_topics(
        &self,
        topics: &[NewTopic],
    ) -> Result<Vec<ItemResult<CreatedTopic>>, ClientError> {
        let request = CreateTopicsRequest::default()
            .with_topics(
                topics
                    .iter()
                    .map(|t| {
                        CreatableTopic::default()
                            .with_name(topic_name(&t.name))
                            .with_num_partitions(t.partitions)
                            .with_replication_factor(t.replication_factor)
                            .with_configs(
                                t.configs
                                    .iter()
                                    .map(|(k, v)| {
                                        CreatableTopicConfig::default()
                                            .with_name(str_bytes(k))
                                            .with_value(Some(str_bytes(v)))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            )
            .with_timeout_ms(ADMIN_TIMEOUT_MS);
        let response = self
            .retry(|| async { self.any_broker().await?.request(&request).await })
            .await?;
        let results = response
            .topics
            .into_iter()
            .map(|t| {
                let name = t.name.to_string();
                self.invalidate(&name);
                let result =
                    check(t.error_code, t.error_message.as_deref()).map(|()| CreatedTopic {
                        name: name.clone(),
                        partitions: t.num_partitions,
                        replication_factor: t.replication_factor,
                    });
                (name, result)
            })
            .collect();
        Ok(results)
    }

    /// Deletes topics by name in one request; each gets its own result.
    pub async fn delete_topics(
        &self,
        names: &[String],
    ) -> Result<Vec<ItemResult<()>>, ClientError> {
        let response = self
            .retry(|| async {
                let connection = self.any_broker().await?;
                // v6 names topics in `topics` (by name or id), older versions in
                // `topic_names`; a field set at a version without it fails to encode.
                let request = if connection.version::<DeleteTopicsRequest>()? >= 6 {
                    DeleteTopicsRequest::default().with_topics(
                        names
                            .iter()
                            .map(|n| DeleteTopicState::default().with_name(Some(topic_name(n))))
                            .collect(),
                    )
                } else {
                    DeleteTopicsRequest::default()
                        .with_topic_names(names.iter().map(|n| topic_name(n)).collect())
                };
                connection
                    .request(&request.with_timeout_ms(ADMIN_TIMEOUT_MS))
                    .await
            })
            .await?;
        Ok(response
            .responses
            .into_iter()
            .map(|r| {
                let name = r.name.map(|n| n.to_string()).unwrap_or_default();
                self.invalidate(&name);
                (name, check(r.error_code, r.error_message.as_deref()))
            })
            .collect())
    }

    /// Grows a topic to `total` partitions.
    pub async fn create_partitions(&self, topic: &str, total: i32) -> Result<(), ClientError> {
        let request = CreatePartitionsRequest::default()
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(topic_name(topic))
                .with_count(total)
                // None lets the broker place the new partitions; an empty list would
                // be an assignment of none of them (Kafka refuses it).
                .with_assignments(None)])
            .with_timeout_ms(ADMIN_TIMEOUT_MS);
        let response = self
            .retry(|| async { self.any_broker().await?.request(&request).await })
            .await?;
        self.invalidate(topic);
        let result = response
            .results
            .first()
            .ok_or_else(|| ClientError::Protocol("empty CreatePartitions answer".into()))?;
        check(result.error_code, result.error_message.as_deref())
    }

    /// Every config entry of a topic or a broker (`name` is the broker's node id).
    pub async fn describe_configs(
        &self,
        resource: ConfigResource,
        name: &str,
    ) -> Result<Vec<ConfigEntry>, ClientError> {
        let request = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(resource.code())
                .with_resource_name(str_bytes(name))
                .with_configuration_keys(None),
        ]);
        let response = self.config_request(resource, name, &request).await?;
        let result = response
            .results
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Protocol("empty DescribeConfigs answer".into()))?;
        check(result.error_code, result.error_message.as_deref())?;
        let mut entries: Vec<ConfigEntry> = result
            .configs
            .into_iter()
            .map(|c| ConfigEntry {
                name: c.name.to_string(),
                value: c.value.map(|v| v.to_string()),
                source: config_source_name(c.config_source),
                read_only: c.read_only,
                sensitive: c.is_sensitive,
            })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// Applies config changes to one topic or broker, all or none.
    pub async fn alter_configs(
        &self,
        resource: ConfigResource,
        name: &str,
        changes: &[ConfigChange],
    ) -> Result<(), ClientError> {
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(resource.code())
                .with_resource_name(str_bytes(name))
                .with_configs(changes.iter().map(ConfigChange::to_request).collect()),
        ]);
        let response = self.config_request(resource, name, &request).await?;
        let result = response
            .responses
            .first()
            .ok_or_else(|| ClientError::Protocol("empty IncrementalAlterConfigs answer".into()))?;
        check(result.error_code, result.error_message.as_deref())
    }

    /// Sends a config request: a broker's configs are answered by that broker, a
    /// topic's or a group's by any.
    async fn config_request<R: Request>(
        &self,
        resource: ConfigResource,
        name: &str,
        request: &R,
    ) -> Result<R::Response, ClientError> {
        let addr = match resource {
            ConfigResource::Broker => name.parse().ok().and_then(|id| self.broker_addr(id)),
            ConfigResource::Topic | ConfigResource::Group => None,
        };
        self.retry(|| async {
            let connection = match &addr {
                Some(addr) => self.connection(addr).await?,
                None => self.any_broker().await?,
            };
            connection.request(request).await
        })
        .await
    }

    /// The offset of each partition for `timestamp` ([`crate::EARLIEST`], [`LATEST`] or
    /// ms since the epoch), one request per leader. By timestamp, -1 means no record at
    /// or after it.
    pub async fn list_offsets(
        &self,
        metadata: &ClusterMetadata,
        partitions: &[(String, i32)],
        timestamp: i64,
    ) -> Result<BTreeMap<(String, i32), i64>, ClientError> {
        let mut by_leader: BTreeMap<i32, BTreeMap<&str, Vec<i32>>> = BTreeMap::new();
        for (topic, partition) in partitions {
            let leader = metadata
                .topics
                .iter()
                .find(|t| &t.name == topic)
                .and_then(|t| t.partitions.iter().find(|p| p.partition == *partition))
                .map(|p| p.leader)
                .ok_or_else(|| ClientError::UnknownTopic(format!("{topic}/{partition}")))?;
            by_leader
                .entry(leader)
                .or_default()
                .entry(topic.as_str())
                .or_default()
                .push(*partition);
        }
        let mut offsets = BTreeMap::new();
        for (leader, topics) in by_leader {
            let addr = metadata.broker_addr(leader).ok_or_else(|| {
                ClientError::from_code(
                    kafka_protocol::ResponseError::LeaderNotAvailable.code(),
                    None,
                )
            })?;
            let request = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(
                    topics
                        .iter()
                        .map(|(topic, partitions)| {
                            ListOffsetsTopic::default()
                                .with_name(topic_name(topic))
                                .with_partitions(
                                    partitions
                                        .iter()
                                        .map(|p| {
                                            ListOffsetsPartition::default()
                                                .with_partition_index(*p)
                                                .with_timestamp(timestamp)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                );
            let response = self
                .retry(|| async { self.connection(&addr).await?.request(&request).await })
                .await?;
            for t in response.topics {
                for p in t.partitions {
                    check(p.error_code, None)?;
                    offsets.insert((t.name.to_string(), p.partition_index), p.offset);
                }
            }
        }
        Ok(offsets)
    }

    /// The offsets a reset of `group` to `spec` would commit, for the given partitions.
    pub async fn plan_offset_reset(
        self: &Arc<Self>,
        group: &str,
        partitions: &[(String, i32)],
        spec: OffsetSpec,
    ) -> Result<Vec<OffsetReset>, ClientError> {
        let topics: Vec<String> = partitions
            .iter()
            .map(|(t, _)| t.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let metadata = self.metadata(Some(&topics)).await?;
        let earliest = self
            .list_offsets(&metadata, partitions, crate::EARLIEST)
            .await?;
        let latest = self.list_offsets(&metadata, partitions, LATEST).await?;
        let by_time = match spec {
            OffsetSpec::Timestamp(ms) => Some(self.list_offsets(&metadata, partitions, ms).await?),
            _ => None,
        };
        let committed: HashMap<(String, i32), i64> = self
            .committed_offsets(group)
            .await?
            .into_iter()
            .filter(|(_, _, offset)| *offset >= 0)
            .map(|(t, p, offset)| ((t, p), offset))
            .collect();
        let mut plan = Vec::with_capacity(partitions.len());
        for key in partitions {
            let low = earliest.get(key).copied().unwrap_or(0);
            let high = latest.get(key).copied().unwrap_or(low);
            let new_offset = match spec {
                OffsetSpec::Earliest => low,
                OffsetSpec::Latest => high,
                OffsetSpec::Timestamp(_) => match by_time.as_ref().and_then(|m| m.get(key)) {
                    Some(&offset) if offset >= 0 => offset,
                    _ => high,
                },
                OffsetSpec::Offset(offset) => offset.clamp(low, high.max(low)),
            };
            plan.push(OffsetReset {
                topic: key.0.clone(),
                partition: key.1,
                current_offset: committed.get(key).copied(),
                new_offset,
            });
        }
        Ok(plan)
    }

    /// Commits `plan` for `group` as a client outside the group (generation -1, no member
    /// id), as Kafka's tools do. The broker refuses it while the group has members.
    pub async fn commit_offset_reset(
        self: &Arc<Self>,
        group: &str,
        plan: &[OffsetReset],
    ) -> Result<(), ClientError> {
        let positions: crate::group_consumer::Positions = plan
            .iter()
            .map(|r| ((Arc::from(r.topic.as_str()), r.partition), r.new_offset))
            .collect();
        // A coordinator that moved or is still loading answers with a retriable error.
        self.retry(|| async {
            let coordinator = self.coordinator(group).await?;
            crate::group_consumer::commit(&coordinator, group, "", -1, &positions).await
        })
        .await
    }

    /// Deletes groups (each must have no members), one request per group to its
    /// coordinator; each group gets its own result.
    pub async fn delete_groups(
        self: &Arc<Self>,
        groups: &[String],
    ) -> Result<Vec<ItemResult<()>>, ClientError> {
        let mut results = Vec::with_capacity(groups.len());
        for group in groups {
            let request =
                DeleteGroupsRequest::default().with_groups_names(vec![GroupId(str_bytes(group))]);
            let result = self
                .retry(|| async {
                    let response = self.coordinator(group).await?.request(&request).await?;
                    let result = response
                        .results
                        .first()
                        .ok_or_else(|| ClientError::Protocol("empty DeleteGroups answer".into()))?;
                    check(result.error_code, None)
                })
                .await;
            results.push((group.clone(), result));
        }
        Ok(results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_sources_have_kafka_names() {
        assert_eq!(config_source_name(1), "DYNAMIC_TOPIC_CONFIG");
        assert_eq!(config_source_name(5), "DEFAULT_CONFIG");
        assert_eq!(config_source_name(42), "UNKNOWN");
    }

    #[test]
    fn config_changes_encode_kafka_operations() {
        let set = ConfigChange::Set {
            name: "retention.ms".into(),
            value: "1000".into(),
        }
        .to_request();
        assert_eq!(set.config_operation, 0);
        assert_eq!(set.value.as_deref(), Some("1000"));
        let delete = ConfigChange::Delete {
            name: "retention.ms".into(),
        }
        .to_request();
        assert_eq!(delete.config_operation, 1);
        assert_eq!(delete.value, None);
    }
}
