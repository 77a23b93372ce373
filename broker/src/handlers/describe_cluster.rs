//! DescribeCluster: this one broker, which is also the controller.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::acl::AclOperation;
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::session::Session;

pub(super) fn handle(broker: &Broker, session: &Session, ctx: &RequestContext, request: DescribeClusterRequest, version: i16) -> DescribeClusterResponse {
    if !broker.authorizer.authorize_cluster(ctx, AclOperation::Describe) {
        return DescribeClusterResponse::default()
            .with_error_code(kafka_protocol::error::ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(super::message("DESCRIBE on the cluster is needed"));
    }
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
        response.cluster_authorized_operations = cluster_operations(broker, ctx);
    }
    response
}

/// Kafka's bitfield of the cluster operations `ctx` may perform.
pub(super) fn cluster_operations(broker: &Broker, ctx: &RequestContext) -> i32 {
    use crate::authorizer::{acl::ResourceType, acl::CLUSTER_NAME, CLUSTER_OPERATIONS};
    broker.authorizer.authorized_operations(ctx, ResourceType::Cluster, CLUSTER_NAME, CLUSTER_OPERATIONS)
}
