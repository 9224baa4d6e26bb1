//! The aborted-transaction index, Kafka's `.txnindex`: per segment, the transactions
//! that ended with an abort marker in that segment, so that a `read_committed` fetch
//! can tell its client which records to drop (KIP-98).
//!
//! An entry is `(producer id, first offset, last offset)`: the producer's first
//! transactional batch of the transaction, and the abort marker's offset. It lives in
//! the segment holding the marker, so it is deleted with that segment (by retention,
//! DeleteRecords, or a roll that drops an empty segment), when every record of the
//! transaction is gone too. The cleaner keeps transactional batches and markers
//! whole, so a cleaned segment takes over the entries of the segments it replaces.
//!
//! File `<base offset>.txnindex`: entries of 28 bytes, each
//! `producer_id: i64, first_offset: i64, last_offset: i64, crc32c: u32` (big-endian;
//! the CRC-32C covers the 24 bytes before it), in the order the markers were written.
//! A torn or damaged entry ends the file at open. The entries are kept in memory
//! (24 bytes each, like the offset index), appended to the file when a marker is
//! written and synced at close; a crash may lose the newest entries, which the broker
//! rebuilds from the markers it replays at open ([`crate::Log::add_aborted`] takes a
//! known entry again without a second copy).

use crate::file_names::{file_name, parse_file_name, TXN_INDEX_SUFFIX};
use crate::LogError;
use headway_base::{durable_file, Offset, ProducerId};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Bytes per entry on disk.
pub(crate) const ENTRY_BYTES: usize = 28;

/// One aborted transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AbortedTxn {
    pub producer_id: ProducerId,
    /// The offset of the transaction's first batch in this partition.
    pub first_offset: Offset,
    /// The offset of its abort marker.
    pub last_offset: Offset,
}

impl AbortedTxn {
    fn encode(&self) -> [u8; ENTRY_BYTES] {
        let mut out = [0u8; ENTRY_BYTES];
        out[0..8].copy_from_slice(&self.producer_id.value().to_be_bytes());
        out[8..16].copy_from_slice(&self.first_offset.value().to_be_bytes());
        out[16..24].copy_from_slice(&self.last_offset.value().to_be_bytes());
        let crc = crc32c::crc32c(&out[..24]);
        out[24..].copy_from_slice(&crc.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<AbortedTxn> {
        let bytes: &[u8; ENTRY_BYTES] = bytes.try_into().ok()?;
        let crc = u32::from_be_bytes(bytes[24..].try_into().ok()?);
        if crc32c::crc32c(&bytes[..24]) != crc {
            return None;
        }
        let i64_at = |at: usize| i64::from_be_bytes(bytes[at..at + 8].try_into().expect("8"));
        let entry = AbortedTxn {
            producer_id: ProducerId::new(i64_at(0)),
            first_offset: Offset::new(i64_at(8)),
            last_offset: Offset::new(i64_at(16)),
        };
        (entry.first_offset <= entry.last_offset).then_some(entry)
    }
}

pub(crate) fn path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(file_name(base_offset, TXN_INDEX_SUFFIX))
}

/// The entries of a file's bytes (a `.txnindex` file, or its copy in the remote tier),
/// up to the first torn or damaged one.
pub fn decode_all(bytes: &[u8]) -> Vec<AbortedTxn> {
    bytes
        .chunks(ENTRY_BYTES)
        .map_while(AbortedTxn::decode)
        .collect()
}

fn encode_all(entries: &[AbortedTxn]) -> Vec<u8> {
    entries.iter().flat_map(AbortedTxn::encode).collect()
}

fn read_entries(path: &Path) -> Result<Vec<AbortedTxn>, LogError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(decode_all(&bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(LogError::io("read", path)(e)),
    }
}

/// Replaces the file with `entries` (`<name>.tmp`, sync, rename): used at open and
/// by the cleaner, rarely. The caller syncs the directory.
fn rewrite(path: &Path, entries: &[AbortedTxn]) -> Result<(), LogError> {
    if entries.is_empty() {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(LogError::io("delete", path)(e))
            }
            _ => Ok(()),
        };
    }
    Ok(durable_file::replace_leaving_dir_unsynced(
        path,
        &encode_all(entries),
    )?)
}

/// Appends one entry to the file of the segment at `base_offset` (not synced).
pub(crate) fn append(dir: &Path, base_offset: i64, entry: &AbortedTxn) -> Result<(), LogError> {
    let path = path(dir, base_offset);
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .open(&path)
        .map_err(LogError::refused("open", &path))?;
    file.write_all(&entry.encode())
        .map_err(LogError::refused("write to", &path))
}

