//! Writes any broker makes outside the controller: creating a topic (its assignment
//! and its partitions' first states), adding partitions to it and deleting it,
//! electing leaders, and starting, changing or cancelling a partition's reassignment,
//! on behalf of admin requests; a partition leader's change of its
//! ISR; and blocks of producer ids.
//!
//! None of them needs the controller: each is one etcd transaction conditional on
//! the state it was decided from ("create if absent"; "the topic key is still at the
//! revision read"; "the partition is still at the partition epoch read"), so of two
//! brokers acting at once exactly one succeeds, and the other decides again from what
//! the winner wrote. etcd caps a transaction at 128 operations (`--max-txn-ops`), so
//! a topic with more new partitions gets their remaining states in further
//! transactions; should the writing broker die between them, the controller gives
//! the missing partitions their first state.

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, DeleteOptions, Txn, TxnOp, TxnOpResponse};
use tracing::{debug, info};

use crate::etcd_keys::{bounded, parse_json, partition_key, partitions_prefix, topic_key};
use crate::{
    initial_partition_state, ClusterError, PartitionState, ReassignedPartition, TopicAssignment,
    TopicPartition,
};

/// etcd's default `--max-txn-ops`.
const MAX_TXN_OPS: usize = 128;

/// Stores `assignment` as topic `name` and its partitions' first states.
///
/// # Errors
/// [`ClusterError::TopicExists`] if the name is taken; etcd errors.
pub(crate) async fn create_topic(
    client: &mut Client,
    prefix: &str,
    timeout: Duration,
    name: &str,
    assignment: &TopicAssignment,
) -> Result<(), ClusterError> {
    let topic_key = topic_key(prefix, name);
    let value = serde_json::to_vec(assignment)
        .map_err(|e| ClusterError::BadValue { key: topic_key.clone(), reason: e.to_string() })?;
    let mut states = Vec::with_capacity(assignment.partitions.len());
    for (&p, replicas) in &assignment.partitions {
        let key = partition_key(prefix, &TopicPartition::new(name, p));
        let state = serde_json::to_vec(&initial_partition_state(replicas))
            .map_err(|e| ClusterError::BadValue { key: key.clone(), reason: e.to_string() })?;
        states.push((key, state));
    }
    // The topic and its first partitions: one transaction, conditional on the name
    // being free. Every transaction stays within the cap, puts and compares alike.
    let (first, rest) = states.split_at(states.len().min(MAX_TXN_OPS - 1));
    let mut ops = vec![TxnOp::put(topic_key.as_str(), value, None)];
    ops.extend(first.iter().map(|(k, v)| TxnOp::put(k.as_str(), v.clone(), None)));
    let txn =
        Txn::new().when([Compare::version(topic_key.as_str(), CompareOp::Equal, 0)]).and_then(ops);
    let created = bounded(timeout, "topic create", client.txn(txn)).await?;
    if !created.succeeded() {
        return Err(ClusterError::TopicExists(name.to_string()));
    }
    let topic_revision = created.header().map_or(0, |h| h.revision());
    write_remaining_states(client, timeout, &topic_key, topic_revision, rest).await?;
    info!(topic = name, topic_id = %assignment.topic_id, partitions = assignment.partitions.len(), "topic created in the cluster metadata");
    Ok(())
}

/// The partition states that did not fit in a topic's first transaction, `MAX_TXN_OPS - 1`
/// at a time: each only while the topic is the one created at `topic_revision`, and
/// where the controller has not filled the state in meanwhile.
async fn write_remaining_states(
    client: &mut Client,
    timeout: Duration,
    topic_key: &str,
    topic_revision: i64,
    rest: &[(String, Vec<u8>)],
) -> Result<(), ClusterError> {
    for chunk in rest.chunks(MAX_TXN_OPS - 1) {
        let mut compares =
            vec![Compare::create_revision(topic_key, CompareOp::Equal, topic_revision)];
        compares
            .extend(chunk.iter().map(|(k, _)| Compare::version(k.as_str(), CompareOp::Equal, 0)));
        let ops: Vec<TxnOp> =
            chunk.iter().map(|(k, v)| TxnOp::put(k.as_str(), v.clone(), None)).collect();
        bounded(
            timeout,
            "partition states create",
            client.txn(Txn::new().when(compares).and_then(ops)),
        )
        .await?;
    }
    Ok(())
}

