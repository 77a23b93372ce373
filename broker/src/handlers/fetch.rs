//! Fetch: find the records each partition asks for, long-poll when there
//! are too few, and describe them as file regions for the response writer.
//!
//! Limits follow KIP-74: `max_bytes` bounds the response and
//! `partition_max_bytes` each partition, except that the first partition
//! with data returns its first batch whole even when that batch is larger,
//! so a consumer never stalls on a big batch. Fetch sessions (KIP-227) are
//! answered session-less (session id 0): clients then keep sending full
//! fetch requests, which is always correct.
//!
//! A follower replica's fetch (`replica_id` ≥ 0) reads up to the log end offset rather
//! than the high watermark, needs CLUSTER_ACTION rather than READ, and tells the
//! leader the follower's log end offset (the fetch offset), which moves the high
//! watermark. It is served by the same sendfile path as consumers.
//!
//! A shared-storage topic's offset below the local log start offset (in the
//! Iceberg table only) is served to consumers from the table: the batches are
//! rebuilt off the request path ([`floe_tiering::table_reads`]) and sent as bytes;
//! a read not ready within `floe.iceberg.shared.fetch-max-wait-ms` answers
//! the partition empty, without error, and the client's next fetch finds it
//! in the cache (never OFFSET_OUT_OF_RANGE: an `auto.offset.reset=earliest`
//! consumer would be sent past the table). Followers get
//! OFFSET_MOVED_TO_TIERED_STORAGE there (KIP-405): they are never served
//! from the table.
//!
//! READ_COMMITTED (`isolation_level` 1) reads stop at the last stable offset
//! and carry the aborted transactions of the range; the records are sent as
//! stored (sendfile), and consumers drop the aborted ones, as with Kafka. A
//! transaction marker wakes long polls like any append, so the LSO moving is seen.

use std::collections::HashMap;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use floe_protocol::fetch::{
    AbortedTransaction, FetchPartitionResponse, FetchRecords, FetchResponseData, FetchTopicResponse,
};
use floe_protocol::record_batch::BatchIter;
use floe_storage::{IsolationLevel, PartitionLog};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::FetchRequest;
use kafka_protocol::protocol::StrBytes;
use tokio::sync::futures::Notified;
use tokio::time::Instant;

use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::errors::kafka_error;
use floe_tiering::table_reads::{Served, TableRead, TableReads};

pub(super) async fn handle(
    broker: &Broker,
    ctx: &RequestContext,
    request: FetchRequest,
    version: i16,
) -> FetchResponseData {
    let replica = follower_id(&request, version);
    let targets = resolve(broker, ctx, &request, version, replica);
    if let Some(follower) = replica {
        // The fetch offset is the follower's log end offset: the high watermark may move.
        for t in targets.iter().filter(|t| t.log.is_some()) {
            broker.replicas.record_follower_fetch(
                &floe_cluster::TopicPartition::new(t.topic_name.clone(), t.partition),
                follower,
                t.fetch_offset,
            );
        }
    }
    // isolation_level exists from v4; before it every read is READ_UNCOMMITTED.
    let isolation = if version >= 4 {
        IsolationLevel::from_wire(request.isolation_level)
    } else {
        IsolationLevel::ReadUncommitted
    };
    let max_wait = Duration::from_millis(request.max_wait_ms.max(0) as u64);
    let deadline = Instant::now() + max_wait;
    let min_bytes = request.min_bytes.max(0) as u64;
    let max_bytes = if version >= 3 { request.max_bytes } else { i32::MAX }
        .clamp(0, broker.config.fetch_max_bytes) as u64;
    let tabled = match (&broker.table_reads, replica) {
        (Some(reads), None) => table_parts(broker, reads, &targets, max_bytes).await,
        _ => HashMap::new(),
    };
    let read_all =
        |targets: &[Target], max_bytes: u64, isolation: IsolationLevel, for_replica: bool| {
            read_all(broker, targets, &tabled, max_bytes, isolation, for_replica)
        };
    loop {
        // Listen before reading, so an append between the read and the wait
        // still wakes us.
        let logs: Vec<_> = targets.iter().filter_map(|t| t.log.clone()).collect();
        let mut waits: Vec<Pin<Box<Notified<'_>>>> =
            logs.iter().map(|l| Box::pin(l.append_notify().notified())).collect();
        for w in waits.iter_mut() {
            w.as_mut().enable();
        }
        let (response, bytes, has_error) =
            read_all(&targets, max_bytes, isolation, replica.is_some());
        if bytes >= min_bytes || has_error || waits.is_empty() || Instant::now() >= deadline {
            return response;
        }
        let any_append = futures_util::future::select_all(waits);
        let mut shutdown = broker.shutdown.clone();
        tokio::select! {
            woken = tokio::time::timeout_at(deadline, any_append) => {
                if woken.is_err() {
                    // Deadline reached: answer with whatever there is now.
                    return read_all(&targets, max_bytes, isolation, replica.is_some()).0;
                }
            }
            // Shutdown: answer now rather than hold it back for the full wait.
            _ = shutdown.wait_for(|down| *down) => return read_all(&targets, max_bytes, isolation, replica.is_some()).0,
        }
    }
}

