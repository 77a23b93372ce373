//! AlterConfigs (replace all overrides) and IncrementalAlterConfigs
//! (SET, DELETE, APPEND, SUBTRACT on single keys) for topics.
//!
//! The new override set is validated as a whole before anything is
//! written; a bad value leaves the topic as it was.
//!
//! BROKER resources (this node id, or "" for the cluster-wide default)
//! change the dynamic broker configs ([`crate::dynamic_config`]): the
//! resource's whole dynamic set is replaced (AlterConfigs) or edited
//! (IncrementalAlterConfigs), persisted and applied without a restart. A
//! setting that cannot change at run time refuses the resource with
//! INVALID_REQUEST "Cannot update these configs dynamically", as Kafka's
//! `ConfigAdminManager`; the other resources of the request are unaffected.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use super::message;
use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::dynamic_config::{DynamicConfigError, Scope};
use crate::errors::kafka_error;

pub(super) async fn handle_alter(broker: &Broker, ctx: &RequestContext, request: AlterConfigsRequest, _version: i16) -> AlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in request.resources {
        let overrides: BTreeMap<String, String> = resource
            .configs
            .iter()
            .filter_map(|c| c.value.as_ref().map(|v| (c.name.to_string(), v.to_string())))
            .collect();
        let (code, msg) =
            apply(broker, ctx, resource.resource_type, &resource.resource_name, request.validate_only, |_| Ok(overrides)).await;
        responses.push(
            AlterConfigsResourceResponse::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name)
                .with_error_code(code)
                .with_error_message(msg),
        );
    }
    AlterConfigsResponse::default().with_responses(responses)
}

pub(super) async fn handle_incremental(
    broker: &Broker,
    ctx: &RequestContext,
    request: IncrementalAlterConfigsRequest,
    _version: i16,
) -> IncrementalAlterConfigsResponse {
    use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse as Resp;
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in request.resources {
        let ops: Vec<(String, i8, Option<String>)> = resource
            .configs
            .iter()
            .map(|c| (c.name.to_string(), c.config_operation, c.value.as_ref().map(|v| v.to_string())))
            .collect();
        let (code, msg) = apply(broker, ctx, resource.resource_type, &resource.resource_name, request.validate_only, move |current| {
            let mut next = current.clone();
            for (name, op, value) in &ops {
                match (op, value) {
                    (0, Some(v)) => {
                        next.insert(name.clone(), v.clone());
                    }
                    (1, _) => {
                        next.remove(name);
                    }
                    (2, Some(v)) => {
                        let mut items = list(next.get(name));
                        for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                            if !items.iter().any(|i| i == item) {
                                items.push(item.to_string());
                            }
                        }
                        next.insert(name.clone(), items.join(","));
                    }
                    (3, Some(v)) => {
                        let remove: Vec<&str> = v.split(',').map(str::trim).collect();
                        let items: Vec<String> = list(next.get(name)).into_iter().filter(|i| !remove.contains(&i.as_str())).collect();
                        next.insert(name.clone(), items.join(","));
                    }
                    (op, _) => return Err(format!("operation {op} on `{name}` is invalid or lacks a value")),
                }
            }
            Ok(next)
        })
        .await;
        responses.push(
            Resp::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name)
                .with_error_code(code)
                .with_error_message(msg),
        );
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

/// Changes the dynamic configs of a BROKER resource: `name` is this node's id or "" (the cluster default).
async fn apply_broker<F>(broker: &Broker, name: &str, validate_only: bool, next: F) -> (i16, Option<StrBytes>)
where
    F: FnOnce(&BTreeMap<String, String>) -> Result<BTreeMap<String, String>, String> + Send + 'static,
{
    let scope = if name.is_empty() {
        Scope::ClusterDefault
    } else if name == broker.node_id().to_string() {
        Scope::Broker
    } else {
        return (ResponseError::InvalidRequest.code(), message(format!("this is broker {}, not {name}", broker.node_id())));
    };
    let dynamic = broker.dynamic_config.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        let next = next(&dynamic.layer(scope)).map_err(DynamicConfigError::Invalid)?;
        if validate_only {
            dynamic.validate(scope, &next)
        } else {
            dynamic.alter(scope, next.clone()).map(|()| tracing::info!(?scope, settings = ?next, "altered dynamic broker configs"))
        }
    })
    .await;
    match outcome {
        Ok(Ok(())) => (0, None),
        Ok(Err(DynamicConfigError::Invalid(reason))) => {
            tracing::info!(%reason, "dynamic broker config change refused");
            (ResponseError::InvalidRequest.code(), message(reason))
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "cannot persist dynamic broker configs");
            (ResponseError::KafkaStorageError.code(), message(e.to_string()))
        }
        Err(e) => {
            tracing::error!(error = %e, "dynamic broker config task failed");
            (ResponseError::UnknownServerError.code(), None)
        }
    }
}

fn list(value: Option<&String>) -> Vec<String> {
    value.map(|v| v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()).unwrap_or_default()
}

/// Computes the new override set from the current one and applies it.
/// Returns the error code and message for the resource.
async fn apply<F>(broker: &Broker, ctx: &RequestContext, resource_type: i8, name: &StrBytes, validate_only: bool, next: F) -> (i16, Option<StrBytes>)
where
    F: FnOnce(&BTreeMap<String, String>) -> Result<BTreeMap<String, String>, String> + Send + 'static,
{
    match resource_type {
        RESOURCE_TOPIC => {
            if !broker.authorizer.authorize(ctx, AclOperation::AlterConfigs, ResourceType::Topic, name.as_str()) {
                return (ResponseError::TopicAuthorizationFailed.code(), message(format!("{} may not ALTER_CONFIGS on {}", ctx.principal, name.as_str())));
            }
        }
        RESOURCE_BROKER if !broker.authorizer.authorize_cluster(ctx, AclOperation::AlterConfigs) => {
            return (ResponseError::ClusterAuthorizationFailed.code(), message("ALTER_CONFIGS on the cluster is needed"))
        }
        RESOURCE_BROKER => return apply_broker(broker, name.as_str(), validate_only, next).await,
        other => return (ResponseError::InvalidRequest.code(), message(format!("resource type {other} is not supported"))),
    }
    let topic_name = name.to_string();
    let Some(topic) = broker.logs.topic(&topic_name) else {
        return (ResponseError::UnknownTopicOrPartition.code(), message(format!("topic {topic_name} does not exist")));
    };
    let overrides = match next(&topic.overrides()) {
        Ok(o) => o,
        Err(reason) => return (ResponseError::InvalidConfig.code(), message(reason)),
    };
    if let Err(reason) = crate::tiering::validate_topic_overrides(&overrides) {
        return (ResponseError::InvalidConfig.code(), message(reason));
    }
    let outcome = broker
        .blocking(move |logs| {
            if validate_only {
                logs.validate_topic_config(&topic_name, &overrides).map(|_| ())
            } else {
                logs.alter_topic_config(&topic_name, overrides)
            }
        })
        .await;
    match outcome {
        Some(Ok(())) => {
            if !validate_only {
                tracing::info!(topic = %name.as_str(), "altered topic config");
            }
            (0, None)
        }
        Some(Err(e)) => (kafka_error(&e).code(), message(e.to_string())),
        None => (ResponseError::UnknownServerError.code(), None),
    }
}
