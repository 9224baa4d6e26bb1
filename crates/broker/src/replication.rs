//! A replicated partition's leader-side bookkeeping, as plain values: where each follower
//! is, which replicas are in sync, and the high watermark they allow.
//!
//! Followers fetch from the leader with their replica id, and fetch an offset only once
//! everything before it is synced on their disk; so a follower's fetch offset is its
//! *durable* end. The high watermark is the least durable end over the in-sync replicas,
//! the leader's own synced end included: an acknowledged record (acks=all waits for the
//! high watermark) is on the disk of every in-sync replica, and survives a simultaneous
//! power loss of all but one of them.
//!
//! The ISR changes through the controller (`AlterPartition`); until the change is
//! decided, the leader counts the *maximal* set: a follower being added counts from the
//! moment it is proposed, a follower being removed until the controller has removed it,
//! and a refused proposal still counts until the controller's metadata shows what it
//! decided. A fetch past the leader's end (a diverged log) counts for nothing, and a
//! follower joins only once it holds everything before the current leader epoch began.
//! A follower stays in sync while it catches up with the leader's end often enough: it
//! is caught up when it fetches at least the log end the leader had when it answered that
//! follower's previous fetch (Kafka's rule, so that a follower of a partition under
//! steady production, never exactly at the end, still counts). One not caught up for
//! `replica_lag_time_max_ms` is proposed for removal; one outside the ISR that reaches the
//! high watermark is proposed for addition.
//!
//! No I/O and no clock: the partition passes the times in.

/// A deliberately broken broker, for proving that the fault tests' history checker
/// catches lost writes: the high watermark follows the leader's own sync alone, so an
/// acks=all write is acknowledged before any follower holds it and a leader's crash
/// loses it. Set only by [`break_high_watermark`] (the `headway` binary does so when
/// `HEADWAY_UNSAFE_HIGH_WATERMARK=leader-only`); never part of a real deployment.
static LEADER_ONLY_HIGH_WATERMARK: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Breaks every partition's high watermark as [`LEADER_ONLY_HIGH_WATERMARK`] says, for
/// the rest of the process.
pub fn break_high_watermark() {
    LEADER_ONLY_HIGH_WATERMARK.store(true, std::sync::atomic::Ordering::Relaxed);
}

use headway_base::Offset;
use std::collections::BTreeMap;

/// A broker's id, as the controller numbers replicas.
pub type ReplicaId = i32;

/// One follower as the leader sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerProgress {
    /// The follower's durable end: the offset of its last fetch.
    pub durable_end: Offset,
    /// When the follower last caught up with the leader's end; `None` if never.
    pub caught_up_ms: Option<i64>,
    /// The leader's log end when it answered this follower's last fetch, and when.
    last_fetch: Option<(Offset, i64)>,
}

/// The leader's view of one partition's replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaSet {
    me: ReplicaId,
    /// The ISR as the controller last decided it.
    isr: Vec<ReplicaId>,
    /// Every replica of the ISRs proposed since the controller last decided: counted for
    /// the high watermark until it decides again, even after a refusal (a refusal may be
    /// a stale answer to a proposal the controller accepted).
    proposed: Option<Vec<ReplicaId>>,
    /// A proposal waits for the controller's answer.
    in_flight: bool,
    /// Where the current leader epoch began: a follower joins the ISR only once it holds
    /// everything written before this leader's first append.
    epoch_start: Offset,
    followers: BTreeMap<ReplicaId, FollowerProgress>,
    /// The leader's own synced end.
    own_durable_end: Offset,
    high_watermark: Offset,
    /// When this replica became leader: a follower never heard from counts as caught up
    /// at that moment, so a new leader does not shrink the ISR before anyone could fetch.
    leader_since_ms: i64,
}

