//! The controller's state machine: [`Metadata`] with the id of the last entry applied to it.
//!
//! Applying is [`Metadata::apply`]; after each batch the new state is published on a watch
//! channel as an [`Image`], which is what the rest of the broker reads. Snapshots are the
//! metadata as JSON in `snapshot.json`, replaced durably when one is built or installed;
//! at open the state starts from it and openraft re-applies the committed entries after
//! it.

use super::types::{LogId, Types};
use crate::metadata::{Metadata, Outcome};
use futures::{Stream, TryStreamExt};
use headway_base::durable_file;
use openraft::alias::{SnapshotMetaOf, SnapshotOf, StoredMembershipOf};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use serde::{Deserialize, Serialize};
use std::io::{self, Cursor};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::{watch, Mutex};

const SNAPSHOT_FILE: &str = "snapshot.json";

/// One voter's Raft node.
pub type Raft = openraft::Raft<Types, StateMachine>;

/// The metadata as of one applied log entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Image {
    pub metadata: Metadata,
    /// The index of the last entry applied; 0 before any.
    pub applied_index: u64,
}

#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMetaOf<Types>,
    data: Vec<u8>,
}

/// One voter's state machine; clones share it.
#[derive(Clone)]
pub struct StateMachine {
    inner: Arc<Mutex<Inner>>,
    published: Arc<watch::Sender<Arc<Image>>>,
}

struct Inner {
    dir: PathBuf,
    metadata: Metadata,
    last_applied: Option<LogId>,
    membership: StoredMembershipOf<Types>,
    snapshot: Option<StoredSnapshot>,
}

fn invalid(message: impl ToString) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_string())
}

impl StateMachine {
    /// Opens the state machine in `dir`, starting from the snapshot there if any.
    pub fn open(dir: &Path) -> io::Result<StateMachine> {
        super::log_store::create_dir_durably(dir)?;
        let snapshot: Option<StoredSnapshot> = match std::fs::read(dir.join(SNAPSHOT_FILE)) {
            Ok(bytes) => Some(serde_json::from_slice(&bytes).map_err(invalid)?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let mut inner = Inner {
            dir: dir.to_path_buf(),
            metadata: Metadata::default(),
            last_applied: None,
            membership: StoredMembershipOf::<Types>::default(),
            snapshot: None,
        };
        if let Some(snapshot) = snapshot {
            inner.metadata = serde_json::from_slice(&snapshot.data).map_err(invalid)?;
            inner.last_applied = snapshot.meta.last_log_id;
            inner.membership = snapshot.meta.last_membership.clone();
            inner.snapshot = Some(snapshot);
        }
        let (published, _) = watch::channel(Arc::new(inner.image()));
        Ok(StateMachine {
            inner: Arc::new(Mutex::new(inner)),
            published: Arc::new(published),
        })
    }

    /// The metadata as applied so far, and its changes from now on.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Image>> {
        self.published.subscribe()
    }

    fn publish(&self, inner: &Inner) {
        self.published.send_replace(Arc::new(inner.image()));
    }
}

impl Inner {
    fn image(&self) -> Image {
        Image {
            metadata: self.metadata.clone(),
            applied_index: self.last_applied.as_ref().map_or(0, |id| id.index()),
        }
    }

    /// Stores `snapshot` durably as the current one.
    async fn keep(&mut self, snapshot: StoredSnapshot) -> io::Result<()> {
        let bytes = serde_json::to_vec(&snapshot).map_err(invalid)?;
        let path = self.dir.join(SNAPSHOT_FILE);
        tokio::task::spawn_blocking(move || durable_file::replace(&path, &bytes))
            .await
            .map_err(io::Error::other)?
            .map_err(io::Error::other)?;
        self.snapshot = Some(snapshot);
        Ok(())
    }
}

impl RaftSnapshotBuilder<Types> for StateMachine {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn build_snapshot(&mut self) -> Result<SnapshotOf<Types, Cursor<Vec<u8>>>, io::Error> {
        let mut inner = self.inner.lock().await;
        let data = serde_json::to_vec(&inner.metadata).map_err(invalid)?;
        let meta = SnapshotMetaOf::<Types> {
            last_log_id: inner.last_applied,
            last_membership: inner.membership.clone(),
        };
        inner
            .keep(StoredSnapshot {
                meta: meta.clone(),
                data: data.clone(),
            })
            .await?;
        Ok(SnapshotOf::<Types, _> {
            meta,
            snapshot: Cursor::new(data),
        })
    }
}

impl RaftStateMachine<Types> for StateMachine {
    type SnapshotData = Cursor<Vec<u8>>;
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId>, StoredMembershipOf<Types>), io::Error> {
        let inner = self.inner.lock().await;
        Ok((inner.last_applied, inner.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<Types>, io::Error>> + Unpin + OptionalSend,
    {
        let mut inner = self.inner.lock().await;
        while let Some((entry, responder)) = entries.try_next().await? {
            let outcome = match &entry.payload {
                EntryPayload::Blank => Outcome::Done,
                EntryPayload::Normal(command) => {
                    inner.metadata.apply(entry.log_id.index(), command)
                }
                EntryPayload::Membership(membership) => {
                    inner.membership =
                        StoredMembershipOf::<Types>::new(Some(entry.log_id), membership.clone());
                    Outcome::Done
                }
            };
            inner.last_applied = Some(entry.log_id);
            if let Some(responder) = responder {
                responder.send(outcome);
            }
        }
        self.publish(&inner);
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<Types>,
        snapshot: Self::SnapshotData,
    ) -> Result<(), io::Error> {
        let data = snapshot.into_inner();
        let metadata: Metadata = serde_json::from_slice(&data).map_err(invalid)?;
        let mut inner = self.inner.lock().await;
        inner
            .keep(StoredSnapshot {
                meta: meta.clone(),
                data,
            })
            .await?;
        inner.metadata = metadata;
        inner.last_applied = meta.last_log_id;
        inner.membership = meta.last_membership.clone();
        self.publish(&inner);
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<Types, Self::SnapshotData>>, io::Error> {
        let inner = self.inner.lock().await;
        Ok(inner.snapshot.as_ref().map(|s| SnapshotOf::<Types, _> {
            meta: s.meta.clone(),
            snapshot: Cursor::new(s.data.clone()),
        }))
    }
}
