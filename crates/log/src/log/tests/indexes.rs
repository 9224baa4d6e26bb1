//! The offset and time indexes: rebuilt when missing or damaged, stray files deleted,
//! timestamp lookups, and the thinned in-memory copy of a sealed segment's index.

use super::*;

#[test]
fn missing_indexes_are_rebuilt() {
    for (suffix, clean) in [
        ("index", true),
        ("timeindex", true),
        ("index", false),
        ("timeindex", false),
    ] {
        let dir = TempDir::new().unwrap();
        let config = LogConfig {
            segment_bytes_max: 2000,
            index_interval_bytes: 100,
            ..config()
        };
        let (mut log, _) = open(&dir, config.clone());
        let batches: Vec<Vec<u8>> = (0..30)
            .map(|i| append_one(&mut log, 2, 100, NOW_MS + 10 * i))
            .collect();
        let indexes: Vec<(i64, Vec<u8>, Vec<u8>)> = log
            .segments
            .values()
            .map(|s| {
                (
                    s.base_offset(),
                    s.offset_index_bytes(),
                    s.time_index_bytes(),
                )
            })
            .collect();
        let lookup = log.offset_for_timestamp(NOW_MS + 155).unwrap();
        if clean {
            log.close().unwrap();
        } else {
            drop(log);
        }
        for (base, _, _) in &indexes {
            std::fs::remove_file(segment_path(&dir, *base, suffix)).unwrap();
        }
        let (log, report) = open(&dir, config);
        assert!(
            report.rebuilt_indexes >= indexes.len(),
            "{suffix} clean={clean}: {report:?}"
        );
        assert_eq!(read_all(&log, 0), batches.concat());
        assert_eq!(log.offset_for_timestamp(NOW_MS + 155).unwrap(), lookup);
        let last = indexes.len() - 1;
        for (i, ((base, index, time_index), segment)) in
            indexes.iter().zip(log.segments.values()).enumerate()
        {
            assert_eq!(&segment.offset_index_bytes(), index, "segment {base}");
            assert_eq!(&segment.time_index_bytes(), time_index, "segment {base}");
            // The rebuilt file holds every entry; a sealed segment keeps every 16th in
            // memory.
            let (entry_bytes, in_memory) = match suffix {
                "index" => (8, index),
                _ => (12, time_index),
            };
            let file = std::fs::read(segment_path(&dir, *base, suffix)).unwrap();
            let keep_every = if i == last { 1 } else { SEALED_INDEX_THINNING };
            let thinned: Vec<u8> = file
                .chunks(entry_bytes)
                .step_by(keep_every)
                .flatten()
                .copied()
                .collect();
            assert_eq!(&thinned, in_memory, "segment {base}");
            assert!(file.len() >= in_memory.len());
        }
    }
}

/// Damages the file at a path.
type Damage = fn(&Path);

#[test]
fn damaged_indexes_are_rebuilt() {
    let damages: [(&str, Damage); 4] = [
        ("index", |p| append_garbage(p, b"abc")),
        ("index", |p| append_garbage(p, &[0xff; 8])),
        ("timeindex", |p| append_garbage(p, &[0u8; 12])),
        ("index", |p| std::fs::write(p, [0u8; 64]).unwrap()),
    ];
    for (suffix, damage) in damages {
        let dir = TempDir::new().unwrap();
        let config = LogConfig {
            segment_bytes_max: 2000,
            index_interval_bytes: 100,
            ..config()
        };
        let (mut log, _) = open(&dir, config.clone());
        let batches: Vec<Vec<u8>> = (0..30)
            .map(|i| append_one(&mut log, 2, 100, NOW_MS + 10 * i))
            .collect();
        let lookup = log.offset_for_timestamp(NOW_MS + 205).unwrap();
        log.close().unwrap();
        damage(&segment_path(&dir, 0, suffix));
        let (log, report) = open(&dir, config);
        assert!(report.clean_shutdown);
        assert_eq!(report.rebuilt_indexes, 1, "{suffix}");
        assert_eq!(read_all(&log, 0), batches.concat());
        assert_eq!(log.offset_for_timestamp(NOW_MS + 205).unwrap(), lookup);
    }
}

