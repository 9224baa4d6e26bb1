//! The budget of bulk work: catching up and heavy writing take what the disk can spare
//! and no more.
//!
//! Reads on the read threads (consumers catching up on data behind the tail) and
//! produce requests larger than 64 KiB (heavy writers) pass one token bucket whose rate
//! adapts to the latency of the work that must stay fast, the way a congestion
//! controller adapts a sending rate. The broker notes that latency in the
//! [`LatencySignal`](crate::timings::LatencySignal) of its stage timings
//! (`Timings::light_latency`): every small sync, and every small produce's wait from its
//! append to its data being durable. Every `interval` the
//! controller looks at the slowest of the interval: above `target` the rate halves
//! (never below `min`), otherwise it grows by a fiftieth of `max` (never above `max`).
//! Catching up and heavy writing therefore run at full speed on a quiet disk, and slow
//! down while they make light producers' syncs (and with them their acknowledgements
//! and every tail consumer's data) wait.
//!
//! The bucket allows a debt: a read is admitted once the bucket is not in debt and is
//! charged with what it read afterwards, so a large read is never starved by small
//! ones, and the debt it leaves makes the next read wait. The controller is plain code
//! over the time it is given ([`Controller`]); [`BulkBudget`] is the shell that reads
//! the clock and sleeps.

use crate::timings::Timings;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Additive increase: the rate climbs from nothing to its maximum in this many quiet
/// intervals (5 s at 100 ms).
const INCREASE_STEPS: f64 = 50.0;

/// The budget's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetConfig {
    /// The lowest rate, in bytes per second: catching up always progresses.
    pub min_bytes_per_sec: f64,
    /// The highest rate, and the rate on a quiet disk.
    pub max_bytes_per_sec: f64,
    /// The slowest small sync per interval that counts as fast.
    pub target: Duration,
    /// How often the rate is adjusted.
    pub interval: Duration,
    /// How long a catch-up read waits, before each disk read, for small syncs in
    /// progress to end (`crate::timings::SyncGate`); zero: never.
    pub read_sync_wait: Duration,
}

/// The token bucket and its rate controller, over time given by the caller.
#[derive(Debug)]
pub struct Controller {
    config: BudgetConfig,
    rate: f64,
    /// Bytes that may be read now; negative when in debt.
    tokens: f64,
    refilled: Instant,
    adjusted: Instant,
    decreases: u64,
    increases: u64,
}

impl Controller {
    /// A controller at full rate with a full bucket at `now`.
    pub fn new(config: BudgetConfig, now: Instant) -> Controller {
        let mut controller = Controller {
            config,
            rate: config.max_bytes_per_sec,
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

    /// Adjusts the rate to the interval's slowest light work (`None`: there was none,
    /// which is no sign of trouble).
    pub fn adjust(&mut self, now: Instant, slowest: Option<Duration>) {
        self.refill(now);
        self.adjusted = now;
        let config = &self.config;
        if slowest.is_some_and(|s| s > config.target) {
            self.rate = (self.rate / 2.0).max(config.min_bytes_per_sec);
            self.decreases += 1;
        } else if self.rate < config.max_bytes_per_sec {
            let step = config.max_bytes_per_sec / INCREASE_STEPS;
            self.rate = (self.rate + step).min(config.max_bytes_per_sec);
            self.increases += 1;
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
    pub rate_bytes_per_sec: f64,
    pub decreases: u64,
    pub increases: u64,
    /// Reads that had to wait for the budget.
    pub waits: u64,
}

/// The broker's bulk budget: the [`Controller`] behind a mutex, fed by the
/// flushers' small syncs.
pub struct BulkBudget {
    controller: Mutex<Controller>,
    read_sync_wait: Duration,
    waits: AtomicU64,
    /// Where the flushers report their small syncs.
    timings: Arc<Timings>,
}

impl BulkBudget {
    pub fn new(config: BudgetConfig, timings: Arc<Timings>) -> BulkBudget {
        BulkBudget {
            controller: Mutex::new(Controller::new(config, Instant::now())),
            read_sync_wait: config.read_sync_wait,
            waits: AtomicU64::new(0),
            timings,
        }
    }

    /// Waits until bulk work may start.
    pub async fn admit(&self) {
        let mut waited = false;
        loop {
            let wait = self.wait_now(&mut waited);
            if wait.is_zero() {
                return;
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// [`BulkBudget::admit`] for a thread of its own (the log cleaner's), which sleeps.
    pub fn admit_blocking(&self) {
        let mut waited = false;
        loop {
            let wait = self.wait_now(&mut waited);
            if wait.is_zero() {
                return;
            }
            std::thread::sleep(wait);
        }
    }

    /// How long to wait before bulk work may start (zero: go), adjusting the rate when
    /// an interval has passed; counts a caller's first wait. The wait is at most a short
    /// nap, so that a rate raised meanwhile takes effect.
    fn wait_now(&self, waited: &mut bool) -> Duration {
        let wait = {
            let now = Instant::now();
            let mut controller = self.controller.lock().expect("bulk budget lock");
            if controller.due(now) {
                controller.adjust(now, self.timings.light_latency.take());
            }
            controller.wait(now)
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

    /// Bulk work of `bytes` (read or written) was done.
    pub fn charge(&self, bytes: usize) {
        self.controller
            .lock()
            .expect("bulk budget lock")
            .charge(bytes);
    }

    pub fn snapshot(&self) -> BudgetSnapshot {
        let controller = self.controller.lock().expect("bulk budget lock");
        let (decreases, increases) = controller.adjustments();
        BudgetSnapshot {
            rate_bytes_per_sec: controller.rate(),
            decreases,
            increases,
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
        let mut c = Controller::new(config(), start);
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
        let mut c = Controller::new(config(), start);
        cut_to_minimum(&mut c, start);
        assert_eq!(c.rate(), 16.0 * MIB);
        c.adjust(
            start + Duration::from_millis(1100),
            Some(Duration::from_millis(2)),
        );
        let near = |rate: f64, expected: f64| (rate - expected).abs() < 1.0;
        assert!(near(c.rate(), 16.0 * MIB + 1024.0 * MIB / 50.0));
        c.adjust(start + Duration::from_millis(1200), None);
        assert!(near(c.rate(), 16.0 * MIB + 2.0 * 1024.0 * MIB / 50.0));
        for i in 13..80 {
            c.adjust(start + Duration::from_millis(100 * i), None);
        }
        assert_eq!(c.rate(), 1024.0 * MIB, "never above the maximum");
    }

    #[test]
    fn a_read_in_debt_waits_for_the_debt_at_the_current_rate() {
        let start = Instant::now();
        let mut c = Controller::new(config(), start);
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
        let mut c = Controller::new(config(), start);
        // An hour idle does not let a burst of an hour's worth through.
        let later = start + Duration::from_secs(3600);
        assert_eq!(c.wait(later), Duration::ZERO);
        c.charge((102.4 * MIB) as usize + 1024 * 1024);
        assert!(c.wait(later) > Duration::ZERO);
    }
}
