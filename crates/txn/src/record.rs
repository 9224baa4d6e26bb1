//! The coordinator's log (`<data_dir>/transactions/state/`, served to clients as the
//! internal topic `__transaction_state`): one record per state change of a
//! transactional id, in Kafka v2 record batches like any topic. The key is the
//! transactional id, so the log cleaner keeps each id's latest record; a removed id is
//! a tombstone (no value).
//!
//! Key, big-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 1 | format version, 0 |
//! | 2 + n | transactional id: length u16, UTF-8 |
//!
//! Value:
//!
//! | bytes | field |
//! |---|---|
//! | 1 | format version, 0 |
//! | 8 | producer id i64 |
//! | 2 | producer epoch i16 |
//! | 8 | last producer id i64 (-1 none) |
//! | 2 | last producer epoch i16 (-1 none) |
//! | 8 | next producer id i64 (-1 none) |
//! | 4 | transaction timeout ms i32 |
//! | 1 | state: 0 Empty, 1 Ongoing, 2 PrepareCommit, 3 PrepareAbort, 4 CompleteCommit, 5 CompleteAbort, 6 Dead |
//! | 1 | transactions version 2: 0 or 1 |
//! | 8 | transaction start time, ms since the epoch (-1 none) |
//! | 8 | last update time, ms since the epoch |
//! | 4 + … | partitions: count u32, then each topic (length u16, UTF-8) and partition i32 |
//! | 4 + … | groups: count u32, then each group id (length u16, UTF-8) |
//!
//! Replaying the log in order and keeping the last record per key gives every id's
//! state. Every count is checked against the bytes present before it is trusted.

use crate::state::{TxnMetadata, TxnState};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use headway_base::{PartitionIndex, ProducerEpoch, ProducerId, TopicPartition};
use headway_broker::internal_log::{self, get_str, put_str};
use std::collections::BTreeSet;

const FORMAT_VERSION: u8 = 0;
/// Bytes of a value before its partitions.
const VALUE_FIXED_BYTES: usize = 1 + 8 + 2 + 8 + 2 + 8 + 4 + 1 + 1 + 8 + 8;

/// One record of the coordinator's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnRecord {
    pub transactional_id: String,
    /// `None` removes the id (a tombstone).
    pub value: Option<TxnMetadata>,
}

impl TxnRecord {
    pub fn encode_key(&self) -> Bytes {
        let mut buf = BytesMut::with_capacity(3 + self.transactional_id.len());
        buf.put_u8(FORMAT_VERSION);
        put_str(&mut buf, &self.transactional_id);
        buf.freeze()
    }

    pub fn encode_value(&self) -> Option<Bytes> {
        let m = self.value.as_ref()?;
        let mut buf = BytesMut::with_capacity(VALUE_FIXED_BYTES + 8 + 32 * m.partitions.len());
        buf.put_u8(FORMAT_VERSION);
        buf.put_i64(m.producer_id.value());
        buf.put_i16(m.producer_epoch.value());
        buf.put_i64(ProducerId::to_wire(m.last_producer_id));
        buf.put_i16(ProducerEpoch::to_wire(m.last_producer_epoch));
        buf.put_i64(ProducerId::to_wire(m.next_producer_id));
        buf.put_i32(m.timeout_ms);
        buf.put_u8(m.state.code());
        buf.put_u8(u8::from(m.version2));
        buf.put_i64(m.start_time_ms.unwrap_or(-1));
        buf.put_i64(m.last_update_ms);
        buf.put_u32(m.partitions.len() as u32);
        for tp in &m.partitions {
            put_str(&mut buf, &tp.topic);
            buf.put_i32(tp.partition.value());
        }
        buf.put_u32(m.groups.len() as u32);
        for g in &m.groups {
            put_str(&mut buf, g);
        }
        Some(buf.freeze())
    }

    /// Decodes a record; `None` for a record this version does not understand.
    pub fn decode(key: Option<Bytes>, value: Option<Bytes>) -> Option<TxnRecord> {
        let mut key = key?;
        if key.remaining() < 1 || key.get_u8() != FORMAT_VERSION {
            return None;
        }
        let transactional_id = get_str(&mut key)?;
        if key.has_remaining() {
            return None;
        }
        let value = match value {
            None => None,
            Some(v) => Some(decode_value(&transactional_id, v)?),
        };
        Some(TxnRecord {
            transactional_id,
            value,
        })
    }
}

