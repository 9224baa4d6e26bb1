//! SASL authentication on SASL_PLAINTEXT and SASL_SSL listeners (`docs/security.md`).
//!
//! A connection of a SASL listener starts here, before its reader and writer are
//! split: it is served one request at a time, and only ApiVersions, SaslHandshake and
//! SaslAuthenticate; anything else closes it, as Kafka does. What it can hold is
//! bounded by its own slot: a frame of at most
//! `limits::SASL_UNAUTHENTICATED_FRAME_BYTES_MAX` (a longer length prefix closes the
//! connection before the body is read), nothing from the broker-wide request budget,
//! and `limits::SASL_AUTHENTICATION_TIMEOUT_MS` from its connection to a successful
//! authentication. A failed authentication is answered after a delay
//! (`sasl_failed_authentication_delay_ms`, doubled per recent failure of the same
//! address), waited on the connection's own task; it is counted by mechanism and
//! logged with the user and address within `limits::FAILURE_LOG_LINES_PER_SECOND`.
//!
//! After a SaslHandshake v0 the client sends its tokens as bare length-prefixed
//! frames (Kafka's handshake v0 mode); after v1 it wraps them in SaslAuthenticate.
//!
//! Re-authentication (KIP-368): with `connections_max_reauth_ms` set, a session lasts
//! that long (an OAUTHBEARER session no longer than its token), SaslAuthenticate v1+
//! tells the client so (`session_lifetime_ms`), and a request other than SaslHandshake
//! or SaslAuthenticate after the session ended closes the connection
//! ([`expired`]). The client re-authenticates on its connection, between its other
//! requests, with SaslHandshake v1 and SaslAuthenticate, served by the handlers through
//! [`reauth_handshake`] and [`reauth_token`]: the same mechanism and principal as
//! before, or the connection is closed after the refusal.

use crate::call::{self, Arrival, Connection, Ctx, Reply};
use crate::handlers;
use crate::sasl_settings::Sasl;
use bytes::Bytes;
use headway_auth::sasl::{Exchange, SaslMechanism, Step, TokenError};
use headway_auth::AuthError;
use headway_broker::limits;
use headway_protocol::kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, encode_response, parse_request, read_frame_size, Request};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{timeout_at, Duration, Instant};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

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
    let sasl = &ctx.sasl;
    let mut exchange = sasl.exchange();
    let deadline = Instant::now() + Duration::from_millis(limits::SASL_AUTHENTICATION_TIMEOUT_MS);
    let mut shutdown = ctx.shutdown.clone();
    let run = timeout_at(
        deadline,
        serve_exchange(reader, writer, conn, ctx, &mut exchange),
    );
    let outcome = tokio::select! {
        outcome = run => outcome,
        _ = call::shutting_down(&mut shutdown) => return false,
    };
    match outcome {
        Ok(Outcome::Authenticated) => true,
        Ok(Outcome::Closed) => false,
        Err(_) => {
            sasl.failed(
                conn.peer,
                exchange.mechanism(),
                exchange.user(),
                &format!(
                    "not authenticated within {} ms",
                    limits::SASL_AUTHENTICATION_TIMEOUT_MS
                ),
                now_ms(),
            );
            false
        }
    }
}

