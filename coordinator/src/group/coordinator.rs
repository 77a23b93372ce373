//! `GroupCoordinator`: every group of this broker, the timers that drive them,
//! administration (list, describe, delete) and the group metadata it persists
//! through the [`OffsetStore`].
//!
//! One `GroupCoordinator` owns the groups of one `__consumer_offsets` partition (the
//! groups whose id hashes to it: see [`crate::partitioned`]); [`GroupCoordinators`]
//! holds one per partition. A single broker coordinates every partition from startup
//! ([`GroupCoordinator::load`]). In a cluster a broker coordinates a partition's groups
//! while it leads that partition: the broker
//! calls [`GroupCoordinator::elect`] when it becomes the leader, which reloads the
//! groups from the replicated log, and [`GroupCoordinator::resign`] when it stops;
//! between terms every group request gets NOT_COORDINATOR, and a client looks the
//! coordinator up again. Writes carry the term they were made in and are
//! acknowledged once the in-sync replicas have them (see [`crate::replicated`]).
//!
//! Committed offsets — OffsetCommit, TxnOffsetCommit and the offsets pending
//! in open transactions, OffsetFetch, OffsetDelete, expiry — are in the child
//! module `offsets` (`coordinator/offsets.rs`), as Kafka keeps its
//! `OffsetMetadataManager` apart from the `GroupMetadataManager`. It is a
//! child, not a sibling, because both halves work on the same group map and
//! locks: an `impl GroupCoordinator` block there reaches them without making
//! them visible to the rest of the crate.
//!
//! # Locking
//! The group map is a `std::sync::RwLock`; each group is a
//! `std::sync::Mutex<Group>`. Critical sections are short, run no I/O and
//! never `.await`: a JoinGroup or SyncGroup that must wait registers a
//! `oneshot` under the lock and awaits it after releasing the lock; writes to
//! the log are queued (a non-blocking channel send) and their callbacks take
//! the group lock on the writer thread. So a tokio worker never blocks on a
//! lock held across a suspension point, and the std mutex is cheaper than an
//! async one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use floe_storage::LogManager;
use kafka_protocol::error::ResponseError;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::consumer_group::{ConsumerGroup, ConsumerGroupConfig, Heartbeat, HeartbeatResult};
use super::group::{Group, GroupConfig, JoinRequest};
use super::outcome::{JoinResult, Outcome, SyncResult};
use super::records::{self, LogEntry};
use super::state::GroupState;
use super::store::{self, Compacted, CompactionConfig, LiveRecords, OffsetStore, StoreError};
use super::summary::GroupSummary;
use crate::clock::wall_ms;
use crate::partitioned::Partitioned;
use crate::replicated::{CoordinatorTerm, ReplicatedWrites};

/// The group coordinators of every `__consumer_offsets` partition.
pub type GroupCoordinators = Partitioned<GroupCoordinator>;

mod offsets;

use offsets::PendingTxnOffset;
pub use offsets::TopicOffsets;

const LOADING: u8 = 0;
const ACTIVE: u8 = 1;
const FAILED: u8 = 2;
/// A cluster broker between terms: not the coordinator.
const INACTIVE: u8 = 3;

/// How often session, join and sync deadlines are checked.
pub const TICK: Duration = Duration::from_millis(100);

/// Settings of the coordinator: the state machine's plus offset retention.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// Rebalance settings.
    pub group: GroupConfig,
    /// `offsets.retention.minutes`, as a duration.
    pub offsets_retention: Duration,
    /// `offsets.retention.check.interval.ms`.
    pub offsets_retention_check_interval: Duration,
    /// When `__consumer_offsets` is compacted.
    pub compaction: CompactionConfig,
    /// Consumer group protocol (KIP-848) settings.
    pub consumer: ConsumerGroupConfig,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        Self {
            group: GroupConfig::default(),
            offsets_retention: Duration::from_secs(10080 * 60),
            offsets_retention_check_interval: Duration::from_millis(600_000),
            compaction: CompactionConfig::default(),
            consumer: ConsumerGroupConfig::default(),
        }
    }
}

