//! ListOffsets: the earliest offset, the latest (high watermark), the record with the
//! largest timestamp (v7+), or the first record at or after a timestamp. A timestamp lookup finds the first batch whose newest
//! record is at or after the timestamp (time index, then batch headers), then decodes
//! that one batch to find the record.

use super::{pending, Call, Handler, HandlerError, Reply};
use crate::errors::error_code;
use headway_broker::{BrokerError, Offset, Partition};
use headway_log::records;
use headway_protocol::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use headway_protocol::kafka_protocol::messages::{ApiKey, ListOffsetsRequest, ListOffsetsResponse};
use headway_protocol::{decode_body, Request};
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
    let ctx = Arc::clone(ctx);
    pending(request, async move {
        let mut topics = Vec::with_capacity(body.topics.len());
        for t in body.topics {
            let mut partitions = Vec::with_capacity(t.partitions.len());
            for p in t.partitions {
                let result = match ctx.broker.readable_partition(&t.name, p.partition_index) {
                    Ok(partition) => lookup(partition, p.timestamp).await,
                    Err(e) => Err(e),
                };
                let response = ListOffsetsPartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_leader_epoch(leader_epoch);
                partitions.push(match result {
                    Ok((offset, timestamp)) => {
                        response.with_offset(offset).with_timestamp(timestamp)
                    }
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

/// The offset and timestamp to answer for one partition.
async fn lookup(partition: Arc<Partition>, timestamp: i64) -> Result<(i64, i64), BrokerError> {
    match timestamp {
        LATEST_TIMESTAMP => Ok((partition.high_watermark().value(), -1)),
        EARLIEST_TIMESTAMP => Ok((partition.log_start_offset().value(), -1)),
        MAX_TIMESTAMP => match partition.max_timestamp()? {
            Some(max) => Box::pin(lookup(partition, max)).await,
            None => Ok((-1, -1)),
        },
        t if t >= 0 => {
            let searched = Arc::clone(&partition);
            let found = tokio::task::spawn_blocking(move || searched.offset_for_timestamp(t))
                .await
                .map_err(|e| BrokerError::Storage(format!("lookup task failed: {e}")))??;
            match found {
                None => Ok((-1, -1)),
                Some((batch_offset, batch_max_ts)) => {
                    let exact = first_record_at(&partition, batch_offset, t).await?;
                    Ok(exact.unwrap_or((batch_offset.value(), batch_max_ts)))
                }
            }
        }
        other => Err(BrokerError::InvalidRequest(format!(
            "unsupported timestamp {other}"
        ))),
    }
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
