//! The producer: records are batched per partition, and batches are striped over lanes.
//!
//! Flow: [`Producer::send`] reserves buffer memory (waiting while `buffer_bytes_max` is
//! used up), appends the record to its partition's open batch, and seals the batch when
//! it reaches `batch_bytes_max` (or, from a background task, when it is older than
//! `linger`). Sealed batches go, in order, to one dispatcher task that picks a lane of
//! the partition leader (see [`lanes`]) and sends the batch there. The batch's memory
//! returns to the buffer when its answer arrives.
//!
//! Idempotence and ordering: by default the producer is idempotent (as the Java
//! client): it takes a producer id from the broker and numbers each partition's
//! records, so a batch sent again after a lost answer is stored once. An idempotent or
//! `ordered` producer sends each partition's batches one at a time on the partition's
//! lane (partition index modulo lane count), retries included, so they stay in order;
//! other partitions go on meanwhile. With `idempotent = false` and `ordered = false`
//! batches round-robin over lanes and deflect from full lanes, so batches of one
//! partition may overtake each other (the lab's lane scenarios run this way).
//!
//! Failures: retriable errors and lost connections are retried with backoff until
//! `delivery_timeout` after the batch was opened (see [`lanes`]).

mod batch;
mod config;
mod lanes;

use crate::cluster::Cluster;
use crate::error::ClientError;
use crate::partitioner::partition_for_key;
use batch::{Counters, Outcome, SealedBatch};
use bytes::Bytes;
pub use config::ProducerConfig;
use headway_base::now_ms;
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::TimestampType;
use lanes::LaneSet;
pub use lanes::LaneStats;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch, Notify, Semaphore};

/// A record to send.
#[derive(Debug, Clone, Default)]
pub struct Record {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Milliseconds since the epoch; `None` means now.
    pub timestamp_ms: Option<i64>,
    /// An explicit partition; `None` hashes the key, or rotates for keyless records.
    pub partition: Option<i32>,
}

/// Resolves when the record's batch is acknowledged.
pub struct Delivery {
    outcome: watch::Receiver<Outcome>,
    partition: i32,
    offset_delta: i64,
}

