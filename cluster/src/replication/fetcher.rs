//! A follower's replica fetchers (Kafka's `ReplicaFetcherManager`,
//! `AbstractFetcherThread` and `ReplicaFetcherThread`).
//!
//! [`ReplicaFetcherManager`] keeps one tokio task per leader broker this
//! broker follows partitions of (Kafka's fetcher thread per source broker,
//! with `num.replica.fetchers` = 1). The replica manager hands it the whole
//! set of followed partitions with [`ReplicaFetcherManager::follow`] whenever
//! leadership changes; each task gets its share through a `watch` channel.
//!
//! # A partition's life in its fetcher
//! 1. **Truncating** (KIP-101, KIP-279): OffsetForLeaderEpoch v4 with this
//!    broker's replica id, the partition's `current_leader_epoch` and the log's
//!    latest epoch. The answer gives where that epoch ended on the leader; the
//!    log is cut there if it goes further ([`truncation_target`], Kafka's
//!    `getOffsetTruncationState`). A log without epochs, or an UNDEFINED
//!    answer, is cut to its high watermark instead. When the leader named an
//!    epoch the log does not know, the log is cut to its own end of the epoch
//!    below, and the partition asks again.
//! 2. **Fetching**: Fetch v12, session-less, from the log end offset, with
//!    `last_fetched_epoch`. Each partition's answer ([`fetch_outcome`]):
//!    records are appended byte for byte (`append_as_follower`) and the high
//!    watermark follows the leader's, capped by the log end; a
//!    `diverging_epoch` (KIP-320) truncates as step 1 would and fetching goes
//!    on; OFFSET_OUT_OF_RANGE below the leader's log start starts the log over
//!    there (`truncate_fully_and_start_at`), anything else goes back to
//!    truncating (after the backoff); FENCED_LEADER_EPOCH,
//!    NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_LEADER_EPOCH
//!    and other errors delay the partition by `replica.fetch.backoff.ms`
//!    (the replica manager calls `follow` again when metadata changes).
//! 3. **Failed**: a storage error other than a bad batch (the log directory
//!    went offline, an I/O error) stops fetching the partition until `follow`
//!    hands it over again with another leader or epoch (Kafka's failed
//!    partitions).
//!
//! A lost connection (or a timeout, 30 s as Kafka's `replica.socket.timeout.ms`)
//! drops it; the fetcher connects again after the backoff. Connections speak
//! the leader's inter-broker endpoint's security protocol
//! ([`BrokerConnection::connect`]); a refused TLS handshake or SASL login is
//! logged as an error (leader, mechanism, the leader's message) and retried
//! after the same backoff.
//!
//! # Ownership of a log
//! A followed partition's log is written by one fetcher at a time: each
//! assignment carries a [`Claim`], and every truncation and append runs
//! under it. `follow` revokes the claims it replaces before returning, which
//! waits for a write in progress: once `follow` returns, no fetcher still
//! writes a partition it no longer owns (Kafka does the same under its
//! `partitionMapLock`).
//!
//! # Blocking work
//! Appends are page-cache writes and run on the fetcher's task, as Produce
//! does; an append that may fsync (`flush.messages` set) and every
//! truncation (which fsyncs) go to the blocking pool.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use floe_client::{BrokerConnection, ClientError, ClientSecurity, Endpoint};
use floe_protocol::record_batch::{RecordBatchHeader, RECORD_BATCH_OVERHEAD};
use floe_storage::{PartitionLog, StorageError};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{
    BrokerId, FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest, TopicName,
};
use kafka_protocol::protocol::{Request, StrBytes};
use prometheus::IntGaugeVec;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use super::metrics::ReplicationMetrics;
use crate::{BrokerRegistration, TopicPartition};

/// Fetch v12: the first flexible version, with topic names, `last_fetched_epoch`
/// and `diverging_epoch` (v13 names topics by id).
const FETCH_VERSION: i16 = 12;
/// OffsetForLeaderEpoch v4: flexible, with `replica_id` (v3+).
const OFFSET_FOR_LEADER_EPOCH_VERSION: i16 = 4;
/// ListOffsets v7: `current_leader_epoch`, `replica_id`.
const LIST_OFFSETS_VERSION: i16 = 7;
/// ListOffsets' timestamp for the log start offset.
const EARLIEST_TIMESTAMP: i64 = -2;
/// ListOffsets v8, the first to take EARLIEST_LOCAL (-4, KIP-405): the leader's local log start offset.
const EARLIEST_LOCAL_VERSION: i16 = 8;
const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
/// Kafka's UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET.
const UNDEFINED_EPOCH: i32 = -1;
const UNDEFINED_OFFSET: i64 = -1;

/// How a follower fetches (Kafka's `replica.fetch.*` and `replica.socket.timeout.ms`).
#[derive(Debug, Clone)]
pub struct FetcherSettings {
    /// `replica.fetch.max.bytes`: record bytes asked per partition.
    pub max_bytes: i32,
    /// `replica.fetch.response.max.bytes`: record bytes asked per response.
    pub response_max_bytes: i32,
    /// `replica.fetch.wait.max.ms`: how long the leader may hold a fetch.
    pub max_wait_ms: i32,
    /// `replica.fetch.min.bytes`: bytes the leader waits for.
    pub min_bytes: i32,
    /// `replica.fetch.backoff.ms`: the pause after an error.
    pub backoff: Duration,
    /// Bounds connecting and every request (Kafka's `replica.socket.timeout.ms`,
    /// 30 s); must exceed `max_wait_ms`.
    pub socket_timeout: Duration,
    /// The TLS client configuration and SASL login presented to leaders
    /// (PLAINTEXT only by default).
    pub security: Arc<ClientSecurity>,
}

impl Default for FetcherSettings {
    /// Kafka's defaults.
    fn default() -> Self {
        Self {
            max_bytes: 1_048_576,
            response_max_bytes: 10_485_760,
            max_wait_ms: 500,
            min_bytes: 1,
            backoff: Duration::from_millis(1000),
            socket_timeout: Duration::from_secs(30),
            security: Arc::new(ClientSecurity::plaintext()),
        }
    }
}