/// The exchange's requests, one at a time, until it succeeds or the connection closes.
async fn serve_exchange<R, W>(
    reader: &mut R,
    writer: &mut W,
    conn: &Arc<Connection>,
    ctx: &Arc<Ctx>,
    exchange: &mut Exchange,
) -> Outcome
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let sasl = &ctx.sasl;
    let peer = conn.peer;
    // After a SaslHandshake v0, tokens come as bare frames.
    let mut bare_tokens = false;
    loop {
        let frame = match read_small_frame(reader).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return Outcome::Closed,
            Err(reason) => {
                sasl.failed(
                    peer,
                    exchange.mechanism(),
                    exchange.user(),
                    &reason,
                    now_ms(),
                );
                return Outcome::Closed;
            }
        };
        if bare_tokens {
            let mechanism = exchange.mechanism();
            match token_step(exchange, &frame, ctx) {
                Ok(step) => {
                    let (bytes, done) = match step {
                        Step::Continue(bytes) => (bytes, None),
                        Step::Done {
                            user,
                            reply,
                            expires_at_ms,
                        } => (reply, Some((user, expires_at_ms))),
                    };
                    let mut out = Vec::with_capacity(4 + bytes.len());
                    out.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
                    out.extend_from_slice(&bytes);
                    if write(writer, &out).await.is_err() {
                        return Outcome::Closed;
                    }
                    if let (Some((user, expires_at_ms)), Some(mechanism)) = (done, mechanism) {
                        succeeded(sasl, conn, mechanism, &user, expires_at_ms);
                        return Outcome::Authenticated;
                    }
                }
                Err(e) => {
                    // Kafka closes the connection without an answer in this mode.
                    let delay =
                        sasl.failed(peer, mechanism, exchange.user(), &e.to_string(), now_ms());
                    tokio::time::sleep(delay).await;
                    return Outcome::Closed;
                }
            }
            continue;
        }
        let request = match parse_request(frame) {
            Ok(request) => request,
            Err(e) => {
                sasl.failed(peer, exchange.mechanism(), None, &e.to_string(), now_ms());
                return Outcome::Closed;
            }
        };
        match request.api_key {
            ApiKey::ApiVersions => {
                let arrival = Arrival {
                    started: std::time::Instant::now(),
                    read: Duration::ZERO,
                };
                let reply = handlers::dispatch(ctx, conn, request, arrival, &mut Vec::new());
                let Ok(Reply::Ready(frame)) = reply else {
                    return Outcome::Closed;
                };
                if write(writer, &frame).await.is_err() {
                    return Outcome::Closed;
                }
            }
            ApiKey::SaslHandshake => {
                let (response, error) = handshake(exchange, &request);
                let response = respond(&request, &response);
                let Some(frame) = response else {
                    return Outcome::Closed;
                };
                if let Some(reason) = error {
                    let delay = sasl.failed(peer, None, None, &reason, now_ms());
                    tokio::time::sleep(delay).await;
                    let _ = write(writer, &frame).await;
                    return Outcome::Closed;
                }
                if write(writer, &frame).await.is_err() {
                    return Outcome::Closed;
                }
                bare_tokens = request.api_version() == 0;
            }
            ApiKey::SaslAuthenticate => {
                let mechanism = exchange.mechanism();
                let body: SaslAuthenticateRequest = match decode_body(&request) {
                    Ok(body) => body,
                    Err(e) => {
                        sasl.failed(peer, mechanism, None, &e.to_string(), now_ms());
                        return Outcome::Closed;
                    }
                };
                let response = SaslAuthenticateResponse::default();
                match token_step(exchange, &body.auth_bytes, ctx) {
                    Ok(Step::Continue(bytes)) => {
                        let response = response.with_auth_bytes(Bytes::from(bytes));
                        let Some(frame) = respond(&request, &response) else {
                            return Outcome::Closed;
                        };
                        if write(writer, &frame).await.is_err() {
                            return Outcome::Closed;
                        }
                    }
                    Ok(Step::Done {
                        user,
                        reply,
                        expires_at_ms,
                    }) => {
                        let Some(mechanism) = mechanism else {
                            return Outcome::Closed;
                        };
                        let lifetime_ms = succeeded(sasl, conn, mechanism, &user, expires_at_ms);
                        let response = response.with_auth_bytes(Bytes::from(reply));
                        let response = with_lifetime(response, &request, lifetime_ms);
                        let Some(frame) = respond(&request, &response) else {
                            return Outcome::Closed;
                        };
                        if write(writer, &frame).await.is_err() {
                            return Outcome::Closed;
                        }
                        return Outcome::Authenticated;
                    }
                    Err(e) => {
                        let code = match &e {
                            TokenError::IllegalState(_) => ResponseError::IllegalSaslState,
                            TokenError::Auth(_) => ResponseError::SaslAuthenticationFailed,
                        };
                        let message = failure_message(&e);
                        let delay =
                            sasl.failed(peer, mechanism, exchange.user(), &message, now_ms());
                        let response = response
                            .with_error_code(code.code())
                            .with_error_message(Some(StrBytes::from_string(message)));
                        tokio::time::sleep(delay).await;
                        if let Some(frame) = respond(&request, &response) {
                            let _ = write(writer, &frame).await;
                        }
                        return Outcome::Closed;
                    }
                }
            }
            other => {
                sasl.failed(
                    peer,
                    exchange.mechanism(),
                    None,
                    &format!("{other:?} request before authentication"),
                    now_ms(),
                );
                return Outcome::Closed;
            }
        }
    }
}

/// What a client is told about a failed token: Kafka's words for a wrong password or
/// unknown user, the reason for a malformed message.
fn failure_message(error: &TokenError) -> String {
    match error {
        TokenError::Auth(AuthError::Failed(message)) => message.clone(),
        TokenError::Auth(AuthError::Malformed(message)) => message.clone(),
        other => other.to_string(),
    }
}

