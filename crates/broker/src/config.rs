//! Broker settings and per-topic settings, with their defaults.
//!
//! `BrokerConfig` is the broker's section of the settings: storage, the log's
//! defaults, I/O and the listeners' addresses. The group, share and transaction
//! coordinators own their sections (`headway_group::GroupSettings`, ...);
//! `headway_server::config` reads every section from one flat TOML file (`--config`),
//! which the CLI then overrides by flags and `HEADWAY_<NAME>` environment variables. Topic settings use Kafka's
//! names (`retention.ms`, `segment.bytes`, ...) so that admin tools work unchanged;
//! their defaults come from the broker's `[log]` table.

use crate::listeners::{self, ListenerSettings, ListenerSpec};
use crate::BrokerError;
use headway_base::limits;
use headway_log::LogConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// When appended data is synced to disk, and so when produces are acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlushPolicy {
    /// Acknowledge acks=1/all produces only after fdatasync; appends waiting at the
    /// same moment share one sync (group commit). Consumers see only synced data.
    #[default]
    Sync,
    /// Acknowledge after the write to the page cache and sync every interval.
    /// A crash of the machine (not only the process) loses up to one interval.
    Interval(Duration),
    /// Never sync explicitly; the kernel writes back when it chooses.
    None,
}

impl FromStr for FlushPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "sync" => Ok(FlushPolicy::Sync),
            "none" => Ok(FlushPolicy::None),
            other => {
                let ms = other
                    .strip_prefix("interval:")
                    .and_then(|ms| ms.trim_end_matches("ms").parse::<u64>().ok())
                    .filter(|ms| *ms > 0)
                    .ok_or_else(|| {
                        format!("flush must be sync, interval:<ms> or none, not {other:?}")
                    })?;
                Ok(FlushPolicy::Interval(Duration::from_millis(ms)))
            }
        }
    }
}

impl std::fmt::Display for FlushPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FlushPolicy::Sync => write!(f, "sync"),
            FlushPolicy::Interval(d) => write!(f, "interval:{}", d.as_millis()),
            FlushPolicy::None => write!(f, "none"),
        }
    }
}

/// Serde through the setting's text form (`FromStr` and `Display`), as written in the
/// TOML file and on the command line.
macro_rules! serde_as_text {
    ($($setting:ty),*) => {$(
        impl<'de> Deserialize<'de> for $setting {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                String::deserialize(d)?
                    .parse()
                    .map_err(serde::de::Error::custom)
            }
        }

        impl Serialize for $setting {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_string())
            }
        }
    )*};
}

serde_as_text!(FlushPolicy, SyncScope, CleanupPolicy);

/// Which appends one group-commit round covers (with `flush = sync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncScope {
    /// Each partition has its own flusher: its syncs run concurrently with other
    /// partitions' and its acknowledgements wait only for its own files.
    #[default]
    Partition,
    /// One flusher for the broker: each round takes the sync sets of every partition
    /// written since the previous round, fdatasyncs them one after another, then
    /// publishes every partition's new high watermark.
    Broker,
    /// Like `Broker`, but a round is one `syncfs(2)` of the data directory's
    /// filesystem instead of one fdatasync per file.
    Syncfs,
}

impl FromStr for SyncScope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "partition" => Ok(SyncScope::Partition),
            "broker" => Ok(SyncScope::Broker),
            "syncfs" => Ok(SyncScope::Syncfs),
            other => Err(format!(
                "sync_scope must be partition, broker or syncfs, not {other:?}"
            )),
        }
    }
}

impl std::fmt::Display for SyncScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SyncScope::Partition => "partition",
            SyncScope::Broker => "broker",
            SyncScope::Syncfs => "syncfs",
        })
    }
}

/// What happens to a topic's old data (`cleanup.policy`): deleted by age and size
/// (retention), compacted to the latest record of each key, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

impl CleanupPolicy {
    pub const DELETE: CleanupPolicy = CleanupPolicy {
        delete: true,
        compact: false,
    };
}

impl Default for CleanupPolicy {
    fn default() -> Self {
        CleanupPolicy::DELETE
    }
}

impl FromStr for CleanupPolicy {
    type Err = String;

    /// Kafka's forms: a comma-separated list of `delete` and `compact`, at least one.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut policy = CleanupPolicy {
            delete: false,
            compact: false,
        };
        for word in s.split(',').map(str::trim) {
            match word {
                "delete" => policy.delete = true,
                "compact" => policy.compact = true,
                other => {
                    return Err(format!(
                        "cleanup.policy is a list of delete and compact, not {other:?}"
                    ))
                }
            }
        }
        Ok(policy)
    }
}

