//! `TransactionLog`: the `__transaction_state` topic — creating it,
//! appending a transactional id's new state durably, and replaying it at
//! startup into the last state of every id.
//!
//! # Durability
//! [`TransactionLog::append`] returns after the record is appended, and
//! fsynced when the topic's `flush.messages`/`flush.ms` say so, exactly as
//! for every other log (Kafka does the same: its coordinator's writes are
//! made durable by replication, not by an fsync of its own). The coordinator
//! changes its memory, and answers the client, only after that. So a
//! decision it announced (a commit, an epoch bump) survives a crash of the
//! process (the page cache keeps it), and a replay rebuilds exactly what it
//! had answered. Across a power cut that holds with `flush.messages=1`, the
//! setting under which no acknowledged record of any topic is lost: then
//! every record is fsynced before `append` returns, and every step a later
//! step relies on (the partitions added before their data, the decision
//! before its markers, each marker before the completion) is durable in
//! order. With the default (no fsync) a power cut may lose the tail of this
//! log as of any other: a transaction can come back undecided, and is then
//! aborted by its timeout.
//!
//! One `TransactionLog` is one partition of the topic (a transactional id's is
//! Kafka's hash of the id: see [`crate::partitioned`]). In a cluster the topic is
//! replicated like any other and created in the cluster's metadata (not here):
//! an append then passes the coordinator's [`CoordinatorTerm`] gate, so it is
//! written only by the partition's leader in the term it was decided in and
//! returns once the in-sync replicas have it.
//! Blocking: call it off the request runtime's workers.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use floe_protocol::kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use floe_protocol::record_batch::BatchIter;
use floe_storage::{LogManager, PartitionLog, StorageError};

use super::metadata::TransactionMetadata;
use super::records;
use crate::replicated::{CoordinatorTerm, ReplicationError};

/// The internal topic's name, as in Kafka.
pub use floe_protocol::topic::TRANSACTION_STATE_TOPIC;

/// Topic settings of the internal topic (Kafka's: compacted, large messages).
const TOPIC_CONFIG: &[(&str, &str)] = &[
    ("cleanup.policy", "compact"),
    ("retention.ms", "-1"),
    ("retention.bytes", "-1"),
    ("segment.bytes", "104857600"),
    ("max.message.bytes", "10485760"),
    ("min.insync.replicas", "1"),
];

