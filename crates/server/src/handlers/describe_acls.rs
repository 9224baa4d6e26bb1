//! DescribeAcls: the ACLs a filter matches, grouped by resource pattern, for a
//! principal with Describe on the cluster.

use crate::authorize::{self, WireAcl};
use crate::call::{ready, Call, Handler, HandlerError, Reply};
use crate::requests::ErrorCodes;
use headway_auth::acl::{AclBinding, Operation};
use headway_protocol::kafka_protocol::messages::describe_acls_response::{
    AclDescription, DescribeAclsResource,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, DescribeAclsRequest, DescribeAclsResponse,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, Request};

pub const HANDLER: Handler = Handler {
    key: ApiKey::DescribeAcls,
    min_version: 1,
    max_version: 3,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let body: DescribeAclsRequest = decode_body(request)?;
    if let Some(code) = authorize::acl_api_refusal(call, Operation::Describe) {
        return ready(
            request,
            &DescribeAclsResponse::default().with_error_code(code),
        );
    }
    let filter = WireAcl {
        resource_type: body.resource_type_filter,
        resource_name: body.resource_name_filter.as_deref(),
        pattern_type: body.pattern_type_filter,
        principal: body.principal_filter.as_deref(),
        host: body.host_filter.as_deref(),
        operation: body.operation,
        permission: body.permission_type,
    }
    .filter();
    let response = match filter {
        Err(message) => DescribeAclsResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(StrBytes::from_string(message))),
        Ok(filter) => DescribeAclsResponse::default()
            .with_resources(resources(call.ctx.authorizer.describe(&filter))),
    };
    ready(request, &response)
}

/// The ACLs (sorted by resource pattern first) grouped by resource pattern.
fn resources(acls: Vec<AclBinding>) -> Vec<DescribeAclsResource> {
    let mut resources: Vec<DescribeAclsResource> = Vec::new();
    for acl in acls {
        let description = AclDescription::default()
            .with_principal(StrBytes::from_string(acl.principal))
            .with_host(StrBytes::from_string(acl.host))
            .with_operation(acl.operation.code())
            .with_permission_type(acl.permission.code());
        let same = resources.last_mut().filter(|r| {
            r.resource_type == acl.resource_type.code()
                && r.pattern_type == acl.pattern_type.code()
                && *r.resource_name == acl.resource_name
        });
        match same {
            Some(resource) => resource.acls.push(description),
            None => resources.push(
                DescribeAclsResource::default()
                    .with_resource_type(acl.resource_type.code())
                    .with_resource_name(StrBytes::from_string(acl.resource_name))
                    .with_pattern_type(acl.pattern_type.code())
                    .with_acls(vec![description]),
            ),
        }
    }
    resources
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for DescribeAclsResponse {}
