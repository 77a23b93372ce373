//! FindCoordinator: which broker coordinates a group (or transactional id). v4+
//! batches keys in `coordinator_keys`.
//!
//! A broker alone coordinates everything. In a cluster, until the coordinators follow
//! the leadership of their internal topics' partitions, one broker coordinates every
//! group and transactional id: the controller, so that every client of a group is sent
//! to the same place. COORDINATOR_NOT_AVAILABLE while no controller is known.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

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

pub(super) fn handle(broker: &Broker, session: &Session, ctx: &RequestContext, request: FindCoordinatorRequest, version: i16) -> FindCoordinatorResponse {
    let (node, host, port, unavailable) = coordinator(broker, session);
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
                        "no controller is known yet".to_string()
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
    response
}

/// The coordinating broker as this client's listener reaches it, or
/// COORDINATOR_NOT_AVAILABLE.
fn coordinator(broker: &Broker, session: &Session) -> (BrokerId, StrBytes, i32, Option<ResponseError>) {
    let here = (BrokerId(broker.node_id()), StrBytes::from_string(session.endpoint.advertised_host.clone()), session.endpoint.advertised_port, None);
    if !broker.is_clustered() {
        return here;
    }
    let (brokers, controller) = broker.cluster_brokers(&session.endpoint);
    match brokers.into_iter().find(|b| b.node_id == controller) {
        Some(b) => (BrokerId(b.node_id), StrBytes::from_string(b.host), b.port, None),
        None => (BrokerId(-1), StrBytes::default(), -1, Some(ResponseError::CoordinatorNotAvailable)),
    }
}
