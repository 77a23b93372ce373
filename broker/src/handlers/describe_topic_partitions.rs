//! DescribeTopicPartitions (KIP-966): topics and their partitions, a page at
//! a time.
//!
//! As Kafka's `DescribeTopicPartitionsRequestHandler`: an empty topic list
//! means every topic; topics are answered in name order from the cursor's
//! topic (and, in it, from the cursor's partition); at most
//! `response_partition_limit` partitions (clamped to 1..=2000, Kafka's
//! `max.request.partition.size.limit`) are returned, and `next_cursor`
//! names where the next page starts. A topic named in the request that the
//! client may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED (with a zero
//! topic id, after the others); in an "every topic" listing it is left out.
//! A named topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION
//! (INVALID_TOPIC_EXCEPTION for an illegal name). A cursor whose topic is
//! not in the list, or whose partition is negative, is INVALID_REQUEST for
//! every topic (Kafka's error response).
//!
//! Partitions are described as Metadata describes them (leaders, epochs, replicas,
//! ISR, offline replicas); the eligible leader replicas (KIP-966's ELR) are empty.

use std::collections::BTreeSet;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::metadata::is_internal;
use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::{RequestContext, TOPIC_OPERATIONS};
use crate::broker::Broker;

/// Kafka's `max.request.partition.size.limit` default: most partitions in one response.
const MAX_PARTITIONS_PER_RESPONSE: i32 = 2000;

pub(super) fn handle(
    broker: &Broker,
    ctx: &RequestContext,
    request: DescribeTopicPartitionsRequest,
    _version: i16,
) -> DescribeTopicPartitionsResponse {
    let fetch_all = request.topics.is_empty();
    let cursor_topic =
        request.cursor.as_ref().map(|c| c.topic_name.as_str().to_string()).unwrap_or_default();
    let names: BTreeSet<String> = if fetch_all {
        super::metadata::topic_names(broker).into_iter().filter(|n| *n >= cursor_topic).collect()
    } else {
        request
            .topics
            .iter()
            .map(|t| t.name.as_str().to_string())
            .filter(|n| *n >= cursor_topic)
            .collect()
    };
    if let Some(cursor) = &request.cursor {
        let refusal = if !fetch_all && !names.contains(&cursor_topic) {
            Some(format!("the topic list must contain the cursor's topic {cursor_topic}"))
        } else if cursor.partition_index < 0 {
            Some(format!("the cursor's partition must be valid, not {}", cursor.partition_index))
        } else {
            None
        };
        if let Some(reason) = refusal {
            tracing::debug!(%reason, "DescribeTopicPartitions refused");
            let topics = request
                .topics
                .iter()
                .map(|t| topic_error(t.name.as_str(), ResponseError::InvalidRequest))
                .collect();
            return DescribeTopicPartitionsResponse::default().with_topics(topics);
        }
    }
    let start_of = |name: &str| {
        request.cursor.as_ref().filter(|_| name == cursor_topic).map_or(0, |c| c.partition_index)
    };

    let mut unauthorized = Vec::new();
    let mut response = DescribeTopicPartitionsResponse::default();
    let mut remaining = request.response_partition_limit.clamp(1, MAX_PARTITIONS_PER_RESPONSE);
    for name in names {
        if !broker.authorizer.authorize(ctx, AclOperation::Describe, ResourceType::Topic, &name) {
            if !fetch_all {
                unauthorized.push(topic_error(&name, ResponseError::TopicAuthorizationFailed));
            }
            continue;
        }
        if remaining == 0 {
            // The next page starts at this topic's first partition.
            response.next_cursor =
                Some(Cursor::default().with_topic_name(topic_name(&name)).with_partition_index(0));
            break;
        }
        let Some(described) = super::metadata::describe_by_name(broker, &name) else {
            if !fetch_all {
                let code = if floe_storage::topic::validate_topic_name(&name).is_ok() {
                    ResponseError::UnknownTopicOrPartition
                } else {
                    ResponseError::InvalidTopicException
                };
                response.topics.push(topic_error(&name, code));
            }
            continue;
        };
        // The same partitions Metadata describes, paged.
        let count = described.partitions.len() as i32;
        let start = start_of(&name);
        let end = count.min(start.saturating_add(remaining));
        let partitions: Vec<_> = described
            .partitions
            .into_iter()
            .filter(|p| (start..end).contains(&p.partition_index))
            .map(|p| {
                DescribeTopicPartitionsResponsePartition::default()
                    .with_error_code(p.error_code)
                    .with_partition_index(p.partition_index)
                    .with_leader_id(p.leader_id)
                    .with_leader_epoch(p.leader_epoch)
                    .with_replica_nodes(p.replica_nodes)
                    .with_isr_nodes(p.isr_nodes)
                    .with_offline_replicas(p.offline_replicas)
                    .with_eligible_leader_replicas(Some(Vec::new()))
                    .with_last_known_elr(Some(Vec::new()))
            })
            .collect();
        remaining -= partitions.len() as i32;
        response.topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(topic_name(&name)))
                .with_topic_id(described.topic_id)
                .with_is_internal(is_internal(&name))
                .with_partitions(partitions)
                .with_topic_authorized_operations(broker.authorizer.authorized_operations(
                    ctx,
                    ResourceType::Topic,
                    &name,
                    TOPIC_OPERATIONS,
                )),
        );
        if end < count {
            response.next_cursor = Some(
                Cursor::default().with_topic_name(topic_name(&name)).with_partition_index(end),
            );
            break;
        }
    }
    response.topics.extend(unauthorized);
    response
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

fn topic_error(name: &str, error: ResponseError) -> DescribeTopicPartitionsResponseTopic {
    DescribeTopicPartitionsResponseTopic::default()
        .with_name(Some(topic_name(name)))
        .with_error_code(error.code())
        .with_topic_id(uuid::Uuid::nil())
        .with_is_internal(is_internal(name))
}