/// A requested partition, resolved once per request.
struct Target {
    topic_name: String,
    topic_id: uuid::Uuid,
    partition: i32,
    fetch_offset: i64,
    partition_max_bytes: u64,
    log: Option<std::sync::Arc<floe_storage::PartitionLog>>,
    unknown: ResponseError,
    /// Index of the topic in the response, so partitions group under their topic.
    topic_slot: usize,
}

/// The node id of the follower replica sending this fetch (`replica_id`, in
/// `replica_state` from v15), or `None` for a consumer (-1).
pub(super) fn follower_id(request: &FetchRequest, version: i16) -> Option<i32> {
    let id = if version >= 15 { request.replica_state.replica_id.0 } else { request.replica_id.0 };
    (id >= 0).then_some(id)
}

fn resolve(
    broker: &Broker,
    ctx: &RequestContext,
    request: &FetchRequest,
    version: i16,
    replica: Option<i32>,
) -> Vec<Target> {
    // A follower's fetch needs CLUSTER_ACTION on the cluster (as Kafka's); refused, every
    // partition answers TOPIC_AUTHORIZATION_FAILED.
    let follower_denied = replica.is_some()
        && !broker.authorizer.authorize(
            ctx,
            AclOperation::ClusterAction,
            ResourceType::Cluster,
            crate::authorizer::acl::CLUSTER_NAME,
        );
    let mut targets = Vec::new();
    for (slot, topic) in request.topics.iter().enumerate() {
        let by_id = version >= 13;
        let found = if by_id {
            broker.logs.topic_by_id(topic.topic_id)
        } else {
            broker.logs.topic(topic.topic.0.as_str())
        };
        let mut unknown = if by_id {
            ResponseError::UnknownTopicId
        } else {
            ResponseError::UnknownTopicOrPartition
        };
        // READ on the topic, checked before existence (as Kafka does) so a
        // refused client cannot tell which topics exist. A topic id nobody
        // knows has no name to check.
        let checked_name =
            found.as_ref().map(|t| t.name()).or_else(|| (!by_id).then(|| topic.topic.0.as_str()));
        let denied = follower_denied
            || (replica.is_none()
                && checked_name.is_some_and(|name| {
                    !broker.authorizer.authorize(ctx, AclOperation::Read, ResourceType::Topic, name)
                }));
        let found = if denied {
            unknown = ResponseError::TopicAuthorizationFailed;
            None
        } else {
            found
        };
        for p in &topic.partitions {
            // A partition of a known topic: readable here only on its leader.
            let (log, partition_error) = match &found {
                Some(t) => match broker.leader_log(t.name(), p.partition) {
                    Ok(log) => match broker.check_current_leader_epoch(
                        t.name(),
                        p.partition,
                        p.current_leader_epoch,
                    ) {
                        None => (Some(log), ResponseError::UnknownTopicOrPartition),
                        Some(fenced) => (None, fenced),
                    },
                    Err((code, _)) => (None, code),
                },
                None => (None, unknown),
            };
            targets.push(Target {
                topic_name: found
                    .as_ref()
                    .map(|t| t.name().to_string())
                    .unwrap_or_else(|| topic.topic.0.to_string()),
                topic_id: topic.topic_id,
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                partition_max_bytes: p.partition_max_bytes.max(0) as u64,
                log,
                unknown: partition_error,
                topic_slot: slot,
            });
        }
    }
    targets
}

