//! FindCoordinator: this broker coordinates every group (and, for clients that ask,
//! every transactional id). v4+ asks for several keys at once.

use crate::authorize;
use crate::call::{ready, Call, Handler, HandlerError, Reply};
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_protocol::kafka_protocol::messages::find_coordinator_response::Coordinator;
use headway_protocol::kafka_protocol::messages::{
    ApiKey, BrokerId, FindCoordinatorRequest, FindCoordinatorResponse,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::{decode_body, Request};

pub const HANDLER: Handler = Handler {
    key: ApiKey::FindCoordinator,
    min_version: 0,
    max_version: 6,
    handle,
};

const BATCHED_KEYS_MIN_VERSION: i16 = 4;

/// Describe on the group (key type 0) or the transactional id (key type 1) the
/// coordinator is asked for.
fn refusal(call: &Call<'_>, key_type: i8, key: &str) -> Option<i16> {
    match key_type {
        TRANSACTION_KEY_TYPE => authorize::transactional_id_refusal(call, Operation::Describe, key),
        _ => authorize::group_refusal(call, Operation::Describe, key),
    }
}

const TRANSACTION_KEY_TYPE: i8 = 1;

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: FindCoordinatorRequest = decode_body(request)?;
    let node = BrokerId(ctx.broker.config().node_id);
    let host = StrBytes::from_string(call.conn.listener.advertised_host.clone());
    let response = if request.api_version() >= BATCHED_KEYS_MIN_VERSION {
        FindCoordinatorResponse::default().with_coordinators(
            body.coordinator_keys
                .into_iter()
                .map(|key| {
                    let refused = refusal(call, body.key_type, &key);
                    Coordinator::default()
                        .with_error_code(refused.unwrap_or(0))
                        .with_key(key)
                        .with_node_id(node)
                        .with_host(host.clone())
                        .with_port(call.conn.listener.advertised_port)
                })
                .collect(),
        )
    } else {
        let refused = refusal(call, body.key_type, &body.key);
        FindCoordinatorResponse::default()
            .with_error_code(refused.unwrap_or(0))
            .with_node_id(node)
            .with_host(host)
            .with_port(call.conn.listener.advertised_port)
    };
    ready(request, &response)
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for FindCoordinatorResponse {
    fn error_codes(&self, codes: &mut Codes) {
        codes.add(self.error_code);
        self.coordinators
            .iter()
            .for_each(|c| codes.add(c.error_code));
    }
}
