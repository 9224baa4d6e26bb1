//! The poll driven by a scripted look: each look reports its round to the test and may
//! fire a wake-up itself (a change that lands while the poll looks). The waits that must
//! end early have an hour's deadline and a minute's guard, so a slow machine cannot
//! make them pass by reaching the deadline; the waits that must last to the deadline
//! assert what was looked at, not how fast.

use super::*;
use crate::outbound::OutboundBudget;
use headway_base::Offset;
use std::sync::Arc;
use tokio::sync::mpsc;

/// What a look may do while it looks.
type During = Box<dyn FnMut(usize) + Send>;

/// A look that finds `10 * round` bytes and is done at round `done_at` (counted from 1);
/// its find is the round that answered.
struct Driven {
    round: usize,
    done_at: usize,
    /// The round and the `max_bytes` of each look, to the test.
    rounds: mpsc::UnboundedSender<(usize, usize)>,
    during: During,
}

impl Look for Driven {
    type Found = usize;

    async fn look(&mut self, max_bytes: usize) -> Looked<usize> {
        self.round += 1;
        let _ = self.rounds.send((self.round, max_bytes));
        (self.during)(self.round);
        Looked {
            found: self.round,
            bytes: 10 * self.round,
            done: self.round >= self.done_at,
        }
    }
}

fn driven(done_at: usize, during: During) -> (Driven, mpsc::UnboundedReceiver<(usize, usize)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let look = Driven {
        round: 0,
        done_at,
        rounds: tx,
        during,
    };
    (look, rx)
}

fn state(high_watermark: i64) -> DurableState {
    DurableState {
        high_watermark: Offset::new(high_watermark),
        failed: false,
        first_unstable_offset: None,
        completing_first: None,
        synced: Offset::new(high_watermark),
    }
}

fn budget() -> Arc<ConnectionBudget> {
    Arc::new(ConnectionBudget::new(1 << 20, OutboundBudget::new(1 << 20)))
}

const HOUR: Duration = Duration::from_secs(3600);
const GUARD: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_produce_while_it_waits_brings_enough_at_the_second_look() {
    let (watch_tx, watch_rx) = watch::channel(state(0));
    let (_shutdown_tx, shutdown) = watch::channel(false);
    let (mut look, mut rounds) = driven(2, Box::new(|_| {}));
    let budget = budget();
    let poll = tokio::spawn({
        let budget = Arc::clone(&budget);
        async move {
            let mut wakes = Wakes::new(vec![watch_rx]);
            let deadline = Instant::now() + HOUR;
            run(&budget, 1000, deadline, shutdown, &mut look, &mut wakes).await
        }
    });
    assert_eq!(rounds.recv().await, Some((1, 1000)));
    watch_tx.send(state(5)).unwrap();
    let polled = tokio::time::timeout(GUARD, poll).await.unwrap().unwrap();
    assert_eq!(polled.found, 2);
    // The answer keeps what it read of its reservation; the first round gave its back.
    assert_eq!(polled.reserved.bytes(), 20);
    assert_eq!(budget.held(), 20);
    drop(polled);
    assert_eq!(budget.held(), 0);
}

#[tokio::test]
async fn a_change_while_it_looks_is_not_missed() {
    let (watch_tx, watch_rx) = watch::channel(state(0));
    let released = Arc::new(Notify::new());
    // The first look moves a watch, the second releases records: each wakes the wait
    // that follows it at once.
    let during: During = Box::new({
        let released = Arc::clone(&released);
        move |round| match round {
            1 => watch_tx.send(state(5)).unwrap(),
            2 => released.notify_waiters(),
            _ => {}
        }
    });
    let (mut look, _rounds) = driven(3, during);
    let (_shutdown_tx, shutdown) = watch::channel(false);
    let budget = budget();
    let mut wakes = Wakes::new(vec![watch_rx]).or_released(&released);
    let deadline = Instant::now() + HOUR;
    let polled = run(&budget, 1000, deadline, shutdown, &mut look, &mut wakes);
    let polled = tokio::time::timeout(GUARD, polled).await.unwrap();
    assert_eq!(polled.found, 3);
}

#[tokio::test]
async fn at_the_deadline_it_answers_with_what_it_has() {
    let (_shutdown_tx, shutdown) = watch::channel(false);
    let (mut look, _rounds) = driven(usize::MAX, Box::new(|_| {}));
    let budget = budget();
    let mut wakes = Wakes::new(Vec::new());
    let wait = Duration::from_millis(100);
    let started = Instant::now();
    let polled = run(
        &budget,
        1000,
        started + wait,
        shutdown,
        &mut look,
        &mut wakes,
    )
    .await;
    // One look, the wait to the deadline, and one more look that answers.
    assert!(started.elapsed() >= wait);
    assert_eq!(polled.found, 2);
    assert_eq!(polled.reserved.bytes(), 20);
}

#[tokio::test]
async fn a_wake_that_brings_nothing_does_not_end_the_wait() {
    let released = Arc::new(Notify::new());
    let during: During = Box::new({
        let released = Arc::clone(&released);
        move |round| {
            if round == 1 {
                released.notify_waiters();
            }
        }
    });
    let (mut look, _rounds) = driven(usize::MAX, during);
    let (_shutdown_tx, shutdown) = watch::channel(false);
    let budget = budget();
    let mut wakes = Wakes::new(Vec::new()).or_released(&released);
    let wait = Duration::from_secs(1);
    let started = Instant::now();
    let polled = run(
        &budget,
        1000,
        started + wait,
        shutdown,
        &mut look,
        &mut wakes,
    )
    .await;
    // The release woke a second look, which found too little; the third came at the
    // deadline.
    assert!(started.elapsed() >= wait);
    assert_eq!(polled.found, 3);
}

#[tokio::test]
async fn a_shutdown_ends_the_wait() {
    let (shutdown_tx, shutdown) = watch::channel(false);
    let (mut look, mut rounds) = driven(usize::MAX, Box::new(|_| {}));
    let budget = budget();
    let poll = tokio::spawn({
        let budget = Arc::clone(&budget);
        async move {
            let mut wakes = Wakes::new(Vec::new());
            let deadline = Instant::now() + HOUR;
            run(&budget, 1000, deadline, shutdown, &mut look, &mut wakes).await
        }
    });
    assert_eq!(rounds.recv().await.map(|(round, _)| round), Some(1));
    shutdown_tx.send(true).unwrap();
    let polled = tokio::time::timeout(GUARD, poll).await.unwrap().unwrap();
    assert_eq!(polled.found, 2);
}
