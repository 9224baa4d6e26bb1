//! CONTRACT STUB: signatures are fixed, bodies to be implemented.
use crate::Offset;
use bytes::Bytes;

/// A place to read from in one segment, taken from the log under its lock and read
/// without it. Holds the segment file open, so a segment deleted by retention in the
/// meantime stays readable until the slice is dropped.
#[derive(Debug, Clone)]
pub struct ReadSlice {}

impl ReadSlice {
    /// Blocking positional read. Returns whole batches, in order, starting with the
    /// batch that contains the slice's fetch offset (even when the fetch offset lies
    /// inside it) and ending before any batch whose base offset is `>= limit_offset`.
    /// Stops before the batch that would take the result past `max_bytes`, except that
    /// the first batch is always returned whole (so a consumer is never stuck on a
    /// batch larger than its limit). Empty when nothing below `limit_offset` remains
    /// in this segment.
    pub fn read(&self, max_bytes: usize, limit_offset: Offset) -> std::io::Result<Bytes> {
        let _ = (max_bytes, limit_offset);
        todo!()
    }

    /// The offset the read was located for.
    pub fn fetch_offset(&self) -> Offset {
        todo!()
    }
}
