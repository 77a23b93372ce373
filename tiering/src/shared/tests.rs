//! Shared mode's read path end to end: logs tiered into a shared table and
//! its `__log`, read back with [`read_batches`], compared with the batches
//! the segment files hold (byte for byte when uncompressed, field by field
//! otherwise).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use floe_protocol::record_batch::{CompressionType, RecordBatchHeader};
use floe_protocol::records::{
    compress, parse_records, records_section, write_batch, write_record, BatchFields, HeaderView,
    RecordParts,
};
use floe_storage::ControlRecordType::{Abort, Commit};
use floe_storage::{PartitionLog, ScannedBatch, SegmentBatchReader};

use super::*;
use crate::catalog::IcebergCatalog;
use crate::table::{TierLimits, TopicTable};
use crate::test_util::*;

async fn catalog(dir: &std::path::Path) -> IcebergCatalog {
    IcebergCatalog::open_sqlite(
        "floe",
        &dir.join("iceberg/catalog.db"),
        &dir.join("iceberg/warehouse"),
        "kafka",
    )
    .await
    .unwrap()
}

/// Every batch of the log's sealed segments, as stored (CRC not checked: damaged ones too).
fn original_batches(log: &PartitionLog) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for seg in log.sealed_segments() {
        let mut reader = SegmentBatchReader::open(&seg.path, 0, seg.size_bytes).unwrap();
        loop {
            match reader.next_batch(false).unwrap() {
                ScannedBatch::Batch { .. } => out.push(reader.batch_bytes().unwrap().to_vec()),
                ScannedBatch::End => break,
                other => panic!("{other:?}"),
            }
        }
    }
    out
}

/// `bytes` cut into its batches.
fn split(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let n = RecordBatchHeader::parse(&bytes[pos..]).unwrap().total_size();
        out.push(bytes[pos..pos + n].to_vec());
        pos += n;
    }
    out
}

type Rec = (i64, i64, u8, Option<Vec<u8>>, Option<Vec<u8>>, Vec<(Vec<u8>, Option<Vec<u8>>)>);

fn records_of(batch: &[u8]) -> Vec<Rec> {
    let h = RecordBatchHeader::parse(batch).unwrap();
    let section = records_section(batch, &h).unwrap();
    parse_records(&section, &h)
        .unwrap()
        .iter()
        .map(|r| {
            let headers = r
                .headers()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
                .collect();
            (
                r.offset,
                r.timestamp_delta,
                r.attributes,
                r.key.map(<[u8]>::to_vec),
                r.value.map(<[u8]>::to_vec),
                headers,
            )
        })
        .collect()
}

/// `rebuilt` is `original` with its records compressed as `codec` says:
/// every header field and every record equal; byte for byte when both are uncompressed.
fn assert_same(original: &[u8], rebuilt: &[u8], codec: FetchCompression) {
    let (o, r) =
        (RecordBatchHeader::parse(original).unwrap(), RecordBatchHeader::parse(rebuilt).unwrap());
    let want_codec = match codec {
        FetchCompression::Original => o.compression().unwrap(),
        FetchCompression::None => CompressionType::None,
        FetchCompression::Gzip => CompressionType::Gzip,
        FetchCompression::Snappy => CompressionType::Snappy,
        FetchCompression::Lz4 => CompressionType::Lz4,
        FetchCompression::Zstd => CompressionType::Zstd,
    };
    assert_eq!(r.compression(), Some(want_codec), "batch {}", o.base_offset);
    let mut fo = BatchFields::of(&o);
    fo.attributes = (fo.attributes & !7) | i16::from(want_codec.id());
    assert_eq!(BatchFields::of(&r), fo, "batch {} header", o.base_offset);
    assert_eq!(records_of(rebuilt), records_of(original), "batch {} records", o.base_offset);
    floe_protocol::record_batch::verify_crc(rebuilt, 0).unwrap();
    if want_codec == CompressionType::None && o.compression() == Some(CompressionType::None) {
        assert_eq!(rebuilt, original, "batch {}: byte for byte", o.base_offset);
    }
}

