use super::*;
use crate::batch::validate;
use crate::testutil::{decoded, encoded_batch, TestRecord, CODECS};
use kafka_protocol::records::Compression;

/// One record as a test writes it: key, value (None: a tombstone), timestamp.
type Spec<'a> = (Option<&'a str>, Option<&'a str>, i64);

/// A batch at `base_offset` built by a third-party encoder, one record per spec, from
/// producer 7 (epoch 1); each value is its spec's repeated 40 times.
fn batch(compression: Compression, base_offset: i64, specs: &[Spec]) -> Vec<u8> {
    let records: Vec<TestRecord> = specs
        .iter()
        .map(|(key, value, timestamp)| {
            let value = value.map(|v| v.repeat(40));
            (key.map(str::to_string), value, *timestamp)
        })
        .collect();
    encoded_batch(compression, base_offset, &records, (7, 1, 0))
}

fn specs() -> Vec<Spec<'static>> {
    vec![
        (Some("a"), Some("1"), 1_000),
        (Some("b"), Some("2"), 1_005),
        (Some("a"), None, 1_010),
        (Some("c"), Some("3"), 1_002),
        (Some("b"), Some("4"), 1_001),
    ]
}

#[test]
fn survivors_keep_their_offsets_and_bytes_in_every_codec() {
    for codec in CODECS {
        let original = batch(codec, 100, &specs());
        let before = decoded(&original);
        // Keep the second and fourth records.
        let kept = retain_records(&original, |r| r.offset == 101 || r.offset == 103);
        let Ok(Retained::Rewritten(rewritten)) = kept else {
            panic!("{codec:?}: {kept:?}");
        };
        let header = validate(&rewritten).expect("a valid batch, CRC included");
        assert_eq!(header.base_offset, 100, "{codec:?}");
        assert_eq!(
            header.last_offset(),
            104,
            "{codec:?}: the batch's last offset stays"
        );
        assert_eq!(header.records_count, 2, "{codec:?}");
        assert_eq!(header.compression(), codec as u8, "{codec:?}");
        assert_eq!(header.max_timestamp, 1_005, "{codec:?}: of the survivors");
        assert_eq!((header.producer_id, header.producer_epoch), (7, 1));
        assert_eq!(header.base_sequence, 0);
        let after = decoded(&rewritten);
        assert_eq!(
            after,
            vec![before[1].clone(), before[3].clone()],
            "{codec:?}"
        );
    }
}

#[test]
fn a_batch_all_kept_stays_whole_and_one_all_dropped_is_empty() {
    for codec in CODECS {
        let original = batch(codec, 0, &specs());
        assert_eq!(retain_records(&original, |_| true), Ok(Retained::Whole));
        assert_eq!(retain_records(&original, |_| false), Ok(Retained::Empty));
    }
}

#[test]
fn the_cleaner_sees_each_records_offset_key_timestamp_and_tombstone() {
    let original = batch(Compression::Lz4, 50, &specs());
    let mut seen = Vec::new();
    retain_records(&original, |r| {
        let key = r.key.map(|k| String::from_utf8_lossy(k).into_owned());
        seen.push((r.offset, key, r.timestamp, r.tombstone));
        true
    })
    .expect("walks");
    let key = |k: &str| Some(k.to_string());
    assert_eq!(
        seen,
        vec![
            (50, key("a"), 1_000, false),
            (51, key("b"), 1_005, false),
            (52, key("a"), 1_010, true),
            (53, key("c"), 1_002, false),
            (54, key("b"), 1_001, false),
        ]
    );
}

/// `batch`'s records, framed the way the Java client frames snappy (xerial).
fn xerial(plain_batch: &[u8]) -> Vec<u8> {
    let records = &plain_batch[BATCH_HEADER_BYTES..];
    let mut out = plain_batch[..BATCH_HEADER_BYTES].to_vec();
    out.extend_from_slice(XERIAL_MAGIC);
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    for block in records.chunks(100) {
        let compressed = snap::raw::Encoder::new().compress_vec(block).unwrap();
        out.extend_from_slice(&(compressed.len() as u32).to_be_bytes());
        out.extend_from_slice(&compressed);
    }
    out[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&2i16.to_be_bytes());
    let length = (out.len() - LOG_OVERHEAD_BYTES) as i32;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&out[ATTRIBUTES_OFFSET..]);
    out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    out
}

#[test]
fn java_framed_snappy_is_written_back_java_framed() {
    let plain = batch(Compression::None, 10, &specs());
    let framed = xerial(&plain);
    validate(&framed).expect("the test's framing is a valid batch");
    let Ok(Retained::Rewritten(rewritten)) = retain_records(&framed, |r| r.offset >= 13) else {
        panic!("not rewritten");
    };
    validate(&rewritten).expect("valid");
    assert!(rewritten[BATCH_HEADER_BYTES..].starts_with(XERIAL_MAGIC));
    let mut offsets = Vec::new();
    retain_records(&rewritten, |r| {
        offsets.push(r.offset);
        true
    })
    .expect("walks");
    assert_eq!(offsets, vec![13, 14]);
}

#[test]
fn an_emptied_batch_keeps_its_offsets_and_producer_and_holds_no_records() {
    for codec in CODECS {
        let original = batch(codec, 300, &specs());
        let empty = emptied(&original).expect("a valid header");
        let header = validate(&empty).expect("a valid batch, CRC included");
        assert_eq!((header.base_offset, header.last_offset()), (300, 304));
        assert_eq!((header.producer_id, header.producer_epoch), (7, 1));
        assert_eq!((header.records_count, header.compression()), (0, 0));
        assert_eq!(empty.len(), BATCH_HEADER_BYTES);
        assert!(
            decoded(&empty).is_empty(),
            "{codec:?}: a decoder sees no records"
        );
    }
}

