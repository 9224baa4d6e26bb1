//! The group coordinator's section of the broker's settings: the `group_*` and
//! `offsets_*` keys of the config file.
//!
//! The config file is one flat table; `headway_server::config` reads this section from
//! it by these field names, so each field's name is its key there (and its flag is
//! `--<name>`, its environment variable `HEADWAY_<NAME>`). [`GroupSettings::group_config`]
//! turns the section into the coordinator's own [`GroupConfig`], and
//! [`GroupSettings::validate`] checks what serde cannot.

use crate::{GroupConfig, MigrationPolicy};
use headway_broker::config::check_bounds;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GroupSettings {
    /// Kafka's `group.initial.rebalance.delay.ms`: how long an empty group's first
    /// rebalance waits for more members.
    pub group_initial_rebalance_delay_ms: i64,
    /// Kafka's `group.consumer.migration.policy`: which online conversions between
    /// classic and consumer groups are served, `bidirectional`, `upgrade`,
    /// `downgrade` or `disabled` (`docs/groups.md`).
    pub group_consumer_migration_policy: String,
    /// Committed offsets of a group without members are removed after this long
    /// without a commit (Kafka's `offsets.retention.minutes`, in ms).
    pub offsets_retention_ms: i64,
    /// Bounds of a consumer group's own `consumer.session.timeout.ms` (Kafka's
    /// `group.consumer.min.session.timeout.ms` and `...max...`).
    pub group_consumer_min_session_timeout_ms: i64,
    pub group_consumer_max_session_timeout_ms: i64,
    /// Bounds of a consumer group's own `consumer.heartbeat.interval.ms` (Kafka's
    /// `group.consumer.min.heartbeat.interval.ms` and `...max...`).
    pub group_consumer_min_heartbeat_interval_ms: i64,
    pub group_consumer_max_heartbeat_interval_ms: i64,
}

impl Default for GroupSettings {
    fn default() -> Self {
        GroupSettings {
            group_initial_rebalance_delay_ms: 3_000,
            group_consumer_migration_policy: "bidirectional".into(),
            offsets_retention_ms: 7 * 24 * 3600 * 1000,
            group_consumer_min_session_timeout_ms: 45_000,
            group_consumer_max_session_timeout_ms: 60_000,
            group_consumer_min_heartbeat_interval_ms: 5_000,
            group_consumer_max_heartbeat_interval_ms: 15_000,
        }
    }
}

impl GroupSettings {
    /// Checks relations between settings that serde cannot.
    pub fn validate(&self) -> Result<(), String> {
        check_bounds(
            "group_consumer_min/max_session_timeout_ms",
            self.group_consumer_min_session_timeout_ms,
            self.group_consumer_max_session_timeout_ms,
        )?;
        check_bounds(
            "group_consumer_min/max_heartbeat_interval_ms",
            self.group_consumer_min_heartbeat_interval_ms,
            self.group_consumer_max_heartbeat_interval_ms,
        )?;
        if !matches!(
            self.group_consumer_migration_policy.as_str(),
            "bidirectional" | "upgrade" | "downgrade" | "disabled"
        ) {
            return Err(
                "group_consumer_migration_policy must be bidirectional, upgrade, downgrade \
                 or disabled"
                    .into(),
            );
        }
        Ok(())
    }

    /// The coordinator's configuration: these settings over its own defaults.
    pub fn group_config(&self) -> Result<GroupConfig, String> {
        let migration_policy = MigrationPolicy::parse(&self.group_consumer_migration_policy)
            .ok_or_else(|| {
                format!(
                    "group_consumer_migration_policy: {:?} is none of {}",
                    self.group_consumer_migration_policy,
                    MigrationPolicy::NAMES.join(", ")
                )
            })?;
        Ok(GroupConfig {
            initial_rebalance_delay_ms: self.group_initial_rebalance_delay_ms,
            offsets_retention_ms: self.offsets_retention_ms,
            migration_policy,
            ..GroupConfig::default()
        })
    }
}
