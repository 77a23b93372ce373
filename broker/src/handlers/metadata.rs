//! Metadata: brokers, topics and partitions.
//!
//! A broker alone leads every partition, its only replica, at leader epoch 0. In a
//! cluster the brokers, leaders, epochs, replicas and ISRs come from the cluster's
//! metadata (every broker answers the same); the coordinators' internal topics are
//! still each broker's own. Unknown topics are created here when both the
//! broker (`auto.create.topics.enable`) and the request (v4+) allow it, and
//! the client may CREATE it.
//!
//! Authorization, as Kafka: a listing of every topic leaves out those the
//! client may not DESCRIBE; a topic asked for by name answers
//! TOPIC_AUTHORIZATION_FAILED.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::authorizer::{RequestContext, TOPIC_OPERATIONS};
use crate::broker::Broker;
use crate::session::Session;

use crate::broker::LEADER_EPOCH;

pub(super) async fn handle(
    broker: &Broker,
    session: &Session,
    ctx: &RequestContext,
    request: MetadataRequest,
    version: i16,
) -> MetadataResponse {
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
    let allow_create =
        broker.config.auto_create_topics && (version < 4 || request.allow_auto_topic_creation);

    let topics = match wanted {
        // Internal topics are listed only when asked for by name, as Kafka's clients expect.
        None => topic_names(broker)
            .into_iter()
            .filter(|name| !is_internal(name))
            .filter(|name| {
                broker.authorizer.check(ctx, AclOperation::Describe, ResourceType::Topic, name)
            })
            .filter_map(|name| describe_by_name(broker, &name))
            .collect(),
        Some(wanted) => {
            let mut out = Vec::with_capacity(wanted.len());
            for w in wanted {
                out.push(match w {
                    MetadataNameOrId::Name(name) => {
                        topic_by_name(broker, ctx, name, allow_create).await
                    }
                    MetadataNameOrId::Id(id) => match topic_name_by_id(broker, id) {
                        Some(name)
                            if !broker.authorizer.authorize(
                                ctx,
                                AclOperation::Describe,
                                ResourceType::Topic,
                                &name,
                            ) =>
                        {
                            MetadataResponseTopic::default()
                                .with_topic_id(id)
                                .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                        }
                        Some(name) => describe_by_name(broker, &name).unwrap_or_else(|| {
                            MetadataResponseTopic::default()
                                .with_topic_id(id)
                                .with_error_code(ResponseError::UnknownTopicId.code())
                        }),
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
                t.topic_authorized_operations = broker.authorizer.authorized_operations(
                    ctx,
                    ResourceType::Topic,
                    name.0.as_str(),
                    TOPIC_OPERATIONS,
                );
            }
        }
    }
    // Every live broker, at its endpoint on the listener this request came in on.
    let (brokers, controller_id) = broker.cluster_brokers(&session.endpoint);
    let brokers = brokers
        .into_iter()
        .map(|b| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(b.node_id))
                .with_host(StrBytes::from_string(b.host))
                .with_port(b.port)
                .with_rack(b.rack.map(StrBytes::from_string))
        })
        .collect();
    let mut response = MetadataResponse::default()
        .with_brokers(brokers)
        .with_controller_id(BrokerId(controller_id))
        .with_topics(topics);
    if version >= 2 {
        response.cluster_id = Some(StrBytes::from_string(broker.logs.cluster_id().to_string()));
    }
    if (8..=10).contains(&version) && request.include_cluster_authorized_operations {
        response.cluster_authorized_operations =
            super::describe_cluster::cluster_operations(broker, ctx);
    }
    response
}

enum MetadataNameOrId {
    Name(String),
    Id(uuid::Uuid),
}

async fn topic_by_name(
    broker: &Broker,
    ctx: &RequestContext,
    name: String,
    allow_create: bool,
) -> MetadataResponseTopic {
    let unknown = || {
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(name.clone()))))
            .with_error_code(ResponseError::UnknownTopicOrPartition.code())
    };
    // Checked before existence, so a refused client cannot tell which topics exist.
    if !broker.authorizer.authorize(ctx, AclOperation::Describe, ResourceType::Topic, &name) {
        return unknown().with_error_code(ResponseError::TopicAuthorizationFailed.code());
    }
    if let Some(described) = describe_by_name(broker, &name) {
        return described;
    }
    if !allow_create {
        return unknown();
    }
    let may_create =
        broker.authorizer.check(ctx, AclOperation::Create, ResourceType::Cluster, CLUSTER_NAME)
            || broker.authorizer.authorize(ctx, AclOperation::Create, ResourceType::Topic, &name);
    if !may_create {
        return unknown().with_error_code(ResponseError::TopicAuthorizationFailed.code());
    }
    let partitions = broker.config.num_partitions;
    if broker.is_clustered() && is_internal(&name) {
        // Created by the first FindCoordinator, with its own replication factor: not here.
        return unknown();
    }
    if broker.is_clustered() {
        let rf = broker.config.default_replication_factor;
        return match crate::cluster_admin::create_topic(
            broker,
            &name,
            partitions,
            rf,
            &[],
            BTreeMap::new(),
        )
        .await
        {
            Ok(_) => {
                tracing::info!(topic = %name, partitions, "auto-created topic in the cluster");
                describe_by_name(broker, &name).unwrap_or_else(|| {
                    unknown().with_error_code(ResponseError::LeaderNotAvailable.code())
                })
            }
            // A concurrent auto-create of the same name is fine.
            Err(_) if describe_by_name(broker, &name).is_some() => {
                describe_by_name(broker, &name).unwrap_or_else(unknown)
            }
            Err((code, reason)) => {
                tracing::info!(topic = %name, %reason, "cannot auto-create topic");
                unknown().with_error_code(code.code())
            }
        };
    }
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
            if let Some(described) = describe_by_name(broker, &name) {
                return described;
            }
            tracing::info!(topic = %name, error = %e, "cannot auto-create topic");
            unknown().with_error_code(code.code())
        }
        None => unknown().with_error_code(ResponseError::UnknownServerError.code()),
    }
}

