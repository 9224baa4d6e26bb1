//! One connection to one broker: pipelined requests, answers matched in order.
//!
//! A writer task sends frames; a reader task reads answers and hands each to the
//! request that waits for it. Between them, a bounded queue of pending requests is the
//! connection's in-flight window: when it is full, `request` waits. Kafka answers a
//! connection's requests in order, so the reader matches each answer to the oldest
//! pending request and checks the correlation id.
//!
//! At connect, TLS and SASL come first when the client's [`Security`] asks for them
//! (`crate::transport`), then ApiVersions tells which versions the broker serves; each request uses
//! the newest version both sides know ([`SUPPORTED`] lists the client's side).

use crate::error::ClientError;
use crate::transport::{SaslMechanism, SaslStep, Security};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use headway_protocol::read_frame;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// Versions this client speaks, per API (min, max).
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 11),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::FindCoordinator, 1, 3),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::OffsetFetch, 1, 7),
    (ApiKey::JoinGroup, 4, 7),
    (ApiKey::SyncGroup, 3, 5),
    (ApiKey::Heartbeat, 3, 4),
    (ApiKey::LeaveGroup, 3, 4),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::ShareGroupDescribe, 1, 1),
    (ApiKey::DescribeShareGroupOffsets, 0, 0),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    // Brokers' own requests to each other, for transactions.
    (ApiKey::AddPartitionsToTxn, 4, 5),
    (ApiKey::WriteTxnMarkers, 1, 1),
    (ApiKey::ReadShareGroupState, 0, 0),
    (ApiKey::WriteShareGroupState, 0, 0),
];

/// Largest answer accepted; a larger length means a corrupt stream.
const RESPONSE_BYTES_MAX: usize = 256 * 1024 * 1024;

type Reply = oneshot::Sender<Result<Bytes, ClientError>>;

struct Outgoing {
    frame: Bytes,
    correlation_id: i32,
    /// `None` for requests without an answer (produce with acks=0).
    reply: Option<Reply>,
}

pub struct Connection {
    addr: String,
    outgoing: mpsc::Sender<Outgoing>,
    versions: HashMap<i16, i16>,
    next_correlation_id: AtomicI32,
    client_id: StrBytes,
    closed: Arc<AtomicBool>,
    timeout: Duration,
}

