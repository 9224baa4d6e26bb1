//! A topic: its id, settings and partitions, and its directory.
//!
//! Layout under the data directory: `topics/<name>/topic.json` holds the topic's id,
//! partition count and explicit settings; `topics/<name>/<partition>/` holds each
//! partition's log. A topic is created in a hidden `.creating-*` directory and renamed
//! into place, so a crash never leaves half a topic; it is deleted by renaming it to a
//! hidden `.deleted-*` directory first. Hidden leftovers are removed at start-up.

use crate::config::{LogDefaults, TopicConfig};
use crate::durable_file::{self, sync_dir};
use crate::partition::Partition;
use crate::PartitionIndex;
use crate::{limits, BrokerError, FlushPolicy};
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
            p.set_keys_required(config.cleanup_policy.compact);
        }
        *self.config.write().expect("topic config lock") = config;
        Ok(())
    }

    /// The same topic with partitions added up to `count`: their directories are
    /// created and opened, then `topic.json` records the new count. Blocking.
    pub(crate) fn with_partitions(
        &self,
        count: i32,
        flush: FlushPolicy,
    ) -> Result<Arc<Topic>, BrokerError> {
        let config = self.config();
        let mut partitions = self.partitions.clone();
        for p in self.partitions.len() as i32..count {
            let (partition, _) = Partition::open(
                self.dir.join(p.to_string()),
                Arc::clone(&self.name),
                PartitionIndex::new(p),
                config.log_config(),
                flush,
            )?;
            partition.set_keys_required(config.cleanup_policy.compact);
            partitions.push(partition);
        }
        sync_dir(&self.dir)?;
        self.persist(partitions.len(), &config)?;
        Ok(Arc::new(Topic {
            name: Arc::clone(&self.name),
            id: self.id,
            dir: self.dir.clone(),
            partitions,
            config: RwLock::new(config),
        }))
    }

    /// Creates the topic's directory with its metadata and empty partitions, then opens
    /// it. Blocking.
    pub(crate) fn create(
        topics_dir: &Path,
        name: &str,
        partitions: i32,
        config: TopicConfig,
        flush: FlushPolicy,
    ) -> Result<Arc<Topic>, BrokerError> {
        let staging = topics_dir.join(format!(".creating-{}", Uuid::new_v4().simple()));
        fs::create_dir_all(&staging).map_err(|e| io_error("create", &staging, e))?;
        for p in 0..partitions {
            let dir = staging.join(p.to_string());
            fs::create_dir(&dir).map_err(|e| io_error("create", &dir, e))?;
        }
        let meta = TopicMeta {
            name: name.to_string(),
            id: Uuid::new_v4(),
            partitions,
            configs: config.overrides.clone(),
        };
        write_meta(&staging, &meta)?;
        let dir = topics_dir.join(name);
        fs::rename(&staging, &dir).map_err(|e| io_error("rename into place", &dir, e))?;
        sync_dir(topics_dir)?;
        let (topic, _) = Topic::open(dir, meta, config, flush)?;
        Ok(topic)
    }

    /// Loads a topic directory written by [`Topic::create`]. Blocking (recovers logs).
    pub(crate) fn load(
        dir: PathBuf,
        defaults: &LogDefaults,
        flush: FlushPolicy,
    ) -> Result<(Arc<Topic>, Vec<RecoveryReport>), BrokerError> {
        let path = dir.join(META_FILE);
        let text = fs::read_to_string(&path).map_err(|e| io_error("read", &path, e))?;
        let meta: TopicMeta = serde_json::from_str(&text)
            .map_err(|e| BrokerError::Storage(format!("parse {}: {e}", path.display())))?;
        let config = TopicConfig::from_overrides(&meta.configs, defaults)?;
        Topic::open(dir, meta, config, flush)
    }

    fn open(
        dir: PathBuf,
        meta: TopicMeta,
        config: TopicConfig,
        flush: FlushPolicy,
    ) -> Result<(Arc<Topic>, Vec<RecoveryReport>), BrokerError> {
        let name: Arc<str> = meta.name.into();
        let mut partitions = Vec::with_capacity(meta.partitions as usize);
        let mut reports = Vec::with_capacity(meta.partitions as usize);
        for p in 0..meta.partitions {
            let (partition, report) = Partition::open(
                dir.join(p.to_string()),
                Arc::clone(&name),
                PartitionIndex::new(p),
                config.log_config(),
                flush,
            )?;
            partition.set_keys_required(config.cleanup_policy.compact);
            partitions.push(partition);
            reports.push(report);
        }
        let topic = Topic {
            name,
            id: meta.id,
            dir,
            partitions,
            config: RwLock::new(config),
        };
        Ok((Arc::new(topic), reports))
    }
}

/// Writes `topic.json` durably ([`durable_file::replace`]), its directory synced.
fn write_meta(dir: &Path, meta: &TopicMeta) -> Result<(), BrokerError> {
    let text = serde_json::to_string_pretty(meta).expect("topic metadata serializes");
    durable_file::replace(&dir.join(META_FILE), text.as_bytes())
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