/// Records a successful authentication of the connection; returns the session's
/// lifetime in ms (0: no end), which starts now.
fn succeeded(
    sasl: &Sasl,
    conn: &Connection,
    mechanism: SaslMechanism,
    user: &str,
    expires_at_ms: Option<i64>,
) -> i64 {
    sasl.succeeded(mechanism);
    conn.set_principal(&format!("User:{user}"));
    let lifetime_ms = sasl.session_lifetime_ms(expires_at_ms, now_ms());
    let ends_at_ms = match lifetime_ms {
        0 => 0,
        ms => now_ms().saturating_add(ms),
    };
    conn.sasl_session_ends_at_ms
        .store(ends_at_ms, Ordering::Relaxed);
    let mut session = conn.sasl.lock().unwrap_or_else(|e| e.into_inner());
    session.mechanism = Some(mechanism);
    session.reauth = None;
    tracing::debug!(peer = %conn.peer, principal = %format!("User:{user}"), mechanism = mechanism.name(), lifetime_ms, "authenticated");
    lifetime_ms
}

/// Whether the connection's SASL session has ended (it had to re-authenticate and did
/// not): the connection is closed on its next request other than SaslHandshake and
/// SaslAuthenticate, counted and logged.
pub fn expired(conn: &Connection, ctx: &Ctx, api: ApiKey) -> bool {
    let ends_at_ms = conn.sasl_session_ends_at_ms.load(Ordering::Relaxed);
    if ends_at_ms == 0
        || now_ms() < ends_at_ms
        || matches!(api, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate)
    {
        return false;
    }
    let sasl = &ctx.sasl;
    if let Some(lines_left_out) = sasl.expired_session_closed() {
        tracing::warn!(
            peer = %conn.peer,
            principal = %conn.principal(),
            ?api,
            lines_left_out,
            "closing connection: its SASL session ended and it did not re-authenticate"
        );
    }
    true
}

/// Whether the connection authenticated with SASL (a re-authentication may start).
pub fn authenticated(conn: &Connection) -> bool {
    conn.listener.protocol.sasl()
        && conn
            .sasl
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .mechanism
            .is_some()
}

/// A re-authentication's SaslHandshake: the mechanism must be the session's (a v0
/// handshake, whose tokens come bare, cannot re-authenticate). A refusal is answered
/// and the connection closed after it (`Connection::close_after_reply`).
pub fn reauth_handshake(
    conn: &Connection,
    ctx: &Ctx,
    request: &Request,
) -> Result<Bytes, headway_protocol::EncodeError> {
    let sasl = &ctx.sasl;
    let mut exchange = sasl.exchange();
    let (mut response, mut error) = handshake(&mut exchange, request);
    let mut session = conn.sasl.lock().unwrap_or_else(|e| e.into_inner());
    if error.is_none() {
        let chosen = exchange.mechanism();
        if request.api_version() == 0 {
            error = Some("re-authentication needs SaslHandshake v1".into());
        } else if chosen != session.mechanism {
            error = Some(format!(
                "re-authentication must use the session's mechanism {}",
                session.mechanism.map_or("none", SaslMechanism::name)
            ));
        }
        if error.is_some() {
            response = response.with_error_code(ResponseError::IllegalSaslState.code());
        }
    }
    match &error {
        None => session.reauth = Some(exchange),
        Some(reason) => {
            session.reauth = None;
            sasl.failed(conn.peer, None, None, reason, now_ms());
            conn.close_after_reply.store(true, Ordering::Relaxed);
        }
    }
    encode_response(request.api_version(), request.correlation_id(), &response)
}

