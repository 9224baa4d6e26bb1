//! Reading consumer groups: list, describe (members and their assignments), and
//! committed offsets, through the group's coordinator.

use crate::cluster::Cluster;
use crate::connection::Connection;
use crate::error::{check, ClientError};
use bytes::Buf;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, DescribeGroupsRequest, FindCoordinatorRequest, GroupId,
    ListGroupsRequest, OffsetFetchRequest,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use std::sync::Arc;

#[derive(Debug, Clone, serde::Serialize)]
pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    pub state: String,
    /// "classic" or "consumer" (ListGroups v5+; empty from an older broker).
    pub group_type: String,
}

/// A member of a consumer-protocol group, as ConsumerGroupDescribe shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ConsumerMemberDescription {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub member_epoch: i32,
    pub subscribed_topics: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub assignment: Vec<(String, Vec<i32>)>,
    pub target_assignment: Vec<(String, Vec<i32>)>,
}

/// A consumer-protocol group's epochs and members (ConsumerGroupDescribe).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ConsumerGroupDescription {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: Vec<ConsumerMemberDescription>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct GroupMemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// (topic, partitions), decoded from a consumer-protocol assignment.
    pub assignment: Vec<(String, Vec<i32>)>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct GroupDescription {
    pub group_id: String,
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<GroupMemberDescription>,
}

/// Decodes a consumer-protocol assignment (empty when it is not one).
pub(crate) fn decode_assignment(mut bytes: bytes::Bytes) -> Vec<(String, Vec<i32>)> {
    if bytes.len() < 2 {
        return Vec::new();
    }
    let version = bytes.get_i16().clamp(0, 3);
    ConsumerProtocolAssignment::decode(&mut bytes, version)
        .map(|a| {
            a.assigned_partitions
                .into_iter()
                .map(|tp| (tp.topic.to_string(), tp.partitions))
                .collect()
        })
        .unwrap_or_default()
}

impl Cluster {
    /// The address of the coordinator of `group_id`.
    pub async fn coordinator_addr(self: &Arc<Self>, group_id: &str) -> Result<String, ClientError> {
        let request =
            FindCoordinatorRequest::default().with_key(StrBytes::from_string(group_id.to_string()));
        let response = self
            .retry(|| async { self.any_broker().await?.request(&request).await })
            .await?;
        check(response.error_code, response.error_message.as_deref())?;
        Ok(format!("{}:{}", response.host.as_str(), response.port))
    }

    /// The shared connection to the coordinator of `group_id`, for requests answered at
    /// once (a group member needs a connection of its own, see `GroupConsumer`).
    pub async fn coordinator(
        self: &Arc<Self>,
        group_id: &str,
    ) -> Result<Arc<Connection>, ClientError> {
        let addr = self.coordinator_addr(group_id).await?;
        self.connection(&addr).await
    }

    /// Every group every broker knows: each broker lists the groups it coordinates (in
    /// a cluster, those of the `__consumer_offsets` partitions it leads), so every
    /// broker is asked, as Kafka's admin client does.
    pub async fn list_groups(self: &Arc<Self>) -> Result<Vec<GroupListing>, ClientError> {
        self.refresh(&[]).await?;
        let mut groups: Vec<GroupListing> = Vec::new();
        for addr in self.broker_addrs() {
            let connection = self.connection(&addr).await?;
            let response = connection.request(&ListGroupsRequest::default()).await?;
            check(response.error_code, None)?;
            groups.extend(response.groups.into_iter().map(|g| GroupListing {
                group_id: g.group_id.to_string(),
                protocol_type: g.protocol_type.to_string(),
                state: g.group_state.to_string(),
                group_type: g.group_type.to_string(),
            }));
        }
        groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        groups.dedup_by(|a, b| a.group_id == b.group_id);
        Ok(groups)
    }

