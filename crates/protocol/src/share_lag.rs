//! DescribeShareGroupOffsets at version 1 (KIP-1226), which `kafka-protocol` 0.18 does
//! not know: version 1 adds each share-partition's `Lag` (int64, after LeaderEpoch) to
//! the answer. The request is laid out as at version 0, so the crate decodes it at 0
//! (after the shape walk has checked it at its own version).
//!
//! The answer is written here level by level as the crate writes version 0 (compact
//! strings and arrays, tagged fields at the end of each struct), each partition being
//! the crate's version 0 encoding with the lag put in after its first 16 bytes
//! (PartitionIndex int32, StartOffset int64, LeaderEpoch int32).

use crate::request::{ProtocolError, Request};
use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::describe_share_group_offsets_response::DescribeShareGroupOffsetsResponsePartition;
use kafka_protocol::messages::{
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse,
};
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use std::collections::BTreeMap;

/// The newest DescribeShareGroupOffsets version this module encodes.
pub const DESCRIBE_SHARE_GROUP_OFFSETS_VERSION_MAX: i16 = 1;

/// Decodes a DescribeShareGroupOffsets request of version 0 or 1 (laid out alike).
pub fn decode_describe_share_group_offsets(
    request: &Request,
) -> Result<DescribeShareGroupOffsetsRequest, ProtocolError> {
    let version = request.api_version();
    let malformed = |reason: String| ProtocolError::Malformed {
        what: format!("{:?} v{version} request", request.api_key),
        reason,
    };
    if !(0..=DESCRIBE_SHARE_GROUP_OFFSETS_VERSION_MAX).contains(&version) {
        return Err(malformed("version not supported".into()));
    }
    request.footprint()?;
    let mut body = request.body.clone();
    DescribeShareGroupOffsetsRequest::decode(&mut body, 0).map_err(|e| malformed(e.to_string()))
}

/// The bytes of a partition before its lag: PartitionIndex, StartOffset, LeaderEpoch.
const PARTITION_LAG_AT: usize = 4 + 8 + 4;

/// A DescribeShareGroupOffsets answer at version 0 or 1, with the lag of each partition
/// (by group, topic and partition position in `body`; -1, "unknown", where missing).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DescribeShareGroupOffsetsAnswer {
    pub body: DescribeShareGroupOffsetsResponse,
    pub lags: Vec<Vec<Vec<i64>>>,
}

impl DescribeShareGroupOffsetsAnswer {
    fn lag(&self, g: usize, t: usize, p: usize) -> i64 {
        self.lags
            .get(g)
            .and_then(|ts| ts.get(t))
            .and_then(|ps| ps.get(p))
            .copied()
            .unwrap_or(-1)
    }

    fn write(&self, out: &mut BytesMut, version: i16) -> anyhow::Result<()> {
        let lag = version >= 1;
        let body = &self.body;
        out.put_i32(body.throttle_time_ms);
        length(out, body.groups.len());
        for (g, group) in body.groups.iter().enumerate() {
            string(out, Some(&group.group_id.0));
            length(out, group.topics.len());
            for (t, topic) in group.topics.iter().enumerate() {
                string(out, Some(&topic.topic_name.0));
                out.put_slice(topic.topic_id.as_bytes());
                length(out, topic.partitions.len());
                for (p, partition) in topic.partitions.iter().enumerate() {
                    let lag = lag.then(|| self.lag(g, t, p));
                    write_partition(out, partition, lag)?;
                }
                tagged(out, &topic.unknown_tagged_fields);
            }
            out.put_i16(group.error_code);
            string(out, group.error_message.as_ref());
            tagged(out, &group.unknown_tagged_fields);
        }
        tagged(out, &body.unknown_tagged_fields);
        Ok(())
    }
}

fn write_partition(
    out: &mut BytesMut,
    partition: &DescribeShareGroupOffsetsResponsePartition,
    lag: Option<i64>,
) -> anyhow::Result<()> {
    let mut v0 = BytesMut::with_capacity(partition.compute_size(0)?);
    partition.encode(&mut v0, 0)?;
    out.put_slice(&v0[..PARTITION_LAG_AT]);
    if let Some(lag) = lag {
        out.put_i64(lag);
    }
    out.put_slice(&v0[PARTITION_LAG_AT..]);
    Ok(())
}

