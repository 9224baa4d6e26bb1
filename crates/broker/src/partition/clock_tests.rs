//! The partition reads the time from its clock, so a test decides what time it is.
//! Goal: show that time-dependent decisions of the partition (a roll by segment age)
//! follow the clock it was given, not the wall clock. Method: open a partition with a
//! manual clock, append, move the clock, append again; no test waits for time to pass.

use super::txn_tests::plain_batch;
use super::*;

const START_MS: i64 = 1_700_000_000_000;

fn segments(partition: &Partition) -> usize {
    partition.with_log(|log| Ok(log.segment_count())).unwrap()
}

#[test]
fn a_segment_rolls_by_age_when_the_partitions_clock_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual(START_MS);
    let config = LogConfig {
        segment_ms_max: 60_000,
        ..LogConfig::default()
    };
    let (partition, _) = Partition::open(
        dir.path().to_path_buf(),
        "t".into(),
        PartitionIndex::new(0),
        config,
        FlushPolicy::Sync,
        clock.clone(),
    )
    .unwrap();
    partition.append(&plain_batch(), 1 << 20).unwrap();
    clock.advance_ms(59_999);
    partition.append(&plain_batch(), 1 << 20).unwrap();
    assert_eq!(
        segments(&partition),
        1,
        "younger than segment_ms_max: no roll"
    );
    clock.advance_ms(1);
    partition.append(&plain_batch(), 1 << 20).unwrap();
    assert_eq!(segments(&partition), 2, "a minute old by the clock: rolled");
}
