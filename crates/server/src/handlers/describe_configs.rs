//! DescribeConfigs: a topic's effective settings (Kafka names), a group's
//! (`crate::group_configs`), or the broker's. A topic needs DescribeConfigs on it, a
//! group DescribeConfigs on the group, the broker DescribeConfigs on the cluster.

use super::create_topics::{SOURCE_DEFAULT, SOURCE_TOPIC};
use crate::authorize;
use crate::call::{ready, Call, Ctx, Handler, HandlerError, Reply};
use crate::errors::code_and_message;
use crate::group_configs::{RESOURCE_GROUP, SOURCE_GROUP};
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_broker::BrokerError;
use headway_protocol::kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, DescribeConfigsRequest, DescribeConfigsResponse,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::{decode_body, Request};

pub const HANDLER: Handler = Handler {
    key: ApiKey::DescribeConfigs,
    min_version: 1,
    max_version: 4,
    handle,
};

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const SOURCE_STATIC_BROKER: i8 = 4;
/// Config types (v3+): what a value parses as.
const TYPE_BOOLEAN: i8 = 1;
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;
const TYPE_LONG: i8 = 5;
const TYPE_DOUBLE: i8 = 6;
const TYPE_LIST: i8 = 7;

/// One config entry: name, value, source, type.
type Entry = (String, String, i8, i8);

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: DescribeConfigsRequest = decode_body(request)?;
    let results = body
        .resources
        .into_iter()
        .map(|resource| {
            let name = &resource.resource_name;
            let entries = match resource.resource_type {
                RESOURCE_TOPIC if !authorize::topic(call, Operation::DescribeConfigs, name) => {
                    Err(authorize::topic_denied(name))
                }
                RESOURCE_BROKER if !authorize::cluster(call, Operation::DescribeConfigs) => {
                    Err(authorize::cluster_denied())
                }
                RESOURCE_GROUP if !authorize::group(call, Operation::DescribeConfigs, name) => {
                    Err(authorize::group_denied(name))
                }
                RESOURCE_TOPIC => topic_entries(ctx, name),
                RESOURCE_GROUP => group_entries(ctx, name),
                RESOURCE_BROKER => broker_entries(ctx, name),
                other => Err(BrokerError::InvalidRequest(format!(
                    "resource type {other} is not supported"
                ))),
            };
            let result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name);
            match entries {
                Ok(entries) => result.with_configs(
                    entries
                        .into_iter()
                        .filter(|(name, ..)| {
                            resource
                                .configuration_keys
                                .as_ref()
                                .is_none_or(|keys| keys.iter().any(|k| k.as_str() == name))
                        })
                        .map(entry)
                        .collect(),
                ),
                Err(e) => {
                    let (code, message) = code_and_message(&e);
                    result.with_error_code(code).with_error_message(message)
                }
            }
        })
        .collect();
    ready(
        request,
        &DescribeConfigsResponse::default().with_results(results),
    )
}

fn entry((name, value, source, config_type): Entry) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_string(name))
        .with_value(Some(StrBytes::from_string(value)))
        .with_read_only(source == SOURCE_STATIC_BROKER)
        .with_config_source(source)
        .with_config_type(config_type)
}

fn topic_entries(ctx: &Ctx, name: &str) -> Result<Vec<Entry>, BrokerError> {
    let topic = ctx.broker.existing_topic(name)?;
    Ok(topic
        .config()
        .entries()
        .into_iter()
        .map(|(name, value, explicit)| {
            let config_type = match name {
                "cleanup.policy" => TYPE_LIST,
                "compression.type" | "message.timestamp.type" => TYPE_STRING,
                "min.cleanable.dirty.ratio" => TYPE_DOUBLE,
                "remote.storage.enable" => TYPE_BOOLEAN,
                "index.interval.bytes" | "max.message.bytes" | "min.insync.replicas" => TYPE_INT,
                _ => TYPE_LONG,
            };
            let source = if explicit {
                SOURCE_TOPIC
            } else {
                SOURCE_DEFAULT
            };
            (name.to_string(), value, source, config_type)
        })
        .collect())
}

/// A group's settings: those it set (GROUP_CONFIG), the broker's for the others
/// (DEFAULT_CONFIG). A group without settings, or not known, has the broker's.
fn group_entries(ctx: &Ctx, name: &str) -> Result<Vec<Entry>, BrokerError> {
    if name.is_empty() {
        return Err(BrokerError::InvalidRequest(
            "a group config resource needs a group name".into(),
        ));
    }
    let store = &ctx.group_configs;
    let definitions = store.definitions();
    Ok(
        crate::group_configs::describe(definitions, &store.get(name))
            .into_iter()
            .zip(definitions)
            .map(|((name, value, set), def)| {
                let source = if set { SOURCE_GROUP } else { SOURCE_DEFAULT };
                (name, value, source, def.config_type)
            })
            .collect(),
    )
}

fn broker_entries(ctx: &Ctx, name: &str) -> Result<Vec<Entry>, BrokerError> {
    let config = ctx.broker.config();
    if !name.is_empty() && name != config.node_id.to_string() {
        return Err(BrokerError::InvalidRequest(format!(
            "unknown broker {name}"
        )));
    }
    let log = &config.log;
    let entries = [
        ("broker.id", config.node_id.to_string(), TYPE_INT),
        (
            "auto.create.topics.enable",
            config.auto_create_topics.to_string(),
            TYPE_BOOLEAN,
        ),
        (
            "num.partitions",
            config.default_partitions.to_string(),
            TYPE_INT,
        ),
        ("log.retention.ms", log.retention_ms.to_string(), TYPE_LONG),
        (
            "log.retention.bytes",
            log.retention_bytes.to_string(),
            TYPE_LONG,
        ),
        ("log.segment.bytes", log.segment_bytes.to_string(), TYPE_INT),
        ("log.roll.ms", log.segment_ms.to_string(), TYPE_LONG),
        (
            "message.max.bytes",
            log.max_message_bytes.to_string(),
            TYPE_INT,
        ),
        (
            "socket.request.max.bytes",
            config.frame_bytes_max.to_string(),
            TYPE_INT,
        ),
        (
            "log.cleanup.policy",
            log.cleanup_policy.to_string(),
            TYPE_LIST,
        ),
        (
            "log.cleaner.min.cleanable.ratio",
            log.min_cleanable_dirty_ratio.to_string(),
            TYPE_DOUBLE,
        ),
        (
            "log.cleaner.min.compaction.lag.ms",
            log.min_compaction_lag_ms.to_string(),
            TYPE_LONG,
        ),
        (
            "log.cleaner.max.compaction.lag.ms",
            log.max_compaction_lag_ms.to_string(),
            TYPE_LONG,
        ),
        (
            "log.cleaner.delete.retention.ms",
            log.delete_retention_ms.to_string(),
            TYPE_LONG,
        ),
        ("headway.flush", config.flush.to_string(), TYPE_STRING),
    ];
    Ok(entries
        .into_iter()
        .map(|(name, value, t)| (name.to_string(), value, SOURCE_STATIC_BROKER, t))
        .collect())
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for DescribeConfigsResponse {
    fn error_codes(&self, codes: &mut Codes) {
        self.results.iter().for_each(|c| codes.add(c.error_code));
    }
}
