//! A partition's bookkeeping as plain code over values: where the next batch goes, what
//! an idempotent producer's batch means (new, a retry, out of order), the high watermark
//! and the log start offset. No threads, files or clocks: the shell
//! ([`super::Partition`]) calls these under the partition's mutex, does the I/O they
//! decide on (the log append, the `log-start-offset` file) and passes the time in.
//!
//! The offsets it keeps satisfy, after every step:
//! `log_start_offset <= high_watermark <= log_end_offset`, each only moves forward, and
//! the batches the log accepts have dense offsets (each starts at the previous end).
//! The log assigns the offsets; [`PartitionState::appended`] checks that it assigned the
//! ones planned, so a log and a state that disagree stop the partition loudly instead
//! of acknowledging offsets twice.
//!
//! Transactions: the producers' table knows each open transaction's first offset;
//! the last stable offset is the smallest of them, or the high watermark, never above
//! the high watermark. A marker is one more append ([`PartitionState::marker_appended`]).
//!
//! Retention is the one move the state does not bound: the log deletes whole segments
//! by age or size and reports the new start, which [`PartitionState::retention_moved`]
//! takes as it is, as the broker always has.

use crate::producer_state::{CompletedTxn, ProducerStates, SequenceCheck, SequenceError};
use crate::BrokerError;
use headway_base::{Offset, ProducerEpoch, ProducerId};
use headway_log::BatchHeader;

/// A partition's offsets and its idempotent producers. Lives under the partition's
/// mutex, next to the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    log_start_offset: Offset,
    high_watermark: Offset,
    log_end_offset: Offset,
    producers: ProducerStates,
}

/// What to do with the batches of one produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendPlan {
    /// Append them; the log gives the first record `base_offset`.
    Write { base_offset: Offset },
    /// An idempotent producer's retry of a batch already in the log: answer with the
    /// offsets it got the first time, append nothing.
    Duplicate {
        base_offset: Offset,
        log_end_offset: Offset,
    },
}

/// Where DeleteRecords asks the log to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteRecordsTo {
    /// Everything durable so far (Kafka's offset -1).
    HighWatermark,
    Offset(Offset),
}

impl DeleteRecordsTo {
    /// The wire's offset, where -1 means the high watermark.
    pub fn from_wire(offset: i64) -> DeleteRecordsTo {
        match offset {
            -1 => DeleteRecordsTo::HighWatermark,
            offset => DeleteRecordsTo::Offset(Offset::new(offset)),
        }
    }
}

/// What a DeleteRecords does to the log start offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStartMove {
    /// The log already starts at or past the target: nothing to write.
    Unchanged(Offset),
    /// Persist this start, then [`PartitionState::delete_records_moved`] it.
    To(Offset),
}

/// How a read at some offset relates to the high watermark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadWindow {
    /// At the high watermark: nothing to read yet.
    AtHighWatermark,
    /// Past the high watermark: written, perhaps, but not durable, so not shown. The
    /// shell still locates it so that an offset past the log's end is refused.
    NotDurable,
    /// Below the high watermark: read, up to the high watermark.
    Durable,
}

impl ReadWindow {
    /// Where a read at `offset` stands, given the mirrors the read path sees without
    /// the mutex. An offset below the log start is out of range.
    pub fn of(
        offset: Offset,
        log_start_offset: Offset,
        high_watermark: Offset,
    ) -> Result<ReadWindow, BrokerError> {
        if offset < log_start_offset {
            return Err(BrokerError::OffsetOutOfRange {
                offset,
                log_start_offset,
                high_watermark,
            });
        }
        Ok(match offset.cmp(&high_watermark) {
            std::cmp::Ordering::Equal => ReadWindow::AtHighWatermark,
            std::cmp::Ordering::Greater => ReadWindow::NotDurable,
            std::cmp::Ordering::Less => ReadWindow::Durable,
        })
    }
}

