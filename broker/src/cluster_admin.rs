//! Admin requests on the cluster's metadata: creating and deleting topics when this
//! broker is part of an etcd cluster.
//!
//! The checks are the single broker's (name, partition count, configs), plus the
//! replica placement: Kafka's `default.replication.factor` or the request's factor,
//! rack-aware over the live brokers, or the request's own assignment. The write goes
//! to the metadata store; this broker then creates its own logs at once (the others
//! follow through [`crate::cluster_topics`]), so a client may use the topic here as
//! soon as the answer arrives.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::time::Duration;

use floe_cluster::{assign_replicas, ClusterError, TopicAssignment};
use kafka_protocol::error::ResponseError;

use crate::broker::Broker;
use crate::errors::kafka_error;

/// How long an admin request waits for this broker's view to show its own change.
const VIEW_WAIT: Duration = Duration::from_secs(5);

/// A refusal: the Kafka error and why.
pub type Refusal = (ResponseError, String);

/// The replica placement a CreateTopics entry asks for, checked: `assignments` (partition
/// → replicas) if given, else `partitions` × `replication_factor` (-1: the defaults)
/// placed over the live brokers.
///
/// # Errors
/// INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT.
pub fn plan_topic(broker: &Broker, name: &str, partitions: i32, replication_factor: i32, assignments: &[(i32, Vec<i32>)]) -> Result<BTreeMap<i32, Vec<i32>>, Refusal> {
    let live = broker.cluster.with_view(|v| v.brokers.iter().map(|(id, r)| (*id, r.rack.clone())).collect::<BTreeMap<_, _>>());
    let planned = if assignments.is_empty() {
        let rf = if replication_factor == -1 { broker.config.default_replication_factor } else { replication_factor };
        let count = if partitions == -1 { broker.config.num_partitions } else { partitions };
        let mut seed = std::collections::hash_map::DefaultHasher::new();
        name.hash(&mut seed);
        assign_replicas(&live, 0, count, rf, seed.finish()).map_err(|e| match e {
            floe_cluster::AssignmentError::Invalid(reason) if count < 1 => (ResponseError::InvalidPartitions, reason),
            e => (ResponseError::InvalidReplicationFactor, e.to_string()),
        })?
    } else {
        check_assignment(assignments, &live)?
    };
    Ok(planned)
}

/// A manual assignment: partitions 0..n, each with distinct, live brokers, all of
/// the same replication factor.
fn check_assignment(assignments: &[(i32, Vec<i32>)], live: &BTreeMap<i32, Option<String>>) -> Result<BTreeMap<i32, Vec<i32>>, Refusal> {
    let bad = |reason: String| (ResponseError::InvalidReplicaAssignment, reason);
    let planned: BTreeMap<i32, Vec<i32>> = assignments.iter().cloned().collect();
    if planned.len() != assignments.len() || planned.keys().copied().ne(0..planned.len() as i32) {
        return Err(bad("partitions of a replica assignment must be 0..n, each once".into()));
    }
    let rf = planned.values().next().map_or(0, Vec::len);
    for (p, replicas) in &planned {
        if replicas.is_empty() || replicas.len() != rf {
            return Err(bad(format!("partition {p}: every partition needs the same, non-zero number of replicas")));
        }
        if replicas.iter().collect::<BTreeSet<_>>().len() != replicas.len() {
            return Err(bad(format!("partition {p}: a broker appears twice in {replicas:?}")));
        }
        if let Some(dead) = replicas.iter().find(|r| !live.contains_key(r)) {
            return Err(bad(format!("partition {p}: broker {dead} is not a live broker of this cluster")));
        }
    }
    Ok(planned)
}

/// Creates topic `name` in the cluster and this broker's logs of it. Returns the
/// assignment written.
///
/// # Errors
/// The checks' refusals; TOPIC_ALREADY_EXISTS; REQUEST_TIMED_OUT (or another error)
/// if the metadata store cannot be written.
pub async fn create_topic(
    broker: &Broker,
    name: &str,
    partitions: i32,
    replication_factor: i32,
    assignments: &[(i32, Vec<i32>)],
    overrides: BTreeMap<String, String>,
) -> Result<TopicAssignment, Refusal> {
    let planned = plan_topic(broker, name, partitions, replication_factor, assignments)?;
    let count = planned.len() as i32;
    broker.logs.validate_create_topic(name, count, &overrides).map_err(|e| (kafka_error(&e), e.to_string()))?;
    let assignment = TopicAssignment { topic_id: uuid::Uuid::new_v4().hyphenated().to_string(), partitions: planned, configs: overrides, create_revision: 0 };
    broker.cluster.create_topic(name, &assignment).await.map_err(refusal)?;
    let shown = broker.cluster.wait_for_view(VIEW_WAIT, |v| v.topics.get(name).is_some_and(|t| t.topic_id == assignment.topic_id)).await;
    if !shown {
        tracing::warn!(topic = name, "created in the metadata store, yet not seen in this broker's view in time");
    }
    let (logs, local_name, local) = (broker.logs.clone(), name.to_string(), assignment.clone());
    let created = tokio::task::spawn_blocking(move || crate::cluster_topics::ensure_local(&logs, &local_name, &local)).await;
    match created {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(topic = name, error = %e, "cannot create this broker's logs of the new topic yet"),
        Err(e) => tracing::error!(topic = name, error = %e, "creating this broker's logs of the new topic failed"),
    }
    Ok(assignment)
}

/// Deletes topic `name` from the cluster (every broker then deletes its logs).
///
/// # Errors
/// UNKNOWN_TOPIC_OR_PARTITION; errors of the metadata store.
pub async fn delete_topic(broker: &Broker, name: &str) -> Result<(), Refusal> {
    broker.cluster.delete_topic(name).await.map_err(refusal)?;
    broker.cluster.wait_for_view(VIEW_WAIT, |v| !v.topics.contains_key(name)).await;
    Ok(())
}

fn refusal(e: ClusterError) -> Refusal {
    let code = match &e {
        ClusterError::TopicExists(_) => ResponseError::TopicAlreadyExists,
        ClusterError::UnknownTopic(_) => ResponseError::UnknownTopicOrPartition,
        ClusterError::Timeout { .. } => ResponseError::RequestTimedOut,
        ClusterError::Assignment(_) => ResponseError::InvalidReplicationFactor,
        _ => ResponseError::UnknownServerError,
    };
    (code, e.to_string())
}
