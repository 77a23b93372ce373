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
        StorageError::Io { .. } | StorageError::LogDirOffline { .. } => ResponseError::KafkaStorageError,
        StorageError::Corrupt { .. } => ResponseError::CorruptMessage,
        StorageError::InvalidProducerEpoch { .. } => ResponseError::InvalidProducerEpoch,
        StorageError::OutOfOrderSequence { .. } => ResponseError::OutOfOrderSequenceNumber,
        StorageError::InvalidProducerIdMapping { .. } => ResponseError::InvalidProducerIdMapping,
        StorageError::InvalidRecord { .. } => ResponseError::InvalidRecord,
        #[allow(unreachable_patterns)]
        _ => ResponseError::UnknownServerError,
    }
}