/// The table reads of the targets below their shared topic's local log start
/// offset, run together, each waited for at most `floe.iceberg.shared.fetch-max-wait-ms`
/// (not the request's `max_wait_ms`: a consumer asking 0 would never get a cold
/// range; KIP-1018's `remote.fetch.max.wait.ms` is as independent). By target index.
async fn table_parts(
    broker: &Broker,
    reads: &TableReads,
    targets: &[Target],
    max_bytes: u64,
) -> HashMap<usize, Served> {
    let wait = Duration::from_millis(broker.config.tiering.shared_reads.fetch_max_wait_ms);
    let mut pending = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let Some(log) = &t.log else { continue };
        let config = log.config();
        if !config.is_shared_storage() {
            continue;
        }
        let local_start = log.local_log_start_offset();
        if t.fetch_offset < log.log_start_offset() || t.fetch_offset >= local_start {
            continue;
        }
        let read = TableRead {
            topic: t.topic_name.clone(),
            partition: t.partition,
            from: t.fetch_offset,
            codec: floe_tiering::settings::fetch_compression(&config),
        };
        let limit = t.partition_max_bytes.min(max_bytes).max(1) as usize;
        pending.push(async move { (i, reads.read(read, local_start, limit, wait).await) });
    }
    let mut out = HashMap::new();
    for (i, result) in futures_util::future::join_all(pending).await {
        match result {
            Some(Ok(range)) => {
                out.insert(i, range);
            }
            Some(Err(e)) => {
                let t = &targets[i];
                tracing::warn!(topic = %t.topic_name, partition = t.partition, offset = t.fetch_offset, error = %e,
                    "cannot serve a fetch from the table: answering empty");
            }
            None => {}
        }
    }
    out
}

/// Reads every target once. Returns the response, the record bytes in it,
/// and whether any partition carries an error (which ends long polling).
fn read_all(
    broker: &Broker,
    targets: &[Target],
    tabled: &HashMap<usize, Served>,
    max_bytes: u64,
    isolation: IsolationLevel,
    for_replica: bool,
) -> (FetchResponseData, u64, bool) {
    let mut topics: Vec<FetchTopicResponse> = Vec::new();
    let mut last_slot = usize::MAX;
    let mut total = 0u64;
    let mut has_error = false;
    for (i, t) in targets.iter().enumerate() {
        if t.topic_slot != last_slot {
            topics.push(FetchTopicResponse {
                topic: StrBytes::from_string(t.topic_name.clone()),
                topic_id: t.topic_id,
                partitions: Vec::new(),
            });
            last_slot = t.topic_slot;
        }
        let remaining = max_bytes.saturating_sub(total);
        let limit = t.partition_max_bytes.min(remaining);
        let partition = match (tabled.get(&i), &t.log) {
            (Some(range), Some(log)) => {
                let answer = from_table(t, log, range, limit, total == 0, isolation);
                if let FetchRecords::Bytes(b) = &answer.records {
                    broker
                        .metrics
                        .fetch_bytes
                        .with_label_values(&[TABLE_REBUILD_PATH])
                        .inc_by(b.len() as u64);
                }
                answer
            }
            _ => read_one(t, limit, total == 0, isolation, for_replica),
        };
        if partition.error_code != 0 {
            has_error = true;
        }
        match &partition.records {
            FetchRecords::File(region) => total += u64::from(region.len),
            FetchRecords::Bytes(b) => total += b.len() as u64,
            _ => {}
        }
        if let Some(topic) = topics.last_mut() {
            topic.partitions.push(partition);
        }
    }
    (FetchResponseData { topics, ..FetchResponseData::default() }, total, has_error)
}

/// The `floe_fetch_bytes_total` path of batches rebuilt from a shared topic's table.
pub const TABLE_REBUILD_PATH: &str = "table-rebuild";

/// A partition answered from its table: the rebuilt batches that fit `limit`
/// (the first whole when `min_one`, KIP-74), the log's offsets, and for
/// READ_COMMITTED the aborted transactions of the range from the table's
/// abort markers and the local `.txnindex` (markers above the local log start
/// offset of transactions that began below it).
fn from_table(
    t: &Target,
    log: &PartitionLog,
    range: &Served,
    limit: u64,
    min_one: bool,
    isolation: IsolationLevel,
) -> FetchPartitionResponse {
    let mut end = 0usize;
    let mut next_offset = t.fetch_offset;
    for batch in BatchIter::new(&range.bytes) {
        let Ok(batch) = batch else { break };
        let batch_end = batch.position + batch.header.total_size();
        if batch_end as u64 > limit && !(min_one && end == 0) {
            break;
        }
        end = batch_end;
        next_offset = batch.header.last_offset() + 1;
    }
    let aborted = (isolation == IsolationLevel::ReadCommitted).then(|| {
        let local = log
            .local_aborted_transactions_before(next_offset)
            .into_iter()
            .map(|a| (a.producer_id, a.first_offset));
        range
            .aborted
            .iter()
            .copied()
            .filter(|(_, first)| *first < next_offset)
            .chain(local)
            .map(|(producer_id, first_offset)| AbortedTransaction { producer_id, first_offset })
            .collect()
    });
    FetchPartitionResponse {
        partition_index: t.partition,
        high_watermark: log.high_watermark(),
        last_stable_offset: log.last_stable_offset(),
        log_start_offset: log.log_start_offset(),
        aborted_transactions: aborted,
        records: FetchRecords::Bytes(range.bytes.slice(..end)),
        ..FetchPartitionResponse::default()
    }
}

