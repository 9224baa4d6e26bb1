//! Heartbeat: keeps a member's session alive and tells it when to rejoin
//! (REBALANCE_IN_PROGRESS).

use crate::authorize;
use crate::call::{ready, Call, Handler, HandlerError, Reply};
use crate::errors::group_code;
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_group::GenerationId;
use headway_protocol::kafka_protocol::messages::{ApiKey, HeartbeatRequest, HeartbeatResponse};
use headway_protocol::{decode_body, Request};

pub const HANDLER: Handler = Handler {
    key: ApiKey::Heartbeat,
    min_version: 0,
    max_version: 4,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: HeartbeatRequest = decode_body(request)?;
    if let Some(code) = authorize::group_refusal(call, Operation::Read, &body.group_id) {
        return ready(request, &HeartbeatResponse::default().with_error_code(code));
    }
    let outcome = ctx.groups.of(&body.group_id).and_then(|c| {
        c.heartbeat(
            &body.group_id,
            &body.member_id,
            body.group_instance_id.as_deref(),
            GenerationId::from_wire(body.generation_id),
        )
    });
    ready(
        request,
        &HeartbeatResponse::default().with_error_code(group_code(outcome.err())),
    )
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for HeartbeatResponse {
    fn error_codes(&self, codes: &mut Codes) {
        codes.add(self.error_code);
    }
}
