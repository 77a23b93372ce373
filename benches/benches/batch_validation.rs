//! Produce-path batch validation, against a plain CRC-32C pass over the same bytes.
//!
//! Measures `validate_batches` on one 16 KiB record batch of 150-byte values
//! (uncompressed, with the per-record length walk, and zstd-compressed — 16 KiB
//! on the wire, ~200 records — header + CRC only) next to
//! `crc32c::crc32c` over exactly the bytes validation checksums: the batch
//! from `attributes` (byte 21) to its end (`crc32c_body`). The target
//! is validation at ≥ 0.8× that CRC's throughput. Leaves out the socket,
//! request decoding and the append itself.
//!
//! Fairness notes (this bench used to be unfair):
//! - kafka-protocol's encoder starts a new batch whenever `offset - sequence`
//!   changes between records. The records here once had `sequence: -1` and
//!   rising offsets, so each "16 KiB batch" was really ~96 one-record batches:
//!   validation checked ~96 small CRCs and headers while the baseline ran one
//!   CRC over the whole buffer. Records now carry an idempotent producer's
//!   consecutive sequences, and `batch` asserts it produced a single batch.
//! - The baseline is the CRC of bytes 21..end, the range validation covers,
//!   at the same address (alignment matters to the `crc32c` crate).
//!   `crc32c_only` (the whole buffer, 21 bytes more, 8-byte aligned) is kept
//!   for reference only.
//! - `many_small` (informational, no target) is the old shape on purpose —
//!   96 one-record batches — against the sum of their per-batch CRCs, which is
//!   the least validation must do for such a payload.

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use floe_protocol::kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use floe_protocol::record_batch::{validate_batches, BatchIter};

/// `count` records of `value_len`-byte values. With `one_batch` they share a
/// batch (idempotent producer, consecutive sequences); without, every record is
/// its own batch (non-idempotent, `sequence: -1`).
fn records(count: usize, value_len: usize, one_batch: bool) -> Vec<Record> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    (0..count)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: if one_batch { 1_000 } else { -1 },
            producer_epoch: if one_batch { 0 } else { -1 },
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: if one_batch { i as i32 } else { -1 },
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(Bytes::from(format!("key-{i}"))),
            // Random hex digits: zstd halves them, like real JSON-ish values.
            value: Some(Bytes::from(
                (0..value_len)
                    .map(|_| {
                        seed = seed
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1_442_695_040_888_963_407);
                        b"0123456789abcdef"[(seed >> 60) as usize]
                    })
                    .collect::<Vec<u8>>(),
            )),
            headers: Default::default(),
        })
        .collect()
}

/// Encodes `records` and checks the encoder made `expected_batches` batches.
fn encode(records: &[Record], compression: Compression, expected_batches: usize) -> Bytes {
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions { version: 2, compression },
    )
    .expect("encode a benchmark batch");
    let buf = buf.freeze();
    assert_eq!(
        BatchIter::new(&buf).count(),
        expected_batches,
        "benchmark payload has the wrong batch count"
    );
    buf
}

/// One batch of `value_len`-byte records, the fewest that make it at least `wire_bytes` long.
fn one_batch(wire_bytes: usize, value_len: usize, compression: Compression) -> Bytes {
    let mut count = wire_bytes / (value_len + 20);
    loop {
        let data = encode(&records(count, value_len, true), compression, 1);
        if data.len() >= wire_bytes {
            return data;
        }
        count += 1;
    }
}

/// CRC-32C of each batch's checksummed range, as validation computes them.
fn per_batch_crcs(buf: &[u8]) -> u32 {
    let (mut acc, mut pos) = (0u32, 0usize);
    while pos < buf.len() {
        let end =
            pos + 12 + i32::from_be_bytes(buf[pos + 8..pos + 12].try_into().unwrap()) as usize;
        acc ^= crc32c::crc32c(&buf[pos + 21..end]);
        pos = end;
    }
    acc
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch_validation_16KiB");
    for (name, compression) in [("uncompressed", Compression::None), ("zstd", Compression::Zstd)] {
        let data = one_batch(16 * 1024, 150, compression);
        group.throughput(Throughput::Bytes(data.len() as u64));
        group.bench_with_input(BenchmarkId::new("validate_batches", name), &data, |b, d| {
            b.iter(|| validate_batches(std::hint::black_box(d), 1 << 20).expect("valid batch"))
        });
        group.bench_with_input(BenchmarkId::new("crc32c_body", name), &data, |b, d| {
            b.iter(|| crc32c::crc32c(std::hint::black_box(&d[21..])))
        });
        group.bench_with_input(BenchmarkId::new("crc32c_only", name), &data, |b, d| {
            b.iter(|| crc32c::crc32c(std::hint::black_box(d)))
        });
    }
    let recs = records(16 * 1024 / 170, 150, false);
    let data = encode(&recs, Compression::None, recs.len());
    group.throughput(Throughput::Bytes(data.len() as u64));
    group.bench_with_input(BenchmarkId::new("validate_batches", "many_small"), &data, |b, d| {
        b.iter(|| validate_batches(std::hint::black_box(d), 1 << 20).expect("valid batches"))
    });
    group.bench_with_input(BenchmarkId::new("crc32c_per_batch", "many_small"), &data, |b, d| {
        b.iter(|| per_batch_crcs(std::hint::black_box(d)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