async fn tables(t: &TopicTable) -> (iceberg::table::Table, iceberg::table::Table) {
    (t.load().await.unwrap(), t.log_table().unwrap().load().await.unwrap())
}

/// A batch written by hand: a header key twice and one not UTF-8, null and
/// empty keys and values (kafka_protocol's encoder takes headers as a map).
fn hand_written(codec: CompressionType) -> Vec<u8> {
    let mut plain = Vec::new();
    let none: [HeaderView<'_>; 0] = [];
    write_record(
        &mut plain,
        &RecordParts {
            attributes: 0,
            timestamp_delta: 0,
            offset_delta: 0,
            key: None,
            value: Some(b""),
        },
        none.into_iter(),
    );
    let hs: [HeaderView<'_>; 3] = [(b"h", Some(b"1")), (b"\xff\xfe", None), (b"h", Some(b""))];
    write_record(
        &mut plain,
        &RecordParts {
            attributes: 0,
            timestamp_delta: 7,
            offset_delta: 1,
            key: Some(b""),
            value: None,
        },
        hs.into_iter(),
    );
    let mut body = Vec::new();
    compress(codec, &plain, &mut body).unwrap();
    let fields = BatchFields {
        base_offset: 0,
        partition_leader_epoch: 0,
        attributes: i16::from(codec.id()),
        last_offset_delta: 1,
        base_timestamp: 1_700_000_000_000,
        max_timestamp: 1_700_000_000_007,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        records_count: 2,
    };
    let mut out = Vec::new();
    write_batch(&mut out, &fields, &body);
    out
}

async fn tier_shared(dir: &std::path::Path, log: &Arc<PartitionLog>) -> TopicTable {
    let cat = catalog(dir).await;
    let t = cat.shared_topic_table("t", "id-1", "identity(partition)").await.unwrap();
    t.tier(std::slice::from_ref(log), &TierLimits::default()).await.unwrap();
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_codec_and_header_shape_rebuilds_to_the_logs_batches() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[("segment.bytes", "3000")]));
    fill(&log, 0, 60);
    for codec in [CompressionType::None, CompressionType::Gzip, CompressionType::Zstd] {
        log.append(&mut hand_written(codec), 0).unwrap();
    }
    fill(&log, 66, 20);
    log.roll_now().unwrap();
    assert!(log.sealed_segments().len() > 1, "several segments, several files");
    let t = tier_shared(dir.path(), &log).await;
    let (main, log_table) = tables(&t).await;
    let originals = original_batches(&log);
    for codec in [
        FetchCompression::Original,
        FetchCompression::None,
        FetchCompression::Lz4,
        FetchCompression::Snappy,
    ] {
        let got = read_batches(&main, &log_table, 0, 0, 86, usize::MAX, codec).await.unwrap();
        assert_eq!(got.mismatches, 0);
        assert_eq!(got.next_offset, 86);
        assert!(got.aborted.is_empty());
        let rebuilt = split(&got.bytes);
        assert_eq!(rebuilt.len(), originals.len(), "{codec:?}");
        for (o, r) in originals.iter().zip(&rebuilt) {
            assert_same(o, r, codec);
        }
    }
    // The original bytes again, for the uncompressed ones.
    let got = read_batches(&main, &log_table, 0, 0, 86, usize::MAX, FetchCompression::Original)
        .await
        .unwrap();
    let plain = split(&got.bytes)
        .into_iter()
        .zip(&originals)
        .filter(|(_, o)| {
            RecordBatchHeader::parse(o).unwrap().compression() == Some(CompressionType::None)
        })
        .count();
    assert!(plain >= 4, "{plain} uncompressed batches compared byte for byte");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markers_aborted_records_and_a_damaged_batch_come_back_as_the_log_holds_them() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[]));
    fill(&log, 0, 10); // 0-4, 5-9 (damaged below)
    log.append(&mut transactional(1, 0, 5), 0).unwrap(); // 10-14, aborted
    log.append_txn_marker(1, 0, Abort, 0, 1).unwrap(); // 15
    log.append(&mut transactional(2, 0, 5), 0).unwrap(); // 16-20, committed
    log.append_txn_marker(2, 0, Commit, 0, 1).unwrap(); // 21
    fill(&log, 22, 5); // 22-26
    log.roll_now().unwrap();
    let seg = &log.sealed_segments()[0];
    let bytes = std::fs::read(&seg.path).unwrap();
    let first = RecordBatchHeader::parse(&bytes).unwrap().total_size();
    let mut damaged = bytes.clone();
    damaged[first + 61 + 3] ^= 0xa5;
    std::fs::write(&seg.path, &damaged).unwrap();
    let t = tier_shared(dir.path(), &log).await;
    let (main, log_table) = tables(&t).await;
    let originals = original_batches(&log);
    assert_eq!(originals.len(), 7);
    let got = read_batches(&main, &log_table, 0, 0, 27, usize::MAX, FetchCompression::Original)
        .await
        .unwrap();
    assert_eq!((got.next_offset, got.mismatches), (27, 0));
    assert_eq!(got.aborted, vec![(1, 10)]);
    let rebuilt = split(&got.bytes);
    assert_eq!(rebuilt.len(), 7);
    assert_eq!(rebuilt[1], originals[1], "the damaged batch verbatim (its CRC still fails)");
    assert!(floe_protocol::record_batch::verify_crc(&rebuilt[1], 0).is_err());
    for i in [0, 2, 3, 4, 5, 6] {
        assert_same(&originals[i], &rebuilt[i], FetchCompression::Original);
    }
    for i in [3, 5] {
        assert!(
            RecordBatchHeader::parse(&rebuilt[i]).unwrap().is_control(),
            "batch {i} is a marker"
        );
    }
    // Forced compression leaves the opaque batch alone and compresses the markers too.
    let got = read_batches(&main, &log_table, 0, 0, 27, usize::MAX, FetchCompression::Zstd)
        .await
        .unwrap();
    let rebuilt = split(&got.bytes);
    assert_eq!(rebuilt[1], originals[1]);
    assert_same(&originals[3], &rebuilt[3], FetchCompression::Zstd);
    // KIP-98: from inside the aborted transaction its marker is listed; after the marker, not.
    let got = read_batches(&main, &log_table, 0, 12, 27, usize::MAX, FetchCompression::Original)
        .await
        .unwrap();
    assert_eq!(split(&got.bytes)[0], originals[2], "the batch containing the fetch offset, whole");
    assert_eq!(got.aborted, vec![(1, 10)]);
    // From inside the damaged batch: it comes whole, verbatim.
    let got =
        read_batches(&main, &log_table, 0, 7, 27, 1, FetchCompression::Original).await.unwrap();
    assert_eq!((got.bytes.as_slice(), got.next_offset), (originals[1].as_slice(), 10));
    let got = read_batches(&main, &log_table, 0, 16, 27, usize::MAX, FetchCompression::Original)
        .await
        .unwrap();
    assert!(got.aborted.is_empty());
    assert_eq!(split(&got.bytes).len(), 3);
    // Below the transaction's first offset the response [0, 5) does not list it.
    let got =
        read_batches(&main, &log_table, 0, 0, 27, 1, FetchCompression::Original).await.unwrap();
    assert_eq!((got.batches, got.next_offset), (1, 5));
    assert!(got.aborted.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_bytes_a_mid_batch_offset_and_log_append_time() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(
        &dir.path().join("t-0"),
        0,
        &[("message.timestamp.type", "LogAppendTime")],
    ));
    let records: Vec<TestRecord> = (0..30).map(record).collect();
    for (b, chunk) in records.chunks(5).enumerate() {
        log.append(&mut encode(chunk, CODECS[b % CODECS.len()]), 1_700_000_500_000 + b as i64)
            .unwrap();
    }
    log.roll_now().unwrap();
    let t = tier_shared(dir.path(), &log).await;
    let (main, log_table) = tables(&t).await;
    let originals = original_batches(&log);
    assert_eq!(originals.len(), 6);
    assert_eq!(
        RecordBatchHeader::parse(&originals[0]).unwrap().timestamp_type(),
        floe_protocol::record_batch::TimestampType::LogAppendTime
    );
    let all = read_batches(&main, &log_table, 0, 0, 30, usize::MAX, FetchCompression::Original)
        .await
        .unwrap();
    for (o, r) in originals.iter().zip(split(&all.bytes)) {
        assert_same(o, &r, FetchCompression::Original);
    }
    let sizes: Vec<usize> = originals.iter().map(Vec::len).collect();
    // The first batch whole even past max_bytes (KIP-74).
    let one =
        read_batches(&main, &log_table, 0, 0, 30, 1, FetchCompression::Original).await.unwrap();
    assert_eq!((one.batches, one.next_offset, one.bytes.len()), (1, 5, sizes[0]));
    // Stops before the batch that would pass max_bytes.
    let two = read_batches(
        &main,
        &log_table,
        0,
        0,
        30,
        sizes[0] + sizes[1] + sizes[2] - 1,
        FetchCompression::Original,
    )
    .await
    .unwrap();
    assert_eq!((two.batches, two.next_offset), (2, 10));
    let three = read_batches(
        &main,
        &log_table,
        0,
        0,
        30,
        sizes[0] + sizes[1] + sizes[2],
        FetchCompression::Original,
    )
    .await
    .unwrap();
    assert_eq!((three.batches, three.next_offset), (3, 15));
    // From an offset in the middle of a batch: that batch whole.
    let mid =
        read_batches(&main, &log_table, 0, 7, 30, 1, FetchCompression::Original).await.unwrap();
    assert_eq!(mid.next_offset, 10);
    assert_same(&originals[1], &split(&mid.bytes)[0], FetchCompression::Original);
    // `upper` bounds the range: the batch at it is not served.
    let bounded = read_batches(&main, &log_table, 0, 0, 20, usize::MAX, FetchCompression::Original)
        .await
        .unwrap();
    assert_eq!((bounded.batches, bounded.next_offset), (4, 20));
    // Nothing at or above the table's end.
    let past = read_batches(&main, &log_table, 0, 30, 40, usize::MAX, FetchCompression::Original)
        .await
        .unwrap();
    assert_eq!((past.batches, past.next_offset), (0, 30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_rows_of_a_crashed_pass_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[]));
    fill(&log, 0, 10);
    log.roll_now().unwrap();
    let t = tier_shared(dir.path(), &log).await;
    // The next pass commits `__log` (an aborted transaction) and crashes before the main table.
    log.append(&mut transactional(1, 0, 5), 0).unwrap(); // 10-14
    log.append_txn_marker(1, 0, Abort, 0, 1).unwrap(); // 15
    log.roll_now().unwrap();
    let prepared = t
        .prepare(std::slice::from_ref(&log), &TierLimits::default(), &AtomicBool::new(false))
        .await
        .unwrap();
    t.commit_log_only(prepared).await.unwrap();
    let (main, log_table) = tables(&t).await;
    let index = FileIndex::load(&main, &log_table).await.unwrap();
    assert_eq!(index.next_offset(0), Some(10));
    assert!(index.abort_markers.is_empty(), "{:?}", index.abort_markers);
    let got = read_batches(&main, &log_table, 0, 0, 16, usize::MAX, FetchCompression::Original)
        .await
        .unwrap();
    assert_eq!((got.batches, got.next_offset), (2, 10));
    assert!(got.aborted.is_empty());
    // The pass that commits the main table makes them live.
    t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    let (main, log_table) = tables(&t).await;
    let got = read_batches(&main, &log_table, 0, 0, 16, usize::MAX, FetchCompression::Original)
        .await
        .unwrap();
    assert_eq!((got.batches, got.next_offset), (4, 16));
    assert_eq!(got.aborted, vec![(1, 10)]);
    let originals = original_batches(&log);
    for (o, r) in originals.iter().zip(split(&got.bytes)) {
        assert_same(o, &r, FetchCompression::Original);
    }
}

