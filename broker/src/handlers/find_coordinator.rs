//! FindCoordinator: which broker coordinates a group (or transactional id). v4+
//! batches keys in `coordinator_keys`.
//!
//! A broker alone coordinates everything. In a cluster the coordinator of a group is
//! the leader of its `__consumer_offsets` partition, that of a transactional id the
//! leader of its `__transaction_state` partition (Kafka's hash of the key modulo the
//! topic's partition count: [`floe_coordinator::partitioned`]). The first lookup
//! creates the internal topic in the cluster, with `offsets.topic.num.partitions` /
//! `transaction.state.log.num.partitions` partitions and
//! `offsets.topic.replication.factor` / `transaction.state.log.replication.factor`
//! replicas, as Kafka does; that lookup, and every one while the topic cannot be created
//! (fewer live brokers than the factor), the key's partition has no leader, or its
//! leader (this broker) has not yet taken the coordinator's term, is answered
//! COORDINATOR_NOT_AVAILABLE, and the client retries. Each key of a batched (v4+)
//! lookup is answered on its own.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use floe_coordinator::group::OFFSETS_TOPIC;
use floe_coordinator::partitioned::partition_for;
use floe_coordinator::replicated::NO_TERM;
use floe_coordinator::transaction::TRANSACTION_STATE_TOPIC;

use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::session::Session;
use floe_protocol::response::message;

/// Key types: 0 group, 1 transaction.
fn known_key_type(key_type: i8) -> bool {
    matches!(key_type, 0 | 1)
}

/// DESCRIBE on the group (key type 0) or transactional id (1) the key names.
fn authorized(broker: &Broker, ctx: &RequestContext, key_type: i8, key: &str) -> bool {
    let resource_type =
        if key_type == 1 { ResourceType::TransactionalId } else { ResourceType::Group };
    broker.authorizer.authorize(ctx, AclOperation::Describe, resource_type, key)
}

fn denied_error(key_type: i8) -> ResponseError {
    if key_type == 1 {
        ResponseError::TransactionalIdAuthorizationFailed
    } else {
        ResponseError::GroupAuthorizationFailed
    }
}

