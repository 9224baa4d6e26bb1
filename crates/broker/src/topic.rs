//! A topic: its id, settings and partitions, and its directory.
//!
//! Layout under the data directory: `topics/<name>/topic.json` holds the topic's id,
//! partition count and explicit settings; `topics/<name>/<partition>/` holds each
//! partition's log. A topic is created in a hidden `.creating-*` directory and renamed
//! into place, so a crash never leaves half a topic; it is deleted by renaming it to a
//! hidden `.deleted-*` directory first. Hidden leftovers are removed at start-up.

use crate::config::{LogDefaults, TopicConfig};
use crate::partition::Partition;
use crate::{BrokerError, FlushPolicy};
use headway_base::{
    durable_file::{self, sync_dir},
    limits, Clock, PartitionIndex,
};
use headway_log::RecoveryReport;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use uuid::Uuid;

const META_FILE: &str = "topic.json";

#[derive(Debug, Serialize, Deserialize)]
struct TopicMeta {
    name: String,
    id: Uuid,
    partitions: i32,
    configs: BTreeMap<String, String>,
}

pub struct Topic {
    name: Arc<str>,
    id: Uuid,
    dir: PathBuf,
    partitions: Vec<Arc<Partition>>,
    config: RwLock<TopicConfig>,
    /// Handed to the partitions this topic opens (the broker's clock).
    clock: Clock,
}

