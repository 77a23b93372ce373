//! The one place storage errors become Kafka error codes.

use floe_storage::StorageError;
use kafka_protocol::error::ResponseError;

/// The Kafka error a client should see for `error`.
///
/// I/O failures of the log directory are KAFKA_STORAGE_ERROR (loud: the
/// client retries elsewhere or fails; nothing is acknowledged); anything
/// unexpected is UNKNOWN_SERVER_ERROR.
pub fn kafka_error(error: &StorageError) -> ResponseError {
    match error {
        StorageError::UnknownTopicOrPartition { .. } => ResponseError::UnknownTopicOrPartition,
        StorageError::TopicAlreadyExists { .. } => ResponseError::TopicAlreadyExists,
        StorageError::InvalidTopic { .. } => ResponseError::InvalidTopicException,
        StorageError::InvalidPartitions { .. } => ResponseError::InvalidPartitions,
        StorageError::InvalidConfig { .. } => ResponseError::InvalidConfig,
        StorageError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        StorageError::RecordTooLarge { .. } => ResponseError::MessageTooLarge,
        StorageError::Io { .. } | StorageError::LogDirOffline { .. } => {
            ResponseError::KafkaStorageError
        }
        StorageError::Corrupt { .. } => ResponseError::CorruptMessage,
        StorageError::InvalidProducerEpoch { .. } => ResponseError::InvalidProducerEpoch,
        StorageError::OutOfOrderSequence { .. } => ResponseError::OutOfOrderSequenceNumber,
        StorageError::InvalidProducerIdMapping { .. } => ResponseError::InvalidProducerIdMapping,
        StorageError::InvalidTxnState { .. } => ResponseError::InvalidTxnState,
        StorageError::TransactionCoordinatorFenced { .. } => {
            ResponseError::TransactionCoordinatorFenced
        }
        StorageError::InvalidRecord { .. } => ResponseError::InvalidRecord,
        StorageError::ProducerIdBlock { .. } => ResponseError::CoordinatorNotAvailable,
        StorageError::FencedLeaderEpoch { .. } => ResponseError::FencedLeaderEpoch,
        #[allow(unreachable_patterns)]
        _ => ResponseError::UnknownServerError,
    }
}

/// The Kafka error a client should see for a transaction coordinator refusal.
/// PRODUCER_FENCED is sent as such; handlers of request versions older than
/// KIP-588 turn it into INVALID_PRODUCER_EPOCH with [`fenced_for_version`].
pub fn txn_error(error: &floe_coordinator::transaction::TxnError) -> ResponseError {
    use floe_coordinator::transaction::{TxnError, TxnLogError};
    match error {
        TxnError::InvalidTransactionTimeout { .. } => ResponseError::InvalidTransactionTimeout,
        TxnError::InvalidProducerIdMapping { .. } => ResponseError::InvalidProducerIdMapping,
        TxnError::ProducerFenced { .. } => ResponseError::ProducerFenced,
        TxnError::ConcurrentTransactions(_) => ResponseError::ConcurrentTransactions,
        TxnError::InvalidTxnState { .. } => ResponseError::InvalidTxnState,
        TxnError::NotCoordinator | TxnError::Log(TxnLogError::NotCoordinator(_)) => {
            ResponseError::NotCoordinator
        }
        TxnError::LoadInProgress => ResponseError::CoordinatorLoadInProgress,
        TxnError::Log(_) | TxnError::ProducerIdAllocation(_) | TxnError::NotAvailable => {
            ResponseError::CoordinatorNotAvailable
        }
    }
}

/// KIP-588: clients that predate PRODUCER_FENCED (requests below `first_version`) get INVALID_PRODUCER_EPOCH.
pub fn fenced_for_version(code: ResponseError, version: i16, first_version: i16) -> ResponseError {
    if code == ResponseError::ProducerFenced && version < first_version {
        ResponseError::InvalidProducerEpoch
    } else {
        code
    }
}

/// The Kafka error for a failed write to `__consumer_offsets` (a transaction
/// marker there): the log's failure is KAFKA_STORAGE_ERROR, a record that
/// cannot be encoded UNKNOWN_SERVER_ERROR; in a cluster, NOT_LEADER_OR_FOLLOWER once
/// the partition's leadership (the coordinator's term) moved, NOT_ENOUGH_REPLICAS when
/// the in-sync replicas did not take it.
pub fn offsets_store_error(error: &floe_coordinator::group::store::StoreError) -> ResponseError {
    use floe_coordinator::group::store::StoreError;
    match error {
        StoreError::Storage(_) => ResponseError::KafkaStorageError,
        StoreError::Format(_) => ResponseError::UnknownServerError,
        // This broker no longer leads the partition (its group coordinator's term ended).
        StoreError::NotCoordinator(_) => ResponseError::NotLeaderOrFollower,
        StoreError::NotReplicated(_) => ResponseError::NotEnoughReplicas,
    }
}
