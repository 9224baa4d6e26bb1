//! Reading the records inside a stored batch, where the broker needs them: ListOffsets
//! by time, which answers with the first record at or after a timestamp, and the
//! cleaner of compacted topics ([`crate::compaction`]), which keeps the latest record
//! of each key.
//!
//! A stored batch is whatever a producer sent with a valid CRC: its record count, its
//! records' lengths and header counts, and (compressed) how large it inflates to are the
//! producer's to choose. So records are walked as a stream, one record's leading fields
//! at a time, without ever sizing a buffer from a count: a record's length is checked
//! against what is left of the batch, decompression is read through a bounded reader
//! ([`RECORDS_SCAN_BYTES_MAX`]), and a batch that is malformed or inflates past the
//! bound is answered at the batch level (its base offset, which is at or before the
//! exact record, so a consumer seeking there misses nothing).
//!
//! Record layout (message format v2), each field a zigzag varint unless noted:
//! length, attributes (int8), timestamp delta (varlong), offset delta, key length, key,
//! value length, value, header count, headers.

use crate::batch::{BatchHeader, BATCH_HEADER_BYTES};
use std::io::{self, Read};

/// Bytes of decompressed record data one lookup reads before it settles for the
/// batch-level answer (a batch is at most `max.message.bytes` compressed; a batch that
/// inflates past this is either enormous or a decompression bomb).
pub const RECORDS_SCAN_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// The offset and timestamp of the first record of `batch` whose timestamp is at or
/// after `timestamp`; `None` when the batch cannot be walked (then the caller answers
/// with the batch's own offset and timestamp).
pub fn first_record_at(batch: &[u8], timestamp: i64) -> Option<(i64, i64)> {
    let header = BatchHeader::parse(batch).ok()?;
    let end = header.total_bytes().min(batch.len());
    let data = batch.get(BATCH_HEADER_BYTES..end)?;
    let log_append_time = header.attributes & 0x08 != 0;
    let records = inflate(header.compression(), data)?;
    let mut records = io::BufReader::new(records.take(RECORDS_SCAN_BYTES_MAX));
    for _ in 0..header.records_count.max(0) {
        let record = next_record(&mut records).ok()??;
        let record_timestamp = if log_append_time {
            header.max_timestamp
        } else {
            header.base_timestamp.wrapping_add(record.timestamp_delta)
        };
        if record_timestamp >= timestamp {
            let offset = header
                .base_offset
                .wrapping_add(i64::from(record.offset_delta));
            return Some((offset, record_timestamp));
        }
    }
    None
}

/// At most this many keyless records are named by [`keyless_records`]; the rest are
/// only counted.
pub const KEYLESS_NAMED_MAX: usize = 1000;

/// The records of a batch that have no key, which a compacted topic refuses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Keyless {
    /// How many records have no key.
    pub count: u64,
    /// The first [`KEYLESS_NAMED_MAX`] of them, by their index in the batch (from 0).
    pub indexes: Vec<u32>,
}

/// Why a batch's records could not be walked to the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the batch's records cannot be read (malformed, or inflating past {RECORDS_SCAN_BYTES_MAX} bytes)")]
pub struct Unwalkable;

/// The keyless records of `batch`, walked as a stream (memory does not grow with the
/// batch). Every record the header counts must be there and well formed.
pub fn keyless_records(batch: &[u8]) -> Result<Keyless, Unwalkable> {
    let header = BatchHeader::parse(batch).map_err(|_| Unwalkable)?;
    let data = batch
        .get(BATCH_HEADER_BYTES..header.total_bytes())
        .ok_or(Unwalkable)?;
    let records = inflate(header.compression(), data).ok_or(Unwalkable)?;
    let mut records = io::BufReader::new(records.take(RECORDS_SCAN_BYTES_MAX));
    let mut keyless = Keyless::default();
    for index in 0..u32::try_from(header.records_count).map_err(|_| Unwalkable)? {
        let record = next_record(&mut records).ok().flatten().ok_or(Unwalkable)?;
        if record.key_is_null {
            keyless.count += 1;
            if keyless.indexes.len() < KEYLESS_NAMED_MAX {
                keyless.indexes.push(index);
            }
        }
    }
    Ok(keyless)
}

