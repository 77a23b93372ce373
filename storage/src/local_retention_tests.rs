//! Tests of shared storage's local retention (`docs/shared-mode.md` 3.1,
//! stage 6): local segments go only below the retention floor (the table's
//! committed next offset) and by `local.retention.*`; the local log start
//! offset moves, the log start offset does not; both survive a reopen; reads
//! between them answer `BelowLocalStart`; copy mode is unchanged.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::config::LogConfig;
use crate::log::PartitionLog;
use crate::log_manager::LogManager;
use crate::test_util::{batch, config, decode};
use crate::transaction::IsolationLevel;
use crate::StorageError;

const UNCOMMITTED: IsolationLevel = IsolationLevel::ReadUncommitted;
const SHARED: [(&str, &str); 3] = [
    ("segment.bytes", "600"),
    ("floe.iceberg.enabled", "true"),
    ("floe.iceberg.storage", "shared"),
];

/// Tests that delete local segments run one at a time: the failpoint test
/// arms `log.local_retention.taken` for the whole process.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn shared(extra: &[(&str, &str)]) -> Arc<LogConfig> {
    let mut kv = SHARED.to_vec();
    kv.extend_from_slice(extra);
    config(&kv)
}

/// Ten batches of two records, newest timestamps 1000, 2000, ... 10000;
/// segments [0,4) [4,8) [8,12) [12,16) and the active [16,20), largest
/// timestamps 2000, 4000, 6000, 8000, 10000.
fn fill(log: &PartitionLog) {
    for i in 0..10i64 {
        log.append(&mut batch(2, 1_000 * (i + 1), 100), 0).unwrap();
    }
    assert_eq!(log.segment_count(), 5);
}

fn open(dir: &Path, cfg: Arc<LogConfig>, log_start_checkpoint: Option<i64>) -> PartitionLog {
    PartitionLog::open(dir, "t", 0, cfg, None, log_start_checkpoint).unwrap()
}

fn filled(dir: &Path, cfg: Arc<LogConfig>) -> PartitionLog {
    let log = open(dir, cfg, None);
    fill(&log);
    log
}

fn starts(log: &PartitionLog) -> (i64, i64) {
    (log.log_start_offset(), log.local_log_start_offset())
}

fn first_offset_read(log: &PartitionLog, offset: i64) -> Result<Option<i64>, StorageError> {
    let info = log.read(offset, 1 << 20, true, UNCOMMITTED)?;
    Ok(info.region.map(|r| decode(&r.read_to_vec().unwrap())[0].0))
}

fn snapshot_offsets(dir: &Path) -> Vec<i64> {
    let mut v: Vec<i64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            crate::file_names::parse_snapshot_file_name(&e.unwrap().file_name().to_string_lossy())
        })
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn nothing_goes_without_a_floor_nor_at_or_above_it() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = filled(
        dir.path(),
        shared(&[("local.retention.ms", "0"), ("floe.iceberg.retention-guard", "false")]),
    );
    assert_eq!(
        log.apply_retention(1_000_000).unwrap(),
        0,
        "no floor: the table's end is not known"
    );
    log.set_retention_floor(Some(0));
    assert_eq!(log.apply_retention(1_000_000).unwrap(), 0);
    // [8,12) holds offset 9, not yet in the table: it and what follows stay.
    log.set_retention_floor(Some(9));
    assert_eq!(log.apply_retention(1_000_000).unwrap(), 2);
    assert_eq!(starts(&log), (0, 8), "the log start offset stays, the local one moves");
    log.set_retention_floor(Some(12));
    assert_eq!(log.apply_retention(1_000_000).unwrap(), 1, "a segment ending at the floor may go");
    log.set_retention_floor(Some(1_000));
    assert_eq!(log.apply_retention(1_000_000).unwrap(), 1, "never the active segment");
    assert_eq!(starts(&log), (0, 16));
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.log_end_offset(), 20);
}