#[test]
fn stray_index_files_are_deleted() {
    let dir = TempDir::new().unwrap();
    crashed_log(&dir, config(), 3);
    std::fs::write(segment_path(&dir, 77, "index"), [1, 2, 3]).unwrap();
    std::fs::write(segment_path(&dir, 77, "timeindex"), []).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "kept").unwrap();
    let (log, _) = open(&dir, config());
    assert!(!segment_path(&dir, 77, "index").exists());
    assert!(!segment_path(&dir, 77, "timeindex").exists());
    assert!(dir.path().join("notes.txt").exists());
    assert_eq!(log.segment_count(), 1);
}

#[test]
fn offset_for_timestamp_finds_the_first_batch_at_or_after() {
    let dir = TempDir::new().unwrap();
    let (mut log, _) = open(
        &dir,
        LogConfig {
            segment_bytes_max: 1500,
            index_interval_bytes: 150,
            ..config()
        },
    );
    // Timestamps rise by 10 per batch, with one batch from the past in between.
    let mut stamps = Vec::new();
    for i in 0..40i64 {
        let timestamp = if i == 20 {
            NOW_MS - 5000
        } else {
            NOW_MS + 10 * i
        };
        let bytes = append_one(&mut log, 1, 100, timestamp);
        stamps.push((batch_offsets(&bytes)[0].0, timestamp));
    }
    assert!(log.segment_count() > 3);
    let expected = |target: i64| {
        stamps
            .iter()
            .find(|(_, t)| *t >= target)
            .map(|(o, t)| (Offset::new(*o), *t))
    };
    for target in [
        i64::MIN,
        NOW_MS - 6000,
        NOW_MS,
        NOW_MS + 1,
        NOW_MS + 195,
        NOW_MS + 200,
        NOW_MS + 201,
        NOW_MS + 390,
        NOW_MS + 391,
    ] {
        assert_eq!(
            log.offset_for_timestamp(target).unwrap(),
            expected(target),
            "target {target}"
        );
    }
    assert_eq!(log.offset_for_timestamp(NOW_MS + 391).unwrap(), None);
}

#[test]
fn sealed_segments_keep_a_sixteenth_of_their_index_in_memory_and_read_the_same() {
    let dir = TempDir::new().unwrap();
    let config = LogConfig {
        segment_bytes_max: 32 * 1024,
        index_interval_bytes: 256,
        ..config()
    };
    let (mut log, _) = open(&dir, config.clone());
    let batches: Vec<Vec<u8>> = (0..400)
        .map(|i| append_one(&mut log, 3, 100, NOW_MS + i))
        .collect();
    let check = |log: &Log| {
        let segments: Vec<_> = log.segments.values().collect();
        assert!(segments.len() >= 4, "{} segments", segments.len());
        for (i, segment) in segments.iter().enumerate() {
            let (offsets, times) = segment.index_entries();
            let on_disk = |suffix| {
                std::fs::read(segment_path(&dir, segment.base_offset(), suffix))
                    .unwrap()
                    .len()
            };
            let (full_offsets, full_times) = (on_disk("index") / 8, on_disk("timeindex") / 12);
            if i + 1 < segments.len() {
                assert_eq!(offsets, full_offsets.div_ceil(SEALED_INDEX_THINNING));
                assert_eq!(times, full_times.div_ceil(SEALED_INDEX_THINNING));
                assert!(full_offsets > 2 * SEALED_INDEX_THINNING, "{full_offsets}");
            } else {
                assert_eq!(
                    offsets, full_offsets,
                    "the active segment keeps every entry"
                );
            }
        }
        // Every offset reads back its own batch, and the whole log byte for byte.
        for offset in 0..log.log_end_offset().value() {
            let bytes = log
                .locate(Offset::new(offset))
                .unwrap()
                .read(1, Offset::new(i64::MAX))
                .unwrap();
            assert_eq!(bytes, batches[offset as usize / 3], "offset {offset}");
        }
        assert_eq!(read_all(log, 0), batches.concat());
        for i in [0, 1, 57, 200, 399] {
            let (offset, _) = log.offset_for_timestamp(NOW_MS + i).unwrap().unwrap();
            assert_eq!(offset.value(), 3 * i, "timestamp +{i}");
        }
    };
    check(&log);
    log.close().unwrap();
    let (log, _) = open(&dir, config);
    check(&log);
}
