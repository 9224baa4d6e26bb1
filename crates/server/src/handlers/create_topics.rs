//! CreateTopics: create topics with a partition count and Kafka-named settings.
//! In a cluster the topic is placed on the brokers (or where a manual assignment puts
//! it) and created through the controller ([`create_in_cluster`]). A broker alone keeps one replica, so a replication factor other than 1 (or -1, the
//! default) is refused, and a manual replica assignment is accepted when it places
//! every partition on this broker alone.

use crate::authorize;
use crate::call::{pending, Call, Ctx, Handler, HandlerError, Reply};
use crate::cluster::view::{self, Refusal};
use crate::cluster::Cluster;
use crate::errors::code_and_message;
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_broker::{BrokerError, Topic, TopicConfig};
use headway_controller::{Command, Outcome};
use headway_protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
use headway_protocol::kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::{decode_body, Request};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::CreateTopics,
    min_version: 2,
    max_version: 7,
    handle,
};

/// DescribeConfigs/CreateTopics config sources.
pub(crate) const SOURCE_TOPIC: i8 = 1;
pub(crate) const SOURCE_DEFAULT: i8 = 5;

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: CreateTopicsRequest = decode_body(request)?;
    // Create on the cluster allows any topic; otherwise Create on each topic.
    let anywhere = authorize::visible_on_cluster(call, Operation::Create);
    let allowed: Vec<bool> = body
        .topics
        .iter()
        .map(|t| anywhere || authorize::topic(call, Operation::Create, &t.name))
        .collect();
    let ctx = Arc::clone(ctx);
    if let Some(cluster) = &ctx.cluster {
        let cluster = Arc::clone(cluster);
        return pending(request, async move {
            let mut results = Vec::with_capacity(body.topics.len());
            for (topic, allowed) in body.topics.into_iter().zip(allowed) {
                let name = topic.name.clone();
                let created = match allowed {
                    true => create_in_cluster(&ctx, &cluster, topic, body.validate_only).await,
                    false => Err(refusal(&authorize::topic_denied(&name))),
                };
                let result = match created {
                    Ok(created) => CreatableTopicResult::default()
                        .with_topic_id(created.id)
                        .with_num_partitions(created.partitions)
                        .with_replication_factor(created.replication_factor)
                        .with_configs(Some(config_entries(&created.config))),
                    Err((code, message)) => CreatableTopicResult::default()
                        .with_error_code(code)
                        .with_error_message(Some(StrBytes::from_string(message)))
                        .with_num_partitions(-1)
                        .with_replication_factor(-1),
                };
                results.push(result.with_name(name));
            }
            CreateTopicsResponse::default().with_topics(results)
        });
    }
    pending(request, async move {
        let mut results = Vec::with_capacity(body.topics.len());
        for (topic, allowed) in body.topics.into_iter().zip(allowed) {
            let name = topic.name.clone();
            let created = match allowed {
                true => create(&ctx, topic, body.validate_only).await,
                false => Err(authorize::topic_denied(&name)),
            };
            let result = match created {
                Ok((partitions, config, id)) => CreatableTopicResult::default()
                    .with_topic_id(id)
                    .with_num_partitions(partitions)
                    .with_replication_factor(1)
                    .with_configs(Some(config_entries(&config))),
                Err(e) => {
                    let (code, message) = code_and_message(&e);
                    CreatableTopicResult::default()
                        .with_error_code(code)
                        .with_error_message(message)
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                }
            };
            results.push(result.with_name(name));
        }
        CreateTopicsResponse::default().with_topics(results)
    })
}

/// The partition count of a manual replica assignment, checked as Kafka checks one:
/// no partition count or replication factor beside it, partitions numbered from 0
/// without gaps, each placed on one broker that exists (here: this one).
fn assigned_partitions(ctx: &Ctx, topic: &CreatableTopic) -> Result<i32, BrokerError> {
    if topic.num_partitions != -1 || topic.replication_factor != -1 {
        return Err(BrokerError::InvalidRequest(
            "a manual replica assignment comes without a partition count or replication factor"
                .into(),
        ));
    }
    let node = ctx.broker.config().node_id;
    let count = topic.assignments.len();
    let mut seen = vec![false; count];
    for assignment in &topic.assignments {
        let index = usize::try_from(assignment.partition_index)
            .ok()
            .filter(|&i| i < count && !seen[i])
            .ok_or_else(|| {
                BrokerError::InvalidReplicaAssignment(format!(
                    "partition {} is not one of 0..{count}, or is assigned twice",
                    assignment.partition_index
                ))
            })?;
        seen[index] = true;
        if assignment.broker_ids.iter().map(|b| b.0).ne([node]) {
            return Err(BrokerError::InvalidReplicaAssignment(format!(
                "partition {index} is placed on brokers {:?}; this cluster is broker {node} alone",
                assignment
                    .broker_ids
                    .iter()
                    .map(|b| b.0)
                    .collect::<Vec<_>>()
            )));
        }
    }
    i32::try_from(count).map_err(|_| BrokerError::InvalidPartitions(i32::MAX))
}

