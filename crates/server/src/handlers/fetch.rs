//! Fetch: read whole batches below the high watermark, long-polling for `min_bytes`.
//! With `isolation_level=1` (read_committed) reads stop at the last stable offset and
//! each partition's answer lists the aborted transactions its records overlap; a
//! waiting fetch wakes when the last stable offset moves as when the high watermark
//! does (both live in the partition's watch).
//!
//! Every subscriber is a cursor: a fetch reads the partition log at the client's
//! offset and holds nothing for the client between requests. A waiting fetch watches
//! the high watermarks of its partitions and re-reads when one moves, until
//! `min_bytes` are there, `max_wait_ms` passes, or the broker shuts down (the loop is
//! [`super::long_poll`], which ShareFetch shares). A change wakes
//! only the fetches watching that partition (each partition's watch has its own list of
//! waiters), and no lock is held while a fetch reads or waits.
//!
//! Before each read the fetch reserves outbound bytes from its connection's budget
//! ([`crate::outbound`]) and reads no more than it got; the reservation, shrunk to what
//! was read, stays with the response until the writer has written it. Reads go through
//! [`Partition::read_via`]: the page cache first, otherwise the cold-read pool; each
//! read holds one of the connection's share permits ([`Connection::read_turn`]).
//! Fetch sessions (KIP-227) are not kept: the answer's session id is 0, which tells
//! clients to send full fetch requests.
//! v13+ names topics by id; earlier versions by name.
//!
//! A fetch with a replica id (v15+: its replica state) is a follower's, and needs
//! `ClusterAction` on the cluster: it reads up to the leader's log end instead of the
//! high watermark, empty batches included, and its fetch offset tells the leader what
//! the follower synced ([`Partition::read_for_replica`]), and while it waits it wakes
//! at the leader's appends rather than at its syncs, so a follower copies a write while
//! the leader syncs it ([`Partition::watch_appends`]); a follower whose last epoch
//! diverges from the leader's history gets the diverging epoch (v12+) instead of
//! records. A client's fetch is checked against the partition's leader epoch (v9+,
//! `FENCED_LEADER_EPOCH`/`UNKNOWN_LEADER_EPOCH`) and refused by a follower
//! (`NOT_LEADER_OR_FOLLOWER`).

use super::long_poll::{self, Look, Looked, Wakes};
use crate::authorize;
use crate::call::Connection;
use crate::call::{pending_with, Call, Ctx, Handler, HandlerError, Reply, ReplyTiming};
use crate::cluster::view;
use crate::errors::error_code;
use crate::outbound::Reservation;
use crate::requests::{Codes, ErrorCodes};
use bytes::Bytes;
use headway_auth::acl::Operation;
use headway_base::{limits, Offset, PartitionIndex};
use headway_broker::io::timings;
use headway_broker::partition::role::{ReplicaFetch, ReplicaId, ReplicaRead};
use headway_broker::{BatchHeader, BrokerError, Isolation, Partition, ReadResult};
use headway_protocol::kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, PartitionData,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, ProducerId, TopicName,
};
use headway_protocol::{decode_body, Request};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

pub const HANDLER: Handler = Handler {
    key: ApiKey::Fetch,
    min_version: 4,
    max_version: 16,
    handle,
};

const TOPIC_IDS_MIN_VERSION: i16 = 13;
/// From v15 a follower names itself in the replica state, not the replica id.
const REPLICA_STATE_MIN_VERSION: i16 = 15;

struct Wanted {
    index: PartitionIndex,
    offset: Offset,
    max_bytes: usize,
    partition: Result<Arc<Partition>, BrokerError>,
    /// The leader epoch the fetcher knows (v9+), if it said.
    current_leader_epoch: Option<i32>,
    /// A follower's last epoch (v12+), if it has one.
    last_fetched_epoch: Option<i32>,
}

