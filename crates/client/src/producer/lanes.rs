//! Lanes: each partition leader gets `lanes` connections, each with `lane_in_flight_max`
//! slots. A batch takes a slot for as long as it is in flight.
//!
//! Choosing a lane: the next lane in round-robin order (or the partition's own lane
//! when ordered). If it has no free slot, that is a *full event* on the lane; with
//! deflection on, the next lanes are tried in turn (each full one counts a full event
//! too). Only when no lane has a slot does the dispatcher wait, and the wait (count and
//! time) is charged to the lane the batch was meant for. Without deflection the
//! dispatcher always waits for the chosen lane: one slow lane then paces every batch,
//! which the seed experiment of the Embarcadero client shows and the lab measures.

use super::{encode_batch, Counters, Outcome, ProducerConfig};
use crate::cluster::Cluster;
use crate::connection::Connection;
use crate::error::{check, ClientError};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

pub(crate) struct SealedBatch {
    pub topic: Arc<str>,
    pub partition: i32,
    pub records: Vec<kafka_protocol::records::Record>,
    pub bytes: usize,
    pub outcome: watch::Sender<Outcome>,
}

/// What one lane did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaneStats {
    /// The partition leader this lane connects to.
    pub node: i32,
    pub lane: usize,
    pub batches: u64,
    /// Times a batch found this lane with no free slot.
    pub full_events: u64,
    /// Times the producer waited because this lane (and, with deflection, every lane)
    /// was full, and for how long in total.
    pub wait_events: u64,
    pub wait: Duration,
    pub in_flight: usize,
}

struct Lane {
    node: i32,
    index: usize,
    delay: Duration,
    slots: Arc<Semaphore>,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    batches: AtomicU64,
    full_events: AtomicU64,
    wait_events: AtomicU64,
    wait_ns: AtomicU64,
}

impl Lane {
    fn stats(&self, slots_max: usize) -> LaneStats {
        LaneStats {
            node: self.node,
            lane: self.index,
            batches: self.batches.load(Ordering::Relaxed),
            full_events: self.full_events.load(Ordering::Relaxed),
            wait_events: self.wait_events.load(Ordering::Relaxed),
            wait: Duration::from_nanos(self.wait_ns.load(Ordering::Relaxed)),
            in_flight: slots_max - self.slots.available_permits(),
        }
    }

    /// The lane's own connection, opened again if it broke.
    async fn connection(
        &self,
        cluster: &Cluster,
        in_flight_max: usize,
    ) -> Result<Arc<Connection>, ClientError> {
        let mut slot = self.connection.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(Arc::clone(c));
        }
        let addr = cluster
            .broker_addr(self.node)
            .ok_or_else(|| ClientError::Invalid(format!("no address for broker {}", self.node)))?;
        let c = Arc::new(cluster.open_connection(&addr, in_flight_max).await?);
        *slot = Some(Arc::clone(&c));
        Ok(c)
    }
}

pub(crate) struct LaneSet {
    cluster: Arc<Cluster>,
    config: ProducerConfig,
    counters: Arc<Counters>,
    buffer: Arc<Semaphore>,
    nodes: Mutex<HashMap<i32, Arc<Vec<Arc<Lane>>>>>,
    next: AtomicUsize,
}

impl LaneSet {
    pub(crate) fn new(
        cluster: Arc<Cluster>,
        config: ProducerConfig,
        counters: Arc<Counters>,
        buffer: Arc<Semaphore>,
    ) -> LaneSet {
        LaneSet {
            cluster,
            config,
            counters,
            buffer,
            nodes: Mutex::new(HashMap::new()),
            next: AtomicUsize::new(0),
        }
    }

    pub(crate) fn stats(&self) -> Vec<LaneStats> {
        let nodes = self.nodes.lock().expect("lanes lock");
        let mut all: Vec<LaneStats> = nodes
            .values()
            .flat_map(|lanes| {
                lanes
                    .iter()
                    .map(|l| l.stats(self.config.lane_in_flight_max))
            })
            .collect();
        all.sort_by_key(|s| (s.node, s.lane));
        all
    }

    fn lanes_for(&self, node: i32) -> Arc<Vec<Arc<Lane>>> {
        let mut nodes = self.nodes.lock().expect("lanes lock");
        let lanes = nodes.entry(node).or_insert_with(|| {
            Arc::new(
                (0..self.config.lanes)
                    .map(|index| {
                        Arc::new(Lane {
                            node,
                            index,
                            delay: self
                                .config
                                .lane_delays
                                .get(index)
                                .copied()
                                .unwrap_or_default(),
                            slots: Arc::new(Semaphore::new(self.config.lane_in_flight_max)),
                            connection: tokio::sync::Mutex::new(None),
                            batches: AtomicU64::new(0),
                            full_events: AtomicU64::new(0),
                            wait_events: AtomicU64::new(0),
                            wait_ns: AtomicU64::new(0),
                        })
                    })
                    .collect(),
            )
        });
        Arc::clone(lanes)
    }

