//! The budget of bulk work: catching up and heavy writing take what the disk can spare
//! and no more.
//!
//! Reads on the read threads (consumers catching up on data behind the tail), produce
//! requests larger than 64 KiB (heavy writers) and the log cleaner pass token buckets
//! whose rates adapt to the latency of the work that must stay fast, the way a
//! congestion controller adapts a sending rate. The broker notes that latency in the
//! [`LatencySignal`](crate::io::timings::LatencySignal) of its stage timings
//! (`Timings::light_latency`): every small sync, and every small produce's wait from its
//! append to its data being durable. Every `interval` the controllers look at the
//! slowest of the interval: above `target` the rates halve (never below `min`),
//! otherwise they grow (never above `max`). Every interval that passed without light
//! work slower than `target` counts as quiet; so does a whole second in which no bulk
//! work asked (light work that slowed then was not slowed by it), so a budget cut by
//! one burst is back at full rate when the next one comes. Catching up and heavy
//! writing therefore run at full speed on a quiet disk, and slow down while they make
//! light producers' syncs (and with them their acknowledgements and every tail
//! consumer's data) wait.
//!
//! Reading and writing have a bucket each ([`BulkWork`]), cut together and grown back
//! differently. Written bytes are the light syncs' direct competitors (the same disk
//! queue, the same journal), so the write rate grows back by a fiftieth of its maximum
//! per quiet interval: growing it faster made a light producer beside a heavy writer
//! slower. A catch-up costs the light clients (disk and CPU) for as long as it lasts,
//! so the read rate grows by a quarter per quiet interval (and at least by a fiftieth
//! of its maximum), back from a cut in about a second rather than five: measured, cold
//! replays ran 1.4x faster with the tail beside them unchanged (`docs/sync.md`).
//! Each has its own maximum: a replay's cost to the light clients grows with its rate,
//! so reading stops lower (`bulk_read_bytes_per_sec_max`, `headway_base::limits`).
//!
//! The bucket allows a debt: a read is admitted once the bucket is not in debt and is
//! charged with what it read afterwards, so a large read is never starved by small
//! ones, and the debt it leaves makes the next read wait. The controller is plain code
//! over the time it is given ([`Controller`]); [`BulkBudget`] is the shell that reads
//! the clock and sleeps.

use crate::io::timings::Timings;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Growth per quiet interval: every rate grows by its maximum over this many (from
/// nothing to the maximum in 5 s at 100 ms)...
const INCREASE_STEPS: f64 = 50.0;

/// ...and the read rate by a quarter of itself when that is more (from the 16 MiB/s
/// minimum to 1 GiB/s in 15 intervals, 1.5 s, rather than 5 s; to 256 MiB/s in 13).
const READ_INCREASE_FACTOR: f64 = 1.25;

/// Most quiet intervals counted at one adjustment: enough to climb from the minimum to
/// any maximum, so that an idle budget is at full rate again.
const QUIET_INTERVALS_MAX: u32 = 64;

/// Intervals without any bulk work after which the light work's slowest latency is no
/// sign against bulk work: nothing of it was running.
const IDLE_INTERVALS: u32 = 10;

/// The kinds of bulk work, each with its bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkWork {
    /// Reads of consumers catching up.
    Read,
    /// Large produces and the log cleaner's copies.
    Write,
}

/// The budget's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetConfig {
    /// The lowest rate, in bytes per second: catching up always progresses.
    pub min_bytes_per_sec: f64,
    /// The highest rate of writing, and its rate on a quiet disk.
    pub max_bytes_per_sec: f64,
    /// The highest rate of reading, and its rate on a quiet disk.
    pub read_max_bytes_per_sec: f64,
    /// The slowest small sync per interval that counts as fast.
    pub target: Duration,
    /// How often the rate is adjusted.
    pub interval: Duration,
    /// How long a catch-up read waits, before each disk read, for small syncs in
    /// progress to end (`crate::io::timings::SyncGate`); zero: never.
    pub read_sync_wait: Duration,
}

impl BudgetConfig {
    /// The highest rate of `work`.
    fn max_of(&self, work: BulkWork) -> f64 {
        match work {
            BulkWork::Read => self.read_max_bytes_per_sec,
            BulkWork::Write => self.max_bytes_per_sec,
        }
    }
}

