//! DeleteGroups: remove groups without members, with their committed offsets; a share
//! group without members goes with its share-partition state. Each group needs Delete
//! on it (GROUP_AUTHORIZATION_FAILED otherwise).

use crate::authorize;
use crate::call::{pending, Call, Handler, HandlerError, Reply};
use crate::errors::{group_code, share_error_code};
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_protocol::kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use headway_protocol::kafka_protocol::messages::{
    ApiKey, DeleteGroupsRequest, DeleteGroupsResponse,
};
use headway_protocol::{decode_body, Request};
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::DeleteGroups,
    min_version: 0,
    max_version: 2,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: DeleteGroupsRequest = decode_body(request)?;
    let refused: Vec<Option<i16>> = body
        .groups_names
        .iter()
        .map(|id| authorize::group_refusal(call, Operation::Delete, id))
        .collect();
    let ctx = Arc::clone(ctx);
    pending(request, async move {
        let mut results = Vec::with_capacity(body.groups_names.len());
        for (id, refused) in body.groups_names.into_iter().zip(refused) {
            let elsewhere = super::share_group_heartbeat::coordinated_elsewhere(&ctx, &id);
            let code = match ctx.shares.group_exists(&id) {
                _ if refused.is_some() => refused.unwrap_or_default(),
                _ if elsewhere.is_some() => elsewhere.unwrap_or_default(),
                true => match ctx.shares.delete(&id).await {
                    Ok(()) => 0,
                    Err(e) => share_error_code(&e),
                },
                false => match ctx.groups.of(&id) {
                    Ok(coordinator) => group_code(coordinator.delete(&id).await.err()),
                    Err(e) => group_code(Some(e)),
                },
            };
            results.push(
                DeletableGroupResult::default()
                    .with_group_id(id)
                    .with_error_code(code),
            );
        }
        DeleteGroupsResponse::default().with_results(results)
    })
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for DeleteGroupsResponse {
    fn error_codes(&self, codes: &mut Codes) {
        self.results.iter().for_each(|g| codes.add(g.error_code));
    }
}