/// Adds partitions to topic `name` (CreatePartitions): reads the topic as stored,
/// asks `plan` for the added partitions' replicas (partition → replicas, partitions
/// following the existing ones), and writes the grown assignment with the new
/// partitions' first states in one transaction conditional on the topic key's
/// `mod_revision` being the one read. A concurrent CreatePartitions or DeleteTopics
/// therefore cannot interleave: when the compare fails, the topic is read again and
/// `plan` decides again (and refuses, say, a count another request reached first).
/// With `validate_only`, nothing is written. Returns the grown assignment.
///
/// # Errors
/// [`ClusterError::UnknownTopic`]; what `plan` returns; etcd errors.
pub(crate) async fn create_partitions(
    client: &mut Client,
    prefix: &str,
    timeout: Duration,
    name: &str,
    validate_only: bool,
    mut plan: impl FnMut(&TopicAssignment) -> Result<BTreeMap<i32, Vec<i32>>, ClusterError>,
) -> Result<TopicAssignment, ClusterError> {
    let topic_key = topic_key(prefix, name);
    loop {
        let read = bounded(timeout, "topic read", client.get(topic_key.as_str(), None)).await?;
        let kv = read.kvs().first().ok_or_else(|| ClusterError::UnknownTopic(name.to_string()))?;
        let mut grown: TopicAssignment = parse_json(kv)?;
        grown.create_revision = kv.create_revision();
        let read_at = kv.mod_revision();
        let added = plan(&grown)?;
        if let Some(p) = added.keys().find(|p| grown.partitions.contains_key(p)) {
            return Err(ClusterError::BadValue {
                key: topic_key,
                reason: format!("partition {p} is planned, but exists"),
            });
        }
        if validate_only {
            grown.partitions.extend(added);
            return Ok(grown);
        }
        let mut states = Vec::with_capacity(added.len());
        for (&p, replicas) in &added {
            let key = partition_key(prefix, &TopicPartition::new(name, p));
            states.push((key.clone(), to_json(&key, &initial_partition_state(replicas))?));
        }
        grown.partitions.extend(added);
        let value = to_json(&topic_key, &grown)?;
        let (first, rest) = states.split_at(states.len().min(MAX_TXN_OPS - 1));
        let mut ops = vec![TxnOp::put(topic_key.as_str(), value, None)];
        ops.extend(first.iter().map(|(k, v)| TxnOp::put(k.as_str(), v.clone(), None)));
        let txn = Txn::new()
            .when([Compare::mod_revision(topic_key.as_str(), CompareOp::Equal, read_at)])
            .and_then(ops);
        if !bounded(timeout, "partitions create", client.txn(txn)).await?.succeeded() {
            debug!(topic = name, "the topic changed while partitions were planned; planning again");
            continue;
        }
        write_remaining_states(client, timeout, &topic_key, grown.create_revision, rest).await?;
        info!(topic = name, topic_id = %grown.topic_id, partitions = grown.partitions.len(), added = states.len(), "partitions added to a topic in the cluster metadata");
        return Ok(grown);
    }
}

