//! Produce: validate each partition's record batches and append them.
//!
//! The batches are stored as the producer sent them; the only bytes Floe
//! changes are the base offset and partition leader epoch (outside the CRC)
//! and, for `LogAppendTime` topics, the max timestamp and timestamp-type bit
//! (the CRC is recomputed then). `acks=1` answers once the batch is in the
//! log (and fsynced first when the topic's `flush.messages` says so), and so
//! does `acks=all` on a broker alone; in a cluster `acks=all` waits for the
//! partition's in-sync replicas ([`Appended::finish`]), as a second stage the
//! connection may overlap with its next Produce.
//!
//! Idempotent producers: storage checks each batch's producer id, epoch and
//! sequence. A retry of a batch already in the log is answered as Kafka
//! does, with no error and the original base offset (nothing is appended
//! again); a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, an old epoch
//! INVALID_PRODUCER_EPOCH (see [`crate::errors`]).
//!
//! Transactional producers: a request with transactional batches needs a
//! transactional id with WRITE on it (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
//! for the whole request); each transactional batch's partition must be in the
//! producer's open transaction (KIP-890 part 1, checked with the transaction
//! coordinator, else INVALID_TXN_STATE; in a cluster only on the coordinator's
//! broker, the others append unverified, as Kafka with
//! `transaction.partition.verification.enable=false`); a non-transactional batch of a
//! producer with a transaction open in the partition is INVALID_TXN_STATE. Control batches (transaction markers)
//! are the coordinator's alone: a client's is INVALID_RECORD.

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use floe_protocol::record_batch;
use floe_storage::StorageError;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::errors::kafka_error;
use floe_protocol::response::message;

/// A Produce whose appends are done, with the `acks=all` partitions still to be
/// replicated: the second stage, [`Appended::finish`], needs no request state and
/// may run while the connection reads and appends its next Produce.
#[derive(Debug)]
pub struct Appended {
    responses: Vec<TopicProduceResponse>,
    /// acks=all appends to wait for: (topic slot, partition slot, topic, partition, offset to pass).
    waits: Vec<(usize, usize, String, i32, i64)>,
    timeout: std::time::Duration,
    peer: SocketAddr,
}

impl Appended {
    /// Whether an answer waits for followers (`acks=all` in a cluster, something appended).
    pub fn awaits_replication(&self) -> bool {
        !self.waits.is_empty()
    }

    /// The response: at once without waits, else once every awaited partition's ISR
    /// has its records (or the error that ended the wait).
    pub async fn finish(self, broker: &Broker) -> ProduceResponse {
        let Appended { mut responses, waits, timeout, peer } = self;
        if !waits.is_empty() {
            wait_for_replication(broker, &mut responses, waits, timeout, peer).await;
        }
        ProduceResponse::default().with_responses(responses)
    }
}

