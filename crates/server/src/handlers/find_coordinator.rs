//! FindCoordinator: a broker alone coordinates every group (and, for clients that ask,
//! every transactional id and share group). In a cluster a group's coordinator is the
//! leader of its partition of `__consumer_offsets`, a transactional id's the leader of
//! its partition of `__transaction_state` (`crate::cluster::coordinators`), each topic
//! created on the first request for its kind; share groups are still each broker's
//! own. v4+ asks for several keys at once.

use crate::authorize;
use crate::call::{pending, ready, Call, Handler, HandlerError, Reply};
use crate::cluster::coordinators::{self, LedCoordinators};
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_group::GroupShards;
use headway_protocol::kafka_protocol::messages::find_coordinator_response::Coordinator;
use headway_protocol::kafka_protocol::messages::{
    ApiKey, BrokerId, FindCoordinatorRequest, FindCoordinatorResponse,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::{decode_body, Request};
use headway_txn::TxnShards;
use std::sync::Arc;

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

const GROUP_KEY_TYPE: i8 = 0;
const TRANSACTION_KEY_TYPE: i8 = 1;

/// Where a key's coordinator is: its node, host and port, or an error code with a
/// message.
type Found = Result<(BrokerId, StrBytes, i32), (i16, String)>;

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: FindCoordinatorRequest = decode_body(request)?;
    let keys: Vec<StrBytes> = if request.api_version() >= BATCHED_KEYS_MIN_VERSION {
        body.coordinator_keys.clone()
    } else {
        vec![body.key.clone()]
    };
    let refused: Vec<Option<i16>> = keys
        .iter()
        .map(|k| refusal(call, body.key_type, k))
        .collect();
    let here: Found = Ok((
        BrokerId(ctx.broker.config().node_id),
        StrBytes::from_string(call.conn.listener.advertised_host.clone()),
        call.conn.listener.advertised_port,
    ));
    // In a cluster a group's or a transactional id's coordinator leads its partition
    // of the kind's internal topic; share groups are still each broker's own.
    let cluster = ctx
        .cluster
        .clone()
        .filter(|_| matches!(body.key_type, GROUP_KEY_TYPE | TRANSACTION_KEY_TYPE));
    let Some(cluster) = cluster else {
        let found = keys.iter().map(|_| here.clone()).collect();
        return ready(
            request,
            &answer(request.api_version(), keys, refused, found, here),
        );
    };
    let (ctx, listener) = (Arc::clone(ctx), call.conn.listener.name.clone());
    let version = request.api_version();
    pending(request, async move {
        let default_partitions = ctx.broker.config().default_partitions;
        let (ensured, topic) = match body.key_type {
            TRANSACTION_KEY_TYPE => (
                cluster
                    .ensure_coordinator_topic::<TxnShards>(default_partitions)
                    .await,
                TxnShards::TOPIC,
            ),
            _ => (
                cluster
                    .ensure_coordinator_topic::<GroupShards>(default_partitions)
                    .await,
                GroupShards::TOPIC,
            ),
        };
        let image = cluster.image();
        let found = keys
            .iter()
            .map(|key| {
                ensured.clone()?;
                let node = coordinators::coordinator_of(&image, topic, key, &listener)?;
                Ok((
                    BrokerId(node.id),
                    StrBytes::from_string(node.host),
                    node.port,
                ))
            })
            .collect();
        answer(version, keys, refused, found, here)
    })
}

/// The answer: one coordinator per key (v4+), or the only key's in the top-level fields.
fn answer(
    version: i16,
    keys: Vec<StrBytes>,
    refused: Vec<Option<i16>>,
    found: Vec<Found>,
    here: Found,
) -> FindCoordinatorResponse {
    // A refused key names the broker asked, as it always has.
    let nowhere = (BrokerId(-1), StrBytes::default(), -1);
    let here = here.unwrap_or_else(|_| nowhere.clone());
    let each = keys
        .into_iter()
        .zip(refused)
        .zip(found)
        .map(|((key, refused), found)| {
            let (code, message, (node, host, port)) = match (refused, found) {
                (Some(code), _) => (code, None, here.clone()),
                (None, Ok(at)) => (0, None, at),
                (None, Err((code, message))) => (code, Some(message), nowhere.clone()),
            };
            // v0 has no error message.
            let message = message.filter(|_| version >= 1).map(StrBytes::from_string);
            (key, code, message, node, host, port)
        });
    if version >= BATCHED_KEYS_MIN_VERSION {
        let coordinators = each
            .map(|(key, code, message, node, host, port)| {
                Coordinator::default()
                    .with_key(key)
                    .with_error_code(code)
                    .with_error_message(message)
                    .with_node_id(node)
                    .with_host(host)
                    .with_port(port)
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let mut response = FindCoordinatorResponse::default();
    if let Some((_, code, message, node, host, port)) = each.into_iter().next() {
        response = response
            .with_error_code(code)
            .with_error_message(message)
            .with_node_id(node)
            .with_host(host)
            .with_port(port);
    }
    response
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
