//! `LocalMarkerWriter`: how the transaction coordinator's markers reach the
//! partitions of this broker (Kafka's WriteTxnMarkers, done in process).
//!
//! A partition of a user topic gets a control batch appended to its log
//! before the coordinator records the transaction complete. The append
//! honours the partition's `flush.messages` as any other does: with
//! `flush.messages=1` the marker is fsynced before the completion record is
//! written, so after a power cut the completion never outlives a marker (the
//! partition's last stable offset would otherwise stay behind the
//! transaction); with the default, neither is fsynced, as in Kafka.
//! The `__consumer_offsets` partition goes through the group coordinator,
//! which writes the marker in order with its other writes and makes the
//! transaction's offsets the group's committed ones.

use std::sync::Arc;

use floe_coordinator::clock::wall_ms;
use floe_coordinator::group::{GroupCoordinator, OFFSETS_TOPIC};
use floe_coordinator::transaction::{TxnMarker, TxnMarkerWriter};
use floe_storage::{ControlRecordType, LogManager};

/// Writes markers into this broker's logs.
#[derive(Debug)]
pub struct LocalMarkerWriter {
    logs: Arc<LogManager>,
    groups: Arc<GroupCoordinator>,
}

impl LocalMarkerWriter {
    /// A writer over `logs`, with `groups` for the offsets partition.
    pub fn new(logs: Arc<LogManager>, groups: Arc<GroupCoordinator>) -> Self {
        Self { logs, groups }
    }
}

impl TxnMarkerWriter for LocalMarkerWriter {
    fn write_marker(&self, m: &TxnMarker) -> Result<(), String> {
        let (topic, partition) = (&m.partition.0, m.partition.1);
        if topic == OFFSETS_TOPIC {
            return self.groups.complete_txn_at(m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch).map_err(|e| e.to_string());
        }
        let Some(log) = self.logs.partition(topic, partition) else {
            tracing::info!(topic, partition, producer_id = m.producer_id, "no marker for a partition that no longer exists");
            return Ok(());
        };
        let marker = if m.commit { ControlRecordType::Commit } else { ControlRecordType::Abort };
        log.append_txn_marker(m.producer_id, m.producer_epoch, marker, m.coordinator_epoch, wall_ms()).map_err(|e| e.to_string())?;
        Ok(())
    }
}
