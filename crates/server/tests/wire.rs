//! Goal: check the broker's wire behaviour where third-party clients cannot reach:
//! malformed and hostile input, version negotiation, pipelining order, error codes.
//!
//! Method: start a broker in-process on an ephemeral port with a temporary data
//! directory, and speak the Kafka protocol to it over real sockets with requests
//! encoded by the `kafka-protocol` crate (client side).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use headway_broker::BrokerConfig;
use headway_protocol::kafka_protocol::messages::*;
use headway_protocol::kafka_protocol::protocol::{
    Decodable, Encodable, HeaderVersion, Request, StrBytes,
};
use headway_protocol::kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use headway_server::{RunningServer, Server};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Generous: CI runs on two shared cores.
const DEADLINE: Duration = Duration::from_secs(30);

struct TestBroker {
    addr: SocketAddr,
    server: RunningServer,
    _dir: tempfile::TempDir,
}

impl TestBroker {
    async fn start() -> TestBroker {
        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig {
            data_dir: dir.path().to_path_buf(),
            listen: "127.0.0.1:0".into(),
            frame_bytes_max: 4 * 1024 * 1024,
            ..BrokerConfig::default()
        };
        let server = Server::start(config).await.unwrap();
        TestBroker {
            addr: server.addr,
            server,
            _dir: dir,
        }
    }

    async fn client(&self) -> Client {
        Client {
            stream: TcpStream::connect(self.addr).await.unwrap(),
            next_correlation_id: 1,
        }
    }

    async fn stop(self) {
        tokio::time::timeout(DEADLINE, self.server.stop())
            .await
            .unwrap();
    }
}

struct Client {
    stream: TcpStream,
    next_correlation_id: i32,
}

impl Client {
    async fn send_raw(&mut self, frame: &[u8]) {
        self.stream.write_all(frame).await.unwrap();
    }

    async fn send<R: Request>(&mut self, version: i16, request: &R) -> i32 {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("wire-test")));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, R::header_version(version))
            .unwrap();
        request.encode(&mut body, version).unwrap();
        let mut frame = BytesMut::new();
        frame.put_i32(body.len() as i32);
        frame.extend_from_slice(&body);
        self.send_raw(&frame).await;
        correlation_id
    }

    /// ApiVersions at a version no broker knows yet; its body is written as v3's.
    async fn send_api_versions_v99(&mut self) -> i32 {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(ApiVersionsRequest::KEY)
            .with_request_api_version(99)
            .with_correlation_id(correlation_id);
        let mut body = BytesMut::new();
        header.encode(&mut body, 2).unwrap();
        ApiVersionsRequest::default().encode(&mut body, 3).unwrap();
        let mut frame = BytesMut::new();
        frame.put_i32(body.len() as i32);
        frame.extend_from_slice(&body);
        self.send_raw(&frame).await;
        correlation_id
    }

    /// Reads one response frame; `None` when the broker closed the connection.
    async fn recv_frame(&mut self) -> Option<Bytes> {
        let read = async {
            let size = self.stream.read_i32().await.ok()?;
            let mut frame = vec![0u8; size as usize];
            self.stream.read_exact(&mut frame).await.ok()?;
            Some(Bytes::from(frame))
        };
        tokio::time::timeout(DEADLINE, read)
            .await
            .expect("broker answered in time")
    }

    async fn recv<R: Decodable + HeaderVersion>(&mut self, version: i16) -> (i32, R) {
        let mut frame = self
            .recv_frame()
            .await
            .expect("a response, not a closed connection");
        let header = ResponseHeader::decode(&mut frame, R::header_version(version)).unwrap();
        let body = R::decode(&mut frame, version).unwrap();
        assert!(!frame.has_remaining(), "response has trailing bytes");
        (header.correlation_id, body)
    }

    async fn call<R: Request>(&mut self, version: i16, request: &R) -> R::Response {
        let id = self.send(version, request).await;
        let (got, response) = self.recv::<R::Response>(version).await;
        assert_eq!(got, id, "responses come back in request order");
        response
    }

    /// True when the broker has closed the connection.
    async fn closed(&mut self) -> bool {
        self.recv_frame().await.is_none()
    }
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

async fn create_topic(client: &mut Client, name: &str, partitions: i32) {
    let request = CreateTopicsRequest::default().with_topics(vec![
        create_topics_request::CreatableTopic::default()
            .with_name(topic_name(name))
            .with_num_partitions(partitions)
            .with_replication_factor(1),
    ]);
    let response = client.call(7, &request).await;
    assert_eq!(
        response.topics[0].error_code, 0,
        "{:?}",
        response.topics[0].error_message
    );
}

fn batch(values: &[&str]) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch whenever offset minus sequence changes;
            // this keeps all records in one batch with a base sequence of -1.
            sequence: i as i32 - 1,
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(Bytes::from(format!("key-{i}"))),
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
    buf.freeze()
}

fn produce_request(topic: &str, partition: i32, acks: i16, records: Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(topic_name(topic))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(records)),
            ])])
}

fn fetch_request(topic: &str, offset: i64, max_wait_ms: i32, min_bytes: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(min_bytes)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(vec![fetch_request::FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])])
}

fn partition_response(response: &ProduceResponse) -> &produce_response::PartitionProduceResponse {
    &response.responses[0].partition_responses[0]
}

fn values_of(records: &Bytes) -> Vec<(i64, String)> {
    let mut buf = records.clone();
    RecordBatchDecoder::decode_all(&mut buf)
        .unwrap()
        .into_iter()
        .flat_map(|set| set.records)
        .map(|r| {
            (
                r.offset,
                String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
            )
        })
        .collect()
}

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
