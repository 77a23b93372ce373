//! Topics and partitions as cluster state: which brokers hold a partition's replicas
//! ([`TopicAssignment`]), who leads it and which replicas are in sync
//! ([`PartitionState`]), and the decisions made on them: placing replicas on brokers
//! ([`assign_replicas`], and for partitions added to a topic
//! [`assign_added_partitions`]), keeping a leader ([`next_partition_state`], the
//! controller's) and electing one on request ([`elect_leader`], ElectLeaders', and the
//! controller's automatic rebalance, [`imbalanced_partitions`]), and moving a
//! partition to other brokers (KIP-455: [`start_reassignment`], [`cancel_reassignment`],
//! and the controller's [`complete_reassignment`]).
//!
//! The decisions are pure functions of what the caller saw, so that their result can
//! be written to etcd conditional on exactly that state.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Kafka's "no leader" node id (`LeaderAndIsr.NoLeader`).
pub const NO_LEADER: i32 = -1;

/// A topic's identity and replica placement, stored as JSON at `<prefix>/topics/<name>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicAssignment {
    /// The topic id (Kafka's topic UUID, hyphenated).
    pub topic_id: String,
    /// Partition index → replica node ids; the first is the preferred leader.
    pub partitions: BTreeMap<i32, Vec<i32>>,
    /// Topic config overrides given at creation.
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
    /// The key's etcd `create_revision`: tells this topic from an earlier one of the
    /// same name. Not stored; filled in when read.
    #[serde(skip)]
    pub create_revision: i64,
    /// The key's etcd `mod_revision`: grows with every change of the assignment (a
    /// partition added, a reassignment started or completed). Not stored; filled in
    /// when read, and compared by the writes that change the assignment.
    #[serde(skip)]
    pub mod_revision: i64,
}

/// A partition's leadership, stored as JSON at `<prefix>/partitions/<topic>/<p>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    /// The leader's node id, or [`NO_LEADER`] while no eligible replica is alive.
    pub leader: i32,
    /// Grows with every change of leader (KIP-101's leader epoch), and when replicas
    /// leave the partition (a completed or cancelled reassignment).
    pub leader_epoch: i32,
    /// The in-sync replicas, the leader among them.
    pub isr: Vec<i32>,
    /// While the partition is being reassigned: the replicas the move adds (in the
    /// assignment already, catching up). Absent from the JSON otherwise, so states
    /// written before reassignment existed parse unchanged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding_replicas: Vec<i32>,
    /// While the partition is being reassigned: the replicas the move removes once
    /// every target replica is in sync (still in the assignment, after the target).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing_replicas: Vec<i32>,
    /// The key's etcd `mod_revision`: grows with every change of this state (Kafka's
    /// partition epoch). Not stored; filled in when read, and compared on write.
    #[serde(skip)]
    pub partition_epoch: i64,
}

/// A partition of a topic.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl PartitionState {
    /// Whether a reassignment of this partition is in progress (Kafka's
    /// `isReassignmentInProgress`).
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self { topic: topic.into(), partition }
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Why replicas cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssignmentError {
    /// More replicas asked for than brokers are alive (Kafka's INVALID_REPLICATION_FACTOR).
    #[error("replication factor {replication_factor} is larger than the {live} live brokers")]
    NotEnoughBrokers { replication_factor: i32, live: usize },
    /// A replication factor or partition count below 1.
    #[error("{0}")]
    Invalid(String),
    /// A partition count that does not grow the topic (Kafka's INVALID_PARTITIONS).
    #[error("{0}")]
    InvalidPartitions(String),
    /// A manual assignment naming unknown or repeated brokers, or the wrong number of
    /// replicas (Kafka's INVALID_REPLICA_ASSIGNMENT).
    #[error("{0}")]
    InvalidReplicaAssignment(String),
}

/// Places `replication_factor` replicas of partitions `first_partition..first_partition+count`
/// on the live `brokers` (node id → rack), as Kafka does: brokers are ordered so that
/// racks alternate, each partition's replicas are consecutive brokers of that order,
/// and the starting broker moves by one per partition (so leaders spread). `seed`
/// (e.g. a hash of the topic name) picks where a topic starts, so that the leaders of
/// many small topics do not all land on the same broker.
///
/// # Errors
/// [`AssignmentError`] when there are fewer live brokers than replicas.
pub fn assign_replicas(
    brokers: &BTreeMap<i32, Option<String>>,
    first_partition: i32,
    count: i32,
    replication_factor: i32,
    seed: u64,
) -> Result<BTreeMap<i32, Vec<i32>>, AssignmentError> {
    if replication_factor < 1 {
        return Err(AssignmentError::Invalid(format!(
            "replication factor must be at least 1, not {replication_factor}"
        )));
    }
    if count < 1 {
        return Err(AssignmentError::Invalid(format!(
            "partition count must be at least 1, not {count}"
        )));
    }
    if replication_factor as usize > brokers.len() {
        return Err(AssignmentError::NotEnoughBrokers { replication_factor, live: brokers.len() });
    }
    let order = rack_alternated(brokers);
    let start = (seed % order.len() as u64) as usize;
    Ok(place(&order, start, first_partition, count, replication_factor))
}

/// Partition `p`'s replicas are `replication_factor` consecutive brokers of `order`,
/// from position `start + p`.
fn place(
    order: &[i32],
    start: usize,
    first_partition: i32,
    count: i32,
    replication_factor: i32,
) -> BTreeMap<i32, Vec<i32>> {
    let n = order.len();
    (first_partition..first_partition + count)
        .map(|p| {
            let first = (start + p as usize) % n;
            (p, (0..replication_factor as usize).map(|j| order[(first + j) % n]).collect())
        })
        .collect()
}

