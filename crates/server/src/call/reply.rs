//! What a handler gives back: the [`Reply`] the connection's writer sends, the helpers
//! that encode it ([`ready`], [`pending`], [`pending_with`]), and the
//! [`HandlerError`]s that close a connection instead.
//!
//! The helpers take the typed response: before encoding it they take its error codes
//! ([`ErrorCodes`]), which the reply carries to the per-API metrics.

use crate::outbound::Reservation;
use crate::requests::{Codes, ErrorCodes};
use bytes::Bytes;
use futures::future::BoxFuture;
use headway_broker::io::timings::{self, Histogram};
use headway_broker::panics::{self, Component, Panicked};
use headway_protocol::kafka_protocol::messages::ApiKey;
use headway_protocol::kafka_protocol::protocol::{Encodable, HeaderVersion};
use headway_protocol::{encode_response, EncodeError, ProtocolError, Request};
use std::future::Future;
use std::time::Instant;

/// A handler's answer.
pub enum Reply {
    /// An encoded response frame, ready to write, and the error codes it carries.
    Ready(Bytes, Codes),
    /// A response that needs waiting (an fsync, a long poll). The connection's writer
    /// awaits it in request order while the reader goes on reading.
    Pending(BoxFuture<'static, Result<Outgoing, ReplyFailed>>),
    /// No response at all (produce with acks=0).
    Silent,
}

/// Why a pending reply has no frame: the connection closes (its earlier answers are
/// written; the client retries on a new connection).
#[derive(Debug, thiserror::Error)]
pub enum ReplyFailed {
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The reply's future panicked: this request failed alone
    /// ([`headway_broker::panics`]).
    #[error("the request's handler {0}")]
    Panicked(#[from] Panicked),
}

/// An encoded response and the outbound bytes reserved for it (fetches), released
/// once the writer has handed the frame to the socket.
pub struct Outgoing {
    pub frame: Bytes,
    pub reserved: Option<Reservation>,
    /// Stage histograms the writer completes once the frame is on the socket.
    pub timing: Option<ReplyTiming>,
    /// The error codes the response carries.
    pub codes: Codes,
}

/// What the writer records for a timed reply ([`headway_broker::io::timings`]): the
/// `reply` stage from `ready` (the response's data was there) to the frame written,
/// and the `total` from the request's arrival.
pub struct ReplyTiming {
    pub started: Instant,
    pub ready: Instant,
    pub reply: Histogram,
    pub total: Histogram,
}

impl ReplyTiming {
    /// The frame was handed to the socket now.
    pub fn written(&self) {
        let now = Instant::now();
        timings::observe(&self.reply, now - self.ready);
        timings::observe(&self.total, now - self.started);
    }
}

/// Encodes a response to `request` now.
pub fn ready<R: Encodable + HeaderVersion + ErrorCodes>(
    request: &Request,
    body: &R,
) -> Result<Reply, HandlerError> {
    ready_at(request.api_version(), request, body)
}

/// Encodes a response to `request` now, at `version` (ApiVersions answers a version it
/// does not know at version 0).
pub fn ready_at<R: Encodable + HeaderVersion + ErrorCodes>(
    version: i16,
    request: &Request,
    body: &R,
) -> Result<Reply, HandlerError> {
    let frame = encode_response(version, request.correlation_id(), body)?;
    Ok(Reply::Ready(frame, Codes::of(body)))
}

/// Encodes the response that `future` produces, once it is ready.
pub fn pending<R, F>(request: &Request, future: F) -> Result<Reply, HandlerError>
where
    R: Encodable + HeaderVersion + ErrorCodes,
    F: Future<Output = R> + Send + 'static,
{
    pending_with(request, async move { (future.await, None, None) })
}

/// [`pending`] for a response that may hold outbound bytes until it is written, and
/// may be timed ([`ReplyTiming`]).
pub fn pending_with<R, F>(request: &Request, future: F) -> Result<Reply, HandlerError>
where
    R: Encodable + HeaderVersion + ErrorCodes,
    F: Future<Output = (R, Option<Reservation>, Option<ReplyTiming>)> + Send + 'static,
{
    let (version, correlation_id) = (request.api_version(), request.correlation_id());
    Ok(Reply::Pending(Box::pin(async move {
        let (body, reserved, timing) = panics::supervise(Component::Connection, future).await?;
        let codes = Codes::of(&body);
        let frame = encode_response(version, correlation_id, &body)?;
        Ok(Outgoing {
            frame,
            reserved,
            timing,
            codes,
        })
    })))
}

/// Why a connection must be closed. Kafka closes the connection on these rather than
/// answering, because it cannot know how the client would parse an answer.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    #[error("{api_key:?} v{version} is not supported (served: {min}..={max})")]
    UnsupportedVersion {
        api_key: ApiKey,
        version: i16,
        min: i16,
        max: i16,
    },
    #[error("API {0:?} is not served by this broker")]
    UnsupportedApi(ApiKey),
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The handler panicked: this request fails alone, its connection closes
    /// ([`headway_broker::panics`]).
    #[error("the {api_key:?} handler {panicked}")]
    Panicked { api_key: ApiKey, panicked: Panicked },
}
