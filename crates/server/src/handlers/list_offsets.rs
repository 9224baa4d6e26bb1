//! ListOffsets: the earliest offset, the latest (high watermark), or the first offset
//! at or after a timestamp. A timestamp lookup resolves to the first *batch* whose
//! newest record is at or after the timestamp, so a consumer seeking by time may see a
//! few earlier records of that batch.

use super::{pending, ApiSpec, Ctx, HandlerError, Reply};
use crate::errors::error_code;
use headway_broker::{BrokerError, Partition};
use headway_protocol::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use headway_protocol::kafka_protocol::messages::{ApiKey, ListOffsetsRequest, ListOffsetsResponse};
use headway_protocol::{decode_body, Request};
use std::sync::Arc;

pub const API: ApiSpec = ApiSpec {
    key: ApiKey::ListOffsets,
    min_version: 1,
    max_version: 6,
};

const LATEST_TIMESTAMP: i64 = -1;
const EARLIEST_TIMESTAMP: i64 = -2;

pub fn handle(ctx: &Arc<Ctx>, request: &Request) -> Result<Reply, HandlerError> {
    let body: ListOffsetsRequest = decode_body(request)?;
    // Leader epochs exist from v4; the encoder refuses a non-default one before.
    let leader_epoch = if request.api_version() >= 4 { 0 } else { -1 };
    let ctx = Arc::clone(ctx);
    pending(request, async move {
        let mut topics = Vec::with_capacity(body.topics.len());
        for t in body.topics {
            let topic = ctx.broker.topic(&t.name);
            let mut partitions = Vec::with_capacity(t.partitions.len());
            for p in t.partitions {
                let found = topic
                    .as_ref()
                    .and_then(|topic| topic.partition(p.partition_index).cloned())
                    .ok_or_else(|| BrokerError::UnknownTopicOrPartition {
                        topic: t.name.to_string(),
                        partition: p.partition_index,
                    });
                let result = match found {
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
        t if t >= 0 => {
            let found = tokio::task::spawn_blocking(move || partition.offset_for_timestamp(t))
                .await
                .map_err(|e| BrokerError::Storage(format!("lookup task failed: {e}")))??;
            Ok(found.map_or((-1, -1), |(offset, ts)| (offset.value(), ts)))
        }
        other => Err(BrokerError::InvalidRequest(format!(
            "unsupported timestamp {other}"
        ))),
    }
}
