//! DescribeCluster: the live brokers and the controller, from the cluster view.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::acl::AclOperation;
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::session::Session;

pub(super) fn handle(
    broker: &Broker,
    session: &Session,
    ctx: &RequestContext,
    request: DescribeClusterRequest,
    version: i16,
) -> DescribeClusterResponse {
    if !broker.authorizer.authorize_cluster(ctx, AclOperation::Describe) {
        return DescribeClusterResponse::default()
            .with_error_code(
                kafka_protocol::error::ResponseError::ClusterAuthorizationFailed.code(),
            )
            .with_error_message(floe_protocol::response::message(
                "DESCRIBE on the cluster is needed",
            ));
    }
    let (brokers, controller_id) = broker.cluster_brokers(&session.endpoint);
    let brokers = brokers
        .into_iter()
        .map(|b| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(b.node_id))
                .with_host(StrBytes::from_string(b.host))
                .with_port(b.port)
                .with_rack(b.rack.map(StrBytes::from_string))
        })
        .collect();
    let mut response = DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(broker.logs.cluster_id().to_string()))
        .with_controller_id(BrokerId(controller_id))
        .with_brokers(brokers);
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
    broker.authorizer.authorized_operations(
        ctx,
        ResourceType::Cluster,
        CLUSTER_NAME,
        CLUSTER_OPERATIONS,
    )
}
