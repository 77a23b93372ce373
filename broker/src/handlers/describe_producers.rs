//! DescribeProducers (KIP-664): the producers each partition knows — epoch,
//! last sequence and timestamp, and the first offset of an open transaction —
//! so an operator can find the producer holding a last stable offset back.
//! Needs READ on each topic, as in Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};

use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use floe_protocol::response::message;

pub(super) fn handle(
    broker: &Broker,
    ctx: &RequestContext,
    request: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let topics = request
        .topics
        .into_iter()
        .map(|t| {
            let name = t.name.0.as_str();
            let allowed =
                broker.authorizer.authorize(ctx, AclOperation::Read, ResourceType::Topic, name);
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&p| {
                    let response = PartitionResponse::default().with_partition_index(p);
                    if !allowed {
                        return response
                            .with_error_code(ResponseError::TopicAuthorizationFailed.code());
                    }
                    let log = match broker.leader_log(name, p) {
                        Ok(log) => log,
                        Err((code, reason)) => {
                            return response
                                .with_error_code(code.code())
                                .with_error_message(message(reason))
                        }
                    };
                    let producers = log
                        .active_producers()
                        .into_iter()
                        .map(|s| {
                            ProducerState::default()
                                .with_producer_id(ProducerId(s.producer_id))
                                .with_producer_epoch(i32::from(s.producer_epoch))
                                .with_last_sequence(s.last_sequence)
                                .with_last_timestamp(s.last_timestamp)
                                .with_coordinator_epoch(s.coordinator_epoch)
                                .with_current_txn_start_offset(s.current_txn_start_offset)
                        })
                        .collect();
                    response.with_active_producers(producers)
                })
                .collect();
            TopicResponse::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}
