//! Kafka's answers from a hand-made image: brokers, partitions, placement of new topics,
//! and the leader hints.

use super::view::{self, Node};
use headway_controller::metadata::{BrokerRecord, Endpoint, PartitionRecord, TopicRecord};
use headway_controller::{ClusterSettings, Metadata};
use headway_protocol::kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic,
};
use headway_protocol::kafka_protocol::messages::fetch_response::{
    FetchableTopicResponse, PartitionData,
};
use headway_protocol::kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, TopicProduceResponse,
};
use headway_protocol::kafka_protocol::messages::{
    BrokerId, FetchResponse, ProduceResponse, TopicName,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use std::collections::BTreeMap;

fn broker(id: i32, fenced: bool) -> BrokerRecord {
    BrokerRecord {
        id,
        incarnation: uuid::Uuid::new_v4(),
        endpoints: vec![
            Endpoint {
                listener: "PLAINTEXT".into(),
                host: format!("h{id}"),
                port: 9000 + id as u16,
                security_protocol: "PLAINTEXT".into(),
            },
            Endpoint {
                listener: "INTERNAL".into(),
                host: format!("i{id}"),
                port: 7000 + id as u16,
                security_protocol: "PLAINTEXT".into(),
            },
        ],
        epoch: i64::from(id) * 10,
        fenced,
        shutting_down: false,
    }
}

fn partition(replicas: &[i32], isr: &[i32], leader: i32, leader_epoch: i32) -> PartitionRecord {
    PartitionRecord {
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
        leader,
        leader_epoch,
        partition_epoch: leader_epoch,
    }
}

/// Brokers 1 and 2 unfenced, 3 fenced; topic `t` with a partition led by 1, one led by
/// 2 after 3 was fenced, and one without a leader.
fn image() -> Metadata {
    let mut meta = Metadata::default();
    for (id, fenced) in [(1, false), (2, false), (3, true)] {
        meta.brokers.insert(id, broker(id, fenced));
    }
    meta.topics.insert(
        "t".into(),
        TopicRecord {
            id: uuid::Uuid::from_u128(7),
            configs: BTreeMap::new(),
            partitions: vec![
                partition(&[1, 2, 3], &[1, 2], 1, 0),
                partition(&[3, 2, 1], &[2, 1], 2, 1),
                partition(&[3], &[3], -1, 1),
            ],
        },
    );
    meta
}

#[test]
fn brokers_are_the_unfenced_ones_on_the_requests_listener() {
    let meta = image();
    let nodes = view::live_nodes(&meta, "INTERNAL");
    assert_eq!(
        nodes,
        vec![
            Node {
                id: 1,
                host: "i1".into(),
                port: 7001
            },
            Node {
                id: 2,
                host: "i2".into(),
                port: 7002
            },
        ]
    );
    // A listener the brokers do not have: their first endpoint.
    assert_eq!(view::live_nodes(&meta, "OTHER")[0].host, "h1");
    // Hints may name a fenced broker; unknown ids are left out.
    let hinted = view::nodes_of(&meta, [3, 1, 3, 9], "PLAINTEXT");
    assert_eq!(hinted.iter().map(|n| n.id).collect::<Vec<_>>(), vec![1, 3]);
}

#[test]
fn partitions_answer_leader_epochs_replicas_isr_and_offline_replicas() {
    let meta = image();
    let topic = view::topic_metadata(&meta, "t", &meta.topics["t"]);
    assert_eq!(topic.topic_id, uuid::Uuid::from_u128(7));
    assert_eq!(topic.name.as_deref().map(|n| n.as_str()), Some("t"));
    assert_eq!(topic.error_code, 0);
    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
    let p0 = &topic.partitions[0];
    assert_eq!((p0.error_code, p0.leader_id.0, p0.leader_epoch), (0, 1, 0));
    assert_eq!(ids(&p0.replica_nodes), vec![1, 2, 3]);
    assert_eq!(ids(&p0.isr_nodes), vec![1, 2]);
    assert_eq!(ids(&p0.offline_replicas), vec![3]);
    let p1 = &topic.partitions[1];
    assert_eq!(
        (p1.partition_index, p1.leader_id.0, p1.leader_epoch),
        (1, 2, 1)
    );
    let p2 = &topic.partitions[2];
    assert_eq!(p2.error_code, ResponseError::LeaderNotAvailable.code());
    assert_eq!(p2.leader_id.0, -1);
    assert_eq!(ids(&p2.offline_replicas), vec![3]);
    // Found by name and by id.
    assert!(view::find_topic(&meta, Some("t"), uuid::Uuid::nil()).is_some());
    assert_eq!(
        view::find_topic(&meta, None, uuid::Uuid::from_u128(7)).map(|(n, _)| n),
        Some("t")
    );
    assert!(view::find_topic(&meta, None, uuid::Uuid::from_u128(8)).is_none());
}

#[test]
fn who_leads() {
    let meta = image();
    assert_eq!(view::led_elsewhere(&meta, 1, "t", 0), None);
    assert_eq!(view::led_elsewhere(&meta, 1, "t", 1), Some((2, 1)));
    assert_eq!(view::led_elsewhere(&meta, 1, "t", 2), Some((-1, 1)));
    // Not in the image: the local answer stands.
    assert_eq!(view::led_elsewhere(&meta, 1, "t", 3), None);
    assert_eq!(view::led_elsewhere(&meta, 1, "u", 0), None);
}

fn creatable(partitions: i32, factor: i16) -> CreatableTopic {
    CreatableTopic::default()
        .with_name(TopicName(StrBytes::from_static_str("n")))
        .with_num_partitions(partitions)
        .with_replication_factor(factor)
}

#[test]
fn new_topics_are_placed_on_the_unfenced_brokers() {
    let mut meta = image();
    let settings = ClusterSettings::default();
    // -1: min(3, registered) = 3, but only two brokers are unfenced.
    let (code, _) = view::plan_topic(&meta, &settings, &creatable(4, -1), 1).unwrap_err();
    assert_eq!(code, ResponseError::InvalidReplicationFactor.code());
    meta.brokers.get_mut(&3).unwrap().fenced = false;
    let placed = view::plan_topic(&meta, &settings, &creatable(6, -1), 1).unwrap();
    assert_eq!(placed.len(), 6);
    let mut leaders: Vec<i32> = placed.iter().map(|r| r[0]).collect();
    leaders.sort_unstable();
    assert_eq!(leaders, vec![1, 1, 2, 2, 3, 3]);
    assert!(placed.iter().all(|r| r.len() == 3));
    // -1 partitions: the broker's default; an explicit factor is kept.
    let placed = view::plan_topic(&meta, &settings, &creatable(-1, 2), 5).unwrap();
    assert_eq!((placed.len(), placed[0].len()), (5, 2));
    // default_replication_factor set.
    let one = ClusterSettings {
        default_replication_factor: Some(1),
        ..ClusterSettings::default()
    };
    let placed = view::plan_topic(&meta, &one, &creatable(2, -1), 1).unwrap();
    assert!(placed.iter().all(|r| r.len() == 1));
    assert_eq!(view::replication_factor(&meta, &one, -1), 1);
    assert_eq!(view::replication_factor(&meta, &settings, -1), 3);
}

#[test]
fn a_manual_assignment_is_taken_in_partition_order() {
    let meta = image();
    let settings = ClusterSettings::default();
    let assign = |index: i32, brokers: &[i32]| {
        CreatableReplicaAssignment::default()
            .with_partition_index(index)
            .with_broker_ids(brokers.iter().copied().map(BrokerId).collect())
    };
    let manual = creatable(-1, -1).with_assignments(vec![assign(1, &[3, 1]), assign(0, &[2, 3])]);
    assert_eq!(
        view::plan_topic(&meta, &settings, &manual, 1).unwrap(),
        vec![vec![2, 3], vec![3, 1]]
    );
    let gap = creatable(-1, -1).with_assignments(vec![assign(0, &[1]), assign(2, &[2])]);
    let (code, _) = view::plan_topic(&meta, &settings, &gap, 1).unwrap_err();
    assert_eq!(code, ResponseError::InvalidReplicaAssignment.code());
    let with_count = creatable(2, -1).with_assignments(vec![assign(0, &[1])]);
    let (code, _) = view::plan_topic(&meta, &settings, &with_count, 1).unwrap_err();
    assert_eq!(code, ResponseError::InvalidRequest.code());
}

#[test]
fn new_partitions_are_placed_like_the_topics_first_ones() {
    let mut meta = image();
    meta.brokers.get_mut(&3).unwrap().fenced = false;
    let added = view::plan_new_partitions(&meta, "t", 5, None).unwrap();
    assert_eq!(added.len(), 2);
    assert!(added.iter().all(|r| r.len() == 3));
    let (code, _) = view::plan_new_partitions(&meta, "t", 3, None).unwrap_err();
    assert_eq!(code, ResponseError::InvalidPartitions.code());
    let (code, _) = view::plan_new_partitions(&meta, "u", 3, None).unwrap_err();
    assert_eq!(code, ResponseError::UnknownTopicOrPartition.code());
    let manual = view::plan_new_partitions(&meta, "t", 4, Some(vec![vec![2, 1, 3]])).unwrap();
    assert_eq!(manual, vec![vec![2, 1, 3]]);
    let (code, _) =
        view::plan_new_partitions(&meta, "t", 5, Some(vec![vec![2, 1, 3]])).unwrap_err();
    assert_eq!(code, ResponseError::InvalidReplicaAssignment.code());
}

#[test]
fn a_refused_produce_names_the_leader_and_its_endpoint() {
    let meta = image();
    let not_leader = ResponseError::NotLeaderOrFollower.code();
    let mut response =
        ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_responses(vec![
                PartitionProduceResponse::default().with_index(0),
                PartitionProduceResponse::default()
                    .with_index(1)
                    .with_error_code(not_leader),
            ])]);
    view::produce_hints(&meta, &mut response, "INTERNAL");
    let partitions = &response.responses[0].partition_responses;
    assert_eq!(partitions[0].current_leader.leader_id.0, -1, "untouched");
    assert_eq!(partitions[1].current_leader.leader_id.0, 2);
    assert_eq!(partitions[1].current_leader.leader_epoch, 1);
    assert_eq!(response.node_endpoints.len(), 1);
    let node = &response.node_endpoints[0];
    assert_eq!(
        (node.node_id.0, node.host.as_str(), node.port),
        (2, "i2", 7002)
    );
}

