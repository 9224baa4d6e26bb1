//! The files a partition keeps next to its log (formats in `docs/log-format.md`): the
//! producers' snapshot (idempotence and open transactions), written at a clean
//! shutdown, the log start offset set by DeleteRecords when it lies inside the first
//! segment, and, for a tiered partition whose oldest segments live only in the remote
//! tier, the log start from before the local log started later. Both are written
//! with [`headway_base::durable_file::replace`]. Blocking.

use crate::producer_state::ProducerStates;
use crate::BrokerError;
use headway_base::{durable_file, Offset, ProducerEpoch, ProducerId};
use headway_log::control::{marker_coordinator_epoch, marker_kind, MarkerKind};
use headway_log::{batch, AbortedTxn, BatchHeader, CorruptBatch, Log};
use std::path::Path;

/// The producer-state snapshot in a partition directory.
const PRODUCER_SNAPSHOT: &str = "producer-state.snapshot";
/// The log start offset set by DeleteRecords, when it lies inside the first segment.
const LOG_START_OFFSET_FILE: &str = "log-start-offset";
/// The log start of a tiered partition when its oldest segments were first left to the
/// remote tier: from then on the local log may start after the partition's log start.
const REMOTE_LOG_START_FILE: &str = "remote-log-start";

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
        for (header, bytes) in batch::BatchIter::new(&data) {
            let last_offset = Offset::new(header.last_offset());
            if last_offset >= offset {
                replay(&mut states, log, &header, bytes)?;
            }
            offset = last_offset.next();
        }
    }
    Ok(states)
}

/// Takes one stored batch into the producers' state: an idempotent or transactional
/// batch is recorded; a transaction marker ends its producer's transaction, and an
/// abort goes (again, if its entry survived) into the aborted-transaction index.
/// Returns the marker's offset and its transaction's first offset when a marker ended
/// an open transaction.
pub(super) fn replay(
    states: &mut ProducerStates,
    log: &mut Log,
    header: &BatchHeader,
    bytes: &[u8],
) -> Result<Option<(Offset, Offset)>, BrokerError> {
    let base_offset = Offset::new(header.base_offset);
    let Some(kind) = marker_kind(header, bytes) else {
        states.record(header, base_offset, header.max_timestamp);
        return Ok(None);
    };
    let producer_id = ProducerId::new(header.producer_id);
    let epoch = ProducerEpoch::new(header.producer_epoch);
    let coordinator_epoch = marker_coordinator_epoch(bytes);
    let completed = states.complete(producer_id, epoch, coordinator_epoch, header.max_timestamp);
    let ended = completed
        .as_ref()
        .map(|txn| (base_offset, txn.first_offset));
    if let (MarkerKind::Abort, Some(txn)) = (kind, completed) {
        let aborted = AbortedTxn {
            producer_id,
            first_offset: txn.first_offset,
            last_offset: base_offset,
        };
        log.add_aborted(aborted).map_err(BrokerError::from_log)?;
    }
    Ok(ended)
}

/// Writes the producer-state snapshot, taken at `log_end_offset`.
pub(super) fn write_producer_snapshot(
    dir: &Path,
    states: &ProducerStates,
    log_end_offset: Offset,
) -> Result<(), BrokerError> {
    let bytes = states.encode(log_end_offset);
    Ok(durable_file::replace(&dir.join(PRODUCER_SNAPSHOT), &bytes)?)
}

/// The DeleteRecords start offset, if one was written (a big-endian i64).
pub(super) fn read_log_start_offset(dir: &Path) -> Option<Offset> {
    read_offset(dir, LOG_START_OFFSET_FILE)
}

/// An offset file's value (a big-endian i64), if the file is there and whole.
fn read_offset(dir: &Path, name: &str) -> Option<Offset> {
    let bytes = std::fs::read(dir.join(name)).ok()?;
    let value = i64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
    Some(Offset::new(value))
}

/// Writes an offset file (`durable_file::replace`: synced, then renamed into place).
fn write_offset(dir: &Path, name: &str, offset: Offset) -> Result<(), BrokerError> {
    Ok(durable_file::replace(
        &dir.join(name),
        &offset.value().to_be_bytes(),
    )?)
}

/// Writes the DeleteRecords start offset.
pub(super) fn write_log_start_offset(dir: &Path, offset: Offset) -> Result<(), BrokerError> {
    write_offset(dir, LOG_START_OFFSET_FILE, offset)
}

/// The log start noted when a tiered partition first deleted local segments that the
/// remote tier holds, if it ever did (a big-endian i64).
pub(super) fn read_remote_log_start(dir: &Path) -> Option<Offset> {
    read_offset(dir, REMOTE_LOG_START_FILE)
}

/// Notes that the partition's log starts at `offset` though its local log may start
/// later: written before the first local segment that only the remote tier keeps goes.
pub(super) fn write_remote_log_start(dir: &Path, offset: Offset) -> Result<(), BrokerError> {
    write_offset(dir, REMOTE_LOG_START_FILE, offset)
}