struct WantedTopic {
    name: TopicName,
    id: uuid::Uuid,
    partitions: Vec<Wanted>,
    isolation: Isolation,
}

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let (ctx, conn, arrival) = (call.ctx, call.conn, call.arrival);
    let body: FetchRequest = decode_body(request)?;
    let by_id = request.api_version() >= TOPIC_IDS_MIN_VERSION;
    let isolation = Isolation::from_wire(body.isolation_level);
    let replica = match request.api_version() >= REPLICA_STATE_MIN_VERSION {
        true => body.replica_state.replica_id.0,
        false => body.replica_id.0,
    };
    let replica = (replica >= 0).then_some(replica);
    let cluster_action = replica.is_none() || authorize::cluster(call, Operation::ClusterAction);
    let consumer = replica.is_none();
    let hints = ctx.cluster.clone();
    let listener = conn.listener.name.clone();
    let version = request.api_version();
    let topics = body
        .topics
        .into_iter()
        .map(|t| resolve(call, consumer, by_id, t, isolation, cluster_action))
        .collect::<Vec<_>>();
    let wait =
        Duration::from_millis((body.max_wait_ms.max(0) as u64).min(limits::FETCH_WAIT_MS_MAX));
    let max_bytes = (body.max_bytes.max(0) as usize).min(limits::FETCH_RESPONSE_BYTES_MAX);
    let min_bytes = body.min_bytes.max(0) as usize;
    let held = conn.hold_long_poll(bookkeeping_bytes(&topics));
    let (ctx, conn) = (Arc::clone(ctx), Arc::clone(conn));
    pending_with(request, async move {
        let _held = held;
        let polled = poll(&ctx, &conn, &topics, replica, wait, min_bytes, max_bytes).await;
        let stages = ctx.broker.timings().fetch(polled.catch_up);
        timings::observe(&stages.wait, polled.waited);
        timings::observe(&stages.read, polled.read);
        let timing = ReplyTiming {
            started: arrival.started,
            ready: std::time::Instant::now(),
            reply: stages.reply.clone(),
            total: stages.total.clone(),
        };
        let mut body = FetchResponse::default()
            .with_session_id(0)
            .with_responses(polled.responses);
        if let Some(cluster) = hints {
            view::fetch_hints(&cluster.image().metadata, &mut body, &listener, version);
        }
        (body, Some(polled.reserved), Some(timing))
    })
}

/// What the waiting answer keeps of the request, about: counted against the
/// connection's long-poll bound (`limits::LONG_POLL_BYTES_PER_CONNECTION_MAX`).
fn bookkeeping_bytes(topics: &[WantedTopic]) -> usize {
    topics
        .iter()
        .map(|t| {
            std::mem::size_of::<WantedTopic>()
                + t.name.len()
                + t.partitions.len() * (std::mem::size_of::<Wanted>() + ERROR_TEXT_BYTES)
        })
        .sum()
}

/// Room for the text of a partition's error (an unknown topic's name), on average.
const ERROR_TEXT_BYTES: usize = 32;

/// A long poll's answer, with its outbound reservation and where its time went.
struct Polled {
    responses: Vec<FetchableTopicResponse>,
    reserved: Reservation,
    /// Time spent waiting for data.
    waited: Duration,
    /// Time spent reading.
    read: Duration,
    /// Some read went to the read threads.
    catch_up: bool,
}

fn resolve(
    call: &Call<'_>,
    consumer: bool,
    by_id: bool,
    t: headway_protocol::kafka_protocol::messages::fetch_request::FetchTopic,
    isolation: Isolation,
    cluster_action: bool,
) -> WantedTopic {
    // By id, the topic's name (an unknown id is an error of its own).
    let ctx = call.ctx;
    let name = match by_id {
        true => ctx
            .broker
            .topic_by_id(t.topic_id)
            .map(|t| t.name().to_string()),
        false => Some(t.topic.to_string()),
    };
    let readable = name
        .as_deref()
        .is_none_or(|name| authorize::topic(call, Operation::Read, name));
    // In a cluster a consumer reads from the leader; a follower's fetch (its replica id)
    // is served by whoever holds the partition.
    let not_leader =
        |name: &str, index: i32| ctx.cluster.as_ref().and_then(|c| c.not_leader(name, index));
    let partitions = t
        .partitions
        .into_iter()
        .map(|p| Wanted {
            index: PartitionIndex::new(p.partition),
            offset: Offset::new(p.fetch_offset),
            max_bytes: p.partition_max_bytes.max(0) as usize,
            current_leader_epoch: (p.current_leader_epoch >= 0).then_some(p.current_leader_epoch),
            last_fetched_epoch: (p.last_fetched_epoch >= 0).then_some(p.last_fetched_epoch),
            partition: match &name {
                _ if !cluster_action => Err(authorize::cluster_denied()),
                Some(name) if !readable => Err(authorize::topic_denied(name)),
                Some(name) if consumer && not_leader(name, p.partition).is_some() => {
                    Err(not_leader(name, p.partition).expect("checked"))
                }
                Some(name) => ctx
                    .broker
                    .readable_partition(name, PartitionIndex::new(p.partition)),
                None => Err(BrokerError::UnknownTopicId(t.topic_id)),
            },
        })
        .collect();
    WantedTopic {
        name: t.topic,
        id: t.topic_id,
        partitions,
        isolation,
    }
}