#[test]
fn a_refused_fetch_names_the_leader_by_version() {
    let meta = image();
    let not_leader = ResponseError::NotLeaderOrFollower.code();
    let response = || {
        FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_topic_id(uuid::Uuid::from_u128(7))
            .with_partitions(vec![PartitionData::default()
                .with_partition_index(1)
                .with_error_code(not_leader)])])
    };
    let mut old = response();
    view::fetch_hints(&meta, &mut old, "PLAINTEXT", 11);
    assert_eq!(
        old.responses[0].partitions[0].current_leader.leader_id.0,
        -1
    );
    let mut by_name = response();
    view::fetch_hints(&meta, &mut by_name, "PLAINTEXT", 12);
    assert_eq!(
        by_name.responses[0].partitions[0]
            .current_leader
            .leader_id
            .0,
        2
    );
    assert!(by_name.node_endpoints.is_empty(), "endpoints from v16");
    let mut by_id = response();
    view::fetch_hints(&meta, &mut by_id, "PLAINTEXT", 16);
    assert_eq!(
        by_id.responses[0].partitions[0].current_leader.leader_epoch,
        1
    );
    assert_eq!(by_id.node_endpoints[0].host.as_str(), "h2");
}

#[test]
fn brokers_started_with_the_same_voters_share_one_cluster_id() {
    let membership = |node_id, voters: &str| headway_controller::Membership {
        node_id,
        voters: headway_controller::parse_voters(voters).unwrap(),
    };
    let a = super::cluster_id(&membership(1, "1@a:1,2@b:2,3@c:3"));
    let b = super::cluster_id(&membership(3, "3@c:3,1@a:1,2@b:2"));
    let other = super::cluster_id(&membership(1, "1@a:1,2@b:2,3@c:4"));
    assert_eq!(a, b);
    assert_ne!(a, other);
    assert_eq!(a.len(), 22);
    assert!(a
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
}
