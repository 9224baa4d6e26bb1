//! Producer ids for idempotent producers, unique for the life of the data directory.
//!
//! Ids are handed out from blocks of `BLOCK_SIZE` (1000): before the first id of a block is
//! used, the end of the block is written to `<data_dir>/producer-ids` and synced, so
//! after any restart or crash allocation resumes past every id that may have been
//! given out. The file holds one big-endian i64.

use crate::BrokerError;
use headway_base::ProducerId;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const BLOCK_SIZE: i64 = 1000;
const FILE: &str = "producer-ids";

pub struct ProducerIds {
    path: PathBuf,
    /// (next id to hand out, end of the block reserved on disk)
    state: Mutex<(i64, i64)>,
}

fn storage(context: &str, path: &Path, e: impl std::fmt::Display) -> BrokerError {
    BrokerError::Storage(format!("{context} {}: {e}", path.display()))
}

impl ProducerIds {
    pub fn open(data_dir: &Path) -> Result<ProducerIds, BrokerError> {
        let path = data_dir.join(FILE);
        let reserved = match fs::read(&path) {
            Ok(bytes) => i64::from_be_bytes(
                bytes
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(|| storage("parse", &path, "not 8 bytes"))?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(storage("read", &path, e)),
        };
        Ok(ProducerIds {
            path,
            state: Mutex::new((reserved, reserved)),
        })
    }

    /// A new producer id. Blocking when a new block must be reserved (an fsync).
    pub fn allocate(&self) -> Result<ProducerId, BrokerError> {
        let mut state = self.state.lock().expect("producer ids lock");
        if state.0 >= state.1 {
            let end = state.1 + BLOCK_SIZE;
            self.persist(end)?;
            state.1 = end;
        }
        let id = ProducerId::new(state.0);
        state.0 += 1;
        Ok(id)
    }

    fn persist(&self, end: i64) -> Result<(), BrokerError> {
        Ok(headway_base::durable_file::replace(
            &self.path,
            &end.to_be_bytes(),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_never_repeat_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let ids = ProducerIds::open(dir.path()).unwrap();
        let first: Vec<i64> = (0..3).map(|_| ids.allocate().unwrap().value()).collect();
        assert_eq!(first, vec![0, 1, 2]);
        drop(ids);
        let again = ProducerIds::open(dir.path()).unwrap();
        assert_eq!(
            again.allocate().unwrap(),
            ProducerId::new(BLOCK_SIZE),
            "a restart skips the whole reserved block"
        );
    }
}
