//! Produce: append batches and acknowledge them once durable.
//!
//! The synchronous part (validation, offset assignment, the write to the page cache)
//! runs on the connection's reader, in request order. The response waits for the
//! partition's group commit in the connection's writer, so later pipelined requests
//! are appended while this one waits, and share its fsync.
//!
//! Storage errors: a produce is refused with KAFKA_STORAGE_ERROR (retriable) when the
//! data directory is below `disk_free_bytes_min` or when its write fails and is undone
//! (a full disk); nothing of it stays in the log, and a retry succeeds once space
//! returns. A partition taken offline by a failed fsync answers the same code.
//!
//! Versions: advertised from 0 because librdkafka enables compression only when the
//! broker's Produce range covers its old feature probes (Kafka 4.x does the same), but
//! only v3+ (message format v2) is served: a v0-v2 request closes the connection with
//! a log line, and a v2 request carrying message-format v0/v1 batches gets
//! UNSUPPORTED_FOR_MESSAGE_FORMAT. v12 is v11 on the wire; it tells the broker that the
//! producer runs transactions version 2 (KIP-890), whose produces add their partition
//! to the transaction themselves.
//!
//! Transactional batches: before they are appended, the transaction coordinator checks
//! that their producer id and epoch are the request's transactional id's and that the
//! partition is in its open transaction (or, with v12+, adds it, durably). The reader
//! waits for that check, so the produces of one connection stay in order.

use crate::authorize;
use crate::call::{pending_with, Call, Handler, HandlerError, Reply, ReplyTiming};
use crate::cluster::view;
use crate::errors::{code_and_message, txn_error_code};
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_base::{PartitionIndex, ProducerEpoch, ProducerId, TopicPartition};
use headway_broker::io::timings::{self, ProduceStages, Timings};
use headway_broker::{Appended, Broker, BrokerError, Partition};
use headway_log::BatchHeader;
use headway_protocol::kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, ProduceRequest, ProduceResponse, TopicName,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, Request};
use headway_txn::TxnError;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::{Handle, RuntimeFlavor};

pub const HANDLER: Handler = Handler {
    key: ApiKey::Produce,
    min_version: 0,
    max_version: 12,
    handle,
};

/// Lowest version whose records are message format v2.
const MESSAGE_FORMAT_V2_MIN_VERSION: i16 = 3;
/// Lowest version of a producer running transactions version 2.
const TRANSACTIONS_V2_MIN_VERSION: i16 = 12;

/// The first version whose answer carries the current leader and its endpoint.
const LEADER_HINTS_MIN_VERSION: i16 = 10;

/// One partition's outcome of the synchronous part.
struct Outcome {
    index: i32,
    appended: Result<(Arc<Partition>, Appended), BrokerError>,
    /// When the append returned.
    at: Instant,
    /// acks=all, with the topic's `min.insync.replicas`.
    acks_all: Option<usize>,
    /// An acks=all wait on a replicated partition ends here (the request's arrival
    /// plus its `timeout_ms`) with REQUEST_TIMED_OUT.
    deadline: Deadline,
}