/// Kafka's rules: 1 to 249 characters from `[a-zA-Z0-9._-]`, and not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), BrokerError> {
    let reason = if name.is_empty() {
        Some("empty")
    } else if name.len() > limits::TOPIC_NAME_BYTES_MAX {
        Some("longer than 249 characters")
    } else if name == "." || name == ".." {
        Some("'.' and '..' are not allowed")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        Some("only ASCII letters, digits, '.', '_' and '-' are allowed")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(BrokerError::InvalidTopic {
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

fn io_error(context: &str, path: &Path, e: std::io::Error) -> BrokerError {
    BrokerError::Storage(format!("{context} {}: {e}", path.display()))
}

impl Topic {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn id(&self) -> Uuid {
        self.id
    }

    pub fn partitions(&self) -> &[Arc<Partition>] {
        &self.partitions
    }

    pub fn partition(&self, index: PartitionIndex) -> Option<&Arc<Partition>> {
        usize::try_from(index.value())
            .ok()
            .and_then(|i| self.partitions.get(i))
    }

    pub fn config(&self) -> TopicConfig {
        self.config.read().expect("topic config lock").clone()
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `topic.json` with this topic's id, the given partition count and its
    /// explicit settings. Blocking.
    fn persist(&self, partitions: usize, config: &TopicConfig) -> Result<(), BrokerError> {
        let meta = TopicMeta {
            name: self.name.to_string(),
            id: self.id,
            partitions: partitions as i32,
            configs: config.overrides.clone(),
        };
        write_meta(&self.dir, &meta)
    }

    /// Applies new settings: persisted first, then given to every partition's log.
    /// Blocking.
    pub(crate) fn set_config(&self, config: TopicConfig) -> Result<(), BrokerError> {
        self.persist(self.partitions.len(), &config)?;
        for p in &self.partitions {
            p.set_log_config(config.log_config())?;
            take_settings(p, &config);
        }
        *self.config.write().expect("topic config lock") = config;
        Ok(())
    }

    /// The same topic with partitions added up to `count`. Each new partition's
    /// directory is made under a hidden name and renamed into place, the topic's
    /// directory synced, and only then does `topic.json` record the new count: a crash
    /// before that leaves directories past the count, which the next start removes
    /// ([`Topic::load`]). A partition that fails to open undoes the whole change.
    /// Blocking.
    pub(crate) fn with_partitions(
        &self,
        count: i32,
        flush: FlushPolicy,
    ) -> Result<Arc<Topic>, BrokerError> {
        let config = self.config();
        let first = self.partitions.len() as i32;
        for p in first..count {
            let staging = self.dir.join(format!(".creating-{p}"));
            fs::create_dir(&staging).map_err(|e| io_error("create", &staging, e))?;
            let dir = self.dir.join(p.to_string());
            fs::rename(&staging, &dir).map_err(|e| io_error("rename into place", &dir, e))?;
        }
        sync_dir(&self.dir)?;
        let opened = (first..count)
            .map(|p| self.open_new_partition(p, &config, flush))
            .collect::<Result<Vec<_>, _>>();
        let added = match opened {
            Ok(added) => added,
            Err(e) => {
                let dirs = (first..count).map(|p| self.dir.join(p.to_string()));
                remove_new_partitions(&self.dir, dirs);
                return Err(e);
            }
        };
        let mut partitions = self.partitions.clone();
        partitions.extend(added);
        self.persist(partitions.len(), &config)?;
        Ok(Arc::new(Topic {
            name: Arc::clone(&self.name),
            id: self.id,
            dir: self.dir.clone(),
            partitions,
            config: RwLock::new(config),
            clock: self.clock.clone(),
        }))
    }

    fn open_new_partition(
        &self,
        p: i32,
        config: &TopicConfig,
        flush: FlushPolicy,
    ) -> Result<Arc<Partition>, BrokerError> {
        let (partition, _) = Partition::open(
            self.dir.join(p.to_string()),
            Arc::clone(&self.name),
            PartitionIndex::new(p),
            config.log_config(),
            flush,
            self.clock.clone(),
        )?;
        take_settings(&partition, config);
        Ok(partition)
    }

    /// Creates the topic's directory with its metadata and empty partitions (its id is
    /// `id`, the cluster's, or a new one) under a hidden name, renames it into place, then opens it. A partition that fails to
    /// open (too many open files) removes the whole topic again: it appears complete
    /// or not at all. Blocking.
    pub(crate) fn create(
        topics_dir: &Path,
        name: &str,
        id: Option<Uuid>,
        partitions: i32,
        config: TopicConfig,
        flush: FlushPolicy,
        clock: &Clock,
    ) -> Result<Arc<Topic>, BrokerError> {
        let staging = topics_dir.join(format!(".creating-{}", Uuid::new_v4().simple()));
        fs::create_dir_all(&staging).map_err(|e| io_error("create", &staging, e))?;
        for p in 0..partitions {
            let dir = staging.join(p.to_string());
            fs::create_dir(&dir).map_err(|e| io_error("create", &dir, e))?;
        }
        let meta = TopicMeta {
            name: name.to_string(),
            id: id.unwrap_or_else(Uuid::new_v4),
            partitions,
            configs: config.overrides.clone(),
        };
        write_meta(&staging, &meta)?;
        let dir = topics_dir.join(name);
        fs::rename(&staging, &dir).map_err(|e| io_error("rename into place", &dir, e))?;
        sync_dir(topics_dir)?;
        match Topic::open(dir.clone(), meta, config, flush, clock, Opening::Created) {
            Ok((topic, _)) => Ok(topic),
            Err(e) => {
                remove_new_partitions(topics_dir, [dir]);
                Err(e)
            }
        }
    }

    /// Loads a topic directory written by [`Topic::create`]: hidden leftovers of an
    /// interrupted CreatePartitions and directories past the recorded count are
    /// removed; a partition that cannot be opened is registered offline
    /// ([`Partition::unopened`]). Returns the recovery report of each opened
    /// partition. Blocking (recovers logs).
    pub(crate) fn load(
        dir: PathBuf,
        defaults: &LogDefaults,
        flush: FlushPolicy,
        clock: &Clock,
    ) -> Result<Loaded, BrokerError> {
        let path = dir.join(META_FILE);
        let text = fs::read_to_string(&path).map_err(|e| io_error("read", &path, e))?;
        let meta: TopicMeta = serde_json::from_str(&text)
            .map_err(|e| BrokerError::Storage(format!("parse {}: {e}", path.display())))?;
        if !(0..=limits::PARTITIONS_PER_TOPIC_MAX).contains(&meta.partitions) {
            return Err(BrokerError::Storage(format!(
                "{}: partition count {} out of range",
                path.display(),
                meta.partitions
            )));
        }
        remove_unfinished_partitions(&dir, meta.partitions)?;
        let config = TopicConfig::from_overrides(&meta.configs, defaults)?;
        Topic::open(dir, meta, config, flush, clock, Opening::Loaded)
    }

    fn open(
        dir: PathBuf,
        meta: TopicMeta,
        config: TopicConfig,
        flush: FlushPolicy,
        clock: &Clock,
        opening: Opening,
    ) -> Result<Loaded, BrokerError> {
        let name: Arc<str> = meta.name.into();
        let mut partitions = Vec::with_capacity(meta.partitions as usize);
        let mut reports = Vec::with_capacity(meta.partitions as usize);
        for p in 0..meta.partitions {
            let index = PartitionIndex::new(p);
            let path = dir.join(p.to_string());
            let opened = match (opening, path.is_dir()) {
                (Opening::Loaded, false) => Err(BrokerError::Storage(format!(
                    "partition directory {} is missing",
                    path.display()
                ))),
                _ => Partition::open(
                    path.clone(),
                    Arc::clone(&name),
                    index,
                    config.log_config(),
                    flush,
                    clock.clone(),
                ),
            };
            let partition = match (opened, opening) {
                (Ok((partition, report)), _) => {
                    reports.push((index, report));
                    partition
                }
                (Err(e), Opening::Created) => {
                    partitions.iter().for_each(close_quietly);
                    return Err(e);
                }
                (Err(e), Opening::Loaded) => {
                    tracing::error!(topic = %name, partition = p, dir = %path.display(), error = %e,
                        "partition could not be opened; it is offline, the others are served");
                    Partition::unopened(
                        path,
                        Arc::clone(&name),
                        index,
                        flush,
                        clock.clone(),
                        e.to_string(),
                    )
                }
            };
            take_settings(&partition, &config);
            partitions.push(partition);
        }
        let topic = Topic {
            name,
            id: meta.id,
            dir,
            partitions,
            config: RwLock::new(config),
            clock: clock.clone(),
        };
        Ok((Arc::new(topic), reports))
    }
}

/// A loaded topic and the recovery report of each partition opened.
pub(crate) type Loaded = (Arc<Topic>, Vec<(PartitionIndex, RecoveryReport)>);

/// Whether partitions are opened for a new topic (a failure undoes the creation) or
/// loaded at start-up (a failure takes that partition offline).
#[derive(Clone, Copy)]
enum Opening {
    Created,
    Loaded,
}

fn close_quietly(partition: &Arc<Partition>) {
    if let Err(error) = partition.close() {
        tracing::warn!(topic = partition.topic(), partition = partition.index().value(), %error,
            "closing a partition of an undone creation");
    }
}

/// Removes what an undone creation made (a topic's directory, or new partitions'),
/// renaming each to a hidden name first so that a crash half-way leaves only what
/// the next start removes. Errors are logged: the creation's own error is the answer.
fn remove_new_partitions(parent: &Path, dirs: impl IntoIterator<Item = PathBuf>) {
    for dir in dirs {
        let grave = parent.join(format!(".deleted-{}", Uuid::new_v4().simple()));
        let removed = fs::rename(&dir, &grave)
            .map_err(|e| io_error("rename", &dir, e))
            .and_then(|()| Ok(sync_dir(parent)?))
            .and_then(|()| fs::remove_dir_all(&grave).map_err(|e| io_error("remove", &grave, e)));
        if let Err(error) = removed {
            tracing::warn!(%error, "removing an undone creation");
        }
    }
}

/// Whether a partition directory holds any record bytes (a `.log` file not empty).
fn holds_records(dir: &Path) -> bool {
    let Ok(entries) = fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        e.path().extension().is_some_and(|x| x == "log") && e.metadata().is_ok_and(|m| m.len() > 0)
    })
}

/// Removes what an interrupted CreatePartitions left in a topic's directory: hidden
/// directories, and partition directories at or past `count` (never recorded in
/// `topic.json`, so never served).
fn remove_unfinished_partitions(dir: &Path, count: i32) -> Result<(), BrokerError> {
    let mut removed = false;
    for entry in fs::read_dir(dir).map_err(|e| io_error("list", dir, e))? {
        let entry = entry.map_err(|e| io_error("list", dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let unfinished = match name.parse::<i32>() {
            // Never served, so empty: one holding records is kept and reported, not
            // removed (a topic.json that lost partitions would be a bug to look at).
            Ok(p) if p >= count && holds_records(&entry.path()) => {
                tracing::error!(dir = %entry.path().display(), partitions = count,
                    "partition directory past the topic's count holds records; left in place");
                false
            }
            Ok(p) => p >= count,
            Err(_) => name.starts_with('.') && entry.path().is_dir(),
        };
        if unfinished {
            tracing::info!(dir = %entry.path().display(), "removing partitions of an unfinished create");
            let path = entry.path();
            fs::remove_dir_all(&path).map_err(|e| io_error("remove", &path, e))?;
            removed = true;
        }
    }
    match removed {
        true => Ok(sync_dir(dir)?),
        false => Ok(()),
    }
}

/// Writes `topic.json` durably ([`durable_file::replace`]), its directory synced.
fn write_meta(dir: &Path, meta: &TopicMeta) -> Result<(), BrokerError> {
    let text = serde_json::to_string_pretty(meta).expect("topic metadata serializes");
    Ok(durable_file::replace(
        &dir.join(META_FILE),
        text.as_bytes(),
    )?)
}

/// What a partition keeps of its topic's settings besides its log's: whether records
/// need keys (compacted), and whether the topic is tiered.
fn take_settings(partition: &Partition, config: &TopicConfig) {
    partition.set_keys_required(config.cleanup_policy.compact);
    partition.set_tiered(config.remote_storage_enable);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("orders.v1_eu-west").is_ok());
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name("a/b").is_err());
        assert!(validate_topic_name(&"x".repeat(250)).is_err());
    }
}
