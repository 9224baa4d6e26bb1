//! Shared by the wire tests: an in-process broker on an ephemeral port and a raw
//! Kafka protocol client.
#![allow(dead_code)]

use bytes::{Buf, BufMut, Bytes, BytesMut};
use headway_broker::BrokerConfig;
use headway_protocol::kafka_protocol::messages::*;
use headway_protocol::kafka_protocol::protocol::{
    Decodable, Encodable, HeaderVersion, Request, StrBytes,
};
use headway_protocol::kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use headway_server::call::StatsSnapshot;
use headway_server::Config;
use headway_server::{RunningServer, Server};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Generous: CI runs on two shared cores.
pub const DEADLINE: Duration = Duration::from_secs(30);

pub struct TestBroker {
    pub addr: SocketAddr,
    pub server: RunningServer,
    pub dir: tempfile::TempDir,
}

impl TestBroker {
    pub async fn start() -> TestBroker {
        TestBroker::start_in(tempfile::tempdir().unwrap()).await
    }

    /// Starts a broker on an existing data directory (a restart).
    pub async fn start_in(dir: tempfile::TempDir) -> TestBroker {
        TestBroker::start_configured(dir, |_| {}).await
    }

    /// Starts a broker with settings changed by `adjust`.
    pub async fn start_with(adjust: impl FnOnce(&mut Config)) -> TestBroker {
        TestBroker::start_configured(tempfile::tempdir().unwrap(), adjust).await
    }

    async fn start_configured(
        dir: tempfile::TempDir,
        adjust: impl FnOnce(&mut Config),
    ) -> TestBroker {
        let mut config = Config::from(BrokerConfig {
            data_dir: dir.path().to_path_buf(),
            listen: "127.0.0.1:0".into(),
            frame_bytes_max: 4 * 1024 * 1024,
            ..BrokerConfig::default()
        });
        adjust(&mut config);
        // Every panic in this process is counted: `stop` fails the test on one.
        headway_broker::panics::install_hook();
        let server = Server::start(config).await.unwrap();
        TestBroker {
            addr: server.addr,
            server,
            dir,
        }
    }

    pub async fn client(&self) -> Client {
        Client {
            stream: TcpStream::connect(self.addr).await.unwrap(),
            next_correlation_id: 1,
        }
    }

    pub async fn stop(self) {
        self.stop_keeping_data().await;
    }

    /// Stops cleanly and hands back the data directory for a restart.
    pub async fn stop_keeping_data(self) -> tempfile::TempDir {
        tokio::time::timeout(DEADLINE, self.server.stop())
            .await
            .unwrap();
        assert_no_panics();
        self.dir
    }

    /// Stops without the shutdown sequence (no producer-state snapshots, no
    /// clean-shutdown markers), as after a crash: the server task is aborted.
    pub async fn crash(self) -> tempfile::TempDir {
        self.server.task.abort();
        let _ = self.server.task.await;
        // The aborted connection tasks drop their handles to the broker as the runtime
        // gets to them; the data directory's lock is free once the last one is gone.
        let lock = std::fs::File::open(self.dir.path().join(".lock")).unwrap();
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while lock.try_lock().is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the crashed broker let go of its data directory"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        lock.unlock().unwrap();
        assert_no_panics();
        self.dir
    }
}

/// Fails the test when the broker caught a panic anywhere in this process: a caught
/// panic fails its job only, so a test could pass beside it unseen. (A test's own failed
/// assertions are not counted, so one failing test does not fail the others.) The
/// panic's ERROR line and backtrace are in the test's output.
pub fn assert_no_panics() {
    let panics = headway_broker::panics::caught_total();
    assert!(
        panics == 0 || std::thread::panicking(),
        "the broker caught {panics} panic(s) in this test process; see the 'panicked at' lines above"
    );
}

