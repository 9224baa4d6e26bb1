//! One client connection: a reader task and a writer task joined by a bounded window.
//!
//! The reader reads a frame, handles its synchronous part, and queues the reply; the
//! writer awaits replies in order and writes them. The queue between them holds at
//! most `REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX` replies: when a client pipelines more
//! than that, or stops reading its socket so that the writer cannot write, the reader
//! stops reading and TCP pushes back on that client alone.
//!
//! What a connection can hold is bounded in bytes too: a request frame of up to 8 KiB
//! by the connection's own cost, a larger one by the broker-wide request budget from
//! its first 8 KiB until it is handled (never for its length prefix alone); every body
//! must arrive within `request_body_timeout_ms`, and what decoding allocates is checked
//! against the body's bytes first; fetch responses by the
//! connection's outbound budget ([`crate::outbound`]) until the writer has written
//! them. A fetch runs when the writer reaches it, after every earlier response was
//! written, so a client that never reads its socket has one response stuck in the
//! writer, nothing else read for it, and its reader stopped at the window. No other
//! connection shares anything with it but the partitions' logs, the read threads
//! (one read at a time per connection) and the broker-wide budgets.
//!
//! A request that cannot be understood (bad frame, unknown API, unsupported version,
//! malformed body, a count its bytes do not back) closes the connection with a log
//! line naming the peer and its client id, after the replies already
//! queued have been written; that is what Kafka does, since the client could not parse
//! any answer.

use crate::authentication;
use crate::bulk_send::BulkLane;
use crate::call::{
    self, Arrival, Connection, Ctx, HandlerError, ListenerInfo, Outgoing, Reply, ReplyTiming,
    ServerStats,
};
use crate::handlers;
use crate::request_budget::Reserved;
use crate::requests::Caller;
use crate::sasl;
use crate::tls;
use bytes::Bytes;
use headway_base::limits;
use headway_broker::io::bulk_budget::BulkWork;
use headway_broker::io::read_pool::PoolError;
use headway_broker::Partition;
use headway_protocol::kafka_protocol::messages::ApiKey;
use headway_protocol::{parse_request, read_frame_body_into, read_frame_size, FrameError, Request};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::{timeout_at, Duration, Instant};
use tokio_rustls::TlsAcceptor;

/// Bytes the writer buffers before a write syscall; larger responses go straight out.
const WRITE_BUFFER_BYTES: usize = 16 * 1024;
/// Timed replies written into the buffer before the writer flushes anyway, so their
/// timings stay few even when a client keeps the queue from ever emptying.
const UNFLUSHED_TIMINGS_MAX: usize = 64;
/// A response larger than this is written in slices of this size, the writer yielding
/// its worker thread between them. One write syscall on a loopback or other fast socket
/// also does much of the receiving side's TCP work, so a catch-up consumer's megabyte
/// responses written whole would hold a worker thread for most of a millisecond at a
/// time, and every light connection waiting for that worker with it.
const WRITE_SLICE_BYTES: usize = 64 * 1024;

/// Serves one accepted connection of `listener`, after its TLS handshake when
/// `tls` is set (an SSL listener).
pub async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    ctx: Arc<Ctx>,
    listener: Arc<ListenerInfo>,
    tls: Option<TlsAcceptor>,
) {
    // Listed in the stats until this is dropped, however this task ends.
    let registered = ctx.stats.opened(peer, listener);
    let conn = registered.connection();
    match tls {
        None => {
            let _ = stream.set_nodelay(true);
            // The lane holds the socket's number; the writer task holds the socket.
            let lane = ctx.stats.bulk_send.as_ref().map(|pool| {
                BulkLane::new(Arc::clone(pool), std::os::fd::AsRawFd::as_raw_fd(&stream))
            });
            let (reader, writer) = stream.into_split();
            read_requests(reader, writer, lane, conn, &ctx).await;
        }
        Some(acceptor) => {
            let Some(stream) = tls::handshake(&acceptor, stream, peer, &ctx.stats).await else {
                return;
            };
            if let Some(principal) = tls::client_principal(&stream) {
                conn.set_principal(&principal);
            }
            let (reader, writer) = tokio::io::split(stream);
            read_requests(reader, writer, None, conn, &ctx).await;
        }
    }
}

