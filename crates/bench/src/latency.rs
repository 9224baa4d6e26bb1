//! Latency recording: an HDR histogram for the whole run plus one coarser histogram per
//! second of the run, so a report can show both the percentiles and how latency moved
//! over time.
//!
//! Values are recorded in microseconds and reported in milliseconds. A [`Recorder`] is
//! not thread-safe; tasks that share one wrap it in a mutex (the critical section is a
//! few array increments), and per-consumer recorders are merged at the end.

use serde::{Deserialize, Serialize};
use std::time::Instant;

type Histogram = hdrhistogram::Histogram<u64>;

/// Largest value a histogram holds (one hour in µs); larger values are clamped to it.
const VALUE_US_MAX: u64 = 3_600_000_000;
/// Precision of the run-wide histogram: 3 significant digits (0.1 %).
const TOTAL_SIGFIG: u8 = 3;
/// Precision of the per-second histograms: 2 digits keep each one about 25 KB, so a
/// ten-minute series stays under 15 MB.
const SERIES_SIGFIG: u8 = 2;
/// The series stops growing after this many seconds (later values land in the last
/// second); every scenario is bounded well below it.
const SERIES_SECONDS_MAX: usize = 3600;

fn histogram(sigfig: u8) -> Histogram {
    Histogram::new_with_bounds(1, VALUE_US_MAX, sigfig).expect("valid histogram bounds")
}

/// Percentiles of one set of latencies, in milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// One second of a latency series (`t` is the second since the run started).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LatencyPoint {
    pub t: u64,
    pub count: u64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

pub struct Recorder {
    origin: Instant,
    /// Values recorded before this go into the series only, not the run's totals
    /// (a warm-up: JIT compilation, page cache, connections settling).
    counted_from: Instant,
    total: Histogram,
    series: Vec<Histogram>,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn summarize(h: &Histogram) -> LatencySummary {
    if h.is_empty() {
        return LatencySummary::default();
    }
    LatencySummary {
        count: h.len(),
        mean: h.mean() / 1000.0,
        p50: ms(h.value_at_quantile(0.50)),
        p90: ms(h.value_at_quantile(0.90)),
        p99: ms(h.value_at_quantile(0.99)),
        p999: ms(h.value_at_quantile(0.999)),
        max: ms(h.max()),
    }
}

impl Recorder {
    /// A recorder whose series starts at `origin` (the start of the run).
    pub fn new(origin: Instant) -> Recorder {
        Recorder::with_warmup(origin, std::time::Duration::ZERO)
    }

    /// A recorder whose totals leave out the first `warmup` of the run.
    pub fn with_warmup(origin: Instant, warmup: std::time::Duration) -> Recorder {
        Recorder {
            origin,
            counted_from: origin + warmup,
            total: histogram(TOTAL_SIGFIG),
            series: Vec::new(),
        }
    }

    pub fn record_us(&mut self, value_us: u64) {
        let value_us = value_us.clamp(1, VALUE_US_MAX);
        let now = Instant::now();
        if now >= self.counted_from {
            self.total.saturating_record(value_us);
        }
        let second = ((now - self.origin).as_secs() as usize).min(SERIES_SECONDS_MAX - 1);
        while self.series.len() <= second {
            self.series.push(histogram(SERIES_SIGFIG));
        }
        self.series[second].saturating_record(value_us);
    }

    pub fn merge(&mut self, other: &Recorder) {
        self.total.add(&other.total).expect("same histogram bounds");
        while self.series.len() < other.series.len() {
            self.series.push(histogram(SERIES_SIGFIG));
        }
        for (mine, theirs) in self.series.iter_mut().zip(&other.series) {
            mine.add(theirs).expect("same histogram bounds");
        }
    }

    pub fn summary(&self) -> LatencySummary {
        summarize(&self.total)
    }

    pub fn series(&self) -> Vec<LatencyPoint> {
        self.series
            .iter()
            .enumerate()
            .map(|(t, h)| {
                let s = summarize(h);
                LatencyPoint {
                    t: t as u64,
                    count: s.count,
                    p50: s.p50,
                    p99: s.p99,
                    max: s.max,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_merge() {
        let origin = Instant::now();
        let mut a = Recorder::new(origin);
        let mut b = Recorder::new(origin);
        for v in 1..=1000 {
            a.record_us(v * 1000);
        }
        b.record_us(5_000_000);
        a.merge(&b);
        let s = a.summary();
        assert_eq!(s.count, 1001);
        assert!((s.p50 - 500.0).abs() < 2.0, "p50 {}", s.p50);
        assert!((s.max - 5000.0).abs() < 5.0, "max {}", s.max);
        assert_eq!(a.series().iter().map(|p| p.count).sum::<u64>(), 1001);
    }

    #[test]
    fn warmup_is_left_out_of_totals() {
        let mut r = Recorder::with_warmup(Instant::now(), std::time::Duration::from_secs(60));
        r.record_us(1000);
        assert_eq!(r.summary().count, 0);
        assert_eq!(r.series()[0].count, 1);
    }

    #[test]
    fn empty_is_zero() {
        let r = Recorder::new(Instant::now());
        assert_eq!(r.summary(), LatencySummary::default());
        assert!(r.series().is_empty());
    }
}
