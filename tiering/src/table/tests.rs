//! The table's passes against a real SQL catalog and real partition logs: plan, walk and
//! commit together, crashes between commits, racing and deposed writers, orphans.

use std::collections::BTreeSet;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::Array;

use super::*;
use crate::catalog::IcebergCatalog;
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

async fn scanned_offsets(t: &TopicTable) -> Vec<i64> {
    let batches = scan_columns(t, &["offset"]).await;
    let mut v: Vec<i64> = batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    v.sort_unstable();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_segments_are_tiered_once_and_resume_from_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[("segment.bytes", "2000")]));
    fill(&log, 0, 200);
    let sealed_end = log.sealed_segments().last().unwrap().next_offset;
    let cat = catalog(dir.path()).await;
    let t = cat.topic_table("t", "id-1", "day(timestamp)").await.unwrap();
    let limits = TierLimits { arrow_batch_rows: 16, ..TierLimits::default() };
    let out = t.tier(std::slice::from_ref(&log), &limits).await.unwrap();
    assert_eq!(out.committed[&0], (0, sealed_end - 1));
    assert_eq!(out.rows, sealed_end as u64);
    assert!(out.files >= 1 && out.bytes > 0);
    assert!(out.skipped.is_empty());
    // Nothing new: nothing committed.
    let again = t.tier(std::slice::from_ref(&log), &limits).await.unwrap();
    assert!(again.committed.is_empty());
    assert_eq!(again.next_offsets[&0], sealed_end);
    // The active segment rolls; the rest follows, read back from a fresh catalog (a restart).
    fill(&log, 200, 30);
    log.roll_now().unwrap();
    drop(cat);
    let cat = catalog(dir.path()).await;
    let t = cat.topic_table("t", "id-1", "day(timestamp)").await.unwrap();
    assert_eq!(t.committed_next_offsets().await.unwrap()[&0], sealed_end);
    assert!(
        matches!(
            cat.topic_table("t", "id-2", "day(timestamp)").await,
            Err(TieringError::TopicMismatch { .. })
        ),
        "a re-created topic of the same name"
    );
    let out = t.tier(std::slice::from_ref(&log), &limits).await.unwrap();
    assert_eq!(out.committed[&0], (sealed_end, 229));
    assert_eq!(scanned_offsets(&t).await, (0..230).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_open_and_control_records_never_become_rows() {
    use floe_storage::ControlRecordType::{Abort, Commit};
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[]));
    fill(&log, 0, 10); // 0-9
    log.append(&mut transactional(1, 0, 5), 0).unwrap(); // 10-14, aborted
    log.append_txn_marker(1, 0, Abort, 0, 1).unwrap(); // 15
    log.append(&mut transactional(2, 0, 5), 0).unwrap(); // 16-20, committed
    log.append_txn_marker(2, 0, Commit, 0, 1).unwrap(); // 21
    fill(&log, 22, 5); // 22-26
    log.roll_now().unwrap();
    log.append(&mut transactional(3, 0, 3), 0).unwrap(); // 27-29, open
    fill(&log, 30, 5); // 30-34
    log.roll_now().unwrap();
    let cat = catalog(dir.path()).await;
    let t = cat.topic_table("t", "id-1", "").await.unwrap();
    let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    assert_eq!(out.committed[&0], (0, 26), "the segment of the open transaction waits");
    let committed: Vec<i64> = (0..10).chain(16..21).chain(22..27).collect();
    assert_eq!(scanned_offsets(&t).await, committed);
    // The transaction commits (its marker in the active segment): the waiting segment is stable.
    log.append_txn_marker(3, 0, Commit, 0, 1).unwrap();
    log.roll_now().unwrap();
    let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    assert_eq!(out.committed[&0], (27, 35));
    let all: Vec<i64> = committed.into_iter().chain(27..35).collect();
    assert_eq!(scanned_offsets(&t).await, all, "no row for a marker (offset 35)");
}

