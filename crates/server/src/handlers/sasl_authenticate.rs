//! SaslAuthenticate outside an authentication: on a listener without SASL, or on a
//! connection that has authenticated already (re-authentication is not served). The
//! exchange itself is served before the connection's requests reach the handlers
//! (`crate::sasl`); here the answer is Kafka's ILLEGAL_SASL_STATE.

use super::{ready, Call, Handler, HandlerError, Reply};
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

pub fn handle(_call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
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
