//! Tests of the log side of transactions through `PartitionLog` itself:
//! transactional appends, markers, the last stable offset, READ_COMMITTED
//! reads and their aborted transactions, the `.txnindex`, recovery, tiering's
//! view of sealed segments and producer-id expiration.

use std::path::Path;
use std::sync::Arc;

use crate::config::LogConfig;
use crate::file_names::{snapshot_file, txn_index_file};
use crate::log::{FetchDataInfo, PartitionLog};
use crate::test_util::{batch, config, decode, idempotent_batch, txn_batch};
use crate::transaction::{AbortedTxn, ControlRecordType, IsolationLevel};
use crate::StorageError;

const COMMITTED: IsolationLevel = IsolationLevel::ReadCommitted;
const UNCOMMITTED: IsolationLevel = IsolationLevel::ReadUncommitted;
const ABORT: ControlRecordType = ControlRecordType::Abort;
const COMMIT: ControlRecordType = ControlRecordType::Commit;

fn open(dir: &Path, cfg: Arc<LogConfig>) -> PartitionLog {
    PartitionLog::open(dir, "t", 0, cfg, None, None).unwrap()
}

fn read(log: &PartitionLog, offset: i64, isolation: IsolationLevel) -> FetchDataInfo {
    log.read(offset, 1 << 20, true, isolation).unwrap()
}

/// Offsets of the records in a read (control records included).
fn offsets(info: &FetchDataInfo) -> Vec<i64> {
    info.region
        .as_ref()
        .map(|r| decode(&r.read_to_vec().unwrap()))
        .unwrap_or_default()
        .into_iter()
        .map(|(o, _)| o)
        .collect()
}

fn aborted(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
    AbortedTxn { producer_id: pid, first_offset: first, last_offset: last, last_stable_offset: lso }
}

/// Offsets: 0-1 plain; 2-4 producer 10's txn; 5-6 producer 20's txn; 7-8 producer 10 again.
fn two_transactions(log: &PartitionLog) {
    log.append(&mut batch(2, 1, 10), 0).unwrap();
    log.append(&mut txn_batch((10, 0, 0), 3, 5), 0).unwrap();
    log.append(&mut txn_batch((20, 0, 0), 2, 5), 0).unwrap();
    log.append(&mut txn_batch((10, 0, 3), 2, 5), 0).unwrap();
}

