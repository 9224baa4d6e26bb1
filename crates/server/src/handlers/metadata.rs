//! Metadata: brokers (this one), topics and partition leaders (this one); in a cluster,
//! the brokers, the controller and the topics of the controller's image.
//! Unknown topics are created with default settings when auto-creation is on and the
//! client allows it (v4+).

use crate::authorize;
use crate::authorizer::Subject;
use crate::call::{pending, Call, Ctx, Handler, HandlerError, ListenerInfo, Reply};
use crate::cluster::{view, Cluster};
use crate::errors::error_code;
use crate::handlers::create_topics;
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::{Operation, ResourceType};
use headway_broker::{BrokerError, Topic};
use headway_protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
use headway_protocol::kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, BrokerId, MetadataRequest, MetadataResponse, TopicName,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::{decode_body, Request};
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::Metadata,
    min_version: 0,
    max_version: 12,
    handle,
};

/// TOPIC_ALREADY_EXISTS: a topic another request created meanwhile.
const TOPIC_ALREADY_EXISTS: i16 = 36;

/// "Authorized operations not requested", as Kafka encodes it.
const OPERATIONS_OMITTED: i32 = i32::MIN;

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: MetadataRequest = decode_body(request)?;
    let version = request.api_version();
    let ctx = Arc::clone(ctx);
    let listener = Arc::clone(&call.conn.listener);
    let subject = authorize::subject(call);
    if let Some(cluster) = &ctx.cluster {
        let cluster = Arc::clone(cluster);
        return pending(request, async move {
            let allow_create = version < 4 || body.allow_auto_topic_creation;
            clustered(
                &ctx,
                &cluster,
                &listener,
                &subject,
                body,
                version,
                allow_create,
            )
            .await
        });
    }
    pending(request, async move {
        let allow_create = version < 4 || body.allow_auto_topic_creation;
        let topics = match body.topics {
            // v0: an empty list means all topics; v1+: null means all topics.
            Some(list) if !(version == 0 && list.is_empty()) => {
                let mut out = Vec::with_capacity(list.len());
                for t in list {
                    out.push(
                        requested_topic(&ctx, &subject, t.name, t.topic_id, allow_create).await,
                    );
                }
                out
            }
            _ => {
                let node_id = ctx.broker.config().node_id;
                let topics = ctx.broker.topics();
                let shown =
                    |name: &str| subject.visible(Operation::Describe, ResourceType::Topic, name);
                let mut all: Vec<_> = topics
                    .iter()
                    .filter(|t| shown(t.name()))
                    .map(|t| topic_metadata(node_id, t))
                    .collect();
                let internal = ctx.broker.internal_logs();
                all.extend(
                    internal
                        .iter()
                        .filter(|(name, _)| shown(name))
                        .map(|(name, _)| internal_metadata(node_id, name)),
                );
                all
            }
        };
        let node_id = BrokerId(ctx.broker.config().node_id);
        MetadataResponse::default()
            .with_brokers(vec![MetadataResponseBroker::default()
                .with_node_id(node_id)
                .with_host(StrBytes::from_string(listener.advertised_host.clone()))
                .with_port(listener.advertised_port)])
            .with_cluster_id(Some(StrBytes::from_string(
                ctx.broker.cluster_id().to_string(),
            )))
            .with_controller_id(node_id)
            .with_cluster_authorized_operations(OPERATIONS_OMITTED)
            .with_topics(topics)
    })
}

