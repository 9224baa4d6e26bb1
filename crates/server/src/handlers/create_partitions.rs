//! CreatePartitions: grow a topic's partition count. Manual replica assignments are
//! refused (one broker holds every partition). Each topic needs Alter on it.

use crate::authorize;
use crate::call::{pending, Call, Handler, HandlerError, Reply};
use crate::errors::code_and_message;
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::{Operation, ResourceType};
use headway_broker::BrokerError;
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

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for CreatePartitionsResponse {
    fn error_codes(&self, codes: &mut Codes) {
        self.results.iter().for_each(|t| codes.add(t.error_code));
    }
}