/// Topics the broker owns (`__consumer_offsets`): hidden from listings, closed to clients' produce and delete.
pub(crate) use floe_protocol::topic::is_internal;

/// Every topic's name: the cluster's, or (alone) this data directory's.
pub(crate) fn topic_names(broker: &Broker) -> Vec<String> {
    if broker.is_clustered() {
        return broker.cluster.with_view(|v| v.topics.keys().cloned().collect());
    }
    broker.logs.topics().iter().map(|t| t.name().to_string()).collect()
}

fn topic_name_by_id(broker: &Broker, id: uuid::Uuid) -> Option<String> {
    if broker.is_clustered() {
        let wanted = id.hyphenated().to_string();
        let found = broker.cluster.with_view(|v| {
            v.topics.iter().find(|(_, t)| t.topic_id == wanted).map(|(n, _)| n.clone())
        });
        if found.is_some() {
            return found;
        }
    }
    broker.logs.topic_by_id(id).map(|t| t.name().to_string())
}

/// A topic's Metadata: from the cluster's metadata, or (alone) from this broker's data
/// directory. `None` if there is no such topic.
pub(crate) fn describe_by_name(broker: &Broker, name: &str) -> Option<MetadataResponseTopic> {
    if broker.is_clustered() {
        return broker
            .cluster
            .with_view(|v| v.topics.get(name).map(|t| describe_cluster_topic(v, name, t)));
    }
    broker.logs.topic(name).map(|t| describe_topic(broker, &t))
}

/// A cluster topic: per partition its leader and epoch, replicas, ISR, and the
/// replicas that are not alive. A partition without a leader answers
/// LEADER_NOT_AVAILABLE, as Kafka does.
fn describe_cluster_topic(
    view: &floe_cluster::ClusterView,
    name: &str,
    topic: &floe_cluster::TopicAssignment,
) -> MetadataResponseTopic {
    let ids = |v: &[i32]| v.iter().map(|&b| BrokerId(b)).collect::<Vec<_>>();
    let partitions = topic
        .partitions
        .iter()
        .map(|(&p, replicas)| {
            let offline: Vec<i32> =
                replicas.iter().copied().filter(|r| !view.is_alive(*r)).collect();
            let base = MetadataResponsePartition::default()
                .with_partition_index(p)
                .with_replica_nodes(ids(replicas))
                .with_offline_replicas(ids(&offline));
            match view.partition(name, p) {
                Some(s) if s.leader != floe_cluster::NO_LEADER => base
                    .with_leader_id(BrokerId(s.leader))
                    .with_leader_epoch(s.leader_epoch)
                    .with_isr_nodes(ids(&s.isr)),
                state => base
                    .with_error_code(ResponseError::LeaderNotAvailable.code())
                    .with_leader_id(BrokerId(-1))
                    .with_leader_epoch(state.map_or(-1, |s| s.leader_epoch))
                    .with_isr_nodes(state.map(|s| ids(&s.isr)).unwrap_or_default()),
            }
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(name.to_string()))))
        .with_topic_id(uuid::Uuid::parse_str(&topic.topic_id).unwrap_or_default())
        .with_is_internal(is_internal(name))
        .with_partitions(partitions)
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
