//! Per-group settings: Kafka's GROUP config resource (resource type 32), as
//! `kafka-configs.sh --entity-type groups` and Admin `incrementalAlterConfigs` with
//! `ConfigResource.Type.GROUP` use it.
//!
//! A group's settings override the broker's for that group only:
//! `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms` for a
//! consumer-protocol group (from its next heartbeat), and `share.auto.offset.reset`,
//! `share.record.lock.duration.ms`, `share.session.timeout.ms` and
//! `share.heartbeat.interval.ms` for a share group (the reset for the next
//! share-partition the group starts, the lock for the next acquisitions). A group need
//! not exist to be given settings: they wait for it.
//!
//! Each value is checked against bounds from the broker's settings, as Kafka's
//! `group.share.min/max.*` and `group.consumer.min/max.*` do (the broker's own value is
//! always allowed), and a heartbeat interval must stay below its session timeout. A
//! wrong name or value is INVALID_CONFIG.
//!
//! On a broker alone the settings of every group are kept in
//! `<data_dir>/group-configs.json`, replaced durably on each change
//! ([`headway_base::durable_file::replace`]) before the change is answered or applied,
//! and read back at start-up. In a cluster they are the controller's: the broker asked
//! checks a change and proposes the group's whole settings (`SetGroupConfigs`), and
//! every broker applies what its image holds ([`follow`]), so the coordinators of the
//! group's members and of its share-partitions, wherever they are, use the same values.

use headway_broker::BrokerError;
use headway_group::{ConsumerOverrides, GroupSettings, GroupShards};
use headway_share::{AutoOffsetReset, ShareCoordinator, ShareOverrides, ShareSettings};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// ConfigResource type of a group.
pub const RESOURCE_GROUP: i8 = 32;
/// DescribeConfigs source of a value set on the group (Kafka's `GROUP_CONFIG`).
pub const SOURCE_GROUP: i8 = 8;
/// DescribeConfigs types (v3+).
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;

/// The file that keeps every group's settings, in the data directory.
pub const FILE: &str = "group-configs.json";

/// Settings of one group, by Kafka name.
pub type Settings = BTreeMap<String, String>;

/// How a setting's value is checked.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// An int within bounds from the broker's settings.
    Int { min: i64, max: i64 },
    /// One of these words.
    OneOf(&'static [&'static str]),
}

/// One group setting: its name, the broker's value for it, and its check.
#[derive(Debug, Clone)]
pub struct Definition {
    pub name: &'static str,
    pub default: String,
    pub config_type: i8,
    kind: Kind,
}

/// `share.auto.offset.reset` values served. Kafka's `by_duration:` is not.
const RESETS: &[&str] = &["latest", "earliest"];
/// `share.isolation.level` values served: share groups read up to the high watermark.
const ISOLATION: &[&str] = &["read_uncommitted"];

/// Bounds that always hold the broker's own value.
fn int(name: &'static str, default: i64, min: i64, max: i64) -> Definition {
    Definition {
        name,
        default: default.to_string(),
        config_type: TYPE_INT,
        kind: Kind::Int {
            min: min.min(default),
            max: max.max(default),
        },
    }
}

