//! Segment → Arrow conversion: the CPU the tiering thread spends turning a
//! sealed segment into Arrow record batches, beside plain reads of the same
//! segment bytes.
//!
//! For records of 100 B and 1 KiB values (half random, half zeros, 16-byte
//! keys, no headers) in batches of ~64 KiB uncompressed, stored uncompressed,
//! lz4 and zstd, each in one sealed segment of ~8 MiB of records:
//! - `storage_read`: `PartitionLog::read` from offset 0 to the end in 1 MiB
//!   regions, each `pread` into memory: the broker's copying fetch path, the
//!   floor of anything that looks at the bytes.
//! - `segment_reader`: `floe-storage`'s `SegmentBatchReader`, batch by batch
//!   (header checks, 256 KiB buffered reads, each batch copied out as tiering
//!   does): the I/O half of tiering.
//! - `to_arrow`: `SegmentBatchReader` + `ArrowConverter` (decompress, decode records,
//!   build Arrow arrays, 8192-row batches): what the tiering thread does before
//!   Parquet.
//!
//! Throughput is in segment (log) bytes, so for compressed codecs the payload
//! rate is higher by the compression ratio (printed once per case).
//!
//! Leaves out: Parquet encoding and zstd compression of the Parquet pages, the
//! catalog commit (see `floe-bench run tiering-cost` for the whole path), and
//! disk reads: the segment was just written, so its pages are cached.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use floe_protocol::kafka_protocol::indexmap::IndexMap;
use floe_protocol::kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use floe_protocol::record_batch::{RecordBatchHeader, RECORD_BATCH_OVERHEAD};
use floe_storage::{LogConfig, PartitionLog, ScannedBatch, SegmentBatchReader};
use floe_tiering::convert::{ArrowConverter, Pushed};

/// Uncompressed record bytes per batch, as a producer with a 64 KiB batch.size sends.
const BATCH_BYTES: usize = 64 * 1024;
/// Value bytes per segment.
const SEGMENT_VALUE_BYTES: usize = 8 << 20;

