//! The broker-wide budget of request bytes (`request_bytes_in_flight_max`) for frames
//! larger than `limits::REQUEST_SMALL_FRAME_BYTES`.
//!
//! A large frame asks for its whole size once, after its first bytes have arrived, and
//! holds nothing else while it waits: no reader ever holds part of the budget while
//! waiting for more, so readers cannot wait on each other (with reservations taken in
//! steps, three 48 MiB frames could each hold a third of a 128 MiB budget and wait for
//! the rest until their deadlines). Waiters are not queued in order: whenever bytes come
//! back, every waiter tries again, so a 1 MiB frame is not held up behind a 100 MiB one
//! that does not fit yet. Small frames never ask: what a connection may hold for one is
//! part of its own cost (see `limits.rs`), so requests of light clients never wait here.
//!
//! How often a frame found the budget short and how long it waited is counted by its
//! [`BudgetProbe`] (`headway_request_budget_*` on `/metrics`).
//!
//! Thread-safe; shared by every connection through [`crate::call::ServerStats`].

use crate::probe::BudgetProbe;
use std::sync::Arc;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

pub struct RequestBudget {
    bytes: Arc<Semaphore>,
    bytes_max: usize,
    /// Woken whenever a reservation is released.
    released: Arc<Notify>,
    /// Times a reader found the budget short, and how long it waited.
    pub probe: BudgetProbe,
}

/// Bytes held from a [`RequestBudget`]; given back on drop.
pub struct Reserved {
    permit: Option<OwnedSemaphorePermit>,
    released: Arc<Notify>,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        // Bytes back first, then the waiters: each tries again and finds them.
        drop(self.permit.take());
        self.released.notify_waiters();
    }
}

impl RequestBudget {
    pub fn new(bytes_max: usize) -> RequestBudget {
        assert!(
            bytes_max <= u32::MAX as usize,
            "checked by BrokerConfig::validate"
        );
        RequestBudget {
            bytes: Arc::new(Semaphore::new(bytes_max)),
            bytes_max,
            released: Arc::new(Notify::new()),
            probe: BudgetProbe::default(),
        }
    }

    /// Reserves `bytes` (at most the budget), waiting while fewer are free.
    pub async fn reserve(&self, bytes: usize) -> Reserved {
        let wanted = bytes.min(self.bytes_max) as u32;
        // Counted once per reservation, observed when it is served or given up.
        let mut waiting = None;
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            // Registered before trying, so a release between the try and the wait
            // still wakes this waiter.
            released.as_mut().enable();
            if let Ok(permit) = Arc::clone(&self.bytes).try_acquire_many_owned(wanted) {
                return Reserved {
                    permit: Some(permit),
                    released: Arc::clone(&self.released),
                };
            }
            waiting.get_or_insert_with(|| self.probe.waiting());
            released.await;
        }
    }

    pub fn held(&self) -> usize {
        self.bytes_max - self.bytes.available_permits()
    }

    pub fn max(&self) -> usize {
        self.bytes_max
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_small_reservation_passes_a_large_waiter() {
        let budget = Arc::new(RequestBudget::new(100));
        let held = budget.reserve(60).await;
        // A waiter for 80 cannot be served while 60 are held...
        let large = tokio::spawn({
            let budget = Arc::clone(&budget);
            async move { budget.reserve(80).await }
        });
        while budget.probe.exhausted() == 0 {
            tokio::task::yield_now().await;
        }
        // ...but 30 can, at once.
        let small = tokio::time::timeout(Duration::from_secs(10), budget.reserve(30))
            .await
            .expect("a small reservation is not queued behind a large waiter");
        assert_eq!(budget.held(), 90);
        drop((held, small));
        let large = tokio::time::timeout(Duration::from_secs(10), large)
            .await
            .expect("the large waiter is served once bytes come back")
            .unwrap();
        assert_eq!(budget.held(), 80);
        assert_eq!(
            (budget.probe.exhausted(), budget.probe.waits()),
            (1, 1),
            "only the large reservation found the budget short, and its wait ended"
        );
        drop(large);
        assert_eq!(budget.held(), 0);
    }

    #[tokio::test]
    async fn a_reservation_larger_than_the_budget_takes_all_of_it() {
        let budget = RequestBudget::new(100);
        let all = budget.reserve(1_000).await;
        assert_eq!(budget.held(), 100);
        drop(all);
        assert_eq!(budget.held(), 0);
    }
}
