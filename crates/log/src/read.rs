//! Fetch reads: a [`ReadSlice`] is taken under the log's lock (a few field copies and
//! one index lookup) and read afterwards with positional reads, without any lock, on
//! whatever thread the caller likes. It holds the segment's `.log` open, so a segment
//! deleted by retention meanwhile stays readable until the slice is dropped.
//!
//! A read costs one positional read in the common case: it reads from the index
//! entry at or below the fetch offset, which is less than `index_interval_bytes`
//! (plus one batch) before the wanted batch, through `max_bytes` more, and walks the
//! batches in memory. When the first wanted batch does not fit that buffer, a second
//! read fetches it whole.
//!
//! [`ReadSlice::read_cached`] is the same read that only succeeds when every byte it
//! needs is in the page cache (`preadv2` with `RWF_NOWAIT`); it never waits for the
//! disk, so it may run on an async worker thread. Reads of the tail, which producers
//! have just written, nearly always succeed this way; the rest go to a thread pool.
//!
//! Reads of a sealed segment check every batch they return (CRC-32C and lengths), the
//! disk-side half of the check every produced batch passed before it was written: a
//! batch that rotted on disk is never served. The batches before it are returned; a
//! read that starts at it fails with a [`CorruptBatch`] inside the I/O error. Batches
//! of the active segment were checked at their append moments before (or by recovery)
//! and are not checked again, which keeps tail reads at memory speed.

use crate::batch::{self, BatchError, BatchHeader};
use crate::batch::{declared_total_bytes, BatchIter, LOG_OVERHEAD_BYTES};
use crate::config::{DISK_READ_BYTES_MAX, READ_SLACK_BYTES};
use crate::CorruptBatch;
use bytes::Bytes;
use headway_base::Offset;
use rustix::io::{Errno, ReadWriteFlags};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A place to read from in one segment, taken from the log under its lock and read
/// without it. Holds the segment file open, so a segment deleted by retention in the
/// meantime stays readable until the slice is dropped.
#[derive(Debug, Clone)]
pub struct ReadSlice {
    file: Arc<File>,
    /// Where the walk starts: a batch boundary at or before the fetch offset's batch.
    start_position: u64,
    /// The segment's size when the slice was taken: a batch boundary.
    end_position: u64,
    fetch_offset: Offset,
    index_interval_bytes: u32,
    /// Bytes from the slice's start to the log's end when it was taken.
    behind_bytes: u64,
    /// Check each returned batch's CRC (the segment is sealed).
    verify: bool,
    segment_base_offset: i64,
}

/// Where the first wanted batch is in a buffer, or how to continue looking.
enum Seek {
    Found {
        at: usize,
    },
    /// Every whole batch in the buffer ends before the fetch offset. Continue at
    /// `skipped` bytes on, reading at least `need` bytes there.
    Continue {
        skipped: usize,
        need: usize,
    },
}

impl ReadSlice {
    pub(crate) fn new(
        file: Arc<File>,
        start_position: u64,
        end_position: u64,
        fetch_offset: Offset,
        index_interval_bytes: u32,
    ) -> ReadSlice {
        assert!(
            start_position <= end_position,
            "read slice starts past its end"
        );
        ReadSlice {
            file,
            start_position,
            end_position,
            fetch_offset,
            index_interval_bytes,
            behind_bytes: end_position - start_position,
            verify: false,
            segment_base_offset: 0,
        }
    }

    /// Names the segment (for error reports) and whether returned batches are checked.
    pub(crate) fn verified(mut self, verify: bool, segment_base_offset: i64) -> ReadSlice {
        self.verify = verify;
        self.segment_base_offset = segment_base_offset;
        self
    }

    pub(crate) fn with_behind_bytes(mut self, behind_bytes: u64) -> ReadSlice {
        self.behind_bytes = behind_bytes;
        self
    }

    /// How far behind the log's end the read starts, in bytes of log, when the slice
    /// was taken: small for a consumer at the tail, large for one catching up.
    pub fn behind_bytes(&self) -> u64 {
        self.behind_bytes
    }

    /// Blocking positional read. Returns whole batches, in order, starting with the
    /// batch that contains the slice's fetch offset (even when the fetch offset lies
    /// inside it) and ending before any batch whose base offset is `>= limit_offset`.
    /// Stops before the batch that would take the result past `max_bytes`, except that
    /// the first batch is always returned whole (so a consumer is never stuck on a
    /// batch larger than its limit). Empty when nothing below `limit_offset` remains
    /// in this segment. A damaged batch fails the read with a [`CorruptBatch`] inside
    /// the error when it would be the first batch returned; otherwise the read ends
    /// before it.
    pub fn read(&self, max_bytes: usize, limit_offset: Offset) -> std::io::Result<Bytes> {
        self.read_yielding(max_bytes, limit_offset, &|| {})
    }

