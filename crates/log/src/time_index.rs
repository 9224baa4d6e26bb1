//! The sparse time index of one segment: from a timestamp to the first offset where
//! a batch at or after it can be. Plain values with no I/O; the segment reads and
//! writes the `.timeindex` file and keeps the entries here, in memory.
//!
//! File format: a sequence of 12-byte entries, nothing else:
//!
//! | bytes | field               | note                                             |
//! |-------|---------------------|--------------------------------------------------|
//! | 0..8  | timestamp_ms i64    | largest batch max timestamp in the segment so far, big-endian |
//! | 8..12 | relative_offset u32 | base offset of the batch that first reached that timestamp, minus the segment's base offset, big-endian |
//!
//! An entry is considered at every offset-index entry and appended only when the
//! largest timestamp grew since the previous time-index entry (as Kafka does), so
//! both fields are strictly increasing and every timestamp is `>= 0`. Sealing a
//! segment (at a roll) appends one last entry when the largest timestamp grew
//! since, so the last entry of a sealed segment holds its largest timestamp.
//!
//! Why a lookup is right: an entry `(t, r)` says the batch at `r` is the first whose
//! max timestamp reached `t`, so every batch before `r` has a max timestamp `< t`. For
//! a target `x`, the last entry with `t <= x` gives a start from which a scan finds the
//! first batch with max timestamp `>= x`.

use crate::index::IndexDamage;

/// Bytes of one encoded entry.
pub(crate) const TIME_INDEX_ENTRY_BYTES: usize = 12;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeIndexEntry {
    pub timestamp_ms: i64,
    pub relative_offset: u32,
}

impl TimeIndexEntry {
    pub fn encode(&self) -> [u8; TIME_INDEX_ENTRY_BYTES] {
        let mut out = [0u8; TIME_INDEX_ENTRY_BYTES];
        out[0..8].copy_from_slice(&self.timestamp_ms.to_be_bytes());
        out[8..12].copy_from_slice(&self.relative_offset.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> TimeIndexEntry {
        TimeIndexEntry {
            timestamp_ms: i64::from_be_bytes(bytes[0..8].try_into().expect("8 bytes")),
            relative_offset: u32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes")),
        }
    }
}

/// Where a scan of a segment for the first batch at or after `timestamp_ms` may start,
/// from the bytes of its `.timeindex` file (a copy read back from elsewhere): the
/// relative offset of the last entry at or below the time, 0 when there is none or the
/// bytes are not a time index (a scan from the segment's start is longer, never wrong).
pub fn scan_start(bytes: &[u8], timestamp_ms: i64) -> u32 {
    TimeIndex::decode(bytes)
        .ok()
        .and_then(|index| index.floor(timestamp_ms))
        .map_or(0, |entry| entry.relative_offset)
}

/// The in-memory time index of one segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TimeIndex {
    entries: Vec<TimeIndexEntry>,
}

impl TimeIndex {
    /// Decodes and sanity-checks a `.timeindex` file. Whether the relative offsets lie
    /// inside the segment is checked later, when the segment's end is known.
    pub fn decode(bytes: &[u8]) -> Result<TimeIndex, IndexDamage> {
        if !bytes
            .chunks_exact(TIME_INDEX_ENTRY_BYTES)
            .remainder()
            .is_empty()
        {
            return Err(IndexDamage::Length {
                len: bytes.len(),
                entry_bytes: TIME_INDEX_ENTRY_BYTES,
            });
        }
        let entries: Vec<TimeIndexEntry> = bytes
            .chunks_exact(TIME_INDEX_ENTRY_BYTES)
            .map(TimeIndexEntry::decode)
            .collect();
        if entries.first().is_some_and(|e| e.timestamp_ms < 0) {
            return Err(IndexDamage::FirstEntry);
        }
        for (at, pair) in entries.windows(2).enumerate() {
            if pair[1].timestamp_ms <= pair[0].timestamp_ms
                || pair[1].relative_offset <= pair[0].relative_offset
            {
                return Err(IndexDamage::NotIncreasing { at: at + 1 });
            }
        }
        Ok(TimeIndex { entries })
    }