impl std::fmt::Display for CleanupPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match (self.compact, self.delete) {
            (true, true) => "compact,delete",
            (true, false) => "compact",
            _ => "delete",
        })
    }
}

/// Defaults for topic settings (`[log]` in the TOML file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogDefaults {
    pub segment_bytes: u64,
    pub segment_ms: u64,
    /// -1: no size limit.
    pub retention_bytes: i64,
    /// -1: keep forever.
    pub retention_ms: i64,
    pub max_message_bytes: usize,
    pub index_interval_bytes: u32,
    /// `cleanup.policy`: `delete`, `compact` or `compact,delete`.
    pub cleanup_policy: CleanupPolicy,
    /// `min.cleanable.dirty.ratio`: a compacted log is cleaned once this share of it
    /// has not been cleaned yet.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: records younger than this are not compacted away.
    pub min_compaction_lag_ms: u64,
    /// `max.compaction.lag.ms`: a record older than this is compacted whatever the
    /// dirty ratio.
    pub max_compaction_lag_ms: u64,
    /// `delete.retention.ms`: how long a tombstone (a null value) is kept after the
    /// segment holding it was first cleaned.
    pub delete_retention_ms: u64,
    /// Whether this broker has a remote tier (`remote_storage_endpoint`), set from the
    /// remote tier's section; not a key of its own. Without it a topic cannot be
    /// created or altered to `remote.storage.enable=true`.
    #[serde(skip)]
    pub remote_storage_available: bool,
}

impl Default for LogDefaults {
    fn default() -> Self {
        LogDefaults {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            retention_ms: 7 * 24 * 3600 * 1000,
            // Kafka's default: 1 MiB plus batch overhead.
            max_message_bytes: 1_048_588,
            index_interval_bytes: 4096,
            // Kafka's defaults for compaction.
            cleanup_policy: CleanupPolicy::DELETE,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX as u64,
            delete_retention_ms: 24 * 3600 * 1000,
            remote_storage_available: false,
        }
    }
}

