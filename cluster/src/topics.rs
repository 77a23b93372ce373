//! Writes any broker makes outside the controller: creating a topic (its assignment
//! and its partitions' first states) and deleting one, on behalf of admin requests;
//! a partition leader's change of its ISR; and blocks of producer ids.
//!
//! Creation needs no controller: "create if absent" is one etcd transaction, so of two
//! brokers creating the same name at once exactly one succeeds. etcd caps a
//! transaction at 128 operations (`--max-txn-ops`), so a topic with more partitions
//! gets its remaining states in further transactions; should the creating broker die
//! between them, the controller gives the missing partitions their first state.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, DeleteOptions, Txn, TxnOp};
use tracing::info;

use crate::etcd_session::{bounded, partition_key, partitions_prefix, topic_key};
use crate::{initial_partition_state, ClusterError, PartitionState, TopicAssignment, TopicPartition};

/// etcd's default `--max-txn-ops`.
const MAX_TXN_OPS: usize = 128;

/// Stores `assignment` as topic `name` and its partitions' first states.
///
/// # Errors
/// [`ClusterError::TopicExists`] if the name is taken; etcd errors.
pub(crate) async fn create_topic(client: &mut Client, prefix: &str, timeout: Duration, name: &str, assignment: &TopicAssignment) -> Result<(), ClusterError> {
    let topic_key = topic_key(prefix, name);
    let value = serde_json::to_vec(assignment).map_err(|e| ClusterError::BadValue { key: topic_key.clone(), reason: e.to_string() })?;
    let mut states = Vec::with_capacity(assignment.partitions.len());
    for (&p, replicas) in &assignment.partitions {
        let key = partition_key(prefix, &TopicPartition::new(name, p));
        let state = serde_json::to_vec(&initial_partition_state(replicas)).map_err(|e| ClusterError::BadValue { key: key.clone(), reason: e.to_string() })?;
        states.push((key, state));
    }
    // The topic and its first partitions: one transaction, conditional on the name
    // being free. Every transaction stays within the cap, puts and compares alike.
    let (first, rest) = states.split_at(states.len().min(MAX_TXN_OPS - 1));
    let mut ops = vec![TxnOp::put(topic_key.as_str(), value, None)];
    ops.extend(first.iter().map(|(k, v)| TxnOp::put(k.as_str(), v.clone(), None)));
    let txn = Txn::new().when([Compare::version(topic_key.as_str(), CompareOp::Equal, 0)]).and_then(ops);
    let created = bounded(timeout, "topic create", client.txn(txn)).await?;
    if !created.succeeded() {
        return Err(ClusterError::TopicExists(name.to_string()));
    }
    let topic_revision = created.header().map_or(0, |h| h.revision());
    for chunk in rest.chunks(MAX_TXN_OPS - 1) {
        // Only while the topic is this one, and where the controller has not filled
        // the state in meanwhile.
        let mut compares = vec![Compare::create_revision(topic_key.as_str(), CompareOp::Equal, topic_revision)];
        compares.extend(chunk.iter().map(|(k, _)| Compare::version(k.as_str(), CompareOp::Equal, 0)));
        let ops: Vec<TxnOp> = chunk.iter().map(|(k, v)| TxnOp::put(k.as_str(), v.clone(), None)).collect();
        bounded(timeout, "partition states create", client.txn(Txn::new().when(compares).and_then(ops))).await?;
    }
    info!(topic = name, topic_id = %assignment.topic_id, partitions = assignment.partitions.len(), "topic created in the cluster metadata");
    Ok(())
}

/// Removes topic `name` and every partition state under it, in one transaction.
///
/// # Errors
/// [`ClusterError::UnknownTopic`] if there is no such topic; etcd errors.
pub(crate) async fn delete_topic(client: &mut Client, prefix: &str, timeout: Duration, name: &str) -> Result<(), ClusterError> {
    let topic_key = topic_key(prefix, name);
    let partitions = format!("{}{name}/", partitions_prefix(prefix));
    let txn = Txn::new()
        .when([Compare::version(topic_key.as_str(), CompareOp::Greater, 0)])
        .and_then([TxnOp::delete(topic_key.as_str(), None), TxnOp::delete(partitions, Some(DeleteOptions::new().with_prefix()))]);
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
pub(crate) async fn alter_isr(client: &mut Client, prefix: &str, timeout: Duration, tp: &TopicPartition, expected: &PartitionState, isr: Vec<i32>) -> Result<bool, ClusterError> {
    let key = partition_key(prefix, tp);
    let next = PartitionState { isr, ..expected.clone() };
    let value = serde_json::to_vec(&next).map_err(|e| ClusterError::BadValue { key: key.clone(), reason: e.to_string() })?;
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
pub(crate) async fn reserve_producer_ids(client: &mut Client, prefix: &str, timeout: Duration, size: i64) -> Result<i64, ClusterError> {
    let key = format!("{prefix}/producer_id_block");
    loop {
        let current = bounded(timeout, "producer id block read", client.get(key.as_str(), None)).await?;
        let (start, compare) = match current.kvs().first() {
            None => (0, Compare::version(key.as_str(), CompareOp::Equal, 0)),
            Some(kv) => {
                let start = kv
                    .value_str()
                    .ok()
                    .and_then(|v| v.trim().parse::<i64>().ok())
                    .filter(|v| *v >= 0)
                    .ok_or_else(|| ClusterError::BadValue { key: key.clone(), reason: "not a producer id".into() })?;
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
pub(crate) async fn announce_shutdown(client: &mut Client, prefix: &str, timeout: Duration, registration: &crate::BrokerRegistration) -> Result<(), ClusterError> {
    let key = format!("{prefix}/brokers/{}", registration.node_id);
    let marked = crate::BrokerRegistration { shutting_down: true, ..registration.clone() };
    let value = serde_json::to_vec(&marked).map_err(|e| ClusterError::BadValue { key: key.clone(), reason: e.to_string() })?;
    let txn = Txn::new()
        .when([Compare::version(key.as_str(), CompareOp::Greater, 0)])
        .and_then([TxnOp::put(key.as_str(), value, Some(etcd_client::PutOptions::new().with_ignore_lease()))]);
    if !bounded(timeout, "shutdown announcement", client.txn(txn)).await?.succeeded() {
        return Err(ClusterError::BadValue { key, reason: "not registered".into() });
    }
    info!(node_id = registration.node_id, "announced controlled shutdown: the controller moves this broker's leaderships away");
    Ok(())
}
