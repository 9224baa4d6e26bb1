//! Logs the broker keeps for itself, such as committed offsets and the transaction
//! coordinator's state: one partition under the data directory with the broker's
//! flush policy and group commit, keyed records in v2 batches (so the log cleaner
//! keeps each key's latest), replayed in order at start-up. Each owner defines its
//! key and value formats; this module holds what they share.

use crate::{BrokerError, FlushPolicy, Partition};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use headway_base::{Clock, Offset, PartitionIndex};
use headway_log::LogConfig;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use std::path::PathBuf;
use std::sync::Arc;

/// Segments of an internal log: small, since it holds only small records.
const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Bytes read per step while replaying at start-up.
const REPLAY_READ_BYTES: usize = 1024 * 1024;

/// Opens (and recovers) the internal log in `dir`, named `topic` where clients read
/// it, and starts its flusher. Never deleted by retention.
pub async fn open(
    dir: PathBuf,
    topic: &str,
    flush: FlushPolicy,
) -> Result<Arc<Partition>, BrokerError> {
    let config = LogConfig {
        segment_bytes_max: SEGMENT_BYTES,
        retention_bytes_max: None,
        retention_ms_max: None,
        ..LogConfig::default()
    };
    let topic: Arc<str> = Arc::from(topic);
    let name = Arc::clone(&topic);
    let (log, _) = tokio::task::spawn_blocking(move || {
        let clock = Clock::system();
        Partition::open(dir, topic, PartitionIndex::new(0), config, flush, clock)
    })
    .await
    .map_err(|e| BrokerError::Storage(format!("open {name}: {e}")))??;
    log.start_flusher();
    Ok(log)
}

/// Encodes keyed records, `(key, value)` with no value for a tombstone, as one v2
/// batch.
pub fn encode_batch(
    records: impl IntoIterator<Item = (Bytes, Option<Bytes>)>,
    now_ms: i64,
) -> Bytes {
    let records: Vec<Record> = records
        .into_iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // Keeps every record in one batch (offset minus sequence constant).
            sequence: i as i32 - 1,
            timestamp: now_ms,
            key: Some(key),
            value,
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options)
        .expect("uncompressed records always encode");
    buf.freeze()
}

/// Calls `apply` with each record of the log up to its high watermark, in order:
/// its offset, key and value. Returns the records read.
pub async fn replay(
    log: &Partition,
    mut apply: impl FnMut(Offset, Option<Bytes>, Option<Bytes>),
) -> Result<usize, BrokerError> {
    let mut offset = log.log_start_offset();
    let end = log.high_watermark();
    let mut count = 0;
    while offset < end {
        let read = log.read(offset, REPLAY_READ_BYTES).await?;
        if read.records.is_empty() {
            break;
        }
        let mut data = read.records;
        let sets = RecordBatchDecoder::decode_all(&mut data)
            .map_err(|e| BrokerError::Storage(format!("{} batch at {offset}: {e}", log.topic())))?;
        for record in sets.into_iter().flat_map(|s| s.records) {
            let record_offset = Offset::new(record.offset);
            offset = record_offset.next();
            count += 1;
            apply(record_offset, record.key, record.value);
        }
    }
    Ok(count)
}

/// Writes a string as its length (u16) and UTF-8 bytes: the strings of record keys
/// and values. Callers bound their strings below 64 KiB before they get here.
pub fn put_str(buf: &mut BytesMut, s: &str) {
    debug_assert!(
        s.len() <= usize::from(u16::MAX),
        "a record string over 64 KiB"
    );
    buf.put_u16(s.len() as u16);
    buf.put_slice(s.as_bytes());
}

/// Reads a string [`put_str`] wrote; `None` when the bytes are too few or not UTF-8.
pub fn get_str(buf: &mut Bytes) -> Option<String> {
    if buf.remaining() < 2 {
        return None;
    }
    let len = usize::from(buf.get_u16());
    if buf.remaining() < len {
        return None;
    }
    String::from_utf8(buf.split_to(len).to_vec()).ok()
}
