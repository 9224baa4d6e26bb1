//! The randomized model: random keys, values, tombstones, keyless records, codecs and
//! idempotent producers over many small segments, cleaned by passes with random
//! budgets and clocks between appends, syncs, crashes and clean restarts; after each
//! pass the log is checked against everything written (`check_cleaned`), plus the
//! producers' last batches, fetches at random offsets and timestamp lookups.
//! The seed is printed; `HEADWAY_TEST_SEED=<seed>` replays a run.

use super::*;
use crate::testutil::{seed, Rng};

/// What one round wrote, and which offsets' tombstones the passes may have removed.
struct Model {
    written: BTreeMap<i64, (Kv, i64)>,
    /// Producer id to the base offset of its last batch.
    producers: BTreeMap<i64, i64>,
    sequences: BTreeMap<i64, i32>,
    /// Per pass that moved the first dirty offset: where it moved it, the horizon of
    /// what it cleaned first, and whether a later pass ran past that horizon.
    spans: Vec<(i64, i64, bool)>,
}

impl Model {
    /// Notes a pass at `now_ms` that left the log's first dirty offset at `first_dirty`.
    fn passed(&mut self, now_ms: i64, retention_ms: u64, first_dirty: i64) {
        for span in &mut self.spans {
            span.2 |= span.1 < now_ms;
        }
        if self.spans.last().is_none_or(|s| s.0 < first_dirty) {
            self.spans
                .push((first_dirty, now_ms + retention_ms as i64, false));
        }
    }

    /// Whether a pass may have removed a tombstone at `offset`: one ran past the
    /// horizon of the pass that first cleaned it.
    fn removable(&self, offset: i64) -> bool {
        self.spans
            .iter()
            .find(|s| offset < s.0)
            .is_some_and(|s| s.2)
    }
}

#[test]
fn randomized_passes_keep_each_keys_latest_record() {
    let seed = seed("randomized_passes_keep_each_keys_latest_record");
    let mut rng = Rng::new(seed);
    let mut totals = Totals::default();
    for round in 0..6 {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = log_config(rng.range(600, 4096));
        let (mut log, _) = Log::open(dir.path(), config.clone(), NOW_MS).expect("open");
        let keys = rng.range(1, 40);
        let retention_ms = rng.range(0, 3_000);
        let mut model = Model {
            written: BTreeMap::new(),
            producers: BTreeMap::new(),
            sequences: BTreeMap::new(),
            spans: Vec::new(),
        };
        let mut clock_ms = 10_000i64;
        let mut passes = 0;
        for step in 0..rng.range(60, 200) {
            clock_ms += rng.range(0, 100) as i64;
            append_random(&mut log, &mut rng, &mut model, keys, clock_ms, step);
            if rng.range(0, 3) == 0 {
                sync(&mut log);
            }
            if rng.range(0, 5) == 0 {
                let map_keys = [4, 16, 1_000][rng.range(0, 3) as usize];
                let cleaner = CleanerConfig {
                    map_bytes_max: crate::compaction::OFFSET_MAP_ENTRY_BYTES * map_keys,
                    delete_retention_ms: retention_ms,
                    min_compaction_lag_ms: 0,
                    dirty_bytes_max: [4_096, u64::MAX][rng.range(0, 2) as usize],
                };
                let now_ms = clock_ms + rng.range(0, 2_000) as i64;
                totals.add(&log.clean(&cleaner, now_ms).expect("clean"));
                model.passed(now_ms, retention_ms, log.first_dirty_offset().value());
                passes += 1;
                let context = format!("seed {seed} round {round} pass {passes}");
                check(&log, &model, &mut rng, &context);
            }
            if rng.range(0, 25) == 0 {
                match rng.range(0, 2) {
                    0 => drop(log),
                    _ => log.close().expect("close"),
                }
                log = Log::open(dir.path(), config.clone(), NOW_MS)
                    .expect("reopen")
                    .0;
                check(
                    &log,
                    &model,
                    &mut rng,
                    &format!("seed {seed} round {round} reopened"),
                );
            }
        }
        sync(&mut log);
        let cleaner = CleanerConfig {
            delete_retention_ms: retention_ms,
            ..cleaner_config()
        };
        totals.add(&log.clean(&cleaner, clock_ms).expect("clean"));
        model.passed(clock_ms, retention_ms, log.first_dirty_offset().value());
        check(
            &log,
            &model,
            &mut rng,
            &format!("seed {seed} round {round} last pass"),
        );
        // A pass past every horizon removes every tombstone that is its key's latest
        // below the first dirty offset.
        let late_ms = clock_ms + retention_ms as i64 + 3_000;
        totals.add(&log.clean(&cleaner, late_ms).expect("clean"));
        model.passed(late_ms, retention_ms, log.first_dirty_offset().value());
        let context = format!("seed {seed} round {round} past every horizon");
        check(&log, &model, &mut rng, &context);
        let served = survivors(&log);
        let first_dirty = log.first_dirty_offset().value();
        for (offset, ((key, value), _)) in model.written.range(..first_dirty) {
            assert!(
                key.is_none() || value.is_some() || !served.contains_key(offset),
                "{context}: the tombstone at {offset} is still served"
            );
        }
    }
    // What the passes did varies with the seed; the checks hold for all.
    println!("{totals:?}");
}

