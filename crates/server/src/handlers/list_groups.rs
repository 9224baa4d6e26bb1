//! ListGroups: every group with its protocol type and (v4+) state, filtered by state
//! (v4+) and type (v5+: "classic", "consumer" for groups of the consumer protocol, or
//! "share"). Share groups are listed from v5 only, the version that names group types:
//! older clients list consumer groups and would take a share group for one.

use crate::authorize;
use crate::call::{ready, Call, Handler, HandlerError, Reply};
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::{Operation, ResourceType};
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

/// The group type (and protocol type) of share groups.
const SHARE: &str = "share";
const SHARE_GROUPS_MIN_VERSION: i16 = 5;

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
    let listed = |id: String, protocol_type: String, state: &'static str, kind: &'static str| {
        ListedGroup::default()
            .with_group_id(GroupId(StrBytes::from_string(id)))
            .with_protocol_type(StrBytes::from_string(protocol_type))
            .with_group_state(StrBytes::from_static_str(state))
            .with_group_type(StrBytes::from_static_str(kind))
    };
    // Groups the principal may not describe are left out, as Kafka does.
    let subject = authorize::subject(call);
    let shown = |id: &str| subject.visible(Operation::Describe, ResourceType::Group, id);
    let mut groups: Vec<ListedGroup> = ctx
        .groups
        .list()
        .into_iter()
        .filter(|g| type_ok(g.group_type) && state_ok(g.state) && shown(&g.group_id))
        .map(|g| listed(g.group_id, g.protocol_type, g.state, g.group_type))
        .collect();
    if request.api_version() >= SHARE_GROUPS_MIN_VERSION && type_ok(SHARE) {
        let shares = ctx
            .shares
            .list()
            .into_iter()
            .filter(|g| state_ok(g.state) && shown(&g.group_id))
            .filter(|g| {
                super::share_group_heartbeat::coordinated_elsewhere(ctx, &g.group_id).is_none()
            });
        groups.extend(shares.map(|g| listed(g.group_id, SHARE.to_string(), g.state, SHARE)));
    }
    ready(request, &ListGroupsResponse::default().with_groups(groups))
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for ListGroupsResponse {
    fn error_codes(&self, codes: &mut Codes) {
        codes.add(self.error_code);
    }
}
