//! One client connection: a reader task and a writer task joined by a bounded window.
//!
//! The reader reads a frame, handles its synchronous part, and queues the reply; the
//! writer awaits replies in order and writes them. The queue between them holds at
//! most `REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX` replies: when a client pipelines more
//! than that, or stops reading its socket so that the writer cannot write, the reader
//! stops reading and TCP pushes back on that client alone.
//!
//! What a connection can hold is bounded in bytes too: request frames by the
//! broker-wide request budget while they are read and handled; fetch responses by the
//! connection's outbound budget ([`crate::outbound`]) until the writer has written
//! them. A fetch runs when the writer reaches it, after every earlier response was
//! written, so a client that never reads its socket has one response stuck in the
//! writer, nothing else read for it, and its reader stopped at the window. No other
//! connection shares anything with it but the partitions' logs, the read threads
//! (one read at a time per connection) and the broker-wide budgets.
//!
//! A request that cannot be understood (bad frame, unknown API, unsupported version,
//! malformed body) closes the connection with a log line, after the replies already
//! queued have been written; that is what Kafka does, since the client could not parse
//! any answer.

use crate::handlers::{self, Ctx, Outgoing, Reply};
use crate::stats::Connection;
use headway_broker::limits;
use headway_protocol::{parse_request, read_frame_body, read_frame_size};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Bytes the writer buffers before a write syscall; larger responses go straight out.
const WRITE_BUFFER_BYTES: usize = 16 * 1024;

pub async fn serve(stream: TcpStream, peer: SocketAddr, ctx: Arc<Ctx>) {
    let conn = ctx.stats.opened(peer);
    read_requests(stream, &conn, &ctx).await;
    ctx.stats.closed(&conn);
}

async fn read_requests(stream: TcpStream, conn: &Arc<Connection>, ctx: &Arc<Ctx>) {
    let peer = conn.peer;
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = stream.into_split();
    let (replies, queued) = mpsc::channel(limits::REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX);
    let writer = tokio::spawn(write_replies(writer, queued, Arc::clone(conn)));
    let request_bytes = Arc::clone(&ctx.stats.request_bytes);
    let frame_bytes_max = ctx.broker.config().frame_bytes_max;
    let mut shutdown = ctx.shutdown.clone();
    loop {
        let size = tokio::select! {
            size = read_frame_size(&mut reader, frame_bytes_max) => size,
            _ = handlers::shutting_down(&mut shutdown) => break,
        };
        let size = match size {
            Ok(Some(size)) => size,
            Ok(None) => break,
            Err(headway_protocol::FrameError::Io(e)) => {
                tracing::debug!(%peer, error = %e, "connection closed by the client");
                break;
            }
            Err(e) => {
                tracing::warn!(%peer, error = %e, "closing connection: bad frame");
                break;
            }
        };
        // Reserve the body's memory from the broker-wide budget before reading it.
        let Ok(permit) = Arc::clone(&request_bytes)
            .acquire_many_owned(size as u32)
            .await
        else {
            break;
        };
        let frame = match read_frame_body(&mut reader, size).await {
            Ok(frame) => frame.freeze(),
            Err(e) => {
                tracing::debug!(%peer, error = %e, "connection closed mid-frame");
                break;
            }
        };
        conn.requests_read.fetch_add(1, Ordering::Relaxed);
        let outcome = parse_request(frame)
            .map_err(handlers::HandlerError::from)
            .and_then(|request| handlers::dispatch(ctx, conn, request));
        // Handled: the frame's bytes are free (a reply keeps what it needs).
        drop(permit);
        match outcome {
            Ok(Reply::Silent) => {}
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
                tracing::warn!(%peer, error = %e, "closing connection");
                break;
            }
        }
    }
    drop(replies);
    let _ = writer.await;
}

async fn write_replies(
    writer: OwnedWriteHalf,
    mut queued: mpsc::Receiver<Reply>,
    conn: Arc<Connection>,
) {
    let mut out = BufWriter::with_capacity(WRITE_BUFFER_BYTES, writer);
    while let Some(reply) = queued.recv().await {
        let Outgoing { frame, reserved } = match reply {
            Reply::Ready(frame) => Outgoing {
                frame,
                reserved: None,
            },
            Reply::Pending(future) => match future.await {
                Ok(outgoing) => outgoing,
                Err(e) => {
                    tracing::error!(peer = %conn.peer, error = %e, "closing connection: response not encodable");
                    break;
                }
            },
            Reply::Silent => continue,
        };
        if out.write_all(&frame).await.is_err() {
            return;
        }
        // The socket (or the writer's fixed buffer) has the bytes: release them.
        conn.bytes_written
            .fetch_add(frame.len() as u64, Ordering::Relaxed);
        drop((frame, reserved));
        conn.in_flight.fetch_sub(1, Ordering::Relaxed);
        conn.responses_written.fetch_add(1, Ordering::Relaxed);
        // Flush when nothing else is ready, so pipelined replies share a syscall.
        if queued.is_empty() && out.flush().await.is_err() {
            return;
        }
    }
    let _ = out.flush().await;
    let _ = out.shutdown().await;
}