fn decode_value(transactional_id: &str, mut v: Bytes) -> Option<TxnMetadata> {
    if v.remaining() < VALUE_FIXED_BYTES + 8 || v.get_u8() != FORMAT_VERSION {
        return None;
    }
    let producer_id = ProducerId::from_wire(v.get_i64())?;
    let producer_epoch = ProducerEpoch::from_wire(v.get_i16())?;
    let last_producer_id = ProducerId::from_wire(v.get_i64());
    let last_producer_epoch = ProducerEpoch::from_wire(v.get_i16());
    let next_producer_id = ProducerId::from_wire(v.get_i64());
    let timeout_ms = v.get_i32();
    let state = TxnState::from_code(v.get_u8())?;
    let version2 = match v.get_u8() {
        0 => false,
        1 => true,
        _ => return None,
    };
    let start = v.get_i64();
    let start_time_ms = (start >= 0).then_some(start);
    let last_update_ms = v.get_i64();
    let count = v.get_u32() as usize;
    // Each partition takes at least 6 bytes: a count beyond that is damage.
    if count > v.remaining() / 6 {
        return None;
    }
    let mut partitions = BTreeSet::new();
    for _ in 0..count {
        let topic = get_str(&mut v)?;
        if v.remaining() < 4 {
            return None;
        }
        partitions.insert(TopicPartition::new(topic, PartitionIndex::new(v.get_i32())));
    }
    if v.remaining() < 4 {
        return None;
    }
    let count = v.get_u32() as usize;
    if count > v.remaining() / 2 {
        return None;
    }
    let mut groups = BTreeSet::new();
    for _ in 0..count {
        groups.insert(get_str(&mut v)?);
    }
    if v.has_remaining() {
        return None;
    }
    Some(TxnMetadata {
        transactional_id: transactional_id.to_string(),
        producer_id,
        producer_epoch,
        last_producer_id,
        last_producer_epoch,
        next_producer_id,
        timeout_ms,
        state,
        partitions,
        groups,
        start_time_ms,
        last_update_ms,
        version2,
    })
}

/// Encodes records as one v2 batch for the coordinator's log.
pub fn encode_batch(records: &[TxnRecord], now_ms: i64) -> Bytes {
    internal_log::encode_batch(
        records.iter().map(|r| (r.encode_key(), r.encode_value())),
        now_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::RecordBatchDecoder;

    fn sample() -> TxnMetadata {
        TxnMetadata {
            transactional_id: "t".into(),
            producer_id: ProducerId::new(7),
            producer_epoch: ProducerEpoch::new(3),
            last_producer_id: None,
            last_producer_epoch: Some(ProducerEpoch::new(2)),
            next_producer_id: Some(ProducerId::new(9)),
            timeout_ms: 60_000,
            state: TxnState::PrepareCommit,
            partitions: [
                TopicPartition::new("orders", PartitionIndex::new(1)),
                TopicPartition::new("__consumer_offsets", PartitionIndex::new(0)),
            ]
            .into_iter()
            .collect(),
            groups: ["billing".to_string()].into_iter().collect(),
            start_time_ms: Some(1_700_000_000_000),
            last_update_ms: 1_700_000_000_500,
            version2: true,
        }
    }

    #[test]
    fn records_round_trip_through_a_batch() {
        let records = vec![
            TxnRecord {
                transactional_id: "t".into(),
                value: Some(sample()),
            },
            TxnRecord {
                transactional_id: "gone".into(),
                value: None,
            },
        ];
        let mut batch = encode_batch(&records, 1);
        headway_log::batch::validate(&batch).expect("a valid v2 batch");
        let decoded: Vec<TxnRecord> = RecordBatchDecoder::decode(&mut batch)
            .unwrap()
            .records
            .into_iter()
            .map(|r| TxnRecord::decode(r.key, r.value).unwrap())
            .collect();
        assert_eq!(decoded, records);
    }

    #[test]
    fn damaged_or_unknown_records_are_refused() {
        let record = TxnRecord {
            transactional_id: "t".into(),
            value: Some(sample()),
        };
        let (key, value) = (record.encode_key(), record.encode_value().unwrap());
        for cut in 0..value.len() {
            let short = value.slice(..cut);
            assert_eq!(
                TxnRecord::decode(Some(key.clone()), Some(short)),
                None,
                "{cut}"
            );
        }
        let mut huge = value.to_vec();
        let count_at = VALUE_FIXED_BYTES;
        huge[count_at..count_at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            TxnRecord::decode(Some(key.clone()), Some(huge.into())),
            None
        );
        assert_eq!(
            TxnRecord::decode(Some(Bytes::from_static(&[9, 0, 0])), None),
            None
        );
        assert_eq!(TxnRecord::decode(None, None), None);
    }
}
