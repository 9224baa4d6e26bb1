//! What a partition took in from producers and gave out to fetches, for `/metrics`.
//!
//! Counted without a lock: an append counts its batches once they are in the log
//! (duplicates of an idempotent producer's retries are not counted), a fetch counts
//! what its read hands to the client. Records are the batches' record counts, so a
//! transaction marker read by a consumer counts as one record out, as it is on the wire.

use headway_log::batch::{self, BatchHeader};
use std::sync::atomic::{AtomicU64, Ordering};

/// A partition's counters since it was opened.
#[derive(Debug, Default)]
pub struct Traffic {
    bytes_in: AtomicU64,
    records_in: AtomicU64,
    bytes_out: AtomicU64,
    records_out: AtomicU64,
}

/// One reading of [`Traffic`], summed over partitions by `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrafficCounts {
    pub bytes_in: u64,
    pub records_in: u64,
    pub bytes_out: u64,
    pub records_out: u64,
}

impl std::ops::AddAssign for TrafficCounts {
    fn add_assign(&mut self, other: TrafficCounts) {
        self.bytes_in += other.bytes_in;
        self.records_in += other.records_in;
        self.bytes_out += other.bytes_out;
        self.records_out += other.records_out;
    }
}

/// Records in `headers`' batches.
fn records_of(headers: impl Iterator<Item = BatchHeader>) -> u64 {
    headers
        .map(|h| u64::try_from(h.records_count).unwrap_or(0))
        .sum()
}

impl Traffic {
    /// `bytes` of batches with `headers` were appended.
    pub(super) fn took_in(&self, bytes: usize, headers: &[BatchHeader]) {
        self.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
        self.records_in
            .fetch_add(records_of(headers.iter().copied()), Ordering::Relaxed);
    }

    /// `records`, whole batches read for a fetch, go to a client.
    pub(super) fn gave_out(&self, records: &[u8]) {
        if records.is_empty() {
            return;
        }
        let count = records_of(batch::BatchIter::new(records).map(|(h, _)| h));
        self.bytes_out
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        self.records_out.fetch_add(count, Ordering::Relaxed);
    }

    pub fn counts(&self) -> TrafficCounts {
        TrafficCounts {
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            records_in: self.records_in.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
            records_out: self.records_out.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::txn_tests::encoded;

    /// One batch of `count` records (an idempotent producer's, so the encoder keeps
    /// them together).
    fn batch_of(count: usize) -> Vec<u8> {
        encoded(false, 7, 0, 0, count)
    }

    #[test]
    fn appends_and_reads_count_their_batches_records_and_bytes() {
        let traffic = Traffic::default();
        let mut two = batch_of(3);
        two.extend_from_slice(&batch_of(2));
        let validated = batch::validate_all(&two).unwrap();
        traffic.took_in(two.len(), validated.headers());
        traffic.gave_out(&two);
        // A read that ends inside a batch: its bytes go out, its records are not whole.
        traffic.gave_out(&two[..two.len() - 1]);
        traffic.gave_out(&[]);
        let counts = traffic.counts();
        assert_eq!((counts.bytes_in, counts.records_in), (two.len() as u64, 5));
        assert_eq!(counts.bytes_out, 2 * two.len() as u64 - 1);
        assert_eq!(counts.records_out, 5 + 3);
    }
}
