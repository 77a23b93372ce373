//! The term a coordinator serves in, and the gate its writes pass in a cluster.
//!
//! A single broker's coordinators own their internal topic outright: they are elected
//! once, at epoch 0, and a write is acknowledged after their own append (and fsync).
//! In a cluster the internal topic is replicated like any other, and a broker
//! coordinates only while it leads the topic's partition (Kafka's rule: the group
//! coordinator is the leader of the group's `__consumer_offsets` partition, the
//! transaction coordinator that of `__transaction_state`). Its term is that leadership,
//! named by the partition's leader epoch; the broker's [`ReplicatedWrites`] then
//! - refuses an append unless this broker still leads the partition at the term's
//!   epoch, so a deposed coordinator cannot write into a log that now follows
//!   another's, and
//! - holds the acknowledgement until the in-sync replicas have the records (the high
//!   watermark passed them), so what a client was told survives the leader's loss.
//!
//! Every write carries the epoch it was made in: one queued in an older term is refused
//! even if this broker leads again by the time it runs, because it was decided on a
//! state the new term reloaded from the log.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use floe_storage::PartitionLog;

/// No term: this broker does not coordinate for the partition.
pub const NO_TERM: i32 = -1;

/// Why a coordinator's write was not acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplicationError {
    /// This broker no longer leads the partition at the term's epoch (Kafka's
    /// NOT_COORDINATOR for the client: look the coordinator up again).
    #[error("not the coordinator any more: {0}")]
    NotLeader(String),
    /// The in-sync replicas did not take the records in time, or are fewer than
    /// `min.insync.replicas` (COORDINATOR_NOT_AVAILABLE: retriable).
    #[error("not replicated: {0}")]
    NotReplicated(String),
}

/// What a cluster broker checks around a coordinator's append (implemented by the
/// broker over its replica manager). Both block: call them off the async workers.
pub trait ReplicatedWrites: Send + Sync + std::fmt::Debug {
    /// Before an append: `Ok` only if this broker leads `log`'s partition at `leader_epoch`.
    ///
    /// # Errors
    /// [`ReplicationError::NotLeader`].
    fn check_leader(&self, log: &PartitionLog, leader_epoch: i32) -> Result<(), ReplicationError>;

    /// After an append: waits until every in-sync replica has the records below
    /// `end_offset`, with at least the topic's `min.insync.replicas` of them.
    ///
    /// # Errors
    /// [`ReplicationError::NotLeader`] if leadership moved meanwhile,
    /// [`ReplicationError::NotReplicated`] on a timeout or too small an ISR.
    fn wait_committed(&self, log: &PartitionLog, end_offset: i64) -> Result<(), ReplicationError>;
}

/// A coordinator's current term and the gate of its writes.
#[derive(Debug)]
pub struct CoordinatorTerm {
    epoch: AtomicI32,
    replication: Option<Arc<dyn ReplicatedWrites>>,
}

impl CoordinatorTerm {
    /// A single broker's: one term, epoch 0, no replication.
    pub fn single() -> Self {
        Self { epoch: AtomicI32::new(0), replication: None }
    }

    /// A cluster broker's: no term until [`CoordinatorTerm::begin`].
    pub fn replicated(writes: Arc<dyn ReplicatedWrites>) -> Self {
        Self { epoch: AtomicI32::new(NO_TERM), replication: Some(writes) }
    }

    /// Whether terms come and go with leadership (a cluster).
    pub fn is_replicated(&self) -> bool {
        self.replication.is_some()
    }

    /// The current term's epoch, or [`NO_TERM`].
    pub fn epoch(&self) -> i32 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Starts the term of `epoch` (leadership gained).
    pub fn begin(&self, epoch: i32) {
        self.epoch.store(epoch, Ordering::Release);
    }

    /// Ends the current term (leadership lost).
    pub fn end(&self) {
        self.epoch.store(NO_TERM, Ordering::Release);
    }

    /// Before appending a write made in term `epoch`.
    ///
    /// # Errors
    /// [`ReplicationError::NotLeader`] if the term changed since, or the broker does not lead `log`.
    pub fn before_append(&self, log: &PartitionLog, epoch: i32) -> Result<(), ReplicationError> {
        let current = self.epoch();
        if current == NO_TERM || current != epoch {
            return Err(ReplicationError::NotLeader(format!(
                "{}-{}: the write was made at leader epoch {epoch}, the coordinator's term is now {current}",
                log.topic(),
                log.partition()
            )));
        }
        match &self.replication {
            Some(r) => r.check_leader(log, epoch),
            None => Ok(()),
        }
    }

    /// After appending: returns once the records below `end_offset` are committed.
    ///
    /// # Errors
    /// As [`ReplicatedWrites::wait_committed`].
    pub fn after_append(
        &self,
        log: &PartitionLog,
        end_offset: i64,
    ) -> Result<(), ReplicationError> {
        match &self.replication {
            Some(r) => r.wait_committed(log, end_offset),
            None => Ok(()),
        }
    }
}
