//! One share-partition: which records of a topic partition a share group has handed
//! out, to whom, until when, and how often. Plain values over an injected clock
//! (`now_ms` arguments): no I/O, no locks, tested without sleeping.
//!
//! The records from the share-partition start offset (SPSO) up to, not including, the
//! end offset (SPEO) are in flight; everything below the SPSO is done (acknowledged or
//! archived) and everything from the SPEO on was never handed out. The in-flight
//! records are kept as ranges of consecutive offsets with one state and one delivery
//! count each, split when an acknowledgement covers part of a range and joined again
//! when neighbours become alike, so memory follows the number of distinct runs, not
//! the number of records. The SPEO stays within `max_record_locks` of the SPSO, which
//! bounds both the ranges and what a slow consumer can hold back.
//!
//! Lifecycle of a record: Available -> Acquired (by one member, until a lock deadline;
//! its delivery count goes up) -> Acknowledged (accept), Available (release, or the
//! lock expired) or Archived (reject, a gap, or released with its delivery count at the
//! limit). Acknowledged and Archived records at the start let the SPSO move on.

use headway_base::Offset;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A member of a share group, as share-partitions record who holds a lock.
pub type MemberId = Arc<str>;

/// How a share-partition behaves: Kafka's `group.share.*` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharePartitionConfig {
    /// How long an acquisition lock lasts (`share.record.lock.duration.ms`).
    pub record_lock_duration_ms: i64,
    /// Deliveries of a record before it is archived (`share.delivery.count.limit`).
    pub delivery_count_limit: u16,
    /// In-flight records at most, from SPSO to SPEO
    /// (`share.partition.max.record.locks`).
    pub max_record_locks: u32,
}

impl Default for SharePartitionConfig {
    fn default() -> Self {
        SharePartitionConfig {
            record_lock_duration_ms: 30_000,
            delivery_count_limit: 5,
            max_record_locks: 2_000,
        }
    }
}

/// The state of a run of in-flight records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    Available,
    Acquired { member: MemberId, deadline_ms: i64 },
    Acknowledged,
    Archived,
}

impl RecordState {
    /// Done: the SPSO may move over it.
    fn is_done(&self) -> bool {
        matches!(self, RecordState::Acknowledged | RecordState::Archived)
    }
}

/// An acknowledgement's type, as the wire numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcknowledgeType {
    /// 0: offsets with no record (compacted away, or control records).
    Gap,
    /// 1: processed.
    Accept,
    /// 2: hand it to someone again.
    Release,
    /// 3: never deliver it again.
    Reject,
    /// 4: keep the lock a lock duration longer.
    Renew,
}

impl AcknowledgeType {
    pub fn from_wire(value: i8) -> Option<AcknowledgeType> {
        Some(match value {
            0 => AcknowledgeType::Gap,
            1 => AcknowledgeType::Accept,
            2 => AcknowledgeType::Release,
            3 => AcknowledgeType::Reject,
            4 => AcknowledgeType::Renew,
            _ => return None,
        })
    }
}

/// A run of records of the log as a read found them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogBatch {
    pub first: Offset,
    pub last: Offset,
    /// Never handed out: a control batch, or an aborted one under read_committed.
    pub skip: bool,
}

/// Records handed to a member: the wire's AcquiredRecords.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    pub first: Offset,
    pub last: Offset,
    pub delivery_count: u16,
}

/// Why an acknowledgement was refused (INVALID_RECORD_STATE on the wire).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AckError {
    #[error("offsets {first}..={last} are not all acquired by this member")]
    NotAcquired { first: Offset, last: Offset },
    #[error("an acknowledgement from {first} to {last} is not a range")]
    BadRange { first: Offset, last: Offset },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    last: Offset,
    state: RecordState,
    delivery_count: u16,
}

/// A durable run: Acquired is written as Available (a lock does not outlive the
/// broker), and runs of never-delivered Available records are left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableRun {
    pub first: Offset,
    pub last: Offset,
    pub state: DurableState,
    pub delivery_count: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurableState {
    Available,
    Acknowledged,
    Archived,
}

/// What survives a restart of a share-partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub start_offset: Offset,
    pub state_epoch: i32,
    pub runs: Vec<DurableRun>,
}

