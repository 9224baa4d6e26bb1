//! The web console's `/api/state` on a broker with a topic, a consumer group with a
//! committed offset, and a client that never reads its socket: the topic's offsets and
//! traffic, the group's member, decoded assignment and lag, and the stuck connection on
//! top of the list with its held bytes. Also the page and its files are served.

mod common;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use headway_protocol::kafka_protocol::messages::*;
use headway_protocol::kafka_protocol::protocol::{Encodable, StrBytes};
use serde_json::Value;
use std::net::SocketAddr;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpSocket;

const TOPIC: &str = "console";
const GROUP: &str = "console-group";
const CONNECTION_BUDGET: usize = 1 << 20;
/// Records of about 16 KiB, 32 to a batch: batches of about 512 KiB.
const VALUE_BYTES: usize = 16 * 1024;
const BATCHES: i64 = 8;
const COMMITTED: i64 = 100;

async fn state(addr: SocketAddr) -> Value {
    let (status, body) = http_get(addr, "/api/state").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    serde_json::from_str(&body).unwrap()
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// A consumer-protocol assignment of partition 0 of the topic, version-prefixed.
fn assignment() -> Bytes {
    let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
        consumer_protocol_assignment::TopicPartition::default()
            .with_topic(topic_name(TOPIC))
            .with_partitions(vec![0]),
    ]);
    let mut bytes = BytesMut::new();
    bytes.put_i16(0);
    assignment.encode(&mut bytes, 0).unwrap();
    bytes.freeze()
}

/// Commits `offset` for partition 0 of the topic; a standalone commit with generation -1.
async fn commit(client: &mut Client, group: &str, member_id: &str, generation: i32, offset: i64) {
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(str_bytes(group)))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(str_bytes(member_id))
        .with_topics(vec![
            offset_commit_request::OffsetCommitRequestTopic::default()
                .with_name(topic_name(TOPIC))
                .with_partitions(vec![
                    offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset),
                ]),
        ]);
    let response = client.call(8, &commit).await;
    assert_eq!(response.topics[0].partitions[0].error_code, 0);
}