/// In a cluster: the brokers, the controller and the topics as the controller's image
/// holds them (`crate::cluster::view`). Internal topics are this broker's own logs, as
/// for a broker alone.
async fn clustered(
    ctx: &Ctx,
    cluster: &Cluster,
    listener: &ListenerInfo,
    subject: &Subject,
    body: MetadataRequest,
    version: i16,
    allow_create: bool,
) -> MetadataResponse {
    let node_id = ctx.broker.config().node_id;
    let topics = match body.topics {
        // v0: an empty list means all topics; v1+: null means all topics.
        Some(list) if !(version == 0 && list.is_empty()) => {
            let mut out = Vec::with_capacity(list.len());
            for t in list {
                out.push(
                    clustered_topic(ctx, cluster, subject, t.name, t.topic_id, allow_create).await,
                );
            }
            out
        }
        _ => {
            let image = cluster.image();
            let shown =
                |name: &str| subject.visible(Operation::Describe, ResourceType::Topic, name);
            let mut all: Vec<_> = image
                .metadata
                .topics
                .iter()
                .filter(|(name, _)| shown(name))
                .map(|(name, topic)| view::topic_metadata(&image.metadata, name, topic))
                .collect();
            let internal = ctx.broker.internal_logs();
            all.extend(
                internal
                    .iter()
                    .filter(|(name, _)| shown(name))
                    .map(|(name, _)| internal_metadata(node_id, name)),
            );
            all
        }
    };
    let image = cluster.image();
    let brokers = view::live_nodes(&image.metadata, &listener.name)
        .into_iter()
        .map(|node| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(node.id))
                .with_host(StrBytes::from_string(node.host))
                .with_port(node.port)
        })
        .collect();
    MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(Some(StrBytes::from_string(
            cluster.cluster_id().to_string(),
        )))
        .with_controller_id(BrokerId(cluster.controller_id()))
        .with_cluster_authorized_operations(OPERATIONS_OMITTED)
        .with_topics(topics)
}

/// One requested topic in a cluster; an unknown one is created through the controller
/// when auto-creation is on and allowed.
async fn clustered_topic(
    ctx: &Ctx,
    cluster: &Cluster,
    subject: &Subject,
    name: Option<TopicName>,
    topic_id: uuid::Uuid,
    allow_create: bool,
) -> MetadataResponseTopic {
    let node_id = ctx.broker.config().node_id;
    let describable = |name: &str| subject.allowed(Operation::Describe, ResourceType::Topic, name);
    let image = cluster.image();
    let Some(name) = name else {
        return match view::find_topic(&image.metadata, None, topic_id) {
            Some((name, _)) if !describable(name) => {
                error_topic(None, topic_id, &authorize::topic_denied(name))
            }
            Some((name, topic)) => view::topic_metadata(&image.metadata, name, topic),
            None => error_topic(None, topic_id, &BrokerError::UnknownTopicId(topic_id)),
        };
    };
    if !describable(&name) {
        return error_topic(
            Some(name.clone()),
            uuid::Uuid::nil(),
            &authorize::topic_denied(&name),
        );
    }
    if ctx.broker.is_internal(&name) {
        return internal_metadata(node_id, &name);
    }
    if let Some(topic) = image.metadata.topics.get(&**name) {
        return view::topic_metadata(&image.metadata, &name, topic);
    }
    let allow_create = allow_create
        && ctx.broker.config().auto_create_topics
        && (subject.visible(
            Operation::Create,
            ResourceType::Cluster,
            crate::authorizer::CLUSTER,
        ) || subject.allowed(Operation::Create, ResourceType::Topic, &name));
    let unknown = BrokerError::UnknownTopicOrPartition {
        topic: name.to_string(),
        partition: None,
    };
    if !allow_create {
        return error_topic(Some(name), uuid::Uuid::nil(), &unknown);
    }
    let defaults = CreatableTopic::default()
        .with_name(name.clone())
        .with_num_partitions(-1)
        .with_replication_factor(-1);
    match create_topics::create_in_cluster(ctx, cluster, defaults, false).await {
        Ok(_) | Err((TOPIC_ALREADY_EXISTS, _)) => {
            let image = cluster.image();
            match image.metadata.topics.get(&**name) {
                Some(topic) => view::topic_metadata(&image.metadata, &name, topic),
                None => error_topic(Some(name), uuid::Uuid::nil(), &unknown),
            }
        }
        Err((code, message)) => {
            tracing::debug!(topic = %&*name, code, %message, "auto-creating a topic in the cluster");
            MetadataResponseTopic::default()
                .with_error_code(code)
                .with_name(Some(name))
                .with_topic_authorized_operations(OPERATIONS_OMITTED)
        }
    }
}

