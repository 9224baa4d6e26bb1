//! Goal: no client can crash, freeze or bloat the broker by what it sends: counts that
//! claim billions of elements, random frames, length prefixes with nothing behind them,
//! bodies that trickle in. Each misbehaving connection is closed (alone), the request
//! budget comes back, and well-behaved clients are answered throughout.
//!
//! Method: an in-process broker on an ephemeral port. Hostile requests are built from
//! real encodings (`kafka-protocol`, client side) of every served API at every served
//! version, with a length or count overwritten at each position; random frames come
//! from a seeded generator whose seed is printed (`HOSTILE_SEED` replays one). After
//! each round a fresh client must get ApiVersions answered and produce and read back a
//! record; the stats must show the refusals and a request budget back to zero.

mod common;

use bytes::{BufMut, BytesMut};
use common::*;
use headway_protocol::kafka_protocol::messages::*;
use headway_protocol::kafka_protocol::protocol::{Encodable, Request, StrBytes};
use headway_server::handlers::APIS;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOPIC: &str = "hostile";

/// Encodes `R::default()` at every version the broker serves for it.
fn defaults<R: Request + Default>() -> Vec<(i16, i16, BytesMut)> {
    let spec = APIS.iter().find(|a| a.key as i16 == R::KEY).unwrap();
    // Produce v0-v2 are advertised for old clients' probes but not decoded.
    let min = spec.min_version.max(R::VERSIONS.min);
    // Versions the crate does not encode are built by `share_newer_defaults`.
    (min..=spec.max_version.min(R::VERSIONS.max))
        .map(|version| {
            let mut body = BytesMut::new();
            R::default().encode(&mut body, version).unwrap();
            (R::KEY, version, body)
        })
        .collect()
}

/// ShareFetch and ShareAcknowledge v2 and DescribeShareGroupOffsets v1 (which
/// `kafka-protocol` does not encode): for the first two, the default v1 body with the fields v2 adds put in after the group and member (null or
/// empty, a byte each) and, for ShareFetch, its six int32s.
fn share_newer_defaults() -> Vec<(i16, i16, BytesMut)> {
    let mut fetch = BytesMut::new();
    ShareFetchRequest::default().encode(&mut fetch, 1).unwrap();
    let mut ack = BytesMut::new();
    ShareAcknowledgeRequest::default()
        .encode(&mut ack, 1)
        .unwrap();
    // Null or empty: a one-byte length each.
    assert!(fetch[..2].iter().chain(&ack[..2]).all(|&b| b <= 1));
    let v2 = |body: &BytesMut, at: usize, extra: &[u8]| {
        let mut out = BytesMut::new();
        out.put_slice(&body[..at]);
        out.put_slice(extra);
        out.put_slice(&body[at..]);
        out
    };
    // DescribeShareGroupOffsets v1 is laid out as v0.
    let mut offsets = BytesMut::new();
    DescribeShareGroupOffsetsRequest::default()
        .encode(&mut offsets, 0)
        .unwrap();
    vec![
        (ShareFetchRequest::KEY, 2, v2(&fetch, 2 + 6 * 4, &[1, 0])),
        (ShareAcknowledgeRequest::KEY, 2, v2(&ack, 2 + 4, &[0])),
        (DescribeShareGroupOffsetsRequest::KEY, 1, offsets),
    ]
}