/// Reads the wanted partitions until `min_bytes` are there, a partition has an error,
/// `wait` passes or the broker shuts down.
async fn poll(
    ctx: &Ctx,
    conn: &Connection,
    topics: &[WantedTopic],
    replica: Option<ReplicaId>,
    wait: Duration,
    min_bytes: usize,
    max_bytes: usize,
) -> Polled {
    let deadline = Instant::now() + wait;
    let partitions = topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .filter_map(|w| w.partition.as_ref().ok());
    // A follower copies what the leader appended, synced or not: its fetch wakes at the
    // append, so the follower's sync runs beside the leader's instead of after it.
    let mut wakes = match replica {
        None => Wakes::new(partitions.map(|p| p.watch()).collect()),
        Some(_) => Wakes::on_appends(partitions.map(|p| p.watch_appends()).collect()),
    };
    let mut reading = Reading {
        ctx,
        topics,
        conn,
        replica,
        now_ms: ctx.broker.clock().time_ms(),
        min_bytes,
        catch_up: false,
    };
    let shutdown = ctx.shutdown.clone();
    let polled = long_poll::run(
        &conn.outbound,
        max_bytes,
        deadline,
        shutdown,
        &mut reading,
        &mut wakes,
    )
    .await;
    Polled {
        responses: polled.found,
        reserved: polled.reserved,
        waited: polled.waited,
        read: polled.looked,
        catch_up: reading.catch_up,
    }
}

/// A fetch's look: every wanted partition read once; enough when `min_bytes` are
/// there or a partition has an error.
struct Reading<'a> {
    ctx: &'a Ctx,
    topics: &'a [WantedTopic],
    conn: &'a Connection,
    /// The follower fetching, for a follower's fetch.
    replica: Option<ReplicaId>,
    now_ms: i64,
    min_bytes: usize,
    /// Some read went to the read threads.
    catch_up: bool,
}

impl Look for Reading<'_> {
    type Found = Vec<FetchableTopicResponse>;

    async fn look(&mut self, max_bytes: usize) -> Looked<Self::Found> {
        let all = read_all(self, max_bytes).await;
        self.catch_up |= all.pooled;
        Looked {
            found: all.responses,
            bytes: all.bytes,
            done: all.bytes >= self.min_bytes || all.errors,
        }
    }
}

/// One read of every wanted partition.
struct ReadAll {
    responses: Vec<FetchableTopicResponse>,
    /// Bytes of records in the responses.
    bytes: usize,
    /// Some partition had an error (which ends a long poll at once).
    errors: bool,
    /// Some read went to the read threads.
    pooled: bool,
}

/// Reads every wanted partition once.
async fn read_all(reading: &Reading<'_>, max_bytes: usize) -> ReadAll {
    let (topics, conn) = (reading.topics, reading.conn);
    let mut total = 0usize;
    let mut errors = false;
    let mut pooled = false;
    let mut responses = Vec::with_capacity(topics.len());
    for topic in topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for wanted in &topic.partitions {
            let remaining = max_bytes.saturating_sub(total);
            let first = total == 0;
            let (data, from_pool) = match reading.replica {
                None => {
                    let wants = (wanted, topic.isolation);
                    read_one(reading.ctx, wants, remaining, first, conn).await
                }
                Some(replica) => {
                    let fetch = (replica, reading.now_ms);
                    read_for_replica(wanted, fetch, remaining, first, conn).await
                }
            };
            pooled |= from_pool;
            errors |= data.error_code != 0 || data.diverging_epoch.epoch >= 0;
            total += data.records.as_ref().map_or(0, Bytes::len);
            partitions.push(data);
        }
        responses.push(
            FetchableTopicResponse::default()
                .with_topic(topic.name.clone())
                .with_topic_id(topic.id)
                .with_partitions(partitions),
        );
    }
    ReadAll {
        responses,
        bytes: total,
        errors,
        pooled,
    }
}

