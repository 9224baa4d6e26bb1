//! ShareFetch: a share group member's fetch. It carries the member's share session
//! step (epoch 0 opens, -1 closes, otherwise the next epoch), acknowledgements of
//! records it got before (applied first, answered per partition), and the
//! partitions to add to or forget from its session. The answer hands out records of
//! the session's partitions: each partition's share-partition state says where to
//! read ([`ShareCoordinator::next_fetch_offset`]), the read returns whole batches,
//! and the state acquires records among them for the member under a lock of
//! `share_record_lock_duration_ms`; the answer carries the batches and the acquired
//! ranges (AcquiredRecords), and the client hands out only acquired records.
//!
//! When nothing can be acquired the fetch long-polls, as Fetch does
//! ([`super::long_poll`]), bounded by MaxWaitMs (and `limits::FETCH_WAIT_MS_MAX`): it
//! looks again when a partition's high watermark moves or records go back to the group
//! (a lock expired, a release), and answers as soon as it acquired something (MinBytes is taken as 1). MaxRecords
//! bounds the records acquired (and `limits::SHARE_FETCH_RECORDS_MAX`), MaxBytes the
//! bytes read; BatchSize is not used (acquired ranges follow the log's batches).
//! Records are read as read_uncommitted; control batches are never handed out.
//!
//! Versions 1 and 2 ([`headway_protocol::share_v2`]). Version 2 adds ShareAcquireMode:
//! both modes acquire at most MaxRecords records (record-limit as Kafka does;
//! batch-optimized, which Kafka may round up to whole batches, too), and a mode that is
//! neither gets INVALID_REQUEST. It also adds IsRenewAck: the acknowledgements hold
//! renewals (type 4), and such a fetch applies them and answers at once, acquiring
//! nothing, as Kafka does.
//!
//! Only partitions assigned to the member are read (in a cluster, where the group's
//! coordinator assigns and this broker does not know the members, only partitions this
//! broker leads: the others answer NOT_LEADER_OR_FOLLOWER). Reads are held to a Fetch's
//! budgets: each look reserves outbound bytes from the connection's budget and reads no
//! more (the reservation stays with the answer until it is written), and each read
//! takes the connection's turn on the read threads and goes through
//! [`Partition::read_via`] (the page cache, else the cold-read threads).
//!
//! Needs Read on the group (GROUP_AUTHORIZATION_FAILED for the whole request) and on
//! each topic: the partitions of a topic the principal may not read are answered
//! TOPIC_AUTHORIZATION_FAILED, and their acknowledgements are not applied.

use super::long_poll::{self, Look, Looked, Wakes};
use crate::authorize;
use crate::call::Connection;
use crate::call::{pending, pending_with, Call, Ctx, Handler, HandlerError, Reply};
use crate::errors::{ack_failure_code, error_code, share_error_code};
use crate::outbound::Reservation;
use crate::requests::ErrorCodes;
use bytes::Bytes;
use headway_auth::acl::Operation;
use headway_base::{limits, Offset, PartitionIndex, TopicPartition};
use headway_broker::{BatchHeader, Isolation, Partition};
use headway_protocol::kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, LeaderIdAndEpoch, PartitionData, ShareFetchableTopicResponse,
};
use headway_protocol::kafka_protocol::messages::{ApiKey, ShareFetchResponse};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::share_v2::{decode_share_fetch, ShareAcquireMode, ShareFetchAnswer};
use headway_protocol::Request;
use headway_share::{AckBatch, AckFailure, Acquired, LogBatch, MemberId, ShareCoordinator};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use uuid::Uuid;

/// About what a waiting share fetch keeps per partition named or acknowledgement batch.
const SHARE_BOOKKEEPING_BYTES: usize = 96;

pub const HANDLER: Handler = Handler {
    key: ApiKey::ShareFetch,
    min_version: 1,
    max_version: 2,
    handle,
};