impl Connection {
    /// Connects (with TLS and SASL when `security` asks for them), starts the reader
    /// and writer, and negotiates versions.
    pub async fn connect(
        addr: &str,
        client_id: &str,
        in_flight_max: usize,
        timeout: Duration,
        security: &Security,
    ) -> Result<Connection, ClientError> {
        let fail = |reason: String| ClientError::Connection {
            addr: addr.to_string(),
            reason,
        };
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| fail("connect timed out".into()))?
            .map_err(|e| fail(e.to_string()))?;
        let _ = stream.set_nodelay(true);
        let (outgoing, outgoing_rx) = mpsc::channel(in_flight_max.max(1));
        let (pending, pending_rx) = mpsc::channel(in_flight_max.max(1));
        let closed = Arc::new(AtomicBool::new(false));
        let loops = Loops {
            outgoing: outgoing_rx,
            pending,
            pending_rx,
            addr: addr.to_string(),
            closed: Arc::clone(&closed),
        };
        match &security.tls {
            None => {
                let (reader, writer) = stream.into_split();
                loops.start(reader, writer);
            }
            Some(tls) => {
                let name = tls.server_name(addr).map_err(fail)?;
                let connector = tokio_rustls::TlsConnector::from(Arc::clone(&tls.config));
                let stream = tokio::time::timeout(timeout, connector.connect(name, stream))
                    .await
                    .map_err(|_| fail("TLS handshake timed out".into()))?
                    .map_err(|e| fail(format!("TLS handshake: {e}")))?;
                let (reader, writer) = tokio::io::split(stream);
                loops.start(reader, writer);
            }
        }
        let mut connection = Connection {
            addr: addr.to_string(),
            outgoing,
            versions: HashMap::new(),
            next_correlation_id: AtomicI32::new(0),
            client_id: StrBytes::from_string(client_id.to_string()),
            closed,
            timeout,
        };
        if let Some(mechanism) = &security.sasl {
            connection.authenticate(mechanism.as_ref()).await?;
        }
        connection.versions = connection.negotiate().await?;
        Ok(connection)
    }

    /// SaslHandshake v1, then SaslAuthenticate v2 for every token of the exchange.
    async fn authenticate(&self, mechanism: &dyn SaslMechanism) -> Result<(), ClientError> {
        let name = mechanism.name();
        let handshake =
            SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(name.to_string()));
        let response: SaslHandshakeResponse = self.request_at(1, &handshake).await?;
        if response.error_code != 0 {
            let offered: Vec<&str> = response.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(ClientError::Authentication(format!(
                "the broker does not offer SASL mechanism {name} on this listener (it offers: {})",
                offered.join(", ")
            )));
        }
        let mut exchange = mechanism.start().map_err(ClientError::Authentication)?;
        let mut server: Option<Bytes> = None;
        loop {
            let token = match exchange
                .next(server.as_deref())
                .map_err(ClientError::Authentication)?
            {
                SaslStep::Done => return Ok(()),
                SaslStep::Send(token) => token,
            };
            let request = SaslAuthenticateRequest::default().with_auth_bytes(token.into());
            let response: SaslAuthenticateResponse = self.request_at(2, &request).await?;
            if response.error_code != 0 {
                let refused = ClientError::from_code(response.error_code, None).to_string();
                let message = response.error_message.map(|m| m.to_string());
                return Err(ClientError::Authentication(match message {
                    Some(m) if !m.is_empty() => format!("{refused}: {m}"),
                    _ => refused,
                }));
            }
            server = Some(response.auth_bytes);
        }
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    async fn negotiate(&self) -> Result<HashMap<i16, i16>, ClientError> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("headway-client"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let mut response: ApiVersionsResponse = self.request_at(3, &request).await?;
        if response.error_code != 0 {
            // The broker does not know v3; it answered at v0 with its list.
            response = self.request_at(0, &ApiVersionsRequest::default()).await?;
        }
        crate::error::check(response.error_code, None)?;
        let mut versions = HashMap::new();
        for (key, min, max) in SUPPORTED {
            if let Some(theirs) = response.api_keys.iter().find(|k| k.api_key == *key as i16) {
                let version = (*max).min(theirs.max_version);
                if version >= (*min).max(theirs.min_version) {
                    versions.insert(*key as i16, version);
                }
            }
        }
        Ok(versions)
    }

    /// The version a request of type `R` will use.
    pub fn version<R: Request>(&self) -> Result<i16, ClientError> {
        self.versions.get(&R::KEY).copied().ok_or_else(|| {
            let (key, min, max) = SUPPORTED
                .iter()
                .find(|(k, ..)| *k as i16 == R::KEY)
                .copied()
                .unwrap_or((ApiKey::ApiVersions, 0, 0));
            ClientError::UnsupportedApi {
                api: api_name(key),
                min,
                max,
            }
        })
    }

    /// Sends a request at the negotiated version and waits for its answer.
    pub async fn request<R: Request>(&self, request: &R) -> Result<R::Response, ClientError> {
        self.request_at(self.version::<R>()?, request).await
    }

    /// Sends a request that gets no answer (produce with acks=0).
    pub async fn send_without_answer<R: Request>(&self, request: &R) -> Result<(), ClientError> {
        let version = self.version::<R>()?;
        let (frame, correlation_id) = self.encode(version, request)?;
        self.outgoing
            .send(Outgoing {
                frame,
                correlation_id,
                reply: None,
            })
            .await
            .map_err(|_| self.closed_error())
    }

    async fn request_at<R: Request>(
        &self,
        version: i16,
        request: &R,
    ) -> Result<R::Response, ClientError> {
        let (frame, correlation_id) = self.encode(version, request)?;
        let (reply, answer) = oneshot::channel();
        self.outgoing
            .send(Outgoing {
                frame,
                correlation_id,
                reply: Some(reply),
            })
            .await
            .map_err(|_| self.closed_error())?;
        let mut frame = tokio::time::timeout(self.timeout, answer)
            .await
            .map_err(|_| ClientError::Timeout(self.timeout))?
            .map_err(|_| self.closed_error())??;
        let protocol = |e: anyhow::Error| ClientError::Protocol(e.to_string());
        ResponseHeader::decode(&mut frame, R::Response::header_version(version))
            .map_err(protocol)?;
        let response = R::Response::decode(&mut frame, version).map_err(protocol)?;
        Ok(response)
    }

    fn encode<R: Request>(&self, version: i16, request: &R) -> Result<(Bytes, i32), ClientError> {
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let header_version = R::header_version(version);
        let protocol = |e: anyhow::Error| ClientError::Protocol(e.to_string());
        let size = header.compute_size(header_version).map_err(protocol)?
            + request.compute_size(version).map_err(protocol)?;
        let mut buf = BytesMut::with_capacity(4 + size);
        buf.put_i32(size as i32);
        header.encode(&mut buf, header_version).map_err(protocol)?;
        request.encode(&mut buf, version).map_err(protocol)?;
        Ok((buf.freeze(), correlation_id))
    }

    fn closed_error(&self) -> ClientError {
        ClientError::Connection {
            addr: self.addr.clone(),
            reason: "connection closed".into(),
        }
    }
}

