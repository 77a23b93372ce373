//! CreatePartitions: grow a topic's partition count (never shrink it).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};

use super::message;
use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::errors::kafka_error;

pub(super) async fn handle(broker: &Broker, ctx: &RequestContext, request: CreatePartitionsRequest, _version: i16) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
        if !broker.authorizer.authorize(ctx, AclOperation::Alter, ResourceType::Topic, &name) {
            results.push(result.with_error_code(ResponseError::TopicAuthorizationFailed.code()));
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
            Some(Err(e)) => result.with_error_code(kafka_error(&e).code()).with_error_message(message(e.to_string())),
            None => result.with_error_code(ResponseError::UnknownServerError.code()),
        });
    }
    CreatePartitionsResponse::default().with_results(results)
}

/// What `create_partitions` would refuse, without changing anything.
fn validate_create_partitions(logs: &floe_storage::LogManager, name: &str, count: i32) -> Result<(), floe_storage::StorageError> {
    let topic = logs
        .topic(name)
        .ok_or_else(|| floe_storage::StorageError::UnknownTopicOrPartition { topic: name.to_string(), partition: None })?;
    let current = topic.partition_count();
    if count <= current {
        return Err(floe_storage::StorageError::InvalidPartitions {
            topic: name.to_string(),
            reason: format!("topic {name} has {current} partitions; the new count {count} must be larger"),
        });
    }
    Ok(())
}
