//! Which leader epoch wrote which offsets: the partition's leader-epoch history.
//!
//! A replicated partition stamps each batch with the epoch of the leader that appended
//! it (bytes 12..16 of the header), and remembers where each epoch began: the first
//! offset of each epoch, in order. A follower that comes back asks its leader where its
//! own last epoch ended (Kafka's OffsetForLeaderEpoch, KIP-101 and KIP-279) and truncates
//! what it holds past that point: the offsets a deposed leader wrote and no one else kept.
//!
//! The history is kept in `leader-epoch-checkpoint` in the partition's directory, in the
//! text layout Kafka uses (a version line `0`, a count line, then `EPOCH START_OFFSET`
//! lines), replaced durably at every change: changes are rare (one per leader change,
//! truncation or log-start move). A partition that is never replicated never writes it.

use crate::LogError;
use headway_base::{durable_file, Offset};
use std::path::{Path, PathBuf};

/// The file name in the partition directory.
pub const FILE_NAME: &str = "leader-epoch-checkpoint";

/// Answers for an epoch the history does not know (Kafka's `UNDEFINED_EPOCH` and
/// `UNDEFINED_EPOCH_OFFSET`).
pub const UNDEFINED_EPOCH: i32 = -1;
pub const UNDEFINED_OFFSET: i64 = -1;

/// Where one leader epoch began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochStart {
    pub epoch: i32,
    pub start_offset: Offset,
}

/// A partition's leader-epoch history, in memory and on disk.
#[derive(Debug)]
pub struct LeaderEpochs {
    path: PathBuf,
    /// Increasing in both epoch and start offset.
    entries: Vec<EpochStart>,
}

fn malformed(path: &Path, why: String) -> LogError {
    LogError::Io {
        context: "read the leader-epoch history",
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, why),
    }
}

fn parse(path: &Path, text: &str) -> Result<Vec<EpochStart>, LogError> {
    let mut lines = text.lines();
    if lines.next().map(str::trim) != Some("0") {
        return Err(malformed(path, "the first line is not version 0".into()));
    }
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| malformed(path, "the second line is not a count".into()))?;
    let mut entries = Vec::with_capacity(count.min(1024));
    for line in lines.by_ref().take(count) {
        let mut fields = line.split_whitespace();
        let epoch = fields.next().and_then(|f| f.parse::<i32>().ok());
        let start = fields.next().and_then(|f| f.parse::<i64>().ok());
        match (epoch, start, fields.next()) {
            (Some(epoch), Some(start), None) if epoch >= 0 && start >= 0 => {
                entries.push(EpochStart {
                    epoch,
                    start_offset: Offset::new(start),
                })
            }
            _ => {
                return Err(malformed(
                    path,
                    format!("line {line:?} is not EPOCH OFFSET"),
                ))
            }
        }
    }
    if entries.len() != count {
        return Err(malformed(
            path,
            format!("{count} entries announced, {} present", entries.len()),
        ));
    }
    let ordered = entries
        .windows(2)
        .all(|w| w[0].epoch < w[1].epoch && w[0].start_offset <= w[1].start_offset);
    if !ordered {
        return Err(malformed(
            path,
            "entries are not in increasing order".into(),
        ));
    }
    Ok(entries)
}

