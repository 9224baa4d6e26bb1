//! A TCP proxy that delays every chunk by a fixed time in each direction, with bounded
//! buffers: the slow link of seed 001 (a subscriber behind a 200 ms proxy).
//!
//! Each accepted connection gets an upstream connection and two pipes. In a pipe, a
//! reader task reads a chunk, takes buffer credit for its bytes (waiting while
//! `buffer_bytes` are already held in that direction, which stops reading that socket:
//! TCP backpressure onto its sender) and queues it with a due time of now plus `delay`;
//! a writer task writes each chunk at its due time and returns the credit. So a pipe
//! adds `delay` to every byte and carries at most `buffer_bytes` per `delay`: a proxy
//! with 256 KiB and 200 ms passes at most about 1.3 MB/s, which makes a subscriber of a
//! 4 MB/s stream a slow one whatever protocol it speaks.
//!
//! ## Kafka brokers advertise their own address
//!
//! A Kafka client uses the bootstrap address only for its first Metadata request and
//! then connects to the addresses the brokers advertise, which would bypass the proxy.
//! In Kafka mode the proxy therefore reads requests frame by frame, remembers the
//! correlation ids (and versions) of Metadata requests, and rewrites the broker list of
//! those answers to its own address. The other choice, a second listener on the broker
//! advertising the proxy's port, would need the broker under test to be configured for
//! the lab, and is not possible for a broker given with `--bootstrap` that we do not
//! start; rewriting works for headway, Kafka or any single-node broker unchanged. Every
//! broker in the answer is mapped to the one upstream, so this is for single-node
//! clusters (one proxy per broker would be needed otherwise). Only Metadata is
//! rewritten; FindCoordinator answers would need the same treatment once the lab uses
//! consumer groups.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use headway_protocol::FrameError;
use kafka_protocol::messages::{ApiKey, MetadataResponse, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;

/// Largest chunk read at once in raw mode.
const CHUNK_BYTES_MAX: usize = 64 * 1024;
/// Chunks queued per direction; the byte credit is the real bound, this only keeps
/// the queue itself from growing with tiny chunks.
const QUEUE_CHUNKS_MAX: usize = 4096;
/// Largest Kafka frame the proxy accepts (the broker's own default limit is 100 MiB).
const FRAME_BYTES_MAX: usize = 256 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub listen: String,
    pub upstream: String,
    /// Added to every chunk in each direction.
    pub delay: Duration,
    /// Bytes held per direction of a connection, at most.
    pub buffer_bytes: usize,
    /// Read Kafka frames and rewrite Metadata answers to point at the proxy.
    pub kafka: bool,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            listen: "127.0.0.1:0".into(),
            upstream: String::new(),
            delay: Duration::from_millis(200),
            buffer_bytes: 256 * 1024,
            kafka: false,
        }
    }
}

