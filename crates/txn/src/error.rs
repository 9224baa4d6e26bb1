/// Expected failures of transaction operations. The server maps each to a Kafka error
/// code in `headway_server::errors`, the one place codes are chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    #[error("the transactional id is empty or longer than a Kafka string")]
    InvalidTransactionalId,
    #[error("the group id is empty or longer than a Kafka string")]
    InvalidGroupId,
    #[error("the transaction timeout {timeout_ms} ms is not within 1..={max_ms} ms")]
    InvalidTransactionTimeout { timeout_ms: i32, max_ms: i32 },
    #[error("a newer producer with the same transactional id fenced this one")]
    ProducerFenced,
    #[error("the producer's epoch is not the transactional id's current one")]
    InvalidProducerEpoch,
    #[error("the producer id is not the one assigned to the transactional id")]
    InvalidProducerIdMapping,
    #[error("the operation is not valid in the transaction's state")]
    InvalidTxnState,
    #[error("a previous state change of the transaction is still completing")]
    ConcurrentTransactions,
    #[error("the transactional id is unknown")]
    TransactionalIdNotFound,
    #[error("this broker does not coordinate the transactional id (now)")]
    NotCoordinator,
    #[error("the transaction coordinator is loading its log")]
    CoordinatorLoadInProgress,
    #[error("the transaction coordinator could not store its state")]
    CoordinatorNotAvailable,
    #[error("{what}: at most {limit} (a bound of the coordinator's memory)")]
    LimitReached { what: &'static str, limit: usize },
    #[error("writing transaction markers failed: {0}")]
    Markers(String),
}
