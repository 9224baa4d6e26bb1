//! Every setting of a running broker, one section per component, read from one flat
//! TOML file.
//!
//! Each component defines the section it reads, in its own crate: the broker's storage,
//! I/O and listeners (`headway_broker::BrokerConfig`), the group, share and
//! transaction coordinators (`headway_group::GroupSettings`,
//! `headway_share::ShareSettings`, `headway_txn::TxnSettings`), the authorizer and
//! SASL (`headway_auth::AuthSettings`), and the cluster's controller voters
//! (`headway_controller::ClusterSettings`). The coordinators sit
//! above the broker in the crate graph, so the assembled whole cannot live in the
//! broker; it lives here, in the crate that depends on every component and starts them
//! all, and the CLI lays its flags and environment variables over it. [`Config`] splits
//! in two at start-up: `Broker::open` takes [`Config::broker`] and `Server::bind` takes
//! [`ServerConfig`], which hands each coordinator only its own section.
//!
//! The file stays one flat table, as it was before it had sections: a key belongs to
//! exactly one section, as the name of one of its fields (a test below holds that).
//! serde's `deny_unknown_fields` cannot refuse unknown keys across several sections, so
//! [`Config::from_toml`] refuses them itself, once: each section's derived
//! `Deserialize` declares its field names ([`section_keys`] captures them with a
//! deserializer that only listens), a key that no section declares is refused with
//! toml's own message and position, and then each section reads its keys from the same
//! text, so a wrong value is reported with its position too.

use headway_auth::AuthSettings;
use headway_broker::BrokerConfig;
use headway_controller::ClusterSettings;
use headway_group::GroupSettings;
use headway_share::ShareSettings;
use headway_tier::TierSettings;
use headway_txn::TxnSettings;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::Deserializer;
use std::fmt;
use std::sync::OnceLock;

/// Every setting: the broker's section, and the sections of what runs above it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// Storage, the log's defaults, I/O and listeners: what `Broker::open` takes.
    pub broker: BrokerConfig,
    /// What `Server::bind` takes.
    pub server: ServerConfig,
}

/// The sections of the components the server starts over the broker.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerConfig {
    pub group: GroupSettings,
    pub share: ShareSettings,
    pub txn: TxnSettings,
    pub auth: AuthSettings,
    /// The controller voters; empty, the broker runs alone.
    pub cluster: ClusterSettings,
    /// The remote tier's bucket; no endpoint, no remote tier.
    pub tier: TierSettings,
}

/// The broker's section with every other section at its defaults.
impl From<BrokerConfig> for Config {
    fn from(broker: BrokerConfig) -> Config {
        Config {
            broker,
            server: ServerConfig::default(),
        }
    }
}

impl Config {
    /// Reads the settings from a config file's text; a key that is not missing takes
    /// its section's default. A key no section declares is an error.
    pub fn from_toml(text: &str) -> Result<Config, toml::de::Error> {
        toml::from_str::<KnownKeys>(text)?;
        let mut config = Config {
            broker: toml::from_str(text)?,
            server: ServerConfig {
                group: toml::from_str(text)?,
                share: toml::from_str(text)?,
                txn: toml::from_str(text)?,
                auth: toml::from_str(text)?,
                cluster: toml::from_str(text)?,
                tier: toml::from_str(text)?,
            },
        };
        config.settle();
        Ok(config)
    }

    /// Carries what one section tells another: the broker's topics may be tiered when
    /// the remote tier has an endpoint. Called after any change to the sections.
    pub fn settle(&mut self) {
        self.broker.log.remote_storage_available = self.server.tier.enabled();
    }

    /// Every key of the config file, section by section, in each section's field order.
    pub fn keys() -> &'static [&'static str] {
        static KEYS: OnceLock<Vec<&'static str>> = OnceLock::new();
        KEYS.get_or_init(|| {
            [
                section_keys::<BrokerConfig>(),
                section_keys::<GroupSettings>(),
                section_keys::<ShareSettings>(),
                section_keys::<TxnSettings>(),
                section_keys::<AuthSettings>(),
                section_keys::<ClusterSettings>(),
                section_keys::<TierSettings>(),
            ]
            .concat()
        })
    }

    /// Checks relations between settings that serde cannot, section by section, then
    /// the one that spans two: a SASL listener needs a mechanism to offer.
    pub fn validate(&self) -> Result<(), String> {
        self.broker.validate()?;
        self.server.auth.validate()?;
        if self.server.auth.sasl_enabled_mechanisms.is_empty()
            && self
                .broker
                .listener_specs()?
                .iter()
                .any(|l| l.protocol.sasl())
        {
            return Err("a SASL listener needs at least one sasl_enabled_mechanisms".to_string());
        }
        self.server.txn.validate()?;
        self.server.share.validate()?;
        self.server.tier.validate()?;
        self.server
            .cluster
            .membership(self.broker.node_id)
            .map(|_| ())?;
        self.server.group.validate()
    }
}

