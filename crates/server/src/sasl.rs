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

use crate::handlers::{self, Arrival, Ctx, Reply};
use crate::log_limit::LineLimiter;
use crate::stats::Connection;
use bytes::Bytes;
use headway_auth::oauth::{OAuthSettings, OAuthValidator};
use headway_auth::sasl::{Exchange, SaslMechanism, Step, TokenError};
use headway_auth::AuthError;
use headway_base::{limits, now_ms};
use headway_broker::BrokerConfig;
use headway_protocol::kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, encode_response, parse_request, read_frame_size, Request};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{timeout_at, Duration, Instant};

/// Failures of one address further apart than this start its delay over.
const FAILURE_MEMORY_MS: i64 = 60_000;

/// The failure counter of connections that failed before choosing a mechanism.
const NO_MECHANISM: usize = SaslMechanism::ALL.len();

/// The broker's SASL settings and counters.
pub struct Sasl {
    enabled: Vec<SaslMechanism>,
    failure_delay_ms: u64,
    /// Checks OAUTHBEARER tokens (`sasl_oauthbearer_jwks_file`).
    oauth: Option<Arc<OAuthValidator>>,
    /// Successes by mechanism (index of [`SaslMechanism::ALL`]).
    successes: [AtomicU64; 4],
    /// Failures by mechanism; the last is for connections that failed before choosing
    /// one (a request before authentication, a timeout, an unsupported mechanism).
    failures: [AtomicU64; 5],
    failure_lines: LineLimiter,
    recent: Mutex<RecentFailures>,
    /// `connections_max_reauth_ms`; 0: sessions do not expire.
    reauth_ms: u64,
    /// Re-authentications that succeeded.
    reauthentications: AtomicU64,
    /// Connections closed because their session ended before they re-authenticated.
    expired_closed: AtomicU64,
}

/// A connection's SASL session: how it authenticated, and a re-authentication under
/// way (`Connection::sasl`).
#[derive(Debug, Default)]
pub struct Session {
    /// The mechanism of the authentication; `None` until one succeeded.
    mechanism: Option<SaslMechanism>,
    /// The exchange of a re-authentication, from its SaslHandshake to its end.
    reauth: Option<Exchange>,
}

impl Sasl {
    /// The settings of `config`; fails when the OAUTHBEARER key set cannot be read.
    pub fn new(config: &BrokerConfig) -> Result<Sasl, String> {
        let oauth = match &config.sasl_oauthbearer_jwks_file {
            None => None,
            Some(path) => {
                let settings = OAuthSettings {
                    expected_issuer: config.sasl_oauthbearer_expected_issuer.clone(),
                    expected_audience: config.sasl_oauthbearer_expected_audience.clone(),
                    ..OAuthSettings::default()
                };
                let validator = OAuthValidator::from_jwks_file(path, settings)
                    .map_err(|e| format!("sasl_oauthbearer_jwks_file: {e}"))?;
                Some(Arc::new(validator))
            }
        };
        Ok(Sasl {
            oauth,
            enabled: config
                .sasl_enabled_mechanisms
                .iter()
                .filter_map(|name| SaslMechanism::from_name(name))
                .collect(),
            failure_delay_ms: config.sasl_failed_authentication_delay_ms,
            successes: Default::default(),
            failures: Default::default(),
            failure_lines: LineLimiter::new(limits::FAILURE_LOG_LINES_PER_SECOND),
            recent: Mutex::new(RecentFailures::default()),
            reauth_ms: config.connections_max_reauth_ms,
            reauthentications: AtomicU64::new(0),
            expired_closed: AtomicU64::new(0),
        })
    }

    /// Authentications that succeeded, by mechanism.
    pub fn successes(&self, mechanism: SaslMechanism) -> u64 {
        self.successes[mechanism.index()].load(Ordering::Relaxed)
    }