/// The request's `timeout_ms`, from its arrival.
#[derive(Clone, Copy)]
struct Deadline {
    at: Instant,
    timeout_ms: i64,
}

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let (ctx, arrival) = (call.ctx, call.arrival);
    if request.api_version() < MESSAGE_FORMAT_V2_MIN_VERSION {
        return Err(HandlerError::UnsupportedVersion {
            api_key: ApiKey::Produce,
            version: request.api_version(),
            min: MESSAGE_FORMAT_V2_MIN_VERSION,
            max: HANDLER.max_version,
        });
    }
    let body: ProduceRequest = decode_body(request)?;
    // Checked once per topic, not per batch: Write on the topic, and Write on the
    // transactional id of a transactional produce.
    let transactional_refusal = body.transactional_id.as_ref().and_then(|id| {
        (!authorize::transactional_id(call, Operation::Write, id)).then(|| id.to_string())
    });
    let refusals: Vec<Option<(i16, String)>> = body
        .topic_data
        .iter()
        .map(|t| refusal(call, transactional_refusal.as_deref(), &t.name))
        .collect();
    let hold = &mut *call.hold;
    let transaction = Transaction {
        ctx,
        transactional_id: body.transactional_id.as_ref().map(|id| &***id),
        implicit_add: request.api_version() >= TRANSACTIONS_V2_MIN_VERSION,
    };
    let acks = body.acks;
    let valid_acks = matches!(acks, -1..=1);
    let timeout_ms = i64::from(body.timeout_ms.max(0));
    let deadline = Deadline {
        at: arrival.started + Duration::from_millis(timeout_ms as u64),
        timeout_ms,
    };
    let largest = body
        .topic_data
        .iter()
        .flat_map(|t| t.partition_data.iter())
        .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
        .max()
        .unwrap_or(0);
    let histograms = Arc::clone(ctx.broker.timings());
    let stages = histograms.produce(largest);
    // A light producer's wait for durability is part of the bulk budget's signal.
    let light = largest <= timings::SMALL_REQUEST_BYTES;
    timings::observe(&stages.read, arrival.read);
    let mut topics = Vec::with_capacity(body.topic_data.len());
    let mut first = true;
    for (topic_data, refused) in body.topic_data.into_iter().zip(refusals) {
        // The topic's limit, read once for all its partitions; the broker's default
        // only for a topic created while this request is handled.
        let (max_message_bytes, min_insync) = ctx.broker.topic(&topic_data.name).map_or(
            (ctx.broker.config().log.max_message_bytes, 1),
            |topic| {
                let config = topic.config();
                (config.max_message_bytes, config.min_insync_replicas)
            },
        );
        let acks_all = (acks == -1).then_some(min_insync);
        let outcomes: Vec<Outcome> = topic_data
            .partition_data
            .into_iter()
            .map(|p| {
                let start = Instant::now();
                if first {
                    first = false;
                    let read = arrival.started + arrival.read;
                    timings::observe(&stages.handle, start.saturating_duration_since(read));
                }
                let appended = if let Some((code, resource)) = &refused {
                    Err(BrokerError::AuthorizationFailed {
                        code: *code,
                        resource: resource.clone(),
                    })
                } else if let Some(not_leader) = ctx
                    .cluster
                    .as_ref()
                    .and_then(|c| c.not_leader(&topic_data.name, p.index))
                {
                    Err(not_leader)
                } else if valid_acks {
                    append(
                        &ctx.broker,
                        &transaction,
                        &topic_data.name,
                        PartitionIndex::new(p.index),
                        p.records.as_deref(),
                        max_message_bytes,
                        acks_all,
                    )
                } else {
                    Err(BrokerError::InvalidRequiredAcks(acks))
                };
                let at = Instant::now();
                timings::observe(&stages.append, at - start);
                if let Ok((partition, _)) = &appended {
                    if partition.over_unsynced_bound() {
                        hold.push(Arc::clone(partition));
                    }
                }
                Outcome {
                    index: p.index,
                    appended,
                    at,
                    acks_all,
                    deadline,
                }
            })
            .collect();
        topics.push((topic_data.name, outcomes));
    }
    if acks == 0 {
        return Ok(Reply::Silent);
    }
    // KIP-951's leader hints, in a cluster, where the version carries them.
    let hints = ctx
        .cluster
        .clone()
        .filter(|_| request.api_version() >= LEADER_HINTS_MIN_VERSION);
    let listener = call.conn.listener.name.clone();
    pending_with(request, async move {
        let stages = histograms.produce(largest);
        let light = light.then_some(&*histograms);
        let mut responses = Vec::with_capacity(topics.len());
        for (name, outcomes) in topics {
            responses.push(topic_response(name, outcomes, stages, light).await);
        }
        let timing = ReplyTiming {
            started: arrival.started,
            ready: Instant::now(),
            reply: stages.reply.clone(),
            total: stages.total.clone(),
        };
        let mut body = ProduceResponse::default().with_responses(responses);
        if let Some(cluster) = hints {
            view::produce_hints(&cluster.image().metadata, &mut body, &listener);
        }
        (body, None, Some(timing))
    })
}

