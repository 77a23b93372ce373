//! Admin requests on the cluster's metadata when this broker is part of an etcd
//! cluster: creating and deleting topics, adding partitions (CreatePartitions) and
//! electing leaders (ElectLeaders).
//!
//! The checks are the single broker's (name, partition count, configs), plus the
//! replica placement: Kafka's `default.replication.factor` or the request's factor,
//! rack-aware over the live brokers, or the request's own assignment. The write goes
//! to the metadata store; this broker then creates its own logs at once (the others
//! follow through [`crate::cluster_topics`]), so a client may use the topic here as
//! soon as the answer arrives. Any broker may handle these requests: every write is
//! conditional on the state it was decided from (see `floe_cluster`'s `topics`).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::time::Duration;

use floe_cluster::{
    assign_added_partitions, assign_replicas, elect_leader, AssignmentError, ClusterError,
    ElectionError, ElectionType, TopicAssignment, TopicPartition,
};
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
pub fn plan_topic(
    broker: &Broker,
    name: &str,
    partitions: i32,
    replication_factor: i32,
    assignments: &[(i32, Vec<i32>)],
) -> Result<BTreeMap<i32, Vec<i32>>, Refusal> {
    let live = live_brokers(broker);
    let planned = if assignments.is_empty() {
        let rf = if replication_factor == -1 {
            broker.config.default_replication_factor
        } else {
            replication_factor
        };
        let count = if partitions == -1 { broker.config.num_partitions } else { partitions };
        assign_replicas(&live, 0, count, rf, topic_seed(name)).map_err(|e| match e {
            floe_cluster::AssignmentError::Invalid(reason) if count < 1 => {
                (ResponseError::InvalidPartitions, reason)
            }
            e => (ResponseError::InvalidReplicationFactor, e.to_string()),
        })?
    } else {
        check_assignment(assignments, &live)?
    };
    Ok(planned)
}

/// Where a topic's replica rotation starts: a hash of its name, so that the leaders of
/// many small topics do not all land on the same broker.
fn topic_seed(name: &str) -> u64 {
    let mut seed = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut seed);
    seed.finish()
}

/// The live brokers (node id → rack) replicas may be placed on.
fn live_brokers(broker: &Broker) -> BTreeMap<i32, Option<String>> {
    broker.cluster.with_view(|v| v.brokers.iter().map(|(id, r)| (*id, r.rack.clone())).collect())
}

