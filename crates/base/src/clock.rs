//! Time, from one place: [`now_ms`] reads the wall clock in milliseconds since the Unix
//! epoch (the unit of every Kafka timestamp), and a [`Clock`] hands the same reading to
//! code that a test wants to drive instead.
//!
//! A [`Clock`] is either the system clock or a manual one whose time only moves when a
//! test sets or advances it. Clones share their time, so a test keeps one clone and
//! moves it while the code under test holds another. Thread-safe: a manual clock is an
//! atomic, and cloning a clock is cheap.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Milliseconds since the Unix epoch, the unit of every Kafka timestamp. A clock set
/// before the epoch reads 0.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Where a component reads the time: the system clock in production, a manual clock
/// in tests.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    /// `None` for the system clock; the shared milliseconds of a manual one.
    manual_ms: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// The wall clock ([`now_ms`]).
    pub fn system() -> Clock {
        Clock { manual_ms: None }
    }

    /// A clock that reads `start_ms` until [`Clock::set_ms`] or [`Clock::advance_ms`]
    /// moves it.
    pub fn manual(start_ms: i64) -> Clock {
        Clock {
            manual_ms: Some(Arc::new(AtomicI64::new(start_ms))),
        }
    }

    /// Milliseconds since the Unix epoch, by this clock.
    pub fn time_ms(&self) -> i64 {
        match &self.manual_ms {
            Some(ms) => ms.load(Ordering::Acquire),
            None => now_ms(),
        }
    }

    /// Sets a manual clock (and every clone of it) to `ms`. Panics on the system clock,
    /// which no one may move.
    pub fn set_ms(&self, ms: i64) {
        self.manual_ms().store(ms, Ordering::Release);
    }

    /// Moves a manual clock (and every clone of it) `by_ms` forward. Panics on the
    /// system clock.
    pub fn advance_ms(&self, by_ms: i64) {
        self.manual_ms().fetch_add(by_ms, Ordering::AcqRel);
    }

    fn manual_ms(&self) -> &AtomicI64 {
        self.manual_ms
            .as_deref()
            .expect("only a manual clock can be moved")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_its_clones_follow() {
        let clock = Clock::manual(1_000);
        let held = clock.clone();
        assert_eq!(held.time_ms(), 1_000);
        clock.advance_ms(250);
        assert_eq!(held.time_ms(), 1_250);
        clock.set_ms(7);
        assert_eq!(held.time_ms(), 7);
    }

    #[test]
    fn the_system_clock_reads_the_wall_clock() {
        let before = now_ms();
        let read = Clock::system().time_ms();
        assert!(read >= before && read <= now_ms());
    }

    #[test]
    #[should_panic(expected = "only a manual clock")]
    fn the_system_clock_cannot_be_moved() {
        Clock::system().advance_ms(1);
    }
}
