//! Reopening: after a clean close, and after crashes simulated by dropping the log
//! without `close` and then damaging its files; the randomized crash-and-reopen model.

use super::*;

#[test]
fn reopen_after_clean_close() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 3000,
            ..config()
        },
    );
    let mut expected = Vec::new();
    for i in 0..40 {
        expected.extend(append_one(&mut log, 1 + i % 4, 90, NOW_MS + i as i64));
    }
    let (end, segments) = (log.log_end_offset(), log.segment_count());
    log.close().unwrap();
    assert!(dir
        .path()
        .join(crate::recovery::CLEAN_SHUTDOWN_FILE)
        .exists());
    let (log, report) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 3000,
            ..config()
        },
    );
    assert!(report.clean_shutdown);
    assert_eq!((report.truncated_bytes, report.rebuilt_indexes), (0, 0));
    assert_eq!(
        (report.segments, report.log_end_offset, log.log_end_offset()),
        (segments, end, end)
    );
    let marker = dir.path().join(crate::recovery::CLEAN_SHUTDOWN_FILE);
    assert!(marker.exists(), "kept while nothing is written");
    assert_eq!(read_all(&log, 0), expected);
    drop(log);
    // A crash before any write: the files are what the close synced, still clean.
    let (mut log, report) = open(&dir, config());
    assert!(report.clean_shutdown, "untouched since a clean close");
    expected.extend(append_one(&mut log, 2, 10, NOW_MS));
    assert!(!marker.exists(), "the first append consumes the marker");
    assert_eq!(read_all(&log, 0), expected);
    drop(log);
    let (_, report) = open(&dir, config());
    assert!(
        !report.clean_shutdown,
        "a log dropped without close is recovered as after a crash"
    );
}

#[test]
fn open_creates_missing_directories_and_reports_a_new_log_as_clean() {
    let dir = TempDir::new().unwrap();
    let nested = dir.path().join("topic-0").join("deeper");
    let (log, report) = Log::open(&nested, config(), NOW_MS).unwrap();
    assert!(report.clean_shutdown);
    assert_eq!(
        (
            report.segments,
            report.truncated_bytes,
            report.rebuilt_indexes
        ),
        (1, 0, 0)
    );
    assert!(nested.join("00000000000000000000.log").exists());
    assert!(nested.join("00000000000000000000.index").exists());
    assert!(nested.join("00000000000000000000.timeindex").exists());
    assert_eq!(log.dir(), nested);
}

fn active_log_path(dir: &TempDir) -> PathBuf {
    let (log, _) = open(dir, config());
    let base = *log.segments.keys().next_back().unwrap();
    drop(log);
    segment_path(dir, base, "log")
}

/// After recovery: the log holds exactly `kept`, offsets dense, and appends continue.
fn assert_recovered(dir: &TempDir, kept: &[Vec<u8>]) -> RecoveryReport {
    let (mut log, report) = open(
        dir,
        LogConfig {
            segment_bytes_max: 2000,
            ..config()
        },
    );
    let expected = kept.concat();
    assert_eq!(read_all(&log, 0), expected);
    let end = batch_offsets(&expected)
        .last()
        .map_or(0, |(_, last)| last + 1);
    assert_eq!(log.log_end_offset().value(), end);
    assert_eq!(report.log_end_offset.value(), end);
    let next = append_one(&mut log, 2, 10, NOW_MS);
    assert_eq!(batch_offsets(&next), [(end, end + 1)]);
    assert_eq!(read_all(&log, 0), [expected, next].concat());
    report
}

#[test]
fn recovery_truncates_a_torn_last_batch() {
    let dir = TempDir::new().unwrap();
    let batches = crashed_log(
        &dir,
        LogConfig {
            segment_bytes_max: 2000,
            ..config()
        },
        30,
    );
    let path = active_log_path(&dir);
    let len = file_len(&path);
    let last_len = batches.last().unwrap().len() as u64;
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - last_len / 2)
        .unwrap();
    let report = assert_recovered(&dir, &batches[..29]);
    assert!(!report.clean_shutdown);
    assert_eq!(report.truncated_bytes, last_len - last_len / 2);
}

#[test]
fn recovery_cuts_garbage_after_the_last_batch() {
    for garbage in [
        vec![0u8; 5],
        vec![0u8; 100],
        vec![0xff; 3000],
        b"not a record batch at all, just text".repeat(4),
    ] {
        let dir = TempDir::new().unwrap();
        let batches = crashed_log(
            &dir,
            LogConfig {
                segment_bytes_max: 2000,
                ..config()
            },
            12,
        );
        append_garbage(&active_log_path(&dir), &garbage);
        let report = assert_recovered(&dir, &batches);
        assert_eq!(report.truncated_bytes, garbage.len() as u64);
    }
}

