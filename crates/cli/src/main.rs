//! The `headway` binary.
//!
//! `headway serve` starts the broker. Settings come from, in increasing precedence:
//! built-in defaults, a TOML file (`--config`), environment variables
//! (`HEADWAY_<NAME>`), and flags. `headway produce` and `headway consume` are clients
//! for any Kafka-compatible broker, and `headway topic`, `headway group` and
//! `headway cluster` manage one (`output.rs` holds what those share), as `headway user`
//! and `headway acl` manage its security; `headway bench` runs the lab's scenarios
//! (`crates/bench`). Every failure ends the command with one `error: ...` line on
//! stderr and exit status 1.

mod acl;
mod cleaner;
mod cluster;
mod consume;
mod group;
mod output;
mod produce;
mod progress;
mod runtime;
mod security_args;
mod signals;
mod topic;
mod user;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use headway_base::limits;
use headway_broker::{Broker, FlushPolicy, SyncScope};
use headway_server::{Config, Server};
use signals::Signals;
use std::io::Write;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "headway",
    version,
    about = "A durable, Kafka-compatible streaming broker"
)]
struct Cli {
    /// How log lines on stderr are written: `text`, or `json` (one JSON object a line,
    /// for log collectors).
    #[arg(long, global = true, value_enum, env = "HEADWAY_LOG_FORMAT", default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Where a share group starts in a partition it has no state for.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ShareAutoOffsetReset {
    Latest,
    Earliest,
}

impl ShareAutoOffsetReset {
    fn name(self) -> &'static str {
        match self {
            ShareAutoOffsetReset::Latest => "latest",
            ShareAutoOffsetReset::Earliest => "earliest",
        }
    }
}

/// Which online conversions between classic and consumer groups are served.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum MigrationPolicy {
    Bidirectional,
    Upgrade,
    Downgrade,
    Disabled,
}

