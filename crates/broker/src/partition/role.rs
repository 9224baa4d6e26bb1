//! A replicated partition's role on this broker: leader or follower, as the cluster's
//! controller assigned it (`docs/cluster.md`). A broker that runs alone never sets one,
//! and none of this runs.
//!
//! ```text
//!   leader                                   follower
//!   append: stamp the leader epoch           fetch_position: its log end, once synced,
//!   read_for_replica: check the follower's     and the epoch of its last batch
//!     epochs, note its fetch offset in the   append_as_follower: the leader's batches at
//!     ReplicaSet, read up to the log end       their offsets; the high watermark is the
//!   high watermark: least durable end over     leader's, within what it synced itself
//!     the ISR (crate::replication)           truncate_diverging: cut what the leader's
//!   isr_proposal: who leaves or joins          history does not hold
//! ```
//!
//! Both roles change what the partition publishes after a sync
//! (`Partition::publish_durable`): alone, a synced offset is the high watermark; a
//! leader's high watermark also waits for its in-sync followers; a follower's is its
//! leader's, never past what it synced itself.
//!
//! A truncation replaces the follower's log while a sync of the old one may be running
//! on a flusher: such a sync publishes nothing (`Replication::sync_still_counts`), and
//! the truncation itself syncs what stays.
//!
//! The roles change under the log's mutex, then the replication mutex (always in that
//! order), so an append stamps the epoch of the role it was checked against.

pub use super::replica::Role;
use super::replica::{Kind, Replication};
use super::side_files::{load_producer_states, replay};
use super::{Partition, ReadResult, Slot};
use crate::io::read_pool::ReadVia;
pub use crate::replication::ReplicaId;
use crate::replication::ReplicaSet;
use crate::{BrokerError, FlushPolicy};
use headway_base::Offset;
use headway_log::batch::{self, Validated};
use headway_log::leader_epochs::{UNDEFINED_EPOCH, UNDEFINED_OFFSET};
use std::sync::atomic::Ordering;

/// A follower's fetch, as the leader sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaFetch {
    pub replica: ReplicaId,
    /// The follower's log end; it fetches only once everything before it is synced.
    pub fetch_offset: Offset,
    /// The leader epoch the follower knows, if it said.
    pub current_leader_epoch: Option<i32>,
    /// The epoch of the follower's last batch, if it has one.
    pub last_fetched_epoch: Option<i32>,
    pub max_bytes: usize,
}

/// The leader's answer to a follower's fetch.
#[derive(Debug, Clone)]
pub enum ReplicaRead {
    /// Batches from the fetch offset, up to the leader's log end, with the leader's
    /// high watermark and log start.
    Records(ReadResult),
    /// The follower's last epoch ends earlier here (or is unknown here): it must cut its
    /// log to at most `end_offset` before fetching again (KIP-320's diverging epoch).
    Diverging {
        epoch: i32,
        end_offset: i64,
        high_watermark: Offset,
        log_start_offset: Offset,
    },
}

/// Where a follower fetches next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchPosition {
    /// Its log end.
    pub offset: Offset,
    /// Everything before `offset` is synced: only then may it fetch there.
    pub synced: bool,
    /// The epoch of its last batch, if it knows one.
    pub last_fetched_epoch: Option<i32>,
    /// The leader epoch it follows.
    pub leader_epoch: i32,
    pub leader: Option<ReplicaId>,
}

/// An ISR change for the leader to propose to the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrProposal {
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<ReplicaId>,
}