    /// Takes sealed batches in order and starts each on a lane.
    pub(crate) async fn dispatch(self: Arc<Self>, mut sealed: mpsc::Receiver<SealedBatch>) {
        while let Some(batch) = sealed.recv().await {
            let node = match self.cluster.leader(&batch.topic, batch.partition).await {
                Ok((node, _)) => node,
                Err(e) => {
                    self.finish(batch, Err(e));
                    continue;
                }
            };
            let lanes = self.lanes_for(node);
            let (lane, slot) = self.choose(&lanes, batch.partition).await;
            lane.batches.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(Arc::clone(&self).send(lane, slot, batch));
        }
    }

    async fn choose(
        &self,
        lanes: &[Arc<Lane>],
        partition: i32,
    ) -> (Arc<Lane>, OwnedSemaphorePermit) {
        let n = lanes.len();
        let start = if self.config.ordered {
            partition as usize % n
        } else {
            self.next.fetch_add(1, Ordering::Relaxed) % n
        };
        let deflect = self.config.deflect && !self.config.ordered;
        let tries = if deflect { n } else { 1 };
        for k in 0..tries {
            let lane = &lanes[(start + k) % n];
            match Arc::clone(&lane.slots).try_acquire_owned() {
                Ok(slot) => return (Arc::clone(lane), slot),
                Err(_) => lane.full_events.fetch_add(1, Ordering::Relaxed),
            };
        }
        let chosen = &lanes[start];
        let waited = Instant::now();
        let (lane, slot) = if deflect {
            let waits = lanes.iter().map(|l| {
                Box::pin(async move { (Arc::clone(l), Arc::clone(&l.slots).acquire_owned().await) })
            });
            futures::future::select_all(waits).await.0
        } else {
            (
                Arc::clone(chosen),
                Arc::clone(&chosen.slots).acquire_owned().await,
            )
        };
        chosen.wait_events.fetch_add(1, Ordering::Relaxed);
        chosen
            .wait_ns
            .fetch_add(waited.elapsed().as_nanos() as u64, Ordering::Relaxed);
        (lane, slot.expect("lane semaphores are never closed"))
    }

    async fn send(
        self: Arc<Self>,
        lane: Arc<Lane>,
        slot: OwnedSemaphorePermit,
        batch: SealedBatch,
    ) {
        if !lane.delay.is_zero() {
            tokio::time::sleep(lane.delay).await;
        }
        let result = self.produce(&lane, &batch).await;
        drop(slot);
        self.finish(batch, result);
    }

    async fn produce(&self, lane: &Lane, batch: &SealedBatch) -> Result<i64, ClientError> {
        let payload = encode_batch(&batch.records, self.config.compression)?;
        let request = ProduceRequest::default()
            .with_acks(self.config.acks)
            .with_timeout_ms(self.cluster.config().request_timeout.as_millis() as i32)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(batch.topic.to_string())))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(batch.partition)
                    .with_records(Some(payload))])]);
        self.cluster
            .retry(|| async {
                let connection = lane
                    .connection(&self.cluster, self.config.lane_in_flight_max)
                    .await?;
                if self.config.acks == 0 {
                    connection.send_without_answer(&request).await?;
                    return Ok(-1);
                }
                let response = connection.request(&request).await?;
                let p = response
                    .responses
                    .first()
                    .and_then(|t| t.partition_responses.first())
                    .ok_or_else(|| ClientError::Protocol("empty Produce answer".into()))?;
                check(p.error_code, p.error_message.as_deref())?;
                Ok(p.base_offset)
            })
            .await
    }

    fn finish(&self, batch: SealedBatch, result: Result<i64, ClientError>) {
        let records = batch.records.len() as u64;
        let c = &self.counters;
        match &result {
            Ok(_) => c.records_acked.fetch_add(records, Ordering::Relaxed),
            Err(e) => {
                tracing::warn!(topic = %batch.topic, partition = batch.partition, error = %e, "batch failed");
                c.records_failed.fetch_add(records, Ordering::Relaxed)
            }
        };
        c.batches.fetch_add(1, Ordering::Relaxed);
        batch.outcome.send_replace(Some(result));
        self.buffer.add_permits(batch.bytes);
        if c.outstanding.fetch_sub(1, Ordering::AcqRel) == 1 {
            c.idle.notify_waiters();
        }
    }
}
