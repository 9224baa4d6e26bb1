//! Reads of remote segments: the whole batches from the one holding an offset, as a
//! fetch below the local log start needs them. A read finds the batch's position in
//! the segment's copied `.index` (kept in a cache bounded by bytes), then reads that
//! range of the `.log` object (one ranged GET, or two when the first batch is larger
//! than asked), and cuts it to whole batches: at most `max_bytes`, and always the whole
//! first batch, as Kafka's fetch answers.

use crate::store::{RemoteSegment, RemoteStore, TierError};
use bytes::Bytes;
use headway_log::batch::{self, BatchIter, BATCH_HEADER_BYTES};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Bytes of an index entry: relative offset and position, both big-endian u32.
const INDEX_ENTRY_BYTES: usize = 8;
/// What a read asks beyond `max_bytes`: the batches between the index entry and the
/// offset (at most one index interval, 4 KiB by default) are read and skipped.
const SKIP_ALLOWANCE_BYTES: u64 = 64 << 10;

/// Copied `.index` and `.txnindex` files, by object name, at most `bytes_max` of them;
/// the oldest go.
pub struct IndexCache {
    bytes_max: usize,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    by_name: HashMap<String, Bytes>,
    order: VecDeque<String>,
    bytes: usize,
}

impl IndexCache {
    pub fn new(bytes_max: usize) -> IndexCache {
        IndexCache {
            bytes_max,
            held: Mutex::new(Held::default()),
        }
    }

    fn get(&self, name: &str) -> Option<Bytes> {
        let held = self.held.lock().expect("index cache mutex poisoned");
        held.by_name.get(name).cloned()
    }

    fn put(&self, name: String, index: Bytes) {
        if index.len() > self.bytes_max {
            return;
        }
        let mut held = self.held.lock().expect("index cache mutex poisoned");
        if held.by_name.contains_key(&name) {
            return;
        }
        while held.bytes + index.len() > self.bytes_max {
            let Some(oldest) = held.order.pop_front() else {
                break;
            };
            if let Some(gone) = held.by_name.remove(&oldest) {
                held.bytes -= gone.len();
            }
        }
        held.bytes += index.len();
        held.order.push_back(name.clone());
        held.by_name.insert(name, index);
    }

    /// Indexes held, and their bytes.
    pub fn held(&self) -> (usize, usize) {
        let held = self.held.lock().expect("index cache mutex poisoned");
        (held.by_name.len(), held.bytes)
    }
}

/// The position of the last index entry at or before `offset` (0 when none is).
fn position_for(index: &[u8], base_offset: i64, offset: i64) -> u64 {
    let entries = index.len() / INDEX_ENTRY_BYTES;
    let entry = |i: usize| {
        let e = &index[i * INDEX_ENTRY_BYTES..(i + 1) * INDEX_ENTRY_BYTES];
        let relative = u32::from_be_bytes(e[0..4].try_into().expect("4 bytes"));
        let position = u32::from_be_bytes(e[4..8].try_into().expect("4 bytes"));
        (base_offset + i64::from(relative), u64::from(position))
    };
    // Entries increase in both fields: a binary search for the first entry past
    // `offset`, over the index bytes as they are.
    let (mut low, mut high) = (0, entries);
    while low < high {
        let mid = low + (high - low) / 2;
        if entry(mid).0 <= offset {
            low = mid + 1;
        } else {
            high = mid;
        }
    }
    low.checked_sub(1).map_or(0, |i| entry(i).1)
}

/// Cuts `bytes` (read from a batch boundary) to the whole batches that end at or after
/// `offset`, at most `max_bytes` of them but always the first. `Err(needed)` when the
/// first such batch is not whole in `bytes`: reading `needed` bytes from the same start
/// would hold it.
fn cut(bytes: &Bytes, offset: i64, max_bytes: usize) -> Result<Bytes, usize> {
    let mut batches = BatchIter::new(bytes);
    let mut start = None;
    let mut end = 0;
    loop {
        let at = batches.position();
        let Some((header, whole)) = batches.next() else {
            if start.is_none() {
                let rest = &bytes[at..];
                let declared = batch::declared_total_bytes(rest).unwrap_or(BATCH_HEADER_BYTES);
                return Err(at + declared.max(BATCH_HEADER_BYTES));
            }
            break;
        };
        if header.last_offset() < offset {
            continue;
        }
        let first = *start.get_or_insert(at);
        if at + whole.len() - first > max_bytes && end > first {
            break;
        }
        end = at + whole.len();
    }
    let first = start.expect("set before the loop ends");
    Ok(bytes.slice(first..end))
}

