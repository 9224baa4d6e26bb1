//! Kafka wire framing on top of the `kafka-protocol` crate.
//!
//! Every Kafka request and response is a frame: a 4-byte big-endian length followed by
//! that many bytes. A request frame starts with a request header (api key, api version,
//! correlation id, client id, and tagged fields for flexible versions); a response frame
//! starts with a response header (correlation id, and tagged fields for flexible versions,
//! except ApiVersions, whose response header is always version 0 so that a client can
//! read the answer before it knows which versions the broker speaks).
//!
//! This crate owns only framing and headers; message bodies are decoded and encoded by
//! `kafka-protocol`'s generated types. Record batches stay raw bytes end to end.
//!
//! Nothing from the wire sizes an allocation unchecked: a frame's length is checked
//! against the frame limit before its body is read, and a body's lengths and counts are
//! checked against its bytes ([`shape`], with the layouts in `shapes.rs`) before
//! `kafka-protocol` decodes it, which would otherwise size an array's buffer from four
//! bytes of a hostile client's choosing.
//!
//! [`share_v2`] serves ShareFetch and ShareAcknowledge at version 2, which the crate
//! does not know, through its version 1 codecs; [`share_lag`] DescribeShareGroupOffsets
//! answers at version 1.

mod frame;
mod request;
mod response;
pub mod shape;
mod shapes;
pub mod share_lag;
pub mod share_v2;

pub use frame::{read_frame, read_frame_body_into, read_frame_size, FrameError};
pub use kafka_protocol;
pub use request::{decode_body, parse_request, ProtocolError, Request};
pub use response::{encode_response, EncodeError};
pub use shape::{check_body, Footprint, ShapeError};
