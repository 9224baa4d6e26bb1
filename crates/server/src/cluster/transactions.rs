//! A transaction whose coordinator, partitions and groups are on different brokers.
//!
//! ```text
//!   produce (transactional batch) at a partition's leader
//!     └── coordinator here? TxnCoordinator::check_produce
//!         else Cluster::check_transaction ── AddPartitionsToTxn v4+ ──> coordinator
//!              (verify only; with transactions version 2 it adds the partition)
//!   TxnOffsetCommit at a group's coordinator: the same, for the group's partition
//!     of __consumer_offsets
//!   EndTxn at the coordinator: PrepareCommit/PrepareAbort on every in-sync replica,
//!     then ClusterMarkers: partitions led here -> PartitionMarkers,
//!     the others -> WriteTxnMarkers to each leader (crate::handlers::write_txn_markers)
//!     -> CompleteCommit/CompleteAbort
//! ```
//!
//! The leaders come from the image at the time of each attempt: a marker that fails
//! (a leader moved, a broker unreachable) is written again to the leader of the next
//! attempt, and a marker written twice changes nothing the second time.

use super::{coordinators, Cluster};
use crate::errors::txn_error_from_code;
use crate::txn_markers::PartitionMarkers;
use headway_base::{ProducerEpoch, ProducerId, TopicPartition};
use headway_controller::BrokerId;
use headway_protocol::kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use headway_protocol::kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use headway_protocol::kafka_protocol::messages::{
    self, AddPartitionsToTxnRequest, TopicName, WriteTxnMarkersRequest,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_txn::{
    MarkerFuture, MarkerWriter, TransactionResult, TxnError, TRANSACTION_STATE_TOPIC,
};
use std::collections::BTreeMap;
use std::sync::{OnceLock, Weak};

impl Cluster {
    /// Asks the coordinator of `transactional_id`, on another broker, whether its
    /// producer may write `tp` (a partition leader's check of a transactional produce,
    /// a group coordinator's of a transactional offset commit); with `add` the
    /// coordinator adds `tp` to the transaction first (transactions version 2).
    pub async fn check_transaction(
        &self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        tp: &TopicPartition,
        add: bool,
    ) -> Result<(), TxnError> {
        let image = self.image();
        let to = coordinators::coordinator_id(&image, TRANSACTION_STATE_TOPIC, transactional_id)
            .map_err(|_| TxnError::CoordinatorNotAvailable)?;
        if to == self.node_id {
            // This broker leads the partition but its coordinator does not serve yet.
            return Err(TxnError::CoordinatorLoadInProgress);
        }
        let topic = AddPartitionsToTxnTopic::default()
            .with_name(TopicName(StrBytes::from_string(tp.topic.clone())))
            .with_partitions(vec![tp.partition.value()]);
        let transaction = AddPartitionsToTxnTransaction::default()
            .with_transactional_id(messages::TransactionalId(StrBytes::from_string(
                transactional_id.to_string(),
            )))
            .with_producer_id(messages::ProducerId(producer_id.value()))
            .with_producer_epoch(producer_epoch.value())
            .with_verify_only(!add)
            .with_topics(vec![topic]);
        let request = AddPartitionsToTxnRequest::default().with_transactions(vec![transaction]);
        let response = self
            .peers
            .call(&image.metadata, to, &request)
            .await
            .map_err(|e| {
                tracing::info!(transactional_id, error = %e, "checking a transaction with its coordinator failed");
                TxnError::CoordinatorNotAvailable
            })?;
        if response.error_code != 0 {
            return Err(txn_error_from_code(response.error_code));
        }
        let code = response
            .results_by_transaction
            .first()
            .and_then(|t| t.topic_results.first())
            .and_then(|t| t.results_by_partition.first())
            .map(|p| p.partition_error_code)
            .ok_or(TxnError::CoordinatorNotAvailable)?;
        match code {
            0 => Ok(()),
            code => Err(txn_error_from_code(code)),
        }
    }
}

/// The transaction coordinators' markers in a cluster: those of partitions this broker
/// leads written here, the others sent to their leaders.
pub struct ClusterMarkers {
    local: PartitionMarkers,
    /// Attached once the cluster has started (the coordinators' writer is made before).
    cluster: OnceLock<Weak<Cluster>>,
}

impl ClusterMarkers {
    pub fn new(local: PartitionMarkers) -> ClusterMarkers {
        ClusterMarkers {
            local,
            cluster: OnceLock::new(),
        }
    }

    pub fn attach(&self, cluster: Weak<Cluster>) {
        let _ = self.cluster.set(cluster);
    }

    /// Sends one leader its partitions' markers and waits for its answer.
    async fn send(
        &self,
        cluster: &Cluster,
        leader: BrokerId,
        marker: WritableTxnMarker,
    ) -> Result<(), TxnError> {
        let image = cluster.image();
        let asked: usize = marker
            .topics
            .iter()
            .map(|t| t.partition_indexes.len())
            .sum();
        let request = WriteTxnMarkersRequest::default().with_markers(vec![marker]);
        let response = cluster
            .peers()
            .call(&image.metadata, leader, &request)
            .await
            .map_err(TxnError::Markers)?;
        let failed: Vec<String> = response
            .markers
            .iter()
            .flat_map(|m| &m.topics)
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| p.error_code != 0)
                    .map(move |p| {
                        format!(
                            "{}/{}: code {}",
                            t.name.as_str(),
                            p.partition_index,
                            p.error_code
                        )
                    })
            })
            .collect();
        let answered: usize = response
            .markers
            .iter()
            .flat_map(|m| &m.topics)
            .map(|t| t.partitions.len())
            .sum();
        match failed.is_empty() && answered == asked {
            true => Ok(()),
            false if failed.is_empty() => Err(TxnError::Markers(format!(
                "broker {leader} answered {answered} of {asked} partitions"
            ))),
            false => Err(TxnError::Markers(format!(
                "broker {leader}: {}",
                failed.join(", ")
            ))),
        }
    }
}

