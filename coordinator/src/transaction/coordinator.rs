//! `TransactionCoordinator`: the transaction coordinator of one `__transaction_state`
//! partition (of the transactional ids that hash to it; [`TransactionCoordinators`]
//! holds one per partition). It hands out producer ids
//! and epochs for transactional ids, fences zombies, records which
//! partitions each transaction touches, and drives the two-phase commit:
//! decision durable in `__transaction_state`, then a marker in every
//! partition, then the completion record.
//!
//! The rules are Kafka's (`TransactionCoordinator`, `TransactionMetadata`,
//! KIP-98, KIP-360 epoch bumps, KIP-588 PRODUCER_FENCED, KIP-890 part 1
//! verification of transactional produce).
//!
//! # Locking
//! Each transactional id has an entry with two locks:
//! - `op`, a `tokio::sync::Mutex`, serialises the operations on the id
//!   (InitProducerId, AddPartitions, EndTxn, timeouts). It is held across
//!   the awaits of a transition (log write, markers), so two requests for
//!   one id never interleave: the second waits where Kafka would answer
//!   CONCURRENT_TRANSACTIONS and have the client retry.
//! - `meta`, a `std::sync::Mutex`, guards the current metadata. It is held
//!   only to read or replace it, and across a transactional append by the
//!   produce path ([`TransactionCoordinator::verify_and_append`]), so an
//!   append verified against an Ongoing transaction is in the log before the
//!   transaction can move to PrepareCommit/PrepareAbort and its markers be
//!   written. That closes the "hanging transaction" race KIP-890 closes.
//!
//! # Durability and crashes
//! Memory changes only after the new state is in the log (fsynced as the
//! topic's `flush.messages` says: see [`super::log`]). A crash
//! after PrepareCommit/PrepareAbort is durable, before its completion, is
//! finished at the next start by [`TransactionCoordinator::complete_prepared`]:
//! the markers are written again (a second marker for a producer with no open
//! transaction in a partition is harmless) and the completion recorded.
//!
//! # In a cluster
//! A broker coordinates a partition's ids while it leads that partition: the broker calls
//! [`TransactionCoordinator::elect`] with the partition's leader epoch when it
//! becomes the leader (the state is replayed from the replicated log, and what a
//! crash or the previous coordinator left prepared is completed), and
//! [`TransactionCoordinator::resign`] when it stops. The leader epoch is the
//! coordinator epoch its markers carry, so a partition refuses the markers of a
//! deposed coordinator (TRANSACTION_COORDINATOR_FENCED). Every entry remembers
//! the term it was loaded or created in, and its writes are refused in any other
//! (see [`crate::replicated`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use floe_storage::LogManager;

use super::log::{TransactionLog, TxnLogError};
use super::markers::{TxnMarker, TxnMarkerWriter};
use super::metadata::{TopicPartition, TransactionMetadata};
use super::state::TransactionState;
use crate::clock::wall_ms;
use crate::partitioned::Partitioned;
use crate::replicated::{CoordinatorTerm, ReplicatedWrites, NO_TERM};

/// The transaction coordinators of every `__transaction_state` partition.
pub type TransactionCoordinators = Partitioned<TransactionCoordinator>;

/// The coordinator epoch a single broker's markers carry: its coordinator never moves.
pub const COORDINATOR_EPOCH: i32 = 0;

const LOADING: u8 = 0;
const ACTIVE: u8 = 1;
const FAILED: u8 = 2;
/// A cluster broker between terms: not the coordinator.
const INACTIVE: u8 = 3;

/// Settings, with Kafka's names and defaults.
#[derive(Debug, Clone)]
pub struct TransactionConfig {
    /// `transaction.max.timeout.ms`: the longest `transaction.timeout.ms` a producer may ask for.
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: idle ids are forgotten after this.
    pub id_expiration_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`.
    pub abort_timed_out_interval: Duration,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`.
    pub remove_expired_interval: Duration,
}

impl Default for TransactionConfig {
    fn default() -> Self {
        Self {
            max_timeout_ms: 900_000,
            id_expiration_ms: 604_800_000,
            abort_timed_out_interval: Duration::from_millis(10_000),
            remove_expired_interval: Duration::from_millis(3_600_000),
        }
    }
}

