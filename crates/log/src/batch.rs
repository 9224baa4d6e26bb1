//! Kafka v2 record batches (message format "magic 2"), as clients send them.
//!
//! The broker never decodes records. It reads the fixed 61-byte batch header, checks
//! the batch's CRC-32C and lengths, rewrites the base offset, and stores the bytes
//! verbatim. Header layout (big-endian), byte offsets from the start of the batch:
//!
//! | bytes  | field                  | note                                          |
//! |--------|------------------------|-----------------------------------------------|
//! | 0..8   | base_offset i64        | rewritten by the log on append                |
//! | 8..12  | batch_length i32       | bytes after this field                        |
//! | 12..16 | partition_leader_epoch |                                               |
//! | 16     | magic i8               | must be 2                                     |
//! | 17..21 | crc u32                | CRC-32C of bytes 21..end                      |
//! | 21..23 | attributes i16         | bits 0-2 codec, 3 timestamp type, 4 txn, 5 control |
//! | 23..27 | last_offset_delta i32  |                                               |
//! | 27..35 | base_timestamp i64     |                                               |
//! | 35..43 | max_timestamp i64      |                                               |
//! | 43..51 | producer_id i64        |                                               |
//! | 51..53 | producer_epoch i16     |                                               |
//! | 53..57 | base_sequence i32      |                                               |
//! | 57..61 | records_count i32      |                                               |
//!
//! The CRC does not cover the base offset, length, leader epoch or magic, so rewriting
//! the base offset keeps a batch's CRC valid.

/// Bytes before `batch_length`'s payload: the base offset and the length itself.
pub const LOG_OVERHEAD_BYTES: usize = 12;
/// Size of the fixed v2 batch header.
pub const BATCH_HEADER_BYTES: usize = 61;
/// Offset of the magic byte within a batch.
pub const MAGIC_OFFSET: usize = 16;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("record batch too short: {len} bytes, a v2 header needs {BATCH_HEADER_BYTES}")]
    TooShort { len: usize },
    #[error("record batch uses message format v{magic}; only v2 is supported")]
    UnsupportedMagic { magic: i8 },
    #[error("record batch length {declared} does not match the {actual} bytes present")]
    LengthMismatch { declared: i64, actual: usize },
    #[error("record batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("record batch has an invalid record count {records_count} (last offset delta {last_offset_delta})")]
    InvalidRecordCount {
        records_count: i32,
        last_offset_delta: i32,
    },
}

/// The fixed header of a v2 record batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

