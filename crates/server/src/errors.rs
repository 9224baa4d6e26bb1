//! The one place where broker errors become Kafka error codes.

use headway_broker::producer_state::SequenceError;
use headway_broker::{BatchError, BrokerError};
use headway_group::GroupError;
use headway_share::{AckFailure, ShareError};
use headway_txn::TxnError;
use kafka_protocol::ResponseError;

pub fn error_code(error: &BrokerError) -> i16 {
    response_error(error).code()
}

fn response_error(error: &BrokerError) -> ResponseError {
    use ResponseError as R;
    match error {
        BrokerError::UnknownTopicOrPartition { .. } => R::UnknownTopicOrPartition,
        BrokerError::UnknownTopicId(_) => R::UnknownTopicId,
        BrokerError::InvalidTopic { .. } | BrokerError::InternalTopic(_) => {
            R::InvalidTopicException
        }
        BrokerError::TopicAlreadyExists(_) => R::TopicAlreadyExists,
        BrokerError::InvalidPartitions(_) => R::InvalidPartitions,
        BrokerError::InvalidReplicationFactor(_) => R::InvalidReplicationFactor,
        BrokerError::InvalidReplicaAssignment(_) => R::InvalidReplicaAssignment,
        BrokerError::OpenFilesLimit { .. } => R::PolicyViolation,
        BrokerError::InvalidConfig { .. } => R::InvalidConfig,
        BrokerError::MessageTooLarge { .. } => R::MessageTooLarge,
        BrokerError::Batch(BatchError::UnsupportedMagic { .. }) => R::UnsupportedForMessageFormat,
        BrokerError::Batch(BatchError::CrcMismatch { .. }) => R::CorruptMessage,
        BrokerError::Batch(_)
        | BrokerError::MissingRecords
        | BrokerError::UnreadableRecords(_)
        | BrokerError::KeylessRecords { .. } => R::InvalidRecord,
        BrokerError::OffsetOutOfRange { .. } => R::OffsetOutOfRange,
        BrokerError::InvalidRequiredAcks(_) => R::InvalidRequiredAcks,
        BrokerError::Sequence(SequenceError::InvalidProducerEpoch { .. }) => {
            R::InvalidProducerEpoch
        }
        BrokerError::Sequence(SequenceError::OutOfOrderSequence { .. }) => {
            R::OutOfOrderSequenceNumber
        }
        BrokerError::Sequence(SequenceError::UnknownProducerId { .. }) => R::UnknownProducerId,
        BrokerError::Sequence(SequenceError::CoordinatorFenced { .. }) => {
            R::TransactionCoordinatorFenced
        }
        BrokerError::Sequence(SequenceError::TooManyTransactions { .. }) => R::PolicyViolation,
        BrokerError::TransactionRefused { code, .. }
        | BrokerError::ControllerRefused { code, .. }
        | BrokerError::AuthorizationFailed { code, .. } => {
            R::try_from_code(*code).unwrap_or(R::UnknownServerError)
        }
        BrokerError::InvalidRequest(_) => R::InvalidRequest,
        // Retriable in every Kafka client (Java's KafkaStorageException is an
        // InvalidMetadataException; librdkafka refreshes metadata and retries): a
        // produce refused for a full disk goes through once space returns, within the
        // client's delivery timeout, without the application seeing an error.
        // A tiered partition's remote data asked of a broker that cannot reach it (no
        // remote tier configured): retriable, as a remote read that failed.
        BrokerError::Storage(_)
        | BrokerError::DiskFree { .. }
        | BrokerError::InRemoteTier { .. } => R::KafkaStorageError,
        // Not retriable on purpose: Kafka answers a fetch of damaged data with it, and
        // Java's consumer raises "Encountered corrupt message" to the application
        // instead of retrying silently at the same offset forever.
        BrokerError::CorruptData { .. } => R::CorruptMessage,
        // Retriable: the client refreshes metadata and tries again after a restart.
        BrokerError::ShuttingDown { .. } | BrokerError::NotLeaderOrFollower { .. } => {
            R::NotLeaderOrFollower
        }
        BrokerError::FencedLeaderEpoch { .. } => R::FencedLeaderEpoch,
        BrokerError::UnknownLeaderEpoch { .. } => R::UnknownLeaderEpoch,
        BrokerError::NotEnoughReplicas { .. } => R::NotEnoughReplicas,
        BrokerError::NotEnoughReplicasAfterAppend { .. } => R::NotEnoughReplicasAfterAppend,
        BrokerError::ReplicationTimedOut { .. } => R::RequestTimedOut,
    }
}