async fn create(
    ctx: &Ctx,
    topic: CreatableTopic,
    validate_only: bool,
) -> Result<(i32, TopicConfig, uuid::Uuid), BrokerError> {
    if topic.replication_factor != -1 && topic.replication_factor != 1 {
        return Err(BrokerError::InvalidReplicationFactor(
            topic.replication_factor,
        ));
    }
    let partitions = match topic.assignments.is_empty() {
        true => (topic.num_partitions != -1).then_some(topic.num_partitions),
        false => Some(assigned_partitions(ctx, &topic)?),
    };
    let configs: BTreeMap<String, String> = topic
        .configs
        .into_iter()
        .filter_map(|c| c.value.map(|v| (c.name.to_string(), v.to_string())))
        .collect();
    if validate_only {
        let (partitions, config) = ctx.broker.plan_topic(&topic.name, partitions, &configs)?;
        config.check_remote_storage(&ctx.broker.config().log)?;
        return Ok((partitions, config, uuid::Uuid::nil()));
    }
    let created: Arc<Topic> = ctx
        .broker
        .create_topic(&topic.name, partitions, configs)
        .await?;
    Ok((
        created.partitions().len() as i32,
        created.config(),
        created.id(),
    ))
}

/// A broker error as a refusal: its code and message.
pub(crate) fn refusal(error: &BrokerError) -> Refusal {
    (crate::errors::error_code(error), error.to_string())
}

/// A topic created (or, with validate_only, checked) through the controller.
pub(crate) struct Created {
    pub id: uuid::Uuid,
    pub partitions: i32,
    pub replication_factor: i16,
    pub config: TopicConfig,
}

/// In a cluster: checks the name and settings here, places the replicas (or takes the
/// manual assignment) and proposes `CreateTopic`; the controller's refusal is the answer.
/// With `validate_only` nothing is proposed.
pub(crate) async fn create_in_cluster(
    ctx: &Ctx,
    cluster: &Cluster,
    topic: CreatableTopic,
    validate_only: bool,
) -> Result<Created, Refusal> {
    let refused = |e: BrokerError| refusal(&e);
    headway_broker::validate_topic_name(&topic.name).map_err(refused)?;
    if ctx.broker.is_internal(&topic.name) {
        return Err(refused(BrokerError::TopicAlreadyExists(
            topic.name.to_string(),
        )));
    }
    if headway_txn::is_coordinators_topic(&topic.name) {
        // Created by the cluster for its coordinators, with the settings they need.
        return Err(refused(BrokerError::InternalTopic(topic.name.to_string())));
    }
    let configs: BTreeMap<String, String> = topic
        .configs
        .iter()
        .filter_map(|c| {
            c.value
                .as_ref()
                .map(|v| (c.name.to_string(), v.to_string()))
        })
        .collect();
    let defaults = &ctx.broker.config().log;
    let config = TopicConfig::from_overrides(&configs, defaults).map_err(refused)?;
    config.check_remote_storage(defaults).map_err(refused)?;
    let image = cluster.image();
    if image.metadata.topics.contains_key(&**topic.name) {
        return Err(refused(BrokerError::TopicAlreadyExists(
            topic.name.to_string(),
        )));
    }
    let assignment = view::plan_topic(
        &image.metadata,
        cluster.settings(),
        &topic,
        ctx.broker.config().default_partitions,
    )?;
    let partitions = i32::try_from(assignment.len()).unwrap_or(i32::MAX);
    let replication_factor = assignment
        .first()
        .map_or(0, |r| i16::try_from(r.len()).unwrap_or(i16::MAX));
    let id = uuid::Uuid::new_v4();
    if !validate_only {
        let outcome = cluster
            .decide(Command::CreateTopic {
                name: topic.name.to_string(),
                id,
                assignment,
                configs,
            })
            .await?;
        if let Outcome::Refused { code, message } = outcome {
            return Err((code, message));
        }
    }
    Ok(Created {
        id: if validate_only { uuid::Uuid::nil() } else { id },
        partitions,
        replication_factor,
        config,
    })
}

fn config_entries(config: &TopicConfig) -> Vec<CreatableTopicConfigs> {
    config
        .entries()
        .into_iter()
        .map(|(name, value, explicit)| {
            CreatableTopicConfigs::default()
                .with_name(StrBytes::from_static_str(name))
                .with_value(Some(StrBytes::from_string(value)))
                .with_config_source(if explicit {
                    SOURCE_TOPIC
                } else {
                    SOURCE_DEFAULT
                })
        })
        .collect()
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for CreateTopicsResponse {
    fn error_codes(&self, codes: &mut Codes) {
        self.topics.iter().for_each(|t| codes.add(t.error_code));
    }
}
