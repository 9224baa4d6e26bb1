//! SyncGroup: the leader hands out assignments; every member receives its own. A
//! follower's answer waits for the leader's SyncGroup.

use crate::authorize;
use crate::call::{pending, ready, Call, Handler, HandlerError, Reply};
use crate::errors::group_code;
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_group::{GenerationId, SyncRequest, SyncResult};
use headway_protocol::kafka_protocol::messages::{ApiKey, SyncGroupRequest, SyncGroupResponse};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::{decode_body, Request};
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::SyncGroup,
    min_version: 0,
    max_version: 5,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: SyncGroupRequest = decode_body(request)?;
    if let Some(code) = authorize::group_refusal(call, Operation::Read, &body.group_id) {
        return ready(request, &SyncGroupResponse::default().with_error_code(code));
    }
    let sync = SyncRequest {
        group_id: body.group_id.to_string(),
        generation_id: GenerationId::from_wire(body.generation_id),
        member_id: body.member_id.to_string(),
        group_instance_id: body.group_instance_id.map(|s| s.to_string()),
        protocol_type: body.protocol_type.map(|s| s.to_string()),
        protocol_name: body.protocol_name.map(|s| s.to_string()),
        assignments: body
            .assignments
            .into_iter()
            .map(|a| (a.member_id.to_string(), a.assignment))
            .collect(),
    };
    let ctx = Arc::clone(ctx);
    pending(request, async move {
        let r = match ctx.groups.of(&sync.group_id) {
            Ok(coordinator) => coordinator.sync(sync).await,
            Err(e) => SyncResult {
                error: Some(e),
                ..SyncResult::default()
            },
        };
        SyncGroupResponse::default()
            .with_error_code(group_code(r.error))
            .with_protocol_type(r.protocol_type.map(StrBytes::from_string))
            .with_protocol_name(r.protocol_name.map(StrBytes::from_string))
            .with_assignment(r.assignment)
    })
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for SyncGroupResponse {
    fn error_codes(&self, codes: &mut Codes) {
        codes.add(self.error_code);
    }
}
