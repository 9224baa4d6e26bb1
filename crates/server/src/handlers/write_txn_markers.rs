//! WriteTxnMarkers: another broker's transaction coordinator asks this one to end a
//! transaction in the partitions it leads: a commit or abort marker in each topic
//! partition, and for a partition of `__consumer_offsets` the end of the transaction's
//! pending offsets in that partition's group coordinator (`crate::txn_markers`). Each
//! partition is answered once its marker is on every in-sync replica; a partition this
//! broker does not lead gets `NOT_LEADER_OR_FOLLOWER` (`NOT_COORDINATOR` for an offsets
//! partition) and the coordinator sends it again to the leader it finds then.
//!
//! The work starts when the request is read, not when its reply's turn comes: a
//! connection's replies go out in order, and a coordinator sends every marker and check
//! for this broker over one connection, so each waiting for the one before would make
//! them one replication wait at a time.
//!
//! A broker's request: needs ClusterAction on the cluster (CLUSTER_AUTHORIZATION_FAILED
//! for every partition otherwise).

use crate::authorize;
use crate::call::{pending, Call, Handler, HandlerError, Reply};
use crate::requests::{Codes, ErrorCodes};
use crate::txn_markers::PartitionMarkers;
use headway_auth::acl::Operation;
use headway_base::{PartitionIndex, ProducerEpoch, ProducerId, TopicPartition};
use headway_protocol::kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use headway_protocol::{decode_body, Request};
use headway_txn::TransactionResult;
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::WriteTxnMarkers,
    min_version: 1,
    max_version: 1,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let body: WriteTxnMarkersRequest = decode_body(request)?;
    let refused = authorize::cluster_refusal(call, Operation::ClusterAction);
    let ctx = Arc::clone(call.ctx);
    let work = tokio::spawn(async move {
        let writer = PartitionMarkers {
            broker: Arc::downgrade(&ctx.broker),
            groups: Arc::clone(&ctx.groups),
        };
        let mut markers = Vec::with_capacity(body.markers.len());
        for marker in body.markers {
            let partitions: Vec<TopicPartition> = marker
                .topics
                .iter()
                .flat_map(|t| {
                    t.partition_indexes
                        .iter()
                        .map(|p| TopicPartition::new(t.name.to_string(), PartitionIndex::new(*p)))
                })
                .collect();
            let codes: Vec<i16> = match refused {
                Some(code) => vec![code; partitions.len()],
                None => {
                    let result = match marker.transaction_result {
                        true => TransactionResult::Commit,
                        false => TransactionResult::Abort,
                    };
                    let each = writer
                        .write_each(
                            ProducerId::new(marker.producer_id.0),
                            ProducerEpoch::new(marker.producer_epoch),
                            result,
                            marker.coordinator_epoch,
                            &partitions,
                        )
                        .await;
                    each.into_iter()
                        .map(|r| match r {
                            Ok(()) => 0,
                            Err(failure) => {
                                tracing::info!(reason = failure.reason, "a marker was not written");
                                failure.code
                            }
                        })
                        .collect()
                }
            };
            let mut codes = codes.into_iter();
            let topics = marker
                .topics
                .into_iter()
                .map(|t| {
                    let partitions = t
                        .partition_indexes
                        .iter()
                        .map(|p| {
                            WritableTxnMarkerPartitionResult::default()
                                .with_partition_index(*p)
                                .with_error_code(codes.next().unwrap_or(0))
                        })
                        .collect();
                    WritableTxnMarkerTopicResult::default()
                        .with_name(t.name)
                        .with_partitions(partitions)
                })
                .collect();
            markers.push(
                WritableTxnMarkerResult::default()
                    .with_producer_id(marker.producer_id)
                    .with_topics(topics),
            );
        }
        WriteTxnMarkersResponse::default().with_markers(markers)
    });
    // A task that did not finish answers no partition: the coordinator writes them all
    // again.
    pending(request, async move { work.await.unwrap_or_default() })
}

/// The codes counted on `/metrics`: every partition's.
impl ErrorCodes for WriteTxnMarkersResponse {
    fn error_codes(&self, codes: &mut Codes) {
        self.markers
            .iter()
            .flat_map(|m| &m.topics)
            .flat_map(|t| &t.partitions)
            .for_each(|p| codes.add(p.error_code));
    }
}