/// Where the next fetch starts among its partitions.
static ROTATION: AtomicUsize = AtomicUsize::new(0);

/// MaxRecords when a request leaves it at 0 or below (the Java client's
/// `max.poll.records` default).
const MAX_RECORDS_DEFAULT: u32 = 500;

/// A topic partition named on the wire by topic id: its name, if the id is known.
pub(super) type Named = Option<TopicPartition>;

/// Acknowledgements of one request, by topic id and partition.
pub(super) type Acks = Vec<((Uuid, i32), Named, Vec<AckBatch>)>;

/// Applies `acks` for the member; the result by (topic id, partition): 0 or an
/// error code.
pub(super) async fn acknowledge(
    shares: &ShareCoordinator,
    group_id: &str,
    member_id: &str,
    acks: Acks,
) -> BTreeMap<(Uuid, i32), i16> {
    let mut codes = BTreeMap::new();
    let mut known = Vec::new();
    let mut ids = BTreeMap::new();
    for (key, named, batches) in acks {
        match named {
            None => {
                codes.insert(key, ResponseError::UnknownTopicId.code());
            }
            Some(tp) => {
                ids.insert(tp.clone(), key);
                known.push((tp, batches));
            }
        }
    }
    if !known.is_empty() {
        for (tp, result) in shares.acknowledge(group_id, member_id, known).await {
            let code = match &result {
                Ok(()) => 0,
                Err(e @ AckFailure::Record(_)) | Err(e @ AckFailure::UnknownType(_)) => {
                    tracing::debug!(group = group_id, member = member_id, %tp, error = %e, "acknowledgement refused");
                    ack_failure_code(e)
                }
                Err(e) => ack_failure_code(e),
            };
            codes.insert(ids[&tp], code);
        }
    }
    codes
}

/// The topic partition a topic id and index name, if the topic is known.
pub(super) fn named(ctx: &Ctx, topic_id: Uuid, partition: i32) -> Named {
    let topic = ctx.broker.topic_by_id(topic_id)?;
    Some(TopicPartition::new(
        topic.name(),
        PartitionIndex::new(partition),
    ))
}

/// The topics (by id) of `ids` the call's principal may not read; unknown ids are not
/// among them.
pub(super) fn unreadable(call: &Call<'_>, ids: impl Iterator<Item = Uuid>) -> BTreeSet<Uuid> {
    let mut seen = BTreeSet::new();
    let mut denied = BTreeSet::new();
    for id in ids {
        if !seen.insert(id) {
            continue;
        }
        if let Some(topic) = call.ctx.broker.topic_by_id(id) {
            if !authorize::topic(call, Operation::Read, topic.name()) {
                denied.insert(id);
            }
        }
    }
    denied
}

/// Sets aside the acknowledgements of unreadable topics: they get
/// TOPIC_AUTHORIZATION_FAILED and are not applied.
pub(super) fn refuse_acks(acks: &mut Acks, denied: &BTreeSet<Uuid>) -> BTreeMap<(Uuid, i32), i16> {
    let mut refused = BTreeMap::new();
    acks.retain(|(key, ..)| {
        let keep = !denied.contains(&key.0);
        if !keep {
            refused.insert(*key, ResponseError::TopicAuthorizationFailed.code());
        }
        keep
    });
    refused
}

/// An acknowledgement batch from the wire.
pub(super) fn ack_batch(first: i64, last: i64, types: Vec<i8>) -> AckBatch {
    AckBatch {
        first: Offset::new(first),
        last: Offset::new(last),
        types,
    }
}