    /// Checks that every entry refers to an offset below `end_relative_offset`.
    pub fn check_end(&self, end_relative_offset: i64) -> Result<(), IndexDamage> {
        match self.entries.last() {
            Some(last) if i64::from(last.relative_offset) >= end_relative_offset => {
                Err(IndexDamage::PastEndOffset {
                    at: self.entries.len() - 1,
                })
            }
            _ => Ok(()),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        encode_entries(&self.entries)
    }

    pub fn last(&self) -> Option<TimeIndexEntry> {
        self.entries.last().copied()
    }

    /// Appends an entry. Entries come from the log's own bookkeeping, so one that does
    /// not increase is a bug.
    pub fn push(&mut self, entry: TimeIndexEntry) {
        if let Some(last) = self.entries.last() {
            assert!(
                entry.timestamp_ms > last.timestamp_ms
                    && entry.relative_offset > last.relative_offset,
                "time index entries must increase: {last:?} then {entry:?}"
            );
        }
        self.entries.push(entry);
    }

    /// The last entry whose timestamp is at or below `timestamp_ms`: every batch
    /// before its relative offset is older than `timestamp_ms`.
    pub fn floor(&self, timestamp_ms: i64) -> Option<TimeIndexEntry> {
        let after = self
            .entries
            .partition_point(|e| e.timestamp_ms <= timestamp_ms);
        after.checked_sub(1).map(|i| self.entries[i])
    }

    /// Keeps every `keep_every`-th entry (see [`crate::index::OffsetIndex::thin`]):
    /// lookups land earlier and the walk after them is longer, never wrong.
    pub fn thin(&mut self, keep_every: usize) {
        self.entries = crate::index::thinned(&self.entries, keep_every);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Drops the entries at or past `end_relative_offset` (after a truncation).
    pub fn truncate_to_end(&mut self, end_relative_offset: i64) {
        self.entries
            .retain(|e| i64::from(e.relative_offset) < end_relative_offset);
    }
}

pub(crate) fn encode_entries(entries: &[TimeIndexEntry]) -> Vec<u8> {
    entries.iter().flat_map(|e| e.encode()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(timestamp_ms: i64, relative_offset: u32) -> TimeIndexEntry {
        TimeIndexEntry {
            timestamp_ms,
            relative_offset,
        }
    }

    #[test]
    fn encode_decode_round_trip() {
        let mut index = TimeIndex::default();
        index.push(entry(1000, 0));
        index.push(entry(1500, 7));
        let bytes = index.encode();
        assert_eq!(bytes.len(), 24);
        assert_eq!(&bytes[12..24], &[0, 0, 0, 0, 0, 0, 0x05, 0xdc, 0, 0, 0, 7]);
        assert_eq!(TimeIndex::decode(&bytes), Ok(index.clone()));
        assert_eq!(index.check_end(8), Ok(()));
        assert!(index.check_end(7).is_err());
    }

    #[test]
    fn floor_lookup() {
        let mut index = TimeIndex::default();
        index.push(entry(1000, 0));
        index.push(entry(1500, 7));
        assert_eq!(index.floor(999), None);
        assert_eq!(index.floor(1000), Some(entry(1000, 0)));
        assert_eq!(index.floor(1499), Some(entry(1000, 0)));
        assert_eq!(index.floor(i64::MAX), Some(entry(1500, 7)));
    }

    #[test]
    fn a_copied_index_gives_the_scan_start_and_damage_gives_the_segment_start() {
        let mut index = TimeIndex::default();
        index.push(entry(1000, 0));
        index.push(entry(1500, 7));
        let bytes = index.encode();
        assert_eq!(scan_start(&bytes, 999), 0);
        assert_eq!(scan_start(&bytes, 1499), 0);
        assert_eq!(scan_start(&bytes, 1500), 7);
        assert_eq!(scan_start(&bytes[..23], 1500), 0);
        assert_eq!(scan_start(&[], 1500), 0);
    }

    #[test]
    fn damage_is_detected() {
        assert!(TimeIndex::decode(&[0u8; 13]).is_err());
        assert!(TimeIndex::decode(&[0u8; 24]).is_err());
        assert!(TimeIndex::decode(&[0xffu8; 12]).is_err());
    }
}
