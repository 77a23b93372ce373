//! Metadata: brokers, topics and partitions, with this broker leading every partition.
//!
//! Floe is a single-node cluster: every partition has one replica, this
//! broker, at leader epoch 0. Unknown topics are created here when both the
//! broker (`auto.create.topics.enable`) and the request (v4+) allow it, and
//! the client may CREATE it.
//!
//! Authorization, as Kafka: a listing of every topic leaves out those the
//! client may not DESCRIBE; a topic asked for by name answers
//! TOPIC_AUTHORIZATION_FAILED.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::authorizer::{RequestContext, TOPIC_OPERATIONS};
use crate::broker::Broker;
use crate::session::Session;

/// The leader epoch of every partition: one broker, never re-elected.
pub(crate) const LEADER_EPOCH: i32 = 0;

pub(super) async fn handle(broker: &Broker, session: &Session, ctx: &RequestContext, request: MetadataRequest, version: i16) -> MetadataResponse {
    // v0 sends an empty list for "all topics"; v1+ sends null.
    let wanted: Option<Vec<MetadataNameOrId>> = match request.topics {
        None => None,
        Some(topics) if topics.is_empty() && version == 0 => None,
        Some(topics) => Some(
            topics
                .into_iter()
                .map(|t| match t.name {
                    Some(name) => MetadataNameOrId::Name(name.0.to_string()),
                    None => MetadataNameOrId::Id(t.topic_id),
                })
                .collect(),
        ),
    };
    let allow_create = broker.config.auto_create_topics && (version < 4 || request.allow_auto_topic_creation);

    let topics = match wanted {
        // Internal topics are listed only when asked for by name, as Kafka's clients expect.
        None => broker
            .logs
            .topics()
            .iter()
            .filter(|t| !is_internal(t.name()))
            .filter(|t| broker.authorizer.check(ctx, AclOperation::Describe, ResourceType::Topic, t.name()))
            .map(|t| describe_topic(broker, t))
            .collect(),
        Some(wanted) => {
            let mut out = Vec::with_capacity(wanted.len());
            for w in wanted {
                out.push(match w {
                    MetadataNameOrId::Name(name) => topic_by_name(broker, ctx, name, allow_create).await,
                    MetadataNameOrId::Id(id) => match broker.logs.topic_by_id(id) {
                        Some(t) if !broker.authorizer.authorize(ctx, AclOperation::Describe, ResourceType::Topic, t.name()) => {
                            MetadataResponseTopic::default()
                                .with_topic_id(id)
                                .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                        }
                        Some(t) => describe_topic(broker, &t),
                        None => MetadataResponseTopic::default()
                            .with_topic_id(id)
                            .with_error_code(ResponseError::UnknownTopicId.code()),
                    },
                });
            }
            out
        }
    };

    let mut topics = topics;
    if version >= 8 && request.include_topic_authorized_operations {
        for t in topics.iter_mut().filter(|t| t.error_code == 0) {
            if let Some(name) = &t.name {
                t.topic_authorized_operations = broker.authorizer.authorized_operations(ctx, ResourceType::Topic, name.0.as_str(), TOPIC_OPERATIONS);
            }
        }
    }
    // Only this broker, and it the controller, even in an etcd cluster: partitions are
    // not yet cluster state (each broker serves the topics in its own data directory),
    // and clients route produce, fetch and admin requests by this answer. The live
    // brokers and the elected controller are in DescribeCluster and /metrics.
    let mut response = MetadataResponse::default()
        .with_brokers(vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(broker.node_id()))
            .with_host(StrBytes::from_string(session.endpoint.advertised_host.clone()))
            .with_port(session.endpoint.advertised_port)
            .with_rack(broker.config.broker_rack.clone().map(StrBytes::from_string))])
        .with_controller_id(BrokerId(broker.node_id()))
        .with_topics(topics);
    if version >= 2 {
        response.cluster_id = Some(StrBytes::from_string(broker.logs.cluster_id().to_string()));
    }
    if (8..=10).contains(&version) && request.include_cluster_authorized_operations {
        response.cluster_authorized_operations = super::describe_cluster::cluster_operations(broker, ctx);
    }
    response
}

enum MetadataNameOrId {
    Name(String),
    Id(uuid::Uuid),
}

async fn topic_by_name(broker: &Broker, ctx: &RequestContext, name: String, allow_create: bool) -> MetadataResponseTopic {
    let unknown = || {
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(name.clone()))))
            .with_error_code(ResponseError::UnknownTopicOrPartition.code())
    };
    // Checked before existence, so a refused client cannot tell which topics exist.
    if !broker.authorizer.authorize(ctx, AclOperation::Describe, ResourceType::Topic, &name) {
        return unknown().with_error_code(ResponseError::TopicAuthorizationFailed.code());
    }
    if let Some(topic) = broker.logs.topic(&name) {
        return describe_topic(broker, &topic);
    }
    if !allow_create {
        return unknown();
    }
    let may_create = broker.authorizer.check(ctx, AclOperation::Create, ResourceType::Cluster, CLUSTER_NAME)
        || broker.authorizer.authorize(ctx, AclOperation::Create, ResourceType::Topic, &name);
    if !may_create {
        return unknown().with_error_code(ResponseError::TopicAuthorizationFailed.code());
    }
    let partitions = broker.config.num_partitions;
    let create_name = name.clone();
    let created = broker
        .blocking(move |logs| logs.create_topic(&create_name, partitions, BTreeMap::new()))
        .await;
    match created {
        Some(Ok(topic)) => {
            tracing::info!(topic = %name, partitions, "auto-created topic");
            // Kafka answers LEADER_NOT_AVAILABLE while a new topic's leaders are
            // elected; here the leader exists at once, so describe it.
            describe_topic(broker, &topic)
        }
        Some(Err(e)) => {
            let code = crate::errors::kafka_error(&e);
            // A concurrent auto-create of the same name is fine.
            if let Some(topic) = broker.logs.topic(&name) {
                return describe_topic(broker, &topic);
            }
            tracing::info!(topic = %name, error = %e, "cannot auto-create topic");
            unknown().with_error_code(code.code())
        }
        None => unknown().with_error_code(ResponseError::UnknownServerError.code()),
    }
}

/// Topics the broker owns (`__consumer_offsets`): hidden from listings, closed to clients' produce and delete.
pub(crate) fn is_internal(topic: &str) -> bool {
    topic == floe_coordinator::group::OFFSETS_TOPIC || topic == floe_coordinator::transaction::TRANSACTION_STATE_TOPIC
}

fn describe_topic(broker: &Broker, topic: &floe_storage::Topic) -> MetadataResponseTopic {
    let node = BrokerId(broker.node_id());
    let partitions = (0..topic.partition_count())
        .map(|p| {
            MetadataResponsePartition::default()
                .with_partition_index(p)
                .with_leader_id(node)
                .with_leader_epoch(LEADER_EPOCH)
                .with_replica_nodes(vec![node])
                .with_isr_nodes(vec![node])
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(topic.name().to_string()))))
        .with_topic_id(topic.id())
        .with_is_internal(is_internal(topic.name()))
        .with_partitions(partitions)
}