/// The replicas of the partitions CreatePartitions adds to a topic placed as
/// `current` (partition → replicas), growing it to `new_count` partitions. With
/// `manual` (one replica list per added partition, in order) they are checked: each
/// names distinct live brokers, as many as the topic's replication factor. Without,
/// they are placed over the live `brokers` as [`assign_replicas`] does, continuing the
/// topic's rotation from where its partition 0 starts (so that, over the same
/// brokers, the topic looks as if created with `new_count` partitions; `seed` decides
/// where it starts when partition 0's first replica is gone). Returns only the added
/// partitions.
///
/// # Errors
/// [`AssignmentError::InvalidPartitions`] when `new_count` is not larger;
/// [`AssignmentError::InvalidReplicaAssignment`] for a bad manual assignment;
/// [`AssignmentError::NotEnoughBrokers`] when fewer brokers are alive than the
/// topic has replicas per partition.
pub fn assign_added_partitions(
    current: &BTreeMap<i32, Vec<i32>>,
    brokers: &BTreeMap<i32, Option<String>>,
    new_count: i32,
    manual: Option<&[Vec<i32>]>,
    seed: u64,
) -> Result<BTreeMap<i32, Vec<i32>>, AssignmentError> {
    let existing = current.len() as i32;
    if new_count == existing {
        return Err(AssignmentError::InvalidPartitions(format!(
            "the topic already has {existing} partition(s)"
        )));
    }
    if new_count < existing {
        return Err(AssignmentError::InvalidPartitions(format!(
            "the topic has {existing} partition(s); {new_count} would not be an increase"
        )));
    }
    let added = new_count - existing;
    // A topic keeps one replication factor: its first partition's.
    let replication_factor = current.values().next().map_or(0, Vec::len);
    if replication_factor == 0 {
        return Err(AssignmentError::Invalid(
            "the topic has no partitions to take a replication factor from".into(),
        ));
    }
    if let Some(manual) = manual {
        if manual.len() != added as usize {
            return Err(AssignmentError::InvalidReplicaAssignment(format!(
                "{added} partition(s) are added, but {} assignment(s) were given",
                manual.len()
            )));
        }
        let mut out = BTreeMap::new();
        for (p, replicas) in (existing..).zip(manual) {
            check_manual_replicas(p, replicas, replication_factor, brokers)?;
            out.insert(p, replicas.clone());
        }
        return Ok(out);
    }
    let rf = replication_factor as i32;
    if replication_factor > brokers.len() {
        return Err(AssignmentError::NotEnoughBrokers {
            replication_factor: rf,
            live: brokers.len(),
        });
    }
    let order = rack_alternated(brokers);
    let start = current
        .get(&0)
        .and_then(|r| r.first())
        .and_then(|first| order.iter().position(|b| b == first))
        .unwrap_or((seed % order.len() as u64) as usize);
    Ok(place(&order, start, existing, added, rf))
}

/// One partition of a manual assignment: `replication_factor` distinct live brokers.
fn check_manual_replicas(
    p: i32,
    replicas: &[i32],
    replication_factor: usize,
    brokers: &BTreeMap<i32, Option<String>>,
) -> Result<(), AssignmentError> {
    let bad = |reason: String| {
        Err(AssignmentError::InvalidReplicaAssignment(format!("partition {p}: {reason}")))
    };
    if replicas.is_empty() {
        return bad("the replica list is empty".into());
    }
    let mut seen = BTreeSet::new();
    for r in replicas {
        if !brokers.contains_key(r) {
            return bad(format!("broker {r} is not a live broker of this cluster"));
        }
        if !seen.insert(*r) {
            return bad(format!("broker {r} appears more than once in {replicas:?}"));
        }
    }
    if replicas.len() != replication_factor {
        return bad(format!(
            "{} replica(s) given, but the topic's partitions have {replication_factor}",
            replicas.len()
        ));
    }
    Ok(())
}

/// The brokers in an order where consecutive ones are on different racks as long as
/// racks remain: one broker of each rack in turn (Kafka's `getRackAlternatedBrokerList`).
/// Brokers without a rack form one rack of their own.
fn rack_alternated(brokers: &BTreeMap<i32, Option<String>>) -> Vec<i32> {
    let mut by_rack: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (id, rack) in brokers {
        by_rack.entry(rack.as_deref().unwrap_or("")).or_default().push(*id);
    }
    let mut out = Vec::with_capacity(brokers.len());
    let mut round = 0;
    while out.len() < brokers.len() {
        for ids in by_rack.values() {
            if let Some(id) = ids.get(round) {
                out.push(*id);
            }
        }
        round += 1;
    }
    out
}

/// The state a new partition starts in: its first replica leads, all are in sync.
pub fn initial_partition_state(replicas: &[i32]) -> PartitionState {
    PartitionState {
        leader: replicas.first().copied().unwrap_or(NO_LEADER),
        leader_epoch: 0,
        isr: replicas.to_vec(),
        ..PartitionState::default()
    }
}

