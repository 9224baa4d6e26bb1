//! FindCoordinator: this broker coordinates every group (and, for clients that ask,
//! every transactional id). v4+ asks for several keys at once.

use super::{ready, ApiSpec, Ctx, HandlerError, Reply};
use headway_protocol::kafka_protocol::messages::find_coordinator_response::Coordinator;
use headway_protocol::kafka_protocol::messages::{
    ApiKey, BrokerId, FindCoordinatorRequest, FindCoordinatorResponse,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::{decode_body, Request};
use std::sync::Arc;

pub const API: ApiSpec = ApiSpec {
    key: ApiKey::FindCoordinator,
    min_version: 0,
    max_version: 6,
};

const BATCHED_KEYS_MIN_VERSION: i16 = 4;

pub fn handle(ctx: &Arc<Ctx>, request: &Request) -> Result<Reply, HandlerError> {
    let body: FindCoordinatorRequest = decode_body(request)?;
    let node = BrokerId(ctx.broker.config().node_id);
    let host = StrBytes::from_string(ctx.advertised_host.clone());
    let response = if request.api_version() >= BATCHED_KEYS_MIN_VERSION {
        FindCoordinatorResponse::default().with_coordinators(
            body.coordinator_keys
                .into_iter()
                .map(|key| {
                    Coordinator::default()
                        .with_key(key)
                        .with_node_id(node)
                        .with_host(host.clone())
                        .with_port(ctx.advertised_port)
                })
                .collect(),
        )
    } else {
        FindCoordinatorResponse::default()
            .with_node_id(node)
            .with_host(host)
            .with_port(ctx.advertised_port)
    };
    ready(request, &response)
}
