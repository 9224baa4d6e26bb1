//! Bytes a producer could send as a partition's records: the broker's batch validation
//! (header, lengths, CRC-32C) must refuse what is not well formed, without panicking,
//! and agree with the header parser on what it accepts. The records inside a batch are
//! the producer's too: the ListOffsets walk over them must stop at any damage, inflate
//! no more than its bound, and never size a buffer from a count; the cleaner of
//! compacted topics must refuse what it cannot walk, and whatever it rewrites must be a
//! valid batch again.
#![no_main]

use headway_log::batch;
use headway_log::compaction::{retain_records, RecordInfo, Retained};
use headway_log::records::first_record_at;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match batch::validate_all(data) {
        Ok(validated) => {
            let parsed = batch::parse_all(data).expect("a validated batch set parses");
            assert_eq!(validated.headers(), parsed.as_slice());
            let total: usize = parsed.iter().map(|h| h.total_bytes()).sum();
            assert_eq!(
                total,
                data.len(),
                "validated batches cover the input exactly"
            );
            let offsets: i64 = parsed
                .iter()
                .map(|h| i64::from(h.last_offset_delta) + 1)
                .sum();
            assert_eq!(validated.offset_count(), offsets);
            let first_transactional = parsed.iter().find(|h| h.is_transactional());
            assert_eq!(validated.first_transactional(), first_transactional);
        }
        Err(invalid) => assert_eq!(invalid.len, data.len()),
    }
    let _ = batch::parse_all(data);
    // Stored batches are walked whether or not their CRC was checked again.
    let _ = first_record_at(data, 0);
    let _ = first_record_at(data, i64::MAX);
    // Drop every other record of a batch that validates (as every stored batch did):
    // what the cleaner rewrites validates too (lengths, record count and CRC).
    let mut nth = 0u64;
    let keep_every_other = |_: &RecordInfo| {
        nth += 1;
        nth % 2 == 0
    };
    if batch::validate(data).is_ok() {
        if let Ok(Retained::Rewritten(rewritten)) = retain_records(data, keep_every_other) {
            batch::validate(&rewritten).expect("a rewritten batch is valid");
        }
    }
});