impl Delivery {
    /// The record's partition and offset (offset -1 with acks=0).
    pub async fn wait(mut self) -> Result<(i32, i64), ClientError> {
        let outcome = self
            .outcome
            .wait_for(Option::is_some)
            .await
            .map_err(|_| ClientError::Closed)?;
        match outcome.as_ref().expect("waited for Some") {
            Ok(base) if *base >= 0 => Ok((self.partition, base + self.offset_delta)),
            Ok(_) => Ok((self.partition, -1)),
            Err(e) => Err(e.clone()),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct ProducerStats {
    pub records_acked: u64,
    /// Key and value bytes of the acknowledged records.
    pub bytes_acked: u64,
    pub records_failed: u64,
    pub batches: u64,
    /// Times `send` had to wait for buffer memory.
    pub buffer_full_events: u64,
    pub lanes: Vec<LaneStats>,
}

struct OpenBatch {
    records: Vec<kafka_protocol::records::Record>,
    bytes: usize,
    payload_bytes: u64,
    created: Instant,
    outcome: watch::Sender<Outcome>,
}

struct Inner {
    cluster: Arc<Cluster>,
    config: ProducerConfig,
    open: Mutex<HashMap<(Arc<str>, i32), OpenBatch>>,
    sticky: Mutex<HashMap<Arc<str>, i32>>,
    sealed: mpsc::Sender<SealedBatch>,
    buffer: Arc<Semaphore>,
    counters: Arc<Counters>,
    lanes: Arc<LaneSet>,
}

pub struct Producer {
    inner: Arc<Inner>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Bytes a record adds to a batch, roughly: payload plus per-record overhead.
fn record_bytes(record: &Record) -> usize {
    let headers: usize = record
        .headers
        .iter()
        .map(|(k, v)| k.len() + v.as_ref().map_or(0, Bytes::len) + 8)
        .sum();
    record.key.as_ref().map_or(0, Bytes::len)
        + record.value.as_ref().map_or(0, Bytes::len)
        + headers
        + 24
}

impl Producer {
    pub fn new(cluster: Arc<Cluster>, config: ProducerConfig) -> Result<Producer, ClientError> {
        if config.lanes == 0 || config.lane_in_flight_max == 0 || !matches!(config.acks, -1..=1) {
            return Err(ClientError::Invalid(
                "lanes and lane_in_flight_max must be positive and acks -1, 0 or 1".into(),
            ));
        }
        if config.buffer_bytes_max < config.batch_bytes_max {
            return Err(ClientError::Invalid(
                "buffer_bytes_max must be at least batch_bytes_max".into(),
            ));
        }
        let counters = Arc::new(Counters {
            records_acked: AtomicU64::new(0),
            bytes_acked: AtomicU64::new(0),
            records_failed: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            buffer_full_events: AtomicU64::new(0),
            outstanding: AtomicUsize::new(0),
            idle: Notify::new(),
        });
        let buffer = Arc::new(Semaphore::new(config.buffer_bytes_max));
        let lanes = Arc::new(LaneSet::new(
            Arc::clone(&cluster),
            config.clone(),
            Arc::clone(&counters),
            Arc::clone(&buffer),
        ));
        // The dispatcher's queue: enough to keep every lane busy, no more.
        let (sealed, sealed_rx) = mpsc::channel(config.lanes * config.lane_in_flight_max);
        let inner = Arc::new(Inner {
            cluster,
            buffer,
            config,
            open: Mutex::new(HashMap::new()),
            sticky: Mutex::new(HashMap::new()),
            sealed,
            counters,
            lanes: Arc::clone(&lanes),
        });
        let tasks = vec![
            tokio::spawn(lanes.dispatch(sealed_rx)),
            tokio::spawn(linger_loop(Arc::downgrade(&inner))),
        ];
        Ok(Producer { inner, tasks })
    }

    /// Adds a record to its partition's batch. Waits only while the buffer is full or
    /// every lane (and the dispatcher's queue) is full.
    pub async fn send(&self, topic: &str, record: Record) -> Result<Delivery, ClientError> {
        let inner = &self.inner;
        let meta = inner.cluster.topic(topic).await?;
        let partitions = meta.leaders.len();
        let topic: Arc<str> = Arc::from(topic);
        let partition = match (record.partition, &record.key) {
            (Some(p), _) if (p as usize) < partitions && p >= 0 => p,
            (Some(p), _) => return Err(ClientError::UnknownTopic(format!("{topic}/{p}"))),
            (None, Some(key)) => partition_for_key(key, partitions),
            (None, None) => {
                let sticky = inner.sticky.lock().expect("sticky lock");
                sticky
                    .get(&topic)
                    .copied()
                    .unwrap_or(0)
                    .rem_euclid(partitions as i32)
            }
        };
        let bytes = record_bytes(&record).min(inner.config.buffer_bytes_max);
        let permit = match Arc::clone(&inner.buffer).try_acquire_many_owned(bytes as u32) {
            Ok(p) => p,
            Err(_) => {
                inner
                    .counters
                    .buffer_full_events
                    .fetch_add(1, Ordering::Relaxed);
                Arc::clone(&inner.buffer)
                    .acquire_many_owned(bytes as u32)
                    .await
                    .map_err(|_| ClientError::Closed)?
            }
        };
        // The permit returns when the batch is answered (LaneSet::finish).
        permit.forget();
        let (delivery, sealed) = self.append(topic, partition, record, bytes);
        if let Some(batch) = sealed {
            inner
                .sealed
                .send(batch)
                .await
                .map_err(|_| ClientError::Closed)?;
        }
        Ok(delivery)
    }

    fn append(
        &self,
        topic: Arc<str>,
        partition: i32,
        record: Record,
        bytes: usize,
    ) -> (Delivery, Option<SealedBatch>) {
        let inner = &self.inner;
        let mut open = inner.open.lock().expect("open batches lock");
        let key = (Arc::clone(&topic), partition);
        let batch = open.entry(key.clone()).or_insert_with(|| OpenBatch {
            records: Vec::new(),
            bytes: 0,
            payload_bytes: 0,
            created: Instant::now(),
            outcome: watch::channel(None).0,
        });
        let offset_delta = batch.records.len() as i64;
        batch.payload_bytes += (record.key.as_ref().map_or(0, Bytes::len)
            + record.value.as_ref().map_or(0, Bytes::len)) as u64;
        batch.records.push(to_wire(record, offset_delta));
        batch.bytes += bytes;
        let delivery = Delivery {
            outcome: batch.outcome.subscribe(),
            partition,
            offset_delta,
        };
        let sealed = (batch.bytes >= inner.config.batch_bytes_max).then(|| {
            let batch = open.remove(&key).expect("batch present");
            seal(inner, topic, partition, batch)
        });
        (delivery, sealed)
    }

    /// Sends every open batch and waits until every batch sent so far is answered.
    pub async fn flush(&self) -> Result<(), ClientError> {
        for batch in take_open(&self.inner, |_| true) {
            self.inner
                .sealed
                .send(batch)
                .await
                .map_err(|_| ClientError::Closed)?;
        }
        let counters = &self.inner.counters;
        loop {
            let idle = counters.idle.notified();
            if counters.outstanding.load(Ordering::Acquire) == 0 {
                return Ok(());
            }
            idle.await;
        }
    }

    pub fn stats(&self) -> ProducerStats {
        let c = &self.inner.counters;
        ProducerStats {
            records_acked: c.records_acked.load(Ordering::Relaxed),
            bytes_acked: c.bytes_acked.load(Ordering::Relaxed),
            records_failed: c.records_failed.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            buffer_full_events: c.buffer_full_events.load(Ordering::Relaxed),
            lanes: self.inner.lanes.stats(),
        }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
        self.inner.lanes.close();
    }
}

fn to_wire(record: Record, offset_delta: i64) -> kafka_protocol::records::Record {
    let headers: IndexMap<StrBytes, Option<Bytes>> = record
        .headers
        .into_iter()
        .map(|(k, v)| (StrBytes::from_string(k), v))
        .collect();
    kafka_protocol::records::Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: offset_delta,
        // The encoder keeps records in one batch while offset minus sequence is
        // constant; this also makes the batch's base sequence -1 (no idempotence).
        sequence: offset_delta as i32 - 1,
        timestamp: record.timestamp_ms.unwrap_or_else(now_ms),
        key: record.key,
        value: record.value,
        headers,
    }
}

/// Takes a batch out of the open ones. Keyless records then move on to the next
/// partition (the sticky partitioner), whether the batch filled up or lingered long
/// enough, so a slow keyless stream still spreads over the partitions.
fn seal(inner: &Inner, topic: Arc<str>, partition: i32, batch: OpenBatch) -> SealedBatch {
    {
        let mut sticky = inner.sticky.lock().expect("sticky lock");
        let next = sticky.entry(Arc::clone(&topic)).or_insert(0);
        *next = next.wrapping_add(1);
    }
    inner.counters.outstanding.fetch_add(1, Ordering::AcqRel);
    SealedBatch {
        topic,
        partition,
        records: batch.records,
        bytes: batch.bytes,
        payload_bytes: batch.payload_bytes,
        created: batch.created,
        outcome: batch.outcome,
    }
}

fn take_open(inner: &Inner, due: impl Fn(&OpenBatch) -> bool) -> Vec<SealedBatch> {
    let mut open = inner.open.lock().expect("open batches lock");
    let keys: Vec<_> = open
        .iter()
        .filter(|(_, b)| due(b))
        .map(|(k, _)| k.clone())
        .collect();
    keys.into_iter()
        .map(|key| {
            let batch = open.remove(&key).expect("batch present");
            seal(inner, key.0, key.1, batch)
        })
        .collect()
}

/// Seals batches older than `linger`.
async fn linger_loop(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(inner) = inner.upgrade() else { return };
        let linger = inner.config.linger;
        let due = take_open(&inner, |b| b.created.elapsed() >= linger);
        for batch in due {
            if inner.sealed.send(batch).await.is_err() {
                return;
            }
        }
        drop(inner);
        tokio::time::sleep((linger / 2).max(Duration::from_millis(1))).await;
    }
}