fn varint(out: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

/// A compact array's length: the count plus one.
fn length(out: &mut BytesMut, count: usize) {
    varint(out, count as u64 + 1);
}

/// A compact nullable string: its length plus one (0 for null), then its bytes.
fn string(out: &mut BytesMut, value: Option<&StrBytes>) {
    match value {
        None => varint(out, 0),
        Some(s) => {
            varint(out, s.len() as u64 + 1);
            out.put_slice(s.as_bytes());
        }
    }
}

/// Tagged fields: their count, then each tag, size and bytes, in tag order.
fn tagged(out: &mut BytesMut, fields: &BTreeMap<i32, bytes::Bytes>) {
    varint(out, fields.len() as u64);
    for (&tag, value) in fields {
        varint(out, tag as u32 as u64);
        varint(out, value.len() as u64);
        out.put_slice(value);
    }
}

impl Encodable for DescribeShareGroupOffsetsAnswer {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> anyhow::Result<()> {
        let mut out = BytesMut::new();
        self.write(&mut out, version)?;
        buf.put_slice(&out);
        Ok(())
    }

    fn compute_size(&self, version: i16) -> anyhow::Result<usize> {
        let partitions: usize = self
            .body
            .groups
            .iter()
            .flat_map(|g| &g.topics)
            .map(|t| t.partitions.len())
            .sum();
        let lags = if version >= 1 { 8 * partitions } else { 0 };
        Ok(self.body.compute_size(0)? + lags)
    }
}

impl HeaderVersion for DescribeShareGroupOffsetsAnswer {
    fn header_version(version: i16) -> i16 {
        DescribeShareGroupOffsetsResponse::header_version(version.min(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::describe_share_group_offsets_response::{
        DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponseTopic,
    };
    use kafka_protocol::messages::TopicName;

    fn answer() -> DescribeShareGroupOffsetsAnswer {
        let partition = |index: i32, start: i64| {
            let mut p = DescribeShareGroupOffsetsResponsePartition::default()
                .with_partition_index(index)
                .with_start_offset(start)
                .with_leader_epoch(0);
            p.unknown_tagged_fields
                .insert(0x4857, bytes::Bytes::from_static(&[1, 2, 3]));
            p
        };
        let mut topic = DescribeShareGroupOffsetsResponseTopic::default()
            .with_topic_name(TopicName(StrBytes::from_static_str("t")))
            .with_topic_id(uuid::Uuid::from_u128(9))
            .with_partitions(vec![partition(0, 4), partition(1, -1)]);
        topic
            .unknown_tagged_fields
            .insert(300, bytes::Bytes::from_static(b"x"));
        let body = DescribeShareGroupOffsetsResponse::default()
            .with_throttle_time_ms(5)
            .with_groups(vec![
                DescribeShareGroupOffsetsResponseGroup::default()
                    .with_group_id(StrBytes::from_static_str("g").into())
                    .with_topics(vec![topic]),
                DescribeShareGroupOffsetsResponseGroup::default()
                    .with_group_id(StrBytes::from_static_str("missing").into())
                    .with_error_code(69)
                    .with_error_message(Some(StrBytes::from_static_str("no such group"))),
            ]);
        DescribeShareGroupOffsetsAnswer {
            body,
            lags: vec![vec![vec![6]]],
        }
    }

    fn encode(answer: &DescribeShareGroupOffsetsAnswer, version: i16) -> Vec<u8> {
        let mut out = BytesMut::new();
        answer.encode(&mut out, version).unwrap();
        assert_eq!(out.len(), answer.compute_size(version).unwrap());
        out.to_vec()
    }

    #[test]
    fn version_0_is_written_as_the_crate_writes_it() {
        let answer = answer();
        let mut crate_v0 = BytesMut::new();
        answer.body.encode(&mut crate_v0, 0).unwrap();
        assert_eq!(encode(&answer, 0), crate_v0.to_vec());
    }

    #[test]
    fn version_1_puts_each_partitions_lag_after_its_leader_epoch() {
        let answer = answer();
        let v0 = encode(&answer, 0);
        let v1 = encode(&answer, 1);
        // Throttle (4), one-byte group count, group "g" (2), topic count (1), name
        // "t" (2), topic id (16), partition count (1): the first partition.
        let first = 4 + 1 + 2 + 1 + 2 + 16 + 1;
        // The second, past the first's lag (8) and the first at version 0: 16 bytes,
        // error code (2), null message (1), tagged fields (count 1, tag 0x4857 in 3,
        // size 1, 3 bytes).
        let second = first + 8 + 16 + 2 + 1 + (1 + 3 + 1 + 3);
        let mut expected = v0.clone();
        expected.splice(first + 16..first + 16, 6i64.to_be_bytes());
        expected.splice(second + 16..second + 16, (-1i64).to_be_bytes());
        assert_eq!(v1, expected);
    }
}