/// What the controller makes of a partition given the live brokers: `None` when
/// nothing is to change, else the state to write.
///
/// - Replicas that are not alive leave the ISR (as Kafka's controller does when a
///   broker is fenced), except the last one: an ISR is never emptied, so that the
///   last in-sync replica can lead again when it returns (a clean election).
/// - A leader that is not alive is replaced by the first live ISR member in
///   assignment order; with none, the partition goes offline ([`NO_LEADER`]) —
///   unless `unclean` (`unclean.leader.election.enable`), when the first live
///   replica leads with an ISR of itself, accepting the loss of what it lacks.
/// - An offline partition whose ISR member is back is led by it again.
/// - Every change of leader bumps the leader epoch.
pub fn next_partition_state(
    current: &PartitionState,
    replicas: &[i32],
    live: &BTreeSet<i32>,
    unclean: bool,
) -> Option<PartitionState> {
    let leader_alive = current.leader != NO_LEADER && live.contains(&current.leader);
    let live_isr: Vec<i32> = current.isr.iter().copied().filter(|r| live.contains(r)).collect();
    let mut next = current.clone();
    if leader_alive {
        if !live_isr.is_empty() {
            next.isr = live_isr;
        }
    } else {
        let in_order = replicas.iter().copied().filter(|r| live_isr.contains(r));
        let leader = in_order.chain(live_isr.iter().copied()).next();
        match leader {
            Some(leader) => {
                next.leader = leader;
                next.isr = live_isr;
            }
            None if unclean => match replicas.iter().copied().find(|r| live.contains(r)) {
                Some(leader) => {
                    next.leader = leader;
                    next.isr = vec![leader];
                }
                None => next.leader = NO_LEADER,
            },
            None => next.leader = NO_LEADER,
        }
        if next.leader != current.leader {
            next.leader_epoch = current.leader_epoch + 1;
        }
    }
    (next != *current).then_some(next)
}

/// The two kinds of ElectLeaders (Kafka's `ElectionType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElectionType {
    /// Move leadership back to the first replica of the assignment.
    Preferred,
    /// Give a partition without a leader one, even a replica outside the ISR.
    Unclean,
}

/// Why ElectLeaders changes nothing for a partition (Kafka's error codes of the same names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ElectionError {
    /// The preferred replica already leads (preferred), or a leader exists (unclean).
    #[error("the partition already has the leader this election would give it")]
    NotNeeded,
    /// The preferred replica is not alive, or not in the ISR.
    #[error("the preferred replica is not alive or not in sync")]
    PreferredLeaderNotAvailable,
    /// No replica of the partition is alive.
    #[error("no replica of the partition is alive")]
    EligibleLeadersNotAvailable,
}

/// What ElectLeaders makes of a partition (Kafka's `ReplicationControlManager.electLeader`),
/// given the live brokers (those registered and not shutting down):
///
/// - [`ElectionType::Preferred`]: the first replica of the assignment leads, if it is
///   alive and in the ISR. The ISR is kept: the new leader is in it, so nothing
///   acknowledged is lost.
/// - [`ElectionType::Unclean`]: only for a partition without a leader. A live ISR
///   member leads if there is one (a clean election after all); else the first live
///   replica, with an ISR of itself, accepting the loss of what it lacks.
///
/// Either bumps the leader epoch. The result does not undo itself: the controller's
/// [`next_partition_state`] keeps a live leader where it is.
///
/// # Errors
/// [`ElectionError`] when there is nothing to do or no one to elect.
pub fn elect_leader(
    current: &PartitionState,
    replicas: &[i32],
    live: &BTreeSet<i32>,
    election: ElectionType,
) -> Result<PartitionState, ElectionError> {
    let leader = match election {
        ElectionType::Preferred => {
            let preferred =
                replicas.first().copied().ok_or(ElectionError::PreferredLeaderNotAvailable)?;
            if current.leader == preferred {
                return Err(ElectionError::NotNeeded);
            }
            if !live.contains(&preferred) || !current.isr.contains(&preferred) {
                return Err(ElectionError::PreferredLeaderNotAvailable);
            }
            preferred
        }
        ElectionType::Unclean => {
            if current.leader != NO_LEADER {
                return Err(ElectionError::NotNeeded);
            }
            let clean =
                replicas.iter().copied().find(|r| live.contains(r) && current.isr.contains(r));
            match clean {
                Some(leader) => leader,
                None => {
                    let leader = replicas
                        .iter()
                        .copied()
                        .find(|r| live.contains(r))
                        .ok_or(ElectionError::EligibleLeadersNotAvailable)?;
                    return Ok(PartitionState {
                        leader,
                        leader_epoch: current.leader_epoch + 1,
                        isr: vec![leader],
                        ..current.clone()
                    });
                }
            }
        }
    };
    Ok(PartitionState { leader, leader_epoch: current.leader_epoch + 1, ..current.clone() })
}

/// Kafka's automatic leader rebalance (`auto.leader.rebalance.enable`): for each broker,
/// the share of the partitions it is the preferred leader of (first replica) that it
/// does not lead. Returns the partitions not led by their preferred replica, of every
/// broker whose share is above `imbalance_percentage` (Kafka's
/// `leader.imbalance.per.broker.percentage`), for the controller to move back with a
/// preferred election ([`elect_leader`], which declines where the preferred replica is
/// away or out of sync).
pub fn imbalanced_partitions<'a>(
    partitions: impl IntoIterator<Item = (&'a TopicPartition, &'a [i32], &'a PartitionState)>,
    imbalance_percentage: u32,
) -> Vec<TopicPartition> {
    // preferred broker → (partitions it is preferred for, those it does not lead)
    let mut by_broker: BTreeMap<i32, (usize, Vec<TopicPartition>)> = BTreeMap::new();
    for (tp, replicas, state) in partitions {
        let Some(&preferred) = replicas.first() else { continue };
        let entry = by_broker.entry(preferred).or_default();
        entry.0 += 1;
        if state.leader != preferred {
            entry.1.push(tp.clone());
        }
    }
    by_broker
        .into_values()
        .filter(|(total, off)| off.len() * 100 > *total * imbalance_percentage as usize)
        .flat_map(|(_, off)| off)
        .collect()
}

