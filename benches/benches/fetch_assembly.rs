//! Fetch response assembly: the CPU the broker spends turning a
//! `FetchResponseData` into bytes to send.
//!
//! Measures:
//! - `encode/{1,16,256}`: `encode_fetch_response` (Fetch v16) for a fetch of
//!   1, 16 and 256 partitions whose records are `FileRegion`s: the encoded
//!   bytes around the records and the list of parts for the zero-copy path.
//!   Throughput is in partitions.
//! - `crate_encode/{1,16,256}`: for comparison, what a copying broker does
//!   once it holds the records in memory: `kafka-protocol`'s encoder for the
//!   same response (64 KiB of records a partition, so this copies them).
//! - `to_contiguous/…`: the copying path (TLS) for 1 MiB of records, as one
//!   region and as 16 regions of 64 KiB: `pread(2)` of a file in the page
//!   cache into one buffer. Throughput is in bytes of response.
//!
//! Leaves out: reading the log (index lookups, building the regions), request
//! decoding, the socket (`sendfile(2)` and `write(2)` themselves), and disk
//! reads: the file is freshly written, so its pages are cached, and the copy
//! path figures are page-cache-to-memory copies, not I/O.

use std::fs::File;
use std::hint::black_box;
use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use floe_protocol::fetch::{
    encode_fetch_response, FetchPartitionResponse, FetchRecords, FetchResponseData,
    FetchTopicResponse,
};
use floe_protocol::kafka_protocol::messages::fetch_response as kp;
use floe_protocol::kafka_protocol::messages::{FetchResponse, ResponseHeader, TopicName};
use floe_protocol::kafka_protocol::protocol::{Encodable, StrBytes};
use floe_protocol::FileRegion;

const VERSION: i16 = 16;
const REGION: u32 = 64 * 1024;

/// A file of `len` bytes, written now (so cached), unlinked when dropped.
fn segment(len: usize) -> Arc<File> {
    let mut file = tempfile::tempfile().expect("temp file");
    let block = vec![0x5a_u8; 64 * 1024];
    let mut left = len;
    while left > 0 {
        let n = left.min(block.len());
        file.write_all(&block[..n]).expect("write");
        left -= n;
    }
    Arc::new(file)
}

/// A fetch of `partitions` partitions (16 to a topic), each `region_len`
/// bytes of `file`, consecutive.
fn fetch(partitions: u32, region_len: u32, file: &Arc<File>) -> FetchResponseData {
    let topics = partitions.div_ceil(16);
    let per_topic = partitions.min(16);
    let mut position = 0;
    FetchResponseData {
        topics: (0..topics)
            .map(|t| FetchTopicResponse {
                topic: StrBytes::from_string(format!("topic-{t}")),
                topic_id: Default::default(), // nil: costs the same 16 bytes as any id
                partitions: (0..per_topic as i32)
                    .map(|p| {
                        let region = FileRegion { file: file.clone(), position, len: region_len };
                        position += u64::from(region_len);
                        FetchPartitionResponse {
                            high_watermark: 1_000_000,
                            last_stable_offset: 1_000_000,
                            log_start_offset: 0,
                            records: FetchRecords::File(region),
                            ..FetchPartitionResponse::new(p)
                        }
                    })
                    .collect(),
            })
            .collect(),
        ..Default::default()
    }
}

/// `kafka-protocol`'s form of `data`, records copied into memory.
fn crate_response(data: &FetchResponseData) -> FetchResponse {
    FetchResponse::default().with_responses(
        data.topics
            .iter()
            .map(|t| {
                kp::FetchableTopicResponse::default()
                    .with_topic(TopicName(t.topic.clone()))
                    .with_topic_id(t.topic_id)
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                let records = match &p.records {
                                    FetchRecords::File(r) => {
                                        Some(Bytes::from(r.read_to_vec().expect("read")))
                                    }
                                    FetchRecords::Bytes(b) => Some(b.clone()),
                                    FetchRecords::Null => None,
                                };
                                kp::PartitionData::default()
                                    .with_partition_index(p.partition_index)
                                    .with_high_watermark(p.high_watermark)
                                    .with_last_stable_offset(p.last_stable_offset)
                                    .with_log_start_offset(p.log_start_offset)
                                    .with_aborted_transactions(None)
                                    .with_records(records)
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

fn encode(c: &mut Criterion) {
    let file = segment(256 * REGION as usize);
    let mut group = c.benchmark_group("encode");
    for partitions in [1u32, 16, 256] {
        let data = fetch(partitions, REGION, &file);
        group.throughput(Throughput::Elements(u64::from(partitions)));
        group.bench_with_input(BenchmarkId::from_parameter(partitions), &data, |b, data| {
            b.iter(|| encode_fetch_response(7, VERSION, black_box(data)).expect("encode"))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("crate_encode");
    for partitions in [1u32, 16, 256] {
        let response = crate_response(&fetch(partitions, REGION, &file));
        group.throughput(Throughput::Elements(u64::from(partitions)));
        group.bench_with_input(
            BenchmarkId::from_parameter(partitions),
            &response,
            |b, response| {
                b.iter(|| {
                    let header = ResponseHeader::default().with_correlation_id(7);
                    let size = header.compute_size(1).expect("size")
                        + response.compute_size(VERSION).expect("size");
                    let mut buf = Vec::with_capacity(4 + size);
                    buf.extend_from_slice(&(size as i32).to_be_bytes());
                    header.encode(&mut buf, 1).expect("encode");
                    black_box(response).encode(&mut buf, VERSION).expect("encode");
                    buf
                })
            },
        );
    }
    group.finish();
}

fn to_contiguous(c: &mut Criterion) {
    const MIB: u32 = 1024 * 1024;
    let file = segment(MIB as usize);
    let mut group = c.benchmark_group("to_contiguous");
    for (name, partitions, region) in [("1MiB_1x1MiB", 1, MIB), ("1MiB_16x64KiB", 16, REGION)] {
        let encoded =
            encode_fetch_response(7, VERSION, &fetch(partitions, region, &file)).expect("encode");
        group.throughput(Throughput::Bytes(encoded.total_len as u64));
        group.bench_function(name, |b| {
            b.iter(|| black_box(&encoded).to_contiguous().expect("pread"))
        });
    }
    group.finish();
}

criterion_group!(benches, encode, to_contiguous);
criterion_main!(benches);