/// The broker's own section of the settings: what `Broker::open` and the storage under
/// it read. The config file is one flat table shared with the other components'
/// sections (`headway_server::config` reads it and refuses a key no section declares),
/// so this struct does not refuse unknown keys itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BrokerConfig {
    pub data_dir: PathBuf,
    /// Address to bind, `HOST:PORT`. Port 0 binds an ephemeral port.
    pub listen: String,
    /// Address given to clients in Metadata. Defaults to the bound address.
    pub advertised_listener: Option<String>,
    /// Listeners in Kafka's form, `NAME://HOST:PORT`; when set they replace `listen`
    /// and `advertised_listener` (`crate::listeners`, `docs/security.md`).
    pub listeners: Vec<String>,
    /// `NAME://HOST:PORT` per listener: the address Metadata gives the clients of that
    /// listener. Defaults to the bound address.
    pub advertised_listeners: Vec<String>,
    /// `NAME:PROTOCOL` for listeners not named after their security protocol.
    pub listener_security_protocol_map: Vec<String>,
    /// PEM certificate chain of SSL listeners.
    pub ssl_certificate_file: Option<PathBuf>,
    /// PEM private key of SSL listeners (PKCS#8, PKCS#1 or SEC1).
    pub ssl_key_file: Option<PathBuf>,
    /// PEM CA certificates. When set, SSL listeners require a client certificate
    /// signed by one of them (Kafka's `ssl.client.auth=required`).
    pub ssl_client_ca_file: Option<PathBuf>,
    pub node_id: i32,
    pub auto_create_topics: bool,
    pub default_partitions: i32,
    pub flush: FlushPolicy,
    /// With `flush = sync`: whether group commit runs per partition or once for the
    /// whole broker (`docs/sync.md`).
    pub sync_scope: SyncScope,
    pub retention_check_interval_ms: u64,
    pub frame_bytes_max: usize,
    pub request_bytes_in_flight_max: usize,
    /// How long a client may take to send a request body after its length prefix;
    /// past it the connection is closed.
    pub request_body_timeout_ms: u64,
    pub connections_max: usize,
    /// Files the broker's logs may hold open at once (the partitions' active segments
    /// and the cache of sealed segments' files, `crate::open_files`). `None` derives it
    /// from the process's open files limit less a reserve for connections; a figure
    /// only lowers that.
    pub open_files_max: Option<u64>,
    /// Threads for bulk work: reads that may wait for the disk (cold reads) and the
    /// appends of produce requests over 64 KiB. Reads of data in the page cache do not
    /// use them.
    pub read_threads: usize,
    /// Try the page cache first (`RWF_NOWAIT`) and read on the caller's thread when
    /// every byte is there; `false` sends every fetch read to the read threads.
    pub read_cache_first: bool,
    /// A fetch starting at most this many bytes before the log's end reads the tail;
    /// further behind, it is catching up and its reads always go to the read threads.
    pub read_tail_bytes: u64,
    /// CPU priority (nice value, 0..=19) of the read threads: catching up uses the CPU
    /// the tail readers and producers leave.
    pub read_threads_nice: i32,
    /// Threads that write answers of 256 KiB and more (catching up) to plain TCP
    /// sockets in the `SCHED_IDLE` CPU class, so that light work always has the CPU
    /// first; 0 (the default) writes every answer on the runtime's worker threads.
    pub bulk_send_threads: usize,
    /// Bulk work (the read threads, the log cleaner, syncs larger than 256 KiB) submits
    /// its disk I/O in the idle class. Off by default: measured, it slowed heavy writers
    /// without making light syncs faster (`docs/sync.md`).
    pub bulk_io_idle: bool,
    /// Highest rate of bulk writing, bytes per second (produces larger than 64 KiB, the
    /// log cleaner); the rate adapts between the lowest and this to the latency of light
    /// work (`docs/sync.md`).
    pub bulk_bytes_per_sec_max: u64,
    /// Highest rate of bulk reading, bytes per second (catch-up reads that need the
    /// disk); it adapts the same way.
    pub bulk_read_bytes_per_sec_max: u64,
    /// Lowest rate of bulk work, bytes per second.
    pub bulk_bytes_per_sec_min: u64,
    /// Light work (small syncs, small produces' waits for durability) slower than this
    /// (ms) cuts the bulk rate.
    pub light_latency_target_ms: u64,
    /// How long a catch-up read waits, before each disk read of at most 256 KiB, for
    /// small syncs in progress to end (µs; 0: never), so they need not queue behind it.
    pub bulk_read_sync_wait_us: u64,
    /// With `flush = sync`: bytes a partition may have appended and not yet handed to a
    /// sync before its producers are read no further until the sync in progress ends.
    pub partition_unsynced_bytes_max: u64,
    /// Bytes of fetch responses one connection may hold before they are written to its
    /// socket. A client that does not read its socket holds at most this much.
    pub connection_outbound_bytes_max: usize,
    /// Bytes of fetch responses all connections together may hold before they are
    /// written. When it runs short, fetches read less (at least one batch) instead of
    /// waiting.
    pub outbound_bytes_max: usize,
    /// Where to serve Prometheus metrics (`HOST:PORT`, path `/metrics`); off when unset.
    pub metrics_listen: Option<String>,
    /// An idempotent producer idle this long is forgotten (Kafka's
    /// `producer.id.expiration.ms`); if it returns it resets its sequences.
    pub producer_id_expiration_ms: i64,
    /// Produces are refused (KAFKA_STORAGE_ERROR, retriable) while the data directory's
    /// filesystem has fewer free bytes than this, so that committed offsets and the
    /// broker's other small writes still fit; 0 turns the check off
    /// (`limits::DISK_FREE_BYTES_MIN_DEFAULT`, `docs/storage-errors.md`).
    pub disk_free_bytes_min: u64,
    /// Run the log cleaner of compacted topics (`docs/compaction.md`).
    pub log_cleaner_enabled: bool,
    /// How long the cleaner rests when nothing needs cleaning (ms).
    pub log_cleaner_backoff_ms: u64,
    /// Memory for a cleaning pass's key map, bytes.
    pub log_cleaner_dedupe_buffer_bytes: usize,
    /// A fixed cap on the cleaner's reads and writes, bytes per second, below the
    /// adaptive bulk budget it also passes.
    pub log_cleaner_io_bytes_per_sec: u64,
    pub log: LogDefaults,
    /// Where to serve the read-only web console (`HOST:PORT`, `docs/console.md`); off
    /// when unset.
    pub console_listen: Option<String>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            data_dir: PathBuf::from("headway-data"),
            listen: "127.0.0.1:9092".into(),
            advertised_listener: None,
            listeners: Vec::new(),
            advertised_listeners: Vec::new(),
            listener_security_protocol_map: Vec::new(),
            ssl_certificate_file: None,
            ssl_key_file: None,
            ssl_client_ca_file: None,
            node_id: 1,
            auto_create_topics: true,
            default_partitions: 1,
            flush: FlushPolicy::Sync,
            sync_scope: SyncScope::Partition,
            retention_check_interval_ms: 300_000,
            frame_bytes_max: limits::FRAME_BYTES_MAX_DEFAULT,
            request_bytes_in_flight_max: limits::REQUEST_BYTES_IN_FLIGHT_MAX_DEFAULT,
            request_body_timeout_ms: limits::REQUEST_BODY_TIMEOUT_MS_DEFAULT,
            connections_max: limits::CONNECTIONS_MAX_DEFAULT,
            open_files_max: None,
            read_threads: limits::READ_THREADS_DEFAULT,
            read_cache_first: true,
            read_tail_bytes: limits::READ_TAIL_BYTES_DEFAULT,
            read_threads_nice: limits::READ_THREADS_NICE_DEFAULT,
            bulk_send_threads: limits::BULK_SEND_THREADS_DEFAULT,
            bulk_io_idle: false,
            bulk_bytes_per_sec_max: limits::BULK_BYTES_PER_SEC_MAX_DEFAULT,
            bulk_read_bytes_per_sec_max: limits::BULK_READ_BYTES_PER_SEC_MAX_DEFAULT,
            bulk_bytes_per_sec_min: limits::BULK_BYTES_PER_SEC_MIN_DEFAULT,
            light_latency_target_ms: limits::LIGHT_LATENCY_TARGET_MS_DEFAULT,
            bulk_read_sync_wait_us: limits::BULK_READ_SYNC_WAIT_US_DEFAULT,
            partition_unsynced_bytes_max: limits::PARTITION_UNSYNCED_BYTES_MAX_DEFAULT,
            connection_outbound_bytes_max: limits::CONNECTION_OUTBOUND_BYTES_MAX_DEFAULT,
            outbound_bytes_max: limits::OUTBOUND_BYTES_MAX_DEFAULT,
            metrics_listen: None,
            producer_id_expiration_ms: 24 * 3600 * 1000,
            disk_free_bytes_min: limits::DISK_FREE_BYTES_MIN_DEFAULT,
            log_cleaner_enabled: true,
            log_cleaner_backoff_ms: limits::LOG_CLEANER_BACKOFF_MS_DEFAULT,
            log_cleaner_dedupe_buffer_bytes: limits::LOG_CLEANER_DEDUPE_BUFFER_BYTES_DEFAULT,
            log_cleaner_io_bytes_per_sec: limits::LOG_CLEANER_IO_BYTES_PER_SEC_DEFAULT,
            log: LogDefaults::default(),
            console_listen: None,
        }
    }
}