/// Changes the leader of `tp` on request (ElectLeaders): reads the topic and the
/// partition as stored (one consistent read), asks `decide` for the new state from the
/// replicas and the current state, and writes it conditional on the topic's
/// `create_revision` and the partition's `mod_revision` (the partition epoch) being
/// the ones read, as the controller's own writes are. A refused write means the
/// partition moved (the controller, a leader's ISR change, another election): it is
/// read and decided again. Returns the state written.
///
/// # Errors
/// [`ClusterError::UnknownTopic`], [`ClusterError::UnknownPartition`]; what `decide`
/// returns (e.g. [`ClusterError::Election`]); etcd errors.
pub(crate) async fn change_leader(
    client: &mut Client,
    prefix: &str,
    timeout: Duration,
    tp: &TopicPartition,
    mut decide: impl FnMut(&[i32], &PartitionState) -> Result<PartitionState, ClusterError>,
) -> Result<PartitionState, ClusterError> {
    let topic_key = topic_key(prefix, &tp.topic);
    let key = partition_key(prefix, tp);
    loop {
        let StoredPartition { topic, replicas, state: current, .. } =
            read_partition(client, prefix, timeout, tp).await?;
        let next = decide(&replicas, &current)?;
        let txn = Txn::new()
            .when([
                Compare::create_revision(
                    topic_key.as_str(),
                    CompareOp::Equal,
                    topic.create_revision(),
                ),
                Compare::mod_revision(key.as_str(), CompareOp::Equal, current.partition_epoch),
            ])
            .and_then([TxnOp::put(key.as_str(), to_json(&key, &next)?, None)]);
        let resp = bounded(timeout, "leader election", client.txn(txn)).await?;
        if resp.succeeded() {
            info!(partition = %tp, old_leader = current.leader, leader = next.leader, leader_epoch = next.leader_epoch, isr = ?next.isr,
                  "partition leader elected on request");
            let partition_epoch = resp.header().map_or(0, |h| h.revision());
            return Ok(PartitionState { partition_epoch, ..next });
        }
        debug!(partition = %tp, "the partition moved while its election was decided; deciding again");
    }
}

/// Starts, changes or cancels the reassignment of `tp` (AlterPartitionReassignments):
/// reads the topic and the partition as stored (one consistent read), asks `decide`
/// for the partition's new replicas and state from its current replicas and state
/// (`None`: nothing to change), and writes the topic's assignment and the partition's
/// state in one transaction, conditional on the topic key's `mod_revision` and the
/// partition's (the partition epoch) being the ones read. So a move never interleaves
/// with CreatePartitions, DeleteTopics, an election, an ISR change, the controller's
/// completion or another move: a refused write is read and decided again. Returns the
/// state written (its partition epoch filled in), or `None` when nothing changed.
///
/// # Errors
/// [`ClusterError::UnknownTopic`], [`ClusterError::UnknownPartition`]; what `decide`
/// returns (e.g. [`ClusterError::Reassignment`]); etcd errors.
pub(crate) async fn reassign_partition(
    client: &mut Client,
    prefix: &str,
    timeout: Duration,
    tp: &TopicPartition,
    mut decide: impl FnMut(&[i32], &PartitionState) -> Result<Option<ReassignedPartition>, ClusterError>,
) -> Result<Option<PartitionState>, ClusterError> {
    let topic_key = topic_key(prefix, &tp.topic);
    let key = partition_key(prefix, tp);
    loop {
        let StoredPartition { topic, mut assignment, replicas, state: current } =
            read_partition(client, prefix, timeout, tp).await?;
        let Some(next) = decide(&replicas, &current)? else { return Ok(None) };
        assignment.partitions.insert(tp.partition, next.replicas.clone());
        let txn = Txn::new()
            .when([
                Compare::mod_revision(topic_key.as_str(), CompareOp::Equal, topic.mod_revision()),
                Compare::mod_revision(key.as_str(), CompareOp::Equal, current.partition_epoch),
            ])
            .and_then([
                TxnOp::put(topic_key.as_str(), to_json(&topic_key, &assignment)?, None),
                TxnOp::put(key.as_str(), to_json(&key, &next.state)?, None),
            ]);
        let resp = bounded(timeout, "partition reassignment", client.txn(txn)).await?;
        if resp.succeeded() {
            info!(partition = %tp, old_replicas = ?replicas, replicas = ?next.replicas, adding = ?next.state.adding_replicas,
                  removing = ?next.state.removing_replicas, leader = next.state.leader, leader_epoch = next.state.leader_epoch,
                  isr = ?next.state.isr, "partition reassignment changed");
            let partition_epoch = resp.header().map_or(0, |h| h.revision());
            return Ok(Some(PartitionState { partition_epoch, ..next.state }));
        }
        debug!(partition = %tp, "the topic or partition moved while its reassignment was decided; deciding again");
    }
}

