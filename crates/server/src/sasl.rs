//! SASL authentication on SASL_PLAINTEXT and SASL_SSL listeners (`docs/security.md`):
//! the exchange of a connection, served by the SaslHandshake and SaslAuthenticate
//! handlers, and the session it starts.
//!
//! A connection of a SASL listener is first served one request at a time
//! (`crate::authentication`), and only the APIs the registry serves before
//! authentication; its exchange lives in the connection's SASL session from
//! [`start`] to its end. A failed authentication is answered after a delay
//! (`sasl_failed_authentication_delay_ms`, doubled per recent failure of the same
//! address, `crate::sasl_settings`), waited on the connection's own task; it is
//! counted by mechanism and logged with the user and address within
//! `limits::FAILURE_LOG_LINES_PER_SECOND`.
//!
//! After a SaslHandshake v0 the client sends its tokens as bare length-prefixed
//! frames (Kafka's handshake v0 mode, [`bare_token`]); after v1 it wraps them in
//! SaslAuthenticate ([`token`]).
//!
//! Re-authentication (KIP-368): with `connections_max_reauth_ms` set, a session lasts
//! that long (an OAUTHBEARER session no longer than its token), SaslAuthenticate v1+
//! tells the client so (`session_lifetime_ms`), and a request other than SaslHandshake
//! or SaslAuthenticate after the session ended closes the connection
//! ([`expired`]). The client re-authenticates on its connection, between its other
//! requests, with SaslHandshake v1 and SaslAuthenticate, served by the handlers through
//! [`reauth_handshake`] and [`token`]: the same mechanism and principal as before, or
//! the connection is closed after the refusal.

use crate::call::{pending, ready, Connection, Ctx, HandlerError, Reply, SaslSession};
use crate::sasl_settings::Sasl;
use bytes::Bytes;
use headway_auth::sasl::{Exchange, SaslMechanism, Step, TokenError};
use headway_auth::AuthError;
use headway_base::now_ms;
use headway_protocol::kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, ProtocolError, Request};
use std::sync::atomic::Ordering;
use std::time::Duration;

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
    let mut session = session(conn);
    session.mechanism = Some(mechanism);
    session.exchange = None;
    session.bare_tokens = false;
    tracing::debug!(peer = %conn.peer, principal = %format!("User:{user}"), mechanism = mechanism.name(), lifetime_ms, "authenticated");
    lifetime_ms
}

/// Whether the connection's SASL session has ended (it had to re-authenticate and did
/// not): the connection is closed on its next request other than one that
/// authenticates (which the caller leaves out), counted and logged.
pub fn expired(conn: &Connection, ctx: &Ctx, api: ApiKey) -> bool {
    let ends_at_ms = conn.sasl_session_ends_at_ms.load(Ordering::Relaxed);
    if ends_at_ms == 0 || now_ms() < ends_at_ms {
        return false;
    }
    if let Some(lines_left_out) = ctx.sasl.expired_session_closed() {
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
    conn.listener.protocol.sasl() && session(conn).mechanism.is_some()
}

/// Whether the connection is a SASL listener's that has not authenticated yet: its
/// requests are served one at a time by `crate::authentication`.
pub fn authenticating(conn: &Connection) -> bool {
    conn.listener.protocol.sasl() && session(conn).mechanism.is_none()
}

fn session(conn: &Connection) -> std::sync::MutexGuard<'_, SaslSession> {
    conn.sasl.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the first authentication of a SASL listener's connection: the exchange its
/// SaslHandshake and SaslAuthenticate requests go through.
pub fn start(conn: &Connection, ctx: &Ctx) {
    session(conn).exchange = Some(ctx.sasl.exchange());
}

/// Counts and logs a failure of the first authentication (a bad frame, a request
/// other than ApiVersions, SaslHandshake and SaslAuthenticate, a timeout), naming the
/// user when `name_user` and the exchange knows one.
pub fn failed_before_authentication(conn: &Connection, ctx: &Ctx, reason: &str, name_user: bool) {
    let session = session(conn);
    let exchange = session.exchange.as_ref();
    let mechanism = exchange.and_then(Exchange::mechanism);
    let user = exchange.and_then(Exchange::user).filter(|_| name_user);
    ctx.sasl
        .failed(conn.peer, mechanism, user, reason, now_ms());
}

/// The first authentication's SaslHandshake: the mechanism is chosen for the
/// exchange; a refusal is answered after the failure delay and closes the connection
/// (`Connection::close_after_reply`). After a v0 handshake the tokens come as bare
/// frames ([`bare_token`]).
pub fn first_handshake(
    conn: &Connection,
    ctx: &Ctx,
    request: &Request,
) -> Result<Reply, HandlerError> {
    let mut session = session(conn);
    let Some(exchange) = session.exchange.as_mut() else {
        return Err(HandlerError::UnsupportedApi(request.api_key));
    };
    let (response, error) = handshake(exchange, request);
    match error {
        None => {
            session.bare_tokens = request.api_version() == 0;
            ready(request, &response)
        }
        Some(reason) => {
            drop(session);
            let delay = ctx.sasl.failed(conn.peer, None, None, &reason, now_ms());
            conn.close_after_reply.store(true, Ordering::Relaxed);
            pending(request, async move {
                tokio::time::sleep(delay).await;
                response
            })
        }
    }
}

/// A re-authentication's SaslHandshake: the mechanism must be the session's (a v0
/// handshake, whose tokens come bare, cannot re-authenticate). A refusal is answered
/// and the connection closed after it (`Connection::close_after_reply`).
pub fn reauth_handshake(conn: &Connection, ctx: &Ctx, request: &Request) -> SaslHandshakeResponse {
    let sasl = &ctx.sasl;
    let mut exchange = sasl.exchange();
    let (mut response, mut error) = handshake(&mut exchange, request);
    let mut session = session(conn);
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
        None => session.exchange = Some(exchange),
        Some(reason) => {
            session.exchange = None;
            sasl.failed(conn.peer, None, None, reason, now_ms());
            conn.close_after_reply.store(true, Ordering::Relaxed);
        }
    }
    response
}

