//! ReadShareGroupState and WriteShareGroupState: in a cluster, the leader of a data
//! partition reads and writes its share-partitions' state at the leader of their
//! partition of `__share_group_state` (`crate::cluster::share_state`), which keeps it
//! in a [`StateStore`](headway_share::state_store::StateStore). A partition of the
//! state this broker does not lead (or a broker alone) answers `NOT_COORDINATOR`,
//! one still loading `COORDINATOR_LOAD_IN_PROGRESS`, a write or read of an older
//! leader epoch than the store has seen `FENCED_LEADER_EPOCH`.
//!
//! A write is answered once every in-sync replica of the state holds it. The work
//! starts when the request is read (a leader sends every write for this broker over
//! one connection, whose replies go out in order). A broker's request: needs
//! ClusterAction on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise).

use crate::authorize;
use crate::call::{pending, Call, Ctx, Handler, HandlerError, Reply};
use crate::cluster::share_state::{read_result, record_of, store_code};
use crate::requests::{Codes, ErrorCodes};
use headway_auth::acl::Operation;
use headway_base::{PartitionIndex, TopicPartition};
use headway_protocol::kafka_protocol::messages::{
    read_share_group_state_response as read_resp, write_share_group_state_response as write_resp,
    ApiKey, ReadShareGroupStateRequest, ReadShareGroupStateResponse, WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
};
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, Request};
use headway_share::state_store::{StateStore, StateStores, StoreError};
use std::sync::Arc;

pub const READ: Handler = Handler {
    key: ApiKey::ReadShareGroupState,
    min_version: 0,
    max_version: 0,
    handle: handle_read,
};

pub const WRITE: Handler = Handler {
    key: ApiKey::WriteShareGroupState,
    min_version: 0,
    max_version: 0,
    handle: handle_write,
};

/// The store keeping `group_id`'s share-partition of `topic`/`partition` here.
fn store_of(ctx: &Ctx, group_id: &str, tp: &TopicPartition) -> Result<Arc<StateStore>, i16> {
    let cluster = ctx
        .cluster
        .as_ref()
        .ok_or(ResponseError::NotCoordinator.code())?;
    let stores = cluster
        .share_stores()
        .ok_or(ResponseError::NotCoordinator.code())?;
    let image = cluster.image();
    let partitions = image
        .metadata
        .topics
        .get(headway_share::SHARE_STATE_TOPIC)
        .map_or(0, |t| t.partitions.len());
    if partitions == 0 {
        return Err(ResponseError::NotCoordinator.code());
    }
    let index =
        StateStores::partition_of(group_id, tp, i32::try_from(partitions).unwrap_or(i32::MAX));
    stores.at(index).map_err(store_code)
}

fn topic_name(ctx: &Ctx, id: uuid::Uuid) -> Option<String> {
    ctx.broker.topic_by_id(id).map(|t| t.name().to_string())
}

fn handle_read(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let body: ReadShareGroupStateRequest = decode_body(request)?;
    let refused = authorize::cluster_refusal(call, Operation::ClusterAction);
    let ctx = Arc::clone(call.ctx);
    let group_id = body.group_id.to_string();
    let results = body
        .topics
        .into_iter()
        .map(|t| {
            let name = topic_name(&ctx, t.topic_id);
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let code = |c: i16| {
                        read_resp::PartitionResult::default()
                            .with_partition(p.partition)
                            .with_error_code(c)
                            .with_start_offset(-1)
                    };
                    if let Some(c) = refused {
                        return code(c);
                    }
                    let Some(name) = &name else {
                        return code(ResponseError::UnknownTopicOrPartition.code());
                    };
                    let tp = TopicPartition::new(name.clone(), PartitionIndex::new(p.partition));
                    let read = store_of(&ctx, &group_id, &tp)
                        .and_then(|s| s.read(&group_id, &tp, p.leader_epoch).map_err(store_code));
                    match read {
                        Ok(snapshot) => read_result(p.partition, snapshot.as_ref()),
                        Err(c) => code(c),
                    }
                })
                .collect();
            read_resp::ReadStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    pending(request, async move {
        ReadShareGroupStateResponse::default().with_results(results)
    })
}

fn handle_write(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let body: WriteShareGroupStateRequest = decode_body(request)?;
    let refused = authorize::cluster_refusal(call, Operation::ClusterAction);
    let ctx = Arc::clone(call.ctx);
    let work = tokio::spawn(async move {
        let group_id = body.group_id.to_string();
        let mut results = Vec::with_capacity(body.topics.len());
        for t in body.topics {
            let name = topic_name(&ctx, t.topic_id);
            let mut partitions = Vec::with_capacity(t.partitions.len());
            for p in t.partitions {
                let code = match (refused, &name) {
                    (Some(c), _) => c,
                    (None, None) => ResponseError::UnknownTopicOrPartition.code(),
                    (None, Some(name)) => write_one(&ctx, &group_id, name, &p).await,
                };
                partitions.push(
                    write_resp::PartitionResult::default()
                        .with_partition(p.partition)
                        .with_error_code(code),
                );
            }
            results.push(
                write_resp::WriteStateResult::default()
                    .with_topic_id(t.topic_id)
                    .with_partitions(partitions),
            );
        }
        WriteShareGroupStateResponse::default().with_results(results)
    });
    pending(request, async move {
        work.await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "a share state write task failed");
            WriteShareGroupStateResponse::default()
        })
    })
}

async fn write_one(
    ctx: &Ctx,
    group_id: &str,
    topic: &str,
    p: &headway_protocol::kafka_protocol::messages::write_share_group_state_request::PartitionData,
) -> i16 {
    let Some(record) = record_of(group_id, topic, p) else {
        return ResponseError::InvalidRequest.code();
    };
    let store = match store_of(ctx, group_id, &record.topic_partition) {
        Ok(s) => s,
        Err(c) => return c,
    };
    match store.write(vec![record]).await.pop() {
        Some(Ok(())) => 0,
        Some(Err(e)) => store_code(e),
        None => store_code(StoreError::Unavailable),
    }
}

/// The codes counted on `/metrics`: every partition's.
impl ErrorCodes for ReadShareGroupStateResponse {
    fn error_codes(&self, codes: &mut Codes) {
        for p in self.results.iter().flat_map(|t| &t.partitions) {
            codes.add(p.error_code);
        }
    }
}

impl ErrorCodes for WriteShareGroupStateResponse {
    fn error_codes(&self, codes: &mut Codes) {
        for p in self.results.iter().flat_map(|t| &t.partitions) {
            codes.add(p.error_code);
        }
    }
}
