//! A tiered partition's retention, decided where its tier is kept (the leader, or a
//! broker alone), once a round. Two limits, with Kafka's meanings:
//!
//! - `retention.ms` / `retention.bytes` hold over the whole log, remote and local: the
//!   oldest segments past them go from both, by moving the partition's log start
//!   (as DeleteRecords does); the remote copies below it are deleted after.
//! - `local.retention.ms` / `local.retention.bytes` (-2: the whole log's) hold over the
//!   local log only, and delete only segments the remote tier holds: the log start
//!   stays, and reads before the local log go to the tier.
//!
//! A size limit deletes the oldest segment while what is left is at least the limit
//! (so the log keeps at least `retention.bytes`); a time limit deletes the oldest
//! segment while its newest record is older than the limit. -1 is no limit. The
//! active segment is never deleted.

use crate::store::RemoteSegment;
use headway_broker::partition::tiered::LocalLog;
use std::collections::BTreeMap;

/// A tiered topic's limits, as its settings say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub local_retention_ms: i64,
    pub local_retention_bytes: i64,
}

/// Local retention's `-2`: the whole log's limit.
const SAME_AS_TOTAL: i64 = -2;

impl Limits {
    fn local_ms(&self) -> i64 {
        match self.local_retention_ms {
            SAME_AS_TOTAL => self.retention_ms,
            ms => ms,
        }
    }

    fn local_bytes(&self) -> i64 {
        match self.local_retention_bytes {
            SAME_AS_TOTAL => self.retention_bytes,
            bytes => bytes,
        }
    }
}

/// A segment as retention weighs it.
#[derive(Debug, Clone, Copy)]
struct Weighed {
    end_offset: i64,
    size_bytes: u64,
    max_timestamp_ms: Option<i64>,
}

/// How far the oldest of `segments` (oldest first) may go: the end of the last one to
/// delete, if any. `total` is the bytes of the log they are part of.
fn cut(
    segments: &[Weighed],
    total: u64,
    bytes_limit: i64,
    ms_limit: i64,
    now_ms: i64,
) -> Option<i64> {
    let mut by_bytes = None;
    if bytes_limit >= 0 {
        let mut left = total;
        for s in segments {
            match left.checked_sub(s.size_bytes) {
                Some(rest) if rest >= bytes_limit as u64 => {
                    left = rest;
                    by_bytes = Some(s.end_offset);
                }
                _ => break,
            }
        }
    }
    let mut by_time = None;
    if ms_limit >= 0 {
        let oldest_kept = now_ms.saturating_sub(ms_limit);
        for s in segments {
            match s.max_timestamp_ms {
                Some(newest) if newest < oldest_kept => by_time = Some(s.end_offset),
                _ => break,
            }
        }
    }
    by_bytes.max(by_time)
}

/// The new log start the whole log's limits ask for, if it moves: over the remote
/// segments that only the tier holds (before the local log) and the local log.
pub fn log_start_for(
    log_start: i64,
    remote: &BTreeMap<i64, RemoteSegment>,
    local: &LocalLog,
    limits: &Limits,
    now_ms: i64,
) -> Option<i64> {
    let local_start = local.start_offset.value();
    let remote_only = remote
        .values()
        .filter(|s| s.end_offset > log_start && s.end_offset <= local_start)
        .map(|s| Weighed {
            end_offset: s.end_offset,
            size_bytes: s.size_bytes,
            max_timestamp_ms: s.max_timestamp_ms,
        });
    let local_sealed = local.sealed.iter().map(|s| Weighed {
        end_offset: s.end_offset.value(),
        size_bytes: s.size_bytes,
        max_timestamp_ms: s.max_timestamp_ms,
    });
    let segments: Vec<Weighed> = remote_only.chain(local_sealed).collect();
    let remote_bytes: u64 = segments
        .iter()
        .take_while(|s| s.end_offset <= local_start)
        .map(|s| s.size_bytes)
        .sum();
    let total = remote_bytes + local.size_bytes;
    cut(
        &segments,
        total,
        limits.retention_bytes,
        limits.retention_ms,
        now_ms,
    )
    .filter(|to| *to > log_start)
}

/// How far the remote segments hold the log from `from` on without a gap: the end of
/// the run of segments that reaches `from`, or `from` itself when none holds it. What
/// a replica may delete locally is below this, whatever else the bucket holds.
pub fn covered_to(remote: &BTreeMap<i64, RemoteSegment>, from: i64) -> i64 {
    let mut reach = from;
    for s in remote.values() {
        if s.base_offset > reach {
            break;
        }
        reach = reach.max(s.end_offset);
    }
    reach
}