async fn read_requests<R, W>(
    mut reader: R,
    mut writer: W,
    lane: Option<BulkLane>,
    conn: &Arc<Connection>,
    ctx: &Arc<Ctx>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    // A SASL listener's client authenticates first, one request at a time
    // (`crate::authentication`).
    if conn.listener.protocol.sasl()
        && !authentication::authenticate(&mut reader, &mut writer, conn, ctx).await
    {
        return;
    }
    let (replies, queued) = mpsc::channel(limits::REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX);
    let writer = tokio::spawn(write_replies(writer, lane, queued, Arc::clone(conn)));
    let mut client = Caller {
        peer: conn.peer,
        client_id: None,
    };
    let mut shutdown = ctx.shutdown.clone();
    let mut hold: Vec<Arc<Partition>> = Vec::new();
    let mut large = false;
    loop {
        // A producer past a partition's unsynced bound is read no further until that
        // partition's sync caught up (its answer is queued already).
        for partition in hold.drain(..) {
            ctx.stats.unsynced_holds.fetch_add(1, Ordering::Relaxed);
            partition.wait_unsynced_within_bound().await;
        }
        // Waiting long polls past their bound: read nothing more until earlier answers
        // are written and their bookkeeping freed (TCP pushes back on this client).
        // Counted as the window being full: it is the window, measured in bytes.
        if conn.long_poll_bytes() > limits::LONG_POLL_BYTES_PER_CONNECTION_MAX {
            conn.window_full_events.fetch_add(1, Ordering::Relaxed);
            ctx.stats.window_full_events.fetch_add(1, Ordering::Relaxed);
            conn.reader_paused.store(true, Ordering::Relaxed);
            tokio::select! {
                _ = conn.long_polls_within(limits::LONG_POLL_BYTES_PER_CONNECTION_MAX) => {}
                _ = call::shutting_down(&mut shutdown) => break,
            }
            conn.reader_paused.store(false, Ordering::Relaxed);
        }
        if std::mem::take(&mut large) {
            // A heavy client does not keep this worker thread from other connections.
            tokio::task::yield_now().await;
        }
        let next = tokio::select! {
            next = next_request(&mut reader, &mut client, ctx) => next,
            _ = call::shutting_down(&mut shutdown) => break,
        };
        let Some((request, reserved, arrival)) = next else {
            break;
        };
        conn.requests_read.fetch_add(1, Ordering::Relaxed);
        if conn.listener.protocol.sasl()
            && !handlers::authenticates(request.api_key)
            && sasl::expired(conn, ctx, request.api_key)
        {
            break;
        }
        if let Some(id) = &client.client_id {
            conn.set_client_id(id);
        }
        let api = request.api_key;
        let handled_from = std::time::Instant::now();
        ctx.stats.requests.read(api);
        // A large produce is bulk work: it waits for the bulk budget, which shrinks
        // while light work is slow (`docs/sync.md`), and is charged with its size.
        large = reserved.is_some();
        let heavy = request.body.len() > limits::BULK_PRODUCE_BYTES_MIN;
        let bulk =
            (heavy && handlers::bulk_when_large(request.api_key)).then(|| request.body.len());
        let outcome = match bulk {
            None => handlers::dispatch(ctx, conn, request, arrival, &mut hold),
            Some(_) => {
                ctx.broker.bulk_budget().admit(BulkWork::Write).await;
                match dispatch_on_bulk_thread(ctx, conn, request, arrival).await {
                    Some((outcome, held)) => {
                        hold = held;
                        outcome
                    }
                    None => break,
                }
            }
        };
        if let Some(bytes) = bulk {
            ctx.broker.bulk_budget().charge(BulkWork::Write, bytes);
        }
        let outcome = outcome.map(|reply| counted(&ctx.stats, &client, api, handled_from, reply));
        // Handled: the request's bytes are free (a reply keeps what it needs).
        drop(reserved);
        match outcome {
            Ok(Reply::Silent) => {}
            Ok(reply) if conn.close_after_reply.load(Ordering::Relaxed) => {
                // The connection's last answer (a refused re-authentication).
                conn.in_flight.fetch_add(1, Ordering::Relaxed);
                let _ = replies.send(reply).await;
                break;
            }
            Ok(reply) => {
                conn.in_flight.fetch_add(1, Ordering::Relaxed);
                let reply = match replies.try_send(reply) {
                    Ok(()) => continue,
                    Err(mpsc::error::TrySendError::Closed(_)) => break,
                    Err(mpsc::error::TrySendError::Full(reply)) => reply,
                };
                // The window is full: stop reading this socket until the writer
                // catches up.
                conn.window_full_events.fetch_add(1, Ordering::Relaxed);
                ctx.stats.window_full_events.fetch_add(1, Ordering::Relaxed);
                conn.reader_paused.store(true, Ordering::Relaxed);
                let sent = replies.send(reply).await;
                conn.reader_paused.store(false, Ordering::Relaxed);
                if sent.is_err() {
                    break;
                }
            }
            Err(e) => {
                closing(&client, ctx, &e);
                break;
            }
        }
    }
    drop(replies);
    let _ = writer.await;
}

