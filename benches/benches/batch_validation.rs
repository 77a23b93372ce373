//! Produce-path batch validation, against a plain CRC-32C pass over the same bytes.
//!
//! Measures `validate_batches` on 16 KiB record batches (uncompressed, with
//! the per-record length walk, and zstd-compressed, header + CRC only) next
//! to `crc32c::crc32c` over identical bytes: the target is
//! validation at ≥ 0.8× the CRC's throughput. Leaves out the socket, request
//! decoding and the append itself.

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use floe_protocol::kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use floe_protocol::record_batch::validate_batches;

/// One record batch of about `target` bytes of records of `value_len`-byte values.
fn batch(target: usize, value_len: usize, compression: Compression) -> Bytes {
    let count = (target / (value_len + 20)).max(1);
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
            sequence: -1,
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(Bytes::from(format!("key-{i}"))),
            // Mildly compressible payload, like real JSON-ish values.
            value: Some(Bytes::from((0..value_len).map(|j| b"abcdefghij0123456789"[(i * 7 + j) % 20]).collect::<Vec<u8>>())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, records.iter(), &RecordEncodeOptions { version: 2, compression })
        .expect("encode a benchmark batch");
    buf.freeze()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch_validation_16KiB");
    for (name, compression) in [("uncompressed", Compression::None), ("zstd", Compression::Zstd)] {
        let data = batch(16 * 1024, 150, compression);
        group.throughput(Throughput::Bytes(data.len() as u64));
        group.bench_with_input(BenchmarkId::new("validate_batches", name), &data, |b, d| {
            b.iter(|| validate_batches(std::hint::black_box(d), 1 << 20).expect("valid batch"))
        });
        group.bench_with_input(BenchmarkId::new("crc32c_only", name), &data, |b, d| {
            b.iter(|| crc32c::crc32c(std::hint::black_box(d)))
        });
        group.bench_with_input(BenchmarkId::new("crc32c_body", name), &data, |b, d| {
            b.iter(|| crc32c::crc32c(std::hint::black_box(&d[21..])))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
