//! CreatePartitions: grow a topic's partition count (never shrink it).
//!
//! As Kafka's controller (`ReplicationControlManager.createPartitions`): a count that
//! is not larger is INVALID_PARTITIONS; explicit assignments must give one replica
//! list per added partition, each of distinct live brokers as many as the topic's
//! replication factor, else INVALID_REPLICA_ASSIGNMENT; a topic named twice in one
//! request is INVALID_REQUEST; ALTER on the topic is needed. In a cluster the new
//! partitions go to the metadata store ([`crate::cluster_admin::create_partitions`]);
//! a broker alone grows its own logs (its only assignment is itself).

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};

use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::errors::kafka_error;
use floe_protocol::response::message;

pub(super) async fn handle(
    broker: &Broker,
    ctx: &RequestContext,
    request: CreatePartitionsRequest,
    _version: i16,
) -> CreatePartitionsResponse {
    let mut named: BTreeMap<String, usize> = BTreeMap::new();
    for topic in &request.topics {
        *named.entry(topic.name.0.to_string()).or_default() += 1;
    }
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
        if named.get(&name).is_some_and(|n| *n > 1) {
            results.push(
                result
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(message("Duplicate topic in request.")),
            );
            continue;
        }
        if !broker.authorizer.authorize(ctx, AclOperation::Alter, ResourceType::Topic, &name) {
            results.push(result.with_error_code(ResponseError::TopicAuthorizationFailed.code()));
            continue;
        }
        if super::metadata::is_internal(&name) {
            // Floe's coordinators own partition 0 of their topics (offsets.topic.num.partitions=1).
            results.push(result.with_error_code(ResponseError::InvalidRequest.code()).with_error_message(message(format!(
                "{name} is an internal topic whose coordinator owns exactly one partition; it cannot grow"
            ))));
            continue;
        }
        if broker.is_clustered() {
            results.push(in_cluster(broker, topic, &name, request.validate_only, result).await);
            continue;
        }
        let count = topic.count;
        let validate_only = request.validate_only;
        let outcome = broker
            .blocking(move |logs| {
                if validate_only {
                    validate_create_partitions(logs, &name, count)
                } else {
                    logs.create_partitions(&name, count)
                }
            })
            .await;
        results.push(match outcome {
            Some(Ok(())) => result,
            Some(Err(e)) => result
                .with_error_code(kafka_error(&e).code())
                .with_error_message(message(e.to_string())),
            None => result.with_error_code(ResponseError::UnknownServerError.code()),
        });
    }
    CreatePartitionsResponse::default().with_results(results)
}

/// One topic's new partitions in a cluster.
async fn in_cluster(
    broker: &Broker,
    topic: CreatePartitionsTopic,
    name: &str,
    validate_only: bool,
    result: CreatePartitionsTopicResult,
) -> CreatePartitionsTopicResult {
    let manual = topic
        .assignments
        .map(|a| a.into_iter().map(|a| a.broker_ids.into_iter().map(|b| b.0).collect()).collect());
    match crate::cluster_admin::create_partitions(broker, name, topic.count, manual, validate_only)
        .await
    {
        Ok(()) => {
            if !validate_only {
                tracing::info!(
                    topic = name,
                    partitions = topic.count,
                    "added partitions to a topic in the cluster"
                );
            }
            result
        }
        Err((code, reason)) => {
            tracing::info!(topic = name, error = ?code, %reason, "CreatePartitions refused");
            result.with_error_code(code.code()).with_error_message(message(reason))
        }
    }
}

/// What `create_partitions` would refuse, without changing anything.
fn validate_create_partitions(
    logs: &floe_storage::LogManager,
    name: &str,
    count: i32,
) -> Result<(), floe_storage::StorageError> {
    let topic =
        logs.topic(name).ok_or_else(|| floe_storage::StorageError::UnknownTopicOrPartition {
            topic: name.to_string(),
            partition: None,
        })?;
    let current = topic.partition_count();
    if count <= current {
        return Err(floe_storage::StorageError::InvalidPartitions {
            topic: name.to_string(),
            reason: format!(
                "topic {name} has {current} partitions; the new count {count} must be larger"
            ),
        });
    }
    Ok(())
}
