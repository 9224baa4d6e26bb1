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
//!
//! Retries: a batch that fails with a retriable error (a lost connection, a broker
//! that is restarting, a leader change) is sent again with exponential backoff until
//! `delivery_timeout` after it was opened; only then does it fail. Each cause is
//! logged at most once per [`WARN_INTERVAL`], with how often it recurred meanwhile.
//!
//! Serial partitions: when the producer is ordered or idempotent, each partition has a
//! queue and a task of its own that sends its batches one at a time, on the partition's
//! lane, retrying each until it is answered before the next one goes. A partition's
//! batches, retries included, thus reach the broker in order; with idempotence each
//! batch carries the producer id and its sequence numbers, so a retry of a batch the
//! broker already stored is recognised as a duplicate and not stored twice.

use super::batch::{encode_batch, Counters, SealedBatch};
use super::config::ProducerConfig;
use crate::cluster::Cluster;
use crate::connection::Connection;
use crate::error::{check, ClientError};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{InitProducerIdRequest, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// Least time between two WARN lines about one cause of retries or failures.
pub const WARN_INTERVAL: Duration = Duration::from_secs(10);

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
    /// The queue of each serial partition (see the module comment). Unbounded in
    /// count, bounded in bytes: every batch in it holds its share of the producer's
    /// buffer (`buffer_bytes_max`) until it is answered.
    partitions: Mutex<HashMap<(Arc<str>, i32), PartitionQueue>>,
    idempotence: tokio::sync::Mutex<Idempotence>,
    warnings: Mutex<HashMap<String, (Instant, u64)>>,
}

type PartitionQueue = mpsc::UnboundedSender<SealedBatch>;