/// A partition this broker follows, and where its leader is. Its log becomes
/// replicated ([`PartitionLog::set_replicated`]) when its fetcher takes it:
/// the high watermark is the leader's from then on.
#[derive(Debug, Clone)]
pub struct FollowedPartition {
    /// The partition.
    pub tp: TopicPartition,
    /// The leader's node id.
    pub leader: i32,
    /// The partition's leader epoch, from the controller: sent as
    /// `current_leader_epoch`, so a leader with another epoch answers
    /// FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH.
    pub leader_epoch: i32,
    /// The local replica's log.
    pub log: Arc<PartitionLog>,
}

/// Kafka's `ReplicaFetcherManager`: the fetcher tasks of a follower, one per
/// leader broker. Thread-safe; `follow` and `shutdown` may be called from
/// any task.
#[derive(Debug)]
pub struct ReplicaFetcherManager {
    node_id: i32,
    listener: String,
    settings: FetcherSettings,
    metrics: ReplicationMetrics,
    /// The broker's `floe_log_corrupt_ranges{topic,partition}` gauge (recovery sets it
    /// too): a follower updates it after cutting a damaged range off.
    log_corrupt_ranges: IntGaugeVec,
    /// Held by `follow` and `shutdown` only, never across an `.await`: a
    /// std mutex keeps `follow` a plain function.
    state: Mutex<ManagerState>,
}

#[derive(Debug, Default)]
struct ManagerState {
    fetchers: BTreeMap<i32, FetcherHandle>,
    /// Tasks of fetchers no longer needed, still finishing their last step.
    retired: Vec<JoinHandle<()>>,
    shut_down: bool,
}

/// A running fetcher task.
#[derive(Debug)]
struct FetcherHandle {
    endpoint: Endpoint,
    /// Dropping it stops the task.
    partitions: watch::Sender<Assignments>,
    task: JoinHandle<()>,
}

/// One partition as handed to a fetcher.
#[derive(Debug, Clone)]
struct Assignment {
    leader_epoch: i32,
    log: Arc<PartitionLog>,
    claim: Arc<Claim>,
}

type Assignments = BTreeMap<TopicPartition, Assignment>;

/// A fetcher's right to write a partition's log, revocable (see the module docs).
#[derive(Debug)]
struct Claim {
    /// Whether the claim still holds; writes run with the lock held.
    live: Mutex<bool>,
}

impl Claim {
    fn new() -> Arc<Self> {
        Arc::new(Self { live: Mutex::new(true) })
    }

    /// Ends the claim, after any write running under it.
    fn revoke(&self) {
        *lock(&self.live) = false;
    }