impl MigrationPolicy {
    fn name(self) -> &'static str {
        match self {
            MigrationPolicy::Bidirectional => "bidirectional",
            MigrationPolicy::Upgrade => "upgrade",
            MigrationPolicy::Downgrade => "downgrade",
            MigrationPolicy::Disabled => "disabled",
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Start the broker (defaults: data in ./headway-data, listening on 127.0.0.1:9092).
    // Boxed: its many settings would make every command as large.
    Serve(Box<ServeArgs>),
    /// Write records to a topic: stdin lines, or generated ones with --count.
    Produce(produce::ProduceArgs),
    /// Print records of a topic.
    Consume(consume::ConsumeArgs),
    /// Create, list, describe, alter and delete topics.
    Topic(topic::TopicArgs),
    /// Inspect, delete and reset consumer groups.
    Group(group::GroupArgs),
    /// The cluster's brokers and their settings.
    Cluster(cluster::ClusterArgs),
    /// What a headway broker's log cleaner did to each compacted partition (from its
    /// /metrics).
    Cleaner(cleaner::CleanerArgs),
    /// Run a benchmark scenario against headway or any Kafka-compatible broker.
    Bench(headway_bench::BenchArgs),
    /// Add, list and delete SCRAM users, through a running broker (--bootstrap) or on a
    /// stopped broker's data directory.
    User(user::UserArgs),
    /// Add, list and delete ACLs of a running broker.
    Acl(acl::AclArgs),
}

#[derive(Args)]
struct ServeArgs {
    /// TOML file with broker settings; flags and environment variables override it.
    #[arg(long, env = "HEADWAY_CONFIG")]
    config: Option<PathBuf>,
    /// Directory holding topics and their logs [default: ./headway-data].
    #[arg(long, env = "HEADWAY_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Address to listen on, HOST:PORT; port 0 picks a free port [default: 127.0.0.1:9092].
    #[arg(long, env = "HEADWAY_LISTEN")]
    listen: Option<String>,
    /// Address clients are told to connect to [default: the bound address].
    #[arg(long, env = "HEADWAY_ADVERTISED_LISTENER")]
    advertised_listener: Option<String>,
    /// Listeners in Kafka's form, NAME://HOST:PORT,... (NAME: PLAINTEXT, SSL, or a name
    /// mapped by --listener-security-protocol-map); replaces --listen. See docs/security.md.
    #[arg(long, env = "HEADWAY_LISTENERS", value_delimiter = ',')]
    listeners: Option<Vec<String>>,
    /// NAME://HOST:PORT,... the address each listener's clients are told.
    #[arg(long, env = "HEADWAY_ADVERTISED_LISTENERS", value_delimiter = ',')]
    advertised_listeners: Option<Vec<String>>,
    /// NAME:PROTOCOL,... for listeners not named after their security protocol.
    #[arg(
        long,
        env = "HEADWAY_LISTENER_SECURITY_PROTOCOL_MAP",
        value_delimiter = ','
    )]
    listener_security_protocol_map: Option<Vec<String>>,
    /// PEM certificate chain of SSL listeners.
    #[arg(long, env = "HEADWAY_SSL_CERTIFICATE_FILE")]
    ssl_certificate_file: Option<PathBuf>,
    /// PEM private key of SSL listeners.
    #[arg(long, env = "HEADWAY_SSL_KEY_FILE")]
    ssl_key_file: Option<PathBuf>,
    /// PEM CA certificates: SSL listeners then require client certificates signed by them.
    #[arg(long, env = "HEADWAY_SSL_CLIENT_CA_FILE")]
    ssl_client_ca_file: Option<PathBuf>,
    /// This broker's node id [default: 1]; in a cluster, its id among the controller voters.
    #[arg(long, env = "HEADWAY_NODE_ID")]
    node_id: Option<i32>,
    /// The cluster's controller voters, ID@HOST:PORT,... (Kafka's controller.quorum.voters;
    /// each port is that broker's controller listener); see docs/cluster.md
    /// [default: none, the broker runs alone].
    #[arg(long, env = "HEADWAY_CONTROLLER_QUORUM_VOTERS")]
    controller_quorum_voters: Option<String>,
    /// Replication factor of topics created with -1, in a cluster [default: the smaller of
    /// 3 and the registered brokers].
    #[arg(long, env = "HEADWAY_DEFAULT_REPLICATION_FACTOR")]
    default_replication_factor: Option<i16>,
    /// Partitions of `__consumer_offsets` in a cluster, over which the group
    /// coordinators spread [default: 12].
    #[arg(long, env = "HEADWAY_OFFSETS_TOPIC_NUM_PARTITIONS")]
    offsets_topic_num_partitions: Option<i32>,
    /// Partitions of `__transaction_state` in a cluster, over which the transaction
    /// coordinators spread [default: 12].
    #[arg(long, env = "HEADWAY_TRANSACTION_STATE_LOG_NUM_PARTITIONS")]
    transaction_state_log_num_partitions: Option<i32>,
    /// Partitions of `__share_group_state` in a cluster, over which the share-partition
    /// state stores spread [default: 12].
    #[arg(long, env = "HEADWAY_SHARE_COORDINATOR_STATE_TOPIC_NUM_PARTITIONS")]
    share_coordinator_state_topic_num_partitions: Option<i32>,
    /// The remote tier's S3-compatible endpoint, http:// or https:// (empty: no
    /// remote tier; `docs/tiered-storage.md`).
    #[arg(long, env = "HEADWAY_REMOTE_STORAGE_ENDPOINT")]
    remote_storage_endpoint: Option<String>,
    /// The remote tier's bucket (it must exist).
    #[arg(long, env = "HEADWAY_REMOTE_STORAGE_BUCKET")]
    remote_storage_bucket: Option<String>,
    /// The remote tier's region [default: us-east-1].
    #[arg(long, env = "HEADWAY_REMOTE_STORAGE_REGION")]
    remote_storage_region: Option<String>,
    /// The remote tier's access key id.
    #[arg(long, env = "HEADWAY_REMOTE_STORAGE_ACCESS_KEY_ID")]
    remote_storage_access_key_id: Option<String>,
    /// The remote tier's secret access key (prefer the environment variable or the
    /// config file to a flag, which other users can read in the process list).
    #[arg(
        long,
        env = "HEADWAY_REMOTE_STORAGE_SECRET_ACCESS_KEY",
        hide_env_values = true
    )]
    remote_storage_secret_access_key: Option<String>,
    /// What every object name of the remote tier starts with [default: headway].
    #[arg(long, env = "HEADWAY_REMOTE_STORAGE_PREFIX")]
    remote_storage_prefix: Option<String>,
    /// How often the remote tier looks for segments to upload [default: 1000].
    #[arg(long, env = "HEADWAY_REMOTE_STORAGE_UPLOAD_INTERVAL_MS")]
    remote_storage_upload_interval_ms: Option<u64>,
    /// Create unknown topics on Metadata requests [default: true].
    #[arg(long, env = "HEADWAY_AUTO_CREATE_TOPICS")]
    auto_create_topics: Option<bool>,
    /// Partitions of auto-created topics and of CreateTopics with -1 [default: 1].
    #[arg(long, env = "HEADWAY_DEFAULT_PARTITIONS")]
    default_partitions: Option<i32>,
    /// When acks=1/all produces are acknowledged: sync (after fsync, group commit),
    /// interval:<ms> (after the write; fsync every interval) or none [default: sync].
    #[arg(long, env = "HEADWAY_FLUSH")]
    flush: Option<FlushPolicy>,
    /// With --flush sync: partition (each partition syncs on its own), broker (one
    /// group commit for all partitions) or syncfs (one syncfs of the data directory's
    /// filesystem per round); see docs/sync.md [default: partition].
    #[arg(long, env = "HEADWAY_SYNC_SCOPE")]
    sync_scope: Option<SyncScope>,
    /// How often retention deletes old segments, in ms [default: 300000].
    #[arg(long, env = "HEADWAY_RETENTION_CHECK_INTERVAL_MS")]
    retention_check_interval_ms: Option<u64>,
    /// Largest request frame accepted, in bytes [default: 104857600].
    #[arg(long, env = "HEADWAY_FRAME_BYTES_MAX")]
    frame_bytes_max: Option<usize>,
    /// Default segment.bytes of topics [default: 1073741824].
    #[arg(long, env = "HEADWAY_SEGMENT_BYTES")]
    segment_bytes: Option<u64>,
    /// Default retention.ms of topics; -1 keeps data forever [default: 604800000].
    #[arg(long, env = "HEADWAY_RETENTION_MS", allow_hyphen_values = true)]
    retention_ms: Option<i64>,
    /// Default retention.bytes of topics; -1 means no limit [default: -1].
    #[arg(long, env = "HEADWAY_RETENTION_BYTES", allow_hyphen_values = true)]
    retention_bytes: Option<i64>,
    /// How long an empty group's first rebalance waits for more members, in ms [default: 3000].
    #[arg(long, env = "HEADWAY_GROUP_INITIAL_REBALANCE_DELAY_MS")]
    group_initial_rebalance_delay_ms: Option<i64>,
    /// Online conversion of groups between the classic and the consumer protocol: bidirectional, upgrade, downgrade or disabled [default: bidirectional].
    #[arg(long, env = "HEADWAY_GROUP_CONSUMER_MIGRATION_POLICY")]
    group_consumer_migration_policy: Option<MigrationPolicy>,
    /// How long a share consumer holds acquired records before they go back to the group, in ms [default: 30000].
    #[arg(long, env = "HEADWAY_SHARE_RECORD_LOCK_DURATION_MS")]
    share_record_lock_duration_ms: Option<i64>,
    /// Deliveries of a record to share consumers before it is archived [default: 5].
    #[arg(long, env = "HEADWAY_SHARE_DELIVERY_COUNT_LIMIT")]
    share_delivery_count_limit: Option<u16>,
    /// Where a share group starts in a partition: latest or earliest [default: latest].
    #[arg(long, env = "HEADWAY_SHARE_AUTO_OFFSET_RESET")]
    share_auto_offset_reset: Option<ShareAutoOffsetReset>,
    /// Largest transaction.timeout.ms a transactional producer may ask for, in ms [default: 900000].
    #[arg(long, env = "HEADWAY_TRANSACTION_MAX_TIMEOUT_MS")]
    transaction_max_timeout_ms: Option<i32>,
    /// A transactional id idle this long (no open transaction) is removed, in ms [default: 604800000].
    #[arg(long, env = "HEADWAY_TRANSACTIONAL_ID_EXPIRATION_MS")]
    transactional_id_expiration_ms: Option<i64>,
    /// How often transactions are checked against their timeout, in ms [default: 10000].
    #[arg(long, env = "HEADWAY_TRANSACTION_ABORT_TIMED_OUT_CHECK_INTERVAL_MS")]
    transaction_abort_timed_out_check_interval_ms: Option<u64>,
    /// Default max.message.bytes of topics [default: 1048588].
    #[arg(long, env = "HEADWAY_MAX_MESSAGE_BYTES")]
    max_message_bytes: Option<usize>,
    /// Bulk threads: fetch reads that wait for the disk, appends of produce requests over
    /// 64 KiB [default: 8].
    #[arg(long, env = "HEADWAY_READ_THREADS")]
    read_threads: Option<usize>,
    /// Serve reads of cached data on the connection's thread, sending only reads that
    /// need the disk to the read threads [default: true].
    #[arg(long, env = "HEADWAY_READ_CACHE_FIRST")]
    read_cache_first: Option<bool>,
    /// A fetch less than this many bytes behind the log's end reads the tail (from the
    /// page cache when there); further behind it goes to the read threads [default: 8388608].
    #[arg(long, env = "HEADWAY_READ_TAIL_BYTES")]
    read_tail_bytes: Option<u64>,
    /// Nice value (0-19) of the read threads, so catching up uses spare CPU [default: 10].
    #[arg(long, env = "HEADWAY_READ_THREADS_NICE")]
    read_threads_nice: Option<i32>,
    /// Threads that write answers of 256 KiB and more to plain TCP sockets in the
    /// SCHED_IDLE CPU class; 0 writes them on the runtime's threads [default: 0].
    #[arg(long, env = "HEADWAY_BULK_SEND_THREADS")]
    bulk_send_threads: Option<usize>,
    /// Submit bulk work's disk I/O (catch-up reads, the log cleaner, syncs over 256 KiB)
    /// in the idle I/O class [default: false].
    #[arg(long, env = "HEADWAY_BULK_IO_IDLE")]
    bulk_io_idle: Option<bool>,
    /// Highest rate of bulk writing (produces over 64 KiB, the log cleaner), bytes/s; it
    /// adapts down to --bulk-bytes-per-sec-min while light work is slower than
    /// --light-latency-target-ms [default: 1073741824].
    #[arg(long, env = "HEADWAY_BULK_BYTES_PER_SEC_MAX")]
    bulk_bytes_per_sec_max: Option<u64>,
    /// Highest rate of bulk reading (consumers catching up on data not in the page cache),
    /// bytes/s; it adapts the same way [default: 268435456].
    #[arg(long, env = "HEADWAY_BULK_READ_BYTES_PER_SEC_MAX")]
    bulk_read_bytes_per_sec_max: Option<u64>,
    /// Lowest rate of bulk work, bytes/s [default: 16777216].
    #[arg(long, env = "HEADWAY_BULK_BYTES_PER_SEC_MIN")]
    bulk_bytes_per_sec_min: Option<u64>,
    /// Small syncs and small produces' waits for durability slower than this cut the bulk
    /// rate, in ms [default: 3].
    #[arg(long, env = "HEADWAY_LIGHT_LATENCY_TARGET_MS")]
    light_latency_target_ms: Option<u64>,
    /// How long a catch-up read waits, before each disk read of at most 256 KiB, for small
    /// syncs in progress to end, in µs; 0: never [default: 0].
    #[arg(long, env = "HEADWAY_BULK_READ_SYNC_WAIT_US")]
    bulk_read_sync_wait_us: Option<u64>,
    /// With --flush sync: bytes a partition may have appended and not yet handed to a
    /// sync; a producer past it waits for the sync in progress [default: 8388608].
    #[arg(long, env = "HEADWAY_PARTITION_UNSYNCED_BYTES_MAX")]
    partition_unsynced_bytes_max: Option<u64>,
    /// Bytes of unwritten fetch responses one connection may hold [default: 16777216].
    #[arg(long, env = "HEADWAY_CONNECTION_OUTBOUND_BYTES_MAX")]
    connection_outbound_bytes_max: Option<usize>,
    /// Bytes of unwritten fetch responses all connections may hold [default: 268435456].
    #[arg(long, env = "HEADWAY_OUTBOUND_BYTES_MAX")]
    outbound_bytes_max: Option<usize>,
    /// Run the log cleaner of compacted topics [default: true].
    #[arg(long, env = "HEADWAY_LOG_CLEANER_ENABLED")]
    log_cleaner_enabled: Option<bool>,
    /// How long the log cleaner rests when nothing needs cleaning, in ms [default: 15000].
    #[arg(long, env = "HEADWAY_LOG_CLEANER_BACKOFF_MS")]
    log_cleaner_backoff_ms: Option<u64>,
    /// Memory for a cleaning pass's key map, in bytes [default: 33554432].
    #[arg(long, env = "HEADWAY_LOG_CLEANER_DEDUPE_BUFFER_BYTES")]
    log_cleaner_dedupe_buffer_bytes: Option<usize>,
    /// A fixed cap on the log cleaner's I/O, bytes per second, below the adaptive bulk
    /// budget [default: 67108864].
    #[arg(long, env = "HEADWAY_LOG_CLEANER_IO_BYTES_PER_SEC")]
    log_cleaner_io_bytes_per_sec: Option<u64>,
    /// Serve Prometheus metrics at http://ADDR/metrics [default: off].
    #[arg(long, env = "HEADWAY_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// Refuse produces (retriable KAFKA_STORAGE_ERROR) while the data directory's
    /// filesystem has fewer free bytes than this; 0 turns it off [default: 1073741824].
    #[arg(long, env = "HEADWAY_DISK_FREE_BYTES_MIN")]
    disk_free_bytes_min: Option<u64>,
    /// Serve the read-only web console at http://ADDR/ [default: off].
    #[arg(long, env = "HEADWAY_CONSOLE_LISTEN")]
    console_listen: Option<String>,
    /// `acl` checks every request against the ACLs (Kafka's authorizer.class.name)
    /// [default: off, everything allowed].
    #[arg(long, env = "HEADWAY_AUTHORIZER")]
    authorizer: Option<String>,
    /// Principals allowed everything, e.g. User:admin;User:ops (Kafka's super.users).
    #[arg(long, env = "HEADWAY_SUPER_USERS", value_delimiter = ';')]
    super_users: Option<Vec<String>>,
    /// With the authorizer on, open a resource without any ACL to everyone
    /// [default: false].
    #[arg(long, env = "HEADWAY_ALLOW_EVERYONE_IF_NO_ACL_FOUND")]
    allow_everyone_if_no_acl_found: Option<bool>,
    /// SASL mechanisms of SASL listeners, comma-separated
    /// [default: PLAIN,SCRAM-SHA-256,SCRAM-SHA-512].
    #[arg(long, env = "HEADWAY_SASL_ENABLED_MECHANISMS", value_delimiter = ',')]
    sasl_enabled_mechanisms: Option<Vec<String>>,
    /// Delay of a failed SASL authentication's answer, doubled per recent failure of
    /// the same address [default: 100].
    #[arg(long, env = "HEADWAY_SASL_FAILED_AUTHENTICATION_DELAY_MS")]
    sasl_failed_authentication_delay_ms: Option<u64>,
    /// Longest SASL session before the client must re-authenticate on its connection
    /// (Kafka's connections.max.reauth.ms); 0: no expiry [default: 0].
    #[arg(long, env = "HEADWAY_CONNECTIONS_MAX_REAUTH_MS")]
    connections_max_reauth_ms: Option<u64>,
    /// JSON Web Key Set file OAUTHBEARER tokens are checked against; add OAUTHBEARER to
    /// --sasl-enabled-mechanisms to offer it.
    #[arg(long, env = "HEADWAY_SASL_OAUTHBEARER_JWKS_FILE")]
    sasl_oauthbearer_jwks_file: Option<PathBuf>,
    /// The issuer (`iss`) OAUTHBEARER tokens must carry [default: any].
    #[arg(long, env = "HEADWAY_SASL_OAUTHBEARER_EXPECTED_ISSUER")]
    sasl_oauthbearer_expected_issuer: Option<String>,
    /// Audiences (`aud`) of which an OAUTHBEARER token must name one, comma-separated
    /// [default: any].
    #[arg(
        long,
        env = "HEADWAY_SASL_OAUTHBEARER_EXPECTED_AUDIENCE",
        value_delimiter = ','
    )]
    sasl_oauthbearer_expected_audience: Option<Vec<String>>,
}