/// One share-partition's in-flight records. See the module documentation.
#[derive(Debug, Clone)]
pub struct SharePartition {
    config: SharePartitionConfig,
    start_offset: Offset,
    end_offset: Offset,
    state_epoch: i32,
    /// Contiguous runs covering exactly `start_offset..end_offset`, by first offset.
    runs: BTreeMap<Offset, Run>,
    /// Deliveries beyond the first, and records archived, since the broker started.
    pub redeliveries: u64,
    pub archived: u64,
    /// Since the broker started: records acquired (every delivery), and records
    /// acknowledged by members as accepted, released and rejected.
    pub deliveries: u64,
    pub accepted: u64,
    pub released: u64,
    pub rejected: u64,
}

impl SharePartition {
    /// A share-partition that starts at `start_offset` (from `share.auto.offset.reset`).
    pub fn new(config: SharePartitionConfig, start_offset: Offset) -> SharePartition {
        SharePartition {
            config,
            start_offset,
            end_offset: start_offset,
            state_epoch: 0,
            runs: BTreeMap::new(),
            redeliveries: 0,
            archived: 0,
            deliveries: 0,
            accepted: 0,
            released: 0,
            rejected: 0,
        }
    }

    /// A share-partition that starts over at `start_offset` with state epoch `epoch`
    /// (its offsets were altered).
    pub fn with_epoch(
        config: SharePartitionConfig,
        start_offset: Offset,
        epoch: i32,
    ) -> SharePartition {
        let mut p = SharePartition::new(config, start_offset);
        p.state_epoch = epoch;
        p
    }

    /// The share-partition as a snapshot left it; runs out of order or outside the
    /// snapshot's start are dropped (the snapshot came from disk).
    pub fn from_snapshot(config: SharePartitionConfig, snapshot: &Snapshot) -> SharePartition {
        let mut p = SharePartition::new(config, snapshot.start_offset);
        p.state_epoch = snapshot.state_epoch;
        for r in &snapshot.runs {
            if r.first < p.end_offset || r.last < r.first {
                continue;
            }
            if r.first > p.end_offset {
                p.push(p.end_offset, r.first.plus(-1), RecordState::Available, 0);
            }
            let state = match r.state {
                DurableState::Available => RecordState::Available,
                DurableState::Acknowledged => RecordState::Acknowledged,
                DurableState::Archived => RecordState::Archived,
            };
            p.push(r.first, r.last, state, r.delivery_count);
        }
        p.coalesce();
        p.advance_start();
        p
    }

    pub fn snapshot(&self) -> Snapshot {
        let runs = self
            .runs
            .iter()
            .filter_map(|(&first, run)| {
                let state = match run.state {
                    RecordState::Available | RecordState::Acquired { .. } => {
                        DurableState::Available
                    }
                    RecordState::Acknowledged => DurableState::Acknowledged,
                    RecordState::Archived => DurableState::Archived,
                };
                (state != DurableState::Available || run.delivery_count > 0).then_some(DurableRun {
                    first,
                    last: run.last,
                    state,
                    delivery_count: run.delivery_count,
                })
            })
            .collect();
        Snapshot {
            start_offset: self.start_offset,
            state_epoch: self.state_epoch,
            runs,
        }
    }

    pub fn config(&self) -> &SharePartitionConfig {
        &self.config
    }

    pub fn set_config(&mut self, config: SharePartitionConfig) {
        self.config = config;
    }

    /// The share-partition start offset (SPSO).
    pub fn start_offset(&self) -> Offset {
        self.start_offset
    }

    /// The share-partition end offset (SPEO): the first offset never handed out.
    pub fn end_offset(&self) -> Offset {
        self.end_offset
    }

    pub fn state_epoch(&self) -> i32 {
        self.state_epoch
    }

    /// Records from SPSO to SPEO.
    pub fn in_flight(&self) -> u64 {
        (self.end_offset.value() - self.start_offset.value()).max(0) as u64
    }

    /// Records acquired by someone now.
    pub fn acquired(&self) -> u64 {
        self.runs
            .iter()
            .filter(|(_, r)| matches!(r.state, RecordState::Acquired { .. }))
            .map(|(&first, r)| count(first, r.last))
            .sum()
    }

    /// In-flight records done with (acknowledged or archived), which a share-partition's
    /// lag leaves out.
    pub fn done(&self) -> u64 {
        self.runs
            .iter()
            .filter(|(_, r)| r.state.is_done())
            .map(|(&first, r)| count(first, r.last))
            .sum()
    }