    /// Runs `f` under the claim; `None` if it was revoked.
    fn with<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        let live = lock(&self.live);
        (*live).then(f)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ReplicaFetcherManager {
    /// A manager with no fetcher yet. `listener` names the listener whose
    /// endpoint ([`BrokerRegistration::endpoint`]) fetchers connect to (Kafka's
    /// `inter.broker.listener.name`), in that endpoint's security protocol.
    /// `log_corrupt_ranges` is the broker's gauge of the damaged ranges kept in its logs.
    pub fn new(
        node_id: i32,
        listener: String,
        settings: FetcherSettings,
        metrics: ReplicationMetrics,
        log_corrupt_ranges: IntGaugeVec,
    ) -> Self {
        Self {
            node_id,
            listener,
            settings,
            metrics,
            log_corrupt_ranges,
            state: Mutex::new(ManagerState::default()),
        }
    }

    /// Replaces the set of partitions this broker follows (and where their
    /// leaders are): fetchers for leaders no longer needed stop; partitions
    /// whose leader, leader epoch or log changed restart with truncation;
    /// the others carry on where they are. A partition whose leader is not in
    /// `brokers` or has no endpoint on the listener is not followed (warned)
    /// until a later call can.
    ///
    /// Returns once no fetcher writes a partition it no longer owns, which may
    /// wait for an append or truncation in progress on such a partition.
    pub fn follow(
        &self,
        partitions: Vec<FollowedPartition>,
        brokers: &BTreeMap<i32, BrokerRegistration>,
    ) {
        let mut st = lock(&self.state);
        if st.shut_down {
            warn!("replica fetchers are shut down: follow() ignored");
            return;
        }
        let mut by_leader: BTreeMap<i32, Vec<FollowedPartition>> = BTreeMap::new();
        for p in partitions {
            if p.leader == self.node_id {
                warn!(topic = %p.tp.topic, partition = p.tp.partition, "asked to follow a partition this broker leads: ignored");
                continue;
            }
            by_leader.entry(p.leader).or_default().push(p);
        }
        // Where each needed leader is reached, if it can be.
        let mut reachable: BTreeMap<i32, Endpoint> = BTreeMap::new();
        for &leader in by_leader.keys() {
            match self.endpoint_of(leader, brokers) {
                Ok(addr) => {
                    reachable.insert(leader, addr);
                }
                Err(why) => {
                    warn!(leader, listener = %self.listener, %why, "cannot follow partitions of this leader yet")
                }
            }
        }
        // 1. Retire the fetchers no longer needed (or whose leader moved), revoking their claims.
        let retire: Vec<i32> = st
            .fetchers
            .iter()
            .filter(|(id, f)| reachable.get(id).is_none_or(|ep| *ep != f.endpoint))
            .map(|(&id, _)| id)
            .collect();
        for id in retire {
            if let Some(f) = st.fetchers.remove(&id) {
                for (tp, a) in f.partitions.borrow().iter() {
                    a.claim.revoke();
                    info!(topic = %tp.topic, partition = tp.partition, leader = id, leader_epoch = a.leader_epoch, "stopped following partition");
                }
                drop(f.partitions);
                st.retired.push(f.task);
            }
        }
        st.retired.retain(|t| !t.is_finished());
        // 2. The new assignment of each kept fetcher: unchanged partitions keep
        // their claims, the others are revoked before anyone gets a new one.
        let mut next: BTreeMap<i32, Assignments> = BTreeMap::new();
        for (&leader, wanted) in &by_leader {
            if !reachable.contains_key(&leader) {
                continue;
            }
            let current: Assignments =
                st.fetchers.get(&leader).map(|f| f.partitions.borrow().clone()).unwrap_or_default();
            let mut set = Assignments::new();
            for p in wanted {
                let kept = current
                    .get(&p.tp)
                    .filter(|a| a.leader_epoch == p.leader_epoch && Arc::ptr_eq(&a.log, &p.log));
                let a = match kept {
                    Some(a) => a.clone(),
                    None => {
                        info!(topic = %p.tp.topic, partition = p.tp.partition, leader, leader_epoch = p.leader_epoch, "following partition");
                        Assignment {
                            leader_epoch: p.leader_epoch,
                            log: p.log.clone(),
                            claim: Claim::new(),
                        }
                    }
                };
                set.insert(p.tp.clone(), a);
            }
            for (tp, old) in &current {
                if set.get(tp).is_none_or(|a| !Arc::ptr_eq(&a.claim, &old.claim)) {
                    old.claim.revoke();
                    if !set.contains_key(tp) {
                        info!(topic = %tp.topic, partition = tp.partition, leader, leader_epoch = old.leader_epoch, "stopped following partition");
                    }
                }
            }
            next.insert(leader, set);
        }
        // 3. Hand the sets over, starting the fetchers that do not run yet.
        for (leader, set) in next {
            if let Some(f) = st.fetchers.get(&leader) {
                f.partitions.send_replace(set);
                continue;
            }
            let Some(endpoint) = reachable.get(&leader).cloned() else { continue };
            let (tx, rx) = watch::channel(set);
            let task = FetcherTask {
                node_id: self.node_id,
                leader,
                endpoint: endpoint.clone(),
                settings: self.settings.clone(),
                metrics: self.metrics.clone(),
                log_corrupt_ranges: self.log_corrupt_ranges.clone(),
                assignments: rx,
                partitions: BTreeMap::new(),
                conn: None,
                reconnect_at: None,
            };
            info!(leader, addr = %endpoint.addr(), protocol = %endpoint.protocol, "starting replica fetcher");
            let task = tokio::spawn(task.run());
            st.fetchers.insert(leader, FetcherHandle { endpoint, partitions: tx, task });
        }
    }

    /// Stops every fetcher and waits for them; the logs are not written
    /// afterwards. Later `follow` calls are ignored.
    pub async fn shutdown(&self) {
        let tasks: Vec<JoinHandle<()>> = {
            let mut st = lock(&self.state);
            st.shut_down = true;
            let fetchers = std::mem::take(&mut st.fetchers);
            let mut tasks = std::mem::take(&mut st.retired);
            for (_, f) in fetchers {
                for a in f.partitions.borrow().values() {
                    a.claim.revoke();
                }
                drop(f.partitions);
                tasks.push(f.task);
            }
            tasks
        };
        for task in tasks {
            if let Err(e) = task.await {
                error!(error = %e, "replica fetcher task failed");
            }
        }
    }

    /// Where `leader` is reached on the fetchers' listener.
    fn endpoint_of(
        &self,
        leader: i32,
        brokers: &BTreeMap<i32, BrokerRegistration>,
    ) -> Result<Endpoint, String> {
        let broker = brokers.get(&leader).ok_or("the leader is not a registered broker")?;
        super::registered_endpoint(broker, &self.listener)
    }
}

/// Where a partition is in its fetcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FetchState {
    Truncating,
    Fetching,
    /// A storage failure: left alone until `follow` hands it over anew.
    Failed,
}

/// A partition in its fetcher task.
#[derive(Debug)]
struct PartitionFetch {
    assignment: Assignment,
    state: FetchState,
    /// Not fetched (nor truncated) before this instant.
    delayed_until: Option<Instant>,
    /// Whether this assignment already cut the damaged ranges recovery found
    /// (once: a range the cut could not remove is stepped over, as alone).
    damage_cut: bool,
}

impl PartitionFetch {
    fn ready(&self, now: Instant) -> bool {
        self.delayed_until.is_none_or(|t| t <= now)
    }
}

/// What the task loop does next.
enum Step {
    Continue,
    Wait(Duration),
    Stop,
}

/// One fetcher task: the partitions led by one broker.
struct FetcherTask {
    node_id: i32,
    leader: i32,
    endpoint: Endpoint,
    settings: FetcherSettings,
    metrics: ReplicationMetrics,
    log_corrupt_ranges: IntGaugeVec,
    assignments: watch::Receiver<Assignments>,
    partitions: BTreeMap<TopicPartition, PartitionFetch>,
    conn: Option<BrokerConnection>,
    /// After a failed or lost connection: not connecting again before this,
    /// even when an assignment change wakes the task (no reconnect storm).
    reconnect_at: Option<Instant>,
}

impl FetcherTask {
    async fn run(mut self) {
        loop {
            if self.assignments.has_changed().is_err() {
                break;
            }
            self.sync();
            let step = match self.step().await {
                Ok(step) => step,
                Err(e) => {
                    match &e {
                        // The operator must act (a password, a certificate): loud, but retried
                        // after the same backoff, so a fixed setting heals without a restart.
                        ClientError::Authentication { mechanism, message, .. } => {
                            error!(leader = self.leader, addr = %self.endpoint.addr(), mechanism, error = %message,
                            "replica fetcher cannot authenticate to the leader (SASL authentication failed); retrying after the backoff")
                        }
                        ClientError::Tls { .. } | ClientError::Security { .. } => {
                            error!(leader = self.leader, protocol = %self.endpoint.protocol, error = %e,
                            "replica fetcher cannot open a secured connection to the leader; retrying after the backoff")
                        }
                        _ => {
                            warn!(leader = self.leader, error = %e, "replica fetcher lost its connection to the leader; reconnecting after the backoff")
                        }
                    }
                    let kind = match e {
                        ClientError::Authentication { .. } => "authentication",
                        ClientError::Tls { .. } | ClientError::Security { .. } => "tls",
                        _ => "connection",
                    };
                    self.metrics.replica_fetch_errors.with_label_values(&[kind]).inc();
                    self.conn = None;
                    self.reconnect_at = Some(Instant::now() + self.settings.backoff);
                    Step::Wait(self.settings.backoff)
                }
            };
            match step {
                Step::Continue => {}
                Step::Stop => break,
                Step::Wait(d) => {
                    if !self.wait(d).await {
                        break;
                    }
                }
            }
        }
        debug!(leader = self.leader, "replica fetcher stopped");
    }

