//! DeleteTopics: by name (v0–5) or by name or topic id (v6).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::errors::kafka_error;
use floe_protocol::response::message;

pub(super) async fn handle(
    broker: &Broker,
    ctx: &RequestContext,
    request: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let wanted: Vec<(Option<String>, uuid::Uuid)> = if version >= 6 {
        request.topics.into_iter().map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id)).collect()
    } else {
        request
            .topic_names
            .into_iter()
            .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
            .collect()
    };
    let mut responses = Vec::with_capacity(wanted.len());
    for (name, id) in wanted {
        // DELETE on the named topic, checked before existence (as Kafka does).
        if let Some(n) = &name {
            if !broker.authorizer.authorize(ctx, AclOperation::Delete, ResourceType::Topic, n) {
                responses.push(
                    DeletableTopicResult::default()
                        .with_name(Some(TopicName(StrBytes::from_string(n.clone()))))
                        .with_topic_id(id)
                        .with_error_code(ResponseError::TopicAuthorizationFailed.code()),
                );
                continue;
            }
        }
        if broker.is_clustered() && !name.as_deref().is_some_and(super::metadata::is_internal) {
            responses.push(delete_in_cluster(broker, ctx, name, id, version).await);
            continue;
        }
        let topic = match &name {
            Some(n) => broker.logs.topic(n),
            None => broker.logs.topic_by_id(id),
        };
        let mut result = DeletableTopicResult::default()
            .with_name(name.clone().map(|n| TopicName(StrBytes::from_string(n))))
            .with_topic_id(id);
        let Some(topic) = topic else {
            let code = if name.is_some() {
                ResponseError::UnknownTopicOrPartition
            } else {
                ResponseError::UnknownTopicId
            };
            responses.push(result.with_error_code(code.code()));
            continue;
        };
        if version >= 6 {
            result = result
                .with_name(Some(TopicName(StrBytes::from_string(topic.name().to_string()))))
                .with_topic_id(topic.id());
        }
        let topic_name = topic.name().to_string();
        drop(topic);
        // Deleting by id: the name is known only now.
        if name.is_none()
            && !broker.authorizer.authorize(
                ctx,
                AclOperation::Delete,
                ResourceType::Topic,
                &topic_name,
            )
        {
            responses.push(result.with_error_code(ResponseError::TopicAuthorizationFailed.code()));
            continue;
        }
        if super::metadata::is_internal(&topic_name) {
            // Kafka refuses to delete its internal topics too.
            responses.push(result.with_error_code(ResponseError::InvalidTopicException.code()));
            continue;
        }
        let deleted = broker.blocking(move |logs| logs.delete_topic(&topic_name)).await;
        match deleted {
            Some(Ok(())) => {
                tracing::info!(topic = ?name, "deleted topic");
                responses.push(result);
            }
            Some(Err(e)) => responses.push(
                result
                    .with_error_code(kafka_error(&e).code())
                    .with_error_message(if version >= 5 { message(e.to_string()) } else { None }),
            ),
            None => {
                responses.push(result.with_error_code(ResponseError::UnknownServerError.code()))
            }
        }
    }
    DeleteTopicsResponse::default().with_responses(responses)
}

/// One topic of DeleteTopics in a cluster: removed from the metadata store (every
/// broker then deletes its logs of it).
async fn delete_in_cluster(
    broker: &Broker,
    ctx: &RequestContext,
    name: Option<String>,
    id: uuid::Uuid,
    version: i16,
) -> DeletableTopicResult {
    let wanted_id = id.hyphenated().to_string();
    let found = broker.cluster.with_view(|v| match &name {
        Some(n) => v.topics.get(n).map(|t| (n.clone(), t.topic_id.clone())),
        None => v
            .topics
            .iter()
            .find(|(_, t)| t.topic_id == wanted_id)
            .map(|(n, t)| (n.clone(), t.topic_id.clone())),
    });
    let result = DeletableTopicResult::default()
        .with_name(name.clone().map(|n| TopicName(StrBytes::from_string(n))))
        .with_topic_id(id);
    let Some((topic_name, topic_id)) = found else {
        let code = if name.is_some() {
            ResponseError::UnknownTopicOrPartition
        } else {
            ResponseError::UnknownTopicId
        };
        return result.with_error_code(code.code());
    };
    let result = if version >= 6 {
        result
            .with_name(Some(TopicName(StrBytes::from_string(topic_name.clone()))))
            .with_topic_id(uuid::Uuid::parse_str(&topic_id).unwrap_or_default())
    } else {
        result
    };
    if name.is_none()
        && !broker.authorizer.authorize(ctx, AclOperation::Delete, ResourceType::Topic, &topic_name)
    {
        return result.with_error_code(ResponseError::TopicAuthorizationFailed.code());
    }
    match crate::cluster_admin::delete_topic(broker, &topic_name).await {
        Ok(()) => {
            tracing::info!(topic = %topic_name, "deleted topic from the cluster");
            result
        }
        Err((code, reason)) => result
            .with_error_code(code.code())
            .with_error_message(if version >= 5 { message(reason) } else { None }),
    }
}
