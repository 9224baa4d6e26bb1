//! SaslAuthenticate: on a SASL listener, a step of the first authentication (served
//! one request at a time by `crate::authentication`) or of a re-authentication
//! (KIP-368), `crate::sasl::token`, answered after the failure delay when it fails;
//! on a listener without SASL, Kafka's ILLEGAL_SASL_STATE.

use crate::call::{pending, ready, Call, Handler, HandlerError, Reply};
use crate::requests::ErrorCodes;
use crate::sasl;
use headway_protocol::kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, Request};

pub const HANDLER: Handler = Handler {
    key: ApiKey::SaslAuthenticate,
    min_version: 0,
    max_version: 2,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let (authenticating, authenticated) = (
        sasl::authenticating(call.conn),
        sasl::authenticated(call.conn),
    );
    if authenticating || authenticated {
        let (response, delay) = sasl::token(call.conn, call.ctx, request, authenticated)?;
        if delay.is_zero() {
            return ready(request, &response);
        }
        return pending(request, async move {
            tokio::time::sleep(delay).await;
            response
        });
    }
    let _: SaslAuthenticateRequest = decode_body(request)?;
    ready(
        request,
        &SaslAuthenticateResponse::default()
            .with_error_code(ResponseError::IllegalSaslState.code())
            .with_error_message(Some(StrBytes::from_static_str(
                "SaslAuthenticate is served only while a SASL listener's connection authenticates",
            ))),
    )
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for SaslAuthenticateResponse {}
