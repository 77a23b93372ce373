//! JoinGroup, SyncGroup, Heartbeat and LeaveGroup: the classic group
//! membership protocol, answered by the [`floe_coordinator::group::GroupCoordinator`].
//!
//! JoinGroup and SyncGroup answers are deferred until the rebalance phase
//! completes: the handler awaits it. A connection handles one request at a
//! time, so nothing queues behind it but that client's own requests.

use std::net::SocketAddr;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use floe_coordinator::group::group::JoinRequest;

fn s(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

/// Every membership request needs READ on the group.
fn group_read(broker: &Broker, ctx: &RequestContext, group: &str) -> bool {
    broker.authorizer.authorize(ctx, AclOperation::Read, ResourceType::Group, group)
}

fn code(e: Option<kafka_protocol::error::ResponseError>) -> i16 {
    e.map_or(0, |e| e.code())
}

pub(super) async fn handle_join(
    broker: &Broker,
    ctx: &RequestContext,
    request: JoinGroupRequest,
    version: i16,
    client_id: String,
    peer: SocketAddr,
) -> JoinGroupResponse {
    if !group_read(broker, ctx, request.group_id.as_str()) {
        return JoinGroupResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code())
            .with_generation_id(-1)
            .with_protocol_name(if version >= 7 { None } else { Some(StrBytes::default()) });
    }
    let req = JoinRequest {
        member_id: request.member_id.to_string(),
        instance_id: request.group_instance_id.map(|i| i.to_string()),
        client_id,
        client_host: format!("/{}", peer.ip()),
        session_timeout_ms: request.session_timeout_ms,
        rebalance_timeout_ms: if version >= 1 {
            request.rebalance_timeout_ms
        } else {
            request.session_timeout_ms
        },
        protocol_type: request.protocol_type.to_string(),
        protocols: request
            .protocols
            .into_iter()
            .map(|p| (p.name.to_string(), p.metadata))
            .collect(),
        require_known_member_id: version >= 4,
    };
    let r = broker.groups.of(request.group_id.as_str()).join(request.group_id.as_str(), req).await;
    let members = r
        .members
        .into_iter()
        .map(|m| {
            let member = JoinGroupResponseMember::default()
                .with_member_id(s(m.member_id))
                .with_metadata(m.metadata);
            if version >= 5 {
                member.with_group_instance_id(m.instance_id.map(s))
            } else {
                member
            }
        })
        .collect();
    let mut response = JoinGroupResponse::default()
        .with_error_code(code(r.error))
        .with_generation_id(r.generation)
        // Nullable from v7 only; "" before.
        .with_protocol_name(match (r.protocol_name, version >= 7) {
            (Some(p), _) => Some(s(p)),
            (None, true) => None,
            (None, false) => Some(StrBytes::default()),
        })
        .with_leader(s(r.leader))
        .with_member_id(s(r.member_id))
        .with_members(members);
    if version >= 7 {
        response.protocol_type = r.protocol_type.map(s);
    }
    if version >= 9 {
        response.skip_assignment = r.skip_assignment;
    }
    response
}

pub(super) async fn handle_sync(
    broker: &Broker,
    ctx: &RequestContext,
    request: SyncGroupRequest,
    version: i16,
) -> SyncGroupResponse {
    if !group_read(broker, ctx, request.group_id.as_str()) {
        return SyncGroupResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    let assignments =
        request.assignments.into_iter().map(|a| (a.member_id.to_string(), a.assignment)).collect();
    let r = broker
        .groups
        .of(request.group_id.as_str())
        .sync(
            request.group_id.as_str(),
            request.member_id.as_str(),
            request.group_instance_id.as_ref().map(|i| i.as_str()),
            request.generation_id,
            request.protocol_type.as_ref().map(|p| p.as_str()),
            request.protocol_name.as_ref().map(|p| p.as_str()),
            assignments,
        )
        .await;
    let mut response =
        SyncGroupResponse::default().with_error_code(code(r.error)).with_assignment(r.assignment);
    if version >= 5 {
        response.protocol_type = r.protocol_type.map(s);
        response.protocol_name = r.protocol_name.map(s);
    }
    response
}

pub(super) fn handle_heartbeat(
    broker: &Broker,
    ctx: &RequestContext,
    request: HeartbeatRequest,
    _version: i16,
) -> HeartbeatResponse {
    if !group_read(broker, ctx, request.group_id.as_str()) {
        return HeartbeatResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    let e = broker.groups.of(request.group_id.as_str()).heartbeat(
        request.group_id.as_str(),
        request.member_id.as_str(),
        request.group_instance_id.as_ref().map(|i| i.as_str()),
        request.generation_id,
    );
    HeartbeatResponse::default().with_error_code(code(e))
}

pub(super) fn handle_leave(
    broker: &Broker,
    ctx: &RequestContext,
    request: LeaveGroupRequest,
    version: i16,
) -> LeaveGroupResponse {
    if !group_read(broker, ctx, request.group_id.as_str()) {
        return LeaveGroupResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        request
            .members
            .iter()
            .map(|m| (m.member_id.to_string(), m.group_instance_id.as_ref().map(|i| i.to_string())))
            .collect()
    } else {
        vec![(request.member_id.to_string(), None)]
    };
    match broker.groups.of(request.group_id.as_str()).leave(request.group_id.as_str(), &members) {
        Err(e) => LeaveGroupResponse::default().with_error_code(e.code()),
        Ok(results) if version < 3 => {
            LeaveGroupResponse::default().with_error_code(code(results.first().copied().flatten()))
        }
        Ok(results) => {
            let members = members
                .into_iter()
                .zip(results)
                .map(|((id, instance), e)| {
                    MemberResponse::default()
                        .with_member_id(s(id))
                        .with_group_instance_id(instance.map(s))
                        .with_error_code(code(e))
                })
                .collect();
            LeaveGroupResponse::default().with_members(members)
        }
    }
}
