//! DeleteAcls: removes the ACLs each filter matches, durably, for a principal with
//! Alter on the cluster; the answer lists what each filter removed. The next request
//! is checked without them.

use crate::authorize::{self, WireAcl};
use crate::call::{pending, ready, Call, Handler, HandlerError, Reply};
use crate::requests::ErrorCodes;
use headway_auth::acl::Operation;
use headway_protocol::kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use headway_protocol::kafka_protocol::messages::{ApiKey, DeleteAclsRequest, DeleteAclsResponse};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, Request};
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::DeleteAcls,
    min_version: 1,
    max_version: 3,
    handle,
};

fn failed(code: i16, message: Option<String>) -> DeleteAclsFilterResult {
    DeleteAclsFilterResult::default()
        .with_error_code(code)
        .with_error_message(message.map(StrBytes::from_string))
}

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let body: DeleteAclsRequest = decode_body(request)?;
    if let Some(code) = authorize::acl_api_refusal(call, Operation::Alter) {
        let results = vec![failed(code, None); body.filters.len()];
        return ready(
            request,
            &DeleteAclsResponse::default().with_filter_results(results),
        );
    }
    let filters: Vec<_> = body
        .filters
        .iter()
        .map(|f| {
            WireAcl {
                resource_type: f.resource_type_filter,
                resource_name: f.resource_name_filter.as_deref(),
                pattern_type: f.pattern_type_filter,
                principal: f.principal_filter.as_deref(),
                host: f.host_filter.as_deref(),
                operation: f.operation,
                permission: f.permission_type,
            }
            .filter()
        })
        .collect();
    let authorizer = Arc::clone(&call.ctx.authorizer);
    pending(request, async move {
        let valid: Vec<_> = filters.iter().filter_map(|f| f.clone().ok()).collect();
        // The store writes its file and syncs it: off the connection's thread.
        let removed = tokio::task::spawn_blocking(move || authorizer.delete(&valid))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()));
        let results = match removed {
            Err(message) => {
                let code = ResponseError::UnknownServerError.code();
                vec![failed(code, Some(message)); filters.len()]
            }
            Ok(removed) => {
                let mut removed = removed.into_iter();
                let invalid = ResponseError::InvalidRequest.code();
                filters
                    .into_iter()
                    .map(|filter| match filter {
                        Err(message) => failed(invalid, Some(message)),
                        Ok(_) => DeleteAclsFilterResult::default().with_matching_acls(
                            removed
                                .next()
                                .unwrap_or_default()
                                .into_iter()
                                .map(|acl| {
                                    DeleteAclsMatchingAcl::default()
                                        .with_resource_type(acl.resource_type.code())
                                        .with_resource_name(StrBytes::from_string(
                                            acl.resource_name,
                                        ))
                                        .with_pattern_type(acl.pattern_type.code())
                                        .with_principal(StrBytes::from_string(acl.principal))
                                        .with_host(StrBytes::from_string(acl.host))
                                        .with_operation(acl.operation.code())
                                        .with_permission_type(acl.permission.code())
                                })
                                .collect(),
                        ),
                    })
                    .collect()
            }
        };
        DeleteAclsResponse::default().with_filter_results(results)
    })
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for DeleteAclsResponse {}
