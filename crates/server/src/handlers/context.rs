//! What a handler is given and what it gives back: the broker-wide [`Ctx`], the one
//! request's [`Call`], and the [`Reply`] the connection's writer sends, with helpers
//! that encode it ([`ready`], [`pending`], [`pending_with`]).
//!
//! A `Ctx` lives as long as the server and is shared by every connection (all of it is
//! thread-safe); a `Call` lives for one handler's synchronous part, on the connection's
//! reader (or a bulk thread, for a large produce).

use super::HandlerError;
use crate::outbound::Reservation;
use crate::stats::{Connection, ServerStats};
use bytes::Bytes;
use futures::future::BoxFuture;
use headway_broker::io::timings::{self, Histogram};
use headway_broker::panics::{self, Component, Panicked};
use headway_broker::{Broker, Partition};
use headway_group::GroupCoordinator;
use headway_protocol::kafka_protocol::protocol::{Encodable, HeaderVersion};
use headway_protocol::{encode_response, EncodeError, Request};
use headway_share::ShareCoordinator;
use headway_txn::TxnCoordinator;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// What every handler can reach: the broker, the group and transaction coordinators,
/// and how clients reach this broker.
pub struct Ctx {
    pub broker: Arc<Broker>,
    pub groups: Arc<GroupCoordinator>,
    pub txns: Arc<TxnCoordinator>,
    /// Share groups: membership, share sessions and share-partition state.
    pub shares: Arc<ShareCoordinator>,
    /// Groups' own settings (the GROUP config resource), kept durably.
    pub group_configs: Arc<crate::group_configs::GroupConfigStore>,
    /// Becomes true when the broker shuts down; long polls end early.
    pub shutdown: watch::Receiver<bool>,
    /// Budgets and the open connections' state.
    pub stats: Arc<ServerStats>,
    /// ACLs and the checks of every request ([`crate::authorize`]).
    pub authorizer: Arc<crate::authorize::Authorizer>,
    /// SCRAM credentials and ACLs (`<data_dir>/security/`).
    pub security: Arc<headway_auth::store::SecurityStore>,
    /// SASL listeners' settings and counters.
    pub sasl: crate::sasl::Sasl,
}

impl Ctx {
    pub fn stats(&self) -> Arc<ServerStats> {
        Arc::clone(&self.stats)
    }
}

/// One request's handling: where it came from and when, besides the [`Ctx`].
pub struct Call<'a> {
    pub ctx: &'a Arc<Ctx>,
    /// The connection the request arrived on.
    pub conn: &'a Arc<Connection>,
    pub arrival: Arrival,
    /// Partitions a produce left past their unsynced bound: the connection reads
    /// nothing more until their syncs caught up
    /// ([`Partition::wait_unsynced_within_bound`]).
    pub hold: &'a mut Vec<Arc<Partition>>,
}

/// A handler's answer.
pub enum Reply {
    /// An encoded response frame, ready to write.
    Ready(Bytes),
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
}

/// When a request arrived: its length prefix was read at `started`, its last byte
/// `read` later.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    pub started: Instant,
    pub read: Duration,
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
pub fn ready<R: Encodable + HeaderVersion>(
    request: &Request,
    body: &R,
) -> Result<Reply, HandlerError> {
    Ok(Reply::Ready(encode_response(
        request.api_version(),
        request.correlation_id(),
        body,
    )?))
}

/// Encodes the response that `future` produces, once it is ready.
pub fn pending<R, F>(request: &Request, future: F) -> Result<Reply, HandlerError>
where
    R: Encodable + HeaderVersion,
    F: Future<Output = R> + Send + 'static,
{
    pending_with(request, async move { (future.await, None, None) })
}

/// [`pending`] for a response that may hold outbound bytes until it is written, and
/// may be timed ([`ReplyTiming`]).
pub fn pending_with<R, F>(request: &Request, future: F) -> Result<Reply, HandlerError>
where
    R: Encodable + HeaderVersion,
    F: Future<Output = (R, Option<Reservation>, Option<ReplyTiming>)> + Send + 'static,
{
    let (version, correlation_id) = (request.api_version(), request.correlation_id());
    Ok(Reply::Pending(Box::pin(async move {
        let (body, reserved, timing) = panics::supervise(Component::Connection, future).await?;
        let frame = encode_response(version, correlation_id, &body)?;
        Ok(Outgoing {
            frame,
            reserved,
            timing,
        })
    })))
}

/// Resolves once the broker starts shutting down.
pub async fn shutting_down(shutdown: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not `Send`; drop it here, not in the caller.
    let _ = shutdown.wait_for(|down| *down).await;
}