fn read_one(
    t: &Target,
    limit: u64,
    first_with_data: bool,
    isolation: IsolationLevel,
    for_replica: bool,
) -> FetchPartitionResponse {
    let failed = |code: ResponseError, hw: i64, start: i64| FetchPartitionResponse {
        partition_index: t.partition,
        error_code: code.code(),
        high_watermark: hw,
        last_stable_offset: hw,
        log_start_offset: start,
        records: FetchRecords::Bytes(Bytes::new()),
        ..FetchPartitionResponse::default()
    };
    let Some(log) = &t.log else {
        return failed(t.unknown, -1, -1);
    };
    if let Err(e) = log.check_online() {
        return failed(kafka_error(&e), -1, -1);
    }
    // The first partition with data may exceed the limit by one batch (KIP-74);
    // the others only get what fits, which can be nothing.
    let min_one = first_with_data;
    if limit == 0 && !min_one {
        return FetchPartitionResponse {
            partition_index: t.partition,
            high_watermark: log.high_watermark(),
            last_stable_offset: log.last_stable_offset(),
            log_start_offset: log.log_start_offset(),
            aborted_transactions: (isolation == IsolationLevel::ReadCommitted).then(Vec::new),
            records: FetchRecords::Bytes(Bytes::new()),
            ..FetchPartitionResponse::default()
        };
    }
    let max_bytes = limit.min(u64::from(u32::MAX)) as u32;
    // A follower reads up to the log end: the high watermark waits for it.
    let read = if for_replica {
        log.read_for_replica(t.fetch_offset, max_bytes, min_one)
    } else {
        log.read(t.fetch_offset, max_bytes, min_one, isolation)
    };
    match read {
        Ok(info) => FetchPartitionResponse {
            partition_index: t.partition,
            high_watermark: info.high_watermark,
            last_stable_offset: info.last_stable_offset,
            log_start_offset: info.log_start_offset,
            aborted_transactions: info.aborted_transactions.map(|list| {
                list.into_iter()
                    .map(|a| AbortedTransaction {
                        producer_id: a.producer_id,
                        first_offset: a.first_offset,
                    })
                    .collect()
            }),
            records: match info.region {
                Some(region) => FetchRecords::File(region),
                None => FetchRecords::Bytes(Bytes::new()),
            },
            ..FetchPartitionResponse::default()
        },
        // Shared storage, a follower below the local log start: KIP-405's
        // OFFSET_MOVED_TO_TIERED_STORAGE (followers are never served from the
        // table, docs/shared-mode.md 4.8); the fetcher retries after its
        // backoff, loudly, until it learns to start at the local log start.
        Err(floe_storage::StorageError::BelowLocalStart { .. }) if for_replica => failed(
            ResponseError::OffsetMovedToTieredStorage,
            log.high_watermark(),
            log.log_start_offset(),
        ),
        // Shared storage, a consumer: the offset is in the table only. Until
        // the table reader serves it (docs/shared-mode.md 4.2), an empty
        // answer without error: the client fetches the same offset again,
        // where OFFSET_OUT_OF_RANGE would send an `auto.offset.reset=earliest`
        // consumer past the table's records.
        Err(floe_storage::StorageError::BelowLocalStart { .. }) => FetchPartitionResponse {
            partition_index: t.partition,
            high_watermark: log.high_watermark(),
            last_stable_offset: log.last_stable_offset(),
            log_start_offset: log.log_start_offset(),
            aborted_transactions: (isolation == IsolationLevel::ReadCommitted).then(Vec::new),
            records: FetchRecords::Bytes(Bytes::new()),
            ..FetchPartitionResponse::default()
        },
        Err(e) => {
            let code = kafka_error(&e);
            if code != ResponseError::OffsetOutOfRange && log.check_online().is_ok() {
                tracing::warn!(topic = %t.topic_name, partition = t.partition, error = %e, "fetch read failed");
            }
            failed(code, log.high_watermark(), log.log_start_offset())
        }
    }
}