/// Why the authorizer refuses the produce to `topic`, if it does: the transactional id
/// refused (`transactional`), or no Write on the topic.
fn refusal(call: &Call<'_>, transactional: Option<&str>, topic: &str) -> Option<(i16, String)> {
    if let Some(id) = transactional {
        let code = ResponseError::TransactionalIdAuthorizationFailed.code();
        return Some((code, format!("transactional id {id}")));
    }
    (!authorize::topic(call, Operation::Write, topic)).then(|| {
        (
            ResponseError::TopicAuthorizationFailed.code(),
            format!("topic {topic}"),
        )
    })
}

/// What a transactional batch of the request is checked against.
struct Transaction<'a> {
    ctx: &'a crate::call::Ctx,
    transactional_id: Option<&'a str>,
    implicit_add: bool,
}

impl Transaction<'_> {
    /// Asks the coordinator whether the producer of `header` (a transactional batch)
    /// may write to `topic`'s partition `index`, waiting for its answer.
    fn check(
        &self,
        header: &BatchHeader,
        topic: &str,
        index: PartitionIndex,
    ) -> Result<(), BrokerError> {
        let Some(transactional_id) = self.transactional_id else {
            return Err(BrokerError::InvalidRequest(
                "a transactional batch in a produce without a transactional id".into(),
            ));
        };
        let (Some(producer_id), Some(epoch)) = (
            ProducerId::from_wire(header.producer_id),
            ProducerEpoch::from_wire(header.producer_epoch),
        ) else {
            return Err(BrokerError::InvalidRequest(
                "a transactional batch without a producer id and epoch".into(),
            ));
        };
        let tp = TopicPartition::new(topic, index);
        let check = crate::txn_checks::check_produce(
            self.ctx,
            transactional_id,
            producer_id,
            epoch,
            &tp,
            self.implicit_add,
        );
        // Blocks this reader (not the runtime): later requests of the connection wait,
        // as their batches must follow this one. On a runtime worker (the connection's
        // task) `block_in_place` hands the worker's other tasks away first; on a read
        // thread (a large produce), which runs in the runtime's context but is no
        // worker, it just runs the wait. Only a multi-threaded runtime can block a
        // task's thread; the broker runs on one (a test runtime may not).
        let Ok(handle) = Handle::try_current() else {
            return Err(BrokerError::InvalidRequest(
                "a transactional produce handled outside the broker's runtime".into(),
            ));
        };
        if handle.runtime_flavor() != RuntimeFlavor::MultiThread {
            return Err(BrokerError::InvalidRequest(
                "transactional produces need the broker's multi-threaded runtime".into(),
            ));
        }
        let checked = tokio::task::block_in_place(|| handle.block_on(check));
        checked.map_err(|e| BrokerError::TransactionRefused {
            // The previous transaction's markers are still being written, or the
            // coordinator (on another broker) is moving: a retriable code every client
            // retries a produce on (Kafka does the same).
            code: match e {
                TxnError::ConcurrentTransactions
                | TxnError::NotCoordinator
                | TxnError::CoordinatorLoadInProgress
                | TxnError::CoordinatorNotAvailable => ResponseError::NotEnoughReplicas.code(),
                _ => txn_error_code(&e),
            },
            reason: e.to_string(),
        })
    }
}

fn append(
    broker: &Broker,
    transaction: &Transaction<'_>,
    name: &TopicName,
    index: PartitionIndex,
    records: Option<&[u8]>,
    max_message_bytes: usize,
    acks_all: Option<usize>,
) -> Result<(Arc<Partition>, Appended), BrokerError> {
    // In a cluster the coordinators' topics are replicated topics only they write.
    if broker.is_internal(name) || headway_txn::is_coordinators_topic(name) {
        return Err(BrokerError::InternalTopic(name.to_string()));
    }
    let partition = broker.partition(name, index)?;
    let records = records.ok_or(BrokerError::MissingRecords)?;
    // Malformed bytes still answer the transaction check first, with the first
    // transactional header their batches show.
    let validation = headway_log::batch::validate_all(records);
    let transactional = match &validation {
        Ok(validated) => validated.first_transactional(),
        Err(invalid) => invalid.first_transactional.as_ref(),
    };
    if let Some(header) = transactional {
        transaction.check(header, name, index)?;
    }
    if let Some(min_insync) = acks_all {
        partition.require_in_sync(min_insync)?;
    }
    // Below `disk_free_bytes_min` the produce is refused (retriable) before it is
    // written, so the broker's own small writes keep finding room.
    broker.disk_space().reserve(records.len())?;
    let appended = partition.append(validation, max_message_bytes)?;
    Ok((partition, appended))
}