fn i16_at(buf: &[u8], at: usize) -> i16 {
    i16::from_be_bytes(buf[at..at + 2].try_into().expect("2 bytes"))
}
fn i32_at(buf: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}
fn i64_at(buf: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

impl BatchHeader {
    /// Parses the header at the start of `buf`, which must hold at least
    /// [`BATCH_HEADER_BYTES`]. Checks the magic byte only; see [`validate`].
    pub fn parse(buf: &[u8]) -> Result<BatchHeader, BatchError> {
        if buf.len() < MAGIC_OFFSET + 1 {
            return Err(BatchError::TooShort { len: buf.len() });
        }
        let magic = buf[MAGIC_OFFSET] as i8;
        if magic != 2 {
            return Err(BatchError::UnsupportedMagic { magic });
        }
        if buf.len() < BATCH_HEADER_BYTES {
            return Err(BatchError::TooShort { len: buf.len() });
        }
        Ok(BatchHeader {
            base_offset: i64_at(buf, 0),
            batch_length: i32_at(buf, 8),
            partition_leader_epoch: i32_at(buf, 12),
            magic,
            crc: u32::from_be_bytes(buf[CRC_OFFSET..CRC_OFFSET + 4].try_into().expect("4")),
            attributes: i16_at(buf, ATTRIBUTES_OFFSET),
            last_offset_delta: i32_at(buf, 23),
            base_timestamp: i64_at(buf, 27),
            max_timestamp: i64_at(buf, 35),
            producer_id: i64_at(buf, 43),
            producer_epoch: i16_at(buf, 51),
            base_sequence: i32_at(buf, 53),
            records_count: i32_at(buf, 57),
        })
    }

    /// Bytes the whole batch occupies, header included.
    pub fn total_bytes(&self) -> usize {
        LOG_OVERHEAD_BYTES + self.batch_length.max(0) as usize
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    /// Compression codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    pub fn compression(&self) -> u8 {
        (self.attributes & 0x7) as u8
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }
}

/// Length of the batch starting at `buf[0]` as declared by its header, if enough of
/// the header is present to tell. Used to split a buffer into batches.
pub fn declared_total_bytes(buf: &[u8]) -> Option<usize> {
    if buf.len() < LOG_OVERHEAD_BYTES {
        return None;
    }
    let len = i32_at(buf, 8);
    (len >= 0).then(|| LOG_OVERHEAD_BYTES + len as usize)
}

/// Checks that `buf` is exactly one whole, uncorrupted v2 batch.
pub fn validate(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(buf)?;
    let declared = LOG_OVERHEAD_BYTES as i64 + i64::from(header.batch_length);
    if header.batch_length < (BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32
        || declared != buf.len() as i64
    {
        return Err(BatchError::LengthMismatch {
            declared,
            actual: buf.len(),
        });
    }
    let computed = crc32c::crc32c(&buf[ATTRIBUTES_OFFSET..]);
    if computed != header.crc {
        return Err(BatchError::CrcMismatch {
            stored: header.crc,
            computed,
        });
    }
    if header.records_count < 0
        || header.last_offset_delta < 0
        || header.records_count > header.last_offset_delta.saturating_add(1)
    {
        return Err(BatchError::InvalidRecordCount {
            records_count: header.records_count,
            last_offset_delta: header.last_offset_delta,
        });
    }
    Ok(header)
}

/// Whole v2 batches checked by [`validate_all`] (lengths, magic, CRC, record counts),
/// with the headers read on the way. Only this module builds one, so holding one means
/// the bytes were walked once and found whole; the log appends it without a second walk.
/// `B` is the borrowed request buffer (`&[u8]`) or the owned copy the log rewrites
/// (`Vec<u8>`, see [`Validated::into_owned`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validated<B> {
    pub(crate) bytes: B,
    pub(crate) headers: Vec<BatchHeader>,
    offset_count: i64,
    first_transactional: Option<BatchHeader>,
}

impl<B: AsRef<[u8]>> Validated<B> {
    pub fn bytes(&self) -> &[u8] {
        self.bytes.as_ref()
    }

    /// The headers in order; after an append, with the base offsets the log assigned.
    pub fn headers(&self) -> &[BatchHeader] {
        &self.headers
    }

    /// Offsets the batches take: the sum of each batch's last offset delta plus one.
    pub fn offset_count(&self) -> i64 {
        self.offset_count
    }

    /// The first transactional batch's header, if any.
    pub fn first_transactional(&self) -> Option<&BatchHeader> {
        self.first_transactional.as_ref()
    }

    pub fn len(&self) -> usize {
        self.bytes().len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes().is_empty()
    }
}

impl Validated<&[u8]> {
    /// Copies the bytes so the log can rewrite their base offsets; the headers move.
    pub fn into_owned(self) -> Validated<Vec<u8>> {
        Validated {
            bytes: self.bytes.to_vec(),
            headers: self.headers,
            offset_count: self.offset_count,
            first_transactional: self.first_transactional,
        }
    }
}

impl Validated<Vec<u8>> {
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Writes a leader's epoch into every batch ([`stamp_leader_epoch`]).
    pub fn stamp_leader_epoch(&mut self, epoch: i32) {
        stamp_leader_epoch(&mut self.bytes, &mut self.headers, epoch);
    }
}

/// Why [`validate_all`] refused a buffer, with what a produce still needs to answer in
/// the right order: the first transactional header found by walking the batch headers
/// (as far as they split and parse, CRC or not), and the buffer's size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub error: BatchError,
    pub first_transactional: Option<BatchHeader>,
    pub len: usize,
}

/// What [`validate_all`] answers.
pub type Validation<'a> = Result<Validated<&'a [u8]>, Invalid>;

