//! ListOffsets by time before a tiered partition's local log: the first record at or
//! after a timestamp may live in a segment only the remote tier holds.
//!
//! The remote segments between the log start and the local log are taken oldest first;
//! the first whose newest record reaches the time holds the answer (each segment's
//! commit object names its largest timestamp). Its copied `.timeindex` gives where a
//! scan may start, and batches are read from there with the fetch path's ranged reads
//! until one reaches the time; that batch is walked for the record, as a local lookup
//! does. Within `REMOTE_READ_TIMEOUT_MS`; a failure is a `Storage` error
//! (`KAFKA_STORAGE_ERROR`, retriable), never a wrong offset.

use crate::fetch::Failed;
use crate::store::{RemoteSegment, TierError};
use crate::Tier;
use headway_base::Offset;
use headway_broker::{BatchHeader, BrokerError, Partition};
use headway_log::{records, time_index};
use std::sync::Arc;

/// Bytes one step of a lookup's scan reads.
const LOOKUP_READ_BYTES: usize = 256 << 10;

impl Tier {
    /// The first record at or after `timestamp_ms` before `p`'s local log: its offset
    /// and timestamp. `None` when every record there is older (or there is no remote
    /// part): the local log answers then.
    pub async fn offset_for_timestamp(
        &self,
        topic_id: uuid::Uuid,
        p: &Arc<Partition>,
        timestamp_ms: i64,
    ) -> Result<Option<(Offset, i64)>, BrokerError> {
        let what = format!("lookup by time {timestamp_ms}");
        self.in_time(p, &what, self.lookup(topic_id, p, timestamp_ms))
            .await
    }

    async fn lookup(
        &self,
        topic_id: uuid::Uuid,
        p: &Arc<Partition>,
        timestamp_ms: i64,
    ) -> Result<Option<(Offset, i64)>, Failed> {
        let log_start = p.log_start_offset().value();
        let local_start = p.local_start_offset()?.value();
        if log_start >= local_start {
            return Ok(None);
        }
        let key = (topic_id, p.index().value());
        self.load_view(key, p).await?;
        let (dir, candidates) = {
            let known = self.known.lock().expect("tier mutex poisoned");
            let Some(view) = known.get(&key) else {
                return Ok(None);
            };
            let candidates: Vec<RemoteSegment> = view
                .segments
                .values()
                .filter(|s| s.end_offset > log_start && s.base_offset < local_start)
                .filter(|s| s.max_timestamp_ms.is_some_and(|max| max >= timestamp_ms))
                .cloned()
                .collect();
            (view.dir.clone(), candidates)
        };
        for segment in candidates {
            let from = match segment.files.contains_key("timeindex") {
                true => {
                    let name = format!("{dir}/{}.timeindex", segment.stem());
                    let index = self.store.get_cached(&name, &self.indexes).await?;
                    segment.base_offset + i64::from(time_index::scan_start(&index, timestamp_ms))
                }
                false => segment.base_offset,
            };
            let end = segment.end_offset.min(local_start);
            let mut at = from.max(log_start);
            while at < end {
                let batches = self
                    .store
                    .read_batches(&dir, &segment, at, LOOKUP_READ_BYTES, &self.indexes)
                    .await?;
                let Some((next, reached)) = first_reaching(&batches, at, timestamp_ms) else {
                    break;
                };
                if let Some(batch) = reached {
                    return Ok(Some(exact(batch, timestamp_ms, log_start).await?));
                }
                at = next;
            }
        }
        Ok(None)
    }
}

/// In whole batches read from `at`: the offset after the last, and the first batch
/// whose newest record is at or after `timestamp_ms`, if one is. `None` when there is
/// no whole batch at all.
fn first_reaching(
    batches: &bytes::Bytes,
    at: i64,
    timestamp_ms: i64,
) -> Option<(i64, Option<bytes::Bytes>)> {
    let mut rest = &batches[..];
    let mut position = 0;
    let mut next = None;
    while let Ok(header) = BatchHeader::parse(rest) {
        let whole = header.total_bytes();
        if whole > rest.len() {
            break;
        }
        if header.last_offset() >= at && header.max_timestamp >= timestamp_ms {
            let batch = batches.slice(position..position + whole);
            return Some((header.last_offset() + 1, Some(batch)));
        }
        next = Some(header.last_offset() + 1);
        position += whole;
        rest = &rest[whole..];
    }
    next.map(|next| (next, None))
}

/// The record of `batch` at or after `timestamp_ms` (the batch's own offset and newest
/// time when its records cannot be walked), never before the log start. The batch is
/// walked on a blocking thread: it may take a moment to inflate.
async fn exact(
    batch: bytes::Bytes,
    timestamp_ms: i64,
    log_start: i64,
) -> Result<(Offset, i64), Failed> {
    let header = BatchHeader::parse(&batch).map_err(|e| TierError::Local(e.to_string()))?;
    let walked =
        tokio::task::spawn_blocking(move || records::first_record_at(&batch, timestamp_ms))
            .await
            .map_err(|e| TierError::Local(format!("lookup task failed: {e}")))?;
    let (offset, timestamp) = walked.unwrap_or((header.base_offset, header.max_timestamp));
    Ok((Offset::new(offset.max(log_start)), timestamp))
}
