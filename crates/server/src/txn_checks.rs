//! Where a transaction's requests go: the coordinator of its transactional id on this
//! broker, or, in a cluster, the one another broker runs (the data path's checks only;
//! a client's requests to a broker that does not coordinate the id get
//! `NOT_COORDINATOR` and look again).

use crate::call::Ctx;
use headway_base::{PartitionIndex, ProducerEpoch, ProducerId, TopicPartition};
use headway_txn::{TxnCoordinator, TxnError, OFFSETS_TOPIC};
use std::sync::Arc;

/// The coordinator of `transactional_id` here.
pub fn coordinator(ctx: &Ctx, transactional_id: &str) -> Result<Arc<TxnCoordinator>, TxnError> {
    ctx.txns.of(transactional_id)
}

/// The partition of `__consumer_offsets` a transaction holds for `group_id`.
pub fn offsets_partition(ctx: &Ctx, group_id: &str) -> Result<TopicPartition, TxnError> {
    let index = ctx
        .groups
        .partition_of(group_id)
        .ok_or(TxnError::CoordinatorNotAvailable)?;
    Ok(TopicPartition::new(
        OFFSETS_TOPIC,
        PartitionIndex::new(index),
    ))
}

/// The produce path's check of a transactional batch for `tp` (see
/// [`TxnCoordinator::check_produce`]), wherever the id's coordinator is.
pub async fn check_produce(
    ctx: &Ctx,
    transactional_id: &str,
    producer_id: ProducerId,
    producer_epoch: ProducerEpoch,
    tp: &TopicPartition,
    implicit_add: bool,
) -> Result<(), TxnError> {
    match (coordinator(ctx, transactional_id), &ctx.cluster) {
        (Ok(c), _) => {
            c.check_produce(
                transactional_id,
                producer_id,
                producer_epoch,
                tp,
                implicit_add,
            )
            .await
        }
        (Err(TxnError::NotCoordinator), Some(cluster)) => {
            cluster
                .check_transaction(
                    transactional_id,
                    producer_id,
                    producer_epoch,
                    tp,
                    implicit_add,
                )
                .await
        }
        (Err(e), _) => Err(e),
    }
}

/// TxnOffsetCommit's check (see [`TxnCoordinator::check_offset_commit`]), wherever
/// the id's coordinator is: another broker's checks the group's partition of
/// `__consumer_offsets`, which AddOffsetsToTxn put in the transaction.
pub async fn check_offset_commit(
    ctx: &Ctx,
    transactional_id: &str,
    producer_id: ProducerId,
    producer_epoch: ProducerEpoch,
    group_id: &str,
    implicit_add: bool,
) -> Result<(), TxnError> {
    let offsets = offsets_partition(ctx, group_id)?;
    match (coordinator(ctx, transactional_id), &ctx.cluster) {
        (Ok(c), _) => {
            c.check_offset_commit(
                transactional_id,
                producer_id,
                producer_epoch,
                group_id,
                &offsets,
                implicit_add,
            )
            .await
        }
        (Err(TxnError::NotCoordinator), Some(cluster)) => {
            let ids = (transactional_id, producer_id, producer_epoch);
            cluster
                .check_transaction(ids.0, ids.1, ids.2, &offsets, implicit_add)
                .await
        }
        (Err(e), _) => Err(e),
    }
}