    /// Runs of in-flight records (what memory follows).
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Where a read for the next acquisition starts: the first available in-flight
    /// record, else the SPEO if the lock bound leaves room; `None` when nothing can be
    /// acquired until acknowledgements or lock expiry free some.
    pub fn next_fetch_offset(&self) -> Option<Offset> {
        let available = self
            .runs
            .iter()
            .find(|(_, r)| r.state == RecordState::Available)
            .map(|(&first, _)| first);
        available
            .or((self.in_flight() < u64::from(self.config.max_record_locks))
                .then_some(self.end_offset))
    }

    /// The log's start moved to `log_start` (retention, DeleteRecords): records below it
    /// are gone, so the SPSO moves up to it. Returns whether anything changed.
    pub fn log_start_moved(&mut self, log_start: Offset) -> bool {
        if log_start <= self.start_offset {
            return false;
        }
        self.split_at(log_start);
        let below: Vec<Offset> = self.runs.range(..log_start).map(|(&k, _)| k).collect();
        for k in below {
            self.runs.remove(&k);
        }
        self.start_offset = log_start;
        self.end_offset = self.end_offset.max(log_start);
        true
    }

    /// Acquires up to `max_records` records for `member` among the records of `batches`
    /// (what a read from [`SharePartition::next_fetch_offset`] returned, in offset
    /// order): available in-flight records first, then records past the SPEO while
    /// the lock bound allows. Control and aborted batches, and offsets between batches,
    /// are archived as the SPEO passes them. Returns what was acquired, in order.
    pub fn acquire(
        &mut self,
        member: &MemberId,
        batches: &[LogBatch],
        max_records: u32,
        now_ms: i64,
    ) -> Vec<Acquired> {
        let mut left = u64::from(max_records);
        let mut out = Vec::new();
        let (Some(read_first), Some(read_last)) = (
            batches.first().map(|b| b.first),
            batches.last().map(|b| b.last),
        ) else {
            return out;
        };
        let acquired = RecordState::Acquired {
            member: Arc::clone(member),
            deadline_ms: now_ms.saturating_add(self.config.record_lock_duration_ms),
        };
        // Redeliveries: available in-flight records inside what was read.
        let firsts: Vec<Offset> = self
            .runs
            .range(..=read_last)
            .filter(|(_, r)| r.state == RecordState::Available && r.last >= read_first)
            .map(|(&k, _)| k)
            .collect();
        for first in firsts {
            if left == 0 {
                break;
            }
            let run = &self.runs[&first];
            let from = first.max(read_first);
            let to = run.last.min(read_last).min(from.plus(left as i64 - 1));
            self.split_at(from);
            self.split_at(to.next());
            let run = self.runs.get_mut(&from).expect("split just made it");
            run.state = acquired.clone();
            run.delivery_count = run.delivery_count.saturating_add(1);
            if run.delivery_count > 1 {
                self.redeliveries += count(from, to);
            }
            out.push(Acquired {
                first: from,
                last: to,
                delivery_count: run.delivery_count,
            });
            left -= count(from, to);
        }
        // New records past the SPEO, within the lock bound.
        let bound_last = self
            .start_offset
            .plus(i64::from(self.config.max_record_locks) - 1);
        for b in batches {
            if b.last < self.end_offset {
                continue;
            }
            if left == 0 || self.end_offset > bound_last {
                break;
            }
            if b.first > self.end_offset {
                // Offsets with no record (compacted away): nothing to hand out.
                let gap_last = b.first.plus(-1).min(bound_last);
                self.push(self.end_offset, gap_last, RecordState::Archived, 0);
                if self.end_offset > bound_last {
                    break;
                }
            }
            let from = self.end_offset.max(b.first);
            if b.skip {
                let to = b.last.min(bound_last);
                self.push(from, to, RecordState::Archived, 0);
                continue;
            }
            let to = b.last.min(bound_last).min(from.plus(left as i64 - 1));
            self.push(from, to, acquired.clone(), 1);
            out.push(Acquired {
                first: from,
                last: to,
                delivery_count: 1,
            });
            left -= count(from, to);
        }
        self.deliveries += out.iter().map(|a| count(a.first, a.last)).sum::<u64>();
        self.coalesce();
        self.advance_start();
        out
    }

