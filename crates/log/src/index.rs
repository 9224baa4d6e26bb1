//! The sparse offset index of one segment: which file position holds the batch that
//! starts at a given offset. Plain values with no I/O; the segment reads and writes the
//! `.index` file and keeps the entries here, in memory, for lookups.
//!
//! File format: a sequence of 8-byte entries, nothing else (no header, no padding):
//!
//! | bytes | field               | note                                             |
//! |-------|---------------------|--------------------------------------------------|
//! | 0..4  | relative_offset u32 | batch base offset minus the segment's base offset, big-endian |
//! | 4..8  | position u32        | byte position of that batch in the `.log` file, big-endian |
//!
//! Entries are strictly increasing in both fields. The first batch of a non-empty
//! segment always has an entry (`0, 0`); after that a batch gets one when at least
//! `index_interval_bytes` of batches were written since the previous entry (see
//! `indexing.rs`). An entry is appended after its batch was written, so the index
//! never points past the log.

/// Bytes of one encoded entry.
pub(crate) const INDEX_ENTRY_BYTES: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub relative_offset: u32,
    pub position: u32,
}

impl IndexEntry {
    pub fn encode(&self) -> [u8; INDEX_ENTRY_BYTES] {
        let mut out = [0u8; INDEX_ENTRY_BYTES];
        out[0..4].copy_from_slice(&self.relative_offset.to_be_bytes());
        out[4..8].copy_from_slice(&self.position.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> IndexEntry {
        IndexEntry {
            relative_offset: u32::from_be_bytes(bytes[0..4].try_into().expect("4 bytes")),
            position: u32::from_be_bytes(bytes[4..8].try_into().expect("4 bytes")),
        }
    }
}

/// Why an index file read from disk cannot be trusted. The segment then rebuilds it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IndexDamage {
    #[error("length {len} is not a multiple of the {entry_bytes}-byte entry")]
    Length { len: usize, entry_bytes: usize },
    #[error("entry {at} does not increase over the previous one")]
    NotIncreasing { at: usize },
    #[error("entry {at} points past the end of the log ({log_bytes} bytes)")]
    PastLogEnd { at: usize, log_bytes: u64 },
    #[error("the first entry must be (0, 0) for a non-empty log and absent for an empty one")]
    FirstEntry,
    #[error("entry {at} refers to offsets past the segment's end")]
    PastEndOffset { at: usize },
}

/// The in-memory offset index of one segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct OffsetIndex {
    entries: Vec<IndexEntry>,
}

impl OffsetIndex {
    /// Decodes and sanity-checks an `.index` file of a segment whose `.log` holds
    /// `log_bytes` bytes.
    pub fn decode(bytes: &[u8], log_bytes: u64) -> Result<OffsetIndex, IndexDamage> {
        if !bytes.chunks_exact(INDEX_ENTRY_BYTES).remainder().is_empty() {
            return Err(IndexDamage::Length {
                len: bytes.len(),
                entry_bytes: INDEX_ENTRY_BYTES,
            });
        }
        let entries: Vec<IndexEntry> = bytes
            .chunks_exact(INDEX_ENTRY_BYTES)
            .map(IndexEntry::decode)
            .collect();
        let first_ok = match entries.first() {
            None => log_bytes == 0,
            Some(first) => first.relative_offset == 0 && first.position == 0 && log_bytes > 0,
        };
        if !first_ok {
            return Err(IndexDamage::FirstEntry);
        }
        for (at, pair) in entries.windows(2).enumerate() {
            if pair[1].relative_offset <= pair[0].relative_offset
                || pair[1].position <= pair[0].position
            {
                return Err(IndexDamage::NotIncreasing { at: at + 1 });
            }
        }
        if let Some(last) = entries.last() {
            if u64::from(last.position) >= log_bytes {
                return Err(IndexDamage::PastLogEnd {
                    at: entries.len() - 1,
                    log_bytes,
                });
            }
        }
        Ok(OffsetIndex { entries })
    }

    pub fn encode(&self) -> Vec<u8> {
        encode_entries(&self.entries)
    }

    pub fn last(&self) -> Option<IndexEntry> {
        self.entries.last().copied()
    }