/// The first stage: checks and appends every partition's batches, in request order.
pub(super) fn append_all(
    broker: &Broker,
    ctx: &RequestContext,
    request: ProduceRequest,
    peer: SocketAddr,
) -> Appended {
    let acks = request.acks;
    let valid_acks = matches!(acks, -1..=1);
    let transactional_id = request.transactional_id.as_ref().map(|t| t.0.to_string());
    // WRITE on the transactional id, asked of the authorizer once, when first needed.
    let txn_write = std::cell::OnceCell::new();
    let txn_allowed = || {
        *txn_write.get_or_init(|| {
            transactional_id.as_deref().is_some_and(|id| {
                broker.authorizer.authorize(
                    ctx,
                    AclOperation::Write,
                    ResourceType::TransactionalId,
                    id,
                )
            })
        })
    };
    // Kafka's KafkaApis: a request carrying transactional batches needs a
    // transactional id with WRITE on it, checked once for the whole request;
    // without either, every partition gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    let txn_denied = first_batches_transactional(&request) && !txn_allowed();
    let mut responses = Vec::with_capacity(request.topic_data.len());
    // acks=all appends to wait for: (topic slot, partition slot, topic, partition, offset to pass).
    let mut waits: Vec<(usize, usize, String, i32, i64)> = Vec::new();
    let timeout = std::time::Duration::from_millis(request.timeout_ms.max(0) as u64);
    for topic in request.topic_data {
        let name = topic.name.0.to_string();
        let authorized =
            broker.authorizer.authorize(ctx, AclOperation::Write, ResourceType::Topic, &name);
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for data in topic.partition_data {
            let result = if !valid_acks {
                Err((ResponseError::InvalidRequiredAcks, format!("acks={acks} is not -1, 0 or 1")))
            } else if !authorized {
                Err((
                    ResponseError::TopicAuthorizationFailed,
                    format!("{} may not WRITE to {name}", ctx.principal),
                ))
            } else if super::metadata::is_internal(&name) {
                Err((ResponseError::InvalidTopicException, format!("{name} is an internal topic")))
            } else if txn_denied {
                let reason = match &transactional_id {
                    Some(id) => format!("{} may not WRITE to transactional id {id}", ctx.principal),
                    None => {
                        "transactional batches in a request without a transactional id".to_string()
                    }
                };
                Err((ResponseError::TransactionalIdAuthorizationFailed, reason))
            } else {
                let txn = TxnContext { id: transactional_id.as_deref(), allowed: &txn_allowed };
                append(broker, &name, data.index, data.records.as_deref(), txn, acks)
            };
            if let Ok(info) = &result {
                if acks == -1 && broker.is_clustered() && info.last_offset >= 0 {
                    waits.push((
                        responses.len(),
                        partitions.len(),
                        name.clone(),
                        data.index,
                        info.last_offset + 1,
                    ));
                }
            }
            let response = match result {
                Ok(info) => PartitionProduceResponse::default()
                    .with_index(data.index)
                    .with_base_offset(info.first_offset)
                    .with_log_append_time_ms(info.log_append_time)
                    .with_log_start_offset(info.log_start_offset),
                Err((code, reason)) => {
                    // Denials are logged (rate limited) by the authorizer.
                    if code != ResponseError::TopicAuthorizationFailed {
                        tracing::info!(%peer, topic = %name, partition = data.index, error = ?code, %reason, "produce refused");
                    }
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
    Appended { responses, waits, timeout, peer }
}

/// `acks=all` in a cluster: each appended partition's answer waits until its ISR has
/// the records (Kafka's DelayedProduce), or gets the error that ended the wait.
async fn wait_for_replication(
    broker: &Broker,
    responses: &mut [TopicProduceResponse],
    waits: Vec<(usize, usize, String, i32, i64)>,
    timeout: std::time::Duration,
    peer: SocketAddr,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    let outcomes = futures_util::future::join_all(waits.iter().map(
        |(_, _, topic, partition, required)| async move {
            let tp = floe_cluster::TopicPartition::new(topic.clone(), *partition);
            let log = broker.leader_log(topic, *partition)?;
            let min_isr = log.config().min_insync_replicas;
            broker.replicas.wait_for_replication(&tp, &log, *required, min_isr, deadline).await
        },
    ))
    .await;
    for ((topic_slot, slot, topic, partition, _), outcome) in waits.into_iter().zip(outcomes) {
        let Err((code, reason)) = outcome else { continue };
        tracing::info!(%peer, topic = %topic, partition, error = ?code, %reason, "acks=all produce not replicated");
        if let Some(r) =
            responses.get_mut(topic_slot).and_then(|t| t.partition_responses.get_mut(slot))
        {
            *r = PartitionProduceResponse::default()
                .with_index(partition)
                .with_error_code(code.code())
                .with_base_offset(-1)
                .with_log_append_time_ms(-1)
                .with_log_start_offset(-1)
                .with_error_message(message(reason));
        }
    }
}

/// Whether the first batch of any partition has the transactional bit, as
/// Kafka's `RequestUtils.hasTransactionalRecords` asks: one header read per
/// partition, not a walk (a transactional batch further on is caught per
/// partition, once validated).
fn first_batches_transactional(request: &ProduceRequest) -> bool {
    request.topic_data.iter().flat_map(|t| &t.partition_data).any(|p| {
        p.records
            .as_deref()
            .and_then(|r| record_batch::RecordBatchHeader::parse(r).ok())
            .is_some_and(|h| h.is_transactional())
    })
}

/// The request's transactional id and whether its principal may WRITE to it
/// (asked of the authorizer once per request, when first needed).
#[derive(Clone, Copy)]
struct TxnContext<'a> {
    id: Option<&'a str>,
    allowed: &'a dyn Fn() -> bool,
}

fn append(
    broker: &Broker,
    topic: &str,
    partition: i32,
    records: Option<&[u8]>,
    txn: TxnContext<'_>,
    acks: i16,
) -> Result<floe_storage::LogAppendInfo, (ResponseError, String)> {
    let log = broker.leader_log(topic, partition)?;
    let records = records.ok_or((ResponseError::CorruptMessage, "null records".to_string()))?;
    let config = log.config();
    if !broker.is_clustered() {
        return append_checked(broker, &log, topic, partition, records, txn);
    }
    let tp = floe_cluster::TopicPartition::new(topic, partition);
    if acks == -1 {
        // Kafka's Partition.appendRecordsToLeader: too small an ISR refuses acks=all at once.
        broker.replicas.check_min_isr(&tp, config.min_insync_replicas)?;
    }
    let appended = append_checked(broker, &log, topic, partition, records, txn)?;
    broker.replicas.on_leader_append(&tp);
    Ok(appended)
}

/// Validates one partition's batches (the one walk that checks them; storage
/// takes the answer as it is), then the checks that need the broker: keys on
/// a compacted topic, the Schema Registry's, the transaction's; then stores them.
fn append_checked(
    broker: &Broker,
    log: &std::sync::Arc<floe_storage::PartitionLog>,
    topic: &str,
    partition: i32,
    records: &[u8],
    txn: TxnContext<'_>,
) -> Result<floe_storage::LogAppendInfo, (ResponseError, String)> {
    let config = log.config();
    let validated =
        record_batch::validate_batches(records, config.max_message_bytes).map_err(|e| {
            // Kafka answers CORRUPT_MESSAGE for a batch that fails its CRC or
            // does not parse, MESSAGE_TOO_LARGE for one over max.message.bytes,
            // INVALID_RECORD for a client's control batch.
            let code = if e.is_message_too_large() {
                ResponseError::MessageTooLarge
            } else if e.is_invalid_record() {
                ResponseError::InvalidRecord
            } else {
                ResponseError::CorruptMessage
            };
            (code, e.to_string())
        })?;
    if validated.has_transactional && !(txn.allowed)() {
        let reason = match txn.id {
            Some(id) => format!("not authorized to WRITE to transactional id {id}"),
            None => "transactional batches need the producer's transactional id in the request"
                .to_string(),
        };
        return Err((ResponseError::TransactionalIdAuthorizationFailed, reason));
    }
    if config.cleanup_policy.compact {
        // Kafka's LogValidator: a compacted topic needs a key on every record.
        // Only compacted topics pay for decoding the records.
        match floe_storage::keyless_record_index(records, &validated) {
            Ok(None) => {}
            Ok(Some(_)) => {
                return Err((
                    ResponseError::InvalidRecord,
                    format!("Compacted topic cannot accept message without key in topic partition {topic}-{partition}."),
                ))
            }
            Err(reason) => return Err((ResponseError::CorruptMessage, reason)),
        }
    }
    if floe_schema::validation::is_on(&config) {
        let schemas = broker.schemas.as_deref();
        floe_schema::validation::check(schemas, &config, topic, records, &validated)?;
    }
    // Transactional batches without an id with WRITE on it were refused above.
    match txn.id.filter(|_| validated.has_transactional) {
        Some(id) if !broker.coordinates_transactions(id) => {
            // The transactional id's coordinator is another broker, so there is nothing
            // here to verify against: appended unverified, as Kafka does with
            // transaction.partition.verification.enable=false. The producer added the
            // partition before sending (its client does), and the coordinator's marker
            // ends whatever it wrote.
            store(broker, log, records, &validated, topic, partition)
        }
        Some(id) => {
            // KIP-890 part 1: the partition must be in the producer's open transaction;
            // the check holds the transaction still until the batch is in the log.
            let tp = (topic.to_string(), partition);
            let (producer_id, epoch) = (validated.producer_id, validated.producer_epoch);
            broker
                .txns
                .of(id)
                .verify_and_append(id, producer_id, epoch, &tp, || {
                    store(broker, log, records, &validated, topic, partition)
                })
                .map_err(|e| {
                    let code = match crate::errors::txn_error(&e) {
                        // Produce predates PRODUCER_FENCED: a zombie gets INVALID_PRODUCER_EPOCH.
                        ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch,
                        code => code,
                    };
                    (code, e.to_string())
                })?
        }
        // As Kafka: accepted unless the producer has a transaction open in the
        // partition (storage answers INVALID_TXN_STATE then).
        None => store(broker, log, records, &validated, topic, partition),
    }
}

/// Appends validated batches and counts them.
fn store(
    broker: &Broker,
    log: &floe_storage::PartitionLog,
    records: &[u8],
    validated: &record_batch::ValidatedBatches,
    topic: &str,
    partition: i32,
) -> Result<floe_storage::LogAppendInfo, (ResponseError, String)> {
    let config = log.config();
    // One copy: the request's bytes are shared with the frame buffer, and the
    // offsets must be written into them.
    let mut owned = BytesMut::from(records);
    let now_ms =
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
    let fsyncs = config.flush_messages < i64::MAX;
    let appended = if fsyncs {
        // This append may fsync before returning: let the runtime move other
        // connections off this worker meanwhile.
        tokio::task::block_in_place(|| log.append_validated(&mut owned, validated, now_ms))
    } else {
        // A write(2) into the page cache: as cheap as the copy before it.
        log.append_validated(&mut owned, validated, now_ms)
    };
    match appended {
        Ok(info) if info.duplicate => {
            tracing::debug!(
                topic,
                partition,
                producer_id = validated.producer_id,
                base_offset = info.first_offset,
                "duplicate idempotent batch acknowledged with its original offset"
            );
            Ok(info)
        }
        Ok(info) => {
            broker.metrics.produce_bytes.inc_by(owned.len() as u64);
            broker.metrics.produce_records.inc_by(validated.record_count as u64);
            Ok(info)
        }
        // The producer's own mistake (or a zombie): logged by the caller as a refusal.
        Err(
            e @ (StorageError::OutOfOrderSequence { .. }
            | StorageError::InvalidProducerEpoch { .. }
            | StorageError::InvalidTxnState { .. }),
        ) => Err((kafka_error(&e), e.to_string())),
        // Said once, loudly, when the directory went offline; not again per request.
        Err(e @ StorageError::LogDirOffline { .. }) => {
            tracing::debug!(topic, partition, error = %e, "append refused");
            Err((kafka_error(&e), e.to_string()))
        }
        Err(e) => {
            tracing::error!(topic, partition, error = %e, "append failed");
            Err((kafka_error(&e), e.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    //! Idempotence on the wire: hand-built record batches through dispatch.

    use std::collections::BTreeMap;

    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{
        ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse,
        ProducerId, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;

    use super::super::version_tests::{broker, roundtrip};
    use crate::broker::Broker;

    fn varint(buf: &mut BytesMut, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            buf.put_u8((z as u8) | 0x80);
            z >>= 7;
        }
        buf.put_u8(z as u8);
    }

    /// A record batch v2, byte by byte: one record per value, keys null.
    fn batch(producer_id: i64, epoch: i16, base_sequence: i32, values: &[&str]) -> Bytes {
        let ts = 1_700_000_000_000i64;
        let mut records = BytesMut::new();
        for (i, v) in values.iter().enumerate() {
            let mut r = BytesMut::new();
            r.put_i8(0); // attributes
            varint(&mut r, 0); // timestamp delta
            varint(&mut r, i as i64); // offset delta
            varint(&mut r, -1); // null key
            varint(&mut r, v.len() as i64);
            r.put_slice(v.as_bytes());
            varint(&mut r, 0); // no headers
            varint(&mut records, r.len() as i64);
            records.put_slice(&r);
        }
        let mut after_crc = BytesMut::new();
        after_crc.put_i16(0); // attributes: no compression, CreateTime
        after_crc.put_i32(values.len() as i32 - 1); // last offset delta
        after_crc.put_i64(ts);
        after_crc.put_i64(ts);
        after_crc.put_i64(producer_id);
        after_crc.put_i16(epoch);
        after_crc.put_i32(base_sequence);
        after_crc.put_i32(values.len() as i32);
        after_crc.put_slice(&records);
        let mut b = BytesMut::new();
        b.put_i64(0); // base offset: the broker assigns it
        b.put_i32((4 + 1 + 4 + after_crc.len()) as i32); // batch length
        b.put_i32(-1); // partition leader epoch
        b.put_i8(2); // magic
        b.put_u32(crc32c::crc32c(&after_crc));
        b.put_slice(&after_crc);
        b.freeze()
    }

    /// Produces `records` to t-0 with acks=all (v9, flexible); (error code, base offset).
    async fn produce(broker: &Broker, records: Bytes) -> (i16, i64) {
        let p = PartitionProduceData::default().with_index(0).with_records(Some(records));
        let t = TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_data(vec![p]);
        let req =
            ProduceRequest::default().with_acks(-1).with_timeout_ms(1000).with_topic_data(vec![t]);
        let r: ProduceResponse = roundtrip(broker, ApiKey::Produce, 9, &req).await;
        let p = &r.responses[0].partition_responses[0];
        (p.error_code, p.base_offset)
    }

    async fn init_producer_id(broker: &Broker, producer_id: i64, epoch: i16) -> (i16, i64, i16) {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch);
        let r: InitProducerIdResponse = roundtrip(broker, ApiKey::InitProducerId, 4, &req).await;
        (r.error_code, r.producer_id.0, r.producer_epoch)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_retried_idempotent_batch_is_stored_once_and_acknowledged_with_its_first_offset() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = broker(dir.path()).await;
        broker.logs.create_topic("t", 1, BTreeMap::new()).expect("create t");
        assert_eq!(produce(&broker, batch(-1, -1, -1, &["plain"])).await, (0, 0));
        let (code, pid, epoch) = init_producer_id(&broker, -1, -1).await;
        assert_eq!((code, epoch), (0, 0));
        assert!(pid >= 0);

        let first = batch(pid, 0, 0, &["a", "b"]);
        assert_eq!(produce(&broker, first.clone()).await, (0, 1));
        assert_eq!(
            produce(&broker, first).await,
            (0, 1),
            "the retry gets the original base offset"
        );
        let log = broker.logs.partition("t", 0).expect("t-0");
        assert_eq!(log.log_end_offset(), 3, "stored once");
        let stored = log
            .read(0, 1 << 20, true, floe_storage::IsolationLevel::ReadUncommitted)
            .expect("read")
            .region
            .expect("region")
            .read_to_vec()
            .expect("bytes");
        let batches: Vec<_> = floe_protocol::record_batch::BatchIter::new(&stored)
            .map(|b| b.expect("batch").header)
            .collect();
        assert_eq!(batches.len(), 2);
        assert_eq!(
            (batches[1].producer_id, batches[1].base_sequence, batches[1].base_offset),
            (pid, 0, 1)
        );

        assert_eq!(produce(&broker, batch(pid, 0, 2, &["c"])).await, (0, 3));
        let gap = produce(&broker, batch(pid, 0, 9, &["z"])).await.0;
        assert_eq!(gap, kafka_protocol::error::ResponseError::OutOfOrderSequenceNumber.code());
        // KIP-360: the producer bumps its epoch and starts again at sequence 0.
        assert_eq!(init_producer_id(&broker, pid, 0).await, (0, pid, 1));
        assert_eq!(produce(&broker, batch(pid, 1, 0, &["d"])).await, (0, 4));
        let zombie = produce(&broker, batch(pid, 0, 3, &["e"])).await.0;
        assert_eq!(zombie, kafka_protocol::error::ResponseError::InvalidProducerEpoch.code());
        assert_eq!(log.log_end_offset(), 5);
    }
}
