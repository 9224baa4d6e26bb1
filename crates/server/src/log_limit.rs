//! A bound on log lines that clients can cause (failed requests, failed TLS
//! handshakes): past `per_second` lines in one second the rest are left out and
//! counted, and the next line logged reports how many, so a client repeating a failure
//! cannot flood the log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Bounds log lines to `per_second`: lines past it in one second are left out and
/// counted, and the next line admitted reports the count.
pub struct LineLimiter {
    per_second: u64,
    second: AtomicU64,
    lines: AtomicU64,
    left_out: AtomicU64,
}

impl LineLimiter {
    pub fn new(per_second: u64) -> LineLimiter {
        LineLimiter {
            per_second,
            second: AtomicU64::new(0),
            lines: AtomicU64::new(0),
            left_out: AtomicU64::new(0),
        }
    }

    /// `Some(lines left out before this one)` when a line may be logged in second
    /// `now_s`; `None` when it is left out.
    fn admit(&self, now_s: u64) -> Option<u64> {
        if self.second.swap(now_s, Ordering::Relaxed) != now_s {
            self.lines.store(0, Ordering::Relaxed);
        }
        if self.lines.fetch_add(1, Ordering::Relaxed) < self.per_second {
            Some(self.left_out.swap(0, Ordering::Relaxed))
        } else {
            self.left_out.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

impl LineLimiter {
    /// [`LineLimiter::admit`] in the current second of the wall clock.
    pub fn admit_now(&self) -> Option<u64> {
        let now_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.admit(now_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_lines_past_the_bound_are_left_out_and_counted_in_the_next_second() {
        let lines = LineLimiter::new(3);
        let first: Vec<_> = (0..5).map(|_| lines.admit(100)).collect();
        assert_eq!(first, [Some(0), Some(0), Some(0), None, None]);
        assert_eq!(
            lines.admit(101),
            Some(2),
            "the next line reports the two left out"
        );
        assert_eq!(lines.admit(101), Some(0), "and only once");
    }
}