impl BrokerConfig {
    /// How the threads of bulk work are lowered.
    pub fn bulk_priority(&self) -> crate::io::priority::BulkPriority {
        crate::io::priority::BulkPriority {
            nice: self.read_threads_nice,
            io_idle: self.bulk_io_idle,
        }
    }

    /// The bulk budget's settings.
    pub fn bulk_budget(&self) -> crate::io::bulk_budget::BudgetConfig {
        crate::io::bulk_budget::BudgetConfig {
            min_bytes_per_sec: self.bulk_bytes_per_sec_min as f64,
            max_bytes_per_sec: self.bulk_bytes_per_sec_max as f64,
            read_max_bytes_per_sec: self.bulk_read_bytes_per_sec_max as f64,
            target: std::time::Duration::from_millis(self.light_latency_target_ms),
            interval: std::time::Duration::from_millis(limits::BULK_BUDGET_INTERVAL_MS),
            read_sync_wait: std::time::Duration::from_micros(self.bulk_read_sync_wait_us),
        }
    }

    /// The listeners these settings ask for, in order (`crate::listeners`); the first
    /// is the one the broker's start-up line names.
    pub fn listener_specs(&self) -> Result<Vec<ListenerSpec>, String> {
        listeners::specs(ListenerSettings {
            listeners: &self.listeners,
            advertised_listeners: &self.advertised_listeners,
            listener_security_protocol_map: &self.listener_security_protocol_map,
            listen: &self.listen,
            advertised_listener: self.advertised_listener.as_deref(),
        })
    }

