//! The log cleaner of compacted topics, for the whole broker (`docs/compaction.md`).
//!
//! One thread, at the read threads' low CPU priority, runs one cleaning pass at a time.
//! Each round it measures the dirty ratio of every compacted partition (the topics
//! whose `cleanup.policy` includes `compact`, and the broker's internal logs, such as the
//! group coordinator's offsets log), takes the
//! dirtiest one above its `min.cleanable.dirty.ratio`, and cleans it: the plan
//! under the partition's mutex, the heavy work (reading keys, writing cleaned segments)
//! without it, the swap under it again. When no partition needs cleaning it rests
//! `log_cleaner_backoff_ms`.
//!
//! The cleaner stays out of the way of light work: every byte it reads or writes passes
//! the broker's adaptive bulk budget (shared with catch-up reads and heavy produces,
//! cut while small syncs slow down, [`crate::io::bulk_budget`]) and an optional fixed cap
//! (`log_cleaner_io_bytes_per_sec`); its key map is bounded by
//! `log_cleaner_dedupe_buffer_bytes`; a pass takes at most
//! [`limits::LOG_CLEANER_PASS_DIRTY_BYTES_MAX`] of dirty data.

pub mod probe;

use crate::io::bulk_budget::{BulkBudget, BulkWork};
use crate::io::priority::BulkPriority;
use crate::{BrokerConfig, Partition, TopicConfig};
use headway_base::{limits, Clock};
use headway_log::{CleanReport, CleanerConfig};
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A log the cleaner looks after, with the settings of its passes.
#[derive(Clone)]
pub struct Cleanable {
    pub topic: String,
    pub partition: Arc<Partition>,
    /// `min.cleanable.dirty.ratio`.
    pub min_dirty_ratio: f64,
    /// `max.compaction.lag.ms`: a log whose oldest dirty segment is older than this is
    /// cleaned whatever its dirty ratio.
    pub max_compaction_lag_ms: u64,
    pub config: CleanerConfig,
}

impl Cleanable {
    /// The partition of a topic with these settings.
    pub fn of_topic(
        topic: &str,
        partition: Arc<Partition>,
        config: &TopicConfig,
        broker: &BrokerConfig,
    ) -> Cleanable {
        Cleanable {
            topic: topic.to_string(),
            partition,
            min_dirty_ratio: config.min_cleanable_dirty_ratio,
            max_compaction_lag_ms: config.max_compaction_lag_ms,
            config: CleanerConfig {
                map_bytes_max: broker.log_cleaner_dedupe_buffer_bytes,
                delete_retention_ms: config.delete_retention_ms,
                min_compaction_lag_ms: config.min_compaction_lag_ms,
                dirty_bytes_max: limits::LOG_CLEANER_PASS_DIRTY_BYTES_MAX,
            },
        }
    }
}

/// What the cleaner did to one partition, for `/metrics`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartitionCleaning {
    /// The dirty ratio when the cleaner last looked.
    pub dirty_ratio: f64,
    pub passes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_removed: u64,
    /// When the last pass ended, ms since the epoch.
    pub last_cleaned_ms: Option<i64>,
}

impl PartitionCleaning {
    fn add(&mut self, report: &CleanReport, now_ms: i64) {
        self.passes += 1;
        self.bytes_read += report.bytes_read;
        self.bytes_written += report.bytes_written;
        self.records_removed += report.records_removed;
        self.dirty_ratio = report.dirty_ratio_after;
        self.last_cleaned_ms = Some(now_ms);
    }
}

/// One candidate as the cleaner measured it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dirtiness {
    /// The dirty ratio.
    pub ratio: f64,
    /// Its `min.cleanable.dirty.ratio`.
    pub min_ratio: f64,
    /// Its oldest dirty segment waited past `max.compaction.lag.ms`.
    pub overdue: bool,
    /// A tombstone it kept is past its horizon (`delete.retention.ms` after its first
    /// cleaning): a pass removes it, even when nothing is dirty.
    pub tombstones_due: bool,
}

/// The order in which candidates are tried: those overdue by `max.compaction.lag.ms` or
/// with tombstones due first, then those above their own minimum ratio (as Kafka
/// compares them: a minimum of 1 never cleans), the dirtiest first in each; candidates
/// with nothing dirty and no tombstone due never. Plain code over the measurements.
pub fn cleaning_order(candidates: &[Dirtiness]) -> Vec<usize> {
    let urgent = |c: Dirtiness| (c.ratio > 0.0 && c.overdue) || c.tombstones_due;
    let mut order: Vec<usize> = (0..candidates.len())
        .filter(|&i| {
            let c = candidates[i];
            urgent(c) || (c.ratio > 0.0 && c.ratio > c.min_ratio)
        })
        .collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (candidates[a], candidates[b]);
        urgent(b).cmp(&urgent(a)).then(b.ratio.total_cmp(&a.ratio))
    });
    order
}

