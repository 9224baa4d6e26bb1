use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ResponseHeader;
use kafka_protocol::protocol::{Encodable, HeaderVersion};

/// Encodes a whole response frame: size prefix, response header, body.
///
/// The header version comes from the response type (`R::header_version`), which is 0
/// for ApiVersions at every version. Encoding fails only when a field cannot be
/// represented at `version`, which is a broker bug, so the error is returned for the
/// caller to log and close the connection.
pub fn encode_response<R: Encodable + HeaderVersion>(
    version: i16,
    correlation_id: i32,
    body: &R,
) -> Result<Bytes, EncodeError> {
    let header_version = R::header_version(version);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let size = header.compute_size(header_version).map_err(err)?
        + body.compute_size(version).map_err(err)?;
    let mut buf = BytesMut::with_capacity(4 + size);
    buf.put_i32(size as i32);
    header.encode(&mut buf, header_version).map_err(err)?;
    body.encode(&mut buf, version).map_err(err)?;
    debug_assert_eq!(buf.len(), 4 + size);
    Ok(buf.freeze())
}

fn err(e: impl std::fmt::Display) -> EncodeError {
    EncodeError(e.to_string())
}

/// A response could not be encoded at the negotiated version.
#[derive(Debug, thiserror::Error)]
#[error("cannot encode response: {0}")]
pub struct EncodeError(pub String);