    /// Registers `headway_sasl_authentication_{successes,failures}_total` by mechanism.
    pub fn register(&self, r: &mut Registry) {
        let successes = Family::<Vec<(String, String)>, Counter>::default();
        let failures = Family::<Vec<(String, String)>, Counter>::default();
        let label = |name: &str| vec![("mechanism".to_string(), name.to_string())];
        for mechanism in SaslMechanism::ALL {
            let i = mechanism.index();
            successes
                .get_or_create(&label(mechanism.name()))
                .inc_by(self.successes[i].load(Ordering::Relaxed));
            failures
                .get_or_create(&label(mechanism.name()))
                .inc_by(self.failures[i].load(Ordering::Relaxed));
        }
        failures
            .get_or_create(&label("none"))
            .inc_by(self.failures[NO_MECHANISM].load(Ordering::Relaxed));
        r.register(
            "sasl_authentication_successes",
            "SASL authentications that succeeded, by mechanism",
            successes,
        );
        r.register(
            "sasl_authentication_failures",
            "SASL authentications that failed or timed out, by mechanism (none: before one was chosen)",
            failures,
        );
        let counter = |n: &AtomicU64| {
            let c = Counter::<u64>::default();
            c.inc_by(n.load(Ordering::Relaxed));
            c
        };
        r.register(
            "sasl_reauthentications",
            "SASL re-authentications that succeeded (also counted in the successes)",
            counter(&self.reauthentications),
        );
        r.register(
            "sasl_expired_sessions_closed",
            "Connections closed because their SASL session ended before they re-authenticated",
            counter(&self.expired_closed),
        );
    }

    /// How long a session that starts now lasts, in ms (0: no end), for a credential
    /// that expires at `expires_at_ms` (ms since the epoch), if it does: the least of
    /// `connections_max_reauth_ms` and the credential's remaining life, as Kafka
    /// answers it; without the setting, sessions do not end.
    fn session_lifetime_ms(&self, expires_at_ms: Option<i64>) -> i64 {
        if self.reauth_ms == 0 {
            return 0;
        }
        let setting = i64::try_from(self.reauth_ms).unwrap_or(i64::MAX);
        match expires_at_ms {
            Some(at) => setting.min(at.saturating_sub(now_ms())).max(1),
            None => setting,
        }
    }

    /// Counts and logs a failure; returns how long to wait before answering it.
    fn failed(
        &self,
        peer: SocketAddr,
        mechanism: Option<SaslMechanism>,
        user: Option<&str>,
        reason: &str,
    ) -> Duration {
        self.failures[mechanism.map_or(NO_MECHANISM, SaslMechanism::index)]
            .fetch_add(1, Ordering::Relaxed);
        if let Some(lines_left_out) = self.failure_lines.admit_now() {
            let principal = user.map(|u| format!("User:{u}"));
            tracing::warn!(
                %peer,
                principal = principal.as_deref().unwrap_or("unknown"),
                mechanism = mechanism.map_or("none", SaslMechanism::name),
                reason,
                lines_left_out,
                "closing connection: SASL authentication failed"
            );
        }
        let failures = self
            .recent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .failed(peer.ip(), now_ms());
        Duration::from_millis(failure_delay(self.failure_delay_ms, failures))
    }
}

/// The delay before answering a failure that is its address's `failures`th recent one:
/// `base_ms` doubled for each earlier one, at most `limits::SASL_FAILURE_DELAY_MAX_MS`.
fn failure_delay(base_ms: u64, failures: u32) -> u64 {
    let doublings = failures.saturating_sub(1).min(16);
    base_ms
        .saturating_mul(1 << doublings)
        .min(limits::SASL_FAILURE_DELAY_MAX_MS)
}

/// Recent failures per client address, bounded by `limits::SASL_FAILURE_ADDRESSES_MAX`
/// (when full, the address whose last failure is oldest is forgotten).
#[derive(Default)]
struct RecentFailures {
    /// Address: failures in a row no more than `FAILURE_MEMORY_MS` apart, the last one.
    by_address: HashMap<IpAddr, (u32, i64)>,
}

