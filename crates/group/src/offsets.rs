//! Committed offsets as records in the broker's own log (`<data_dir>/groups/offsets/`),
//! one record per (group, topic, partition), in Kafka v2 record batches like any topic.
//!
//! Key, big-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 1 | format version, 0 |
//! | 2 + n | group id: length u16, UTF-8 |
//! | 2 + n | topic: length u16, UTF-8 |
//! | 4 | partition i32 |
//!
//! Value (absent for a deletion, "tombstone"):
//!
//! | bytes | field |
//! |---|---|
//! | 1 | format version, 0 |
//! | 8 | committed offset i64 |
//! | 4 | leader epoch i32 (-1 unknown) |
//! | 8 | commit time, ms since the epoch |
//! | 2 + n | metadata: length i16 (-1 for none), UTF-8 |
//!
//! A record whose key starts with format version 1 is an offset committed inside a
//! transaction (TxnOffsetCommit), pending until the transaction ends: its key has the
//! producer id (i64) of the transaction between the version and the group id; its value
//! is as above. When the transaction ends, one batch holds a tombstone for each of its
//! pending keys and, if it committed, the same offsets as plain records: the batch is
//! appended whole or not at all, so a crash leaves the offsets either pending or ended.
//!
//! Replaying the log in order and keeping the last record per key gives the committed
//! offsets and the pending ones; a tombstone removes the key.

use crate::state::{leader_epoch_from_wire, leader_epoch_to_wire, OffsetCommit};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use headway_base::{Offset, PartitionIndex, ProducerId, TopicPartition};
use headway_broker::internal_log;
use headway_broker::internal_log::{get_str, put_str};

const FORMAT_VERSION: u8 = 0;
/// The key's version byte of an offset pending in a transaction.
const PENDING_FORMAT_VERSION: u8 = 1;

/// One record of the offsets log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetRecord {
    /// The transaction (its producer id) the offset is pending in; `None` for a
    /// committed offset.
    pub pending_in: Option<ProducerId>,
    pub group_id: String,
    pub topic_partition: TopicPartition,
    /// `None` deletes the committed offset.
    pub value: Option<OffsetCommit>,
}

impl OffsetRecord {
    pub fn encode_key(&self) -> Bytes {
        let TopicPartition { topic, partition } = &self.topic_partition;
        let mut buf = BytesMut::with_capacity(17 + self.group_id.len() + topic.len());
        match self.pending_in {
            None => buf.put_u8(FORMAT_VERSION),
            Some(producer_id) => {
                buf.put_u8(PENDING_FORMAT_VERSION);
                buf.put_i64(producer_id.value());
            }
        }
        put_str(&mut buf, &self.group_id);
        put_str(&mut buf, topic);
        buf.put_i32(partition.value());
        buf.freeze()
    }

    pub fn encode_value(&self) -> Option<Bytes> {
        let v = self.value.as_ref()?;
        let mut buf = BytesMut::with_capacity(23 + v.metadata.as_ref().map_or(0, String::len));
        buf.put_u8(FORMAT_VERSION);
        buf.put_i64(v.offset.value());
        buf.put_i32(leader_epoch_to_wire(v.leader_epoch));
        buf.put_i64(v.commit_timestamp_ms);
        match &v.metadata {
            Some(m) => {
                buf.put_i16(m.len() as i16);
                buf.put_slice(m.as_bytes());
            }
            None => buf.put_i16(-1),
        }
        Some(buf.freeze())
    }

    /// Decodes a record; `None` for a record this version does not understand.
    pub fn decode(key: Option<Bytes>, value: Option<Bytes>) -> Option<OffsetRecord> {
        let mut key = key?;
        if key.remaining() < 1 {
            return None;
        }
        let pending_in = match key.get_u8() {
            FORMAT_VERSION => None,
            PENDING_FORMAT_VERSION if key.remaining() >= 8 => Some(ProducerId::new(key.get_i64())),
            _ => return None,
        };
        let group_id = get_str(&mut key)?;
        let topic = get_str(&mut key)?;
        if key.remaining() != 4 {
            return None;
        }
        let partition = PartitionIndex::new(key.get_i32());
        let value = match value {
            None => None,
            Some(mut v) => {
                if v.remaining() < 23 || v.get_u8() != FORMAT_VERSION {
                    return None;
                }
                let offset = Offset::new(v.get_i64());
                let leader_epoch = leader_epoch_from_wire(v.get_i32());
                let commit_timestamp_ms = v.get_i64();
                let len = v.get_i16();
                let metadata = if len < 0 {
                    None
                } else if v.remaining() >= len as usize {
                    Some(String::from_utf8(v.split_to(len as usize).to_vec()).ok()?)
                } else {
                    return None;
                };
                Some(OffsetCommit {
                    offset,
                    leader_epoch,
                    metadata,
                    commit_timestamp_ms,
                })
            }
        };
        Some(OffsetRecord {
            pending_in,
            group_id,
            topic_partition: TopicPartition::new(topic, partition),
            value,
        })
    }
}

/// Encodes records as one v2 batch for the offsets log.
pub fn encode_batch(records: &[OffsetRecord], now_ms: i64) -> Bytes {
    internal_log::encode_batch(
        records.iter().map(|r| (r.encode_key(), r.encode_value())),
        now_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::RecordBatchDecoder;

    #[test]
    fn records_round_trip_through_a_batch() {
        let records = vec![
            OffsetRecord {
                pending_in: None,
                group_id: "g".into(),
                topic_partition: TopicPartition::new("orders", PartitionIndex::new(3)),
                value: Some(OffsetCommit {
                    offset: Offset::new(42),
                    leader_epoch: Some(0),
                    metadata: Some("meta".into()),
                    commit_timestamp_ms: 1_700_000_000_000,
                }),
            },
            OffsetRecord {
                pending_in: None,
                group_id: "g".into(),
                topic_partition: TopicPartition::new("orders", PartitionIndex::new(4)),
                value: None,
            },
            OffsetRecord {
                pending_in: Some(ProducerId::new(7)),
                group_id: "g".into(),
                topic_partition: TopicPartition::new("orders", PartitionIndex::new(5)),
                value: Some(OffsetCommit {
                    offset: Offset::new(9),
                    leader_epoch: None,
                    metadata: None,
                    commit_timestamp_ms: 2,
                }),
            },
            OffsetRecord {
                pending_in: Some(ProducerId::new(7)),
                group_id: "g".into(),
                topic_partition: TopicPartition::new("orders", PartitionIndex::new(5)),
                value: None,
            },
        ];
        let mut batch = encode_batch(&records, 1);
        headway_log::batch::validate(&batch).expect("a valid v2 batch");
        let decoded: Vec<OffsetRecord> = RecordBatchDecoder::decode(&mut batch)
            .unwrap()
            .records
            .into_iter()
            .map(|r| OffsetRecord::decode(r.key, r.value).unwrap())
            .collect();
        assert_eq!(decoded, records);
    }

    #[test]
    fn unknown_or_truncated_records_are_skipped() {
        assert_eq!(
            OffsetRecord::decode(Some(Bytes::from_static(&[9, 0, 0])), None),
            None
        );
        assert_eq!(
            OffsetRecord::decode(Some(Bytes::from_static(&[0, 0, 5, b'a'])), None),
            None
        );
        assert_eq!(OffsetRecord::decode(None, None), None);
        // A pending key cut inside its producer id.
        assert_eq!(
            OffsetRecord::decode(Some(Bytes::from_static(&[1, 0, 0, 0])), None),
            None
        );
    }
}