/// Every group setting, in name order, with this broker's values and bounds.
pub fn definitions(
    group: &GroupSettings,
    share: &ShareSettings,
    share_heartbeat_interval_ms: i32,
) -> Vec<Definition> {
    let consumer = headway_group::GroupConfig::default();
    vec![
        int(
            "consumer.heartbeat.interval.ms",
            i64::from(consumer.consumer_heartbeat_interval_ms),
            group.group_consumer_min_heartbeat_interval_ms,
            group.group_consumer_max_heartbeat_interval_ms,
        ),
        int(
            "consumer.session.timeout.ms",
            consumer.consumer_session_timeout_ms,
            group.group_consumer_min_session_timeout_ms,
            group.group_consumer_max_session_timeout_ms,
        ),
        Definition {
            name: "share.auto.offset.reset",
            default: share.share_auto_offset_reset.clone(),
            config_type: TYPE_STRING,
            kind: Kind::OneOf(RESETS),
        },
        int(
            "share.heartbeat.interval.ms",
            i64::from(share_heartbeat_interval_ms),
            share.share_min_heartbeat_interval_ms,
            share.share_max_heartbeat_interval_ms,
        ),
        Definition {
            name: "share.isolation.level",
            default: ISOLATION[0].to_string(),
            config_type: TYPE_STRING,
            kind: Kind::OneOf(ISOLATION),
        },
        int(
            "share.record.lock.duration.ms",
            share.share_record_lock_duration_ms,
            share.share_min_record_lock_duration_ms,
            share.share_max_record_lock_duration_ms,
        ),
        int(
            "share.session.timeout.ms",
            share.share_session_timeout_ms,
            share.share_min_session_timeout_ms,
            share.share_max_session_timeout_ms,
        ),
    ]
}

