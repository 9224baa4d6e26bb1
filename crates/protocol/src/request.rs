use crate::shape::{check_body, Footprint, ShapeError};
use bytes::Bytes;
use headway_base::limits::DECODED_BYTES_MAX;
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::Decodable;

#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("request frame of {len} bytes is too short for a header")]
    TooShort { len: usize },
    #[error("unknown API key {api_key}")]
    UnknownApiKey { api_key: i16 },
    #[error("malformed {what}: {reason}")]
    Malformed { what: String, reason: String },
    #[error("{api_key:?} v{version} request refused before decoding: {error}")]
    Shape {
        api_key: ApiKey,
        version: i16,
        error: ShapeError,
    },
}

/// A request whose header has been decoded and whose body is still raw.
#[derive(Debug)]
pub struct Request {
    pub api_key: ApiKey,
    pub header: RequestHeader,
    pub body: Bytes,
}

impl Request {
    pub fn api_version(&self) -> i16 {
        self.header.request_api_version
    }

    pub fn correlation_id(&self) -> i32 {
        self.header.correlation_id
    }

    /// Checks the body's lengths and counts against its bytes and returns what
    /// decoding it will allocate (see [`crate::shape`]).
    pub fn footprint(&self) -> Result<Footprint, ProtocolError> {
        check_body(
            self.api_key,
            self.api_version(),
            &self.body,
            DECODED_BYTES_MAX,
        )
        .map_err(|error| ProtocolError::Shape {
            api_key: self.api_key,
            version: self.api_version(),
            error,
        })
    }
}

/// Decodes the request header at the start of `frame`.
///
/// The header's own version depends on the API and its version (flexible versions add
/// tagged fields). For an API version this broker does not know, the header layout the
/// crate picks for that number is still right for ApiVersions, which is what matters:
/// a client probing with a too-new ApiVersions must get an answer, not a closed socket.
pub fn parse_request(mut frame: Bytes) -> Result<Request, ProtocolError> {
    if frame.len() < 8 {
        return Err(ProtocolError::TooShort { len: frame.len() });
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let api_key =
        ApiKey::try_from(raw_key).map_err(|_| ProtocolError::UnknownApiKey { api_key: raw_key })?;
    let api_version = i16::from_be_bytes([frame[2], frame[3]]);
    let header_version = api_key.request_header_version(api_version);
    let header = RequestHeader::decode(&mut frame, header_version).map_err(|e| {
        ProtocolError::Malformed {
            what: format!("{api_key:?} v{api_version} request header"),
            reason: e.to_string(),
        }
    })?;
    Ok(Request {
        api_key,
        header,
        body: frame,
    })
}

/// Decodes a request body, after [`Request::footprint`] has checked every length and
/// count in it against the bytes present, so a hostile count is refused instead of
/// sizing an allocation. Bytes after the last field are ignored, as Kafka ignores
/// them: some clients send a few (librdkafka 2.x does with Metadata v12), and a broker
/// that refused them would be refusing those clients.
pub fn decode_body<T: Decodable>(request: &Request) -> Result<T, ProtocolError> {
    request.footprint()?;
    let mut body = request.body.clone();
    let value =
        T::decode(&mut body, request.api_version()).map_err(|e| ProtocolError::Malformed {
            what: format!("{:?} v{} request", request.api_key, request.api_version()),
            reason: e.to_string(),
        })?;
    Ok(value)
}