impl PartitionState {
    /// The state of a log just opened: everything recovered is durable, so the high
    /// watermark is the log's end. `stored_log_start` is the DeleteRecords start read
    /// from the partition's side file, if any; it counts only at or after
    /// `log_start_offset` (the local log's first offset, or zero for a tiered partition
    /// whose oldest segments live only in the remote tier) and not past the end.
    pub fn recovered(
        log_start_offset: Offset,
        log_end_offset: Offset,
        stored_log_start: Option<Offset>,
        producers: ProducerStates,
    ) -> PartitionState {
        let start = stored_log_start
            .unwrap_or(Offset::ZERO)
            .clamp(log_start_offset, log_end_offset);
        PartitionState {
            log_start_offset: start,
            high_watermark: log_end_offset,
            log_end_offset,
            producers,
        }
    }

    pub fn log_start_offset(&self) -> Offset {
        self.log_start_offset
    }

    pub fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    pub fn log_end_offset(&self) -> Offset {
        self.log_end_offset
    }

    pub fn producers(&self) -> &ProducerStates {
        &self.producers
    }

    /// Decides what to do with a produce whose single idempotent batch is `idempotent`
    /// (`None` for plain batches, which are always appended). Changes nothing.
    pub fn plan_append(
        &self,
        idempotent: Option<&BatchHeader>,
    ) -> Result<AppendPlan, SequenceError> {
        if let Some(header) = idempotent {
            if let SequenceCheck::Duplicate { base_offset } = self.producers.check(header)? {
                let end = base_offset.plus(i64::from(header.last_offset_delta)).next();
                return Ok(AppendPlan::Duplicate {
                    base_offset,
                    log_end_offset: end,
                });
            }
        }
        Ok(AppendPlan::Write {
            base_offset: self.log_end_offset,
        })
    }

    /// The log appended a planned write: its batches hold `base_offset` up to
    /// `log_end_offset` (exclusive), at `now_ms`. Panics when the log assigned other
    /// offsets than planned: offsets would no longer be dense.
    pub fn appended(
        &mut self,
        idempotent: Option<&BatchHeader>,
        base_offset: Offset,
        log_end_offset: Offset,
        now_ms: i64,
    ) {
        assert_eq!(
            base_offset, self.log_end_offset,
            "the log assigned an offset other than the partition's next one"
        );
        assert!(
            log_end_offset > base_offset,
            "an append holds at least one offset"
        );
        self.log_end_offset = log_end_offset;
        if let Some(header) = idempotent {
            self.producers.record(header, base_offset, now_ms);
        }
    }

    /// Checks a transaction marker before it is written (`plan_append` for markers).
    pub fn plan_marker(
        &self,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        coordinator_epoch: i32,
    ) -> Result<Offset, SequenceError> {
        self.producers
            .check_marker(producer_id, epoch, coordinator_epoch)?;
        Ok(self.log_end_offset)
    }

    /// The log appended a marker at `offset`: the producer's open transaction, if
    /// any, ends (and is returned). Panics when the log put it elsewhere than planned.
    pub fn marker_appended(
        &mut self,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        coordinator_epoch: i32,
        offset: Offset,
        now_ms: i64,
    ) -> Option<CompletedTxn> {
        assert_eq!(
            offset, self.log_end_offset,
            "the log put a marker elsewhere than at the partition's next offset"
        );
        self.log_end_offset = offset.next();
        self.producers
            .complete(producer_id, epoch, coordinator_epoch, now_ms)
    }

    /// The first offset of the oldest open transaction, if any.
    pub fn first_unstable_offset(&self) -> Option<Offset> {
        self.producers.first_unstable_offset()
    }

    /// Offsets below it belong to no open transaction and are durable: what
    /// read_committed readers may see.
    pub fn last_stable_offset(&self) -> Offset {
        last_stable_offset(self.first_unstable_offset(), self.high_watermark)
    }

    /// Everything below `offset` is durable (a sync covered it, or the flush policy
    /// does not wait for one). Returns the new high watermark when it moved: syncs may
    /// report out of order, and an older one never moves it back.
    pub fn durable_to(&mut self, offset: Offset) -> Option<Offset> {
        assert!(
            offset <= self.log_end_offset,
            "durable offset {offset} past the log end {}",
            self.log_end_offset
        );
        (offset > self.high_watermark).then(|| {
            self.high_watermark = offset;
            offset
        })
    }