    /// Sleeps `d`, or until the assignment changes. `false` once stopped.
    async fn wait(&mut self, d: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(d) => true,
            changed = self.assignments.changed() => changed.is_ok(),
        }
    }

    /// Takes the current assignment: new (or re-claimed) partitions start truncating.
    fn sync(&mut self) {
        let current = self.assignments.borrow_and_update().clone();
        self.partitions.retain(|tp, p| {
            current.get(tp).is_some_and(|a| Arc::ptr_eq(&a.claim, &p.assignment.claim))
        });
        for (tp, a) in current {
            self.partitions.entry(tp).or_insert_with(|| {
                // A follower's high watermark is its leader's, not its own log end.
                if !a.log.is_replicated() {
                    a.log.set_replicated(true);
                }
                PartitionFetch {
                    assignment: a,
                    state: FetchState::Truncating,
                    delayed_until: None,
                    damage_cut: false,
                }
            });
        }
    }

    /// One round: connect if needed, truncate the partitions that must, fetch the others.
    async fn step(&mut self) -> Result<Step, ClientError> {
        if self.partitions.is_empty() {
            return Ok(Step::Wait(Duration::from_secs(3600)));
        }
        if self.conn.is_none() {
            if let Some(at) = self.reconnect_at.filter(|&at| at > Instant::now()) {
                return Ok(Step::Wait(at.saturating_duration_since(Instant::now())));
            }
            let client_id = format!("broker-{}-fetcher-{}", self.node_id, self.leader);
            let conn = BrokerConnection::connect(
                &self.endpoint,
                &client_id,
                self.settings.socket_timeout,
                &self.settings.security,
            )
            .await?;
            info!(leader = self.leader, addr = %conn.addr(), protocol = %self.endpoint.protocol, "replica fetcher connected to the leader");
            self.conn = Some(conn);
        }
        let now = Instant::now();
        let truncating: Vec<TopicPartition> = self
            .partitions
            .iter()
            .filter(|(_, p)| p.state == FetchState::Truncating && p.ready(now))
            .map(|(tp, _)| tp.clone())
            .collect();
        if !truncating.is_empty() {
            match self.truncate(truncating).await? {
                Some(()) => {}
                None => return Ok(Step::Stop),
            }
        }
        let fetching: Vec<TopicPartition> = self
            .partitions
            .iter()
            .filter(|(_, p)| p.state == FetchState::Fetching && p.ready(now))
            .map(|(tp, _)| tp.clone())
            .collect();
        if fetching.is_empty() {
            if self
                .partitions
                .values()
                .any(|p| p.state == FetchState::Truncating && p.ready(Instant::now()))
            {
                return Ok(Step::Continue);
            }
            // Wait for the first delayed partition, or an assignment change.
            let next = self
                .partitions
                .values()
                .filter(|p| p.state != FetchState::Failed)
                .filter_map(|p| p.delayed_until)
                .min();
            let wait = next
                .map_or(Duration::from_secs(3600), |t| t.saturating_duration_since(Instant::now()));
            return Ok(Step::Wait(wait.max(Duration::from_millis(1))));
        }
        match self.fetch(fetching).await? {
            Some(()) => Ok(Step::Continue),
            None => Ok(Step::Stop),
        }
    }

    /// The leader's local log start offset of `tp` (ListOffsets -4, KIP-405);
    /// `Ok(None)` when the leader does not answer one (retry after the backoff).
    async fn earliest_local(&mut self, tp: &TopicPartition) -> Result<Option<i64>, ClientError> {
        use kafka_protocol::messages::list_offsets_request::{
            ListOffsetsPartition, ListOffsetsTopic,
        };
        use kafka_protocol::messages::{BrokerId, ListOffsetsRequest};
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(self.node_id))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(topic_name(&tp.topic))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(tp.partition)
                    .with_timestamp(EARLIEST_LOCAL_TIMESTAMP)])]);
        let Some(response) = self.call(EARLIEST_LOCAL_VERSION, &request).await? else {
            return Ok(None);
        };
        let answer = response
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == tp.partition);
        Ok(match answer {
            Some(p) if p.error_code == 0 && p.offset >= 0 => Some(p.offset),
            other => {
                warn!(topic = %tp.topic, partition = tp.partition, leader = self.leader, error_code = other.map(|p| p.error_code),
                    "the leader did not answer its local log start offset; retrying after the backoff");
                None
            }
        })
    }

    /// Sends `request` on the connection; `None` if the task is stopped meanwhile.
    async fn call<Req: Request>(
        &mut self,
        version: i16,
        request: &Req,
    ) -> Result<Option<Req::Response>, ClientError> {
        let Some(conn) = self.conn.as_mut() else {
            return Err(ClientError::Broken { addr: self.endpoint.addr() });
        };
        let call = conn.call(version, request);
        tokio::pin!(call);
        loop {
            tokio::select! {
                response = &mut call => return response.map(Some),
                changed = self.assignments.changed() => {
                    if changed.is_err() {
                        return Ok(None);
                    }
                    // A new assignment: taken after this round; the answer is
                    // applied only to partitions whose claim did not change.
                }
            }
        }
    }

    /// Marks `tp` delayed by the backoff, counting `error`.
    fn delay(&mut self, tp: &TopicPartition, error: &str) {
        self.metrics.replica_fetch_errors.with_label_values(&[error]).inc();
        if let Some(p) = self.partitions.get_mut(tp) {
            p.delayed_until = Some(Instant::now() + self.settings.backoff);
        }
    }

    /// The Truncating step for `tps` (see the module docs). `None` if stopped.
    async fn truncate(&mut self, tps: Vec<TopicPartition>) -> Result<Option<()>, ClientError> {
        let mut asked: BTreeMap<TopicPartition, (Arc<Claim>, i32)> = BTreeMap::new();
        let mut topics: BTreeMap<String, Vec<OffsetForLeaderPartition>> = BTreeMap::new();
        for tp in tps {
            let Some(p) = self.partitions.get_mut(&tp) else { continue };
            let a = p.assignment.clone();
            let first_damage =
                if p.damage_cut { None } else { a.log.corrupt_ranges().into_iter().next() };
            p.damage_cut = true;
            if let Some(damage) = first_damage {
                // Recovery kept a damaged range (the single broker's rule: step over it, keep
                // what follows). A replica has a leader to restore it from, so it takes
                // Kafka's rule instead: cut the log where the damage starts and fetch the
                // rest again. The epoch step follows on the shorter log.
                warn!(topic = %tp.topic, partition = tp.partition, leader = self.leader,
                    segment = %damage.segment.display(), first_offset = damage.first_offset,
                    last_offset = ?damage.last_offset, reason = %damage.reason,
                    "a damaged range in a replica: truncating to its first offset to fetch it again from the leader");
                self.metrics.replica_damaged_truncations.inc();
                self.truncate_log(&tp, &a, damage.first_offset, false).await;
                let left = a.log.corrupt_ranges().len() as i64;
                self.log_corrupt_ranges
                    .with_label_values(&[tp.topic.as_str(), &tp.partition.to_string()])
                    .set(left);
                continue;
            }
            match a.log.latest_epoch() {
                Some(epoch) => {
                    topics.entry(tp.topic.clone()).or_default().push(
                        OffsetForLeaderPartition::default()
                            .with_partition(tp.partition)
                            .with_current_leader_epoch(a.leader_epoch)
                            .with_leader_epoch(epoch),
                    );
                    asked.insert(tp, (a.claim.clone(), epoch));
                }
                None => {
                    // No epochs (an empty log, or one written before they were kept): Kafka's fallback.
                    let hw = a.log.high_watermark();
                    info!(topic = %tp.topic, partition = tp.partition, leader = self.leader, high_watermark = hw, "truncating to the high watermark: the log has no leader epoch");
                    self.truncate_log(&tp, &a, hw, true).await;
                }
            }
        }
        if topics.is_empty() {
            return Ok(Some(()));
        }
        let request = OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(self.node_id))
            .with_topics(
                topics
                    .into_iter()
                    .map(|(topic, partitions)| {
                        OffsetForLeaderTopic::default()
                            .with_topic(topic_name(&topic))
                            .with_partitions(partitions)
                    })
                    .collect(),
            );
        let Some(response) = self.call(OFFSET_FOR_LEADER_EPOCH_VERSION, &request).await? else {
            return Ok(None);
        };
        for topic in response.topics {
            for answer in topic.partitions {
                let tp = TopicPartition::new(topic.topic.0.as_str(), answer.partition);
                let Some((claim, asked_epoch)) = asked.get(&tp) else { continue };
                let Some(p) =
                    self.partitions.get(&tp).filter(|p| Arc::ptr_eq(&p.assignment.claim, claim))
                else {
                    continue;
                };
                let a = p.assignment.clone();
                if let Some(e) = ResponseError::try_from_code(answer.error_code) {
                    warn!(topic = %tp.topic, partition = tp.partition, leader = self.leader, error = %e, "OffsetForLeaderEpoch failed; retrying after the backoff");
                    self.delay(&tp, &error_name(e));
                    continue;
                }
                let local = a.log.end_offset_for_epoch(answer.leader_epoch);
                let local = (local.1 != UNDEFINED_OFFSET).then_some(local);
                let (log_end, hw) = (a.log.log_end_offset(), a.log.high_watermark());
                let target =
                    truncation_target((answer.leader_epoch, answer.end_offset), local, log_end, hw);
                info!(topic = %tp.topic, partition = tp.partition, leader = self.leader, requested_epoch = asked_epoch,
                    leader_epoch = answer.leader_epoch, leader_end_offset = answer.end_offset, log_end_offset = log_end,
                    truncate_to = target.offset, complete = target.complete, "leader epoch answer");
                self.truncate_log(&tp, &a, target.offset, target.complete).await;
            }
        }
        Ok(Some(()))
    }

    /// Cuts `tp`'s log at `offset` (if it goes further) under its claim; the
    /// partition then fetches, or truncates again if `complete` is false.
    async fn truncate_log(
        &mut self,
        tp: &TopicPartition,
        a: &Assignment,
        offset: i64,
        complete: bool,
    ) {
        let done = run_under_claim(a, true, move |log| log.truncate_to(offset.max(0))).await;
        match done {
            None => {}
            Some(Ok(_)) => {
                if let Some(p) = self.partitions.get_mut(tp) {
                    p.state = if complete { FetchState::Fetching } else { FetchState::Truncating };
                    p.delayed_until = None;
                }
            }
            Some(Err(e)) => self.storage_failure(tp, &e),
        }
    }

    /// A storage error on `tp`: a refused batch is retried after the backoff,
    /// anything else (I/O, an offline directory) stops the partition.
    fn storage_failure(&mut self, tp: &TopicPartition, e: &StorageError) {
        match e {
            StorageError::Corrupt { .. }
            | StorageError::OffsetOutOfOrder { .. }
            | StorageError::UnexpectedAppendOffset { .. } => {
                warn!(topic = %tp.topic, partition = tp.partition, leader = self.leader, error = %e, "cannot append the leader's records; retrying after the backoff");
                self.delay(tp, "storage");
            }
            _ => {
                error!(topic = %tp.topic, partition = tp.partition, leader = self.leader, error = %e, "storage failure: the partition is no longer fetched until it is handed over again");
                self.metrics.replica_fetch_errors.with_label_values(&["storage"]).inc();
                if let Some(p) = self.partitions.get_mut(tp) {
                    p.state = FetchState::Failed;
                }
            }
        }
    }

    /// One Fetch for `tps` and its answers. `None` if stopped.
    async fn fetch(&mut self, tps: Vec<TopicPartition>) -> Result<Option<()>, ClientError> {
        let mut sent: BTreeMap<TopicPartition, (Arc<Claim>, i64)> = BTreeMap::new();
        let mut topics: BTreeMap<String, Vec<FetchPartition>> = BTreeMap::new();
        for tp in tps {
            let Some(p) = self.partitions.get(&tp) else { continue };
            let log = &p.assignment.log;
            let fetch_offset = log.log_end_offset();
            topics.entry(tp.topic.clone()).or_default().push(
                FetchPartition::default()
                    .with_partition(tp.partition)
                    .with_current_leader_epoch(p.assignment.leader_epoch)
                    .with_fetch_offset(fetch_offset)
                    .with_last_fetched_epoch(log.latest_epoch().unwrap_or(UNDEFINED_EPOCH))
                    .with_log_start_offset(log.log_start_offset())
                    .with_partition_max_bytes(self.settings.max_bytes),
            );
            sent.insert(tp, (p.assignment.claim.clone(), fetch_offset));
        }
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(self.node_id))
            .with_max_wait_ms(self.settings.max_wait_ms)
            .with_min_bytes(self.settings.min_bytes)
            .with_max_bytes(self.settings.response_max_bytes)
            .with_isolation_level(0)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(topic, partitions)| {
                        FetchTopic::default()
                            .with_topic(topic_name(&topic))
                            .with_partitions(partitions)
                    })
                    .collect(),
            );
        self.metrics.replica_fetch_requests.inc();
        let Some(response) = self.call(FETCH_VERSION, &request).await? else {
            return Ok(None);
        };
        if let Some(e) = ResponseError::try_from_code(response.error_code) {
            warn!(leader = self.leader, error = %e, "the leader refused the whole fetch; retrying after the backoff");
            let name = error_name(e);
            for tp in sent.keys() {
                self.delay(tp, &name);
            }
            return Ok(Some(()));
        }
        for topic in response.responses {
            for data in topic.partitions {
                let tp = TopicPartition::new(topic.topic.0.as_str(), data.partition_index);
                let Some((claim, fetch_offset)) = sent.get(&tp) else { continue };
                // As Kafka: only if the partition is still here, fetching, from that offset.
                let Some(p) = self.partitions.get(&tp).filter(|p| {
                    Arc::ptr_eq(&p.assignment.claim, claim)
                        && p.state == FetchState::Fetching
                        && p.assignment.log.log_end_offset() == *fetch_offset
                }) else {
                    continue;
                };
                let a = p.assignment.clone();
                if self.apply(&tp, &a, *fetch_offset, data).await?.is_none() {
                    return Ok(None);
                }
            }
        }
        Ok(Some(()))
    }

    /// Applies one partition's fetch answer. `None` if stopped.
    async fn apply(
        &mut self,
        tp: &TopicPartition,
        a: &Assignment,
        fetch_offset: i64,
        data: PartitionData,
    ) -> Result<Option<()>, ClientError> {
        match fetch_outcome(&data) {
            FetchOutcome::Append { high_watermark } => {
                let records = data.records.unwrap_or_default();
                let fsyncs = a.log.config().flush_messages < i64::MAX;
                let appended = run_under_claim(a, fsyncs, move |log| append(log, &records)).await;
                match appended {
                    None => {}
                    Some(Ok(bytes)) => {
                        self.metrics.replica_fetch_bytes.inc_by(bytes);
                        let hw = high_watermark.min(a.log.log_end_offset());
                        if let Err(e) = a.log.update_high_watermark(hw) {
                            self.storage_failure(tp, &e);
                        }
                    }
                    Some(Err(e)) => self.storage_failure(tp, &e),
                }
            }
            FetchOutcome::Diverging { epoch, end_offset } => {
                let local = a.log.end_offset_for_epoch(epoch);
                let local = (local.1 != UNDEFINED_OFFSET).then_some(local);
                let target = truncation_target(
                    (epoch, end_offset),
                    local,
                    a.log.log_end_offset(),
                    a.log.high_watermark(),
                );
                info!(topic = %tp.topic, partition = tp.partition, leader = self.leader, diverging_epoch = epoch, leader_end_offset = end_offset,
                    truncate_to = target.offset, "the leader reports a diverging epoch");
                // The leader checks the next fetch's last_fetched_epoch again (KIP-320):
                // fetching goes on even when this truncation is not the last.
                self.truncate_log(tp, a, target.offset, true).await;
            }
            FetchOutcome::MovedToTiered { leader_log_start } => {
                self.metrics
                    .replica_fetch_errors
                    .with_label_values(&["OFFSET_MOVED_TO_TIERED_STORAGE"])
                    .inc();
                // Kafka's follower asks the leader's local log start (ListOffsets
                // EARLIEST_LOCAL) and starts its log there; the table holds the rest.
                let Some(local_start) = self.earliest_local(tp).await? else {
                    self.delay(tp, "OFFSET_MOVED_TO_TIERED_STORAGE");
                    return Ok(Some(()));
                };
                if local_start <= fetch_offset {
                    // Local deletion raced the answer: fetch again.
                    self.delay(tp, "OFFSET_MOVED_TO_TIERED_STORAGE");
                    return Ok(Some(()));
                }
                info!(topic = %tp.topic, partition = tp.partition, leader = self.leader, fetch_offset, local_start, leader_log_start,
                    "fetch offset in the leader's table only: starting the local log at the leader's local log start");
                match run_under_claim(a, true, move |log| {
                    log.start_at_local_log_start(local_start, leader_log_start)
                })
                .await
                {
                    None | Some(Ok(())) => {}
                    Some(Err(e)) => self.storage_failure(tp, &e),
                }
            }
            FetchOutcome::OutOfRange { leader_log_start } => {
                self.metrics.replica_fetch_errors.with_label_values(&["OFFSET_OUT_OF_RANGE"]).inc();
                let leader_log_start = match leader_log_start {
                    Some(start) => start,
                    None => match self.leader_log_start(tp, a.leader_epoch).await? {
                        None => return Ok(None),
                        Some(Ok(start)) => start,
                        Some(Err(e)) => {
                            warn!(topic = %tp.topic, partition = tp.partition, leader = self.leader, error = %e, "ListOffsets failed; retrying after the backoff");
                            self.delay(tp, &error_name(e));
                            return Ok(Some(()));
                        }
                    },
                };
                if fetch_offset < leader_log_start {
                    warn!(topic = %tp.topic, partition = tp.partition, leader = self.leader, fetch_offset, leader_log_start,
                        "fetch offset below the leader's log start: starting the log over there");
                    match run_under_claim(a, true, move |log| {
                        log.truncate_fully_and_start_at(leader_log_start)
                    })
                    .await
                    {
                        None | Some(Ok(())) => {}
                        Some(Err(e)) => self.storage_failure(tp, &e),
                    }
                } else {
                    warn!(topic = %tp.topic, partition = tp.partition, leader = self.leader, fetch_offset, leader_log_start,
                        "fetch offset out of range: truncating again after the backoff");
                    if let Some(p) = self.partitions.get_mut(tp) {
                        p.state = FetchState::Truncating;
                        p.delayed_until = Some(Instant::now() + self.settings.backoff);
                    }
                }
            }
            FetchOutcome::Retry(e) => {
                warn!(topic = %tp.topic, partition = tp.partition, leader = self.leader, error = %e, "fetch failed; retrying after the backoff");
                self.delay(tp, &error_name(e));
            }
        }
        Ok(Some(()))
    }

    /// The leader's log start offset for `tp` (ListOffsets, earliest).
    /// `None` if stopped; `Some(Err)` for the leader's error.
    async fn leader_log_start(
        &mut self,
        tp: &TopicPartition,
        leader_epoch: i32,
    ) -> Result<Option<Result<i64, ResponseError>>, ClientError> {
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(self.node_id))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(topic_name(&tp.topic))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(tp.partition)
                    .with_current_leader_epoch(leader_epoch)
                    .with_timestamp(EARLIEST_TIMESTAMP)])]);
        let Some(response) = self.call(LIST_OFFSETS_VERSION, &request).await? else {
            return Ok(None);
        };
        let answer = response
            .topics
            .iter()
            .filter(|t| t.name.0.as_str() == tp.topic)
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == tp.partition);
        Ok(Some(match answer {
            None => Err(ResponseError::UnknownTopicOrPartition),
            Some(p) => match ResponseError::try_from_code(p.error_code) {
                Some(e) => Err(e),
                None => Ok(p.offset),
            },
        }))
    }
}

