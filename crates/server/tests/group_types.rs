//! Goal: classic, consumer-protocol and share groups share one namespace of group ids,
//! as in Kafka: an id taken by a share group refuses consumer and classic members, an id
//! taken by a consumer group refuses share members; ListGroups v5 names each group's
//! type (share groups only from v5); DeleteGroups removes a share group.
//!
//! Method: raw requests to an in-process broker, one connection.

mod common;

use common::*;
use headway_protocol::kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use headway_protocol::kafka_protocol::messages::*;
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;

const TOPIC: &str = "typed";

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

async fn share_heartbeat(client: &mut Client, group: &str, member: &str, epoch: i32) -> i16 {
    let request = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
        .with_subscribed_topic_names((epoch == 0).then(|| vec![topic_name(TOPIC)]));
    client.call(1, &request).await.error_code
}

async fn consumer_heartbeat(client: &mut Client, group: &str) -> i16 {
    let request = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s("c3b0d6a6-9c4f-4d8e-9a51-3c7f6f0e2a11"))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![topic_name(TOPIC)]))
        .with_topic_partitions(Some(Vec::new()));
    client.call(1, &request).await.error_code
}

async fn listed(client: &mut Client, version: i16) -> Vec<(String, String)> {
    let response: ListGroupsResponse = client.call(version, &ListGroupsRequest::default()).await;
    let mut groups: Vec<_> = response
        .groups
        .iter()
        .map(|g| (g.group_id.to_string(), g.group_type.to_string()))
        .collect();
    groups.sort();
    groups
}

#[tokio::test]
async fn share_and_consumer_groups_keep_to_their_own_ids() {
    let broker = TestBroker::start().await;
    let mut client = broker.client().await;
    create_topic(&mut client, TOPIC, 2).await;
    let share_member = "0f8e4b4e-3f0e-4e57-8b43-5c0f2a7d9e01";
    assert_eq!(
        share_heartbeat(&mut client, "shared", share_member, 0).await,
        0
    );
    assert_eq!(consumer_heartbeat(&mut client, "consumers").await, 0);

    let not_found = ResponseError::GroupIdNotFound.code();
    assert_eq!(consumer_heartbeat(&mut client, "shared").await, not_found);
    assert_eq!(
        share_heartbeat(&mut client, "consumers", share_member, 0).await,
        not_found
    );
    let join = JoinGroupRequest::default()
        .with_group_id(GroupId(s("shared")))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default().with_name(s("range"))
        ]);
    let joined: JoinGroupResponse = client.call(5, &join).await;
    assert_eq!(
        joined.error_code,
        ResponseError::InconsistentGroupProtocol.code()
    );

    let pair = |id: &str, kind: &str| (id.to_string(), kind.to_string());
    assert_eq!(
        listed(&mut client, 5).await,
        [pair("consumers", "consumer"), pair("shared", "share")]
    );
    let older = listed(&mut client, 4).await;
    assert!(older.iter().all(|(id, _)| id != "shared"), "{older:?}");

    // Left, the share group keeps its partitions' state until deleted.
    assert_eq!(
        share_heartbeat(&mut client, "shared", share_member, -1).await,
        0
    );
    let delete = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("shared"))]);
    let deleted: DeleteGroupsResponse = client.call(2, &delete).await;
    assert_eq!(deleted.results[0].error_code, 0, "{deleted:?}");
    assert_eq!(
        listed(&mut client, 5).await,
        [pair("consumers", "consumer")]
    );
    broker.stop().await;
}