#[test]
fn the_file_index_picks_overlapping_files_and_lists_aborts_by_kip_98() {
    let f = |lower, upper| DataFileRef {
        lower,
        upper,
        path: format!("{lower}"),
        size: 1,
        max_timestamp_ms: i64::MAX,
    };
    let index = FileIndex {
        main: [(0, vec![f(0, 9), f(10, 19), f(20, 29)])].into(),
        log: [(0, vec![f(5, 15)])].into(),
        dlq: Default::default(),
        next_offsets: [(0, 30)].into(),
        abort_markers: [(0, vec![AbortMarker { offset: 15, producer_id: 1, first_offset: 10 }])]
            .into(),
        opaque: [(0, vec![(40, 44)])].into(),
    };
    assert_eq!(
        (index.opaque_base(0, 40), index.opaque_base(0, 42), index.opaque_base(0, 45)),
        (None, Some(40), None)
    );
    let paths: Vec<&str> = index.main_files(0, 9, 20).map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["0", "10"]);
    assert_eq!(index.main_files(1, 0, 100).count(), 0);
    assert_eq!(index.log_files(0, 16, 30).count(), 0);
    assert_eq!(index.aborted_transactions(0, 0, 11), vec![(1, 10)]);
    assert!(index.aborted_transactions(0, 0, 10).is_empty(), "starts at the response's end");
    assert!(index.aborted_transactions(0, 16, 30).is_empty(), "marker before the fetch offset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_row_groups_whose_offset_statistics_overlap_are_read() {
    use crate::convert::{ArrowConverter, RowLayout};
    use crate::shared::read::{read_row_group, row_groups, Side};
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[]));
    fill(&log, 0, 100);
    log.roll_now().unwrap();
    // A file of ten-row row groups (the sink's are 64 Ki rows: one per file in these tests).
    let mut conv = ArrowConverter::with_layout(0, 10, usize::MAX, RowLayout::Lossless);
    let path = dir.path().join("groups.parquet");
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(10))
        .build();
    let mut writer = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&path).unwrap(),
        crate::schema::lossless_arrow_schema(),
        Some(props),
    )
    .unwrap();
    for b in original_batches(&log) {
        let h = RecordBatchHeader::parse(&b).unwrap();
        conv.push(&h, bytes::Bytes::from(b), 0);
        if conv.is_full() {
            writer.write(&conv.finish().unwrap().unwrap()).unwrap();
        }
    }
    writer.close().unwrap();
    let t = tier_shared(dir.path(), &log).await;
    let (main, _) = tables(&t).await;
    let file = DataFileRef {
        lower: 0,
        upper: 99,
        path: path.display().to_string(),
        size: 0,
        max_timestamp_ms: i64::MAX,
    };
    let groups = row_groups(&main, Side::Main, &[&file], 35, 47).await.unwrap();
    let picked: Vec<(usize, i64, i64)> =
        groups.iter().map(|g| (g.row_group, g.min, g.max)).collect();
    assert_eq!(picked, [(3, 30, 39), (4, 40, 49)]);
    let mut offsets = Vec::new();
    for g in &groups {
        offsets.extend(read_row_group(&main, g, 0, 35, 47).await.unwrap().iter().map(|r| r.offset));
    }
    assert_eq!(offsets, (35..47).collect::<Vec<_>>());
    assert!(
        read_row_group(&main, &groups[0], 1, 0, 100).await.unwrap().is_empty(),
        "another partition's rows are filtered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_through_several_passes_files_equals_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[]));
    let cat = catalog(dir.path()).await;
    let t = cat.shared_topic_table("t", "id-1", "identity(partition)").await.unwrap();
    let mut next = 0;
    for pass in 0..3 {
        fill(&log, next, 15);
        next += 15;
        log.append(&mut transactional(pass + 1, 0, 3), 0).unwrap();
        log.append_txn_marker(pass + 1, 0, if pass == 1 { Abort } else { Commit }, 0, 1).unwrap();
        next += 4;
        log.roll_now().unwrap();
        t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    }
    let (main, log_table) = tables(&t).await;
    let index = FileIndex::load(&main, &log_table).await.unwrap();
    assert_eq!(index.main[&0].len(), 3, "a file per pass");
    assert_eq!(index.next_offset(0), Some(next as i64));
    let originals = original_batches(&log);
    let mut got = Vec::new();
    let mut from = 0;
    let mut aborted = Vec::new();
    while from < next as i64 {
        let r = read_batches_with_index(
            &main,
            &log_table,
            &index,
            0,
            from,
            next as i64,
            200,
            FetchCompression::Original,
        )
        .await
        .unwrap();
        assert!(r.next_offset > from, "progress from {from}");
        assert_eq!(r.mismatches, 0);
        aborted.extend(r.aborted);
        got.extend(split(&r.bytes));
        from = r.next_offset;
    }
    assert_eq!(got.len(), originals.len());
    for (o, r) in originals.iter().zip(&got) {
        assert_same(o, r, FetchCompression::Original);
    }
    aborted.dedup();
    assert_eq!(aborted, vec![(2, 34)], "pass 1's transaction: offsets 34-36, its marker 37");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_that_differs_from_the_stored_crc_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[]));
    fill(&log, 0, 5); // one uncompressed batch
    log.roll_now().unwrap();
    let t = tier_shared(dir.path(), &log).await;
    let (main, log_table) = tables(&t).await;
    let index = FileIndex::load(&main, &log_table).await.unwrap();
    let mut rows =
        crate::shared::read::read_rows(&main, &log_table, &index, 0, 0, 5).await.unwrap();
    let mut out = Vec::new();
    assert!(!crate::shared::rebuild::rebuild(&rows, FetchCompression::Original, &mut out).unwrap());
    assert_eq!(out, original_batches(&log)[0]);
    rows[2].value = Some(b"changed".to_vec());
    assert!(
        crate::shared::rebuild::rebuild(&rows, FetchCompression::Original, &mut Vec::new())
            .unwrap(),
        "a mismatch"
    );
    // Fewer rows than recordsCount (a batch straddling the log start): not comparable, not counted.
    assert!(!crate::shared::rebuild::rebuild(
        &rows[3..],
        FetchCompression::Original,
        &mut Vec::new()
    )
    .unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_range_recovery_kept_is_stepped_over() {
    let dir = tempfile::tempdir().unwrap();
    let overrides = [("segment.bytes", "2000")];
    let log = open_log(&dir.path().join("t-0"), 0, &overrides);
    fill(&log, 0, 60);
    log.roll_now().unwrap();
    let before = original_batches(&log);
    let seg = log.sealed_segments()[0].path.clone();
    log.close().unwrap();
    // The second batch's length made absurd: recovery keeps the range and steps over it.
    let mut bytes = std::fs::read(&seg).unwrap();
    let h = floe_protocol::record_batch::BatchIter::new(&bytes).nth(1).unwrap().unwrap();
    bytes[h.position + 8..h.position + 12].copy_from_slice(&[0x7f, 0, 0, 0]);
    std::fs::write(&seg, &bytes).unwrap();
    let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &overrides));
    let ranges = log.corrupt_ranges();
    assert_eq!(ranges.len(), 1, "{ranges:?}");
    assert_eq!((ranges[0].first_offset, ranges[0].last_offset), (5, Some(9)));
    let t = tier_shared(dir.path(), &log).await;
    let (main, log_table) = tables(&t).await;
    let got = read_batches(&main, &log_table, 0, 0, 60, usize::MAX, FetchCompression::Original)
        .await
        .unwrap();
    assert_eq!(got.next_offset, 60);
    let rebuilt = split(&got.bytes);
    let want: Vec<&Vec<u8>> =
        before.iter().enumerate().filter(|(i, _)| *i != 1).map(|(_, b)| b).collect();
    assert_eq!(rebuilt.len(), want.len());
    for (o, r) in want.iter().zip(&rebuilt) {
        assert_same(o, r, FetchCompression::Original);
    }
    // From inside the hole: the next batch, as the log's own read does.
    let got =
        read_batches(&main, &log_table, 0, 7, 60, 1, FetchCompression::Original).await.unwrap();
    assert_eq!(RecordBatchHeader::parse(&got.bytes).unwrap().base_offset, 10);
    assert_eq!(got.next_offset, 15);
    // From the hole's first offset: the hole is stepped over within one answer.
    let got =
        read_batches(&main, &log_table, 0, 5, 60, 1, FetchCompression::Original).await.unwrap();
    assert_eq!((got.batches, got.next_offset), (1, 15));
}
