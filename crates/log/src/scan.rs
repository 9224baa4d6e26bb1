//! Walking the batches of a segment file with positional reads, in bounded chunks.
//! Used by recovery (full scans with CRC checks, tail checks), by timestamp lookups,
//! by the cleaner of compacted topics (which also sees each batch's bytes), and
//! nowhere on the append or fetch path. Holds no state between calls.

use crate::batch::{self, BatchError, BatchHeader, BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES};
use std::fs::File;
use std::io;
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;

/// Why a walk ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WalkEnd {
    /// Every batch up to the end of the region was whole (and valid, when checked).
    End,
    /// The region ends inside a batch: a torn tail.
    Incomplete,
    /// The bytes at the stop position are not a valid batch.
    Invalid(BatchError),
    /// The visitor stopped the walk before the batch at the stop position.
    Stopped,
}

/// Where and why a walk ended. `position` is the file position of the first batch
/// not visited, which is where a torn or corrupt tail gets truncated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Walked {
    pub position: u64,
    pub end: WalkEnd,
}

/// How to walk.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WalkOptions {
    /// Check each batch's lengths and CRC-32C with [`batch::validate`]; otherwise
    /// only parse its header.
    pub validate: bool,
    pub chunk_bytes: usize,
}

/// A window of the file held in memory.
struct Window {
    bytes: Vec<u8>,
    start: u64,
}

impl Window {
    /// The bytes held from file position `position` on.
    fn from(&self, position: u64) -> &[u8] {
        let at = position.saturating_sub(self.start) as usize;
        if position < self.start || at > self.bytes.len() {
            return &[];
        }
        &self.bytes[at..]
    }

    fn fill(&mut self, file: &File, position: u64, len: usize) -> io::Result<()> {
        self.bytes.resize(len, 0);
        file.read_exact_at(&mut self.bytes, position)?;
        self.start = position;
        Ok(())
    }
}

/// Visits the batches of `file` in `from..to`, in order, with their file positions.
pub(crate) fn walk(
    file: &File,
    from: u64,
    to: u64,
    options: WalkOptions,
    mut visit: impl FnMut(u64, &BatchHeader) -> ControlFlow<()>,
) -> io::Result<Walked> {
    walk_batches(file, from, to, options, |position, header, _| {
        visit(position, header)
    })
}

/// [`walk`], with each batch's bytes: the visitor sees one batch at a time, and at
/// most `chunk_bytes` (or one batch, when larger) are held in memory.
pub(crate) fn walk_batches(
    file: &File,
    from: u64,
    to: u64,
    options: WalkOptions,
    mut visit: impl FnMut(u64, &BatchHeader, &[u8]) -> ControlFlow<()>,
) -> io::Result<Walked> {
    let mut window = Window {
        bytes: Vec::new(),
        start: from,
    };
    let mut position = from;
    loop {
        let remaining = to.saturating_sub(position);
        let stop = |end| Ok(Walked { position, end });
        let (header, total) = match next_batch(&mut window, file, position, remaining, options)? {
            Ok(next) => next,
            Err(end) => return stop(end),
        };
        let bytes = &window.from(position)[..total];
        if visit(position, &header, bytes).is_break() {
            return stop(WalkEnd::Stopped);
        }
        position += total as u64;
    }
}

/// The header and size of the batch at `position`, reading more of the file into
/// the window when it does not hold the whole batch; or why there is none.
fn next_batch(
    window: &mut Window,
    file: &File,
    position: u64,
    remaining: u64,
    options: WalkOptions,
) -> io::Result<Result<(BatchHeader, usize), WalkEnd>> {
    if remaining == 0 {
        return Ok(Err(WalkEnd::End));
    }
    if remaining < LOG_OVERHEAD_BYTES as u64 {
        return Ok(Err(WalkEnd::Incomplete));
    }
    if window.from(position).len() < LOG_OVERHEAD_BYTES {
        window.fill(file, position, capped(options.chunk_bytes, remaining))?;
    }
    let total = match batch_bytes(window.from(position), remaining) {
        Ok(total) => total,
        Err(end) => return Ok(Err(end)),
    };
    if window.from(position).len() < total {
        let len = capped(options.chunk_bytes.max(total), remaining);
        window.fill(file, position, len)?;
    }
    let bytes = &window.from(position)[..total];
    let parsed = match options.validate {
        true => batch::validate(bytes),
        false => BatchHeader::parse(bytes),
    };
    Ok(parsed
        .map(|header| (header, total))
        .map_err(WalkEnd::Invalid))
}

fn capped(len: usize, remaining: u64) -> usize {
    usize::try_from(remaining).map_or(len, |remaining| len.min(remaining))
}

/// The declared size of the batch at the start of `bytes` (which holds at least its
/// length field), checked against the bytes left in the region.
fn batch_bytes(bytes: &[u8], remaining: u64) -> Result<usize, WalkEnd> {
    let declared = i32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes"));
    let total = LOG_OVERHEAD_BYTES as i64 + i64::from(declared);
    if total < BATCH_HEADER_BYTES as i64 {
        return Err(WalkEnd::Invalid(BatchError::LengthMismatch {
            declared: total,
            actual: usize::try_from(remaining).unwrap_or(usize::MAX),
        }));
    }
    if total as u64 > remaining {
        return Err(WalkEnd::Incomplete);
    }
    Ok(total as usize)
}