pub fn group_error_code(error: GroupError) -> i16 {
    use ResponseError as R;
    let e = match error {
        GroupError::InvalidGroupId => R::InvalidGroupId,
        GroupError::InvalidSessionTimeout => R::InvalidSessionTimeout,
        GroupError::UnknownMemberId => R::UnknownMemberId,
        GroupError::IllegalGeneration => R::IllegalGeneration,
        GroupError::RebalanceInProgress => R::RebalanceInProgress,
        GroupError::InconsistentGroupProtocol => R::InconsistentGroupProtocol,
        GroupError::MemberIdRequired => R::MemberIdRequired,
        GroupError::FencedInstanceId => R::FencedInstanceId,
        GroupError::NonEmptyGroup => R::NonEmptyGroup,
        GroupError::GroupIdNotFound => R::GroupIdNotFound,
        GroupError::OffsetMetadataTooLarge => R::OffsetMetadataTooLarge,
        GroupError::GroupMaxSizeReached => R::GroupMaxSizeReached,
        GroupError::CoordinatorNotAvailable => R::CoordinatorNotAvailable,
        GroupError::NotCoordinator => R::NotCoordinator,
        GroupError::CoordinatorLoadInProgress => R::CoordinatorLoadInProgress,
        GroupError::TooManyPendingOffsets => R::InvalidCommitOffsetSize,
        GroupError::InvalidRequest => R::InvalidRequest,
        GroupError::InvalidRegularExpression => R::InvalidRegularExpression,
        GroupError::UnsupportedAssignor => R::UnsupportedAssignor,
        GroupError::UnreleasedInstanceId => R::UnreleasedInstanceId,
        GroupError::FencedMemberEpoch => R::FencedMemberEpoch,
        GroupError::StaleMemberEpoch => R::StaleMemberEpoch,
        GroupError::UnsupportedVersion => R::UnsupportedVersion,
    };
    e.code()
}

/// The code for an optional group error (0 when there is none).
pub fn group_code(error: Option<GroupError>) -> i16 {
    error.map_or(0, group_error_code)
}

pub fn share_error_code(error: &ShareError) -> i16 {
    use ResponseError as R;
    let e = match error {
        ShareError::UnknownMemberId => R::UnknownMemberId,
        ShareError::FencedMemberEpoch { .. } => R::FencedMemberEpoch,
        ShareError::InvalidRequest(_) => R::InvalidRequest,
        ShareError::GroupMaxSizeReached => R::GroupMaxSizeReached,
        ShareError::ShareSessionNotFound => R::ShareSessionNotFound,
        ShareError::InvalidShareSessionEpoch { .. } => R::InvalidShareSessionEpoch,
        ShareError::ShareSessionLimitReached => R::ShareSessionLimitReached,
        ShareError::NonEmptyGroup => R::NonEmptyGroup,
        ShareError::GroupIdNotFound => R::GroupIdNotFound,
        ShareError::CoordinatorNotAvailable => R::CoordinatorNotAvailable,
    };
    e.code()
}

/// The code of a partition's failed acknowledgements.
pub fn ack_failure_code(error: &AckFailure) -> i16 {
    match error {
        AckFailure::Record(_) | AckFailure::UnknownType(_) => {
            ResponseError::InvalidRecordState.code()
        }
        AckFailure::Share(e) => share_error_code(e),
    }
}