#[test]
fn recovery_cuts_a_last_batch_with_a_bad_crc() {
    let dir = TempDir::new().unwrap();
    let batches = crashed_log(&dir, config(), 10);
    let path = active_log_path(&dir);
    let len = file_len(&path);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, b"X", len - 3).unwrap();
    let report = assert_recovered(&dir, &batches[..9]);
    assert_eq!(report.truncated_bytes, batches[9].len() as u64);
}

#[test]
fn a_crash_right_after_a_roll_keeps_everything_written() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 1000,
            ..config()
        },
    );
    let batches: Vec<Vec<u8>> = (0..3)
        .map(|_| append_one(&mut log, 1, 400, NOW_MS))
        .collect();
    assert_eq!(log.segment_count(), 2);
    drop(log);
    let report = assert_recovered(&dir, &batches);
    assert_eq!((report.truncated_bytes, report.segments), (0, 2));
}

#[test]
fn a_torn_sealed_segment_takes_the_later_segment_with_it() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 1000,
            ..config()
        },
    );
    let batches: Vec<Vec<u8>> = (0..5)
        .map(|_| append_one(&mut log, 1, 400, NOW_MS))
        .collect();
    let bases: Vec<i64> = log.segments.keys().copied().collect();
    assert_eq!(bases, [0, 2, 4]);
    drop(log);
    // The segment sealed last loses its last batch, as if its pages never reached
    // the disk; the segment after it can hold nothing acknowledged.
    let sealed = segment_path(&dir, 2, "log");
    OpenOptions::new()
        .write(true)
        .open(&sealed)
        .unwrap()
        .set_len(file_len(&sealed) - 10)
        .unwrap();
    let report = assert_recovered(&dir, &batches[..3]);
    assert_eq!(report.segments, 2);
    assert!(!segment_path(&dir, 4, "log").exists());
    assert!(!segment_path(&dir, 4, "index").exists());
}

/// Goal: bytes on disk are data, never a reason to panic or loop. Method: fill a
/// segment's three files with random bytes (sometimes after valid batches) and open
/// and read the log.
#[test]
fn random_garbage_in_segment_files_is_repaired_without_panicking() {
    let mut rng = Rng::new(seed(
        "random_garbage_in_segment_files_is_repaired_without_panicking",
    ));
    for _ in 0..30 {
        let dir = TempDir::new().unwrap();
        let valid = crashed_log(&dir, config(), rng.range(0, 4) as usize);
        let garbage = |rng: &mut Rng| -> Vec<u8> {
            (0..rng.range(0, 400))
                .map(|_| rng.next_u64() as u8)
                .collect()
        };
        append_garbage(&segment_path(&dir, 0, "log"), &garbage(&mut rng));
        for suffix in ["index", "timeindex"] {
            std::fs::write(segment_path(&dir, 0, suffix), garbage(&mut rng)).unwrap();
        }
        let (mut log, report) = open(&dir, config());
        assert!(!report.clean_shutdown);
        assert_eq!(read_all(&log, 0), valid.concat());
        append_one(&mut log, 1, 10, NOW_MS);
    }
}

#[test]
fn reads_of_corrupt_segment_bytes_fail_instead_of_hanging() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            index_interval_bytes: 1 << 20,
            ..config()
        },
    );
    let batches: Vec<Vec<u8>> = (0..5)
        .map(|_| append_one(&mut log, 1, 50, NOW_MS))
        .collect();
    // Corrupt the length of the second batch behind the log's back.
    let file = OpenOptions::new()
        .write(true)
        .open(segment_path(&dir, 0, "log"))
        .unwrap();
    let at = batches[0].len() as u64 + 8;
    for length in [i32::MAX, -5, 3] {
        std::os::unix::fs::FileExt::write_all_at(&file, &length.to_be_bytes(), at).unwrap();
        let error = log
            .locate(Offset::new(3))
            .unwrap()
            .read(1 << 20, Offset::new(i64::MAX))
            .unwrap_err();
        assert_eq!(
            error.kind(),
            std::io::ErrorKind::InvalidData,
            "length {length}"
        );
    }
    assert_eq!(
        log.locate(Offset::new(0))
            .unwrap()
            .read(0, Offset::new(i64::MAX))
            .unwrap(),
        batches[0]
    );
}