/// A re-authentication's SaslAuthenticate: one step of the exchange its SaslHandshake
/// began. Success as the session's principal starts a new session; a failure, or
/// success as another principal, is answered (after the failure delay, returned) and
/// the connection closed after it.
pub fn reauth_token(
    conn: &Connection,
    ctx: &Ctx,
    request: &Request,
) -> Result<(SaslAuthenticateResponse, Duration), headway_protocol::ProtocolError> {
    let sasl = &ctx.sasl;
    let body: SaslAuthenticateRequest = decode_body(request)?;
    let exchange = conn
        .sasl
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .reauth
        .take();
    let response = SaslAuthenticateResponse::default();
    let refuse = |code: ResponseError, mechanism, user: Option<&str>, message: String| {
        let delay = sasl.failed(conn.peer, mechanism, user, &message, now_ms());
        conn.close_after_reply.store(true, Ordering::Relaxed);
        let response = SaslAuthenticateResponse::default()
            .with_error_code(code.code())
            .with_error_message(Some(StrBytes::from_string(message)));
        Ok((response, delay))
    };
    let Some(mut exchange) = exchange else {
        let message = "SaslAuthenticate without a SaslHandshake".to_string();
        return refuse(ResponseError::IllegalSaslState, None, None, message);
    };
    let mechanism = exchange.mechanism();
    match token_step(&mut exchange, &body.auth_bytes, ctx) {
        Ok(Step::Continue(bytes)) => {
            conn.sasl.lock().unwrap_or_else(|e| e.into_inner()).reauth = Some(exchange);
            Ok((response.with_auth_bytes(Bytes::from(bytes)), Duration::ZERO))
        }
        Ok(Step::Done {
            user,
            reply,
            expires_at_ms,
        }) => {
            let principal = format!("User:{user}");
            let (Some(mechanism), true) = (mechanism, *conn.principal() == *principal) else {
                let message = format!(
                    "re-authentication as {principal}, not the connection's {}",
                    conn.principal()
                );
                return refuse(
                    ResponseError::SaslAuthenticationFailed,
                    mechanism,
                    Some(&user),
                    message,
                );
            };
            let lifetime_ms = succeeded(sasl, conn, mechanism, &user, expires_at_ms);
            sasl.reauthenticated();
            let response = response.with_auth_bytes(Bytes::from(reply));
            Ok((
                with_lifetime(response, request, lifetime_ms),
                Duration::ZERO,
            ))
        }
        Err(e) => {
            let code = match &e {
                TokenError::IllegalState(_) => ResponseError::IllegalSaslState,
                TokenError::Auth(_) => ResponseError::SaslAuthenticationFailed,
            };
            let user = exchange.user().map(str::to_string);
            refuse(code, mechanism, user.as_deref(), failure_message(&e))
        }
    }
}

/// SaslAuthenticate v1+ tells the client how long its session lasts.
fn with_lifetime(
    response: SaslAuthenticateResponse,
    request: &Request,
    lifetime_ms: i64,
) -> SaslAuthenticateResponse {
    match request.api_version() >= 1 {
        true => response.with_session_lifetime_ms(lifetime_ms),
        false => response,
    }
}

/// A SaslHandshake's answer, and the reason to close after it when it refused.
fn handshake(
    exchange: &mut Exchange,
    request: &Request,
) -> (SaslHandshakeResponse, Option<String>) {
    let enabled = exchange
        .enabled()
        .iter()
        .map(|m| StrBytes::from_static_str(m.name()))
        .collect();
    let response = SaslHandshakeResponse::default().with_mechanisms(enabled);
    let body: SaslHandshakeRequest = match decode_body(request) {
        Ok(body) => body,
        Err(e) => {
            let code = ResponseError::IllegalSaslState.code();
            return (response.with_error_code(code), Some(e.to_string()));
        }
    };
    match exchange.handshake(body.mechanism.as_str()) {
        Ok(_) => (response, None),
        Err(None) => (
            response.with_error_code(ResponseError::UnsupportedSaslMechanism.code()),
            Some(format!(
                "unsupported mechanism {:?}",
                body.mechanism.as_str()
            )),
        ),
        Err(Some(illegal)) => (
            response.with_error_code(ResponseError::IllegalSaslState.code()),
            Some(illegal.0),
        ),
    }
}

fn token_step(exchange: &mut Exchange, token: &[u8], ctx: &Ctx) -> Result<Step, TokenError> {
    let nonce = headway_auth::sasl::server_nonce()?;
    exchange.token(token, &nonce, &ctx.security)
}

fn respond<R>(request: &Request, body: &R) -> Option<Bytes>
where
    R: headway_protocol::kafka_protocol::protocol::Encodable
        + headway_protocol::kafka_protocol::protocol::HeaderVersion,
{
    match encode_response(request.api_version(), request.correlation_id(), body) {
        Ok(frame) => Some(frame),
        Err(e) => {
            tracing::error!(error = %e, "closing connection: SASL response not encodable");
            None
        }
    }
}

async fn write<W: AsyncWrite + Unpin>(writer: &mut W, frame: &[u8]) -> std::io::Result<()> {
    writer.write_all(frame).await?;
    writer.flush().await
}

/// Reads one frame of at most `limits::SASL_UNAUTHENTICATED_FRAME_BYTES_MAX`; a longer
/// length prefix is refused before its body is read. `Ok(None)`: the client closed.
async fn read_small_frame<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Option<Bytes>, String> {
    let size = match read_frame_size(reader, limits::SASL_UNAUTHENTICATED_FRAME_BYTES_MAX).await {
        Ok(Some(size)) => size,
        Ok(None) => return Ok(None),
        Err(e) => return Err(format!("before authentication: {e}")),
    };
    let mut body = vec![0u8; size];
    match reader.read_exact(&mut body).await {
        Ok(_) => Ok(Some(Bytes::from(body))),
        Err(e) => Err(format!("before authentication: {e}")),
    }
}
