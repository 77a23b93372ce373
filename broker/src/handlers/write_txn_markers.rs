//! WriteTxnMarkers: a transaction coordinator on another broker asks this one,
//! as the leader of some partitions, to end a producer's transaction in them
//! (append a COMMIT or ABORT control batch).
//!
//! Needs CLUSTER_ACTION on the cluster (brokers only); without it every
//! partition gets CLUSTER_AUTHORIZATION_FAILED, as in Kafka. Each partition is
//! answered on its own: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
//! the storage refusals (INVALID_PRODUCER_EPOCH for an older producer epoch,
//! TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch,
//! KAFKA_STORAGE_ERROR...), or NONE once the marker is in the log and, in a
//! cluster, in the in-sync replicas. The writing itself is
//! [`crate::txn_markers::write_as_leader`], shared with the coordinator's own
//! partitions.

use floe_coordinator::transaction::TxnMarker;
use futures_util::future::join_all;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};

use crate::authorizer::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use crate::authorizer::RequestContext;
use crate::broker::Broker;

pub(super) async fn handle(
    broker: &Broker,
    ctx: &RequestContext,
    request: WriteTxnMarkersRequest,
    _version: i16,
) -> WriteTxnMarkersResponse {
    let allowed = broker.authorizer.authorize(
        ctx,
        AclOperation::ClusterAction,
        ResourceType::Cluster,
        CLUSTER_NAME,
    );
    // Every partition of every marker at once: their waits for replication overlap.
    let markers = join_all(request.markers.into_iter().map(|mut marker| async move {
        let topics = std::mem::take(&mut marker.topics);
        let marker = &marker;
        let topics = join_all(topics.into_iter().map(|topic| async move {
            let name = topic.name.0.to_string();
            let partitions = join_all(topic.partition_indexes.iter().map(|&p| {
                let name = name.clone();
                async move {
                    let code = if allowed {
                        write(broker, marker, name, p).await
                    } else {
                        ResponseError::ClusterAuthorizationFailed.code()
                    };
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(p)
                        .with_error_code(code)
                }
            }))
            .await;
            WritableTxnMarkerTopicResult::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        }))
        .await;
        WritableTxnMarkerResult::default().with_producer_id(marker.producer_id).with_topics(topics)
    }))
    .await;
    WriteTxnMarkersResponse::default().with_markers(markers)
}

/// Writes one partition's marker; its error code.
async fn write(
    broker: &Broker,
    marker: &kafka_protocol::messages::write_txn_markers_request::WritableTxnMarker,
    topic: String,
    partition: i32,
) -> i16 {
    let m = TxnMarker {
        partition: (topic, partition),
        producer_id: marker.producer_id.0,
        producer_epoch: marker.producer_epoch,
        coordinator_epoch: marker.coordinator_epoch,
        commit: marker.transaction_result,
    };
    match crate::txn_markers::write_as_leader(broker, &m).await {
        Ok(()) => 0,
        Err((code, reason)) => {
            tracing::info!(topic = %m.partition.0, partition, producer_id = m.producer_id, commit = m.commit, error = ?code, %reason,
                "transaction marker refused");
            code.code()
        }
    }
}