/// The field names a section's derived `Deserialize` declares: its keys in the file.
pub fn section_keys<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut fields = None;
    // The listener answers every request with an error once it has heard the names.
    let _ = T::deserialize(FieldListener {
        fields: &mut fields,
    });
    fields.expect("a settings section is a struct with named fields")
}

/// A deserializer that yields nothing: it keeps the field names a struct's
/// `Deserialize` hands to `deserialize_struct`, and fails.
struct FieldListener<'a> {
    fields: &'a mut Option<&'static [&'static str]>,
}

/// Why a [`FieldListener`] stops: it has no data, only ears.
#[derive(Debug)]
struct Listened;

impl fmt::Display for Listened {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("only the field names were listened for")
    }
}

impl std::error::Error for Listened {}

impl de::Error for Listened {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Listened
    }
}

impl<'de> Deserializer<'de> for FieldListener<'_> {
    type Error = Listened;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Listened> {
        *self.fields = Some(fields);
        Err(Listened)
    }

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Listened> {
        Err(Listened)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

/// A whole config file read only to check that every top-level key is one that some
/// section declares.
struct KnownKeys;

impl<'de> de::Deserialize<'de> for KnownKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_struct("Config", Config::keys(), KnownKeys)
    }
}

impl<'de> Visitor<'de> for KnownKeys {
    type Value = KnownKeys;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table of broker settings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KnownKeys, A::Error> {
        while map.next_key_seed(KnownKey)?.is_some() {
            map.next_value::<IgnoredAny>()?;
        }
        Ok(KnownKeys)
    }
}

/// One top-level key, refused with serde's "unknown field" message unless a section
/// declares it. Refused while the key is read, so toml points at it.
struct KnownKey;

impl<'de> DeserializeSeed<'de> for KnownKey {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_identifier(KnownKey)
    }
}

