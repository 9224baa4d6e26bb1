//! Share-partition state as records in the broker's own log
//! (`<data_dir>/share/state/`, readable as `__share_group_state`), one key per
//! (group, topic, partition), the value a whole [`Snapshot`]: replaying the log and
//! keeping the last record per key gives every share-partition's state, and the log
//! cleaner compacts it to about one record per share-partition.
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
//! | 1 | format version: 0, or 1 in a cluster's replicated `__share_group_state` |
//! | 4 + 8 | version 1 only: the writer's [`Written`]: leader epoch i32, sequence i64 |
//! | 4 | state epoch i32 |
//! | 8 | share-partition start offset i64 |
//! | 4 | runs u32 |
//! | 19 each | run: first offset i64, last offset i64, state u8 (0 available, 2 acknowledged, 4 archived), delivery count u16 |

use crate::partition::{DurableRun, DurableState, Snapshot};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use headway_base::{Offset, PartitionIndex, TopicPartition};
use headway_broker::internal_log;
use headway_broker::internal_log::{get_str, put_str};

const FORMAT_VERSION: u8 = 0;
/// A value that carries its writer's [`Written`].
const WRITTEN_VERSION: u8 = 1;
const RUN_BYTES: usize = 19;

/// In a cluster: who wrote a snapshot, so the state store keeps the newest. The leader
/// epoch is the data partition's, at which its leader loaded the share-partition (a
/// deposed leader's later writes carry an older one and are refused); the sequence
/// orders one leader's snapshots of a share-partition, which may reach the store in
/// any order (an older one arriving later is dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Written {
    pub leader_epoch: i32,
    pub sequence: i64,
}

/// One record of the share state log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRecord {
    pub group_id: String,
    pub topic_partition: TopicPartition,
    /// `None` deletes the share-partition's state.
    pub snapshot: Option<Snapshot>,
    /// In a cluster's replicated state: the writer (kept with the snapshot).
    pub written: Option<Written>,
}

/// A durable state's number, on disk and on the wire (Kafka's delivery states: 0
/// available, 2 acknowledged, 4 archived).
pub fn state_to_disk(state: DurableState) -> u8 {
    match state {
        DurableState::Available => 0,
        DurableState::Acknowledged => 2,
        DurableState::Archived => 4,
    }
}

/// The durable state a number names, if any.
pub fn state_from_disk(value: u8) -> Option<DurableState> {
    Some(match value {
        0 => DurableState::Available,
        2 => DurableState::Acknowledged,
        4 => DurableState::Archived,
        _ => return None,
    })
}

impl StateRecord {
    pub fn encode_key(&self) -> Bytes {
        let TopicPartition { topic, partition } = &self.topic_partition;
        let mut buf = BytesMut::with_capacity(9 + self.group_id.len() + topic.len());
        buf.put_u8(FORMAT_VERSION);
        put_str(&mut buf, &self.group_id);
        put_str(&mut buf, topic);
        buf.put_i32(partition.value());
        buf.freeze()
    }

    pub fn encode_value(&self) -> Option<Bytes> {
        let s = self.snapshot.as_ref()?;
        let mut buf = BytesMut::with_capacity(29 + RUN_BYTES * s.runs.len());
        match self.written {
            None => buf.put_u8(FORMAT_VERSION),
            Some(w) => {
                buf.put_u8(WRITTEN_VERSION);
                buf.put_i32(w.leader_epoch);
                buf.put_i64(w.sequence);
            }
        }
        buf.put_i32(s.state_epoch);
        buf.put_i64(s.start_offset.value());
        buf.put_u32(s.runs.len() as u32);
        for r in &s.runs {
            buf.put_i64(r.first.value());
            buf.put_i64(r.last.value());
            buf.put_u8(state_to_disk(r.state));
            buf.put_u16(r.delivery_count);
        }
        Some(buf.freeze())
    }

    /// Decodes a record; `None` for a record this version does not understand or
    /// whose counts the bytes do not back.
    pub fn decode(key: Option<Bytes>, value: Option<Bytes>) -> Option<StateRecord> {
        let mut key = key?;
        if key.remaining() < 1 || key.get_u8() != FORMAT_VERSION {
            return None;
        }
        let group_id = get_str(&mut key)?;
        let topic = get_str(&mut key)?;
        if key.remaining() != 4 {
            return None;
        }
        let partition = PartitionIndex::new(key.get_i32());
        let (snapshot, written) = match value {
            None => (None, None),
            Some(v) => {
                let (snapshot, written) = decode_value(v)?;
                (Some(snapshot), written)
            }
        };
        Some(StateRecord {
            group_id,
            topic_partition: TopicPartition::new(topic, partition),
            snapshot,
            written,
        })
    }
}

