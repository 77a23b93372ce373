//! Helpers for the unit tests: record batches built with `kafka-protocol`'s
//! encoder, decoded back with its decoder.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use floe_protocol::kafka_protocol::indexmap::IndexMap;
use floe_protocol::kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use floe_protocol::record_batch::BatchIter;

use crate::config::LogConfig;

/// One uncompressed batch with one record per timestamp, values of `value_len` bytes.
pub(crate) fn batch_ts(timestamps: &[i64], value_len: usize) -> Vec<u8> {
    batch_with(timestamps, value_len, Compression::None)
}

pub(crate) fn batch_with(
    timestamps: &[i64],
    value_len: usize,
    compression: Compression,
) -> Vec<u8> {
    encode(timestamps, value_len, compression, (-1, -1, 0))
}

/// An idempotent producer's batch of `n` records stamped `ts`: (producer id, epoch, base sequence).
pub(crate) fn idempotent_batch(producer: (i64, i16, i32), n: usize, ts: i64) -> Vec<u8> {
    encode(&vec![ts; n], 10, Compression::None, producer)
}

/// A transactional producer's batch of `n` records stamped `ts`: (producer id, epoch, base sequence).
pub(crate) fn txn_batch(producer: (i64, i16, i32), n: usize, ts: i64) -> Vec<u8> {
    encode_with(&vec![ts; n], 10, Compression::None, producer, true)
}

fn encode(
    timestamps: &[i64],
    value_len: usize,
    compression: Compression,
    producer: (i64, i16, i32),
) -> Vec<u8> {
    encode_with(timestamps, value_len, compression, producer, false)
}

fn encode_with(
    timestamps: &[i64],
    value_len: usize,
    compression: Compression,
    (producer_id, producer_epoch, base_sequence): (i64, i16, i32),
    transactional: bool,
) -> Vec<u8> {
    let records: Vec<Record> = timestamps
        .iter()
        .enumerate()
        .map(|(i, &ts)| Record {
            transactional,
            control: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: base_sequence.wrapping_add(i as i32),
            timestamp: ts,
            key: None,
            value: Some(Bytes::from(vec![b'x'; value_len])),
            headers: IndexMap::new(),
            delete_horizon: false,
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions { version: 2, compression },
    )
    .expect("encode");
    buf.to_vec()
}

/// A batch of `n` records all stamped `ts`.
pub(crate) fn batch(n: usize, ts: i64, value_len: usize) -> Vec<u8> {
    batch_ts(&vec![ts; n], value_len)
}

/// (offset, timestamp) of every record in the whole batches of `bytes` (a cut trailing batch is ignored).
pub(crate) fn decode(bytes: &[u8]) -> Vec<(i64, i64)> {
    let whole = BatchIter::new(bytes)
        .take_while(Result::is_ok)
        .last()
        .map_or(0, |b| b.map_or(0, |b| b.end()));
    let sets = RecordBatchDecoder::decode_all(&mut Bytes::copy_from_slice(&bytes[..whole]))
        .expect("decode");
    sets.iter().flat_map(|s| s.records.iter().map(|r| (r.offset, r.timestamp))).collect()
}

/// Defaults with these overrides.
pub(crate) fn config(kv: &[(&str, &str)]) -> Arc<LogConfig> {
    let map: BTreeMap<String, String> =
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Arc::new(LogConfig::default().with_overrides(&map).expect("config"))
}

/// One batch of keyed records (key, value; `None` value = tombstone) stamped `ts`.
pub(crate) fn keyed_batch(
    records: &[(&str, Option<&str>)],
    ts: i64,
    compression: Compression,
) -> Vec<u8> {
    keyed_batch_of(records, ts, compression, (-1, -1, -1), false)
}

/// A transactional producer's batch of keyed records: (producer id, epoch, base sequence).
pub(crate) fn keyed_txn_batch(
    records: &[(&str, Option<&str>)],
    ts: i64,
    producer: (i64, i16, i32),
) -> Vec<u8> {
    keyed_batch_of(records, ts, Compression::None, producer, true)
}

fn keyed_batch_of(
    records: &[(&str, Option<&str>)],
    ts: i64,
    compression: Compression,
    (producer_id, producer_epoch, base_sequence): (i64, i16, i32),
    transactional: bool,
) -> Vec<u8> {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            transactional,
            control: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: if base_sequence < 0 { -1 } else { base_sequence + i as i32 },
            timestamp: ts,
            key: Some(Bytes::copy_from_slice(k.as_bytes())),
            value: v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
            headers: IndexMap::new(),
            delete_horizon: false,
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions { version: 2, compression },
    )
    .expect("encode");
    buf.to_vec()
}

/// (offset, key, value) of every record in the whole batches of `bytes`.
pub(crate) fn decode_keyed(bytes: &[u8]) -> Vec<(i64, String, Option<String>)> {
    let sets = RecordBatchDecoder::decode_all(&mut Bytes::copy_from_slice(bytes)).expect("decode");
    let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
    sets.iter()
        .flat_map(|s| {
            s.records.iter().map(|r| {
                (r.offset, r.key.as_ref().map(text).unwrap_or_default(), r.value.as_ref().map(text))
            })
        })
        .collect()
}

/// The offset after the last whole batch of `bytes` (batches as a log stores
/// them: compaction may have removed records), and the bytes those batches take.
pub(crate) fn stored_batches_end(bytes: &[u8]) -> (i64, usize) {
    use floe_protocol::record_batch::RecordBatchHeader;
    let (mut next, mut pos) = (-1, 0);
    while let Ok(h) = RecordBatchHeader::parse(&bytes[pos..]) {
        if h.check_sanity_in_log(pos).is_err() || pos + h.total_size() > bytes.len() {
            break;
        }
        next = h.next_offset();
        pos += h.total_size();
    }
    (next, pos)
}