    /// [`ReadSlice::read`], calling `before_disk_read` before each disk read of at most
    /// 256 KiB: the broker's read threads wait there for small syncs in progress, so
    /// that a catch-up read does not queue in front of them.
    pub fn read_yielding(
        &self,
        max_bytes: usize,
        limit_offset: Offset,
        before_disk_read: &dyn Fn(),
    ) -> std::io::Result<Bytes> {
        let read = self.read_with(max_bytes, limit_offset, |file, buf, position| {
            read_exact_at_in_steps(file, buf, position, before_disk_read).map(|()| true)
        })?;
        Ok(read.expect("a blocking read always completes"))
    }

    /// [`ReadSlice::read`], but only from the page cache: `Ok(None)` when any byte it
    /// needs would have to come from the disk (or the kernel cannot tell, on file
    /// systems without `RWF_NOWAIT`). Never blocks on I/O.
    pub fn read_cached(
        &self,
        max_bytes: usize,
        limit_offset: Offset,
    ) -> std::io::Result<Option<Bytes>> {
        self.read_with(max_bytes, limit_offset, read_exact_at_cached)
    }

    /// The read, with `read_at` filling a buffer at a position (`Ok(false)`: gave up).
    fn read_with(
        &self,
        max_bytes: usize,
        limit_offset: Offset,
        read_at: impl Fn(&File, &mut [u8], u64) -> io::Result<bool>,
    ) -> io::Result<Option<Bytes>> {
        let mut position = self.start_position;
        let mut need = 0;
        loop {
            let remaining = self.end_position - position;
            if remaining == 0 {
                return Ok(Some(Bytes::new()));
            }
            let want = (self.index_interval_bytes as usize)
                .saturating_add(max_bytes)
                .saturating_add(READ_SLACK_BYTES)
                .max(need);
            let len = usize::try_from(remaining).map_or(want, |r| want.min(r));
            let mut buf = vec![0u8; len];
            if !read_at(&self.file, &mut buf, position)? {
                return Ok(None);
            }
            match seek(&buf, self.fetch_offset.value()) {
                Seek::Found { at } => {
                    let limits = Limits {
                        max_bytes,
                        limit_offset: limit_offset.value(),
                    };
                    return self.collect(buf, position, at, limits).map(Some);
                }
                Seek::Continue {
                    skipped,
                    need: next,
                } => {
                    // The slice ends on a batch boundary, so a batch that claims to
                    // run past it, or one the buffer holds whole but that does not
                    // parse, is corrupt.
                    let left = remaining - skipped as u64;
                    let stuck = skipped == 0 && next <= buf.len();
                    if stuck || (left > 0 && next as u64 > left) {
                        let at = position + skipped as u64;
                        return Err(self.corrupt(at, &buf[skipped..], left));
                    }
                    position += skipped as u64;
                    need = next;
                }
            }
        }
    }

    /// The offset the read was located for.
    pub fn fetch_offset(&self) -> Offset {
        self.fetch_offset
    }

    /// Bytes of batches between the slice's start and the segment's end when the slice
    /// was taken (an upper bound for what a read can return).
    pub fn len_bytes(&self) -> u64 {
        self.end_position - self.start_position
    }
}

/// Fills `buf` from `position` in reads of at most [`DISK_READ_BYTES_MAX`], so that the
/// disk never has one large read of ours in front of another's small sync; calls
/// `before_step` before each.
fn read_exact_at_in_steps(
    file: &File,
    buf: &mut [u8],
    position: u64,
    before_step: &dyn Fn(),
) -> io::Result<()> {
    let mut at = position;
    for step in buf.chunks_mut(DISK_READ_BYTES_MAX) {
        before_step();
        file.read_exact_at(step, at)?;
        at += step.len() as u64;
    }
    Ok(())
}

/// Whether `preadv2(RWF_NOWAIT)` works for these files; cleared the first time the
/// kernel or file system refuses the flag, after which cached reads always give up.
static NOWAIT_SUPPORTED: AtomicBool = AtomicBool::new(true);