/// Reads one partition; also says whether the read went to the read threads (or the
/// remote tier).
async fn read_one(
    ctx: &Ctx,
    (wanted, isolation): (&Wanted, Isolation),
    remaining: usize,
    first: bool,
    conn: &Connection,
) -> (PartitionData, bool) {
    let (base, partition) = start_answer(wanted);
    let Some(partition) = partition else {
        return (base, false);
    };
    if remaining == 0 {
        return (
            offsets(base, partition).with_records(Some(Bytes::new())),
            false,
        );
    }
    if let Err(e) = partition.check_leader_epoch(wanted.current_leader_epoch) {
        return (error_data(base, &e), false);
    }
    // The connection's fair share of the read threads, taken around the read whether
    // the cache serves it or the threads do.
    let turn = conn.read_turn().await;
    let max_bytes = wanted.max_bytes.min(remaining);
    let mut read = partition
        .read_via(wanted.offset, max_bytes, &conn.reads, isolation)
        .await;
    // Batches the log cleaner emptied (kept for their offsets) hold no records; a
    // response of nothing else looks to some clients (librdkafka) like a record too
    // large to fetch, so the read moves on past them, as far as the high watermark.
    for _ in 0..limits::FETCH_EMPTY_BATCH_READS_MAX {
        let Some(next) = read
            .as_ref()
            .ok()
            .and_then(|r| past_empty_batches(&r.records))
        else {
            break;
        };
        let limit = match isolation {
            Isolation::ReadUncommitted => partition.high_watermark(),
            Isolation::ReadCommitted => partition.last_stable_offset(),
        };
        if next >= limit {
            break;
        }
        read = partition
            .read_via(next, max_bytes, &conn.reads, isolation)
            .await;
    }
    drop(turn);
    if let Err(BrokerError::InRemoteTier { .. }) = &read {
        if let Some(remote) = read_remote(ctx, partition, wanted.offset, max_bytes, isolation) {
            read = remote.await;
        }
    }
    answer(base, partition, read, remaining, first)
}

/// A read before a tiered partition's local log, from the remote tier; `None` when this
/// broker has no remote tier (the partition's answer is then `KAFKA_STORAGE_ERROR`).
fn read_remote<'a>(
    ctx: &'a Ctx,
    partition: &'a Arc<Partition>,
    offset: Offset,
    max_bytes: usize,
    isolation: Isolation,
) -> Option<impl std::future::Future<Output = Result<ReadResult, BrokerError>> + 'a> {
    let tier = ctx.tier.as_ref()?;
    let topic_id = ctx.broker.topic(partition.topic())?.id();
    let budget = ctx.broker.bulk_budget();
    Some(async move {
        tier.read(topic_id, partition, offset, max_bytes, isolation, budget)
            .await
    })
}

/// The start of a partition's answer, and its partition; without one (unknown, not
/// authorized) the answer is whole already.
fn start_answer(wanted: &Wanted) -> (PartitionData, Option<&Arc<Partition>>) {
    let base = PartitionData::default()
        .with_partition_index(wanted.index.value())
        .with_preferred_read_replica(BrokerId(-1));
    match &wanted.partition {
        Ok(p) => (base, Some(p)),
        Err(e) => (error_data(base, e), None),
    }
}

/// A partition's answer from its read (a client's or a follower's); also says whether
/// the read went to the read threads.
fn answer(
    base: PartitionData,
    partition: &Partition,
    read: Result<ReadResult, BrokerError>,
    remaining: usize,
    first: bool,
) -> (PartitionData, bool) {
    match read {
        Ok(read) => {
            // Only the response's first batch may exceed the response limit (KIP-74).
            let records = if !first && read.records.len() > remaining {
                Bytes::new()
            } else {
                read.records
            };
            let aborted = read.aborted.map(|found| {
                found
                    .iter()
                    .map(|t| {
                        AbortedTransaction::default()
                            .with_producer_id(ProducerId(t.producer_id.value()))
                            .with_first_offset(t.first_offset.value())
                    })
                    .collect()
            });
            let data = base
                .with_high_watermark(read.high_watermark.value())
                .with_last_stable_offset(read.last_stable_offset.value())
                .with_log_start_offset(read.log_start_offset.value())
                .with_aborted_transactions(aborted)
                .with_records(Some(records));
            (data, read.pooled)
        }
        Err(e @ BrokerError::OffsetOutOfRange { .. }) => (
            offsets(base, partition)
                .with_error_code(error_code(&e))
                .with_records(Some(Bytes::new())),
            false,
        ),
        Err(e) => (error_data(base, &e), false),
    }
}