/// A manual assignment: partitions 0..n, each with distinct, live brokers, all of
/// the same replication factor.
fn check_assignment(
    assignments: &[(i32, Vec<i32>)],
    live: &BTreeMap<i32, Option<String>>,
) -> Result<BTreeMap<i32, Vec<i32>>, Refusal> {
    let bad = |reason: String| (ResponseError::InvalidReplicaAssignment, reason);
    let planned: BTreeMap<i32, Vec<i32>> = assignments.iter().cloned().collect();
    if planned.len() != assignments.len() || planned.keys().copied().ne(0..planned.len() as i32) {
        return Err(bad("partitions of a replica assignment must be 0..n, each once".into()));
    }
    let rf = planned.values().next().map_or(0, Vec::len);
    for (p, replicas) in &planned {
        if replicas.is_empty() || replicas.len() != rf {
            return Err(bad(format!(
                "partition {p}: every partition needs the same, non-zero number of replicas"
            )));
        }
        if replicas.iter().collect::<BTreeSet<_>>().len() != replicas.len() {
            return Err(bad(format!("partition {p}: a broker appears twice in {replicas:?}")));
        }
        if let Some(dead) = replicas.iter().find(|r| !live.contains_key(r)) {
            return Err(bad(format!(
                "partition {p}: broker {dead} is not a live broker of this cluster"
            )));
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
    broker
        .logs
        .validate_create_topic(name, count, &overrides)
        .map_err(|e| (kafka_error(&e), e.to_string()))?;
    let assignment = TopicAssignment {
        topic_id: uuid::Uuid::new_v4().hyphenated().to_string(),
        partitions: planned,
        configs: overrides,
        create_revision: 0,
        mod_revision: 0,
    };
    broker.cluster.create_topic(name, &assignment).await.map_err(refusal)?;
    let shown = broker
        .cluster
        .wait_for_view(VIEW_WAIT, |v| {
            v.topics.get(name).is_some_and(|t| t.topic_id == assignment.topic_id)
        })
        .await;
    if !shown {
        tracing::warn!(
            topic = name,
            "created in the metadata store, yet not seen in this broker's view in time"
        );
    }
    let (logs, local_name, local) = (broker.logs.clone(), name.to_string(), assignment.clone());
    let created = tokio::task::spawn_blocking(move || {
        crate::cluster_topics::ensure_local(&logs, &local_name, &local)
    })
    .await;
    match created {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(topic = name, error = %e, "cannot create this broker's logs of the new topic yet")
        }
        Err(e) => {
            tracing::error!(topic = name, error = %e, "creating this broker's logs of the new topic failed")
        }
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

/// Grows topic `name` to `count` partitions: the added ones placed as `manual` says
/// (one replica list per added partition) or over the live brokers, continuing the
/// topic's rotation. The check runs on the topic as stored in etcd, and the write is
/// conditional on it, so two CreatePartitions (or one and a DeleteTopics) never
/// interleave. Unless `validate_only`, this broker's logs grow at once (the others
/// follow their views).
///
/// # Errors
/// UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS, INVALID_REPLICA_ASSIGNMENT,
/// INVALID_REPLICATION_FACTOR; errors of the metadata store.
pub async fn create_partitions(
    broker: &Broker,
    name: &str,
    count: i32,
    manual: Option<Vec<Vec<i32>>>,
    validate_only: bool,
) -> Result<(), Refusal> {
    let live = live_brokers(broker);
    let seed = topic_seed(name);
    let grown = broker
        .cluster
        .create_partitions(name, validate_only, |current| {
            Ok(assign_added_partitions(&current.partitions, &live, count, manual.as_deref(), seed)?)
        })
        .await
        .map_err(refusal)?;
    if validate_only {
        return Ok(());
    }
    let last = TopicPartition::new(name, count - 1);
    let shown = broker
        .cluster
        .wait_for_view(VIEW_WAIT, |v| {
            v.topics.get(name).is_some_and(|t| t.topic_id == grown.topic_id)
                && v.partitions.contains_key(&last)
        })
        .await;
    if !shown {
        tracing::warn!(
            topic = name,
            "partitions added in the metadata store, yet not seen in this broker's view in time"
        );
    }
    let (logs, local_name) = (broker.logs.clone(), name.to_string());
    let grew = tokio::task::spawn_blocking(move || {
        crate::cluster_topics::ensure_local(&logs, &local_name, &grown)
    })
    .await;
    match grew {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(topic = name, error = %e, "cannot grow this broker's logs of the topic yet")
        }
        Err(e) => {
            tracing::error!(topic = name, error = %e, "growing this broker's logs of the topic failed")
        }
    }
    Ok(())
}

/// The partitions ElectLeaders names, or every partition (`None`), with the outcome
/// of each: `Ok` when a leader was elected, else why not. With `None`, partitions that
/// need no election are left out, as Kafka leaves them out (every topic is listed).
pub type Elections = Vec<(String, Vec<(i32, Result<(), Refusal>)>)>;

/// ElectLeaders in a cluster: each partition's election is decided ([`elect_leader`])
/// on its state as stored in etcd and written conditional on it, then awaited in this
/// broker's view (for at most `timeout`), so that Metadata here shows the new leaders
/// when the answer arrives.
pub async fn elect_leaders(
    broker: &Broker,
    election: ElectionType,
    partitions: Option<Vec<(String, Vec<i32>)>>,
    timeout: Duration,
) -> Elections {
    // Brokers in controlled shutdown are leaving: they take no leadership.
    let live: BTreeSet<i32> = broker.cluster.with_view(|v| {
        v.brokers.values().filter(|b| !b.shutting_down).map(|b| b.node_id).collect()
    });
    let every = partitions.is_none();
    let wanted = partitions.unwrap_or_else(|| {
        // Every partition; those that need no election as far as the view knows are
        // left out without asking etcd (they would be left out of the answer anyway).
        broker.cluster.with_view(|v| {
            v.topics
                .iter()
                .map(|(name, t)| {
                    let needing = t.partitions.iter().filter(|(p, replicas)| {
                        v.partition(name, **p).is_some_and(|s| {
                            elect_leader(s, replicas, &live, election)
                                != Err(ElectionError::NotNeeded)
                        })
                    });
                    (name.clone(), needing.map(|(p, _)| *p).collect())
                })
                .collect()
        })
    });
    let mut results = Vec::with_capacity(wanted.len());
    let mut elected = Vec::new();
    for (topic, ps) in wanted {
        let mut outcomes = Vec::with_capacity(ps.len());
        for p in ps {
            let tp = TopicPartition::new(topic.clone(), p);
            let outcome = broker
                .cluster
                .change_leader(&tp, |replicas, current| {
                    Ok(elect_leader(current, replicas, &live, election)?)
                })
                .await;
            match outcome {
                Ok(state) => {
                    elected.push((tp, state.leader_epoch));
                    outcomes.push((p, Ok(())));
                }
                Err(ClusterError::Election(ElectionError::NotNeeded)) if every => {}
                Err(e) => {
                    tracing::info!(partition = %tp, error = %e, "ElectLeaders: no election");
                    outcomes.push((p, Err(refusal(e))));
                }
            }
        }
        results.push((topic, outcomes));
    }
    if !elected.is_empty() {
        let shown = broker
            .cluster
            .wait_for_view(timeout.min(VIEW_WAIT), |v| {
                elected.iter().all(|(tp, epoch)| {
                    v.partitions.get(tp).is_some_and(|s| s.leader_epoch >= *epoch)
                })
            })
            .await;
        if !shown {
            tracing::warn!(partitions = elected.len(), "leaders elected in the metadata store, yet not all seen in this broker's view in time");
        }
    }
    results
}

fn refusal(e: ClusterError) -> Refusal {
    let code = match &e {
        ClusterError::TopicExists(_) => ResponseError::TopicAlreadyExists,
        ClusterError::UnknownTopic(_) | ClusterError::UnknownPartition { .. } => {
            ResponseError::UnknownTopicOrPartition
        }
        ClusterError::Timeout { .. } => ResponseError::RequestTimedOut,
        ClusterError::Assignment(AssignmentError::InvalidPartitions(_)) => {
            ResponseError::InvalidPartitions
        }
        ClusterError::Assignment(AssignmentError::InvalidReplicaAssignment(_)) => {
            ResponseError::InvalidReplicaAssignment
        }
        ClusterError::Assignment(
            AssignmentError::NotEnoughBrokers { .. } | AssignmentError::Invalid(_),
        ) => ResponseError::InvalidReplicationFactor,
        ClusterError::Election(ElectionError::NotNeeded) => ResponseError::ElectionNotNeeded,
        ClusterError::Election(ElectionError::PreferredLeaderNotAvailable) => {
            ResponseError::PreferredLeaderNotAvailable
        }
        ClusterError::Election(ElectionError::EligibleLeadersNotAvailable) => {
            ResponseError::EligibleLeadersNotAvailable
        }
        _ => ResponseError::UnknownServerError,
    };
    (code, e.to_string())
}
