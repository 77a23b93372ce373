//! The storage layer's one error type, and the helper that gives I/O errors
//! their context (what was being done, to which path).

use std::path::{Path, PathBuf};

use thiserror::Error;

/// Everything that can go wrong in `floe-storage`.
///
/// The broker maps each variant to a Kafka error code in one place; the
/// variant names follow Kafka's error names.
#[derive(Debug, Error)]
pub enum StorageError {
    /// No such topic, or no such partition of it (UNKNOWN_TOPIC_OR_PARTITION).
    #[error("unknown topic or partition {topic}{}", partition.map(|p| format!("-{p}")).unwrap_or_default())]
    UnknownTopicOrPartition {
        /// The topic name.
        topic: String,
        /// The partition, if one was named.
        partition: Option<i32>,
    },
    /// No producer id block could be reserved in the cluster's metadata store
    /// (COORDINATOR_NOT_AVAILABLE: the client retries).
    #[error("cannot reserve producer ids in the cluster: {reason}")]
    ProducerIdBlock {
        /// Why.
        reason: String,
    },
    /// A topic of that name exists (TOPIC_ALREADY_EXISTS).
    #[error("topic {topic} already exists")]
    TopicAlreadyExists {
        /// The topic name.
        topic: String,
    },
    /// The topic name is not legal (INVALID_TOPIC_EXCEPTION).
    #[error("invalid topic name {name:?}: {reason}")]
    InvalidTopic {
        /// The name as given.
        name: String,
        /// Why it is rejected.
        reason: String,
    },
    /// A partition count that is not positive, or that would shrink a topic (INVALID_PARTITIONS).
    #[error("invalid partition count for {topic}: {reason}")]
    InvalidPartitions {
        /// The topic name.
        topic: String,
        /// Why the count is rejected.
        reason: String,
    },
    /// A topic config key is unknown or its value is bad (INVALID_CONFIG).
    #[error("invalid config {key}: {reason}")]
    InvalidConfig {
        /// The key.
        key: String,
        /// Why it is rejected.
        reason: String,
    },
    /// An offset outside `[log_start, log_end]` (OFFSET_OUT_OF_RANGE).
    #[error("offset {requested} is out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        /// The offset asked for.
        requested: i64,
        /// The log start offset.
        log_start: i64,
        /// The log end offset (= high watermark).
        log_end: i64,
    },
    /// A shared-storage topic's offset at or above the log start offset but
    /// below the local log start offset: its records are in the Iceberg table
    /// only (`docs/shared-mode.md` 4.2). Not a client error: the broker serves
    /// the offset from the table (answering empty until it can), never
    /// OFFSET_OUT_OF_RANGE, which would send an `auto.offset.reset=earliest`
    /// consumer past the table's records.
    #[error("offset below the local log start offset {local_start}: it is in the table only")]
    BelowLocalStart {
        /// The local log start offset: the first offset a local read serves.
        local_start: i64,
    },
    /// A batch above `max.message.bytes`, or an append larger than a segment (MESSAGE_TOO_LARGE).
    #[error("record batch of {size} bytes exceeds the limit of {limit} bytes")]
    RecordTooLarge {
        /// Size of the batch (or append).
        size: usize,
        /// The limit it broke.
        limit: usize,
    },
    /// Bytes that should be record batches are not (CORRUPT_MESSAGE).
    #[error("corrupt data in {}: {reason}", path.display())]
    Corrupt {
        /// The file (or partition directory) concerned.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A batch (or an InitProducerId epoch bump) from a producer epoch older
    /// than the one already known (INVALID_PRODUCER_EPOCH).
    #[error(
        "producer {producer_id}: epoch {epoch} is older than the current epoch {current_epoch}"
    )]
    InvalidProducerEpoch {
        /// The producer id.
        producer_id: i64,
        /// The epoch the request carried.
        epoch: i16,
        /// The newest epoch known for the producer.
        current_epoch: i16,
    },
    /// A batch whose first sequence number does not follow the producer's last
    /// one, or a new epoch not starting at 0 (OUT_OF_ORDER_SEQUENCE_NUMBER).
    #[error(
        "producer {producer_id} epoch {epoch}: sequence {sequence} where {expected} was expected"
    )]
    OutOfOrderSequence {
        /// The producer id.
        producer_id: i64,
        /// The batch's producer epoch.
        epoch: i16,
        /// The batch's first sequence number.
        sequence: i32,
        /// The sequence number that would have been in order.
        expected: i32,
    },
    /// A batch that contradicts the producer's transaction state in this
    /// partition: a non-transactional batch while its transaction is ongoing (INVALID_TXN_STATE).
    #[error("producer {producer_id}: {reason}")]
    InvalidTxnState {
        /// The producer id.
        producer_id: i64,
        /// What is wrong.
        reason: String,
    },
    /// A transaction marker from a coordinator epoch older than the last one
    /// seen for the producer (TRANSACTION_COORDINATOR_FENCED).
    #[error("producer {producer_id}: marker from coordinator epoch {coordinator_epoch}, older than {current_coordinator_epoch}")]
    TransactionCoordinatorFenced {
        /// The producer id.
        producer_id: i64,
        /// The marker's coordinator epoch.
        coordinator_epoch: i32,
        /// The newest coordinator epoch seen for the producer.
        current_coordinator_epoch: i32,
    },
    /// A batch the log refuses as a client's (INVALID_RECORD): a control
    /// batch (only the transaction coordinator writes markers), a
    /// transactional batch without a producer id.
    #[error("invalid record batch: {reason}")]
    InvalidRecord {
        /// What is wrong.
        reason: String,
    },
    /// A follower append whose first batch starts below the log end offset
    /// (Kafka's `UnexpectedAppendOffsetException`): the replica's log and the
    /// fetch disagree. Kafka's fetcher recovers from one case: an empty log
    /// (log end = log start) fetching from a leader whose log start lies inside
    /// a batch; it calls `truncate_fully_and_start_at(first_offset)` and retries.
    #[error("follower append starts at offset {first_offset} (last {last_offset}), below the log end offset {expected}")]
    UnexpectedAppendOffset {
        /// The log end offset: where the append had to start at the earliest.
        expected: i64,
        /// The first batch's base offset.
        first_offset: i64,
        /// The append's last offset.
        last_offset: i64,
    },
    /// A follower append whose batches overlap one another (Kafka's
    /// `OffsetsOutOfOrderException`): a batch starts before the previous one ended.
    #[error("follower append: a batch starts at offset {got}, before the previous batch's end {expected}")]
    OffsetOutOfOrder {
        /// The offset after the previous batch.
        expected: i64,
        /// The batch's base offset.
        got: i64,
    },
    /// A leader epoch older than the latest one the log has recorded
    /// (FENCED_LEADER_EPOCH): a stale leadership change.
    #[error("leader epoch {epoch} is older than the log's latest epoch {latest}")]
    FencedLeaderEpoch {
        /// The epoch asked for.
        epoch: i32,
        /// The latest epoch recorded.
        latest: i32,
    },
    /// InitProducerId named a producer id this node never handed out (INVALID_PRODUCER_ID_MAPPING).
    #[error("producer id {producer_id} was never allocated")]
    InvalidProducerIdMapping {
        /// The producer id.
        producer_id: i64,
    },
    /// The log cleaner was stopped (shutdown) in the middle of cleaning a log;
    /// nothing was changed.
    #[error("cleaning of {topic}-{partition} was aborted")]
    CleaningAborted {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// An I/O error on a log directory (KAFKA_STORAGE_ERROR): loud, not retried.
    #[error("{context} {}: {source}", path.display())]
    Io {
        /// What was being done.
        context: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The log directory went offline after an I/O error (KAFKA_STORAGE_ERROR);
    /// see [`crate::log_dir_failure`]. Only a restart brings it back.
    #[error("log directory {} is offline ({reason})", dir.display())]
    LogDirOffline {
        /// The log directory.
        dir: PathBuf,
        /// The error that took it offline.
        reason: String,
    },
}

impl StorageError {
    /// An I/O error saying the disk is full (`ENOSPC`, `EDQUOT`): an append
    /// that failed this way and left nothing behind is refused, not fatal.
    pub fn is_out_of_space(&self) -> bool {
        const ENOSPC: i32 = 28;
        const EDQUOT: i32 = 122;
        matches!(self, StorageError::Io { source, .. }
            if matches!(source.raw_os_error(), Some(ENOSPC | EDQUOT)))
    }
}

/// Short for `Result<T, StorageError>`.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Attaches context to `std::io::Result`s.
pub(crate) trait IoContext<T> {
    /// Turns an I/O error into [`StorageError::Io`] naming what was done to `path`.
    fn ctx(self, context: &'static str, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, context: &'static str, path: &Path) -> Result<T> {
        self.map_err(|source| StorageError::Io { context, path: path.to_path_buf(), source })
    }
}
