//! `ReplicaManager`: this broker's role for every partition of the cluster, and the
//! leader's bookkeeping of its followers (Kafka's `ReplicaManager` and `Partition`).
//!
//! On every change of the cluster view, [`ReplicaManager::apply`] makes this broker
//! the leader of the partitions the controller gave it (`become_leader` with the
//! leader epoch, so appends are stamped with it and OffsetForLeaderEpoch knows where
//! it began) and a follower of those it replicates (the fetchers truncate, then copy
//! the leader's log).
//!
//! As leader it learns each follower's log end offset from its fetches, moves the high
//! watermark to the lowest log end in the ISR, and asks etcd to change the ISR: a
//! follower behind for `replica.lag.time.max.ms` leaves it, one that reached the high
//! watermark joins it. An ISR change is written conditional on the partition state
//! the leader saw (partition epoch); while it is in flight the high watermark counts
//! the larger of the two ISRs (Kafka's "maximal ISR"), so it never passes a replica
//! that may still be in sync.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use floe_storage::{LogManager, PartitionLog};
use kafka_protocol::error::ResponseError;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{info, warn};

use super::fetcher::{FollowedPartition, ReplicaFetcherManager};
use super::isr::{self, FollowerState};
use super::metrics::ReplicationMetrics;
use crate::{ClusterView, Membership, PartitionState, TopicPartition};

/// A partition this broker leads.
#[derive(Debug)]
struct LeaderPartition {
    log: Arc<PartitionLog>,
    /// The partition's state as last seen in the view (leader epoch, ISR, partition epoch).
    state: PartitionState,
    replicas: Vec<i32>,
    followers: HashMap<i32, FollowerState>,
    /// An ISR change sent to etcd and not yet seen back.
    pending_isr: Option<Vec<i32>>,
}

impl LeaderPartition {
    /// The ISR the high watermark waits for: the current one, with the members of a
    /// pending change added (a shrink not yet written must still be waited for).
    fn maximal_isr(&self) -> Vec<i32> {
        let mut isr = self.state.isr.clone();
        for r in self.pending_isr.iter().flatten() {
            if !isr.contains(r) {
                isr.push(*r);
            }
        }
        isr
    }

    /// Moves the high watermark to the lowest log end offset of the maximal ISR.
    fn update_high_watermark(&self, node_id: i32) {
        let isr = self.maximal_isr();
        let followers = isr.iter().filter(|&&r| r != node_id).map(|r| self.followers.get(r));
        let hw = isr::high_watermark(self.log.log_end_offset(), followers);
        if let Err(e) = self.log.update_high_watermark(hw) {
            warn!(topic = self.log.topic(), partition = self.log.partition(), error = %e, "cannot move the high watermark");
        }
    }
}

/// An ISR change for the writer task.
#[derive(Debug)]
pub struct IsrRequest {
    pub tp: TopicPartition,
    pub expected: PartitionState,
    pub isr: Vec<i32>,
}

