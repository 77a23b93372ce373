//! ElectLeaders: preferred or unclean leader election.
//!
//! As Kafka's controller (`ReplicationControlManager.electLeaders`): PREFERRED
//! moves leadership to a partition's first replica if it is alive and in sync
//! (ELECTION_NOT_NEEDED if it leads, PREFERRED_LEADER_NOT_AVAILABLE if it
//! cannot); UNCLEAN gives a partition without a leader one, out of sync if
//! need be (ELECTION_NOT_NEEDED if it has one, ELIGIBLE_LEADERS_NOT_AVAILABLE
//! if no replica is alive); a partition or topic that does not exist answers
//! UNKNOWN_TOPIC_OR_PARTITION. A null topic list asks for every partition,
//! and partitions that need no election are left out of the answer (every
//! topic is listed). An election type other than 0 (PREFERRED) or 1 (UNCLEAN)
//! is INVALID_REQUEST. Authorization: ALTER on the cluster, else
//! CLUSTER_AUTHORIZATION_FAILED for the request and every partition in it.
//!
//! In a cluster the elections are written to the metadata store
//! ([`crate::cluster_admin::elect_leaders`]). A broker alone has one replica
//! of every partition, itself, both preferred leader and leader: no election
//! is ever needed.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use floe_cluster::ElectionType;

use crate::authorizer::acl::AclOperation;
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use floe_protocol::response::message;

const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

pub(super) async fn handle(
    broker: &Broker,
    ctx: &RequestContext,
    request: ElectLeadersRequest,
    _version: i16,
) -> ElectLeadersResponse {
    if !broker.authorizer.authorize_cluster(ctx, AclOperation::Alter) {
        return refused(
            &request,
            ResponseError::ClusterAuthorizationFailed,
            "ALTER on the cluster is needed",
        );
    }
    let election = match request.election_type {
        PREFERRED => ElectionType::Preferred,
        UNCLEAN => ElectionType::Unclean,
        other => {
            return refused(
                &request,
                ResponseError::InvalidRequest,
                &format!("unknown election type {other}"),
            )
        }
    };
    if broker.is_clustered() {
        return in_cluster(broker, request, election).await;
    }
    let results = match &request.topic_partitions {
        // Every partition needs no election, and such partitions are not listed.
        None => broker
            .logs
            .topics()
            .iter()
            .map(|t| {
                ReplicaElectionResult::default()
                    .with_topic(TopicName(StrBytes::from_string(t.name().to_string())))
            })
            .collect(),
        Some(topics) => topics
            .iter()
            .map(|t| {
                let topic = broker.logs.topic(t.topic.as_str());
                let partitions = t
                    .partitions
                    .iter()
                    .map(|&p| {
                        let result = PartitionResult::default().with_partition_id(p);
                        match &topic {
                            Some(topic) if topic.partition(p).is_some() => {
                                result.with_error_code(ResponseError::ElectionNotNeeded.code())
                            }
                            Some(_) => result
                                .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                                .with_error_message(message(format!(
                                    "No such partition as {}-{p}",
                                    t.topic.as_str()
                                ))),
                            None => result
                                .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                                .with_error_message(message(format!(
                                    "No such topic as {}",
                                    t.topic.as_str()
                                ))),
                        }
                    })
                    .collect();
                ReplicaElectionResult::default()
                    .with_topic(t.topic.clone())
                    .with_partition_result(partitions)
            })
            .collect(),
    };
    ElectLeadersResponse::default().with_replica_election_results(results)
}

/// ElectLeaders in a cluster: every named partition (or every partition) elected
/// through the metadata store.
async fn in_cluster(
    broker: &Broker,
    request: ElectLeadersRequest,
    election: ElectionType,
) -> ElectLeadersResponse {
    let named = request
        .topic_partitions
        .map(|topics| topics.into_iter().map(|t| (t.topic.0.to_string(), t.partitions)).collect());
    let timeout = std::time::Duration::from_millis(request.timeout_ms.max(0) as u64);
    let results = crate::cluster_admin::elect_leaders(broker, election, named, timeout)
        .await
        .into_iter()
        .map(|(topic, outcomes)| {
            let partitions = outcomes
                .into_iter()
                .map(|(p, outcome)| {
                    let result = PartitionResult::default().with_partition_id(p);
                    match outcome {
                        Ok(()) => result,
                        // Kafka answers this one without a message.
                        Err((ResponseError::ElectionNotNeeded, _)) => {
                            result.with_error_code(ResponseError::ElectionNotNeeded.code())
                        }
                        Err((code, reason)) => {
                            result.with_error_code(code.code()).with_error_message(message(reason))
                        }
                    }
                })
                .collect();
            ReplicaElectionResult::default()
                .with_topic(TopicName(StrBytes::from_string(topic)))
                .with_partition_result(partitions)
        })
        .collect();
    ElectLeadersResponse::default().with_replica_election_results(results)
}

/// Kafka's error response: the error for the request (v1+) and for every partition named.
fn refused(
    request: &ElectLeadersRequest,
    error: ResponseError,
    reason: &str,
) -> ElectLeadersResponse {
    let results = request
        .topic_partitions
        .iter()
        .flatten()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|&p| {
                    PartitionResult::default()
                        .with_partition_id(p)
                        .with_error_code(error.code())
                        .with_error_message(message(reason))
                })
                .collect();
            ReplicaElectionResult::default()
                .with_topic(t.topic.clone())
                .with_partition_result(partitions)
        })
        .collect();
    ElectLeadersResponse::default()
        .with_error_code(error.code())
        .with_replica_election_results(results)
}