impl RemoteStore {
    /// A small object (a segment's `.index` or `.txnindex`) from `cache`, or read whole
    /// and kept there.
    pub(crate) async fn get_cached(
        &self,
        name: &str,
        cache: &IndexCache,
    ) -> Result<Bytes, TierError> {
        if let Some(bytes) = cache.get(name) {
            return Ok(bytes);
        }
        let bytes = self.get_whole(name).await?;
        cache.put(name.to_string(), bytes.clone());
        Ok(bytes)
    }

    /// Whole batches of `segment` from the one holding `offset`: at most `max_bytes`,
    /// and always the whole first batch. Empty when `offset` is at or past the
    /// segment's end.
    pub async fn read_batches(
        &self,
        dir: &str,
        segment: &RemoteSegment,
        offset: i64,
        max_bytes: usize,
        indexes: &IndexCache,
    ) -> Result<Bytes, TierError> {
        if offset >= segment.end_offset {
            return Ok(Bytes::new());
        }
        let index_name = format!("{dir}/{}.index", segment.stem());
        let index = self.get_cached(&index_name, indexes).await?;
        let from = position_for(&index, segment.base_offset, offset);
        let log = format!("{dir}/{}.log", segment.stem());
        let mut want = max_bytes as u64 + SKIP_ALLOWANCE_BYTES;
        loop {
            let to = (from + want).min(segment.size_bytes);
            let bytes = self.get_range(&log, from..to).await?;
            match cut(&bytes, offset, max_bytes) {
                Ok(batches) => return Ok(batches),
                Err(needed) if to < segment.size_bytes && needed as u64 > want => {
                    want = needed as u64;
                }
                Err(_) => {
                    return Err(TierError::Damaged {
                        name: log,
                        reason: format!("no whole batch holding offset {offset} from byte {from}"),
                    })
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `count` batches of one record each, offsets from 0, as a log file holds them.
    fn log_bytes(count: i64, value_bytes: usize) -> Vec<u8> {
        (0..count)
            .flat_map(|offset| crate::tests::batch(offset, value_bytes))
            .collect()
    }

    fn offsets(batches: &[u8]) -> Vec<i64> {
        BatchIter::new(batches)
            .map(|(h, _)| h.base_offset)
            .collect()
    }

    #[test]
    fn an_offset_finds_its_position_in_the_index() {
        let mut index = Vec::new();
        for (relative, position) in [(0u32, 0u32), (10, 4096), (25, 9000)] {
            index.extend_from_slice(&relative.to_be_bytes());
            index.extend_from_slice(&position.to_be_bytes());
        }
        assert_eq!(position_for(&index, 100, 100), 0);
        assert_eq!(position_for(&index, 100, 109), 0);
        assert_eq!(position_for(&index, 100, 110), 4096);
        assert_eq!(position_for(&index, 100, 124), 4096);
        assert_eq!(position_for(&index, 100, 500), 9000);
        assert_eq!(position_for(&[], 100, 500), 0);
    }

    #[test]
    fn a_read_is_cut_to_whole_batches_from_the_offset_and_always_holds_the_first() {
        let log = Bytes::from(log_bytes(10, 100));
        let one = BatchIter::new(&log).next().unwrap().1.len();
        // From offset 3, room for two batches and a half: two.
        assert_eq!(
            offsets(&cut(&log, 3, one * 2 + one / 2).unwrap()),
            vec![3, 4]
        );
        // Room for less than one: the whole first batch all the same.
        assert_eq!(offsets(&cut(&log, 3, 1).unwrap()), vec![3]);
        // A read that stops inside the first batch wanted: how much to read instead.
        let short = log.slice(..one * 3 + 20);
        assert_eq!(cut(&short, 3, 1 << 20), Err(one * 4));
        // Too little of it to read its length: at least its header.
        assert_eq!(
            cut(&log.slice(..one * 3 + 5), 3, 1 << 20),
            Err(one * 3 + 61)
        );
        // Batches past what was read are not invented.
        assert_eq!(offsets(&cut(&short, 0, 1 << 20).unwrap()), vec![0, 1, 2]);
    }

    #[test]
    fn the_index_cache_keeps_its_bytes_bound_and_drops_the_oldest() {
        let cache = IndexCache::new(100);
        cache.put("a".into(), Bytes::from(vec![0; 60]));
        cache.put("b".into(), Bytes::from(vec![0; 30]));
        assert_eq!(cache.held(), (2, 90));
        cache.put("c".into(), Bytes::from(vec![0; 40]));
        assert_eq!(cache.held(), (2, 70), "a went");
        assert!(cache.get("a").is_none() && cache.get("c").is_some());
        cache.put("huge".into(), Bytes::from(vec![0; 101]));
        assert!(
            cache.get("huge").is_none(),
            "larger than the bound: not kept"
        );
    }
}