#[test]
fn markers_complete_transactions_and_move_the_last_stable_offset() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(&[]));
    two_transactions(&log);
    assert_eq!(log.high_watermark(), 9);
    assert_eq!(log.last_stable_offset(), 2, "producer 10's transaction from 2");

    // READ_COMMITTED stops at the LSO, at a batch boundary; READ_UNCOMMITTED does not.
    let info = read(&log, 0, COMMITTED);
    assert_eq!(offsets(&info), vec![0, 1]);
    assert_eq!(info.last_stable_offset, 2);
    assert_eq!(info.aborted_transactions, Some(vec![]));
    assert_eq!(offsets(&read(&log, 0, UNCOMMITTED)).len(), 9);
    assert_eq!(read(&log, 0, UNCOMMITTED).aborted_transactions, None);
    let at_lso = read(&log, 2, COMMITTED);
    assert!(at_lso.region.is_none(), "nothing stable at the LSO yet");
    assert!(matches!(
        log.read(10, 100, true, COMMITTED),
        Err(StorageError::OffsetOutOfRange { .. })
    ));

    // Bad input: a plain batch from a producer in a transaction; a marker
    // from a fenced epoch; a control batch from a client.
    assert!(matches!(
        log.append(&mut idempotent_batch((10, 0, 5), 1, 5), 0),
        Err(StorageError::InvalidTxnState { producer_id: 10, .. })
    ));
    log.append_txn_marker(30, 4, COMMIT, 0, 100).unwrap(); // offset 9: no transaction, written anyway
    assert!(matches!(
        log.append_txn_marker(30, 3, ABORT, 0, 100),
        Err(StorageError::InvalidProducerEpoch { epoch: 3, current_epoch: 4, .. })
    ));
    assert!(matches!(
        log.append_txn_marker(30, 4, ABORT, -1, 100),
        Err(StorageError::TransactionCoordinatorFenced { .. })
    ));
    let mut marker = crate::transaction::control_batch(10, 0, COMMIT, 0, 1);
    assert!(matches!(log.append(&mut marker, 0), Err(StorageError::InvalidRecord { .. })));
    let mut anonymous = txn_batch((-1, -1, -1), 1, 5);
    assert!(matches!(log.append(&mut anonymous, 0), Err(StorageError::InvalidRecord { .. })));
    assert_eq!(log.log_end_offset(), 10, "nothing refused was written");
    assert_eq!(log.last_stable_offset(), 2);

    // Commit producer 10: producer 20 (from 5) holds the LSO now.
    assert_eq!(log.append_txn_marker(10, 0, COMMIT, 0, 100).unwrap(), 10);
    assert_eq!(log.last_stable_offset(), 5);
    assert_eq!(offsets(&read(&log, 0, COMMITTED)), vec![0, 1, 2, 3, 4]);
    // Abort producer 20: everything is stable; its records are listed as aborted.
    assert_eq!(log.append_txn_marker(20, 0, ABORT, 0, 100).unwrap(), 11);
    assert_eq!(log.last_stable_offset(), 12);
    assert_eq!(log.high_watermark(), 12);
    let info = read(&log, 0, COMMITTED);
    assert_eq!(offsets(&info), (0..12).collect::<Vec<_>>(), "records are not filtered");
    assert_eq!(info.aborted_transactions, Some(vec![aborted(20, 5, 11, 12)]));
    assert_eq!(
        read(&log, 11, COMMITTED).aborted_transactions,
        Some(vec![aborted(20, 5, 11, 12)]),
        "the marker is at the fetch offset"
    );
    assert_eq!(read(&log, 12, COMMITTED).aborted_transactions, Some(vec![]));

    // The abort is in the active segment's .txnindex, 34 bytes.
    let idx = std::fs::read(txn_index_file(dir.path(), 0)).unwrap();
    assert_eq!(idx.len(), 34);
    assert_eq!(&idx[2..10], &20i64.to_be_bytes());

    // DescribeProducers' view.
    let producers = log.active_producers();
    let p = |id| producers.iter().find(|p| p.producer_id == id).copied().unwrap();
    assert_eq!(producers.len(), 3);
    assert_eq!(
        (p(10).last_sequence, p(10).coordinator_epoch, p(10).current_txn_start_offset),
        (4, 0, -1)
    );
    assert_eq!((p(30).producer_epoch, p(30).last_sequence, p(30).last_timestamp), (4, -1, 100));
    // A new transaction of producer 10 holds the LSO again.
    log.append(&mut txn_batch((10, 0, 5), 1, 5), 0).unwrap();
    assert_eq!(log.last_stable_offset(), 12);
    assert_eq!(p(10).producer_epoch, 0);
    assert_eq!(log.active_producers()[0].current_txn_start_offset, 12);
}

#[test]
fn read_committed_stops_at_the_batch_starting_at_the_lso_inside_a_segment() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(&[("index.interval.bytes", "1")]));
    for i in 0..20 {
        log.append(&mut batch(1, i, 10), 0).unwrap();
    }
    log.append(&mut txn_batch((7, 0, 0), 2, 5), 0).unwrap(); // 20-21
    for i in 0..5 {
        log.append(&mut batch(1, i, 10), 0).unwrap();
    }
    assert_eq!(log.last_stable_offset(), 20);
    assert_eq!(offsets(&read(&log, 3, COMMITTED)), (3..20).collect::<Vec<_>>());
    // A small max_bytes cuts the region as at READ_UNCOMMITTED.
    let one = log.read(3, 10, true, COMMITTED).unwrap();
    assert_eq!(offsets(&one), vec![3]);
    log.append_txn_marker(7, 0, ABORT, 2, 9).unwrap();
    assert_eq!(log.last_stable_offset(), log.log_end_offset());
    let info = read(&log, 3, COMMITTED);
    assert_eq!(offsets(&info), (3..28).collect::<Vec<_>>());
    assert_eq!(info.aborted_transactions, Some(vec![aborted(7, 20, 27, 28)]));
}

