//! A tiered partition's local side (`remote.storage.enable=true`): what the remote tier
//! (`crates/tier`) needs to know of the local log to apply retention, and the deletion
//! of local segments the tier holds. Once the oldest segments live only in the remote
//! tier, the partition's log start (what clients see, and what retention and
//! DeleteRecords move) lies before the local log's start; reads in between are answered
//! [`BrokerError::InRemoteTier`] here and served by the tier. A follower's log start
//! follows its leader's, so that a new leader starts where the last one did.

use super::side_files::{read_remote_log_start, write_log_start_offset, write_remote_log_start};
use super::Partition;
use crate::BrokerError;
use headway_base::Offset;
use headway_log::SealedSegment;
use std::sync::atomic::Ordering;

/// The local log as the remote tier's retention sees it.
#[derive(Debug, Clone)]
pub struct LocalLog {
    /// The local log's first offset (at or after the partition's log start).
    pub start_offset: Offset,
    /// Bytes of every local segment, the active one included.
    pub size_bytes: u64,
    /// Every sealed segment, oldest first.
    pub sealed: Vec<SealedSegment>,
}

impl Partition {
    /// The local log's start, size and sealed segments.
    pub fn local_log(&self) -> Result<LocalLog, BrokerError> {
        self.with_log(|log| {
            Ok(LocalLog {
                start_offset: log.log_start_offset(),
                size_bytes: log.size_bytes(),
                sealed: log.sealed_segments(log.log_end_offset()),
            })
        })
    }

    /// The local log's first offset: the log start, or later once the remote tier
    /// holds the oldest segments.
    pub fn local_start_offset(&self) -> Result<Offset, BrokerError> {
        self.with_log(|log| Ok(log.log_start_offset()))
    }

    /// Deletes the local copies of the sealed segments that end at or before `to`,
    /// which the remote tier holds. The partition's log start stays: reads before the
    /// local log are the tier's. The first time, the log start is noted on disk before
    /// any segment goes (`remote-log-start`), so a restart keeps it rather than taking
    /// the local log's first offset. Answers the segments deleted. Blocking.
    pub fn delete_local_segments(&self, to: Offset) -> Result<usize, BrokerError> {
        let _one_at_a_time = self
            .delete_records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if read_remote_log_start(&self.dir).is_none() {
            write_remote_log_start(&self.dir, self.log_start_offset())?;
        }
        let report = self.with_log(|log| log.delete_segments_before(to))?;
        if report.deleted_segments > 0 {
            tracing::debug!(topic = %self.topic, partition = self.index.value(),
                deleted = report.deleted_segments, local_start = report.log_start_offset.value(),
                "local copies of remote segments deleted");
        }
        Ok(report.deleted_segments)
    }

    /// A follower of a tiered partition takes its leader's log start (`leader_start`,
    /// from each fetch answer), as Kafka's followers do: forward when the leader's
    /// retention or DeleteRecords moved it, back when this follower started its log over
    /// at the leader's local start and the remote tier holds what comes before (the
    /// leader's start vouches for it). A new leader then serves the same earliest offset
    /// the last one did. Nothing for an untiered topic. Blocking.
    pub fn follow_log_start(&self, leader_start: Offset) -> Result<(), BrokerError> {
        if !self.tiered.load(Ordering::Relaxed) || leader_start < Offset::ZERO {
            return Ok(());
        }
        let own = self.log_start_offset();
        if leader_start > own && leader_start <= self.high_watermark() {
            self.delete_records(super::DeleteRecordsTo::Offset(leader_start))?;
        } else if leader_start < own {
            self.take_remote_start(leader_start)?;
        }
        Ok(())
    }

    /// Moves the log start back to `start`, the remote tier's first offset, when it is
    /// earlier: a leader whose log was copied from another's local log (a follower that
    /// started over where that leader's local log started) serves the bucket's older
    /// segments, as the leader before it did. Both side files are written first, so a
    /// restart keeps it. Answers whether the start moved. Blocking.
    pub fn take_remote_start(&self, start: Offset) -> Result<bool, BrokerError> {
        let _one_at_a_time = self
            .delete_records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if start >= self.log_start_offset() {
            return Ok(false);
        }
        write_remote_log_start(&self.dir, start)?;
        write_log_start_offset(&self.dir, start)?;
        self.with_slot(|slot| {
            let moved = slot.state.remote_start_taken(start);
            self.log_start_offset
                .store(moved.value(), Ordering::Release);
            Ok(())
        })?;
        tracing::info!(topic = %self.topic, partition = self.index.value(), log_start = start.value(),
            "the log starts in the remote tier, as the last leader's did");
        Ok(true)
    }
}
