//! One module per Kafka API, each with the same shape: `API` (key and served version
//! range), and `handle` (decode, apply, encode). [`APIS`] is the one registry: it
//! decides dispatch and produces the ApiVersions answer, so an advertised version is
//! always a version some handler serves.

pub mod alter_configs;
pub mod api_versions;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod metadata;
pub mod offset_commit;
pub mod offset_fetch;
pub mod produce;
pub mod sync_group;

use crate::outbound::Reservation;
use crate::stats::{Connection, ServerStats};
use bytes::Bytes;
use futures::future::BoxFuture;
use headway_broker::timings::{self, Histogram};
use headway_broker::{Broker, Partition};
use headway_group::GroupCoordinator;
use headway_protocol::kafka_protocol::messages::ApiKey;
use headway_protocol::kafka_protocol::protocol::{Encodable, HeaderVersion};
use headway_protocol::{encode_response, EncodeError, ProtocolError, Request};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// An API this broker serves and the versions it serves.
#[derive(Debug, Clone, Copy)]
pub struct ApiSpec {
    pub key: ApiKey,
    pub min_version: i16,
    pub max_version: i16,
}

/// The registry: every served API.
pub const APIS: &[ApiSpec] = &[
    produce::API,
    fetch::API,
    list_offsets::API,
    metadata::API,
    api_versions::API,
    create_topics::API,
    delete_topics::API,
    describe_configs::API,
    find_coordinator::API,
    join_group::API,
    sync_group::API,
    heartbeat::API,
    leave_group::API,
    offset_commit::API,
    offset_fetch::API,
    list_groups::API,
    describe_groups::API,
    delete_groups::API,
    init_producer_id::API,
    describe_cluster::API,
    create_partitions::API,
    incremental_alter_configs::API,
    alter_configs::API,
    delete_records::API,
];

/// What every handler can reach: the broker, the group coordinator, and how clients
/// reach this broker.
pub struct Ctx {
    pub broker: Arc<Broker>,
    pub groups: Arc<GroupCoordinator>,
    pub advertised_host: String,
    pub advertised_port: i32,
    /// Becomes true when the broker shuts down; long polls end early.
    pub shutdown: watch::Receiver<bool>,
    /// Budgets and the open connections' state.
    pub stats: Arc<ServerStats>,
}

impl Ctx {
    pub fn stats(&self) -> Arc<ServerStats> {
        Arc::clone(&self.stats)
    }
}

/// A handler's answer.
pub enum Reply {
    /// An encoded response frame, ready to write.
    Ready(Bytes),
    /// A response that needs waiting (an fsync, a long poll). The connection's writer
    /// awaits it in request order while the reader goes on reading.
    Pending(BoxFuture<'static, Result<Outgoing, EncodeError>>),
    /// No response at all (produce with acks=0).
    Silent,
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

/// What the writer records for a timed reply ([`headway_broker::timings`]): the
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
}

pub fn spec(key: ApiKey) -> Option<&'static ApiSpec> {
    APIS.iter().find(|a| a.key == key)
}

/// Checks that `request`'s API and version are served (ApiVersions at any version: it
/// answers an unknown one itself).
fn served(request: &Request) -> Result<(), HandlerError> {
    let spec = spec(request.api_key).ok_or(HandlerError::UnsupportedApi(request.api_key))?;
    let version = request.api_version();
    let known = (spec.min_version..=spec.max_version).contains(&version);
    // ApiVersions answers an unknown version itself, with UNSUPPORTED_VERSION.
    if !known && request.api_key != ApiKey::ApiVersions {
        return Err(HandlerError::UnsupportedVersion {
            api_key: request.api_key,
            version,
            min: spec.min_version,
            max: spec.max_version,
        });
    }
    Ok(())
}

/// Runs the handler for `request` from connection `conn`, which arrived as `arrival`
/// says. The synchronous part runs now. A produce that leaves partitions with more
/// unsynced bytes than their bound puts them in `hold`: the connection reads nothing
/// more until their syncs caught up ([`Partition::wait_unsynced_within_bound`]).
pub fn dispatch(
    ctx: &Arc<Ctx>,
    conn: &Arc<Connection>,
    request: Request,
    arrival: Arrival,
    hold: &mut Vec<Arc<Partition>>,
) -> Result<Reply, HandlerError> {
    served(&request)?;
    match request.api_key {
        ApiKey::Produce => produce::handle(ctx, &request, arrival, hold),
        ApiKey::Fetch => fetch::handle(ctx, conn, &request, arrival),
        ApiKey::ListOffsets => list_offsets::handle(ctx, &request),
        ApiKey::Metadata => metadata::handle(ctx, &request),
        ApiKey::ApiVersions => api_versions::handle(ctx, &request),
        ApiKey::CreateTopics => create_topics::handle(ctx, &request),
        ApiKey::DeleteTopics => delete_topics::handle(ctx, &request),
        ApiKey::DescribeConfigs => describe_configs::handle(ctx, &request),
        ApiKey::FindCoordinator => find_coordinator::handle(ctx, &request),
        ApiKey::JoinGroup => join_group::handle(ctx, &request, conn.peer),
        ApiKey::SyncGroup => sync_group::handle(ctx, &request),
        ApiKey::Heartbeat => heartbeat::handle(ctx, &request),
        ApiKey::LeaveGroup => leave_group::handle(ctx, &request),
        ApiKey::OffsetCommit => offset_commit::handle(ctx, &request),
        ApiKey::OffsetFetch => offset_fetch::handle(ctx, &request),
        ApiKey::ListGroups => list_groups::handle(ctx, &request),
        ApiKey::DescribeGroups => describe_groups::handle(ctx, &request),
        ApiKey::DeleteGroups => delete_groups::handle(ctx, &request),
        ApiKey::InitProducerId => init_producer_id::handle(ctx, &request),
        ApiKey::DescribeCluster => describe_cluster::handle(ctx, &request),
        ApiKey::CreatePartitions => create_partitions::handle(ctx, &request),
        ApiKey::IncrementalAlterConfigs => incremental_alter_configs::handle(ctx, &request),
        ApiKey::AlterConfigs => alter_configs::handle(ctx, &request),
        ApiKey::DeleteRecords => delete_records::handle(ctx, &request),
        other => Err(HandlerError::UnsupportedApi(other)),
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
        let (body, reserved, timing) = future.await;
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
