//! ApiVersions: which APIs and versions this broker serves.
//!
//! A client sends its newest ApiVersions first. If this broker does not know that
//! version, it still answers, at version 0, with UNSUPPORTED_VERSION and the list of
//! APIs, so the client can retry with a version both sides know. The response header
//! is always version 0 (see `headway_protocol`).
//!
//! From v3 the answer also carries the broker's features (KIP-584), as Kafka 4.x
//! sends them: `transaction.version` supported 0..=2 and finalized at 2, so Java
//! clients 4.x run transactions version 2 (KIP-890: `docs/transactions.md`), and
//! `share.version` supported 0..=1 and finalized at 1, so share groups are on.

use crate::call::{ready, ready_at, Call, Handler, HandlerError, Reply};
use crate::requests::{Codes, ErrorCodes};
use headway_protocol::decode_body;
use headway_protocol::kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use headway_protocol::kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::Request;

pub const HANDLER: Handler = Handler {
    key: ApiKey::ApiVersions,
    min_version: 0,
    max_version: 4,
    handle,
};

/// A feature this broker supports: its name, the levels it supports, and the level
/// finalized (in use).
struct Feature {
    name: &'static str,
    min_level: i16,
    max_level: i16,
    finalized_level: i16,
}

/// The features advertised. A client keeps the finalized levels of the answer with
/// the highest epoch; they never change on this broker, so the epoch is constant
/// (and above the -1 Java clients start from, which they would ignore).
const FEATURES: &[Feature] = &[
    Feature {
        name: "transaction.version",
        min_level: 0,
        max_level: 2,
        finalized_level: 2,
    },
    // Level 1 is the consumer group protocol (KIP-848), as Kafka 4.x finalizes it.
    Feature {
        name: "group.version",
        min_level: 0,
        max_level: 1,
        finalized_level: 1,
    },
    // Share groups (`docs/share-groups.md`): the Java KafkaShareConsumer needs level 1
    // finalized.
    Feature {
        name: "share.version",
        min_level: 0,
        max_level: 1,
        finalized_level: 1,
    },
];
const FINALIZED_FEATURES_EPOCH: i64 = 1;
/// Before v4, supported features whose lowest level is 0 are left out, as Kafka does:
/// clients of that age refuse a range starting at 0.
const FEATURES_FROM_LEVEL_0_MIN_VERSION: i16 = 4;

/// The answer's list of APIs: every one the registry serves, with its versions.
pub fn api_list(served: &[Handler]) -> Vec<ApiVersion> {
    served
        .iter()
        .map(|a| {
            ApiVersion::default()
                .with_api_key(a.key as i16)
                .with_min_version(a.min_version)
                .with_max_version(a.max_version)
        })
        .collect()
}

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let version = request.api_version();
    if !(HANDLER.min_version..=HANDLER.max_version).contains(&version) {
        let body = ApiVersionsResponse::default()
            .with_error_code(ResponseError::UnsupportedVersion.code())
            .with_api_keys(api_list(call.served));
        return ready_at(0, request, &body);
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
        .with_api_keys(api_list(call.served))
        .with_supported_features(
            FEATURES
                .iter()
                .filter(|f| f.min_level > 0 || version >= FEATURES_FROM_LEVEL_0_MIN_VERSION)
                .map(|f| {
                    SupportedFeatureKey::default()
                        .with_name(StrBytes::from_static_str(f.name))
                        .with_min_version(f.min_level)
                        .with_max_version(f.max_level)
                })
                .collect(),
        )
        .with_finalized_features_epoch(FINALIZED_FEATURES_EPOCH)
        .with_finalized_features(
            FEATURES
                .iter()
                .map(|f| {
                    FinalizedFeatureKey::default()
                        .with_name(StrBytes::from_static_str(f.name))
                        .with_min_version_level(f.finalized_level)
                        .with_max_version_level(f.finalized_level)
                })
                .collect(),
        );
    ready(request, &body)
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for ApiVersionsResponse {
    fn error_codes(&self, codes: &mut Codes) {
        codes.add(self.error_code);
    }
}
