//! The producer's settings: batching, lanes and their windows, buffer memory,
//! idempotence and the delivery deadline. Plain values, read by the producer and by
//! its lanes.

use kafka_protocol::records::Compression;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// 0, 1 or -1 (all).
    pub acks: i16,
    /// How long an open batch may wait for more records.
    pub linger: Duration,
    /// Seal a batch once its records reach this many bytes.
    pub batch_bytes_max: usize,
    pub compression: Compression,
    /// Lanes per partition leader, each a connection with its own in-flight window.
    pub lanes: usize,
    /// Batches in flight per lane; a lane with this many is full.
    pub lane_in_flight_max: usize,
    /// Send a batch whose lane is full to the next lane with room.
    pub deflect: bool,
    /// Keep each partition on one lane (and turn deflection off).
    pub ordered: bool,
    /// Bytes of records buffered or in flight; `send` waits beyond it.
    pub buffer_bytes_max: usize,
    /// Producer id and sequence numbers on every batch, so the broker stores a batch
    /// sent twice once. Needs acks=all (ignored otherwise); implies per-partition order.
    pub idempotent: bool,
    /// How long a batch may take, retries included, before it fails.
    pub delivery_timeout: Duration,
    /// Lab and test hook: lane `i` sleeps `lane_delays[i]` before sending each batch,
    /// holding its in-flight slot, like a slow link.
    pub lane_delays: Vec<Duration>,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            acks: -1,
            linger: Duration::from_millis(5),
            batch_bytes_max: 128 * 1024,
            compression: Compression::None,
            lanes: 4,
            lane_in_flight_max: 4,
            deflect: true,
            ordered: false,
            buffer_bytes_max: 64 * 1024 * 1024,
            idempotent: true,
            delivery_timeout: Duration::from_secs(120),
            lane_delays: Vec::new(),
        }
    }
}