pub(super) async fn handle(
    broker: &Broker,
    session: &Session,
    ctx: &RequestContext,
    request: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let key_type = request.key_type;
    if version >= 4 {
        let mut coordinators = Vec::with_capacity(request.coordinator_keys.len());
        for key in request.coordinator_keys {
            let failed = |e: ResponseError| {
                Coordinator::default()
                    .with_key(key.clone())
                    .with_node_id(BrokerId(-1))
                    .with_host(StrBytes::default())
                    .with_port(-1)
                    .with_error_code(e.code())
            };
            if !known_key_type(key_type) {
                coordinators.push(
                    failed(ResponseError::InvalidRequest)
                        .with_error_message(message(format!("unknown key type {key_type}"))),
                );
                continue;
            }
            let found = coordinator(broker, session, key_type, key.as_str()).await;
            coordinators.push(match found {
                Err((e, why)) => failed(e).with_error_message(message(why)),
                Ok(_) if !authorized(broker, ctx, key_type, key.as_str()) => {
                    failed(denied_error(key_type))
                }
                Ok((node, host, port)) => Coordinator::default()
                    .with_key(key.clone())
                    .with_node_id(node)
                    .with_host(host)
                    .with_port(port),
            });
        }
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let found = if known_key_type(key_type) {
        coordinator(broker, session, key_type, request.key.as_str()).await
    } else {
        Err((ResponseError::InvalidRequest, format!("unknown key type {key_type}")))
    };
    let found = match found {
        Ok(_) if !authorized(broker, ctx, key_type, request.key.as_str()) => {
            Err((denied_error(key_type), String::new()))
        }
        found => found,
    };
    match found {
        Ok((node, host, port)) => {
            FindCoordinatorResponse::default().with_node_id(node).with_host(host).with_port(port)
        }
        Err((e, why)) => {
            let response = FindCoordinatorResponse::default()
                .with_error_code(e.code())
                .with_node_id(BrokerId(-1))
                .with_port(-1);
            if version >= 1
                && matches!(
                    e,
                    ResponseError::InvalidRequest | ResponseError::CoordinatorNotAvailable
                )
            {
                response.with_error_message(message(why))
            } else {
                response
            }
        }
    }
}

/// The coordinating broker of `key` (of `key_type`) as this client's listener reaches
/// it — the leader of the key's partition of the internal topic — or
/// COORDINATOR_NOT_AVAILABLE and why.
async fn coordinator(
    broker: &Broker,
    session: &Session,
    key_type: i8,
    key: &str,
) -> Result<(BrokerId, StrBytes, i32), (ResponseError, String)> {
    if !broker.is_clustered() {
        return Ok((
            BrokerId(broker.node_id()),
            StrBytes::from_string(session.endpoint.advertised_host.clone()),
            session.endpoint.advertised_port,
        ));
    }
    let topic = if key_type == 1 { TRANSACTION_STATE_TOPIC } else { OFFSETS_TOPIC };
    let unavailable = |why: String| Err((ResponseError::CoordinatorNotAvailable, why));
    let count =
        broker.cluster.with_view(|v| v.topics.get(topic).map(|t| t.partitions.len() as i32));
    let Some(count) = count else {
        // As Kafka: the lookup that creates the topic answers COORDINATOR_NOT_AVAILABLE,
        // and the client asks again once a leader has taken the coordinator's term.
        return unavailable(match create_internal_topic(broker, topic).await {
            Ok(()) => {
                format!("{topic} was just created; its leaders are taking the coordinator's role")
            }
            Err(why) => why,
        });
    };
    let partition = partition_for(key, count);
    let tp = floe_cluster::TopicPartition::new(topic.to_string(), partition);
    let leader = broker.cluster.with_view(|v| v.partitions.get(&tp).map(|s| s.leader));
    let Some(leader) = leader.filter(|&l| l != floe_cluster::NO_LEADER) else {
        return unavailable(format!("{tp} has no leader now"));
    };
    let term = if key_type == 1 {
        broker.txns.partition(partition).map(|c| c.coordinator_epoch())
    } else {
        broker.groups.partition(partition).map(|c| c.term_epoch())
    };
    if leader == broker.node_id() && term.unwrap_or(NO_TERM) == NO_TERM {
        // Given the leadership, not yet the coordinator's term: a moment.
        return unavailable(format!("this broker leads {tp} and is taking the coordinator's role"));
    }
    let (brokers, _) = broker.cluster_brokers(&session.endpoint);
    match brokers.into_iter().find(|b| b.node_id == leader) {
        Some(b) => Ok((BrokerId(b.node_id), StrBytes::from_string(b.host), b.port)),
        None => unavailable(format!(
            "the leader of {tp}, broker {leader}, has no listener {} registered",
            session.endpoint.name
        )),
    }
}

/// Creates `topic` (an internal one) in the cluster: the partition count and the
/// replication factor configured for it, and Kafka's settings for it. Already created
/// meanwhile is fine.
async fn create_internal_topic(broker: &Broker, topic: &str) -> Result<(), String> {
    let (partitions, rf, configs) = if topic == OFFSETS_TOPIC {
        (
            broker.config.offsets_topic_num_partitions,
            broker.config.offsets_topic_replication_factor,
            floe_coordinator::group::offsets_topic_config(),
        )
    } else {
        let mut c = floe_coordinator::transaction::transaction_state_topic_config();
        c.insert(
            "min.insync.replicas".into(),
            broker
                .config
                .transaction_state_log_min_isr
                .min(broker.config.transaction_state_log_replication_factor)
                .to_string(),
        );
        (
            broker.config.transaction_state_log_num_partitions,
            broker.config.transaction_state_log_replication_factor,
            c,
        )
    };
    let live = broker.cluster.with_view(|v| v.brokers.len()) as i32;
    if live < rf {
        return Err(format!(
            "{topic} needs {rf} live brokers (its replication factor setting) and the cluster has {live}; it is created once enough brokers are up"
        ));
    }
    match crate::cluster_admin::create_topic(broker, topic, partitions, rf, &[], configs).await {
        Ok(a) => {
            tracing::info!(topic, partitions, replicas = ?a.partitions, "created the internal topic in the cluster");
            Ok(())
        }
        Err((ResponseError::TopicAlreadyExists, _)) => Ok(()),
        Err((code, why)) => {
            tracing::warn!(topic, ?code, error = %why, "cannot create the internal topic in the cluster");
            Err(format!("cannot create {topic}: {why}"))
        }
    }
}
