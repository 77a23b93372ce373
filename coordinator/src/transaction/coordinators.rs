//! [`TransactionCoordinators`](crate::transaction::TransactionCoordinators): the transaction coordinators of every
//! `__transaction_state` partition behind one router — building them, their
//! timers' work over every partition, and ListTransactions over the partitions this
//! broker coordinates.
//!
//! Producer ids stay unique across partitions: every partition's coordinator takes
//! them from the broker's one allocator (`LogManager::producer_ids`), which a single
//! broker persists in blocks and a cluster broker reserves in blocks from etcd.

use std::collections::BTreeSet;
use std::sync::Arc;

use floe_storage::LogManager;

use super::coordinator::{ListedTransaction, TransactionConfig, TransactionCoordinator};
use super::log::{TransactionLog, TxnLogError, TRANSACTION_STATE_TOPIC};
use super::markers::TxnMarkerWriter;
use super::state::TransactionState;
use crate::partitioned::{effective_count, Partitioned};
use crate::replicated::ReplicatedWrites;

impl Partitioned<TransactionCoordinator> {
    /// A single broker's: creates `__transaction_state` with `configured`
    /// (`transaction.state.log.num.partitions`) partitions if it does not exist,
    /// else keeps its own count, and replays every partition. Blocking. Call
    /// [`Self::complete_prepared`] once markers can be written.
    ///
    /// # Errors
    /// [`TxnLogError`] if the topic cannot be created or a partition read.
    pub fn open(
        config: TransactionConfig,
        logs: Arc<LogManager>,
        markers: Arc<dyn TxnMarkerWriter>,
        configured: i32,
    ) -> Result<Self, TxnLogError> {
        let existing = logs.topic(TRANSACTION_STATE_TOPIC).map(|t| t.partition_count());
        let count = TransactionLog::create(
            &logs,
            effective_count(TRANSACTION_STATE_TOPIC, configured, existing),
        )?;
        let opened = Partitioned::new(
            TRANSACTION_STATE_TOPIC,
            count,
            Box::new(move |p| {
                TransactionCoordinator::open_partition(
                    config.clone(),
                    logs.clone(),
                    markers.clone(),
                    p,
                )
                .map(Arc::new)
                .map_err(|e| std::io::Error::other(e.to_string()))
            }),
        );
        opened.map_err(|e| TxnLogError::Storage(e.to_string()))
    }

    /// A cluster broker's: every partition NOT_COORDINATOR until elected. Keys map with
    /// `configured` partitions until the broker sets the topic's actual count.
    ///
    /// # Errors
    /// None in practice (the coordinators start no thread); the router's type says so.
    pub fn replicated(
        config: TransactionConfig,
        logs: Arc<LogManager>,
        markers: Arc<dyn TxnMarkerWriter>,
        configured: i32,
        writes: Arc<dyn ReplicatedWrites>,
    ) -> std::io::Result<Self> {
        Partitioned::new(
            TRANSACTION_STATE_TOPIC,
            configured,
            Box::new(move |p| {
                Ok(Arc::new(TransactionCoordinator::replicated(
                    config.clone(),
                    logs.clone(),
                    markers.clone(),
                    p,
                    writes.clone(),
                )))
            }),
        )
    }

    /// Finishes what a crash left prepared, in every partition.
    pub async fn complete_prepared(&self) {
        for c in self.all() {
            c.complete_prepared().await;
        }
    }

    /// The periodic work of every partition this broker coordinates.
    pub async fn tick(&self, now_ms: i64) {
        for c in self.all() {
            c.tick(now_ms).await;
        }
    }

    /// Removes expired transactional ids in every partition this broker coordinates.
    pub async fn remove_expired(&self, now_ms: i64) -> usize {
        let mut removed = 0;
        for c in self.all().into_iter().filter(|c| c.check_active().is_ok()) {
            removed += c.remove_expired(now_ms).await;
        }
        removed
    }

    /// ListTransactions: the matching transactions of every partition this broker coordinates.
    pub fn list(
        &self,
        states: &BTreeSet<TransactionState>,
        producer_ids: &BTreeSet<i64>,
    ) -> Vec<ListedTransaction> {
        let mut out: Vec<ListedTransaction> =
            self.all().iter().flat_map(|c| c.list(states, producer_ids)).collect();
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        out
    }
}
