//! When a batch gets index entries: the cadence shared by appends and by index
//! rebuilds, so a rebuilt index equals the one written live. Plain values, no I/O.
//!
//! Rules: the first batch of a segment gets an offset-index entry; later, a batch gets
//! one when at least `index_interval_bytes` of batches were written since the previous
//! entry. At each offset-index entry, and when the segment is sealed, a time-index
//! entry is added if the segment's largest timestamp grew since the last one.

use crate::index::{IndexEntry, OffsetIndex};
use crate::time_index::{TimeIndex, TimeIndexEntry};

/// Kafka's "no timestamp" value; batches carrying it never produce time entries.
pub(crate) const NO_TIMESTAMP: i64 = -1;

/// The indexing state of one segment between batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IndexCursor {
    has_entries: bool,
    bytes_since_entry: u64,
    max_timestamp_ms: i64,
    relative_offset_of_max_timestamp: u32,
    time_index_timestamp_ms: i64,
}

/// What one batch adds to the two indexes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NewEntries {
    pub offset: Option<IndexEntry>,
    pub time: Option<TimeIndexEntry>,
}

impl NewEntries {
    /// Adds the entries to the in-memory indexes.
    pub fn push_into(self, offset_index: &mut OffsetIndex, time_index: &mut TimeIndex) {
        self.offset.into_iter().for_each(|e| offset_index.push(e));
        self.time.into_iter().for_each(|e| time_index.push(e));
    }
}

/// A batch as the cursor sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchPlace {
    pub relative_offset: u32,
    pub position: u32,
    pub size_bytes: u32,
    pub max_timestamp_ms: i64,
}

impl IndexCursor {
    /// The state of an empty segment.
    pub fn new() -> IndexCursor {
        IndexCursor {
            has_entries: false,
            bytes_since_entry: 0,
            max_timestamp_ms: NO_TIMESTAMP,
            relative_offset_of_max_timestamp: 0,
            time_index_timestamp_ms: NO_TIMESTAMP,
        }
    }

    /// The state after the indexes loaded from disk, before the batches from the
    /// last offset-index entry on are noted again with [`IndexCursor::note`].
    pub fn resume(
        last_entry: Option<IndexEntry>,
        time_index: &TimeIndex,
        log_bytes: u64,
    ) -> IndexCursor {
        let mut cursor = IndexCursor::new();
        if let Some(entry) = last_entry {
            cursor.has_entries = true;
            cursor.bytes_since_entry = log_bytes - u64::from(entry.position);
        }
        if let Some(last) = time_index.last() {
            cursor.max_timestamp_ms = last.timestamp_ms;
            cursor.relative_offset_of_max_timestamp = last.relative_offset;
            cursor.time_index_timestamp_ms = last.timestamp_ms;
        }
        cursor
    }

    /// Accounts for the next batch of the segment and says which entries it adds.
    pub fn observe(&mut self, batch: BatchPlace, index_interval_bytes: u32) -> NewEntries {
        let mut entries = NewEntries::default();
        if !self.has_entries || self.bytes_since_entry >= u64::from(index_interval_bytes) {
            self.has_entries = true;
            self.bytes_since_entry = 0;
            entries.offset = Some(IndexEntry {
                relative_offset: batch.relative_offset,
                position: batch.position,
            });
        }
        self.bytes_since_entry += u64::from(batch.size_bytes);
        self.note(batch.relative_offset, batch.max_timestamp_ms);
        if entries.offset.is_some() {
            entries.time = self.time_entry();
        }
        entries
    }

    /// Folds a batch's max timestamp into the segment's largest timestamp.
    pub fn note(&mut self, relative_offset: u32, max_timestamp_ms: i64) {
        if max_timestamp_ms > self.max_timestamp_ms {
            self.max_timestamp_ms = max_timestamp_ms;
            self.relative_offset_of_max_timestamp = relative_offset;
        }
    }

    /// The final time-index entry of a segment being sealed, if its largest timestamp
    /// grew since the last entry.
    pub fn seal(&mut self) -> Option<TimeIndexEntry> {
        self.time_entry()
    }

    /// The largest batch max timestamp in the segment, or [`NO_TIMESTAMP`].
    pub fn max_timestamp_ms(&self) -> i64 {
        self.max_timestamp_ms
    }

    fn time_entry(&mut self) -> Option<TimeIndexEntry> {
        if self.max_timestamp_ms <= self.time_index_timestamp_ms {
            return None;
        }
        self.time_index_timestamp_ms = self.max_timestamp_ms;
        Some(TimeIndexEntry {
            timestamp_ms: self.max_timestamp_ms,
            relative_offset: self.relative_offset_of_max_timestamp,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(relative_offset: u32, position: u32, max_timestamp_ms: i64) -> BatchPlace {
        BatchPlace {
            relative_offset,
            position,
            size_bytes: 100,
            max_timestamp_ms,
        }
    }

    #[test]
    fn first_batch_and_every_interval_get_an_entry() {
        let mut cursor = IndexCursor::new();
        let got: Vec<bool> = (0..7u32)
            .map(|i| cursor.observe(place(i, i * 100, 10), 250).offset.is_some())
            .collect();
        // Entries at 0, then once 250 bytes passed since: at 300 and 600.
        assert_eq!(got, [true, false, false, true, false, false, true]);
    }

    #[test]
    fn time_entries_only_when_the_largest_timestamp_grows() {
        let mut cursor = IndexCursor::new();
        let e0 = cursor.observe(place(0, 0, 50), 0);
        assert_eq!(
            e0.time.map(|t| (t.timestamp_ms, t.relative_offset)),
            Some((50, 0))
        );
        assert_eq!(cursor.observe(place(1, 100, 40), 0).time, None);
        assert_eq!(cursor.observe(place(2, 200, 50), 0).time, None);
        let e3 = cursor.observe(place(3, 300, 70), 0);
        assert_eq!(
            e3.time.map(|t| (t.timestamp_ms, t.relative_offset)),
            Some((70, 3))
        );
        assert_eq!(cursor.seal(), None);
    }

    #[test]
    fn seal_records_a_maximum_reached_between_entries() {
        let mut cursor = IndexCursor::new();
        cursor.observe(place(0, 0, 50), 1000);
        cursor.observe(place(1, 100, 90), 1000);
        let sealed = cursor.seal().expect("the maximum grew");
        assert_eq!((sealed.timestamp_ms, sealed.relative_offset), (90, 1));
    }

    #[test]
    fn batches_without_timestamps_add_no_time_entries() {
        let mut cursor = IndexCursor::new();
        assert_eq!(cursor.observe(place(0, 0, NO_TIMESTAMP), 0).time, None);
        assert_eq!(cursor.seal(), None);
        assert_eq!(cursor.max_timestamp_ms(), NO_TIMESTAMP);
    }
}
