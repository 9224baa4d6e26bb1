//! ApiVersions: which APIs and versions this broker serves.
//!
//! A client sends its newest ApiVersions first. If this broker does not know that
//! version, it still answers, at version 0, with UNSUPPORTED_VERSION and the list of
//! APIs, so the client can retry with a version both sides know. The response header
//! is always version 0 (see `headway_protocol`).

use super::{ready, Call, Handler, HandlerError, Reply, APIS};
use headway_protocol::decode_body;
use headway_protocol::kafka_protocol::messages::api_versions_response::ApiVersion;
use headway_protocol::kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{encode_response, Request};

pub const HANDLER: Handler = Handler {
    key: ApiKey::ApiVersions,
    min_version: 0,
    max_version: 4,
    handle,
};

pub(super) fn api_list() -> Vec<ApiVersion> {
    APIS.iter()
        .map(|a| {
            ApiVersion::default()
                .with_api_key(a.key as i16)
                .with_min_version(a.min_version)
                .with_max_version(a.max_version)
        })
        .collect()
}

pub fn handle(_call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let version = request.api_version();
    if !(HANDLER.min_version..=HANDLER.max_version).contains(&version) {
        let body = ApiVersionsResponse::default()
            .with_error_code(ResponseError::UnsupportedVersion.code())
            .with_api_keys(api_list());
        let frame = encode_response(0, request.correlation_id(), &body)?;
        return Ok(Reply::Ready(frame));
    }
    let error_code = match decode_body::<ApiVersionsRequest>(request) {
        Ok(_) => 0,
        Err(e) => {
            tracing::warn!(error = %e, "malformed ApiVersions request");
            ResponseError::InvalidRequest.code()
        }
    };
    let body = ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(api_list());
    ready(request, &body)
}
