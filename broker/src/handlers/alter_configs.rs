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
//!
//! In a cluster both are cluster state ([`crate::cluster_configs`]): the change is
//! validated here, then written to etcd (`configs/topics/<name>`,
//! `configs/brokers/<default>` or `configs/brokers/<node.id>`, conditional on what
//! it was decided from), and answered once this broker has applied it; every other
//! broker applies it from its watch. A BROKER resource may then name any broker.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::dynamic_config::{DynamicConfigError, Scope};
use crate::errors::kafka_error;
use floe_protocol::response::message;

pub(super) async fn handle_alter(
    broker: &Broker,
    ctx: &RequestContext,
    request: AlterConfigsRequest,
    _version: i16,
) -> AlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in request.resources {
        let overrides: BTreeMap<String, String> = resource
            .configs
            .iter()
            .filter_map(|c| c.value.as_ref().map(|v| (c.name.to_string(), v.to_string())))
            .collect();
        let (code, msg) = apply(
            broker,
            ctx,
            resource.resource_type,
            &resource.resource_name,
            request.validate_only,
            move |_| Ok(overrides.clone()),
        )
        .await;
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
            .map(|c| {
                (c.name.to_string(), c.config_operation, c.value.as_ref().map(|v| v.to_string()))
            })
            .collect();
        let (code, msg) = apply(
            broker,
            ctx,
            resource.resource_type,
            &resource.resource_name,
            request.validate_only,
            move |current| {
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
                            let items: Vec<String> = list(next.get(name))
                                .into_iter()
                                .filter(|i| !remove.contains(&i.as_str()))
                                .collect();
                            next.insert(name.clone(), items.join(","));
                        }
                        (op, _) => {
                            return Err(format!(
                                "operation {op} on `{name}` is invalid or lacks a value"
                            ))
                        }
                    }
                }
                Ok(next)
            },
        )
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
async fn apply_broker<F>(
    broker: &Broker,
    name: &str,
    validate_only: bool,
    next: F,
) -> (i16, Option<StrBytes>)
where
    F: Fn(&BTreeMap<String, String>) -> Result<BTreeMap<String, String>, String>
        + Send
        + Sync
        + 'static,
{
    if broker.cluster.shared().is_some() {
        return apply_broker_in_cluster(broker, name, validate_only, next).await;
    }
    let scope = if name.is_empty() {
        Scope::ClusterDefault
    } else if name == broker.node_id().to_string() {
        Scope::Broker
    } else {
        return (
            ResponseError::InvalidRequest.code(),
            message(format!("this is broker {}, not {name}", broker.node_id())),
        );
    };
    let dynamic = broker.dynamic_config.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        let next = next(&dynamic.layer(scope)).map_err(DynamicConfigError::Invalid)?;
        if validate_only {
            dynamic.validate(scope, &next)
        } else {
            dynamic.alter(scope, next.clone()).map(
                |()| tracing::info!(?scope, settings = ?next, "altered dynamic broker configs"),
            )
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
    value
        .map(|v| v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
        .unwrap_or_default()
}

/// Computes the new override set from the current one and applies it.
/// Returns the error code and message for the resource.
async fn apply<F>(
    broker: &Broker,
    ctx: &RequestContext,
    resource_type: i8,
    name: &StrBytes,
    validate_only: bool,
    next: F,
) -> (i16, Option<StrBytes>)
where
    F: Fn(&BTreeMap<String, String>) -> Result<BTreeMap<String, String>, String>
        + Send
        + Sync
        + 'static,
{
    match resource_type {
        RESOURCE_TOPIC => {
            if !broker.authorizer.authorize(
                ctx,
                AclOperation::AlterConfigs,
                ResourceType::Topic,
                name.as_str(),
            ) {
                return (
                    ResponseError::TopicAuthorizationFailed.code(),
                    message(format!(
                        "{} may not ALTER_CONFIGS on {}",
                        ctx.principal,
                        name.as_str()
                    )),
                );
            }
        }
        RESOURCE_BROKER
            if !broker.authorizer.authorize_cluster(ctx, AclOperation::AlterConfigs) =>
        {
            return (
                ResponseError::ClusterAuthorizationFailed.code(),
                message("ALTER_CONFIGS on the cluster is needed"),
            )
        }
        RESOURCE_BROKER => return apply_broker(broker, name.as_str(), validate_only, next).await,
        other => {
            return (
                ResponseError::InvalidRequest.code(),
                message(format!("resource type {other} is not supported")),
            )
        }
    }
    let topic_name = name.to_string();
    if broker.cluster.shared().is_some() {
        return alter_topic_in_cluster(broker, topic_name, validate_only, next).await;
    }
    let Some(topic) = broker.logs.topic(&topic_name) else {
        return (
            ResponseError::UnknownTopicOrPartition.code(),
            message(format!("topic {topic_name} does not exist")),
        );
    };
    let current = topic.overrides();
    let overrides = match next(&current) {
        Ok(o) => o,
        Err(reason) => return (ResponseError::InvalidConfig.code(), message(reason)),
    };
    let defaults = broker.logs.default_config();
    let checked = floe_tiering::settings::validate_topic_overrides(
        &overrides,
        &defaults,
        &broker.config.tiering,
    )
    .and_then(|()| floe_tiering::settings::validate_topic_change(&current, &overrides, &defaults));
    if let Err(reason) = checked {
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

/// Why a change decided against the cluster's state is not written.
enum NotWritten {
    /// Refused: the error code and message for the resource.
    Refused(i16, Option<StrBytes>),
    /// `validate_only`, and valid.
    Validated,
}

fn outcome(
    written: Result<Result<Option<i64>, NotWritten>, floe_cluster::ClusterError>,
) -> Result<Option<i64>, (i16, Option<StrBytes>)> {
    match written {
        Ok(Ok(revision)) => Ok(revision),
        Ok(Err(NotWritten::Validated)) => Ok(None),
        Ok(Err(NotWritten::Refused(code, msg))) => Err((code, msg)),
        Err(floe_cluster::ClusterError::UnknownTopic(t)) => Err((
            ResponseError::UnknownTopicOrPartition.code(),
            message(format!("topic {t} does not exist")),
        )),
        Err(e) => {
            tracing::warn!(error = %e, "cannot write configs to the cluster metadata");
            Err((crate::cluster_configs::error_code(&e).code(), message(e.to_string())))
        }
    }
}

/// A topic's configs in a cluster: decided from (and written to) etcd, validated here.
async fn alter_topic_in_cluster<F>(
    broker: &Broker,
    topic: String,
    validate_only: bool,
    next: F,
) -> (i16, Option<StrBytes>)
where
    F: Fn(&BTreeMap<String, String>) -> Result<BTreeMap<String, String>, String>
        + Send
        + Sync
        + 'static,
{
    let Some(shared) = broker.cluster.shared() else {
        return (ResponseError::UnknownServerError.code(), None);
    };
    let logs = broker.logs.clone();
    let tiering = &broker.config.tiering;
    let decide = |_: &floe_cluster::TopicAssignment,
                  current: &BTreeMap<String, String>|
     -> Result<BTreeMap<String, String>, NotWritten> {
        let overrides = next(current).map_err(|reason| {
            NotWritten::Refused(ResponseError::InvalidConfig.code(), message(reason))
        })?;
        let defaults = logs.default_config();
        floe_tiering::settings::validate_topic_overrides(&overrides, &defaults, tiering)
            .and_then(|()| {
                floe_tiering::settings::validate_topic_change(current, &overrides, &defaults)
            })
            .map_err(|reason| {
                NotWritten::Refused(ResponseError::InvalidConfig.code(), message(reason))
            })?;
        logs.validate_topic_config(&topic, &overrides)
            .map_err(|e| NotWritten::Refused(kafka_error(&e).code(), message(e.to_string())))?;
        if validate_only {
            return Err(NotWritten::Validated);
        }
        Ok(overrides)
    };
    let written = shared.alter_topic_config(&topic, decide).await.map(|r| r.map(Some));
    match outcome(written) {
        Ok(Some(revision)) => {
            crate::cluster_configs::await_applied(
                broker,
                crate::cluster_configs::CONFIGS_DIR,
                revision,
            )
            .await;
            tracing::info!(topic = %topic, "altered topic config in the cluster");
            (0, None)
        }
        Ok(None) => (0, None),
        Err(refused) => refused,
    }
}

/// A BROKER resource in a cluster: `name` is "" (every broker) or any node id; the
/// layer is decided from (and written to) etcd, validated here.
async fn apply_broker_in_cluster<F>(
    broker: &Broker,
    name: &str,
    validate_only: bool,
    next: F,
) -> (i16, Option<StrBytes>)
where
    F: Fn(&BTreeMap<String, String>) -> Result<BTreeMap<String, String>, String>
        + Send
        + Sync
        + 'static,
{
    let Some(shared) = broker.cluster.shared() else {
        return (ResponseError::UnknownServerError.code(), None);
    };
    let (scope, node) = if name.is_empty() {
        (Scope::ClusterDefault, None)
    } else {
        match name.parse::<i32>() {
            Ok(id) if id >= 0 => (Scope::Broker, Some(id)),
            _ => {
                return (
                    ResponseError::InvalidRequest.code(),
                    message(format!("broker resource name {name:?} is not a node id")),
                )
            }
        }
    };
    let key = floe_cluster::broker_config_key(node);
    let Some(name_in_dir) =
        key.strip_prefix(crate::cluster_configs::CONFIGS_DIR).map(str::to_string)
    else {
        return (ResponseError::UnknownServerError.code(), None);
    };
    let dynamic = broker.dynamic_config.clone();
    let decide =
        |stored: &BTreeMap<String, Vec<u8>>| -> Result<Vec<floe_cluster::Change>, NotWritten> {
            let current: BTreeMap<String, String> = stored
                .get(&name_in_dir)
                .and_then(|v| serde_json::from_slice(v).ok())
                .unwrap_or_default();
            let layer = next(&current).map_err(|reason| {
                NotWritten::Refused(ResponseError::InvalidRequest.code(), message(reason))
            })?;
            dynamic.validate(scope, &layer).map_err(|e| {
                NotWritten::Refused(ResponseError::InvalidRequest.code(), message(e.to_string()))
            })?;
            if validate_only {
                return Err(NotWritten::Validated);
            }
            if layer == current {
                return Ok(Vec::new());
            }
            let value = if layer.is_empty() {
                None
            } else {
                Some(serde_json::to_vec(&layer).unwrap_or_default())
            };
            Ok(vec![(name_in_dir.clone(), value)])
        };
    match outcome(shared.update(crate::cluster_configs::CONFIGS_DIR, decide).await) {
        Ok(Some(revision)) => {
            crate::cluster_configs::await_applied(
                broker,
                crate::cluster_configs::CONFIGS_DIR,
                revision,
            )
            .await;
            tracing::info!(?scope, node, "altered dynamic broker configs in the cluster");
            (0, None)
        }
        Ok(None) => (0, None),
        Err(refused) => {
            tracing::info!(?scope, node, code = refused.0, "dynamic broker config change refused");
            refused
        }
    }
}
