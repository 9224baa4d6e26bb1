//! Bytes a producer could send as a partition's records: the broker's batch validation
//! (header, lengths, CRC-32C) must refuse what is not well formed, without panicking,
//! and agree with the header parser on what it accepts. The records inside a batch are
//! the producer's too: the ListOffsets walk over them must stop at any damage, inflate
//! no more than its bound, and never size a buffer from a count.
#![no_main]

use headway_log::batch;
use headway_server::records::first_record_at;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(headers) = batch::validate_all(data) {
        let parsed = batch::parse_all(data).expect("a validated batch set parses");
        assert_eq!(headers.len(), parsed.len());
        let total: usize = headers.iter().map(|h| h.total_bytes()).sum();
        assert_eq!(total, data.len(), "validated batches cover the input exactly");
    }
    let _ = batch::parse_all(data);
    // Stored batches are walked whether or not their CRC was checked again.
    let _ = first_record_at(data, 0);
    let _ = first_record_at(data, i64::MAX);
});
