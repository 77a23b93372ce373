//! The controller: while this broker holds the election, it keeps every partition led
//! by a live in-sync replica ([`next_partition_state`]), gives a state to every
//! partition of a topic that lacks one, and completes a partition's reassignment once
//! every target replica is in sync ([`complete_reassignment`]: the topic's assignment
//! and the partition's state in one write). With `auto.leader.rebalance.enable`, it also
//! moves leadership back to preferred replicas every
//! `leader.imbalance.check.interval.seconds` ([`imbalanced_partitions`]).
//!
//! Every write is an etcd transaction that compares
//! - the controller's own campaign key at its create revision (the controller
//!   epoch): a deposed controller's write fails, however late it arrives;
//! - the partition key at the `mod_revision` the decision was made from (the
//!   partition epoch): a decision on stale state fails, and is made again from the
//!   new state when the watch brings it;
//! - the topic key at its `create_revision`: a state is never written for a topic
//!   deleted meanwhile (nor for an earlier topic of the same name); a completed
//!   reassignment, which rewrites the topic's assignment, compares its `mod_revision`
//!   instead (a topic changed meanwhile, by CreatePartitions or another move, is
//!   decided again from the newer state).

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::etcd_keys::{bounded, partition_key, topic_key};
use crate::{
    complete_reassignment, elect_leader, imbalanced_partitions, initial_partition_state,
    next_partition_state, ClusterError, ClusterView, ElectionType, PartitionState, TopicAssignment,
    TopicPartition,
};

/// Kafka's automatic preferred-leader rebalance, run by the controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderRebalance {
    /// `leader.imbalance.check.interval.seconds`: how often the controller looks.
    pub interval: Duration,
    /// `leader.imbalance.per.broker.percentage`: the share of a broker's preferred
    /// partitions led elsewhere above which they are moved back.
    pub imbalance_percentage: u32,
}

/// How often the controller re-checks every partition even without a change in view
/// (a write that failed on a moved partition is retried from the newer state anyway).
const RECHECK_INTERVAL: Duration = Duration::from_secs(5);

/// What the controller needs for its fenced writes.
pub(crate) struct ControllerContext {
    pub client: Client,
    pub prefix: String,
    /// This broker's campaign key in the election, and its create revision.
    pub leader_key: Vec<u8>,
    pub controller_epoch: i64,
    pub unclean_leader_election: bool,
    pub leader_rebalance: Option<LeaderRebalance>,
    /// When the last automatic rebalance ran (the first waits one interval, so that
    /// brokers starting together have time to register).
    pub last_rebalance: tokio::time::Instant,
    pub timeout: Duration,
}

/// Runs the controller until its role ends (a fenced write, or etcd failing).
pub(crate) async fn run(
    mut ctx: ControllerContext,
    mut view: watch::Receiver<ClusterView>,
) -> Result<Infallible, ClusterError> {
    loop {
        let v = view.borrow_and_update().clone();
        reconcile(&mut ctx, &v).await?;
        if let Some(rebalance) = ctx.leader_rebalance {
            if ctx.last_rebalance.elapsed() >= rebalance.interval {
                ctx.last_rebalance = tokio::time::Instant::now();
                rebalance_leaders(&mut ctx, &v, rebalance.imbalance_percentage).await?;
            }
        }
        let wake =
            ctx.leader_rebalance.map_or(RECHECK_INTERVAL, |r| r.interval.min(RECHECK_INTERVAL));
        tokio::select! {
            changed = view.changed() => changed.map_err(|_| ClusterError::StreamEnded("cluster view"))?,
            _ = tokio::time::sleep(wake) => {}
        }
    }
}