async fn topic_response(
    name: TopicName,
    outcomes: Vec<Outcome>,
    stages: &ProduceStages,
    light: Option<&Timings>,
) -> TopicProduceResponse {
    let mut partitions = Vec::with_capacity(outcomes.len());
    for outcome in outcomes {
        let durable = match outcome.appended {
            Ok((partition, appended)) => {
                let acks = (outcome.acks_all, outcome.deadline);
                let durable = acknowledged(&partition, &appended, acks).await;
                let waited = outcome.at.elapsed();
                timings::observe(&stages.durable, waited);
                if let Some(light) = light {
                    light.light_latency.note(waited);
                }
                durable.map(|_| appended)
            }
            Err(e) => Err(e),
        };
        let response = PartitionProduceResponse::default()
            .with_index(outcome.index)
            .with_log_append_time_ms(-1);
        partitions.push(match durable {
            Ok(a) => response
                .with_base_offset(a.base_offset.value())
                .with_log_start_offset(a.log_start_offset.value()),
            Err(e) => {
                let (code, message) = code_and_message(&e);
                response
                    .with_error_code(code)
                    .with_error_message(message)
                    .with_record_errors(record_errors(&e))
                    .with_base_offset(-1)
                    .with_log_start_offset(-1)
            }
        });
    }
    TopicProduceResponse::default()
        .with_name(name)
        .with_partition_responses(partitions)
}

/// Waits until the append may be acknowledged. On a replicated partition acks=all
/// waits for the in-sync replicas no longer than the request's `timeout_ms`, as Kafka
/// does: where the ISR cannot shrink (no controller quorum), the producer hears
/// REQUEST_TIMED_OUT instead of nothing. A broker that runs alone waits for its own
/// sync, as it always has.
async fn acknowledged(
    partition: &Partition,
    appended: &Appended,
    (acks_all, deadline): (Option<usize>, Deadline),
) -> Result<(), BrokerError> {
    let (all, min_insync) = (acks_all.is_some(), acks_all.unwrap_or(1));
    let offset = appended.log_end_offset;
    let wait = partition.wait_acknowledged(offset, all, min_insync, appended.leader_epoch);
    if !all || partition.role_epoch().is_none() {
        return wait.await;
    }
    let Deadline { at, timeout_ms } = deadline;
    tokio::time::timeout_at(at.into(), wait)
        .await
        .unwrap_or(Err(BrokerError::ReplicationTimedOut { timeout_ms }))
}

/// The records a refused batch was refused for (KIP-467), so that a client fails only
/// those records' sends and can retry the others: today the keyless records sent to a
/// compacted topic.
fn record_errors(error: &BrokerError) -> Vec<BatchIndexAndErrorMessage> {
    let BrokerError::KeylessRecords {
        topic,
        partition,
        keyless,
    } = error
    else {
        return Vec::new();
    };
    let message =
        format!("a record without a key cannot go to compacted topic {topic}-{partition}");
    let message = StrBytes::from_string(message);
    keyless
        .indexes
        .iter()
        .map(|&index| {
            BatchIndexAndErrorMessage::default()
                .with_batch_index(i32::try_from(index).unwrap_or(i32::MAX))
                .with_batch_index_error_message(Some(message.clone()))
        })
        .collect()
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for ProduceResponse {
    fn error_codes(&self, codes: &mut Codes) {
        self.responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .for_each(|p| codes.add(p.error_code));
    }
}