impl RecentFailures {
    /// Records a failure of `address` at `now_ms`; returns its count of recent ones.
    fn failed(&mut self, address: IpAddr, now_ms: i64) -> u32 {
        if !self.by_address.contains_key(&address)
            && self.by_address.len() >= limits::SASL_FAILURE_ADDRESSES_MAX
        {
            let oldest = self
                .by_address
                .iter()
                .min_by_key(|(_, (_, last))| *last)
                .map(|(a, _)| *a);
            if let Some(oldest) = oldest {
                self.by_address.remove(&oldest);
            }
        }
        let (count, last) = self.by_address.entry(address).or_insert((0, now_ms));
        if now_ms - *last > FAILURE_MEMORY_MS {
            *count = 0;
        }
        *count = count.saturating_add(1);
        *last = now_ms;
        *count
    }
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
    let mut exchange = Exchange::new(sasl.enabled.clone()).with_oauth(sasl.oauth.clone());
    let deadline = Instant::now() + Duration::from_millis(limits::SASL_AUTHENTICATION_TIMEOUT_MS);
    let mut shutdown = ctx.shutdown.clone();
    let run = timeout_at(
        deadline,
        serve_exchange(reader, writer, conn, ctx, &mut exchange),
    );
    let outcome = tokio::select! {
        outcome = run => outcome,
        _ = handlers::shutting_down(&mut shutdown) => return false,
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
                sasl.failed(peer, exchange.mechanism(), exchange.user(), &reason);
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
                    let delay = sasl.failed(peer, mechanism, exchange.user(), &e.to_string());
                    tokio::time::sleep(delay).await;
                    return Outcome::Closed;
                }
            }
            continue;
        }
        let request = match parse_request(frame) {
            Ok(request) => request,
            Err(e) => {
                sasl.failed(peer, exchange.mechanism(), None, &e.to_string());
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
                    let delay = sasl.failed(peer, None, None, &reason);
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
                        sasl.failed(peer, mechanism, None, &e.to_string());
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
                        let delay = sasl.failed(peer, mechanism, exchange.user(), &message);
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
    sasl.successes[mechanism.index()].fetch_add(1, Ordering::Relaxed);
    conn.set_principal(&format!("User:{user}"));
    let lifetime_ms = sasl.session_lifetime_ms(expires_at_ms);
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
    sasl.expired_closed.fetch_add(1, Ordering::Relaxed);
    if let Some(lines_left_out) = sasl.failure_lines.admit_now() {
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
    let mut exchange = Exchange::new(sasl.enabled.clone()).with_oauth(sasl.oauth.clone());
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
            sasl.failed(conn.peer, None, None, reason);
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
        let delay = sasl.failed(conn.peer, mechanism, user, &message);
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
            sasl.reauthentications.fetch_add(1, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_of_one_address_wait_longer_each_time_up_to_the_bound() {
        let mut recent = RecentFailures::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let counts: Vec<u32> = (0..3).map(|i| recent.failed(a, 1_000 + i)).collect();
        assert_eq!(counts, [1, 2, 3]);
        assert_eq!(recent.failed(b, 1_010), 1);
        // Long after, the count starts over.
        assert_eq!(recent.failed(a, 1_010 + FAILURE_MEMORY_MS + 1), 1);
        assert_eq!(failure_delay(100, 1), 100);
        assert_eq!(failure_delay(100, 3), 400);
        assert_eq!(failure_delay(100, 1_000), limits::SASL_FAILURE_DELAY_MAX_MS);
        assert_eq!(failure_delay(0, 5), 0);
    }

    /// Goal: a session lasts `connections_max_reauth_ms`, no longer than its token, and
    /// forever without the setting, as Kafka answers `session_lifetime_ms`.
    #[test]
    fn a_session_lasts_the_setting_and_no_longer_than_its_token() {
        let mut config = BrokerConfig::default();
        let off = Sasl::new(&config).unwrap();
        assert_eq!(off.session_lifetime_ms(None), 0);
        assert_eq!(off.session_lifetime_ms(Some(now_ms() + 1_000)), 0);
        config.connections_max_reauth_ms = 60_000;
        let on = Sasl::new(&config).unwrap();
        assert_eq!(on.session_lifetime_ms(None), 60_000);
        let token = on.session_lifetime_ms(Some(now_ms() + 10_000));
        assert!((9_000..=10_000).contains(&token), "{token}");
        assert_eq!(on.session_lifetime_ms(Some(now_ms() + 600_000)), 60_000);
        // A token at its end (valid within the clock skew) still gets a session.
        assert_eq!(on.session_lifetime_ms(Some(now_ms() - 5_000)), 1);
    }

    #[test]
    fn the_addresses_remembered_are_bounded() {
        let mut recent = RecentFailures::default();
        for i in 0..limits::SASL_FAILURE_ADDRESSES_MAX as u32 + 10 {
            recent.failed(IpAddr::from(i.to_be_bytes()), i64::from(i));
        }
        assert_eq!(recent.by_address.len(), limits::SASL_FAILURE_ADDRESSES_MAX);
        // The oldest were forgotten.
        assert!(!recent
            .by_address
            .contains_key(&IpAddr::from(0u32.to_be_bytes())));
    }
}