    pub async fn describe_group(
        self: &Arc<Self>,
        group_id: &str,
    ) -> Result<GroupDescription, ClientError> {
        let request = DescribeGroupsRequest::default()
            .with_groups(vec![GroupId(StrBytes::from_string(group_id.to_string()))]);
        let response = self.coordinator(group_id).await?.request(&request).await?;
        let g = response
            .groups
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Protocol("empty DescribeGroups answer".into()))?;
        check(g.error_code, g.error_message.as_deref())?;
        Ok(GroupDescription {
            group_id: g.group_id.to_string(),
            state: g.group_state.to_string(),
            protocol_type: g.protocol_type.to_string(),
            protocol: g.protocol_data.to_string(),
            members: g
                .members
                .into_iter()
                .map(|m| GroupMemberDescription {
                    member_id: m.member_id.to_string(),
                    group_instance_id: m.group_instance_id.map(|s| s.to_string()),
                    client_id: m.client_id.to_string(),
                    client_host: m.client_host.to_string(),
                    assignment: decode_assignment(m.member_assignment),
                })
                .collect(),
        })
    }

    /// A consumer-protocol group's epochs and members, or `None` when the group is not
    /// one (GROUP_ID_NOT_FOUND).
    pub async fn describe_consumer_group(
        self: &Arc<Self>,
        group_id: &str,
    ) -> Result<Option<ConsumerGroupDescription>, ClientError> {
        use kafka_protocol::messages::consumer_group_describe_response::Assignment;
        use kafka_protocol::messages::ConsumerGroupDescribeRequest;
        use kafka_protocol::ResponseError;
        let request = ConsumerGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(StrBytes::from_string(group_id.to_string()))]);
        let response = self.coordinator(group_id).await?.request(&request).await?;
        let g =
            response.groups.into_iter().next().ok_or_else(|| {
                ClientError::Protocol("empty ConsumerGroupDescribe answer".into())
            })?;
        if g.error_code == ResponseError::GroupIdNotFound.code() {
            return Ok(None);
        }
        check(g.error_code, g.error_message.as_deref())?;
        let partitions = |a: Assignment| -> Vec<(String, Vec<i32>)> {
            let topics = a.topic_partitions.into_iter();
            topics
                .map(|t| (t.topic_name.to_string(), t.partitions))
                .collect()
        };
        Ok(Some(ConsumerGroupDescription {
            group_epoch: g.group_epoch,
            assignment_epoch: g.assignment_epoch,
            assignor: g.assignor_name.to_string(),
            members: g
                .members
                .into_iter()
                .map(|m| ConsumerMemberDescription {
                    member_id: m.member_id.to_string(),
                    instance_id: m.instance_id.map(|s| s.to_string()),
                    member_epoch: m.member_epoch,
                    subscribed_topics: m
                        .subscribed_topic_names
                        .into_iter()
                        .map(|t| t.to_string())
                        .collect(),
                    subscribed_topic_regex: m.subscribed_topic_regex.map(|s| s.to_string()),
                    assignment: partitions(m.assignment),
                    target_assignment: partitions(m.target_assignment),
                })
                .collect(),
        }))
    }

    /// Every committed offset of a group: (topic, partition, offset).
    pub async fn committed_offsets(
        self: &Arc<Self>,
        group_id: &str,
    ) -> Result<Vec<(String, i32, i64)>, ClientError> {
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group_id.to_string())))
            .with_topics(None);
        let response = self.coordinator(group_id).await?.request(&request).await?;
        check(response.error_code, None)?;
        let mut offsets: Vec<(String, i32, i64)> = response
            .topics
            .into_iter()
            .flat_map(|t| {
                let topic = t.name.to_string();
                t.partitions
                    .into_iter()
                    .map(move |p| (topic.clone(), p.partition_index, p.committed_offset))
            })
            .collect();
        offsets.sort();
        Ok(offsets)
    }
}

/// The tagged field a headway broker adds to each share-partition of a
/// DescribeShareGroupOffsets answer: records in flight, acquired now, archived and
/// redelivered (four big-endian u64). Other brokers do not send it; other clients
/// skip it as an unknown tagged field.
pub const SHARE_PARTITION_STATS_TAG: i32 = 0x4857;

