//! A batch between sealing and its answer: the sealed batch the dispatcher hands to a
//! lane, its outcome, its encoding as one v2 record batch, and the counters the
//! producer keeps over batches (updated from `send` and from the lanes, so atomic).

use crate::error::ClientError;
use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, RecordBatchEncoder, RecordEncodeOptions};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{watch, Notify};

/// Where a batch ended: its base offset, or why it failed.
pub(super) type Outcome = Option<Result<i64, ClientError>>;

/// A batch taken out of the open ones, on its way to a lane until it is answered.
pub(crate) struct SealedBatch {
    pub topic: Arc<str>,
    pub partition: i32,
    pub records: Vec<kafka_protocol::records::Record>,
    pub bytes: usize,
    /// Key and value bytes of its records, as counted in the summary.
    pub payload_bytes: u64,
    /// When the batch was opened: its delivery deadline counts from here.
    pub created: Instant,
    pub outcome: watch::Sender<Outcome>,
}

/// What the producer counts over its batches, shared by `send` and the lanes.
pub(crate) struct Counters {
    pub(super) records_acked: AtomicU64,
    pub(super) bytes_acked: AtomicU64,
    pub(super) records_failed: AtomicU64,
    pub(super) batches: AtomicU64,
    pub(super) buffer_full_events: AtomicU64,
    /// Sealed batches not yet answered; `flush` waits for zero.
    pub(super) outstanding: AtomicUsize,
    pub(super) idle: Notify,
}

/// Encodes a sealed batch's records as one v2 record batch.
pub(super) fn encode_batch(
    records: &[kafka_protocol::records::Record],
    compression: Compression,
) -> Result<Bytes, ClientError> {
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut buf, records, &options)
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
    Ok(buf.freeze())
}
