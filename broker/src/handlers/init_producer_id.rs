//! InitProducerId: producer ids and epochs for idempotent producers.
//!
//! A null transactional id gets a new producer id (unique across restarts,
//! see [`floe_storage::ProducerIdManager`]) at epoch 0. From v3 a producer may
//! name the id and epoch it holds (KIP-360: librdkafka does so to reset its
//! sequence numbers after a timed-out batch); it gets the same id at the next
//! epoch, and the partitions then expect sequence 0 of that epoch. Kafka
//! itself hands a non-transactional producer a new id in that case; both
//! are valid for clients, and the bump keeps the producer fenced off its
//! older epoch.
//!
//! A transactional id goes to the transaction coordinator
//! ([`floe_coordinator::transaction::TransactionCoordinator`]): it gets the
//! id's producer id at the next epoch, fencing every older instance (whose
//! open transaction is aborted first). It needs WRITE on the TransactionalId.
//! An empty transactional id is INVALID_REQUEST, as in Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::errors::kafka_error;

pub(super) async fn handle(
    broker: &Broker,
    ctx: &RequestContext,
    request: InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let refused = |code: ResponseError| {
        InitProducerIdResponse::default()
            .with_error_code(code.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    match &request.transactional_id {
        None => {}
        // As Kafka's transaction coordinator.
        Some(id) if id.is_empty() => return refused(ResponseError::InvalidRequest),
        Some(id) => {
            let id = id.0.as_str();
            if !broker.authorizer.authorize(
                ctx,
                AclOperation::Write,
                ResourceType::TransactionalId,
                id,
            ) {
                return refused(ResponseError::TransactionalIdAuthorizationFailed);
            }
            let expected = (version >= 3 && request.producer_id.0 >= 0)
                .then_some((request.producer_id.0, request.producer_epoch));
            return match broker
                .txns
                .of(id)
                .init_producer_id(id, request.transaction_timeout_ms, expected)
                .await
            {
                Ok((producer_id, epoch)) => InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(producer_id))
                    .with_producer_epoch(epoch),
                Err(e) => {
                    tracing::info!(transactional_id = id, error = %e, "InitProducerId refused");
                    refused(crate::errors::fenced_for_version(
                        crate::errors::txn_error(&e),
                        version,
                        4,
                    ))
                }
            };
        }
    }
    // An idempotent producer needs IDEMPOTENT_WRITE on the cluster, or WRITE
    // on some topic (KIP-679 made the latter enough).
    let authorized =
        broker.authorizer.check(
            ctx,
            AclOperation::IdempotentWrite,
            ResourceType::Cluster,
            crate::authorizer::acl::CLUSTER_NAME,
        ) || broker.authorizer.authorize_any(ctx, AclOperation::Write, ResourceType::Topic);
    if !authorized {
        return refused(ResponseError::ClusterAuthorizationFailed);
    }
    let (producer_id, epoch) = (request.producer_id.0, request.producer_epoch);
    match broker
        .blocking(move |logs| logs.producer_ids().init_producer_id(producer_id, epoch))
        .await
    {
        Some(Ok((id, epoch))) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(epoch),
        Some(Err(e)) => {
            tracing::info!(producer_id, epoch, error = %e, "InitProducerId refused");
            let code = match kafka_error(&e) {
                // KIP-588: newer clients are told they are fenced.
                ResponseError::InvalidProducerEpoch if version >= 4 => {
                    ResponseError::ProducerFenced
                }
                code => code,
            };
            refused(code)
        }
        None => refused(ResponseError::UnknownServerError),
    }
}
