//! ShareFetch and ShareAcknowledge at version 2 (KIP-1206 acquire modes, KIP-1222
//! Renew), which `kafka-protocol` 0.18 does not know: the crate decodes and encodes
//! version 1 only. Each version 2 message is its version 1 layout plus fields at one
//! known place, so this module reads those fields out of a request and decodes the
//! rest with the crate's version 1 decoder, and encodes an answer at version 1 with
//! the version 2 field put in its place.
//!
//! The version 2 additions, in wire order:
//!
//! - ShareFetch request: after BatchSize, `ShareAcquireMode` (int8: 0 batch-optimized,
//!   1 record-limit) and `IsRenewAck` (bool: the acknowledgements hold renewals).
//! - ShareFetch response: nothing; version 2 is laid out as version 1.
//! - ShareAcknowledge request: after ShareSessionEpoch, `IsRenewAck` (bool).
//! - ShareAcknowledge response: after ErrorMessage, `AcquisitionLockTimeoutMs` (int32).
//!
//! A request is walked by [`crate::shape`] at its own version (the tables in
//! `shapes.rs` list the version 2 fields) before anything here reads it, and every
//! offset below is checked against the bytes present again: a truncated or garbled
//! body is an error, never a panic.

use crate::request::{decode_body, ProtocolError, Request};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest, ShareFetchResponse,
};
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

/// The newest ShareFetch and ShareAcknowledge version this module handles.
pub const SHARE_VERSION_MAX: i16 = 2;

/// How a ShareFetch acquires records (`ShareAcquireMode`, version 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShareAcquireMode {
    /// 0: the broker may round the records acquired to the log's batches.
    #[default]
    BatchOptimized,
    /// 1: at most MaxRecords records, whatever the batches.
    RecordLimit,
}

impl ShareAcquireMode {
    pub fn from_wire(value: i8) -> Option<ShareAcquireMode> {
        match value {
            0 => Some(ShareAcquireMode::BatchOptimized),
            1 => Some(ShareAcquireMode::RecordLimit),
            _ => None,
        }
    }

    pub fn to_wire(self) -> i8 {
        match self {
            ShareAcquireMode::BatchOptimized => 0,
            ShareAcquireMode::RecordLimit => 1,
        }
    }
}

/// The fields ShareFetch version 2 adds (their defaults at version 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShareFetchV2 {
    /// `ShareAcquireMode` as sent: the caller refuses a value it does not know.
    pub acquire_mode: i8,
    /// `IsRenewAck`: the acknowledgements hold renewals, and nothing is to be fetched.
    pub is_renew_ack: bool,
}

/// Decodes a ShareFetch request of version 1 or 2.
pub fn decode_share_fetch(
    request: &Request,
) -> Result<(ShareFetchRequest, ShareFetchV2), ProtocolError> {
    if request.api_version() < 2 {
        return Ok((decode_body(request)?, ShareFetchV2::default()));
    }
    request.footprint()?;
    let (rest, extra) =
        split_share_fetch(&request.body).map_err(|reason| malformed(request, reason))?;
    let body = decode_v1(request, rest)?;
    let v2 = ShareFetchV2 {
        acquire_mode: extra[0] as i8,
        is_renew_ack: extra[1] != 0,
    };
    Ok((body, v2))
}

/// Decodes a ShareAcknowledge request of version 1 or 2, with its `IsRenewAck` (false
/// at version 1).
pub fn decode_share_acknowledge(
    request: &Request,
) -> Result<(ShareAcknowledgeRequest, bool), ProtocolError> {
    if request.api_version() < 2 {
        return Ok((decode_body(request)?, false));
    }
    request.footprint()?;
    let (rest, extra) =
        split_share_acknowledge(&request.body).map_err(|reason| malformed(request, reason))?;
    Ok((decode_v1(request, rest)?, extra[0] != 0))
}

fn decode_v1<T: Decodable>(request: &Request, mut body: Bytes) -> Result<T, ProtocolError> {
    if request.api_version() > SHARE_VERSION_MAX {
        return Err(malformed(request, "version not supported".into()));
    }
    T::decode(&mut body, 1).map_err(|e| malformed(request, e.to_string()))
}

fn malformed(request: &Request, reason: String) -> ProtocolError {
    ProtocolError::Malformed {
        what: format!("{:?} v{} request", request.api_key, request.api_version()),
        reason,
    }
}