/// A partition log holding one sealed segment of `value_size`-byte records.
fn build_log(dir: &Path, value_size: usize, compression: Compression) -> PartitionLog {
    let config = Arc::new(LogConfig::default());
    let log = PartitionLog::open(dir, "bench", 0, config, None, None).expect("open log");
    let per_batch = (BATCH_BYTES / value_size).max(1);
    let batches = SEGMENT_VALUE_BYTES / value_size / per_batch;
    let mut rng = fastrand::Rng::with_seed(7);
    let mut offset = 0i64;
    for _ in 0..batches {
        let records: Vec<Record> = (0..per_batch)
            .map(|i| {
                let mut value = vec![0u8; value_size];
                value[..value_size / 2].iter_mut().for_each(|b| *b = rng.u8(..));
                offset += 1;
                Record {
                    transactional: false,
                    control: false,
                    delete_horizon: false,
                    partition_leader_epoch: 0,
                    producer_id: -1,
                    producer_epoch: -1,
                    timestamp_type: TimestampType::Creation,
                    offset: i as i64,
                    // The encoder starts a new batch unless offset - sequence is constant.
                    sequence: i as i32 - 1,
                    timestamp: 1_700_000_000_000 + offset,
                    key: Some(Bytes::from(format!("key-{offset:012}"))),
                    value: Some(Bytes::from(value)),
                    headers: IndexMap::new(),
                }
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            records.iter(),
            &RecordEncodeOptions { version: 2, compression },
        )
        .expect("encode");
        log.append(&mut buf, 0).expect("append");
    }
    log.roll_now().expect("roll");
    log
}

fn storage_read(log: &PartitionLog) -> u64 {
    let mut offset = log.log_start_offset();
    let mut bytes = 0u64;
    while offset < log.log_end_offset() {
        let info = log
            .read(offset, 1 << 20, true, floe_storage::IsolationLevel::ReadUncommitted)
            .expect("read");
        let Some(region) = info.region else { break };
        let data = region.read_to_vec().expect("pread");
        // Whole batches only (a region may end mid-batch): advance past the last whole one.
        let mut pos = 0;
        while pos + RECORD_BATCH_OVERHEAD <= data.len() {
            let header =
                RecordBatchHeader::parse(&data[pos..pos + RECORD_BATCH_OVERHEAD]).expect("header");
            if pos + header.total_size() > data.len() {
                break;
            }
            offset = header.last_offset() + 1;
            pos += header.total_size();
        }
        bytes += pos as u64;
        black_box(&data);
    }
    bytes
}

/// The next batch's header (its bytes in `reader`), `None` at the end; as tiering, without the CRC.
fn next_batch(reader: &mut SegmentBatchReader<'_>) -> Option<RecordBatchHeader> {
    match reader.next_batch(false).expect("read") {
        ScannedBatch::Batch { header, .. } => Some(header),
        ScannedBatch::End => None,
        ScannedBatch::Invalid { position, reason } => {
            panic!("insane batch at {position}: {reason}")
        }
    }
}

fn segment_reader(log: &PartitionLog) -> u64 {
    let mut bytes = 0u64;
    for seg in log.sealed_segments() {
        let mut reader =
            SegmentBatchReader::open(&seg.path, 0, seg.size_bytes).expect("open segment");
        while next_batch(&mut reader).is_some() {
            let b = Bytes::copy_from_slice(reader.batch_bytes().expect("read"));
            bytes += b.len() as u64;
            black_box(&b);
        }
    }
    bytes
}

fn to_arrow(log: &PartitionLog) -> (u64, usize) {
    let mut conv = ArrowConverter::new(0, 8192, 8 << 20);
    let (mut rows, mut bytes) = (0usize, 0u64);
    for seg in log.sealed_segments() {
        let mut reader =
            SegmentBatchReader::open(&seg.path, 0, seg.size_bytes).expect("open segment");
        while let Some(header) = next_batch(&mut reader) {
            let b = Bytes::copy_from_slice(reader.batch_bytes().expect("read"));
            bytes += b.len() as u64;
            match conv.push(&header, b, 0) {
                Pushed::Rows(_) => {}
                other => panic!("{other:?}"),
            }
            if conv.is_full() {
                rows += conv.finish().expect("finish").map_or(0, |rb| black_box(rb).num_rows());
            }
        }
    }
    rows += conv.finish().expect("finish").map_or(0, |rb| black_box(rb).num_rows());
    (bytes, rows)
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("segment_to_arrow");
    group.sample_size(10);
    for value_size in [100usize, 1024] {
        for (name, compression) in
            [("none", Compression::None), ("lz4", Compression::Lz4), ("zstd", Compression::Zstd)]
        {
            let dir = tempfile::tempdir().expect("temp dir");
            let log = build_log(dir.path(), value_size, compression);
            let segment_bytes: u64 = log.sealed_segments().iter().map(|s| s.size_bytes).sum();
            let (read, rows) = to_arrow(&log);
            assert_eq!(read, segment_bytes, "every segment byte is read");
            assert_eq!(rows as i64, log.log_end_offset(), "every record becomes a row");
            assert_eq!(storage_read(&log), segment_bytes);
            eprintln!(
                "{value_size} B {name}: {rows} records, {:.1} MiB of segment for {:.1} MiB of values ({:.2}×)",
                segment_bytes as f64 / 1048576.0,
                (rows * value_size) as f64 / 1048576.0,
                (rows * value_size) as f64 / segment_bytes as f64
            );
            group.throughput(Throughput::Bytes(segment_bytes));
            let id = format!("{value_size}B/{name}");
            group.bench_with_input(BenchmarkId::new("storage_read", &id), &log, |b, log| {
                b.iter(|| storage_read(log))
            });
            group.bench_with_input(BenchmarkId::new("segment_reader", &id), &log, |b, log| {
                b.iter(|| segment_reader(log))
            });
            group.bench_with_input(BenchmarkId::new("to_arrow", &id), &log, |b, log| {
                b.iter(|| to_arrow(log))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