/// The records of a batch's data (what follows its header), inflated as they are read
/// when the batch is compressed; `None` for an unknown codec or a malformed stream
/// start. Unbounded: callers read it through `take`.
pub fn inflate(codec: u8, data: &[u8]) -> Option<Box<dyn Read + '_>> {
    Some(match codec {
        0 => Box::new(data),
        1 => Box::new(flate2::read::GzDecoder::new(data)),
        2 => snappy(data)?,
        3 => Box::new(lz4::Decoder::new(data).ok()?),
        4 => Box::new(zstd::stream::read::Decoder::new(data).ok()?),
        _ => return None,
    })
}

/// A record's leading fields, read from a stream.
struct RecordHead {
    offset_delta: i32,
    timestamp_delta: i64,
    key_is_null: bool,
}

/// Reads one record's leading fields and skips the rest of it. `None` at a malformed
/// record.
fn next_record(records: &mut impl Read) -> io::Result<Option<RecordHead>> {
    let Some(length) = varint(records)? else {
        return Ok(None);
    };
    if length <= 0 {
        return Ok(None);
    }
    let length = length as u64;
    // The record's own bytes, bounded by its length: a record cannot read into the next.
    let mut record = records.take(length);
    let mut attributes = [0u8; 1];
    record.read_exact(&mut attributes)?;
    let (Some(timestamp_delta), Some(offset_delta)) = (varint(&mut record)?, varint(&mut record)?)
    else {
        return Ok(None);
    };
    let Ok(offset_delta) = i32::try_from(offset_delta) else {
        return Ok(None);
    };
    let Some(key_length) = varint(&mut record)? else {
        return Ok(None);
    };
    io::copy(&mut record, &mut io::sink())?;
    if record.limit() != 0 {
        return Ok(None); // the data ended inside the record
    }
    Ok(Some(RecordHead {
        offset_delta,
        timestamp_delta,
        key_is_null: key_length == -1,
    }))
}

/// One record of a batch's inflated data, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// The record's bytes, its length prefix included. Its offset and timestamp are
    /// deltas from the batch header's, so a rewritten batch that keeps that header's
    /// base offset and base timestamp keeps these bytes as they are.
    pub raw: &'a [u8],
    pub offset_delta: i32,
    pub timestamp_delta: i64,
    pub key: Option<&'a [u8]>,
    /// The value; `None` when null.
    pub value: Option<&'a [u8]>,
    /// The value is null: on a compacted topic, a tombstone for the key.
    pub value_is_null: bool,
}

/// The records of a batch's inflated data, one at a time (nothing is collected, so a
/// batch of millions of tiny records costs no more memory than its bytes), each length
/// checked against what is left. An item is `None` where the data is malformed (a length
/// past the end, a record whose fields do not fill it exactly), and the walk ends there.
pub fn record_refs(data: &[u8]) -> impl Iterator<Item = Option<RecordRef<'_>>> {
    let (mut rest, mut failed) = (data, false);
    std::iter::from_fn(move || {
        if failed || rest.is_empty() {
            return None;
        }
        let record = take_record(&mut rest);
        failed = record.is_none();
        Some(record)
    })
}

/// The record at the start of `data`, which then starts after it.
fn take_record<'a>(data: &mut &'a [u8]) -> Option<RecordRef<'a>> {
    let start = *data;
    let length = usize::try_from(varint(data).ok()??).ok()?;
    let prefix = start.len() - data.len();
    let mut body = data.get(..length)?;
    let raw = &start[..prefix + length];
    *data = &data[length..];
    let _attributes = take(&mut body, 1)?;
    let timestamp_delta = varint(&mut body).ok()??;
    let offset_delta = i32::try_from(varint(&mut body).ok()??).ok()?;
    let key = nullable(&mut body)?;
    let value = nullable(&mut body)?;
    let headers = varint(&mut body).ok()??;
    for _ in 0..headers.max(0) {
        nullable(&mut body)??; // a header's key is never null
        nullable(&mut body)?;
    }
    if headers < 0 || !body.is_empty() {
        return None;
    }
    Some(RecordRef {
        raw,
        offset_delta,
        timestamp_delta,
        key,
        value,
        value_is_null: value.is_none(),
    })
}

