//! DescribeGroups: state, protocol and members (client id, host, metadata, assignment).
//! An unknown group is described as Dead with no members, as Kafka does. Each group
//! needs Describe on it (GROUP_AUTHORIZATION_FAILED, nothing else described).

use crate::authorize;
use crate::call::{ready, Call, Ctx, Handler, HandlerError, Reply};
use crate::errors::group_code;
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_protocol::kafka_protocol::messages::describe_groups_response::{
    DescribedGroup, DescribedGroupMember,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, DescribeGroupsRequest, DescribeGroupsResponse, GroupId,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::{decode_body, Request};

pub const HANDLER: Handler = Handler {
    key: ApiKey::DescribeGroups,
    min_version: 0,
    max_version: 5,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: DescribeGroupsRequest = decode_body(request)?;
    let groups = body
        .groups
        .into_iter()
        .map(
            |id| match authorize::group_refusal(call, Operation::Describe, &id) {
                Some(code) => DescribedGroup::default()
                    .with_group_id(id)
                    .with_error_code(code),
                None => describe(ctx, id),
            },
        )
        .collect();
    ready(
        request,
        &DescribeGroupsResponse::default().with_groups(groups),
    )
}

fn describe(ctx: &Ctx, id: GroupId) -> DescribedGroup {
    let coordinator = match ctx.groups.of(&id) {
        Ok(c) => c,
        Err(e) => {
            return DescribedGroup::default()
                .with_group_id(id)
                .with_error_code(group_code(Some(e)))
        }
    };
    match coordinator.describe(&id) {
        None => DescribedGroup::default()
            .with_group_id(id)
            .with_group_state(StrBytes::from_static_str("Dead")),
        Some(g) => DescribedGroup::default()
            .with_group_id(id)
            .with_group_state(StrBytes::from_static_str(g.state))
            .with_protocol_type(StrBytes::from_string(g.protocol_type))
            .with_protocol_data(StrBytes::from_string(g.protocol_name))
            .with_members(
                g.members
                    .into_iter()
                    .map(|m| {
                        DescribedGroupMember::default()
                            .with_member_id(StrBytes::from_string(m.member_id))
                            .with_group_instance_id(m.group_instance_id.map(StrBytes::from_string))
                            .with_client_id(StrBytes::from_string(m.client_id))
                            .with_client_host(StrBytes::from_string(m.client_host))
                            .with_member_metadata(m.metadata)
                            .with_member_assignment(m.assignment)
                    })
                    .collect(),
            ),
    }
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for DescribeGroupsResponse {
    fn error_codes(&self, codes: &mut Codes) {
        self.groups.iter().for_each(|g| codes.add(g.error_code));
    }
}
