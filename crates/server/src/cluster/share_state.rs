//! In a cluster: the share-partitions' state on the replicated `__share_group_state`
//! (`headway_share::state_store`), as the leaders of the data partitions reach it.
//!
//! [`ClusterShareState`] is the share coordinator's [`RemoteState`]: a share-partition's
//! key (`group:topic:partition`) picks a partition of `__share_group_state` (created
//! through the controller the first time it is needed); its leader keeps the state.
//! When that is this broker the store is called directly, otherwise the leader is sent
//! ReadShareGroupState or WriteShareGroupState over the brokers' connections
//! ([`super::peers`]). Each snapshot's writer sequence travels in a tagged field of its
//! partition ([`SEQUENCE_TAG`]), the leader epoch in the request's own field.
//!
//! A write or read whose store moved, is loading or cannot be reached is tried again
//! with the image of then, for up to [`RETRY_FOR`]; after that the share coordinator's
//! caller gets `COORDINATOR_NOT_AVAILABLE` (an acknowledgement is not confirmed; the
//! records go back to the group when their locks expire).

use super::coordinators::LedCoordinators;
use super::Cluster;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use headway_base::{Offset, PartitionIndex, TopicPartition};
use headway_broker::coordinator_shards::ToLoad;
use headway_broker::{BrokerError, Partition};
use headway_controller::{BrokerId, ClusterSettings, Image};
use headway_protocol::kafka_protocol::messages::{
    read_share_group_state_request as read_req, read_share_group_state_response as read_resp,
    write_share_group_state_request as write_req, ReadShareGroupStateRequest,
    WriteShareGroupStateRequest,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_share::partition::{DurableRun, Snapshot};
use headway_share::state_log::{state_from_disk, state_to_disk, StateRecord, Written};
use headway_share::state_store::{StateStores, StoreError};
use headway_share::{Durable, RemoteState, ShareError, SHARE_STATE_TOPIC};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

/// The tagged field of a WriteShareGroupState partition that carries the writer's
/// sequence (8 bytes, big-endian): Kafka's request has the leader epoch, not this.
pub const SEQUENCE_TAG: i32 = 10_000;
/// How long a read or write is tried again while its store moves or loads.
const RETRY_FOR: Duration = Duration::from_secs(10);
const RETRY_PAUSE: Duration = Duration::from_millis(200);

impl LedCoordinators for StateStores {
    const TOPIC: &'static str = SHARE_STATE_TOPIC;
    fn partitions(settings: &ClusterSettings) -> i32 {
        settings.share_state_partitions()
    }
    fn follow(&self, partitions: i32, leading: &[(i32, i32)]) -> Vec<ToLoad> {
        StateStores::follow(self, partitions, leading)
    }
    fn load(
        &self,
        what: ToLoad,
        log: Arc<Partition>,
    ) -> impl Future<Output = Result<bool, BrokerError>> + Send {
        StateStores::load(self, what, log)
    }
    fn load_failed(&self, what: ToLoad) {
        StateStores::load_failed(self, what)
    }
}

/// The share coordinator's way to the replicated share state.
#[derive(Clone)]
pub struct ClusterShareState {
    stores: Arc<StateStores>,
    /// Attached once the cluster has started (the coordinator is made before).
    cluster: Arc<OnceLock<Weak<Cluster>>>,
    default_partitions: i32,
}

/// Where a share-partition's state is kept now.
struct Route {
    cluster: Arc<Cluster>,
    image: Arc<Image>,
    index: i32,
    leader: BrokerId,
}

/// Why one try failed: tried again, or not.
enum Failed {
    Retry(String),
    Fenced,
}

impl ClusterShareState {
    pub fn new(stores: Arc<StateStores>, default_partitions: i32) -> ClusterShareState {
        ClusterShareState {
            stores,
            cluster: Arc::new(OnceLock::new()),
            default_partitions,
        }
    }

    pub fn attach(&self, cluster: Weak<Cluster>) {
        let _ = self.cluster.set(cluster);
    }

    async fn route(&self, group_id: &str, tp: &TopicPartition) -> Result<Route, Failed> {
        let cluster = self
            .cluster
            .get()
            .and_then(Weak::upgrade)
            .ok_or_else(|| Failed::Retry("the cluster has not started".into()))?;
        cluster
            .ensure_coordinator_topic::<StateStores>(self.default_partitions)
            .await
            .map_err(|(_, why)| Failed::Retry(why))?;
        let image = cluster.image();
        let partitions = image
            .metadata
            .topics
            .get(SHARE_STATE_TOPIC)
            .map(|t| t.partitions.len())
            .ok_or_else(|| Failed::Retry(format!("{SHARE_STATE_TOPIC} does not exist yet")))?;
        let index =
            StateStores::partition_of(group_id, tp, i32::try_from(partitions).unwrap_or(i32::MAX));
        let leader = image
            .metadata
            .partition(SHARE_STATE_TOPIC, index)
            .map(|p| p.leader)
            .filter(|l| *l >= 0)
            .ok_or_else(|| Failed::Retry(format!("{SHARE_STATE_TOPIC}/{index} has no leader")))?;
        Ok(Route {
            cluster,
            image,
            index,
            leader,
        })
    }

    async fn read_once(
        &self,
        group_id: &str,
        tp: &TopicPartition,
        leader_epoch: i32,
    ) -> Result<Option<Snapshot>, Failed> {
        let route = self.route(group_id, tp).await?;
        if route.leader == route.cluster.node_id() {
            let store = self.stores.at(route.index).map_err(store_failed)?;
            return store.read(group_id, tp, leader_epoch).map_err(store_failed);
        }
        let topic_id = topic_id(&route.image, &tp.topic)?;
        let request = ReadShareGroupStateRequest::default()
            .with_group_id(StrBytes::from_string(group_id.to_string()))
            .with_topics(vec![read_req::ReadStateData::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![read_req::PartitionData::default()
                    .with_partition(tp.partition.value())
                    .with_leader_epoch(leader_epoch)])]);
        let response = route
            .cluster
            .peers()
            .call(&route.image.metadata, route.leader, &request)
            .await
            .map_err(Failed::Retry)?;
        let answer = response
            .results
            .iter()
            .flat_map(|t| &t.partitions)
            .find(|p| p.partition == tp.partition.value())
            .ok_or_else(|| Failed::Retry("an answer without the partition".into()))?;
        code_failed(answer.error_code)?;
        Ok(snapshot_of(answer))
    }

    async fn write_once(&self, records: &[StateRecord]) -> Result<(), Failed> {
        let Some(first) = records.first() else {
            return Ok(());
        };
        let route = self.route(&first.group_id, &first.topic_partition).await?;
        if route.leader == route.cluster.node_id() {
            let store = self.stores.at(route.index).map_err(store_failed)?;
            for result in store.write(records.to_vec()).await {
                result.map_err(store_failed)?;
            }
            return Ok(());
        }
        let mut by_group: BTreeMap<&str, Vec<&StateRecord>> = BTreeMap::new();
        for r in records {
            by_group.entry(&r.group_id).or_default().push(r);
        }
        for (group_id, records) in by_group {
            let request = write_request(&route.image, group_id, &records)?;
            let response = route
                .cluster
                .peers()
                .call(&route.image.metadata, route.leader, &request)
                .await
                .map_err(Failed::Retry)?;
            for p in response.results.iter().flat_map(|t| &t.partitions) {
                code_failed(p.error_code)?;
            }
        }
        Ok(())
    }
}

