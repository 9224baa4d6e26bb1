//! The controller's Raft log and vote, on disk.
//!
//! The log is one append-only file, `raft.log`, of records: an entry, a truncation (a new
//! leader replaced the entries after an index) or a purge (entries up to an id are in a
//! snapshot). Each record is framed as `length (u32 LE) | crc32c (u32 LE) | JSON`; the
//! entries are kept in memory too, and the snapshot policy keeps them few. An append is
//! acknowledged to openraft only after `fdatasync`, so a vote or an entry a voter
//! acknowledged survives a power loss. At open the records are replayed; a torn or corrupt
//! tail (a write the crash interrupted, never acknowledged) is cut off. When most records
//! in the file are purged ones, the file is rewritten with the live entries only.
//!
//! The vote is `vote.json`, replaced durably. The committed id is `committed.json`,
//! replaced without a sync: it only lets a restarted voter apply what it knows to be
//! committed before it hears from a leader, so an older value is harmless.

use super::types::{Entry, LogId, Types, Vote};
use headway_base::durable_file;
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::Mutex;

const LOG_FILE: &str = "raft.log";
const VOTE_FILE: &str = "vote.json";
const COMMITTED_FILE: &str = "committed.json";
/// Length and checksum before each record.
const RECORD_HEADER: usize = 8;
/// Largest record accepted when replaying: a bigger length is a torn or corrupt tail.
const RECORD_BYTES_MAX: usize = 64 * 1024 * 1024;

#[derive(Serialize, Deserialize)]
enum Record {
    Entry(Entry),
    TruncateAfter(Option<u64>),
    Purge(LogId),
}

/// The durable log store of one voter; clones share it.
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    dir: PathBuf,
    file: File,
    /// Records in the file, live or not.
    records: u64,
    log: BTreeMap<u64, Entry>,
    last_purged: Option<LogId>,
    vote: Option<Vote>,
    committed: Option<LogId>,
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

fn encode(record: &Record, into: &mut Vec<u8>) -> io::Result<()> {
    let json = serde_json::to_vec(record).map_err(|e| invalid(e.to_string()))?;
    let len = u32::try_from(json.len()).map_err(|_| invalid("a log record over 4 GiB"))?;
    into.extend_from_slice(&len.to_le_bytes());
    into.extend_from_slice(&crc32c::crc32c(&json).to_le_bytes());
    into.extend_from_slice(&json);
    Ok(())
}

/// What replaying the log file found.
struct Replayed {
    records: Vec<Record>,
    /// The bytes the whole records span; a torn tail follows them.
    good: usize,
}

/// The records of `bytes`, and where a torn tail (a last record the crash interrupted,
/// never acknowledged) begins. A damaged record with whole records after it is not a torn
/// tail but a damaged file: an error, since cutting there would drop acknowledged entries.
fn decode_all(bytes: &[u8]) -> io::Result<Replayed> {
    let mut records = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let start = at + RECORD_HEADER;
        if start > bytes.len() {
            break; // a torn header
        }
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default()) as usize;
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap_or_default());
        if len > RECORD_BYTES_MAX || bytes.len() - start < len {
            break; // a torn body (or a torn length)
        }
        let json = &bytes[start..start + len];
        let record = (crc32c::crc32c(json) == crc)
            .then(|| serde_json::from_slice::<Record>(json).ok())
            .flatten();
        match record {
            Some(record) => records.push(record),
            None if start + len == bytes.len() => break, // the last record, torn
            None => {
                return Err(invalid(format!(
                    "the controller log is damaged at byte {at}, before {} more bytes of records",
                    bytes.len() - start - len
                )))
            }
        }
        at = start + len;
    }
    Ok(Replayed { records, good: at })
}

/// The value in `path`, `None` if there is no file. A file that does not parse is an
/// error when `strict` (the vote: forgetting it could let this voter vote twice in a
/// term), and `None` otherwise (the committed id, which is only advice).
fn read_json<T: for<'de> Deserialize<'de>>(path: &Path, strict: bool) -> io::Result<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(value) => Ok(Some(value)),
            Err(e) if strict => Err(invalid(format!("{}: {e}", path.display()))),
            Err(_) => Ok(None),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Creates `dir` (and its missing parents) so that their names survive a power loss: each
