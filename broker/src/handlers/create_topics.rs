//! CreateTopics: new topics with their partition counts, replicas and config overrides
//! (in a cluster, written to the metadata store: see [`crate::cluster_admin`]).

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::errors::kafka_error;
use floe_protocol::response::message;

pub(super) async fn handle(
    broker: &Broker,
    ctx: &RequestContext,
    request: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    // CREATE on the cluster covers every topic; else CREATE on each topic.
    let cluster_create = broker.authorizer.check(
        ctx,
        AclOperation::Create,
        ResourceType::Cluster,
        crate::authorizer::acl::CLUSTER_NAME,
    );
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let mut result = CreatableTopicResult::default().with_name(topic.name.clone());
        if !cluster_create
            && !broker.authorizer.authorize(ctx, AclOperation::Create, ResourceType::Topic, &name)
        {
            results.push(
                result
                    .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                    .with_error_message(message(format!("{} may not CREATE {name}", ctx.principal)))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1),
            );
            continue;
        }
        if broker.is_clustered() {
            results.push(
                create_in_cluster(broker, &topic, &name, request.validate_only, version).await,
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
        let bad_assignment = topic
            .assignments
            .iter()
            .any(|a| a.broker_ids.iter().any(|b| b.0 != node) || a.broker_ids.len() > 1);
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
        let overrides = overrides_of(&topic);
        if let Err(reason) = floe_tiering::settings::validate_topic_overrides(
            &overrides,
            &broker.logs.default_config(),
            &broker.config.tiering,
        ) {
            results.push(
                result
                    .with_error_code(ResponseError::InvalidConfig.code())
                    .with_error_message(message(reason)),
            );
            continue;
        }
        let validate_only = request.validate_only;
        let create_name = name.clone();
        let outcome = broker
            .blocking(move |logs| {
                if validate_only {
                    let config =
                        logs.validate_create_topic(&create_name, partitions, &overrides)?;
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

/// The config overrides a CreateTopics entry carries (null values left out).
fn overrides_of(topic: &CreatableTopic) -> BTreeMap<String, String> {
    topic
        .configs
        .iter()
        .filter_map(|c| c.value.as_ref().map(|v| (c.name.to_string(), v.to_string())))
        .collect()
}

/// One topic of CreateTopics in a cluster: placed over the live brokers (or as the
/// request assigns), written to the metadata store unless `validate_only`.
async fn create_in_cluster(
    broker: &Broker,
    topic: &CreatableTopic,
    name: &str,
    validate_only: bool,
    version: i16,
) -> CreatableTopicResult {
    let result = CreatableTopicResult::default().with_name(topic.name.clone());
    let refused = |code: ResponseError, reason: String| {
        tracing::info!(topic = %name, error = ?code, %reason, "CreateTopics refused");
        result
            .clone()
            .with_error_code(code.code())
            .with_error_message(message(reason))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
    };
    let overrides = overrides_of(topic);
    if let Err(reason) = floe_tiering::settings::validate_topic_overrides(
        &overrides,
        &broker.logs.default_config(),
        &broker.config.tiering,
    ) {
        return refused(ResponseError::InvalidConfig, reason);
    }
    let assignments: Vec<(i32, Vec<i32>)> = topic
        .assignments
        .iter()
        .map(|a| (a.partition_index, a.broker_ids.iter().map(|b| b.0).collect()))
        .collect();
    let outcome = if validate_only {
        crate::cluster_admin::plan_topic(
            broker,
            name,
            topic.num_partitions,
            topic.replication_factor.into(),
            &assignments,
        )
        .and_then(|planned| {
            broker
                .logs
                .validate_create_topic(name, planned.len() as i32, &overrides)
                .map_err(|e| (kafka_error(&e), e.to_string()))?;
            if broker.cluster.with_view(|v| v.topics.contains_key(name)) {
                return Err((
                    ResponseError::TopicAlreadyExists,
                    format!("topic '{name}' already exists"),
                ));
            }
            Ok((planned, uuid::Uuid::nil()))
        })
    } else {
        crate::cluster_admin::create_topic(
            broker,
            name,
            topic.num_partitions,
            topic.replication_factor.into(),
            &assignments,
            overrides.clone(),
        )
        .await
        .map(|a| (a.partitions.clone(), uuid::Uuid::parse_str(&a.topic_id).unwrap_or_default()))
    };
    let (planned, id) = match outcome {
        Ok(planned) => planned,
        Err((code, reason)) => return refused(code, reason),
    };
    if !validate_only {
        tracing::info!(topic = %name, partitions = planned.len(), "created topic in the cluster");
    }
    let rf = planned.values().next().map_or(0, Vec::len) as i16;
    let mut result = result
        .with_num_partitions(planned.len() as i32)
        .with_replication_factor(rf)
        .with_topic_id(id);
    if version >= 5 {
        let config = broker.logs.default_config().with_overrides(&overrides);
        result.configs =
            config.ok().map(|c| c.describe(&overrides).into_iter().map(described).collect());
    }
    result
}

fn described(e: floe_storage::ConfigEntry) -> CreatableTopicConfigs {
    CreatableTopicConfigs::default()
        .with_name(StrBytes::from_string(e.name))
        .with_value(Some(StrBytes::from_string(e.value)))
        .with_config_source(if e.is_default { 5 } else { 1 })
}