/// Runs `f` on the log under the assignment's claim: on the blocking pool if
/// `blocking` (it may fsync), else here. `None` if the claim was revoked (or
/// `f` panicked, which is logged).
async fn run_under_claim<T: Send + 'static>(
    a: &Assignment,
    blocking: bool,
    f: impl FnOnce(&PartitionLog) -> T + Send + 'static,
) -> Option<T> {
    if !blocking {
        return a.claim.with(|| f(&a.log));
    }
    let (claim, log) = (a.claim.clone(), a.log.clone());
    match tokio::task::spawn_blocking(move || claim.with(|| f(&log))).await {
        Ok(done) => done,
        Err(e) => {
            error!(topic = %a.log.topic(), partition = a.log.partition(), error = %e, "replica fetcher storage call panicked");
            None
        }
    }
}

/// Appends fetched `records` as a follower; returns the bytes of the whole
/// batches appended. An empty log whose first fetched batch starts below its
/// log start (the leader's log start lies inside that batch) starts over at
/// the batch (Kafka's `UnexpectedAppendOffsetException` handling in
/// `Partition.appendRecordsToFollowerOrFutureReplica`).
fn append(log: &PartitionLog, records: &[u8]) -> floe_storage::Result<u64> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    match log.append_as_follower(records, now_ms) {
        Ok(_) => Ok(whole_batches_len(records)),
        Err(StorageError::UnexpectedAppendOffset { expected, first_offset, last_offset })
            if log.log_end_offset() == log.log_start_offset()
                && first_offset < expected
                && last_offset >= expected =>
        {
            info!(topic = %log.topic(), partition = log.partition(), log_start = expected, first_offset,
                "the first fetched batch starts below the empty log's start: starting the log at the batch");
            log.truncate_fully_and_start_at(first_offset)?;
            log.append_as_follower(records, now_ms)?;
            Ok(whole_batches_len(records))
        }
        Err(e) => Err(e),
    }
}

