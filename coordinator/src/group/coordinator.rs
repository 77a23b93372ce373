//! `GroupCoordinator`: every group of this broker (the coordinator of all of
//! them, as Floe is one node), the timers that drive them, committed offsets
//! and their durability through the [`OffsetStore`].
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
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use super::consumer_group::{ConsumerGroup, ConsumerGroupConfig, Heartbeat, HeartbeatResult};
use super::group::{Group, GroupConfig, JoinRequest};
use super::outcome::{JoinResult, Outcome, SyncResult};
use super::records::{self, LogEntry, OffsetAndMetadata};
use super::state::GroupState;
use super::store::{self, Compacted, CompactionConfig, LiveRecords, LogRecord, OffsetStore, StoreError};
use super::summary::GroupSummary;
use crate::clock::wall_ms;

const LOADING: u8 = 0;
const ACTIVE: u8 = 1;
const FAILED: u8 = 2;

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

/// Committed offsets of one topic: (partition, offset or `None`).
pub type TopicOffsets = (String, Vec<(i32, Option<OffsetAndMetadata>)>);

type GroupRef = Arc<Mutex<Group>>;

fn lock(g: &Mutex<Group>) -> MutexGuard<'_, Group> {
    g.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The group coordinator. Thread-safe; share it in an `Arc`.
#[derive(Debug)]
pub struct GroupCoordinator {
    config: CoordinatorConfig,
    groups: RwLock<HashMap<String, GroupRef>>,
    status: AtomicU8,
    logs: Arc<LogManager>,
    store: OffsetStore,
    /// Offsets committed in open transactions (TxnOffsetCommit), by producer
    /// id: durable in the log, applied to their groups at the COMMIT marker.
    pending_txn: Mutex<HashMap<i64, Vec<PendingTxnOffset>>>,
}

/// One offset committed in a transaction that has not ended.
#[derive(Debug, Clone)]
struct PendingTxnOffset {
    group: String,
    topic: String,
    partition: i32,
    offset: OffsetAndMetadata,
}

impl PendingTxnOffset {
    /// The pending offset a replayed entry is (`None` for a tombstone or group record).
    fn of(entry: &LogEntry) -> Option<Self> {
        match entry {
            LogEntry::Offset { group, topic, partition, value: Some(offset) } => {
                Some(Self { group: group.clone(), topic: topic.clone(), partition: *partition, offset: offset.clone() })
            }
            _ => None,
        }
    }
}

impl GroupCoordinator {
    /// A coordinator that answers COORDINATOR_LOAD_IN_PROGRESS until [`GroupCoordinator::load`] finishes.
    ///
    /// # Errors
    /// If the log writer thread cannot be started.
    pub fn new(config: CoordinatorConfig, logs: Arc<LogManager>) -> std::io::Result<Self> {
        let store = OffsetStore::start(logs.clone(), config.compaction)?;
        Ok(Self {
            config,
            groups: RwLock::new(HashMap::new()),
            status: AtomicU8::new(LOADING),
            logs,
            store,
            pending_txn: Mutex::new(HashMap::new()),
        })
    }

