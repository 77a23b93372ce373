//! `TransactionMetadata`: everything the coordinator knows of one
//! transactional id — the producer id and epoch that own it, the open
//! transaction's partitions and timestamps — and the pure transitions the
//! coordinator applies to it (Kafka's `TransactionMetadata.prepare*`).
//!
//! Each transition returns the next metadata without touching the current
//! one; the coordinator makes the next one durable in `__transaction_state`
//! and only then replaces the current one, so memory never runs ahead of the
//! log.

use std::collections::BTreeSet;

use super::state::TransactionState;

/// A partition of a transaction: (topic, partition).
pub type TopicPartition = (String, i32);

/// Producer epochs at or above this are exhausted: the next bump takes a new producer id.
pub const MAX_EPOCH_BEFORE_ROTATION: i16 = i16::MAX - 1;

/// One transactional id's state (Kafka's `TransactionMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionMetadata {
    /// The transactional id.
    pub transactional_id: String,
    /// The producer id that owns it.
    pub producer_id: i64,
    /// The producer id before the last rotation (epoch exhaustion), or -1. Not persisted.
    pub last_producer_id: i64,
    /// The current epoch; requests with another one are fenced.
    pub producer_epoch: i16,
    /// The epoch before the last bump, or -1 (lets a retried InitProducerId
    /// whose answer was lost get the same answer). Not persisted, as in Kafka's v0 record.
    pub last_producer_epoch: i16,
    /// `transaction.timeout.ms` the producer asked for.
    pub txn_timeout_ms: i32,
    /// Where the transaction stands.
    pub state: TransactionState,
    /// The partitions of the open (or completing) transaction.
    pub partitions: BTreeSet<TopicPartition>,
    /// When the open transaction began (ms since the epoch), or -1.
    pub txn_start_timestamp: i64,
    /// When this metadata last changed (ms since the epoch).
    pub txn_last_update_timestamp: i64,
}

impl TransactionMetadata {
    /// A new id, before its first epoch (InitProducerId makes it epoch 0).
    pub fn new(transactional_id: &str, producer_id: i64, txn_timeout_ms: i32, now_ms: i64) -> Self {
        Self {
            transactional_id: transactional_id.to_string(),
            producer_id,
            last_producer_id: -1,
            producer_epoch: -1,
            last_producer_epoch: -1,
            txn_timeout_ms,
            state: TransactionState::Empty,
            partitions: BTreeSet::new(),
            txn_start_timestamp: -1,
            txn_last_update_timestamp: now_ms,
        }
    }

    /// Whether the epoch is used up: the next bump takes a new producer id.
    pub fn epoch_exhausted(&self) -> bool {
        self.producer_epoch >= MAX_EPOCH_BEFORE_ROTATION
    }

    /// InitProducerId on an idle id: the next epoch (or `new_producer_id` at
    /// epoch 0 once the epoch is exhausted), an empty transaction.
    pub fn prepare_new_epoch(
        &self,
        txn_timeout_ms: i32,
        new_producer_id: Option<i64>,
        now_ms: i64,
    ) -> Self {
        let mut next = self.clone();
        match new_producer_id {
            Some(id) => {
                next.last_producer_id = self.producer_id;
                next.producer_id = id;
                next.last_producer_epoch = -1;
                next.producer_epoch = 0;
            }
            None => {
                next.last_producer_epoch = self.producer_epoch;
                next.producer_epoch = self.producer_epoch.saturating_add(1);
            }
        }
        next.txn_timeout_ms = txn_timeout_ms;
        next.state = TransactionState::Empty;
        next.partitions.clear();
        next.txn_start_timestamp = -1;
        next.txn_last_update_timestamp = now_ms;
        next
    }

    /// AddPartitionsToTxn/AddOffsetsToTxn: the transaction is ongoing with
    /// `partitions` added; it begins now if it was not open.
    pub fn prepare_add_partitions(&self, partitions: &[TopicPartition], now_ms: i64) -> Self {
        let mut next = self.clone();
        if self.state.is_idle() {
            next.partitions.clear();
            next.txn_start_timestamp = now_ms;
        }
        next.partitions.extend(partitions.iter().cloned());
        next.state = TransactionState::Ongoing;
        next.txn_last_update_timestamp = now_ms;
        next
    }

