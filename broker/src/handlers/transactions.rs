//! AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions and
//! ListTransactions: requests to the transaction coordinator
//! ([`floe_coordinator::transaction::TransactionCoordinator`]), which owns
//! the state machine; this file checks authorization and partitions and
//! translates the answers into Kafka's error codes.
//!
//! Authorization is Kafka's: WRITE on the TransactionalId for every request
//! of a producer, WRITE on each topic added, READ on the group whose offsets
//! join a transaction, DESCRIBE on the TransactionalId for the admin calls.

use std::collections::BTreeSet;

use floe_coordinator::transaction::{TopicPartition, TransactionState};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_transactions_response::{self, TopicData};
use kafka_protocol::messages::list_transactions_response;
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, DescribeTransactionsRequest, DescribeTransactionsResponse,
    EndTxnRequest, EndTxnResponse, ListTransactionsRequest, ListTransactionsResponse, ProducerId,
    TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::errors::{fenced_for_version, txn_error};
use floe_coordinator::group::OFFSETS_TOPIC;

/// The `__consumer_offsets` partition that holds `group`'s offsets (Kafka's hash of the id).
pub(super) fn offsets_partition(broker: &Broker, group: &str) -> TopicPartition {
    (OFFSETS_TOPIC.to_string(), broker.groups.partition_of(group))
}

fn denied_transactional_id(broker: &Broker, ctx: &RequestContext, transactional_id: &str) -> bool {
    !broker.authorizer.authorize(
        ctx,
        AclOperation::Write,
        ResourceType::TransactionalId,
        transactional_id,
    )
}

/// One transaction's AddPartitions: per topic, per partition, the error code.
// Called for AddPartitionsToTxn v3 and each transaction of v4+, with the request's parts.
#[allow(clippy::too_many_arguments)]
async fn add_partitions(
    broker: &Broker,
    ctx: &RequestContext,
    transactional_id: &str,
    producer_id: i64,
    epoch: i16,
    topics: &[AddPartitionsToTxnTopic],
    verify_only: bool,
    version: i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut refusals: Vec<(String, i32, ResponseError)> = Vec::new();
    let mut partitions: Vec<TopicPartition> = Vec::new();
    let txn_denied = denied_transactional_id(broker, ctx, transactional_id);
    for t in topics {
        let name = t.name.0.to_string();
        let topic_denied = !txn_denied
            && !broker.authorizer.authorize(ctx, AclOperation::Write, ResourceType::Topic, &name);
        for &p in &t.partitions {
            let refusal = if txn_denied {
                Some(ResponseError::TransactionalIdAuthorizationFailed)
            } else if topic_denied {
                Some(ResponseError::TopicAuthorizationFailed)
            } else if super::metadata::is_internal(&name) {
                // Offsets join a transaction through AddOffsetsToTxn only.
                Some(ResponseError::TopicAuthorizationFailed)
            } else if !broker.partition_exists(&name, p) {
                // The coordinator only records the partition: whichever broker leads it
                // gets the marker (WriteTxnMarkers), so only existence is checked, as Kafka.
                Some(ResponseError::UnknownTopicOrPartition)
            } else {
                None
            };
            match refusal {
                Some(e) => refusals.push((name.clone(), p, e)),
                None => partitions.push((name.clone(), p)),
            }
        }
    }
    // Kafka adds all or nothing: beside a refused partition the others were not attempted.
    let outcome: Result<(), ResponseError> = if !refusals.is_empty() {
        Err(ResponseError::OperationNotAttempted)
    } else {
        broker.txns.of(transactional_id).add_partitions(transactional_id, producer_id, epoch, &partitions, verify_only).await.map_err(|e| {
            tracing::debug!(transactional_id, producer_id, epoch, error = %e, "AddPartitionsToTxn refused");
            fenced_for_version(txn_error(&e), version, 2)
        })
    };
    topics
        .iter()
        .map(|t| {
            let results = t
                .partitions
                .iter()
                .map(|&p| {
                    let code = refusals
                        .iter()
                        .find(|(n, q, _)| *n == t.name.0.as_str() && *q == p)
                        .map(|r| r.2)
                        .or(outcome.err())
                        .map_or(0, |e| e.code());
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(p)
                        .with_partition_error_code(code)
                })
                .collect();
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(results)
        })
        .collect()
}

pub(super) async fn handle_add_partitions(
    broker: &Broker,
    ctx: &RequestContext,
    request: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    if version <= 3 {
        let id = request.v3_and_below_transactional_id.0.to_string();
        let results = add_partitions(
            broker,
            ctx,
            &id,
            request.v3_and_below_producer_id.0,
            request.v3_and_below_producer_epoch,
            &request.v3_and_below_topics,
            false,
            version,
        )
        .await;
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
    }
    // v4+: the batched form brokers send (KIP-890), several transactions at once.
    if !broker.authorizer.authorize(
        ctx,
        AclOperation::ClusterAction,
        ResourceType::Cluster,
        crate::authorizer::acl::CLUSTER_NAME,
    ) {
        return AddPartitionsToTxnResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let mut results = Vec::with_capacity(request.transactions.len());
    for txn in &request.transactions {
        let id = txn.transactional_id.0.to_string();
        let topic_results = add_partitions(
            broker,
            ctx,
            &id,
            txn.producer_id.0,
            txn.producer_epoch,
            &txn.topics,
            txn.verify_only,
            version,
        )
        .await;
        results.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(txn.transactional_id.clone())
                .with_topic_results(topic_results),
        );
    }
    AddPartitionsToTxnResponse::default().with_results_by_transaction(results)
}