/// Why a request was refused; the broker maps each to Kafka's error code of the same name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    /// The producer asked for a timeout outside `1..=transaction.max.timeout.ms`.
    #[error("transaction timeout {timeout_ms} ms is outside 1..={max_ms}")]
    InvalidTransactionTimeout {
        /// What was asked.
        timeout_ms: i32,
        /// `transaction.max.timeout.ms`.
        max_ms: i32,
    },
    /// The producer id is not the one that owns the transactional id.
    #[error("producer id {producer_id} does not own transactional id {transactional_id}")]
    InvalidProducerIdMapping {
        /// The transactional id.
        transactional_id: String,
        /// The producer id sent.
        producer_id: i64,
    },
    /// The epoch is not the current one: a newer producer took the id.
    #[error("producer {producer_id} epoch {epoch} is fenced (current epoch {current_epoch})")]
    ProducerFenced {
        /// The producer id.
        producer_id: i64,
        /// The epoch sent.
        epoch: i16,
        /// The current epoch.
        current_epoch: i16,
    },
    /// Another operation on the id must finish first; retriable.
    #[error("transactional id {0} is completing a transaction")]
    ConcurrentTransactions(String),
    /// The request does not fit the transaction's state.
    #[error("transactional id {transactional_id} is {state}: {reason}")]
    InvalidTxnState {
        /// The transactional id.
        transactional_id: String,
        /// Its state's name.
        state: &'static str,
        /// What was asked of it.
        reason: &'static str,
    },
    /// `__transaction_state` could not be written.
    #[error(transparent)]
    Log(#[from] TxnLogError),
    /// No producer id could be allocated.
    #[error("allocating a producer id: {0}")]
    ProducerIdAllocation(String),
    /// This broker is not the transaction coordinator now (a cluster broker that
    /// does not lead `__transaction_state`).
    #[error("this broker is not the transaction coordinator")]
    NotCoordinator,
    /// The coordinator is replaying `__transaction_state`.
    #[error("the transaction coordinator is loading")]
    LoadInProgress,
    /// The coordinator could not load its log.
    #[error("the transaction coordinator failed to load its log")]
    NotAvailable,
}

/// One transactional id: the op lock, its current metadata (see the module doc), and
/// the coordinator's term it belongs to.
#[derive(Debug)]
struct TxnEntry {
    op: tokio::sync::Mutex<()>,
    meta: Mutex<Option<TransactionMetadata>>,
    term: i32,
}

impl TxnEntry {
    fn new(term: i32, meta: Option<TransactionMetadata>) -> Self {
        Self { op: Default::default(), meta: Mutex::new(meta), term }
    }

    fn meta(&self) -> MutexGuard<'_, Option<TransactionMetadata>> {
        self.meta.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn current(&self) -> Option<TransactionMetadata> {
        self.meta().clone()
    }
}

/// One transaction as ListTransactions reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedTransaction {
    /// The transactional id.
    pub transactional_id: String,
    /// Its producer id.
    pub producer_id: i64,
    /// Its state.
    pub state: TransactionState,
}

/// The transaction coordinator (see the module doc).
#[derive(Debug)]
pub struct TransactionCoordinator {
    config: TransactionConfig,
    /// The `__transaction_state` partition whose transactional ids this coordinator owns.
    partition: i32,
    /// `None` between terms.
    log: RwLock<Option<TransactionLog>>,
    logs: Arc<LogManager>,
    markers: Arc<dyn TxnMarkerWriter>,
    txns: Mutex<HashMap<String, Arc<TxnEntry>>>,
    term: Arc<CoordinatorTerm>,
    status: AtomicU8,
    /// Serializes elections and resignations.
    terms: tokio::sync::Mutex<()>,
}

fn fenced(m: &TransactionMetadata, epoch: i16) -> TxnError {
    TxnError::ProducerFenced { producer_id: m.producer_id, epoch, current_epoch: m.producer_epoch }
}

fn invalid_state(m: &TransactionMetadata, reason: &'static str) -> TxnError {
    TxnError::InvalidTxnState {
        transactional_id: m.transactional_id.clone(),
        state: m.state.name(),
        reason,
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, TxnError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| TxnError::Log(TxnLogError::Storage(format!("blocking task failed: {e}"))))
}

