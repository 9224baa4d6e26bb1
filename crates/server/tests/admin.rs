//! Goal: admin changes (more partitions, altered settings, deleted records) take effect
//! at once and survive a restart.
//!
//! Method: raw admin requests against an in-process broker, checked through Metadata,
//! DescribeConfigs, Fetch and ListOffsets, before and after a restart on the same
//! data directory.

mod common;

use common::*;
use headway_protocol::kafka_protocol::messages::*;
use headway_protocol::kafka_protocol::protocol::StrBytes;

async fn partition_count(client: &mut Client, topic: &str) -> usize {
    let request = MetadataRequest::default()
        .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
        )
        .with_name(Some(TopicName(StrBytes::from_string(topic.into()))))]));
    client.call(12, &request).await.topics[0].partitions.len()
}

async fn retention_ms(client: &mut Client, topic: &str) -> String {
    let request = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.into()))
            .with_configuration_keys(Some(vec![StrBytes::from_static_str("retention.ms")])),
    ]);
    let response = client.call(4, &request).await;
    response.results[0].configs[0]
        .value
        .as_ref()
        .unwrap()
        .to_string()
}

async fn earliest(client: &mut Client, topic: &str) -> i64 {
    list_offset(client, topic, -2).await.0
}

/// (offset, timestamp) for a ListOffsets timestamp spec, at v7.
async fn list_offset(client: &mut Client, topic: &str, spec: i64) -> (i64, i64) {
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default().with_timestamp(spec),
            ])]);
    let p = &client.call(7, &request).await.topics[0].partitions[0];
    (p.offset, p.timestamp)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_changes_apply_and_survive_a_restart() {
    let broker = TestBroker::start().await;
    let mut client = broker.client().await;
    create_topic(&mut client, "admin", 2).await;
    for i in 0..10 {
        let values: Vec<String> = (0..3).map(|j| format!("v{i}-{j}")).collect();
        let refs: Vec<&str> = values.iter().map(String::as_str).collect();
        client
            .call(9, &produce_request("admin", 0, -1, batch(&refs)))
            .await;
    }

    // Every batch has records stamped base+0, base+1, base+2: the first record with
    // the largest timestamp is the first batch's third.
    assert_eq!(
        list_offset(&mut client, "admin", -3).await,
        (2, 1_700_000_000_002)
    );

    let grow = CreatePartitionsRequest::default().with_topics(vec![
        create_partitions_request::CreatePartitionsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("admin")))
            .with_count(5),
    ]);
    assert_eq!(client.call(3, &grow).await.results[0].error_code, 0);
    assert_eq!(
        client.call(3, &grow).await.results[0].error_code,
        37,
        "INVALID_PARTITIONS: not more than now"
    );
    assert_eq!(partition_count(&mut client, "admin").await, 5);

    let alter = IncrementalAlterConfigsRequest::default().with_resources(vec![
        incremental_alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("admin"))
            .with_configs(vec![
                incremental_alter_configs_request::AlterableConfig::default()
                    .with_name(StrBytes::from_static_str("retention.ms"))
                    .with_config_operation(0)
                    .with_value(Some(StrBytes::from_static_str("3600000"))),
            ]),
    ]);
    assert_eq!(client.call(1, &alter).await.responses[0].error_code, 0);
    assert_eq!(retention_ms(&mut client, "admin").await, "3600000");
    let mut bad = alter.clone();
    bad.resources[0].configs[0].value = Some(StrBytes::from_static_str("soon"));
    assert_eq!(
        client.call(1, &bad).await.responses[0].error_code,
        40,
        "INVALID_CONFIG"
    );

    let delete = DeleteRecordsRequest::default().with_topics(vec![
        delete_records_request::DeleteRecordsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("admin")))
            .with_partitions(vec![
                delete_records_request::DeleteRecordsPartition::default()
                    .with_partition_index(0)
                    .with_offset(7),
            ]),
    ]);
    let response = client.call(2, &delete).await;
    assert_eq!(response.topics[0].partitions[0].low_watermark, 7);
    assert_eq!(earliest(&mut client, "admin").await, 7);
    let fetch = client.call(12, &fetch_request("admin", 3, 0, 1)).await;
    assert_eq!(
        fetch.responses[0].partitions[0].error_code, 1,
        "below the start: OFFSET_OUT_OF_RANGE"
    );

    let dir = broker.stop_keeping_data().await;
    let broker = TestBroker::start_in(dir).await;
    let mut client = broker.client().await;
    assert_eq!(partition_count(&mut client, "admin").await, 5);
    assert_eq!(retention_ms(&mut client, "admin").await, "3600000");
    assert_eq!(earliest(&mut client, "admin").await, 7);
    let fetch = client.call(12, &fetch_request("admin", 7, 0, 1)).await;
    let values = values_of(fetch.responses[0].partitions[0].records.as_ref().unwrap());
    assert!(values.iter().any(|(o, _)| *o == 7) && values.last().unwrap().0 == 29);
    broker.stop().await;
}
