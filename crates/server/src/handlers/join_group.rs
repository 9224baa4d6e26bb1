//! JoinGroup: enter a group's next generation. The answer waits until the rebalance
//! completes (every member rejoined, or the rebalance timeout passed). From v4 a new
//! member first gets MEMBER_ID_REQUIRED with its id and joins again with it.

use crate::authorize;
use crate::call::{pending, ready, Call, Handler, HandlerError, Reply};
use crate::errors::group_code;
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_group::{GenerationId, JoinRequest, JoinResult};
use headway_protocol::kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use headway_protocol::kafka_protocol::messages::{ApiKey, JoinGroupRequest, JoinGroupResponse};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, Request};
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::JoinGroup,
    min_version: 0,
    max_version: 9,
    handle,
};

const KNOWN_MEMBER_ID_MIN_VERSION: i16 = 4;

fn str_of(s: Option<String>) -> Option<StrBytes> {
    s.map(StrBytes::from_string)
}

/// The client id a member is described with (empty when the header has none).
pub(super) fn client_id(request: &Request) -> String {
    let id = request.header.client_id.as_ref();
    id.map(|c| c.to_string()).unwrap_or_default()
}

/// The host a member is described with, as Kafka prints it ("/address").
pub(super) fn client_host(peer: std::net::SocketAddr) -> String {
    format!("/{}", peer.ip())
}

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let (ctx, peer) = (call.ctx, call.conn.peer);
    let body: JoinGroupRequest = decode_body(request)?;
    if let Some(code) = authorize::group_refusal(call, Operation::Read, &body.group_id) {
        return ready(request, &JoinGroupResponse::default().with_error_code(code));
    }
    let version = request.api_version();
    let join = JoinRequest {
        group_id: body.group_id.to_string(),
        member_id: body.member_id.to_string(),
        group_instance_id: body.group_instance_id.map(|s| s.to_string()),
        client_id: client_id(request),
        client_host: client_host(peer),
        session_timeout_ms: body.session_timeout_ms,
        // v0 has no rebalance timeout: it is the session timeout.
        rebalance_timeout_ms: if version == 0 {
            body.session_timeout_ms
        } else {
            body.rebalance_timeout_ms
        },
        protocol_type: body.protocol_type.to_string(),
        protocols: body
            .protocols
            .into_iter()
            .map(|p| (p.name.to_string(), p.metadata))
            .collect(),
        require_known_member_id: version >= KNOWN_MEMBER_ID_MIN_VERSION,
    };
    if ctx.shares.group_exists(&join.group_id) {
        // One namespace of group ids: a share group takes no classic members.
        let code = ResponseError::InconsistentGroupProtocol.code();
        return ready(request, &JoinGroupResponse::default().with_error_code(code));
    }
    let ctx = Arc::clone(ctx);
    pending(request, async move {
        let r = match ctx.groups.of(&join.group_id) {
            Ok(coordinator) => coordinator.join(join).await,
            Err(e) => JoinResult {
                error: Some(e),
                generation_id: None,
                member_id: join.member_id,
                ..JoinResult::default()
            },
        };
        JoinGroupResponse::default()
            .with_error_code(group_code(r.error))
            .with_generation_id(GenerationId::to_wire(r.generation_id))
            .with_protocol_type(str_of(r.protocol_type))
            .with_protocol_name(str_of(r.protocol_name))
            .with_leader(StrBytes::from_string(r.leader))
            .with_member_id(StrBytes::from_string(r.member_id))
            .with_members(
                r.members
                    .into_iter()
                    .map(|m| {
                        JoinGroupResponseMember::default()
                            .with_member_id(StrBytes::from_string(m.member_id))
                            .with_group_instance_id(str_of(m.group_instance_id))
                            .with_metadata(m.metadata)
                    })
                    .collect(),
            )
    })
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for JoinGroupResponse {
    fn error_codes(&self, codes: &mut Codes) {
        codes.add(self.error_code);
    }
}