/// The next `n` bytes of `data`.
fn take<'a>(data: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let taken = data.get(..n)?;
    *data = &data[n..];
    Some(taken)
}

/// A varint length and that many bytes; `Some(None)` for length -1 (null).
fn nullable<'a>(data: &mut &'a [u8]) -> Option<Option<&'a [u8]>> {
    match varint(data).ok()?? {
        -1 => Some(None),
        n => Some(Some(take(data, usize::try_from(n).ok()?)?)),
    }
}

/// A zigzag varint of up to 64 bits; `None` when it runs past 10 bytes.
fn varint(input: &mut impl Read) -> io::Result<Option<i64>> {
    let mut value: u64 = 0;
    for i in 0..10 {
        let mut byte = [0u8; 1];
        input.read_exact(&mut byte)?;
        value |= u64::from(byte[0] & 0x7f) << (7 * i);
        if byte[0] & 0x80 == 0 {
            return Ok(Some((value >> 1) as i64 ^ -((value & 1) as i64)));
        }
    }
    Ok(None)
}

/// Snappy as Kafka clients write it: the Java client's framing (a 16-byte header, then
/// blocks of a 4-byte length and a raw snappy block) or one raw snappy block. Each
/// block's inflated size is read from its own preamble and checked before inflating.
fn snappy(data: &[u8]) -> Option<Box<dyn Read + '_>> {
    const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
    let Some(mut rest) = data
        .strip_prefix(XERIAL_MAGIC)
        .and_then(|framed| framed.get(8..))
    else {
        return Some(Box::new(io::Cursor::new(inflate_snappy(data)?)));
    };
    let mut blocks = Vec::new();
    while !rest.is_empty() {
        let length = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        blocks.push(rest.get(4..4 + length)?);
        rest = &rest[4 + length..];
    }
    let mut inflated = blocks.into_iter().map_while(inflate_snappy);
    let first = inflated.next().unwrap_or_default();
    Some(Box::new(SnappyBlocks {
        current: io::Cursor::new(first),
        rest: Box::new(inflated),
    }))
}

fn inflate_snappy(block: &[u8]) -> Option<Vec<u8>> {
    let length = snap::raw::decompress_len(block).ok()?;
    if length as u64 > RECORDS_SCAN_BYTES_MAX {
        return None;
    }
    snap::raw::Decoder::new().decompress_vec(block).ok()
}

/// Java-framed snappy, one block inflated at a time.
struct SnappyBlocks<'a> {
    current: io::Cursor<Vec<u8>>,
    rest: Box<dyn Iterator<Item = Vec<u8>> + 'a>,
}

impl Read for SnappyBlocks<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let n = self.current.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            match self.rest.next() {
                Some(block) => self.current = io::Cursor::new(block),
                None => return Ok(0),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    const CODECS: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    fn batch(compression: Compression, timestamps: &[i64]) -> Vec<u8> {
        let keyed = timestamps
            .iter()
            .enumerate()
            .map(|(i, &t)| (t, Some(format!("k{i}"))));
        encode(compression, keyed)
    }