fn error_response(code: i16, message: String) -> ShareFetchAnswer {
    ShareFetchAnswer(
        ShareFetchResponse::default()
            .with_error_code(code)
            .with_error_message(Some(StrBytes::from_string(message))),
    )
}

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let (body, v2) = decode_share_fetch(request)?;
    if ShareAcquireMode::from_wire(v2.acquire_mode).is_none() {
        let e = error_response(
            ResponseError::InvalidRequest.code(),
            format!("unknown share acquire mode {}", v2.acquire_mode),
        );
        return pending(request, async move { e });
    }
    let (Some(group_id), Some(member_id)) = (body.group_id.clone(), body.member_id.clone()) else {
        let e = error_response(
            ResponseError::InvalidRequest.code(),
            "a share fetch names its group and member".into(),
        );
        return pending(request, async move { e });
    };
    let (group_id, member_id) = (group_id.to_string(), member_id.to_string());
    if let Some(code) = authorize::group_refusal(call, Operation::Read, &group_id) {
        let e = error_response(code, format!("not authorized to read group {group_id}"));
        return pending(request, async move { e });
    }
    let epoch = body.share_session_epoch;
    let mut add = Vec::new();
    let mut acks: Acks = Vec::new();
    for t in &body.topics {
        for p in &t.partitions {
            add.push((t.topic_id, p.partition_index));
            if !p.acknowledgement_batches.is_empty() {
                let batches = p
                    .acknowledgement_batches
                    .iter()
                    .map(|b| ack_batch(b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                    .collect();
                acks.push((
                    (t.topic_id, p.partition_index),
                    named(ctx, t.topic_id, p.partition_index),
                    batches,
                ));
            }
        }
    }
    let forget: Vec<(Uuid, i32)> = body
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
        .collect();
    // In request order, on the connection's reader: session epochs are checked in the
    // order the member sent them.
    let session = ctx
        .shares
        .session_step(&group_id, &member_id, epoch, &add, &forget);
    tracing::debug!(group = %group_id, member = %member_id, epoch, acks = acks.len(),
        ok = session.is_ok(), "share fetch");
    let session = match session {
        Ok(partitions) => partitions,
        Err(e) => {
            let body = error_response(share_error_code(&e), e.to_string());
            return pending(request, async move { body });
        }
    };
    let denied = unreadable(call, add.iter().chain(session.iter()).map(|(id, _)| *id));
    let refused_acks = refuse_acks(&mut acks, &denied);
    let wait =
        Duration::from_millis((body.max_wait_ms.max(0) as u64).min(limits::FETCH_WAIT_MS_MAX));
    let max_bytes = (body.max_bytes.max(0) as usize).min(limits::FETCH_RESPONSE_BYTES_MAX);
    let max_records = match body.max_records {
        n if n <= 0 => MAX_RECORDS_DEFAULT,
        n => (n as u32).min(limits::SHARE_FETCH_RECORDS_MAX),
    };
    // What the waiting answer keeps, counted against the connection's long-poll bound.
    let named = add.len() + session.len() + acks.iter().map(|(_, _, b)| b.len()).sum::<usize>();
    let held = call.conn.hold_long_poll(named * SHARE_BOOKKEEPING_BYTES);
    let (ctx, conn) = (Arc::clone(ctx), Arc::clone(call.conn));
    pending_with(request, async move {
        let _held = held;
        let mut ack_codes = acknowledge(&ctx.shares, &group_id, &member_id, acks).await;
        ack_codes.extend(refused_acks);
        tracing::debug!(group = %group_id, member = %member_id, epoch, ?ack_codes, "share fetch acknowledged");
        let mut fetched = BTreeMap::new();
        let mut reserved = None;
        if epoch == -1 {
            ctx.shares.release_member(&group_id, &member_id);
        } else if v2.is_renew_ack {
            // A renewal only: the member is still working on what it holds.
        } else {
            let member: MemberId = Arc::from(member_id.as_str());
            let poll = Poll {
                ctx: &ctx,
                conn: &conn,
                group_id: &group_id,
                member: &member,
                wait,
                max_bytes,
                max_records,
                denied: &denied,
            };
            let (found, kept) = poll.run(&session).await;
            (fetched, reserved) = (found, Some(kept));
        }
        let lock_ms = ctx
            .shares
            .group_config(&group_id)
            .partition
            .record_lock_duration_ms;
        let node_id = ctx.broker.config().node_id;
        let body = response(ack_codes, fetched, node_id)
            .with_acquisition_lock_timeout_ms(lock_ms.min(i64::from(i32::MAX)) as i32);
        (ShareFetchAnswer(body), reserved, None)
    })
}

/// What one partition's fetch found.
#[derive(Default)]
struct Fetched {
    error_code: i16,
    records: Bytes,
    acquired: Vec<Acquired>,
}

/// One long poll of a member's session partitions.
struct Poll<'a> {
    ctx: &'a Ctx,
    /// The connection: its outbound byte budget and its share of the read threads.
    conn: &'a Connection,
    group_id: &'a str,
    member: &'a MemberId,
    wait: Duration,
    max_bytes: usize,
    max_records: u32,
    /// The topics the member may not read: their partitions answer
    /// TOPIC_AUTHORIZATION_FAILED.
    denied: &'a BTreeSet<Uuid>,
}