impl ReplicaSet {
    /// The set of a replica that becomes leader at `now_ms` with `replicas` assigned and
    /// `isr` in sync, its log synced up to `own_durable_end`, its high watermark at
    /// `high_watermark` (kept from its time as a follower) and its leader epoch starting
    /// at `epoch_start` (its log end when it became leader).
    pub fn new(
        me: ReplicaId,
        replicas: &[ReplicaId],
        isr: &[ReplicaId],
        own_durable_end: Offset,
        high_watermark: Offset,
        epoch_start: Offset,
        now_ms: i64,
    ) -> ReplicaSet {
        let followers = replicas
            .iter()
            .filter(|r| **r != me)
            .map(|r| {
                (
                    *r,
                    FollowerProgress {
                        durable_end: Offset::ZERO,
                        caught_up_ms: None,
                        last_fetch: None,
                    },
                )
            })
            .collect();
        ReplicaSet {
            me,
            isr: isr.to_vec(),
            proposed: None,
            in_flight: false,
            epoch_start,
            followers,
            own_durable_end,
            high_watermark,
            leader_since_ms: now_ms,
        }
    }

    pub fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    /// The ISR as the controller decided it.
    pub fn isr(&self) -> &[ReplicaId] {
        &self.isr
    }

    pub fn follower(&self, id: ReplicaId) -> Option<&FollowerProgress> {
        self.followers.get(&id)
    }