    /// Creates `__consumer_offsets` if needed and replays it (on a blocking
    /// thread), then starts answering. A failure is logged and leaves the
    /// coordinator refusing group requests with COORDINATOR_NOT_AVAILABLE.
    pub async fn load(self: &Arc<Self>) -> Result<(), StoreError> {
        let this = self.clone();
        let started = std::time::Instant::now();
        let loaded = tokio::task::spawn_blocking(move || {
            let log = store::open_log(&this.logs)?;
            let mut live = LiveRecords::default();
            let (count, pending) = store::replay(&log, |entry| {
                live.apply(&entry);
                this.apply_loaded(entry);
            })?;
            let open: HashMap<i64, Vec<PendingTxnOffset>> = pending
                .iter()
                .map(|(pid, entries)| (*pid, entries.iter().filter_map(PendingTxnOffset::of).collect()))
                .collect();
            if !open.is_empty() {
                tracing::info!(producers = open.len(), "transactional offset commits awaiting their markers");
            }
            *this.pending_txn.lock().unwrap_or_else(PoisonError::into_inner) = open;
            this.store.loaded(live, pending);
            Ok(count)
        })
        .await
        .unwrap_or_else(|e| Err(StoreError::Storage(format!("load task failed: {e}"))));
        match loaded {
            Ok(records) => {
                self.status.store(ACTIVE, Ordering::Release);
                tracing::info!(records, groups = self.groups_read().len(), elapsed_ms = started.elapsed().as_millis() as u64,
                    "group coordinator loaded");
                Ok(())
            }
            Err(e) => {
                self.status.store(FAILED, Ordering::Release);
                tracing::error!(error = %e, "cannot load __consumer_offsets: group requests will fail");
                Err(e)
            }
        }
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
                let offsets = groups.remove(&group).map(|g| std::mem::take(&mut lock(&g).offsets)).unwrap_or_default();
                let mut loaded = Group::loaded(&group, &meta);
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

    /// The group an (transactional) offset commit goes to, once the member
    /// may commit: created for a commit that names no member.
    fn group_for_commit(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        transactional: bool,
    ) -> Result<GroupRef, ResponseError> {
        self.check_active()?;
        if group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        let g = if member_id.is_empty() && generation < 0 {
            self.group_or_create(group_id)
        } else {
            self.group(group_id).ok_or(ResponseError::IllegalGeneration)?
        };
        lock(&g).validate_commit(member_id, instance_id, generation, transactional)?;
        Ok(g)
    }

    fn group_or_create(&self, id: &str) -> GroupRef {
        if let Some(g) = self.group(id) {
            return g;
        }
        self.groups_write().entry(id.to_string()).or_insert_with(|| Arc::new(Mutex::new(Group::new(id)))).clone()
    }

    /// `Err` while loading or after a failed load.
    pub fn check_active(&self) -> Result<(), ResponseError> {
        match self.status.load(Ordering::Acquire) {
            ACTIVE => Ok(()),
            LOADING => Err(ResponseError::CoordinatorLoadInProgress),
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

    /// Runs `f` on the group under its lock, then persists its metadata if `f` changed it.
    fn with_group<T>(&self, g: &GroupRef, f: impl FnOnce(&mut Group) -> T) -> T {
        let mut guard = lock(g);
        let out = f(&mut guard);
        self.persist_if_dirty(&mut guard);
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
            Outcome::Wait(rx) => rx.await.unwrap_or_else(|_| JoinResult::error(ResponseError::RebalanceInProgress, &member_id)),
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
            g.sync(member_id, instance_id, generation, protocol_type, protocol_name, assignments, Instant::now())
        });
        match outcome {
            Outcome::Now(r) => r,
            Outcome::Wait(rx) => rx.await.unwrap_or_else(|_| SyncResult::error(ResponseError::RebalanceInProgress)),
        }
    }

    /// Heartbeat.
    pub fn heartbeat(&self, group_id: &str, member_id: &str, instance_id: Option<&str>, generation: i32) -> Option<ResponseError> {
        if let Err(e) = self.check_active() {
            return Some(e);
        }
        let Some(g) = self.group(group_id) else {
            return Some(ResponseError::UnknownMemberId);
        };
        self.with_group(&g, |g| g.heartbeat(member_id, instance_id, generation, Instant::now()))
    }

    /// LeaveGroup: one result per member, in order.
    pub fn leave(&self, group_id: &str, members: &[(String, Option<String>)]) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        self.check_active()?;
        let Some(g) = self.group(group_id) else {
            return Ok(members.iter().map(|_| Some(ResponseError::UnknownMemberId)).collect());
        };
        let cfg = &self.config.group;
        Ok(self.with_group(&g, |g| {
            members.iter().map(|(id, instance)| g.leave(id, instance.as_deref(), cfg, Instant::now())).collect()
        }))
    }

    // ---- offsets -----------------------------------------------------------

    /// OffsetCommit of already-validated partitions; waits until they are durable.
    pub async fn commit_offsets(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        offsets: Vec<(String, i32, OffsetAndMetadata)>,
    ) -> Result<(), ResponseError> {
        let g = self.group_for_commit(group_id, member_id, instance_id, generation, false)?;
        if offsets.is_empty() {
            return Ok(());
        }
        let records: Vec<LogRecord> = offsets
            .iter()
            .map(|(t, p, o)| (records::offset_key(group_id, t, *p), Some(records::offset_value(o))))
            .collect();
        let (tx, rx) = oneshot::channel();
        let target = g.clone();
        self.store.append(
            records,
            Box::new(move |result| {
                if result.is_ok() {
                    let mut g = lock(&target);
                    for (t, p, o) in offsets {
                        g.offsets.insert((t, p), o);
                    }
                }
                let _ = tx.send(result);
            }),
        );
        match rx.await {
            Ok(Ok(())) => Ok(()),
            _ => Err(ResponseError::UnknownServerError),
        }
    }

