//! CreatePartitions: grow a topic's partition count. Manual replica assignments are
//! refused for a broker alone (it holds every partition); in a cluster they are taken,
//! or the new partitions placed, and the change goes through the controller. Each topic needs Alter on it.

use crate::authorize;
use crate::call::{pending, Call, Handler, HandlerError, Reply};
use crate::cluster::{view, Cluster};
use crate::errors::code_and_message;
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::{Operation, ResourceType};
use headway_broker::BrokerError;
use headway_controller::{Command, Outcome};
use headway_protocol::kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use headway_protocol::kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreatePartitionsResponse,
};
use headway_protocol::{decode_body, Request};
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::CreatePartitions,
    min_version: 0,
    max_version: 3,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: CreatePartitionsRequest = decode_body(request)?;
    let ctx = Arc::clone(ctx);
    let subject = authorize::subject(call);
    pending(request, async move {
        let mut results = Vec::with_capacity(body.topics.len());
        for t in body.topics {
            let outcome = if !subject.allowed(Operation::Alter, ResourceType::Topic, &t.name) {
                Err(authorize::topic_denied(&t.name))
            } else if let Some(cluster) = &ctx.cluster {
                let manual = t.assignments.as_ref().filter(|a| !a.is_empty()).map(|a| {
                    a.iter()
                        .map(|p| p.broker_ids.iter().map(|b| b.0).collect())
                        .collect()
                });
                grow_in_cluster(cluster, &t.name, t.count, manual, body.validate_only).await
            } else if t.assignments.as_ref().is_some_and(|a| !a.is_empty()) {
                Err(BrokerError::InvalidRequest(
                    "manual replica assignment is not supported".into(),
                ))
            } else {
                ctx.broker
                    .add_partitions(&t.name, t.count, body.validate_only)
                    .await
            };
            let mut result = CreatePartitionsTopicResult::default().with_name(t.name);
            if let Err(e) = outcome {
                let (code, message) = code_and_message(&e);
                result = result.with_error_code(code).with_error_message(message);
            }
            results.push(result);
        }
        CreatePartitionsResponse::default().with_results(results)
    })
}

/// In a cluster: places the new partitions (or takes the manual assignment) and
/// proposes `CreatePartitions`.
async fn grow_in_cluster(
    cluster: &Cluster,
    name: &str,
    count: i32,
    manual: Option<Vec<Vec<i32>>>,
    validate_only: bool,
) -> Result<(), BrokerError> {
    let refused = |(code, reason): (i16, String)| BrokerError::ControllerRefused { code, reason };
    let image = cluster.image();
    let assignment =
        view::plan_new_partitions(&image.metadata, name, count, manual).map_err(refused)?;
    if validate_only {
        return Ok(());
    }
    let command = Command::CreatePartitions {
        name: name.to_string(),
        assignment,
        total: count,
    };
    match cluster.decide(command).await.map_err(refused)? {
        Outcome::Refused { code, message } => Err(refused((code, message))),
        _ => Ok(()),
    }
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for CreatePartitionsResponse {
    fn error_codes(&self, codes: &mut Codes) {
        self.results.iter().for_each(|t| codes.add(t.error_code));
    }
}