    /// Checks relations between settings that serde cannot.
    pub fn validate(&self) -> Result<(), String> {
        let listeners = self.listener_specs()?;
        let ssl = listeners.iter().any(|l| l.protocol.tls());
        if ssl && (self.ssl_certificate_file.is_none() || self.ssl_key_file.is_none()) {
            return Err("an SSL listener needs ssl_certificate_file and ssl_key_file".to_string());
        }
        if self.default_partitions < 1 || self.default_partitions > limits::PARTITIONS_PER_TOPIC_MAX
        {
            return Err(format!(
                "default_partitions {} out of range",
                self.default_partitions
            ));
        }
        if self.read_threads == 0 || self.read_threads > limits::READ_THREADS_MAX {
            return Err(format!(
                "read_threads must be 1..={}, not {}",
                limits::READ_THREADS_MAX,
                self.read_threads
            ));
        }
        if self.bulk_send_threads > limits::BULK_SEND_THREADS_MAX {
            return Err(format!(
                "bulk_send_threads must be 0..={}, not {}",
                limits::BULK_SEND_THREADS_MAX,
                self.bulk_send_threads
            ));
        }
        if !(0..=19).contains(&self.read_threads_nice) {
            return Err(format!(
                "read_threads_nice must be 0..=19, not {}",
                self.read_threads_nice
            ));
        }
        let max = self
            .bulk_bytes_per_sec_max
            .min(self.bulk_read_bytes_per_sec_max);
        if self.bulk_bytes_per_sec_min == 0 || self.bulk_bytes_per_sec_min > max {
            return Err(format!(
                "need 0 < bulk_bytes_per_sec_min ({}) <= bulk_bytes_per_sec_max ({}) and \
                 bulk_read_bytes_per_sec_max ({})",
                self.bulk_bytes_per_sec_min,
                self.bulk_bytes_per_sec_max,
                self.bulk_read_bytes_per_sec_max
            ));
        }
        if self.log_cleaner_dedupe_buffer_bytes < 1024 * 1024 {
            return Err("log_cleaner_dedupe_buffer_bytes must be at least 1 MiB".into());
        }
        if self.log_cleaner_io_bytes_per_sec == 0 || self.log_cleaner_backoff_ms == 0 {
            return Err(
                "log_cleaner_io_bytes_per_sec and log_cleaner_backoff_ms must be above 0".into(),
            );
        }
        if self.partition_unsynced_bytes_max == 0 {
            return Err("partition_unsynced_bytes_max must be above 0".into());
        }
        if self.connection_outbound_bytes_max < limits::OUTBOUND_BYTES_MIN
            || self.outbound_bytes_max < self.connection_outbound_bytes_max
            || self.outbound_bytes_max > u32::MAX as usize
        {
            return Err(format!(
                "need {} <= connection_outbound_bytes_max <= outbound_bytes_max <= {}",
                limits::OUTBOUND_BYTES_MIN,
                u32::MAX
            ));
        }
        if self.request_bytes_in_flight_max < self.frame_bytes_max
            || self.request_bytes_in_flight_max > u32::MAX as usize
        {
            return Err(format!(
                "request_bytes_in_flight_max must be at least frame_bytes_max and at most {}",
                u32::MAX
            ));
        }
        if self.request_body_timeout_ms == 0 {
            return Err("request_body_timeout_ms must be positive".into());
        }
        TopicConfig::from_overrides(&BTreeMap::new(), &self.log)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// Checks a pair of bounds on a group's own setting (Kafka's `group.*.min/max.*`):
/// `0 < min <= max`, and `max` within an int.
pub fn check_bounds(name: &str, min: i64, max: i64) -> Result<(), String> {
    if min <= 0 || min > max || max > i64::from(i32::MAX) {
        return Err(format!(
            "{name}: need 0 < min ({min}) <= max ({max}) <= {}",
            i32::MAX
        ));
    }
    Ok(())
}

/// One topic's effective settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicConfig {
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub segment_bytes: u64,
    pub segment_ms: u64,
    pub max_message_bytes: usize,
    pub index_interval_bytes: u32,
    pub cleanup_policy: CleanupPolicy,
    pub min_cleanable_dirty_ratio: f64,
    pub min_compaction_lag_ms: u64,
    pub max_compaction_lag_ms: u64,
    pub delete_retention_ms: u64,
    /// Replicas that must be in sync for an acks=all produce (`min.insync.replicas`); a
    /// partition on a broker that runs alone has one.
    pub min_insync_replicas: usize,
    /// Sealed segments are copied to the remote tier (`remote.storage.enable`,
    /// `docs/tiered-storage.md`); never on a compacted topic, as in Kafka.
    pub remote_storage_enable: bool,
    /// How long and how much the local disk keeps of a tiered topic
    /// (`local.retention.ms`, `local.retention.bytes`); -2 means the topic's
    /// `retention.ms` / `retention.bytes`, Kafka's default.
    pub local_retention_ms: i64,
    pub local_retention_bytes: i64,
    /// Settings given explicitly for this topic, by Kafka name, as given.
    pub overrides: BTreeMap<String, String>,
}

/// Topic settings this broker knows, with what each accepts. Settings that Kafka has
/// but that have one fixed meaning here (one replica, the producer's compression)
/// accept only that value, so an admin tool setting them learns the truth from the
/// error.
pub const TOPIC_CONFIG_NAMES: &[&str] = &[
    "cleanup.policy",
    "compression.type",
    "delete.retention.ms",
    "index.interval.bytes",
    "local.retention.bytes",
    "local.retention.ms",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "min.insync.replicas",
    "remote.storage.enable",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.ms",
];

fn invalid(name: &str, value: &str, reason: impl Into<String>) -> BrokerError {
    BrokerError::InvalidConfig {
        name: name.into(),
        value: value.into(),
        reason: reason.into(),
    }
}

fn parse_num<T: FromStr + PartialOrd + Copy + std::fmt::Display>(
    name: &str,
    value: &str,
    min: T,
    max: T,
) -> Result<T, BrokerError> {
    let n: T = value
        .trim()
        .parse()
        .map_err(|_| invalid(name, value, "not a number"))?;
    // Written so that a NaN, which compares false with everything, is out of range.
    if !(n >= min && n <= max) {
        return Err(invalid(name, value, format!("must be in [{min}, {max}]")));
    }
    Ok(n)
}

fn require(name: &str, value: &str, allowed: &[&str]) -> Result<(), BrokerError> {
    if allowed.contains(&value.trim()) {
        Ok(())
    } else {
        Err(invalid(
            name,
            value,
            format!("supported values: {}", allowed.join(", ")),
        ))
    }
}

impl TopicConfig {
    pub fn from_overrides(
        overrides: &BTreeMap<String, String>,
        defaults: &LogDefaults,
    ) -> Result<TopicConfig, BrokerError> {
        let mut config = TopicConfig {
            retention_ms: defaults.retention_ms,
            retention_bytes: defaults.retention_bytes,
            segment_bytes: defaults.segment_bytes,
            segment_ms: defaults.segment_ms,
            max_message_bytes: defaults.max_message_bytes,
            index_interval_bytes: defaults.index_interval_bytes,
            cleanup_policy: defaults.cleanup_policy,
            min_cleanable_dirty_ratio: defaults.min_cleanable_dirty_ratio,
            min_compaction_lag_ms: defaults.min_compaction_lag_ms,
            max_compaction_lag_ms: defaults.max_compaction_lag_ms,
            delete_retention_ms: defaults.delete_retention_ms,
            min_insync_replicas: 1,
            remote_storage_enable: false,
            local_retention_ms: -2,
            local_retention_bytes: -2,
            overrides: overrides.clone(),
        };
        for (name, value) in overrides {
            config.apply(name, value)?;
        }
        if config.remote_storage_enable && config.cleanup_policy.compact {
            return Err(invalid(
                "remote.storage.enable",
                "true",
                "remote storage is not supported for compacted topics",
            ));
        }
        if config.min_compaction_lag_ms > config.max_compaction_lag_ms {
            return Err(invalid(
                "min.compaction.lag.ms",
                &config.min_compaction_lag_ms.to_string(),
                "must not exceed max.compaction.lag.ms",
            ));
        }
        Ok(config)
    }

