//! The outbound budget: bytes of fetch responses read from the log and not yet written to
//! the client's socket.
//!
//! A fetch reserves what it may read before it reads, from its connection's budget
//! (`connection_outbound_bytes_max`) and from the broker-wide one
//! (`outbound_bytes_max`), and reads no more than it got. The [`Reservation`] travels
//! with the encoded response to the connection's writer and is released when the
//! writer has handed the bytes to the socket. So a client that stops reading its socket
//! holds at most its connection's budget (plus one batch, since the first batch of a
//! response is always whole), however much is produced meanwhile.
//!
//! When the broker-wide budget runs short a fetch takes what is left, down to
//! [`limits::OUTBOUND_BYTES_MIN`], and reads less; it waits only when even that is not
//! left. Stuck clients therefore shrink the others' responses before they can stall
//! them.
//!
//! Both budgets count how often they were found short and how long fetches waited
//! ([`BudgetProbe`]: `headway_outbound_budget_*` broker-wide,
//! `headway_connection_outbound_budget_*` for all connections' own budgets together).

use crate::probe::BudgetProbe;
use headway_base::limits;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The broker-wide budget.
pub struct OutboundBudget {
    bytes: Arc<Semaphore>,
    max: usize,
    /// This budget short: the fetch read less, or waited for the minimum.
    probe: BudgetProbe,
    /// A connection's own budget short (its earlier responses not yet written), for
    /// every connection drawing on this budget.
    connections_probe: BudgetProbe,
}

impl OutboundBudget {
    pub fn new(max: usize) -> Arc<OutboundBudget> {
        Arc::new(OutboundBudget {
            bytes: Arc::new(Semaphore::new(max)),
            max,
            probe: BudgetProbe::default(),
            connections_probe: BudgetProbe::default(),
        })
    }

    /// The broker-wide budget's counts.
    pub fn probe(&self) -> &BudgetProbe {
        &self.probe
    }

    /// The connections' own budgets' counts, together.
    pub fn connections_probe(&self) -> &BudgetProbe {
        &self.connections_probe
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Bytes reserved now, across every connection.
    pub fn held(&self) -> usize {
        self.max.saturating_sub(self.bytes.available_permits())
    }
}

/// One connection's budget, drawing on the broker-wide one.
pub struct ConnectionBudget {
    bytes: Arc<Semaphore>,
    max: usize,
    broker: Arc<OutboundBudget>,
}

/// Bytes reserved for one response; released when dropped.
#[derive(Debug)]
pub struct Reservation {
    connection: OwnedSemaphorePermit,
    broker: OwnedSemaphorePermit,
}

impl ConnectionBudget {
    pub fn new(max: usize, broker: Arc<OutboundBudget>) -> ConnectionBudget {
        let max = max.clamp(limits::OUTBOUND_BYTES_MIN, broker.max);
        ConnectionBudget {
            bytes: Arc::new(Semaphore::new(max)),
            max,
            broker,
        }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Bytes this connection holds now.
    pub fn held(&self) -> usize {
        self.max.saturating_sub(self.bytes.available_permits())
    }

    /// Reserves up to `want` bytes (at least [`limits::OUTBOUND_BYTES_MIN`], at most the
    /// connection's budget); fewer when the broker-wide budget is short. Waits only
    /// while the connection's own earlier responses, or the minimum broker-wide, are
    /// not available.
    pub async fn reserve(&self, want: usize) -> Reservation {
        let want = want.clamp(limits::OUTBOUND_BYTES_MIN, self.max);
        let mut connection = self
            .broker
            .connections_probe
            .acquire(&self.bytes, permits(want))
            .await;
        let shared = &self.broker.bytes;
        let take = want.min(shared.available_permits().max(limits::OUTBOUND_BYTES_MIN));
        let broker = match Arc::clone(shared).try_acquire_many_owned(permits(take)) {
            Ok(permit) => {
                if take < want {
                    self.broker.probe.short();
                }
                permit
            }
            Err(_) => {
                let _waiting = self.broker.probe.waiting();
                Arc::clone(shared)
                    .acquire_many_owned(permits(limits::OUTBOUND_BYTES_MIN))
                    .await
                    .expect(NEVER_CLOSED)
            }
        };
        let got = broker.num_permits();
        if got < want {
            drop(connection.split(want - got));
        }
        Reservation { connection, broker }
    }
}

impl Reservation {
    /// Bytes reserved.
    pub fn bytes(&self) -> usize {
        self.broker.num_permits()
    }