    /// Applies one acknowledgement of `first..=last` by `member`. Every record in it
    /// must be acquired by the member, else nothing changes. Returns whether the
    /// durable state changed (everything but a renewal changes it).
    pub fn acknowledge(
        &mut self,
        member: &str,
        first: Offset,
        last: Offset,
        kind: AcknowledgeType,
        now_ms: i64,
    ) -> Result<bool, AckError> {
        if last < first {
            return Err(AckError::BadRange { first, last });
        }
        if !self.held_by(member, first, last, now_ms) {
            return Err(AckError::NotAcquired { first, last });
        }
        self.split_at(first);
        self.split_at(last.next());
        let limit = self.config.delivery_count_limit;
        let lock_ms = self.config.record_lock_duration_ms;
        let firsts: Vec<Offset> = self.runs.range(first..=last).map(|(&k, _)| k).collect();
        for k in firsts {
            let run = self.runs.get_mut(&k).expect("listed above");
            let records = count(k, run.last);
            match kind {
                AcknowledgeType::Accept => self.accepted += records,
                AcknowledgeType::Release => self.released += records,
                AcknowledgeType::Reject => self.rejected += records,
                AcknowledgeType::Gap | AcknowledgeType::Renew => {}
            }
            run.state = match kind {
                AcknowledgeType::Accept => RecordState::Acknowledged,
                AcknowledgeType::Gap | AcknowledgeType::Reject => {
                    self.archived += records;
                    RecordState::Archived
                }
                AcknowledgeType::Release if run.delivery_count >= limit => {
                    self.archived += records;
                    RecordState::Archived
                }
                AcknowledgeType::Release => RecordState::Available,
                AcknowledgeType::Renew => match &run.state {
                    RecordState::Acquired { member, .. } => RecordState::Acquired {
                        member: Arc::clone(member),
                        deadline_ms: now_ms.saturating_add(lock_ms),
                    },
                    other => other.clone(),
                },
            };
        }
        self.coalesce();
        self.advance_start();
        Ok(kind != AcknowledgeType::Renew)
    }

    /// Locks that expired by `now_ms` are released: the records are available again
    /// (archived if their delivery count reached the limit). Returns the records
    /// released.
    pub fn expire_locks(&mut self, now_ms: i64) -> u64 {
        self.release_where(|state| {
            matches!(state, RecordState::Acquired { deadline_ms, .. } if *deadline_ms <= now_ms)
        })
    }

    /// Every lock `member` holds is released (it left the group or closed its share
    /// session). Returns the records released.
    pub fn release_member(&mut self, member: &str) -> u64 {
        self.release_where(
            |state| matches!(state, RecordState::Acquired { member: m, .. } if &**m == member),
        )
    }