impl TransactionCoordinator {
    /// Opens `__transaction_state` (creating it) and replays it. Blocking.
    /// Call [`TransactionCoordinator::complete_prepared`] once the broker can
    /// write markers, to finish what a crash interrupted.
    ///
    /// # Errors
    /// [`TxnLogError`] if the log cannot be opened or read.
    pub fn open(
        config: TransactionConfig,
        logs: Arc<LogManager>,
        markers: Arc<dyn TxnMarkerWriter>,
    ) -> Result<Self, TxnLogError> {
        Self::open_partition(config, logs, markers, 0)
    }

    /// [`TransactionCoordinator::open`] of `partition` (the topic must exist, or have one partition).
    ///
    /// # Errors
    /// [`TxnLogError`] if the log cannot be opened or read.
    pub fn open_partition(
        config: TransactionConfig,
        logs: Arc<LogManager>,
        markers: Arc<dyn TxnMarkerWriter>,
        partition: i32,
    ) -> Result<Self, TxnLogError> {
        let log = TransactionLog::open(&logs, partition)?;
        let loaded = log.replay()?;
        let txns = Self::entries(loaded, COORDINATOR_EPOCH);
        tracing::info!(partition, transactional_ids = txns.len(), "transaction coordinator loaded");
        Ok(Self {
            config,
            partition,
            log: RwLock::new(Some(log)),
            logs,
            markers,
            txns: Mutex::new(txns),
            term: Arc::new(CoordinatorTerm::single()),
            status: AtomicU8::new(ACTIVE),
            terms: tokio::sync::Mutex::new(()),
        })
    }

    /// A cluster broker's coordinator: NOT_COORDINATOR until
    /// [`TransactionCoordinator::elect`]; its writes pass `writes`.
    pub fn replicated(
        config: TransactionConfig,
        logs: Arc<LogManager>,
        markers: Arc<dyn TxnMarkerWriter>,
        partition: i32,
        writes: Arc<dyn ReplicatedWrites>,
    ) -> Self {
        Self {
            config,
            partition,
            log: RwLock::new(None),
            logs,
            markers,
            txns: Mutex::new(HashMap::new()),
            term: Arc::new(CoordinatorTerm::replicated(writes)),
            status: AtomicU8::new(INACTIVE),
            terms: tokio::sync::Mutex::new(()),
        }
    }

    fn entries(
        loaded: HashMap<String, TransactionMetadata>,
        term: i32,
    ) -> HashMap<String, Arc<TxnEntry>> {
        let mut states: HashMap<&'static str, usize> = HashMap::new();
        let txns: HashMap<String, Arc<TxnEntry>> = loaded
            .into_iter()
            .map(|(id, m)| {
                *states.entry(m.state.name()).or_default() += 1;
                (id, Arc::new(TxnEntry::new(term, Some(m))))
            })
            .collect();
        tracing::debug!(?states, "transactional ids by state");
        txns
    }

    /// `Err` unless this broker coordinates transactions now.
    ///
    /// # Errors
    /// [`TxnError::NotCoordinator`], [`TxnError::LoadInProgress`], [`TxnError::NotAvailable`].
    pub fn check_active(&self) -> Result<(), TxnError> {
        match self.status.load(Ordering::Acquire) {
            ACTIVE if self.term.epoch() != NO_TERM => Ok(()),
            LOADING => Err(TxnError::LoadInProgress),
            FAILED => Err(TxnError::NotAvailable),
            _ => Err(TxnError::NotCoordinator),
        }
    }

    /// The `__transaction_state` partition this coordinator owns.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The coordinator epoch of the current term (its markers carry it): 0 on a single
    /// broker, the leader epoch of `__transaction_state` in a cluster, -1 between terms.
    pub fn coordinator_epoch(&self) -> i32 {
        self.term.epoch()
    }