/// What the passes of a run did, summed.
#[derive(Debug, Default)]
struct Totals {
    passes: usize,
    records_removed: u64,
    tombstones_removed: u64,
    segments_installed: usize,
    groups_aborted: usize,
    map_full: usize,
}

impl Totals {
    fn add(&mut self, report: &CleanReport) {
        self.passes += 1;
        self.records_removed += report.records_removed;
        self.tombstones_removed += report.tombstones_removed;
        self.segments_installed += report.segments_installed;
        self.groups_aborted += report.groups_aborted;
        self.map_full += usize::from(report.map_full);
    }
}

fn append_random(
    log: &mut Log,
    rng: &mut Rng,
    model: &mut Model,
    keys: u64,
    clock_ms: i64,
    step: u64,
) {
    let records: Vec<Kv> = (0..rng.range(1, 6))
        .map(|i| {
            let key = match rng.range(0, 20) {
                0 => None,
                _ => Some(format!("key-{}", rng.range(0, keys))),
            };
            let value = (rng.range(0, 5) != 0).then(|| format!("value-{step}-{i}"));
            (key, value)
        })
        .collect();
    let producer = match rng.range(0, 4) {
        0 => Some(1),
        1 => Some(2),
        _ => None,
    };
    let first_sequence = producer.map(|p| *model.sequences.get(&p).unwrap_or(&0));
    let codec = CODECS[rng.range(0, CODECS.len() as u64) as usize];
    let with_producer = producer.zip(first_sequence);
    let mut batch = keyed_batch(codec, &records, clock_ms, with_producer);
    let base = log
        .append(&mut batch, NOW_MS)
        .expect("append")
        .base_offset
        .value();
    if let Some((producer, sequence)) = with_producer {
        model.producers.insert(producer, base);
        model
            .sequences
            .insert(producer, sequence + records.len() as i32);
    }
    for (i, record) in records.into_iter().enumerate() {
        model.written.insert(base + i as i64, (record, clock_ms));
    }
}

fn check(log: &Log, model: &Model, rng: &mut Rng, context: &str) {
    check_cleaned(log, &model.written, |o, _| model.removable(o), context);
    let headers = served_headers(log);
    for (producer, base) in &model.producers {
        assert!(
            headers
                .iter()
                .any(|h| h.base_offset == *base && h.producer_id == *producer),
            "{context}: producer {producer}'s last batch at {base} is gone"
        );
    }
    let (start, end) = (log.log_start_offset().value(), log.log_end_offset().value());
    for _ in 0..20 {
        let offset = rng.range(start as u64, end as u64 + 1) as i64;
        check_fetch(log, &headers, offset, context);
        check_timestamp(log, &headers, rng.range(9_900, 40_000) as i64, context);
    }
}