/// Joins the group as its only member, syncs an assignment and commits `COMMITTED`.
async fn join_and_commit(client: &mut Client) {
    let mut member_id = String::new();
    let joined = loop {
        let request = JoinGroupRequest::default()
            .with_group_id(GroupId(str_bytes(GROUP)))
            .with_session_timeout_ms(30_000)
            .with_rebalance_timeout_ms(30_000)
            .with_member_id(str_bytes(&member_id))
            .with_protocol_type(str_bytes("consumer"))
            .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
            )
            .with_name(str_bytes("range"))
            .with_metadata(Bytes::from_static(&[0, 0, 0, 0, 0, 0]))]);
        let response = client.call(5, &request).await;
        member_id = response.member_id.to_string();
        if response.error_code == 0 {
            break response;
        }
        assert_eq!(response.error_code, 79, "MEMBER_ID_REQUIRED, then joined");
    };
    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(str_bytes(GROUP)))
        .with_generation_id(joined.generation_id)
        .with_member_id(str_bytes(&member_id))
        .with_assignments(vec![
            sync_group_request::SyncGroupRequestAssignment::default()
                .with_member_id(str_bytes(&member_id))
                .with_assignment(assignment()),
        ]);
    assert_eq!(client.call(3, &sync).await.error_code, 0);
    commit(client, GROUP, &member_id, joined.generation_id, COMMITTED).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_shows_topics_groups_lag_and_the_slow_connection_first() {
    let broker = TestBroker::start_with(|c| {
        c.broker.console_listen = Some("127.0.0.1:0".into());
        c.broker.connection_outbound_bytes_max = CONNECTION_BUDGET;
        c.server.group.group_initial_rebalance_delay_ms = 0;
    })
    .await;
    let console = broker.server.console_addr.expect("the console is served");

    let (status, page) = http_get(console, "/").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(page.contains("/console.js") && page.contains("/console.css"));
    for file in ["/console.js", "/console.css"] {
        assert_eq!(http_get(console, file).await.0, "HTTP/1.1 200 OK", "{file}");
    }
    assert_eq!(
        http_get(console, "/nothing").await.0,
        "HTTP/1.1 404 Not Found"
    );

    let mut client = broker.client().await;
    create_topic(&mut client, TOPIC, 2).await;
    let value = "v".repeat(VALUE_BYTES);
    let values: Vec<&str> = (0..32).map(|_| value.as_str()).collect();
    for _ in 0..BATCHES {
        let response = client
            .call(9, &produce_request(TOPIC, 0, -1, batch(&values)))
            .await;
        assert_eq!(partition_response(&response).error_code, 0);
    }
    let end = BATCHES * 32;
    join_and_commit(&mut client).await;

    // A client that never reads its socket, with greedy fetches pipelined.
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stuck = socket.connect(broker.addr).await.unwrap();
    let stuck_peer = stuck.local_addr().unwrap();
    let (stuck_read, mut stuck_write) = stuck.into_split();
    let fetch = fetch_every_partition(TOPIC, 1, 500, 1, 50 << 20, 50 << 20);
    for id in 1..=64 {
        stuck_write
            .write_all(&request_frame(11, id, &fetch))
            .await
            .unwrap();
    }
    wait_for(&broker, "the stuck connection to hold bytes", |s| {
        s.connections
            .iter()
            .any(|c| c.peer == stuck_peer && c.outbound_bytes_held > 0)
    })
    .await;
    // Its held bytes fall back to zero each time the kernel takes a whole answer, until
    // its socket is full; the state is read once it holds bytes in the console's view.
    let stuck_on_top = |state: &Value| {
        let top = &state["connections"][0];
        top["peer"] == stuck_peer.to_string() && top["outbound_bytes_held"].as_u64() > Some(0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let state = loop {
        let state = state(console).await;
        if stuck_on_top(&state) || std::time::Instant::now() > deadline {
            break state;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(state["topics_total"], 1, "{state}");
    assert_eq!(state["partitions_total"], 2);
    assert_eq!(state["truncated"], false);
    assert_eq!(state["totals"]["records_in"], end);
    let topic = &state["topics"][0];
    assert_eq!(topic["name"], TOPIC);
    let p0 = &topic["partitions"][0];
    assert_eq!(p0["partition"], 0);
    assert_eq!(p0["log_end"], end);
    assert_eq!(p0["high_watermark"], end);
    assert_eq!(p0["traffic"]["records_in"], end);
    assert!(p0["size_bytes"].as_u64().unwrap() > (BATCHES as u64) * 32 * VALUE_BYTES as u64);
    assert_eq!(topic["partitions"][1]["log_end"], 0);

    assert_eq!(state["groups_total"], 1);
    let group = &state["groups"][0];
    assert_eq!(group["group_id"], GROUP);
    assert_eq!(group["state"], "Stable");
    let member = &group["members"][0];
    assert_eq!(member["client_id"], "wire-test");
    assert_eq!(
        member["assignment"],
        serde_json::json!([{"topic": TOPIC, "partitions": [0]}])
    );
    let offset = &group["offsets"][0];
    assert_eq!(offset["committed"], COMMITTED);
    assert_eq!(offset["lag"], end - COMMITTED);
    assert_eq!(group["lag"], end - COMMITTED);

    // The stuck connection is on top, with its held bytes against its budget.
    let connections = state["connections"].as_array().unwrap();
    assert_eq!(state["connections_total"], 2);
    let top = &connections[0];
    assert_eq!(top["peer"], stuck_peer.to_string());
    assert_eq!(top["client_id"], "wire-test");
    assert!(top["outbound_bytes_held"].as_u64().unwrap() > 0, "{top}");
    assert_eq!(top["outbound_bytes_max"], CONNECTION_BUDGET);
    assert_eq!(connections[1]["outbound_bytes_held"], 0);
    assert!(connections[1]["requests_read"].as_u64().unwrap() >= BATCHES as u64);

    drop((client, stuck_read, stuck_write));
    broker.stop().await;
}

#[tokio::test]
async fn off_by_default() {
    let broker = TestBroker::start().await;
    assert!(broker.server.console_addr.is_none());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_list_is_bounded_and_says_what_it_left_out() {
    use headway_base::limits::{
        CONSOLE_CONNECTIONS_MAX, CONSOLE_GROUPS_MAX, CONSOLE_PARTITIONS_MAX,
    };
    let broker =
        TestBroker::start_with(|c| c.broker.console_listen = Some("127.0.0.1:0".into())).await;
    let console = broker.server.console_addr.unwrap();
    let mut client = broker.client().await;
    let partitions = CONSOLE_PARTITIONS_MAX + 1;
    create_topic(&mut client, TOPIC, partitions as i32).await;
    // Groups of standalone commits (no members).
    for g in 0..=CONSOLE_GROUPS_MAX {
        commit(&mut client, &format!("group-{g:04}"), "", -1, 0).await;
    }
    let mut idle = Vec::new();
    for _ in 0..CONSOLE_CONNECTIONS_MAX {
        idle.push(broker.client().await);
    }
    wait_for(&broker, "every connection registered", |s| {
        s.connections.len() > CONSOLE_CONNECTIONS_MAX
    })
    .await;

    let state = state(console).await;
    assert_eq!(state["truncated"], true);
    assert_eq!(state["partitions_total"], partitions);
    assert_eq!(state["partitions_omitted"], 1);
    assert_eq!(
        state["topics"][0]["partitions"].as_array().unwrap().len(),
        CONSOLE_PARTITIONS_MAX
    );
    assert_eq!(state["groups_total"], CONSOLE_GROUPS_MAX + 1);
    assert_eq!(state["groups_omitted"], 1);
    assert_eq!(
        state["groups"].as_array().unwrap().len(),
        CONSOLE_GROUPS_MAX
    );
    assert_eq!(state["groups"][0]["group_id"], "group-0000");
    assert_eq!(state["groups"][0]["offsets"][0]["lag"], 0);
    assert_eq!(state["connections_total"], CONSOLE_CONNECTIONS_MAX + 1);
    assert_eq!(state["connections_omitted"], 1);
    assert_eq!(
        state["connections"].as_array().unwrap().len(),
        CONSOLE_CONNECTIONS_MAX
    );

    drop((client, idle));
    broker.stop().await;
}