    fn apply(&mut self, name: &str, value: &str) -> Result<(), BrokerError> {
        let segment_bytes_max = i32::MAX as u64;
        match name {
            "retention.ms" => self.retention_ms = parse_num(name, value, -1, i64::MAX)?,
            "retention.bytes" => self.retention_bytes = parse_num(name, value, -1, i64::MAX)?,
            "segment.bytes" => self.segment_bytes = parse_num(name, value, 14, segment_bytes_max)?,
            "segment.ms" => self.segment_ms = parse_num(name, value, 1, i64::MAX as u64)?,
            "max.message.bytes" => {
                self.max_message_bytes = parse_num(name, value, 0, limits::FRAME_BYTES_MAX_DEFAULT)?
            }
            "index.interval.bytes" => {
                self.index_interval_bytes = parse_num(name, value, 0, i32::MAX as u32)?
            }
            "cleanup.policy" => {
                self.cleanup_policy = value.parse().map_err(|e| invalid(name, value, e))?
            }
            "min.cleanable.dirty.ratio" => {
                self.min_cleanable_dirty_ratio = parse_num(name, value, 0.0, 1.0)?
            }
            "min.compaction.lag.ms" => {
                self.min_compaction_lag_ms = parse_num(name, value, 0, i64::MAX as u64)?
            }
            "max.compaction.lag.ms" => {
                self.max_compaction_lag_ms = parse_num(name, value, 1, i64::MAX as u64)?
            }
            "delete.retention.ms" => {
                self.delete_retention_ms = parse_num(name, value, 0, i64::MAX as u64)?
            }
            "compression.type" => require(name, value, &["producer"])?,
            "message.timestamp.type" => require(name, value, &["CreateTime"])?,
            "min.insync.replicas" => {
                self.min_insync_replicas = parse_num(name, value, 1, i32::MAX as usize)?
            }
            "remote.storage.enable" => {
                self.remote_storage_enable = match value.trim() {
                    "true" => true,
                    "false" => false,
                    _ => return Err(invalid(name, value, "true or false")),
                }
            }
            "local.retention.ms" => self.local_retention_ms = parse_num(name, value, -2, i64::MAX)?,
            "local.retention.bytes" => {
                self.local_retention_bytes = parse_num(name, value, -2, i64::MAX)?
            }
            _ => return Err(invalid(name, value, "unknown topic config")),
        }
        Ok(())
    }

