//! The record-level core of log compaction: which record of a key is the latest, and a
//! stored batch rewritten to hold only the records that survive.
//!
//! A compacted topic keeps, for every key, at least its latest record. The cleaner
//! first reads the dirty part of a partition into an [`OffsetMap`] (each key's latest
//! offset), then rewrites older batches through [`retain_records`], keeping a record
//! when no later record of its key exists. Everything here is plain code over bytes and
//! values, with no files and no threads.
//!
//! A rewritten batch keeps its header's base offset, last offset delta, base timestamp,
//! producer id, epoch and base sequence: survivors keep their original offsets (the
//! batch then has gaps, as Kafka's cleaned batches do, and clients skip them), the
//! records' own bytes stay as they were (their offset and timestamp are deltas from the
//! header's), and the producer state rebuilt from the log still sees the batch's last
//! sequence. Only the record count, the maximum timestamp, the length and the CRC are
//! new, and a compressed batch is compressed again with its own codec.

use crate::batch::{BatchHeader, BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES};
use crate::records::{inflate, record_refs, RecordRef, RECORDS_SCAN_BYTES_MAX};
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::io::{Read, Write};

const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const MAX_TIMESTAMP_OFFSET: usize = 35;
const RECORDS_COUNT_OFFSET: usize = 57;
const LOG_APPEND_TIME: i16 = 0x08;
/// The snappy framing of the Java client (xerial): magic, then version and minimum
/// compatible version, then blocks of a 4-byte length and a raw snappy block.
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
const XERIAL_BLOCK_BYTES: usize = 32 * 1024;

/// A record as the cleaner decides on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordInfo<'a> {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    /// A null value: a tombstone for its key.
    pub tombstone: bool,
}

/// What is left of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retained {
    /// Every record survives: the stored bytes stay as they are.
    Whole,
    /// Some records survive, in this new batch.
    Rewritten(Vec<u8>),
    /// No record survives.
    Empty,
}

/// Why a batch could not be looked into; the cleaner then keeps it whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompactionError {
    #[error("the batch's header is malformed: {0}")]
    Header(#[from] crate::BatchError),
    #[error("the batch's records are malformed or inflate past {RECORDS_SCAN_BYTES_MAX} bytes")]
    Records,
    #[error("the batch uses compression codec {0}, which the cleaner does not know")]
    Codec(u8),
    #[error("compressing the retained records failed: {0}")]
    Compress(String),
}

/// Keeps the records of `batch` for which `keep` says so. Control batches (transaction
/// markers) are kept whole: they carry no keys.
pub fn retain_records(
    batch: &[u8],
    mut keep: impl FnMut(&RecordInfo) -> bool,
) -> Result<Retained, CompactionError> {
    let header = BatchHeader::parse(batch)?;
    if header.is_control() {
        return Ok(Retained::Whole);
    }
    let end = header.total_bytes().min(batch.len());
    let data = batch.get(BATCH_HEADER_BYTES..end).unwrap_or_default();
    let codec = header.compression();
    let inflated = inflated(codec, data)?;
    let log_append_time = header.attributes & LOG_APPEND_TIME != 0;
    let timestamp = |r: &RecordRef| match log_append_time {
        true => header.max_timestamp,
        false => header.base_timestamp.wrapping_add(r.timestamp_delta),
    };
    // The survivors' own bytes, one after another, as the new batch will hold them.
    let mut plain = Vec::new();
    let (mut records, mut kept, mut max_timestamp) = (0usize, 0usize, i64::MIN);
    for record in record_refs(&inflated) {
        let r = record.ok_or(CompactionError::Records)?;
        records += 1;
        let info = RecordInfo {
            offset: header.base_offset + i64::from(r.offset_delta),
            timestamp: timestamp(&r),
            key: r.key,
            tombstone: r.value_is_null,
        };
        if keep(&info) {
            plain.extend_from_slice(r.raw);
            kept += 1;
            max_timestamp = max_timestamp.max(info.timestamp);
        }
    }
    if kept == records {
        return Ok(Retained::Whole);
    }
    if kept == 0 {
        return Ok(Retained::Empty);
    }
    let body = compress(codec, plain, data)?;
    let mut out = Vec::with_capacity(BATCH_HEADER_BYTES + body.len());
    out.extend_from_slice(&batch[..BATCH_HEADER_BYTES]);
    out.extend_from_slice(&body);
    out[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8]
        .copy_from_slice(&max_timestamp.to_be_bytes());
    let count = i32::try_from(kept).map_err(|_| CompactionError::Records)?;
    out[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&count.to_be_bytes());
    seal_header(&mut out)?;
    Ok(Retained::Rewritten(out))
}

