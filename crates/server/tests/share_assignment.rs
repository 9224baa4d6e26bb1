//! Goal: a ShareFetch acquires records only of partitions assigned to the member:
//! naming another member's partition in its share session gets it nothing, and the
//! records stay for the member they are assigned to.
//!
//! Method: raw requests to an in-process broker (share groups start at `earliest`).
//! Two members of one share group on a two-partition topic, one partition each; the
//! first fetches both partitions, the second then fetches its own.

mod common;

use common::*;
use headway_protocol::kafka_protocol::messages::share_fetch_request::{FetchPartition, FetchTopic};
use headway_protocol::kafka_protocol::messages::*;
use headway_protocol::kafka_protocol::protocol::StrBytes;
use std::collections::BTreeMap;

const TOPIC: &str = "assigned";
const GROUP: &str = "workers";

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// A heartbeat; returns the member epoch and the partitions it was assigned, if sent.
async fn heartbeat(
    client: &mut Client,
    member: &str,
    epoch: i32,
) -> (i32, Option<(uuid::Uuid, Vec<i32>)>) {
    let request = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
        .with_subscribed_topic_names((epoch == 0).then(|| vec![topic_name(TOPIC)]));
    let response = client.call(1, &request).await;
    assert_eq!(response.error_code, 0, "{response:?}");
    let assigned = response.assignment.map(|a| {
        let t = &a.topic_partitions[0];
        (t.topic_id, t.partitions.clone())
    });
    (response.member_epoch, assigned)
}

/// A first ShareFetch of `partitions`: the acquired offsets by partition.
async fn fetch(
    client: &mut Client,
    member: &str,
    topic_id: uuid::Uuid,
    partitions: &[i32],
) -> BTreeMap<i32, Vec<(i64, i64)>> {
    let request = ShareFetchRequest::default()
        .with_group_id(Some(GroupId(s(GROUP))))
        .with_member_id(Some(s(member)))
        .with_share_session_epoch(0)
        .with_max_wait_ms(200)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_max_records(100)
        .with_topics(vec![FetchTopic::default()
            .with_topic_id(topic_id)
            .with_partitions(
                partitions
                    .iter()
                    .map(|p| FetchPartition::default().with_partition_index(*p))
                    .collect(),
            )]);
    let response = client.call(1, &request).await;
    assert_eq!(response.error_code, 0, "{response:?}");
    let mut out = BTreeMap::new();
    for t in response.responses {
        for p in t.partitions {
            assert_eq!(p.error_code, 0, "{p:?}");
            let ranges: Vec<(i64, i64)> = p
                .acquired_records
                .iter()
                .map(|a| (a.first_offset, a.last_offset))
                .collect();
            if !ranges.is_empty() {
                out.insert(p.partition_index, ranges);
            }
        }
    }
    out
}

#[tokio::test]
async fn a_share_fetch_acquires_only_the_members_partitions() {
    let broker =
        TestBroker::start_with(|c| c.server.share.share_auto_offset_reset = "earliest".into())
            .await;
    let mut client = broker.client().await;
    create_topic(&mut client, TOPIC, 2).await;
    for p in 0..2 {
        let produced = client
            .call(9, &produce_request(TOPIC, p, -1, batch(&["a", "b", "c"])))
            .await;
        assert_eq!(partition_response(&produced).error_code, 0);
    }
    // Member ids in order: "m1" sorts first and gets partition 0 of two.
    let (first, second) = ("m1-0000-0000", "m2-0000-0000");
    let (epoch, _) = heartbeat(&mut client, first, 0).await;
    let (_, assigned) = heartbeat(&mut client, second, 0).await;
    let (topic_id, theirs) = assigned.expect("the second member's assignment");
    assert_eq!(theirs, vec![1]);
    let (_, assigned) = heartbeat(&mut client, first, epoch).await;
    assert_eq!(assigned.map(|a| a.1), Some(vec![0]));

    // The first member names both partitions: it acquires records of its own only.
    let got = fetch(&mut client, first, topic_id, &[0, 1]).await;
    assert_eq!(got, BTreeMap::from([(0, vec![(0, 2)])]));
    // Partition 1's records are all there for the member it is assigned to.
    let got = fetch(&mut client, second, topic_id, &[1]).await;
    assert_eq!(got, BTreeMap::from([(1, vec![(0, 2)])]));
    broker.stop().await;
}