    /// The replicas counted for the high watermark: the decided ISR and a proposed one
    /// together.
    fn maximal_isr(&self) -> impl Iterator<Item = ReplicaId> + '_ {
        let proposed = self.proposed.iter().flatten();
        self.isr
            .iter()
            .chain(proposed.filter(|r| !self.isr.contains(r)))
            .copied()
    }

    /// Recomputes the high watermark, which never moves back; answers whether it moved.
    fn advance(&mut self) -> bool {
        let least = self
            .maximal_isr()
            .filter(|r| *r != self.me)
            .map(|r| {
                self.followers
                    .get(&r)
                    .map_or(Offset::ZERO, |f| f.durable_end)
            })
            .fold(self.own_durable_end, Offset::min);
        let least = match LEADER_ONLY_HIGH_WATERMARK.load(std::sync::atomic::Ordering::Relaxed) {
            true => self.own_durable_end,
            false => least,
        };
        if least > self.high_watermark {
            self.high_watermark = least;
            return true;
        }
        false
    }

    /// The leader synced its log up to `end`. Answers whether the high watermark moved.
    pub fn synced(&mut self, end: Offset) -> bool {
        self.own_durable_end = self.own_durable_end.max(end);
        self.advance()
    }

    /// Follower `id` fetched from `fetch_offset` at `now_ms`, and is answered while the
    /// leader's log ends at `log_end`. Answers whether the high watermark moved; a
    /// replica that is not a follower of this partition changes nothing.
    pub fn fetched(
        &mut self,
        id: ReplicaId,
        fetch_offset: Offset,
        log_end: Offset,
        now_ms: i64,
    ) -> bool {
        let Some(follower) = self.followers.get_mut(&id) else {
            return false;
        };
        if fetch_offset > log_end {
            // Past this leader's end: a log that diverged (a deposed leader's), which
            // must truncate before anything it holds counts (the fetch is answered
            // OFFSET_OUT_OF_RANGE).
            return false;
        }
        // A follower that truncated fetches below what it once had: its durable end is
        // what it holds now (the high watermark itself never moves back).
        follower.durable_end = fetch_offset;
        if fetch_offset >= log_end {
            follower.caught_up_ms = Some(now_ms);
        } else if let Some((end_then, at)) = follower.last_fetch {
            if fetch_offset >= end_then {
                follower.caught_up_ms = Some(follower.caught_up_ms.map_or(at, |c| c.max(at)));
            }
        }
        follower.last_fetch = Some((log_end, now_ms));
        self.advance()
    }

    /// The ISR to propose at `now_ms`, if it should change: followers not caught up for
    /// `lag_max_ms` leave it, followers outside it whose durable end reached the high
    /// watermark join it. `None` while a proposal is pending or nothing changes.
    pub fn isr_change(&self, now_ms: i64, lag_max_ms: i64) -> Option<Vec<ReplicaId>> {
        if self.in_flight {
            return None;
        }
        let mut next: Vec<ReplicaId> = Vec::with_capacity(self.followers.len() + 1);
        for id in std::iter::once(self.me).chain(self.followers.keys().copied()) {
            let in_sync = self.isr.contains(&id);
            let keep = if id == self.me {
                true
            } else {
                let follower = &self.followers[&id];
                let caught_up = follower.caught_up_ms.unwrap_or(self.leader_since_ms);
                if in_sync {
                    now_ms - caught_up <= lag_max_ms
                } else {
                    // Caught up lately: a follower that stopped (a dead broker) is not
                    // proposed again on the strength of what it fetched long ago.
                    follower
                        .caught_up_ms
                        .is_some_and(|at| now_ms - at <= lag_max_ms)
                        && follower.durable_end >= self.high_watermark
                        && follower.durable_end >= self.epoch_start
                }
            };
            if keep {
                next.push(id);
            }
        }
        let mut current = self.isr.clone();
        current.sort_unstable();
        let mut sorted = next.clone();
        sorted.sort_unstable();
        (sorted != current).then_some(next)
    }

    /// The ISR `isr` was proposed to the controller.
    pub fn proposing(&mut self, isr: Vec<ReplicaId>) {
        let mut counted = self.proposed.take().unwrap_or_default();
        for replica in isr {
            if !counted.contains(&replica) {
                counted.push(replica);
            }
        }
        self.proposed = Some(counted);
        self.in_flight = true;
        self.advance();
    }

    /// The controller decided the ISR, as its metadata now shows it (the proposal, or
    /// another change); answers whether the high watermark moved.
    pub fn decided(&mut self, isr: &[ReplicaId]) -> bool {
        self.isr = isr.to_vec();
        self.proposed = None;
        self.in_flight = false;
        self.advance()
    }

    /// The controller refused the proposal: another may be made, and what was proposed
    /// still counts until the controller's metadata shows its decision.
    pub fn refused(&mut self) {
        self.in_flight = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(value: i64) -> Offset {
        Offset::new(value)
    }

    const LAG_MAX_MS: i64 = 1_000;

    fn three() -> ReplicaSet {
        ReplicaSet::new(1, &[1, 2, 3], &[1, 2, 3], o(0), o(0), o(0), 0)
    }

    #[test]
    fn the_high_watermark_is_the_least_durable_end_over_the_isr() {
        let mut set = three();
        assert!(!set.synced(o(10)), "the followers have nothing yet");
        assert!(!set.fetched(2, o(10), o(10), 5), "3 has nothing yet");
        assert!(set.fetched(3, o(7), o(10), 5));
        assert_eq!(set.high_watermark(), o(7));
        set.fetched(3, o(10), o(10), 6);
        assert_eq!(set.high_watermark(), o(10));
        // The leader's own sync bounds it too.
        set.fetched(2, o(10), o(12), 7);
        set.fetched(3, o(12), o(12), 7);
        assert_eq!(set.high_watermark(), o(10));
        assert!(!set.synced(o(12)), "2 is still at 10");
        assert!(set.fetched(2, o(12), o(12), 8));
        assert_eq!(set.high_watermark(), o(12));
    }

    #[test]
    fn a_follower_behind_for_the_lag_bound_leaves_and_the_watermark_goes_on_without_it() {
        let mut set = three();
        set.synced(o(100));
        set.fetched(2, o(100), o(100), 100);
        set.fetched(3, o(40), o(100), 100);
        assert_eq!(set.high_watermark(), o(40));
        assert_eq!(
            set.isr_change(1_000, LAG_MAX_MS),
            None,
            "within the lag bound"
        );
        set.fetched(2, o(100), o(100), 1_150);
        let next = set
            .isr_change(1_200, LAG_MAX_MS)
            .expect("3 is too far behind");
        assert_eq!(next, vec![1, 2]);
        set.proposing(next);
        assert_eq!(
            set.high_watermark(),
            o(40),
            "3 counts until the controller decides"
        );
        assert!(set.decided(&[1, 2]));
        assert_eq!(set.high_watermark(), o(100));
    }

    #[test]
    fn a_follower_fetching_the_previous_end_is_caught_up_under_steady_production() {
        let mut set = three();
        let mut end = 0;
        for t in 1..=50 {
            // The leader's end moves between every two fetches; the follower fetches
            // what the previous answer reached.
            set.fetched(2, o(end), o(end + 10), t * 100);
            set.fetched(3, o(end), o(end + 10), t * 100);
            end += 10;
            set.synced(o(end));
        }
        assert_eq!(set.isr_change(50 * 100 + 500, LAG_MAX_MS), None);
        assert_eq!(set.high_watermark(), o(end - 10));
    }

    #[test]
    fn a_new_leader_waits_a_lag_bound_before_shrinking_and_a_returning_follower_rejoins() {
        let mut set = ReplicaSet::new(1, &[1, 2, 3], &[1, 2, 3], o(50), o(50), o(50), 10_000);
        assert_eq!(set.isr_change(10_500, LAG_MAX_MS), None);
        set.fetched(2, o(50), o(50), 10_600);
        let next = set.isr_change(11_100, LAG_MAX_MS).expect("3 never fetched");
        assert_eq!(next, vec![1, 2]);
        set.proposing(next);
        set.decided(&[1, 2]);

        set.fetched(2, o(50), o(50), 11_900);
        set.fetched(3, o(20), o(50), 12_000);
        assert_eq!(
            set.isr_change(12_000, LAG_MAX_MS),
            None,
            "3 is below the watermark"
        );
        set.fetched(2, o(50), o(50), 12_050);
        set.fetched(3, o(50), o(50), 12_100);
        assert_eq!(set.isr_change(12_100, LAG_MAX_MS), Some(vec![1, 2, 3]));
    }

    #[test]
    fn the_watermark_never_moves_back_and_strangers_change_nothing() {
        let mut set = three();
        set.synced(o(30));
        set.fetched(2, o(30), o(30), 1);
        set.fetched(3, o(30), o(30), 1);
        assert_eq!(set.high_watermark(), o(30));
        // A follower that truncated fetches lower: the watermark stays.
        set.fetched(3, o(10), o(30), 2);
        assert_eq!(set.high_watermark(), o(30));
        assert!(!set.fetched(9, o(1_000), o(30), 3));
        assert!(set.follower(9).is_none());
    }

    #[test]
    fn a_refused_proposal_keeps_the_decided_isr_and_still_counts_until_a_decision() {
        let mut set = three();
        set.synced(o(10));
        set.fetched(2, o(10), o(10), 0);
        set.fetched(3, o(4), o(10), 0);
        set.fetched(2, o(10), o(10), 4_900);
        let next = set.isr_change(5_000, LAG_MAX_MS).unwrap();
        assert_eq!(next, vec![1, 2]);
        set.proposing(next);
        assert_eq!(
            set.isr_change(5_000, LAG_MAX_MS),
            None,
            "one proposal at a time"
        );
        set.refused();
        assert_eq!(set.isr(), &[1, 2, 3]);
        assert_eq!(set.high_watermark(), o(4), "3 still counts");
        assert!(
            set.isr_change(5_000, LAG_MAX_MS).is_some(),
            "another may be proposed"
        );
        set.decided(&[1, 2]);
        assert_eq!(set.high_watermark(), o(10));
    }

    #[test]
    fn a_fetch_past_the_leaders_end_counts_for_nothing() {
        let mut set = three();
        set.synced(o(10));
        set.fetched(2, o(10), o(10), 0);
        assert!(!set.fetched(3, o(25), o(10), 0), "a diverged log's end");
        assert_eq!(set.follower(3).unwrap().durable_end, o(0));
        assert_eq!(set.high_watermark(), o(0));
    }

    #[test]
    fn a_follower_rejoins_only_past_the_start_of_the_leaders_epoch() {
        let mut set = ReplicaSet::new(1, &[1, 2, 3], &[1, 2], o(80), o(40), o(80), 0);
        set.fetched(2, o(80), o(80), 10);
        assert_eq!(set.high_watermark(), o(80));
        set.fetched(3, o(60), o(80), 10);
        set.fetched(3, o(80), o(80), 20);
        set.fetched(2, o(80), o(80), 20);
        assert_eq!(set.isr_change(20, LAG_MAX_MS), Some(vec![1, 2, 3]));
        let mut early = ReplicaSet::new(1, &[1, 2, 3], &[1, 2], o(80), o(80), o(100), 0);
        early.fetched(2, o(80), o(80), 10);
        early.fetched(3, o(80), o(80), 10);
        assert_eq!(
            early.isr_change(10, LAG_MAX_MS),
            None,
            "below the epoch's start"
        );
    }
}