/// The token bucket and its rate controller, over time given by the caller.
#[derive(Debug)]
pub struct Controller {
    config: BudgetConfig,
    work: BulkWork,
    rate: f64,
    /// Bytes that may be read now; negative when in debt.
    tokens: f64,
    refilled: Instant,
    adjusted: Instant,
    decreases: u64,
    increases: u64,
}

impl Controller {
    /// A controller of `work` at full rate with a full bucket at `now`.
    pub fn new(config: BudgetConfig, work: BulkWork, now: Instant) -> Controller {
        let mut controller = Controller {
            config,
            work,
            rate: config.max_of(work),
            tokens: 0.0,
            refilled: now,
            adjusted: now,
            decreases: 0,
            increases: 0,
        };
        controller.tokens = controller.burst();
        controller
    }

    /// The bucket's size: one interval's worth at the current rate.
    fn burst(&self) -> f64 {
        self.rate * self.config.interval.as_secs_f64()
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Times the rate was cut and raised.
    pub fn adjustments(&self) -> (u64, u64) {
        (self.decreases, self.increases)
    }

    /// Whether an interval has passed since the last adjustment.
    pub fn due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.adjusted) >= self.config.interval
    }

    /// Adjusts the rate to the slowest light work since the last adjustment (`None`:
    /// there was none, which is no sign of trouble). Slow: one cut. Otherwise every
    /// interval since then was quiet, and the rate grows once for each; after
    /// [`IDLE_INTERVALS`] without an adjustment (no bulk work asked) the rate grows
    /// whatever the light work's latency was.
    pub fn adjust(&mut self, now: Instant, slowest: Option<Duration>) {
        self.refill(now);
        let elapsed = now.saturating_duration_since(self.adjusted);
        self.adjusted = now;
        let config = &self.config;
        let intervals = elapsed.as_nanos() / config.interval.as_nanos().max(1);
        let intervals = u32::try_from(intervals).unwrap_or(u32::MAX);
        let idle = intervals >= IDLE_INTERVALS;
        if !idle && slowest.is_some_and(|s| s > config.target) {
            self.rate = (self.rate / 2.0).max(config.min_bytes_per_sec);
            self.decreases += 1;
        } else {
            let max = config.max_of(self.work);
            let step = max / INCREASE_STEPS;
            for _ in 0..intervals.clamp(1, QUIET_INTERVALS_MAX) {
                if self.rate >= max {
                    break;
                }
                let grown = match self.work {
                    BulkWork::Read => (self.rate * READ_INCREASE_FACTOR).max(self.rate + step),
                    BulkWork::Write => self.rate + step,
                };
                self.rate = grown.min(max);
                self.increases += 1;
            }
        }
        self.tokens = self.tokens.min(self.burst());
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.refilled = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst());
    }

    /// How long a read must wait before it may start at `now` (zero: go).
    pub fn wait(&mut self, now: Instant) -> Duration {
        self.refill(now);
        match self.tokens >= 0.0 {
            true => Duration::ZERO,
            false => Duration::from_secs_f64(-self.tokens / self.rate),
        }
    }

    /// A read of `bytes` was done.
    pub fn charge(&mut self, bytes: usize) {
        self.tokens -= bytes as f64;
    }
}

/// A snapshot of the budget, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetSnapshot {
    pub read_bytes_per_sec: f64,
    pub write_bytes_per_sec: f64,
    /// Times slow light work cut the rates.
    pub decreases: u64,
    /// Bulk work that had to wait for the budget.
    pub waits: u64,
}

/// The two buckets, adjusted together.
#[derive(Debug)]
struct Controllers {
    read: Controller,
    write: Controller,
}

impl Controllers {
    fn of(&mut self, work: BulkWork) -> &mut Controller {
        match work {
            BulkWork::Read => &mut self.read,
            BulkWork::Write => &mut self.write,
        }
    }
}

/// The broker's bulk budget: a [`Controller`] per kind of bulk work behind a mutex,
/// fed by the light work's latency.
pub struct BulkBudget {
    controllers: Mutex<Controllers>,
    read_sync_wait: Duration,
    waits: AtomicU64,
    /// Where the flushers report their small syncs.
    timings: Arc<Timings>,
}

impl BulkBudget {
    pub fn new(config: BudgetConfig, timings: Arc<Timings>) -> BulkBudget {
        BulkBudget {
            controllers: Mutex::new(Controllers {
                read: Controller::new(config, BulkWork::Read, Instant::now()),
                write: Controller::new(config, BulkWork::Write, Instant::now()),
            }),
            read_sync_wait: config.read_sync_wait,
            waits: AtomicU64::new(0),
            timings,
        }
    }