    /// One batch of records with these timestamps and keys.
    fn encode(
        compression: Compression,
        keyed: impl Iterator<Item = (i64, Option<String>)>,
    ) -> Vec<u8> {
        let records: Vec<Record> = keyed
            .enumerate()
            .map(|(i, (t, key))| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: 100 + i as i64,
                // One batch: the encoder starts a new one where offset - sequence changes.
                sequence: i as i32,
                timestamp: t,
                key: key.map(bytes::Bytes::from),
                value: Some(bytes::Bytes::from(vec![b'v'; 300])),
                headers: Default::default(),
            })
            .collect();
        let mut out = bytes::BytesMut::new();
        RecordBatchEncoder::encode(
            &mut out,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
        )
        .unwrap();
        out.to_vec()
    }

    #[test]
    fn finds_the_first_record_at_or_after_in_every_codec() {
        for codec in CODECS {
            let b = batch(codec, &[1_000, 2_000, 3_000, 3_000]);
            assert_eq!(first_record_at(&b, 0), Some((100, 1_000)), "{codec:?}");
            assert_eq!(first_record_at(&b, 2_500), Some((102, 3_000)), "{codec:?}");
            assert_eq!(first_record_at(&b, 3_000), Some((102, 3_000)), "{codec:?}");
            assert_eq!(first_record_at(&b, 3_001), None, "{codec:?}");
        }
    }

    #[test]
    fn hostile_counts_and_lengths_are_walked_without_allocating_from_them() {
        let mut b = batch(Compression::None, &[1_000, 2_000]);
        // A record count of 2^31 - 1: the walk stops at the data's end.
        b[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(first_record_at(&b, 1_500), Some((101, 2_000)));
        assert_eq!(first_record_at(&b, 9_999), None);
        // The first record's length claims far more than the batch holds.
        let mut b = batch(Compression::None, &[1_000, 2_000]);
        b[BATCH_HEADER_BYTES] = 0xfe;
        b.splice(
            BATCH_HEADER_BYTES + 1..BATCH_HEADER_BYTES + 1,
            [0xff, 0xff, 0xff, 0x0f],
        );
        assert_eq!(first_record_at(&b, 0), None);
        // Truncated in the middle of a record, and no data at all.
        let whole = batch(Compression::None, &[1_000, 2_000]);
        assert_eq!(first_record_at(&whole[..whole.len() - 10], 1_500), None);
        assert_eq!(first_record_at(&whole[..BATCH_HEADER_BYTES], 0), None);
    }

    #[test]
    fn a_decompression_bomb_is_read_only_up_to_the_bound() {
        // 200 MiB of the smallest records (timestamp delta 0, null key and value, no
        // headers) compress to well under a MiB of zstd; the walk reads up to the bound
        // and settles for the batch-level answer instead of inflating it all.
        let record = [0x0c, 0, 0, 0, 1, 1, 0];
        let inflated: Vec<u8> = record.iter().copied().cycle().take(200 << 20).collect();
        let compressed = zstd::stream::encode_all(&inflated[..], 3).unwrap();
        drop(inflated);
        let mut b = batch(Compression::None, &[1_000]);
        b.truncate(BATCH_HEADER_BYTES);
        b.extend_from_slice(&compressed);
        b[21..23].copy_from_slice(&4i16.to_be_bytes()); // zstd
        b[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
        let len = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&len.to_be_bytes());
        assert!(compressed.len() < 1 << 20);
        assert_eq!(
            first_record_at(&b, 0),
            Some((100, 1_000)),
            "the first record"
        );
        assert_eq!(first_record_at(&b, 2_000), None, "none within the bound");
    }

    #[test]
    fn keyless_records_are_found_in_every_codec() {
        for codec in CODECS {
            let keys = [Some("a"), None, Some(""), None, Some("b")];
            let keyed = keys.iter().map(|k| (1_000, k.map(str::to_string)));
            let b = encode(codec, keyed);
            let found = keyless_records(&b).unwrap();
            assert_eq!(found.count, 2, "{codec:?}");
            assert_eq!(found.indexes, vec![1, 3], "{codec:?}");
            let all_keyed = batch(codec, &[1_000, 2_000]);
            assert_eq!(keyless_records(&all_keyed).unwrap(), Keyless::default());
        }
    }

    #[test]
    fn keyless_records_refuses_a_batch_it_cannot_walk() {
        let whole = batch(Compression::None, &[1_000, 2_000]);
        // Truncated inside the last record, or claiming one record more than it holds.
        assert_eq!(keyless_records(&whole[..whole.len() - 3]), Err(Unwalkable));
        let mut more = whole.clone();
        more[57..61].copy_from_slice(&3i32.to_be_bytes());
        assert_eq!(keyless_records(&more), Err(Unwalkable));
        // Many keyless records: all counted, the first ones named.
        let many = (0..KEYLESS_NAMED_MAX + 5).map(|_| (1_000, None));
        let found = keyless_records(&encode(Compression::Lz4, many)).unwrap();
        assert_eq!(found.count, KEYLESS_NAMED_MAX as u64 + 5);
        assert_eq!(found.indexes.len(), KEYLESS_NAMED_MAX);
        assert_eq!(
            found.indexes[KEYLESS_NAMED_MAX - 1],
            KEYLESS_NAMED_MAX as u32 - 1
        );
    }
}