    /// EndTxn (or an abort by the coordinator): the decision, durable before any marker.
    pub fn prepare_end(&self, commit: bool, now_ms: i64) -> Self {
        let mut next = self.clone();
        next.state =
            if commit { TransactionState::PrepareCommit } else { TransactionState::PrepareAbort };
        next.txn_last_update_timestamp = now_ms;
        next
    }

    /// Every marker is written: the transaction is complete.
    pub fn prepare_complete(&self, now_ms: i64) -> Self {
        let mut next = self.clone();
        next.state = match self.state {
            TransactionState::PrepareCommit => TransactionState::CompleteCommit,
            _ => TransactionState::CompleteAbort,
        };
        next.partitions.clear();
        next.txn_last_update_timestamp = now_ms;
        next
    }

    /// A transaction that must be aborted by the coordinator (timed out, or
    /// its id taken by a new producer instance): the epoch is bumped first,
    /// so the producer that opened it is fenced (Kafka's `prepareFenceProducerEpoch`).
    /// An exhausted epoch is not bumped: the abort then uses the current one.
    pub fn prepare_fence(&self, now_ms: i64) -> Self {
        let mut next = self.clone();
        if !self.epoch_exhausted() {
            next.last_producer_epoch = self.producer_epoch;
            next.producer_epoch = self.producer_epoch + 1;
        }
        next.state = TransactionState::PrepareAbort;
        next.txn_last_update_timestamp = now_ms;
        next
    }

    /// The id expired: its tombstone is written next.
    pub fn prepare_dead(&self, now_ms: i64) -> Self {
        let mut next = self.clone();
        next.state = TransactionState::Dead;
        next.partitions.clear();
        next.txn_last_update_timestamp = now_ms;
        next
    }

    /// Whether the open transaction ran past its timeout at `now_ms`.
    pub fn timed_out(&self, now_ms: i64) -> bool {
        self.state == TransactionState::Ongoing
            && self.txn_start_timestamp >= 0
            && now_ms.saturating_sub(self.txn_start_timestamp) > i64::from(self.txn_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> TopicPartition {
        (t.to_string(), p)
    }

    #[test]
    fn a_transaction_begins_at_its_first_partition_and_completes_empty() {
        let m = TransactionMetadata::new("t", 7, 60_000, 1).prepare_new_epoch(60_000, None, 2);
        assert_eq!(
            (m.producer_epoch, m.last_producer_epoch, m.state),
            (0, -1, TransactionState::Empty)
        );
        let a = m.prepare_add_partitions(&[tp("a", 0)], 10);
        let b = a.prepare_add_partitions(&[tp("b", 1)], 20);
        assert_eq!(b.txn_start_timestamp, 10, "the start stays at the first add");
        assert_eq!(b.partitions.len(), 2);
        let p = b.prepare_end(true, 30);
        assert_eq!(p.state, TransactionState::PrepareCommit);
        let c = p.prepare_complete(40);
        assert_eq!((c.state, c.partitions.len()), (TransactionState::CompleteCommit, 0));
        let again = c.prepare_add_partitions(&[tp("c", 0)], 50);
        assert_eq!((again.txn_start_timestamp, again.partitions.len()), (50, 1));
    }

    #[test]
    fn fencing_bumps_the_epoch_and_aborts() {
        let m = TransactionMetadata::new("t", 7, 1000, 0)
            .prepare_new_epoch(1000, None, 0)
            .prepare_add_partitions(&[tp("a", 0)], 0);
        assert!(!m.timed_out(1000));
        assert!(m.timed_out(1001));
        let f = m.prepare_fence(1001);
        assert_eq!(
            (f.producer_epoch, f.last_producer_epoch, f.state),
            (1, 0, TransactionState::PrepareAbort)
        );
        assert_eq!(f.prepare_complete(1002).state, TransactionState::CompleteAbort);
    }

    #[test]
    fn an_exhausted_epoch_rotates_the_producer_id() {
        let mut m = TransactionMetadata::new("t", 7, 1000, 0);
        m.producer_epoch = MAX_EPOCH_BEFORE_ROTATION;
        assert!(m.epoch_exhausted());
        let n = m.prepare_new_epoch(1000, Some(8), 1);
        assert_eq!((n.producer_id, n.producer_epoch, n.last_producer_id), (8, 0, 7));
    }
}