/// A share group's members with their assignments (ShareGroupDescribe).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShareGroupDescription {
    pub group_id: String,
    pub state: String,
    pub group_epoch: i32,
    pub members: Vec<ShareMemberDescription>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ShareMemberDescription {
    pub member_id: String,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub assignment: Vec<(String, Vec<i32>)>,
}

/// One share-partition's start offset, and what a headway broker tells of it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SharePartitionOffset {
    pub topic: String,
    pub partition: i32,
    /// `None`: no state for it yet.
    pub start_offset: Option<i64>,
    pub stats: Option<SharePartitionStats>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SharePartitionStats {
    pub in_flight: u64,
    pub acquired: u64,
    pub archived: u64,
    pub redelivered: u64,
}

impl SharePartitionStats {
    pub fn decode(mut bytes: &[u8]) -> Option<SharePartitionStats> {
        if bytes.len() != 32 {
            return None;
        }
        let mut next = || bytes.get_u64();
        Some(SharePartitionStats {
            in_flight: next(),
            acquired: next(),
            archived: next(),
            redelivered: next(),
        })
    }
}

impl Cluster {
    /// A share group's members and assignments, or `None` when the group is not a
    /// share group (or the broker serves no share groups).
    pub async fn describe_share_group(
        self: &Arc<Self>,
        group_id: &str,
    ) -> Result<Option<ShareGroupDescription>, ClientError> {
        use kafka_protocol::messages::ShareGroupDescribeRequest;
        use kafka_protocol::ResponseError;
        let request = ShareGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(StrBytes::from_string(group_id.to_string()))]);
        let coordinator = self.coordinator(group_id).await?;
        let response = match coordinator.request(&request).await {
            Ok(r) => r,
            Err(ClientError::UnsupportedApi { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(g) = response.groups.into_iter().next() else {
            return Err(ClientError::Protocol(
                "empty ShareGroupDescribe answer".into(),
            ));
        };
        if g.error_code == ResponseError::GroupIdNotFound.code() {
            return Ok(None);
        }
        check(g.error_code, g.error_message.as_deref())?;
        Ok(Some(ShareGroupDescription {
            group_id: g.group_id.to_string(),
            state: g.group_state.to_string(),
            group_epoch: g.group_epoch,
            members: g
                .members
                .into_iter()
                .map(|m| ShareMemberDescription {
                    member_id: m.member_id.to_string(),
                    member_epoch: m.member_epoch,
                    client_id: m.client_id.to_string(),
                    client_host: m.client_host.to_string(),
                    assignment: m
                        .assignment
                        .topic_partitions
                        .into_iter()
                        .map(|t| (t.topic_name.to_string(), t.partitions))
                        .collect(),
                })
                .collect(),
        }))
    }

    /// The start offset of every share-partition of a share group with state
    /// (DescribeShareGroupOffsets).
    pub async fn share_group_offsets(
        self: &Arc<Self>,
        group_id: &str,
    ) -> Result<Vec<SharePartitionOffset>, ClientError> {
        use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
        use kafka_protocol::messages::DescribeShareGroupOffsetsRequest;
        let request = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
            DescribeShareGroupOffsetsRequestGroup::default()
                .with_group_id(GroupId(StrBytes::from_string(group_id.to_string())))
                .with_topics(None),
        ]);
        let response = self.coordinator(group_id).await?.request(&request).await?;
        let Some(g) = response.groups.into_iter().next() else {
            return Err(ClientError::Protocol(
                "empty DescribeShareGroupOffsets answer".into(),
            ));
        };
        check(g.error_code, g.error_message.as_deref())?;
        let mut out = Vec::new();
        for t in g.topics {
            for p in t.partitions {
                let stats = p
                    .unknown_tagged_fields
                    .get(&SHARE_PARTITION_STATS_TAG)
                    .and_then(|b| SharePartitionStats::decode(b));
                out.push(SharePartitionOffset {
                    topic: t.topic_name.to_string(),
                    partition: p.partition_index,
                    start_offset: (p.start_offset >= 0).then_some(p.start_offset),
                    stats,
                });
            }
        }
        Ok(out)
    }
}