    /// The earliest lock deadline, for the coordinator's timer.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.runs
            .values()
            .filter_map(|r| match r.state {
                RecordState::Acquired { deadline_ms, .. } => Some(deadline_ms),
                _ => None,
            })
            .min()
    }

    fn release_where(&mut self, mut matches: impl FnMut(&RecordState) -> bool) -> u64 {
        let limit = self.config.delivery_count_limit;
        let mut released = 0;
        for (&first, run) in self.runs.iter_mut() {
            if !matches(&run.state) {
                continue;
            }
            let records = count(first, run.last);
            released += records;
            run.state = if run.delivery_count >= limit {
                self.archived += records;
                RecordState::Archived
            } else {
                RecordState::Available
            };
        }
        if released > 0 {
            self.coalesce();
            self.advance_start();
        }
        released
    }

    /// Whether every record of `first..=last` is in flight and acquired by `member`
    /// with its lock still valid.
    fn held_by(&self, member: &str, first: Offset, last: Offset, now_ms: i64) -> bool {
        if first < self.start_offset || last >= self.end_offset {
            return false;
        }
        let mut next = first;
        let from = self
            .runs
            .range(..=first)
            .next_back()
            .map(|(&k, _)| k)
            .unwrap_or(first);
        for (&k, run) in self.runs.range(from..=last) {
            if k > next || run.last < next {
                return false;
            }
            match &run.state {
                RecordState::Acquired {
                    member: m,
                    deadline_ms,
                } if &**m == member && *deadline_ms > now_ms => {}
                _ => return false,
            }
            next = run.last.next();
        }
        next > last
    }

    /// Appends a run at the SPEO.
    fn push(&mut self, first: Offset, last: Offset, state: RecordState, delivery_count: u16) {
        debug_assert_eq!(first, self.end_offset, "runs stay contiguous");
        if last < first {
            return;
        }
        if state == RecordState::Archived {
            self.archived += count(first, last);
        }
        self.runs.insert(
            first,
            Run {
                last,
                state,
                delivery_count,
            },
        );
        self.end_offset = last.next();
    }

    /// Makes `at` the first offset of a run, if a run covers it.
    fn split_at(&mut self, at: Offset) {
        let Some((&first, run)) = self.runs.range(..=at).next_back() else {
            return;
        };
        if first == at || run.last < at {
            return;
        }
        let tail = run.clone();
        self.runs.get_mut(&first).expect("found above").last = at.plus(-1);
        self.runs.insert(at, tail);
    }

    /// Joins neighbouring runs with the same state and delivery count.
    fn coalesce(&mut self) {
        let mut joined: BTreeMap<Offset, Run> = BTreeMap::new();
        for (first, run) in std::mem::take(&mut self.runs) {
            if let Some((_, prev)) = joined.iter_mut().next_back() {
                if prev.last.next() == first
                    && prev.state == run.state
                    && prev.delivery_count == run.delivery_count
                {
                    prev.last = run.last;
                    continue;
                }
            }
            joined.insert(first, run);
        }
        self.runs = joined;
    }

    /// Moves the SPSO over done records at the start.
    fn advance_start(&mut self) {
        while let Some(entry) = self.runs.first_entry() {
            if !entry.get().state.is_done() {
                break;
            }
            let run = entry.remove();
            self.start_offset = run.last.next();
        }
        if self.runs.is_empty() {
            self.start_offset = self.end_offset;
        }
    }
}