    /// A topic being created or altered may be tiered only on a broker with a remote
    /// tier (a topic tiered before the tier was switched off still opens, and is not
    /// uploaded).
    pub fn check_remote_storage(&self, defaults: &LogDefaults) -> Result<(), BrokerError> {
        if self.remote_storage_enable && !defaults.remote_storage_available {
            return Err(invalid(
                "remote.storage.enable",
                "true",
                "this broker has no remote tier (remote_storage_endpoint is not set)",
            ));
        }
        Ok(())
    }

    /// A tiered topic stays tiered: its oldest segments may live only in the remote
    /// tier, and an untiered topic would neither read nor delete them (Kafka refuses it
    /// too). Deleting the topic deletes them.
    pub fn check_still_tiered(&self, before: &TopicConfig) -> Result<(), BrokerError> {
        if before.remote_storage_enable && !self.remote_storage_enable {
            return Err(invalid(
                "remote.storage.enable",
                "false",
                "remote storage cannot be turned off on a tiered topic: its oldest segments \
                 may live only in the remote tier",
            ));
        }
        Ok(())
    }

    /// The log's view of these settings. Retention deletes old segments only when the
    /// policy includes `delete`.
    pub fn log_config(&self) -> LogConfig {
        let delete = self.cleanup_policy.delete;
        LogConfig {
            segment_bytes_max: self.segment_bytes,
            segment_ms_max: self.segment_ms,
            retention_bytes_max: u64::try_from(self.retention_bytes).ok().filter(|_| delete),
            retention_ms_max: u64::try_from(self.retention_ms).ok().filter(|_| delete),
            index_interval_bytes: self.index_interval_bytes,
        }
    }

