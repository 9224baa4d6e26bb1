//! DeleteRecords: move partitions' log start offsets forward. Records below the new
//! start are no longer served; whole segments below it are deleted from disk.

use super::{pending, ApiSpec, Ctx, HandlerError, Reply};
use crate::errors::error_code;
use headway_broker::BrokerError;
use headway_protocol::kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, DeleteRecordsRequest, DeleteRecordsResponse,
};
use headway_protocol::{decode_body, Request};
use std::sync::Arc;

pub const API: ApiSpec = ApiSpec {
    key: ApiKey::DeleteRecords,
    min_version: 0,
    max_version: 2,
};

pub fn handle(ctx: &Arc<Ctx>, request: &Request) -> Result<Reply, HandlerError> {
    let body: DeleteRecordsRequest = decode_body(request)?;
    let ctx = Arc::clone(ctx);
    pending(request, async move {
        let mut topics = Vec::with_capacity(body.topics.len());
        for t in body.topics {
            let topic = ctx.broker.topic(&t.name);
            let mut partitions = Vec::with_capacity(t.partitions.len());
            for p in t.partitions {
                let partition = topic
                    .as_ref()
                    .and_then(|topic| topic.partition(p.partition_index).cloned());
                let outcome = match partition {
                    Some(partition) => {
                        tokio::task::spawn_blocking(move || partition.delete_records(p.offset))
                            .await
                            .unwrap_or_else(|e| Err(BrokerError::Storage(e.to_string())))
                    }
                    None => Err(BrokerError::UnknownTopicOrPartition {
                        topic: t.name.to_string(),
                        partition: p.partition_index,
                    }),
                };
                let result =
                    DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
                partitions.push(match outcome {
                    Ok(start) => result.with_low_watermark(start.value()),
                    Err(e) => result
                        .with_low_watermark(-1)
                        .with_error_code(error_code(&e)),
                });
            }
            topics.push(
                DeleteRecordsTopicResult::default()
                    .with_name(t.name)
                    .with_partitions(partitions),
            );
        }
        DeleteRecordsResponse::default().with_topics(topics)
    })
}