fn api_name(key: ApiKey) -> &'static str {
    match key {
        ApiKey::Produce => "Produce",
        ApiKey::Fetch => "Fetch",
        ApiKey::ListOffsets => "ListOffsets",
        ApiKey::Metadata => "Metadata",
        ApiKey::CreateTopics => "CreateTopics",
        ApiKey::FindCoordinator => "FindCoordinator",
        ApiKey::ListGroups => "ListGroups",
        ApiKey::DescribeGroups => "DescribeGroups",
        ApiKey::OffsetFetch => "OffsetFetch",
        ApiKey::JoinGroup => "JoinGroup",
        ApiKey::SyncGroup => "SyncGroup",
        ApiKey::Heartbeat => "Heartbeat",
        ApiKey::LeaveGroup => "LeaveGroup",
        ApiKey::OffsetCommit => "OffsetCommit",
        ApiKey::InitProducerId => "InitProducerId",
        ApiKey::DeleteTopics => "DeleteTopics",
        ApiKey::DescribeConfigs => "DescribeConfigs",
        ApiKey::IncrementalAlterConfigs => "IncrementalAlterConfigs",
        ApiKey::CreatePartitions => "CreatePartitions",
        ApiKey::DeleteGroups => "DeleteGroups",
        ApiKey::DescribeCluster => "DescribeCluster",
        ApiKey::ConsumerGroupDescribe => "ConsumerGroupDescribe",
        ApiKey::ShareGroupDescribe => "ShareGroupDescribe",
        ApiKey::DescribeShareGroupOffsets => "DescribeShareGroupOffsets",
        ApiKey::CreateAcls => "CreateAcls",
        ApiKey::DescribeAcls => "DescribeAcls",
        ApiKey::DeleteAcls => "DeleteAcls",
        ApiKey::DescribeUserScramCredentials => "DescribeUserScramCredentials",
        ApiKey::AlterUserScramCredentials => "AlterUserScramCredentials",
        _ => "ApiVersions",
    }
}

/// What the reader and writer tasks of a connection are given.
struct Loops {
    outgoing: mpsc::Receiver<Outgoing>,
    pending: mpsc::Sender<(i32, Reply)>,
    pending_rx: mpsc::Receiver<(i32, Reply)>,
    addr: String,
    closed: Arc<AtomicBool>,
}

impl Loops {
    fn start<R, W>(self, reader: R, writer: W)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        tokio::spawn(write_loop(
            writer,
            self.outgoing,
            self.pending,
            Arc::clone(&self.closed),
        ));
        tokio::spawn(read_loop(reader, self.pending_rx, self.addr, self.closed));
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    writer: W,
    mut outgoing: mpsc::Receiver<Outgoing>,
    pending: mpsc::Sender<(i32, Reply)>,
    closed: Arc<AtomicBool>,
) {
    let mut out = BufWriter::with_capacity(64 * 1024, writer);
    while let Some(request) = outgoing.recv().await {
        if let Some(reply) = request.reply {
            // Waits while the in-flight window is full.
            if pending.send((request.correlation_id, reply)).await.is_err() {
                break;
            }
        }
        if out.write_all(&request.frame).await.is_err() {
            break;
        }
        if outgoing.is_empty() && out.flush().await.is_err() {
            break;
        }
    }
    closed.store(true, Ordering::Release);
}

async fn read_loop<R: AsyncRead + Unpin>(
    mut reader: R,
    mut pending: mpsc::Receiver<(i32, Reply)>,
    addr: String,
    closed: Arc<AtomicBool>,
) {
    let failure = loop {
        // The length is the peer's word: the reader's memory grows with the bytes that
        // arrive, never with what the prefix claims.
        let frame = match read_frame(&mut reader, RESPONSE_BYTES_MAX).await {
            Ok(Some(frame)) => frame,
            Ok(None) => break "connection closed by the broker".into(),
            Err(e) => break e.to_string(),
        };
        let Some((correlation_id, reply)) = pending.recv().await else {
            break "unexpected response".into();
        };
        let mut frame = frame.freeze();
        if frame.len() < 4 || (&frame[..4]).get_i32() != correlation_id {
            let _ = reply.send(Err(ClientError::Protocol(format!(
                "answer out of order: expected correlation id {correlation_id}"
            ))));
            break "answers out of order".into();
        }
        let _ = reply.send(Ok(std::mem::take(&mut frame)));
    };
    closed.store(true, Ordering::Release);
    pending.close();
    while let Ok((_, reply)) = pending.try_recv() {
        let _ = reply.send(Err(ClientError::Connection {
            addr: addr.clone(),
            reason: failure.clone(),
        }));
    }
}