    /// Every known setting with its effective value, and whether it was set explicitly.
    pub fn entries(&self) -> Vec<(&'static str, String, bool)> {
        TOPIC_CONFIG_NAMES
            .iter()
            .map(|&name| {
                let value = match name {
                    "cleanup.policy" => self.cleanup_policy.to_string(),
                    "delete.retention.ms" => self.delete_retention_ms.to_string(),
                    "max.compaction.lag.ms" => self.max_compaction_lag_ms.to_string(),
                    "min.cleanable.dirty.ratio" => self.min_cleanable_dirty_ratio.to_string(),
                    "min.compaction.lag.ms" => self.min_compaction_lag_ms.to_string(),
                    "compression.type" => "producer".to_string(),
                    "index.interval.bytes" => self.index_interval_bytes.to_string(),
                    "max.message.bytes" => self.max_message_bytes.to_string(),
                    "message.timestamp.type" => "CreateTime".to_string(),
                    "min.insync.replicas" => self.min_insync_replicas.to_string(),
                    "remote.storage.enable" => self.remote_storage_enable.to_string(),
                    "local.retention.ms" => self.local_retention_ms.to_string(),
                    "local.retention.bytes" => self.local_retention_bytes.to_string(),
                    "retention.bytes" => self.retention_bytes.to_string(),
                    "retention.ms" => self.retention_ms.to_string(),
                    "segment.bytes" => self.segment_bytes.to_string(),
                    "segment.ms" => self.segment_ms.to_string(),
                    _ => unreachable!("every name in TOPIC_CONFIG_NAMES has a value"),
                };
                (name, value, self.overrides.contains_key(name))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_policy_parses_the_documented_forms() {
        assert_eq!("sync".parse::<FlushPolicy>().unwrap(), FlushPolicy::Sync);
        assert_eq!("none".parse::<FlushPolicy>().unwrap(), FlushPolicy::None);
        assert_eq!(
            "interval:250".parse::<FlushPolicy>().unwrap(),
            FlushPolicy::Interval(Duration::from_millis(250))
        );
        assert!("interval:0".parse::<FlushPolicy>().is_err());
        assert!("always".parse::<FlushPolicy>().is_err());
    }

    #[test]
    fn sync_scope_parses_its_three_values() {
        for scope in [SyncScope::Partition, SyncScope::Broker, SyncScope::Syncfs] {
            assert_eq!(scope.to_string().parse::<SyncScope>().unwrap(), scope);
        }
        assert!("topic".parse::<SyncScope>().is_err());
        let config: BrokerConfig = toml::from_str("sync_scope = \"broker\"\n").unwrap();
        assert_eq!(config.sync_scope, SyncScope::Broker);
        assert_eq!(BrokerConfig::default().sync_scope, SyncScope::Partition);
    }

    #[test]
    fn topic_overrides_are_checked() {
        let defaults = LogDefaults::default();
        let mut overrides = BTreeMap::new();
        overrides.insert("retention.ms".to_string(), "60000".to_string());
        let config = TopicConfig::from_overrides(&overrides, &defaults).unwrap();
        assert_eq!(config.retention_ms, 60_000);
        assert_eq!(config.log_config().retention_ms_max, Some(60_000));
        overrides.insert("cleanup.policy".to_string(), "compact".to_string());
        let compacted = TopicConfig::from_overrides(&overrides, &defaults).unwrap();
        assert!(compacted.cleanup_policy.compact && !compacted.cleanup_policy.delete);
        assert_eq!(compacted.log_config().retention_ms_max, None);
        overrides.insert("cleanup.policy".to_string(), "shrink".to_string());
        assert!(matches!(
            TopicConfig::from_overrides(&overrides, &defaults),
            Err(BrokerError::InvalidConfig { .. })
        ));
        let mut unknown = BTreeMap::new();
        unknown.insert("no.such.setting".to_string(), "1".to_string());
        assert!(TopicConfig::from_overrides(&unknown, &defaults).is_err());
    }

    #[test]
    fn a_tiered_topic_stays_tiered() {
        let defaults = LogDefaults::default();
        let config = |pairs: &[(&str, &str)]| {
            let overrides = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>();
            TopicConfig::from_overrides(&overrides, &defaults).unwrap()
        };
        let tiered = config(&[("remote.storage.enable", "true")]);
        let plain = config(&[]);
        assert!(plain.check_still_tiered(&tiered).is_err());
        assert!(config(&[("remote.storage.enable", "false")])
            .check_still_tiered(&tiered)
            .is_err());
        assert!(tiered.check_still_tiered(&tiered).is_ok());
        assert!(tiered.check_still_tiered(&plain).is_ok());
        assert!(plain.check_still_tiered(&plain).is_ok());
    }

    #[test]
    fn cleanup_policy_takes_kafka_forms() {
        let parse = |s: &str| s.parse::<CleanupPolicy>();
        assert_eq!(parse("delete").unwrap(), CleanupPolicy::DELETE);
        let both = CleanupPolicy {
            delete: true,
            compact: true,
        };
        assert_eq!(parse("compact,delete").unwrap(), both);
        assert_eq!(parse("delete, compact").unwrap(), both);
        assert_eq!(both.to_string(), "compact,delete");
        assert_eq!(parse("compact").unwrap().to_string(), "compact");
        assert!(parse("").is_err());
        assert!(parse("compact,").is_err());
        let defaults = LogDefaults::default();
        let mut overrides = BTreeMap::new();
        for bad in ["1.5", "NaN", "-0.1"] {
            overrides.insert("min.cleanable.dirty.ratio".to_string(), bad.to_string());
            assert!(TopicConfig::from_overrides(&overrides, &defaults).is_err());
        }
        overrides.insert("min.cleanable.dirty.ratio".to_string(), "0.1".to_string());
        overrides.insert("min.compaction.lag.ms".to_string(), "10".to_string());
        overrides.insert("max.compaction.lag.ms".to_string(), "5".to_string());
        assert!(TopicConfig::from_overrides(&overrides, &defaults).is_err());
        overrides.insert("max.compaction.lag.ms".to_string(), "50".to_string());
        let config = TopicConfig::from_overrides(&overrides, &defaults).unwrap();
        assert_eq!(config.min_cleanable_dirty_ratio, 0.1);
        assert_eq!(config.delete_retention_ms, 86_400_000);
        let config: BrokerConfig =
            toml::from_str("[log]\ncleanup_policy = \"compact,delete\"\n").unwrap();
        assert_eq!(config.log.cleanup_policy, both);
    }

    #[test]
    fn config_file_overrides_defaults() {
        let config: BrokerConfig = toml::from_str(
            "listen = \"0.0.0.0:19092\"\nflush = \"interval:5\"\n[log]\nsegment_bytes = 1048576\n",
        )
        .unwrap();
        assert_eq!(config.listen, "0.0.0.0:19092");
        assert_eq!(
            config.flush,
            FlushPolicy::Interval(Duration::from_millis(5))
        );
        assert_eq!(config.log.segment_bytes, 1 << 20);
        assert_eq!(config.log.retention_ms, LogDefaults::default().retention_ms);
        // An unknown key is refused over every section at once, by
        // `headway_server::config`; `[log]` is this section's own table.
        assert!(toml::from_str::<BrokerConfig>("[log]\nno_such_key = 1").is_err());
    }
}
