//! The transaction coordinator's markers, written where a transaction's data is: a
//! control batch in each topic partition, and for the group offsets partition the end
//! of the transaction's pending offsets in the group coordinator
//! (`crates/group/src/offsets.rs`), which keeps its offsets log in its own records.
//!
//! Each write is durable before the coordinator hears back. Written twice (the
//! coordinator writes again after a failure or a restart), a marker changes nothing
//! the second time. A partition whose topic was deleted meanwhile has nothing left to
//! mark and is skipped.

use headway_base::{Offset, ProducerEpoch, ProducerId, TopicPartition};
use headway_broker::{Broker, BrokerError, Partition};
use headway_group::GroupShards;
use headway_txn::{MarkerFuture, MarkerWriter, TransactionResult, TxnError, OFFSETS_TOPIC};
use std::sync::{Arc, Weak};

pub struct PartitionMarkers {
    /// Weak, as the coordinator holding this outlives nothing of the broker's.
    pub broker: Weak<Broker>,
    pub groups: Arc<GroupShards>,
}

type Written = (Arc<Partition>, Offset);

impl PartitionMarkers {
    /// Writes the marker into `tp`; what to wait on for its durability, if anything.
    async fn write_one(
        &self,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        result: TransactionResult,
        coordinator_epoch: i32,
        tp: &TopicPartition,
    ) -> Result<Option<Written>, TxnError> {
        if tp.topic == OFFSETS_TOPIC {
            let commit = result == TransactionResult::Commit;
            self.groups
                .end_transaction(producer_id, commit)
                .await
                .map_err(|e| TxnError::Markers(format!("{OFFSETS_TOPIC}: {e}")))?;
            return Ok(None);
        }
        let Some(broker) = self.broker.upgrade() else {
            return Err(TxnError::Markers("the broker is shutting down".into()));
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
        let offset = partition
            .write_marker(producer_id, producer_epoch, kind, coordinator_epoch)
            .map_err(|e| failed(tp, e))?;
        Ok(Some((partition, offset)))
    }
}

fn failed(tp: &TopicPartition, e: BrokerError) -> TxnError {
    TxnError::Markers(format!("{}/{}: {e}", tp.topic, tp.partition.value()))
}

impl MarkerWriter for PartitionMarkers {
    /// Writes every marker, then waits until each is durable (the partitions' syncs
    /// overlap).
    fn write_markers<'a>(
        &'a self,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        result: TransactionResult,
        coordinator_epoch: i32,
        partitions: &'a [TopicPartition],
    ) -> MarkerFuture<'a> {
        Box::pin(async move {
            let mut written = Vec::with_capacity(partitions.len());
            for tp in partitions {
                let one =
                    self.write_one(producer_id, producer_epoch, result, coordinator_epoch, tp);
                written.push((tp, one.await?));
            }
            for (tp, one) in written {
                if let Some((partition, offset)) = one {
                    partition
                        .wait_durable(offset.next())
                        .await
                        .map_err(|e| failed(tp, e))?;
                }
            }
            Ok(())
        })
    }
}
