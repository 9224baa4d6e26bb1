//! SaslHandshake: on a SASL listener, the choice of the first authentication's
//! mechanism (`crate::sasl::first_handshake`, served one request at a time by
//! `crate::authentication`) or the start of a re-authentication (KIP-368,
//! `crate::sasl::reauth_handshake`); on a listener without SASL, Kafka's
//! ILLEGAL_SASL_STATE.

use crate::call::{ready, Call, Handler, HandlerError, Reply};
use crate::requests::ErrorCodes;
use crate::sasl;
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

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    if sasl::authenticating(call.conn) {
        return sasl::first_handshake(call.conn, call.ctx, request);
    }
    let _: SaslHandshakeRequest = decode_body(request)?;
    if sasl::authenticated(call.conn) {
        let response = sasl::reauth_handshake(call.conn, call.ctx, request);
        return ready(request, &response);
    }
    ready(
        request,
        &SaslHandshakeResponse::default().with_error_code(ResponseError::IllegalSaslState.code()),
    )
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for SaslHandshakeResponse {}
