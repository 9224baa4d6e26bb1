use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

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
/// hostile length cannot make the broker allocate more than `frame_bytes_max`.
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
/// buffer of that size. The broker's connections read bodies as they arrive instead
/// (`crates/server/src/connection.rs`); this is for peers that trust their sender.
async fn read_frame_body<R: AsyncRead + Unpin>(
    reader: &mut R,
    size: usize,
) -> Result<BytesMut, FrameError> {
    let mut frame = BytesMut::zeroed(size);
    reader.read_exact(&mut frame).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            FrameError::Truncated
        } else {
            FrameError::Io(e)
        }
    })?;
    Ok(frame)
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
}
