//! The first part of a SASL listener's connection: its authentication, before its
//! reader and writer are split (`docs/security.md`).
//!
//! The connection is served one request at a time, and only the APIs the registry
//! serves before authentication (ApiVersions, SaslHandshake, SaslAuthenticate,
//! [`handlers::served_before_authentication`]), dispatched through the registry like
//! any other request; anything else closes it, as Kafka does. What it can hold is
//! bounded by its own slot: a frame of at most
//! `limits::SASL_UNAUTHENTICATED_FRAME_BYTES_MAX` (a longer length prefix closes the
//! connection before the body is read), nothing from the broker-wide request budget,
//! and `limits::SASL_AUTHENTICATION_TIMEOUT_MS` from its connection to a successful
//! authentication. The exchange itself is [`crate::sasl`]'s.

use crate::call::{self, Arrival, Connection, Ctx, Reply};
use crate::{handlers, sasl};
use bytes::Bytes;
use headway_base::limits;
use headway_protocol::{parse_request, read_frame};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::{timeout_at, Duration, Instant};

/// How the authentication phase ended.
enum Outcome {
    Authenticated,
    /// Close the connection (already counted and logged).
    Closed,
}

/// Authenticates a new connection of a SASL listener; `true` when it may go on to be
/// served, as the principal set on `conn`.
pub async fn authenticate<R, W>(
    reader: &mut R,
    writer: &mut W,
    conn: &Arc<Connection>,
    ctx: &Arc<Ctx>,
) -> bool
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    sasl::start(conn, ctx);
    let deadline = Instant::now() + Duration::from_millis(limits::SASL_AUTHENTICATION_TIMEOUT_MS);
    let mut shutdown = ctx.shutdown.clone();
    let run = timeout_at(deadline, serve(reader, writer, conn, ctx));
    let outcome = tokio::select! {
        outcome = run => outcome,
        _ = call::shutting_down(&mut shutdown) => return false,
    };
    match outcome {
        Ok(Outcome::Authenticated) => true,
        Ok(Outcome::Closed) => false,
        Err(_) => {
            let reason = format!(
                "not authenticated within {} ms",
                limits::SASL_AUTHENTICATION_TIMEOUT_MS
            );
            sasl::failed_before_authentication(conn, ctx, &reason, true);
            false
        }
    }
}

/// The connection's requests, one at a time, until it authenticated or is closed.
async fn serve<R, W>(
    reader: &mut R,
    writer: &mut W,
    conn: &Arc<Connection>,
    ctx: &Arc<Ctx>,
) -> Outcome
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        let frame = match read_frame(reader, limits::SASL_UNAUTHENTICATED_FRAME_BYTES_MAX).await {
            Ok(Some(frame)) => frame.freeze(),
            Ok(None) => return Outcome::Closed,
            Err(e) => {
                let reason = format!("before authentication: {e}");
                sasl::failed_before_authentication(conn, ctx, &reason, true);
                return Outcome::Closed;
            }
        };
        if sasl::bare_tokens(conn) {
            match sasl::bare_token(conn, ctx, &frame) {
                Ok((answer, authenticated)) => {
                    if write(writer, &answer).await.is_err() {
                        return Outcome::Closed;
                    }
                    if authenticated {
                        return Outcome::Authenticated;
                    }
                }
                Err(delay) => {
                    tokio::time::sleep(delay).await;
                    return Outcome::Closed;
                }
            }
            continue;
        }
        let request = match parse_request(frame) {
            Ok(request) => request,
            Err(e) => {
                sasl::failed_before_authentication(conn, ctx, &e.to_string(), false);
                return Outcome::Closed;
            }
        };
        if !handlers::served_before_authentication(request.api_key) {
            let reason = format!("{:?} request before authentication", request.api_key);
            sasl::failed_before_authentication(conn, ctx, &reason, false);
            return Outcome::Closed;
        }
        let arrival = Arrival {
            started: std::time::Instant::now(),
            read: Duration::ZERO,
        };
        let Some(frame) = answer(handlers::dispatch(
            ctx,
            conn,
            request,
            arrival,
            &mut Vec::new(),
        ))
        .await
        else {
            return Outcome::Closed;
        };
        if write(writer, &frame).await.is_err() || conn.close_after_reply.load(Ordering::Relaxed) {
            return Outcome::Closed;
        }
        if sasl::authenticated(conn) {
            return Outcome::Authenticated;
        }
    }
}

/// The frame a reply comes to, once it is ready (a refusal's waits out the failure
/// delay); `None` when there is none to write.
async fn answer(reply: Result<Reply, call::HandlerError>) -> Option<Bytes> {
    match reply.ok()? {
        Reply::Ready(frame, _) => Some(frame),
        Reply::Pending(future) => future.await.ok().map(|outgoing| outgoing.frame),
        Reply::Silent => None,
    }
}

async fn write<W: AsyncWrite + Unpin>(writer: &mut W, frame: &[u8]) -> std::io::Result<()> {
    writer.write_all(frame).await?;
    writer.flush().await
}
