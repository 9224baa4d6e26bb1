//! The two files a partition keeps next to its log (formats in `docs/log-format.md`):
//! the idempotent producers' snapshot, written at a clean shutdown, and the log start
//! offset set by DeleteRecords when it lies inside the first segment. Both are written
//! with [`crate::durable_file::replace`]. Blocking.

use crate::durable_file;
use crate::producer_state::ProducerStates;
use crate::BrokerError;
use headway_log::{batch, CorruptBatch, Log, Offset};
use std::path::Path;

/// The producer-state snapshot in a partition directory.
const PRODUCER_SNAPSHOT: &str = "producer-state.snapshot";
/// The log start offset set by DeleteRecords, when it lies inside the first segment.
const LOG_START_OFFSET_FILE: &str = "log-start-offset";

/// Rebuilds the idempotent producers' state: the snapshot written at the last clean
/// shutdown, then every batch after it. Without a usable snapshot, the whole log is
/// scanned.
///
/// A damaged batch ends the scan there and marks its segment for repair: the log is
/// repaired at the next start, and producers whose batches lie past the damage get
/// UNKNOWN_PRODUCER_ID or a sequence error and reset, as after expiry.
pub(super) fn load_producer_states(
    dir: &Path,
    log: &mut Log,
) -> Result<ProducerStates, BrokerError> {
    let end = log.log_end_offset();
    let (mut states, from) = match std::fs::read(dir.join(PRODUCER_SNAPSHOT))
        .ok()
        .and_then(|b| ProducerStates::decode(&b))
    {
        Some((states, at)) if at <= end => (states, at.max(log.log_start_offset())),
        _ => (ProducerStates::default(), log.log_start_offset()),
    };
    let mut offset = from;
    while offset < end {
        let slice = log.locate(offset).map_err(BrokerError::from_log)?;
        let data = match slice.read(1024 * 1024, end) {
            Ok(data) => data,
            Err(e) => match CorruptBatch::find(&e) {
                Some(corrupt) => {
                    tracing::error!(dir = %dir.display(), %corrupt,
                        "stored record batch is corrupt; the segment is marked for repair at the next start");
                    log.mark_for_repair(corrupt.segment_base_offset)
                        .map_err(BrokerError::from_log)?;
                    break;
                }
                None => {
                    return Err(BrokerError::Storage(format!(
                        "scan {} for producer state: {e}",
                        dir.display()
                    )))
                }
            },
        };
        if data.is_empty() {
            break;
        }
        for (header, _) in batch::BatchIter::new(&data) {
            let last_offset = Offset::new(header.last_offset());
            if last_offset >= offset {
                states.record(
                    &header,
                    Offset::new(header.base_offset),
                    header.max_timestamp,
                );
            }
            offset = last_offset.next();
        }
    }
    Ok(states)
}

/// Writes the producer-state snapshot, taken at `log_end_offset`.
pub(super) fn write_producer_snapshot(
    dir: &Path,
    states: &ProducerStates,
    log_end_offset: Offset,
) -> Result<(), BrokerError> {
    let bytes = states.encode(log_end_offset);
    durable_file::replace(&dir.join(PRODUCER_SNAPSHOT), &bytes)
}

/// The DeleteRecords start offset, if one was written (a big-endian i64).
pub(super) fn read_log_start_offset(dir: &Path) -> Option<Offset> {
    let bytes = std::fs::read(dir.join(LOG_START_OFFSET_FILE)).ok()?;
    let value = i64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
    Some(Offset::new(value))
}

/// Writes the DeleteRecords start offset.
pub(super) fn write_log_start_offset(dir: &Path, offset: Offset) -> Result<(), BrokerError> {
    durable_file::replace(
        &dir.join(LOG_START_OFFSET_FILE),
        &offset.value().to_be_bytes(),
    )
}