/// `(offset, kind)` of a shared table's `__log` rows, in offset order.
async fn log_rows(t: &TopicTable) -> Vec<(i64, String, Option<i64>)> {
    let batches =
        scan_columns(t.log_table().unwrap(), &["offset", "kind", "txn_first_offset"]).await;
    let mut v = Vec::new();
    for b in &batches {
        let (o, k, f) = (
            b.column(0).as_primitive::<Int64Type>(),
            b.column(1).as_string::<i32>(),
            b.column(2).as_primitive::<Int64Type>(),
        );
        for i in 0..b.num_rows() {
            v.push((o.value(i), k.value(i).to_string(), f.is_valid(i).then(|| f.value(i))));
        }
    }
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_table_holds_every_offset_once_across_it_and_its_log_table() {
    use floe_storage::ControlRecordType::{Abort, Commit};
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
    let first = floe_protocol::record_batch::RecordBatchHeader::parse(&bytes).unwrap().total_size();
    let mut damaged = bytes.clone();
    damaged[first + 61 + 3] ^= 0xa5;
    std::fs::write(&seg.path, &damaged).unwrap();
    let cat = catalog(dir.path()).await;
    let t = cat.shared_topic_table("t", "id-1", "identity(partition)").await.unwrap();
    // A crash after the `__log` commit: the next pass commits the main table and no `__log` row twice.
    let prepared = t
        .prepare(std::slice::from_ref(&log), &TierLimits::default(), &AtomicBool::new(false))
        .await
        .unwrap();
    t.commit_log_only(prepared).await.unwrap();
    assert!(scanned_offsets(&t).await.is_empty());
    let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    assert_eq!(out.committed[&0], (0, 26));
    let main: Vec<i64> = (0..5).chain(16..21).chain(22..27).collect();
    assert_eq!(scanned_offsets(&t).await, main, "the main table keeps what READ_COMMITTED keeps");
    let mut want: Vec<(i64, String, Option<i64>)> = vec![(5, "opaque".into(), None)];
    want.extend((10..15).map(|o| (o, "aborted".to_string(), None)));
    want.push((15, "abort_marker".into(), Some(10)));
    want.push((21, "commit_marker".into(), None));
    assert_eq!(log_rows(&t).await, want);
    // Every offset once across both tables (the opaque row stands for its batch, 5-9).
    let mut all: Vec<i64> = main.iter().copied().chain(want.iter().map(|w| w.0)).collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), main.len() + want.len(), "no offset in both tables");
    // The lossless columns hold each batch's header as stored.
    let b = scan_columns(
        &t,
        &[
            "offset",
            "batch_crc",
            "batch_last_offset_delta",
            "batch_records_count",
            "batch_base_timestamp",
        ],
    )
    .await;
    let headers: std::collections::BTreeMap<i64, floe_protocol::record_batch::RecordBatchHeader> =
        floe_protocol::record_batch::BatchIter::new(&damaged)
            .map(|h| h.unwrap().header)
            .map(|h| (h.base_offset, h))
            .collect();
    for batch in &b {
        let (off, crc, lod, count, base_ts) = (
            batch.column(0).as_primitive::<Int64Type>(),
            batch.column(1).as_primitive::<Int64Type>(),
            batch.column(2).as_primitive::<arrow_array::types::Int32Type>(),
            batch.column(3).as_primitive::<arrow_array::types::Int32Type>(),
            batch.column(4).as_primitive::<Int64Type>(),
        );
        for i in 0..batch.num_rows() {
            let h = headers.range(..=off.value(i)).next_back().unwrap().1;
            assert_eq!(crc.value(i), i64::from(h.crc));
            assert_eq!(
                (lod.value(i), count.value(i), base_ts.value(i)),
                (h.last_offset_delta, h.records_count, h.base_timestamp)
            );
        }
    }
    // A copy-mode table cannot be opened shared.
    cat.topic_table("c", "id-2", "").await.unwrap();
    assert!(matches!(
        cat.shared_topic_table("c", "id-2", "").await,
        Err(TieringError::NotLossless { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_batch_is_reported_skipped_and_covered() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[]));
    fill(&log, 0, 15); // batches [0,5) [5,10) [10,15)
    log.roll_now().unwrap();
    // Damage the middle batch's records (after its 61-byte header); the log's own checks ran at append.
    let seg = &log.sealed_segments()[0];
    let bytes = std::fs::read(&seg.path).unwrap();
    let first = floe_protocol::record_batch::RecordBatchHeader::parse(&bytes).unwrap().total_size();
    let mut damaged = bytes.clone();
    let at = first + 61 + 3;
    for b in &mut damaged[at..at + 8] {
        *b ^= 0xa5;
    }
    std::fs::write(&seg.path, &damaged).unwrap();
    let cat = catalog(dir.path()).await;
    let t = cat.topic_table("t", "id-1", "").await.unwrap();
    let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    assert_eq!(out.skipped.len(), 1, "{:?}", out.skipped);
    assert_eq!((out.skipped[0].first_offset, out.skipped[0].last_offset), (5, 9));
    assert_eq!(out.committed[&0], (0, 14), "the skipped range is covered, not retried forever");
    let offsets = scanned_offsets(&t).await;
    assert_eq!(offsets, (0..5).chain(10..15).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_pass_commits_whole_batches_and_the_next_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[]));
    fill(&log, 0, 15);
    log.roll_now().unwrap();
    let cat = catalog(dir.path()).await;
    let t = cat.topic_table("t", "id-1", "").await.unwrap();
    let out = t
        .tier_until(std::slice::from_ref(&log), &TierLimits::default(), &AtomicBool::new(true))
        .await
        .unwrap();
    assert!(out.committed.is_empty(), "stopped before the first batch: {out:?}");
    let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    assert_eq!(out.committed[&0], (0, 14));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_are_files_in_no_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[]));
    fill(&log, 0, 20);
    log.roll_now().unwrap();
    let cat = catalog(dir.path()).await;
    let t = cat.topic_table("t", "id-1", "").await.unwrap();
    t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    let data = dir.path().join("iceberg/warehouse/kafka/t/data");
    let committed: Vec<_> = std::fs::read_dir(&data).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(committed.len(), 1, "{committed:?}");
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    std::fs::File::options().write(true).open(&committed[0]).unwrap().set_modified(old).unwrap();
    let orphan = data.join("floe-crashed.parquet");
    let young = data.join("floe-in-flight.parquet");
    for p in [&orphan, &young] {
        std::fs::write(p, b"PAR1").unwrap();
    }
    std::fs::File::options().write(true).open(&orphan).unwrap().set_modified(old).unwrap();
    let hour = std::time::Duration::from_secs(3600);
    let want = vec![orphan.display().to_string()];
    assert_eq!(t.clean_orphans(hour, false).await.unwrap(), want);
    assert!(orphan.exists());
    assert_eq!(t.clean_orphans(hour, true).await.unwrap(), want);
    assert!(!orphan.exists() && young.exists() && committed[0].exists());
    assert_eq!(scanned_offsets(&t).await, (0..20).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_never_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let logs: Vec<Arc<PartitionLog>> = (0..2)
        .map(|p| {
            Arc::new(open_log(&dir.path().join(format!("t-{p}")), p, &[("segment.bytes", "1500")]))
        })
        .collect();
    for log in &logs {
        fill(log, 0, 100);
        log.roll_now().unwrap();
    }
    // Two catalogs, so two lock maps: as two processes would be.
    let (a, b) = (catalog(dir.path()).await, catalog(dir.path()).await);
    let ta = a.topic_table("t", "id-1", "identity(partition), hour(timestamp)").await.unwrap();
    let tb = b.topic_table("t", "id-1", "identity(partition), hour(timestamp)").await.unwrap();
    let limits = TierLimits { max_bytes_per_partition: 1, ..TierLimits::default() };
    for _ in 0..20 {
        let (ra, rb) = tokio::join!(ta.tier(&logs, &limits), tb.tier(&logs, &limits));
        for r in [ra, rb] {
            match r {
                Ok(_) | Err(TieringError::StaleSnapshot { .. }) => {}
                // SQLite can refuse a second writer outright; also not a commit.
                Err(TieringError::Iceberg { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
    }
    let next = ta.committed_next_offsets().await.unwrap();
    assert_eq!(next, BTreeMap::from([(0, 100), (1, 100)]));
    let offsets = scanned_offsets(&ta).await;
    assert_eq!(offsets.len(), 200, "every offset once");
    assert_eq!(offsets.iter().copied().collect::<BTreeSet<_>>().len(), 100);
}

async fn scanned_partition_offsets(t: &TopicTable) -> Vec<(i32, i64)> {
    let batches = scan_columns(t, &["partition", "offset"]).await;
    let mut v: Vec<(i32, i64)> = batches
        .iter()
        .flat_map(|b| {
            let p = b.column(0).as_primitive::<arrow_array::types::Int32Type>().values().to_vec();
            let o = b.column(1).as_primitive::<Int64Type>().values().to_vec();
            p.into_iter().zip(o)
        })
        .collect();
    v.sort_unstable();
    v
}

/// Two brokers (two catalogs: two lock maps), each leading one partition of the table.
async fn two_writers(dir: &std::path::Path) -> (Vec<Arc<PartitionLog>>, TopicTable, TopicTable) {
    let logs: Vec<Arc<PartitionLog>> = (0..2)
        .map(|p| Arc::new(open_log(&dir.join(format!("t-{p}")), p, &[("segment.bytes", "1500")])))
        .collect();
    for log in &logs {
        fill(log, 0, 100);
        log.roll_now().unwrap();
    }
    let (a, b) = (catalog(dir).await, catalog(dir).await);
    let ta = a.topic_table("t", "id-1", "identity(partition)").await.unwrap().with_broker_id(1);
    let tb = b.topic_table("t", "id-1", "identity(partition)").await.unwrap().with_broker_id(2);
    (logs, ta, tb)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_of_another_partition_under_the_plan_is_not_a_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let (logs, ta, tb) = two_writers(dir.path()).await;
    // A plans partition 0; B commits partition 1 meanwhile; A's commit goes on top of B's.
    let prepared =
        ta.prepare(&logs[..1], &TierLimits::default(), &AtomicBool::new(false)).await.unwrap();
    assert_eq!(prepared.ranges()[&0], (0, 99));
    let b_out = tb.tier(&logs[1..], &TierLimits::default()).await.unwrap();
    assert_eq!(b_out.committed[&1], (0, 99));
    let a_out = ta.commit(prepared).await.unwrap();
    assert_eq!(a_out.committed[&0], (0, 99));
    assert_eq!(
        a_out.next_offsets,
        BTreeMap::from([(0, 100), (1, 100)]),
        "planned on a stale table, reported from the fresh one"
    );
    let table = ta.load().await.unwrap();
    let current = table.metadata().current_snapshot().unwrap();
    assert_eq!(
        current.parent_snapshot_id(),
        b_out.snapshot_id,
        "on top of B's commit, not over it"
    );
    let summary = &current.summary().additional_properties;
    assert_eq!(summary["floe.next-offset.1"], "100", "the summary carries B's offsets");
    assert_eq!(summary[BROKER_ID_PROPERTY], "1");
    let want: Vec<(i32, i64)> = (0..2).flat_map(|p| (0..100).map(move |o| (p, o))).collect();
    assert_eq!(scanned_partition_offsets(&ta).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_writer_cannot_commit_a_partition_tiered_since_its_plan() {
    let dir = tempfile::tempdir().unwrap();
    let (logs, ta, tb) = two_writers(dir.path()).await;
    // A (the old leader of partition 0) plans it and stalls; B (the new leader) tiers it.
    let stale =
        ta.prepare(&logs[..1], &TierLimits::default(), &AtomicBool::new(false)).await.unwrap();
    let b_out = tb.tier(&logs[..1], &TierLimits::default()).await.unwrap();
    assert_eq!(b_out.committed[&0], (0, 99));
    match ta.commit(stale).await {
        Err(TieringError::StaleSnapshot { current, .. }) => assert_eq!(current, b_out.snapshot_id),
        other => panic!("the deposed writer's commit must fail: {other:?}"),
    }
    // A's next plan starts where B stopped: nothing left to do for partition 0.
    let again = ta.tier(&logs[..1], &TierLimits::default()).await.unwrap();
    assert!(again.committed.is_empty(), "{again:?}");
    let want: Vec<(i32, i64)> = (0..100).map(|o| (0, o)).collect();
    assert_eq!(scanned_partition_offsets(&ta).await, want, "every offset once");
    let summary = ta
        .load()
        .await
        .unwrap()
        .metadata()
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties
        .clone();
    assert_eq!(summary[BROKER_ID_PROPERTY], "2");
}

/// Whole-path throughput: sealed segments → Arrow → Parquet (zstd) → commit.
/// `cargo test -p floe-tiering -- --ignored --nocapture tier_throughput`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn tier_throughput() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[("segment.bytes", "8388608")]));
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for b in 0..8000 {
        let recs: Vec<TestRecord> = (0..5)
            .map(|i| TestRecord {
                key: Some(format!("k{b}-{i}").into_bytes()),
                // Half-compressible values: 512 random bytes then 512 zeros.
                value: Some(
                    (0..1024)
                        .map(|j| {
                            if j < 512 {
                                x ^= x << 13;
                                x ^= x >> 7;
                                x ^= x << 17;
                                x as u8
                            } else {
                                0
                            }
                        })
                        .collect(),
                ),
                headers: vec![],
                timestamp: 1_700_000_000_000 + b,
            })
            .collect();
        log.append(&mut encode(&recs, floe_protocol::kafka_protocol::records::Compression::Lz4), 0)
            .unwrap();
    }
    log.roll_now().unwrap();
    let bytes: u64 = log.sealed_segments().iter().map(|s| s.size_bytes).sum();
    let cat = catalog(dir.path()).await;
    let t = cat.topic_table("t", "id-1", "day(timestamp)").await.unwrap();
    let start = std::time::Instant::now();
    let out = t
        .tier(
            std::slice::from_ref(&log),
            &TierLimits { max_bytes_per_partition: u64::MAX, ..TierLimits::default() },
        )
        .await
        .unwrap();
    let took = start.elapsed().as_secs_f64();
    assert_eq!(out.rows, 40_000);
    println!("tiered {bytes} segment bytes into {} Parquet bytes ({} files) in {took:.3}s: {:.1} MiB/s of segment, {:.0} records/s",
        out.bytes, out.files, bytes as f64 / took / 1048576.0, 40_000.0 / took);
}