impl LeaderEpochs {
    /// Reads the history of the partition in `dir`; none yet is an empty history.
    pub fn open(dir: &Path) -> Result<LeaderEpochs, LogError> {
        let path = dir.join(FILE_NAME);
        let entries = match std::fs::read_to_string(&path) {
            Ok(text) => parse(&path, &text)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                return Err(LogError::Io {
                    context: "read",
                    path,
                    source: e,
                })
            }
        };
        Ok(LeaderEpochs { path, entries })
    }

    pub fn entries(&self) -> &[EpochStart] {
        &self.entries
    }

    /// The latest epoch and where it began.
    pub fn latest(&self) -> Option<EpochStart> {
        self.entries.last().copied()
    }

    fn save(&self) -> Result<(), LogError> {
        let mut text = format!("0\n{}\n", self.entries.len());
        for entry in &self.entries {
            text.push_str(&format!("{} {}\n", entry.epoch, entry.start_offset.value()));
        }
        durable_file::replace(&self.path, text.as_bytes())?;
        Ok(())
    }

    /// Records that `epoch` begins at `start_offset`. As Kafka does, entries that
    /// conflict with it (an epoch at least as new, or one starting at or after it) are
    /// dropped first: after a truncation the history can hold epochs the log no longer
    /// has. An entry already recorded changes nothing. Answers whether the history
    /// changed.
    pub fn assign(&mut self, epoch: i32, start_offset: Offset) -> Result<bool, LogError> {
        if epoch < 0 {
            return Ok(false);
        }
        let same = EpochStart {
            epoch,
            start_offset,
        };
        if self.latest() == Some(same) {
            return Ok(false);
        }
        if self
            .latest()
            .is_some_and(|latest| latest.epoch == epoch && latest.start_offset < start_offset)
        {
            // The epoch continues: its start stays where it began.
            return Ok(false);
        }
        let before = self.entries.len();
        self.entries
            .retain(|e| e.epoch < epoch && e.start_offset < start_offset);
        if self.entries.len() < before {
            tracing::info!(
                path = %self.path.display(), epoch, start_offset = start_offset.value(),
                dropped = before - self.entries.len(),
                "leader epochs conflicting with a newer one dropped"
            );
        }
        self.entries.push(same);
        self.save()?;
        Ok(true)
    }

    /// Forgets the epochs that began at or after `end_offset`: the log was truncated
    /// there.
    pub fn truncate_from_end(&mut self, end_offset: Offset) -> Result<(), LogError> {
        let keep = self
            .entries
            .iter()
            .take_while(|e| e.start_offset < end_offset)
            .count();
        if keep == self.entries.len() {
            return Ok(());
        }
        self.entries.truncate(keep);
        self.save()
    }

    /// The log now starts at `start_offset`: epochs that ended before it are forgotten,
    /// and the one it falls in begins there.
    pub fn truncate_from_start(&mut self, start_offset: Offset) -> Result<(), LogError> {
        let first_kept = self
            .entries
            .iter()
            .rposition(|e| e.start_offset <= start_offset);
        let Some(first_kept) = first_kept else {
            return Ok(());
        };
        if first_kept == 0 && self.entries[0].start_offset == start_offset {
            return Ok(());
        }
        self.entries.drain(..first_kept);
        self.entries[0].start_offset = start_offset;
        self.save()
    }

    /// Where `epoch` ended in a log whose end is `log_end`, as Kafka's
    /// OffsetForLeaderEpoch answers: `(the largest known epoch at most `epoch`, the first
    /// offset after it)`. The latest epoch ends at the log end; an epoch older than any
    /// known ends where the first known one starts; an epoch newer than the latest, or a
    /// history that is empty, is undefined.
    pub fn end_offset_for(&self, epoch: i32, log_end: Offset) -> (i32, i64) {
        let undefined = (UNDEFINED_EPOCH, UNDEFINED_OFFSET);
        let Some(latest) = self.latest() else {
            return undefined;
        };
        if epoch == UNDEFINED_EPOCH || epoch > latest.epoch {
            return undefined;
        }
        if epoch == latest.epoch {
            return (epoch, log_end.value());
        }
        // The first epoch after the one asked ends it.
        let Some(next) = self.entries.iter().find(|e| e.epoch > epoch) else {
            return undefined;
        };
        match self.entries.iter().rev().find(|e| e.epoch <= epoch) {
            Some(floor) => (floor.epoch, next.start_offset.value()),
            None => (epoch, next.start_offset.value()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(dir: &Path, entries: &[(i32, i64)]) -> LeaderEpochs {
        let mut epochs = LeaderEpochs::open(dir).unwrap();
        for (epoch, start) in entries {
            assert!(epochs.assign(*epoch, Offset::new(*start)).unwrap());
        }
        epochs
    }

    fn pairs(epochs: &LeaderEpochs) -> Vec<(i32, i64)> {
        epochs
            .entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset.value()))
            .collect()
    }

    #[test]
    fn the_history_survives_a_reopen_in_kafkas_layout() {
        let dir = tempfile::tempdir().unwrap();
        let epochs = history(dir.path(), &[(0, 0), (2, 100), (5, 250)]);
        let text = std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
        assert_eq!(text, "0\n3\n0 0\n2 100\n5 250\n");
        let reopened = LeaderEpochs::open(dir.path()).unwrap();
        assert_eq!(pairs(&reopened), pairs(&epochs));
    }

    #[test]
    fn an_epoch_is_recorded_once_and_a_newer_one_replaces_what_conflicts_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut epochs = history(dir.path(), &[(1, 0), (3, 10)]);
        assert!(!epochs.assign(3, Offset::new(10)).unwrap());
        assert!(
            !epochs.assign(3, Offset::new(20)).unwrap(),
            "epoch 3 goes on"
        );
        assert!(!epochs.assign(-1, Offset::new(40)).unwrap());
        assert_eq!(pairs(&epochs), vec![(1, 0), (3, 10)]);
        // Epoch 4 starting at 5: epoch 3 from 10 is no longer in the log.
        assert!(epochs.assign(4, Offset::new(5)).unwrap());
        assert_eq!(pairs(&epochs), vec![(1, 0), (4, 5)]);
        let reopened = LeaderEpochs::open(dir.path()).unwrap();
        assert_eq!(pairs(&reopened), vec![(1, 0), (4, 5)]);
    }

    #[test]
    fn end_offsets_answer_as_offset_for_leader_epoch_does() {
        let dir = tempfile::tempdir().unwrap();
        let epochs = history(dir.path(), &[(1, 0), (3, 100), (4, 180)]);
        let end = Offset::new(300);
        assert_eq!(
            epochs.end_offset_for(4, end),
            (4, 300),
            "the latest ends at the log end"
        );
        assert_eq!(epochs.end_offset_for(3, end), (3, 180));
        assert_eq!(
            epochs.end_offset_for(2, end),
            (1, 100),
            "2 was never a leader here"
        );
        assert_eq!(
            epochs.end_offset_for(0, end),
            (0, 0),
            "older than any known"
        );
        assert_eq!(
            epochs.end_offset_for(5, end),
            (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        );
        assert_eq!(
            epochs.end_offset_for(UNDEFINED_EPOCH, end),
            (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        );
        let empty = LeaderEpochs::open(tempfile::tempdir().unwrap().path()).unwrap();
        assert_eq!(
            empty.end_offset_for(0, end),
            (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        );
    }

    #[test]
    fn truncation_from_either_end_keeps_the_history_consistent() {
        let dir = tempfile::tempdir().unwrap();
        let mut epochs = history(dir.path(), &[(1, 0), (3, 100), (4, 180)]);
        epochs.truncate_from_end(Offset::new(180)).unwrap();
        assert_eq!(pairs(&epochs), vec![(1, 0), (3, 100)]);
        epochs.truncate_from_start(Offset::new(120)).unwrap();
        assert_eq!(pairs(&epochs), vec![(3, 120)]);
        epochs.truncate_from_start(Offset::new(50)).unwrap();
        assert_eq!(
            pairs(&epochs),
            vec![(3, 120)],
            "an earlier start changes nothing"
        );
        let reopened = LeaderEpochs::open(dir.path()).unwrap();
        assert_eq!(pairs(&reopened), vec![(3, 120)]);
    }

    #[test]
    fn a_damaged_history_is_an_error_not_a_guess() {
        let dir = tempfile::tempdir().unwrap();
        for text in ["1\n0\n", "0\n2\n1 0\n", "0\n2\n3 10\n1 20\n", "0\n1\nx y\n"] {
            std::fs::write(dir.path().join(FILE_NAME), text).unwrap();
            assert!(LeaderEpochs::open(dir.path()).is_err(), "{text:?}");
        }
    }
}