/// Bytes of the whole batches at the start of `records` (a fetch may end
/// with part of a batch, which is not appended).
fn whole_batches_len(records: &[u8]) -> u64 {
    let mut position = 0;
    while let Ok(header) = RecordBatchHeader::parse(&records[position..]) {
        let size = header.total_size();
        if size < RECORD_BATCH_OVERHEAD || position + size > records.len() {
            break;
        }
        position += size;
    }
    position as u64
}

/// What a partition's fetch answer asks of the follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FetchOutcome {
    /// Append the records (possibly none), then follow the leader's high watermark.
    Append { high_watermark: i64 },
    /// The log diverges from the leader's (KIP-320): truncate as for this epoch answer.
    Diverging { epoch: i32, end_offset: i64 },
    /// OFFSET_OUT_OF_RANGE, with the leader's log start offset if it said.
    OutOfRange { leader_log_start: Option<i64> },
    /// OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405): the offset is below the leader's
    /// local log start, in a shared topic's table; the leader's log start offset.
    MovedToTiered { leader_log_start: i64 },
    /// Any other error: retry the partition after the backoff.
    Retry(ResponseError),
}

/// Kafka's `processFetchRequest` decision for one partition's answer.
fn fetch_outcome(data: &PartitionData) -> FetchOutcome {
    match ResponseError::try_from_code(data.error_code) {
        None if data.diverging_epoch.epoch >= 0 && data.diverging_epoch.end_offset >= 0 => {
            FetchOutcome::Diverging {
                epoch: data.diverging_epoch.epoch,
                end_offset: data.diverging_epoch.end_offset,
            }
        }
        None => FetchOutcome::Append { high_watermark: data.high_watermark },
        Some(ResponseError::OffsetOutOfRange) => FetchOutcome::OutOfRange {
            leader_log_start: (data.log_start_offset >= 0).then_some(data.log_start_offset),
        },
        Some(ResponseError::OffsetMovedToTieredStorage) => {
            FetchOutcome::MovedToTiered { leader_log_start: data.log_start_offset }
        }
        Some(e) => FetchOutcome::Retry(e),
    }
}