    /// Decides a DeleteRecords: a target past the high watermark (or negative) is out
    /// of range; one at or below the current start changes nothing.
    pub fn plan_delete_records(&self, to: DeleteRecordsTo) -> Result<LogStartMove, BrokerError> {
        let target = match to {
            DeleteRecordsTo::HighWatermark => self.high_watermark,
            DeleteRecordsTo::Offset(offset) => offset,
        };
        if target.value() < 0 || target > self.high_watermark {
            return Err(BrokerError::OffsetOutOfRange {
                offset: target,
                log_start_offset: self.log_start_offset,
                high_watermark: self.high_watermark,
            });
        }
        Ok(if target <= self.log_start_offset {
            LogStartMove::Unchanged(self.log_start_offset)
        } else {
            LogStartMove::To(target)
        })
    }

    /// A planned DeleteRecords start is on disk: it takes effect (never backwards).
    pub fn delete_records_moved(&mut self, to: Offset) -> Offset {
        assert!(
            to <= self.high_watermark,
            "DeleteRecords start {to} past the high watermark {}",
            self.high_watermark
        );
        self.log_start_offset = self.log_start_offset.max(to);
        self.log_start_offset
    }

    /// A tiered partition's new leader takes the remote tier's earlier start (the data
    /// before its own start is in the bucket): the log start moves back to `start`.
    pub fn remote_start_taken(&mut self, start: Offset) -> Offset {
        self.log_start_offset = self.log_start_offset.min(start);
        self.log_start_offset
    }

    /// Retention deleted segments; the log now starts at `log_start_offset`.
    pub fn retention_moved(&mut self, log_start_offset: Offset) -> Offset {
        self.log_start_offset = self.log_start_offset.max(log_start_offset);
        self.log_start_offset
    }

    /// A follower appended its leader's batches, which reach up to `log_end_offset`
    /// (exclusive; a compacted leader's batches leave gaps). The producers' state is
    /// handed back so the batches can be taken into it.
    pub fn replicated(&mut self, log_end_offset: Offset) -> &mut ProducerStates {
        assert!(
            log_end_offset >= self.log_end_offset,
            "a replicated append moved the log end back"
        );
        self.log_end_offset = log_end_offset;
        &mut self.producers
    }

    /// A follower's log was cut to end at `log_end_offset`, and its producers rebuilt
    /// from what stays. Panics when the cut went below the high watermark: what every
    /// in-sync replica holds is never cut.
    pub fn truncated(
        &mut self,
        log_start_offset: Offset,
        log_end_offset: Offset,
        producers: ProducerStates,
    ) {
        assert!(
            self.high_watermark <= log_end_offset,
            "truncated to {log_end_offset}, below the high watermark {}",
            self.high_watermark
        );
        self.log_start_offset = self.log_start_offset.max(log_start_offset);
        self.log_end_offset = log_end_offset;
        self.producers = producers;
    }

    /// A partition becomes a replica: the high watermark starts over at `offset` (its
    /// log start), as nothing says yet what the other replicas hold.
    pub fn reset_high_watermark(&mut self, offset: Offset) {
        self.high_watermark = offset.min(self.log_end_offset);
    }

    /// A follower whose whole log was replaced by an empty one starting at `offset`
    /// (its leader's log start is past its end): everything starts there.
    pub fn started_over(&mut self, offset: Offset) {
        self.log_start_offset = offset;
        self.log_end_offset = offset;
        self.high_watermark = offset;
        self.producers = ProducerStates::default();
    }

    /// Forgets idempotent producers idle for longer than `idle_ms` at `now_ms`.
    pub fn expire_producers(&mut self, now_ms: i64, idle_ms: i64) -> usize {
        self.producers.expire(now_ms, idle_ms)
    }
}

/// The last stable offset given the first open transaction's offset and the high
/// watermark: the smaller of the two.
pub fn last_stable_offset(first_unstable: Option<Offset>, high_watermark: Offset) -> Offset {
    first_unstable.map_or(high_watermark, |first| first.min(high_watermark))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod txn_tests;