pub(super) async fn handle_add_offsets(
    broker: &Broker,
    ctx: &RequestContext,
    request: AddOffsetsToTxnRequest,
    version: i16,
) -> AddOffsetsToTxnResponse {
    let id = request.transactional_id.0.as_str();
    let group = request.group_id.0.as_str();
    let code = if denied_transactional_id(broker, ctx, id) {
        ResponseError::TransactionalIdAuthorizationFailed
    } else if !broker.authorizer.authorize(ctx, AclOperation::Read, ResourceType::Group, group) {
        ResponseError::GroupAuthorizationFailed
    } else {
        match broker
            .txns
            .of(id)
            .add_partitions(
                id,
                request.producer_id.0,
                request.producer_epoch,
                &[offsets_partition(broker, group)],
                false,
            )
            .await
        {
            Ok(()) => return AddOffsetsToTxnResponse::default(),
            Err(e) => {
                tracing::debug!(transactional_id = id, group, error = %e, "AddOffsetsToTxn refused");
                fenced_for_version(txn_error(&e), version, 2)
            }
        }
    };
    AddOffsetsToTxnResponse::default().with_error_code(code.code())
}

pub(super) async fn handle_end_txn(
    broker: &Broker,
    ctx: &RequestContext,
    request: EndTxnRequest,
    version: i16,
) -> EndTxnResponse {
    let id = request.transactional_id.0.as_str();
    let (producer_id, epoch) = (request.producer_id.0, request.producer_epoch);
    let response =
        EndTxnResponse::default().with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
    if denied_transactional_id(broker, ctx, id) {
        return response.with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code());
    }
    match broker.txns.of(id).end_txn(id, producer_id, epoch, request.committed).await {
        Ok(()) => response.with_producer_id(ProducerId(producer_id)).with_producer_epoch(epoch),
        Err(e) => {
            tracing::info!(transactional_id = id, producer_id, epoch, commit = request.committed, error = %e, "EndTxn refused");
            response.with_error_code(fenced_for_version(txn_error(&e), version, 2).code())
        }
    }
}

pub(super) fn handle_describe(
    broker: &Broker,
    ctx: &RequestContext,
    request: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let states = request
        .transactional_ids
        .iter()
        .map(|id| {
            let state = describe_transactions_response::TransactionState::default()
                .with_transactional_id(id.clone())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
            if !broker.authorizer.authorize(
                ctx,
                AclOperation::Describe,
                ResourceType::TransactionalId,
                id.0.as_str(),
            ) {
                return state
                    .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code());
            }
            // In a cluster, only the coordinator (the leader of the id's __transaction_state partition) knows it.
            let coordinator = broker.txns.of(id.0.as_str());
            if let Err(e) = coordinator.check_active() {
                return state.with_error_code(crate::errors::txn_error(&e).code());
            }
            let Some(m) = coordinator.describe(id.0.as_str()) else {
                return state.with_error_code(ResponseError::TransactionalIdNotFound.code());
            };
            let mut by_topic: std::collections::BTreeMap<&str, Vec<i32>> =
                std::collections::BTreeMap::new();
            for (t, p) in &m.partitions {
                by_topic.entry(t.as_str()).or_default().push(*p);
            }
            let topics = by_topic
                .into_iter()
                .map(|(t, ps)| {
                    TopicData::default()
                        .with_topic(TopicName(StrBytes::from_string(t.to_string())))
                        .with_partitions(ps)
                })
                .collect();
            state
                .with_transaction_state(StrBytes::from_static_str(m.state.name()))
                .with_transaction_timeout_ms(m.txn_timeout_ms)
                .with_transaction_start_time_ms(m.txn_start_timestamp)
                .with_producer_id(ProducerId(m.producer_id))
                .with_producer_epoch(m.producer_epoch)
                .with_topics(topics)
        })
        .collect();
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

pub(super) fn handle_list(
    broker: &Broker,
    ctx: &RequestContext,
    request: ListTransactionsRequest,
    version: i16,
) -> ListTransactionsResponse {
    let mut states = BTreeSet::new();
    let mut unknown = Vec::new();
    for name in &request.state_filters {
        match TransactionState::from_name(name.as_str()) {
            Some(s) => {
                states.insert(s);
            }
            None => unknown.push(name.clone()),
        }
    }
    if !unknown.is_empty() && states.is_empty() {
        // Only unknown states asked for: nothing can match.
        return ListTransactionsResponse::default().with_unknown_state_filters(unknown);
    }
    let producer_ids: BTreeSet<i64> = request.producer_id_filters.iter().map(|p| p.0).collect();
    // v1 (KIP-994): only transactions running longer than this many ms.
    let min_duration = if version >= 1 { request.duration_filter } else { -1 };
    let now = floe_coordinator::clock::wall_ms();
    let listed = broker
        .txns
        .list(&states, &producer_ids)
        .into_iter()
        .filter(|t| {
            broker.authorizer.check(
                ctx,
                AclOperation::Describe,
                ResourceType::TransactionalId,
                &t.transactional_id,
            )
        })
        .filter(|t| {
            min_duration < 0
                || broker.txns.of(&t.transactional_id).describe(&t.transactional_id).is_some_and(
                    |m| m.txn_start_timestamp >= 0 && now - m.txn_start_timestamp > min_duration,
                )
        })
        .map(|t| {
            list_transactions_response::TransactionState::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(t.transactional_id)))
                .with_producer_id(ProducerId(t.producer_id))
                .with_transaction_state(StrBytes::from_static_str(t.state.name()))
        })
        .collect();
    ListTransactionsResponse::default()
        .with_unknown_state_filters(unknown)
        .with_transaction_states(listed)
}
