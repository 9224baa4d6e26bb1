//! The one reader of Kafka frames: a 4-byte big-endian length, then that many bytes.
//!
//! The length is the peer's word, so it is checked against the caller's limit before
//! anything is read, and a body's buffer grows with the bytes that arrive, never with
//! what the length claims: a peer announcing a huge frame and sending nothing costs
//! [`FRAME_FIRST_ALLOCATION_BYTES`] at most. [`read_frame`] reads a whole frame (the
//! client's answers, the lab's proxy); a reader that must account for a body before it
//! reads it (against a memory budget, say) calls [`read_frame_size`], accounts, then
//! [`read_frame_body_into`]. Nothing here keeps state between frames.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// What a frame body's buffer starts with; it grows as the bytes arrive, to at most
/// twice what has been received (and never past the frame's length).
const FRAME_FIRST_ALLOCATION_BYTES: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge { size: i64, limit: usize },
    #[error("frame has a negative or zero length {size}")]
    InvalidLength { size: i32 },
    #[error("connection closed in the middle of a frame")]
    Truncated,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Reads one size-prefixed frame. `Ok(None)` means the peer closed the connection
/// cleanly between frames. The size is checked before any buffer is allocated, so a
/// hostile length cannot make the reader allocate more than `frame_bytes_max`, and the
/// body's buffer grows only as its bytes arrive.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    frame_bytes_max: usize,
) -> Result<Option<BytesMut>, FrameError> {
    match read_frame_size(reader, frame_bytes_max).await? {
        Some(size) => read_frame_body(reader, size).await.map(Some),
        None => Ok(None),
    }
}

/// Reads and checks a frame's 4-byte length, so the caller can decide how to read
/// and account for the body.
pub async fn read_frame_size<R: AsyncRead + Unpin>(
    reader: &mut R,
    frame_bytes_max: usize,
) -> Result<Option<usize>, FrameError> {
    let mut size_bytes = [0u8; 4];
    match reader.read_exact(&mut size_bytes).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let size = i32::from_be_bytes(size_bytes);
    if size <= 0 {
        return Err(FrameError::InvalidLength { size });
    }
    if size as usize > frame_bytes_max {
        return Err(FrameError::TooLarge {
            size: size.into(),
            limit: frame_bytes_max,
        });
    }
    Ok(Some(size as usize))
}

/// Reads a frame body of `size` bytes (as returned by [`read_frame_size`]) into a
/// buffer that starts at [`FRAME_FIRST_ALLOCATION_BYTES`] and grows as it fills.
async fn read_frame_body<R: AsyncRead + Unpin>(
    reader: &mut R,
    size: usize,
) -> Result<BytesMut, FrameError> {
    let mut body = Vec::with_capacity(size.min(FRAME_FIRST_ALLOCATION_BYTES));
    read_frame_body_into(reader, &mut body, size).await?;
    // A Vec handed to Bytes and back is not copied.
    Ok(BytesMut::from(Bytes::from(body)))
}

/// Reads into `body` until it holds `size` bytes (`size` as returned by
/// [`read_frame_size`]; what `body` already holds counts). Bytes go straight into the
/// buffer's spare room, never past the frame's end; when the buffer is full it grows to
/// at most twice what it holds, so memory follows what the peer sent. A stream that
/// ends first is [`FrameError::Truncated`].
pub async fn read_frame_body_into<R: AsyncRead + Unpin>(
    reader: &mut R,
    body: &mut Vec<u8>,
    size: usize,
) -> Result<(), FrameError> {
    while body.len() < size {
        if body.len() == body.capacity() {
            body.reserve_exact(size.min(body.len() * 2) - body.len());
        }
        let left = (size - body.len()) as u64;
        let read = (&mut *reader)
            .take(left)
            .read_buf(body)
            .await
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    FrameError::Truncated
                } else {
                    FrameError::Io(e)
                }
            })?;
        if read == 0 {
            return Err(FrameError::Truncated);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_frames_and_rejects_oversized_ones() {
        let mut input: &[u8] = &[0, 0, 0, 3, 1, 2, 3, 0, 0, 0, 9];
        let frame = read_frame(&mut input, 8).await.unwrap().unwrap();
        assert_eq!(&frame[..], &[1, 2, 3]);
        let err = read_frame(&mut input, 8).await.unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { size: 9, limit: 8 }));
    }

    #[tokio::test]
    async fn distinguishes_clean_close_from_truncation() {
        let mut empty: &[u8] = &[];
        assert!(read_frame(&mut empty, 8).await.unwrap().is_none());
        let mut torn: &[u8] = &[0, 0, 0, 4, 1];
        assert!(matches!(
            read_frame(&mut torn, 8).await.unwrap_err(),
            FrameError::Truncated
        ));
        let mut negative: &[u8] = &[0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            read_frame(&mut negative, 8).await.unwrap_err(),
            FrameError::InvalidLength { size: -1 }
        ));
    }

    /// Goal: a length prefix alone does not buy memory. Method: announce a frame near
    /// the limit, send a few bytes, and check the buffer the reader had grown to.
    #[tokio::test]
    async fn a_large_length_prefix_alone_does_not_allocate_it() {
        let mut input: &[u8] = &[1, 2, 3];
        let mut body = Vec::with_capacity(2);
        let err = read_frame_body_into(&mut input, &mut body, 100 << 20)
            .await
            .unwrap_err();
        assert!(matches!(err, FrameError::Truncated));
        assert_eq!(body, [1, 2, 3]);
        assert!(body.capacity() < FRAME_FIRST_ALLOCATION_BYTES);

        let mut frame = vec![0, 1, 0, 0];
        frame.extend((0..65_536u32).map(|i| i as u8));
        let frame = read_frame(&mut &frame[..], 1 << 20).await.unwrap().unwrap();
        assert_eq!(frame.len(), 65_536);
        assert_eq!(frame[65_535], 255);
    }
}