/// Counts `reply` in the per-API metrics once its frame is ready to write: now, or
/// when a pending reply completes (`crate::requests`).
fn counted(
    stats: &Arc<ServerStats>,
    caller: &Caller,
    api: ApiKey,
    started: std::time::Instant,
    reply: Reply,
) -> Reply {
    match reply {
        Reply::Ready(frame, codes) => {
            stats.requests.answered(api, started, &codes, caller);
            Reply::Ready(frame, codes)
        }
        Reply::Pending(future) => {
            let stats = Arc::clone(stats);
            let caller = caller.clone();
            Reply::Pending(Box::pin(async move {
                let outgoing = future.await;
                if let Ok(outgoing) = &outgoing {
                    stats
                        .requests
                        .answered(api, started, &outgoing.codes, &caller);
                }
                outgoing
            }))
        }
        Reply::Silent => {
            stats.requests.unanswered(api, started);
            Reply::Silent
        }
    }
}

/// Handles a large produce on one of the broker's bulk threads (the read threads, at a
/// lower CPU priority): its CRC checks, copy and page-cache write do not occupy a worker
/// thread that light connections need. `None` when the broker is shutting down.
///
/// The job runs inside the runtime's context (`Handle::enter`), so what a handler
/// needs of it works there as on the connection's task: the transaction coordinator's
/// check of a transactional produce waits for its answer with the runtime's handle.
/// A panic in the job fails this request alone (the connection closes).
async fn dispatch_on_bulk_thread(
    ctx: &Arc<Ctx>,
    conn: &Arc<Connection>,
    request: Request,
    arrival: Arrival,
) -> Option<(Result<Reply, HandlerError>, Vec<Arc<Partition>>)> {
    let (ctx, conn) = (Arc::clone(ctx), Arc::clone(conn));
    let pool = Arc::clone(ctx.broker.read_pool());
    let runtime = tokio::runtime::Handle::current();
    let api_key = request.api_key;
    let outcome = pool
        .run(move || {
            let _runtime = runtime.enter();
            let mut hold = Vec::new();
            let outcome = handlers::dispatch(&ctx, &conn, request, arrival, &mut hold);
            (outcome, hold)
        })
        .await;
    match outcome {
        Ok(done) => Some(done),
        Err(PoolError::Panicked(panicked)) => Some((
            Err(HandlerError::Panicked { api_key, panicked }),
            Vec::new(),
        )),
        Err(PoolError::Closed) => None,
    }
}

/// Logs the line that closes `client`'s connection for `error`.
fn closing(client: &Caller, ctx: &Ctx, error: &HandlerError) {
    if matches!(error, HandlerError::Protocol(_)) {
        ctx.stats.requests_refused.fetch_add(1, Ordering::Relaxed);
    }
    tracing::warn!(peer = %client.peer, client_id = ?client.client_id, %error, "closing connection");
}