/// new directory's name is synced in its parent.
pub(crate) fn create_dir_durably(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let missing: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && !p.is_dir())
        .map(Path::to_path_buf)
        .collect();
    std::fs::create_dir_all(dir)?;
    for path in missing {
        let parent = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        durable_file::sync_dir(&parent).map_err(io::Error::other)?;
    }
    Ok(())
}

impl LogStore {
    /// Opens (or creates) the log store in `dir`, replaying what is there.
    pub fn open(dir: &Path) -> io::Result<LogStore> {
        create_dir_durably(dir)?;
        let path = dir.join(LOG_FILE);
        let created = !path.exists();
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)?;
        if created {
            file.sync_all()?;
            durable_file::sync_dir(dir).map_err(io::Error::other)?;
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let Replayed { records, good } = decode_all(&bytes)?;
        if good < bytes.len() {
            tracing::warn!(
                path = %path.display(),
                cut_bytes = bytes.len() - good,
                "the controller log ends in a torn or corrupt record; cutting it off"
            );
            file.set_len(good as u64)?;
            file.sync_data()?;
        }
        let mut inner = Inner {
            dir: dir.to_path_buf(),
            file,
            records: 0,
            log: BTreeMap::new(),
            last_purged: None,
            vote: read_json(&dir.join(VOTE_FILE), true)?,
            committed: read_json(&dir.join(COMMITTED_FILE), false)?,
        };
        inner.records = records.len() as u64;
        for record in records {
            inner.replay(record);
        }
        Ok(LogStore {
            inner: Arc::new(Mutex::new(inner)),
        })
    }
}

impl Inner {
    fn replay(&mut self, record: Record) {
        match record {
            Record::Entry(entry) => {
                self.log.insert(entry.index(), entry);
            }
            Record::TruncateAfter(after) => {
                let from = after.map_or(0, |index| index + 1);
                self.log.split_off(&from);
            }
            Record::Purge(upto) => {
                let keep = self.log.split_off(&(upto.index() + 1));
                self.log = keep;
                self.last_purged = Some(upto);
            }
        }
    }

    /// Appends `records` to the file and syncs it, off the async threads.
    async fn write(&mut self, records: &[Record]) -> io::Result<()> {
        let mut bytes = Vec::new();
        for record in records {
            encode(record, &mut bytes)?;
        }
        let mut file = self.file.try_clone()?;
        tokio::task::spawn_blocking(move || {
            file.write_all(&bytes)?;
            file.sync_data()
        })
        .await
        .map_err(io::Error::other)??;
        self.records += records.len() as u64;
        Ok(())
    }

    /// Rewrites the file with the live entries when most of its records are dead.
    async fn compact_if_worth_it(&mut self) -> io::Result<()> {
        let live = self.log.len() as u64 + 1;
        if self.records < 64 || self.records < 4 * live {
            return Ok(());
        }
        let mut bytes = Vec::new();
        if let Some(purged) = &self.last_purged {
            encode(&Record::Purge(*purged), &mut bytes)?;
        }
        for entry in self.log.values() {
            encode(&Record::Entry(entry.clone()), &mut bytes)?;
        }
        let path = self.dir.join(LOG_FILE);
        let file = tokio::task::spawn_blocking(move || -> io::Result<File> {
            durable_file::replace(&path, &bytes).map_err(io::Error::other)?;
            OpenOptions::new().read(true).append(true).open(&path)
        })
        .await
        .map_err(io::Error::other)??;
        self.file = file;
        self.records = live;
        Ok(())
    }
}

impl RaftLogReader<Types> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let inner = self.inner.lock().await;
        Ok(inner.log.range(range).map(|(_, e)| e.clone()).collect())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.inner.lock().await.vote)
    }
}