/// Reads one partition for follower `replica` at `now_ms`: up to the leader's log end,
/// or the diverging epoch when the follower's history parts from the leader's.
async fn read_for_replica(
    wanted: &Wanted,
    (replica, now_ms): (ReplicaId, i64),
    remaining: usize,
    first: bool,
    conn: &Connection,
) -> (PartitionData, bool) {
    let (base, partition) = start_answer(wanted);
    let Some(partition) = partition else {
        return (base, false);
    };
    let fetch = ReplicaFetch {
        replica,
        fetch_offset: wanted.offset,
        current_leader_epoch: wanted.current_leader_epoch,
        last_fetched_epoch: wanted.last_fetched_epoch,
        max_bytes: wanted.max_bytes.min(remaining),
    };
    let turn = conn.read_turn().await;
    let read = partition
        .read_for_replica(&fetch, &conn.reads, now_ms)
        .await;
    drop(turn);
    match read {
        Ok(ReplicaRead::Records(read)) => answer(base, partition, Ok(read), remaining, first),
        // Before the leader's local log (a tiered partition's oldest segments, which
        // only the remote tier keeps): the follower starts over where the local log
        // starts.
        Err(
            e @ BrokerError::InRemoteTier {
                local_start_offset, ..
            },
        ) => {
            let data = offsets(base, partition)
                .with_error_code(error_code(&BrokerError::OffsetOutOfRange {
                    offset: wanted.offset,
                    log_start_offset: local_start_offset,
                    high_watermark: partition.high_watermark(),
                }))
                .with_log_start_offset(local_start_offset.value())
                .with_records(Some(Bytes::new()));
            tracing::debug!(error = %e, "a follower fetched before the local log");
            (data, false)
        }
        Err(e) => answer(base, partition, Err(e), remaining, first),
        Ok(ReplicaRead::Diverging {
            epoch,
            end_offset,
            high_watermark,
            log_start_offset,
        }) => {
            let diverging = EpochEndOffset::default()
                .with_epoch(epoch)
                .with_end_offset(end_offset);
            let data = base
                .with_high_watermark(high_watermark.value())
                .with_last_stable_offset(high_watermark.value())
                .with_log_start_offset(log_start_offset.value())
                .with_diverging_epoch(diverging)
                .with_records(Some(Bytes::new()));
            (data, false)
        }
    }
}

/// The offset after `records` when they are batches without a single record (and at
/// least one batch); `None` when any batch holds a record or the bytes do not parse.
fn past_empty_batches(records: &[u8]) -> Option<Offset> {
    let mut rest = records;
    let mut next = None;
    while !rest.is_empty() {
        let header = BatchHeader::parse(rest).ok()?;
        if header.records_count != 0 || header.total_bytes() > rest.len() {
            return None;
        }
        next = Some(Offset::new(header.last_offset() + 1));
        rest = &rest[header.total_bytes()..];
    }
    next
}

fn offsets(base: PartitionData, partition: &Partition) -> PartitionData {
    base.with_high_watermark(partition.high_watermark().value())
        .with_last_stable_offset(partition.last_stable_offset().value())
        .with_log_start_offset(partition.log_start_offset().value())
}

fn error_data(base: PartitionData, error: &BrokerError) -> PartitionData {
    base.with_error_code(error_code(error))
        .with_high_watermark(-1)
        .with_last_stable_offset(-1)
        .with_log_start_offset(-1)
        .with_records(Some(Bytes::new()))
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for FetchResponse {
    fn error_codes(&self, codes: &mut Codes) {
        codes.add(self.error_code);
        self.responses
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| codes.add(p.error_code));
    }
}
