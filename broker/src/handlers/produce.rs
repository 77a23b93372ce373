//! Produce: validate each partition's record batches and append them.
//!
//! The batches are stored as the producer sent them; the only bytes Floe
//! changes are the base offset and partition leader epoch (outside the CRC)
//! and, for `LogAppendTime` topics, the max timestamp and timestamp-type bit
//! (the CRC is recomputed then). Floe is the only replica, so `acks=1` and
//! `acks=all` both answer once the batch is in the log (and fsynced first
//! when the topic's `flush.messages` says so).

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use floe_protocol::record_batch::{self, BatchError};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;

use super::message;
use super::metadata::LEADER_EPOCH;
use crate::broker::Broker;
use crate::errors::kafka_error;

pub(super) async fn handle(broker: &Broker, request: ProduceRequest, _version: i16, peer: SocketAddr) -> ProduceResponse {
    let acks = request.acks;
    let valid_acks = matches!(acks, -1 | 0 | 1);
    let transactional = request.transactional_id.is_some();
    let mut responses = Vec::with_capacity(request.topic_data.len());
    for topic in request.topic_data {
        let name = topic.name.0.to_string();
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for data in topic.partition_data {
            let result = if !valid_acks {
                Err((ResponseError::InvalidRequiredAcks, format!("acks={acks} is not -1, 0 or 1")))
            } else if super::metadata::is_internal(&name) {
                Err((ResponseError::InvalidTopicException, format!("{name} is an internal topic")))
            } else if transactional {
                Err((ResponseError::TransactionalIdAuthorizationFailed, "transactions are not supported yet".into()))
            } else {
                append(broker, &name, data.index, data.records.as_deref())
            };
            let response = match result {
                Ok(info) => PartitionProduceResponse::default()
                    .with_index(data.index)
                    .with_base_offset(info.first_offset)
                    .with_log_append_time_ms(info.log_append_time)
                    .with_log_start_offset(info.log_start_offset),
                Err((code, reason)) => {
                    tracing::info!(%peer, topic = %name, partition = data.index, error = ?code, %reason, "produce refused");
                    PartitionProduceResponse::default()
                        .with_index(data.index)
                        .with_error_code(code.code())
                        .with_base_offset(-1)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(-1)
                        .with_error_message(message(reason))
                }
            };
            partitions.push(response);
        }
        responses.push(
            TopicProduceResponse::default()
                .with_name(kafka_protocol::messages::TopicName(StrBytes::from_string(name)))
                .with_partition_responses(partitions),
        );
    }
    ProduceResponse::default().with_responses(responses)
}

fn append(
    broker: &Broker,
    topic: &str,
    partition: i32,
    records: Option<&[u8]>,
) -> Result<floe_storage::LogAppendInfo, (ResponseError, String)> {
    let log = broker
        .logs
        .partition(topic, partition)
        .ok_or_else(|| (ResponseError::UnknownTopicOrPartition, format!("{topic}-{partition} does not exist")))?;
    let records = records.ok_or((ResponseError::CorruptMessage, "null records".to_string()))?;
    let config = log.config();
    let validated = record_batch::validate_batches(records, config.max_message_bytes as usize).map_err(|e| {
        // Kafka answers CORRUPT_MESSAGE for a batch that fails its CRC or
        // does not parse, MESSAGE_TOO_LARGE for one over max.message.bytes.
        let code = match e {
            BatchError::MessageTooLarge { .. } => ResponseError::MessageTooLarge,
            _ => ResponseError::CorruptMessage,
        };
        (code, e.to_string())
    })?;
    if validated.has_transactional || validated.has_control {
        return Err((ResponseError::InvalidRecord, "transactional and control batches are not supported yet".into()));
    }
    // One copy: the request's bytes are shared with the frame buffer, and the
    // offsets must be written into them.
    let mut owned = BytesMut::from(records);
    record_batch::set_partition_leader_epoch(&mut owned, LEADER_EPOCH);
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
    let fsyncs = config.flush_messages < i64::MAX;
    let appended = if fsyncs {
        // This append may fsync before returning: let the runtime move other
        // connections off this worker meanwhile.
        tokio::task::block_in_place(|| log.append(&mut owned, now_ms))
    } else {
        // A write(2) into the page cache: as cheap as the copy before it.
        log.append(&mut owned, now_ms)
    };
    match appended {
        Ok(info) => {
            broker.metrics.produce_bytes.inc_by(owned.len() as u64);
            broker.metrics.produce_records.inc_by(validated.record_count as u64);
            Ok(info)
        }
        Err(e) => {
            tracing::error!(topic, partition, error = %e, "append failed");
            Err((kafka_error(&e), e.to_string()))
        }
    }
}
