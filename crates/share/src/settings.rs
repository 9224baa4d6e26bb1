//! The share coordinator's section of the broker's settings: the `share_*` keys of the
//! config file.
//!
//! The config file is one flat table; `headway_server::config` reads this section from
//! it by these field names, so each field's name is its key there (and its flag is
//! `--<name>`, its environment variable `HEADWAY_<NAME>`). [`ShareSettings::share_config`]
//! turns the section into the coordinator's own [`ShareConfig`], and
//! [`ShareSettings::validate`] checks what serde cannot.

use crate::{AutoOffsetReset, ShareConfig, SharePartitionConfig};
use headway_base::limits;
use headway_broker::config::check_bounds;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ShareSettings {
    /// How long a share consumer holds records it acquired before they go back to
    /// the others (Kafka's `group.share.record.lock.duration.ms`).
    pub share_record_lock_duration_ms: i64,
    /// Deliveries of a record to share consumers before it is archived (Kafka's
    /// `group.share.delivery.count.limit`).
    pub share_delivery_count_limit: u16,
    /// Where a share group starts in a partition it has no state for: `latest` or
    /// `earliest` (Kafka's `share.auto.offset.reset`).
    pub share_auto_offset_reset: String,
    /// A share group member without a heartbeat this long is removed (Kafka's
    /// `group.share.session.timeout.ms`).
    pub share_session_timeout_ms: i64,
    /// Bounds of a share group's own `share.record.lock.duration.ms` (Kafka's
    /// `group.share.min.record.lock.duration.ms` and `...max...`); the broker's own
    /// `share_record_lock_duration_ms` is always allowed too.
    pub share_min_record_lock_duration_ms: i64,
    pub share_max_record_lock_duration_ms: i64,
    /// Bounds of a share group's own `share.session.timeout.ms` (Kafka's
    /// `group.share.min.session.timeout.ms` and `...max...`).
    pub share_min_session_timeout_ms: i64,
    pub share_max_session_timeout_ms: i64,
    /// Bounds of a share group's own `share.heartbeat.interval.ms` (Kafka's
    /// `group.share.min.heartbeat.interval.ms` and `...max...`).
    pub share_min_heartbeat_interval_ms: i64,
    pub share_max_heartbeat_interval_ms: i64,
}

impl Default for ShareSettings {
    fn default() -> Self {
        ShareSettings {
            share_record_lock_duration_ms: 30_000,
            share_delivery_count_limit: 5,
            share_auto_offset_reset: "latest".into(),
            share_session_timeout_ms: 45_000,
            share_min_record_lock_duration_ms: 15_000,
            share_max_record_lock_duration_ms: 60_000,
            share_min_session_timeout_ms: 45_000,
            share_max_session_timeout_ms: 60_000,
            share_min_heartbeat_interval_ms: 5_000,
            share_max_heartbeat_interval_ms: 15_000,
        }
    }
}

impl ShareSettings {
    /// Checks relations between settings that serde cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.share_record_lock_duration_ms <= 0
            || self.share_delivery_count_limit == 0
            || self.share_session_timeout_ms <= 0
            || AutoOffsetReset::parse(&self.share_auto_offset_reset).is_none()
        {
            return Err(
                "share_record_lock_duration_ms, share_delivery_count_limit and \
                 share_session_timeout_ms must be above 0, share_auto_offset_reset \
                 latest or earliest"
                    .into(),
            );
        }
        check_bounds(
            "share_min/max_record_lock_duration_ms",
            self.share_min_record_lock_duration_ms,
            self.share_max_record_lock_duration_ms,
        )?;
        check_bounds(
            "share_min/max_session_timeout_ms",
            self.share_min_session_timeout_ms,
            self.share_max_session_timeout_ms,
        )?;
        check_bounds(
            "share_min/max_heartbeat_interval_ms",
            self.share_min_heartbeat_interval_ms,
            self.share_max_heartbeat_interval_ms,
        )
    }

    /// The coordinator's configuration: these settings, the broker's limits, and the
    /// coordinator's own defaults for the rest.
    pub fn share_config(&self) -> ShareConfig {
        ShareConfig {
            partition: SharePartitionConfig {
                record_lock_duration_ms: self.share_record_lock_duration_ms,
                delivery_count_limit: self.share_delivery_count_limit,
                max_record_locks: limits::SHARE_PARTITION_RECORD_LOCKS_MAX,
            },
            session_timeout_ms: self.share_session_timeout_ms,
            auto_offset_reset: AutoOffsetReset::parse(&self.share_auto_offset_reset)
                .unwrap_or_default(),
            sessions_max: limits::SHARE_SESSIONS_MAX,
            members_max: limits::SHARE_GROUP_MEMBERS_MAX,
            ..ShareConfig::default()
        }
    }
}