#[test]
fn a_gap_left_by_a_repaired_middle_segment_is_skipped_by_reads() {
    let dir = TempDir::new().unwrap();
    let config = LogConfig {
        segment_bytes_max: 1000,
        ..config()
    };
    let (mut log, _) = open(&dir, config.clone());
    let batches: Vec<Vec<u8>> = (0..6)
        .map(|_| append_one(&mut log, 1, 200, NOW_MS))
        .collect();
    assert_eq!(log.segments.keys().copied().collect::<Vec<_>>(), [0, 3]);
    log.close().unwrap();
    // Corrupt the second batch of segment 0 and lose its index: the scan that rebuilds
    // the index truncates the segment there, leaving offsets 1 and 2 unreadable.
    let file = OpenOptions::new()
        .write(true)
        .open(segment_path(&dir, 0, "log"))
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, b"X", batches[0].len() as u64 + 40).unwrap();
    std::fs::remove_file(segment_path(&dir, 0, "index")).unwrap();
    let (log, report) = open(&dir, config);
    assert_eq!(
        report.truncated_bytes,
        (batches[1].len() + batches[2].len()) as u64
    );
    let read = |offset| {
        log.locate(Offset::new(offset))
            .unwrap()
            .read(0, Offset::new(i64::MAX))
            .unwrap()
    };
    assert_eq!(read(0), batches[0]);
    assert_eq!(
        read(1),
        batches[3],
        "a read in the gap continues at the next segment"
    );
    assert_eq!(
        read_all(&log, 0),
        [&batches[..1], &batches[3..]].concat().concat()
    );
}

/// Goal: whatever the sequence of appends, rolls, crashes and reopens, the log holds
/// exactly the batches appended, in order, with dense offsets, and every offset reads
/// back the batch that holds it. Method: random batch sizes, segment sizes and index
/// intervals; occasional clean closes, crashes (drop) and crashes with a torn tail;
/// a model of the expected batches checked after every reopen.
#[test]
fn randomized_appends_rolls_and_reopens() {
    let mut rng = Rng::new(seed("randomized_appends_rolls_and_reopens"));
    let dir = TempDir::new().unwrap();
    let random_config = |rng: &mut Rng| LogConfig {
        segment_bytes_max: rng.range(200, 6000),
        index_interval_bytes: rng.range(0, 1500) as u32,
        ..config()
    };
    let mut model: Vec<Vec<u8>> = Vec::new();
    let (mut log, _) = open(&dir, random_config(&mut rng));
    for round in 0..12 {
        for _ in 0..rng.range(1, 60) {
            let count = rng.range(1, 4);
            let mut bytes: Vec<u8> = (0..count)
                .flat_map(|_| {
                    batch(
                        rng.range(1, 6) as usize,
                        rng.range(0, 700) as usize,
                        NOW_MS,
                        rng.next_u64() as u8,
                    )
                })
                .collect();
            log.append_bytes(&mut bytes, NOW_MS).unwrap();
            model.extend(BatchIter::new(&bytes).map(|(_, b)| b.to_vec()));
        }
        check_against_model(&log, &model, &mut rng);
        match rng.range(0, 3) {
            0 => log.close().unwrap(),
            1 => drop(log),
            _ => {
                let path = segment_path(&dir, *log.segments.keys().next_back().unwrap(), "log");
                drop(log);
                let torn = rng.range(1, 80) as usize;
                if file_len(&path) > 0 {
                    let last = model.pop().unwrap();
                    let len = file_len(&path) - last.len() as u64;
                    OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .unwrap()
                        .set_len(len)
                        .unwrap();
                    append_garbage(&path, &last[..torn.min(last.len() - 1)]);
                }
            }
        }
        let (reopened, report) = open(&dir, random_config(&mut rng));
        log = reopened;
        assert_eq!(report.log_end_offset, log.log_end_offset(), "round {round}");
        check_against_model(&log, &model, &mut rng);
    }
}

fn check_against_model(log: &Log, model: &[Vec<u8>], rng: &mut Rng) {
    assert_eq!(read_all(log, 0), model.concat());
    let offsets: Vec<(i64, i64)> = model.iter().map(|b| batch_offsets(b)[0]).collect();
    assert!(
        offsets.windows(2).all(|w| w[1].0 == w[0].1 + 1),
        "dense offsets"
    );
    for _ in 0..20 {
        let Some(end) = offsets.last().map(|(_, last)| last + 1) else {
            return;
        };
        let offset = rng.range(0, end as u64) as i64;
        let at = offsets
            .iter()
            .position(|(base, last)| (*base..=*last).contains(&offset))
            .unwrap();
        let bytes = log
            .locate(Offset::new(offset))
            .unwrap()
            .read(0, Offset::new(i64::MAX))
            .unwrap();
        assert_eq!(bytes, model[at], "offset {offset}");
    }
}