/// A ShareFetch v2 body as its version 1 body and the two bytes v2 adds.
pub(crate) fn split_share_fetch(body: &Bytes) -> Result<(Bytes, [u8; 2]), String> {
    // GroupId, MemberId, then ShareSessionEpoch, MaxWaitMs, MinBytes, MaxBytes,
    // MaxRecords and BatchSize (int32 each).
    let at = compact_string_end(body, 0)?;
    let at = compact_string_end(body, at)? + 6 * 4;
    cut(body, at)
}

/// A ShareAcknowledge v2 body as its version 1 body and the byte v2 adds.
pub(crate) fn split_share_acknowledge(body: &Bytes) -> Result<(Bytes, [u8; 1]), String> {
    // GroupId, MemberId, then ShareSessionEpoch (int32).
    let at = compact_string_end(body, 0)?;
    let at = compact_string_end(body, at)? + 4;
    cut(body, at)
}

/// `body` without its `N` bytes at `at`, and those bytes.
fn cut<const N: usize>(body: &Bytes, at: usize) -> Result<(Bytes, [u8; N]), String> {
    let end = at
        .checked_add(N)
        .filter(|&end| end <= body.len())
        .ok_or_else(|| format!("body of {} bytes ends before byte {}", body.len(), at + N))?;
    let mut extra = [0u8; N];
    extra.copy_from_slice(&body[at..end]);
    let mut rest = BytesMut::with_capacity(body.len() - N);
    rest.put_slice(&body[..at]);
    rest.put_slice(&body[end..]);
    Ok((rest.freeze(), extra))
}

/// Where the compact nullable string starting at `at` ends: an unsigned varint of its
/// length plus one (0 for null), then its bytes.
fn compact_string_end(body: &[u8], at: usize) -> Result<usize, String> {
    let mut value: u64 = 0;
    for i in 0..5 {
        let byte = *body
            .get(at + i)
            .ok_or_else(|| format!("string length at byte {at} is cut short"))?;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            let len = value.saturating_sub(1) as usize;
            let end = at + i + 1 + len;
            if end > body.len() {
                return Err(format!("string at byte {at} runs past the body"));
            }
            return Ok(end);
        }
    }
    Err(format!("string length at byte {at} is longer than 5 bytes"))
}

/// A ShareFetch answer at version 1 or 2: version 2 is laid out as version 1.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShareFetchAnswer(pub ShareFetchResponse);

impl Encodable for ShareFetchAnswer {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> anyhow::Result<()> {
        self.0.encode(buf, version.min(1))
    }

    fn compute_size(&self, version: i16) -> anyhow::Result<usize> {
        self.0.compute_size(version.min(1))
    }
}

impl HeaderVersion for ShareFetchAnswer {
    fn header_version(version: i16) -> i16 {
        ShareFetchResponse::header_version(version.min(1))
    }
}

/// A ShareAcknowledge answer at version 1 or 2, with the `AcquisitionLockTimeoutMs`
/// that version 2 adds after ErrorMessage.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShareAcknowledgeAnswer {
    pub body: ShareAcknowledgeResponse,
    pub acquisition_lock_timeout_ms: i32,
}

impl ShareAcknowledgeAnswer {
    /// Where version 1 puts Responses: after ThrottleTimeMs, ErrorCode and ErrorMessage.
    fn field_end(&self) -> usize {
        // ErrorMessage is a compact nullable string: an unsigned varint of its length
        // plus one (0 for null), then its bytes.
        let len = self.body.error_message.as_ref().map_or(0, |m| m.len());
        let prefix = self.body.error_message.as_ref().map_or(0, |_| len + 1);
        4 + 2 + varint_size(prefix as u64) + len
    }
}

impl Encodable for ShareAcknowledgeAnswer {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> anyhow::Result<()> {
        if version < 2 {
            return self.body.encode(buf, version);
        }
        let mut v1 = BytesMut::with_capacity(self.body.compute_size(1)?);
        self.body.encode(&mut v1, 1)?;
        let at = self.field_end();
        buf.put_slice(&v1[..at]);
        buf.put_i32(self.acquisition_lock_timeout_ms);
        buf.put_slice(&v1[at..]);
        Ok(())
    }

    fn compute_size(&self, version: i16) -> anyhow::Result<usize> {
        let extra = if version >= 2 { 4 } else { 0 };
        Ok(self.body.compute_size(version.min(1))? + extra)
    }
}

/// The bytes of `value` as an unsigned varint.
fn varint_size(mut value: u64) -> usize {
    let mut size = 1;
    while value >= 0x80 {
        value >>= 7;
        size += 1;
    }
    size
}

impl HeaderVersion for ShareAcknowledgeAnswer {
    fn header_version(version: i16) -> i16 {
        ShareAcknowledgeResponse::header_version(version.min(1))
    }
}

#[cfg(test)]
mod tests;