impl RaftLogStorage<Types> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<Types>, io::Error> {
        let inner = self.inner.lock().await;
        let last = inner.log.values().next_back().map(|e| e.log_id());
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: last.or_else(|| inner.last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let mut inner = self.inner.lock().await;
        let bytes = serde_json::to_vec(vote).map_err(|e| invalid(e.to_string()))?;
        let path = inner.dir.join(VOTE_FILE);
        tokio::task::spawn_blocking(move || durable_file::replace(&path, &bytes))
            .await
            .map_err(io::Error::other)?
            .map_err(io::Error::other)?;
        inner.vote = Some(*vote);
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        let mut inner = self.inner.lock().await;
        let bytes = serde_json::to_vec(&committed).map_err(|e| invalid(e.to_string()))?;
        let path = inner.dir.join(COMMITTED_FILE);
        let temporary = inner.dir.join(format!("{COMMITTED_FILE}.new"));
        std::fs::write(&temporary, bytes)?;
        std::fs::rename(&temporary, &path)?;
        inner.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self.inner.lock().await.committed)
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<Types>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry>,
    {
        let mut inner = self.inner.lock().await;
        let records: Vec<Record> = entries.into_iter().map(Record::Entry).collect();
        let written = inner.write(&records).await;
        if written.is_ok() {
            for record in records {
                inner.replay(record);
            }
        }
        let result = written
            .as_ref()
            .map(|_| ())
            .map_err(|e| io::Error::new(e.kind(), e.to_string()));
        callback.io_completed(result);
        written
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let mut inner = self.inner.lock().await;
        let record = Record::TruncateAfter(last_log_id.map(|id| id.index()));
        inner.write(std::slice::from_ref(&record)).await?;
        inner.replay(record);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let mut inner = self.inner.lock().await;
        let record = Record::Purge(log_id);
        inner.write(std::slice::from_ref(&record)).await?;
        inner.replay(record);
        inner.compact_if_worth_it().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_tail_is_cut_and_damage_before_whole_records_refused() {
        let mut bytes = Vec::new();
        encode(&Record::TruncateAfter(Some(3)), &mut bytes).unwrap();
        let first = bytes.len();
        encode(&Record::TruncateAfter(None), &mut bytes).unwrap();
        let whole = bytes.len();
        let replayed = decode_all(&bytes).unwrap();
        assert_eq!((replayed.records.len(), replayed.good), (2, whole));

        for cut in [whole - 1, first + 3] {
            let replayed = decode_all(&bytes[..cut]).unwrap();
            assert_eq!(
                (replayed.records.len(), replayed.good),
                (1, first),
                "cut at {cut}"
            );
        }

        let mut last_flipped = bytes.clone();
        last_flipped[whole - 2] ^= 0x40;
        let replayed = decode_all(&last_flipped).unwrap();
        assert_eq!(
            replayed.records.len(),
            1,
            "a last record failing its checksum is torn"
        );

        let mut first_flipped = bytes.clone();
        first_flipped[first - 2] ^= 0x40;
        assert!(
            decode_all(&first_flipped).is_err(),
            "damage before a whole record"
        );
    }

    fn entry_at(index: u64) -> Entry {
        use openraft::entry::RaftEntry;
        let leader = openraft::vote::leader_id_std::CommittedLeaderId::new(1);
        Entry::new_blank(openraft::LogId::new(leader, index))
    }

    #[tokio::test]
    async fn truncations_purges_and_a_compaction_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        for index in 1..=100 {
            store
                .append([entry_at(index)], IOFlushed::noop())
                .await
                .unwrap();
        }
        store
            .truncate_after(Some(entry_at(90).log_id))
            .await
            .unwrap();
        store.purge(entry_at(80).log_id).await.unwrap();
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id.map(|id| id.index), Some(80));
        assert_eq!(state.last_log_id.map(|id| id.index), Some(90));
        let records = store.inner.lock().await.records;
        assert!(
            records < 20,
            "the purge compacted the file: {records} records"
        );

        let mut reopened = LogStore::open(dir.path()).unwrap();
        let state = reopened.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id.map(|id| id.index), Some(80));
        assert_eq!(state.last_log_id.map(|id| id.index), Some(90));
        let entries = reopened.try_get_log_entries(0..1000).await.unwrap();
        let indexes: Vec<u64> = entries.iter().map(|e| e.log_id.index).collect();
        assert_eq!(indexes, (81..=90).collect::<Vec<_>>());
    }

    #[test]
    fn a_damaged_vote_refuses_to_open() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(VOTE_FILE), b"{not json").unwrap();
        assert!(LogStore::open(dir.path()).is_err());
        std::fs::remove_file(dir.path().join(VOTE_FILE)).unwrap();
        std::fs::write(dir.path().join(COMMITTED_FILE), b"{not json").unwrap();
        assert!(
            LogStore::open(dir.path()).is_ok(),
            "the committed id is only advice"
        );
    }
}
