//! ListOffsets: earliest, latest, max-timestamp and by-timestamp offsets.
//!
//! Special timestamps, as Kafka defines them: -1 latest (the high
//! watermark; the last stable offset at READ_COMMITTED, v2+), -2 earliest (the log start offset), -3 the record with the
//! largest timestamp (v7+), -4 earliest local (v8+, KIP-405: the local log
//! start offset, the first offset in a local segment; the log start offset
//! but for shared-storage topics, whose older offsets are in the table only). Any other value finds the first record whose
//! timestamp is at least that, through the time index; as in Kafka, a
//! record found at or above the last fetchable offset (the high watermark,
//! or the last stable offset at READ_COMMITTED) is not answered (offset -1).
//!
//! A shared-storage partition's offsets below its local log start are in its
//! table: by-timestamp and MAX_TIMESTAMP lookups search the table part first
//! (through [`floe_tiering::table_reads`], off the request path) and the local
//! segments after, so the answer is the one Kafka's time index would give
//! over the whole partition.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use floe_storage::IsolationLevel;

use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::errors::kafka_error;
use floe_tiering::table_reads::Lookup;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;

/// How long a lookup in a shared partition's table may take before the
/// partition answers REQUEST_TIMED_OUT (clients retry ListOffsets on it).
const TABLE_LOOKUP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

pub(super) async fn handle(
    broker: &Broker,
    ctx: &RequestContext,
    request: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let mut topics = Vec::with_capacity(request.topics.len());
    let isolation = if version >= 2 {
        IsolationLevel::from_wire(request.isolation_level)
    } else {
        IsolationLevel::ReadUncommitted
    };
    for topic in request.topics {
        let name = topic.name.0.as_str().to_string();
        let authorized =
            broker.authorizer.authorize(ctx, AclOperation::Describe, ResourceType::Topic, &name);
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            partitions.push(async {
                let base = ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
                if !authorized {
                    return base.with_error_code(ResponseError::TopicAuthorizationFailed.code());
                }
                let log = match broker.leader_log(&name, p.partition_index) {
                    Ok(log) => log,
                    Err((code, _)) => return base.with_error_code(code.code()),
                };
                if let Some(e) = broker.check_current_leader_epoch(&name, p.partition_index, p.current_leader_epoch) {
                    return base.with_error_code(e.code());
                }
                if let Err(e) = log.check_online() {
                    return base.with_error_code(kafka_error(&e).code());
                }
                let last_fetchable = match isolation {
                    IsolationLevel::ReadCommitted => log.last_stable_offset(),
                    IsolationLevel::ReadUncommitted => log.high_watermark(),
                };
                let fetchable = |m: Option<floe_storage::TimestampAndOffset>| {
                    m.filter(|t| t.offset < last_fetchable).map(|t| (t.offset, t.timestamp))
                };
                let found: Result<Option<(i64, i64)>, _> = match p.timestamp {
                    LATEST => Ok(Some((last_fetchable, -1))),
                    EARLIEST => Ok(Some((log.log_start_offset(), -1))),
                    EARLIEST_LOCAL if version >= 8 => Ok(Some((log.local_log_start_offset(), -1))),
                    MAX_TIMESTAMP if version >= 7 => log.max_timestamp_and_offset().map(fetchable),
                    ts if ts < 0 => {
                        return base.with_error_code(ResponseError::InvalidRequest.code());
                    }
                    ts => log.offset_for_timestamp(ts).map(fetchable),
                };
                // A shared partition's older offsets are in its table only.
                let from_table = match (&broker.table_reads, p.timestamp) {
                    (Some(reads), ts) if (ts >= 0 || ts == MAX_TIMESTAMP) && log.config().is_shared_storage() => {
                        let (start, local_start) = (log.log_start_offset(), log.local_log_start_offset());
                        if start < local_start {
                            let what = if ts == MAX_TIMESTAMP { Lookup::MaxTimestamp } else { Lookup::Timestamp(ts) };
                            match reads.lookup(&name, p.partition_index, what, start, local_start, TABLE_LOOKUP_WAIT).await {
                                Some(Ok(found)) => found,
                                Some(Err(e)) => {
                                    tracing::warn!(topic = %name, partition = p.partition_index, error = %e, "ListOffsets cannot read the table");
                                    return base.with_error_code(ResponseError::KafkaStorageError.code());
                                }
                                None => return base.with_error_code(ResponseError::RequestTimedOut.code()),
                            }
                        } else {
                            None
                        }
                    }
                    _ => None,
                };
                let found = match (from_table, found) {
                    (None, local) => local,
                    // By time: the table's record comes first in offset order.
                    (Some(t), _) if p.timestamp >= 0 => Ok(Some(t)),
                    // The largest timestamp: the table's unless a local record is later (ties: the earlier offset).
                    (Some(t), Ok(Some(l))) if l.1 > t.1 => Ok(Some(l)),
                    (Some(t), _) => Ok(Some(t)),
                };
                match found {
                    Ok(Some((offset, timestamp))) => {
                        let found = base.with_offset(offset).with_timestamp(timestamp);
                        // The leader epoch field exists from v4 on.
                        if version >= 4 {
                            found.with_leader_epoch(broker.leader_epoch(&name, p.partition_index))
                        } else {
                            found
                        }
                    }
                    // No record at or after the timestamp: offset -1, as Kafka answers.
                    Ok(None) => base.with_offset(-1).with_timestamp(-1),
                    Err(e) => {
                        tracing::warn!(topic = %name, partition = p.partition_index, error = %e, "ListOffsets failed");
                        base.with_error_code(kafka_error(&e).code())
                    }
                }
            });
        }
        let partitions = futures_util::future::join_all(partitions).await;
        topics.push(
            ListOffsetsTopicResponse::default().with_name(topic.name).with_partitions(partitions),
        );
    }
    ListOffsetsResponse::default().with_topics(topics)
}
