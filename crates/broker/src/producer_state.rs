//! Idempotent producers: per partition, the last batches of each producer id, so that a
//! retried batch is answered with its original offset instead of being appended twice,
//! and a gap in sequence numbers is refused.
//!
//! A producer (id, epoch) numbers its batches per partition: each batch carries the
//! sequence of its first record, and the next batch must start right after the previous
//! one's last record (sequences wrap from `i32::MAX` to 0). The table keeps the last
//! [`BATCHES_PER_PRODUCER`] batches of each producer, which is the most a Kafka producer
//! has in flight per partition (`max.in.flight.requests.per.connection` ≤ 5 with
//! idempotence), so any retry it can send is recognised.
//!
//! Transactions (KIP-98): a producer's transactional batches since its last marker in
//! this partition form its ongoing transaction, remembered by its first offset; the
//! smallest such offset bounds the last stable offset. A marker ([`ProducerStates::
//! complete`]) ends it; a marker at a newer epoch fences the older one (KIP-890 bumps
//! the epoch at every transaction's end), and one from an older coordinator epoch is
//! refused. A producer with an ongoing transaction is never evicted or expired: its
//! first offset pins the last stable offset until the coordinator ends it.
//!
//! The table is plain data checked and updated under the partition's mutex, together
//! with the append, so checking and assigning offsets is one step. It is rebuilt at
//! start-up from a snapshot written at clean shutdown plus the batches after it.

use headway_base::{limits, Offset, ProducerEpoch, ProducerId};
use headway_log::BatchHeader;
use std::collections::{BTreeSet, HashMap, VecDeque};

/// Batches remembered per producer and partition.
pub const BATCHES_PER_PRODUCER: usize = 5;

/// A batch already in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMeta {
    pub first_sequence: i32,
    pub last_sequence: i32,
    pub base_offset: Offset,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub epoch: ProducerEpoch,
    pub batches: VecDeque<BatchMeta>,
    pub last_append_ms: i64,
    /// The transaction this producer has open in this partition, if any.
    pub ongoing: Option<OngoingTxn>,
    /// The coordinator epoch of the last marker written for this producer.
    pub coordinator_epoch: Option<i32>,
}

/// A transaction open in a partition: its first batch's offset and when it came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OngoingTxn {
    pub first_offset: Offset,
    pub started_ms: i64,
}

/// How a transaction ended (the marker's type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransactionResult {
    Commit,
    Abort,
}

/// A transaction a marker ended here: the producer's transaction that was open, if
/// one was (a marker for a producer with nothing open changes no transaction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: ProducerId,
    pub first_offset: Offset,
}

/// What to do with an incoming idempotent batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append it.
    Append,
    /// It is a retry of a batch already in the log at this offset: answer with it.
    Duplicate { base_offset: Offset },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    #[error("producer {producer_id} epoch {epoch} is older than its current epoch {current}")]
    InvalidProducerEpoch {
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        current: ProducerEpoch,
    },
    #[error("producer {producer_id}: expected sequence {expected}, got {got}")]
    OutOfOrderSequence {
        producer_id: ProducerId,
        expected: i32,
        got: i32,
    },
    #[error(
        "producer {producer_id} has no state here and its first batch starts at sequence {got}"
    )]
    UnknownProducerId { producer_id: ProducerId, got: i32 },
    #[error("producer {producer_id}: a marker from coordinator epoch {coordinator_epoch} is older than the last one, {current}")]
    CoordinatorFenced {
        producer_id: ProducerId,
        coordinator_epoch: i32,
        current: i32,
    },
    #[error("the partition has {limit} transactions open, its most; producer {producer_id} may not open another")]
    TooManyTransactions {
        producer_id: ProducerId,
        limit: usize,
    },
}

impl ProducerEntry {
    fn new(epoch: ProducerEpoch, now_ms: i64) -> ProducerEntry {
        ProducerEntry {
            epoch,
            batches: VecDeque::with_capacity(BATCHES_PER_PRODUCER),
            last_append_ms: now_ms,
            ongoing: None,
            coordinator_epoch: None,
        }
    }
}

