//! Locating a fetch offset in a partition log: the sparse offset index
//! lookup plus the short scan of batch headers after the indexed position,
//! as `PartitionLog::read` does for every fetched partition; and the same
//! for a timestamp through the time index (`offset_for_timestamp`).
//!
//! The log is 64 MiB of 16 KiB batches in one segment with Kafka's default
//! `index.interval.bytes` (4096), written to a temp dir and cached. What is
//! left out: sending the bytes (see fetch_assembly) and cold-disk reads.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion};
use floe_protocol::kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use floe_storage::{LogConfig, PartitionLog};

const RECORDS_PER_BATCH: i64 = 100;

fn batch(first_ts: i64) -> Bytes {
    let records: Vec<Record> = (0..RECORDS_PER_BATCH)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: 1,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: i as i32,
            timestamp: first_ts + i,
            key: None,
            value: Some(Bytes::from(vec![b'x'; 150])),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions { version: 2, compression: Compression::None },
    )
    .expect("encode");
    buf.freeze()
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig::default().with_overrides(&BTreeMap::new()).expect("config");
    let log =
        PartitionLog::open(dir.path(), "bench", 0, Arc::new(config), None, None).expect("open log");
    let template = batch(1_700_000_000_000);
    let batches = (64 << 20) / template.len();
    for b in 0..batches {
        let mut bytes =
            BytesMut::from(&batch(1_700_000_000_000 + b as i64 * RECORDS_PER_BATCH)[..]);
        log.append(&mut bytes, 1_700_000_000_000).expect("append");
    }
    let end = log.log_end_offset();
    // A fixed pseudo-random sequence of offsets, so runs compare.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    c.bench_function("read_position_random_offset_64MiB_segment", |b| {
        b.iter(|| {
            let offset = (next() % end as u64) as i64;
            log.read(offset, 1 << 20, true, floe_storage::IsolationLevel::ReadUncommitted)
                .expect("read")
        })
    });
    c.bench_function("offset_for_timestamp_random_64MiB_segment", |b| {
        b.iter(|| {
            let ts = 1_700_000_000_000 + (next() % end as u64) as i64;
            log.offset_for_timestamp(ts).expect("lookup")
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
