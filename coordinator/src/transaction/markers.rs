//! `TxnMarkerWriter`: the seam through which the coordinator writes
//! transaction markers (Kafka's WriteTxnMarkers).
//!
//! On one broker every partition is local and the broker implements this by
//! appending a control batch to each partition's log. In a cluster the same
//! call becomes a WriteTxnMarkers request to each partition's leader; the
//! coordinator does not change.

use super::metadata::TopicPartition;

/// One marker for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMarker {
    /// The partition.
    pub partition: TopicPartition,
    /// The producer whose transaction ends.
    pub producer_id: i64,
    /// The epoch the marker carries (bumped when the coordinator fenced the producer).
    pub producer_epoch: i16,
    /// The coordinator's epoch (0: Floe's single coordinator never moves).
    pub coordinator_epoch: i32,
    /// COMMIT (`true`) or ABORT.
    pub commit: bool,
}

/// Writes transaction markers. Blocking: the coordinator calls it off the request workers.
pub trait TxnMarkerWriter: Send + Sync + std::fmt::Debug {
    /// Writes `marker` to its partition and returns once it is in the log
    /// (fsynced if the partition's `flush.messages` asks for it). A
    /// partition that no longer exists is not an error (its data went with it).
    ///
    /// # Errors
    /// A description of what failed; the coordinator retries later.
    fn write_marker(&self, marker: &TxnMarker) -> Result<(), String>;
}
