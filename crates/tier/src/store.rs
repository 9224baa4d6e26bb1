//! The bucket: where a partition's remote segments live and what makes one count.
//!
//! A partition's objects sit under `<prefix>/<topic>-<topic id>/<partition>/` (the topic
//! id keeps a deleted and recreated topic apart). A segment uploaded as upload `<id>` is
//! one object per file, `<base offset, 20 digits>-<id>.<kind>` (`log`, `index`,
//! `timeindex`, `txnindex`), then its commit object `<base>-<id>.segment`, a JSON
//! [`RemoteSegment`], written last. A segment counts only once its commit object is
//! there and every file it names is listed at its size: an upload cut short (a killed
//! broker, a failed request) leaves objects without a commit, which [`Listing`] calls
//! orphans and the uploader deletes. A delete removes the commit object first, so a
//! delete cut short leaves orphans too, never a segment with files missing.

use crate::crypto::RustCrypto;
use crate::TierSettings;
use bytes::Bytes;
use futures::TryStreamExt;
use headway_broker::io::bulk_budget::{BulkBudget, BulkWork};
use headway_log::SealedSegment;
use object_store::aws::AmazonS3Builder;
use object_store::buffered::BufWriter;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Upload parts of this size; at most [`UPLOAD_PARTS_IN_FLIGHT`] at once, so one
/// upload holds at most their product in memory.
const UPLOAD_PART_BYTES: usize = 8 << 20;
const UPLOAD_PARTS_IN_FLIGHT: usize = 2;
/// The commit object's suffix.
const COMMIT_KIND: &str = "segment";

#[derive(Debug, thiserror::Error)]
pub enum TierError {
    #[error("remote storage: {0}")]
    Store(#[from] object_store::Error),
    #[error("remote storage settings: {0}")]
    Settings(String),
    #[error("reading {path} to upload it: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("remote segment {name}: {reason}")]
    Damaged { name: String, reason: String },
    /// The local log could not answer what the tier asked of it.
    #[error("the local log: {0}")]
    Local(String),
}

/// One remote segment, as its commit object says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteSegment {
    pub base_offset: i64,
    /// One past its last offset.
    pub end_offset: i64,
    /// Bytes of its `log` object.
    pub size_bytes: u64,
    pub max_timestamp_ms: Option<i64>,
    /// The leader epoch of the broker that uploaded it (-1 for a broker alone).
    pub leader_epoch: i32,
    /// The upload's id, in every one of its object names.
    pub id: String,
    /// Its files' kinds, with each object's size.
    pub files: BTreeMap<String, u64>,
    /// When the upload finished (wall clock, ms).
    pub uploaded_ms: i64,
}

impl RemoteSegment {
    /// `<base offset, 20 digits>-<upload id>`: every object name of the upload but
    /// its kind.
    pub fn stem(&self) -> String {
        stem(self.base_offset, &self.id)
    }
}

fn stem(base_offset: i64, id: &str) -> String {
    format!("{base_offset:020}-{id}")
}

/// A partition's objects as a listing found them.
#[derive(Debug, Default)]
pub struct Listing {
    /// The segments that count, by base offset; of two with one base offset, the later
    /// leader epoch's (the other goes to `orphans`).
    pub segments: BTreeMap<i64, RemoteSegment>,
    /// Objects of uploads or deletes cut short, and of segments another counts over.
    pub orphans: Vec<Path>,
}

/// The bucket, and the partition directories in it.
#[derive(Clone)]
pub struct RemoteStore {
    store: Arc<dyn ObjectStore>,
    prefix: String,
}

impl std::fmt::Debug for RemoteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RemoteStore {
    /// The bucket these settings name. Sends nothing: the first request tells
    /// whether the bucket answers.
    pub fn connect(settings: &TierSettings) -> Result<RemoteStore, TierError> {
        settings.validate().map_err(TierError::Settings)?;
        // rustls's ring provider, for https endpoints (as the listeners use it); a
        // provider installed already stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let store = AmazonS3Builder::new()
            .with_endpoint(&settings.remote_storage_endpoint)
            .with_allow_http(settings.remote_storage_endpoint.starts_with("http://"))
            .with_bucket_name(&settings.remote_storage_bucket)
            .with_region(&settings.remote_storage_region)
            .with_access_key_id(&settings.remote_storage_access_key_id)
            .with_secret_access_key(&settings.remote_storage_secret_access_key)
            // Path-style requests (`endpoint/bucket/key`), which every S3-compatible
            // server answers.
            .with_virtual_hosted_style_request(false)
            .with_crypto_provider(Arc::new(RustCrypto))
            .build()?;
        Ok(RemoteStore {
            store: Arc::new(store),
            prefix: settings.remote_storage_prefix.trim_matches('/').to_string(),
        })
    }

