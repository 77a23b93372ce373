//! FindCoordinator: which broker coordinates a group (or transactional id). v4+
//! batches keys in `coordinator_keys`.
//!
//! A broker alone coordinates everything. In a cluster the coordinator of a group is
//! the leader of `__consumer_offsets`, that of a transactional id the leader of
//! `__transaction_state` (each has one partition in Floe, so every key of a type maps
//! to partition 0). The first lookup creates the internal topic in the cluster, with
//! `offsets.topic.replication.factor` / `transaction.state.log.replication.factor`
//! replicas, as Kafka does; that lookup, and every one while the topic cannot be created
//! (fewer live brokers than the factor), has no leader, or its leader (this broker) has
//! not yet taken the coordinator's term, is answered COORDINATOR_NOT_AVAILABLE, and
//! the client retries.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use floe_coordinator::group::OFFSETS_TOPIC;
use floe_coordinator::replicated::NO_TERM;
use floe_coordinator::transaction::TRANSACTION_STATE_TOPIC;

use super::message;
use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::session::Session;

/// Key types: 0 group, 1 transaction.
fn known_key_type(key_type: i8) -> bool {
    matches!(key_type, 0 | 1)
}

/// DESCRIBE on the group (key type 0) or transactional id (1) the key names.
fn authorized(broker: &Broker, ctx: &RequestContext, key_type: i8, key: &str) -> bool {
    let resource_type = if key_type == 1 { ResourceType::TransactionalId } else { ResourceType::Group };
    broker.authorizer.authorize(ctx, AclOperation::Describe, resource_type, key)
}

fn denied_error(key_type: i8) -> ResponseError {
    if key_type == 1 {
        ResponseError::TransactionalIdAuthorizationFailed
    } else {
        ResponseError::GroupAuthorizationFailed
    }
}

