//! SaslHandshake outside an authentication: on a listener without SASL, or on a
//! connection that has authenticated already. The exchange itself is served before
//! the connection's requests reach the handlers (`crate::sasl`); here the answer is
//! Kafka's ILLEGAL_SASL_STATE.

use super::{ready, Call, Handler, HandlerError, Reply};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, SaslHandshakeRequest, SaslHandshakeResponse,
};
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, Request};

pub const HANDLER: Handler = Handler {
    key: ApiKey::SaslHandshake,
    min_version: 0,
    max_version: 1,
    handle,
};

pub fn handle(_call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let _: SaslHandshakeRequest = decode_body(request)?;
    ready(
        request,
        &SaslHandshakeResponse::default().with_error_code(ResponseError::IllegalSaslState.code()),
    )
}