    /// Becomes the transaction coordinator for the term of `leader_epoch` (this
    /// broker now leads this coordinator's `__transaction_state` partition): replays
    /// the log to its end, answers, then completes what was left prepared.
    ///
    /// # Errors
    /// [`TxnLogError`] if the log is missing or cannot be read.
    pub async fn elect(&self, leader_epoch: i32) -> Result<(), TxnLogError> {
        {
            let _serial = self.terms.lock().await;
            self.term.begin(leader_epoch);
            self.status.store(LOADING, Ordering::Release);
            self.txns().clear();
            *self.log.write().unwrap_or_else(PoisonError::into_inner) = None;
            let (logs, partition) = (self.logs.clone(), self.partition);
            let started = std::time::Instant::now();
            let loaded = tokio::task::spawn_blocking(move || {
                let log = TransactionLog::open_existing(&logs, partition)?;
                let state = log.replay()?;
                Ok::<_, TxnLogError>((log, state))
            })
            .await
            .unwrap_or_else(|e| Err(TxnLogError::Storage(format!("load task failed: {e}"))));
            if self.term.epoch() != leader_epoch {
                tracing::info!(
                    partition,
                    leader_epoch,
                    "the transaction coordinator's term ended while it loaded"
                );
                return Ok(());
            }
            match loaded {
                Ok((log, state)) => {
                    *self.log.write().unwrap_or_else(PoisonError::into_inner) = Some(log);
                    *self.txns() = Self::entries(state, leader_epoch);
                    self.status.store(ACTIVE, Ordering::Release);
                    tracing::info!(partition, leader_epoch, transactional_ids = self.txns().len(), elapsed_ms = started.elapsed().as_millis() as u64,
                        "became the transaction coordinator of the partition: __transaction_state loaded");
                }
                Err(e) => {
                    self.status.store(FAILED, Ordering::Release);
                    tracing::error!(partition, leader_epoch, error = %e, "cannot load __transaction_state: the partition's transactions fail until the next election");
                    return Err(e);
                }
            }
        }
        self.complete_prepared().await;
        Ok(())
    }

    /// Stops answering at once (NOT_COORDINATOR): leadership is gone. Cheap.
    pub fn fence(&self) {
        if self.term.is_replicated() {
            self.term.end();
            self.status.store(INACTIVE, Ordering::Release);
        }
    }

    /// Ends the term: NOT_COORDINATOR from now on, the state forgotten (the next
    /// coordinator loads it from the log).
    pub async fn resign(&self) {
        let _serial = self.terms.lock().await;
        if !self.term.is_replicated() {
            return;
        }
        self.fence();
        let ids = std::mem::take(&mut *self.txns()).len();
        *self.log.write().unwrap_or_else(PoisonError::into_inner) = None;
        tracing::info!(
            partition = self.partition,
            transactional_ids = ids,
            "no longer the transaction coordinator of the partition"
        );
    }

    fn log(&self) -> Result<TransactionLog, TxnError> {
        self.log
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(TxnError::NotCoordinator)
    }

    /// The settings in force.
    pub fn config(&self) -> &TransactionConfig {
        &self.config
    }

    fn txns(&self) -> MutexGuard<'_, HashMap<String, Arc<TxnEntry>>> {
        self.txns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn entry(&self, transactional_id: &str) -> Option<Arc<TxnEntry>> {
        self.txns().get(transactional_id).cloned()
    }

    fn entry_or_create(&self, transactional_id: &str) -> Arc<TxnEntry> {
        let term = self.term.epoch();
        self.txns()
            .entry(transactional_id.to_string())
            .or_insert_with(|| Arc::new(TxnEntry::new(term, None)))
            .clone()
    }

    /// Makes `next` durable (in the entry's term), then current.
    async fn persist(
        &self,
        entry: &TxnEntry,
        next: TransactionMetadata,
    ) -> Result<TransactionMetadata, TxnError> {
        let (log, gate, term) = (self.log()?, self.term.clone(), entry.term);
        let record = next.clone();
        blocking(move || {
            log.append(
                &gate,
                term,
                &record.transactional_id,
                Some(&record),
                record.txn_last_update_timestamp,
            )
        })
        .await??;
        *entry.meta() = Some(next.clone());
        Ok(next)
    }

