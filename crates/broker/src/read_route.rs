//! How a fetch's read reaches the disk: from the page cache on the caller's thread, or
//! on the read threads of [`crate::read_pool`] with the connection's share.
//!
//! A tail read (less than [`ReadVia::tail_bytes`] behind the log's end) is served from
//! the page cache on the caller's thread when every byte is there
//! ([`ReadVia::cache_first`], a read that fails rather than waits for the disk); any
//! other read runs on the read pool, holding one of the connection's share permits
//! while queued and running, and passing the broker's bulk budget. The partition only
//! locates the data ([`Partition::start_read`]); this module never holds its mutex.

use crate::partition::{Partition, ReadResult, ReadStart};
use crate::read_pool::ReadVia;
use crate::BrokerError;
use headway_log::Offset;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Reads whole batches of `partition` from `offset`, at most about `max_bytes`, never
/// past the high watermark, the way `via` says. Used by [`Partition::read_via`].
pub(crate) async fn read(
    partition: &Partition,
    offset: Offset,
    max_bytes: usize,
    via: &ReadVia,
) -> Result<ReadResult, BrokerError> {
    let (slice, bounds) = match partition.start_read(offset)? {
        ReadStart::Nothing(empty) => return Ok(empty),
        ReadStart::Located(slice, bounds) => (slice, bounds),
    };
    let high_watermark = bounds.high_watermark;
    let failed = |e| partition.read_failed(offset, e);
    let tail = slice.behind_bytes() <= via.tail_bytes;
    let cached = match via.cache_first && tail {
        true => slice
            .read_cached(max_bytes, high_watermark)
            .map_err(failed)?,
        false => None,
    };
    let (records, pooled) = match cached {
        Some(records) => {
            via.pool.stats().cached.fetch_add(1, Ordering::Relaxed);
            (records, false)
        }
        None => {
            let _turn = match &via.share {
                Some(share) => Some(
                    Arc::clone(share)
                        .acquire_owned()
                        .await
                        .map_err(|_| BrokerError::Storage("read share closed".into()))?,
                ),
                None => None,
            };
            let records = via
                .pool
                .run_bulk(move || slice.read(max_bytes, high_watermark))
                .await
                .map_err(|e| BrokerError::Storage(e.to_string()))?
                .map_err(failed)?;
            (records, true)
        }
    };
    Ok(bounds.answer(records, pooled))
}