    /// Appends an entry. Entries come from the log's own bookkeeping, so one that does
    /// not increase is a bug.
    pub fn push(&mut self, entry: IndexEntry) {
        if let Some(last) = self.entries.last() {
            assert!(
                entry.relative_offset > last.relative_offset && entry.position > last.position,
                "offset index entries must increase: {last:?} then {entry:?}"
            );
        }
        self.entries.push(entry);
    }

    /// The entry with the largest relative offset at or below `relative_offset`.
    pub fn floor(&self, relative_offset: u32) -> Option<IndexEntry> {
        let after = self
            .entries
            .partition_point(|e| e.relative_offset <= relative_offset);
        after.checked_sub(1).map(|i| self.entries[i])
    }

    /// Where to start walking batches to find `relative_offset`: the floor entry's
    /// position, or the start of the segment.
    pub fn position_for(&self, relative_offset: u32) -> u64 {
        self.floor(relative_offset)
            .map_or(0, |e| u64::from(e.position))
    }

    /// Drops the entries at or past `log_bytes` (after the log was truncated there).
    /// Keeps every `keep_every`-th entry (the first always) and frees the rest: a
    /// sealed segment's lookups land up to `keep_every` intervals earlier and the read
    /// walks forward from there.
    pub fn thin(&mut self, keep_every: usize) {
        self.entries = thinned(&self.entries, keep_every);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn truncate_to_log_bytes(&mut self, log_bytes: u64) {
        self.entries.retain(|e| u64::from(e.position) < log_bytes);
    }
}

/// Every `keep_every`-th of `entries`, starting with the first, in a right-sized vector.
pub(crate) fn thinned<T: Copy>(entries: &[T], keep_every: usize) -> Vec<T> {
    entries.iter().step_by(keep_every.max(1)).copied().collect()
}

pub(crate) fn encode_entries(entries: &[IndexEntry]) -> Vec<u8> {
    entries.iter().flat_map(|e| e.encode()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(relative_offset: u32, position: u32) -> IndexEntry {
        IndexEntry {
            relative_offset,
            position,
        }
    }

    fn index(entries: &[IndexEntry]) -> OffsetIndex {
        let mut index = OffsetIndex::default();
        entries.iter().for_each(|e| index.push(*e));
        index
    }

    #[test]
    fn encode_decode_round_trip() {
        let index = index(&[entry(0, 0), entry(5, 4100), entry(9, 8300)]);
        let bytes = index.encode();
        assert_eq!(bytes.len(), 24);
        assert_eq!(&bytes[8..16], &[0, 0, 0, 5, 0, 0, 0x10, 0x04]);
        assert_eq!(OffsetIndex::decode(&bytes, 9000), Ok(index));
    }

    #[test]
    fn floor_lookup() {
        let index = index(&[entry(0, 0), entry(5, 4100), entry(9, 8300)]);
        assert_eq!(index.floor(0), Some(entry(0, 0)));
        assert_eq!(index.floor(4), Some(entry(0, 0)));
        assert_eq!(index.floor(5), Some(entry(5, 4100)));
        assert_eq!(index.floor(100), Some(entry(9, 8300)));
        assert_eq!(OffsetIndex::default().position_for(3), 0);
    }

    #[test]
    fn damage_is_detected() {
        let good = index(&[entry(0, 0), entry(5, 4100)]).encode();
        assert!(matches!(
            OffsetIndex::decode(&good[..12], 9000),
            Err(IndexDamage::Length { .. })
        ));
        assert_eq!(
            OffsetIndex::decode(&good, 4100),
            Err(IndexDamage::PastLogEnd {
                at: 1,
                log_bytes: 4100
            })
        );
        assert_eq!(OffsetIndex::decode(&[], 10), Err(IndexDamage::FirstEntry));
        assert_eq!(OffsetIndex::decode(&good, 0), Err(IndexDamage::FirstEntry));
        let mut backwards = good.clone();
        backwards.extend(entry(3, 5000).encode());
        assert_eq!(
            OffsetIndex::decode(&backwards, 9000),
            Err(IndexDamage::NotIncreasing { at: 2 })
        );
        let zeros = vec![0u8; 16];
        assert_eq!(
            OffsetIndex::decode(&zeros, 9000),
            Err(IndexDamage::NotIncreasing { at: 1 })
        );
    }
}
