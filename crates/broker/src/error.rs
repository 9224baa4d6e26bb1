use headway_base::{durable_file::DurableFileError, Offset, PartitionIndex};
use headway_log::{BatchError, LogError};

/// Expected failures of broker operations. The server maps each variant to a Kafka
/// error code in exactly one place (`headway_server::errors`).
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// `partition` is `None` when the topic itself is unknown (shown as Kafka's -1).
    #[error("unknown topic or partition {topic}/{}", .partition.map_or(-1, PartitionIndex::value))]
    UnknownTopicOrPartition {
        topic: String,
        partition: Option<PartitionIndex>,
    },
    #[error("unknown topic id {0}")]
    UnknownTopicId(uuid::Uuid),
    #[error("invalid topic name {name:?}: {reason}")]
    InvalidTopic { name: String, reason: &'static str },
    #[error("topic {0} already exists")]
    TopicAlreadyExists(String),
    #[error("topic {0} is internal: clients may read it, not write it")]
    InternalTopic(String),
    #[error("invalid partition count {0}")]
    InvalidPartitions(i32),
    #[error("invalid replication factor {0}: this broker keeps one replica")]
    InvalidReplicationFactor(i16),
    #[error("invalid replica assignment: {0}")]
    InvalidReplicaAssignment(String),
    /// New partitions would take the process past its open files limit.
    #[error(
        "{partitions} new partition(s) need {needed} open files; {available} are left under \
         the open files limit of {limit} (beside the files open now and a reserve for \
         connections): raise the limit (ulimit -n) or create fewer partitions"
    )]
    OpenFilesLimit {
        partitions: u64,
        needed: u64,
        available: u64,
        limit: u64,
    },
    #[error("invalid config {name}={value}: {reason}")]
    InvalidConfig {
        name: String,
        value: String,
        reason: String,
    },
    #[error("record batch of {size} bytes exceeds max.message.bytes {limit}")]
    MessageTooLarge { size: usize, limit: usize },
    #[error("invalid record batch: {0}")]
    Batch(BatchError),
    #[error("produce request carries no records")]
    MissingRecords,
    /// A record batch on a compacted topic whose records cannot be walked to check
    /// their keys.
    #[error("invalid record batch: {0}")]
    UnreadableRecords(headway_log::records::Unwalkable),
    /// Records without a key sent to a compacted topic.
    #[error(
        "{} record(s) without a key refused: topic {topic} is compacted (cleanup.policy \
         includes compact), so every record needs a key",
        keyless.count
    )]
    KeylessRecords {
        topic: String,
        partition: PartitionIndex,
        keyless: headway_log::records::Keyless,
    },
    #[error("offset {offset} out of range [{log_start_offset}, {high_watermark}]")]
    OffsetOutOfRange {
        offset: Offset,
        log_start_offset: Offset,
        high_watermark: Offset,
    },
    /// A read below the local log of a tiered partition, whose oldest segments only the
    /// remote tier holds.
    #[error("{topic}/{partition}: offset {offset} is before the local log (from {local_start_offset}); the remote tier holds it")]
    InRemoteTier {
        topic: String,
        partition: PartitionIndex,
        offset: Offset,
        local_start_offset: Offset,
    },
    #[error("acks must be -1, 0 or 1, not {0}")]
    InvalidRequiredAcks(i16),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error(transparent)]
    Sequence(#[from] crate::producer_state::SequenceError),
    /// The transaction coordinator refused a transactional produce (the producer is
    /// fenced, the partition is not in its transaction, ...): `code` is the Kafka error
    /// code it answered.
    #[error("the transaction coordinator refused the produce: {reason}")]
    TransactionRefused { code: i16, reason: String },
    #[error("storage error: {0}")]
    Storage(String),
    /// The data directory's free space is below `disk_free_bytes_min`.
    #[error("the data directory has {free_bytes} bytes free, below disk_free_bytes_min {min_bytes}: produces resume when space returns")]
    DiskFree { free_bytes: u64, min_bytes: u64 },
    /// A stored batch failed its CRC when read back; the segment is marked for repair.
    #[error("{topic}/{partition}: stored record batch at offset {offset} is corrupt ({detail}); the segment is marked for repair")]
    CorruptData {
        topic: String,
        partition: PartitionIndex,
        offset: Offset,
        detail: String,
    },
    #[error("partition {topic}/{partition} is shutting down")]
    ShuttingDown {
        topic: String,
        partition: PartitionIndex,
    },
    /// In a cluster: the controller refused a change (or decided none in time): `code`
    /// is the Kafka error code of its answer.
    #[error("the controller refused: {reason}")]
    ControllerRefused { code: i16, reason: String },
    /// This broker does not lead the partition (a replicated partition's follower, or
    /// one whose role is not known yet); `leader` is the leader it knows of.
    #[error("partition {topic}/{partition}: this broker is not its leader")]
    NotLeaderOrFollower {
        topic: String,
        partition: PartitionIndex,
        leader: Option<i32>,
    },
    /// A request carried a leader epoch older than the partition's (a stale client or
    /// a deposed leader's follower).
    #[error("leader epoch {given} is older than the partition's {current}")]
    FencedLeaderEpoch { given: i32, current: i32 },
    /// A request carried a leader epoch newer than the partition's: this broker has not
    /// learnt of it yet.
    #[error("leader epoch {given} is newer than the partition's {current}")]
    UnknownLeaderEpoch { given: i32, current: i32 },
    /// Fewer replicas are in sync than the topic's `min.insync.replicas`: the produce
    /// was refused before anything was written.
    #[error("{in_sync} replicas in sync, fewer than min.insync.replicas {required}")]
    NotEnoughReplicas { in_sync: usize, required: usize },
    /// The records were written, but the in-sync replicas fell below
    /// `min.insync.replicas` before they were replicated.
    #[error("written, but {in_sync} replicas in sync, fewer than min.insync.replicas {required}")]
    NotEnoughReplicasAfterAppend { in_sync: usize, required: usize },
    /// An acks=all produce was not replicated to the in-sync replicas within the
    /// request's `timeout_ms` (REQUEST_TIMED_OUT); the records may still be.
    #[error("not replicated to the in-sync replicas within the request's {timeout_ms} ms")]
    ReplicationTimedOut { timeout_ms: i64 },
    /// The authorizer refused the request on `resource`: `code` is Kafka's
    /// *_AUTHORIZATION_FAILED code for the resource's type.
    #[error("not authorized to access {resource}")]
    AuthorizationFailed { code: i16, resource: String },
}

impl From<DurableFileError> for BrokerError {
    fn from(e: DurableFileError) -> BrokerError {
        BrokerError::Storage(e.to_string())
    }
}

impl BrokerError {
    pub(crate) fn from_log(error: LogError) -> BrokerError {
        match error {
            LogError::Batch(b) => BrokerError::Batch(b),
            LogError::OffsetOutOfRange {
                offset,
                log_start_offset,
                log_end_offset,
            } => BrokerError::OffsetOutOfRange {
                offset,
                log_start_offset,
                high_watermark: log_end_offset,
            },
            LogError::AppendTooLarge { size_bytes, .. } => BrokerError::MessageTooLarge {
                size: size_bytes,
                limit: i32::MAX as usize,
            },
            other => BrokerError::Storage(other.to_string()),
        }
    }
}