impl Visitor<'_> for KnownKey {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a setting's name")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<(), E> {
        match Config::keys().contains(&key) {
            true => Ok(()),
            false => Err(E::unknown_field(key, Config::keys())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The keys of the config file when it was read into one struct, in that struct's
    /// order: sections change where a setting is defined, never its key.
    const KEYS_BEFORE_SECTIONS: &[&str] = &[
        "data_dir",
        "listen",
        "advertised_listener",
        "listeners",
        "advertised_listeners",
        "listener_security_protocol_map",
        "ssl_certificate_file",
        "ssl_key_file",
        "ssl_client_ca_file",
        "node_id",
        "auto_create_topics",
        "default_partitions",
        "flush",
        "sync_scope",
        "retention_check_interval_ms",
        "frame_bytes_max",
        "request_bytes_in_flight_max",
        "request_body_timeout_ms",
        "connections_max",
        "open_files_max",
        "read_threads",
        "read_cache_first",
        "read_tail_bytes",
        "read_threads_nice",
        "bulk_send_threads",
        "bulk_io_idle",
        "bulk_bytes_per_sec_max",
        "bulk_read_bytes_per_sec_max",
        "bulk_bytes_per_sec_min",
        "light_latency_target_ms",
        "bulk_read_sync_wait_us",
        "partition_unsynced_bytes_max",
        "connection_outbound_bytes_max",
        "outbound_bytes_max",
        "metrics_listen",
        "group_initial_rebalance_delay_ms",
        "group_consumer_migration_policy",
        "offsets_retention_ms",
        "producer_id_expiration_ms",
        "transaction_max_timeout_ms",
        "transactional_id_expiration_ms",
        "transaction_abort_timed_out_check_interval_ms",
        "disk_free_bytes_min",
        "log_cleaner_enabled",
        "log_cleaner_backoff_ms",
        "log_cleaner_dedupe_buffer_bytes",
        "log_cleaner_io_bytes_per_sec",
        "log",
        "share_record_lock_duration_ms",
        "share_delivery_count_limit",
        "share_auto_offset_reset",
        "share_session_timeout_ms",
        "share_min_record_lock_duration_ms",
        "share_max_record_lock_duration_ms",
        "share_min_session_timeout_ms",
        "share_max_session_timeout_ms",
        "share_min_heartbeat_interval_ms",
        "share_max_heartbeat_interval_ms",
        "group_consumer_min_session_timeout_ms",
        "group_consumer_max_session_timeout_ms",
        "group_consumer_min_heartbeat_interval_ms",
        "group_consumer_max_heartbeat_interval_ms",
        "console_listen",
        "authorizer",
        "super_users",
        "allow_everyone_if_no_acl_found",
        "sasl_enabled_mechanisms",
        "sasl_failed_authentication_delay_ms",
        "connections_max_reauth_ms",
        "sasl_oauthbearer_jwks_file",
        "sasl_oauthbearer_expected_issuer",
        "sasl_oauthbearer_expected_audience",
    ];

    /// The keys added since, by the cluster's section.
    const KEYS_OF_THE_CLUSTER: &[&str] = &[
        "controller_quorum_voters",
        "default_replication_factor",
        "offsets_topic_num_partitions",
        "transaction_state_log_num_partitions",
        "share_coordinator_state_topic_num_partitions",
    ];

    /// The keys added since, by the remote tier's section.
    const KEYS_OF_THE_REMOTE_TIER: &[&str] = &[
        "remote_storage_endpoint",
        "remote_storage_bucket",
        "remote_storage_region",
        "remote_storage_access_key_id",
        "remote_storage_secret_access_key",
        "remote_storage_prefix",
        "remote_storage_upload_interval_ms",
    ];

    #[test]
    fn every_key_belongs_to_exactly_one_section_and_the_keys_are_unchanged() {
        let keys = Config::keys();
        let distinct: BTreeSet<&str> = keys.iter().copied().collect();
        assert_eq!(distinct.len(), keys.len(), "a key claimed twice: {keys:?}");
        assert_eq!(KEYS_BEFORE_SECTIONS.len(), 72);
        let expected: BTreeSet<&str> = KEYS_BEFORE_SECTIONS
            .iter()
            .chain(KEYS_OF_THE_CLUSTER)
            .chain(KEYS_OF_THE_REMOTE_TIER)
            .copied()
            .collect();
        assert_eq!(distinct, expected);
        assert_eq!(keys.len(), 84);
    }

    #[test]
    fn an_unknown_key_is_refused_with_its_position() {
        let error = Config::from_toml("read_threads = 2\nno_such_key = 1\n").unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("unknown field `no_such_key`, expected one of `data_dir`"),
            "{text}"
        );
        assert!(text.contains("line 2, column 1"), "{text}");
        // Inside `[log]`, the broker's own table refuses it.
        assert!(Config::from_toml("[log]\nno_such_key = 1\n").is_err());
    }

    #[test]
    fn each_section_reads_its_own_keys_from_the_flat_file() {
        let config = Config::from_toml(
            "listen = \"0.0.0.0:19092\"\n\
             group_initial_rebalance_delay_ms = 0\n\
             share_auto_offset_reset = \"earliest\"\n\
             transaction_max_timeout_ms = 60000\n\
             [log]\nsegment_bytes = 1048576\n",
        )
        .unwrap();
        assert_eq!(config.broker.listen, "0.0.0.0:19092");
        assert_eq!(config.broker.log.segment_bytes, 1 << 20);
        assert_eq!(config.server.group.group_initial_rebalance_delay_ms, 0);
        assert_eq!(config.server.share.share_auto_offset_reset, "earliest");
        assert_eq!(config.server.txn.transaction_max_timeout_ms, 60_000);
        assert_eq!(
            config.server.group.offsets_retention_ms,
            GroupSettings::default().offsets_retention_ms
        );
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
        config.validate().unwrap();
    }

    #[test]
    fn the_cluster_section_is_read_and_checked_against_the_node_id() {
        let config = Config::from_toml(
            "node_id = 2\ncontroller_quorum_voters = \"1@h:9093,2@h:9094\"\ndefault_replication_factor = 2\n",
        )
        .unwrap();
        assert_eq!(
            config.server.cluster.controller_quorum_voters,
            "1@h:9093,2@h:9094"
        );
        assert_eq!(config.server.cluster.default_replication_factor, Some(2));
        config.validate().unwrap();
        let outside =
            Config::from_toml("node_id = 3\ncontroller_quorum_voters = \"1@h:9093,2@h:9094\"\n")
                .unwrap();
        let error = outside.validate().unwrap_err();
        assert!(
            error.contains("node id 3 is not one of the controller voters"),
            "{error}"
        );
        let alone = Config::from_toml("node_id = 3\n").unwrap();
        alone.validate().unwrap();
        assert_eq!(alone.server.cluster, ClusterSettings::default());
    }

    #[test]
    fn a_wrong_value_is_reported_with_its_position() {
        let text = Config::from_toml("share_delivery_count_limit = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(text.contains("line 1, column 30"), "{text}");
        assert!(
            text.contains("invalid type: string \"x\", expected u16"),
            "{text}"
        );
    }
}
