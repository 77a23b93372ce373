//! DeleteRecords: advance a partition's log start offset.
//!
//! Offset -1 means the high watermark. Segments wholly below the new log
//! start offset are deleted; the rest stay and are read from the new start.
//!
//! A shared-storage topic's offsets may lie in its Iceberg table only: the log
//! start offset moves here at once (fetches below it are out of range from
//! now on), and the leader's tiering thread carries it into the table at its
//! next retention check (`log.retention.check.interval.ms`): data files
//! wholly below it go, and `floe.log-start.<p>` records it for every replica
//! (`floe_tiering::retention`).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::errors::kafka_error;

pub(super) async fn handle(
    broker: &Broker,
    ctx: &RequestContext,
    request: DeleteRecordsRequest,
    _version: i16,
) -> DeleteRecordsResponse {
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let authorized =
            broker.authorizer.authorize(ctx, AclOperation::Delete, ResourceType::Topic, &name);
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in topic.partitions {
            let result =
                DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
            if !authorized {
                partitions.push(
                    result
                        .with_low_watermark(-1)
                        .with_error_code(ResponseError::TopicAuthorizationFailed.code()),
                );
                continue;
            }
            let log = match broker.leader_log(&name, p.partition_index) {
                Ok(log) => log,
                Err((code, _)) => {
                    partitions.push(result.with_low_watermark(-1).with_error_code(code.code()));
                    continue;
                }
            };
            let offset = if p.offset == -1 { log.high_watermark() } else { p.offset };
            let deleted =
                tokio::task::spawn_blocking(move || log.delete_records_before(offset)).await;
            partitions.push(match deleted {
                Ok(Ok(low)) => result.with_low_watermark(low),
                Ok(Err(e)) => result.with_low_watermark(-1).with_error_code(kafka_error(&e).code()),
                Err(_) => result
                    .with_low_watermark(-1)
                    .with_error_code(ResponseError::UnknownServerError.code()),
            });
        }
        topics.push(
            DeleteRecordsTopicResult::default().with_name(topic.name).with_partitions(partitions),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}