#[test]
fn flush_messages_holds_the_lso_until_the_marker_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(&[("flush.messages", "1")]));
    log.append(&mut txn_batch((7, 0, 0), 2, 5), 0).unwrap();
    assert_eq!((log.high_watermark(), log.last_stable_offset()), (2, 0));
    assert_eq!(log.append_txn_marker(7, 0, COMMIT, 0, 9).unwrap(), 2);
    // The marker's append fsynced before returning: the HW and so the LSO passed it.
    assert_eq!((log.high_watermark(), log.last_stable_offset()), (3, 3));
    assert!(log.recovery_point() >= 3);
}

#[test]
fn log_start_offset_bounds_the_lso_and_ongoing_transactions_survive_deletion() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(&[("segment.bytes", "300")]));
    log.append(&mut txn_batch((7, 0, 0), 2, 5), 0).unwrap();
    for i in 0..10 {
        log.append(&mut batch(1, i, 60), 0).unwrap();
    }
    assert!(log.segment_count() > 2);
    assert_eq!(log.last_stable_offset(), 0);
    assert!(log.sealed_segments().is_empty(), "nothing sealed is stable");
    log.delete_records_before(5).unwrap();
    assert_eq!(log.last_stable_offset(), 5, "clamped to the log start offset");
    assert!(log.producer_state().has_ongoing_txn(7));
    log.append_txn_marker(7, 0, ABORT, 0, 9).unwrap();
    assert_eq!(log.last_stable_offset(), log.log_end_offset());
    assert_eq!(read(&log, 5, COMMITTED).aborted_transactions, Some(vec![aborted(7, 0, 12, 13)]));
}

/// Several segments; producer 1's transactions alternate commit/abort, producer 2 commits,
/// producer 3 stays open at the end. Returns the log (closed cleanly if `close`).
fn many_transactions(dir: &Path) -> PartitionLog {
    let log = open(dir, config(&[("segment.bytes", "700")]));
    let mut seq = [0i32; 4];
    for round in 0..12 {
        for pid in [1i64, 2] {
            let p = pid as usize;
            log.append(&mut txn_batch((pid, 0, seq[p]), 2, 5), 0).unwrap();
            seq[p] += 2;
        }
        log.append(&mut batch(1, 5, 20), 0).unwrap();
        let marker = if round % 2 == 0 { ABORT } else { COMMIT };
        log.append_txn_marker(1, 0, marker, 0, 50).unwrap();
        log.append_txn_marker(2, 0, COMMIT, 0, 50).unwrap();
    }
    log.append(&mut txn_batch((3, 0, 0), 2, 5), 0).unwrap();
    log.append(&mut batch(1, 5, 20), 0).unwrap();
    assert!(log.segment_count() > 4, "{} segments", log.segment_count());
    log
}

/// Everything a READ_COMMITTED consumer would get, fetch after fetch: (records, aborted).
fn committed_view(log: &PartitionLog) -> (Vec<i64>, Vec<AbortedTxn>) {
    let (mut records, mut all_aborted) = (Vec::new(), Vec::new());
    let mut offset = log.log_start_offset();
    loop {
        let info = read(log, offset, COMMITTED);
        let got = offsets(&info);
        for a in info.aborted_transactions.unwrap() {
            if !all_aborted.contains(&a) {
                all_aborted.push(a);
            }
        }
        let Some(&last) = got.last() else { break };
        records.extend(got);
        offset = last + 1;
    }
    (records, all_aborted)
}

