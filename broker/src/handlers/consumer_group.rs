//! ConsumerGroupHeartbeat and ConsumerGroupDescribe: the consumer group
//! protocol (KIP-848), answered by [`floe_coordinator::group::consumer_group`] through
//! the coordinator. Assignments travel by topic id; the group keeps names.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_group_describe_response::{
    self as describe, DescribedGroup,
};
use kafka_protocol::messages::consumer_group_heartbeat_response::{self as heartbeat};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use floe_coordinator::group::assignor::Assignment;
use floe_coordinator::group::consumer_group::Heartbeat;
use floe_protocol::response::message;

fn s(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

/// Topic names by id, and ids by name, of the topics that exist.
fn topic_ids(broker: &Broker) -> (BTreeMap<Uuid, String>, BTreeMap<String, Uuid>) {
    let topics = broker.logs.topics();
    (
        topics.iter().map(|t| (t.id(), t.name().to_string())).collect(),
        topics.iter().map(|t| (t.name().to_string(), t.id())).collect(),
    )
}

pub(super) fn handle_heartbeat(
    broker: &Broker,
    ctx: &RequestContext,
    request: ConsumerGroupHeartbeatRequest,
    version: i16,
    client_id: String,
    peer: SocketAddr,
) -> ConsumerGroupHeartbeatResponse {
    let fail = |e: ResponseError, text: &str| {
        ConsumerGroupHeartbeatResponse::default()
            .with_error_code(e.code())
            .with_error_message(message(text))
            .with_member_epoch(-1)
    };
    // v1: the client generates its member id (KIP-1082); v0 may leave it to us on the first join.
    if version >= 1 && request.member_id.is_empty() {
        return fail(ResponseError::InvalidRequest, "MemberId can't be empty.");
    }
    if !broker.authorizer.authorize(
        ctx,
        AclOperation::Read,
        ResourceType::Group,
        request.group_id.as_str(),
    ) {
        return fail(ResponseError::GroupAuthorizationFailed, "READ on the group is needed");
    }
    // Subscribing to a topic needs DESCRIBE on it (Kafka answers TOPIC_AUTHORIZATION_FAILED).
    if let Some(topics) = &request.subscribed_topic_names {
        if let Some(t) = topics.iter().find(|t| {
            !broker.authorizer.authorize(
                ctx,
                AclOperation::Describe,
                ResourceType::Topic,
                t.0.as_str(),
            )
        }) {
            return fail(
                ResponseError::TopicAuthorizationFailed,
                &format!("DESCRIBE on topic {} is needed", t.0.as_str()),
            );
        }
    }
    let (names, ids) = topic_ids(broker);
    // Owned partitions of deleted topics are simply no longer owned.
    let owned = request.topic_partitions.map(|tps| {
        let mut owned = Assignment::new();
        for tp in tps {
            if let Some(name) = names.get(&tp.topic_id) {
                owned.entry(name.clone()).or_default().extend(tp.partitions);
            }
        }
        owned
    });
    let hb = Heartbeat {
        member_id: request.member_id.to_string(),
        member_epoch: request.member_epoch,
        instance_id: request.instance_id.map(|i| i.to_string()),
        rack_id: request.rack_id.map(|r| r.to_string()),
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        subscribed_topic_names: request
            .subscribed_topic_names
            .map(|ts| ts.into_iter().map(|t| t.0.to_string()).collect()),
        // librdkafka sends "" when it subscribes by names.
        subscribed_topic_regex: request
            .subscribed_topic_regex
            .filter(|r| version >= 1 && !r.is_empty())
            .map(|r| r.to_string()),
        server_assignor: request.server_assignor.map(|a| a.to_string()),
        owned,
        client_id,
        client_host: format!("/{}", peer.ip()),
    };
    match broker
        .groups
        .of(request.group_id.as_str())
        .consumer_heartbeat(request.group_id.as_str(), hb)
    {
        Err(ResponseError::InvalidRegularExpression) => fail(
            ResponseError::InvalidRegularExpression,
            "subscribed_topic_regex is not supported by this broker yet",
        ),
        Err(e) => fail(e, ""),
        Ok(r) => {
            let assignment = r.assignment.map(|a| {
                let topic_partitions = a
                    .into_iter()
                    .filter_map(|(t, ps)| ids.get(&t).map(|id| (*id, ps)))
                    .map(|(id, ps)| {
                        heartbeat::TopicPartitions::default()
                            .with_topic_id(id)
                            .with_partitions(ps.into_iter().collect())
                    })
                    .collect();
                heartbeat::Assignment::default().with_topic_partitions(topic_partitions)
            });
            ConsumerGroupHeartbeatResponse::default()
                .with_member_id(Some(s(r.member_id)))
                .with_member_epoch(r.member_epoch)
                .with_heartbeat_interval_ms(
                    broker
                        .groups
                        .of(request.group_id.as_str())
                        .consumer_config()
                        .heartbeat_interval
                        .as_millis() as i32,
                )
                .with_assignment(assignment)
        }
    }
}

fn described(a: &Assignment, ids: &BTreeMap<String, Uuid>) -> describe::Assignment {
    let topic_partitions = a
        .iter()
        .filter_map(|(t, ps)| ids.get(t).map(|id| (t, *id, ps)))
        .map(|(t, id, ps): (&String, Uuid, &BTreeSet<i32>)| {
            describe::TopicPartitions::default()
                .with_topic_id(id)
                .with_topic_name(TopicName(s(t.clone())))
                .with_partitions(ps.iter().copied().collect())
        })
        .collect();
    describe::Assignment::default().with_topic_partitions(topic_partitions)
}

pub(super) fn handle_describe(
    broker: &Broker,
    ctx: &RequestContext,
    request: ConsumerGroupDescribeRequest,
    version: i16,
) -> ConsumerGroupDescribeResponse {
    let (_, ids) = topic_ids(broker);
    let groups = request
        .group_ids
        .into_iter()
        .map(|id| {
            let ops = if request.include_authorized_operations {
                broker.authorizer.authorized_operations(
                    ctx,
                    ResourceType::Group,
                    id.as_str(),
                    super::group_admin::GROUP_OPERATIONS,
                )
            } else {
                i32::MIN
            };
            let d =
                DescribedGroup::default().with_group_id(id.clone()).with_authorized_operations(ops);
            if !broker.authorizer.authorize(
                ctx,
                AclOperation::Describe,
                ResourceType::Group,
                id.as_str(),
            ) {
                return d.with_error_code(ResponseError::GroupAuthorizationFailed.code());
            }
            match broker.groups.of(id.as_str()).describe_consumer_group(id.as_str()) {
                Err(ResponseError::GroupIdNotFound) => d
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(message(format!(
                        "Group {} not found or not a consumer group.",
                        id.as_str()
                    )))
                    .with_group_state(s("Dead")),
                Err(e) => d.with_error_code(e.code()),
                Ok(g) => {
                    let members = g
                        .members()
                        .map(|m| {
                            let mut dm = describe::Member::default()
                                .with_member_id(s(m.member_id.clone()))
                                .with_instance_id(m.instance_id.clone().map(s))
                                .with_rack_id(m.rack_id.clone().map(s))
                                .with_member_epoch(m.member_epoch)
                                .with_client_id(s(m.client_id.clone()))
                                .with_client_host(s(m.client_host.clone()))
                                .with_subscribed_topic_names(
                                    m.subscribed_topic_names
                                        .iter()
                                        .map(|t| TopicName(s(t.clone())))
                                        .collect(),
                                )
                                .with_subscribed_topic_regex(
                                    m.subscribed_topic_regex.clone().map(s),
                                )
                                .with_assignment(described(&m.assigned, &ids))
                                .with_target_assignment(described(
                                    &g.target_of(&m.member_id),
                                    &ids,
                                ));
                            if version >= 1 {
                                dm.member_type = 1;
                            }
                            dm
                        })
                        .collect();
                    d.with_group_state(s(g.state_name()))
                        .with_group_epoch(g.group_epoch())
                        .with_assignment_epoch(g.assignment_epoch())
                        .with_assignor_name(s(g.assignor()))
                        .with_members(members)
                }
            }
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}