/// Reads the next request, and for a large frame reserves it from the request budget.
/// `None` when the connection ends: closed by the client, a bad frame, or a body that
/// did not arrive within `request_body_timeout_ms` of its length prefix; each is logged.
async fn next_request<R: AsyncRead + Unpin>(
    reader: &mut R,
    client: &mut Caller,
    ctx: &Ctx,
) -> Option<(Request, Option<Reserved>, Arrival)> {
    let config = ctx.broker.config();
    let peer = client.peer;
    let size = match read_frame_size(reader, config.frame_bytes_max).await {
        Ok(Some(size)) => size,
        Ok(None) => return None,
        Err(FrameError::Io(e)) => {
            tracing::debug!(%peer, error = %e, "connection closed by the client");
            return None;
        }
        Err(e) => {
            tracing::warn!(%peer, client_id = ?client.client_id, error = %e, "closing connection: bad frame");
            return None;
        }
    };
    let started = Instant::now();
    let deadline = started + Duration::from_millis(config.request_body_timeout_ms);
    let (frame, reserved) = match timeout_at(deadline, read_body(reader, size, ctx)).await {
        Ok(Ok(body)) => body,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "connection closed mid-frame");
            return None;
        }
        Err(_) => {
            ctx.stats
                .request_body_timeouts
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                %peer,
                client_id = ?client.client_id,
                frame_bytes = size,
                timeout_ms = config.request_body_timeout_ms,
                "closing connection: request body did not arrive in time"
            );
            return None;
        }
    };
    let arrival = Arrival {
        started: started.into_std(),
        read: started.elapsed(),
    };
    match parse_request(frame) {
        Ok(request) => {
            if client.client_id.is_none() {
                client.client_id = request.header.client_id.as_deref().map(Arc::from);
            }
            Some((request, reserved, arrival))
        }
        Err(e) => {
            closing(client, ctx, &e.into());
            None
        }
    }
}

/// Reads a request body of `size` bytes as it arrives.
///
/// A small body (at most [`limits::REQUEST_SMALL_FRAME_BYTES`]) is read into a buffer
/// of its size: what a connection holds for one is part of its own bounded cost, so
/// light clients' requests never wait for the budget. A larger body first has to send
/// that many bytes; then its whole size is reserved from the broker-wide request budget
/// at once (see [`crate::request_budget`]: no reader holds part of the budget while it
/// waits for more) and its buffer grows with what arrives, to at most twice what was
/// received, never for a length prefix alone.
async fn read_body<R: AsyncRead + Unpin>(
    reader: &mut R,
    size: usize,
    ctx: &Ctx,
) -> Result<(Bytes, Option<Reserved>), FrameError> {
    let small = size.min(limits::REQUEST_SMALL_FRAME_BYTES);
    let mut body = vec![0u8; small];
    reader.read_exact(&mut body).await.map_err(truncated)?;
    if size == small {
        return Ok((Bytes::from(body), None));
    }
    let reserved = ctx.stats.request_bytes.reserve(size).await;
    // Straight into the spare capacity (no zeroing), never past the frame's end.
    read_frame_body_into(reader, &mut body, size).await?;
    Ok((Bytes::from(body), Some(reserved)))
}

/// Flushes the writer's buffer and completes the timing of the replies it held.
async fn flush<W: AsyncWrite + Unpin>(
    out: &mut BufWriter<W>,
    unflushed: &mut Vec<ReplyTiming>,
) -> std::io::Result<()> {
    out.flush().await?;
    unflushed.drain(..).for_each(|timing| timing.written());
    Ok(())
}

/// Writes one response frame, in slices of at most [`WRITE_SLICE_BYTES`] with a yield
/// of the worker thread between them.
async fn write_frame<W: AsyncWrite + Unpin>(
    out: &mut BufWriter<W>,
    frame: &[u8],
) -> std::io::Result<()> {
    let mut slices = frame.chunks(WRITE_SLICE_BYTES).peekable();
    while let Some(slice) = slices.next() {
        out.write_all(slice).await?;
        if slices.peek().is_some() {
            tokio::task::yield_now().await;
        }
    }
    Ok(())
}

