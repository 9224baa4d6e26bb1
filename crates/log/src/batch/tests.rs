//! Tests of `validate_all`: what a checked buffer carries, and what a refused one still
//! tells a produce (the first transactional header, the size).

use super::*;
use crate::testutil::batch;

/// `bytes` with the transactional attribute set and the CRC recomputed.
fn transactional(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes[ATTRIBUTES_OFFSET + 1] |= 0x10;
    let crc = crc32c::crc32c(&bytes[ATTRIBUTES_OFFSET..]);
    bytes[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    bytes
}

#[test]
fn whole_batches_carry_their_headers_and_offset_count() {
    let bytes = [batch(3, 10, 0, 1), transactional(batch(2, 10, 0, 2))].concat();
    let validated = validate_all(&bytes).expect("whole batches");
    assert_eq!(validated.len(), bytes.len());
    assert_eq!(validated.headers().len(), 2);
    assert_eq!(validated.offset_count(), 5);
    assert_eq!(
        validated.first_transactional(),
        Some(&validated.headers()[1])
    );
    let owned = validated.into_owned();
    assert_eq!(owned.bytes(), &bytes[..]);
    assert_eq!(owned.into_bytes(), bytes);
}

#[test]
fn a_refusal_still_shows_the_first_transactional_header() {
    let txn = transactional(batch(2, 10, 0, 2));
    let txn_header = BatchHeader::parse(&txn).unwrap();

    // Before the bad batch.
    let bytes = [txn.clone(), vec![0; 7]].concat();
    let invalid = validate_all(&bytes).unwrap_err();
    assert_eq!(invalid.error, BatchError::TooShort { len: 7 });
    assert_eq!(invalid.first_transactional, Some(txn_header));
    assert_eq!(invalid.len, bytes.len());

    // After a batch whose CRC is wrong: its header and the next still parse.
    let mut bad = batch(1, 10, 0, 1);
    *bad.last_mut().unwrap() ^= 1;
    let bytes = [bad, txn.clone()].concat();
    let invalid = validate_all(&bytes).unwrap_err();
    assert!(matches!(invalid.error, BatchError::CrcMismatch { .. }));
    assert_eq!(invalid.first_transactional, Some(txn_header));

    // Nothing to show.
    let invalid = validate_all(&[]).unwrap_err();
    assert_eq!(invalid.first_transactional, None);
    assert_eq!(invalid.len, 0);
}

#[test]
fn a_stamped_leader_epoch_leaves_every_batch_valid() {
    let mut bytes = [batch(3, 10, 0, 1), batch(2, 10, 0, 2)].concat();
    let mut headers = validate_all(&bytes)
        .expect("whole batches")
        .headers()
        .to_vec();
    stamp_leader_epoch(&mut bytes, &mut headers, 7);
    let stamped = validate_all(&bytes).expect("the CRC does not cover the epoch");
    assert!(stamped
        .headers()
        .iter()
        .all(|h| h.partition_leader_epoch == 7));
    assert_eq!(stamped.headers(), &headers[..]);
}