    /// A bucket in memory (tests).
    #[cfg(test)]
    pub(crate) fn in_memory() -> RemoteStore {
        RemoteStore {
            store: Arc::new(object_store::memory::InMemory::new()),
            prefix: "test".into(),
        }
    }

    /// The bucket itself (tests that damage it).
    #[cfg(test)]
    pub(crate) fn raw(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// Where a partition's objects are.
    pub fn partition_dir(&self, topic: &str, topic_id: uuid::Uuid, partition: i32) -> String {
        let topic_dir = format!("{topic}-{}", topic_id.simple());
        if self.prefix.is_empty() {
            format!("{topic_dir}/{partition}")
        } else {
            format!("{}/{topic_dir}/{partition}", self.prefix)
        }
    }

    fn object(dir: &str, stem: &str, kind: &str) -> Path {
        Path::from(format!("{dir}/{stem}.{kind}"))
    }

    /// Lists a partition's objects: the segments that count and the orphans.
    pub async fn list(&self, dir: &str) -> Result<Listing, TierError> {
        let objects: Vec<_> = self
            .store
            .list(Some(&Path::from(dir)))
            .try_collect()
            .await?;
        // stem -> (kind -> (path, size))
        let mut stems: BTreeMap<String, BTreeMap<String, (Path, u64)>> = BTreeMap::new();
        for meta in objects {
            let Some(name) = meta.location.filename() else {
                continue;
            };
            let Some((stem, kind)) = name.rsplit_once('.') else {
                continue;
            };
            stems
                .entry(stem.to_string())
                .or_default()
                .insert(kind.to_string(), (meta.location.clone(), meta.size));
        }
        let mut listing = Listing::default();
        for (stem, kinds) in stems {
            let segment = match kinds.get(COMMIT_KIND) {
                Some((commit, _)) => match self.read_commit(commit, &stem, &kinds).await {
                    Ok(segment) => segment,
                    // A commit that cannot be read counts for nothing: its objects are
                    // orphans, and the partition's other segments still count.
                    Err(error @ TierError::Damaged { .. }) => {
                        tracing::warn!(%error, "a remote commit object cannot be read; not counted");
                        None
                    }
                    Err(error) => return Err(error),
                },
                None => None,
            };
            let Some(segment) = segment else {
                listing
                    .orphans
                    .extend(kinds.into_values().map(|(path, _)| path));
                continue;
            };
            match listing.segments.get(&segment.base_offset) {
                Some(held) if held.leader_epoch >= segment.leader_epoch => {
                    listing
                        .orphans
                        .extend(kinds.into_values().map(|(path, _)| path));
                }
                _ => {
                    if let Some(replaced) = listing.segments.insert(segment.base_offset, segment) {
                        let dir = dir.to_string();
                        listing.orphans.extend(
                            replaced
                                .files
                                .keys()
                                .chain(std::iter::once(&COMMIT_KIND.to_string()))
                                .map(|kind| Self::object(&dir, &replaced.stem(), kind)),
                        );
                    }
                }
            }
        }
        Ok(listing)
    }

    /// Reads a commit object; `None` when the files it names are not all there at
    /// their sizes (the segment does not count).
    async fn read_commit(
        &self,
        commit: &Path,
        stem: &str,
        kinds: &BTreeMap<String, (Path, u64)>,
    ) -> Result<Option<RemoteSegment>, TierError> {
        let body = match self.store.get(commit).await {
            Ok(got) => got.bytes().await?,
            // Deleted since the listing: a delete is under way.
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let segment: RemoteSegment =
            serde_json::from_slice(&body).map_err(|e| TierError::Damaged {
                name: commit.to_string(),
                reason: e.to_string(),
            })?;
        if segment.stem() != stem {
            return Err(TierError::Damaged {
                name: commit.to_string(),
                reason: format!("names the upload {}", segment.stem()),
            });
        }
        let whole = segment
            .files
            .iter()
            .all(|(kind, size)| kinds.get(kind).is_some_and(|(_, listed)| listed == size));
        if !whole {
            tracing::warn!(commit = %commit, "a remote segment's files are not all there; not counted");
        }
        Ok(whole.then_some(segment))
    }

    /// Copies a sealed segment's files, then writes its commit object. `None` when a
    /// file went before it was read (retention deleted the segment): what was copied
    /// is deleted again. With a `budget`, each read of the files waits for the bulk
    /// budget and is charged to it, as catch-up reads are: an upload never crowds the
    /// syncs of acknowledged writes.
    pub async fn upload(
        &self,
        dir: &str,
        segment: &SealedSegment,
        leader_epoch: i32,
        now_ms: i64,
        budget: Option<&BulkBudget>,
    ) -> Result<Option<RemoteSegment>, TierError> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let stem = stem(segment.base_offset.value(), &id);
        let mut files = BTreeMap::new();
        for (kind, path) in &segment.files {
            // The `log` file holds exactly the segment's bytes; indexes are copied whole.
            let limit = (*kind == "log").then_some(segment.size_bytes);
            let object = Self::object(dir, &stem, kind);
            match self.copy_file(path, &object, limit, budget).await {
                Ok(Some(size)) => {
                    files.insert(kind.to_string(), size);
                }
                Ok(None) if *kind == "txnindex" => {}
                outcome => {
                    for kind in files.keys() {
                        let _ = self.store.delete(&Self::object(dir, &stem, kind)).await;
                    }
                    outcome?;
                    return Ok(None);
                }
            }
        }
        if files.get("log") != Some(&segment.size_bytes) {
            return Err(TierError::Damaged {
                name: stem,
                reason: format!(
                    "its log file held {:?} bytes, the segment {}",
                    files.get("log"),
                    segment.size_bytes
                ),
            });
        }
        let remote = RemoteSegment {
            base_offset: segment.base_offset.value(),
            end_offset: segment.end_offset.value(),
            size_bytes: segment.size_bytes,
            max_timestamp_ms: segment.max_timestamp_ms,
            leader_epoch,
            id,
            files,
            uploaded_ms: now_ms,
        };
        let body = serde_json::to_vec(&remote).expect("a remote segment serializes");
        self.store
            .put(
                &Self::object(dir, &stem, COMMIT_KIND),
                PutPayload::from(Bytes::from(body)),
            )
            .await?;
        Ok(Some(remote))
    }

    /// Streams one file (its first `limit` bytes, when given) into an object. `None`
    /// when the file is not there.
    async fn copy_file(
        &self,
        path: &std::path::Path,
        object: &Path,
        limit: Option<u64>,
        budget: Option<&BulkBudget>,
    ) -> Result<Option<u64>, TierError> {
        let read_error = |source| TierError::Read {
            path: path.display().to_string(),
            source,
        };
        let file = match tokio::fs::File::open(path).await {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(read_error(e)),
        };
        let mut file = file.take(limit.unwrap_or(u64::MAX));
        let mut writer =
            BufWriter::with_capacity(Arc::clone(&self.store), object.clone(), UPLOAD_PART_BYTES)
                .with_max_concurrency(UPLOAD_PARTS_IN_FLIGHT);
        let mut copied = 0u64;
        let mut chunk = vec![0u8; 1 << 20];
        loop {
            if let Some(budget) = budget {
                budget.admit(BulkWork::Read).await;
            }
            let n = match file.read(&mut chunk).await {
                Ok(n) => n,
                Err(e) => {
                    let _ = writer.abort().await;
                    return Err(read_error(e));
                }
            };
            if n == 0 {
                break;
            }
            if let Some(budget) = budget {
                budget.charge(BulkWork::Read, n);
            }
            if let Err(e) = writer.put(Bytes::copy_from_slice(&chunk[..n])).await {
                let _ = writer.abort().await;
                return Err(e.into());
            }
            copied += n as u64;
        }
        if let Err(e) = writer.shutdown().await {
            let _ = writer.abort().await;
            return Err(TierError::Store(object_store::Error::Generic {
                store: "S3",
                source: Box::new(e),
            }));
        }
        Ok(Some(copied))
    }

    /// Deletes a remote segment: its commit object first (it stops counting), then
    /// its files.
    pub async fn delete(&self, dir: &str, segment: &RemoteSegment) -> Result<(), TierError> {
        let stem = segment.stem();
        self.delete_object(&Self::object(dir, &stem, COMMIT_KIND))
            .await?;
        for kind in segment.files.keys() {
            self.delete_object(&Self::object(dir, &stem, kind)).await?;
        }
        Ok(())
    }

    /// One whole object.
    pub(crate) async fn get_whole(&self, name: &str) -> Result<Bytes, TierError> {
        Ok(self.store.get(&Path::from(name)).await?.bytes().await?)
    }

    /// Bytes `range` of one object.
    pub(crate) async fn get_range(
        &self,
        name: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, TierError> {
        Ok(self.store.get_range(&Path::from(name), range).await?)
    }

    /// Deletes one object; one already gone is fine.
    pub async fn delete_object(&self, path: &Path) -> Result<(), TierError> {
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
