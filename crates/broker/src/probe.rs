//! What every component's probe registers its `/metrics` families with: gauge and
//! counter shorthands, label sets, and [`Bounded`], the cap on how many label sets a
//! family gets.
//!
//! Each component owns a probe beside it that registers its families into a
//! `prometheus_client` [`Registry`] from its own state: in this crate
//! `partition::probe` (partitions and topics), `cleaner::probe`, `open_files::probe`,
//! `panics::probe`, `io::probe` (stage timings, read threads, bulk budget) and
//! `disk::probe`; `headway_group::probe` and `headway_share::probe` above. The server's
//! `metrics` module builds a fresh registry per scrape and calls each probe once; a
//! family's values are read at that moment, so nothing accumulates per scrape.
//! `docs/metrics.md` lists every family and the probe that defines it.
//!
//! Stateless: plain functions over values.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// The labels of one series, in the order they are written.
pub type Labels = Vec<(String, String)>;
/// Integer gauges, one per label set.
pub type Gauges = Family<Labels, Gauge>;
/// Float gauges (ratios, seconds), one per label set.
pub type FloatGauges = Family<Labels, Gauge<f64, AtomicU64>>;
/// Counters, one per label set.
pub type Counters = Family<Labels, Counter>;

/// Registers an unlabelled gauge showing `value` (saturated at `i64::MAX`).
pub fn gauge(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let g = Gauge::<i64>::default();
    g.set(as_gauge(value));
    registry.register(name, help, g);
}

/// Registers an unlabelled counter showing `value` (the encoder adds `_total`).
pub fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let c = Counter::<u64>::default();
    c.inc_by(value);
    registry.register(name, help, c);
}

/// A count as a gauge's value: saturated at `i64::MAX`.
pub fn as_gauge(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Labels from name and value pairs.
pub fn labels<const N: usize>(pairs: [(&str, &str); N]) -> Labels {
    pairs
        .into_iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

/// The labels of one partition's series: `topic`, `partition`.
pub fn partition_labels(topic: &str, partition: i32) -> Labels {
    labels([("topic", topic), ("partition", &partition.to_string())])
}

/// The cap on a family's label sets (`limits::METRICS_PARTITIONS_MAX` and its
/// siblings): the first `max` offered get series, the rest are only counted, so a
/// scrape stays bounded however many partitions or groups there are, and a gauge
/// shows how many were left out.
#[derive(Debug)]
pub struct Bounded {
    max: usize,
    seen: usize,
}

impl Bounded {
    /// Admits the first `max` label sets offered.
    pub fn new(max: usize) -> Bounded {
        Bounded { max, seen: 0 }
    }

    /// Counts one more label set; true while it is among the first `max`.
    pub fn admit(&mut self) -> bool {
        self.seen += 1;
        self.seen <= self.max
    }

    /// Label sets offered so far, admitted or not.
    pub fn seen(&self) -> usize {
        self.seen
    }

    /// Label sets offered and left out.
    pub fn omitted(&self) -> usize {
        self.seen.saturating_sub(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_admits_the_first_max_and_counts_the_rest() {
        let mut bound = Bounded::new(2);
        let admitted: Vec<bool> = (0..5).map(|_| bound.admit()).collect();
        assert_eq!(admitted, [true, true, false, false, false]);
        assert_eq!((bound.seen(), bound.omitted()), (5, 3));
    }

    #[test]
    fn shorthands_encode_as_before() {
        let mut r = Registry::with_prefix("headway");
        gauge(&mut r, "big", "A gauge past i64", u64::MAX);
        counter(&mut r, "things", "Things", 3);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        assert!(text.contains("headway_big 9223372036854775807\n"), "{text}");
        assert!(text.contains("headway_things_total 3\n"), "{text}");
        assert_eq!(
            partition_labels("t", 3),
            labels([("topic", "t"), ("partition", "3")])
        );
    }
}
