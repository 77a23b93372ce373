//! ElectLeaders: preferred or unclean leader election, for a cluster of one.
//!
//! Every partition has one replica, this broker, which is both its
//! preferred leader and its leader, so no election is ever needed. As
//! Kafka's controller (`ReplicationControlManager.electLeaders`): a named
//! partition answers ELECTION_NOT_NEEDED for PREFERRED (the preferred
//! leader leads) and UNCLEAN (a leader exists); a partition or topic that
//! does not exist answers UNKNOWN_TOPIC_OR_PARTITION. A null topic list asks
//! for every partition, and partitions that need no election are left out
//! of the answer, so every topic is listed with no partitions. An election
//! type other than 0 (PREFERRED) or 1 (UNCLEAN) is INVALID_REQUEST.
//! Authorization: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED
//! for the request and every partition in it.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::message;
use crate::authorizer::acl::AclOperation;
use crate::authorizer::RequestContext;
use crate::broker::Broker;

const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

pub(super) fn handle(broker: &Broker, ctx: &RequestContext, request: ElectLeadersRequest, _version: i16) -> ElectLeadersResponse {
    if !broker.authorizer.authorize_cluster(ctx, AclOperation::Alter) {
        return refused(&request, ResponseError::ClusterAuthorizationFailed, "ALTER on the cluster is needed");
    }
    if !matches!(request.election_type, PREFERRED | UNCLEAN) {
        return refused(&request, ResponseError::InvalidRequest, &format!("unknown election type {}", request.election_type));
    }
    let results = match &request.topic_partitions {
        // Every partition needs no election, and such partitions are not listed.
        None => broker
            .logs
            .topics()
            .iter()
            .map(|t| ReplicaElectionResult::default().with_topic(TopicName(StrBytes::from_string(t.name().to_string()))))
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
                                .with_error_message(message(format!("No such partition as {}-{p}", t.topic.as_str()))),
                            None => result
                                .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                                .with_error_message(message(format!("No such topic as {}", t.topic.as_str()))),
                        }
                    })
                    .collect();
                ReplicaElectionResult::default().with_topic(t.topic.clone()).with_partition_result(partitions)
            })
            .collect(),
    };
    ElectLeadersResponse::default().with_replica_election_results(results)
}

/// Kafka's error response: the error for the request (v1+) and for every partition named.
fn refused(request: &ElectLeadersRequest, error: ResponseError, reason: &str) -> ElectLeadersResponse {
    let results = request
        .topic_partitions
        .iter()
        .flatten()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|&p| PartitionResult::default().with_partition_id(p).with_error_code(error.code()).with_error_message(message(reason)))
                .collect();
            ReplicaElectionResult::default().with_topic(t.topic.clone()).with_partition_result(partitions)
        })
        .collect();
    ElectLeadersResponse::default().with_error_code(error.code()).with_replica_election_results(results)
}