/// A partition as stored, read in one consistent read with its topic.
struct StoredPartition {
    /// The topic's key (its revisions fence the write that follows).
    topic: etcd_client::KeyValue,
    assignment: TopicAssignment,
    /// The partition's replicas in the assignment.
    replicas: Vec<i32>,
    /// Its state, the partition epoch filled in from the key's `mod_revision`.
    state: PartitionState,
}

/// Reads `tp`'s topic and partition state in one transaction.
///
/// # Errors
/// [`ClusterError::UnknownTopic`]; [`ClusterError::UnknownPartition`] also for a
/// partition of the assignment without a state yet (its creator or the controller is
/// about to write the first one: nothing to decide from); etcd errors.
async fn read_partition(
    client: &mut Client,
    prefix: &str,
    timeout: Duration,
    tp: &TopicPartition,
) -> Result<StoredPartition, ClusterError> {
    let (topic_key, key) = (topic_key(prefix, &tp.topic), partition_key(prefix, tp));
    let read =
        Txn::new().and_then([TxnOp::get(topic_key.as_str(), None), TxnOp::get(key.as_str(), None)]);
    let read = bounded(timeout, "partition read", client.txn(read)).await?;
    let mut got = read.op_responses().into_iter().map(|r| match r {
        TxnOpResponse::Get(g) => g.kvs().first().cloned(),
        _ => None,
    });
    let (topic, partition) = (got.next().flatten(), got.next().flatten());
    let topic = topic.ok_or_else(|| ClusterError::UnknownTopic(tp.topic.clone()))?;
    let assignment: TopicAssignment = parse_json(&topic)?;
    let unknown =
        || ClusterError::UnknownPartition { topic: tp.topic.clone(), partition: tp.partition };
    let replicas = assignment.partitions.get(&tp.partition).ok_or_else(unknown)?.clone();
    let partition = partition.ok_or_else(unknown)?;
    let mut state: PartitionState = parse_json(&partition)?;
    state.partition_epoch = partition.mod_revision();
    Ok(StoredPartition { topic, assignment, replicas, state })
}

fn to_json<T: serde::Serialize>(key: &str, value: &T) -> Result<Vec<u8>, ClusterError> {
    serde_json::to_vec(value)
        .map_err(|e| ClusterError::BadValue { key: key.to_string(), reason: e.to_string() })
}

/// Removes topic `name` and every partition state under it, in one transaction.
///
/// # Errors
/// [`ClusterError::UnknownTopic`] if there is no such topic; etcd errors.
pub(crate) async fn delete_topic(
    client: &mut Client,
    prefix: &str,
    timeout: Duration,
    name: &str,
) -> Result<(), ClusterError> {
    let topic_key = topic_key(prefix, name);
    let partitions = format!("{}{name}/", partitions_prefix(prefix));
    let txn =
        Txn::new().when([Compare::version(topic_key.as_str(), CompareOp::Greater, 0)]).and_then([
            TxnOp::delete(topic_key.as_str(), None),
            TxnOp::delete(partitions, Some(DeleteOptions::new().with_prefix())),
            // Its altered configs go with it (a later topic of the name starts afresh).
            TxnOp::delete(format!("{prefix}/{}", crate::topic_config_key(name)), None),
        ]);
    if !bounded(timeout, "topic delete", client.txn(txn)).await?.succeeded() {
        return Err(ClusterError::UnknownTopic(name.to_string()));
    }
    info!(topic = name, "topic deleted from the cluster metadata");
    Ok(())
}