/// Where to truncate, and whether that settles it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Truncation {
    /// Truncate the log to this offset (nothing happens at or past its end).
    offset: i64,
    /// `false`: the leader named an epoch this log does not know; ask again
    /// with the log's new latest epoch.
    complete: bool,
}

/// Kafka's `getOffsetTruncationState`: `leader` is the leader's (epoch, end
/// offset) answer, `local` this log's own `end_offset_for_epoch` of that epoch
/// (`None` if UNDEFINED).
/// - no end offset from the leader: the high watermark;
/// - an end offset without an epoch (an old leader): that offset;
/// - an epoch this log has nothing at or below: the leader's offset;
/// - an epoch this log does not have (its answer names a lower one): the end of
///   that lower epoch here, and ask again;
/// - else the smaller of the two ends of the epoch.
///
/// Never past the log end offset.
fn truncation_target(
    leader: (i32, i64),
    local: Option<(i32, i64)>,
    log_end: i64,
    high_watermark: i64,
) -> Truncation {
    let (leader_epoch, leader_end) = leader;
    let done = |offset: i64| Truncation { offset: offset.min(log_end), complete: true };
    if leader_end == UNDEFINED_OFFSET {
        return done(high_watermark);
    }
    if leader_epoch == UNDEFINED_EPOCH {
        return done(leader_end);
    }
    match local {
        None => done(leader_end),
        Some((local_epoch, local_end)) if local_epoch != leader_epoch => {
            Truncation { offset: local_end.min(log_end), complete: false }
        }
        Some((_, local_end)) => done(local_end.min(leader_end)),
    }
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

/// Kafka's name of an error (`OFFSET_OUT_OF_RANGE`), for the errors metric.
fn error_name(e: ResponseError) -> String {
    let camel = format!("{e:?}");
    if let ResponseError::Unknown(code) = e {
        return format!("UNKNOWN_{code}");
    }
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::fetch_response::EpochEndOffset;

    use super::*;

    fn answer(error: i16, hw: i64, log_start: i64, diverging: Option<(i32, i64)>) -> PartitionData {
        let mut d = PartitionData::default()
            .with_error_code(error)
            .with_high_watermark(hw)
            .with_log_start_offset(log_start);
        if let Some((epoch, end)) = diverging {
            d = d.with_diverging_epoch(
                EpochEndOffset::default().with_epoch(epoch).with_end_offset(end),
            );
        }
        d
    }

    #[test]
    fn fetch_answers_map_to_kafkas_follower_actions() {
        assert_eq!(
            fetch_outcome(&answer(0, 42, 0, None)),
            FetchOutcome::Append { high_watermark: 42 }
        );
        assert_eq!(
            fetch_outcome(&answer(0, 42, 0, Some((3, 17)))),
            FetchOutcome::Diverging { epoch: 3, end_offset: 17 }
        );
        // The default diverging epoch (-1, -1) is "none".
        assert_eq!(
            fetch_outcome(&answer(0, 42, 0, Some((-1, -1)))),
            FetchOutcome::Append { high_watermark: 42 }
        );
        let oor = ResponseError::OffsetOutOfRange.code();
        assert_eq!(
            fetch_outcome(&answer(oor, 42, 10, None)),
            FetchOutcome::OutOfRange { leader_log_start: Some(10) }
        );
        assert_eq!(
            fetch_outcome(&answer(oor, -1, -1, None)),
            FetchOutcome::OutOfRange { leader_log_start: None }
        );
        for e in [
            ResponseError::FencedLeaderEpoch,
            ResponseError::NotLeaderOrFollower,
            ResponseError::UnknownTopicOrPartition,
            ResponseError::UnknownLeaderEpoch,
        ] {
            assert_eq!(fetch_outcome(&answer(e.code(), -1, -1, None)), FetchOutcome::Retry(e));
        }
    }

    #[test]
    fn truncation_follows_kafkas_offset_truncation_state() {
        let t = |offset, complete| Truncation { offset, complete };
        // UNDEFINED from the leader: the high watermark.
        assert_eq!(truncation_target((-1, -1), None, 100, 80), t(80, true));
        // An offset without an epoch: the leader's offset, capped by the log end.
        assert_eq!(truncation_target((-1, 90), None, 100, 80), t(90, true));
        assert_eq!(truncation_target((-1, 120), None, 100, 80), t(100, true));
        // Same epoch on both sides: the smaller end.
        assert_eq!(truncation_target((3, 70), Some((3, 100)), 100, 80), t(70, true));
        assert_eq!(truncation_target((3, 150), Some((3, 100)), 120, 80), t(100, true));
        assert_eq!(truncation_target((3, 150), Some((3, 120)), 120, 80), t(120, true));
        // The leader's epoch is unknown here (our answer names epoch 2): cut to
        // the end of epoch 2 here and ask again.
        assert_eq!(truncation_target((3, 70), Some((2, 60)), 100, 80), t(60, false));
        // Nothing at or below the leader's epoch here: the leader's offset.
        assert_eq!(truncation_target((3, 70), None, 100, 80), t(70, true));
    }

    #[test]
    fn error_names_are_kafkas() {
        assert_eq!(error_name(ResponseError::OffsetOutOfRange), "OFFSET_OUT_OF_RANGE");
        assert_eq!(error_name(ResponseError::NotLeaderOrFollower), "NOT_LEADER_OR_FOLLOWER");
        assert_eq!(error_name(ResponseError::Unknown(999)), "UNKNOWN_999");
    }

    #[test]
    fn whole_batches_only() {
        assert_eq!(whole_batches_len(&[]), 0);
        assert_eq!(whole_batches_len(&[0u8; 30]), 0);
    }
}