#[test]
fn restart_restores_ongoing_transactions_and_rebuilds_the_txn_index() {
    let dir = tempfile::tempdir().unwrap();
    let log = many_transactions(dir.path());
    let lso = log.last_stable_offset();
    assert!(lso < log.log_end_offset(), "producer 3 is open");
    let state = log.producer_state();
    let view = committed_view(&log);
    assert_eq!(view.1.len(), 6, "six aborts: {:?}", view.1);
    let sealed = log.sealed_segments();
    log.close().unwrap();
    drop(log);

    // From the snapshot at close.
    let log = open(dir.path(), config(&[("segment.bytes", "700")]));
    assert_eq!(log.last_stable_offset(), lso);
    assert_eq!(log.producer_state(), state);
    assert_eq!(committed_view(&log), view);
    drop(log);

    // No snapshots, no .txnindex: everything comes back from the log.
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        if name.ends_with(".snapshot") || name.ends_with(".txnindex") {
            std::fs::remove_file(&p).unwrap();
        }
    }
    let log = open(dir.path(), config(&[("segment.bytes", "700")]));
    assert_eq!(log.last_stable_offset(), lso);
    assert_eq!(log.producer_state(), state);
    assert_eq!(committed_view(&log), view);
    assert_eq!(log.sealed_segments(), sealed);
    // Producer 3 can still commit, and the LSO moves to the end.
    log.append_txn_marker(3, 0, COMMIT, 0, 60).unwrap();
    assert_eq!(log.last_stable_offset(), log.log_end_offset());
}

#[test]
fn a_torn_txn_index_below_the_recovery_point_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let log = many_transactions(dir.path());
    let view = committed_view(&log);
    let end = log.log_end_offset();
    log.close().unwrap();
    drop(log);
    let torn = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.extension().is_some_and(|e| e == "txnindex")
                && std::fs::metadata(p).unwrap().len() > 0
        })
        .unwrap();
    let bytes = std::fs::read(&torn).unwrap();
    std::fs::write(&torn, &bytes[..bytes.len() - 5]).unwrap();
    // Everything trusted (recovery point at the end), still the torn index is noticed.
    let log = PartitionLog::open(
        dir.path(),
        "t",
        0,
        config(&[("segment.bytes", "700")]),
        Some(end),
        None,
    )
    .unwrap();
    assert_eq!(committed_view(&log), view);
    assert_eq!(std::fs::read(&torn).unwrap(), bytes, "rewritten whole");
}

#[test]
fn crash_after_a_roll_rebuilds_from_an_older_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let log = many_transactions(dir.path());
    let view = committed_view(&log);
    let state = log.producer_state();
    let lso = log.last_stable_offset();
    let sealed = log.sealed_segments();
    std::mem::forget(log); // a crash: no flush, no snapshot at close
                           // The checkpointed recovery point lies in the second-to-last segment, below the newest snapshot.
    let recovery_point = sealed[sealed.len() - 1].base_offset + 1;
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|e| e == "txnindex") {
            let base: i64 = p.file_stem().unwrap().to_str().unwrap().parse().unwrap();
            if base >= sealed[sealed.len() - 1].base_offset {
                std::fs::remove_file(&p).unwrap(); // lost with the crash
            }
        }
    }
    let log = PartitionLog::open(
        dir.path(),
        "t",
        0,
        config(&[("segment.bytes", "700")]),
        Some(recovery_point),
        None,
    )
    .unwrap();
    assert_eq!(log.last_stable_offset(), lso);
    assert_eq!(log.producer_state(), state);
    assert_eq!(committed_view(&log), view);
}