impl MarkerWriter for ClusterMarkers {
    fn write_markers<'a>(
        &'a self,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        result: TransactionResult,
        coordinator_epoch: i32,
        partitions: &'a [TopicPartition],
    ) -> MarkerFuture<'a> {
        Box::pin(async move {
            let cluster = self
                .cluster
                .get()
                .and_then(Weak::upgrade)
                .ok_or_else(|| TxnError::Markers("the cluster has not started".into()))?;
            let image = cluster.image();
            let mut by_leader: BTreeMap<BrokerId, Vec<TopicPartition>> = BTreeMap::new();
            for tp in partitions {
                let state = image.metadata.topics.get(&tp.topic).and_then(|t| {
                    usize::try_from(tp.partition.value())
                        .ok()
                        .and_then(|i| t.partitions.get(i))
                });
                let Some(state) = state else {
                    tracing::info!(topic = %tp.topic, partition = tp.partition.value(),
                        "no marker for a partition that no longer exists");
                    continue;
                };
                if state.leader < 0 {
                    return Err(TxnError::Markers(format!(
                        "{}/{} has no leader",
                        tp.topic,
                        tp.partition.value()
                    )));
                }
                by_leader.entry(state.leader).or_default().push(tp.clone());
            }
            let writes = by_leader.into_iter().map(|(leader, tps)| {
                let cluster = &cluster;
                async move {
                    if leader == cluster.node_id() {
                        let local = &self.local;
                        return local
                            .write_markers(
                                producer_id,
                                producer_epoch,
                                result,
                                coordinator_epoch,
                                &tps,
                            )
                            .await;
                    }
                    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
                    for tp in &tps {
                        topics
                            .entry(&tp.topic)
                            .or_default()
                            .push(tp.partition.value());
                    }
                    let topics = topics
                        .into_iter()
                        .map(|(name, indexes)| {
                            WritableTxnMarkerTopic::default()
                                .with_name(TopicName(StrBytes::from_string(name.to_string())))
                                .with_partition_indexes(indexes)
                        })
                        .collect();
                    let marker = WritableTxnMarker::default()
                        .with_producer_id(messages::ProducerId(producer_id.value()))
                        .with_producer_epoch(producer_epoch.value())
                        .with_transaction_result(result == TransactionResult::Commit)
                        .with_coordinator_epoch(coordinator_epoch)
                        .with_topics(topics);
                    self.send(cluster, leader, marker).await
                }
            });
            futures::future::try_join_all(writes).await.map(|_| ())
        })
    }
}
