//! IncrementalAlterConfigs: set or delete individual topic or group settings (a group's
//! in `crate::group_configs`). Broker settings are static (from the config file and
//! flags) and cannot be altered here. A topic needs AlterConfigs on it, a group
//! AlterConfigs on the group; a broker resource AlterConfigs on the cluster before it
//! is refused as unalterable.

use crate::authorize;
use crate::call::{pending, Call, Ctx, Handler, HandlerError, Reply};
use crate::errors::code_and_message;
use crate::group_configs::{self, Settings, RESOURCE_GROUP};
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_broker::BrokerError;
use headway_protocol::kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use headway_protocol::kafka_protocol::messages::{
    ApiKey, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::{decode_body, Request};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::IncrementalAlterConfigs,
    min_version: 0,
    max_version: 1,
    handle,
};

pub(crate) const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const RESOURCE_BROKER_LOGGER: i8 = 8;
const SET: i8 = 0;
const DELETE: i8 = 1;

/// Refuses resources other than topics and groups, with the reason.
pub(crate) fn alterable(resource_type: i8) -> Result<(), BrokerError> {
    if resource_type == RESOURCE_TOPIC || resource_type == RESOURCE_GROUP {
        Ok(())
    } else {
        Err(BrokerError::InvalidRequest(format!(
            "resource type {resource_type} cannot be altered: broker settings come from its config file and flags"
        )))
    }
}

/// Whether the call's principal may alter each resource (type, name), in order: the
/// refusal of each it may not.
pub(crate) fn refusals<'a>(
    call: &Call<'_>,
    resources: impl Iterator<Item = (i8, &'a str)>,
) -> Vec<Option<BrokerError>> {
    resources
        .map(|(kind, name)| match kind {
            RESOURCE_TOPIC if !authorize::topic(call, Operation::AlterConfigs, name) => {
                Some(authorize::topic_denied(name))
            }
            RESOURCE_GROUP if !authorize::group(call, Operation::AlterConfigs, name) => {
                Some(authorize::group_denied(name))
            }
            RESOURCE_BROKER | RESOURCE_BROKER_LOGGER
                if !authorize::cluster(call, Operation::AlterConfigs) =>
            {
                Some(authorize::cluster_denied())
            }
            _ => None,
        })
        .collect()
}

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: IncrementalAlterConfigsRequest = decode_body(request)?;
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
            let ops: Vec<(String, i8, Option<String>)> = resource
                .configs
                .iter()
                .map(|c| {
                    (
                        c.name.to_string(),
                        c.config_operation,
                        c.value.as_ref().map(|v| v.to_string()),
                    )
                })
                .collect();
            let outcome = match refused.map_or_else(|| alterable(resource.resource_type), Err) {
                Ok(()) => {
                    let apply = move |overrides: &mut BTreeMap<String, String>| {
                        apply_operations(overrides, ops)
                    };
                    if resource.resource_type == RESOURCE_GROUP {
                        alter_group(&ctx, &resource.resource_name, apply, body.validate_only).await
                    } else {
                        ctx.broker
                            .alter_topic_config(&resource.resource_name, apply, body.validate_only)
                            .await
                    }
                }
                Err(e) => Err(e),
            };
            responses.push(response(
                resource.resource_type,
                resource.resource_name,
                outcome,
            ));
        }
        IncrementalAlterConfigsResponse::default().with_responses(responses)
    })
}

/// Changes a group's settings durably, then applies them to its coordinators; in a
/// cluster, through the controller, whose decision every broker applies.
pub(crate) async fn alter_group(
    ctx: &Ctx,
    group_id: &str,
    change: impl FnOnce(&mut Settings) -> Result<(), BrokerError>,
    validate_only: bool,
) -> Result<(), BrokerError> {
    let settings = match &ctx.cluster {
        Some(cluster) => {
            let settings = ctx.group_configs.check(group_id, change)?;
            if validate_only {
                return Ok(());
            }
            cluster.set_group_configs(group_id, &settings).await?;
            if !ctx.group_configs.set(group_id, &settings) {
                return Ok(());
            }
            settings
        }
        None => {
            ctx.group_configs
                .alter(group_id, change, validate_only)
                .await?
        }
    };
    if !validate_only {
        tracing::info!(group = %group_id, ?settings, "group configs changed");
        group_configs::apply(&ctx.groups, &ctx.shares, group_id, &settings);
    }
    Ok(())
}

fn apply_operations(
    overrides: &mut BTreeMap<String, String>,
    ops: Vec<(String, i8, Option<String>)>,
) -> Result<(), BrokerError> {
    for (name, op, value) in ops {
        match (op, value) {
            (SET, Some(value)) => {
                overrides.insert(name, value);
            }
            (DELETE, _) => {
                overrides.remove(&name);
            }
            (op, value) => {
                return Err(BrokerError::InvalidConfig {
                    name,
                    value: value.unwrap_or_default(),
                    reason: format!("operation {op} is not supported: no setting here is a list"),
                })
            }
        }
    }
    Ok(())
}

pub(crate) fn response(
    resource_type: i8,
    resource_name: StrBytes,
    outcome: Result<(), BrokerError>,
) -> AlterConfigsResourceResponse {
    let result = AlterConfigsResourceResponse::default()
        .with_resource_type(resource_type)
        .with_resource_name(resource_name);
    match outcome {
        Ok(()) => result,
        Err(e) => {
            let (code, message) = code_and_message(&e);
            result.with_error_code(code).with_error_message(message)
        }
    }
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for IncrementalAlterConfigsResponse {
    fn error_codes(&self, codes: &mut Codes) {
        self.responses.iter().for_each(|c| codes.add(c.error_code));
    }
}