/// The producer id and epoch the broker gave, and the next sequence per partition.
#[derive(Default)]
struct Idempotence {
    producer: Option<(i64, i16)>,
    sequences: HashMap<(Arc<str>, i32), i32>,
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
            partitions: Mutex::new(HashMap::new()),
            idempotence: tokio::sync::Mutex::new(Idempotence::default()),
            warnings: Mutex::new(HashMap::new()),
        }
    }

    /// Drops the partition queues, so that each partition task ends once it has sent
    /// what it holds (the tasks keep this set alive, the set keeps their queues open).
    pub(crate) fn close(&self) {
        self.partitions.lock().expect("partitions lock").clear();
    }

    /// Ordered or idempotent: each partition's batches go one at a time, in order.
    fn serial(&self) -> bool {
        self.config.ordered || self.idempotent()
    }

    /// Idempotence needs acks=all (as in the Java client, where it is then implied).
    fn idempotent(&self) -> bool {
        self.config.idempotent && self.config.acks == -1
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

    /// Takes sealed batches in order and starts each on a lane (or queues it on its
    /// partition's own task when serial).
    pub(crate) async fn dispatch(self: Arc<Self>, mut sealed: mpsc::Receiver<SealedBatch>) {
        while let Some(batch) = sealed.recv().await {
            if self.serial() {
                self.queue_on_partition(batch);
                continue;
            }
            let node = match self.leader_node(&batch).await {
                Ok(node) => node,
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

    fn queue_on_partition(self: &Arc<Self>, batch: SealedBatch) {
        let mut partitions = self.partitions.lock().expect("partitions lock");
        let key = (Arc::clone(&batch.topic), batch.partition);
        let queue = partitions.entry(key).or_insert_with(|| {
            let (queue, batches) = mpsc::unbounded_channel();
            tokio::spawn(Arc::clone(self).partition_loop(batches));
            queue
        });
        if let Err(mpsc::error::SendError(batch)) = queue.send(batch) {
            self.finish(batch, Err(ClientError::Closed));
        }
    }

    /// Sends one partition's batches one at a time, each retried until answered.
    async fn partition_loop(self: Arc<Self>, mut batches: mpsc::UnboundedReceiver<SealedBatch>) {
        while let Some(mut batch) = batches.recv().await {
            let result = match self.payload(&mut batch).await {
                Ok(payload) => {
                    let result = self.deliver_serial(&batch, &payload).await;
                    if result.is_err() && self.idempotent() {
                        // The broker may or may not hold this batch: later sequences of
                        // the partition would not follow on. A new producer id starts
                        // every partition at sequence 0 again.
                        *self.idempotence.lock().await = Idempotence::default();
                    }
                    result
                }
                Err(e) => Err(e),
            };
            self.finish(batch, result);
        }
    }

    async fn deliver_serial(
        &self,
        batch: &SealedBatch,
        payload: &bytes::Bytes,
    ) -> Result<i64, ClientError> {
        self.until_deadline(batch, || async {
            let node = self.leader_node(batch).await?;
            let lanes = self.lanes_for(node);
            let (lane, slot) = self.choose(&lanes, batch.partition).await;
            lane.batches.fetch_add(1, Ordering::Relaxed);
            let result = self.produce_once(&lane, batch, payload).await;
            drop(slot);
            result
        })
        .await
    }

    /// The node leading the batch's partition, from metadata (refreshed, with retries,
    /// until the batch's deadline when the broker is unreachable).
    async fn leader_node(&self, batch: &SealedBatch) -> Result<i32, ClientError> {
        self.until_deadline(batch, || async {
            let meta = self.cluster.topic(&batch.topic).await?;
            let node = *meta.leaders.get(batch.partition as usize).ok_or_else(|| {
                ClientError::UnknownTopic(format!("{}/{}", batch.topic, batch.partition))
            })?;
            if self.cluster.broker_addr(node).is_none() {
                self.cluster.invalidate(&batch.topic);
                return Err(ClientError::from_code(
                    kafka_protocol::ResponseError::LeaderNotAvailable.code(),
                    None,
                ));
            }
            Ok(node)
        })
        .await
    }

    /// Runs `attempt` until it succeeds, fails for good, or the batch's delivery
    /// deadline would pass during the next backoff.
    async fn until_deadline<T, F, Fut>(
        &self,
        batch: &SealedBatch,
        mut attempt: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let deadline = batch.created + self.config.delivery_timeout;
        let mut backoff = self.cluster.config().retry_backoff;
        loop {
            match attempt().await {
                Err(e) if e.is_retriable() && Instant::now() + backoff < deadline => {
                    self.warn_limited(&e, "retrying");
                    if matches!(e, ClientError::Broker { .. }) {
                        self.cluster.invalidate(&batch.topic);
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.cluster.config().retry_backoff_max);
                }
                other => return other,
            }
        }
    }

    /// One WARN line per cause per [`WARN_INTERVAL`], saying how often it recurred.
    fn warn_limited(&self, e: &ClientError, what: &str) {
        let cause = match e {
            ClientError::Connection { addr, .. } => format!("connection to {addr}"),
            ClientError::Broker { name, .. } => name.clone(),
            other => other.to_string(),
        };
        let mut warnings = self.warnings.lock().expect("warnings lock");
        let now = Instant::now();
        let (last, count) = warnings
            .entry(format!("{what} {cause}"))
            .or_insert((now, 0));
        *count += 1;
        if *count == 1 || now.duration_since(*last) >= WARN_INTERVAL {
            tracing::warn!(error = %e, times = *count, "produce: {what}");
            *last = now;
            *count = 0;
        }
    }

    /// The batch's bytes; for an idempotent producer with its producer id and
    /// sequence numbers (taken here, in the partition's order).
    async fn payload(&self, batch: &mut SealedBatch) -> Result<bytes::Bytes, ClientError> {
        if self.idempotent() {
            let mut idempotence = self.idempotence.lock().await;
            let (producer_id, epoch) = match idempotence.producer {
                Some(p) => p,
                None => {
                    let p = self.init_producer_id(batch).await?;
                    idempotence.producer = Some(p);
                    p
                }
            };
            let key = (Arc::clone(&batch.topic), batch.partition);
            let sequence = idempotence.sequences.entry(key).or_insert(0);
            for (i, r) in batch.records.iter_mut().enumerate() {
                r.producer_id = producer_id;
                r.producer_epoch = epoch;
                r.sequence = sequence.wrapping_add(i as i32);
            }
            *sequence = sequence.wrapping_add(batch.records.len() as i32);
        }
        encode_batch(&batch.records, self.config.compression)
    }

    async fn init_producer_id(&self, batch: &SealedBatch) -> Result<(i64, i16), ClientError> {
        let request = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(i32::MAX);
        self.until_deadline(batch, || async {
            let response = self.cluster.any_broker().await?.request(&request).await?;
            check(response.error_code, None)?;
            Ok((response.producer_id.0, response.producer_epoch))
        })
        .await
    }

    async fn choose(
        &self,
        lanes: &[Arc<Lane>],
        partition: i32,
    ) -> (Arc<Lane>, OwnedSemaphorePermit) {
        let n = lanes.len();
        let start = if self.serial() {
            partition as usize % n
        } else {
            self.next.fetch_add(1, Ordering::Relaxed) % n
        };
        let deflect = self.config.deflect && !self.serial();
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

    /// Sends a batch on the lane chosen by the dispatcher, holding its slot through
    /// any retries.
    async fn send(
        self: Arc<Self>,
        lane: Arc<Lane>,
        slot: OwnedSemaphorePermit,
        mut batch: SealedBatch,
    ) {
        let result = match self.payload(&mut batch).await {
            Ok(payload) => {
                self.until_deadline(&batch, || self.produce_once(&lane, &batch, &payload))
                    .await
            }
            Err(e) => Err(e),
        };
        drop(slot);
        self.finish(batch, result);
    }

    async fn produce_once(
        &self,
        lane: &Lane,
        batch: &SealedBatch,
        payload: &bytes::Bytes,
    ) -> Result<i64, ClientError> {
        if !lane.delay.is_zero() {
            tokio::time::sleep(lane.delay).await;
        }
        let request = ProduceRequest::default()
            .with_acks(self.config.acks)
            .with_timeout_ms(self.cluster.config().request_timeout.as_millis() as i32)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(batch.topic.to_string())))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(batch.partition)
                    .with_records(Some(payload.clone()))])]);
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
    }

    fn finish(&self, batch: SealedBatch, result: Result<i64, ClientError>) {
        let records = batch.records.len() as u64;
        let c = &self.counters;
        match &result {
            Ok(_) => {
                c.bytes_acked
                    .fetch_add(batch.payload_bytes, Ordering::Relaxed);
                c.records_acked.fetch_add(records, Ordering::Relaxed)
            }
            Err(e) => {
                self.warn_limited(e, "batches failed");
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