fn invalid(name: &str, value: &str, reason: impl Into<String>) -> BrokerError {
    BrokerError::InvalidConfig {
        name: name.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Checks a group's whole settings: every name known, every value in its bounds, and
/// each heartbeat interval below its session timeout (the broker's value standing in
/// for one not set).
pub fn validate(definitions: &[Definition], settings: &Settings) -> Result<(), BrokerError> {
    for (name, value) in settings {
        let Some(def) = definitions.iter().find(|d| d.name == name) else {
            return Err(invalid(name, value, "not a group config"));
        };
        match def.kind {
            Kind::Int { min, max } => {
                let n: i64 = value
                    .trim()
                    .parse()
                    .map_err(|_| invalid(name, value, "not an int"))?;
                if !(min..=max).contains(&n) {
                    return Err(invalid(
                        name,
                        value,
                        format!("must be within [{min}, {max}] (the broker's bounds)"),
                    ));
                }
            }
            Kind::OneOf(words) => {
                if !words.contains(&value.as_str()) {
                    return Err(invalid(
                        name,
                        value,
                        format!("must be one of {}", words.join(", ")),
                    ));
                }
            }
        }
    }
    let effective = |name: &str| -> i64 {
        settings
            .get(name)
            .or_else(|| {
                definitions
                    .iter()
                    .find(|d| d.name == name)
                    .map(|d| &d.default)
            })
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    for prefix in ["consumer", "share"] {
        let heartbeat = format!("{prefix}.heartbeat.interval.ms");
        let session = format!("{prefix}.session.timeout.ms");
        if (settings.contains_key(&heartbeat) || settings.contains_key(&session))
            && effective(&heartbeat) >= effective(&session)
        {
            let value = effective(&heartbeat).to_string();
            return Err(invalid(
                &heartbeat,
                &value,
                format!("must be less than {session} ({})", effective(&session)),
            ));
        }
    }
    Ok(())
}

/// Every setting of a group with its value and whether the group set it, in name
/// order (DescribeConfigs).
pub fn describe(definitions: &[Definition], settings: &Settings) -> Vec<(String, String, bool)> {
    definitions
        .iter()
        .map(|d| match settings.get(d.name) {
            Some(v) => (d.name.to_string(), v.clone(), true),
            None => (d.name.to_string(), d.default.clone(), false),
        })
        .collect()
}

/// What a group's settings change in the consumer-protocol coordinator.
pub fn consumer_overrides(settings: &Settings) -> ConsumerOverrides {
    let int = |name: &str| {
        settings
            .get(name)
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    ConsumerOverrides {
        session_timeout_ms: int("consumer.session.timeout.ms"),
        heartbeat_interval_ms: int("consumer.heartbeat.interval.ms")
            .and_then(|v| i32::try_from(v).ok()),
    }
}

/// What a group's settings change in the share coordinator.
pub fn share_overrides(settings: &Settings) -> ShareOverrides {
    let int = |name: &str| {
        settings
            .get(name)
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    ShareOverrides {
        auto_offset_reset: settings
            .get("share.auto.offset.reset")
            .and_then(|v| AutoOffsetReset::parse(v)),
        record_lock_duration_ms: int("share.record.lock.duration.ms"),
        session_timeout_ms: int("share.session.timeout.ms"),
        heartbeat_interval_ms: int("share.heartbeat.interval.ms")
            .and_then(|v| i32::try_from(v).ok()),
    }
}

/// The settings of every group: kept durably in one file of the data directory, or,
/// in a cluster, a copy of the controller's.
pub struct GroupConfigStore {
    /// `None` in a cluster: nothing is written here.
    path: Option<PathBuf>,
    definitions: Vec<Definition>,
    groups: Mutex<BTreeMap<String, Settings>>,
    /// Most groups with settings (`limits::GROUP_CONFIG_GROUPS_MAX`).
    groups_max: usize,
    /// Held across a change's write, so changes replace the file one at a time and in
    /// the order they reach memory.
    writing: tokio::sync::Mutex<()>,
}

impl GroupConfigStore {
    /// Reads `<data_dir>/group-configs.json` (none yet: no group has settings).
    /// Blocking. Values are kept as written, even where the broker's bounds have
    /// since changed.
    pub fn open(
        data_dir: &Path,
        definitions: Vec<Definition>,
    ) -> Result<GroupConfigStore, BrokerError> {
        Self::open_bounded(
            data_dir,
            definitions,
            headway_base::limits::GROUP_CONFIG_GROUPS_MAX,
        )
    }

    /// [`GroupConfigStore::open`] with at most `groups_max` groups with settings.
    pub fn open_bounded(
        data_dir: &Path,
        definitions: Vec<Definition>,
        groups_max: usize,
    ) -> Result<GroupConfigStore, BrokerError> {
        let path = data_dir.join(FILE);
        let groups = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| BrokerError::Storage(format!("reading {}: {e}", path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => {
                return Err(BrokerError::Storage(format!(
                    "reading {}: {e}",
                    path.display()
                )))
            }
        };
        Ok(GroupConfigStore {
            path: Some(path),
            definitions,
            groups: Mutex::new(groups),
            groups_max,
            writing: tokio::sync::Mutex::new(()),
        })
    }

    /// The store of a broker in a cluster: empty until [`follow`] copies the
    /// controller's settings in, and never written to disk.
    pub fn clustered(definitions: Vec<Definition>) -> GroupConfigStore {
        GroupConfigStore {
            path: None,
            definitions,
            groups: Mutex::new(BTreeMap::new()),
            groups_max: headway_base::limits::GROUP_CONFIG_GROUPS_MAX,
            writing: tokio::sync::Mutex::new(()),
        }
    }

    pub fn definitions(&self) -> &[Definition] {
        &self.definitions
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Settings>> {
        self.groups
            .lock()
            .expect("group configs mutex poisoned by a panic")
    }

    /// A group's settings (empty when it has none).
    pub fn get(&self, group_id: &str) -> Settings {
        self.groups().get(group_id).cloned().unwrap_or_default()
    }

    /// Every group with settings.
    pub fn all(&self) -> BTreeMap<String, Settings> {
        self.groups().clone()
    }

    /// Changes a group's settings with `change` and checks the result, changing nothing
    /// here: the group's settings as they would become.
    pub fn check(
        &self,
        group_id: &str,
        change: impl FnOnce(&mut Settings) -> Result<(), BrokerError>,
    ) -> Result<Settings, BrokerError> {
        if group_id.is_empty() {
            return Err(BrokerError::InvalidRequest(
                "a group config resource needs a group name".into(),
            ));
        }
        let mut settings = self.get(group_id);
        change(&mut settings)?;
        validate(&self.definitions, &settings)?;
        let groups = self.groups();
        if !settings.is_empty() && !groups.contains_key(group_id) && groups.len() >= self.groups_max
        {
            return Err(BrokerError::InvalidRequest(format!(
                "{} groups have settings of their own, the most this broker keeps; \
                 delete some group's settings first",
                self.groups_max
            )));
        }
        Ok(settings)
    }

    /// Changes a group's settings with `change`, checks the result, and (unless
    /// `validate_only`) writes it durably. Returns the group's new settings. On a
    /// broker alone only.
    pub async fn alter(
        &self,
        group_id: &str,
        change: impl FnOnce(&mut Settings) -> Result<(), BrokerError>,
        validate_only: bool,
    ) -> Result<Settings, BrokerError> {
        let _writing = self.writing.lock().await;
        let settings = self.check(group_id, change)?;
        if validate_only {
            return Ok(settings);
        }
        let Some(path) = self.path.clone() else {
            return Err(BrokerError::Storage(
                "a clustered broker's group configs are the controller's".into(),
            ));
        };
        let mut all = self.all();
        if settings.is_empty() {
            all.remove(group_id);
        } else {
            all.insert(group_id.to_string(), settings.clone());
        }
        let bytes = serde_json::to_vec_pretty(&all)
            .map_err(|e| BrokerError::Storage(format!("encoding group configs: {e}")))?;
        tokio::task::spawn_blocking(move || headway_base::durable_file::replace(&path, &bytes))
            .await
            .map_err(|e| BrokerError::Storage(format!("writing group configs: {e}")))??;
        *self.groups() = all;
        Ok(settings)
    }

    /// Takes a group's settings as decided elsewhere (the controller's); whether they
    /// changed.
    pub fn set(&self, group_id: &str, settings: &Settings) -> bool {
        let mut groups = self.groups();
        let old = groups.get(group_id);
        if old == Some(settings) || (old.is_none() && settings.is_empty()) {
            return false;
        }
        if settings.is_empty() {
            groups.remove(group_id);
        } else {
            groups.insert(group_id.to_string(), settings.clone());
        }
        true
    }
}

/// Applies a group's settings to the coordinators that use them.
pub fn apply(groups: &GroupShards, shares: &ShareCoordinator, group_id: &str, settings: &Settings) {
    groups.set_consumer_overrides(group_id, consumer_overrides(settings));
    shares.set_overrides(group_id, share_overrides(settings));
}

/// Opens the store and applies every group's settings (at start-up, after the
/// coordinators replayed their state); in a cluster, an empty store [`follow`] fills.
pub async fn open(
    data_dir: &Path,
    group: &GroupSettings,
    share: &ShareSettings,
    groups: &GroupShards,
    shares: &ShareCoordinator,
    in_cluster: bool,
) -> std::io::Result<Arc<GroupConfigStore>> {
    let definitions = definitions(group, share, shares.config().heartbeat_interval_ms);
    if in_cluster {
        return Ok(Arc::new(GroupConfigStore::clustered(definitions)));
    }
    let dir = data_dir.to_path_buf();
    let store = tokio::task::spawn_blocking(move || GroupConfigStore::open(&dir, definitions))
        .await
        .map_err(std::io::Error::other)?
        .map_err(|e| std::io::Error::other(format!("opening the group configs: {e}")))?;
    for (group_id, settings) in store.all() {
        apply(groups, shares, &group_id, &settings);
    }
    Ok(Arc::new(store))
}

/// In a cluster: keeps `store` and the coordinators in step with the groups' settings
/// in the controller's image, until the image's sender is gone.
pub async fn follow(
    mut image: tokio::sync::watch::Receiver<Arc<headway_controller::Image>>,
    store: Arc<GroupConfigStore>,
    groups: Arc<GroupShards>,
    shares: Arc<ShareCoordinator>,
) {
    loop {
        let decided = image.borrow_and_update().metadata.group_configs.clone();
        if decided != store.all() {
            let mut ids: Vec<&String> = decided.keys().collect();
            let known = store.all();
            ids.extend(known.keys().filter(|g| !decided.contains_key(*g)));
            let none = Settings::new();
            for group_id in ids {
                let settings = decided.get(group_id).unwrap_or(&none);
                if store.set(group_id, settings) {
                    tracing::info!(group = %group_id, ?settings, "group configs changed by the controller");
                    apply(&groups, &shares, group_id, settings);
                }
            }
        }
        if image.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
