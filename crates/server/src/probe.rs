//! How often a budget ran out and how long its callers waited: one [`BudgetProbe`] per
//! budget (request bytes, outbound bytes broker-wide and per connection, the read share,
//! connection slots), owned by the server's [`crate::call::ServerStats`], so each
//! broker instance counts its own. `/metrics` shows each as
//! `headway_<budget>_exhausted_total` and the histogram `headway_<budget>_wait_seconds`
//! (`docs/isolation.md`).
//!
//! Exhausted means a caller found less than it asked for. Most callers then wait, and the
//! wait is observed when it ends, or when the waiting caller gives up (a connection
//! closed, a deadline); a fetch that finds the broker-wide outbound budget short reads
//! less instead, so that budget can be exhausted more often than it is waited for.
//!
//! Thread-safe: the counters are atomics shared by clones.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One budget's exhaustion counter and wait histogram.
#[derive(Clone)]
pub struct BudgetProbe {
    exhausted: Counter,
    wait: Histogram,
    /// Waits observed (the histogram's count, which it shows only to its own tests).
    waits: Counter,
}

/// A caller waiting for a budget; the wait is observed when this is dropped.
#[must_use = "the wait is observed when this is dropped"]
pub struct Waiting<'a> {
    probe: &'a BudgetProbe,
    started: Instant,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.probe
            .wait
            .observe(self.started.elapsed().as_secs_f64());
        self.probe.waits.inc();
    }
}

impl Default for BudgetProbe {
    fn default() -> Self {
        BudgetProbe {
            exhausted: Counter::default(),
            // 100 µs to 52 s, doubling.
            wait: Histogram::new(exponential_buckets(1e-4, 2.0, 20)),
            waits: Counter::default(),
        }
    }
}

impl BudgetProbe {
    /// A caller found the budget short and does not wait (it takes less).
    pub fn short(&self) {
        self.exhausted.inc();
    }

    /// A caller found the budget short and waits until the returned guard is dropped.
    pub fn waiting(&self) -> Waiting<'_> {
        self.exhausted.inc();
        Waiting {
            probe: self,
            started: Instant::now(),
        }
    }

    /// Takes `permits` from `semaphore`, counted as exhausted (and timed) when they are
    /// not free at once.
    pub async fn acquire(&self, semaphore: &Arc<Semaphore>, permits: u32) -> OwnedSemaphorePermit {
        if let Ok(permit) = Arc::clone(semaphore).try_acquire_many_owned(permits) {
            return permit;
        }
        let _waiting = self.waiting();
        Arc::clone(semaphore)
            .acquire_many_owned(permits)
            .await
            .expect("budgets' semaphores are never closed")
    }

    /// Times the budget was found short.
    pub fn exhausted(&self) -> u64 {
        self.exhausted.get()
    }

    /// Waits observed so far.
    pub fn waits(&self) -> u64 {
        self.waits.get()
    }

    /// Registers `<name>_exhausted` (a counter, `_total` in the text) and
    /// `<name>_wait_seconds`; the help texts name the `budget` and `who` waits for it.
    pub fn register(&self, registry: &mut Registry, name: &str, budget: &str, who: &str) {
        registry.register(
            format!("{name}_exhausted"),
            format!("Times the {budget} was found short"),
            self.exhausted.clone(),
        );
        registry.register(
            format!("{name}_wait_seconds"),
            format!("How long {who} waited for the {budget}"),
            self.wait.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_semaphore_counts_one_exhaustion_and_one_wait() {
        let probe = BudgetProbe::default();
        let semaphore = Arc::new(Semaphore::new(2));
        let held = probe.acquire(&semaphore, 2).await;
        assert_eq!((probe.exhausted(), probe.waits()), (0, 0), "free: no wait");
        let waiter = {
            let (probe, semaphore) = (probe.clone(), Arc::clone(&semaphore));
            tokio::spawn(async move { probe.acquire(&semaphore, 1).await })
        };
        while probe.exhausted() == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(probe.waits(), 0, "observed when the wait ends");
        drop(held);
        let permit = tokio::time::timeout(std::time::Duration::from_secs(30), waiter)
            .await
            .expect("the waiter gets the permit back")
            .unwrap();
        assert_eq!(permit.num_permits(), 1);
        assert_eq!((probe.exhausted(), probe.waits()), (1, 1));
    }

    #[test]
    fn a_short_budget_without_a_wait_is_counted_but_not_timed() {
        let probe = BudgetProbe::default();
        probe.short();
        drop(probe.waiting());
        assert_eq!((probe.exhausted(), probe.waits()), (2, 1));
        let mut registry = Registry::with_prefix("headway");
        probe.register(&mut registry, "read_share", "read share", "reads");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("headway_read_share_exhausted_total 2"),
            "{text}"
        );
        assert!(
            text.contains("headway_read_share_wait_seconds_count 1"),
            "{text}"
        );
    }
}