fn truncated(e: std::io::Error) -> FrameError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        FrameError::Truncated
    } else {
        FrameError::Io(e)
    }
}

async fn write_replies<W: AsyncWrite + Unpin>(
    writer: W,
    mut lane: Option<BulkLane>,
    mut queued: mpsc::Receiver<Reply>,
    conn: Arc<Connection>,
) {
    let mut out = BufWriter::with_capacity(WRITE_BUFFER_BYTES, writer);
    // Replies in the buffer whose timing completes at the next flush.
    let mut unflushed: Vec<ReplyTiming> = Vec::new();
    while let Some(reply) = queued.recv().await {
        let Outgoing {
            frame,
            reserved,
            timing,
            codes: _,
        } = match reply {
            Reply::Ready(frame, codes) => Outgoing {
                frame,
                reserved: None,
                timing: None,
                codes,
            },
            Reply::Pending(mut future) => {
                let outgoing = match futures::poll!(&mut future) {
                    Poll::Ready(outgoing) => outgoing,
                    Poll::Pending => {
                        // Earlier replies must not wait in the buffer for this one (a
                        // later sync, a long poll): send them now.
                        if flush(&mut out, &mut unflushed).await.is_err() {
                            return;
                        }
                        future.await
                    }
                };
                match outgoing {
                    Ok(outgoing) => outgoing,
                    Err(e) => {
                        tracing::error!(peer = %conn.peer, error = %e, "closing connection: no answer to write");
                        break;
                    }
                }
            }
            Reply::Silent => continue,
        };
        let written = match lane.as_mut() {
            Some(lane) if frame.len() >= limits::BULK_SEND_BYTES_MIN => {
                // Catching up: the bulk send threads write it, after what is buffered.
                match flush(&mut out, &mut unflushed).await {
                    Ok(()) => lane.write_all(out.get_mut(), &frame).await,
                    Err(e) => Err(e),
                }
            }
            _ => write_frame(&mut out, &frame).await,
        };
        if written.is_err() {
            return;
        }
        // The socket (or the writer's fixed buffer) has the bytes: release them.
        conn.bytes_written
            .fetch_add(frame.len() as u64, Ordering::Relaxed);
        drop((frame, reserved));
        unflushed.extend(timing);
        conn.in_flight.fetch_sub(1, Ordering::Relaxed);
        conn.responses_written.fetch_add(1, Ordering::Relaxed);
        // Flush when nothing else is queued, so pipelined replies share a syscall.
        let due = queued.is_empty() || unflushed.len() >= UNFLUSHED_TIMINGS_MAX;
        if due && flush(&mut out, &mut unflushed).await.is_err() {
            return;
        }
    }
    let _ = out.flush().await;
    let _ = out.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::task::Context;

    /// A socket that takes everything it is given and notes each write's size.
    #[derive(Default)]
    struct Recording {
        bytes: Vec<u8>,
        writes: Vec<usize>,
    }

    impl AsyncWrite for Recording {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.bytes.extend_from_slice(buf);
            self.writes.push(buf.len());
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_large_response_reaches_the_socket_whole_in_bounded_writes() {
        let frame: Vec<u8> = (0..WRITE_SLICE_BYTES * 16 + 123)
            .map(|i| (i % 251) as u8)
            .collect();
        let mut out = BufWriter::with_capacity(WRITE_BUFFER_BYTES, Recording::default());
        write_frame(&mut out, b"small").await.unwrap();
        write_frame(&mut out, &frame).await.unwrap();
        out.flush().await.unwrap();
        let socket = out.into_inner();
        assert_eq!(&socket.bytes[..5], b"small");
        assert_eq!(&socket.bytes[5..], &frame[..]);
        assert!(socket.writes.len() >= 17, "{:?}", socket.writes);
        assert!(
            socket.writes.iter().all(|&n| n <= WRITE_SLICE_BYTES),
            "{:?}",
            socket.writes
        );
    }
}
