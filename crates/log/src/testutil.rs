//! Test helpers: encoding valid v2 record batches (the log never decodes records,
//! but the CRC-32C must be right for recovery to keep a batch), keyed batches built and
//! read back by a third-party codec (for compaction), and a small seeded random number
//! generator, so randomized tests can print and replay their seed; and appending
//! such bytes to a log through `batch::validate_all`, as the broker does.

use crate::batch;
use crate::{AppendInfo, Log, LogError};

fn put_varint(out: &mut Vec<u8>, value: i64) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag >= 0x80 {
        out.push((zigzag as u8) | 0x80);
        zigzag >>= 7;
    }
    out.push(zigzag as u8);
}

fn record(offset_delta: i64, value: &[u8]) -> Vec<u8> {
    let mut body = vec![0u8]; // attributes
    put_varint(&mut body, 0); // timestamp delta
    put_varint(&mut body, offset_delta);
    put_varint(&mut body, -1); // null key
    put_varint(&mut body, value.len() as i64);
    body.extend_from_slice(value);
    put_varint(&mut body, 0); // no headers
    let mut out = Vec::with_capacity(body.len() + 5);
    put_varint(&mut out, body.len() as i64);
    out.extend(body);
    out
}

/// A valid v2 batch of `records` records, each with a `value_bytes` value filled
/// from `seed`, all stamped `timestamp_ms`. Its base offset is 0 until appended.
pub(crate) fn batch(records: usize, value_bytes: usize, timestamp_ms: i64, seed: u8) -> Vec<u8> {
    assert!(records > 0);
    let mut records_bytes = Vec::new();
    for i in 0..records {
        let value: Vec<u8> = (0..value_bytes)
            .map(|j| seed.wrapping_add((i + j) as u8))
            .collect();
        records_bytes.extend(record(i as i64, &value));
    }
    let mut out = Vec::with_capacity(61 + records_bytes.len());
    out.extend(0i64.to_be_bytes()); // base offset
    out.extend(((49 + records_bytes.len()) as i32).to_be_bytes()); // batch length
    out.extend(0i32.to_be_bytes()); // partition leader epoch
    out.push(2); // magic
    out.extend(0u32.to_be_bytes()); // crc, filled below
    out.extend(0i16.to_be_bytes()); // attributes
    out.extend(((records - 1) as i32).to_be_bytes()); // last offset delta
    out.extend(timestamp_ms.to_be_bytes()); // base timestamp
    out.extend(timestamp_ms.to_be_bytes()); // max timestamp
    out.extend((-1i64).to_be_bytes()); // producer id
    out.extend((-1i16).to_be_bytes()); // producer epoch
    out.extend((-1i32).to_be_bytes()); // base sequence
    out.extend((records as i32).to_be_bytes());
    out.extend(records_bytes);
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    batch::validate(&out).expect("the test batch is valid");
    out
}

/// A deterministic xorshift generator: enough for randomized tests, no dependency.
pub(crate) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `low..high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next_u64() % (high - low)
    }
}

/// A seed from the environment (`HEADWAY_TEST_SEED`) or from the process's time,
/// printed so that a failing run can be replayed.
pub(crate) fn seed(test: &str) -> u64 {
    let seed = std::env::var("HEADWAY_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock after 1970");
            now.as_nanos() as u64
        });
    println!("{test}: seed {seed} (replay with HEADWAY_TEST_SEED={seed})");
    seed
}

/// A record for [`encoded_batch`]: key, value (`None`: a tombstone), timestamp.
pub(crate) type TestRecord = (Option<String>, Option<String>, i64);

/// One v2 batch at `base_offset`, one record per [`TestRecord`], built by a third-party
/// encoder (kafka-protocol), from the producer `(id, epoch, first sequence)`.
pub(crate) fn encoded_batch(
    compression: kafka_protocol::records::Compression,
    base_offset: i64,
    records: &[TestRecord],
    producer: (i64, i16, i32),
) -> Vec<u8> {
    use kafka_protocol::records::{Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value, timestamp))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: producer.0,
            producer_epoch: producer.1,
            timestamp_type: TimestampType::Creation,
            offset: base_offset + i as i64,
            // One batch: the encoder starts a new one where offset - sequence changes.
            sequence: producer.2 + i as i32,
            timestamp: *timestamp,
            key: key.clone().map(bytes::Bytes::from),
            value: value.clone().map(bytes::Bytes::from),
            headers: Default::default(),
        })
        .collect();
    let mut out = bytes::BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut out, &records, &options).expect("encode");
    out.to_vec()
}

/// The batch's records as a third-party decoder reads them: (offset, key, value).
pub(crate) fn decoded(batch: &[u8]) -> Vec<(i64, Option<String>, Option<String>)> {
    let mut buf = bytes::Bytes::copy_from_slice(batch);
    let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut buf).expect("decodes");
    let text =
        |b: &Option<bytes::Bytes>| b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
    set.records
        .iter()
        .map(|r| (r.offset, text(&r.key), text(&r.value)))
        .collect()
}

/// Every compression codec a v2 batch can use.
pub(crate) const CODECS: [kafka_protocol::records::Compression; 5] = [
    kafka_protocol::records::Compression::None,
    kafka_protocol::records::Compression::Gzip,
    kafka_protocol::records::Compression::Snappy,
    kafka_protocol::records::Compression::Lz4,
    kafka_protocol::records::Compression::Zstd,
];

/// Appends batches a test built, validated as the broker validates a produce; the base
/// offsets the log assigned land back in `bytes`.
pub(crate) trait AppendBytes {
    fn append_bytes(&mut self, bytes: &mut Vec<u8>, now_ms: i64) -> Result<AppendInfo, LogError>;
}

impl AppendBytes for Log {
    fn append_bytes(&mut self, bytes: &mut Vec<u8>, now_ms: i64) -> Result<AppendInfo, LogError> {
        let mut validated = batch::validate_all(bytes)
            .map_err(|invalid| LogError::Batch(invalid.error))?
            .into_owned();
        let appended = self.append(&mut validated, now_ms);
        *bytes = validated.into_bytes();
        appended
    }
}