/// This broker's replicas of the cluster's partitions.
#[derive(Debug)]
pub struct ReplicaManager {
    node_id: i32,
    fetchers: ReplicaFetcherManager,
    /// Logs this process has followed: on the first time, their high watermark (the
    /// recovered log end after a restart, possibly past what was committed) is reset
    /// to the log start, and learnt again from the leader.
    followed_once: Mutex<std::collections::HashSet<TopicPartition>>,
    lag_max_ms: i64,
    leaders: Mutex<HashMap<TopicPartition, LeaderPartition>>,
    isr_requests: mpsc::UnboundedSender<IsrRequest>,
    metrics: ReplicationMetrics,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl ReplicaManager {
    /// A manager with no partitions yet, and the receiving end of its ISR changes
    /// (for the broker's writer task, which hands each to [`ReplicaManager::write_isr_change`]).
    pub fn new(
        node_id: i32,
        lag_max: Duration,
        fetchers: ReplicaFetcherManager,
        metrics: ReplicationMetrics,
    ) -> (Self, mpsc::UnboundedReceiver<IsrRequest>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let manager = Self {
            node_id,
            fetchers,
            followed_once: Mutex::new(std::collections::HashSet::new()),
            lag_max_ms: lag_max.as_millis() as i64,
            leaders: Mutex::new(HashMap::new()),
            isr_requests: tx,
            metrics,
        };
        (manager, rx)
    }

    /// Stops the fetchers (before the logs close).
    pub async fn shutdown(&self) {
        self.fetchers.shutdown().await;
    }

    /// Takes the roles `view` gives this broker: the fetchers follow what it follows
    /// (handing over, first, the partitions it is to lead), then it leads what it leads
    /// at the view's epoch. Partitions whose logs are not open yet are left for the
    /// next call.
    pub fn apply(&self, view: &ClusterView, logs: &LogManager) {
        let now = now_ms();
        let mut following = Vec::new();
        let mut leading = Vec::new();
        for (topic, assignment) in view.topics.iter() {
            for (&p, replicas) in &assignment.partitions {
                if !replicas.contains(&self.node_id) {
                    continue;
                }
                let tp = TopicPartition::new(topic.clone(), p);
                let (Some(state), Some(log)) = (view.partitions.get(&tp), logs.partition(topic, p))
                else {
                    continue;
                };
                if state.leader == self.node_id {
                    log.set_replicated(replicas.len() > 1);
                    leading.push((tp, state, replicas, log));
                } else if state.leader != crate::NO_LEADER {
                    self.first_follow(&tp, &log);
                    following.push(FollowedPartition {
                        tp,
                        leader: state.leader,
                        leader_epoch: state.leader_epoch,
                        log,
                    });
                }
            }
        }
        // The fetchers let go of the partitions to lead before this broker writes to them.
        self.fetchers.follow(following, &view.brokers);
        let mut leaders = lock(&self.leaders);
        let mut still_leading = std::collections::HashSet::new();
        for (tp, state, replicas, log) in leading {
            still_leading.insert(tp.clone());
            self.lead(&mut leaders, tp, state, replicas, log, now);
        }
        leaders.retain(|tp, lp| {
            let keep = still_leading.contains(tp);
            if !keep {
                info!(partition = %tp, leader_epoch = lp.state.leader_epoch, "no longer the leader");
            }
            keep
        });
        // As Kafka counts a partition being reassigned: against its replicas without the
        // ones still being added.
        let under = leaders
            .values()
            .filter(|lp| {
                lp.state.isr.len()
                    < lp.replicas.len().saturating_sub(lp.state.adding_replicas.len())
            })
            .count();
        self.metrics.under_replicated_partitions.set(under as i64);
        self.metrics.leader_partitions.set(leaders.len() as i64);
    }

    /// The first time this process follows `log`: its high watermark comes from the
    /// leader, not from its own recovered end.
    fn first_follow(&self, tp: &TopicPartition, log: &PartitionLog) {
        if lock(&self.followed_once).insert(tp.clone()) {
            log.set_replicated(true);
            if let Err(e) = log.reset_high_watermark(log.log_start_offset()) {
                warn!(partition = %tp, error = %e, "cannot reset the high watermark of a followed log");
            }
        }
    }

    /// Becomes (or stays) the leader of `tp` at `state`'s epoch.
    fn lead(
        &self,
        leaders: &mut HashMap<TopicPartition, LeaderPartition>,
        tp: TopicPartition,
        state: &PartitionState,
        replicas: &[i32],
        log: Arc<PartitionLog>,
        now: i64,
    ) {
        match leaders.get_mut(&tp) {
            Some(lp) if lp.state.leader_epoch == state.leader_epoch => {
                if lp.state.partition_epoch != state.partition_epoch {
                    lp.pending_isr = None;
                }
                lp.state = state.clone();
                if lp.replicas != replicas {
                    self.sync_followers(&tp, lp, replicas, now);
                }
                lp.update_high_watermark(self.node_id);
            }
            _ => {
                if let Err(e) = log.become_leader(state.leader_epoch) {
                    warn!(partition = %tp, leader_epoch = state.leader_epoch, error = %e, "cannot become the leader");
                    leaders.remove(&tp);
                    return;
                }
                info!(partition = %tp, leader_epoch = state.leader_epoch, isr = ?state.isr, log_end_offset = log.log_end_offset(),
                      "became the leader");
                let followers = replicas
                    .iter()
                    .filter(|&&r| r != self.node_id)
                    .map(|&r| (r, FollowerState::new(now)))
                    .collect();
                let lp = LeaderPartition {
                    log,
                    state: state.clone(),
                    replicas: replicas.to_vec(),
                    followers,
                    pending_isr: None,
                };
                lp.update_high_watermark(self.node_id);
                leaders.insert(tp, lp);
            }
        }
    }

    /// The replicas of a partition led at one epoch changed (a reassignment started,
    /// changed or completed without a new leader epoch): replicas added become followers
    /// whose fetches count (they join the ISR by the usual rule), replicas removed are
    /// forgotten. Those that stay keep what the leader knows of them.
    fn sync_followers(
        &self,
        tp: &TopicPartition,
        lp: &mut LeaderPartition,
        replicas: &[i32],
        now: i64,
    ) {
        let node_id = self.node_id;
        lp.followers.retain(|r, _| replicas.contains(r));
        for &r in replicas.iter().filter(|&&r| r != node_id) {
            lp.followers.entry(r).or_insert_with(|| FollowerState::new(now));
        }
        info!(partition = %tp, leader_epoch = lp.state.leader_epoch, old_replicas = ?lp.replicas, replicas = ?replicas, "the partition's replicas changed");
        lp.replicas = replicas.to_vec();
        lp.log.set_replicated(replicas.len() > 1);
    }

    /// Whether this broker leads `tp` (has taken the role, not only been given it).
    pub fn is_leader(&self, tp: &TopicPartition) -> bool {
        lock(&self.leaders).contains_key(tp)
    }

    /// The leader epoch at which this broker leads `tp`, if it does.
    pub fn leader_epoch_of(&self, tp: &TopicPartition) -> Option<i32> {
        lock(&self.leaders).get(tp).map(|lp| lp.state.leader_epoch)
    }

    /// The size of `tp`'s ISR, if this broker leads it.
    pub fn isr_size(&self, tp: &TopicPartition) -> Option<usize> {
        lock(&self.leaders).get(tp).map(|lp| lp.state.isr.len())
    }

    /// A follower fetched `tp` from `fetch_offset`: its log end offset. Moves the high
    /// watermark, and asks for the follower to join the ISR once it qualifies.
    /// Returns false if this broker does not lead `tp` or `follower` is not a replica.
    pub fn record_follower_fetch(
        &self,
        tp: &TopicPartition,
        follower: i32,
        fetch_offset: i64,
    ) -> bool {
        let now = now_ms();
        let mut leaders = lock(&self.leaders);
        let Some(lp) = leaders.get_mut(tp) else { return false };
        let leader_end = lp.log.log_end_offset();
        let Some(state) = lp.followers.get_mut(&follower) else { return false };
        state.record_fetch(fetch_offset, leader_end, now);
        let state = *state;
        lp.update_high_watermark(self.node_id);
        if !lp.state.isr.contains(&follower) && lp.pending_isr.is_none() {
            let epoch_start = lp.log.epoch_entries().last().map_or(0, |e| e.start_offset);
            if isr::may_join_isr(&state, lp.log.high_watermark(), epoch_start) {
                let mut isr = lp.state.isr.clone();
                isr.push(follower);
                self.request_isr(tp, lp, isr);
            }
        }
        true
    }

    /// A leader append on `tp`: with no other replica in the ISR, it is committed at once.
    pub fn on_leader_append(&self, tp: &TopicPartition) {
        if let Some(lp) = lock(&self.leaders).get(tp) {
            lp.update_high_watermark(self.node_id);
        }
    }

    /// Drops followers that have not caught up for `replica.lag.time.max.ms` from the
    /// ISR of every partition this broker leads. Run periodically.
    pub fn shrink_isrs(&self) {
        let now = now_ms();
        let mut leaders = lock(&self.leaders);
        for (tp, lp) in leaders.iter_mut() {
            if lp.pending_isr.is_some() || lp.state.isr.len() <= 1 {
                continue;
            }
            let end = lp.log.log_end_offset();
            let shrunk = isr::shrunk_isr(
                &lp.state.isr,
                self.node_id,
                |r| lp.followers.get(&r).copied(),
                end,
                now,
                self.lag_max_ms,
            );
            if shrunk != lp.state.isr {
                warn!(partition = %tp, isr = ?lp.state.isr, shrunk = ?shrunk, lag_max_ms = self.lag_max_ms,
                      "followers fell behind for replica.lag.time.max.ms; shrinking the ISR");
                self.request_isr(tp, lp, shrunk);
            }
        }
    }

    fn request_isr(&self, tp: &TopicPartition, lp: &mut LeaderPartition, isr: Vec<i32>) {
        lp.pending_isr = Some(isr.clone());
        let _ =
            self.isr_requests.send(IsrRequest { tp: tp.clone(), expected: lp.state.clone(), isr });
    }

    /// An ISR change was refused or failed: allow another once the view has the truth.
    pub fn isr_change_failed(&self, tp: &TopicPartition, partition_epoch: i64) {
        if let Some(lp) = lock(&self.leaders).get_mut(tp) {
            if lp.state.partition_epoch == partition_epoch {
                lp.pending_isr = None;
                lp.update_high_watermark(self.node_id);
            }
        }
    }

    /// Writes one ISR change the leader asked for to the metadata store (the broker's
    /// writer task calls it for each, one at a time, until the channel closes).
    pub async fn write_isr_change(&self, cluster: &Membership, r: IsrRequest) {
        let written = cluster.alter_isr(&r.tp, &r.expected, r.isr.clone()).await;
        match written {
            Ok(true) if r.isr.len() > r.expected.isr.len() => self.metrics.isr_expands.inc(),
            Ok(true) => self.metrics.isr_shrinks.inc(),
            Ok(false) => {
                info!(partition = %r.tp, isr = ?r.isr, "ISR change refused: the partition state moved; deciding again from the new state");
                self.isr_change_failed(&r.tp, r.expected.partition_epoch);
            }
            Err(e) => {
                warn!(partition = %r.tp, isr = ?r.isr, error = %e, "cannot write the ISR change; retrying later");
                self.isr_change_failed(&r.tp, r.expected.partition_epoch);
            }
        }
    }

    /// Checks, before an `acks=all` append to `tp`, that its ISR has at least
    /// `min.insync.replicas` members (NOT_ENOUGH_REPLICAS otherwise).
    pub fn check_min_isr(
        &self,
        tp: &TopicPartition,
        min_isr: i32,
    ) -> Result<(), (ResponseError, String)> {
        match self.isr_size(tp) {
            Some(n) if (n as i32) < min_isr => Err((
                ResponseError::NotEnoughReplicas,
                format!("{tp}: {n} in-sync replicas, fewer than min.insync.replicas={min_isr}"),
            )),
            _ => Ok(()),
        }
    }

    /// Waits until every in-sync replica of `tp` has the records below
    /// `required_offset` (the high watermark passed them): Kafka's `DelayedProduce`
    /// for `acks=all`.
    ///
    /// # Errors
    /// REQUEST_TIMED_OUT at `deadline`; NOT_LEADER_OR_FOLLOWER if this broker stops
    /// leading `tp` meanwhile; NOT_ENOUGH_REPLICAS_AFTER_APPEND if the records were
    /// replicated while the ISR was smaller than `min_isr`.
    pub async fn wait_for_replication(
        &self,
        tp: &TopicPartition,
        log: &PartitionLog,
        required_offset: i64,
        min_isr: i32,
        deadline: Instant,
    ) -> Result<(), (ResponseError, String)> {
        loop {
            let notified = log.append_notify().notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let Some(isr) = self.isr_size(tp) else {
                return Err((
                    ResponseError::NotLeaderOrFollower,
                    format!("{tp}: leadership moved before the records were replicated"),
                ));
            };
            if log.high_watermark() >= required_offset {
                if (isr as i32) < min_isr {
                    return Err((
                        ResponseError::NotEnoughReplicasAfterAppend,
                        format!("{tp}: replicated to an ISR of {isr}, fewer than min.insync.replicas={min_isr}"),
                    ));
                }
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err((
                    ResponseError::RequestTimedOut,
                    format!("{tp}: the in-sync replicas did not fetch the records in time"),
                ));
            }
            // A bounded wait: leadership can move without an append to wake us.
            let nap = deadline.min(Instant::now() + Duration::from_millis(200));
            let _ = tokio::time::timeout_at(nap, notified).await;
        }
    }

    /// The largest lag, in records, of an in-sync follower behind this broker's log end
    /// over the partitions it leads (the `floe_replica_max_lag` metric).
    pub fn max_follower_lag(&self) -> i64 {
        let leaders = lock(&self.leaders);
        leaders
            .values()
            .flat_map(|lp| {
                let end = lp.log.log_end_offset();
                lp.state
                    .isr
                    .iter()
                    .filter_map(|r| lp.followers.get(r))
                    .map(move |f| (end - f.log_end_offset.max(0)).max(0))
                    .collect::<Vec<_>>()
            })
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use floe_storage::LogConfig;

    use super::*;
    use crate::replication::fetcher::FetcherSettings;
    use crate::TopicAssignment;

    fn view(replicas: &[i32], state: PartitionState) -> ClusterView {
        let assignment = TopicAssignment {
            topic_id: "id".into(),
            partitions: BTreeMap::from([(0, replicas.to_vec())]),
            ..TopicAssignment::default()
        };
        ClusterView {
            topics: Arc::new(BTreeMap::from([("t".to_string(), assignment)])),
            partitions: Arc::new(BTreeMap::from([(TopicPartition::new("t", 0), state)])),
            synced: true,
            ..ClusterView::default()
        }
    }

    /// A reassignment changes a partition's replicas within one leader epoch: the leader
    /// counts the fetches of a replica added (so it can join the ISR) and forgets one
    /// removed, without becoming leader anew.
    #[tokio::test]
    async fn replicas_added_within_an_epoch_become_followers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let logs =
            LogManager::open_with_node_id(dir.path(), Some(1), LogConfig::default()).expect("logs");
        logs.create_topic("t", 1, BTreeMap::new()).expect("topic");
        let metrics = ReplicationMetrics::new();
        let log_corrupt_ranges = prometheus::IntGaugeVec::new(
            prometheus::Opts::new("floe_log_corrupt_ranges", "test"),
            &["topic", "partition"],
        )
        .expect("metric");
        let fetchers = ReplicaFetcherManager::new(
            1,
            "PLAINTEXT".into(),
            FetcherSettings::default(),
            metrics.clone(),
            log_corrupt_ranges,
        );
        let (manager, mut isr_requests) =
            ReplicaManager::new(1, Duration::from_secs(30), fetchers, metrics);
        let tp = TopicPartition::new("t", 0);
        let state =
            |isr: &[i32], adding: &[i32], removing: &[i32], partition_epoch: i64| PartitionState {
                leader: 1,
                leader_epoch: 3,
                isr: isr.to_vec(),
                adding_replicas: adding.to_vec(),
                removing_replicas: removing.to_vec(),
                partition_epoch,
            };
        manager.apply(&view(&[1, 2], state(&[1, 2], &[], &[], 10)), &logs);
        assert!(manager.is_leader(&tp));
        assert!(!manager.record_follower_fetch(&tp, 3, 0), "3 is no replica yet");
        // A move from {1,2} to {1,3} starts: same leader epoch, 3 added.
        manager.apply(&view(&[1, 3, 2], state(&[1, 2], &[3], &[2], 11)), &logs);
        assert_eq!(manager.leader_epoch_of(&tp), Some(3));
        assert!(manager.record_follower_fetch(&tp, 3, 0), "the added replica's fetch counts");
        // Caught up (the log is empty): it asks to join the ISR.
        let joined = isr_requests.try_recv().expect("an ISR change for the added replica");
        assert_eq!((joined.tp, joined.isr), (tp.clone(), vec![1, 2, 3]));
        // Replicas removed are forgotten.
        manager.apply(&view(&[1, 3], state(&[1, 2, 3], &[], &[], 12)), &logs);
        assert!(!manager.record_follower_fetch(&tp, 2, 0), "2 is no replica any more");
        assert!(manager.record_follower_fetch(&tp, 3, 0));
        manager.shutdown().await;
    }
}