/// Fills `buf` from `position` only if the whole range is in the page cache.
/// `Ok(false)` when it is not (or the answer would need the disk).
fn read_exact_at_cached(file: &File, buf: &mut [u8], position: u64) -> io::Result<bool> {
    if !NOWAIT_SUPPORTED.load(Ordering::Relaxed) {
        return Ok(false);
    }
    let mut done = 0;
    while done < buf.len() {
        let position = position + done as u64;
        // rustix reads `u64::MAX` as "the file's own position": past `i64::MAX` no
        // positional read is possible, and the blocking read reports that properly.
        if i64::try_from(position).is_err() {
            return Ok(false);
        }
        let mut iov = [io::IoSliceMut::new(&mut buf[done..])];
        match rustix::io::preadv2(file, &mut iov, position, ReadWriteFlags::NOWAIT) {
            // Some bytes are cached and the next are not; or the file ended early,
            // which the blocking read will report properly.
            Ok(0) => return Ok(false),
            Ok(n) => done += n,
            Err(Errno::AGAIN) => return Ok(false),
            Err(Errno::INTR) => continue,
            Err(Errno::OPNOTSUPP | Errno::INVAL | Errno::NOSYS) => {
                NOWAIT_SUPPORTED.store(false, Ordering::Relaxed);
                return Ok(false);
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(true)
}

/// Finds the first batch in `buf` whose last offset is at or past `fetch_offset`.
fn seek(buf: &[u8], fetch_offset: i64) -> Seek {
    let mut batches = BatchIter::new(buf);
    loop {
        let at = batches.position();
        match batches.next() {
            Some((header, _)) if header.last_offset() >= fetch_offset => return Seek::Found { at },
            Some(_) => continue,
            None => {
                let rest = &buf[at..];
                let need = match rest.len() < LOG_OVERHEAD_BYTES {
                    true => LOG_OVERHEAD_BYTES,
                    false => declared_total_bytes(rest).unwrap_or(usize::MAX),
                };
                return Seek::Continue { skipped: at, need };
            }
        }
    }
}

/// What one read may return.
#[derive(Clone, Copy)]
struct Limits {
    max_bytes: usize,
    limit_offset: i64,
}

impl ReadSlice {
    /// The whole batches from `at` on that fit the limits, as one slice of `buf`
    /// (read from the segment at `position`). With `verify`, stops before the first
    /// damaged batch, or fails when that is the first one.
    fn collect(&self, buf: Vec<u8>, position: u64, at: usize, limits: Limits) -> io::Result<Bytes> {
        let mut end = at;
        for (header, bytes) in BatchIter::new(&buf[at..]) {
            let first = end == at;
            if header.base_offset >= limits.limit_offset
                || (!first && end - at + bytes.len() > limits.max_bytes)
            {
                break;
            }
            if self.verify {
                if let Err(error) = batch::validate(bytes) {
                    if !first {
                        break;
                    }
                    let at = position + end as u64;
                    let offsets = (header.base_offset, header.last_offset());
                    return Err(self.corrupt_batch(at, offsets, error));
                }
            }
            end += bytes.len();
        }
        // A slice keeps its whole buffer alive; copy out a small result so a slow
        // consumer's pending response does not pin a mostly unused buffer.
        if (end - at) * 2 < buf.len() {
            return Ok(Bytes::copy_from_slice(&buf[at..end]));
        }
        Ok(Bytes::from(buf).slice(at..end))
    }

    /// `offsets`: the first and last offset the batch's header claims (-1: unknown).
    fn corrupt_batch(&self, position: u64, offsets: (i64, i64), error: BatchError) -> io::Error {
        CorruptBatch {
            segment_base_offset: Offset::new(self.segment_base_offset),
            position,
            base_offset: Offset::new(offsets.0),
            last_offset: Offset::new(offsets.1),
            error,
        }
        .into_io()
    }

    /// The error for bytes at `position` that do not frame a batch: `rest` starts
    /// there, `left` bytes of the slice remain from there.
    fn corrupt(&self, position: u64, rest: &[u8], left: u64) -> io::Error {
        let (offsets, error) = match BatchHeader::parse(rest) {
            Ok(header) => {
                let error = BatchError::LengthMismatch {
                    declared: header.total_bytes() as i64,
                    actual: usize::try_from(left).unwrap_or(usize::MAX),
                };
                ((header.base_offset, header.last_offset()), error)
            }
            Err(error) => ((-1, -1), error),
        };
        self.corrupt_batch(position, offsets, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_read_in_steps_fills_the_buffer_as_one_read_would() {
        let mut file = tempfile::tempfile().expect("temp file");
        // Not a multiple of the step, so the last step is short.
        let data: Vec<u8> = (0..DISK_READ_BYTES_MAX * 2 + 1234)
            .map(|i| (i % 251) as u8)
            .collect();
        file.write_all(&data).expect("write");
        let position = 777;
        let mut buf = vec![0u8; data.len() - position];
        let steps = std::cell::Cell::new(0);
        read_exact_at_in_steps(&file, &mut buf, position as u64, &|| {
            steps.set(steps.get() + 1)
        })
        .expect("read");
        assert!(
            buf == data[position..],
            "the bytes read differ from the file's"
        );
        assert_eq!(steps.get(), 3, "the hook runs before each disk read");
        let mut past_end = vec![0u8; 10];
        let end = data.len() as u64 - 5;
        let error =
            read_exact_at_in_steps(&file, &mut past_end, end, &|| {}).expect_err("short read");
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    }
}
