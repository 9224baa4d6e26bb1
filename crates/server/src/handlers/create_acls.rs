//! CreateAcls: adds ACLs, durably, for a principal with Alter on the cluster. Each
//! creation succeeds or fails on its own (INVALID_REQUEST for a bad ACL or one past
//! `limits::ACLS_MAX`).

use crate::authorize::{self, WireAcl};
use crate::call::{pending, ready, Call, Handler, HandlerError, Reply};
use crate::requests::ErrorCodes;
use headway_auth::acl::Operation;
use headway_protocol::kafka_protocol::messages::create_acls_response::AclCreationResult;
use headway_protocol::kafka_protocol::messages::{ApiKey, CreateAclsRequest, CreateAclsResponse};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, Request};
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::CreateAcls,
    min_version: 1,
    max_version: 3,
    handle,
};

fn failed(message: String) -> AclCreationResult {
    AclCreationResult::default()
        .with_error_code(ResponseError::InvalidRequest.code())
        .with_error_message(Some(StrBytes::from_string(message)))
}

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let body: CreateAclsRequest = decode_body(request)?;
    if let Some(code) = authorize::acl_api_refusal(call, Operation::Alter) {
        let result = AclCreationResult::default().with_error_code(code);
        let results = vec![result; body.creations.len()];
        return ready(
            request,
            &CreateAclsResponse::default().with_results(results),
        );
    }
    let bindings: Vec<_> = body
        .creations
        .iter()
        .map(|c| {
            WireAcl {
                resource_type: c.resource_type,
                resource_name: Some(&c.resource_name),
                pattern_type: c.resource_pattern_type,
                principal: Some(&c.principal),
                host: Some(&c.host),
                operation: c.operation,
                permission: c.permission_type,
            }
            .binding()
        })
        .collect();
    let authorizer = Arc::clone(&call.ctx.authorizer);
    pending(request, async move {
        let valid: Vec<_> = bindings.iter().filter_map(|b| b.clone().ok()).collect();
        // The store writes its file and syncs it: off the connection's thread.
        let created = tokio::task::spawn_blocking(move || authorizer.create(valid))
            .await
            .unwrap_or_default();
        let mut created = created.into_iter();
        let results = bindings
            .into_iter()
            .map(|binding| match binding {
                Err(message) => failed(message),
                Ok(_) => match created.next() {
                    Some(Ok(())) => AclCreationResult::default(),
                    Some(Err(e)) => failed(e.to_string()),
                    None => failed("the ACLs could not be stored".to_string()),
                },
            })
            .collect();
        CreateAclsResponse::default().with_results(results)
    })
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for CreateAclsResponse {}
