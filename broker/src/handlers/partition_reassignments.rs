//! AlterPartitionReassignments and ListPartitionReassignments (KIP-455): moving a
//! partition's replicas to other brokers, and listing the moves under way.
//!
//! As Kafka's controller (`ReplicationControlManager.alterPartitionReassignments`):
//! each partition is answered on its own. A target replica list starts (or changes)
//! a move: it must be non-empty and name registered brokers, each once
//! (INVALID_REPLICA_ASSIGNMENT); a null list cancels one (NO_REASSIGNMENT_IN_PROGRESS
//! when there is none); a topic or partition that does not exist is
//! UNKNOWN_TOPIC_OR_PARTITION. Authorization: ALTER on the cluster to alter, DESCRIBE
//! to list, else CLUSTER_AUTHORIZATION_FAILED (for the request, and for every
//! partition of an alter).
//!
//! In a cluster each partition's move is decided on its state as stored in etcd and
//! written with the topic's assignment in one conditional transaction
//! ([`floe_cluster::start_reassignment`], [`floe_cluster::cancel_reassignment`]); the
//! controller completes it once every target replica is in sync. The answer comes
//! once this broker's view shows the writes (for at most the request's timeout), as
//! Kafka answers once its controller has committed the records. ListPartitionReassignments
//! answers from the view: the partitions with adding or removing replicas.
//!
//! Failpoint: `cluster.reassignment.written`, after a partition's move is written and
//! before it is answered.
//!
//! A broker alone (`floe.metadata.store=local`) has one replica of every partition,
//! itself, and no other broker registered: a target of its own id alone is the current
//! assignment (nothing to move; success, as Kafka answers a move that needs no change),
//! any other target names a broker that is not registered (INVALID_REPLICA_ASSIGNMENT),
//! a cancellation finds no move (NO_REASSIGNMENT_IN_PROGRESS), and the list is empty.

use std::collections::BTreeSet;
use std::time::Duration;

use floe_cluster::{
    cancel_reassignment, start_reassignment, ClusterError, ReassignmentError, TopicPartition,
};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::acl::AclOperation;
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use floe_protocol::response::message;

/// The longest an alter waits for this broker's view to show its writes.
const VIEW_WAIT: Duration = Duration::from_secs(5);

/// A refusal of one partition: the Kafka error and why.
type Refusal = (ResponseError, String);

pub(super) async fn handle_alter(
    broker: &Broker,
    ctx: &RequestContext,
    request: AlterPartitionReassignmentsRequest,
    _version: i16,
) -> AlterPartitionReassignmentsResponse {
    if !broker.authorizer.authorize_cluster(ctx, AclOperation::Alter) {
        return alter_refused(
            &request,
            ResponseError::ClusterAuthorizationFailed,
            "ALTER on the cluster is needed",
        );
    }
    let timeout = Duration::from_millis(request.timeout_ms.max(0) as u64).min(VIEW_WAIT);
    let mut written = Vec::new();
    let mut responses = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let tp = TopicPartition::new(topic.name.as_str(), p.partition_index);
            let target: Option<Vec<i32>> =
                p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect());
            let outcome = if broker.is_clustered() {
                alter_in_cluster(broker, &tp, target.as_deref()).await
            } else {
                alter_alone(broker, &tp, target.as_deref())
            };
            let response =
                ReassignablePartitionResponse::default().with_partition_index(p.partition_index);
            partitions.push(match outcome {
                Ok(epoch) => {
                    written.extend(epoch.map(|e| (tp, e)));
                    response
                }
                Err((code, reason)) => {
                    tracing::info!(partition = %tp, error = ?code, reason = %reason, "AlterPartitionReassignments: partition refused");
                    response.with_error_code(code.code()).with_error_message(message(reason))
                }
            });
        }
        responses.push(
            ReassignableTopicResponse::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions),
        );
    }
    if !written.is_empty() {
        let shown = broker
            .cluster
            .wait_for_view(timeout, |v| {
                written.iter().all(|(tp, epoch)| {
                    v.partitions.get(tp).is_none_or(|s| s.partition_epoch >= *epoch)
                })
            })
            .await;
        if !shown {
            tracing::warn!(partitions = written.len(), "reassignments written to the metadata store, yet not all seen in this broker's view in time");
        }
    }
    AlterPartitionReassignmentsResponse::default().with_responses(responses)
}

/// One partition's move in the cluster: decided and written through the metadata
/// store. Returns the partition epoch written, if anything was.
async fn alter_in_cluster(
    broker: &Broker,
    tp: &TopicPartition,
    target: Option<&[i32]>,
) -> Result<Option<i64>, Refusal> {
    let (registered, live): (BTreeSet<i32>, BTreeSet<i32>) = broker.cluster.with_view(|v| {
        (
            v.brokers.keys().copied().collect(),
            v.brokers.values().filter(|b| !b.shutting_down).map(|b| b.node_id).collect(),
        )
    });
    let unclean = broker.config.unclean_leader_election;
    let written = broker
        .cluster
        .reassign_partition(tp, |replicas, current| match target {
            Some(target) => Ok(start_reassignment(replicas, current, target, &registered, &live)?),
            None => Ok(Some(cancel_reassignment(replicas, current, &live, unclean)?)),
        })
        .await
        .map_err(refusal)?;
    // Crash point: the move is in etcd, its requester has no answer. The move goes on
    // without this broker (the controller completes it); a retry finds it under way.
    if written.is_some() {
        floe_storage::failpoint::check("cluster.reassignment.written")
            .map_err(|e| (ResponseError::UnknownServerError, e.to_string()))?;
    }
    Ok(written.map(|s| s.partition_epoch))
}

