//! How a fetch's read reaches the disk: from the page cache on the caller's thread, or
//! on the read threads of [`crate::io::read_pool`].
//!
//! A tail read (less than [`ReadVia::tail_bytes`] behind the log's end) is served from
//! the page cache on the caller's thread when every byte is there
//! ([`ReadVia::cache_first`], a read that fails rather than waits for the disk); any
//! other read runs on the read pool (the caller holds one of the connection's share
//! permits around the whole read). There a read catching up is first tried from the
//! page cache the same way, outside the bulk budget; only a read that needs the disk
//! passes the broker's bulk budget, which meters the disk. The partition
//! locates the data and hands over the slice ([`crate::Partition::read_via`]); this
//! module never sees the partition or its mutex.

use crate::io::read_pool::ReadVia;
use crate::BrokerError;
use bytes::Bytes;
use headway_base::Offset;
use headway_log::ReadSlice;
use std::sync::atomic::Ordering;

/// Reads whole batches of `slice`, at most about `max_bytes`, never at or past
/// `limit` (the high watermark), the way `via` says. Returns the records and whether
/// they were read on the read threads. `failed` turns a failed read into the
/// partition's error.
pub(crate) async fn read(
    slice: ReadSlice,
    max_bytes: usize,
    limit: Offset,
    via: &ReadVia,
    failed: impl Fn(std::io::Error) -> BrokerError,
) -> Result<(Bytes, bool), BrokerError> {
    let tail = slice.behind_bytes() <= via.tail_bytes;
    let cached = match via.cache_first && tail {
        true => slice.read_cached(max_bytes, limit).map_err(&failed)?,
        false => None,
    };
    if let Some(records) = cached {
        via.pool.stats().cached.fetch_add(1, Ordering::Relaxed);
        return Ok((records, false));
    }
    if via.cache_first && !tail {
        // Catching up on data the page cache holds costs no disk time: it is read on
        // the read threads, at their CPU priority, without the bulk budget, which meters
        // the disk. Held back by that budget, a warm replay would only last longer,
        // and the light clients beside it share the CPU with it for all that time.
        let warm = slice.clone();
        let cached = via
            .pool
            .run(move || warm.read_cached(max_bytes, limit))
            .await
            .map_err(|e| BrokerError::Storage(e.to_string()))?
            .map_err(&failed)?;
        if let Some(records) = cached {
            let stats = via.pool.stats();
            stats.pooled.fetch_add(1, Ordering::Relaxed);
            stats.pooled_cached.fetch_add(1, Ordering::Relaxed);
            return Ok((records, true));
        }
    }
    let records = via
        .pool
        .run_bulk(move |yield_to_syncs| slice.read_yielding(max_bytes, limit, yield_to_syncs))
        .await
        .map_err(|e| BrokerError::Storage(e.to_string()))?
        .map_err(failed)?;
    Ok((records, true))
}