impl Poll<'_> {
    /// Returns what was found, and the outbound bytes reserved for it (kept until the
    /// answer is written).
    async fn run(&self, session: &[(Uuid, i32)]) -> (BTreeMap<(Uuid, i32), Fetched>, Reservation) {
        let ctx = self.ctx;
        // Only partitions assigned to the member are read: records of others are never
        // acquired for it (a partition it was just moved off answers nothing).
        let assigned = ctx.shares.assignment(self.group_id, self.member);
        let deadline = Instant::now() + self.wait;
        let shutdown = ctx.shutdown.clone();
        // Partitions that exist, and the rest answered with an error.
        let mut out = BTreeMap::new();
        let mut partitions: Vec<((Uuid, i32), TopicPartition, Arc<Partition>)> = Vec::new();
        for &(id, index) in session {
            if self.denied.contains(&id) {
                let code = ResponseError::TopicAuthorizationFailed.code();
                out.insert(
                    (id, index),
                    Fetched {
                        error_code: code,
                        ..Fetched::default()
                    },
                );
                continue;
            }
            let named = named(ctx, id, index);
            if let Some(tp) = &named {
                // In a cluster the group's coordinator assigns, elsewhere; a partition
                // led by another broker is answered NOT_LEADER_OR_FOLLOWER so the
                // client looks its leader up again.
                if let Some(cluster) = &ctx.cluster {
                    if cluster.not_leader(&tp.topic, index).is_some() {
                        out.insert(
                            (id, index),
                            Fetched {
                                error_code: ResponseError::NotLeaderOrFollower.code(),
                                ..Fetched::default()
                            },
                        );
                        continue;
                    }
                } else {
                    let mine = assigned
                        .get(&tp.topic)
                        .is_some_and(|ps| ps.contains(&index));
                    if !mine {
                        continue;
                    }
                }
            }
            let found = named.and_then(|tp| {
                let p = ctx.broker.partition(&tp.topic, tp.partition).ok()?;
                Some((tp, p))
            });
            match found {
                Some((tp, p)) => partitions.push(((id, index), tp, p)),
                None => {
                    let code = match ctx.broker.topic_by_id(id) {
                        None => ResponseError::UnknownTopicId.code(),
                        Some(_) => ResponseError::UnknownTopicOrPartition.code(),
                    };
                    out.insert(
                        (id, index),
                        Fetched {
                            error_code: code,
                            ..Fetched::default()
                        },
                    );
                }
            }
        }
        // Start at a different partition each time so that one busy partition does not
        // take every fetch's record budget.
        if !partitions.is_empty() {
            let turn = ROTATION.fetch_add(1, Ordering::Relaxed) % partitions.len();
            partitions.rotate_left(turn);
        }
        // Records going back to the group (a release, an expired lock) wake the wait as
        // a move of a partition's high watermark does.
        let watches = partitions.iter().map(|(_, _, p)| p.watch()).collect();
        let mut wakes = Wakes::new(watches).or_released(ctx.shares.released());
        let mut looking = Looking {
            poll: self,
            partitions: &partitions,
        };
        let polled = long_poll::run(
            &self.conn.outbound,
            self.max_bytes,
            deadline,
            shutdown,
            &mut looking,
            &mut wakes,
        )
        .await;
        out.extend(polled.found);
        (out, polled.reserved)
    }
}