fn decode_value(mut v: Bytes) -> Option<(Snapshot, Option<Written>)> {
    if v.remaining() < 1 {
        return None;
    }
    let written = match v.get_u8() {
        FORMAT_VERSION => None,
        WRITTEN_VERSION if v.remaining() >= 12 => Some(Written {
            leader_epoch: v.get_i32(),
            sequence: v.get_i64(),
        }),
        _ => return None,
    };
    Some((decode_snapshot(v)?, written))
}

fn decode_snapshot(mut v: Bytes) -> Option<Snapshot> {
    if v.remaining() < 16 {
        return None;
    }
    let state_epoch = v.get_i32();
    let start_offset = Offset::new(v.get_i64());
    let runs = v.get_u32() as usize;
    // Checked against the bytes present before anything is allocated.
    if v.remaining() != runs.checked_mul(RUN_BYTES)? {
        return None;
    }
    let mut out = Vec::with_capacity(runs);
    for _ in 0..runs {
        let first = Offset::new(v.get_i64());
        let last = Offset::new(v.get_i64());
        let state = state_from_disk(v.get_u8())?;
        let delivery_count = v.get_u16();
        out.push(DurableRun {
            first,
            last,
            state,
            delivery_count,
        });
    }
    Some(Snapshot {
        start_offset,
        state_epoch,
        runs: out,
    })
}

/// Encodes records as one v2 batch for the share state log.
pub fn encode_batch(records: &[StateRecord], now_ms: i64) -> Bytes {
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
            StateRecord {
                group_id: "g".into(),
                topic_partition: TopicPartition::new("orders", PartitionIndex::new(3)),
                snapshot: Some(Snapshot {
                    start_offset: Offset::new(7),
                    state_epoch: 2,
                    runs: vec![
                        DurableRun {
                            first: Offset::new(7),
                            last: Offset::new(9),
                            state: DurableState::Available,
                            delivery_count: 2,
                        },
                        DurableRun {
                            first: Offset::new(10),
                            last: Offset::new(10),
                            state: DurableState::Archived,
                            delivery_count: 5,
                        },
                        DurableRun {
                            first: Offset::new(12),
                            last: Offset::new(20),
                            state: DurableState::Acknowledged,
                            delivery_count: 1,
                        },
                    ],
                }),
                written: None,
            },
            StateRecord {
                group_id: "g".into(),
                topic_partition: TopicPartition::new("orders", PartitionIndex::new(5)),
                snapshot: Some(Snapshot {
                    start_offset: Offset::new(3),
                    state_epoch: 0,
                    runs: Vec::new(),
                }),
                written: Some(Written {
                    leader_epoch: 4,
                    sequence: 1_765_000_000_000_001,
                }),
            },
            StateRecord {
                group_id: "g".into(),
                topic_partition: TopicPartition::new("orders", PartitionIndex::new(4)),
                snapshot: None,
                written: None,
            },
        ];
        let mut batch = encode_batch(&records, 1);
        headway_log::batch::validate(&batch).expect("a valid v2 batch");
        let decoded: Vec<StateRecord> = RecordBatchDecoder::decode(&mut batch)
            .unwrap()
            .records
            .into_iter()
            .map(|r| StateRecord::decode(r.key, r.value).unwrap())
            .collect();
        assert_eq!(decoded, records);
    }

    #[test]
    fn a_run_count_the_bytes_do_not_back_is_refused() {
        let key = StateRecord {
            group_id: "g".into(),
            topic_partition: TopicPartition::new("t", PartitionIndex::new(0)),
            snapshot: None,
            written: None,
        }
        .encode_key();
        let mut value = BytesMut::new();
        value.put_u8(0);
        value.put_i32(0);
        value.put_i64(0);
        value.put_u32(u32::MAX);
        assert_eq!(StateRecord::decode(Some(key), Some(value.freeze())), None);
        assert_eq!(StateRecord::decode(None, None), None);
    }
}