/// Splits `buf` into whole batches and validates each one, keeping the headers in
/// order. An empty buffer or a trailing partial batch is an error: a produce request
/// carries whole batches only.
pub fn validate_all(buf: &[u8]) -> Validation<'_> {
    let mut headers = Vec::new();
    let mut offset_count = 0i64;
    let mut first_transactional = None;
    let mut at = 0;
    while at < buf.len() || headers.is_empty() {
        let rest = &buf[at..];
        let checked = split(rest).and_then(|total| validate(&rest[..total]));
        let header = match checked {
            Ok(header) => header,
            Err(error) => {
                // The headers past a bad batch may still split and parse; a produce's
                // transaction check looks at them as if the bytes were whole.
                let first_transactional = first_transactional.or_else(|| {
                    BatchIter::new(rest)
                        .map(|(h, _)| h)
                        .find(BatchHeader::is_transactional)
                });
                return Err(Invalid {
                    error,
                    first_transactional,
                    len: buf.len(),
                });
            }
        };
        if first_transactional.is_none() && header.is_transactional() {
            first_transactional = Some(header);
        }
        offset_count += i64::from(header.last_offset_delta) + 1;
        headers.push(header);
        at += header.total_bytes();
    }
    Ok(Validated {
        bytes: buf,
        headers,
        offset_count,
        first_transactional,
    })
}

/// Length of the whole batch at the start of `rest`, which must all be present.
fn split(rest: &[u8]) -> Result<usize, BatchError> {
    let total = declared_total_bytes(rest).ok_or(BatchError::TooShort { len: rest.len() })?;
    if total > rest.len() {
        return Err(BatchError::LengthMismatch {
            declared: total as i64,
            actual: rest.len(),
        });
    }
    Ok(total)
}

/// Splits `buf` into whole batches and parses each header, checking what the log's
/// own bookkeeping relies on (magic, lengths, offset delta, record count) but not the
/// CRC: for buffers read back from the log, whose CRCs were checked when they were written.
pub fn parse_all(buf: &[u8]) -> Result<Vec<BatchHeader>, BatchError> {
    let mut headers = Vec::new();
    let mut at = 0;
    while at < buf.len() || headers.is_empty() {
        let rest = &buf[at..];
        let total = declared_total_bytes(rest).ok_or(BatchError::TooShort { len: rest.len() })?;
        if total < BATCH_HEADER_BYTES || total > rest.len() {
            return Err(BatchError::LengthMismatch {
                declared: total as i64,
                actual: rest.len(),
            });
        }
        let header = BatchHeader::parse(&rest[..total])?;
        if header.records_count < 0
            || header.last_offset_delta < 0
            || header.records_count > header.last_offset_delta.saturating_add(1)
        {
            return Err(BatchError::InvalidRecordCount {
                records_count: header.records_count,
                last_offset_delta: header.last_offset_delta,
            });
        }
        headers.push(header);
        at += total;
    }
    Ok(headers)
}

/// Overwrites the base offset of the batch starting at `buf[0]`.
pub fn set_base_offset(buf: &mut [u8], base_offset: i64) {
    buf[0..8].copy_from_slice(&base_offset.to_be_bytes());
}

/// Stamps every batch in `batches` (whole batches described by `headers`) with the
/// epoch of the leader appending them. The field (bytes 12..16) is outside the CRC,
/// which covers bytes 21 onwards, so the batches stay valid.
pub fn stamp_leader_epoch(batches: &mut [u8], headers: &mut [BatchHeader], epoch: i32) {
    let mut position = 0;
    for header in headers {
        batches[position + 12..position + 16].copy_from_slice(&epoch.to_be_bytes());
        header.partition_leader_epoch = epoch;
        position += header.total_bytes();
    }
}

/// Iterates over the whole batches at the start of a buffer read from a segment,
/// stopping silently at the first incomplete or unparsable batch.
pub struct BatchIter<'a> {
    buf: &'a [u8],
    position: usize,
}

impl<'a> BatchIter<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        BatchIter { buf, position: 0 }
    }

    /// Byte position, within the buffer, of the next batch to be returned.
    pub fn position(&self) -> usize {
        self.position
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = (BatchHeader, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let rest = &self.buf[self.position..];
        let total = declared_total_bytes(rest)?;
        if total < BATCH_HEADER_BYTES || total > rest.len() {
            return None;
        }
        let header = BatchHeader::parse(rest).ok()?;
        self.position += total;
        Some((header, &rest[..total]))
    }
}

#[cfg(test)]
mod tests;