#[test]
fn control_batches_stay_whole() {
    let mut control = batch(Compression::None, 0, &specs());
    control[ATTRIBUTES_OFFSET + 1] |= 0x20;
    assert_eq!(retain_records(&control, |_| false), Ok(Retained::Whole));
}

#[test]
fn malformed_records_and_bombs_are_refused_not_rewritten() {
    let mut b = batch(Compression::None, 0, &specs());
    // The first record's length claims more than the batch holds.
    b[BATCH_HEADER_BYTES] = 0x7e;
    assert_eq!(retain_records(&b, |_| true), Err(CompactionError::Records));
    let whole = batch(Compression::None, 0, &specs());
    let truncated = &whole[..whole.len() - 3];
    assert_eq!(
        retain_records(truncated, |_| true),
        Err(CompactionError::Records)
    );
    // 200 MiB of the smallest records compress to well under a MiB of zstd.
    let record = [0x0c, 0, 0, 0, 1, 1, 0];
    let inflated: Vec<u8> = record.iter().copied().cycle().take(200 << 20).collect();
    let compressed = zstd::stream::encode_all(&inflated[..], 3).unwrap();
    drop(inflated);
    let mut bomb = whole[..BATCH_HEADER_BYTES].to_vec();
    bomb.extend_from_slice(&compressed);
    bomb[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&4i16.to_be_bytes());
    let length = (bomb.len() - LOG_OVERHEAD_BYTES) as i32;
    bomb[8..12].copy_from_slice(&length.to_be_bytes());
    assert_eq!(
        retain_records(&bomb, |_| false),
        Err(CompactionError::Records)
    );
}

#[test]
fn the_offset_map_keeps_the_latest_offset_per_key_within_its_bound() {
    let mut map = OffsetMap::new(2 * OFFSET_MAP_ENTRY_BYTES);
    assert!(map.is_empty());
    map.note(b"a", 5).unwrap();
    map.note(b"b", 6).unwrap();
    map.note(b"a", 9).unwrap();
    map.note(b"a", 7).unwrap();
    assert_eq!(map.latest(b"a"), Some(9), "the latest, not the last noted");
    assert_eq!(map.note(b"c", 10), Err(MapFull), "a third key does not fit");
    assert_eq!(map.latest(b"c"), None);
    map.note(b"b", 11)
        .expect("a known key still moves when full");
    assert_eq!(map.len(), 2);
    assert!(map.superseded(b"a", 5));
    assert!(!map.superseded(b"a", 9));
    assert!(
        !map.superseded(b"zzz", 1),
        "an unknown key is not superseded"
    );
}

/// A small generator for the randomized test (seeded, so a failure can be replayed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn randomized_exactly_each_keys_latest_record_survives() {
    let seed = std::env::var("COMPACTION_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            now.map_or(1, |d| d.as_nanos() as u64) | 1
        });
    println!("randomized compaction seed: {seed} (replay with COMPACTION_SEED={seed})");
    let mut rng = Rng(seed);
    for round in 0..20 {
        let keys = 1 + rng.below(12);
        let names: Vec<String> = (0..keys).map(|k| format!("key-{k}")).collect();
        let mut batches = Vec::new();
        let mut offset = 0i64;
        let mut written = Vec::new();
        for _ in 0..1 + rng.below(8) {
            let count = 1 + rng.below(6) as usize;
            let codec = CODECS[rng.below(CODECS.len() as u64) as usize];
            let specs: Vec<Spec> = (0..count)
                .map(|_| {
                    let key = names[rng.below(keys) as usize].as_str();
                    let value = (rng.below(5) != 0).then_some("v");
                    (Some(key), value, 1_000 + rng.below(100) as i64)
                })
                .collect();
            for (i, spec) in specs.iter().enumerate() {
                written.push((offset + i as i64, spec.0.unwrap().to_string()));
            }
            batches.push(batch(codec, offset, &specs));
            offset += count as i64;
        }
        let mut map = OffsetMap::new(1 << 20);
        for b in &batches {
            retain_records(b, |r| {
                map.note(r.key.unwrap(), r.offset).unwrap();
                true
            })
            .unwrap();
        }
        let mut survivors = Vec::new();
        for b in &batches {
            let kept = retain_records(b, |r| !map.superseded(r.key.unwrap(), r.offset));
            let kept = match kept.unwrap_or_else(|e| panic!("seed {seed} round {round}: {e}")) {
                Retained::Whole => b.clone(),
                Retained::Rewritten(r) => r,
                Retained::Empty => continue,
            };
            validate(&kept).unwrap_or_else(|e| panic!("seed {seed} round {round}: {e}"));
            survivors.extend(
                decoded(&kept)
                    .into_iter()
                    .map(|(offset, key, _)| (offset, key.unwrap())),
            );
        }
        let mut expected: Vec<(i64, String)> = written
            .iter()
            .filter(|(o, k)| !written.iter().any(|(o2, k2)| k2 == k && o2 > o))
            .cloned()
            .collect();
        expected.sort();
        assert_eq!(survivors, expected, "seed {seed} round {round}");
        assert!(
            survivors.windows(2).all(|w| w[0].0 < w[1].0),
            "seed {seed} round {round}: offsets increase"
        );
    }
}
