//! Fetches below a tiered partition's local log, served from the remote tier: the
//! partition answered [`BrokerError::InRemoteTier`], and the fetch handler asks here.
//!
//! A read finds the remote segment holding the offset in the partition's remote view
//! (listed from the bucket if this broker has none yet), waits for the bulk budget as
//! every catch-up read does (so a remote catch-up is paced with the local ones, and its
//! bytes are charged the same way), and reads whole batches with
//! [`RemoteStore::read_batches`] within `REMOTE_READ_TIMEOUT_MS`. A read that fails or
//! times out is a `Storage` error (`KAFKA_STORAGE_ERROR`, which clients retry): the
//! tail, produces and the uploads of other partitions never wait for the bucket. For
//! `read_committed` the aborted transactions overlapping the records come from the
//! remote segments' `.txnindex` copies and the local log's index, as a local read's do.

use crate::store::{RemoteSegment, TierError};
use crate::uploader::{Known, LISTED_FOR_READ};
use crate::Tier;
use headway_base::{limits, Offset};
use headway_broker::io::bulk_budget::{BulkBudget, BulkWork};
use headway_broker::{AbortedTxn, BatchHeader, BrokerError, Isolation, Partition, ReadResult};
use headway_log::txn_index;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

impl Tier {
    /// Whole batches of `p` from `offset`, which lies before its local log: at most
    /// `max_bytes`, always the whole first batch.
    pub async fn read(
        &self,
        topic_id: uuid::Uuid,
        p: &Arc<Partition>,
        offset: Offset,
        max_bytes: usize,
        isolation: Isolation,
        budget: &BulkBudget,
    ) -> Result<ReadResult, BrokerError> {
        self.stats.fetches.fetch_add(1, Ordering::Relaxed);
        let what = format!("offset {offset}");
        let read = self
            .in_time(
                p,
                &what,
                self.read_in_time(topic_id, p, offset, max_bytes, isolation, budget),
            )
            .await?;
        self.stats
            .fetch_bytes
            .fetch_add(read.records.len() as u64, Ordering::Relaxed);
        Ok(read)
    }

    /// Runs one remote operation on `p` (`what` names it) within
    /// `REMOTE_READ_TIMEOUT_MS`: the tier's failures and a timeout are counted, logged
    /// and answered as a `Storage` error (`KAFKA_STORAGE_ERROR`, retriable); the
    /// broker's own answers pass as they are.
    pub(crate) async fn in_time<T>(
        &self,
        p: &Partition,
        what: &str,
        work: impl std::future::Future<Output = Result<T, Failed>>,
    ) -> Result<T, BrokerError> {
        let timeout = Duration::from_millis(limits::REMOTE_READ_TIMEOUT_MS);
        let done = tokio::time::timeout(timeout, work)
            .await
            .unwrap_or_else(|_| {
                Err(TierError::Local(format!(
                    "no answer from the remote tier within {} ms",
                    timeout.as_millis()
                ))
                .into())
            });
        match done {
            Ok(value) => Ok(value),
            Err(Failed::Broker(e)) => Err(e),
            Err(Failed::Tier(e)) => {
                self.stats.fetch_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(topic = p.topic(), partition = p.index().value(), what,
                    error = %e, "remote tier read failed");
                Err(BrokerError::Storage(format!(
                    "{}/{} {what} from the remote tier: {e}",
                    p.topic(),
                    p.index()
                )))
            }
        }
    }

    async fn read_in_time(
        &self,
        topic_id: uuid::Uuid,
        p: &Arc<Partition>,
        offset: Offset,
        max_bytes: usize,
        isolation: Isolation,
        budget: &BulkBudget,
    ) -> Result<ReadResult, Failed> {
        let key = (topic_id, p.index().value());
        let (dir, segment, later) = self.segment_for(key, p, offset).await?;
        budget.admit(BulkWork::Read).await;
        let records = self
            .store
            .read_batches(&dir, &segment, offset.value(), max_bytes, &self.indexes)
            .await?;
        budget.charge(BulkWork::Read, records.len());
        let aborted = match (isolation, records_end(&records)) {
            (Isolation::ReadCommitted, Some(end)) => {
                Some(self.aborted(&dir, p, &segment, &later, offset, end).await?)
            }
            (Isolation::ReadCommitted, None) => Some(Vec::new()),
            (Isolation::ReadUncommitted, _) => None,
        };
        Ok(ReadResult {
            records,
            high_watermark: p.high_watermark(),
            log_start_offset: p.log_start_offset(),
            last_stable_offset: p.last_stable_offset(),
            aborted,
            pooled: true,
        })
    }

