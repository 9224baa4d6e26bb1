//! Goal: a group's own settings (the GROUP config resource, type 32) reach its members
//! over the wire: a consumer-protocol group set to `consumer.heartbeat.interval.ms=6000`
//! and a share group set to `share.heartbeat.interval.ms=7000` answer their heartbeats
//! with those intervals while other groups keep the broker's 5000, also after a crash
//! and restart; `validate_only` changes nothing; an unknown name or a value outside the
//! broker's bounds is INVALID_CONFIG and other resources of the same request still
//! apply; DescribeConfigs filters by the keys asked for and marks sources.
//!
//! Method: raw requests to an in-process broker, one connection per broker run.

mod common;

use common::*;
use headway_protocol::kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use headway_protocol::kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use headway_protocol::kafka_protocol::messages::*;
use headway_protocol::kafka_protocol::protocol::StrBytes;

const TOPIC: &str = "configured";
const GROUP: i8 = 32;
const INVALID_CONFIG: i16 = 40;
const SOURCE_GROUP: i8 = 8;
const SOURCE_DEFAULT: i8 = 5;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn set(group: &str, pairs: &[(&str, &str)]) -> AlterConfigsResource {
    AlterConfigsResource::default()
        .with_resource_type(GROUP)
        .with_resource_name(s(group))
        .with_configs(
            pairs
                .iter()
                .map(|(k, v)| {
                    AlterableConfig::default()
                        .with_name(s(k))
                        .with_config_operation(0)
                        .with_value(Some(s(v)))
                })
                .collect(),
        )
}

async fn alter(
    client: &mut Client,
    resources: Vec<AlterConfigsResource>,
    validate_only: bool,
) -> Vec<i16> {
    let request = IncrementalAlterConfigsRequest::default()
        .with_resources(resources)
        .with_validate_only(validate_only);
    let response = client.call(1, &request).await;
    response.responses.iter().map(|r| r.error_code).collect()
}

/// (value, source) of each key asked for.
async fn describe(client: &mut Client, group: &str, keys: &[&str]) -> Vec<(String, String, i8)> {
    let request =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(GROUP)
            .with_resource_name(s(group))
            .with_configuration_keys(Some(keys.iter().map(|k| s(k)).collect()))]);
    let response = client.call(4, &request).await;
    let result = &response.results[0];
    assert_eq!(result.error_code, 0, "{:?}", result.error_message);
    result
        .configs
        .iter()
        .map(|c| {
            (
                c.name.to_string(),
                c.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
                c.config_source,
            )
        })
        .collect()
}

/// The interval a new member of a consumer-protocol group is told.
async fn consumer_interval(client: &mut Client, group: &str) -> i32 {
    let request = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(&uuid::Uuid::new_v4().to_string()))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![topic_name(TOPIC)]))
        .with_topic_partitions(Some(Vec::new()));
    let response = client.call(1, &request).await;
    assert_eq!(response.error_code, 0, "{:?}", response.error_message);
    response.heartbeat_interval_ms
}

/// The interval a new member of a share group is told.
async fn share_interval(client: &mut Client, group: &str) -> i32 {
    let request = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(&uuid::Uuid::new_v4().to_string()))
        .with_member_epoch(0)
        .with_subscribed_topic_names(Some(vec![topic_name(TOPIC)]));
    let response = client.call(1, &request).await;
    assert_eq!(response.error_code, 0, "{:?}", response.error_message);
    response.heartbeat_interval_ms
}

#[tokio::test]
async fn group_settings_reach_heartbeats_and_survive_a_crash() {
    let broker = TestBroker::start().await;
    let mut client = broker.client().await;
    create_topic(&mut client, TOPIC, 1).await;

    // Checked only: nothing changes.
    let codes = alter(
        &mut client,
        vec![set("cg", &[("consumer.heartbeat.interval.ms", "6000")])],
        true,
    )
    .await;
    assert_eq!(codes, vec![0]);
    assert_eq!(
        describe(&mut client, "cg", &["consumer.heartbeat.interval.ms"]).await,
        vec![(
            "consumer.heartbeat.interval.ms".into(),
            "5000".into(),
            SOURCE_DEFAULT
        )]
    );

    // One request: two good resources around two refused ones.
    let codes = alter(
        &mut client,
        vec![
            set("cg", &[("consumer.heartbeat.interval.ms", "6000")]),
            set("cg", &[("consumer.heartbeat.interval.ms", "100")]),
            set("sg", &[("no.such.setting", "1")]),
            set("sg", &[("share.heartbeat.interval.ms", "7000")]),
        ],
        false,
    )
    .await;
    assert_eq!(codes, vec![0, INVALID_CONFIG, INVALID_CONFIG, 0]);
    assert_eq!(
        describe(&mut client, "cg", &["consumer.heartbeat.interval.ms"]).await,
        vec![(
            "consumer.heartbeat.interval.ms".into(),
            "6000".into(),
            SOURCE_GROUP
        )]
    );

    assert_eq!(consumer_interval(&mut client, "cg").await, 6_000);
    assert_eq!(consumer_interval(&mut client, "other-cg").await, 5_000);
    assert_eq!(share_interval(&mut client, "sg").await, 7_000);
    assert_eq!(share_interval(&mut client, "other-sg").await, 5_000);

    drop(client);
    let dir = broker.crash().await;
    let broker = TestBroker::start_in(dir).await;
    let mut client = broker.client().await;
    assert_eq!(
        describe(&mut client, "sg", &["share.heartbeat.interval.ms"]).await,
        vec![(
            "share.heartbeat.interval.ms".into(),
            "7000".into(),
            SOURCE_GROUP
        )]
    );
    assert_eq!(consumer_interval(&mut client, "cg").await, 6_000);
    assert_eq!(share_interval(&mut client, "sg").await, 7_000);
    drop(client);
    broker.stop().await;
}