#[test]
fn local_retention_ms_and_bytes_are_honoured() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = filled(dir.path(), shared(&[("local.retention.ms", "5000")]));
    log.set_retention_floor(Some(20));
    assert_eq!(log.apply_retention(7_000).unwrap(), 0, "exactly local.retention.ms old is kept");
    assert_eq!(log.apply_retention(7_001).unwrap(), 1);
    assert_eq!(starts(&log), (0, 4));

    // -2: the same as retention.ms, which is not applied to the partition here.
    log.set_config(shared(&[("retention.ms", "5000")]));
    assert_eq!(log.apply_retention(9_001).unwrap(), 1, "[4,8) is older than 5000 at 9001");
    assert_eq!(starts(&log), (0, 8), "retention.ms does not move the log start offset");

    // -1: kept locally whatever their age.
    log.set_config(shared(&[("retention.ms", "-1"), ("local.retention.ms", "-1")]));
    assert_eq!(log.apply_retention(i64::MAX).unwrap(), 0);

    // By size: a segment goes only if the local log stays at least local.retention.bytes without it.
    let total = log.size_bytes() as i64;
    let seg = log.sealed_segments()[0].size_bytes as i64;
    let limit = (total - seg - 1).to_string();
    log.set_config(shared(&[
        ("retention.ms", "-1"),
        ("local.retention.ms", "-1"),
        ("local.retention.bytes", &limit),
    ]));
    assert_eq!(log.apply_retention(0).unwrap(), 1);
    assert_eq!(starts(&log), (0, 12));
    assert_eq!(log.apply_retention(0).unwrap(), 0);
    // -2 by size: retention.bytes, again only locally.
    let limit = (log.size_bytes() as i64 - log.sealed_segments()[0].size_bytes as i64).to_string();
    log.set_config(shared(&[("retention.ms", "-1"), ("retention.bytes", &limit)]));
    assert_eq!(log.apply_retention(0).unwrap(), 1);
    assert_eq!(starts(&log), (0, 16));
}

#[test]
fn the_floor_stops_local_retention_by_size_too() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = filled(dir.path(), shared(&[("retention.ms", "-1"), ("local.retention.bytes", "0")]));
    log.set_retention_floor(Some(4));
    assert_eq!(log.apply_retention(0).unwrap(), 1);
    assert_eq!(starts(&log), (0, 4));
}

#[test]
fn epochs_stay_and_snapshots_below_the_local_start_go() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), shared(&[("local.retention.ms", "0")]), None);
    for i in 0..10i64 {
        if i == 3 {
            log.become_leader(1).unwrap();
        }
        log.append(&mut batch(2, 1_000 * (i + 1), 100), 0).unwrap();
    }
    let epochs = |log: &PartitionLog| {
        log.epoch_entries().into_iter().map(|e| (e.epoch, e.start_offset)).collect::<Vec<_>>()
    };
    assert_eq!(epochs(&log), vec![(0, 0), (1, 6)]);
    assert_eq!(snapshot_offsets(dir.path()), vec![12, 16], "one per roll, the last two kept");
    log.set_retention_floor(Some(20));
    assert_eq!(log.apply_retention(1_000_000).unwrap(), 4);
    assert_eq!(starts(&log), (0, 16));
    assert_eq!(
        epochs(&log),
        vec![(0, 0), (1, 6)],
        "OffsetForLeaderEpoch answers from the log start offset"
    );
    assert_eq!(log.end_offset_for_epoch(0), (0, 6));
    assert_eq!(snapshot_offsets(dir.path()), vec![16], "below the local log start: gone");
    assert!(log.producer_state().producer_count() == 0);
}

