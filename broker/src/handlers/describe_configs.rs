//! DescribeConfigs: a topic's effective configuration, or the broker's.
//!
//! Topic entries are overrides (source DYNAMIC_TOPIC_CONFIG) or inherited
//! defaults (DEFAULT_CONFIG). Broker entries (resource name = this node id)
//! are every setting with its source, DYNAMIC_BROKER_CONFIG,
//! DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG or DEFAULT_CONFIG,
//! read-only unless it is one of the dynamic settings
//! ([`crate::dynamic_config`]); the cluster-wide default resource (name "")
//! lists the settings set at that level only, as Kafka does.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::dynamic_config::{ConfigSource, Scope, DYNAMIC_SETTINGS};
use floe_protocol::response::message;

pub(crate) const RESOURCE_TOPIC: i8 = 2;
pub(crate) const RESOURCE_BROKER: i8 = 4;

const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_DEFAULT: i8 = 5;

pub(super) fn handle(
    broker: &Broker,
    ctx: &RequestContext,
    request: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let results = request
        .resources
        .into_iter()
        .map(|resource| {
            let wanted = |name: &str| {
                // Null lists every key; so does an empty list, which some clients send for "all".
                resource
                    .configuration_keys
                    .as_ref()
                    .is_none_or(|keys| keys.is_empty() || keys.iter().any(|k| k.as_str() == name))
            };
            let base = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            match resource.resource_type {
                RESOURCE_TOPIC
                    if !broker.authorizer.authorize(
                        ctx,
                        AclOperation::DescribeConfigs,
                        ResourceType::Topic,
                        resource.resource_name.as_str(),
                    ) =>
                {
                    base.with_error_code(ResponseError::TopicAuthorizationFailed.code())
                }
                RESOURCE_BROKER
                    if !broker.authorizer.authorize_cluster(ctx, AclOperation::DescribeConfigs) =>
                {
                    base.with_error_code(ResponseError::ClusterAuthorizationFailed.code())
                }
                RESOURCE_TOPIC => {
                    let Some(topic) = broker.logs.topic(resource.resource_name.as_str()) else {
                        return base
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                            .with_error_message(message(format!(
                                "topic {} does not exist",
                                resource.resource_name.as_str()
                            )));
                    };
                    let configs = topic
                        .describe_config()
                        .into_iter()
                        .filter(|e| wanted(&e.name))
                        .map(|e| {
                            let source =
                                if e.is_default { SOURCE_DEFAULT } else { SOURCE_DYNAMIC_TOPIC };
                            let synonyms = if request.include_synonyms {
                                vec![(e.value.clone(), source)]
                            } else {
                                Vec::new()
                            };
                            entry(&e.name, &e.value, false, source, &synonyms, version)
                        })
                        .collect();
                    base.with_configs(configs)
                }
                RESOURCE_BROKER => {
                    let name = resource.resource_name.as_str();
                    let dynamic = &broker.dynamic_config;
                    if name.is_empty() {
                        let configs = dynamic
                            .layer(Scope::ClusterDefault)
                            .iter()
                            .filter(|(k, _)| wanted(k))
                            .map(|(k, v)| {
                                entry(
                                    k,
                                    v,
                                    false,
                                    ConfigSource::DynamicDefaultBroker as i8,
                                    &[],
                                    version,
                                )
                            })
                            .collect();
                        return base.with_configs(configs);
                    }
                    if name != broker.node_id().to_string() {
                        return base
                            .with_error_code(ResponseError::InvalidRequest.code())
                            .with_error_message(message(format!(
                                "this is broker {}, not {name}",
                                broker.node_id()
                            )));
                    }
                    let configs = dynamic
                        .effective()
                        .into_iter()
                        .filter(|(k, _, _)| wanted(k))
                        .map(|(k, v, source)| {
                            let read_only = !DYNAMIC_SETTINGS.contains(&k.as_str());
                            let synonyms: Vec<(String, i8)> = if request.include_synonyms {
                                dynamic
                                    .synonyms(&k)
                                    .into_iter()
                                    .map(|(v, s)| (v, s as i8))
                                    .collect()
                            } else {
                                Vec::new()
                            };
                            let e = entry(&k, &v, read_only, source as i8, &synonyms, version);
                            if crate::config::is_sensitive(&k) {
                                sensitive(e)
                            } else {
                                e
                            }
                        })
                        .collect();
                    base.with_configs(configs)
                }
                other => base
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(message(format!("resource type {other} is not supported"))),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

/// As Kafka reports a password: flagged sensitive, no value (nor in synonyms).
fn sensitive(mut e: DescribeConfigsResourceResult) -> DescribeConfigsResourceResult {
    e.value = None;
    e.is_sensitive = true;
    for synonym in &mut e.synonyms {
        synonym.value = None;
    }
    e
}

fn entry(
    name: &str,
    value: &str,
    read_only: bool,
    source: i8,
    synonyms: &[(String, i8)],
    version: i16,
) -> DescribeConfigsResourceResult {
    let mut e = DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_string(name.to_string()))
        .with_value(Some(StrBytes::from_string(value.to_string())))
        .with_read_only(read_only)
        .with_config_source(source);
    e.synonyms = synonyms
        .iter()
        .map(|(value, source)| {
            DescribeConfigsSynonym::default()
                .with_name(StrBytes::from_string(name.to_string()))
                .with_value(Some(StrBytes::from_string(value.clone())))
                .with_source(*source)
        })
        .collect();
    if version >= 3 {
        e.config_type = config_type(value);
    }
    e
}

/// Kafka's ConfigType: 1 BOOLEAN, 2 STRING, 5 LONG; a guess from the value
/// that is right for every setting Floe has.
fn config_type(value: &str) -> i8 {
    if value == "true" || value == "false" {
        1
    } else if value.parse::<i64>().is_ok() {
        5
    } else {
        2
    }
}