/// A SaslAuthenticate: one step of the exchange its SaslHandshake began, of the first
/// authentication or of a re-authentication (`reauthentication`). Success starts a
/// session (a re-authentication's only as the session's principal); a failure is
/// answered after the failure delay (returned) and the connection closed after it.
/// A body that does not decode closes the connection (counted as a failure in the
/// first authentication).
pub fn token(
    conn: &Connection,
    ctx: &Ctx,
    request: &Request,
    reauthentication: bool,
) -> Result<(SaslAuthenticateResponse, Duration), ProtocolError> {
    let sasl = &ctx.sasl;
    let body: SaslAuthenticateRequest = match decode_body(request) {
        Ok(body) => body,
        Err(e) if reauthentication => return Err(e),
        Err(e) => {
            failed_before_authentication(conn, ctx, &e.to_string(), false);
            return Err(e);
        }
    };
    let exchange = session(conn).exchange.take();
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
            session(conn).exchange = Some(exchange);
            Ok((response.with_auth_bytes(Bytes::from(bytes)), Duration::ZERO))
        }
        Ok(Step::Done {
            user,
            reply,
            expires_at_ms,
        }) => {
            let principal = format!("User:{user}");
            let same = !reauthentication || *conn.principal() == *principal;
            let (Some(mechanism), true) = (mechanism, same) else {
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
            if reauthentication {
                sasl.reauthenticated();
            }
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

/// Whether the first authentication's tokens come as bare frames (after a
/// SaslHandshake v0, Kafka's handshake v0 mode).
pub fn bare_tokens(conn: &Connection) -> bool {
    session(conn).bare_tokens
}

/// A bare token of the first authentication: the frame to answer with (the reply
/// token, length-prefixed) and whether the connection is now authenticated; or, when
/// the token fails, how long to wait before the connection is closed without an
/// answer (as Kafka does in this mode).
pub fn bare_token(conn: &Connection, ctx: &Ctx, token: &[u8]) -> Result<(Vec<u8>, bool), Duration> {
    let sasl = &ctx.sasl;
    let Some(mut exchange) = session(conn).exchange.take() else {
        return Err(Duration::ZERO);
    };
    let mechanism = exchange.mechanism();
    match token_step(&mut exchange, token, ctx) {
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
            if let (Some((user, expires_at_ms)), Some(mechanism)) = (done, mechanism) {
                succeeded(sasl, conn, mechanism, &user, expires_at_ms);
                return Ok((out, true));
            }
            session(conn).exchange = Some(exchange);
            Ok((out, false))
        }
        Err(e) => {
            let user = exchange.user().map(str::to_string);
            Err(sasl.failed(
                conn.peer,
                mechanism,
                user.as_deref(),
                &e.to_string(),
                now_ms(),
            ))
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
