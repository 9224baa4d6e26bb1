//! DeleteRecords: move partitions' log start offsets forward. Records below the new
//! start are no longer served; whole segments below it are deleted from disk. Each
//! topic needs Delete on it (TOPIC_AUTHORIZATION_FAILED per partition otherwise).

use crate::authorize;
use crate::call::{pending, Call, Handler, HandlerError, Reply};
use crate::errors::error_code;
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_base::PartitionIndex;
use headway_broker::partition::DeleteRecordsTo;
use headway_broker::BrokerError;
use headway_protocol::kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, DeleteRecordsRequest, DeleteRecordsResponse,
};
use headway_protocol::{decode_body, Request};
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::DeleteRecords,
    min_version: 0,
    max_version: 2,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let ctx = call.ctx;
    let body: DeleteRecordsRequest = decode_body(request)?;
    let denied = authorize::denied_topics(
        call,
        Operation::Delete,
        body.topics.iter().map(|t| t.name.as_str()),
    );
    let ctx = Arc::clone(ctx);
    pending(request, async move {
        let mut topics = Vec::with_capacity(body.topics.len());
        for t in body.topics {
            let mut partitions = Vec::with_capacity(t.partitions.len());
            for p in t.partitions {
                let index = PartitionIndex::new(p.partition_index);
                let to = DeleteRecordsTo::from_wire(p.offset);
                let outcome = match ctx.broker.partition(&t.name, index) {
                    _ if denied.contains(t.name.as_str()) => Err(authorize::topic_denied(&t.name)),
                    Ok(partition) => {
                        tokio::task::spawn_blocking(move || partition.delete_records(to))
                            .await
                            .unwrap_or_else(|e| Err(BrokerError::Storage(e.to_string())))
                    }
                    Err(e) => Err(e),
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

/// The codes counted on `/metrics`: every one the answer carries.
impl ErrorCodes for DeleteRecordsResponse {
    fn error_codes(&self, codes: &mut Codes) {
        self.topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| codes.add(p.error_code));
    }
}