/// One partition's move on a broker alone: it exists, and the only registered broker
/// is this one, which holds it already.
fn alter_alone(
    broker: &Broker,
    tp: &TopicPartition,
    target: Option<&[i32]>,
) -> Result<Option<i64>, Refusal> {
    let unknown = |what: String| Err((ResponseError::UnknownTopicOrPartition, what));
    let Some(topic) = broker.logs.topic(&tp.topic) else {
        return unknown(format!("Unable to find a topic named {}.", tp.topic));
    };
    if topic.partition(tp.partition).is_none() {
        return unknown(format!("Unable to find partition {}:{}.", tp.topic, tp.partition));
    }
    let Some(target) = target else {
        return Err((
            ResponseError::NoReassignmentInProgress,
            ReassignmentError::NoReassignmentInProgress.to_string(),
        ));
    };
    let node_id = broker.config.node_id;
    let registered = BTreeSet::from([node_id]);
    let current = floe_cluster::initial_partition_state(&[node_id]);
    start_reassignment(&[node_id], &current, target, &registered, &registered)
        .map_err(|e| refusal(e.into()))?;
    Ok(None)
}

fn refusal(e: ClusterError) -> Refusal {
    let code = match &e {
        ClusterError::UnknownTopic(_) | ClusterError::UnknownPartition { .. } => {
            ResponseError::UnknownTopicOrPartition
        }
        ClusterError::Reassignment(ReassignmentError::InvalidReplicaAssignment(_)) => {
            ResponseError::InvalidReplicaAssignment
        }
        ClusterError::Reassignment(ReassignmentError::NoReassignmentInProgress) => {
            ResponseError::NoReassignmentInProgress
        }
        ClusterError::Timeout { .. } => ResponseError::RequestTimedOut,
        _ => ResponseError::UnknownServerError,
    };
    (code, e.to_string())
}

/// Kafka's error response to an alter: the error for the request and every partition.
fn alter_refused(
    request: &AlterPartitionReassignmentsRequest,
    error: ResponseError,
    reason: &str,
) -> AlterPartitionReassignmentsResponse {
    let responses = request
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    ReassignablePartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error.code())
                        .with_error_message(message(reason))
                })
                .collect();
            ReassignableTopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    AlterPartitionReassignmentsResponse::default()
        .with_error_code(error.code())
        .with_error_message(message(reason))
        .with_responses(responses)
}

pub(super) fn handle_list(
    broker: &Broker,
    ctx: &RequestContext,
    request: ListPartitionReassignmentsRequest,
    _version: i16,
) -> ListPartitionReassignmentsResponse {
    if !broker.authorizer.authorize_cluster(ctx, AclOperation::Describe) {
        return ListPartitionReassignmentsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(message("DESCRIBE on the cluster is needed"));
    }
    // A broker alone has an empty view of topics: nothing is ever moving.
    let topics = broker.cluster.with_view(|v| {
        let ongoing = |name: &str,
                       partitions: &mut dyn Iterator<Item = i32>|
         -> Option<OngoingTopicReassignment> {
            let assignment = v.topics.get(name)?;
            let moving: Vec<OngoingPartitionReassignment> = partitions
                .filter_map(|p| {
                    let state = v.partition(name, p).filter(|s| s.is_reassigning())?;
                    let ids = |r: &[i32]| r.iter().map(|&b| BrokerId(b)).collect::<Vec<_>>();
                    Some(
                        OngoingPartitionReassignment::default()
                            .with_partition_index(p)
                            .with_replicas(ids(assignment
                                .partitions
                                .get(&p)
                                .map_or(&[][..], Vec::as_slice)))
                            .with_adding_replicas(ids(&state.adding_replicas))
                            .with_removing_replicas(ids(&state.removing_replicas)),
                    )
                })
                .collect();
            (!moving.is_empty()).then(|| {
                OngoingTopicReassignment::default()
                    .with_name(TopicName(StrBytes::from_string(name.to_string())))
                    .with_partitions(moving)
            })
        };
        match &request.topics {
            None => v
                .topics
                .iter()
                .filter_map(|(name, t)| ongoing(name, &mut t.partitions.keys().copied()))
                .collect::<Vec<_>>(),
            Some(named) => named
                .iter()
                .filter_map(|t| ongoing(t.name.as_str(), &mut t.partition_indexes.iter().copied()))
                .collect(),
        }
    });
    ListPartitionReassignmentsResponse::default().with_topics(topics)
}
