//! DeleteTopics: by name (all versions) or by topic id (v6+); in a cluster, through the
//! controller. Each topic needs Delete
//! on it; a topic named by id also Describe, so that an id the principal may not
//! describe is not named in the answer (TOPIC_AUTHORIZATION_FAILED), as Kafka does.

use crate::authorize;
use crate::call::{pending, Call, Handler, HandlerError, Reply};
use crate::cluster::{view, Cluster};
use crate::errors::code_and_message;
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::{Operation, ResourceType};
use headway_broker::BrokerError;
use headway_controller::{Command, Outcome};
use headway_protocol::kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use headway_protocol::kafka_protocol::messages::{
    ApiKey, DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use headway_protocol::{decode_body, Request};
use std::sync::Arc;

const TOPIC: ResourceType = ResourceType::Topic;

pub const HANDLER: Handler = Handler {
    key: ApiKey::DeleteTopics,
    min_version: 1,
    max_version: 6,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: DeleteTopicsRequest = decode_body(request)?;
    // v6 lists topics by name or id; earlier versions list names only.
    let mut targets: Vec<(Option<TopicName>, uuid::Uuid)> = body
        .topic_names
        .into_iter()
        .map(|n| (Some(n), uuid::Uuid::nil()))
        .collect();
    targets.extend(body.topics.into_iter().map(|t| (t.name, t.topic_id)));
    let ctx = Arc::clone(ctx);
    let subject = authorize::subject(call);
    pending(request, async move {
        let mut responses = Vec::with_capacity(targets.len());
        for (name, id) in targets {
            let by_id = name.is_none();
            let image = ctx.cluster.as_ref().map(|c| c.image());
            let resolved = match (name, &image) {
                (Some(name), _) => Ok(name.to_string()),
                (None, Some(image)) => view::find_topic(&image.metadata, None, id)
                    .map(|(name, _)| name.to_string())
                    .ok_or(BrokerError::UnknownTopicId(id)),
                (None, None) => ctx
                    .broker
                    .topic_by_id(id)
                    .map(|t| t.name().to_string())
                    .ok_or(BrokerError::UnknownTopicId(id)),
            };
            let (name, id, outcome) = match resolved {
                Ok(name) if by_id && !subject.allowed(Operation::Describe, TOPIC, &name) => {
                    (None, id, Err(authorize::topic_denied(&name)))
                }
                Ok(name) if !subject.allowed(Operation::Delete, TOPIC, &name) => {
                    let e = authorize::topic_denied(&name);
                    (Some(TopicName(name.into())), id, Err(e))
                }
                Ok(name) if ctx.cluster.is_some() => {
                    let (id, outcome) = match &ctx.cluster {
                        Some(cluster) => delete_in_cluster(cluster, &name).await,
                        None => (id, Ok(())),
                    };
                    (Some(TopicName(name.into())), id, outcome)
                }
                Ok(name) => {
                    let id = ctx.broker.topic(&name).map_or(id, |t| t.id());
                    let outcome = ctx.broker.delete_topic(&name).await;
                    (Some(TopicName(name.into())), id, outcome)
                }
                Err(e) => (None, id, Err(e)),
            };
            let mut result = DeletableTopicResult::default()
                .with_name(name)
                .with_topic_id(id);
            if let Err(e) = outcome {
                let (code, message) = code_and_message(&e);
                result = result.with_error_code(code).with_error_message(message);
            }
            responses.push(result);
        }
        DeleteTopicsResponse::default().with_responses(responses)
    })
}

/// In a cluster: proposes `DeleteTopic` for the topic the image holds under `name`;
/// each broker's reconciler then deletes its copy.
async fn delete_in_cluster(cluster: &Cluster, name: &str) -> (uuid::Uuid, Result<(), BrokerError>) {
    let unknown = || BrokerError::UnknownTopicOrPartition {
        topic: name.to_string(),
        partition: None,
    };
    let Some(id) = cluster.image().metadata.topics.get(name).map(|t| t.id) else {
        return (uuid::Uuid::nil(), Err(unknown()));
    };
    let command = Command::DeleteTopic {
        name: name.to_string(),
        id,
    };
    let outcome = match cluster.decide(command).await {
        Ok(Outcome::Refused { code, message }) | Err((code, message)) => {
            Err(BrokerError::ControllerRefused {
                code,
                reason: message,
            })
        }
        Ok(_) => Ok(()),
    };
    (id, outcome)
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for DeleteTopicsResponse {
    fn error_codes(&self, codes: &mut Codes) {
        self.responses.iter().for_each(|t| codes.add(t.error_code));
    }
}