/// Records in `first..=last`.
fn count(first: Offset, last: Offset) -> u64 {
    (last.value() - first.value() + 1).max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(v: i64) -> Offset {
        Offset::new(v)
    }

    fn batch(first: i64, last: i64) -> LogBatch {
        LogBatch {
            first: o(first),
            last: o(last),
            skip: false,
        }
    }

    fn config() -> SharePartitionConfig {
        SharePartitionConfig {
            record_lock_duration_ms: 1_000,
            delivery_count_limit: 3,
            max_record_locks: 100,
        }
    }

    fn member(name: &str) -> MemberId {
        Arc::from(name)
    }

    fn acquired(first: i64, last: i64, delivery_count: u16) -> Acquired {
        Acquired {
            first: o(first),
            last: o(last),
            delivery_count,
        }
    }

    #[test]
    fn acquires_new_records_up_to_max_records_and_accept_moves_the_start() {
        let mut p = SharePartition::new(config(), o(0));
        let a = member("a");
        assert_eq!(p.next_fetch_offset(), Some(o(0)));
        let got = p.acquire(&a, &[batch(0, 9)], 4, 0);
        assert_eq!(got, vec![acquired(0, 3, 1)]);
        assert_eq!((p.start_offset(), p.end_offset()), (o(0), o(4)));
        // The next fetch continues past what is in flight.
        assert_eq!(p.next_fetch_offset(), Some(o(4)));
        let got = p.acquire(&member("b"), &[batch(0, 9)], 100, 0);
        assert_eq!(got, vec![acquired(4, 9, 1)]);
        assert_eq!(
            p.acknowledge("a", o(0), o(3), AcknowledgeType::Accept, 10),
            Ok(true)
        );
        assert_eq!(p.start_offset(), o(4));
        // Someone else's records, or records not acquired, are refused.
        assert!(p
            .acknowledge("a", o(4), o(4), AcknowledgeType::Accept, 10)
            .is_err());
        assert!(p
            .acknowledge("b", o(9), o(10), AcknowledgeType::Accept, 10)
            .is_err());
        assert_eq!(
            p.acknowledge("b", o(4), o(9), AcknowledgeType::Accept, 10),
            Ok(true)
        );
        assert_eq!(
            (p.start_offset(), p.end_offset(), p.runs()),
            (o(10), o(10), 0)
        );
    }

    /// Goal: the counters /metrics shows follow what members did. Method: acquire ten
    /// records, accept four, release three, reject two, let one expire, acquire again.
    #[test]
    fn deliveries_and_acknowledgements_are_counted() {
        let mut p = SharePartition::new(config(), o(0));
        let a = member("a");
        p.acquire(&a, &[batch(0, 9)], 100, 0);
        for (first, last, kind) in [
            (0, 3, AcknowledgeType::Accept),
            (4, 6, AcknowledgeType::Release),
            (7, 8, AcknowledgeType::Reject),
        ] {
            assert_eq!(p.acknowledge("a", o(first), o(last), kind, 10), Ok(true));
        }
        assert_eq!(p.expire_locks(1_000), 1);
        let got = p.acquire(&member("b"), &[batch(0, 9)], 100, 1_000);
        assert_eq!(got, vec![acquired(4, 6, 2), acquired(9, 9, 2)]);
        assert_eq!(
            (p.deliveries, p.accepted, p.released, p.rejected),
            (14, 4, 3, 2)
        );
        assert_eq!((p.redeliveries, p.archived), (4, 2));
    }

    #[test]
    fn an_expired_lock_makes_records_available_again_with_their_delivery_count() {
        let mut p = SharePartition::new(config(), o(0));
        p.acquire(&member("slow"), &[batch(0, 4)], 100, 0);
        assert_eq!(p.expire_locks(999), 0);
        assert_eq!(p.next_deadline_ms(), Some(1_000));
        assert_eq!(p.expire_locks(1_000), 5);
        assert_eq!(p.next_fetch_offset(), Some(o(0)));
        // The slow member's late acknowledgement is refused.
        assert!(p
            .acknowledge("slow", o(0), o(4), AcknowledgeType::Accept, 1_001)
            .is_err());
        let got = p.acquire(&member("fast"), &[batch(0, 4)], 100, 1_001);
        assert_eq!(got, vec![acquired(0, 4, 2)]);
        assert_eq!(p.redeliveries, 5);
    }

    #[test]
    fn a_lock_not_yet_expired_cannot_be_acknowledged_after_its_deadline() {
        let mut p = SharePartition::new(config(), o(0));
        p.acquire(&member("a"), &[batch(0, 0)], 100, 0);
        assert!(p
            .acknowledge("a", o(0), o(0), AcknowledgeType::Accept, 1_000)
            .is_err());
    }

    #[test]
    fn renew_extends_the_lock() {
        let mut p = SharePartition::new(config(), o(0));
        p.acquire(&member("a"), &[batch(0, 1)], 100, 0);
        assert_eq!(
            p.acknowledge("a", o(0), o(1), AcknowledgeType::Renew, 900),
            Ok(false)
        );
        assert_eq!(p.expire_locks(1_500), 0);
        assert_eq!(p.expire_locks(1_900), 2);
    }

    /// Goal: a renewal (acknowledge type 4) keeps the records with their holder and
    /// their delivery count, and only the holder of a live lock may renew. Method: a
    /// member renews twice past its first deadline, another member's and a late
    /// renewal are refused, then a release hands the records on with the count one up.
    #[test]
    fn renew_keeps_the_delivery_count_and_only_the_holder_renews() {
        let mut p = SharePartition::new(config(), o(0));
        assert_eq!(
            p.acquire(&member("a"), &[batch(0, 1)], 100, 0),
            vec![acquired(0, 1, 1)]
        );
        assert_eq!(
            p.acknowledge("b", o(0), o(1), AcknowledgeType::Renew, 500),
            Err(AckError::NotAcquired {
                first: o(0),
                last: o(1)
            })
        );
        for now in [900, 1_800] {
            assert_eq!(
                p.acknowledge("a", o(0), o(1), AcknowledgeType::Renew, now),
                Ok(false)
            );
            assert_eq!(p.expire_locks(now + 999), 0, "renewed at {now}");
        }
        assert_eq!(p.acquired(), 2);
        // Renewing one record of a run splits it; the other keeps its deadline.
        assert_eq!(
            p.acknowledge("a", o(1), o(1), AcknowledgeType::Renew, 2_500),
            Ok(false)
        );
        assert_eq!(p.expire_locks(2_800), 1);
        assert_eq!(
            p.acknowledge("a", o(0), o(0), AcknowledgeType::Renew, 2_900),
            Err(AckError::NotAcquired {
                first: o(0),
                last: o(0)
            })
        );
        assert_eq!(
            p.acknowledge("a", o(1), o(1), AcknowledgeType::Release, 2_900),
            Ok(true)
        );
        // Renewals did not count as deliveries: the next is the second.
        assert_eq!(
            p.acquire(&member("b"), &[batch(0, 1)], 100, 3_000),
            vec![acquired(0, 1, 2)]
        );
    }

    /// Goal: a fetch acquires at most MaxRecords records whatever the batches (the
    /// record-limit acquire mode, which headway applies in both modes). Method: ten
    /// records in two batches of five, fetched three at a time from where the state
    /// says: each fetch gets three (the last one), across the batch boundary, and every
    /// record once.
    #[test]
    fn a_fetch_acquires_at_most_max_records_across_batches() {
        let mut p = SharePartition::new(config(), o(0));
        let log = [batch(0, 4), batch(5, 9)];
        let (mut per_fetch, mut offsets) = (Vec::new(), Vec::new());
        while let Some(at) = p.next_fetch_offset() {
            let read: Vec<LogBatch> = log.iter().copied().filter(|b| b.last >= at).collect();
            let acquired = p.acquire(&member("a"), &read, 3, 0);
            if acquired.is_empty() {
                break;
            }
            per_fetch.push(acquired.iter().map(|a| count(a.first, a.last)).sum::<u64>());
            for a in acquired {
                assert_eq!(a.delivery_count, 1);
                offsets.extend(a.first.value()..=a.last.value());
            }
        }
        assert_eq!(per_fetch, vec![3, 3, 3, 1]);
        assert_eq!(offsets, (0..10).collect::<Vec<i64>>());
    }

    #[test]
    fn release_at_the_delivery_limit_archives_and_the_start_moves_over_it() {
        let mut p = SharePartition::new(config(), o(0));
        let a = member("a");
        for delivery in 1..=3u16 {
            let got = p.acquire(&a, &[batch(0, 1)], 1, 0);
            assert_eq!(got, vec![acquired(0, 0, delivery)]);
            p.acknowledge("a", o(0), o(0), AcknowledgeType::Release, 0)
                .unwrap();
        }
        assert_eq!(p.archived, 1);
        assert_eq!(p.start_offset(), o(1));
        // Offset 1 was never acquired: it is not in flight.
        assert_eq!(p.end_offset(), o(1));
        // Expiry at the limit archives too.
        let got = p.acquire(&a, &[batch(1, 1)], 1, 0);
        assert_eq!(got, vec![acquired(1, 1, 1)]);
        for now in [1_000, 2_000] {
            assert_eq!(p.expire_locks(now), 1);
            p.acquire(&a, &[batch(1, 1)], 1, now);
        }
        assert_eq!(p.expire_locks(3_000), 1);
        assert_eq!((p.start_offset(), p.archived), (o(2), 2));
    }

    #[test]
    fn done_counts_acknowledged_and_archived_records_in_flight() {
        let mut p = SharePartition::new(config(), o(0));
        p.acquire(&member("a"), &[batch(0, 9)], 100, 0);
        assert_eq!(p.done(), 0);
        p.acknowledge("a", o(5), o(6), AcknowledgeType::Accept, 0)
            .unwrap();
        p.acknowledge("a", o(8), o(8), AcknowledgeType::Reject, 0)
            .unwrap();
        assert_eq!((p.start_offset(), p.done()), (o(0), 3));
        // Once the start moves over them they are no longer in flight.
        p.acknowledge("a", o(0), o(4), AcknowledgeType::Accept, 0)
            .unwrap();
        assert_eq!((p.start_offset(), p.done()), (o(7), 1));
    }

    #[test]
    fn reject_archives_and_a_partial_acknowledgement_splits_a_run() {
        let mut p = SharePartition::new(config(), o(0));
        p.acquire(&member("a"), &[batch(0, 9)], 100, 0);
        p.acknowledge("a", o(3), o(5), AcknowledgeType::Reject, 0)
            .unwrap();
        p.acknowledge("a", o(0), o(2), AcknowledgeType::Accept, 0)
            .unwrap();
        assert_eq!(p.start_offset(), o(6));
        p.acknowledge("a", o(7), o(7), AcknowledgeType::Release, 0)
            .unwrap();
        assert_eq!(p.runs(), 3);
        assert_eq!(p.archived, 3);
        let got = p.acquire(&member("b"), &[batch(0, 9)], 100, 0);
        assert_eq!(got, vec![acquired(7, 7, 2)]);
    }

    #[test]
    fn the_lock_bound_stops_acquisition_until_the_start_moves() {
        let mut p = SharePartition::new(
            SharePartitionConfig {
                max_record_locks: 10,
                ..config()
            },
            o(0),
        );
        let got = p.acquire(&member("a"), &[batch(0, 99)], 1_000, 0);
        assert_eq!(got, vec![acquired(0, 9, 1)]);
        assert_eq!(p.next_fetch_offset(), None);
        assert!(p
            .acquire(&member("b"), &[batch(10, 99)], 1_000, 0)
            .is_empty());
        p.acknowledge("a", o(0), o(4), AcknowledgeType::Accept, 0)
            .unwrap();
        assert_eq!(p.next_fetch_offset(), Some(o(10)));
        let got = p.acquire(&member("b"), &[batch(10, 99)], 1_000, 0);
        assert_eq!(got, vec![acquired(10, 14, 1)]);
        assert_eq!(p.in_flight(), 10);
    }

    #[test]
    fn control_batches_and_gaps_are_archived_not_handed_out() {
        let mut p = SharePartition::new(config(), o(0));
        let batches = [
            batch(0, 1),
            LogBatch {
                first: o(2),
                last: o(2),
                skip: true,
            },
            batch(5, 6),
        ];
        let got = p.acquire(&member("a"), &batches, 100, 0);
        assert_eq!(got, vec![acquired(0, 1, 1), acquired(5, 6, 1)]);
        p.acknowledge("a", o(0), o(1), AcknowledgeType::Accept, 0)
            .unwrap();
        assert_eq!(p.start_offset(), o(5));
    }

    #[test]
    fn memory_follows_runs_not_records() {
        let mut p = SharePartition::new(
            SharePartitionConfig {
                max_record_locks: 2_000,
                ..config()
            },
            o(0),
        );
        p.acquire(&member("a"), &[batch(0, 1_999)], 2_000, 0);
        assert_eq!(p.runs(), 1);
        p.acknowledge("a", o(1), o(1_999), AcknowledgeType::Accept, 0)
            .unwrap();
        assert_eq!(p.runs(), 2);
    }

    #[test]
    fn a_member_leaving_releases_its_locks() {
        let mut p = SharePartition::new(config(), o(0));
        p.acquire(&member("a"), &[batch(0, 1)], 1, 0);
        p.acquire(&member("b"), &[batch(0, 1)], 1, 0);
        assert_eq!(p.release_member("a"), 1);
        assert_eq!(p.acquired(), 1);
        assert_eq!(p.next_fetch_offset(), Some(o(0)));
    }

    #[test]
    fn a_snapshot_restores_done_and_delivered_records_and_drops_locks() {
        let mut p = SharePartition::new(config(), o(0));
        p.acquire(&member("a"), &[batch(0, 9)], 100, 0);
        p.acknowledge("a", o(0), o(1), AcknowledgeType::Accept, 0)
            .unwrap();
        p.acknowledge("a", o(3), o(3), AcknowledgeType::Reject, 0)
            .unwrap();
        let snapshot = p.snapshot();
        let mut restored = SharePartition::from_snapshot(config(), &snapshot);
        assert_eq!(restored.start_offset(), o(2));
        assert_eq!(restored.end_offset(), o(10));
        assert_eq!(restored.acquired(), 0);
        let got = restored.acquire(&member("b"), &[batch(0, 9)], 100, 0);
        assert_eq!(got, vec![acquired(2, 2, 2), acquired(4, 9, 2)]);
    }

    #[test]
    fn the_log_start_moving_up_moves_the_start() {
        let mut p = SharePartition::new(config(), o(0));
        p.acquire(&member("a"), &[batch(0, 9)], 100, 0);
        assert!(p.log_start_moved(o(5)));
        assert_eq!((p.start_offset(), p.in_flight()), (o(5), 5));
        assert!(!p.log_start_moved(o(3)));
        assert!(p.log_start_moved(o(20)));
        assert_eq!((p.start_offset(), p.end_offset()), (o(20), o(20)));
    }
}