/// Waits until `check` holds for the broker's stats, or fails after the deadline.
pub async fn wait_for(broker: &TestBroker, what: &str, check: impl Fn(&StatsSnapshot) -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let stats = broker.server.stats.snapshot();
        if check(&stats) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}; stats: {stats:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub struct Client {
    pub stream: TcpStream,
    pub next_correlation_id: i32,
}

impl Client {
    pub async fn send_raw(&mut self, frame: &[u8]) {
        self.stream.write_all(frame).await.unwrap();
    }

    pub async fn send<R: Request>(&mut self, version: i16, request: &R) -> i32 {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id += 1;
        self.send_raw(&request_frame(version, correlation_id, request))
            .await;
        correlation_id
    }

    /// ApiVersions at a version no broker knows yet; its body is written as v3's.
    pub async fn send_api_versions_v99(&mut self) -> i32 {
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
    pub async fn recv_frame(&mut self) -> Option<Bytes> {
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

    pub async fn recv<R: Decodable + HeaderVersion>(&mut self, version: i16) -> (i32, R) {
        let mut frame = self
            .recv_frame()
            .await
            .expect("a response, not a closed connection");
        let header = ResponseHeader::decode(&mut frame, R::header_version(version)).unwrap();
        let body = R::decode(&mut frame, version).unwrap();
        assert!(!frame.has_remaining(), "response has trailing bytes");
        (header.correlation_id, body)
    }

    pub async fn call<R: Request>(&mut self, version: i16, request: &R) -> R::Response {
        let id = self.send(version, request).await;
        let (got, response) = self.recv::<R::Response>(version).await;
        assert_eq!(got, id, "responses come back in request order");
        response
    }

    /// True when the broker has closed the connection.
    pub async fn closed(&mut self) -> bool {
        self.recv_frame().await.is_none()
    }
}

/// A whole request frame: size, header (client id `wire-test`) and body.
pub fn request_frame<R: Request>(version: i16, correlation_id: i32, request: &R) -> Bytes {
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
    frame.freeze()
}

/// A Fetch of partitions `0..partitions` of `topic`, each from offset 0.
pub fn fetch_every_partition(
    topic: &str,
    partitions: i32,
    max_wait_ms: i32,
    min_bytes: i32,
    max_bytes: i32,
    partition_max_bytes: i32,
) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(min_bytes)
        .with_max_bytes(max_bytes)
        .with_session_epoch(-1)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(
                (0..partitions)
                    .map(|p| {
                        fetch_request::FetchPartition::default()
                            .with_partition(p)
                            .with_fetch_offset(0)
                            .with_partition_max_bytes(partition_max_bytes)
                    })
                    .collect(),
            )])
}

pub fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

pub async fn create_topic(client: &mut Client, name: &str, partitions: i32) {
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

pub fn batch(values: &[&str]) -> Bytes {
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
    encode(&records)
}

/// Encodes records as one uncompressed v2 batch (they must share producer fields, and
/// offset minus sequence must be the same for all, or the encoder splits the batch).
pub fn encode(records: &[Record]) -> Bytes {
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, records, &options).unwrap();
    buf.freeze()
}

pub fn produce_request(topic: &str, partition: i32, acks: i16, records: Bytes) -> ProduceRequest {
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

pub fn fetch_request(topic: &str, offset: i64, max_wait_ms: i32, min_bytes: i32) -> FetchRequest {
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

pub fn partition_response(
    response: &ProduceResponse,
) -> &produce_response::PartitionProduceResponse {
    &response.responses[0].partition_responses[0]
}

pub fn values_of(records: &Bytes) -> Vec<(i64, String)> {
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

/// `GET /metrics` over a plain TCP connection; the body of a 200 answer.
pub async fn scrape(addr: SocketAddr) -> String {
    let (status, body) = http_get(addr, "/metrics").await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    body
}

/// `GET path` over a plain TCP connection: the status line and the body.
pub async fn http_get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(DEADLINE, stream.read_to_string(&mut answer))
        .await
        .expect("answered in time")
        .unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.lines().next().unwrap_or_default().to_string();
    (status, body.to_string())
}
