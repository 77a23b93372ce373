//! CreateTopics: new topics with their partition counts and config overrides.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::protocol::StrBytes;

use super::message;
use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::errors::kafka_error;

pub(super) async fn handle(broker: &Broker, ctx: &RequestContext, request: CreateTopicsRequest, version: i16) -> CreateTopicsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    // CREATE on the cluster covers every topic; else CREATE on each topic.
    let cluster_create = broker.authorizer.check(ctx, AclOperation::Create, ResourceType::Cluster, crate::authorizer::acl::CLUSTER_NAME);
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let mut result = CreatableTopicResult::default().with_name(topic.name.clone());
        if !cluster_create && !broker.authorizer.authorize(ctx, AclOperation::Create, ResourceType::Topic, &name) {
            results.push(
                result
                    .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                    .with_error_message(message(format!("{} may not CREATE {name}", ctx.principal)))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1),
            );
            continue;
        }
        let partitions = if topic.num_partitions == -1 && topic.assignments.is_empty() {
            broker.config.num_partitions
        } else if !topic.assignments.is_empty() {
            topic.assignments.len() as i32
        } else {
            topic.num_partitions
        };
        let node = broker.node_id();
        let bad_assignment = topic.assignments.iter().any(|a| a.broker_ids.iter().any(|b| b.0 != node) || a.broker_ids.len() > 1);
        if !(topic.replication_factor == -1 || topic.replication_factor == 1) || bad_assignment {
            results.push(
                result
                    .with_error_code(ResponseError::InvalidReplicationFactor.code())
                    .with_error_message(message(format!(
                        "Floe is a single broker (node {node}): replication factor must be 1 or -1, got {}",
                        topic.replication_factor
                    ))),
            );
            continue;
        }
        let mut overrides = BTreeMap::new();
        for c in &topic.configs {
            if let Some(v) = &c.value {
                overrides.insert(c.name.to_string(), v.to_string());
            }
        }
        if let Err(reason) = crate::tiering::validate_topic_overrides(&overrides) {
            results.push(
                result.with_error_code(ResponseError::InvalidConfig.code()).with_error_message(message(reason)),
            );
            continue;
        }
        let validate_only = request.validate_only;
        let create_name = name.clone();
        let outcome = broker
            .blocking(move |logs| {
                if validate_only {
                    let config = logs.validate_create_topic(&create_name, partitions, &overrides)?;
                    Ok(config.describe(&overrides))
                } else {
                    let t = logs.create_topic(&create_name, partitions, overrides)?;
                    Ok(t.describe_config())
                }
            })
            .await;
        match outcome {
            Some(Ok(configs)) => {
                if !validate_only {
                    tracing::info!(topic = %name, partitions, "created topic");
                }
                result = result.with_num_partitions(partitions).with_replication_factor(1);
                if let Some(t) = broker.logs.topic(&name) {
                    result = result.with_topic_id(t.id());
                }
                if version >= 5 {
                    result.configs = Some(
                        configs
                            .into_iter()
                            .map(|e| {
                                CreatableTopicConfigs::default()
                                    .with_name(StrBytes::from_string(e.name))
                                    .with_value(Some(StrBytes::from_string(e.value)))
                                    .with_config_source(if e.is_default { 5 } else { 1 })
                            })
                            .collect(),
                    );
                }
                results.push(result);
            }
            Some(Err(e)) => {
                tracing::info!(topic = %name, error = %e, "CreateTopics refused");
                results.push(
                    result
                        .with_error_code(kafka_error(&e).code())
                        .with_error_message(message(e.to_string()))
                        .with_num_partitions(-1)
                        .with_replication_factor(-1),
                );
            }
            None => results.push(result.with_error_code(ResponseError::UnknownServerError.code())),
        }
    }
    CreateTopicsResponse::default().with_topics(results)
}
