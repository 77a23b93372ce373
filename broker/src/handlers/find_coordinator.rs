//! FindCoordinator: this broker coordinates every group (and transactional
//! id), being the only node. v4+ batches keys in `coordinator_keys`.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use super::message;
use crate::broker::Broker;
use crate::session::Session;

/// Key types: 0 group, 1 transaction.
fn known_key_type(key_type: i8) -> bool {
    matches!(key_type, 0 | 1)
}

pub(super) fn handle(broker: &Broker, session: &Session, request: FindCoordinatorRequest, version: i16) -> FindCoordinatorResponse {
    let node = BrokerId(broker.node_id());
    let host = StrBytes::from_string(session.endpoint.advertised_host.clone());
    let port = session.endpoint.advertised_port;
    let error = (!known_key_type(request.key_type)).then_some(ResponseError::InvalidRequest);
    if version >= 4 {
        let coordinators = request
            .coordinator_keys
            .into_iter()
            .map(|key| match error {
                None => Coordinator::default().with_key(key).with_node_id(node).with_host(host.clone()).with_port(port),
                Some(e) => Coordinator::default()
                    .with_key(key)
                    .with_node_id(BrokerId(-1))
                    .with_host(StrBytes::default())
                    .with_port(-1)
                    .with_error_code(e.code())
                    .with_error_message(message(format!("unknown key type {}", request.key_type))),
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let response = match error {
        None => FindCoordinatorResponse::default().with_node_id(node).with_host(host).with_port(port),
        Some(e) => FindCoordinatorResponse::default().with_error_code(e.code()).with_node_id(BrokerId(-1)).with_port(-1),
    };
    if version >= 1 && error.is_some() {
        return response.with_error_message(message(format!("unknown key type {}", request.key_type)));
    }
    response
}