fn last_sequence(header: &BatchHeader) -> i32 {
    // Sequences wrap at i32::MAX, like the offsets delta they follow.
    ((i64::from(header.base_sequence) + i64::from(header.last_offset_delta))
        % (i64::from(i32::MAX) + 1)) as i32
}

fn next_sequence(sequence: i32) -> i32 {
    if sequence == i32::MAX {
        0
    } else {
        sequence + 1
    }
}

/// Whether a batch takes part in idempotence: it names a producer (the header's -1 is
/// "none") and numbers its records.
pub fn is_idempotent(header: &BatchHeader) -> bool {
    ProducerId::from_wire(header.producer_id).is_some() && header.base_sequence >= 0
}

/// The producer id and epoch an idempotent batch's header carries.
fn producer_of(header: &BatchHeader) -> (ProducerId, ProducerEpoch) {
    (
        ProducerId::new(header.producer_id),
        ProducerEpoch::new(header.producer_epoch),
    )
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProducerStates {
    producers: HashMap<ProducerId, ProducerEntry>,
    /// The open transactions by first offset: the first one bounds the last stable
    /// offset. Mirrors the entries' `ongoing`.
    ongoing: BTreeSet<(Offset, ProducerId)>,
}

impl ProducerStates {
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    pub fn get(&self, producer_id: ProducerId) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Decides what to do with an incoming idempotent batch, without changing anything.
    pub fn check(&self, header: &BatchHeader) -> Result<SequenceCheck, SequenceError> {
        let (producer_id, epoch) = producer_of(header);
        let opens = header.is_transactional()
            && self
                .producers
                .get(&producer_id)
                .is_none_or(|e| e.ongoing.is_none());
        if opens && self.ongoing.len() >= limits::TRANSACTIONS_PER_PARTITION_MAX {
            return Err(SequenceError::TooManyTransactions {
                producer_id,
                limit: limits::TRANSACTIONS_PER_PARTITION_MAX,
            });
        }
        let Some(entry) = self.producers.get(&producer_id) else {
            // A new producer starts at 0. A later sequence means its state here was
            // lost (expired); the client resets on UNKNOWN_PRODUCER_ID.
            return if header.base_sequence == 0 {
                Ok(SequenceCheck::Append)
            } else {
                Err(SequenceError::UnknownProducerId {
                    producer_id,
                    got: header.base_sequence,
                })
            };
        };
        if epoch < entry.epoch {
            return Err(SequenceError::InvalidProducerEpoch {
                producer_id,
                epoch,
                current: entry.epoch,
            });
        }
        if epoch > entry.epoch {
            return if header.base_sequence == 0 {
                Ok(SequenceCheck::Append)
            } else {
                Err(SequenceError::OutOfOrderSequence {
                    producer_id,
                    expected: 0,
                    got: header.base_sequence,
                })
            };
        }
        let last = last_sequence(header);
        if let Some(b) = entry
            .batches
            .iter()
            .find(|b| b.first_sequence == header.base_sequence && b.last_sequence == last)
        {
            return Ok(SequenceCheck::Duplicate {
                base_offset: b.base_offset,
            });
        }
        let expected = entry
            .batches
            .back()
            .map_or(0, |b| next_sequence(b.last_sequence));
        if header.base_sequence != expected {
            return Err(SequenceError::OutOfOrderSequence {
                producer_id,
                expected,
                got: header.base_sequence,
            });
        }
        Ok(SequenceCheck::Append)
    }

    /// Records a batch that is now in the log at `base_offset`.
    pub fn record(&mut self, header: &BatchHeader, base_offset: Offset, now_ms: i64) {
        if !is_idempotent(header) {
            return;
        }
        let (producer_id, epoch) = producer_of(header);
        let entry = self
            .producers
            .entry(producer_id)
            .or_insert_with(|| ProducerEntry::new(epoch, now_ms));
        if header.is_transactional() && entry.ongoing.is_none() {
            entry.ongoing = Some(OngoingTxn {
                first_offset: base_offset,
                started_ms: now_ms,
            });
            self.ongoing.insert((base_offset, producer_id));
        }
        if epoch != entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == BATCHES_PER_PRODUCER {
            entry.batches.pop_front();
        }
        entry.batches.push_back(BatchMeta {
            first_sequence: header.base_sequence,
            last_sequence: last_sequence(header),
            base_offset,
        });
        entry.last_append_ms = entry.last_append_ms.max(now_ms);
        if self.producers.len() > limits::PRODUCERS_PER_PARTITION_MAX {
            self.evict_oldest();
        }
    }

    /// Checks a marker for `producer_id` at `epoch` from `coordinator_epoch` before it
    /// is written: an older producer epoch or coordinator epoch is refused.
    pub fn check_marker(
        &self,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        coordinator_epoch: i32,
    ) -> Result<(), SequenceError> {
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(());
        };
        if epoch < entry.epoch {
            return Err(SequenceError::InvalidProducerEpoch {
                producer_id,
                epoch,
                current: entry.epoch,
            });
        }
        match entry.coordinator_epoch {
            Some(current) if coordinator_epoch < current => Err(SequenceError::CoordinatorFenced {
                producer_id,
                coordinator_epoch,
                current,
            }),
            _ => Ok(()),
        }
    }

    /// A marker (checked with [`ProducerStates::check_marker`]) is in the log: the
    /// producer's open transaction, if any, ends and is returned. The marker's epoch
    /// becomes the producer's (a newer one fences older batches and restarts the
    /// sequence at 0).
    pub fn complete(
        &mut self,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        coordinator_epoch: i32,
        now_ms: i64,
    ) -> Option<CompletedTxn> {
        let entry = self
            .producers
            .entry(producer_id)
            .or_insert_with(|| ProducerEntry::new(epoch, now_ms));
        if epoch > entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        entry.coordinator_epoch = Some(coordinator_epoch);
        entry.last_append_ms = entry.last_append_ms.max(now_ms);
        let ongoing = entry.ongoing.take()?;
        self.ongoing.remove(&(ongoing.first_offset, producer_id));
        if self.producers.len() > limits::PRODUCERS_PER_PARTITION_MAX {
            self.evict_oldest();
        }
        Some(CompletedTxn {
            producer_id,
            first_offset: ongoing.first_offset,
        })
    }

    /// The first offset of the oldest open transaction: the last stable offset is at
    /// most this.
    pub fn first_unstable_offset(&self) -> Option<Offset> {
        self.ongoing.first().map(|(offset, _)| *offset)
    }

    /// The oldest open transaction: its producer, first offset and start time.
    pub fn oldest_ongoing(&self) -> Option<(ProducerId, Offset, i64)> {
        let (offset, id) = self.ongoing.first()?;
        let started_ms = self.producers[id].ongoing.map_or(0, |t| t.started_ms);
        Some((*id, *offset, started_ms))
    }

    /// How many transactions are open.
    pub fn ongoing_count(&self) -> usize {
        self.ongoing.len()
    }

    /// Forgets the idlest producer without an open transaction (forgetting one with a
    /// transaction would drop its records' bound on the last stable offset).
    fn evict_oldest(&mut self) {
        let idlest = self
            .producers
            .iter()
            .filter(|(_, e)| e.ongoing.is_none())
            .min_by_key(|(_, e)| e.last_append_ms);
        if let Some((&id, _)) = idlest {
            tracing::warn!(
                producer_id = id.value(),
                "too many producers on one partition: forgetting the idlest"
            );
            self.producers.remove(&id);
        }
    }

    /// Forgets producers idle for longer than `idle_ms`. Returns how many.
    pub fn expire(&mut self, now_ms: i64, idle_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers
            .retain(|_, e| e.ongoing.is_some() || now_ms - e.last_append_ms <= idle_ms);
        before - self.producers.len()
    }

    /// Encodes the table for a snapshot file (see `docs/log-format.md`).
    pub fn encode(&self, log_end_offset: Offset) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.producers.len() * 64);
        out.extend_from_slice(&SNAPSHOT_MAGIC.to_be_bytes());
        out.extend_from_slice(&log_end_offset.value().to_be_bytes());
        out.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        let mut ids: Vec<&ProducerId> = self.producers.keys().collect();
        ids.sort();
        for id in ids {
            let e = &self.producers[id];
            out.extend_from_slice(&id.value().to_be_bytes());
            out.extend_from_slice(&e.epoch.value().to_be_bytes());
            out.extend_from_slice(&e.last_append_ms.to_be_bytes());
            out.push(e.batches.len() as u8);
            for b in &e.batches {
                out.extend_from_slice(&b.first_sequence.to_be_bytes());
                out.extend_from_slice(&b.last_sequence.to_be_bytes());
                out.extend_from_slice(&b.base_offset.value().to_be_bytes());
            }
            let flags =
                u8::from(e.ongoing.is_some()) | u8::from(e.coordinator_epoch.is_some()) << 1;
            out.push(flags);
            if let Some(txn) = e.ongoing {
                out.extend_from_slice(&txn.first_offset.value().to_be_bytes());
                out.extend_from_slice(&txn.started_ms.to_be_bytes());
            }
            if let Some(coordinator_epoch) = e.coordinator_epoch {
                out.extend_from_slice(&coordinator_epoch.to_be_bytes());
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Decodes a snapshot: the table and the log end offset it was taken at. `None`
    /// for a damaged or foreign file (the caller then rebuilds from the log).
    pub fn decode(bytes: &[u8]) -> Option<(ProducerStates, Offset)> {
        let (body, crc) = bytes.split_at(bytes.len().checked_sub(4)?);
        if crc32c::crc32c(body) != u32::from_be_bytes(crc.try_into().ok()?) {
            return None;
        }
        let mut r = Reader(body);
        let with_transactions = match r.u32()? {
            SNAPSHOT_MAGIC => true,
            SNAPSHOT_MAGIC_V1 => false,
            _ => return None,
        };
        let log_end_offset = Offset::new(r.i64()?);
        let count = r.u32()?;
        let mut producers = HashMap::new();
        let mut ongoing = BTreeSet::new();
        for _ in 0..count {
            let id = ProducerId::new(r.i64()?);
            let epoch = ProducerEpoch::new(r.i16()?);
            let last_append_ms = r.i64()?;
            let n = r.u8()? as usize;
            let mut batches = VecDeque::with_capacity(n);
            for _ in 0..n.min(BATCHES_PER_PRODUCER) {
                batches.push_back(BatchMeta {
                    first_sequence: r.i32()?,
                    last_sequence: r.i32()?,
                    base_offset: Offset::new(r.i64()?),
                });
            }
            let mut entry = ProducerEntry {
                epoch,
                batches,
                last_append_ms,
                ongoing: None,
                coordinator_epoch: None,
            };
            if with_transactions {
                let flags = r.u8()?;
                if flags & 1 != 0 {
                    let first_offset = Offset::new(r.i64()?);
                    let started_ms = r.i64()?;
                    entry.ongoing = Some(OngoingTxn {
                        first_offset,
                        started_ms,
                    });
                    ongoing.insert((first_offset, id));
                }
                if flags & 2 != 0 {
                    entry.coordinator_epoch = Some(r.i32()?);
                }
            }
            producers.insert(id, entry);
        }
        Some((ProducerStates { producers, ongoing }, log_end_offset))
    }
}

/// "HWPS": headway producer state, format 2 (format 1 plus each producer's open
/// transaction and coordinator epoch).
const SNAPSHOT_MAGIC: u32 = 0x4857_5002;
/// Format 1, still read: no transactions.
const SNAPSHOT_MAGIC_V1: u32 = 0x4857_5001;

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_at_checked(N)?;
        self.0 = rest;
        head.try_into().ok()
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn i16(&mut self) -> Option<i16> {
        self.take().map(i16::from_be_bytes)
    }
    fn i32(&mut self) -> Option<i32> {
        self.take().map(i32::from_be_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_be_bytes)
    }
    fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_be_bytes)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A batch header of `records` records from `producer_id` at `epoch`, first
    /// sequence `base_sequence` (also used by the partition state's tests).
    pub(crate) fn header(
        producer_id: i64,
        epoch: i16,
        base_sequence: i32,
        records: i32,
    ) -> BatchHeader {
        BatchHeader {
            base_offset: 0,
            batch_length: 0,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: records - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id,
            producer_epoch: epoch,
            base_sequence,
            records_count: records,
        }
    }

    #[test]
    fn retries_are_recognised_and_gaps_refused() {
        let mut s = ProducerStates::default();
        let b0 = header(7, 0, 0, 3);
        assert_eq!(s.check(&b0), Ok(SequenceCheck::Append));
        s.record(&b0, Offset::new(100), 1);
        let b1 = header(7, 0, 3, 2);
        assert_eq!(s.check(&b1), Ok(SequenceCheck::Append));
        s.record(&b1, Offset::new(103), 2);
        assert_eq!(
            s.check(&b0),
            Ok(SequenceCheck::Duplicate {
                base_offset: Offset::new(100)
            })
        );
        assert_eq!(
            s.check(&b1),
            Ok(SequenceCheck::Duplicate {
                base_offset: Offset::new(103)
            })
        );
        assert!(matches!(
            s.check(&header(7, 0, 9, 1)),
            Err(SequenceError::OutOfOrderSequence {
                expected: 5,
                got: 9,
                ..
            })
        ));
        assert!(matches!(
            s.check(&header(7, -1, 5, 1)),
            Err(SequenceError::InvalidProducerEpoch { .. })
        ));
        assert_eq!(
            s.check(&header(7, 1, 0, 1)),
            Ok(SequenceCheck::Append),
            "a new epoch restarts at 0"
        );
        assert!(matches!(
            s.check(&header(8, 0, 4, 1)),
            Err(SequenceError::UnknownProducerId { .. })
        ));
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let mut s = ProducerStates::default();
        for i in 0..7 {
            let h = header(1, 0, i, 1);
            assert_eq!(s.check(&h), Ok(SequenceCheck::Append));
            s.record(&h, Offset::new(i64::from(i)), 0);
        }
        let one = ProducerId::new(1);
        assert_eq!(s.get(one).unwrap().batches.len(), BATCHES_PER_PRODUCER);
        assert_eq!(
            s.check(&header(1, 0, 6, 1)),
            Ok(SequenceCheck::Duplicate {
                base_offset: Offset::new(6)
            })
        );
        assert!(
            s.check(&header(1, 0, 1, 1)).is_err(),
            "too old to recognise"
        );
    }

    #[test]
    fn sequences_wrap_around() {
        let mut s = ProducerStates::default();
        let mut h = header(1, 0, 0, 1);
        s.record(&h, Offset::ZERO, 0);
        h.base_sequence = i32::MAX - 1;
        h.last_offset_delta = 1;
        let one = ProducerId::new(1);
        s.producers
            .get_mut(&one)
            .unwrap()
            .batches
            .back_mut()
            .unwrap()
            .last_sequence = i32::MAX - 2;
        assert_eq!(s.check(&h), Ok(SequenceCheck::Append));
        s.record(&h, Offset::new(1), 0);
        assert_eq!(
            s.get(one).unwrap().batches.back().unwrap().last_sequence,
            i32::MAX
        );
        assert_eq!(s.check(&header(1, 0, 0, 1)), Ok(SequenceCheck::Append));
    }

    #[test]
    fn snapshots_round_trip_and_damage_is_detected() {
        let mut s = ProducerStates::default();
        s.record(&header(3, 2, 0, 4), Offset::new(10), 5);
        s.record(&header(4, 0, 0, 1), Offset::new(14), 6);
        let bytes = s.encode(Offset::new(15));
        assert_eq!(
            ProducerStates::decode(&bytes),
            Some((s.clone(), Offset::new(15)))
        );
        let mut damaged = bytes.clone();
        damaged[10] ^= 1;
        assert_eq!(ProducerStates::decode(&damaged), None);
        assert_eq!(ProducerStates::decode(&bytes[..3]), None);
    }

    #[test]
    fn idle_producers_expire() {
        let mut s = ProducerStates::default();
        s.record(&header(1, 0, 0, 1), Offset::ZERO, 1_000);
        s.record(&header(2, 0, 0, 1), Offset::new(1), 5_000);
        assert_eq!(s.expire(6_000, 2_000), 1);
        assert!(s.get(ProducerId::new(1)).is_none() && s.get(ProducerId::new(2)).is_some());
    }
}