/// One group as ListGroups reports it.
#[derive(Debug, Clone)]
pub struct ListedGroup {
    /// Group id.
    pub group_id: String,
    /// Protocol type, or empty.
    pub protocol_type: String,
    /// State.
    pub state: GroupState,
    /// The state's name (a consumer group's own).
    pub state_name: &'static str,
    /// "classic" or "consumer".
    pub group_type: &'static str,
}

type GroupRef = Arc<Mutex<Group>>;

fn lock(g: &Mutex<Group>) -> MutexGuard<'_, Group> {
    g.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The group coordinator. Thread-safe; share it in an `Arc`.
#[derive(Debug)]
pub struct GroupCoordinator {
    config: CoordinatorConfig,
    /// The `__consumer_offsets` partition whose groups this coordinator owns.
    partition: i32,
    /// When offsets were last expired (the sweep's own clock).
    last_expiry: Mutex<Instant>,
    groups: RwLock<HashMap<String, GroupRef>>,
    status: AtomicU8,
    logs: Arc<LogManager>,
    store: OffsetStore,
    /// Offsets committed in open transactions (TxnOffsetCommit), by producer
    /// id: durable in the log, applied to their groups at the COMMIT marker.
    pending_txn: Mutex<HashMap<i64, Vec<PendingTxnOffset>>>,
    /// The term this broker coordinates in (always 0 on a single broker).
    term: Arc<CoordinatorTerm>,
    /// Serializes elections and resignations (a load runs under it).
    terms: tokio::sync::Mutex<()>,
}

impl GroupCoordinator {
    /// A coordinator that answers COORDINATOR_LOAD_IN_PROGRESS until [`GroupCoordinator::load`] finishes.
    ///
    /// # Errors
    /// If the log writer thread cannot be started.
    pub fn new(config: CoordinatorConfig, logs: Arc<LogManager>) -> std::io::Result<Self> {
        Self::for_partition(config, logs, 0)
    }

    /// A single broker's coordinator of `partition`'s groups (see [`GroupCoordinator::new`]).
    ///
    /// # Errors
    /// If the log writer thread cannot be started.
    pub fn for_partition(
        config: CoordinatorConfig,
        logs: Arc<LogManager>,
        partition: i32,
    ) -> std::io::Result<Self> {
        Self::with_term(config, logs, partition, CoordinatorTerm::single(), LOADING)
    }

    /// A cluster broker's coordinator: NOT_COORDINATOR until [`GroupCoordinator::elect`];
    /// its writes pass `writes` (leadership check, then the wait for the in-sync replicas).
    ///
    /// # Errors
    /// If the log writer thread cannot be started.
    pub fn replicated(
        config: CoordinatorConfig,
        logs: Arc<LogManager>,
        partition: i32,
        writes: Arc<dyn ReplicatedWrites>,
    ) -> std::io::Result<Self> {
        Self::with_term(config, logs, partition, CoordinatorTerm::replicated(writes), INACTIVE)
    }

    fn with_term(
        config: CoordinatorConfig,
        logs: Arc<LogManager>,
        partition: i32,
        term: CoordinatorTerm,
        status: u8,
    ) -> std::io::Result<Self> {
        let term = Arc::new(term);
        let store = OffsetStore::start(logs.clone(), partition, config.compaction, term.clone())?;
        Ok(Self {
            config,
            partition,
            last_expiry: Mutex::new(Instant::now()),
            groups: RwLock::new(HashMap::new()),
            status: AtomicU8::new(status),
            logs,
            store,
            pending_txn: Mutex::new(HashMap::new()),
            term,
            terms: tokio::sync::Mutex::new(()),
        })
    }

    /// The `__consumer_offsets` partition this coordinator owns.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The leader epoch of the current term: 0 on a single broker, -1 between terms.
    pub fn term_epoch(&self) -> i32 {
        self.term.epoch()
    }

