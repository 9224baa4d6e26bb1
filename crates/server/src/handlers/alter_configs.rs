//! AlterConfigs (the older form): replace a topic's explicit settings with the given
//! set. Kept for clients that predate IncrementalAlterConfigs (kafka-python's admin).
//! Topics and groups; authorized as IncrementalAlterConfigs is.

use super::incremental_alter_configs::{alter_group, alterable, refusals, response};
use crate::call::{pending, Call, Handler, HandlerError, Reply};
use crate::group_configs::RESOURCE_GROUP;
use crate::requests::{Codes, ErrorCodes};
use headway_protocol::kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use headway_protocol::kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, ApiKey,
};
use headway_protocol::{decode_body, Request};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::AlterConfigs,
    min_version: 0,
    max_version: 2,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: AlterConfigsRequest = decode_body(request)?;
    let refused = refusals(
        call,
        body.resources
            .iter()
            .map(|r| (r.resource_type, r.resource_name.as_str())),
    );
    let ctx = Arc::clone(ctx);
    pending(request, async move {
        let mut responses = Vec::with_capacity(body.resources.len());
        for (resource, refused) in body.resources.into_iter().zip(refused) {
            let wanted: BTreeMap<String, String> = resource
                .configs
                .iter()
                .filter_map(|c| {
                    c.value
                        .as_ref()
                        .map(|v| (c.name.to_string(), v.to_string()))
                })
                .collect();
            let outcome = match refused.map_or_else(|| alterable(resource.resource_type), Err) {
                Ok(()) => {
                    let replace = move |overrides: &mut BTreeMap<String, String>| {
                        *overrides = wanted;
                        Ok(())
                    };
                    if resource.resource_type == RESOURCE_GROUP {
                        alter_group(&ctx, &resource.resource_name, replace, body.validate_only)
                            .await
                    } else {
                        ctx.broker
                            .alter_topic_config(
                                &resource.resource_name,
                                replace,
                                body.validate_only,
                            )
                            .await
                    }
                }
                Err(e) => Err(e),
            };
            let r = response(resource.resource_type, resource.resource_name, outcome);
            responses.push(
                AlterConfigsResourceResponse::default()
                    .with_error_code(r.error_code)
                    .with_error_message(r.error_message)
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name),
            );
        }
        AlterConfigsResponse::default().with_responses(responses)
    })
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for AlterConfigsResponse {
    fn error_codes(&self, codes: &mut Codes) {
        self.responses.iter().for_each(|c| codes.add(c.error_code));
    }
}