/// The default request of every served API at every served version, as raw bodies.
fn every_request() -> Vec<(i16, i16, BytesMut)> {
    let all = [
        defaults::<ProduceRequest>(),
        defaults::<FetchRequest>(),
        defaults::<ListOffsetsRequest>(),
        defaults::<OffsetForLeaderEpochRequest>(),
        defaults::<MetadataRequest>(),
        defaults::<ApiVersionsRequest>(),
        defaults::<CreateTopicsRequest>(),
        defaults::<DeleteTopicsRequest>(),
        defaults::<DescribeConfigsRequest>(),
        defaults::<FindCoordinatorRequest>(),
        defaults::<JoinGroupRequest>(),
        defaults::<SyncGroupRequest>(),
        defaults::<HeartbeatRequest>(),
        defaults::<LeaveGroupRequest>(),
        defaults::<OffsetCommitRequest>(),
        defaults::<OffsetFetchRequest>(),
        defaults::<ListGroupsRequest>(),
        defaults::<DescribeGroupsRequest>(),
        defaults::<DeleteGroupsRequest>(),
        defaults::<InitProducerIdRequest>(),
        defaults::<DescribeClusterRequest>(),
        defaults::<CreatePartitionsRequest>(),
        defaults::<IncrementalAlterConfigsRequest>(),
        defaults::<AlterConfigsRequest>(),
        defaults::<DeleteRecordsRequest>(),
        defaults::<AddPartitionsToTxnRequest>(),
        defaults::<AddOffsetsToTxnRequest>(),
        defaults::<EndTxnRequest>(),
        defaults::<TxnOffsetCommitRequest>(),
        defaults::<WriteTxnMarkersRequest>(),
        defaults::<ReadShareGroupStateRequest>(),
        defaults::<WriteShareGroupStateRequest>(),
        defaults::<DescribeTransactionsRequest>(),
        defaults::<ListTransactionsRequest>(),
        defaults::<ConsumerGroupHeartbeatRequest>(),
        defaults::<ConsumerGroupDescribeRequest>(),
        defaults::<ShareGroupHeartbeatRequest>(),
        defaults::<ShareGroupDescribeRequest>(),
        defaults::<ShareFetchRequest>(),
        defaults::<ShareAcknowledgeRequest>(),
        defaults::<SaslHandshakeRequest>(),
        defaults::<SaslAuthenticateRequest>(),
        defaults::<DescribeShareGroupOffsetsRequest>(),
        defaults::<AlterShareGroupOffsetsRequest>(),
        defaults::<DeleteShareGroupOffsetsRequest>(),
        defaults::<CreateAclsRequest>(),
        defaults::<DescribeAclsRequest>(),
        defaults::<DeleteAclsRequest>(),
        defaults::<DescribeUserScramCredentialsRequest>(),
        defaults::<AlterUserScramCredentialsRequest>(),
    ];
    assert_eq!(all.len(), APIS.len(), "every served API is probed");
    all.into_iter()
        .flatten()
        .chain(share_newer_defaults())
        .collect()
}

/// A frame: size, a request header for `key`/`version` (header version as the broker
/// reads it), then `body`.
fn frame(key: i16, version: i16, body: &[u8]) -> BytesMut {
    let api_key = ApiKey::try_from(key).unwrap();
    let header = RequestHeader::default()
        .with_request_api_key(key)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("hostile-test")));
    let mut out = BytesMut::new();
    header
        .encode(&mut out, api_key.request_header_version(version))
        .unwrap();
    out.extend_from_slice(body);
    let mut framed = BytesMut::new();
    framed.put_i32(out.len() as i32);
    framed.extend_from_slice(&out);
    framed
}

/// Sends `frames` each on its own connection, 64 at a time, and gives the broker a
/// moment to answer or close each group.
async fn send_each(broker: &TestBroker, frames: &[BytesMut]) {
    for chunk in frames.chunks(64) {
        let mut pending = Vec::new();
        for f in chunk {
            let mut client = broker.client().await;
            client.send_raw(f).await;
            pending.push(client);
        }
        // Each is answered (a damaged request that is still valid), closed, or left
        // waiting: a damaged request can be a valid long poll (a fetch's max_wait_ms
        // or a join's timeout overwritten), which the broker rightly holds.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        for mut client in pending {
            let mut byte = [0u8; 1];
            let _ = tokio::time::timeout_at(deadline, client.stream.read(&mut byte)).await;
        }
    }
}

/// Waits until every request's bytes are back in the budget, then stops the broker.
async fn stop_with_budget_free(broker: TestBroker) {
    wait_for(&broker, "the request budget to be free again", |s| {
        s.request_bytes_held == 0
    })
    .await;
    broker.stop().await;
}

/// A broker taking frames up to 100 MiB against a 128 MiB request budget, and records
/// up to `max_message_bytes`.
async fn large_frame_broker(body_timeout_ms: u64, max_message_bytes: usize) -> TestBroker {
    TestBroker::start_with(|c| {
        c.broker.frame_bytes_max = 100 * 1024 * 1024;
        c.broker.request_bytes_in_flight_max = 128 * 1024 * 1024;
        c.broker.request_body_timeout_ms = body_timeout_ms;
        c.broker.log.max_message_bytes = max_message_bytes;
    })
    .await
}