    /// Waits until bulk work of this kind may start.
    pub async fn admit(&self, work: BulkWork) {
        let mut waited = false;
        loop {
            let wait = self.wait_now(work, &mut waited);
            if wait.is_zero() {
                return;
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// [`BulkBudget::admit`] for a thread of its own (the log cleaner's), which sleeps.
    pub fn admit_blocking(&self, work: BulkWork) {
        let mut waited = false;
        loop {
            let wait = self.wait_now(work, &mut waited);
            if wait.is_zero() {
                return;
            }
            std::thread::sleep(wait);
        }
    }

    /// How long to wait before bulk work may start (zero: go), adjusting the rate when
    /// an interval has passed; counts a caller's first wait. The wait is at most a short
    /// nap, so that a rate raised meanwhile takes effect.
    fn wait_now(&self, work: BulkWork, waited: &mut bool) -> Duration {
        let wait = {
            let now = Instant::now();
            let mut controllers = self.controllers.lock().expect("bulk budget lock");
            // Both are adjusted at the same moments, so one is due when the other is.
            if controllers.read.due(now) {
                let slowest = self.timings.light_latency.take();
                controllers.read.adjust(now, slowest);
                controllers.write.adjust(now, slowest);
            }
            controllers.of(work).wait(now)
        };
        if !wait.is_zero() && !*waited {
            *waited = true;
            self.waits.fetch_add(1, Ordering::Relaxed);
        }
        wait.min(Duration::from_millis(20))
    }

    /// Called by a catch-up read before each of its disk reads: lets small syncs in
    /// progress go first, for at most `read_sync_wait`. Blocking.
    pub fn yield_to_small_syncs(&self) {
        self.timings.small_syncs.wait_clear(self.read_sync_wait);
    }

    /// Disk reads of catch-up reads that waited for a small sync.
    pub fn sync_yields(&self) -> u64 {
        self.timings.small_syncs.waits()
    }

    /// Bulk work of `bytes` was done.
    pub fn charge(&self, work: BulkWork, bytes: usize) {
        let mut controllers = self.controllers.lock().expect("bulk budget lock");
        controllers.of(work).charge(bytes);
    }

    pub fn snapshot(&self) -> BudgetSnapshot {
        let controllers = self.controllers.lock().expect("bulk budget lock");
        BudgetSnapshot {
            read_bytes_per_sec: controllers.read.rate(),
            write_bytes_per_sec: controllers.write.rate(),
            decreases: controllers.read.adjustments().0,
            waits: self.waits.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = 1024.0 * 1024.0;

    fn config() -> BudgetConfig {
        BudgetConfig {
            min_bytes_per_sec: 16.0 * MIB,
            max_bytes_per_sec: 1024.0 * MIB,
            read_max_bytes_per_sec: 1024.0 * MIB,
            target: Duration::from_millis(10),
            interval: Duration::from_millis(100),
            read_sync_wait: Duration::from_millis(1),
        }
    }

    /// Ten slow intervals from `start`: 1 GiB/s halves to the 16 MiB/s minimum.
    fn cut_to_minimum(c: &mut Controller, start: Instant) {
        for i in 1..=10 {
            c.adjust(
                start + Duration::from_millis(100 * i),
                Some(Duration::from_secs(1)),
            );
        }
    }

    #[test]
    fn the_rate_halves_while_syncs_are_slow_and_stops_at_the_minimum() {
        let start = Instant::now();
        let mut c = Controller::new(config(), BulkWork::Write, start);
        assert_eq!(c.rate(), 1024.0 * MIB);
        let slow = Some(Duration::from_millis(40));
        c.adjust(start + Duration::from_millis(100), slow);
        assert_eq!(c.rate(), 512.0 * MIB);
        c.adjust(start + Duration::from_millis(200), slow);
        assert_eq!(c.rate(), 256.0 * MIB);
        for i in 3..20 {
            c.adjust(start + Duration::from_millis(100 * i), slow);
        }
        assert_eq!(c.rate(), 16.0 * MIB);
        assert_eq!(c.adjustments().0, 19);
    }

    #[test]
    fn the_rate_grows_back_in_steps_while_syncs_are_fast_or_absent() {
        let start = Instant::now();
        let mut c = Controller::new(config(), BulkWork::Write, start);
        cut_to_minimum(&mut c, start);
        assert_eq!(c.rate(), 16.0 * MIB);
        c.adjust(
            start + Duration::from_millis(1100),
            Some(Duration::from_millis(2)),
        );
        assert!(near(c.rate(), 16.0 * MIB + 1024.0 * MIB / 50.0));
        c.adjust(start + Duration::from_millis(1200), None);
        assert!(near(c.rate(), 16.0 * MIB + 2.0 * 1024.0 * MIB / 50.0));
        for i in 13..80 {
            c.adjust(start + Duration::from_millis(100 * i), None);
        }
        assert_eq!(c.rate(), 1024.0 * MIB, "never above the maximum");
    }

    fn near(rate: f64, expected: f64) -> bool {
        (rate - expected).abs() < 1.0
    }

    /// Quiet intervals, one at a time from `from`, until the rate is at its maximum.
    fn intervals_to_full_rate(c: &mut Controller, from: Instant) -> u32 {
        let mut n = 0;
        while c.rate() < 1024.0 * MIB {
            n += 1;
            assert!(n < 1000, "the rate never gets back to its maximum");
            c.adjust(from + Duration::from_millis(100 * u64::from(n)), None);
        }
        n
    }

    #[test]
    fn the_read_rate_grows_back_faster_than_the_write_rate_and_both_halve_alike() {
        let start = Instant::now();
        let mut read = Controller::new(config(), BulkWork::Read, start);
        let mut write = Controller::new(config(), BulkWork::Write, start);
        cut_to_minimum(&mut read, start);
        cut_to_minimum(&mut write, start);
        assert_eq!((read.rate(), write.rate()), (16.0 * MIB, 16.0 * MIB));
        assert_eq!(read.adjustments().0, write.adjustments().0);
        let after = start + Duration::from_secs(1);
        // Low down both grow by the same step: a fiftieth of the maximum...
        read.adjust(after + Duration::from_millis(100), None);
        write.adjust(after + Duration::from_millis(100), None);
        let step = 1024.0 * MIB / 50.0;
        assert_eq!(read.rate(), 16.0 * MIB + step);
        assert_eq!(write.rate(), 16.0 * MIB + step);
        // ...higher up the read rate grows by a quarter of itself.
        let mut read = Controller::new(config(), BulkWork::Read, start);
        let mut write = Controller::new(config(), BulkWork::Write, start);
        for c in [&mut read, &mut write] {
            let slow = Some(Duration::from_secs(1));
            c.adjust(start + Duration::from_millis(100), slow);
            c.adjust(start + Duration::from_millis(200), slow);
            assert_eq!(c.rate(), 256.0 * MIB);
        }
        let at = start + Duration::from_millis(300);
        read.adjust(at, None);
        write.adjust(at, None);
        assert_eq!(read.rate(), 320.0 * MIB);
        assert_eq!(write.rate(), 256.0 * MIB + step);
        // From the minimum to the maximum: 50 quiet intervals for writes, 15 for reads.
        cut_to_minimum(&mut read, at);
        cut_to_minimum(&mut write, at);
        let from = at + Duration::from_secs(1);
        assert_eq!(intervals_to_full_rate(&mut write, from), 50);
        assert_eq!(intervals_to_full_rate(&mut read, from), 15);
    }

    #[test]
    fn every_quiet_interval_since_the_last_adjustment_counts() {
        let start = Instant::now();
        let mut c = Controller::new(config(), BulkWork::Write, start);
        cut_to_minimum(&mut c, start);
        let step = 1024.0 * MIB / 50.0;
        // Five intervals without bulk work and without slow light work: five steps.
        c.adjust(start + Duration::from_millis(1500), None);
        assert!(near(c.rate(), 16.0 * MIB + 5.0 * step));
        // A slow interval after a short pause still cuts.
        let slow = Some(Duration::from_secs(1));
        c.adjust(start + Duration::from_millis(1800), slow);
        assert!(near(c.rate(), (16.0 * MIB + 5.0 * step) / 2.0));
    }

    #[test]
    fn light_work_slow_while_no_bulk_work_ran_does_not_cut_the_rate() {
        let start = Instant::now();
        let mut c = Controller::new(config(), BulkWork::Write, start);
        cut_to_minimum(&mut c, start);
        let (cuts, _) = c.adjustments();
        // A second with no bulk work asking: whatever slowed the light work, it was not
        // bulk work, and the second counts as ten quiet intervals.
        let slow = Some(Duration::from_secs(1));
        c.adjust(start + Duration::from_secs(2), slow);
        assert_eq!(c.adjustments().0, cuts, "no cut");
        assert!(near(c.rate(), 16.0 * MIB + 10.0 * 1024.0 * MIB / 50.0));
        // Ten seconds idle: back at the maximum, with a bucket of one interval.
        cut_to_minimum(&mut c, start + Duration::from_secs(2));
        let later = start + Duration::from_secs(13);
        c.adjust(later, slow);
        assert_eq!(c.rate(), 1024.0 * MIB);
        assert_eq!(c.wait(later), Duration::ZERO);
        c.charge((102.4 * MIB) as usize + 1024 * 1024);
        assert!(c.wait(later) > Duration::ZERO);
    }

    #[test]
    fn reading_and_writing_have_a_bucket_each() {
        let budget = BulkBudget::new(config(), Arc::default());
        let mut waited = false;
        assert_eq!(budget.wait_now(BulkWork::Read, &mut waited), Duration::ZERO);
        // A read that leaves the read bucket in debt does not make writing wait.
        budget.charge(BulkWork::Read, 512 << 20);
        assert!(budget.wait_now(BulkWork::Read, &mut waited) > Duration::ZERO);
        assert!(waited, "the read's wait is counted");
        let mut write_waited = false;
        let write = budget.wait_now(BulkWork::Write, &mut write_waited);
        assert_eq!(write, Duration::ZERO);
        assert!(!write_waited);
        assert_eq!(budget.snapshot().waits, 1);
        let rates = budget.snapshot();
        assert_eq!(rates.read_bytes_per_sec, 1024.0 * MIB);
        assert_eq!(rates.write_bytes_per_sec, 1024.0 * MIB);
    }

    #[test]
    fn reading_starts_at_and_grows_back_to_its_own_maximum() {
        let start = Instant::now();
        let config = BudgetConfig {
            read_max_bytes_per_sec: 256.0 * MIB,
            ..config()
        };
        let mut read = Controller::new(config, BulkWork::Read, start);
        let mut write = Controller::new(config, BulkWork::Write, start);
        assert_eq!(read.rate(), 256.0 * MIB);
        assert_eq!(write.rate(), 1024.0 * MIB);
        // Its bucket holds one interval at its own rate.
        assert_eq!(read.wait(start), Duration::ZERO);
        read.charge((25.6 * MIB) as usize + 1);
        assert!(read.wait(start) > Duration::ZERO);
        cut_to_minimum(&mut read, start);
        cut_to_minimum(&mut write, start);
        assert_eq!(read.rate(), 16.0 * MIB);
        // Quiet for long enough, each climbs back to its own maximum and no further.
        let later = start + Duration::from_secs(60);
        read.adjust(later, None);
        write.adjust(later, None);
        assert_eq!(read.rate(), 256.0 * MIB);
        assert_eq!(write.rate(), 1024.0 * MIB);
    }

    #[test]
    fn a_read_in_debt_waits_for_the_debt_at_the_current_rate() {
        let start = Instant::now();
        let mut c = Controller::new(config(), BulkWork::Write, start);
        cut_to_minimum(&mut c, start);
        let now = start + Duration::from_secs(1);
        assert_eq!(c.wait(now), Duration::ZERO, "a full bucket admits at once");
        // 16 MiB/s with a bucket of 1.6 MiB: a 17.6 MiB read leaves 16 MiB of debt.
        c.charge((17.6 * MIB) as usize);
        let wait = c.wait(now);
        assert!(
            wait > Duration::from_millis(990) && wait <= Duration::from_millis(1000),
            "{wait:?}"
        );
        assert_eq!(c.wait(now + Duration::from_secs(1)), Duration::ZERO);
    }

    #[test]
    fn the_bucket_never_holds_more_than_one_interval_at_the_current_rate() {
        let start = Instant::now();
        let mut c = Controller::new(config(), BulkWork::Write, start);
        // An hour idle does not let a burst of an hour's worth through.
        let later = start + Duration::from_secs(3600);
        assert_eq!(c.wait(later), Duration::ZERO);
        c.charge((102.4 * MIB) as usize + 1024 * 1024);
        assert!(c.wait(later) > Duration::ZERO);
    }
}