    /// Becomes the coordinator for the term of `leader_epoch` (this broker now leads
    /// this coordinator's `__consumer_offsets` partition): forgets what it held,
    /// replays the replicated log to its end, then answers. Requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS. A term
    /// that ends during the load is left inactive.
    ///
    /// # Errors
    /// [`StoreError`] if the log is missing or cannot be read (requests then get
    /// COORDINATOR_NOT_AVAILABLE until the next election).
    pub async fn elect(self: &Arc<Self>, leader_epoch: i32) -> Result<(), StoreError> {
        let _serial = self.terms.lock().await;
        self.term.begin(leader_epoch);
        self.status.store(LOADING, Ordering::Release);
        self.unload(ResponseError::NotCoordinator);
        let started = std::time::Instant::now();
        let partition = self.partition;
        let loaded = self
            .replay(move |logs| {
                logs.partition(store::OFFSETS_TOPIC, partition).ok_or_else(|| {
                    StoreError::Storage(format!("this broker has no log of partition {partition}"))
                })
            })
            .await;
        if self.term.epoch() != leader_epoch {
            tracing::info!(partition, leader_epoch, "the coordinator's term ended while it loaded");
            return Ok(());
        }
        match loaded {
            Ok(records) => {
                self.status.store(ACTIVE, Ordering::Release);
                tracing::info!(
                    partition,
                    leader_epoch,
                    records,
                    groups = self.groups_read().len(),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "became the group coordinator of the partition: __consumer_offsets loaded"
                );
                Ok(())
            }
            Err(e) => {
                self.status.store(FAILED, Ordering::Release);
                tracing::error!(partition, leader_epoch, error = %e, "cannot load __consumer_offsets: the partition's group requests will fail until the next election");
                Err(e)
            }
        }
    }

    /// Stops answering at once (NOT_COORDINATOR): leadership is gone. Cheap; callable
    /// from anywhere. [`GroupCoordinator::resign`] then drops the state.
    pub fn fence(&self) {
        if self.term.is_replicated() {
            self.term.end();
            self.status.store(INACTIVE, Ordering::Release);
        }
    }

    /// Ends the term: NOT_COORDINATOR from now on, waiting joins and syncs answered
    /// so, the groups forgotten (the next coordinator loads them from the log).
    pub async fn resign(&self) {
        let _serial = self.terms.lock().await;
        if !self.term.is_replicated() {
            return;
        }
        let groups = self.groups_read().len();
        self.fence();
        self.unload(ResponseError::NotCoordinator);
        tracing::info!(
            partition = self.partition,
            groups,
            "no longer the group coordinator of the partition"
        );
    }

    /// Answers every waiting request with `error` and forgets every group.
    fn unload(&self, error: ResponseError) {
        let groups: Vec<GroupRef> =
            std::mem::take(&mut *self.groups_write()).into_values().collect();
        for g in groups {
            lock(&g).fail_waiters(error);
        }
        self.pending_txn.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }

    /// Creates `__consumer_offsets` if needed (one partition) and replays this
    /// coordinator's partition (on a blocking thread), then starts answering. A
    /// failure is logged and leaves the coordinator refusing group requests with
    /// COORDINATOR_NOT_AVAILABLE.
    pub async fn load(self: &Arc<Self>) -> Result<(), StoreError> {
        let started = std::time::Instant::now();
        let partition = self.partition;
        let loaded = self.replay(move |logs| store::open_log(logs, partition)).await;
        match loaded {
            Ok(records) => {
                self.status.store(ACTIVE, Ordering::Release);
                tracing::info!(
                    partition,
                    records,
                    groups = self.groups_read().len(),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "group coordinator loaded"
                );
                Ok(())
            }
            Err(e) => {
                self.status.store(FAILED, Ordering::Release);
                tracing::error!(partition, error = %e, "cannot load __consumer_offsets: the partition's group requests will fail");
                Err(e)
            }
        }
    }

