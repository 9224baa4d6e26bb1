//! The transaction coordinator's markers, written where a transaction's data is: a
//! control batch in each topic partition, and for a partition of `__consumer_offsets`
//! the end of the transaction's pending offsets in the group coordinator of that
//! partition (`crates/group/src/offsets.rs`), which keeps its offsets log in its own
//! records.
//!
//! [`PartitionMarkers`] writes the markers of partitions this broker leads: every one on
//! a broker alone, and in a cluster those the coordinator's own broker leads and those
//! another coordinator sends it (WriteTxnMarkers); the cluster's writer
//! (`crate::cluster::transactions`) sends the rest to their leaders. Each write is
//! durable (in a cluster: on every in-sync replica) before the coordinator hears back.
//! Written twice (the coordinator writes again after a failure or a restart), a marker
//! changes nothing the second time. A partition whose topic was deleted meanwhile has
//! nothing left to mark and is skipped.

use crate::errors::{error_code, group_error_code};
use headway_base::{Offset, ProducerEpoch, ProducerId, TopicPartition};
use headway_broker::{Broker, BrokerError, Partition};
use headway_group::GroupShards;
use headway_protocol::kafka_protocol::ResponseError;
use headway_txn::{MarkerFuture, MarkerWriter, TransactionResult, TxnError, OFFSETS_TOPIC};
use std::sync::{Arc, Weak};

pub struct PartitionMarkers {
    /// Weak, as the coordinator holding this outlives nothing of the broker's.
    pub broker: Weak<Broker>,
    pub groups: Arc<GroupShards>,
}

/// A marker written: its partition, the offset after it and the leader epoch it was
/// written at (what to wait on for its replication).
type Written = (Arc<Partition>, Offset, i32);

/// Why one partition's marker was not written: the code WriteTxnMarkers answers and a
/// description for the log.
#[derive(Debug, Clone)]
pub struct MarkerFailure {
    pub code: i16,
    pub reason: String,
}

impl From<MarkerFailure> for TxnError {
    fn from(f: MarkerFailure) -> TxnError {
        TxnError::Markers(f.reason)
    }
}

fn failed(tp: &TopicPartition, e: BrokerError) -> MarkerFailure {
    MarkerFailure {
        code: error_code(&e),
        reason: format!("{}/{}: {e}", tp.topic, tp.partition.value()),
    }
}

impl PartitionMarkers {
    /// Writes the marker into `tp`; what to wait on for its durability, if anything.
    async fn write_one(
        &self,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        result: TransactionResult,
        coordinator_epoch: i32,
        tp: &TopicPartition,
    ) -> Result<Option<Written>, MarkerFailure> {
        if tp.topic == OFFSETS_TOPIC {
            let commit = result == TransactionResult::Commit;
            let index = tp.partition.value();
            self.groups
                .end_transaction(index, producer_id, commit)
                .await
                .map_err(|e| {
                    let reason = format!("{OFFSETS_TOPIC}/{index}: {e}");
                    MarkerFailure {
                        code: group_error_code(e),
                        reason,
                    }
                })?;
            return Ok(None);
        }
        let Some(broker) = self.broker.upgrade() else {
            return Err(MarkerFailure {
                code: ResponseError::NotLeaderOrFollower.code(),
                reason: "the broker is shutting down".into(),
            });
        };
        let partition = match broker.partition(&tp.topic, tp.partition) {
            Ok(partition) => partition,
            Err(BrokerError::UnknownTopicOrPartition { .. }) => {
                tracing::info!(topic = %tp.topic, partition = tp.partition.value(),
                    "no marker for a partition that no longer exists");
                return Ok(None);
            }
            Err(e) => return Err(failed(tp, e)),
        };
        let kind = match result {
            TransactionResult::Commit => headway_broker::TransactionResult::Commit,
            TransactionResult::Abort => headway_broker::TransactionResult::Abort,
        };
        // Read before the write: a new leader meanwhile fails the wait, and the
        // coordinator writes again.
        let epoch = partition.role_epoch().map_or(-1, |(epoch, _)| epoch);
        let offset = partition
            .write_marker(producer_id, producer_epoch, kind, coordinator_epoch)
            .map_err(|e| failed(tp, e))?;
        Ok(Some((partition, offset.next(), epoch)))
    }

    /// Writes one marker into each of `partitions` and waits until each is durable (the
    /// partitions' syncs overlap): one result per partition, in order.
    pub async fn write_each(
        &self,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        result: TransactionResult,
        coordinator_epoch: i32,
        partitions: &[TopicPartition],
    ) -> Vec<Result<(), MarkerFailure>> {
        let mut written = Vec::with_capacity(partitions.len());
        for tp in partitions {
            let one = self.write_one(producer_id, producer_epoch, result, coordinator_epoch, tp);
            written.push(one.await);
        }
        let mut results = Vec::with_capacity(partitions.len());
        for (tp, one) in partitions.iter().zip(written) {
            let done = match one {
                Ok(Some((partition, end, epoch))) => partition
                    .wait_replicated(end, 1, epoch)
                    .await
                    .map_err(|e| failed(tp, e)),
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            results.push(done);
        }
        results
    }
}

impl MarkerWriter for PartitionMarkers {
    fn write_markers<'a>(
        &'a self,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        result: TransactionResult,
        coordinator_epoch: i32,
        partitions: &'a [TopicPartition],
    ) -> MarkerFuture<'a> {
        Box::pin(async move {
            let each = self
                .write_each(
                    producer_id,
                    producer_epoch,
                    result,
                    coordinator_epoch,
                    partitions,
                )
                .await;
            each.into_iter()
                .collect::<Result<Vec<()>, MarkerFailure>>()
                .map(|_| ())
                .map_err(TxnError::from)
        })
    }
}