/// A leader's change of its partition's ISR (Kafka's AlterPartition): written only if
/// the partition is still exactly as `expected` (its `mod_revision`, the partition epoch)
/// and `expected` names this broker as leader. `Ok(false)` when the state moved: the
/// leader re-reads it from its view and decides again.
///
/// # Errors
/// etcd errors.
pub(crate) async fn alter_isr(
    client: &mut Client,
    prefix: &str,
    timeout: Duration,
    tp: &TopicPartition,
    expected: &PartitionState,
    isr: Vec<i32>,
) -> Result<bool, ClusterError> {
    let key = partition_key(prefix, tp);
    let next = PartitionState { isr, ..expected.clone() };
    let value = serde_json::to_vec(&next)
        .map_err(|e| ClusterError::BadValue { key: key.clone(), reason: e.to_string() })?;
    let txn = Txn::new()
        .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, expected.partition_epoch)])
        .and_then([TxnOp::put(key.as_str(), value, None)]);
    let written = bounded(timeout, "ISR change", client.txn(txn)).await?.succeeded();
    if written {
        info!(partition = %tp, leader = expected.leader, leader_epoch = expected.leader_epoch, old_isr = ?expected.isr, isr = ?next.isr, "ISR changed");
    }
    Ok(written)
}

/// Reserves `size` producer ids for this broker (Kafka's controller-allocated blocks,
/// KIP-730): `<prefix>/producer_id_block` holds the next free id, moved by
/// compare-and-swap, so no two brokers ever get the same block. Returns the first id.
///
/// # Errors
/// etcd errors, or a stored value that does not parse.
pub(crate) async fn reserve_producer_ids(
    client: &mut Client,
    prefix: &str,
    timeout: Duration,
    size: i64,
) -> Result<i64, ClusterError> {
    let key = format!("{prefix}/producer_id_block");
    loop {
        let current =
            bounded(timeout, "producer id block read", client.get(key.as_str(), None)).await?;
        let (start, compare) = match current.kvs().first() {
            None => (0, Compare::version(key.as_str(), CompareOp::Equal, 0)),
            Some(kv) => {
                let start = kv
                    .value_str()
                    .ok()
                    .and_then(|v| v.trim().parse::<i64>().ok())
                    .filter(|v| *v >= 0)
                    .ok_or_else(|| ClusterError::BadValue {
                        key: key.clone(),
                        reason: "not a producer id".into(),
                    })?;
                (start, Compare::mod_revision(key.as_str(), CompareOp::Equal, kv.mod_revision()))
            }
        };
        let next = (start + size).to_string();
        let txn = Txn::new().when([compare]).and_then([TxnOp::put(key.as_str(), next, None)]);
        if bounded(timeout, "producer id block reserve", client.txn(txn)).await?.succeeded() {
            info!(first = start, size, "reserved a block of producer ids in the cluster metadata");
            return Ok(start);
        }
        // Another broker reserved one meanwhile: read again.
    }
}

/// Marks this broker's registration as shutting down, keeping it under its lease.
///
/// # Errors
/// [`ClusterError::BadValue`] if this broker is not registered; etcd errors.
pub(crate) async fn announce_shutdown(
    client: &mut Client,
    prefix: &str,
    timeout: Duration,
    registration: &crate::BrokerRegistration,
) -> Result<(), ClusterError> {
    let key = format!("{prefix}/brokers/{}", registration.node_id);
    let marked = crate::BrokerRegistration { shutting_down: true, ..registration.clone() };
    let value = serde_json::to_vec(&marked)
        .map_err(|e| ClusterError::BadValue { key: key.clone(), reason: e.to_string() })?;
    let txn = Txn::new().when([Compare::version(key.as_str(), CompareOp::Greater, 0)]).and_then([
        TxnOp::put(key.as_str(), value, Some(etcd_client::PutOptions::new().with_ignore_lease())),
    ]);
    if !bounded(timeout, "shutdown announcement", client.txn(txn)).await?.succeeded() {
        return Err(ClusterError::BadValue { key, reason: "not registered".into() });
    }
    info!(
        node_id = registration.node_id,
        "announced controlled shutdown: the controller moves this broker's leaderships away"
    );
    Ok(())
}