    /// InitProducerId with a transactional id: the producer id and the next
    /// epoch for it, fencing every older producer instance. A transaction the
    /// old instance left open is aborted first (under a bumped epoch).
    /// `expected` is the producer id and epoch a KIP-360 client holds.
    ///
    /// # Errors
    /// [`TxnError::InvalidTransactionTimeout`], [`TxnError::ProducerFenced`]
    /// (`expected` is not the current or previous instance),
    /// [`TxnError::ConcurrentTransactions`], [`TxnError::Log`].
    pub async fn init_producer_id(
        &self,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), TxnError> {
        self.check_active()?;
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return Err(TxnError::InvalidTransactionTimeout {
                timeout_ms,
                max_ms: self.config.max_timeout_ms,
            });
        }
        let entry = self.entry_or_create(transactional_id);
        let _op = entry.op.lock().await;
        let now = wall_ms();
        let Some(current) = entry.current() else {
            let producer_id = blocking_alloc(self).await?;
            let next = TransactionMetadata::new(transactional_id, producer_id, timeout_ms, now)
                .prepare_new_epoch(timeout_ms, None, now);
            let m = self.persist(&entry, next).await?;
            tracing::info!(
                transactional_id,
                producer_id = m.producer_id,
                epoch = m.producer_epoch,
                "new transactional id"
            );
            return Ok((m.producer_id, m.producer_epoch));
        };
        if let Some((producer_id, epoch)) = expected.filter(|(id, _)| *id >= 0) {
            let current_instance =
                producer_id == current.producer_id && epoch == current.producer_epoch;
            let retried_bump =
                producer_id == current.producer_id && epoch == current.last_producer_epoch;
            let rotated = producer_id == current.last_producer_id && current.producer_epoch == 0;
            if retried_bump && current.state == TransactionState::Empty {
                // The bump this producer asked for happened; its answer was lost.
                return Ok((current.producer_id, current.producer_epoch));
            }
            if !(current_instance || retried_bump || rotated) {
                return Err(fenced(&current, epoch));
            }
        }
        let mut current = current;
        if current.state == TransactionState::Ongoing {
            // A new instance: the old one's transaction is aborted under a
            // bumped epoch, so its late writes are fenced.
            tracing::info!(
                transactional_id,
                producer_id = current.producer_id,
                epoch = current.producer_epoch,
                "aborting the open transaction of a fenced producer instance"
            );
            let prepared = self.persist(&entry, current.prepare_fence(now)).await?;
            current = self.complete(&entry, prepared).await?;
        }
        match current.state {
            TransactionState::Empty
            | TransactionState::CompleteCommit
            | TransactionState::CompleteAbort => {
                let rotate = if current.epoch_exhausted() {
                    Some(blocking_alloc(self).await?)
                } else {
                    None
                };
                let m = self
                    .persist(&entry, current.prepare_new_epoch(timeout_ms, rotate, wall_ms()))
                    .await?;
                tracing::debug!(
                    transactional_id,
                    producer_id = m.producer_id,
                    epoch = m.producer_epoch,
                    "producer epoch bumped"
                );
                Ok((m.producer_id, m.producer_epoch))
            }
            // A decision whose markers could not be written yet: retried by the coordinator.
            _ => Err(TxnError::ConcurrentTransactions(transactional_id.to_string())),
        }
    }

    /// Checks that `producer_id`/`epoch` own `transactional_id` (under the op lock).
    fn owned(
        &self,
        transactional_id: &str,
        entry: Option<&TxnEntry>,
        producer_id: i64,
        epoch: i16,
    ) -> Result<TransactionMetadata, TxnError> {
        let mapping = || TxnError::InvalidProducerIdMapping {
            transactional_id: transactional_id.to_string(),
            producer_id,
        };
        let m = entry.and_then(TxnEntry::current).ok_or_else(mapping)?;
        if m.producer_id != producer_id {
            return Err(mapping());
        }
        if m.producer_epoch != epoch {
            return Err(fenced(&m, epoch));
        }
        Ok(m)
    }

    /// AddPartitionsToTxn (and AddOffsetsToTxn, for the group's offsets
    /// partition): the transaction is Ongoing with `partitions` in it.
    /// With `verify_only` nothing is added: the answer says whether they all are.
    ///
    /// # Errors
    /// [`TxnError::InvalidProducerIdMapping`], [`TxnError::ProducerFenced`],
    /// [`TxnError::ConcurrentTransactions`] while a commit or abort completes,
    /// [`TxnError::InvalidTxnState`], [`TxnError::Log`].
    pub async fn add_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[TopicPartition],
        verify_only: bool,
    ) -> Result<(), TxnError> {
        self.check_active()?;
        let entry = self.entry(transactional_id);
        let _op = match &entry {
            Some(e) => Some(e.op.lock().await),
            None => None,
        };
        let m = self.owned(transactional_id, entry.as_deref(), producer_id, epoch)?;
        let entry = entry
            .as_deref()
            .ok_or_else(|| TxnError::ConcurrentTransactions(transactional_id.to_string()))?;
        let all_in = partitions.iter().all(|p| m.partitions.contains(p));
        match m.state {
            TransactionState::PrepareCommit | TransactionState::PrepareAbort => {
                Err(TxnError::ConcurrentTransactions(transactional_id.to_string()))
            }
            TransactionState::Ongoing if all_in => Ok(()),
            _ if verify_only => Err(invalid_state(&m, "partitions are not in the transaction")),
            TransactionState::Dead | TransactionState::PrepareEpochFence => {
                Err(invalid_state(&m, "cannot add partitions"))
            }
            _ => {
                let began = m.state.is_idle();
                let next =
                    self.persist(entry, m.prepare_add_partitions(partitions, wall_ms())).await?;
                if began {
                    tracing::debug!(
                        transactional_id,
                        producer_id,
                        epoch,
                        partitions = next.partitions.len(),
                        "transaction began"
                    );
                }
                Ok(())
            }
        }
    }

    /// EndTxn: commits or aborts the open transaction. Returns once the
    /// decision is durable and every marker written (or, if a marker could
    /// not be written, once the decision is durable: the coordinator retries).
    /// A retry of an EndTxn that completed is answered with success.
    ///
    /// # Errors
    /// [`TxnError::InvalidProducerIdMapping`], [`TxnError::ProducerFenced`],
    /// [`TxnError::InvalidTxnState`] (nothing open, or the other decision),
    /// [`TxnError::ConcurrentTransactions`], [`TxnError::Log`].
    pub async fn end_txn(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    ) -> Result<(), TxnError> {
        self.check_active()?;
        let entry = self.entry(transactional_id);
        let _op = match &entry {
            Some(e) => Some(e.op.lock().await),
            None => None,
        };
        let m = self.owned(transactional_id, entry.as_deref(), producer_id, epoch)?;
        let entry = entry
            .as_deref()
            .ok_or_else(|| TxnError::ConcurrentTransactions(transactional_id.to_string()))?;
        match (m.state, commit) {
            (TransactionState::Ongoing, _) => {
                let prepared = self.persist(entry, m.prepare_end(commit, wall_ms())).await?;
                // The decision is durable: a crash from here on completes it at restart.
                crash_point("txn.end.prepared");
                self.complete(entry, prepared).await.map(|_| ())
            }
            (TransactionState::CompleteCommit, true) | (TransactionState::CompleteAbort, false) => {
                Ok(())
            }
            (TransactionState::PrepareCommit, true) | (TransactionState::PrepareAbort, false) => {
                // Its markers failed earlier: try again now.
                self.complete(entry, m).await.map(|_| ())
            }
            (TransactionState::Empty, _) => Err(invalid_state(&m, "no transaction is open")),
            _ => Err(invalid_state(&m, if commit { "cannot commit" } else { "cannot abort" })),
        }
    }

    /// Writes the markers of a prepared transaction, then records its
    /// completion. A marker that cannot be written leaves it prepared (the
    /// periodic [`TransactionCoordinator::tick`] retries) and is not an error
    /// for the caller: the decision stands.
    async fn complete(
        &self,
        entry: &TxnEntry,
        prepared: TransactionMetadata,
    ) -> Result<TransactionMetadata, TxnError> {
        let commit = prepared.state == TransactionState::PrepareCommit;
        let markers: Vec<TxnMarker> = prepared
            .partitions
            .iter()
            .map(|p| TxnMarker {
                partition: p.clone(),
                producer_id: prepared.producer_id,
                producer_epoch: prepared.producer_epoch,
                coordinator_epoch: entry.term,
                commit,
            })
            .collect();
        let writer = self.markers.clone();
        let written = blocking(move || {
            for (i, marker) in markers.iter().enumerate() {
                if i > 0 {
                    crash_point("txn.markers.between");
                }
                writer
                    .write_marker(marker)
                    .map_err(|e| format!("{}-{}: {e}", marker.partition.0, marker.partition.1))?;
            }
            Ok::<_, String>(())
        })
        .await?;
        if let Err(e) = written {
            tracing::warn!(transactional_id = %prepared.transactional_id, producer_id = prepared.producer_id, commit, error = %e,
                "writing transaction markers failed; will retry");
            return Ok(prepared);
        }
        crash_point("txn.end.before_complete");
        // The completion only saves work: lost, the transaction loads as prepared
        // and its markers are written again, which is harmless.
        let done = self.persist(entry, prepared.prepare_complete(wall_ms())).await?;
        tracing::debug!(transactional_id = %done.transactional_id, producer_id = done.producer_id, state = done.state.name(), "transaction completed");
        Ok(done)
    }

    /// Runs `append` if `partition` is in the Ongoing transaction that
    /// `producer_id`/`epoch` own (KIP-890 part 1), holding the metadata lock
    /// across it so the transaction cannot complete in between.
    ///
    /// # Errors
    /// [`TxnError::InvalidProducerIdMapping`], [`TxnError::ProducerFenced`],
    /// [`TxnError::InvalidTxnState`] (not Ongoing, or the partition was not added).
    pub fn verify_and_append<T>(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partition: &TopicPartition,
        append: impl FnOnce() -> T,
    ) -> Result<T, TxnError> {
        self.check_active()?;
        let mapping = || TxnError::InvalidProducerIdMapping {
            transactional_id: transactional_id.to_string(),
            producer_id,
        };
        let entry = self.entry(transactional_id).ok_or_else(mapping)?;
        let meta = entry.meta();
        let m = meta.as_ref().ok_or_else(mapping)?;
        if m.producer_id != producer_id {
            return Err(mapping());
        }
        if m.producer_epoch != epoch {
            return Err(fenced(m, epoch));
        }
        if m.state != TransactionState::Ongoing || !m.partitions.contains(partition) {
            return Err(invalid_state(m, "the partition was not added to the transaction"));
        }
        Ok(append())
    }

    /// Finishes every transaction left prepared (by a crash, or by markers
    /// that failed), and aborts what a fenced instance left in PrepareEpochFence.
    pub async fn complete_prepared(&self) {
        let entries: Vec<Arc<TxnEntry>> = self.txns().values().cloned().collect();
        for entry in entries {
            let Ok(_op) = entry.op.try_lock() else { continue };
            let Some(m) = entry.current() else { continue };
            let prepared = match m.state {
                TransactionState::PrepareCommit | TransactionState::PrepareAbort => m,
                TransactionState::PrepareEpochFence => {
                    match self.persist(&entry, m.prepare_fence(wall_ms())).await {
                        Ok(p) => p,
                        Err(e) => {
                            tracing::warn!(transactional_id = %m.transactional_id, error = %e, "cannot abort a fenced transaction");
                            continue;
                        }
                    }
                }
                _ => continue,
            };
            tracing::info!(transactional_id = %prepared.transactional_id, state = prepared.state.name(), "completing a prepared transaction");
            if let Err(e) = self.complete(&entry, prepared).await {
                tracing::warn!(error = %e, "completing a prepared transaction failed");
            }
        }
    }

    /// Aborts every Ongoing transaction older than its timeout, bumping the
    /// epoch first so the producer that opened it is fenced. Returns how many.
    pub async fn abort_timed_out(&self, now_ms: i64) -> usize {
        let candidates: Vec<Arc<TxnEntry>> = self
            .txns()
            .values()
            .filter(|e| e.meta().as_ref().is_some_and(|m| m.timed_out(now_ms)))
            .cloned()
            .collect();
        let mut aborted = 0;
        for entry in candidates {
            let _op = entry.op.lock().await;
            let Some(m) = entry.current().filter(|m| m.timed_out(now_ms)) else { continue };
            tracing::info!(transactional_id = %m.transactional_id, producer_id = m.producer_id, epoch = m.producer_epoch,
                timeout_ms = m.txn_timeout_ms, "aborting a timed-out transaction");
            let result = match self.persist(&entry, m.prepare_fence(wall_ms())).await {
                Ok(prepared) => self.complete(&entry, prepared).await.map(|_| ()),
                Err(e) => Err(e),
            };
            match result {
                Ok(()) => aborted += 1,
                Err(e) => {
                    tracing::warn!(transactional_id = %m.transactional_id, error = %e, "aborting a timed-out transaction failed")
                }
            }
        }
        aborted
    }

    /// Forgets idle transactional ids not used for `transactional.id.expiration.ms`
    /// (a tombstone in the log). Returns how many.
    pub async fn remove_expired(&self, now_ms: i64) -> usize {
        let expiration = self.config.id_expiration_ms;
        let expired = |m: &TransactionMetadata| {
            m.state.is_idle() && now_ms.saturating_sub(m.txn_last_update_timestamp) > expiration
        };
        let candidates: Vec<(String, Arc<TxnEntry>)> = self
            .txns()
            .iter()
            .filter(|(_, e)| e.meta().as_ref().is_some_and(expired))
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect();
        let mut removed = 0;
        for (id, entry) in candidates {
            let _op = entry.op.lock().await;
            if !entry.current().as_ref().is_some_and(expired) {
                continue;
            }
            let Ok(log) = self.log() else { break };
            let (gate, term, tombstone_id) = (self.term.clone(), entry.term, id.clone());
            match blocking(move || log.append(&gate, term, &tombstone_id, None, now_ms))
                .await
                .and_then(|r| r.map_err(TxnError::from))
            {
                Ok(()) => {
                    *entry.meta() = None;
                    self.txns().remove(&id);
                    removed += 1;
                }
                Err(e) => {
                    tracing::warn!(transactional_id = %id, error = %e, "removing an expired transactional id failed")
                }
            }
        }
        if removed > 0 {
            tracing::info!(removed, "expired transactional ids removed");
        }
        removed
    }

    /// The periodic work: abort timed-out transactions, retry prepared ones.
    pub async fn tick(&self, now_ms: i64) {
        if self.check_active().is_err() {
            return;
        }
        self.abort_timed_out(now_ms).await;
        self.complete_prepared().await;
    }

    /// The metadata of `transactional_id`, if the coordinator knows it (DescribeTransactions).
    pub fn describe(&self, transactional_id: &str) -> Option<TransactionMetadata> {
        self.entry(transactional_id).and_then(|e| e.current())
    }

    /// Every known transaction whose state is in `states` (all if empty) and
    /// whose producer id is in `producer_ids` (all if empty) (ListTransactions).
    pub fn list(
        &self,
        states: &BTreeSet<TransactionState>,
        producer_ids: &BTreeSet<i64>,
    ) -> Vec<ListedTransaction> {
        let mut out: Vec<ListedTransaction> = self
            .txns()
            .values()
            .filter_map(|e| e.current())
            .filter(|m| {
                (states.is_empty() || states.contains(&m.state))
                    && (producer_ids.is_empty() || producer_ids.contains(&m.producer_id))
            })
            .map(|m| ListedTransaction {
                transactional_id: m.transactional_id,
                producer_id: m.producer_id,
                state: m.state,
            })
            .collect();
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        out
    }
}

async fn blocking_alloc(c: &TransactionCoordinator) -> Result<i64, TxnError> {
    // The block file write inside is an fsync once per 1000 ids.
    let logs = c.logs.clone();
    blocking(move || logs.producer_ids().init_producer_id(-1, -1).map(|(id, _)| id))
        .await?
        .map_err(|e| TxnError::ProducerIdAllocation(e.to_string()))
}

/// A crash point: with the `failpoints` feature, `FAILPOINTS=name=return(abort)`
/// kills the process here. Any other injected error is only logged: these
/// points sit between durable steps, where nothing can fail but the process.
fn crash_point(name: &str) {
    if let Err(e) = floe_storage::failpoint::check(name) {
        tracing::warn!(failpoint = name, error = %e, "failpoint fired");
    }
}