/// A fresh client still gets every kind of answer: versions, a produce, a fetch.
async fn assert_serving(broker: &TestBroker, value: &str) {
    let mut client = broker.client().await;
    let versions = client.call(3, &ApiVersionsRequest::default()).await;
    assert_eq!(versions.error_code, 0);
    let produce = client
        .call(9, &produce_request(TOPIC, 0, -1, batch(&[value])))
        .await;
    let partition = &produce.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, 0, "produce answered without error");
    let fetch = client
        .call(12, &fetch_request(TOPIC, partition.base_offset, 0, 1))
        .await;
    let records = fetch.responses[0].partitions[0].records.clone().unwrap();
    assert_eq!(values_of(&records)[0].1, value);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_of_two_billion_closes_only_its_connection() {
    let broker = TestBroker::start().await;
    create_topic(&mut broker.client().await, TOPIC, 1).await;
    // The 37-byte request: Fetch v4 whose topic count is 2^31 - 1.
    let mut body = BytesMut::new();
    body.put_i32(-1); // replica_id
    body.put_i32(500); // max_wait_ms
    body.put_i32(1); // min_bytes
    body.put_i32(1 << 20); // max_bytes
    body.put_i8(0); // isolation_level
    body.put_i32(i32::MAX); // topics
    let mut hostile = broker.client().await;
    hostile.send_raw(&frame(1, 4, &body)).await;
    assert!(hostile.closed().await, "the hostile connection is closed");
    assert_serving(&broker, "after the 37 bytes").await;
    let stats = broker.server.stats.snapshot();
    assert_eq!(stats.requests_refused, 1);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_counts_in_every_request_type_are_refused() {
    let broker = TestBroker::start().await;
    create_topic(&mut broker.client().await, TOPIC, 1).await;
    let mut frames = Vec::new();
    for (key, version, body) in every_request() {
        // Overwrite each position in turn with a huge count, as a fixed-width and as
        // a varint, so every length and count of the default request is hit.
        for at in 0..body.len() {
            for hostile in [
                &[0x7f, 0xff, 0xff, 0xff][..],
                &[0xff, 0xff, 0xff, 0xff, 0x0f],
            ] {
                let mut damaged = body[..at].to_vec();
                damaged.extend_from_slice(hostile);
                damaged.extend_from_slice(&body[(at + hostile.len()).min(body.len())..]);
                frames.push(frame(key, version, &damaged));
            }
        }
    }
    println!("{} hostile frames", frames.len());
    send_each(&broker, &frames).await;
    assert_serving(&broker, "after oversized counts").await;
    wait_for(&broker, "the request budget to be free again", |s| {
        s.request_bytes_held == 0
    })
    .await;
    let stats = broker.server.stats.snapshot();
    assert!(
        stats.requests_refused > frames.len() as u64 / 4,
        "most damaged requests are refused: {} of {}",
        stats.requests_refused,
        frames.len()
    );
    broker.stop().await;
}

/// A generator seeded from `HOSTILE_SEED` or at random; the seed is printed.
fn rng() -> fastrand::Rng {
    let seed = std::env::var("HOSTILE_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    let seed = seed.unwrap_or_else(|| fastrand::u64(..));
    println!("HOSTILE_SEED={seed}");
    fastrand::Rng::with_seed(seed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_frames_after_a_real_header_never_take_the_broker_down() {
    let broker = TestBroker::start().await;
    create_topic(&mut broker.client().await, TOPIC, 1).await;
    let mut rng = rng();
    let mut frames = Vec::new();
    for i in 0..3000 {
        let api = &APIS[rng.usize(..APIS.len())];
        let version = rng.i16(api.min_version..=api.max_version);
        let len = rng.usize(..200);
        // Mostly random bytes; every fourth frame is dense with 0xff and 0x7f, which
        // read as huge counts and lengths wherever they land.
        let body: Vec<u8> = (0..len)
            .map(|_| match (i % 4, rng.u8(..3)) {
                (0, 0) => 0xff,
                (0, 1) => 0x7f,
                _ => rng.u8(..),
            })
            .collect();
        frames.push(frame(api.key as i16, version, &body));
    }
    send_each(&broker, &frames).await;
    assert_serving(&broker, "after random frames").await;
    stop_with_budget_free(broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_prefixes_hold_no_budget_and_are_closed_at_the_timeout() {
    const STALLED: usize = 8;
    let broker = large_frame_broker(10_000, 1_048_588).await;
    create_topic(&mut broker.client().await, TOPIC, 1).await;
    // Each announces a 100 MiB frame; half send nothing more, half send a few bytes
    // of body and stop (a slow-loris).
    let mut stalled = Vec::new();
    for i in 0..STALLED {
        let mut client = broker.client().await;
        let mut start = BytesMut::new();
        start.put_i32(100 * 1024 * 1024);
        if i % 2 == 1 {
            start.extend_from_slice(&[0, 0, 0, 12, 0, 0, 0, 1]);
        }
        client.stream.write_all(&start).await.unwrap();
        stalled.push(client);
    }
    wait_for(&broker, "the stalled connections to be open", |s| {
        s.connections.len() >= STALLED
    })
    .await;
    // Together they announced 800 MiB, six times the budget; none has sent enough to
    // ask for any of it.
    let held = broker.server.stats.snapshot().request_bytes_held;
    assert_eq!(held, 0, "stalled prefixes hold none of the request budget");
    // Everyone else is served at once, not after the stalled ones give up.
    let serving = tokio::time::timeout(
        Duration::from_millis(8_000),
        assert_serving(&broker, "beside stalled bodies"),
    );
    serving
        .await
        .expect("a well-behaved client is answered while bodies are stalled");
    for mut client in stalled {
        assert!(client.closed().await, "a stalled body is closed");
    }
    wait_for(&broker, "every stalled body to time out", |s| {
        s.request_body_timeouts == STALLED as u64 && s.request_bytes_held == 0
    })
    .await;
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_frame_trickling_in_is_read_as_it_arrives_and_answered() {
    // A produce of about 3 MiB arrives in pieces; the broker grows its buffer as the
    // bytes come and answers it, and the budget it held comes back.
    let broker = TestBroker::start_with(|c| c.broker.log.max_message_bytes = 8 * 1024 * 1024).await;
    create_topic(&mut broker.client().await, TOPIC, 1).await;
    let value = "x".repeat(3 * 1024 * 1024);
    let request = produce_request(TOPIC, 0, -1, batch(&[&value]));
    let whole = request_frame(9, 1, &request);
    let mut client = broker.client().await;
    for piece in whole.chunks(200 * 1024) {
        client.stream.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (id, response) = client.recv::<ProduceResponse>(9).await;
    assert_eq!(id, 1);
    assert_eq!(response.responses[0].partition_responses[0].error_code, 0);
    stop_with_budget_free(broker).await;
}

/// Sends the first `sent` bytes of a `size`-byte produce frame and stops.
async fn stall_after(broker: &TestBroker, size: usize, sent: usize) -> Client {
    let mut client = broker.client().await;
    let mut start = BytesMut::with_capacity(4 + sent);
    start.put_i32(size as i32);
    start.extend_from_slice(&frame(0, 9, &[])[4..]);
    start.resize(4 + sent, 0);
    client.stream.write_all(&start).await.unwrap();
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_large_frame_holding_the_budget_delays_no_one_else() {
    // A sends 64 MiB of a 100 MiB frame and stops, holding 100 MiB of the 128 MiB
    // budget; B sends 16 MiB of another 100 MiB frame and waits for budget that cannot
    // come until A times out. Small requests never ask the budget, and a 3 MiB produce
    // fits in what is left: neither waits for A's deadline.
    let broker = large_frame_broker(20_000, 8 * 1024 * 1024).await;
    create_topic(&mut broker.client().await, TOPIC, 1).await;
    let a = stall_after(&broker, 100 << 20, 64 << 20).await;
    wait_for(&broker, "A to hold its frame's budget", |s| {
        s.request_bytes_held == 100 << 20
    })
    .await;
    let b = stall_after(&broker, 100 << 20, 16 << 20).await;
    wait_for(&broker, "B to wait for the budget", |s| {
        s.request_budget_waits >= 1
    })
    .await;
    let others = async {
        assert_serving(&broker, "beside a budget hog").await;
        let value = "x".repeat(3 * 1024 * 1024);
        let mut client = broker.client().await;
        let response = client
            .call(9, &produce_request(TOPIC, 0, -1, batch(&[&value])))
            .await;
        assert_eq!(response.responses[0].partition_responses[0].error_code, 0);
    };
    tokio::time::timeout(Duration::from_millis(15_000), others)
        .await
        .expect("small requests and a frame that fits are served before the hog times out");
    drop((a, b));
    stop_with_budget_free(broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_frames_sent_together_never_wait_on_each_other() {
    // Three 48 MiB frames interleaved a MiB at a time against a 128 MiB budget: two fit,
    // the third waits with nothing held and goes once one of them is handled. With
    // budget taken in steps they would each hold a part and wait for ever.
    let broker = large_frame_broker(30_000, 64 * 1024 * 1024).await;
    create_topic(&mut broker.client().await, TOPIC, 1).await;
    let value = "y".repeat(48 * 1024 * 1024);
    let whole = request_frame(9, 1, &produce_request(TOPIC, 0, -1, batch(&[&value])));
    drop(value);
    let mut senders = Vec::new();
    for _ in 0..3 {
        let mut client = broker.client().await;
        let whole = whole.clone();
        senders.push(tokio::spawn(async move {
            for piece in whole.chunks(1 << 20) {
                client.stream.write_all(piece).await.unwrap();
                tokio::task::yield_now().await;
            }
            let (_, response) = client.recv::<ProduceResponse>(9).await;
            response.responses[0].partition_responses[0].error_code
        }));
    }
    let sending = async {
        for sender in senders {
            assert_eq!(sender.await.unwrap(), 0);
        }
    };
    tokio::time::timeout(Duration::from_secs(25), sending)
        .await
        .expect("all three large produces are answered, none waits on another");
    stop_with_budget_free(broker).await;
}

/// A client that names one partition 20,000 times in each of 16 pipelined long polls
/// holds at most the connection's long-poll bound plus one request's bookkeeping: its
/// reader pauses instead of taking in more (the client's writes then wait, as TCP
/// pushes back). Every poll is answered in order as the client reads, and the
/// bookkeeping is all given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_long_polls_naming_a_partition_many_times_are_bounded() {
    use headway_protocol::kafka_protocol::protocol::Decodable;
    const POLLS: i32 = 16;
    const NAMES: usize = 20_000;
    let broker = TestBroker::start().await;
    let mut setup = broker.client().await;
    create_topic(&mut setup, "lp", 1).await;
    let one = fetch_request::FetchPartition::default()
        .with_partition(0)
        .with_fetch_offset(0)
        .with_partition_max_bytes(1024);
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(200)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(topic_name("lp"))
            .with_partitions(vec![one; NAMES])]);
    let frames: Vec<_> = (1..=POLLS)
        .map(|id| request_frame(12, id, &request))
        .collect();
    // One request's bookkeeping, at most: what the reader may take in past the bound.
    let bound = headway_base::limits::LONG_POLL_BYTES_PER_CONNECTION_MAX;
    let one_request = frames[0].len() * 8;
    let mut stream = tokio::net::TcpStream::connect(broker.addr).await.unwrap();
    let (mut reader, mut writer) = stream.split();
    let send = async {
        for frame in &frames {
            writer.write_all(frame).await.unwrap();
        }
    };
    let observe_then_read = async {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        let (mut paused, mut most) = (false, 0);
        while tokio::time::Instant::now() < deadline && !paused {
            let stats = broker.server.stats.snapshot();
            if let Some(c) = stats.connections.iter().max_by_key(|c| c.long_poll_bytes) {
                most = most.max(c.long_poll_bytes);
                paused |= c.reader_paused && c.long_poll_bytes > bound;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            paused,
            "the reader paused past the bound (most held: {most})"
        );
        for id in 1..=POLLS {
            let size = reader.read_i32().await.unwrap();
            let mut frame = vec![0u8; size as usize];
            reader.read_exact(&mut frame).await.unwrap();
            assert_eq!(i32::from_be_bytes(frame[..4].try_into().unwrap()), id);
            // Response header v1: the correlation id, then no tagged fields.
            let mut body = bytes::Bytes::from(frame).slice(5..);
            let response = FetchResponse::decode(&mut body, 12).unwrap();
            assert_eq!(response.responses[0].partitions.len(), NAMES);
            let stats = broker.server.stats.snapshot();
            most = stats
                .connections
                .iter()
                .map(|c| c.long_poll_bytes)
                .fold(most, usize::max);
        }
        most
    };
    let ((), most) = tokio::join!(send, observe_then_read);
    assert!(most <= bound + one_request, "{most} held, bound {bound}");
    wait_for(&broker, "the long polls' bookkeeping given back", |s| {
        s.connections.iter().all(|c| c.long_poll_bytes == 0)
    })
    .await;
    broker.stop().await;
}