impl RemoteState for ClusterShareState {
    fn write(&self, records: Vec<StateRecord>) -> Durable {
        let this = self.clone();
        Box::pin(async move {
            // One store per share-partition key: group the records by where they go.
            let mut by_store: BTreeMap<String, Vec<StateRecord>> = BTreeMap::new();
            for r in records {
                let key = StateStores::key(&r.group_id, &r.topic_partition);
                by_store.entry(key).or_default().push(r);
            }
            for records in by_store.values() {
                retrying("write", || this.write_once(records)).await?;
            }
            Ok(())
        })
    }

    fn read(
        &self,
        group_id: &str,
        tp: &TopicPartition,
        leader_epoch: i32,
    ) -> Pin<Box<dyn Future<Output = Result<Option<Snapshot>, ShareError>> + Send>> {
        let (this, group_id, tp) = (self.clone(), group_id.to_string(), tp.clone());
        Box::pin(
            async move { retrying("read", || this.read_once(&group_id, &tp, leader_epoch)).await },
        )
    }
}

/// Tries `once` until it works, is fenced, or [`RETRY_FOR`] passed.
async fn retrying<T, F, Fut>(what: &str, mut once: F) -> Result<T, ShareError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Failed>>,
{
    let started = Instant::now();
    loop {
        match once().await {
            Ok(t) => return Ok(t),
            Err(Failed::Fenced) => {
                tracing::info!(
                    what,
                    "share state refused: a newer leader has the share-partition"
                );
                return Err(ShareError::CoordinatorNotAvailable);
            }
            Err(Failed::Retry(why)) if started.elapsed() >= RETRY_FOR => {
                tracing::warn!(what, reason = %why, "share state not reached");
                return Err(ShareError::CoordinatorNotAvailable);
            }
            Err(Failed::Retry(why)) => {
                tracing::debug!(what, reason = %why, "share state: trying again");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

fn store_failed(e: StoreError) -> Failed {
    match e {
        StoreError::FencedLeaderEpoch => Failed::Fenced,
        e => Failed::Retry(e.to_string()),
    }
}

fn code_failed(code: i16) -> Result<(), Failed> {
    match code {
        0 => Ok(()),
        c if c == ResponseError::FencedLeaderEpoch.code() => Err(Failed::Fenced),
        c => Err(Failed::Retry(format!("the store answered error {c}"))),
    }
}

fn topic_id(image: &Image, topic: &str) -> Result<uuid::Uuid, Failed> {
    image
        .metadata
        .topics
        .get(topic)
        .map(|t| t.id)
        .ok_or_else(|| Failed::Retry(format!("topic {topic} is not in the image")))
}

fn write_request(
    image: &Image,
    group_id: &str,
    records: &[&StateRecord],
) -> Result<WriteShareGroupStateRequest, Failed> {
    let mut topics: BTreeMap<uuid::Uuid, Vec<write_req::PartitionData>> = BTreeMap::new();
    for r in records {
        let id = topic_id(image, &r.topic_partition.topic)?;
        topics.entry(id).or_default().push(partition_data(r));
    }
    Ok(WriteShareGroupStateRequest::default()
        .with_group_id(StrBytes::from_string(group_id.to_string()))
        .with_topics(
            topics
                .into_iter()
                .map(|(id, partitions)| {
                    write_req::WriteStateData::default()
                        .with_topic_id(id)
                        .with_partitions(partitions)
                })
                .collect(),
        ))
}

/// A record as WriteShareGroupState carries it. A tombstone is a start offset of -1.
pub fn partition_data(r: &StateRecord) -> write_req::PartitionData {
    let written = r.written.unwrap_or(Written {
        leader_epoch: -1,
        sequence: i64::MIN,
    });
    let mut sequence = BytesMut::with_capacity(8);
    sequence.put_i64(written.sequence);
    let mut data = write_req::PartitionData::default()
        .with_partition(r.topic_partition.partition.value())
        .with_leader_epoch(written.leader_epoch)
        .with_start_offset(-1);
    data.unknown_tagged_fields
        .insert(SEQUENCE_TAG, sequence.freeze());
    let Some(s) = &r.snapshot else {
        return data;
    };
    data.with_state_epoch(s.state_epoch)
        .with_start_offset(s.start_offset.value())
        .with_state_batches(
            s.runs
                .iter()
                .map(|run| {
                    let (first, last, state, count) = wire_of(run);
                    write_req::StateBatch::default()
                        .with_first_offset(first)
                        .with_last_offset(last)
                        .with_delivery_state(state)
                        .with_delivery_count(count)
                })
                .collect(),
        )
}

/// The record a WriteShareGroupState partition carries, for `group_id` and `topic`;
/// `None` for a delivery state this version does not know.
pub fn record_of(group_id: &str, topic: &str, p: &write_req::PartitionData) -> Option<StateRecord> {
    let sequence = p
        .unknown_tagged_fields
        .get(&SEQUENCE_TAG)
        .filter(|b| b.len() == 8)
        .map(|b| Bytes::clone(b).get_i64())
        .unwrap_or(i64::MIN);
    let tp = TopicPartition::new(topic.to_string(), PartitionIndex::new(p.partition));
    let snapshot = if p.start_offset < 0 {
        None
    } else {
        let mut runs = Vec::with_capacity(p.state_batches.len());
        for b in &p.state_batches {
            runs.push(run_of(
                b.first_offset,
                b.last_offset,
                b.delivery_state,
                b.delivery_count,
            )?);
        }
        Some(Snapshot {
            start_offset: Offset::new(p.start_offset),
            state_epoch: p.state_epoch,
            runs,
        })
    };
    Some(StateRecord {
        group_id: group_id.to_string(),
        topic_partition: tp,
        written: (p.leader_epoch >= 0).then_some(Written {
            leader_epoch: p.leader_epoch,
            sequence,
        }),
        snapshot,
    })
}

/// A durable run as a state batch of the wire: first and last offset, delivery state
/// and count.
fn wire_of(run: &DurableRun) -> (i64, i64, i8, i16) {
    (
        run.first.value(),
        run.last.value(),
        state_to_disk(run.state) as i8,
        i16::try_from(run.delivery_count).unwrap_or(i16::MAX),
    )
}

/// A state batch of the wire as a durable run; `None` for a state or count out of range.
fn run_of(first: i64, last: i64, state: i8, count: i16) -> Option<DurableRun> {
    Some(DurableRun {
        first: Offset::new(first),
        last: Offset::new(last),
        state: state_from_disk(u8::try_from(state).ok()?)?,
        delivery_count: u16::try_from(count).ok()?,
    })
}

/// A ReadShareGroupState answer's snapshot (`None`: no state, start offset -1).
fn snapshot_of(p: &read_resp::PartitionResult) -> Option<Snapshot> {
    if p.start_offset < 0 {
        return None;
    }
    Some(Snapshot {
        start_offset: Offset::new(p.start_offset),
        state_epoch: p.state_epoch,
        runs: p
            .state_batches
            .iter()
            .filter_map(|b| {
                run_of(
                    b.first_offset,
                    b.last_offset,
                    b.delivery_state,
                    b.delivery_count,
                )
            })
            .collect(),
    })
}

/// A snapshot as ReadShareGroupState answers it (`None`: start offset -1).
pub fn read_result(partition: i32, snapshot: Option<&Snapshot>) -> read_resp::PartitionResult {
    let result = read_resp::PartitionResult::default()
        .with_partition(partition)
        .with_start_offset(-1);
    let Some(s) = snapshot else {
        return result;
    };
    result
        .with_state_epoch(s.state_epoch)
        .with_start_offset(s.start_offset.value())
        .with_state_batches(
            s.runs
                .iter()
                .map(|run| {
                    let (first, last, state, count) = wire_of(run);
                    read_resp::StateBatch::default()
                        .with_first_offset(first)
                        .with_last_offset(last)
                        .with_delivery_state(state)
                        .with_delivery_count(count)
                })
                .collect(),
        )
}

/// The Kafka code of a store's refusal.
pub fn store_code(e: StoreError) -> i16 {
    match e {
        StoreError::NotCoordinator => ResponseError::NotCoordinator.code(),
        StoreError::Loading => ResponseError::CoordinatorLoadInProgress.code(),
        StoreError::FencedLeaderEpoch => ResponseError::FencedLeaderEpoch.code(),
        StoreError::Unavailable => ResponseError::CoordinatorNotAvailable.code(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headway_share::partition::DurableState;

    #[test]
    fn a_record_survives_the_wire_with_its_writer() {
        let record = StateRecord {
            group_id: "g".into(),
            topic_partition: TopicPartition::new("t", PartitionIndex::new(2)),
            snapshot: Some(Snapshot {
                start_offset: Offset::new(7),
                state_epoch: 1,
                runs: vec![DurableRun {
                    first: Offset::new(7),
                    last: Offset::new(9),
                    state: DurableState::Archived,
                    delivery_count: 5,
                }],
            }),
            written: Some(Written {
                leader_epoch: 3,
                sequence: 1_765_000_000_000_123,
            }),
        };
        let wire = partition_data(&record);
        assert_eq!(record_of("g", "t", &wire), Some(record.clone()));
        let read = read_result(2, record.snapshot.as_ref());
        assert_eq!(snapshot_of(&read), record.snapshot);
        let tombstone = StateRecord {
            snapshot: None,
            written: None,
            ..record
        };
        assert_eq!(
            record_of("g", "t", &partition_data(&tombstone)),
            Some(tombstone)
        );
        assert_eq!(snapshot_of(&read_result(2, None)), None);
    }
}
