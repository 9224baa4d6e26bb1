//! ListOffsets: the earliest offset, the latest (high watermark, or with
//! `isolation_level=1` the last stable offset), the record with the
//! largest timestamp (v7+), or the first record at or after a timestamp. A timestamp lookup finds the first batch whose newest
//! record is at or after the timestamp (time index, then batch headers), then decodes
//! that one batch to find the record; on a tiered partition the remote segments before
//! the local log are searched first (`crates/tier/src/lookup.rs`).

use crate::authorize;
use crate::call::{pending, Call, Ctx, Handler, HandlerError, Reply};
use crate::errors::error_code;
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_base::{Offset, PartitionIndex};
use headway_broker::{BrokerError, Isolation, Partition};
use headway_log::records;
use headway_protocol::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use headway_protocol::kafka_protocol::messages::{ApiKey, ListOffsetsRequest, ListOffsetsResponse};
use headway_protocol::{decode_body, Request};
use headway_tier::Tier;
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::ListOffsets,
    min_version: 1,
    max_version: 7,
    handle,
};

const LATEST_TIMESTAMP: i64 = -1;
const EARLIEST_TIMESTAMP: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: ListOffsetsRequest = decode_body(request)?;
    // Leader epochs exist from v4; the encoder refuses a non-default one before.
    let leader_epoch = if request.api_version() >= 4 { 0 } else { -1 };
    let isolation = Isolation::from_wire(body.isolation_level);
    let describable: Vec<bool> = body
        .topics
        .iter()
        .map(|t| authorize::topic(call, Operation::Describe, &t.name))
        .collect();
    let ctx = Arc::clone(ctx);
    pending(request, async move {
        let mut topics = Vec::with_capacity(body.topics.len());
        for (t, describable) in body.topics.into_iter().zip(describable) {
            let mut partitions = Vec::with_capacity(t.partitions.len());
            for p in t.partitions {
                let index = PartitionIndex::new(p.partition_index);
                let not_leader = ctx
                    .cluster
                    .as_ref()
                    .and_then(|c| c.not_leader(&t.name, p.partition_index));
                let readable = match describable {
                    true if not_leader.is_some() => Err(not_leader.expect("checked")),
                    true => ctx.broker.readable_partition(&t.name, index),
                    false => Err(authorize::topic_denied(&t.name)),
                };
                // A replicated partition's current epoch; 0 on a broker that runs alone.
                let epoch = match (&readable, leader_epoch) {
                    (Ok(partition), 0) => partition.role_epoch().map_or(0, |(epoch, _)| epoch),
                    _ => leader_epoch,
                };
                let result = match readable {
                    Ok(partition) => {
                        let remote = remote_tier(&ctx, &partition);
                        lookup(partition, p.timestamp, isolation, remote).await
                    }
                    Err(e) => Err(e),
                };
                let response = ListOffsetsPartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_leader_epoch(epoch);
                partitions.push(match result {
                    Ok(Some(found)) => response
                        .with_offset(found.offset.value())
                        .with_timestamp(found.timestamp_ms.unwrap_or(-1)),
                    Ok(None) => response.with_offset(-1).with_timestamp(-1),
                    Err(e) => response
                        .with_error_code(error_code(&e))
                        .with_offset(-1)
                        .with_timestamp(-1),
                });
            }
            topics.push(
                ListOffsetsTopicResponse::default()
                    .with_name(t.name)
                    .with_partitions(partitions),
            );
        }
        ListOffsetsResponse::default().with_topics(topics)
    })
}

/// What a partition of the request asks for: the wire's negative timestamps name the
/// special lookups.
enum Spec {
    Latest,
    Earliest,
    MaxTimestamp,
    /// The first record at or after this time (ms).
    Timestamp(i64),
}

impl Spec {
    fn from_wire(timestamp: i64) -> Result<Spec, BrokerError> {
        match timestamp {
            LATEST_TIMESTAMP => Ok(Spec::Latest),
            EARLIEST_TIMESTAMP => Ok(Spec::Earliest),
            MAX_TIMESTAMP => Ok(Spec::MaxTimestamp),
            t if t >= 0 => Ok(Spec::Timestamp(t)),
            other => Err(BrokerError::InvalidRequest(format!(
                "unsupported timestamp {other}"
            ))),
        }
    }
}