    /// The remote segment holding `offset` (or the first after it, past a gap), and
    /// the remote segments after it; listed from the bucket when this broker has no
    /// view of the partition yet.
    async fn segment_for(
        &self,
        key: (uuid::Uuid, i32),
        p: &Arc<Partition>,
        offset: Offset,
    ) -> Result<(String, RemoteSegment, Vec<RemoteSegment>), Failed> {
        self.load_view(key, p).await?;
        let known = self.known.lock().expect("tier mutex poisoned");
        let view = known.get(&key).ok_or_else(|| out_of_range(p, offset))?;
        let at = offset.value();
        let holding = view
            .segments
            .range(..=at)
            .next_back()
            .filter(|(_, s)| s.end_offset > at)
            .or_else(|| view.segments.range(at + 1..).next())
            .map(|(_, s)| s.clone())
            .ok_or_else(|| out_of_range(p, offset))?;
        let later = view
            .segments
            .range(holding.base_offset + 1..)
            .map(|(_, s)| s.clone())
            .collect();
        Ok((view.dir.clone(), holding, later))
    }

    /// Makes sure this broker has a view of the partition's remote segments: listed
    /// from the bucket when it has none yet.
    pub(crate) async fn load_view(
        &self,
        key: (uuid::Uuid, i32),
        p: &Partition,
    ) -> Result<(), TierError> {
        let known = self
            .known
            .lock()
            .expect("tier mutex poisoned")
            .contains_key(&key);
        if known {
            return Ok(());
        }
        let dir = self.store.partition_dir(p.topic(), key.0, key.1);
        let listing = self.store.list(&dir).await?;
        // Only the uploader replaces a view, and it lists again for this one (and
        // deletes the orphans a listing finds): a read never deletes anything.
        let view = Known {
            epoch: LISTED_FOR_READ,
            dir,
            segments: listing.segments,
        };
        self.known
            .lock()
            .expect("tier mutex poisoned")
            .entry(key)
            .or_insert(view);
        Ok(())
    }

    /// The aborted transactions overlapping `[from, to)`: an entry lives in the
    /// segment of its marker, at or after the one holding `from`, remote or local.
    async fn aborted(
        &self,
        dir: &str,
        p: &Partition,
        holding: &RemoteSegment,
        later: &[RemoteSegment],
        from: Offset,
        to: Offset,
    ) -> Result<Vec<AbortedTxn>, Failed> {
        let most = limits::ABORTED_TRANSACTIONS_PER_FETCH_MAX;
        let mut found = Vec::new();
        let with_index = std::iter::once(holding)
            .chain(later)
            .filter(|s| s.files.contains_key("txnindex"));
        for segment in with_index {
            let name = format!("{dir}/{}.txnindex", segment.stem());
            let bytes = self.store.get_cached(&name, &self.indexes).await?;
            found.extend(
                txn_index::decode_all(&bytes)
                    .into_iter()
                    .filter(|t| t.last_offset >= from && t.first_offset < to),
            );
        }
        found.extend(p.aborted_transactions(from, to, most)?);
        found.sort_by_key(|t| t.last_offset);
        found.dedup();
        found.truncate(most);
        Ok(found)
    }
}

/// What a remote read's offset is when no remote segment holds it nor follows it.
fn out_of_range(p: &Partition, offset: Offset) -> BrokerError {
    BrokerError::OffsetOutOfRange {
        offset,
        log_start_offset: p.log_start_offset(),
        high_watermark: p.high_watermark(),
    }
}

/// The offset after the last of `records`' batches; `None` when there are none.
fn records_end(records: &[u8]) -> Option<Offset> {
    let mut rest = records;
    let mut end = None;
    while let Ok(header) = BatchHeader::parse(rest) {
        end = Some(Offset::new(header.last_offset() + 1));
        let Some(next) = rest.get(header.total_bytes()..) else {
            break;
        };
        rest = next;
    }
    end
}

/// Why a remote read failed: the broker's answer as it is, or the tier's.
pub(crate) enum Failed {
    Broker(BrokerError),
    Tier(TierError),
}

impl From<BrokerError> for Failed {
    fn from(e: BrokerError) -> Failed {
        Failed::Broker(e)
    }
}

impl From<TierError> for Failed {
    fn from(e: TierError) -> Failed {
        Failed::Tier(e)
    }
}
