//! ListGroups: every group with its protocol type and (v4+) state, filtered by state
//! (v4+) and type (v5+: "classic", or "consumer" for groups of the consumer protocol).

use super::{ready, Call, Handler, HandlerError, Reply};
use headway_protocol::kafka_protocol::messages::list_groups_response::ListedGroup;
use headway_protocol::kafka_protocol::messages::{
    ApiKey, GroupId, ListGroupsRequest, ListGroupsResponse,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::{decode_body, Request};

pub const HANDLER: Handler = Handler {
    key: ApiKey::ListGroups,
    min_version: 0,
    max_version: 5,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: ListGroupsRequest = decode_body(request)?;
    let state_ok = |s: &str| {
        body.states_filter.is_empty()
            || body.states_filter.iter().any(|f| f.eq_ignore_ascii_case(s))
    };
    let type_ok = |t: &str| {
        body.types_filter.is_empty() || body.types_filter.iter().any(|f| f.eq_ignore_ascii_case(t))
    };
    let groups = ctx
        .groups
        .list()
        .into_iter()
        .filter(|g| type_ok(g.group_type) && state_ok(g.state))
        .map(|g| {
            ListedGroup::default()
                .with_group_id(GroupId(StrBytes::from_string(g.group_id)))
                .with_protocol_type(StrBytes::from_string(g.protocol_type))
                .with_group_state(StrBytes::from_static_str(g.state))
                .with_group_type(StrBytes::from_static_str(g.group_type))
        })
        .collect();
    ready(request, &ListGroupsResponse::default().with_groups(groups))
}