/// A share fetch's look: each partition once, acquiring what it can; enough when it
/// acquired something or a partition has an error (MinBytes is taken as 1).
struct Looking<'a> {
    poll: &'a Poll<'a>,
    partitions: &'a [((Uuid, i32), TopicPartition, Arc<Partition>)],
}

impl Look for Looking<'_> {
    type Found = BTreeMap<(Uuid, i32), Fetched>;

    async fn look(&mut self, max_bytes: usize) -> Looked<Self::Found> {
        let found = self.poll.round(self.partitions, max_bytes).await;
        let done = found
            .values()
            .any(|f| !f.acquired.is_empty() || f.error_code != 0);
        let bytes = found.values().map(|f| f.records.len()).sum();
        Looked { found, bytes, done }
    }
}

impl Poll<'_> {
    /// Looks at each partition once and acquires what it can.
    async fn round(
        &self,
        partitions: &[((Uuid, i32), TopicPartition, Arc<Partition>)],
        max_bytes: usize,
    ) -> BTreeMap<(Uuid, i32), Fetched> {
        let mut out = BTreeMap::new();
        let mut records_left = self.max_records;
        let mut bytes_left = max_bytes;
        for (key, tp, p) in partitions {
            if records_left == 0 || bytes_left == 0 {
                break;
            }
            let found = self.fetch_one(*key, tp, p, records_left, bytes_left).await;
            let records: u64 = found
                .acquired
                .iter()
                .map(|a| (a.last.value() - a.first.value() + 1) as u64)
                .sum();
            records_left = records_left.saturating_sub(records as u32);
            bytes_left = bytes_left.saturating_sub(found.records.len());
            if !found.acquired.is_empty() || found.error_code != 0 {
                out.insert(*key, found);
            }
        }
        out
    }
}

impl Poll<'_> {
    /// Reads one partition where its share-partition says and acquires what the read
    /// returned; the answer keeps only the batches that hold acquired records.
    async fn fetch_one(
        &self,
        key: (Uuid, i32),
        tp: &TopicPartition,
        p: &Partition,
        records_left: u32,
        bytes_left: usize,
    ) -> Fetched {
        let shares = &self.ctx.shares;
        // In a cluster the share-partition is read from the replicated share state
        // once per leader epoch of the partition, before it is served.
        if let Some((epoch, true)) = p.role_epoch() {
            if let Err(e) = shares.ensure_loaded(self.group_id, tp, epoch).await {
                return Fetched {
                    error_code: share_error_code(&e),
                    ..Fetched::default()
                };
            }
        }
        let Some(offset) =
            shares.next_fetch_offset(self.group_id, tp, p.log_start_offset(), p.high_watermark())
        else {
            return Fetched::default();
        };
        // The connection's share of the read threads, around the read; the page cache
        // or the read threads serve it, as for a Fetch.
        let turn = self.conn.read_turn().await;
        let read = p
            .read_via(
                offset,
                bytes_left,
                &self.conn.reads,
                Isolation::ReadUncommitted,
            )
            .await;
        drop(turn);
        let read = match read {
            Ok(read) => read,
            Err(e) => {
                return Fetched {
                    error_code: error_code(&e),
                    ..Fetched::default()
                }
            }
        };
        let Ok(headers) = headway_log::batch::parse_all(&read.records) else {
            return Fetched {
                error_code: ResponseError::CorruptMessage.code(),
                ..Fetched::default()
            };
        };
        let batches: Vec<LogBatch> = headers
            .iter()
            .map(|h| LogBatch {
                first: Offset::new(h.base_offset),
                last: Offset::new(h.last_offset()),
                skip: h.is_control(),
            })
            .collect();
        let acquired = shares.acquire(
            self.group_id,
            self.member,
            tp,
            key,
            &batches,
            records_left,
            p.high_watermark(),
        );
        let records = match (acquired.first(), acquired.last()) {
            (Some(first), Some(last)) => holding(&read.records, &headers, first.first, last.last),
            _ => Bytes::new(),
        };
        Fetched {
            error_code: 0,
            records,
            acquired,
        }
    }
}