    /// Gives back what a read did not use, keeping `used` bytes (or all, if more).
    pub fn shrink_to(&mut self, used: usize) {
        let extra = self.bytes().saturating_sub(used);
        if extra > 0 {
            drop(self.connection.split(extra));
            drop(self.broker.split(extra));
        }
    }
}

const NEVER_CLOSED: &str = "outbound budgets are never closed";

fn permits(bytes: usize) -> u32 {
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: usize = limits::OUTBOUND_BYTES_MIN;

    #[tokio::test]
    async fn a_reservation_is_capped_by_the_connection_and_released_on_drop() {
        let broker = OutboundBudget::new(100 * MIN);
        let conn = ConnectionBudget::new(10 * MIN, Arc::clone(&broker));
        let mut r = conn.reserve(50 * MIN).await;
        assert_eq!(r.bytes(), 10 * MIN);
        assert_eq!((conn.held(), broker.held()), (10 * MIN, 10 * MIN));
        r.shrink_to(3 * MIN);
        assert_eq!((conn.held(), broker.held()), (3 * MIN, 3 * MIN));
        r.shrink_to(5 * MIN);
        assert_eq!(r.bytes(), 3 * MIN, "shrinking never grows");
        drop(r);
        assert_eq!((conn.held(), broker.held()), (0, 0));
        let small = conn.reserve(1).await;
        assert_eq!(small.bytes(), MIN, "at least the minimum");
        let (shared, own) = (broker.probe(), broker.connections_probe());
        assert_eq!((shared.exhausted(), own.exhausted()), (0, 0), "never short");
    }

    #[tokio::test]
    async fn a_full_connection_budget_counts_the_wait_for_its_earlier_responses() {
        let broker = OutboundBudget::new(100 * MIN);
        let conn = ConnectionBudget::new(10 * MIN, Arc::clone(&broker));
        let held = conn.reserve(10 * MIN).await;
        let mut next = std::pin::pin!(conn.reserve(MIN));
        assert!(
            futures::poll!(next.as_mut()).is_pending(),
            "the connection's budget is full"
        );
        assert_eq!(broker.connections_probe().exhausted(), 1);
        assert_eq!(broker.connections_probe().waits(), 0, "still waiting");
        drop(held);
        assert_eq!(next.await.bytes(), MIN);
        assert_eq!(broker.connections_probe().waits(), 1);
        assert_eq!(
            broker.probe().exhausted(),
            0,
            "the broker-wide budget was never short"
        );
    }

    #[tokio::test]
    async fn a_short_broker_budget_shrinks_reservations_instead_of_blocking() {
        let broker = OutboundBudget::new(12 * MIN);
        let a = ConnectionBudget::new(10 * MIN, Arc::clone(&broker));
        let b = ConnectionBudget::new(10 * MIN, Arc::clone(&broker));
        let held_by_a = a.reserve(10 * MIN).await;
        let got_by_b = b.reserve(10 * MIN).await;
        assert_eq!(got_by_b.bytes(), 2 * MIN);
        assert_eq!(
            (broker.probe().exhausted(), broker.probe().waits()),
            (1, 0),
            "short, but a smaller answer instead of a wait"
        );
        assert_eq!(b.held(), 2 * MIN, "the connection keeps only what it got");
        assert_eq!(broker.held(), 12 * MIN);
        // Nothing left: a third reservation waits for the minimum.
        let c = ConnectionBudget::new(10 * MIN, Arc::clone(&broker));
        assert!(
            futures::FutureExt::now_or_never(c.reserve(MIN)).is_none(),
            "no bytes left, so it waits"
        );
        assert_eq!(
            (broker.probe().exhausted(), broker.probe().waits()),
            (2, 1),
            "the wait given up is observed too"
        );
        drop(held_by_a);
        let got_by_c = c.reserve(10 * MIN).await;
        assert_eq!(got_by_c.bytes(), 10 * MIN);
        drop((got_by_b, got_by_c));
        assert_eq!(broker.held(), 0);
    }
}