async fn requested_topic(
    ctx: &Ctx,
    subject: &Subject,
    name: Option<TopicName>,
    topic_id: uuid::Uuid,
    allow_create: bool,
) -> MetadataResponseTopic {
    let node_id = ctx.broker.config().node_id;
    let describable = |name: &str| subject.allowed(Operation::Describe, ResourceType::Topic, name);
    let Some(name) = name else {
        return match ctx.broker.topic_by_id(topic_id) {
            Some(topic) if !describable(topic.name()) => {
                error_topic(None, topic_id, &authorize::topic_denied(topic.name()))
            }
            Some(topic) => topic_metadata(node_id, &topic),
            None => error_topic(None, topic_id, &BrokerError::UnknownTopicId(topic_id)),
        };
    };
    if !describable(&name) {
        return error_topic(
            Some(name.clone()),
            uuid::Uuid::nil(),
            &authorize::topic_denied(&name),
        );
    }
    // Creating a topic needs Create on the cluster or on the topic.
    let allow_create = allow_create
        && ctx.broker.topic(&name).is_none()
        && (subject.visible(
            Operation::Create,
            ResourceType::Cluster,
            crate::authorizer::CLUSTER,
        ) || subject.allowed(Operation::Create, ResourceType::Topic, &name));
    if ctx.broker.is_internal(&name) {
        return internal_metadata(node_id, &name);
    }
    let found = if allow_create {
        ctx.broker.topic_or_create(&name).await
    } else {
        ctx.broker
            .topic(&name)
            .ok_or(BrokerError::UnknownTopicOrPartition {
                topic: name.to_string(),
                partition: None,
            })
    };
    match found {
        Ok(topic) => topic_metadata(node_id, &topic),
        Err(e) => error_topic(Some(name), uuid::Uuid::nil(), &e),
    }
}

fn error_topic(
    name: Option<TopicName>,
    topic_id: uuid::Uuid,
    error: &BrokerError,
) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(error_code(error))
        .with_name(name)
        .with_topic_id(topic_id)
        .with_topic_authorized_operations(OPERATIONS_OMITTED)
}

fn topic_metadata(node_id: i32, topic: &Topic) -> MetadataResponseTopic {
    let indexes = topic.partitions().iter().map(|p| p.index().value());
    let mut described = described(node_id, topic.name(), topic.id(), indexes);
    for (answer, p) in described.partitions.iter_mut().zip(topic.partitions()) {
        if let Some(cause) = p.unopened_cause() {
            *answer = offline_partition(node_id, answer.partition_index, cause);
        } else if p.health().offline {
            // Taken offline while serving (a failed fsync, a write that could not be
            // undone, a panic in its writer): not led until the broker restarts.
            let cause = "the partition went offline after a storage failure";
            *answer = offline_partition(node_id, answer.partition_index, cause);
        }
    }
    described
}

/// A partition whose log could not be opened, or that went offline since: no leader,
/// this broker's replica offline, and KAFKA_STORAGE_ERROR, which every client treats as retriable (it
/// refreshes metadata and waits for a leader) while the other partitions are served.
fn offline_partition(node_id: i32, index: i32, cause: &str) -> MetadataResponsePartition {
    let node = BrokerId(node_id);
    let error = BrokerError::Storage(cause.to_string());
    MetadataResponsePartition::default()
        .with_error_code(error_code(&error))
        .with_partition_index(index)
        .with_leader_id(BrokerId(-1))
        .with_leader_epoch(0)
        .with_replica_nodes(vec![node])
        .with_isr_nodes(vec![])
        .with_offline_replicas(vec![node])
}

/// An internal topic (one partition, the broker's own log): marked internal, and
/// without a topic id, so that clients address it by name.
fn internal_metadata(node_id: i32, name: &str) -> MetadataResponseTopic {
    described(node_id, name, uuid::Uuid::nil(), [0]).with_is_internal(true)
}

/// A topic led by this broker alone.
fn described(
    node_id: i32,
    name: &str,
    id: uuid::Uuid,
    indexes: impl IntoIterator<Item = i32>,
) -> MetadataResponseTopic {
    let node = BrokerId(node_id);
    let partitions = indexes
        .into_iter()
        .map(|index| {
            MetadataResponsePartition::default()
                .with_partition_index(index)
                .with_leader_id(node)
                .with_leader_epoch(0)
                .with_replica_nodes(vec![node])
                .with_isr_nodes(vec![node])
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(name.to_string()))))
        .with_topic_id(id)
        .with_partitions(partitions)
        .with_topic_authorized_operations(OPERATIONS_OMITTED)
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for MetadataResponse {
    fn error_codes(&self, codes: &mut Codes) {
        for t in &self.topics {
            codes.add(t.error_code);
            t.partitions.iter().for_each(|p| codes.add(p.error_code));
        }
    }
}