/// Why AlterPartitionReassignments changes nothing for a partition (Kafka's error
/// codes of the same names).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReassignmentError {
    /// A target that is empty, repeats a broker or names one not registered; or a
    /// cancellation that would need an unclean election while that is disabled.
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    /// A cancellation of a partition that is not being moved.
    #[error("no partition reassignment is in progress")]
    NoReassignmentInProgress,
}

/// A partition's replicas (its entry of the topic's assignment) and state after a
/// reassignment decision: both are written together, in one transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReassignedPartition {
    pub replicas: Vec<i32>,
    pub state: PartitionState,
}

/// Starts (or changes) moving a partition to the `target` replicas, as Kafka's
/// controller does (`ReplicationControlManager.changePartitionReassignment` with
/// `PartitionReassignmentReplicas`):
///
/// - `target` must be non-empty, name only `registered` brokers, each once
///   (INVALID_REPLICA_ASSIGNMENT); its length may differ from the current one.
/// - The move is computed against the partition's current `replicas` (the union, for a
///   partition already moving): `removing` = current − target, `adding` = target −
///   current, and the replicas become target then removing, so that no copy is given
///   up before the target is in sync.
/// - If the ISR already holds every target replica (a reordering, a shrink) the move
///   completes at once ([`complete_reassignment`]'s rule).
/// - A leader that is not in the resulting ISR (or not live) is replaced by the first
///   replica in it and live; the leader epoch grows when the leader changes or a
///   replica leaves.
///
/// Unlike Kafka's `PartitionChangeBuilder`, a change whose own adding and removing
/// lists are empty clears the previous move's lists rather than keeping them: the
/// target given is the whole truth of the new move.
///
/// Returns `None` when nothing changes (the target is the current replicas, and no
/// move is in progress).
///
/// # Errors
/// [`ReassignmentError::InvalidReplicaAssignment`].
pub fn start_reassignment(
    replicas: &[i32],
    current: &PartitionState,
    target: &[i32],
    registered: &BTreeSet<i32>,
    live: &BTreeSet<i32>,
) -> Result<Option<ReassignedPartition>, ReassignmentError> {
    let bad = |reason: String| Err(ReassignmentError::InvalidReplicaAssignment(reason));
    if target.is_empty() {
        return bad("the target replica list is empty".into());
    }
    let mut seen = BTreeSet::new();
    for r in target {
        if !registered.contains(r) {
            return bad(format!(
                "the target includes broker {r}, but no such broker is registered"
            ));
        }
        if !seen.insert(*r) {
            return bad(format!("the target includes broker {r} more than once"));
        }
    }
    let removing: Vec<i32> = replicas
        .iter()
        .copied()
        .filter(|r| !target.contains(r))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let adding: Vec<i32> = target
        .iter()
        .copied()
        .filter(|r| !replicas.contains(r))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut union = target.to_vec();
    union.extend(&removing);
    if union == replicas && adding.is_empty() && removing.is_empty() && !current.is_reassigning() {
        return Ok(None);
    }
    Ok(Some(change(replicas, current, union, adding, removing, current.isr.clone(), live)))
}

/// Cancels a partition's move (a null target), as Kafka's
/// `cancelPartitionReassignment` with `PartitionReassignmentRevert`: the replicas go
/// back to the union without the adding ones, which also leave the ISR; an adding
/// replica that led is replaced (leader epoch + 1, as always when replicas leave).
/// If every in-sync replica was an adding one, only `unclean`
/// (`unclean.leader.election.enable`) lets the first original replica lead alone.
///
/// # Errors
/// [`ReassignmentError::NoReassignmentInProgress`] for a partition not moving;
/// [`ReassignmentError::InvalidReplicaAssignment`] when the revert needs an unclean
/// election that is not enabled.
pub fn cancel_reassignment(
    replicas: &[i32],
    current: &PartitionState,
    live: &BTreeSet<i32>,
    unclean: bool,
) -> Result<ReassignedPartition, ReassignmentError> {
    if !current.is_reassigning() {
        return Err(ReassignmentError::NoReassignmentInProgress);
    }
    let original: Vec<i32> =
        replicas.iter().copied().filter(|r| !current.adding_replicas.contains(r)).collect();
    let mut isr: Vec<i32> =
        current.isr.iter().copied().filter(|r| !current.adding_replicas.contains(r)).collect();
    if isr.is_empty() {
        let Some(&first) = original.first() else {
            return Err(ReassignmentError::InvalidReplicaAssignment(
                "the reassignment adds every replica: nothing to revert to".into(),
            ));
        };
        if !unclean {
            return Err(ReassignmentError::InvalidReplicaAssignment(
                "reverting would need an unclean leader election: every in-sync replica is one the reassignment adds".into(),
            ));
        }
        isr.push(first);
    }
    Ok(change(replicas, current, original, Vec::new(), Vec::new(), isr, live))
}

/// The controller's step that ends a move (Kafka's `maybeCompleteReassignment`):
/// once the ISR, without the removing replicas, holds every target replica, the
/// replicas become the target, the ISR loses the removing ones, the lists are
/// cleared, and a leader that is leaving is replaced by the first target replica in
/// the ISR that is live (leader epoch + 1, also when only followers leave, so that a
/// removed replica's fetches are fenced). `None` while the move must wait: a target
/// replica still catching up, or no target replica live to lead (Kafka would complete
/// into an offline partition; Floe waits for one to return).
pub fn complete_reassignment(
    replicas: &[i32],
    current: &PartitionState,
    live: &BTreeSet<i32>,
) -> Option<ReassignedPartition> {
    if !current.is_reassigning() {
        return None;
    }
    let (target, isr) = completed(replicas, &current.removing_replicas, &current.isr)?;
    let next = change(replicas, current, target, Vec::new(), Vec::new(), isr, live);
    (next.state.leader != NO_LEADER).then_some(next)
}