/// A lookup's answer: the offset, and the record's timestamp for lookups by time.
struct Found {
    offset: Offset,
    timestamp_ms: Option<i64>,
}

impl Found {
    fn at(offset: Offset) -> Found {
        Found {
            offset,
            timestamp_ms: None,
        }
    }
}

/// The offset (and timestamp) to answer for one partition; `None` when no record
/// matches (the answer then says -1).
/// With read_committed, the latest offset is the last stable offset and nothing at or
/// past it is found (Kafka's answer).
async fn lookup(
    partition: Arc<Partition>,
    timestamp: i64,
    isolation: Isolation,
    remote: Option<Remote>,
) -> Result<Option<Found>, BrokerError> {
    let limit = match isolation {
        Isolation::ReadUncommitted => partition.high_watermark(),
        Isolation::ReadCommitted => partition.last_stable_offset(),
    };
    let found = Box::pin(lookup_any(partition, timestamp, isolation, remote)).await?;
    // Lookups by time find records; the earliest and latest are positions.
    Ok(found.filter(|f| f.timestamp_ms.is_none() || f.offset < limit))
}

async fn lookup_any(
    partition: Arc<Partition>,
    timestamp: i64,
    isolation: Isolation,
    remote: Option<Remote>,
) -> Result<Option<Found>, BrokerError> {
    match Spec::from_wire(timestamp)? {
        Spec::Latest => Ok(Some(Found::at(match isolation {
            Isolation::ReadUncommitted => partition.high_watermark(),
            Isolation::ReadCommitted => partition.last_stable_offset(),
        }))),
        Spec::Earliest => Ok(Some(Found::at(partition.log_start_offset()))),
        Spec::MaxTimestamp => match partition.max_timestamp()? {
            Some(max) => Box::pin(lookup_any(partition, max, isolation, remote)).await,
            None => Ok(None),
        },
        Spec::Timestamp(t) => {
            if let Some((tier, topic_id)) = remote {
                let found = tier.offset_for_timestamp(topic_id, &partition, t).await?;
                if let Some((offset, timestamp_ms)) = found {
                    return Ok(Some(Found {
                        offset,
                        timestamp_ms: Some(timestamp_ms),
                    }));
                }
            }
            let searched = Arc::clone(&partition);
            let found = tokio::task::spawn_blocking(move || searched.offset_for_timestamp(t))
                .await
                .map_err(|e| BrokerError::Storage(format!("lookup task failed: {e}")))??;
            let Some((batch_offset, batch_max_ts)) = found else {
                return Ok(None);
            };
            let exact = first_record_at(&partition, batch_offset, t).await?;
            let (offset, timestamp_ms) = match exact {
                Some((offset, timestamp_ms)) => (Offset::new(offset), timestamp_ms),
                None => (batch_offset, batch_max_ts),
            };
            Ok(Some(Found {
                offset,
                timestamp_ms: Some(timestamp_ms),
            }))
        }
    }
}

/// The remote tier and the topic's id, for a lookup by time on a tiered partition whose
/// log starts before its local log (the tier checks that); `None` without a remote tier.
type Remote = (Arc<Tier>, uuid::Uuid);

fn remote_tier(ctx: &Ctx, partition: &Partition) -> Option<Remote> {
    let tier = ctx.tier.as_ref()?;
    let topic = ctx.broker.topic(partition.topic())?;
    Some((Arc::clone(tier), topic.id()))
}

/// The first record at or after `timestamp` in the batch that starts at `batch_offset`.
/// The batch is walked on a blocking thread: a compressed batch may take a moment to
/// inflate (at most [`records::RECORDS_SCAN_BYTES_MAX`]).
async fn first_record_at(
    partition: &Partition,
    batch_offset: Offset,
    timestamp: i64,
) -> Result<Option<(i64, i64)>, BrokerError> {
    // One byte is enough: a read always returns the first batch whole.
    let batch = partition.read(batch_offset, 1).await?.records;
    tokio::task::spawn_blocking(move || records::first_record_at(&batch, timestamp))
        .await
        .map_err(|e| BrokerError::Storage(format!("lookup task failed: {e}")))
}

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for ListOffsetsResponse {
    fn error_codes(&self, codes: &mut Codes) {
        self.topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| codes.add(p.error_code));
    }
}