#[test]
fn sealed_segments_are_stable_and_list_their_aborted_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let log = many_transactions(dir.path());
    let sealed = log.sealed_segments();
    assert!(!sealed.is_empty());
    assert!(sealed.last().unwrap().next_offset <= log.last_stable_offset());
    let mut aborted_batches = 0;
    for seg in &sealed {
        let bytes = std::fs::read(&seg.path).unwrap();
        for b in floe_protocol::record_batch::BatchIter::new(&bytes) {
            let h = b.unwrap().header;
            let is_aborted = seg.is_aborted(&h);
            // Producer 1's even rounds are aborted; every other data batch is not.
            if is_aborted {
                assert_eq!(h.producer_id, 1);
                aborted_batches += 1;
            }
            if h.is_control() || !h.is_transactional() {
                assert!(!is_aborted);
            }
        }
    }
    assert!(aborted_batches >= 3, "{aborted_batches}");
    // An open transaction keeps its segment (and every later one) from tiering.
    let dir2 = tempfile::tempdir().unwrap();
    let log2 = open(dir2.path(), config(&[("segment.bytes", "300")]));
    log2.append(&mut batch(4, 1, 40), 0).unwrap();
    log2.append(&mut txn_batch((5, 0, 0), 1, 5), 0).unwrap();
    for _ in 0..6 {
        log2.append(&mut batch(2, 1, 40), 0).unwrap();
    }
    let before = log2.sealed_segments();
    assert!(before.iter().all(|s| s.next_offset <= 4), "{before:?}");
    log2.append_txn_marker(5, 0, COMMIT, 0, 9).unwrap();
    assert!(log2.sealed_segments().len() > before.len());
}

#[test]
fn short_lived_producers_expire_and_the_snapshot_shrinks() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = |ms: &str| {
        let mut c = (*config(&[])).clone();
        c.producer_id_expiration_ms = ms.parse().unwrap();
        Arc::new(c)
    };
    let log = open(dir.path(), cfg("1000"));
    // A churn of 2,000 idempotent producers, one batch each, timestamps 0..2000.
    for pid in 0..2000i64 {
        log.append(&mut idempotent_batch((pid, 0, 0), 1, pid), 0).unwrap();
    }
    log.append(&mut txn_batch((9_999, 0, 0), 1, 0), 0).unwrap();
    assert_eq!(log.producer_state().producer_count(), 2001);
    log.close().unwrap();
    let big = std::fs::metadata(snapshot_file(dir.path(), log.log_end_offset())).unwrap().len();
    // At 2,500 the producers stamped up to 1,500 are expired; the open transaction is kept.
    assert_eq!(log.expire_producers(2_500), 1_501);
    assert_eq!(log.producer_state().producer_count(), 500);
    assert!(log.producer_state().has_ongoing_txn(9_999));
    assert_eq!(log.expire_producers(1_000_000), 499);
    assert_eq!(log.producer_state().producer_count(), 1);
    log.append(&mut batch(1, 1, 1), 0).unwrap();
    log.close().unwrap();
    let small = std::fs::metadata(snapshot_file(dir.path(), log.log_end_offset())).unwrap().len();
    assert!(small < 100 && big > 100 * small, "{big} -> {small} bytes");
    // A forgotten producer is new again: any sequence is accepted.
    log.append(&mut idempotent_batch((5, 0, 77), 1, 5), 0).unwrap();
    drop(log);
    let log = open(dir.path(), cfg("1000"));
    assert_eq!(log.producer_state().producer_count(), 2);
}

#[test]
fn markers_in_a_log_append_time_topic_and_across_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(
        dir.path(),
        config(&[("message.timestamp.type", "LogAppendTime"), ("segment.bytes", "200")]),
    );
    log.append(&mut txn_batch((1, 0, 0), 3, 5), 77).unwrap();
    log.append(&mut batch(1, 1, 90), 77).unwrap();
    // The marker rolls the segment: its .txnindex entry goes to the new one.
    let offset = log.append_txn_marker(1, 0, ABORT, 3, 1_234).unwrap();
    let active = log.sealed_segments().last().map_or(0, |s| s.next_offset);
    assert_eq!(active, offset, "the marker starts a segment");
    assert!(txn_index_file(dir.path(), offset).exists());
    let info = read(&log, offset, COMMITTED);
    let bytes = info.region.unwrap().read_to_vec().unwrap();
    let h = floe_protocol::record_batch::RecordBatchHeader::parse(&bytes).unwrap();
    assert!(h.is_control());
    assert_eq!(h.max_timestamp, 1_234);
    floe_protocol::record_batch::verify_crc(&bytes[..h.total_size()], 0).unwrap();
    assert_eq!(log.active_producers()[0].last_timestamp, 1_234);
}
