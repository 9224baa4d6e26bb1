//! The long poll Fetch and ShareFetch share: look at what is there, and while that is
//! not enough and the wait has not run out, wait for something that may change it.
//!
//! A poll is given what it reads (a [`Look`]: Fetch reads its partitions' batches,
//! ShareFetch acquires records for a member) and what wakes it ([`Wakes`]: the
//! partitions' watches, which move with the high watermark and the last stable offset,
//! and for a share fetch the share coordinator's release notice, sent when records go
//! back to the group because one was released or its lock expired). Each round marks
//! what wakes it as seen before it looks, so a change that lands during the look wakes
//! the wait that follows instead of being missed. A round ends the poll when its look
//! says so (enough found, or an error to answer), when the deadline has passed, or when
//! the broker is shutting down; otherwise the poll waits for a wake-up, the deadline or
//! the shutdown, and looks again. A wake-up that brings nothing only starts another
//! round: the poll still ends at its deadline.
//!
//! Each look reserves outbound bytes from the connection's budget
//! ([`crate::outbound`]) first and reads no more than it got; the answer keeps the
//! reservation, shrunk to what was read, until the writer has written it, and a round
//! that does not answer gives it back before it waits. No lock is held while a poll
//! looks or waits; a poll is one task's future and shares nothing with other polls.

use crate::call::shutting_down;
use crate::outbound::{ConnectionBudget, Reservation};
use futures::future::select_all;
use headway_base::Offset;
use headway_broker::partition::DurableState;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::sync::futures::Notified;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// What a poll reads, once per round.
pub trait Look {
    /// What one look finds (the answer's partitions).
    type Found;

    /// Looks once, reading at most `max_bytes` bytes of records.
    fn look(&mut self, max_bytes: usize) -> impl Future<Output = Looked<Self::Found>> + Send;
}

/// What one look found.
pub struct Looked<T> {
    pub found: T,
    /// Bytes of records in `found`: what the answer's outbound reservation keeps.
    pub bytes: usize,
    /// The poll answers now: enough was found, or an error is to be answered.
    pub done: bool,
}

/// A poll's answer: the last look's find, its outbound reservation, and where the
/// poll's time went.
pub struct Polled<T> {
    pub found: T,
    /// The outbound bytes the answer holds until it is written.
    pub reserved: Reservation,
    /// Time spent waiting for a wake-up.
    pub waited: Duration,
    /// Time spent looking (not counting the wait for outbound bytes).
    pub looked: Duration,
}

/// What wakes a waiting poll: a move of any of its partitions' watches (or, for a
/// follower's fetch, of their log ends), or a notice on the release [`Notify`] when it
/// has one.
pub struct Wakes<'a> {
    watches: Vec<watch::Receiver<DurableState>>,
    appends: Vec<watch::Receiver<Offset>>,
    released: Option<&'a Notify>,
}

impl<'a> Wakes<'a> {
    /// Wakes on a move of any of `watches` (`Partition::watch`).
    pub fn new(watches: Vec<watch::Receiver<DurableState>>) -> Wakes<'a> {
        Wakes {
            watches,
            appends: Vec::new(),
            released: None,
        }
    }

    /// Wakes at an append to any of the partitions `appends` watch
    /// (`Partition::watch_appends`): a follower copies past the high watermark.
    pub fn on_appends(appends: Vec<watch::Receiver<Offset>>) -> Wakes<'a> {
        Wakes {
            watches: Vec::new(),
            appends,
            released: None,
        }
    }

    /// Also wakes on a notice on `released` (sent with `notify_waiters`).
    pub fn or_released(self, released: &'a Notify) -> Wakes<'a> {
        Wakes {
            released: Some(released),
            ..self
        }
    }

    /// Marks every watch's current state as seen and registers for the next release
    /// notice, now; the future completes at the first change after this call.
    fn armed(&mut self) -> impl Future<Output = ()> + Send + '_ {
        self.watches.iter_mut().for_each(|w| {
            w.borrow_and_update();
        });
        self.appends.iter_mut().for_each(|w| {
            w.borrow_and_update();
        });
        let released: Option<Pin<Box<Notified<'a>>>> = self.released.map(|notify| {
            let mut notified = Box::pin(notify.notified());
            notified.as_mut().enable();
            notified
        });
        let (watches, appends) = (&mut self.watches, &mut self.appends);
        async move {
            let moved = async {
                if watches.is_empty() && appends.is_empty() {
                    std::future::pending::<()>().await;
                }
                type Change<'w> = Pin<Box<dyn Future<Output = bool> + Send + 'w>>;
                let durable = watches
                    .iter_mut()
                    .map(|w| Box::pin(async { w.changed().await.is_ok() }) as Change<'_>);
                let ends = appends
                    .iter_mut()
                    .map(|w| Box::pin(async { w.changed().await.is_ok() }) as Change<'_>);
                let _ = select_all(durable.chain(ends)).await;
            };
            match released {
                None => moved.await,
                Some(released) => {
                    tokio::select! {
                        _ = moved => {}
                        _ = released => {}
                    }
                }
            }
        }
    }
}

/// Polls until `look` is done, `deadline` passes or `shutdown` turns true; each look
/// reads at most `max_bytes` and no more than `budget` lends it.
pub async fn run<L: Look>(
    budget: &ConnectionBudget,
    max_bytes: usize,
    deadline: Instant,
    mut shutdown: watch::Receiver<bool>,
    look: &mut L,
    wakes: &mut Wakes<'_>,
) -> Polled<L::Found> {
    let (mut waited, mut looked) = (Duration::ZERO, Duration::ZERO);
    loop {
        let wake = wakes.armed();
        let mut reserved = budget.reserve(max_bytes).await;
        let looking = Instant::now();
        let round = look.look(max_bytes.min(reserved.bytes())).await;
        looked += looking.elapsed();
        if round.done || Instant::now() >= deadline || *shutdown.borrow() {
            reserved.shrink_to(round.bytes);
            return Polled {
                found: round.found,
                reserved,
                waited,
                looked,
            };
        }
        drop(reserved);
        let waiting = Instant::now();
        tokio::select! {
            _ = wake => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = shutting_down(&mut shutdown) => {}
        }
        waited += waiting.elapsed();
    }
}

#[cfg(test)]
mod tests;