/// Where the local log may start, if it moves: the local limits over the local sealed
/// segments that end at or before `remote_end` (the tier holds them).
pub fn local_start_for(
    local: &LocalLog,
    remote_end: i64,
    limits: &Limits,
    now_ms: i64,
) -> Option<i64> {
    let copied: Vec<Weighed> = local
        .sealed
        .iter()
        .take_while(|s| s.end_offset.value() <= remote_end)
        .map(|s| Weighed {
            end_offset: s.end_offset.value(),
            size_bytes: s.size_bytes,
            max_timestamp_ms: s.max_timestamp_ms,
        })
        .collect();
    cut(
        &copied,
        local.size_bytes,
        limits.local_bytes(),
        limits.local_ms(),
        now_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use headway_base::Offset;
    use headway_log::SealedSegment;

    fn remote(bounds: &[(i64, i64, u64, i64)]) -> BTreeMap<i64, RemoteSegment> {
        bounds
            .iter()
            .map(|&(base, end, size, ts)| {
                let segment = RemoteSegment {
                    base_offset: base,
                    end_offset: end,
                    size_bytes: size,
                    max_timestamp_ms: Some(ts),
                    leader_epoch: -1,
                    id: "x".into(),
                    files: BTreeMap::new(),
                    uploaded_ms: 0,
                };
                (base, segment)
            })
            .collect()
    }

    /// A local log of `sealed` segments and an active one of `active_bytes`.
    fn local(sealed: &[(i64, i64, u64, i64)], active_bytes: u64) -> LocalLog {
        let sealed: Vec<SealedSegment> = sealed
            .iter()
            .map(|&(base, end, size, ts)| SealedSegment {
                base_offset: Offset::new(base),
                end_offset: Offset::new(end),
                size_bytes: size,
                max_timestamp_ms: Some(ts),
                files: Vec::new(),
            })
            .collect();
        LocalLog {
            start_offset: sealed.first().map_or(Offset::ZERO, |s| s.base_offset),
            size_bytes: sealed.iter().map(|s| s.size_bytes).sum::<u64>() + active_bytes,
            sealed,
        }
    }

    const NONE: Limits = Limits {
        retention_ms: -1,
        retention_bytes: -1,
        local_retention_ms: -2,
        local_retention_bytes: -2,
    };

    #[test]
    fn the_whole_log_size_counts_remote_only_segments_and_keeps_at_least_the_limit() {
        // Remote only: [0,10) [10,20), 100 bytes each; local [20,30) [30,40) and an
        // active segment of 50: 450 bytes in all.
        let remote = remote(&[(0, 10, 100, 0), (10, 20, 100, 0), (20, 30, 100, 0)]);
        let local = local(&[(20, 30, 100, 0), (30, 40, 100, 0)], 50);
        let limits = Limits {
            retention_bytes: 250,
            ..NONE
        };
        // 450 - 100 = 350 >= 250; 350 - 100 = 250 >= 250; 250 - 100 < 250: two go.
        assert_eq!(log_start_for(0, &remote, &local, &limits, 0), Some(20));
        // Already there: no move.
        assert_eq!(log_start_for(20, &remote, &local, &limits, 0), None);
        // A limit below what the local log alone holds reaches into it.
        let limits = Limits {
            retention_bytes: 60,
            ..NONE
        };
        // 350, 250, 150 left; 50 would be below the limit.
        assert_eq!(log_start_for(0, &remote, &local, &limits, 0), Some(30));
        assert_eq!(log_start_for(0, &remote, &local, &NONE, 0), None);
    }

    #[test]
    fn the_whole_log_age_stops_at_the_first_segment_young_enough() {
        let remote = remote(&[(0, 10, 100, 1_000), (10, 20, 100, 5_000)]);
        let local = local(&[(20, 30, 100, 2_000), (30, 40, 100, 9_000)], 0);
        let limits = Limits {
            retention_ms: 4_000,
            ..NONE
        };
        // At 8,000 the oldest kept is 4,000: [0,10) goes, [10,20) stops the walk,
        // though [20,30) is older.
        assert_eq!(log_start_for(0, &remote, &local, &limits, 8_000), Some(10));
        assert_eq!(log_start_for(0, &remote, &local, &limits, 13_500), Some(40));
    }

    #[test]
    fn what_the_bucket_covers_stops_at_its_first_gap() {
        let remote = remote(&[(0, 10, 1, 0), (10, 20, 1, 0), (30, 40, 1, 0)]);
        assert_eq!(covered_to(&remote, 0), 20);
        assert_eq!(covered_to(&remote, 15), 20);
        // Not held: nothing past it is covered, though later segments exist.
        assert_eq!(covered_to(&remote, 25), 25);
        assert_eq!(covered_to(&remote, 30), 40);
        // Overlapping segments (a new leader's copy of a longer segment) still reach.
        let remote = self::remote(&[(0, 10, 1, 0), (5, 25, 1, 0), (25, 30, 1, 0)]);
        assert_eq!(covered_to(&remote, 0), 30);
        assert_eq!(covered_to(&BTreeMap::new(), 7), 7);
    }

    #[test]
    fn local_retention_deletes_only_what_the_remote_tier_holds() {
        let local = local(&[(0, 10, 100, 0), (10, 20, 100, 0), (20, 30, 100, 0)], 100);
        let limits = Limits {
            local_retention_bytes: 0,
            ..NONE
        };
        // Everything copied up to 20: the local log may start at 20, not 30.
        assert_eq!(local_start_for(&local, 20, &limits, 0), Some(20));
        // Nothing copied: nothing goes.
        assert_eq!(local_start_for(&local, i64::MIN, &limits, 0), None);
        // -2: the whole log's limit (none here).
        assert_eq!(local_start_for(&local, 30, &NONE, 0), None);
        // -2 with a whole-log limit: that limit, locally.
        let limits = Limits {
            retention_bytes: 250,
            ..NONE
        };
        assert_eq!(local_start_for(&local, 30, &limits, 0), Some(10));
        let limits = Limits {
            local_retention_ms: 0,
            ..NONE
        };
        assert_eq!(local_start_for(&local, 30, &limits, 1), Some(30));
    }
}