impl Partition {
    fn replication(&self) -> std::sync::MutexGuard<'_, Option<Replication>> {
        self.replication
            .lock()
            .expect("partition replication mutex poisoned")
    }

    /// Takes on `role` for broker `me`, as the controller's metadata says. A role of an
    /// older leader epoch than the current one changes nothing (stale metadata); the
    /// same leader epoch for a leader takes in the controller's ISR. The first role
    /// starts the high watermark over at the log start, as nothing says what the other
    /// replicas hold yet (it moves up as soon as the in-sync followers fetch). Blocking:
    /// a new leader epoch is written to the partition's epoch history.
    pub fn set_role(&self, me: ReplicaId, role: Role, now_ms: i64) -> Result<(), BrokerError> {
        self.with_slot(|slot| {
            if self.replication().is_none() {
                self.cut_at_hole(slot)?;
            }
            // Roles change only here, under the log's mutex: what is read now still holds
            // once the replication mutex is taken again below.
            let current = self
                .replication()
                .as_ref()
                .map(|r| (r.epoch, matches!(r.kind, Kind::Leader(_))));
            if let Some((epoch, _)) = current.filter(|(epoch, _)| role.epoch() < *epoch) {
                tracing::debug!(topic = %self.topic, partition = self.index.value(),
                    epoch = role.epoch(), current = epoch, "stale role ignored");
                return Ok(());
            }
            if let Role::Leader { epoch, .. } = &role {
                if current != Some((*epoch, true)) {
                    // A new leader epoch begins at the log end. Written before the
                    // replication mutex is taken: a flusher publishing a sync takes it,
                    // and waits for no file write.
                    slot.epochs
                        .assign(*epoch, slot.log.log_end_offset())
                        .map_err(BrokerError::from_log)?;
                }
            }
            let mut guard = self.replication();
            let first = guard.is_none();
            if first {
                let start = slot.state.log_start_offset();
                slot.state.reset_high_watermark(start);
                self.high_watermark_to
                    .store(start.value(), Ordering::Release);
                self.durable.send_modify(|s| s.high_watermark = start);
                // The transactions this log ended before the restart may have markers
                // no other replica holds yet: until the high watermark reaches the log
                // end, read_committed readers stop at the log start, as if each such
                // marker had just been written (`completing_at`).
                let log_end = slot.log.log_end_offset();
                if log_end > start {
                    self.completing_at(log_end.plus(-1), start);
                }
            }
            let high_watermark = slot.state.high_watermark();
            let log_end = slot.log.log_end_offset();
            let synced = Offset::new(self.synced_to.load(Ordering::Acquire)).min(log_end);
            let (truncations, sync_taken_at) = guard
                .as_ref()
                .map_or((0, 0), |r| (r.truncations, r.sync_taken_at));
            let kind = match (&role, guard.as_mut().map(|r| (r.epoch, &mut r.kind))) {
                (Role::Leader { epoch, isr, .. }, Some((current, Kind::Leader(set))))
                    if *epoch == current =>
                {
                    set.decided(isr);
                    None
                }
                (Role::Leader { replicas, isr, .. }, _) => {
                    let mut set =
                        ReplicaSet::new(me, replicas, isr, synced, high_watermark, log_end, now_ms);
                    set.synced(synced);
                    Some(Kind::Leader(set))
                }
                (Role::Follower { leader, .. }, _) => Some(Kind::Follower {
                    leader: *leader,
                    leader_high_watermark: high_watermark,
                    synced,
                }),
            };
            let (epoch, partition_epoch) = match &role {
                Role::Leader {
                    epoch,
                    partition_epoch,
                    ..
                }
                | Role::Follower {
                    epoch,
                    partition_epoch,
                    ..
                } => (*epoch, *partition_epoch),
            };
            match (kind, guard.as_mut()) {
                (None, Some(current)) => current.partition_epoch = partition_epoch,
                (Some(kind), _) => {
                    *guard = Some(Replication {
                        me,
                        epoch,
                        partition_epoch,
                        kind,
                        truncations,
                        sync_taken_at,
                    });
                }
                (None, None) => unreachable!("a same-epoch leader has a current role"),
            }
            let leading = matches!(role, Role::Leader { .. });
            self.stamp_epoch
                .store(if leading { epoch } else { -1 }, Ordering::Release);
            self.leading.store(leading, Ordering::Release);
            self.replicated.store(true, Ordering::Release);
            // Followers' fetches waiting here look again: at the new epoch, or to hear
            // that this broker leads no more.
            self.appended.send_replace(log_end);
            let replication = guard.as_mut().expect("a role was just set");
            let high_watermark = replication.synced(synced);
            drop(guard);
            self.publish_high_watermark(high_watermark, synced);
            self.take_in_synced(&mut slot.state);
            tracing::info!(topic = %self.topic, partition = self.index.value(), epoch,
                leading, high_watermark = high_watermark.value(), log_end_offset = log_end.value(),
                "partition role set");
            Ok(())
        })
    }

    /// The partition is one of a cluster's: it serves no client until
    /// [`Partition::set_role`] gives it a role (`NOT_LEADER_OR_FOLLOWER` meanwhile).
    pub fn expect_role(&self) {
        self.replicated.store(true, Ordering::Release);
    }

    /// The leader epoch this broker knows for the partition and whether it leads it;
    /// `None` when the partition is not replicated.
    pub fn role_epoch(&self) -> Option<(i32, bool)> {
        if !self.replicated.load(Ordering::Acquire) {
            return None;
        }
        self.replication()
            .as_ref()
            .map(|r| (r.epoch, matches!(r.kind, Kind::Leader(_))))
    }

    /// Refuses a client's produce or fetch on a replica that does not lead.
    pub fn check_leading(&self) -> Result<(), BrokerError> {
        if !self.replicated.load(Ordering::Acquire) || self.leading.load(Ordering::Acquire) {
            return Ok(());
        }
        Err(self.deposed())
    }

    /// Checks a request's leader epoch against the partition's (a missing one, -1,
    /// passes).
    pub fn check_leader_epoch(&self, given: Option<i32>) -> Result<(), BrokerError> {
        let (Some(given), Some((current, _))) = (given.filter(|e| *e >= 0), self.role_epoch())
        else {
            return Ok(());
        };
        match given.cmp(&current) {
            std::cmp::Ordering::Less => Err(BrokerError::FencedLeaderEpoch { given, current }),
            std::cmp::Ordering::Greater => Err(BrokerError::UnknownLeaderEpoch { given, current }),
            std::cmp::Ordering::Equal => Ok(()),
        }
    }

    /// Stamps the leader epoch on batches about to be appended, and answers it (-1 when
    /// the partition is not replicated). Under the log mutex.
    pub(super) fn stamp(&self, batches: &mut Validated<Vec<u8>>) -> Result<i32, BrokerError> {
        self.check_leading()?;
        let epoch = self.stamp_epoch.load(Ordering::Acquire);
        if epoch >= 0 {
            batches.stamp_leader_epoch(epoch);
        }
        Ok(epoch)
    }

    /// The leader epoch appends are stamped with now (-1 when the partition is not
    /// replicated or this broker does not lead it). Under the log mutex.
    pub(super) fn stamping_epoch(&self) -> i32 {
        self.stamp_epoch.load(Ordering::Acquire)
    }

    /// The leader epoch this broker leads the partition in (-1 when it does not lead
    /// it, or the partition is not replicated). Read without the log mutex.
    pub fn leading_epoch(&self) -> i32 {
        self.stamp_epoch.load(Ordering::Acquire)
    }

    /// Where `epoch` ended in this partition's log, as OffsetForLeaderEpoch answers:
    /// `(the largest epoch at most epoch, the offset after it)`, or -1s when unknown.
    /// A partition that was never replicated has been led by epoch 0 from its start, and
    /// knows no other.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Result<(i32, i64), BrokerError> {
        self.with_slot(|slot| {
            let log_end = slot.log.log_end_offset();
            if slot.epochs.entries().is_empty() && !self.replicated.load(Ordering::Acquire) {
                return Ok(if epoch == 0 {
                    (0, log_end.value())
                } else {
                    (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
                });
            }
            Ok(slot.epochs.end_offset_for(epoch, log_end))
        })
    }

    /// Answers a follower's fetch: its epochs are checked against this leader's history
    /// (a diverged follower is told where to cut), its fetch offset counts as its
    /// durable end (which may move the high watermark), and batches are read from it up
    /// to this leader's log end.
    pub async fn read_for_replica(
        &self,
        fetch: &ReplicaFetch,
        via: &ReadVia,
        now_ms: i64,
    ) -> Result<ReplicaRead, BrokerError> {
        self.check_leading()?;
        self.check_leader_epoch(fetch.current_leader_epoch)?;
        let checked = self.with_slot(|slot| {
            let log_end = slot.log.log_end_offset();
            if let Some(last) = fetch.last_fetched_epoch.filter(|e| *e >= 0) {
                let (epoch, end_offset) = slot.epochs.end_offset_for(last, log_end);
                if epoch == UNDEFINED_EPOCH {
                    // No epoch of the leader's history ends the follower's: it keeps
                    // only what every in-sync replica holds.
                    let high_watermark = slot.state.high_watermark().value();
                    return Ok(Err((UNDEFINED_EPOCH, high_watermark)));
                }
                if epoch != last || end_offset < fetch.fetch_offset.value() {
                    return Ok(Err((epoch, end_offset)));
                }
            }
            let mut guard = self.replication();
            let Some(Replication {
                kind: Kind::Leader(set),
                ..
            }) = guard.as_mut()
            else {
                return Err(BrokerError::NotLeaderOrFollower {
                    topic: self.topic.to_string(),
                    partition: self.index,
                    leader: None,
                });
            };
            set.fetched(fetch.replica, fetch.fetch_offset, log_end, now_ms);
            let high_watermark = set.high_watermark();
            drop(guard);
            let synced = Offset::new(self.synced_to.load(Ordering::Acquire));
            self.publish_high_watermark(high_watermark, synced);
            self.take_in_synced(&mut slot.state);
            Ok(Ok(log_end))
        })?;
        match checked {
            Err((epoch, end_offset)) => Ok(ReplicaRead::Diverging {
                epoch,
                end_offset,
                high_watermark: self.high_watermark(),
                log_start_offset: self.log_start_offset(),
            }),
            Ok(log_end) => {
                let isolation = super::Isolation::ReadUncommitted;
                let read = self
                    .read_bounded(
                        fetch.fetch_offset,
                        fetch.max_bytes,
                        via,
                        isolation,
                        Some(log_end),
                    )
                    .await?;
                Ok(ReplicaRead::Records(read))
            }
        }
    }

    /// The ISR the leader should propose now, if it should change (followers that lag
    /// for more than `lag_max_ms` leave, caught-up ones join); the proposal counts as
    /// pending until the controller's metadata arrives through [`Partition::set_role`]
    /// or [`Partition::isr_refused`] is called.
    pub fn isr_proposal(&self, now_ms: i64, lag_max_ms: i64) -> Option<IsrProposal> {
        let mut guard = self.replication();
        let replication = guard.as_mut()?;
        let (epoch, partition_epoch) = (replication.epoch, replication.partition_epoch);
        let Kind::Leader(set) = &mut replication.kind else {
            return None;
        };
        let isr = set.isr_change(now_ms, lag_max_ms)?;
        set.proposing(isr.clone());
        Some(IsrProposal {
            leader_epoch: epoch,
            partition_epoch,
            isr,
        })
    }

    /// The controller refused the last ISR proposal, and its metadata, applied here up
    /// to the refusal, shows the ISR `isr` at leader epoch `epoch`: that is the ISR
    /// (what was proposed no longer counts), and another proposal may be made. A
    /// different epoch changes nothing but the refusal.
    pub fn isr_refused_at(&self, epoch: i32, isr: &[ReplicaId]) {
        let mut guard = self.replication();
        let Some(replication) = guard.as_mut() else {
            return;
        };
        let same_epoch = replication.epoch == epoch;
        let Kind::Leader(set) = &mut replication.kind else {
            return;
        };
        set.refused();
        if !same_epoch {
            return;
        }
        set.decided(isr);
        let high_watermark = set.high_watermark();
        drop(guard);
        let synced = Offset::new(self.synced_to.load(Ordering::Acquire));
        self.publish_high_watermark(high_watermark, synced);
    }

    /// The controller refused the last ISR proposal: another may be made.
    pub fn isr_refused(&self) {
        if let Some(Replication {
            kind: Kind::Leader(set),
            ..
        }) = self.replication().as_mut()
        {
            set.refused();
        }
    }

    /// How many replicas are in sync, on a leader; `None` when the partition is not
    /// replicated or this broker does not lead it.
    pub fn in_sync_replicas(&self) -> Option<usize> {
        match self.replication().as_ref()?.kind {
            Kind::Leader(ref set) => Some(set.isr().len()),
            Kind::Follower { .. } => None,
        }
    }

    /// Refuses an acks=all produce before it is written when fewer replicas are in sync
    /// than `min_insync` (NOT_ENOUGH_REPLICAS). A partition that is not replicated has
    /// one, as Kafka's with one replica; a replica that does not lead answers
    /// NOT_LEADER_OR_FOLLOWER first.
    pub fn require_in_sync(&self, min_insync: usize) -> Result<(), BrokerError> {
        self.check_leading()?;
        match self.in_sync_replicas().unwrap_or(1) {
            in_sync if in_sync < min_insync => Err(BrokerError::NotEnoughReplicas {
                in_sync,
                required: min_insync,
            }),
            _ => Ok(()),
        }
    }

    /// Waits until everything below `offset`, appended while this broker led the
    /// partition at `epoch`, is replicated to the in-sync replicas, at least
    /// `min_insync` of them. A leader that loses its role meanwhile answers
    /// `NOT_LEADER_OR_FOLLOWER`: the new leader may hold other records at those offsets,
    /// and a high watermark this broker reaches later as a follower says nothing of them.
    pub async fn wait_replicated(
        &self,
        offset: Offset,
        min_insync: usize,
        epoch: i32,
    ) -> Result<(), BrokerError> {
        if !self.replicated.load(Ordering::Acquire) {
            self.wait_durable(offset).await?;
            return self.require_after_append(1, min_insync);
        }
        let mut durable = self.durable.subscribe();
        let mut roles = self.appended.subscribe();
        loop {
            // Marked seen before they are read, so a change after the reads wakes the
            // wait below. The epoch is read after the high watermark: when it has not
            // changed, that high watermark was this leader's.
            roles.borrow_and_update();
            let state = *durable.borrow_and_update();
            if self.stamp_epoch.load(Ordering::Acquire) != epoch {
                return Err(self.deposed());
            }
            if state.failed {
                return Err(BrokerError::Storage(format!(
                    "{}/{}: log failed before offset {offset} was replicated",
                    self.topic, self.index
                )));
            }
            if state.high_watermark >= offset {
                break;
            }
            let changed = tokio::select! {
                changed = durable.changed() => changed,
                changed = roles.changed() => changed,
            };
            changed.map_err(|_| BrokerError::Storage("partition dropped".into()))?;
        }
        let in_sync = self.in_sync_replicas().ok_or_else(|| self.deposed())?;
        self.require_after_append(in_sync, min_insync)
    }

    fn require_after_append(&self, in_sync: usize, min_insync: usize) -> Result<(), BrokerError> {
        match in_sync < min_insync {
            true => Err(BrokerError::NotEnoughReplicasAfterAppend {
                in_sync,
                required: min_insync,
            }),
            false => Ok(()),
        }
    }

    /// What a write waiting on a leader that lost its role answers.
    fn deposed(&self) -> BrokerError {
        let leader = self
            .replication()
            .as_ref()
            .and_then(Replication::leader_hint);
        BrokerError::NotLeaderOrFollower {
            topic: self.topic.to_string(),
            partition: self.index,
            leader,
        }
    }

    /// Waits until a produce whose batches end before `offset`, appended at leader
    /// `epoch` ([`Appended::leader_epoch`]), may be acknowledged: with acks=all
    /// (`all`), replicated to the in-sync replicas, at least `min_insync` of them
    /// ([`Partition::wait_replicated`]); with acks=1, synced on this broker (on a broker
    /// that runs alone, the two are the same high watermark).
    pub async fn wait_acknowledged(
        &self,
        offset: Offset,
        all: bool,
        min_insync: usize,
        epoch: i32,
    ) -> Result<(), BrokerError> {
        if all {
            self.wait_replicated(offset, min_insync, epoch).await
        } else if self.replicated.load(Ordering::Acquire) {
            self.wait_synced_here(offset).await
        } else {
            self.wait_durable(offset).await
        }
    }

    /// Waits until everything below `offset` is synced on this broker's disk (what
    /// acks=1 answers on a replicated partition), or the log failed.
    pub async fn wait_synced_here(&self, offset: Offset) -> Result<(), BrokerError> {
        let mut rx = self.durable.subscribe();
        let state = *rx
            .wait_for(|s| s.failed || s.synced >= offset)
            .await
            .map_err(|_| BrokerError::Storage("partition dropped".into()))?;
        if state.synced >= offset {
            Ok(())
        } else {
            Err(BrokerError::Storage(format!(
                "{}/{}: log failed before offset {offset} was synced",
                self.topic, self.index
            )))
        }
    }

    /// Where this follower fetches next.
    pub fn fetch_position(&self) -> Result<FetchPosition, BrokerError> {
        self.with_slot(|slot| {
            let offset = slot.log.log_end_offset();
            let synced = Offset::new(self.synced_to.load(Ordering::Acquire)) >= offset;
            let last_fetched_epoch = slot.epochs.latest().map(|e| e.epoch);
            let guard = self.replication();
            let (leader_epoch, leader) = guard
                .as_ref()
                .map_or((-1, None), |r| (r.epoch, r.leader_hint()));
            Ok(FetchPosition {
                offset,
                synced,
                last_fetched_epoch,
                leader_epoch,
                leader,
            })
        })
    }

    /// Waits until everything this follower holds is synced (so that it may fetch
    /// again), or the log failed or closed.
    pub async fn wait_synced_to_end(&self) -> Result<(), BrokerError> {
        let end = self.log_end_offset()?;
        self.wait_synced_here(end).await
    }

    /// A follower takes its leader's answer: `records` (whole batches at the leader's
    /// offsets, from this follower's log end; a partial batch at the end is left for
    /// the next fetch) and the leader's high watermark, from leader epoch `epoch`. The
    /// batches' producers and transactions are taken into the partition's state as the
    /// leader's were, and their epochs into its history. Answers the new log end.
    /// Blocking.
    pub fn append_as_follower(
        &self,
        records: &[u8],
        leader_high_watermark: Offset,
        epoch: i32,
    ) -> Result<Offset, BrokerError> {
        let whole: usize = batch::BatchIter::new(records)
            .map(|(header, _)| header.total_bytes())
            .sum();
        let mut owned = if whole == 0 {
            None
        } else {
            Some(
                batch::validate_all(&records[..whole])
                    .map_err(|invalid| BrokerError::Batch(invalid.error))?
                    .into_owned(),
            )
        };
        let now_ms = self.clock.time_ms();
        let (log_end, written) = self.with_slot(|slot| {
            self.check_following(epoch)?;
            let Some(owned) = owned.as_mut() else {
                return Ok((slot.log.log_end_offset(), false));
            };
            let info = slot
                .log
                .append_replicated(owned, now_ms)
                .map_err(|e| self.append_failed(&slot.log, e))?;
            for header in owned.headers() {
                let newer = slot
                    .epochs
                    .latest()
                    .is_none_or(|latest| header.partition_leader_epoch > latest.epoch);
                if newer {
                    slot.epochs
                        .assign(
                            header.partition_leader_epoch,
                            Offset::new(header.base_offset),
                        )
                        .map_err(BrokerError::from_log)?;
                }
            }
            let producers = slot.state.replicated(info.log_end_offset);
            for (header, bytes) in batch::BatchIter::new(owned.bytes()) {
                if let Some((marker, first)) = replay(producers, &mut slot.log, &header, bytes)? {
                    // Before `wrote` shows the transaction as no longer open.
                    self.completing_at(marker, first);
                }
            }
            self.wrote(slot, info.log_end_offset);
            Ok((info.log_end_offset, true))
        })?;
        if written {
            if let Some(owned) = &owned {
                self.traffic.took_in(owned.len(), owned.headers());
            }
            if self.flush == FlushPolicy::Sync {
                self.request_sync();
            }
        }
        self.leader_high_watermark(leader_high_watermark);
        Ok(log_end)
    }

    /// A follower learnt its leader's high watermark: its own follows, within what it
    /// synced.
    fn leader_high_watermark(&self, leader_high_watermark: Offset) {
        let mut guard = self.replication();
        let Some(Replication {
            kind:
                Kind::Follower {
                    leader_high_watermark: known,
                    synced,
                    ..
                },
            ..
        }) = guard.as_mut()
        else {
            return;
        };
        *known = (*known).max(leader_high_watermark);
        let (high_watermark, synced) = ((*known).min(*synced), *synced);
        drop(guard);
        self.publish_high_watermark(high_watermark, synced);
    }

    /// Refuses a follower's step when this broker no longer follows epoch `epoch`.
    fn check_following(&self, epoch: i32) -> Result<(), BrokerError> {
        match self.replication().as_ref() {
            Some(r) if r.epoch == epoch && matches!(r.kind, Kind::Follower { .. }) => Ok(()),
            Some(r) if r.epoch > epoch => Err(BrokerError::FencedLeaderEpoch {
                given: epoch,
                current: r.epoch,
            }),
            _ => Err(BrokerError::NotLeaderOrFollower {
                topic: self.topic.to_string(),
                partition: self.index,
                leader: None,
            }),
        }
    }

    /// A follower of epoch `epoch` whose leader answered that its history diverges:
    /// the leader's `leader_epoch` ends at `leader_end_offset` (-1s when the leader
    /// knows no such epoch). The log is cut where the two histories part, never below
    /// the high watermark (what every in-sync replica holds). Answers the new log end.
    /// Blocking.
    pub fn truncate_diverging(
        &self,
        epoch: i32,
        leader_epoch: i32,
        leader_end_offset: i64,
    ) -> Result<Offset, BrokerError> {
        self.with_slot(|slot| {
            self.check_following(epoch)?;
            let log_end = slot.log.log_end_offset();
            let high_watermark = slot.state.high_watermark();
            let target = if leader_epoch == UNDEFINED_EPOCH || leader_end_offset < 0 {
                high_watermark
            } else {
                let (own_epoch, own_end) = slot.epochs.end_offset_for(leader_epoch, log_end);
                if own_epoch == UNDEFINED_EPOCH {
                    high_watermark
                } else {
                    Offset::new(leader_end_offset.min(own_end))
                }
            };
            if target < high_watermark {
                tracing::warn!(topic = %self.topic, partition = self.index.value(),
                    target = target.value(), high_watermark = high_watermark.value(),
                    "a divergence below the high watermark; cutting at the high watermark instead");
            }
            self.truncate_locked(slot, target.max(high_watermark))
        })
    }

    /// A follower whose log ends below its leader's log start (`leader_log_start`)
    /// starts its log over there, empty. Blocking.
    pub fn start_over_at(&self, epoch: i32, leader_log_start: Offset) -> Result<(), BrokerError> {
        self.with_slot(|slot| {
            self.check_following(epoch)?;
            let now_ms = self.clock.time_ms();
            let end = slot
                .log
                .truncate_fully_and_start_at(leader_log_start, now_ms)
                .map_err(|e| self.append_failed(&slot.log, e))?;
            slot.epochs
                .truncate_from_end(end)
                .and_then(|()| slot.epochs.truncate_from_start(end))
                .map_err(BrokerError::from_log)?;
            slot.state.started_over(end);
            self.log_start_offset.store(end.value(), Ordering::Release);
            self.after_truncation(slot, end);
            self.publish_high_watermark(end, end);
            Ok(())
        })
    }

    /// A replica whose recovery cut a damaged batch out of a segment before the last
    /// (keeping the later segments) holds a hole no fetch would fill: its log end says
    /// it has everything. Before its first role it cuts its log at the hole, so that as
    /// a follower it fetches the rest again from its leader, and as a leader it never
    /// serves a log with records missing below its end. Its high watermark starts over
    /// at the log start, as every replica's does at its first role.
    fn cut_at_hole(&self, slot: &mut Slot) -> Result<(), BrokerError> {
        let Some(at) = slot.hole_at.take() else {
            return Ok(());
        };
        if at >= slot.log.log_end_offset() {
            return Ok(());
        }
        let start = slot.state.log_start_offset();
        slot.state.reset_high_watermark(start);
        tracing::warn!(topic = %self.topic, partition = self.index.value(), at = at.value(),
            log_end_offset = slot.log.log_end_offset().value(),
            "recovery cut a damaged batch out of a sealed segment; cutting the log there to fetch the rest again");
        self.truncate_locked(slot, at)?;
        self.high_watermark_to
            .store(start.value(), Ordering::Release);
        self.durable.send_modify(|s| s.high_watermark = start);
        Ok(())
    }

    fn truncate_locked(&self, slot: &mut Slot, target: Offset) -> Result<Offset, BrokerError> {
        let now_ms = self.clock.time_ms();
        let end = slot
            .log
            .truncate_to(target, now_ms)
            .map_err(|e| self.append_failed(&slot.log, e))?;
        slot.epochs
            .truncate_from_end(end)
            .map_err(BrokerError::from_log)?;
        if end < slot.state.high_watermark() {
            // Only a batch that straddles the high watermark could do this, and the
            // high watermark always falls between batches.
            slot.log.poison();
            return Err(BrokerError::Storage(format!(
                "{}/{}: truncation to {target} cut below the high watermark",
                self.topic, self.index
            )));
        }
        let producers = load_producer_states(&self.dir, &mut slot.log)?;
        let start = slot.log.log_start_offset();
        slot.state.truncated(start, end, producers);
        self.after_truncation(slot, end);
        Ok(end)
    }

    /// What a truncation to `end` changes outside the log: syncs still running count
    /// for nothing, what stays is synced, and nothing waits for a sync.
    fn after_truncation(&self, slot: &mut Slot, end: Offset) {
        let mut guard = self.replication();
        if let Some(replication) = guard.as_mut() {
            replication.truncations += 1;
            if let Kind::Follower { synced, .. } = &mut replication.kind {
                *synced = end;
            }
        }
        drop(guard);
        self.synced_to.store(end.value(), Ordering::Release);
        self.durable.send_modify(|s| s.synced = end);
        self.unsynced
            .store(slot.log.unsynced_bytes(), Ordering::Release);
        let first_unstable = slot.state.first_unstable_offset();
        self.durable
            .send_modify(|s| s.first_unstable_offset = first_unstable);
        self.completing_cut(end);
        tracing::info!(topic = %self.topic, partition = self.index.value(),
            log_end_offset = end.value(), "follower log truncated");
    }
}