/// A fixed I/O rate: how long to pause after each amount of I/O so that the bytes so
/// far take at least their time at `bytes_per_sec`. Plain code over the time given.
#[derive(Debug)]
pub struct IoCap {
    bytes_per_sec: f64,
    started: Instant,
    bytes: f64,
}

impl IoCap {
    pub fn new(bytes_per_sec: u64, now: Instant) -> IoCap {
        IoCap {
            bytes_per_sec: bytes_per_sec as f64,
            started: now,
            bytes: 0.0,
        }
    }

    /// `bytes` more were read or written at `now`: how long to pause.
    pub fn pause(&mut self, bytes: u64, now: Instant) -> Duration {
        if self.bytes_per_sec >= u64::MAX as f64 {
            return Duration::ZERO; // no cap
        }
        self.bytes += bytes as f64;
        let due = Duration::from_secs_f64(self.bytes / self.bytes_per_sec);
        (self.started + due).saturating_duration_since(now)
    }
}

/// The broker's log cleaner: its thread's state and what it did.
pub struct LogCleaner {
    backoff: Duration,
    io_bytes_per_sec: u64,
    budget: Arc<BulkBudget>,
    stats: Mutex<BTreeMap<(String, i32), PartitionCleaning>>,
    /// Set to stop; the condvar wakes a resting cleaner.
    stop: Mutex<bool>,
    wake: Condvar,
    /// The broker's clock: when a log is overdue, which tombstones may go, when a pass
    /// ended.
    clock: Clock,
}

impl LogCleaner {
    pub fn new(config: &BrokerConfig, budget: Arc<BulkBudget>, clock: Clock) -> LogCleaner {
        LogCleaner {
            backoff: Duration::from_millis(config.log_cleaner_backoff_ms),
            io_bytes_per_sec: config.log_cleaner_io_bytes_per_sec,
            budget,
            stats: Mutex::new(BTreeMap::new()),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            clock,
        }
    }

    /// What the cleaner did, per partition.
    pub fn snapshot(&self) -> Vec<(String, i32, PartitionCleaning)> {
        let stats = self.stats.lock().expect("cleaner lock");
        stats
            .iter()
            .map(|((topic, index), s)| (topic.clone(), *index, s.clone()))
            .collect()
    }

    /// Stops the thread (a pass in progress runs on without pacing and is dropped at
    /// the swap if its partition is closed).
    pub fn stop(&self) {
        *self.stop.lock().expect("cleaner lock") = true;
        self.wake.notify_all();
    }

    fn stopping(&self) -> bool {
        *self.stop.lock().expect("cleaner lock")
    }

    /// Rests `backoff` or until stopped; false once stopped.
    fn rest(&self) -> bool {
        let stop = self.stop.lock().expect("cleaner lock");
        let (stop, _) = self
            .wake
            .wait_timeout_while(stop, self.backoff, |stop| !*stop)
            .expect("cleaner lock");
        !*stop
    }

    /// Runs the cleaner until stopped, taking the logs to clean from `logs` each round
    /// (`None`: the broker is gone).
    pub fn run(&self, priority: BulkPriority, logs: impl Fn() -> Option<Vec<Cleanable>>) {
        priority.lower_this_thread();
        loop {
            if self.stopping() {
                return;
            }
            let Some(candidates) = logs() else { return };
            // A round that panics is counted and logged; the cleaner rests and goes on
            // (a partition whose swap failed half-way is offline, as for an I/O error).
            let cleaned = crate::panics::catch(crate::panics::Component::Cleaner, || {
                self.round(&candidates)
            })
            .unwrap_or(false);
            if !cleaned && !self.rest() {
                return;
            }
        }
    }

    /// One round: measures every candidate and cleans the dirtiest that has something
    /// to clean. Whether a pass ran.
    pub fn round(&self, candidates: &[Cleanable]) -> bool {
        self.forget_all_but(candidates);
        let now_ms = self.clock.time_ms();
        let measured: Vec<Dirtiness> = candidates
            .iter()
            .map(|c| {
                let ratio = c.partition.dirty_ratio().unwrap_or(0.0);
                self.with_stats(c, |s| s.dirty_ratio = ratio);
                let lag = i64::try_from(c.max_compaction_lag_ms).unwrap_or(i64::MAX);
                let newest = c.partition.first_dirty_max_timestamp().ok().flatten();
                let due = c.partition.tombstones_due_ms().ok().flatten();
                Dirtiness {
                    ratio,
                    min_ratio: c.min_dirty_ratio,
                    overdue: newest.is_some_and(|t| t < now_ms.saturating_sub(lag)),
                    tombstones_due: due.is_some_and(|t| t < now_ms),
                }
            })
            .collect();
        for i in cleaning_order(&measured) {
            if self.pass(&candidates[i]) {
                return true;
            }
        }
        false
    }

    /// Drops the figures of logs that are no longer candidates (a deleted topic, a
    /// topic whose policy no longer compacts), so that they are bounded by the
    /// compacted partitions there are.
    fn forget_all_but(&self, candidates: &[Cleanable]) {
        let keep: std::collections::BTreeSet<(&str, i32)> = candidates
            .iter()
            .map(|c| (c.topic.as_str(), c.partition.index().value()))
            .collect();
        let mut stats = self.stats.lock().expect("cleaner lock");
        stats.retain(|(topic, index), _| keep.contains(&(topic.as_str(), *index)));
    }

