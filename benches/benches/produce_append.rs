//! The produce path below the socket: one partition's records from the
//! request's bytes to the segment, as `handlers/produce.rs` runs it — the copy
//! out of the frame, `validate_batches`, and the append (offsets, leader
//! epoch, LogAppendTime when the topic uses it, one positioned write, the
//! indexes). Leaves out the socket, request decoding, authorization and the
//! response.
//!
//! Measures, for one 16 KiB batch of 150-byte values (one idempotent-style
//! batch, as a producer's linger fills it) and for the same bytes as 96
//! one-record batches (`many_small`, the worst case for per-batch work):
//! - `create_time`: a CreateTime topic (the default);
//! - `log_append_time`: `message.timestamp.type=LogAppendTime`, which rewrites
//!   every batch's max timestamp and CRC.
//!
//! The log is a real `PartitionLog` in a temporary directory, written through
//! the page cache (`flush.messages` is off, as by default); every 4,096
//! appends it is replaced, outside the timed part, so the disk use stays small.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use floe_protocol::kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use floe_protocol::record_batch::validate_batches;
use floe_storage::{LogConfig, PartitionLog};

/// Appends between two fresh logs (64 MiB of 16 KiB batches).
const APPENDS_PER_LOG: u64 = 4_096;

/// `count` records of 150-byte values; in one batch (consecutive sequences) or one batch each.
fn payload(count: usize, one_batch: bool) -> Bytes {
    let records: Vec<Record> = (0..count)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: if one_batch { i as i32 } else { -1 },
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(Bytes::from(format!("key-{i}"))),
            value: Some(Bytes::from(vec![b'v'; 150])),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions { version: 2, compression: Compression::None },
    )
    .expect("encode a benchmark batch");
    buf.freeze()
}

fn open(dir: &std::path::Path, timestamp_type: &str) -> PartitionLog {
    let overrides: BTreeMap<String, String> =
        [("message.timestamp.type".to_string(), timestamp_type.to_string())].into();
    let config = LogConfig::default().with_overrides(&overrides).expect("config");
    PartitionLog::open(dir, "bench", 0, Arc::new(config), None, None).expect("open log")
}

/// What the produce handler does for one partition's records.
fn produce(log: &PartitionLog, request_bytes: &Bytes, max_message_bytes: usize) {
    let mut owned = BytesMut::from(&request_bytes[..]);
    let validated = validate_batches(&owned, max_message_bytes).expect("valid batches");
    std::hint::black_box(&validated);
    log.append(&mut owned, 1_700_000_000_000).expect("append");
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("produce_append_16KiB");
    let one = payload(16 * 1024 / 170, true);
    let many = payload(16 * 1024 / 170, false);
    for (shape, data) in [("one_batch", &one), ("many_small", &many)] {
        for (name, timestamp_type) in
            [("create_time", "CreateTime"), ("log_append_time", "LogAppendTime")]
        {
            group.throughput(Throughput::Bytes(data.len() as u64));
            group.bench_with_input(BenchmarkId::new(name, shape), data, |b, data| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    let mut done = 0;
                    while done < iters {
                        let dir = tempfile::tempdir().expect("tempdir");
                        let log = open(dir.path(), timestamp_type);
                        let max = log.config().max_message_bytes;
                        let n = (iters - done).min(APPENDS_PER_LOG);
                        let start = Instant::now();
                        for _ in 0..n {
                            produce(&log, data, max);
                        }
                        total += start.elapsed();
                        done += n;
                    }
                    total
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
