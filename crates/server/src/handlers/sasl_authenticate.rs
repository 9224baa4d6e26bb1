//! SaslAuthenticate after the connection's authentication: on a SASL listener, a step
//! of a re-authentication (KIP-368, `crate::sasl::reauth_token`), answered after the
//! failure delay when it fails; on a listener without SASL, Kafka's
//! ILLEGAL_SASL_STATE. The first authentication is served before the connection's
//! requests reach the handlers (`crate::sasl`).

use crate::call::{pending, ready, Call, Handler, HandlerError, Reply};
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
    if sasl::authenticated(call.conn) {
        let (response, delay) = sasl::reauth_token(call.conn, call.ctx, request)?;
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
