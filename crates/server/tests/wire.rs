//! Goal: check the broker's wire behaviour where third-party clients cannot reach:
//! malformed and hostile input, version negotiation, pipelining order, error codes.
//!
//! Method: start a broker in-process on an ephemeral port with a temporary data
//! directory, and speak the Kafka protocol to it over real sockets with requests
//! encoded by the `kafka-protocol` crate (client side).

mod common;

use bytes::BytesMut;
use common::*;
use headway_protocol::kafka_protocol::messages::*;
use headway_protocol::kafka_protocol::protocol::{Decodable, StrBytes};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_answers_an_unknown_version_with_the_v0_fallback() {
    let broker = TestBroker::start().await;
    let mut client = broker.client().await;
    // A future ApiVersions (v99): flexible request header, but the answer is v0.
    let id = client.send_api_versions_v99().await;
    let mut frame = client.recv_frame().await.unwrap();
    let header = ResponseHeader::decode(&mut frame, 0).unwrap();
    let body = ApiVersionsResponse::decode(&mut frame, 0).unwrap();
    assert_eq!(header.correlation_id, id);
    assert_eq!(body.error_code, 35, "UNSUPPORTED_VERSION");
    let produce = body
        .api_keys
        .iter()
        .find(|k| k.api_key == 0)
        .expect("Produce listed");
    assert_eq!(produce.min_version, 0);
    // The same connection then negotiates v3 normally.
    let request = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("wire-test"))
        .with_client_software_version(StrBytes::from_static_str("1"));
    let response = client.call(3, &request).await;
    assert_eq!(response.error_code, 0);
    let fetch = response
        .api_keys
        .iter()
        .find(|k| k.api_key == 1)
        .expect("Fetch listed");
    assert!(fetch.min_version == 4 && fetch.max_version >= 12);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_frames_close_only_their_own_connection() {
    let broker = TestBroker::start().await;
    let mut bystander = broker.client().await;
    bystander.call(0, &ApiVersionsRequest::default()).await;

    let mut oversized = broker.client().await;
    oversized
        .send_raw(&(64 * 1024 * 1024i32).to_be_bytes())
        .await;
    assert!(
        oversized.closed().await,
        "a frame above the limit closes the connection"
    );

    let mut unknown_api = broker.client().await;
    unknown_api
        .send_raw(&[0, 0, 0, 8, 0x7f, 0x7f, 0, 0, 0, 0, 0, 1])
        .await;
    assert!(
        unknown_api.closed().await,
        "an unknown API key closes the connection"
    );

    let mut garbage = broker.client().await;
    // Metadata v12 header followed by a body that is not a Metadata request.
    garbage
        .send_raw(&[0, 0, 0, 12, 0, 3, 0, 12, 0, 0, 0, 1, 0xff, 0xff, 0, 0xee])
        .await;
    assert!(
        garbage.closed().await,
        "a malformed body closes the connection"
    );

    let mut old_produce = broker.client().await;
    old_produce.send(2, &ApiVersionsRequest::default()).await; // warm-up, then Produce v2:
    old_produce.recv_frame().await.unwrap();
    old_produce
        .send_raw(&[0, 0, 0, 10, 0, 0, 0, 2, 0, 0, 0, 9, 0xff, 0xff])
        .await;
    assert!(
        old_produce.closed().await,
        "Produce v2 (message format v1) is refused"
    );

    let response = bystander
        .call(12, &MetadataRequest::default().with_topics(None))
        .await;
    assert_eq!(response.brokers.len(), 1, "other connections keep working");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_produces_get_dense_offsets_and_in_order_answers() {
    let broker = TestBroker::start().await;
    let mut client = broker.client().await;
    create_topic(&mut client, "pipelined", 1).await;
    let mut ids = Vec::new();
    for i in 0..20 {
        let values: Vec<String> = (0..3).map(|j| format!("m{i}-{j}")).collect();
        let refs: Vec<&str> = values.iter().map(String::as_str).collect();
        ids.push(
            client
                .send(9, &produce_request("pipelined", 0, -1, batch(&refs)))
                .await,
        );
    }
    for (i, id) in ids.iter().enumerate() {
        let (got, response) = client.recv::<ProduceResponse>(9).await;
        assert_eq!(got, *id, "answers leave in request order");
        let p = partition_response(&response);
        assert_eq!(p.error_code, 0);
        assert_eq!(
            p.base_offset,
            3 * i as i64,
            "offsets are dense and assigned in order"
        );
    }
    // A fetch from inside the second batch returns that whole batch first.
    let response = client.call(12, &fetch_request("pipelined", 4, 0, 1)).await;
    let data = &response.responses[0].partitions[0];
    assert_eq!(data.error_code, 0);
    assert_eq!(data.high_watermark, 60);
    let values = values_of(data.records.as_ref().unwrap());
    assert_eq!(values[0], (3, "m1-0".to_string()));
    assert_eq!(values.len(), 57);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_batches_get_kafka_error_codes_and_nothing_is_stored() {
    let broker = TestBroker::start().await;
    let mut client = broker.client().await;
    create_topic(&mut client, "bad", 1).await;

    let mut corrupt = BytesMut::from(&batch(&["a", "b"])[..]);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    let response = client
        .call(9, &produce_request("bad", 0, -1, corrupt.freeze()))
        .await;
    assert_eq!(
        partition_response(&response).error_code,
        2,
        "CORRUPT_MESSAGE"
    );

    let mut old_format = BytesMut::from(&batch(&["a"])[..]);
    old_format[16] = 1;
    let response = client
        .call(9, &produce_request("bad", 0, -1, old_format.freeze()))
        .await;
    assert_eq!(
        partition_response(&response).error_code,
        43,
        "UNSUPPORTED_FOR_MESSAGE_FORMAT"
    );

    let big = "x".repeat(2 * 1024 * 1024 / 4);
    let huge = batch(&[&big, &big, &big]);
    let response = client.call(9, &produce_request("bad", 0, -1, huge)).await;
    assert_eq!(
        partition_response(&response).error_code,
        10,
        "MESSAGE_TOO_LARGE"
    );

    let response = client
        .call(9, &produce_request("no-such-topic", 0, -1, batch(&["a"])))
        .await;
    assert_eq!(
        partition_response(&response).error_code,
        3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    let response = client
        .call(9, &produce_request("bad", 7, -1, batch(&["a"])))
        .await;
    assert_eq!(
        partition_response(&response).error_code,
        3,
        "no partition 7"
    );
    let response = client
        .call(9, &produce_request("bad", 0, 2, batch(&["a"])))
        .await;
    assert_eq!(
        partition_response(&response).error_code,
        21,
        "INVALID_REQUIRED_ACKS"
    );

    let response = client
        .call(9, &produce_request("bad", 0, 1, batch(&["good"])))
        .await;
    assert_eq!(
        partition_response(&response).base_offset,
        0,
        "nothing bad was stored"
    );
    let response = client.call(12, &fetch_request("bad", 5, 0, 1)).await;
    assert_eq!(
        response.responses[0].partitions[0].error_code, 1,
        "OFFSET_OUT_OF_RANGE"
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_zero_gets_no_answer_but_is_stored() {
    let broker = TestBroker::start().await;
    let mut client = broker.client().await;
    create_topic(&mut client, "fire-and-forget", 1).await;
    client
        .send(
            9,
            &produce_request("fire-and-forget", 0, 0, batch(&["x", "y"])),
        )
        .await;
    let id = client.send(0, &ApiVersionsRequest::default()).await;
    let (got, _) = client.recv::<ApiVersionsResponse>(0).await;
    assert_eq!(got, id, "the next answer is the ApiVersions one");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let response = client
            .call(12, &fetch_request("fire-and-forget", 0, 500, 1))
            .await;
        let records = response.responses[0].partitions[0].records.clone().unwrap();
        if !records.is_empty() {
            assert_eq!(values_of(&records), vec![(0, "x".into()), (1, "y".into())]);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "acks=0 data became visible"
        );
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_fetch_is_woken_by_a_produce() {
    let broker = TestBroker::start().await;
    let mut consumer = broker.client().await;
    let mut producer = broker.client().await;
    create_topic(&mut consumer, "long-poll", 1).await;
    // Wait up to the broker's maximum; only a produce can end this wait early.
    let id = consumer
        .send(12, &fetch_request("long-poll", 0, 30_000, 1))
        .await;
    let response = producer
        .call(9, &produce_request("long-poll", 0, -1, batch(&["wake"])))
        .await;
    assert_eq!(partition_response(&response).error_code, 0);
    let (got, response) = consumer.recv::<FetchResponse>(12).await;
    assert_eq!(got, id);
    let records = response.responses[0].partitions[0].records.clone().unwrap();
    assert_eq!(values_of(&records), vec![(0, "wake".into())]);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_auto_creates_and_topic_ids_resolve_in_fetch() {
    let broker = TestBroker::start().await;
    let mut client = broker.client().await;
    let request = MetadataRequest::default()
        .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
        )
        .with_name(Some(topic_name("auto")))]))
        .with_allow_auto_topic_creation(true);
    let response = client.call(12, &request).await;
    let topic = &response.topics[0];
    assert_eq!(topic.error_code, 0);
    assert_eq!(topic.partitions.len(), 1);
    assert_eq!(response.brokers[0].port, i32::from(broker.addr.port()));

    client
        .call(9, &produce_request("auto", 0, -1, batch(&["by-id"])))
        .await;
    let mut request = fetch_request("", 0, 0, 1);
    request.topics[0].topic_id = topic.topic_id;
    let response = client.call(13, &request).await;
    assert_eq!(response.responses[0].topic_id, topic.topic_id);
    let records = response.responses[0].partitions[0].records.clone().unwrap();
    assert_eq!(values_of(&records), vec![(0, "by-id".into())]);

    let invalid =
        MetadataRequest::default()
            .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
            )
            .with_name(Some(topic_name("no/slash")))]));
    let response = client.call(12, &invalid).await;
    assert_eq!(response.topics[0].error_code, 17, "INVALID_TOPIC_EXCEPTION");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_ready_before_a_long_poll_are_sent_before_the_poll_ends() {
    let broker = TestBroker::start().await;
    let mut client = broker.client().await;
    create_topic(&mut client, "answered", 1).await;
    create_topic(&mut client, "quiet", 1).await;
    // A short long poll (the writer waits on it while the broker reads what follows),
    // a produce, and a fetch that waits up to 20 s for data that never comes: the
    // first two answers must not wait in the connection's writer for the third.
    let short = client.send(12, &fetch_request("quiet", 0, 300, 1)).await;
    let produced = client
        .send(9, &produce_request("answered", 0, -1, batch(&["a"])))
        .await;
    let long = client.send(12, &fetch_request("quiet", 0, 20_000, 1)).await;
    let first_two = async {
        let (got_short, _) = client.recv::<FetchResponse>(12).await;
        let (got_produced, answer) = client.recv::<ProduceResponse>(9).await;
        (got_short, got_produced, answer)
    };
    let (got_short, got_produced, answer) =
        tokio::time::timeout(std::time::Duration::from_secs(10), first_two)
            .await
            .expect("the first two answers arrive while the last fetch still waits");
    assert_eq!((got_short, got_produced), (short, produced));
    assert_eq!(partition_response(&answer).error_code, 0);
    let (got, fetched) = client.recv::<FetchResponse>(12).await;
    assert_eq!(got, long);
    let records = fetched.responses[0].partitions[0].records.as_ref();
    assert!(
        records.is_none_or(|r| r.is_empty()),
        "the last fetch found nothing: it waited for its max_wait_ms"
    );
    broker.stop().await;
}