    /// TxnOffsetCommit of already-validated partitions: written to the log
    /// as a transactional batch of `producer` (id, epoch), durable when this
    /// returns, and visible to OffsetFetch only once the transaction commits
    /// ([`GroupCoordinator::complete_txn`]). Member and generation are checked
    /// when given (KIP-447), as for OffsetCommit.
    pub async fn txn_commit_offsets(
        &self,
        group_id: &str,
        producer: (i64, i16),
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        offsets: Vec<(String, i32, OffsetAndMetadata)>,
    ) -> Result<(), ResponseError> {
        self.group_for_commit(group_id, member_id, instance_id, generation, true)?;
        if offsets.is_empty() {
            return Ok(());
        }
        let records: Vec<LogRecord> = offsets
            .iter()
            .map(|(t, p, o)| (records::offset_key(group_id, t, *p), Some(records::offset_value(o))))
            .collect();
        let (tx, rx) = oneshot::channel();
        self.store.append_transactional(
            records,
            producer,
            Box::new(move |result| {
                let _ = tx.send(result);
            }),
        );
        match rx.await {
            Ok(Ok(())) => {
                let mut pending = self.pending_txn.lock().unwrap_or_else(PoisonError::into_inner);
                let entries = pending.entry(producer.0).or_default();
                entries.extend(offsets.into_iter().map(|(topic, partition, offset)| PendingTxnOffset {
                    group: group_id.to_string(),
                    topic,
                    partition,
                    offset,
                }));
                Ok(())
            }
            _ => Err(ResponseError::UnknownServerError),
        }
    }