/// The replicas and ISR of a move that can complete with `isr`: both without the
/// `removing` replicas, the ISR holding every remaining replica and neither empty.
fn completed(replicas: &[i32], removing: &[i32], isr: &[i32]) -> Option<(Vec<i32>, Vec<i32>)> {
    let target: Vec<i32> = replicas.iter().copied().filter(|r| !removing.contains(r)).collect();
    let isr: Vec<i32> = isr.iter().copied().filter(|r| !removing.contains(r)).collect();
    if target.is_empty() || isr.is_empty() || !target.iter().all(|r| isr.contains(r)) {
        return None;
    }
    Some((target, isr))
}

/// Kafka's `PartitionChangeBuilder` for a change of replicas: completes the move if
/// it can, keeps the leader if it is in the new ISR and live (else the first replica
/// that is, else [`NO_LEADER`]), and bumps the leader epoch when the leader changes or
/// a replica of `old_replicas` leaves.
fn change(
    old_replicas: &[i32],
    current: &PartitionState,
    mut replicas: Vec<i32>,
    mut adding: Vec<i32>,
    mut removing: Vec<i32>,
    mut isr: Vec<i32>,
    live: &BTreeSet<i32>,
) -> ReassignedPartition {
    if !adding.is_empty() || !removing.is_empty() {
        if let Some((target, shrunk)) = completed(&replicas, &removing, &isr) {
            (replicas, isr) = (target, shrunk);
            adding.clear();
            removing.clear();
        }
    }
    let eligible = |r: &i32| isr.contains(r) && live.contains(r) && replicas.contains(r);
    let leader = if current.leader != NO_LEADER && eligible(&current.leader) {
        current.leader
    } else {
        replicas.iter().copied().find(|r| eligible(r)).unwrap_or(NO_LEADER)
    };
    let replica_left = old_replicas.iter().any(|r| !replicas.contains(r));
    let leader_epoch = if leader != current.leader || replica_left {
        current.leader_epoch + 1
    } else {
        current.leader_epoch
    };
    let state = PartitionState {
        leader,
        leader_epoch,
        isr,
        adding_replicas: adding,
        removing_replicas: removing,
        partition_epoch: current.partition_epoch,
    };
    ReassignedPartition { replicas, state }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brokers(racks: &[(i32, Option<&str>)]) -> BTreeMap<i32, Option<String>> {
        racks.iter().map(|(id, r)| (*id, r.map(str::to_string))).collect()
    }

    fn live(ids: &[i32]) -> BTreeSet<i32> {
        ids.iter().copied().collect()
    }

    fn state(leader: i32, epoch: i32, isr: &[i32]) -> PartitionState {
        PartitionState {
            leader,
            leader_epoch: epoch,
            isr: isr.to_vec(),
            partition_epoch: 7,
            ..PartitionState::default()
        }
    }

    #[test]
    fn replicas_spread_leaders_and_never_repeat_a_broker() {
        let b = brokers(&[(1, None), (2, None), (3, None)]);
        let a = assign_replicas(&b, 0, 6, 3, 0).unwrap();
        let mut leaders = BTreeMap::new();
        for replicas in a.values() {
            let distinct: BTreeSet<_> = replicas.iter().collect();
            assert_eq!(distinct.len(), 3, "{replicas:?}");
            *leaders.entry(replicas[0]).or_insert(0) += 1;
        }
        assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![2, 2, 2], "{a:?}");
    }

    #[test]
    fn replicas_go_to_different_racks_first() {
        let b = brokers(&[(1, Some("a")), (2, Some("a")), (3, Some("b")), (4, Some("b"))]);
        let a = assign_replicas(&b, 0, 8, 2, 3).unwrap();
        for replicas in a.values() {
            let racks: BTreeSet<_> = replicas.iter().map(|r| b[r].clone()).collect();
            assert_eq!(racks.len(), 2, "{replicas:?} share a rack");
        }
    }

    #[test]
    fn too_few_brokers_is_refused() {
        let b = brokers(&[(1, None), (2, None)]);
        assert_eq!(
            assign_replicas(&b, 0, 1, 3, 0),
            Err(AssignmentError::NotEnoughBrokers { replication_factor: 3, live: 2 })
        );
        assert!(matches!(assign_replicas(&b, 0, 1, 0, 0), Err(AssignmentError::Invalid(_))));
        assert!(matches!(assign_replicas(&b, 0, 0, 1, 0), Err(AssignmentError::Invalid(_))));
    }

    #[test]
    fn added_partitions_continue_the_rotation() {
        let b = brokers(&[(1, None), (2, None), (3, None)]);
        let all = assign_replicas(&b, 0, 5, 2, 9).unwrap();
        let tail = assign_replicas(&b, 3, 2, 2, 9).unwrap();
        assert_eq!(tail[&3], all[&3]);
        assert_eq!(tail[&4], all[&4]);
    }

    #[test]
    fn a_healthy_partition_is_left_alone() {
        assert_eq!(
            next_partition_state(&state(1, 4, &[1, 2, 3]), &[1, 2, 3], &live(&[1, 2, 3]), false),
            None
        );
    }

    #[test]
    fn a_dead_follower_leaves_the_isr_without_an_epoch_bump() {
        let next =
            next_partition_state(&state(1, 4, &[1, 2, 3]), &[1, 2, 3], &live(&[1, 3]), false)
                .unwrap();
        assert_eq!((next.leader, next.leader_epoch, next.isr), (1, 4, vec![1, 3]));
    }

    #[test]
    fn a_dead_leader_is_replaced_by_the_first_live_isr_member_in_assignment_order() {
        let next =
            next_partition_state(&state(1, 4, &[3, 1, 2]), &[1, 2, 3], &live(&[2, 3]), false)
                .unwrap();
        assert_eq!((next.leader, next.leader_epoch, next.isr), (2, 5, vec![3, 2]));
    }

    #[test]
    fn an_out_of_sync_replica_never_leads_unless_unclean() {
        // Broker 1 led alone (2 and 3 had fallen out of the ISR), then died.
        let offline =
            next_partition_state(&state(1, 4, &[1]), &[1, 2, 3], &live(&[2, 3]), false).unwrap();
        assert_eq!(
            (offline.leader, offline.leader_epoch, offline.isr.clone()),
            (NO_LEADER, 5, vec![1])
        );
        // Nothing more to do while 1 stays away.
        assert_eq!(next_partition_state(&offline, &[1, 2, 3], &live(&[2, 3]), false), None);
        // 1 returns: it leads again, cleanly.
        let back = next_partition_state(&offline, &[1, 2, 3], &live(&[1, 2, 3]), false).unwrap();
        assert_eq!((back.leader, back.leader_epoch, back.isr), (1, 6, vec![1]));
        // Unclean: 2 takes over with an ISR of itself.
        let unclean =
            next_partition_state(&state(1, 4, &[1]), &[1, 2, 3], &live(&[2, 3]), true).unwrap();
        assert_eq!((unclean.leader, unclean.leader_epoch, unclean.isr), (2, 5, vec![2]));
    }

    #[test]
    fn added_partitions_continue_the_topics_rotation() {
        let b = brokers(&[(1, None), (2, None), (3, None)]);
        let all = assign_replicas(&b, 0, 7, 2, 4).unwrap();
        let first: BTreeMap<i32, Vec<i32>> =
            all.range(0..3).map(|(p, r)| (*p, r.clone())).collect();
        // The seed is unused while partition 0's first replica is alive.
        let added = assign_added_partitions(&first, &b, 7, None, 99).unwrap();
        assert_eq!(added.keys().copied().collect::<Vec<_>>(), vec![3, 4, 5, 6]);
        for (p, r) in &added {
            assert_eq!(r, &all[p], "partition {p}");
        }
        // Partition 0's first replica gone: placed over the live brokers from the seed.
        let fewer = brokers(&[(2, None), (3, None), (4, None)]);
        let gone = BTreeMap::from([(0, vec![1, 2])]);
        let added = assign_added_partitions(&gone, &fewer, 3, None, 0).unwrap();
        assert_eq!(added, assign_replicas(&fewer, 1, 2, 2, 0).unwrap());
    }

    #[test]
    fn partition_counts_must_grow() {
        let b = brokers(&[(1, None), (2, None)]);
        let current = BTreeMap::from([(0, vec![1, 2]), (1, vec![2, 1])]);
        assert!(matches!(
            assign_added_partitions(&current, &b, 2, None, 0),
            Err(AssignmentError::InvalidPartitions(_))
        ));
        assert!(matches!(
            assign_added_partitions(&current, &b, 1, None, 0),
            Err(AssignmentError::InvalidPartitions(_))
        ));
        let one = brokers(&[(1, None)]);
        assert_eq!(
            assign_added_partitions(&current, &one, 3, None, 0),
            Err(AssignmentError::NotEnoughBrokers { replication_factor: 2, live: 1 })
        );
    }

    #[test]
    fn manual_assignments_of_added_partitions_are_checked() {
        let b = brokers(&[(1, None), (2, None), (3, None)]);
        let current = BTreeMap::from([(0, vec![1, 2])]);
        let ok =
            assign_added_partitions(&current, &b, 3, Some(&[vec![3, 1], vec![2, 3]]), 0).unwrap();
        assert_eq!(ok, BTreeMap::from([(1, vec![3, 1]), (2, vec![2, 3])]));
        for bad in [
            vec![vec![3, 1]],                // one assignment for two partitions
            vec![vec![3, 1], vec![2, 2]],    // a broker twice
            vec![vec![3, 1], vec![2, 9]],    // no broker 9
            vec![vec![3, 1], vec![2, 3, 1]], // three replicas where the topic has two
            vec![vec![3, 1], vec![]],        // none
        ] {
            assert!(
                matches!(
                    assign_added_partitions(&current, &b, 3, Some(&bad), 0),
                    Err(AssignmentError::InvalidReplicaAssignment(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_preferred_election_moves_leadership_to_the_first_replica_in_sync() {
        let next = elect_leader(
            &state(2, 4, &[2, 3, 1]),
            &[1, 2, 3],
            &live(&[1, 2, 3]),
            ElectionType::Preferred,
        )
        .unwrap();
        assert_eq!(
            (next.leader, next.leader_epoch, next.isr.clone(), next.partition_epoch),
            (1, 5, vec![2, 3, 1], 7)
        );
        // The controller keeps it.
        assert_eq!(next_partition_state(&next, &[1, 2, 3], &live(&[1, 2, 3]), false), None);
        // Nothing to do when it leads; nothing possible when it is dead or out of sync.
        assert_eq!(
            elect_leader(&next, &[1, 2, 3], &live(&[1, 2, 3]), ElectionType::Preferred),
            Err(ElectionError::NotNeeded)
        );
        assert_eq!(
            elect_leader(
                &state(2, 4, &[2, 3]),
                &[1, 2, 3],
                &live(&[1, 2, 3]),
                ElectionType::Preferred
            ),
            Err(ElectionError::PreferredLeaderNotAvailable)
        );
        assert_eq!(
            elect_leader(
                &state(2, 4, &[2, 3, 1]),
                &[1, 2, 3],
                &live(&[2, 3]),
                ElectionType::Preferred
            ),
            Err(ElectionError::PreferredLeaderNotAvailable)
        );
    }

    #[test]
    fn an_unclean_election_only_fills_a_missing_leader() {
        let u = ElectionType::Unclean;
        assert_eq!(
            elect_leader(&state(2, 4, &[2]), &[1, 2, 3], &live(&[1, 2, 3]), u),
            Err(ElectionError::NotNeeded)
        );
        // Broker 1 was the last in sync and is gone: 2 leads alone.
        let next = elect_leader(&state(NO_LEADER, 5, &[1]), &[1, 2, 3], &live(&[2, 3]), u).unwrap();
        assert_eq!((next.leader, next.leader_epoch, next.isr), (2, 6, vec![2]));
        // An ISR member alive is preferred, and keeps the ISR.
        let next = elect_leader(&state(NO_LEADER, 5, &[3]), &[1, 2, 3], &live(&[2, 3]), u).unwrap();
        assert_eq!((next.leader, next.leader_epoch, next.isr), (3, 6, vec![3]));
        assert_eq!(
            elect_leader(&state(NO_LEADER, 5, &[1]), &[1, 2], &live(&[3]), u),
            Err(ElectionError::EligibleLeadersNotAvailable)
        );
    }

    #[test]
    fn only_brokers_past_the_imbalance_threshold_get_their_leadership_back() {
        // Broker 1 is preferred for 10 partitions and leads 9; broker 2 for 2, leads 1.
        let mut parts = Vec::new();
        for p in 0..10 {
            parts.push((
                TopicPartition::new("a", p),
                vec![1, 2],
                state(if p == 0 { 2 } else { 1 }, 1, &[1, 2]),
            ));
        }
        for p in 0..2 {
            parts.push((
                TopicPartition::new("b", p),
                vec![2, 1],
                state(if p == 0 { 1 } else { 2 }, 1, &[1, 2]),
            ));
        }
        let view = || parts.iter().map(|(tp, r, s)| (tp, r.as_slice(), s));
        // 1 of 10 is 10%: not above 10%. 1 of 2 is 50%.
        assert_eq!(imbalanced_partitions(view(), 10), vec![TopicPartition::new("b", 0)]);
        assert_eq!(
            imbalanced_partitions(view(), 5),
            vec![TopicPartition::new("a", 0), TopicPartition::new("b", 0)]
        );
        assert_eq!(imbalanced_partitions(view(), 50), Vec::<TopicPartition>::new());
    }

    #[test]
    fn state_json_leaves_the_partition_epoch_out() {
        let json = serde_json::to_string(&state(2, 3, &[2, 1])).unwrap();
        assert_eq!(json, r#"{"leader":2,"leader_epoch":3,"isr":[2,1]}"#);
        let back: PartitionState = serde_json::from_str(&json).unwrap();
        assert_eq!(back.partition_epoch, 0);
    }

    fn moving(
        leader: i32,
        epoch: i32,
        isr: &[i32],
        adding: &[i32],
        removing: &[i32],
    ) -> PartitionState {
        PartitionState {
            adding_replicas: adding.to_vec(),
            removing_replicas: removing.to_vec(),
            ..state(leader, epoch, isr)
        }
    }

    #[test]
    fn a_move_starts_with_the_union_target_first() {
        let all = live(&[1, 2, 3, 4]);
        let next = start_reassignment(&[1, 2, 3], &state(1, 4, &[1, 2, 3]), &[2, 3, 4], &all, &all)
            .unwrap()
            .unwrap();
        assert_eq!(next.replicas, vec![2, 3, 4, 1]);
        // Nothing leaves yet: same leader, same epoch, same ISR.
        assert_eq!(next.state, moving(1, 4, &[1, 2, 3], &[4], &[1]));
        assert!(next.state.is_reassigning());
    }

    #[test]
    fn a_bad_target_is_refused() {
        let all = live(&[1, 2, 3]);
        let s = state(1, 4, &[1, 2, 3]);
        for bad in [vec![], vec![2, 2], vec![2, 9]] {
            assert!(
                matches!(
                    start_reassignment(&[1, 2, 3], &s, &bad, &all, &all),
                    Err(ReassignmentError::InvalidReplicaAssignment(_))
                ),
                "{bad:?}"
            );
        }
        // The same replicas in the same order: nothing to do.
        assert_eq!(start_reassignment(&[1, 2, 3], &s, &[1, 2, 3], &all, &all), Ok(None));
    }

    #[test]
    fn a_target_already_in_sync_completes_at_once() {
        let all = live(&[1, 2, 3]);
        // A reordering: only the assignment changes.
        let next = start_reassignment(&[1, 2, 3], &state(1, 4, &[1, 2, 3]), &[3, 1, 2], &all, &all)
            .unwrap()
            .unwrap();
        assert_eq!((next.replicas, next.state), (vec![3, 1, 2], state(1, 4, &[1, 2, 3])));
        // A shrink away from the leader: 2 leads, the epoch grows.
        let next = start_reassignment(&[1, 2, 3], &state(1, 4, &[1, 2, 3]), &[2, 3], &all, &all)
            .unwrap()
            .unwrap();
        assert_eq!((next.replicas, next.state), (vec![2, 3], state(2, 5, &[2, 3])));
        // A shrink of a follower: the leader stays, the epoch still grows (3 is fenced).
        let next = start_reassignment(&[1, 2, 3], &state(1, 4, &[1, 2, 3]), &[1, 2], &all, &all)
            .unwrap()
            .unwrap();
        assert_eq!((next.replicas, next.state), (vec![1, 2], state(1, 5, &[1, 2])));
    }

    #[test]
    fn a_move_completes_once_every_target_replica_is_in_sync() {
        let all = live(&[1, 2, 3, 4]);
        let replicas = [2, 3, 4, 1];
        // 4 is catching up: wait.
        assert_eq!(
            complete_reassignment(&replicas, &moving(1, 4, &[1, 2, 3], &[4], &[1]), &all),
            None
        );
        // 4 joined the ISR: 1 leaves, and since it led, 2 (the first target replica in
        // the ISR) leads at the next epoch.
        let next = complete_reassignment(&replicas, &moving(1, 4, &[1, 2, 3, 4], &[4], &[1]), &all)
            .unwrap();
        assert_eq!((next.replicas, next.state), (vec![2, 3, 4], state(2, 5, &[2, 3, 4])));
        // A follower leaving: the leader stays, the epoch grows.
        let next = complete_reassignment(&replicas, &moving(3, 4, &[3, 1, 2, 4], &[4], &[1]), &all)
            .unwrap();
        assert_eq!((next.replicas, next.state), (vec![2, 3, 4], state(3, 5, &[3, 2, 4])));
        // Nothing moving: nothing to complete.
        assert_eq!(complete_reassignment(&[1, 2, 3], &state(1, 4, &[1, 2, 3]), &all), None);
        // Every target replica in sync but none alive to lead: wait for one.
        assert_eq!(
            complete_reassignment(&replicas, &moving(1, 4, &[1, 2, 3, 4], &[4], &[1]), &live(&[1])),
            None
        );
    }

    #[test]
    fn a_new_target_for_a_moving_partition_starts_from_its_current_replicas() {
        let all = live(&[1, 2, 3, 4, 5]);
        // {1,2,3} → {2,3,4} under way; now {2,3,5}: 4 (never in sync) is removed too.
        let next = start_reassignment(
            &[2, 3, 4, 1],
            &moving(1, 4, &[1, 2, 3], &[4], &[1]),
            &[2, 3, 5],
            &all,
            &all,
        )
        .unwrap()
        .unwrap();
        assert_eq!(next.replicas, vec![2, 3, 5, 1, 4]);
        assert_eq!(next.state, moving(1, 4, &[1, 2, 3], &[5], &[1, 4]));
        // The whole union as target: the move is over, nothing leaves.
        let next = start_reassignment(
            &[2, 3, 4, 1],
            &moving(1, 4, &[1, 2, 3], &[4], &[1]),
            &[2, 3, 4, 1],
            &all,
            &all,
        )
        .unwrap()
        .unwrap();
        assert_eq!((next.replicas, next.state), (vec![2, 3, 4, 1], state(1, 4, &[1, 2, 3])));
    }

    #[test]
    fn cancelling_reverts_to_the_original_replicas() {
        let all = live(&[1, 2, 3, 4]);
        let next = cancel_reassignment(
            &[2, 3, 4, 1],
            &moving(1, 4, &[1, 2, 3, 4], &[4], &[1]),
            &all,
            false,
        )
        .unwrap();
        // 4 leaves the replicas and the ISR; the epoch grows so its fetches are fenced.
        assert_eq!((next.replicas, next.state), (vec![2, 3, 1], state(1, 5, &[1, 2, 3])));
        // An adding replica that led is replaced by the first original one in sync.
        let next =
            cancel_reassignment(&[2, 3, 4, 1], &moving(4, 6, &[4, 3, 1], &[4], &[1]), &all, false)
                .unwrap();
        assert_eq!((next.replicas, next.state), (vec![2, 3, 1], state(3, 7, &[3, 1])));
        assert_eq!(
            cancel_reassignment(&[1, 2, 3], &state(1, 4, &[1, 2, 3]), &all, false),
            Err(ReassignmentError::NoReassignmentInProgress)
        );
    }

    #[test]
    fn a_cancel_that_needs_an_unclean_election_is_refused_unless_enabled() {
        let all = live(&[1, 2, 3, 4]);
        // Only 4 (adding) is in sync.
        let s = moving(4, 6, &[4], &[4], &[1]);
        assert!(matches!(
            cancel_reassignment(&[2, 3, 4, 1], &s, &all, false),
            Err(ReassignmentError::InvalidReplicaAssignment(_))
        ));
        let next = cancel_reassignment(&[2, 3, 4, 1], &s, &all, true).unwrap();
        assert_eq!((next.replicas, next.state), (vec![2, 3, 1], state(2, 7, &[2])));
    }

    #[test]
    fn moving_state_json_round_trips_and_old_states_parse() {
        let s = moving(1, 4, &[1, 2, 3], &[4], &[1]);
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(
            json,
            r#"{"leader":1,"leader_epoch":4,"isr":[1,2,3],"adding_replicas":[4],"removing_replicas":[1]}"#
        );
        let back: PartitionState = serde_json::from_str(&json).unwrap();
        assert_eq!(back, PartitionState { partition_epoch: 0, ..s });
        let old: PartitionState =
            serde_json::from_str(r#"{"leader":2,"leader_epoch":3,"isr":[2,1]}"#).unwrap();
        assert!(!old.is_reassigning());
    }
}