pub(super) async fn handle(broker: &Broker, session: &Session, ctx: &RequestContext, request: FindCoordinatorRequest, version: i16) -> FindCoordinatorResponse {
    let (node, host, port, unavailable) = if known_key_type(request.key_type) {
        coordinator(broker, session, request.key_type).await
    } else {
        (BrokerId(-1), StrBytes::default(), -1, None)
    };
    let why = unavailable.as_ref().map(|(_, why)| why.clone()).unwrap_or_default();
    let unavailable = unavailable.map(|(e, _)| e);
    let error = (!known_key_type(request.key_type)).then_some(ResponseError::InvalidRequest).or(unavailable);
    if version >= 4 {
        let coordinators = request
            .coordinator_keys
            .into_iter()
            .map(|key| match error {
                None if !authorized(broker, ctx, request.key_type, key.as_str()) => Coordinator::default()
                    .with_key(key)
                    .with_node_id(BrokerId(-1))
                    .with_host(StrBytes::default())
                    .with_port(-1)
                    .with_error_code(denied_error(request.key_type).code()),
                None => Coordinator::default().with_key(key).with_node_id(node).with_host(host.clone()).with_port(port),
                Some(e) => Coordinator::default()
                    .with_key(key)
                    .with_node_id(BrokerId(-1))
                    .with_host(StrBytes::default())
                    .with_port(-1)
                    .with_error_code(e.code())
                    .with_error_message(message(if e == ResponseError::InvalidRequest {
                        format!("unknown key type {}", request.key_type)
                    } else {
                        why.clone()
                    })),
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let error = error.or_else(|| (!authorized(broker, ctx, request.key_type, request.key.as_str())).then(|| denied_error(request.key_type)));
    let response = match error {
        None => FindCoordinatorResponse::default().with_node_id(node).with_host(host).with_port(port),
        Some(e) => FindCoordinatorResponse::default().with_error_code(e.code()).with_node_id(BrokerId(-1)).with_port(-1),
    };
    if version >= 1 && error == Some(ResponseError::InvalidRequest) {
        return response.with_error_message(message(format!("unknown key type {}", request.key_type)));
    }
    if version >= 1 && error == Some(ResponseError::CoordinatorNotAvailable) {
        return response.with_error_message(message(why));
    }
    response
}

/// The coordinating broker of keys of `key_type` as this client's listener reaches
/// it, or COORDINATOR_NOT_AVAILABLE and why.
async fn coordinator(broker: &Broker, session: &Session, key_type: i8) -> (BrokerId, StrBytes, i32, Option<(ResponseError, String)>) {
    let here = (BrokerId(broker.node_id()), StrBytes::from_string(session.endpoint.advertised_host.clone()), session.endpoint.advertised_port, None);
    if !broker.is_clustered() {
        return here;
    }
    let topic = if key_type == 1 { TRANSACTION_STATE_TOPIC } else { OFFSETS_TOPIC };
    let unavailable = |why: String| (BrokerId(-1), StrBytes::default(), -1, Some((ResponseError::CoordinatorNotAvailable, why)));
    let tp = floe_cluster::TopicPartition::new(topic.to_string(), 0);
    let known = broker.cluster.with_view(|v| v.topics.contains_key(topic).then(|| v.partitions.get(&tp).map(|s| s.leader)));
    let Some(leader) = known else {
        // As Kafka: the lookup that creates the topic answers COORDINATOR_NOT_AVAILABLE,
        // and the client asks again once a leader has taken the coordinator's term.
        return unavailable(match create_internal_topic(broker, topic).await {
            Ok(()) => format!("{topic} was just created; its leader is taking the coordinator's role"),
            Err(why) => why,
        });
    };
    let Some(leader) = leader.filter(|&l| l != floe_cluster::NO_LEADER) else {
        return unavailable(format!("{topic} has no leader now"));
    };
    let coordinating_here = if key_type == 1 { broker.txns.coordinator_epoch() } else { broker.groups.term_epoch() } != NO_TERM;
    if leader == broker.node_id() && !coordinating_here {
        // Given the leadership, not yet the coordinator's term: a moment.
        return unavailable(format!("this broker leads {topic} and is taking the coordinator's role"));
    }
    let (brokers, _) = broker.cluster_brokers(&session.endpoint);
    match brokers.into_iter().find(|b| b.node_id == leader) {
        Some(b) => (BrokerId(b.node_id), StrBytes::from_string(b.host), b.port, None),
        None => unavailable(format!("the leader of {topic}, broker {leader}, has no listener {} registered", session.endpoint.name)),
    }
}

/// Creates `topic` (an internal one) in the cluster: one partition, Kafka's settings for
/// it, and the replication factor configured for it. Already created meanwhile is fine.
async fn create_internal_topic(broker: &Broker, topic: &str) -> Result<(), String> {
    let (rf, mut configs) = if topic == OFFSETS_TOPIC {
        (broker.config.offsets_topic_replication_factor, floe_coordinator::group::offsets_topic_config())
    } else {
        let mut c = floe_coordinator::transaction::transaction_state_topic_config();
        c.insert("min.insync.replicas".into(), broker.config.transaction_state_log_min_isr.min(broker.config.transaction_state_log_replication_factor).to_string());
        (broker.config.transaction_state_log_replication_factor, c)
    };
    let live = broker.cluster.with_view(|v| v.brokers.len()) as i32;
    if live < rf {
        return Err(format!(
            "{topic} needs {rf} live brokers (its replication factor setting) and the cluster has {live}; it is created once enough brokers are up"
        ));
    }
    configs.entry("min.insync.replicas".into()).or_insert_with(|| "1".into());
    match crate::cluster_admin::create_topic(broker, topic, 1, rf, &[], configs).await {
        Ok(a) => {
            tracing::info!(topic, replicas = ?a.partitions.get(&0), "created the internal topic in the cluster");
            Ok(())
        }
        Err((ResponseError::TopicAlreadyExists, _)) => Ok(()),
        Err((code, why)) => {
            tracing::warn!(topic, ?code, error = %why, "cannot create the internal topic in the cluster");
            Err(format!("cannot create {topic}: {why}"))
        }
    }
}