pub fn txn_error_code(error: &TxnError) -> i16 {
    use ResponseError as R;
    let e = match error {
        TxnError::InvalidTransactionalId => R::InvalidRequest,
        TxnError::InvalidGroupId => R::InvalidGroupId,
        TxnError::InvalidTransactionTimeout { .. } => R::InvalidTransactionTimeout,
        TxnError::ProducerFenced => R::ProducerFenced,
        TxnError::InvalidProducerEpoch => R::InvalidProducerEpoch,
        TxnError::InvalidProducerIdMapping => R::InvalidProducerIdMapping,
        TxnError::InvalidTxnState => R::InvalidTxnState,
        TxnError::ConcurrentTransactions => R::ConcurrentTransactions,
        TxnError::TransactionalIdNotFound => R::TransactionalIdNotFound,
        TxnError::CoordinatorLoadInProgress => R::CoordinatorLoadInProgress,
        TxnError::NotCoordinator => R::NotCoordinator,
        // Retriable: the client finds the coordinator again and retries.
        TxnError::CoordinatorNotAvailable | TxnError::Markers(_) => R::CoordinatorNotAvailable,
        // Not retriable: the client reports it (aborting the transaction where one is
        // open) with the message, which names the bound.
        TxnError::LimitReached { .. } => R::PolicyViolation,
    };
    e.code()
}

/// The transaction error another broker's coordinator answered with `code` (a check
/// sent to it); a code no transaction error has is the coordinator's failure to
/// answer, which a client retries.
pub fn txn_error_from_code(code: i16) -> TxnError {
    use ResponseError as R;
    match ResponseError::try_from_code(code) {
        Some(R::InvalidProducerEpoch) => TxnError::InvalidProducerEpoch,
        Some(R::ProducerFenced) => TxnError::ProducerFenced,
        Some(R::InvalidProducerIdMapping) => TxnError::InvalidProducerIdMapping,
        Some(R::InvalidTxnState) => TxnError::InvalidTxnState,
        Some(R::ConcurrentTransactions) => TxnError::ConcurrentTransactions,
        Some(R::TransactionalIdNotFound) => TxnError::TransactionalIdNotFound,
        Some(R::CoordinatorLoadInProgress) => TxnError::CoordinatorLoadInProgress,
        Some(R::NotCoordinator) => TxnError::NotCoordinator,
        _ => TxnError::CoordinatorNotAvailable,
    }
}

/// The code for a transaction result (0 for success).
pub fn txn_code<T>(result: &Result<T, TxnError>) -> i16 {
    result.as_ref().err().map_or(0, txn_error_code)
}

/// The error code and message a response carries for a failed operation.
pub fn code_and_message(error: &BrokerError) -> (i16, Option<kafka_protocol::protocol::StrBytes>) {
    (error_code(error), Some(error.to_string().into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_errors_map_to_distinct_codes() {
        let crc = BrokerError::Batch(BatchError::CrcMismatch {
            stored: 1,
            computed: 2,
        });
        let magic = BrokerError::Batch(BatchError::UnsupportedMagic { magic: 1 });
        assert_eq!(error_code(&crc), 2);
        assert_eq!(error_code(&magic), 43);
        assert_eq!(
            error_code(&BrokerError::MessageTooLarge { size: 2, limit: 1 }),
            10
        );
    }

    #[test]
    fn storage_errors_map_to_kafka_codes() {
        let full = BrokerError::DiskFree {
            free_bytes: 1,
            min_bytes: 2,
        };
        let corrupt = BrokerError::CorruptData {
            topic: "t".into(),
            partition: headway_base::PartitionIndex::new(0),
            offset: headway_base::Offset::new(7),
            detail: "crc".into(),
        };
        assert_eq!(error_code(&full), 56);
        assert_eq!(error_code(&BrokerError::Storage("enospc".into())), 56);
        assert_eq!(error_code(&corrupt), 2);
    }
}