#[test]
fn a_read_below_the_local_start_is_below_local_start_and_below_the_log_start_out_of_range() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = filled(dir.path(), shared(&[("local.retention.ms", "0")]));
    log.set_retention_floor(Some(8));
    assert_eq!(log.apply_retention(1_000_000).unwrap(), 2);
    for offset in [0, 5, 7] {
        assert!(
            matches!(
                log.read(offset, 1 << 20, true, UNCOMMITTED),
                Err(StorageError::BelowLocalStart { local_start: 8 })
            ),
            "{offset}"
        );
        assert!(matches!(
            log.read_for_replica(offset, 1 << 20, true),
            Err(StorageError::BelowLocalStart { local_start: 8 })
        ));
    }
    assert_eq!(first_offset_read(&log, 8).unwrap(), Some(8));
    assert_eq!(first_offset_read(&log, 9).unwrap(), Some(8), "the batch holding it, as ever");
    assert!(matches!(
        log.read(21, 1 << 20, true, UNCOMMITTED),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
    // Table retention moves the log start offset: below it is out of range again.
    assert_eq!(log.set_log_start_offset(3).unwrap(), 3);
    assert!(matches!(
        log.read(2, 1 << 20, true, UNCOMMITTED),
        Err(StorageError::OffsetOutOfRange { log_start: 3, .. })
    ));
    assert!(matches!(
        log.read(3, 1 << 20, true, UNCOMMITTED),
        Err(StorageError::BelowLocalStart { local_start: 8 })
    ));
    let info = log.read(8, 1 << 20, true, UNCOMMITTED).unwrap();
    assert_eq!(info.log_start_offset, 3, "fetches report the partition's log start offset");
}

#[test]
fn set_log_start_offset_is_monotonic_and_deletes_what_lies_below() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = filled(dir.path(), shared(&[]));
    log.set_retention_floor(Some(20));
    assert_eq!(log.set_log_start_offset(10).unwrap(), 10);
    assert_eq!(starts(&log), (10, 10), "inside [8,12): the local log start is the log start");
    assert_eq!(log.sealed_segments()[0].base_offset, 8, "[0,4) and [4,8) deleted");
    assert_eq!(log.set_log_start_offset(5).unwrap(), 10, "never lowered");
    assert_eq!(log.set_log_start_offset(10).unwrap(), 10);
    assert_eq!(starts(&log), (10, 10));
    assert!(
        matches!(log.set_log_start_offset(21), Err(StorageError::OffsetOutOfRange { .. })),
        "not past the high watermark"
    );
    assert!(matches!(log.set_log_start_offset(-1), Err(StorageError::OffsetOutOfRange { .. })));
    assert_eq!(log.epoch_entries()[0].start_offset, 10, "epochs truncated from the new start");
    assert!(matches!(
        log.read(9, 1 << 20, true, UNCOMMITTED),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
    assert_eq!(first_offset_read(&log, 10).unwrap(), Some(10));

    // Behind the local log start: only the log start moves, no local segment goes.
    let dir = tempfile::tempdir().unwrap();
    let log = filled(dir.path(), shared(&[("local.retention.ms", "0")]));
    log.set_retention_floor(Some(12));
    assert_eq!(log.apply_retention(1_000_000).unwrap(), 3);
    assert_eq!(log.set_log_start_offset(6).unwrap(), 6);
    assert_eq!((starts(&log), log.segment_count()), ((6, 12), 2));
    assert_eq!(log.set_log_start_offset(14).unwrap(), 14);
    assert_eq!((starts(&log), log.segment_count()), ((14, 14), 2));
}

#[test]
fn a_reopen_keeps_both_starts() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = shared(&[("local.retention.ms", "0")]);
    let log = filled(dir.path(), cfg.clone());
    log.set_retention_floor(Some(8));
    assert_eq!(log.apply_retention(1_000_000).unwrap(), 2);
    log.set_log_start_offset(3).unwrap();
    drop(log);
    // The checkpoint holds the log start offset, below the first local segment.
    let log = open(dir.path(), cfg.clone(), Some(3));
    assert_eq!(starts(&log), (3, 8));
    assert!(matches!(
        log.read(4, 1 << 20, true, UNCOMMITTED),
        Err(StorageError::BelowLocalStart { local_start: 8 })
    ));
    assert_eq!(first_offset_read(&log, 8).unwrap(), Some(8));
    drop(log);
    // A checkpoint that lags (a crash before it was written) stays too: the table is the authority.
    assert_eq!(starts(&open(dir.path(), cfg.clone(), Some(0))), (0, 8));
    // No checkpoint at all: 0, as Kafka loads a tiered log; never above what the table may hold.
    assert_eq!(starts(&open(dir.path(), cfg.clone(), None)), (0, 8));
    // A checkpoint inside the first local segment: both there.
    assert_eq!(starts(&open(dir.path(), cfg.clone(), Some(9))), (9, 9));
    // Copy mode, as ever: the log starts at the first segment at the earliest.
    assert_eq!(starts(&open(dir.path(), config(&[("segment.bytes", "600")]), Some(3))), (8, 8));
}

#[test]
fn a_reopen_through_the_log_manager_keeps_both_starts() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let overrides: BTreeMap<String, String> = [
        ("segment.bytes", "600"),
        ("floe.iceberg.enabled", "true"),
        ("floe.iceberg.storage", "shared"),
        ("local.retention.ms", "0"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    {
        let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
        m.create_topic("t", 1, overrides).unwrap();
        let log = m.partition("t", 0).unwrap();
        fill(&log);
        log.set_retention_floor(Some(8));
        m.run_maintenance(1_000_000).unwrap();
        assert_eq!(starts(&log), (0, 8));
        log.set_log_start_offset(2).unwrap();
        m.write_checkpoints().unwrap();
    }
    let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
    let log = m.partition("t", 0).unwrap();
    assert_eq!(starts(&log), (2, 8));
    assert_eq!(log.log_end_offset(), 20);
}

#[test]
fn copy_topics_keep_local_and_log_start_equal() {
    let _serial = serial();
    for extra in [
        vec![],
        vec![("floe.iceberg.enabled", "true")],
        vec![("floe.iceberg.enabled", "true"), ("floe.iceberg.storage", "copy")],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut kv =
            vec![("segment.bytes", "600"), ("retention.ms", "5000"), ("local.retention.ms", "0")];
        kv.extend_from_slice(&extra);
        let log = filled(dir.path(), config(&kv));
        log.set_retention_floor(Some(20));
        // retention.ms applies, local.retention.ms does not.
        assert_eq!(log.apply_retention(7_001).unwrap(), 1, "{extra:?}");
        assert_eq!(starts(&log), (4, 4), "{extra:?}");
        assert!(matches!(
            log.read(3, 1 << 20, true, UNCOMMITTED),
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        assert_eq!(log.delete_records_before(5).unwrap(), 5);
        assert_eq!(starts(&log), (5, 5), "{extra:?}");
        assert_eq!(log.set_log_start_offset(9).unwrap(), 9);
        assert_eq!(starts(&log), (9, 9), "{extra:?}");
    }
}

/// A crash (a panic at the failpoint, the log abandoned without a flush or
/// close) after the segments left the log but before any file went: every
/// file is still there at the reopen, and the next pass deletes them again.
#[cfg(feature = "failpoints")]
#[test]
fn a_crash_after_the_segments_were_taken_loses_nothing() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = shared(&[("local.retention.ms", "0")]);
    let log = filled(dir.path(), cfg.clone());
    log.set_retention_floor(Some(8));
    crate::failpoint::arm("log.local_retention.taken=1*panic->off").unwrap();
    let crashed =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| log.apply_retention(1_000_000)));
    crate::failpoint::arm("log.local_retention.taken=off").unwrap();
    assert!(crashed.is_err(), "the failpoint fired");
    std::mem::forget(log);
    let log = open(dir.path(), cfg, Some(0));
    assert_eq!(starts(&log), (0, 0), "every segment reloaded");
    assert_eq!(first_offset_read(&log, 0).unwrap(), Some(0));
    log.set_retention_floor(Some(8));
    assert_eq!(log.apply_retention(1_000_000).unwrap(), 2);
    assert_eq!(starts(&log), (0, 8));
}
