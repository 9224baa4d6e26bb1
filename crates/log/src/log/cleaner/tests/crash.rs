//! Goal: a SIGKILL at any moment of cleaning loses no record, serves no offset twice
//! and leaves no mix of old and cleaned segments.
//!
//! Method: this test re-runs its own binary as a child (selected by an environment
//! variable) that appends keyed records and cleans the log in a loop, and kills it
//! with SIGKILL at a random moment after its first pass, [`KILLS`] times. After each
//! kill the parent opens the log (which recovers it) and checks it against the
//! records the child wrote, which follow from the seed and the offset alone. The seed
//! is printed; `HEADWAY_TEST_SEED=<seed>` replays the same records and kill delays.

use super::*;
use crate::log::cleaner::staging::STAGING_DIR;
use crate::testutil::{seed, Rng};
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Set in the child's environment: the partition directory it cleans.
const CHILD_DIR: &str = "HEADWAY_CLEANER_CHILD_DIR";
/// Set in the child's environment: the seed its records follow from.
const CHILD_SEED: &str = "HEADWAY_CLEANER_CHILD_SEED";
/// Printed by the child after its first pass.
const READY: &str = "cleaner-child-ready";
const KILLS: usize = 20;
/// Tombstones older than this (in offsets: a batch's timestamp is its base offset,
/// and a pass's clock is the log end offset) are removed.
const RETENTION_MS: u64 = 2_000;
const SEGMENT_BYTES: u64 = 2_048;
/// The child stops appending here, and stops altogether after `CHILD_RUN`.
const CHILD_OFFSETS_MAX: i64 = 30_000;
const CHILD_RUN: Duration = Duration::from_secs(60);

fn mix(x: u64) -> u64 {
    // splitmix64
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The record the child writes at `offset`.
fn record_at(seed: u64, offset: i64) -> Kv {
    let h = mix(seed ^ offset as u64);
    let key = format!("key-{}", h % 60);
    let value = (!(h >> 32).is_multiple_of(6)).then(|| format!("value-{offset}"));
    (Some(key), value)
}

/// The number of records in the batch the child writes at `base`.
fn batch_len(seed: u64, base: i64) -> i64 {
    1 + (mix(!seed ^ base as u64) % 5) as i64
}

#[test]
fn sigkill_during_cleaning_loses_nothing() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        let seed = std::env::var(CHILD_SEED)
            .expect("seed")
            .parse()
            .expect("a seed");
        return child(Path::new(&dir), seed);
    }
    let seed = seed("sigkill_during_cleaning_loses_nothing");
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut in_swap, mut in_staging) = (0, 0);
    for kill in 0..KILLS {
        let mut child = Killed(spawn_child(dir.path(), seed));
        wait_until_ready(&mut child.0);
        std::thread::sleep(Duration::from_micros(rng.range(0, 40_000)));
        child.0.kill().expect("SIGKILL");
        child.0.wait().expect("reap");
        in_swap += usize::from(!entries_ending(dir.path(), ".swap").is_empty());
        in_staging += usize::from(dir.path().join(STAGING_DIR).exists());
        check(dir.path(), seed, &format!("seed {seed} kill {kill}"));
    }
    // Where the kills landed varies with the machine's speed; the checks hold for all.
    println!("{KILLS} kills: {in_swap} after a swap's commit point, {in_staging} with a staging directory");
}

/// Kills the child when the parent fails, so that no child outlives the test.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_child(dir: &Path, seed: u64) -> Child {
    let module = module_path!();
    let (_, path) = module.split_once("::").expect("a crate path");
    let test = format!("{path}::sigkill_during_cleaning_loses_nothing");
    Command::new(std::env::current_exe().expect("the test binary"))
        .args([test.as_str(), "--exact"])
        .args(["--nocapture", "--test-threads", "1"])
        .env(CHILD_DIR, dir)
        .env(CHILD_SEED, seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child")
}

/// Waits (a generous minute at most) for the child's first pass; keeps draining its
/// output afterwards so that it never blocks on a full pipe.
fn wait_until_ready(child: &mut Child) {
    let stdout = child.stdout.take().expect("piped");
    let (ready, ready_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            match line {
                Ok(line) if line.contains(READY) => {
                    let _ = ready.send(());
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
    ready_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the child finishes a first cleaning pass");
}

/// Appends the seed's records and cleans, over and over, until killed.
fn child(dir: &Path, seed: u64) {
    let (mut log, _) = Log::open(dir, log_config(SEGMENT_BYTES), NOW_MS).expect("child: open");
    let config = CleanerConfig {
        delete_retention_ms: RETENTION_MS,
        ..cleaner_config()
    };
    let started = Instant::now();
    let mut ready = false;
    while started.elapsed() < CHILD_RUN {
        for _ in 0..4 {
            let base = log.log_end_offset().value();
            if base >= CHILD_OFFSETS_MAX {
                break;
            }
            let records: Vec<Kv> = (0..batch_len(seed, base))
                .map(|i| record_at(seed, base + i))
                .collect();
            let mut batch = keyed_batch(Compression::None, &records, base, None);
            log.append(&mut batch, NOW_MS).expect("child: append");
        }
        sync(&mut log);
        let now_ms = log.log_end_offset().value();
        log.clean(&config, now_ms).expect("child: clean");
        if !ready {
            println!("{READY}");
            ready = true;
        }
    }
}

/// Opens the log the child left and checks it against the records it wrote.
fn check(dir: &Path, seed: u64, context: &str) {
    let (log, _) = Log::open(dir, log_config(SEGMENT_BYTES), NOW_MS).expect("open after SIGKILL");
    assert!(
        entries_ending(dir, ".swap").is_empty(),
        "{context}: swaps finished"
    );
    assert!(
        !dir.join(".cleaning").exists(),
        "{context}: staging deleted"
    );
    let end = log.log_end_offset().value();
    let mut written = BTreeMap::new();
    let mut base = 0;
    while base < end {
        for offset in base..base + batch_len(seed, base) {
            written.insert(offset, (record_at(seed, offset), base));
        }
        base += batch_len(seed, base);
    }
    assert_eq!(base, end, "{context}: the log ends at a batch boundary");
    // A tombstone goes once a pass runs past its first cleaning plus the retention;
    // every pass's clock was at least its records' timestamps and at most today's log
    // end offset.
    let horizon_ms = end - RETENTION_MS as i64;
    check_cleaned(&log, &written, |_, t| t < horizon_ms, context);
    let checkpoint = dir.join("cleaner-checkpoint");
    assert_eq!(
        crate::log::cleaner::checkpoint::CleanerState::load(dir).is_some(),
        checkpoint.exists(),
        "{context}: the cleaner's checkpoint is whole when present"
    );
}
