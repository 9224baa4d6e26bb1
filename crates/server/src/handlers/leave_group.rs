//! LeaveGroup: members leave at once instead of waiting for their session to expire.
//! v3+ names several members, by member id or group.instance.id.

use crate::authorize;
use crate::call::{ready, Call, Handler, HandlerError, Reply};
use crate::errors::{group_code, group_error_code};
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_protocol::kafka_protocol::messages::leave_group_response::MemberResponse;
use headway_protocol::kafka_protocol::messages::{ApiKey, LeaveGroupRequest, LeaveGroupResponse};
use headway_protocol::{decode_body, Request};

pub const HANDLER: Handler = Handler {
    key: ApiKey::LeaveGroup,
    min_version: 0,
    max_version: 5,
    handle,
};

const BATCHED_MIN_VERSION: i16 = 3;

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: LeaveGroupRequest = decode_body(request)?;
    if let Some(code) = authorize::group_refusal(call, Operation::Read, &body.group_id) {
        return ready(
            request,
            &LeaveGroupResponse::default().with_error_code(code),
        );
    }
    let batched = request.api_version() >= BATCHED_MIN_VERSION;
    let leaving: Vec<(String, Option<String>)> = if batched {
        body.members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.as_ref().map(|s| s.to_string()),
                )
            })
            .collect()
    } else {
        vec![(body.member_id.to_string(), None)]
    };
    let left = ctx.groups.of(&body.group_id);
    let response = match left.and_then(|c| c.leave(&body.group_id, &leaving)) {
        Err(e) => LeaveGroupResponse::default().with_error_code(group_error_code(e)),
        Ok(results) if !batched => {
            LeaveGroupResponse::default().with_error_code(group_code(results[0].err()))
        }
        Ok(results) => LeaveGroupResponse::default().with_members(
            body.members
                .into_iter()
                .zip(results)
                .map(|(m, r)| {
                    MemberResponse::default()
                        .with_member_id(m.member_id)
                        .with_group_instance_id(m.group_instance_id)
                        .with_error_code(group_code(r.err()))
                })
                .collect(),
        ),
    };
    ready(request, &response)
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for LeaveGroupResponse {
    fn error_codes(&self, codes: &mut Codes) {
        codes.add(self.error_code);
        self.members.iter().for_each(|m| codes.add(m.error_code));
    }
}
