//! DescribeCluster: this one broker, which is also the controller.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;
use crate::session::Session;

pub(super) fn handle(broker: &Broker, session: &Session, request: DescribeClusterRequest, version: i16) -> DescribeClusterResponse {
    let node = BrokerId(broker.node_id());
    let mut response = DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(broker.logs.cluster_id().to_string()))
        .with_controller_id(node)
        .with_brokers(vec![DescribeClusterBroker::default()
            .with_broker_id(node)
            .with_host(StrBytes::from_string(session.endpoint.advertised_host.clone()))
            .with_port(session.endpoint.advertised_port)]);
    if version >= 1 {
        response.endpoint_type = request.endpoint_type;
    }
    if request.include_cluster_authorized_operations {
        // No authorizer yet: every cluster operation is allowed.
        response.cluster_authorized_operations = 0b1_1111_1111_1100;
    }
    response
}