/// The batches of `records` from the one holding `first` to the one holding `last`.
fn holding(records: &Bytes, headers: &[BatchHeader], first: Offset, last: Offset) -> Bytes {
    let mut start = 0;
    let mut end = 0;
    let mut at = 0;
    for h in headers {
        let size = h.total_bytes();
        if h.last_offset() < first.value() {
            start = at + size;
        }
        if h.base_offset <= last.value() {
            end = at + size;
        }
        at += size;
    }
    let end = end.min(records.len());
    records.slice(start.min(end)..end)
}

fn response(
    ack_codes: BTreeMap<(Uuid, i32), i16>,
    fetched: BTreeMap<(Uuid, i32), Fetched>,
    node_id: i32,
) -> ShareFetchResponse {
    let mut by_topic: BTreeMap<Uuid, Vec<PartitionData>> = BTreeMap::new();
    let keys: std::collections::BTreeSet<(Uuid, i32)> =
        ack_codes.keys().chain(fetched.keys()).copied().collect();
    let mut fetched = fetched;
    for key in keys {
        let f = fetched.remove(&key).unwrap_or_default();
        let data = PartitionData::default()
            .with_partition_index(key.1)
            .with_error_code(f.error_code)
            .with_acknowledge_error_code(ack_codes.get(&key).copied().unwrap_or(0))
            .with_current_leader(
                LeaderIdAndEpoch::default()
                    .with_leader_id(node_id)
                    .with_leader_epoch(0),
            )
            .with_records(Some(f.records))
            .with_acquired_records(
                f.acquired
                    .iter()
                    .map(|a| {
                        AcquiredRecords::default()
                            .with_first_offset(a.first.value())
                            .with_last_offset(a.last.value())
                            .with_delivery_count(a.delivery_count.min(i16::MAX as u16) as i16)
                    })
                    .collect(),
            );
        by_topic.entry(key.0).or_default().push(data);
    }
    ShareFetchResponse::default().with_responses(
        by_topic
            .into_iter()
            .map(|(id, partitions)| {
                ShareFetchableTopicResponse::default()
                    .with_topic_id(id)
                    .with_partitions(partitions)
            })
            .collect(),
    )
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for ShareFetchAnswer {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_batches_holding_acquired_records_are_kept() {
        let batch = |records: usize| {
            headway_broker::internal_log::encode_batch(
                (0..records).map(|i| (Bytes::from(vec![i as u8]), None)),
                0,
            )
        };
        let mut all = Vec::new();
        let mut sizes = Vec::new();
        for (base, n) in [(0i64, 3usize), (3, 2), (5, 4)] {
            let mut b = batch(n).to_vec();
            headway_log::batch::set_base_offset(&mut b, base);
            sizes.push(b.len());
            all.extend_from_slice(&b);
        }
        let all = Bytes::from(all);
        let headers = headway_log::batch::parse_all(&all).unwrap();
        let kept = holding(&all, &headers, Offset::new(3), Offset::new(4));
        assert_eq!(kept.len(), sizes[1]);
        let kept = holding(&all, &headers, Offset::new(2), Offset::new(5));
        assert_eq!(kept.len(), all.len());
        let kept = holding(&all, &headers, Offset::new(0), Offset::new(0));
        assert_eq!(kept.len(), sizes[0]);
    }
}