/// Syncs the file of the segment at `base_offset`, if it exists.
pub(crate) fn sync(dir: &Path, base_offset: i64) -> Result<(), LogError> {
    let path = path(dir, base_offset);
    match File::open(&path) {
        Ok(file) => file.sync_all().map_err(LogError::io("sync", &path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LogError::io("open", &path)(e)),
    }
}

/// Loads the index of each segment (base offset to end offset) at open. Entries whose
/// marker is no longer in the segment (a torn tail was truncated) are dropped, and the
/// file is rewritten without them.
pub(crate) fn load(
    dir: &Path,
    segments: impl Iterator<Item = (i64, i64)>,
) -> Result<BTreeMap<i64, Vec<AbortedTxn>>, LogError> {
    let mut loaded = BTreeMap::new();
    for (base, end) in segments {
        let path = path(dir, base);
        // A rewrite a crash interrupted: the file it was to replace is still whole.
        let _ = std::fs::remove_file(path.with_extension("txnindex.tmp"));
        let stored = read_entries(&path)?;
        let on_disk = std::fs::metadata(&path).map_or(0, |m| m.len());
        let mut kept: Vec<AbortedTxn> = stored
            .iter()
            .filter(|e| e.last_offset.value() >= base && e.last_offset.value() < end)
            .copied()
            .collect();
        kept.sort_by_key(|e| e.last_offset);
        kept.dedup();
        if (kept.len() * ENTRY_BYTES) as u64 != on_disk {
            tracing::warn!(path = %path.display(), kept = kept.len(), stored = stored.len(),
                "aborted-transaction index held torn or stale entries; rewritten");
            rewrite(&path, &kept)?;
        }
        if !kept.is_empty() {
            loaded.insert(base, kept);
        }
    }
    Ok(loaded)
}

/// Merges the files of the segments with base offsets in `bases` into the file of
/// `into` (the first of them): a cleaned segment that replaced them holds their
/// markers. Idempotent: run again after a crash, it merges what is left.
pub(crate) fn merge_files(
    dir: &Path,
    bases: &[i64],
    into: i64,
) -> Result<Vec<AbortedTxn>, LogError> {
    let mut merged = Vec::new();
    for base in bases {
        merged.extend(read_entries(&path(dir, *base))?);
    }
    merged.sort_by_key(|e| e.last_offset);
    merged.dedup();
    rewrite(&path(dir, into), &merged)?;
    for base in bases.iter().filter(|b| **b != into) {
        let path = path(dir, *base);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(LogError::io("delete", &path)(e))
            }
            _ => {}
        }
    }
    Ok(merged)
}

/// The base offsets of the `.txnindex` files in `dir` within `bases`.
pub(crate) fn files_in(dir: &Path, bases: std::ops::Range<i64>) -> Result<Vec<i64>, LogError> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(LogError::io("list", dir))? {
        let entry = entry.map_err(LogError::io("list", dir))?;
        let name = entry.file_name();
        if let Some((base, TXN_INDEX_SUFFIX)) = name.to_str().and_then(parse_file_name) {
            if bases.contains(&base) {
                found.push(base);
            }
        }
    }
    found.sort_unstable();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(producer_id: i64, first: i64, last: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: ProducerId::new(producer_id),
            first_offset: Offset::new(first),
            last_offset: Offset::new(last),
        }
    }

    #[test]
    fn entries_round_trip_and_a_torn_tail_ends_the_file() {
        let entries = [txn(1, 0, 5), txn(2, 3, 9)];
        let mut bytes = encode_all(&entries);
        assert_eq!(decode_all(&bytes), entries);
        bytes.extend_from_slice(&txn(3, 10, 12).encode()[..20]);
        assert_eq!(decode_all(&bytes), entries);
        bytes[30] ^= 1;
        assert_eq!(decode_all(&bytes), entries[..1]);
    }

    #[test]
    fn load_drops_entries_past_the_segment_end_and_merge_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        for e in [txn(1, 0, 5), txn(2, 3, 9), txn(3, 8, 20)] {
            append(dir.path(), 0, &e).unwrap();
        }
        let loaded = load(dir.path(), [(0, 10)].into_iter()).unwrap();
        assert_eq!(loaded[&0], vec![txn(1, 0, 5), txn(2, 3, 9)]);
        assert_eq!(read_entries(&path(dir.path(), 0)).unwrap().len(), 2);
        append(dir.path(), 10, &txn(4, 12, 14)).unwrap();
        let merged = merge_files(dir.path(), &[0, 10], 0).unwrap();
        assert_eq!(merged.len(), 3);
        assert_eq!(merge_files(dir.path(), &[0, 10], 0).unwrap(), merged);
        assert!(!path(dir.path(), 10).exists());
    }
}