/// A running proxy; dropping it stops the listener and every connection.
pub struct Proxy {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(config: ProxyConfig) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind(&config.listen).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(accept_loop(listener, addr, config));
        Ok(Proxy { addr, task })
    }

    /// Runs until the task is cancelled (the standalone `headway bench proxy`).
    pub async fn run_forever(self) {
        let _ = (&mut { self }.task).await;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, addr: SocketAddr, config: ProxyConfig) {
    // Owned here so that aborting this task aborts every connection's pipes too.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    connections.spawn(connection(client, addr, config.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "proxy accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Metadata requests in flight on one connection: correlation id to version.
type MetadataRequests = Arc<Mutex<HashMap<i32, i16>>>;

async fn connection(client: TcpStream, addr: SocketAddr, config: ProxyConfig) {
    let upstream = match TcpStream::connect(&config.upstream).await {
        Ok(u) => u,
        Err(e) => {
            tracing::warn!(error = %e, upstream = %config.upstream, "proxy upstream connect failed");
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    let requests: MetadataRequests = Arc::default();
    let rewrite = config.kafka.then(|| Rewrite {
        requests: Arc::clone(&requests),
        host: addr.ip().to_string(),
        port: i32::from(addr.port()),
    });
    let up = pipe(
        client_read,
        upstream_write,
        config.clone(),
        Side::Requests(config.kafka.then_some(requests)),
    );
    let down = pipe(
        upstream_read,
        client_write,
        config,
        Side::Responses(rewrite),
    );
    tokio::join!(up, down);
}

struct Rewrite {
    requests: MetadataRequests,
    host: String,
    port: i32,
}

enum Side {
    /// Client to broker; in Kafka mode, notes Metadata requests.
    Requests(Option<MetadataRequests>),
    /// Broker to client; in Kafka mode, rewrites Metadata answers.
    Responses(Option<Rewrite>),
}

impl Side {
    fn kafka(&self) -> bool {
        matches!(self, Side::Requests(Some(_)) | Side::Responses(Some(_)))
    }
}

async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, config: ProxyConfig, side: Side) {
    let credit = Arc::new(Semaphore::new(config.buffer_bytes));
    let (queue, mut due) =
        mpsc::channel::<(Instant, Bytes, tokio::sync::OwnedSemaphorePermit)>(QUEUE_CHUNKS_MAX);
    let delay = config.delay;
    let buffer_bytes = config.buffer_bytes;
    let reader = async move {
        loop {
            let chunk = if side.kafka() {
                read_frame(&mut from).await
            } else {
                read_chunk(&mut from).await
            };
            let Some(chunk) = chunk else { break };
            let chunk = match &side {
                Side::Requests(Some(requests)) => {
                    note_request(&chunk, requests);
                    chunk
                }
                Side::Responses(Some(rewrite)) => rewrite_response(chunk, rewrite),
                _ => chunk,
            };
            // A frame larger than the whole buffer takes all of it.
            let bytes = chunk.len().clamp(1, buffer_bytes) as u32;
            let Ok(permit) = Arc::clone(&credit).acquire_many_owned(bytes).await else {
                break;
            };
            if queue
                .send((Instant::now() + delay, chunk, permit))
                .await
                .is_err()
            {
                break;
            }
        }
    };
    let writer = async move {
        while let Some((at, chunk, permit)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
            drop(permit);
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

async fn read_chunk(from: &mut OwnedReadHalf) -> Option<Bytes> {
    let mut buf = BytesMut::with_capacity(CHUNK_BYTES_MAX);
    match from.read_buf(&mut buf).await {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(buf.freeze()),
    }
}

/// One whole Kafka frame, size prefix included (the pipe forwards it as it came).
async fn read_frame(from: &mut OwnedReadHalf) -> Option<Bytes> {
    let body = match headway_protocol::read_frame(from, FRAME_BYTES_MAX).await {
        Ok(body) => body?,
        Err(FrameError::InvalidLength { size }) => return invalid_size(size.into()),
        Err(FrameError::TooLarge { size, .. }) => return invalid_size(size),
        Err(_) => return None,
    };
    let mut frame = BytesMut::with_capacity(4 + body.len());
    frame.put_u32(body.len() as u32);
    frame.put_slice(&body);
    Some(frame.freeze())
}

fn invalid_size(size: i64) -> Option<Bytes> {
    tracing::warn!(size, "proxy: invalid frame size; closing");
    None
}

/// Request header: size (4), api key (2), api version (2), correlation id (4).
fn note_request(frame: &Bytes, requests: &MetadataRequests) {
    if frame.len() < 12 {
        return;
    }
    let mut header = &frame[4..12];
    let (key, version, correlation_id) = (header.get_i16(), header.get_i16(), header.get_i32());
    if key == ApiKey::Metadata as i16 {
        requests
            .lock()
            .expect("proxy requests lock")
            .insert(correlation_id, version);
    }
}

fn rewrite_response(frame: Bytes, rewrite: &Rewrite) -> Bytes {
    if frame.len() < 8 {
        return frame;
    }
    let correlation_id = (&frame[4..8]).get_i32();
    let Some(version) = rewrite
        .requests
        .lock()
        .expect("proxy requests lock")
        .remove(&correlation_id)
    else {
        return frame;
    };
    match rewrite_metadata(&frame[4..], version, rewrite) {
        Ok(rewritten) => rewritten,
        Err(e) => {
            tracing::warn!(error = %e, version, "proxy: Metadata answer not rewritten");
            frame
        }
    }
}

fn rewrite_metadata(body: &[u8], version: i16, rewrite: &Rewrite) -> anyhow::Result<Bytes> {
    let header_version = MetadataResponse::header_version(version);
    let mut buf = Bytes::copy_from_slice(body);
    let header = ResponseHeader::decode(&mut buf, header_version)?;
    let mut response = MetadataResponse::decode(&mut buf, version)?;
    for broker in &mut response.brokers {
        broker.host = StrBytes::from_string(rewrite.host.clone());
        broker.port = rewrite.port;
    }
    let size = header.compute_size(header_version)? + response.compute_size(version)?;
    let mut out = BytesMut::with_capacity(4 + size);
    out.put_i32(size as i32);
    header.encode(&mut out, header_version)?;
    response.encode(&mut out, version)?;
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn delays_each_direction() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo_addr = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf).await.unwrap();
        });
        let proxy = Proxy::start(ProxyConfig {
            upstream: echo_addr.to_string(),
            delay: Duration::from_millis(50),
            ..ProxyConfig::default()
        })
        .await
        .unwrap();
        let mut c = TcpStream::connect(proxy.addr).await.unwrap();
        let started = std::time::Instant::now();
        c.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        c.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hello");
        assert!(started.elapsed() >= Duration::from_millis(100));
    }

    #[test]
    fn metadata_answer_points_at_the_proxy() {
        use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
        use kafka_protocol::messages::BrokerId;
        let version = 12;
        let header_version = MetadataResponse::header_version(version);
        let response =
            MetadataResponse::default().with_brokers(vec![MetadataResponseBroker::default()
                .with_node_id(BrokerId(1))
                .with_host(StrBytes::from_static_str("10.0.0.9"))
                .with_port(9092)]);
        let header = ResponseHeader::default().with_correlation_id(7);
        let mut body = BytesMut::new();
        header.encode(&mut body, header_version).unwrap();
        response.encode(&mut body, version).unwrap();
        let mut frame = BytesMut::new();
        frame.put_i32(body.len() as i32);
        frame.put_slice(&body);
        let rewrite = Rewrite {
            requests: Arc::new(Mutex::new(HashMap::from([(7, version)]))),
            host: "127.0.0.1".into(),
            port: 4242,
        };
        let out = rewrite_response(frame.freeze(), &rewrite);
        let mut buf = out.slice(4..);
        assert_eq!((&out[..4]).get_i32() as usize, out.len() - 4);
        ResponseHeader::decode(&mut buf, header_version).unwrap();
        let decoded = MetadataResponse::decode(&mut buf, version).unwrap();
        assert_eq!(decoded.brokers[0].host.as_str(), "127.0.0.1");
        assert_eq!(decoded.brokers[0].port, 4242);
        assert!(rewrite.requests.lock().unwrap().is_empty());
    }
}
