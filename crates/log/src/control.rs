//! Transaction markers: the control batches a transaction coordinator has written into
//! every partition of a transaction when it ends, as Kafka writes them (KIP-98).
//!
//! A marker is one v2 batch with the transactional and control attribute bits set
//! (`0x30`), the producer's id and epoch in its header, base sequence -1, and one
//! record whose key is `version: i16 = 0, type: i16` (0 abort, 1 commit) and whose
//! value is `version: i16 = 0, coordinator_epoch: i32`. Readers (clients with
//! `isolation.level=read_committed`, and the partition's own bookkeeping) only need the
//! key; the value is kept for Kafka's tools.

use crate::batch::{BatchHeader, BATCH_HEADER_BYTES};
use crate::records::record_refs;
use headway_base::{ProducerEpoch, ProducerId};

/// Attributes of a marker batch: transactional (bit 4) and control (bit 5).
const MARKER_ATTRIBUTES: i16 = 0x30;

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MarkerKind {
    Abort,
    Commit,
}

impl MarkerKind {
    /// The marker key's type field.
    fn wire(self) -> i16 {
        match self {
            MarkerKind::Abort => 0,
            MarkerKind::Commit => 1,
        }
    }
}

/// What a marker batch says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub kind: MarkerKind,
    pub coordinator_epoch: i32,
    pub timestamp_ms: i64,
}

/// Appends `value` as a zigzag varint.
fn put_varint(out: &mut Vec<u8>, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

impl Marker {
    /// The marker as a whole v2 batch at base offset 0 (the log assigns the real one),
    /// with its CRC-32C.
    pub fn encode(&self) -> Vec<u8> {
        let mut key = Vec::with_capacity(4);
        key.extend_from_slice(&0i16.to_be_bytes());
        key.extend_from_slice(&self.kind.wire().to_be_bytes());
        let mut value = Vec::with_capacity(6);
        value.extend_from_slice(&0i16.to_be_bytes());
        value.extend_from_slice(&self.coordinator_epoch.to_be_bytes());
        let mut body = vec![0u8]; // record attributes
        put_varint(&mut body, 0); // timestamp delta
        put_varint(&mut body, 0); // offset delta
        put_varint(&mut body, key.len() as i64);
        body.extend_from_slice(&key);
        put_varint(&mut body, value.len() as i64);
        body.extend_from_slice(&value);
        put_varint(&mut body, 0); // headers
        let mut record = Vec::with_capacity(body.len() + 2);
        put_varint(&mut record, body.len() as i64);
        record.extend_from_slice(&body);

        let mut out = Vec::with_capacity(BATCH_HEADER_BYTES + record.len());
        out.extend_from_slice(&0i64.to_be_bytes()); // base offset
        let batch_length = (BATCH_HEADER_BYTES - 12 + record.len()) as i32;
        out.extend_from_slice(&batch_length.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes()); // partition leader epoch
        out.push(2); // magic
        out.extend_from_slice(&0u32.to_be_bytes()); // crc, below
        out.extend_from_slice(&MARKER_ATTRIBUTES.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes()); // last offset delta
        out.extend_from_slice(&self.timestamp_ms.to_be_bytes());
        out.extend_from_slice(&self.timestamp_ms.to_be_bytes());
        out.extend_from_slice(&self.producer_id.value().to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.value().to_be_bytes());
        out.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
        out.extend_from_slice(&1i32.to_be_bytes()); // records
        out.extend_from_slice(&record);
        let crc = crc32c::crc32c(&out[21..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        out
    }
}

/// The kind of the marker `batch` holds (`header` is its parsed header), or `None`
/// when it is not a marker or its record does not read as one (a control batch of a
/// type this broker does not know: readers skip it).
pub fn marker_kind(header: &BatchHeader, batch: &[u8]) -> Option<MarkerKind> {
    if !header.is_control() || header.compression() != 0 {
        return None;
    }
    let end = header.total_bytes().min(batch.len());
    let data = batch.get(BATCH_HEADER_BYTES..end)?;
    let record = record_refs(data).next()??;
    let key = record.key?;
    let version = i16::from_be_bytes(key.get(..2)?.try_into().ok()?);
    let kind = i16::from_be_bytes(key.get(2..4)?.try_into().ok()?);
    match (version, kind) {
        (0, 0) => Some(MarkerKind::Abort),
        (0, 1) => Some(MarkerKind::Commit),
        _ => None,
    }
}

/// The coordinator epoch a marker's value carries; 0 when it does not read as one.
pub fn marker_coordinator_epoch(batch: &[u8]) -> i32 {
    let value = batch
        .get(BATCH_HEADER_BYTES..)
        .and_then(|data| record_refs(data).next().flatten())
        .and_then(|record| record.value);
    value
        .and_then(|v| v.get(2..6))
        .and_then(|epoch| epoch.try_into().ok())
        .map_or(0, i32::from_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch;
    use bytes::Bytes;
    use kafka_protocol::records::{RecordBatchDecoder, RecordSet};

    #[test]
    fn markers_are_valid_batches_that_read_back_and_decode_in_kafka_protocol() {
        for kind in [MarkerKind::Abort, MarkerKind::Commit] {
            let marker = Marker {
                producer_id: ProducerId::new(42),
                producer_epoch: ProducerEpoch::new(3),
                kind,
                coordinator_epoch: 7,
                timestamp_ms: 1_700_000_000_000,
            };
            let bytes = marker.encode();
            let header = batch::validate(&bytes).expect("a valid batch");
            assert!(header.is_control() && header.is_transactional());
            assert_eq!(
                (
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence
                ),
                (42, 3, -1)
            );
            assert_eq!(marker_kind(&header, &bytes), Some(kind));
            assert_eq!(marker_coordinator_epoch(&bytes), 7);
            let RecordSet { records, .. } =
                RecordBatchDecoder::decode(&mut Bytes::from(bytes)).expect("decodes");
            assert_eq!(records.len(), 1);
            assert!(records[0].control && records[0].transactional);
            let value = records[0].value.as_ref().unwrap();
            assert_eq!(&value[2..6], &7i32.to_be_bytes());
        }
    }

    #[test]
    fn plain_batches_are_not_markers() {
        let bytes = crate::testutil::batch(1, 10, 0, 1);
        let header = batch::validate(&bytes).unwrap();
        assert_eq!(marker_kind(&header, &bytes), None);
    }
}