    /// Writes the transaction marker of `producer_id` to `__consumer_offsets`
    /// and, on COMMIT, makes its pending offsets the group's committed ones
    /// (on ABORT they are dropped). Blocking: the transaction coordinator's
    /// marker writer calls it off the request workers.
    ///
    /// # Errors
    /// What the log write reported.
    pub fn complete_txn(&self, producer_id: i64, producer_epoch: i16, commit: bool) -> Result<(), StoreError> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.store.marker(
            producer_id,
            producer_epoch,
            commit,
            Box::new(move |result| {
                let _ = tx.send(result);
            }),
        );
        rx.recv().unwrap_or_else(|_| Err(StoreError::Storage("the writer thread is gone".into())))?;
        let entries = self.pending_txn.lock().unwrap_or_else(PoisonError::into_inner).remove(&producer_id).unwrap_or_default();
        if commit {
            for e in entries {
                let g = self.group_or_create(&e.group);
                lock(&g).offsets.insert((e.topic, e.partition), e.offset);
            }
        }
        Ok(())
    }

    /// Whether `group_id` has an offset for `topic`-`partition` committed in
    /// a transaction that has not ended (OffsetFetch with `require_stable`
    /// answers UNSTABLE_OFFSET_COMMIT for it, KIP-447).
    pub fn has_pending_txn_offset(&self, group_id: &str, topic: &str, partition: i32) -> bool {
        let pending = self.pending_txn.lock().unwrap_or_else(PoisonError::into_inner);
        pending.values().flatten().any(|e| e.group == group_id && e.topic == topic && e.partition == partition)
    }

    /// OffsetFetch: `topics` `None` means every committed partition.
    pub fn fetch_offsets(&self, group_id: &str, topics: Option<Vec<(String, Vec<i32>)>>) -> Result<Vec<TopicOffsets>, ResponseError> {
        self.check_active()?;
        let g = self.group(group_id);
        let g = g.as_ref().map(|g| lock(g));
        let lookup = |t: &str, p: i32| g.as_ref().and_then(|g| g.offsets.get(&(t.to_string(), p)).cloned());
        Ok(match topics {
            Some(topics) => topics
                .into_iter()
                .map(|(t, parts)| {
                    let found = parts.iter().map(|&p| (p, lookup(&t, p))).collect();
                    (t, found)
                })
                .collect(),
            None => {
                let mut by_topic: std::collections::BTreeMap<String, Vec<(i32, Option<OffsetAndMetadata>)>> = Default::default();
                if let Some(g) = &g {
                    for ((t, p), o) in &g.offsets {
                        by_topic.entry(t.clone()).or_default().push((*p, Some(o.clone())));
                    }
                }
                by_topic
                    .into_iter()
                    .map(|(t, mut parts)| {
                        parts.sort_by_key(|(p, _)| *p);
                        (t, parts)
                    })
                    .collect()
            }
        })
    }

    /// OffsetDelete: per-partition results, or a group-level error.
    pub async fn delete_offsets(&self, group_id: &str, partitions: Vec<(String, i32)>) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        self.check_active()?;
        let g = self.group(group_id).ok_or(ResponseError::GroupIdNotFound)?;
        let (results, tombstones) = {
            let guard = lock(&g);
            let subscribed = guard.subscribed_topics();
            let mut results = Vec::with_capacity(partitions.len());
            let mut tombstones = Vec::new();
            for (t, p) in &partitions {
                if subscribed.as_ref().is_none_or(|s| s.contains(t)) && guard.member_count() > 0 {
                    results.push(Some(ResponseError::GroupSubscribedToTopic));
                } else {
                    results.push(None);
                    if guard.offsets.contains_key(&(t.clone(), *p)) {
                        tombstones.push((t.clone(), *p));
                    }
                }
            }
            (results, tombstones)
        };
        if !tombstones.is_empty() {
            self.write_tombstones(&g, group_id, tombstones, false).await?;
        }
        Ok(results)
    }

    /// Writes offset tombstones (and the group's, if `group_too`), then forgets them.
    async fn write_tombstones(&self, g: &GroupRef, group_id: &str, offsets: Vec<(String, i32)>, group_too: bool) -> Result<(), ResponseError> {
        let mut records: Vec<LogRecord> = offsets.iter().map(|(t, p)| (records::offset_key(group_id, t, *p), None)).collect();
        if group_too {
            records.push((records::group_key(group_id), None));
        }
        let (tx, rx) = oneshot::channel();
        let target = g.clone();
        self.store.append(
            records,
            Box::new(move |result| {
                if result.is_ok() {
                    let mut g = lock(&target);
                    for k in offsets {
                        g.offsets.remove(&k);
                    }
                }
                let _ = tx.send(result);
            }),
        );
        match rx.await {
            Ok(Ok(())) => Ok(()),
            _ => Err(ResponseError::UnknownServerError),
        }
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

    // ---- timers ----------------------------------------------------------------

    /// Starts the sweep (every [`TICK`]: sessions, join and sync deadlines;
    /// every `offsets.retention.check.interval.ms`: offset expiry). On
    /// shutdown it answers every waiting JoinGroup/SyncGroup with
    /// COORDINATOR_NOT_AVAILABLE so that connections can finish.
    pub fn start(self: &Arc<Self>, mut shutdown: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last_expiry = Instant::now();
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown.changed() => break,
                }
                if *shutdown.borrow() {
                    break;
                }
                if this.check_active().is_err() {
                    continue;
                }
                this.tick(Instant::now());
                if last_expiry.elapsed() >= this.config.offsets_retention_check_interval {
                    last_expiry = Instant::now();
                    this.expire_offsets(wall_ms());
                }
            }
            this.shutdown();
        })
    }

    /// One pass of the deadlines over every group.
    pub fn tick(&self, now: Instant) {
        let groups: Vec<GroupRef> = self.groups_read().values().cloned().collect();
        let mut topics = None;
        for g in groups {
            self.with_group(&g, |g| {
                g.tick(&self.config.group, now);
                if let Some(c) = g.consumer.as_mut().filter(|c| !c.is_empty()) {
                    c.tick(topics.get_or_insert_with(|| self.topic_partitions()), &self.config.consumer, now);
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
            .filter(|t| t.name() != store::OFFSETS_TOPIC && t.name() != crate::transaction::TRANSACTION_STATE_TOPIC)
            .map(|t| (t.name().to_string(), t.partition_count()))
            .collect()
    }

    /// The consumer group settings.
    pub fn consumer_config(&self) -> &ConsumerGroupConfig {
        &self.config.consumer
    }

    /// ConsumerGroupHeartbeat. A group id held by classic members is not
    /// found (as in Kafka); an empty classic group becomes a consumer group.
    pub fn consumer_heartbeat(&self, group_id: &str, hb: Heartbeat) -> Result<HeartbeatResult, ResponseError> {
        self.check_active()?;
        if group_id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        if hb.subscribed_topic_regex.is_some() {
            return Err(ResponseError::InvalidRegularExpression);
        }
        let g = if hb.member_epoch == 0 { self.group_or_create(group_id) } else { self.group(group_id).ok_or(ResponseError::GroupIdNotFound)? };
        let topics = self.topic_partitions();
        let mut g = lock(&g);
        if g.state() == GroupState::Dead || g.member_count() > 0 && g.consumer.is_none() || g.has_pending_members() {
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

    /// OffsetFetch v9+ from a consumer group member: Kafka checks its member id and epoch.
    pub fn validate_offset_fetch(&self, group_id: &str, member_id: &str, epoch: i32) -> Result<(), ResponseError> {
        let Some(g) = self.group(group_id) else { return Ok(()) };
        let g = lock(&g);
        match &g.consumer {
            Some(c) => c.validate_offset_request(member_id, epoch),
            None => Ok(()),
        }
    }

    /// Expires offsets of Empty groups older than `offsets.retention.minutes`
    /// (counted from the later of the commit and the group becoming empty),
    /// writing tombstones; removes empty groups left without offsets.
    pub fn expire_offsets(&self, now_ms: i64) {
        let retention_ms = self.config.offsets_retention.as_millis() as i64;
        let groups: Vec<GroupRef> = self.groups_read().values().cloned().collect();
        for g in groups {
            let mut guard = lock(&g);
            if guard.state() != GroupState::Empty || guard.has_pending_members() || guard.member_count() > 0 {
                continue;
            }
            let since = guard.state_since_ms;
            let expired: Vec<(String, i32)> = guard
                .offsets
                .iter()
                .filter(|(_, o)| now_ms - o.commit_timestamp.max(since) >= retention_ms)
                .map(|(k, _)| k.clone())
                .collect();
            let mut records: Vec<LogRecord> = expired.iter().map(|(t, p)| (records::offset_key(guard.id(), t, *p), None)).collect();
            for k in &expired {
                guard.offsets.remove(k);
            }
            let remove_group = guard.offsets.is_empty();
            if remove_group {
                if guard.persisted {
                    records.push((records::group_key(guard.id()), None));
                }
                guard.mark_dead();
                self.groups_write().remove(guard.id());
            }
            if !expired.is_empty() {
                tracing::info!(group = guard.id(), partitions = expired.len(), "expired committed offsets");
            }
            if !records.is_empty() {
                self.store.append(records, Box::new(|_| {}));
            }
        }
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
mod tests {
    use floe_storage::LogConfig;

    use super::*;

    fn open(dir: &std::path::Path) -> (Arc<LogManager>, Arc<GroupCoordinator>) {
        let logs = Arc::new(LogManager::open_with_node_id(dir, Some(1), LogConfig::default()).expect("open logs"));
        if logs.topic("t").is_none() {
            logs.create_topic("t", 3, Default::default()).expect("create t");
        }
        let c = Arc::new(GroupCoordinator::new(CoordinatorConfig::default(), logs.clone()).expect("coordinator"));
        (logs, c)
    }

    fn offset(o: i64, ts: i64) -> OffsetAndMetadata {
        OffsetAndMetadata { offset: o, leader_epoch: 0, metadata: format!("m{o}"), commit_timestamp: ts }
    }

    fn all(c: &GroupCoordinator, group: &str) -> Vec<TopicOffsets> {
        c.fetch_offsets(group, None).expect("fetch")
    }

    /// TxnOffsetCommit: pending until the marker, applied at COMMIT, dropped at ABORT,
    /// and an open transaction's offsets are still pending after a reopen (replay).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn transactional_offsets_apply_at_their_commit_marker_and_survive_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let now = wall_ms();
        let committed = |c: &GroupCoordinator, p: i32| {
            c.fetch_offsets("g", Some(vec![("t".into(), vec![p])])).expect("fetch")[0].1[0].1.as_ref().map(|o| o.offset)
        };
        {
            let (_logs, c) = open(dir.path());
            c.load().await.expect("load");
            c.commit_offsets("g", "", None, -1, vec![("t".into(), 0, offset(1, now))]).await.expect("plain commit");
            c.txn_commit_offsets("g", (10, 0), "", None, -1, vec![("t".into(), 0, offset(5, now))]).await.expect("txn commit");
            c.txn_commit_offsets("g", (10, 0), "", None, -1, vec![("t".into(), 1, offset(6, now))]).await.expect("txn commit 2");
            c.txn_commit_offsets("g", (11, 0), "", None, -1, vec![("t".into(), 2, offset(9, now))]).await.expect("other txn");
            assert_eq!(committed(&c, 0), Some(1), "pending offsets are not visible");
            assert!(c.has_pending_txn_offset("g", "t", 0));
            let c2 = c.clone();
            tokio::task::spawn_blocking(move || c2.complete_txn(10, 0, true)).await.expect("join").expect("commit marker");
            assert_eq!((committed(&c, 0), committed(&c, 1)), (Some(5), Some(6)));
            assert!(!c.has_pending_txn_offset("g", "t", 0));
            assert!(c.has_pending_txn_offset("g", "t", 2), "producer 11's transaction is still open");
        }
        let (_logs, c) = open(dir.path());
        c.load().await.expect("reload");
        assert_eq!((committed(&c, 0), committed(&c, 1), committed(&c, 2)), (Some(5), Some(6), None));
        assert!(c.has_pending_txn_offset("g", "t", 2), "the open transaction's offsets are pending again");
        let c2 = c.clone();
        tokio::task::spawn_blocking(move || c2.complete_txn(11, 0, false)).await.expect("join").expect("abort marker");
        assert_eq!(committed(&c, 2), None, "aborted offsets vanish");
        assert!(!c.has_pending_txn_offset("g", "t", 2));
    }

    #[tokio::test]
    async fn offsets_and_groups_survive_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let before;
        {
            let (logs, c) = open(dir.path());
            assert_eq!(c.check_active(), Err(ResponseError::CoordinatorLoadInProgress));
            assert!(c.commit_offsets("a", "", None, -1, vec![("t".into(), 0, offset(1, 5))]).await.is_err());
            c.load().await.expect("load");
            let now = wall_ms();
            c.commit_offsets("a", "", None, -1, vec![("t".into(), 0, offset(1, now)), ("t".into(), 1, offset(2, now))]).await.expect("commit");
            c.commit_offsets("a", "", None, -1, vec![("t".into(), 0, offset(7, now))]).await.expect("recommit");
            c.commit_offsets("b", "", None, -1, vec![("t".into(), 2, offset(3, now))]).await.expect("commit b");
            c.commit_offsets("gone", "", None, -1, vec![("t".into(), 2, offset(3, now))]).await.expect("commit gone");
            assert_eq!(c.delete_offsets("b", vec![("t".into(), 2)]).await, Ok(vec![None]));
            c.delete_group("gone").await.expect("delete group");
            // A consumer group that reached Stable: its metadata is persisted too.
            let req = JoinRequest {
                member_id: String::new(),
                instance_id: None,
                client_id: "c".into(),
                client_host: "h".into(),
                session_timeout_ms: 10_000,
                rebalance_timeout_ms: 10_000,
                protocol_type: "consumer".into(),
                protocols: vec![("range".into(), Bytes::new())],
                require_known_member_id: false,
            };
            let mut cfg = c.config.clone();
            cfg.group.initial_rebalance_delay = Duration::ZERO;
            let c0 = Arc::new(GroupCoordinator { config: cfg, ..GroupCoordinator::new(CoordinatorConfig::default(), logs.clone()).expect("c") });
            c0.status.store(ACTIVE, Ordering::Release);
            let j = c0.join("s", req).await;
            let s = c0.sync("s", &j.member_id, None, j.generation, None, None, vec![]).await;
            assert_eq!((j.error, s.error), (None, None));
            c0.commit_offsets("s", &j.member_id, None, j.generation, vec![("t".into(), 1, offset(9, now))]).await.expect("member commit");
            drop(c0);
            before = (all(&c, "a"), all(&c, "b"));
            assert_eq!(before.0.len(), 1);
            assert_eq!(before.0[0].1.iter().map(|(p, o)| (*p, o.as_ref().map(|o| o.offset))).collect::<Vec<_>>(), vec![(0, Some(7)), (1, Some(2))]);
            assert!(before.1.is_empty());
            logs.shutdown().expect("shutdown");
        }
        let (_logs, c) = open(dir.path());
        c.load().await.expect("reload");
        assert_eq!((all(&c, "a"), all(&c, "b")), before);
        assert!(all(&c, "gone").is_empty());
        let listed: Vec<String> = c.list_groups().expect("list").into_iter().map(|g| g.group_id).collect();
        assert_eq!(listed, vec!["a", "b", "s"]);
        let s = c.describe_group("s").expect("describe").expect("s exists");
        assert_eq!((s.state, s.protocol_type.as_str()), (GroupState::Empty, "consumer"));
        assert_eq!(all(&c, "s")[0].1[0].1.as_ref().map(|o| o.offset), Some(9));
        // The group remembers its generation: a member of the old generation must rejoin.
        assert!(c.heartbeat("s", "old-member", None, 1).is_some());
    }

    #[tokio::test]
    async fn offsets_of_empty_groups_expire_with_tombstones() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (logs, c) = open(dir.path());
            c.load().await.expect("load");
            let now = wall_ms();
            c.commit_offsets("old", "", None, -1, vec![("t".into(), 0, offset(1, now - 1000))]).await.expect("commit");
            c.commit_offsets("new", "", None, -1, vec![("t".into(), 0, offset(1, now + 10_000_000))]).await.expect("commit");
            c.expire_offsets(now + c.config.offsets_retention.as_millis() as i64 + 60_000);
            assert!(all(&c, "old").is_empty());
            assert_eq!(all(&c, "new").len(), 1);
            let listed: Vec<String> = c.list_groups().expect("list").into_iter().map(|g| g.group_id).collect();
            assert_eq!(listed, vec!["new"]);
            // Let the writer thread persist the tombstones.
            c.commit_offsets("sync", "", None, -1, vec![("t".into(), 0, offset(1, now))]).await.expect("barrier");
            logs.shutdown().expect("shutdown");
        }
        let (_logs, c) = open(dir.path());
        c.load().await.expect("reload");
        assert!(all(&c, "old").is_empty());
        assert_eq!(all(&c, "new").len(), 1);
    }

    /// Queues `n` commits of t-0 for `group` straight to the store (grouped
    /// writes, not one fsync each), then one commit through the coordinator as a barrier.
    async fn commit_many(c: &GroupCoordinator, group: &str, n: i64) {
        let now = wall_ms();
        for i in 0..n {
            let rec = (records::offset_key(group, "t", 0), Some(records::offset_value(&offset(i, now))));
            c.store.append(vec![rec], Box::new(|_| {}));
        }
        c.commit_offsets(group, "", None, -1, vec![("t".into(), 0, offset(n, now))]).await.expect("barrier");
    }

    fn offsets_log(logs: &LogManager) -> Arc<floe_storage::PartitionLog> {
        logs.partition(store::OFFSETS_TOPIC, 0).expect("offsets log")
    }

    /// A state with offsets, a tombstoned offset, a deleted group and group metadata.
    async fn varied_state(c: &GroupCoordinator) {
        let now = wall_ms();
        commit_many(c, "a", 10_000).await;
        c.commit_offsets("a", "", None, -1, vec![("t".into(), 1, offset(2, now))]).await.expect("a-1");
        c.commit_offsets("b", "", None, -1, vec![("t".into(), 2, offset(3, now)), ("t".into(), 1, offset(4, now))]).await.expect("b");
        assert_eq!(c.delete_offsets("b", vec![("t".into(), 2)]).await, Ok(vec![None]));
        c.commit_offsets("gone", "", None, -1, vec![("t".into(), 2, offset(3, now))]).await.expect("gone");
        c.delete_group("gone").await.expect("delete gone");
        let meta = records::GroupMetadata { protocol_type: "consumer".into(), generation: 4, ..Default::default() };
        let (tx, rx) = oneshot::channel();
        c.store.append(vec![(records::group_key("m"), Some(records::group_value(&meta)))], Box::new(move |r| {
            let _ = tx.send(r);
        }));
        rx.await.expect("written").expect("group m");
    }

    /// Writes [`varied_state`] and returns what a reload of it holds.
    async fn written_and_reloaded(dir: &std::path::Path) -> Vec<(String, Vec<TopicOffsets>)> {
        {
            let (logs, c) = open(dir);
            c.load().await.expect("load");
            varied_state(&c).await;
            logs.shutdown().expect("shutdown");
        }
        let (logs, c) = open(dir);
        c.load().await.expect("reload");
        let state = snapshot(&c);
        logs.shutdown().expect("shutdown");
        state
    }

    fn snapshot(c: &GroupCoordinator) -> Vec<(String, Vec<TopicOffsets>)> {
        let mut groups: Vec<String> = c.list_groups().expect("list").into_iter().map(|g| g.group_id).collect();
        groups.sort();
        groups.into_iter().map(|g| (g.clone(), all(c, &g))).collect()
    }

    #[tokio::test]
    async fn compaction_shrinks_the_log_and_keeps_the_live_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let before = written_and_reloaded(dir.path()).await;
        assert_eq!(before.iter().map(|(g, _)| g.as_str()).collect::<Vec<_>>(), vec!["a", "b", "m"]);
        {
            let (logs, c) = open(dir.path());
            c.load().await.expect("load");
            let log = offsets_log(&logs);
            let (size, end) = (log.size_bytes(), log.log_end_offset());
            assert!(end > 10_000);
            let done = c.compact_offsets_log().await.expect("compact").expect("loaded");
            // a-0, a-1, b-1, m's metadata.
            assert_eq!(done.live_records, 4);
            assert_eq!(log.log_start_offset(), end);
            assert_eq!(log.log_end_offset(), end + 4);
            assert!(log.size_bytes() < size / 50, "{} bytes left of {size}", log.size_bytes());
            assert_eq!(log.segment_count(), 1);
            assert_eq!(snapshot(&c), before);
            logs.shutdown().expect("shutdown");
        }
        let (logs, c) = open(dir.path());
        c.load().await.expect("reload");
        assert_eq!(snapshot(&c), before);
        assert_eq!(all(&c, "a")[0].1[0].1.as_ref().map(|o| o.offset), Some(10_000));
        // Compacting a compacted log changes nothing; writes continue after it.
        c.compact_offsets_log().await.expect("again");
        c.commit_offsets("a", "", None, -1, vec![("t".into(), 0, offset(77, wall_ms()))]).await.expect("after");
        drop(c);
        let c = Arc::new(GroupCoordinator::new(CoordinatorConfig::default(), logs.clone()).expect("coordinator"));
        c.load().await.expect("reload");
        assert_eq!(all(&c, "a")[0].1[0].1.as_ref().map(|o| o.offset), Some(77));
    }

    /// A crash between the re-append and the delete, and one after the delete
    /// but before the log start offset checkpoint: replay gives the same state.
    #[tokio::test]
    async fn a_crash_during_compaction_replays_to_the_same_state() {
        for delete in [false, true] {
            let dir = tempfile::tempdir().expect("tempdir");
            let before = written_and_reloaded(dir.path()).await;
            {
                let (logs, c) = open(dir.path());
                c.load().await.expect("load");
                // Build the live state as a replay would, then stop where the crash happens.
                let mut live = LiveRecords::default();
                store::replay(&offsets_log(&logs), |e| live.apply(&e)).expect("replay");
                store::compact(&logs, &live, delete).expect("compact");
                // No shutdown: no checkpoints are written, as in a crash.
                drop(c);
                drop(logs);
            }
            let (logs, c) = open(dir.path());
            c.load().await.expect("reload");
            assert_eq!(snapshot(&c), before, "delete: {delete}");
            if delete {
                assert_eq!(offsets_log(&logs).segment_count(), 1);
            }
        }
    }

    #[tokio::test]
    async fn the_writer_compacts_on_its_own_when_the_log_outgrows_the_live_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (logs, _) = open(dir.path());
        let config = CoordinatorConfig { compaction: CompactionConfig { min_bytes: 64 << 10, dirty_ratio: 2 }, ..Default::default() };
        let c = Arc::new(GroupCoordinator::new(config, logs.clone()).expect("coordinator"));
        c.load().await.expect("load");
        commit_many(&c, "a", 10_000).await;
        let log = offsets_log(&logs);
        assert!(log.log_start_offset() > 0, "never compacted");
        assert!(log.size_bytes() < 200 << 10, "{} bytes", log.size_bytes());
        assert_eq!(all(&c, "a")[0].1[0].1.as_ref().map(|o| o.offset), Some(10_000));
    }
}
