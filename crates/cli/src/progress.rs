//! Progress lines and the final summary of long runs, on stderr so that stdout stays
//! the data. On a terminal the line is rewritten in place; otherwise a line per interval.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

const INTERVAL: Duration = Duration::from_secs(1);

pub struct Progress {
    verb: &'static str,
    started: Instant,
    last: Instant,
    enabled: bool,
    terminal: bool,
}

impl Progress {
    pub fn new(verb: &'static str, enabled: bool) -> Progress {
        let now = Instant::now();
        Progress {
            verb,
            started: now,
            last: now,
            enabled,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    /// Prints a progress line if an interval has passed since the last one.
    pub fn tick(&mut self, records: u64, bytes: u64) {
        if !self.enabled || self.last.elapsed() < INTERVAL {
            return;
        }
        self.last = Instant::now();
        let line = self.line(records, bytes);
        let mut err = std::io::stderr().lock();
        let _ = if self.terminal {
            write!(err, "\r{line}  ")
        } else {
            writeln!(err, "{line}")
        };
    }

    fn line(&self, records: u64, bytes: u64) -> String {
        let seconds = self.started.elapsed().as_secs_f64().max(1e-9);
        format!(
            "{} {records} records, {:.1} MB, {:.0} records/s, {:.1} MB/s",
            self.verb,
            bytes as f64 / 1e6,
            records as f64 / seconds,
            bytes as f64 / 1e6 / seconds
        )
    }

    /// The final summary line (always printed): what succeeded, and, when given, how
    /// many records failed.
    pub fn finish(&self, records: u64, bytes: u64, failed: Option<u64>) {
        let mut err = std::io::stderr().lock();
        if self.enabled && self.terminal {
            let _ = writeln!(err);
        }
        let failed = failed.map_or(String::new(), |n| format!(", {n} failed"));
        let _ = writeln!(
            err,
            "{} in {:.2} s{failed}",
            self.line(records, bytes),
            self.started.elapsed().as_secs_f64()
        );
    }
}