    fn with_stats(&self, c: &Cleanable, f: impl FnOnce(&mut PartitionCleaning)) {
        let key = (c.topic.clone(), c.partition.index().value());
        f(self
            .stats
            .lock()
            .expect("cleaner lock")
            .entry(key)
            .or_default());
    }

    /// One pass over `c`; whether it ran (false: nothing to plan, or it failed).
    fn pass(&self, c: &Cleanable) -> bool {
        let index = c.partition.index().value();
        let now_ms = self.clock.time_ms();
        let plan = match c.partition.plan_cleaning(&c.config, now_ms) {
            Ok(Some(plan)) => plan,
            Ok(None) | Err(_) => return false,
        };
        let started = Instant::now();
        let mut cap = IoCap::new(self.io_bytes_per_sec, started);
        let mut throttle = |bytes: u64| {
            if self.stopping() {
                return;
            }
            let charged = usize::try_from(bytes).unwrap_or(usize::MAX);
            self.budget.charge(BulkWork::Write, charged);
            self.budget.admit_blocking(BulkWork::Write);
            std::thread::sleep(cap.pause(bytes, Instant::now()));
        };
        let report = plan
            .stage(&c.config, now_ms, &mut throttle)
            .map_err(crate::BrokerError::from_log)
            .and_then(|staged| c.partition.install_cleaned(staged));
        match report {
            Ok(report) => {
                tracing::info!(topic = %c.topic, partition = index,
                    segments_replaced = report.segments_replaced,
                    records_removed = report.records_removed,
                    bytes_read = report.bytes_read, bytes_written = report.bytes_written,
                    dirty_ratio_before = report.dirty_ratio_before,
                    dirty_ratio_after = report.dirty_ratio_after,
                    ms = started.elapsed().as_millis() as u64, "cleaned");
                self.with_stats(c, |s| s.add(&report, self.clock.time_ms()));
                true
            }
            Err(error) => {
                tracing::warn!(topic = %c.topic, partition = index, %error, "cleaning pass failed");
                false
            }
        }
    }
}

#[cfg(test)]
mod partition_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(ratio: f64, min_ratio: f64, overdue: bool, tombstones_due: bool) -> Dirtiness {
        Dirtiness {
            ratio,
            min_ratio,
            overdue,
            tombstones_due,
        }
    }

    #[test]
    fn the_dirtiest_partition_over_its_ratio_goes_first() {
        let at = |ratio, min_ratio| measured(ratio, min_ratio, false, false);
        // 0 is under its minimum, 3 has nothing dirty, 4 is at it.
        let measured = [
            at(0.4, 0.5),
            at(0.6, 0.5),
            at(0.9, 0.1),
            at(0.0, 0.0),
            at(0.5, 0.5),
        ];
        assert_eq!(cleaning_order(&measured), vec![2, 1]);
        let never = cleaning_order(&[at(1.0, 1.0)]);
        assert!(never.is_empty(), "a minimum of 1 never cleans");
        assert!(cleaning_order(&[at(0.0, 0.0)]).is_empty());
    }

    #[test]
    fn a_log_past_its_max_compaction_lag_goes_first_whatever_its_ratio() {
        let overdue = |ratio| measured(ratio, 1.0, true, false);
        let dirty = measured(0.9, 0.5, false, false);
        assert_eq!(
            cleaning_order(&[dirty, overdue(0.2), overdue(0.3)]),
            vec![2, 1, 0]
        );
        assert!(cleaning_order(&[overdue(0.0)]).is_empty(), "nothing dirty");
    }

    #[test]
    fn a_log_with_tombstones_due_is_cleaned_even_with_nothing_dirty() {
        let clean = |tombstones_due| measured(0.0, 0.5, false, tombstones_due);
        let dirty = measured(0.9, 0.5, false, false);
        assert_eq!(
            cleaning_order(&[dirty, clean(true), clean(false)]),
            vec![1, 0]
        );
    }

    #[test]
    fn the_io_cap_spaces_bytes_at_its_rate() {
        let start = Instant::now();
        let mut cap = IoCap::new(1_000_000, start);
        // 500 KB at once: due half a second after the start.
        assert_eq!(cap.pause(500_000, start), Duration::from_millis(500));
        // Later than due: no pause.
        assert_eq!(cap.pause(0, start + Duration::from_secs(1)), Duration::ZERO);
        // 1 MB more by 1 s: due at 1.5 s.
        let at = start + Duration::from_secs(1);
        assert_eq!(cap.pause(1_000_000, at), Duration::from_millis(500));
        // No cap: never a pause.
        let mut none = IoCap::new(u64::MAX, start);
        assert_eq!(none.pause(u64::MAX / 2, start), Duration::ZERO);
    }
}