impl ServeArgs {
    fn into_config(self) -> anyhow::Result<Config> {
        let mut config = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading config file {}", path.display()))?;
                Config::from_toml(&text)
                    .with_context(|| format!("parsing config file {}", path.display()))?
            }
            None => Config::default(),
        };
        macro_rules! set {
            ($($field:ident).+ = $value:expr) => {
                if let Some(v) = $value {
                    config.$($field).+ = v;
                }
            };
        }
        set!(broker.data_dir = self.data_dir);
        set!(broker.listen = self.listen);
        if self.advertised_listener.is_some() {
            config.broker.advertised_listener = self.advertised_listener;
        }
        set!(broker.listeners = self.listeners);
        set!(broker.advertised_listeners = self.advertised_listeners);
        set!(broker.listener_security_protocol_map = self.listener_security_protocol_map);
        if self.ssl_certificate_file.is_some() {
            config.broker.ssl_certificate_file = self.ssl_certificate_file;
        }
        if self.ssl_key_file.is_some() {
            config.broker.ssl_key_file = self.ssl_key_file;
        }
        if self.ssl_client_ca_file.is_some() {
            config.broker.ssl_client_ca_file = self.ssl_client_ca_file;
        }
        set!(broker.node_id = self.node_id);
        set!(server.cluster.controller_quorum_voters = self.controller_quorum_voters);
        if self.default_replication_factor.is_some() {
            config.server.cluster.default_replication_factor = self.default_replication_factor;
        }
        if self.offsets_topic_num_partitions.is_some() {
            config.server.cluster.offsets_topic_num_partitions = self.offsets_topic_num_partitions;
        }
        if self.transaction_state_log_num_partitions.is_some() {
            config.server.cluster.transaction_state_log_num_partitions =
                self.transaction_state_log_num_partitions;
        }
        if self.share_coordinator_state_topic_num_partitions.is_some() {
            config
                .server
                .cluster
                .share_coordinator_state_topic_num_partitions =
                self.share_coordinator_state_topic_num_partitions;
        }
        set!(broker.auto_create_topics = self.auto_create_topics);
        set!(broker.default_partitions = self.default_partitions);
        set!(broker.flush = self.flush);
        set!(broker.sync_scope = self.sync_scope);
        set!(broker.retention_check_interval_ms = self.retention_check_interval_ms);
        set!(broker.frame_bytes_max = self.frame_bytes_max);
        set!(server.group.group_initial_rebalance_delay_ms = self.group_initial_rebalance_delay_ms);
        set!(
            server.group.group_consumer_migration_policy = self
                .group_consumer_migration_policy
                .map(|p| p.name().to_string())
        );
        set!(server.txn.transaction_max_timeout_ms = self.transaction_max_timeout_ms);
        set!(server.share.share_record_lock_duration_ms = self.share_record_lock_duration_ms);
        set!(server.share.share_delivery_count_limit = self.share_delivery_count_limit);
        set!(
            server.share.share_auto_offset_reset =
                self.share_auto_offset_reset.map(|r| r.name().to_string())
        );
        set!(server.txn.transactional_id_expiration_ms = self.transactional_id_expiration_ms);
        set!(
            server.txn.transaction_abort_timed_out_check_interval_ms =
                self.transaction_abort_timed_out_check_interval_ms
        );
        set!(broker.log.segment_bytes = self.segment_bytes);
        set!(broker.log.retention_ms = self.retention_ms);
        set!(broker.log.retention_bytes = self.retention_bytes);
        set!(broker.log.max_message_bytes = self.max_message_bytes);
        set!(broker.read_threads = self.read_threads);
        set!(broker.read_cache_first = self.read_cache_first);
        set!(broker.read_tail_bytes = self.read_tail_bytes);
        set!(broker.read_threads_nice = self.read_threads_nice);
        set!(broker.bulk_send_threads = self.bulk_send_threads);
        set!(broker.bulk_io_idle = self.bulk_io_idle);
        set!(broker.bulk_bytes_per_sec_max = self.bulk_bytes_per_sec_max);
        set!(broker.bulk_read_bytes_per_sec_max = self.bulk_read_bytes_per_sec_max);
        set!(broker.bulk_bytes_per_sec_min = self.bulk_bytes_per_sec_min);
        set!(broker.light_latency_target_ms = self.light_latency_target_ms);
        set!(broker.bulk_read_sync_wait_us = self.bulk_read_sync_wait_us);
        set!(broker.partition_unsynced_bytes_max = self.partition_unsynced_bytes_max);
        set!(broker.connection_outbound_bytes_max = self.connection_outbound_bytes_max);
        set!(broker.outbound_bytes_max = self.outbound_bytes_max);
        set!(broker.disk_free_bytes_min = self.disk_free_bytes_min);
        set!(broker.log_cleaner_enabled = self.log_cleaner_enabled);
        set!(broker.log_cleaner_backoff_ms = self.log_cleaner_backoff_ms);
        set!(broker.log_cleaner_dedupe_buffer_bytes = self.log_cleaner_dedupe_buffer_bytes);
        set!(broker.log_cleaner_io_bytes_per_sec = self.log_cleaner_io_bytes_per_sec);
        if self.metrics_listen.is_some() {
            config.broker.metrics_listen = self.metrics_listen;
        }
        if self.console_listen.is_some() {
            config.broker.console_listen = self.console_listen;
        }
        if self.authorizer.is_some() {
            config.server.auth.authorizer = self.authorizer;
        }
        set!(server.auth.super_users = self.super_users);
        set!(server.auth.allow_everyone_if_no_acl_found = self.allow_everyone_if_no_acl_found);
        set!(server.auth.sasl_enabled_mechanisms = self.sasl_enabled_mechanisms);
        set!(
            server.auth.sasl_failed_authentication_delay_ms =
                self.sasl_failed_authentication_delay_ms
        );
        set!(server.auth.connections_max_reauth_ms = self.connections_max_reauth_ms);
        if self.sasl_oauthbearer_jwks_file.is_some() {
            config.server.auth.sasl_oauthbearer_jwks_file = self.sasl_oauthbearer_jwks_file;
        }
        if self.sasl_oauthbearer_expected_issuer.is_some() {
            config.server.auth.sasl_oauthbearer_expected_issuer =
                self.sasl_oauthbearer_expected_issuer;
        }
        set!(
            server.auth.sasl_oauthbearer_expected_audience =
                self.sasl_oauthbearer_expected_audience
        );
        set!(server.tier.remote_storage_endpoint = self.remote_storage_endpoint);
        set!(server.tier.remote_storage_bucket = self.remote_storage_bucket);
        set!(server.tier.remote_storage_region = self.remote_storage_region);
        set!(server.tier.remote_storage_access_key_id = self.remote_storage_access_key_id);
        set!(server.tier.remote_storage_secret_access_key = self.remote_storage_secret_access_key);
        set!(server.tier.remote_storage_prefix = self.remote_storage_prefix);
        set!(
            server.tier.remote_storage_upload_interval_ms = self.remote_storage_upload_interval_ms
        );
        config.settle();
        config.validate().map_err(anyhow::Error::msg)?;
        Ok(config)
    }
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // stdout closed by its reader (`headway ... | head`): the reader has what it
        // wanted, so this is a normal end.
        Err(e) if output::closed_stdout(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the chain of causes on one line, without a backtrace.
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Log lines go to stderr, filtered by `HEADWAY_LOG` (`info` by default).
fn init_logging(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("HEADWAY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let lines = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => lines.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => lines.json().flatten_event(true).init(),
    }
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    // Every panic is one ERROR line with its backtrace, and counted (`/metrics`).
    headway_broker::panics::install_hook();
    match cli.command {
        Command::Serve(args) => serve((*args).into_config()?),
        Command::Produce(args) => runtime::client_runtime()?.block_on(produce::run(args)),
        Command::Consume(args) => runtime::client_runtime()?.block_on(consume::run(args)),
        Command::Topic(args) => runtime::client_runtime()?.block_on(topic::run(args)),
        Command::Group(args) => runtime::client_runtime()?.block_on(group::run(args)),
        Command::Cluster(args) => runtime::client_runtime()?.block_on(cluster::run(args)),
        Command::Cleaner(args) => cleaner::run(args),
        Command::Bench(args) => headway_bench::run(args),
        Command::User(args) => user::run(args),
        Command::Acl(args) => runtime::client_runtime()?.block_on(acl::run(args)),
    }
}

fn serve(config: Config) -> anyhow::Result<()> {
    let Config {
        broker: config,
        server: sections,
    } = config;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(limits::BLOCKING_THREADS_MAX)
        .build()?;
    runtime.block_on(async move {
        tracing::info!(data_dir = %config.data_dir.display(), flush = %config.flush,
            sync_scope = %config.sync_scope, "starting");
        // Only for checking the fault tests' checker (`docs/cluster.md`): a broker that
        // acknowledges acks=all writes before its followers hold them.
        if std::env::var("HEADWAY_UNSAFE_HIGH_WATERMARK").as_deref() == Ok("leader-only") {
            tracing::warn!("HEADWAY_UNSAFE_HIGH_WATERMARK=leader-only: acks=all waits for this broker's own sync alone; acknowledged writes are lost when a leader crashes");
            headway_broker::replication::break_high_watermark();
        }
        let specs = config.listener_specs().map_err(anyhow::Error::msg)?;
        let listen = specs[0].bind.clone();
        // Tried before the data directory is opened (and created), so that a busy or
        // wrong address leaves nothing behind. The trial listeners are closed at once;
        // the server binds the same addresses below.
        for spec in &specs {
            drop(
                tokio::net::TcpListener::bind(&spec.bind)
                    .await
                    .with_context(|| {
                        format!("listening on {} (listener {})", spec.bind, spec.name)
                    })?,
            );
        }
        let broker = Broker::open(config)
            .await
            .context("opening the data directory")?;
        let server = Server::bind(broker, sections)
            .await
            .with_context(|| format!("listening on {listen}"))?;
        // Signal handlers are installed before the ready line, so a signal sent as soon
        // as the line appears is handled rather than killing the process.
        let signals = Signals::install()?;
        // Tests and scripts wait for this line; it is the only thing written to stdout.
        // Then every listener, the first included: `headway listener NAME PROTOCOL ADDR`.
        // A reader that stops after the first line (closing the pipe) must not stop the
        // broker: later write errors are ignored.
        let mut out = std::io::stdout();
        writeln!(out, "headway listening on {}", server.local_addr())?;
        out.flush()?;
        for (name, protocol, addr) in server.listener_addrs() {
            let _ = writeln!(out, "headway listener {name} {} {addr}", protocol.name());
        }
        let _ = out.flush();
        let handle = server.handle();
        let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        let reloader = server.handle();
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                match reloader.reload_tls() {
                    Ok(true) => tracing::info!("SIGHUP: reloaded the TLS certificate, key and client CAs"),
                    Ok(false) => tracing::info!("SIGHUP: no SSL listener, nothing to reload"),
                    Err(error) => tracing::warn!(%error, "SIGHUP: TLS reload failed, the previous certificate stays in use"),
                }
            }
        });
        tokio::spawn(async move {
            signals.wait().await;
            tracing::info!("signal received");
            handle.shutdown();
        });
        server.run().await;
        anyhow::Ok(())
    })
}