/// One pass over every partition of `view`.
async fn reconcile(ctx: &mut ControllerContext, view: &ClusterView) -> Result<(), ClusterError> {
    // Brokers in controlled shutdown lead nothing and leave the ISRs, as if gone.
    let live: BTreeSet<i32> =
        view.brokers.values().filter(|b| !b.shutting_down).map(|b| b.node_id).collect();
    for (topic, assignment) in view.topics.iter() {
        for (&partition, replicas) in &assignment.partitions {
            let tp = TopicPartition::new(topic.clone(), partition);
            match view.partitions.get(&tp) {
                None => {
                    let state = initial_partition_state(replicas);
                    let next =
                        next_partition_state(&state, replicas, &live, ctx.unclean_leader_election)
                            .unwrap_or(state);
                    write(ctx, &tp, assignment.create_revision, None, &next).await?;
                }
                Some(current) => {
                    // A failure is handled first: a move completes only from an ISR
                    // without dead replicas, and with a live leader to give it.
                    if let Some(next) =
                        next_partition_state(current, replicas, &live, ctx.unclean_leader_election)
                    {
                        write(ctx, &tp, assignment.create_revision, Some(current), &next).await?;
                    } else if let Some(done) = complete_reassignment(replicas, current, &live) {
                        complete(ctx, &tp, assignment, current, done).await?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Kafka's automatic leader rebalance: preferred elections for the partitions of
/// brokers that lead too few of those they are preferred for. A partition whose
/// preferred replica is away or out of sync is left as it is.
async fn rebalance_leaders(
    ctx: &mut ControllerContext,
    view: &ClusterView,
    imbalance_percentage: u32,
) -> Result<(), ClusterError> {
    let live: BTreeSet<i32> =
        view.brokers.values().filter(|b| !b.shutting_down).map(|b| b.node_id).collect();
    let partitions = view.topics.iter().flat_map(|(topic, assignment)| {
        assignment.partitions.iter().filter_map(move |(&p, replicas)| {
            let (tp, state) =
                view.partitions.get_key_value(&TopicPartition::new(topic.clone(), p))?;
            Some((tp, replicas.as_slice(), state))
        })
    });
    for tp in imbalanced_partitions(partitions, imbalance_percentage) {
        let (Some(assignment), Some(current)) =
            (view.topics.get(&tp.topic), view.partitions.get(&tp))
        else {
            continue;
        };
        let Some(replicas) = assignment.partitions.get(&tp.partition) else { continue };
        if let Ok(next) = elect_leader(current, replicas, &live, ElectionType::Preferred) {
            info!(partition = %tp, "automatic leader rebalance: moving leadership back to the preferred replica");
            write(ctx, &tp, assignment.create_revision, Some(current), &next).await?;
        }
    }
    Ok(())
}

/// Writes `next` for `tp` if this broker is still the controller, the topic is still
/// the one seen (created at `topic_revision`: not deleted, nor deleted and created
/// again) and the partition is still at `current` (absent for `None`). A moved
/// partition is left for the next pass; a lost controller role ends the controller.
async fn write(
    ctx: &mut ControllerContext,
    tp: &TopicPartition,
    topic_revision: i64,
    current: Option<&PartitionState>,
    next: &PartitionState,
) -> Result<(), ClusterError> {
    let key = partition_key(&ctx.prefix, tp);
    let topic_compare = Compare::create_revision(
        topic_key(&ctx.prefix, &tp.topic),
        CompareOp::Equal,
        topic_revision,
    );
    let value = serde_json::to_vec(next)
        .map_err(|e| ClusterError::BadValue { key: key.clone(), reason: e.to_string() })?;
    let partition_compare = match current {
        Some(c) => Compare::mod_revision(key.as_str(), CompareOp::Equal, c.partition_epoch),
        None => Compare::version(key.as_str(), CompareOp::Equal, 0),
    };
    if commit(
        ctx,
        tp,
        [topic_compare, partition_compare],
        vec![TxnOp::put(key.as_str(), value, None)],
    )
    .await?
    {
        log_decision(tp, current, next);
    }
    Ok(())
}

/// Completes the reassignment of `tp`: the topic's assignment gets the target replicas
/// and the partition its `done` state, in one write conditional on the controller
/// epoch, the topic key's `mod_revision` and the partition epoch.
async fn complete(
    ctx: &mut ControllerContext,
    tp: &TopicPartition,
    assignment: &TopicAssignment,
    current: &PartitionState,
    done: crate::ReassignedPartition,
) -> Result<(), ClusterError> {
    let topic_key = topic_key(&ctx.prefix, &tp.topic);
    let key = partition_key(&ctx.prefix, tp);
    let mut grown = assignment.clone();
    let old_replicas =
        grown.partitions.insert(tp.partition, done.replicas.clone()).unwrap_or_default();
    let topic_value = serde_json::to_vec(&grown)
        .map_err(|e| ClusterError::BadValue { key: topic_key.clone(), reason: e.to_string() })?;
    let value = serde_json::to_vec(&done.state)
        .map_err(|e| ClusterError::BadValue { key: key.clone(), reason: e.to_string() })?;
    let compares = [
        Compare::mod_revision(topic_key.as_str(), CompareOp::Equal, assignment.mod_revision),
        Compare::mod_revision(key.as_str(), CompareOp::Equal, current.partition_epoch),
    ];
    let ops = vec![
        TxnOp::put(topic_key.as_str(), topic_value, None),
        TxnOp::put(key.as_str(), value, None),
    ];
    if commit(ctx, tp, compares, ops).await? {
        info!(partition = %tp, old_replicas = ?old_replicas, replicas = ?done.replicas, old_leader = current.leader, leader = done.state.leader,
              leader_epoch = done.state.leader_epoch, isr = ?done.state.isr, "partition reassignment completed");
    }
    Ok(())
}

/// Writes `ops` if this broker is still the controller and `compares` hold. `Ok(false)`
/// when the state moved (left for the next pass); a lost controller role ends the
/// controller.
async fn commit(
    ctx: &mut ControllerContext,
    tp: &TopicPartition,
    compares: [Compare; 2],
    ops: Vec<TxnOp>,
) -> Result<bool, ClusterError> {
    let mut when = vec![Compare::create_revision(
        ctx.leader_key.clone(),
        CompareOp::Equal,
        ctx.controller_epoch,
    )];
    when.extend(compares);
    let txn =
        Txn::new().when(when).and_then(ops).or_else([TxnOp::get(ctx.leader_key.clone(), None)]);
    let resp = bounded(ctx.timeout, "partition state write", ctx.client.txn(txn)).await?;
    if resp.succeeded() {
        return Ok(true);
    }
    let still_controller = resp.op_responses().into_iter().any(|r| match r {
        TxnOpResponse::Get(g) => {
            g.kvs().first().is_some_and(|kv| kv.create_revision() == ctx.controller_epoch)
        }
        _ => false,
    });
    if !still_controller {
        warn!(controller_epoch = ctx.controller_epoch, partition = %tp, "a partition state write was refused: this broker is no longer the controller");
        return Err(ClusterError::ControllerFenced(ctx.controller_epoch));
    }
    debug!(partition = %tp, "partition state moved under the controller; deciding again from the new state");
    Ok(false)
}

fn log_decision(tp: &TopicPartition, current: Option<&PartitionState>, next: &PartitionState) {
    match current {
        None => {
            info!(partition = %tp, leader = next.leader, isr = ?next.isr, "partition state created")
        }
        Some(c) if c.leader != next.leader => {
            if next.leader == crate::NO_LEADER {
                warn!(partition = %tp, old_leader = c.leader, leader_epoch = next.leader_epoch, isr = ?next.isr,
                      "partition offline: no in-sync replica is alive");
            } else {
                info!(partition = %tp, old_leader = c.leader, leader = next.leader, leader_epoch = next.leader_epoch, isr = ?next.isr,
                      "partition leader elected");
            }
        }
        Some(c) => {
            info!(partition = %tp, leader = next.leader, old_isr = ?c.isr, isr = ?next.isr, "ISR shrunk: replicas left the cluster")
        }
    }
}
