//! Test helpers: record batches built with `RecordBatchEncoder`, appended to a real `PartitionLog`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use floe_protocol::kafka_protocol::indexmap::IndexMap;
use floe_protocol::kafka_protocol::protocol::StrBytes;
use floe_protocol::kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use floe_storage::{LogConfig, PartitionLog};

/// One record as the tests produce and expect it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TestRecord {
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) value: Option<Vec<u8>>,
    pub(crate) headers: Vec<(String, Option<Vec<u8>>)>,
    pub(crate) timestamp: i64,
}

pub(crate) fn record(i: usize) -> TestRecord {
    TestRecord {
        key: (!i.is_multiple_of(3)).then(|| format!("key-{i}").into_bytes()),
        value: (i % 7 != 5).then(|| format!("value-{i}-{}", "x".repeat(i % 50)).into_bytes()),
        headers: (0..i % 3)
            .map(|h| (format!("h{h}"), (h != 1).then(|| vec![h as u8; 3])))
            .collect(),
        timestamp: 1_700_000_000_000 + i as i64 * 1_000,
    }
}

/// One encoded batch of `records` (offsets from 0; the log assigns real ones).
pub(crate) fn encode(records: &[TestRecord], compression: Compression) -> Vec<u8> {
    let recs: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut headers = IndexMap::new();
            for (k, v) in &r.headers {
                headers.insert(StrBytes::from_string(k.clone()), v.clone().map(Bytes::from));
            }
            Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                // The encoder starts a new batch unless offset - sequence is constant; the base stays -1.
                sequence: i as i32 - 1,
                timestamp: r.timestamp,
                key: r.key.clone().map(Bytes::from),
                value: r.value.clone().map(Bytes::from),
                headers,
            }
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        recs.iter(),
        &RecordEncodeOptions { version: 2, compression },
    )
    .unwrap();
    buf.to_vec()
}

/// One transactional batch of producer `producer_id` (epoch 0): `n` records from sequence `first_seq`.
pub(crate) fn transactional(producer_id: i64, first_seq: i32, n: usize) -> Vec<u8> {
    let recs: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: true,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: first_seq + i as i32,
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(Bytes::from(format!("txn-{producer_id}-{i}"))),
            headers: IndexMap::new(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        recs.iter(),
        &RecordEncodeOptions { version: 2, compression: Compression::None },
    )
    .unwrap();
    buf.to_vec()
}

pub(crate) const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

pub(crate) fn open_log(dir: &Path, partition: i32, overrides: &[(&str, &str)]) -> PartitionLog {
    let o: BTreeMap<String, String> =
        overrides.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let config = Arc::new(LogConfig::default().with_overrides(&o).unwrap());
    PartitionLog::open(dir, "t", partition, config, None, None).unwrap()
}

/// Appends `n` records in batches of 5, cycling through the codecs; returns them in offset order.
pub(crate) fn fill(log: &PartitionLog, first: usize, n: usize) -> Vec<TestRecord> {
    let all: Vec<TestRecord> = (first..first + n).map(record).collect();
    for (b, chunk) in all.chunks(5).enumerate() {
        let mut bytes = encode(chunk, CODECS[b % CODECS.len()]);
        log.append(&mut bytes, 0).unwrap();
    }
    all
}

/// The table's rows as the iceberg crate's scan reads them, `columns` only.
pub(crate) async fn scan_columns(
    t: &crate::table::TopicTable,
    columns: &[&str],
) -> Vec<arrow_array::RecordBatch> {
    use futures::TryStreamExt;
    let table = t.load().await.unwrap();
    let scan = table.scan().select(columns.iter().copied()).build().unwrap();
    scan.to_arrow().await.unwrap().try_collect().await.unwrap()
}