/// `batch` with no records left: its header alone, with its base offset, last offset
/// delta and producer fields. The cleaner keeps such a batch where the last offset of a
/// segment or the last sequence of a producer must stay in the log; clients skip it.
pub fn emptied(batch: &[u8]) -> Result<Vec<u8>, CompactionError> {
    BatchHeader::parse(batch)?;
    let mut out = batch[..BATCH_HEADER_BYTES].to_vec();
    let attributes = i16::from_be_bytes([out[ATTRIBUTES_OFFSET], out[ATTRIBUTES_OFFSET + 1]]);
    // No records, nothing compressed.
    let attributes = attributes & !0x07;
    out[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
    out[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&0i32.to_be_bytes());
    seal_header(&mut out)?;
    Ok(out)
}

/// Sets a rebuilt batch's length and CRC from its bytes.
fn seal_header(batch: &mut [u8]) -> Result<(), CompactionError> {
    let length = i32::try_from(batch.len() - LOG_OVERHEAD_BYTES)
        .map_err(|_| CompactionError::Compress("the rewritten batch is too large".into()))?;
    batch[8..12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..]);
    batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// The batch's records, inflated, at most [`RECORDS_SCAN_BYTES_MAX`] of them.
fn inflated(codec: u8, data: &[u8]) -> Result<Vec<u8>, CompactionError> {
    let reader = inflate(codec, data).ok_or(CompactionError::Codec(codec))?;
    let mut out = Vec::new();
    reader
        .take(RECORDS_SCAN_BYTES_MAX + 1)
        .read_to_end(&mut out)
        .map_err(|_| CompactionError::Records)?;
    match out.len() as u64 > RECORDS_SCAN_BYTES_MAX {
        true => Err(CompactionError::Records),
        false => Ok(out),
    }
}

/// `plain` compressed with `codec`, framed as `original` was (snappy has two framings).
fn compress(codec: u8, plain: Vec<u8>, original: &[u8]) -> Result<Vec<u8>, CompactionError> {
    let failed = |e: std::io::Error| CompactionError::Compress(e.to_string());
    match codec {
        0 => Ok(plain),
        1 => {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(&plain).map_err(failed)?;
            encoder.finish().map_err(failed)
        }
        2 if original.starts_with(XERIAL_MAGIC) => {
            // The framing's header: the magic, its version and its compatible version.
            let header = original.get(..XERIAL_MAGIC.len() + 8);
            let mut out = header.ok_or(CompactionError::Records)?.to_vec();
            let mut snappy = snap::raw::Encoder::new();
            for block in plain.chunks(XERIAL_BLOCK_BYTES) {
                let compressed = snappy
                    .compress_vec(block)
                    .map_err(|e| CompactionError::Compress(e.to_string()))?;
                out.extend_from_slice(&(compressed.len() as u32).to_be_bytes());
                out.extend_from_slice(&compressed);
            }
            Ok(out)
        }
        2 => snap::raw::Encoder::new()
            .compress_vec(&plain)
            .map_err(|e| CompactionError::Compress(e.to_string())),
        3 => {
            // Independent blocks and no content checksum: the frame every Kafka client reads.
            let mut encoder = lz4::EncoderBuilder::new()
                .block_mode(lz4::BlockMode::Independent)
                .checksum(lz4::ContentChecksum::NoChecksum)
                .build(Vec::new())
                .map_err(failed)?;
            encoder.write_all(&plain).map_err(failed)?;
            let (out, result) = encoder.finish();
            result.map_err(failed)?;
            Ok(out)
        }
        4 => zstd::stream::encode_all(&plain[..], 3).map_err(failed),
        other => Err(CompactionError::Codec(other)),
    }
}

/// Bytes one key takes in an [`OffsetMap`]: its 16-byte hash, its offset, and the hash
/// table's own share, counted generously.
pub const OFFSET_MAP_ENTRY_BYTES: usize = 48;

/// Each key's latest offset in the part of a partition being cleaned, in bounded memory.
///
/// Keys are stored as 128-bit hashes whose keys are drawn at random for each map, so
/// that nobody can choose two keys whose records would be taken for one: a collision
/// would remove a record that is still its key's latest, and with 128 random bits it
/// is as likely as a disk returning the wrong block.
pub struct OffsetMap {
    latest: HashMap<u128, i64>,
    keys_max: usize,
    hashers: (RandomState, RandomState),
}

/// The map holds as many keys as its memory allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapFull;

impl OffsetMap {
    /// A map that holds the keys `bytes_max` allows (at least one).
    pub fn new(bytes_max: usize) -> OffsetMap {
        OffsetMap {
            latest: HashMap::new(),
            keys_max: (bytes_max / OFFSET_MAP_ENTRY_BYTES).max(1),
            hashers: (RandomState::new(), RandomState::new()),
        }
    }

    fn hash(&self, key: &[u8]) -> u128 {
        let high = self.hashers.0.hash_one(key);
        let low = self.hashers.1.hash_one(key);
        (u128::from(high) << 64) | u128::from(low)
    }

    /// Notes `offset` as `key`'s latest when it is later than the one noted. A new key
    /// when the map is full is refused, and the map stays as it was.
    pub fn note(&mut self, key: &[u8], offset: i64) -> Result<(), MapFull> {
        let hash = self.hash(key);
        let full = self.latest.len() >= self.keys_max;
        match self.latest.get_mut(&hash) {
            Some(latest) => *latest = (*latest).max(offset),
            None if full => return Err(MapFull),
            None => {
                self.latest.insert(hash, offset);
            }
        }
        Ok(())
    }

    /// The latest offset noted for `key`.
    pub fn latest(&self, key: &[u8]) -> Option<i64> {
        self.latest.get(&self.hash(key)).copied()
    }

    pub fn len(&self) -> usize {
        self.latest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    /// Whether a record at `offset` with `key` is superseded by a later one of its key.
    pub fn superseded(&self, key: &[u8], offset: i64) -> bool {
        self.latest(key).is_some_and(|latest| latest > offset)
    }
}

#[cfg(test)]
mod tests;