/// The internal topic's settings, for creating it (in a cluster, through the cluster's metadata).
pub fn transaction_state_topic_config() -> BTreeMap<String, String> {
    TOPIC_CONFIG.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Why `__transaction_state` could not be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxnLogError {
    /// The storage layer failed.
    #[error("__transaction_state: {0}")]
    Storage(String),
    /// A record could not be encoded or a batch decoded.
    #[error("__transaction_state: {0}")]
    Format(String),
    /// This broker does not coordinate (any more) for the partition: NOT_COORDINATOR.
    #[error("__transaction_state: {0}")]
    NotCoordinator(String),
    /// The in-sync replicas did not take the write: COORDINATOR_NOT_AVAILABLE.
    #[error("__transaction_state: {0}")]
    NotReplicated(String),
}

impl From<ReplicationError> for TxnLogError {
    fn from(e: ReplicationError) -> Self {
        match e {
            ReplicationError::NotLeader(m) => TxnLogError::NotCoordinator(m),
            ReplicationError::NotReplicated(m) => TxnLogError::NotReplicated(m),
        }
    }
}

impl From<StorageError> for TxnLogError {
    fn from(e: StorageError) -> Self {
        TxnLogError::Storage(e.to_string())
    }
}

/// The log of every transactional id's state.
#[derive(Debug, Clone)]
pub struct TransactionLog {
    log: Arc<PartitionLog>,
}

impl TransactionLog {
    /// Creates the topic with `partitions` partitions if it does not exist; its
    /// partition count. Blocking.
    ///
    /// # Errors
    /// [`TxnLogError::Storage`] if it can be neither found nor created.
    pub fn create(logs: &LogManager, partitions: i32) -> Result<i32, TxnLogError> {
        if let Some(topic) = logs.topic(TRANSACTION_STATE_TOPIC) {
            return Ok(topic.partition_count());
        }
        logs.create_topic(TRANSACTION_STATE_TOPIC, partitions, transaction_state_topic_config())?;
        tracing::info!(partitions, "created {TRANSACTION_STATE_TOPIC}");
        Ok(partitions)
    }

    /// Opens the topic's `partition`, creating the topic (one partition) first if it
    /// does not exist. Blocking.
    ///
    /// # Errors
    /// [`TxnLogError::Storage`] if it can be neither found nor created.
    pub fn open(logs: &LogManager, partition: i32) -> Result<Self, TxnLogError> {
        Self::create(logs, 1)?;
        Self::open_existing(logs, partition)
    }

    /// Opens the topic's `partition`, which must exist (a cluster broker's: created
    /// through the cluster's metadata). Blocking.
    ///
    /// # Errors
    /// [`TxnLogError::Storage`] if this broker has no log of it.
    pub fn open_existing(logs: &LogManager, partition: i32) -> Result<Self, TxnLogError> {
        let log = logs
            .partition(TRANSACTION_STATE_TOPIC, partition)
            .ok_or_else(|| TxnLogError::Storage(format!("partition {partition} is missing")))?;
        Ok(Self { log })
    }

    /// Appends the state of `m` (or, for `None`, a tombstone for
    /// `transactional_id`), decided in the coordinator's term `term`: refused
    /// unless that term is current (and, in a cluster, this broker leads the
    /// partition); fsynced before it returns if the topic's `flush.messages` asks
    /// for it; in a cluster, returns once the in-sync replicas have it. Blocking.
    ///
    /// # Errors
    /// [`TxnLogError`] if the record cannot be encoded, appended or synced;
    /// nothing may then be assumed about it.
    pub fn append(
        &self,
        gate: &CoordinatorTerm,
        term: i32,
        transactional_id: &str,
        m: Option<&TransactionMetadata>,
        now_ms: i64,
    ) -> Result<(), TxnLogError> {
        let record = Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: 0,
            sequence: -1,
            timestamp: now_ms,
            key: Some(records::key(transactional_id)),
            value: m.map(records::value),
            headers: Default::default(),
        };
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            std::iter::once(&record),
            &RecordEncodeOptions { version: 2, compression: Compression::None },
        )
        .map_err(|e| TxnLogError::Format(e.to_string()))?;
        gate.before_append(&self.log, term)?;
        let appended = self.log.append(&mut buf, now_ms)?;
        gate.after_append(&self.log, appended.last_offset + 1)?;
        Ok(())
    }

    /// Replays the log: the last state of every transactional id (ids whose
    /// last record is a tombstone are absent). Blocking.
    ///
    /// # Errors
    /// [`TxnLogError`] if the log cannot be read or holds no whole batch where one must be.
    pub fn replay(&self) -> Result<HashMap<String, TransactionMetadata>, TxnLogError> {
        let log = &self.log;
        let mut state = HashMap::new();
        // To the log end (see the group coordinator's replay: a new leader's tail is history).
        let mut offset = log.log_start_offset();
        let end = log.log_end_offset();
        while offset < end {
            let info = log.read_for_replica(offset, 8 << 20, true)?;
            let Some(region) = info.region else { break };
            let buf =
                Bytes::from(region.read_to_vec().map_err(|e| TxnLogError::Storage(e.to_string()))?);
            let mut progressed = false;
            for b in BatchIter::new(&buf) {
                let Ok(b) = b else { break };
                let mut batch = buf.slice(b.position..b.end());
                let set = RecordBatchDecoder::decode(&mut batch)
                    .map_err(|e| TxnLogError::Format(e.to_string()))?;
                for r in set.records {
                    if r.offset < offset || r.control {
                        continue;
                    }
                    let Some(key) = r.key.as_ref() else { continue };
                    let id = match records::decode_key(key) {
                        Ok(id) => id,
                        Err(e) => {
                            tracing::warn!(offset = r.offset, error = %e, "skipping __transaction_state record");
                            continue;
                        }
                    };
                    match r.value.as_ref().map(|v| records::decode_value(&id, v)) {
                        None => {
                            state.remove(&id);
                        }
                        Some(Ok(m)) => {
                            state.insert(id, m);
                        }
                        Some(Err(e)) => {
                            tracing::warn!(offset = r.offset, transactional_id = %id, error = %e, "skipping __transaction_state record")
                        }
                    }
                }
                offset = b.header.next_offset();
                progressed = true;
            }
            if !progressed {
                return Err(TxnLogError::Format(format!("no whole batch at offset {offset}")));
            }
        }
        Ok(state)
    }
}
