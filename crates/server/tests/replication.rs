//! Replication over real sockets between two in-process brokers, with the roles set by
//! hand as the controller's metadata will set them.
//! Goal: show that a follower's replica fetcher copies its leader's partition byte for
//! byte, that an acks=all produce is answered only once the follower synced it, that
//! clients are sent away from the follower, and that after a change of leader the old
//! leader cuts the tail no one else kept and copies the new leader's instead.
//! Method: two brokers on ephemeral ports with their own data directories; produces and
//! fetches as raw Kafka requests; every wait is on a condition with a deadline.

mod common;

use common::*;
use headway_base::{Offset, PartitionIndex};
use headway_broker::partition::role::Role;
use headway_broker::Partition;
use headway_client::transport::Security;
use headway_protocol::kafka_protocol::messages::*;
use headway_server::replica_fetcher::ReplicaFetchers;
use std::sync::Arc;
use tokio::sync::watch;

const TOPIC: &str = "replicated";

async fn partition(broker: &TestBroker) -> Arc<Partition> {
    let mut client = broker.client().await;
    create_topic(&mut client, TOPIC, 1).await;
    broker
        .server
        .broker
        .upgrade()
        .expect("the broker runs")
        .partition(TOPIC, PartitionIndex::new(0))
        .unwrap()
}

fn now_ms() -> i64 {
    headway_base::Clock::system().time_ms()
}

fn leader(epoch: i32) -> Role {
    Role::Leader {
        epoch,
        partition_epoch: 0,
        replicas: vec![1, 2],
        isr: vec![1, 2],
    }
}

fn follower(epoch: i32, of: i32) -> Role {
    Role::Follower {
        epoch,
        partition_epoch: 0,
        leader: Some(of),
    }
}

/// Produces `values` as one batch with `acks`; answers the base offset.
async fn produce(broker: &TestBroker, acks: i16, values: &[&str]) -> i64 {
    let mut client = broker.client().await;
    let request = produce_request(TOPIC, 0, acks, batch(values));
    let response = tokio::time::timeout(DEADLINE, client.call(9, &request))
        .await
        .expect("the produce was answered in time");
    let answer = &response.responses[0].partition_responses[0];
    assert_eq!(answer.error_code, 0, "{:?}", answer.error_message);
    answer.base_offset
}

async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

async fn records(partition: &Partition) -> bytes::Bytes {
    partition
        .read(partition.log_start_offset(), 64 << 20)
        .await
        .unwrap()
        .records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_copies_its_leader_over_the_wire_and_acks_all_waits_for_it() {
    let (a, b) = (TestBroker::start().await, TestBroker::start().await);
    let (pa, pb) = (partition(&a).await, partition(&b).await);
    pa.set_role(1, leader(1), now_ms()).unwrap();
    pb.set_role(2, follower(1, 1), now_ms()).unwrap();

    // Before any follower fetched, acks=1 is answered and nothing is acknowledged.
    assert_eq!(produce(&a, 1, &["first"]).await, 0);
    assert_eq!(pa.high_watermark(), Offset::ZERO);

    let (_stop, shutdown) = watch::channel(false);
    let fetchers = ReplicaFetchers::new(2, Security::default(), shutdown);
    fetchers.follow(Arc::clone(&pb), 1, &a.addr.to_string());
    assert_eq!(produce(&a, -1, &["second", "third"]).await, 1);
    assert!(
        pb.log_end_offset().unwrap() >= Offset::new(3),
        "acks=all waited for the follower"
    );
    for i in 0..20 {
        let value = format!("value-{i}");
        produce(&a, -1, &[&value]).await;
    }
    let end = pa.log_end_offset().unwrap();
    until("the follower's high watermark", || {
        pb.high_watermark() == end
    })
    .await;
    assert_eq!(
        records(&pa).await,
        records(&pb).await,
        "the same batches, byte for byte"
    );

    // Clients are sent to the leader.
    let mut client = b.client().await;
    let response = client.call(12, &fetch_request(TOPIC, 0, 0, 1)).await;
    assert_eq!(
        response.responses[0].partitions[0].error_code, 6,
        "NOT_LEADER_OR_FOLLOWER"
    );
    let mut client = a.client().await;
    let request = OffsetForLeaderEpochRequest::default().with_topics(vec![
        offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
            .with_topic(topic_name(TOPIC))
            .with_partitions(vec![
                offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                    .with_partition(0)
                    .with_current_leader_epoch(1)
                    .with_leader_epoch(1),
            ]),
    ]);
    let response = client.call(4, &request).await;
    let answer = &response.topics[0].partitions[0];
    assert_eq!((answer.error_code, answer.leader_epoch), (0, 1));
    assert_eq!(answer.end_offset, end.value());
    drop(fetchers);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_change_of_leader_the_old_leader_cuts_its_divergent_tail() {
    let (a, b) = (TestBroker::start().await, TestBroker::start().await);
    let (pa, pb) = (partition(&a).await, partition(&b).await);
    let (_stop, shutdown) = watch::channel(false);
    pa.set_role(1, leader(1), now_ms()).unwrap();
    pb.set_role(2, follower(1, 1), now_ms()).unwrap();
    let on_b = ReplicaFetchers::new(2, Security::default(), shutdown.clone());
    on_b.follow(Arc::clone(&pb), 1, &a.addr.to_string());
    for value in ["one", "two", "three"] {
        produce(&a, -1, &[value]).await;
    }
    // The controller moves to epoch 2 (no leader yet): the follower takes nothing more
    // from the deposed leader, which still takes two more that no one else keeps.
    let leaderless = Role::Follower {
        epoch: 2,
        partition_epoch: 0,
        leader: None,
    };
    pb.set_role(2, leaderless, now_ms()).unwrap();
    on_b.unfollow(TOPIC, PartitionIndex::new(0));
    produce(&a, 1, &["lost-1"]).await;
    produce(&a, 1, &["lost-2"]).await;
    assert_eq!(pa.log_end_offset().unwrap(), Offset::new(5));

    pb.set_role(2, leader(2), now_ms()).unwrap();
    pa.set_role(1, follower(2, 2), now_ms()).unwrap();
    let on_a = ReplicaFetchers::new(1, Security::default(), shutdown);
    on_a.follow(Arc::clone(&pa), 2, &b.addr.to_string());
    assert_eq!(
        produce(&b, -1, &["four"]).await,
        3,
        "acks=all waited for the old leader"
    );
    let end = pb.log_end_offset().unwrap();
    until("the old leader's high watermark", || {
        pa.high_watermark() == end
    })
    .await;
    assert_eq!(
        pa.log_end_offset().unwrap(),
        Offset::new(4),
        "the two lost ones were cut"
    );
    assert_eq!(records(&pa).await, records(&pb).await);
    assert_eq!(pa.end_offset_for_epoch(1).unwrap(), (1, 3));
    drop((on_a, on_b));
    a.stop().await;
    b.stop().await;
}