    /// Replays the log `open` returns (on a blocking thread) into the groups, the
    /// pending transactional offsets and the writer's live state; the record count.
    async fn replay(
        self: &Arc<Self>,
        open: impl FnOnce(&LogManager) -> Result<Arc<floe_storage::PartitionLog>, StoreError>
            + Send
            + 'static,
    ) -> Result<u64, StoreError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let log = open(&this.logs)?;
            let mut live = LiveRecords::default();
            let (count, pending) = store::replay(&log, |entry| {
                live.apply(&entry);
                this.apply_loaded(entry);
            })?;
            this.restore_pending_txn(&pending);
            this.store.loaded(live, pending);
            Ok(count)
        })
        .await
        .unwrap_or_else(|e| Err(StoreError::Storage(format!("load task failed: {e}"))))
    }

    fn apply_loaded(&self, entry: LogEntry) {
        match entry {
            LogEntry::Offset { group, topic, partition, value } => {
                let g = self.group_or_create(&group);
                let mut g = lock(&g);
                match value {
                    Some(v) => g.offsets.insert((topic, partition), v),
                    None => g.offsets.remove(&(topic, partition)),
                };
            }
            LogEntry::Group { group, value: Some(meta) } => {
                let mut groups = self.groups_write();
                let offsets = groups
                    .remove(&group)
                    .map(|g| std::mem::take(&mut lock(&g).offsets))
                    .unwrap_or_default();
                let mut loaded = Group::loaded(&group, &meta, Instant::now());
                loaded.offsets = offsets;
                groups.insert(group, Arc::new(Mutex::new(loaded)));
            }
            LogEntry::Group { group, value: None } => {
                self.groups_write().remove(&group);
            }
        }
    }

    fn groups_read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, GroupRef>> {
        self.groups.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn groups_write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, GroupRef>> {
        self.groups.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn group(&self, id: &str) -> Option<GroupRef> {
        self.groups_read().get(id).cloned()
    }

    fn group_or_create(&self, id: &str) -> GroupRef {
        if let Some(g) = self.group(id) {
            return g;
        }
        self.groups_write()
            .entry(id.to_string())
            .or_insert_with(|| Arc::new(Mutex::new(Group::new(id))))
            .clone()
    }

    /// `Err` while loading or after a failed load, and between terms (NOT_COORDINATOR).
    pub fn check_active(&self) -> Result<(), ResponseError> {
        match self.status.load(Ordering::Acquire) {
            ACTIVE if self.term.epoch() != crate::replicated::NO_TERM => Ok(()),
            LOADING => Err(ResponseError::CoordinatorLoadInProgress),
            ACTIVE | INACTIVE => Err(ResponseError::NotCoordinator),
            _ => Err(ResponseError::CoordinatorNotAvailable),
        }
    }

    /// Queues the group's metadata if it changed. Called under the group's lock (never blocks).
    fn persist_if_dirty(&self, g: &mut Group) {
        if !g.metadata_dirty {
            return;
        }
        g.metadata_dirty = false;
        g.persisted = true;
        let record = (records::group_key(g.id()), Some(records::group_value(&g.metadata())));
        self.store.append(vec![record], Box::new(|_| {}));
    }

    /// Queues the group record of a step that waits for it (the leader's
    /// assignment, a static member's new id); once it is written or has
    /// failed, the writer thread hands the result back to the group, which
    /// answers the waiting requests. Called under the group's lock.
    fn write_pending(&self, g: &GroupRef, guard: &mut Group) {
        let Some((meta, pending)) = guard.take_pending_write() else { return };
        guard.persisted = true;
        let record = (records::group_key(guard.id()), Some(records::group_value(&meta)));
        let (target, cfg) = (g.clone(), self.config.group.clone());
        self.store.append(
            vec![record],
            Box::new(move |result| {
                let result = result.map_err(|e| e.response_error());
                lock(&target).write_done(pending, result, &cfg, Instant::now());
            }),
        );
    }

    /// Runs `f` on the group under its lock, then persists its metadata if `f`
    /// changed it, and queues the write of a step that waits for its record.
    fn with_group<T>(&self, g: &GroupRef, f: impl FnOnce(&mut Group) -> T) -> T {
        let mut guard = lock(g);
        let out = f(&mut guard);
        self.persist_if_dirty(&mut guard);
        self.write_pending(g, &mut guard);
        out
    }

    // ---- membership ------------------------------------------------------

    /// JoinGroup; waits for the rebalance when the answer is deferred.
    pub async fn join(&self, group_id: &str, req: JoinRequest) -> JoinResult {
        if let Err(e) = self.check_active() {
            return JoinResult::error(e, &req.member_id);
        }
        if group_id.is_empty() {
            return JoinResult::error(ResponseError::InvalidGroupId, &req.member_id);
        }
        let member_id = req.member_id.clone();
        let g = if member_id.is_empty() {
            self.group_or_create(group_id)
        } else {
            match self.group(group_id) {
                Some(g) => g,
                None => return JoinResult::error(ResponseError::UnknownMemberId, &member_id),
            }
        };
        let cfg = &self.config.group;
        match self.with_group(&g, |g| g.join(req, cfg, Instant::now())) {
            Outcome::Now(r) => r,
            // A closed channel: a later JoinGroup of the same member replaced this one.
            Outcome::Wait(rx) => rx.await.unwrap_or_else(|_| {
                JoinResult::error(ResponseError::RebalanceInProgress, &member_id)
            }),
        }
    }

    /// SyncGroup; waits for the leader's assignment when needed.
    #[allow(clippy::too_many_arguments)]
    pub async fn sync(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncResult {
        if let Err(e) = self.check_active() {
            return SyncResult::error(e);
        }
        let Some(g) = self.group(group_id) else {
            return SyncResult::error(ResponseError::UnknownMemberId);
        };
        let outcome = self.with_group(&g, |g| {
            g.sync(
                member_id,
                instance_id,
                generation,
                protocol_type,
                protocol_name,
                assignments,
                Instant::now(),
            )
        });
        match outcome {
            Outcome::Now(r) => r,
            Outcome::Wait(rx) => {
                rx.await.unwrap_or_else(|_| SyncResult::error(ResponseError::RebalanceInProgress))
            }
        }
    }

    /// Heartbeat.
    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Option<ResponseError> {
        if let Err(e) = self.check_active() {
            return Some(e);
        }
        let Some(g) = self.group(group_id) else {
            return Some(ResponseError::UnknownMemberId);
        };
        self.with_group(&g, |g| g.heartbeat(member_id, instance_id, generation, Instant::now()))
    }

    /// LeaveGroup: one result per member, in order.
    pub fn leave(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        self.check_active()?;
        let Some(g) = self.group(group_id) else {
            return Ok(members.iter().map(|_| Some(ResponseError::UnknownMemberId)).collect());
        };
        let cfg = &self.config.group;
        Ok(self.with_group(&g, |g| {
            members
                .iter()
                .map(|(id, instance)| g.leave(id, instance.as_deref(), cfg, Instant::now()))
                .collect()
        }))
    }

    // ---- administration ------------------------------------------------------

    /// ListGroups (every group, including empty ones holding offsets).
    pub fn list_groups(&self) -> Result<Vec<ListedGroup>, ResponseError> {
        self.check_active()?;
        let groups: Vec<GroupRef> = self.groups_read().values().cloned().collect();
        let mut out: Vec<ListedGroup> = groups
            .iter()
            .map(|g| {
                let g = lock(g);
                match &g.consumer {
                    Some(c) => ListedGroup {
                        group_id: g.id().to_string(),
                        protocol_type: "consumer".into(),
                        state: g.state(),
                        state_name: c.state_name(),
                        group_type: "consumer",
                    },
                    None => ListedGroup {
                        group_id: g.id().to_string(),
                        protocol_type: g.protocol_type().to_string(),
                        state: g.state(),
                        state_name: g.state().name(),
                        group_type: "classic",
                    },
                }
            })
            .filter(|l| l.state != GroupState::Dead)
            .collect();
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(out)
    }

    /// DescribeGroups of one group; `None` if it does not exist.
    pub fn describe_group(&self, group_id: &str) -> Result<Option<GroupSummary>, ResponseError> {
        self.check_active()?;
        Ok(self.group(group_id).map(|g| lock(&g).summary()))
    }

    /// DeleteGroups of one group: only empty groups; writes tombstones for it and its offsets.
    pub async fn delete_group(&self, group_id: &str) -> Result<(), ResponseError> {
        self.check_active()?;
        let g = self.group(group_id).ok_or(ResponseError::GroupIdNotFound)?;
        let offsets = {
            let mut guard = lock(&g);
            match guard.state() {
                GroupState::Dead => return Err(ResponseError::GroupIdNotFound),
                GroupState::Empty if !guard.has_pending_members() && guard.member_count() == 0 => {}
                _ => return Err(ResponseError::NonEmptyGroup),
            }
            guard.mark_dead();
            guard.offsets.keys().cloned().collect::<Vec<_>>()
        };
        self.groups_write().remove(group_id);
        tracing::info!(group = group_id, "group deleted");
        self.write_tombstones(&g, group_id, offsets, true).await
    }

    /// Compacts `__consumer_offsets` now (the writer thread also does it on its own
    /// when the log outgrows its live state). `None` before the log is loaded.
    pub async fn compact_offsets_log(&self) -> Result<Option<Compacted>, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.store.compact(Box::new(move |r| {
            let _ = tx.send(r);
        }));
        rx.await.unwrap_or_else(|_| Err(StoreError::Storage("the writer thread is gone".into())))
    }

    // ---- timers ----------------------------------------------------------------

    /// One sweep while active: the deadlines, and offset expiry when its interval passed.
    pub fn sweep(&self) {
        if self.check_active().is_err() {
            return;
        }
        self.tick(Instant::now());
        let expire = {
            let mut last = self.last_expiry.lock().unwrap_or_else(PoisonError::into_inner);
            let due = last.elapsed() >= self.config.offsets_retention_check_interval;
            if due {
                *last = Instant::now();
            }
            due
        };
        if expire {
            self.expire_offsets(wall_ms());
        }
    }

    /// One pass of the deadlines over every group.
    pub fn tick(&self, now: Instant) {
        let groups: Vec<GroupRef> = self.groups_read().values().cloned().collect();
        let mut topics = None;
        for g in groups {
            self.with_group(&g, |g| {
                g.tick(&self.config.group, now);
                if let Some(c) = g.consumer.as_mut().filter(|c| !c.is_empty()) {
                    c.tick(
                        topics.get_or_insert_with(|| self.topic_partitions()),
                        &self.config.consumer,
                        now,
                    );
                }
            });
        }
    }

    // ---- consumer group protocol (KIP-848) ----------------------------------

    /// Partition counts of every topic but the internal one.
    fn topic_partitions(&self) -> std::collections::BTreeMap<String, i32> {
        self.logs
            .topics()
            .into_iter()
            .filter(|t| {
                t.name() != store::OFFSETS_TOPIC
                    && t.name() != crate::transaction::TRANSACTION_STATE_TOPIC
            })
            .map(|t| (t.name().to_string(), t.partition_count()))
            .collect()
    }

    /// The consumer group settings.
    pub fn consumer_config(&self) -> &ConsumerGroupConfig {
        &self.config.consumer
    }

    /// ConsumerGroupHeartbeat. A group id held by classic members is not
    /// found (as in Kafka); an empty classic group becomes a consumer group.
    pub fn consumer_heartbeat(
        &self,
        group_id: &str,
        hb: Heartbeat,
    ) -> Result<HeartbeatResult, ResponseError> {
        self.check_active()?;
        if group_id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        if hb.subscribed_topic_regex.is_some() {
            return Err(ResponseError::InvalidRegularExpression);
        }
        let g = if hb.member_epoch == 0 {
            self.group_or_create(group_id)
        } else {
            self.group(group_id).ok_or(ResponseError::GroupIdNotFound)?
        };
        let topics = self.topic_partitions();
        let mut g = lock(&g);
        if g.state() == GroupState::Dead
            || g.member_count() > 0 && g.consumer.is_none()
            || g.has_pending_members()
        {
            return Err(ResponseError::GroupIdNotFound);
        }
        if g.consumer.is_none() {
            if hb.member_epoch != 0 {
                return Err(ResponseError::GroupIdNotFound);
            }
            g.consumer = Some(ConsumerGroup::default());
        }
        let c = g.consumer.as_mut().expect("set above");
        c.heartbeat(hb, &topics, &self.config.consumer, Instant::now())
    }

    /// ConsumerGroupDescribe: a snapshot of the group, GROUP_ID_NOT_FOUND if
    /// it does not exist or is not a consumer group.
    pub fn describe_consumer_group(&self, group_id: &str) -> Result<ConsumerGroup, ResponseError> {
        self.check_active()?;
        let g = self.group(group_id).ok_or(ResponseError::GroupIdNotFound)?;
        let g = lock(&g);
        g.consumer.clone().ok_or(ResponseError::GroupIdNotFound)
    }

    /// Answers every waiting request (the broker is stopping).
    pub fn shutdown(&self) {
        let groups: Vec<GroupRef> = self.groups_read().values().cloned().collect();
        for g in groups {
            lock(&g).fail_waiters(ResponseError::CoordinatorNotAvailable);
        }
    }
}

#[cfg(test)]
#[path = "coordinator_tests.rs"]
mod tests;
