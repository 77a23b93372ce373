//! Tests of what a replica needs of `PartitionLog`: leader epochs stamped and
//! recorded, follower appends, the externally driven high watermark,
//! truncation (and crashes in the middle of one).

use std::path::Path;
use std::sync::Arc;

use floe_protocol::record_batch::{BatchIter, BatchStamp};

use crate::config::LogConfig;
use crate::leader_epoch_cache::LEADER_EPOCH_CHECKPOINT;
use crate::log::PartitionLog;
use crate::test_util::{batch, config, decode};
use crate::transaction::IsolationLevel;
use crate::StorageError;

const UNCOMMITTED: IsolationLevel = IsolationLevel::ReadUncommitted;

fn open(dir: &Path, cfg: Arc<LogConfig>) -> PartitionLog {
    PartitionLog::open(dir, "t", 0, cfg, None, None).unwrap()
}

fn segmented() -> Arc<LogConfig> {
    config(&[("segment.bytes", "1000"), ("index.interval.bytes", "100")])
}

/// The raw bytes of every batch from `offset` up to the high watermark, read as fetches do.
fn read_bytes(log: &PartitionLog, mut offset: i64) -> Vec<u8> {
    let mut out = Vec::new();
    while offset < log.high_watermark() {
        let Some(region) = log.read(offset, 1 << 20, true, UNCOMMITTED).unwrap().region else {
            break;
        };
        let bytes = region.read_to_vec().unwrap();
        let last = BatchIter::new(&bytes).map(Result::unwrap).last().unwrap();
        offset = last.header.next_offset();
        out.extend_from_slice(&bytes[..last.end()]);
    }
    out
}

/// (base offset, partition leader epoch) of every batch in `bytes`.
fn stamps(bytes: &[u8]) -> Vec<(i64, i32)> {
    BatchIter::new(bytes)
        .map(|b| b.unwrap().header)
        .map(|h| (h.base_offset, h.partition_leader_epoch))
        .collect()
}

fn epochs(log: &PartitionLog) -> Vec<(i32, i64)> {
    log.epoch_entries().into_iter().map(|e| (e.epoch, e.start_offset)).collect()
}

#[test]
fn leader_appends_stamp_the_leader_epoch_and_record_where_it_began() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(&[]));
    let mut unstamped = batch(2, 1, 10);
    let stamp = BatchStamp { first_offset: 0, partition_leader_epoch: -1, log_append_time: None };
    floe_protocol::record_batch::stamp_batches(&mut unstamped, stamp);
    log.append(&mut unstamped, 0).unwrap();
    assert_eq!(epochs(&log), vec![(0, 0)], "the single broker's epoch 0");
    log.become_leader(3).unwrap();
    assert_eq!(epochs(&log), vec![(0, 0), (3, 2)], "a new leader's epoch starts at its log end");
    log.append(&mut batch(3, 1, 10), 0).unwrap();
    log.append_txn_marker(7, 0, crate::ControlRecordType::Commit, 0, 0).unwrap();
    assert_eq!(stamps(&read_bytes(&log, 0)), vec![(0, 0), (2, 3), (5, 3)]);
    assert_eq!(log.latest_epoch(), Some(3));
    assert_eq!(log.end_offset_for_epoch(0), (0, 2));
    assert_eq!(log.end_offset_for_epoch(3), (3, 6));
    assert_eq!(log.end_offset_for_epoch(2), (0, 2), "an unknown epoch: the one below it");
    assert_eq!(log.end_offset_for_epoch(4), (-1, -1));
    assert!(matches!(
        log.become_leader(2),
        Err(StorageError::FencedLeaderEpoch { epoch: 2, latest: 3 })
    ));
    drop(log);
    let log = open(dir.path(), config(&[]));
    assert_eq!(epochs(&log), vec![(0, 0), (3, 2)]);
    assert_eq!(log.leader_epoch(), 3, "appends go on in the latest epoch until told otherwise");
}

#[test]
fn the_epoch_cache_is_rebuilt_from_the_batches_when_its_file_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), segmented());
    for epoch in [0, 2, 5] {
        if epoch > 0 {
            log.become_leader(epoch).unwrap();
        }
        for _ in 0..12 {
            log.append(&mut batch(2, 1, 30), 0).unwrap();
        }
    }
    assert!(log.segment_count() > 3);
    let want = epochs(&log);
    assert_eq!(want, vec![(0, 0), (2, 24), (5, 48)]);
    log.close().unwrap();
    drop(log);
    for damage in ["deleted", "garbage"] {
        let path = dir.path().join(LEADER_EPOCH_CHECKPOINT);
        if damage == "deleted" {
            std::fs::remove_file(&path).unwrap();
        } else {
            std::fs::write(&path, "7\nnonsense").unwrap();
        }
        let log = open(dir.path(), segmented());
        assert_eq!(epochs(&log), want, "{damage}");
        assert_eq!(log.end_offset_for_epoch(2), (2, 48));
    }
}

#[test]
fn entries_past_the_recovered_end_go_and_the_log_start_is_folded_in() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), segmented());
    for _ in 0..20 {
        log.append(&mut batch(2, 1, 30), 0).unwrap();
    }
    log.become_leader(1).unwrap();
    log.become_leader(4).unwrap();
    assert_eq!(epochs(&log), vec![(0, 0), (4, 40)]);
    let start = log.delete_records_before(15).unwrap();
    assert_eq!(epochs(&log)[0], (0, start), "the first epoch now starts at the log start");
    log.close().unwrap();
    drop(log);
    // An entry a crash left past the log end (an epoch begun, nothing written).
    std::fs::write(dir.path().join(LEADER_EPOCH_CHECKPOINT), "0\n2\n0 0\n9 1000\n").unwrap();
    let log = PartitionLog::open(dir.path(), "t", 0, segmented(), None, Some(start)).unwrap();
    assert_eq!(epochs(&log), vec![(0, start)]);
    assert_eq!(log.log_end_offset(), 40);
    assert!(!decode(&read_bytes(&log, start)).is_empty());
}

/// A leader log with a bit of everything: plain, idempotent and
/// transactional batches, an aborted and a committed transaction, two epochs,
/// several segments. Returns its log end offset.
fn busy_leader(log: &PartitionLog) -> i64 {
    use crate::test_util::{idempotent_batch, txn_batch};
    for i in 0..6 {
        log.append(&mut batch(2, 100 + i, 30), 0).unwrap();
        log.append(&mut idempotent_batch((5, 0, 3 * i as i32), 3, 100 + i), 0).unwrap();
    }
    log.append(&mut txn_batch((7, 0, 0), 2, 200), 0).unwrap();
    log.append(&mut batch(1, 201, 30), 0).unwrap();
    log.append_txn_marker(7, 0, crate::ControlRecordType::Abort, 1, 300).unwrap();
    log.become_leader(4).unwrap();
    log.append(&mut txn_batch((7, 0, 2), 2, 400), 0).unwrap();
    log.append_txn_marker(7, 0, crate::ControlRecordType::Commit, 1, 500).unwrap();
    for i in 0..4 {
        log.append(&mut batch(3, 600 + i, 30), 0).unwrap();
    }
    log.log_end_offset()
}

/// Copies `leader` into `follower` as a fetcher would: reads of at most
/// `max_bytes` from the follower's log end offset (cut mid-batch at times).
fn replicate(leader: &PartitionLog, follower: &PartitionLog, max_bytes: u32) {
    while follower.log_end_offset() < leader.log_end_offset() {
        let from = follower.log_end_offset();
        let info = leader.read(from, max_bytes, true, UNCOMMITTED).unwrap();
        let bytes = info.region.unwrap().read_to_vec().unwrap();
        follower.append_as_follower(&bytes, 0).unwrap();
        assert!(follower.log_end_offset() > from, "progress from {from}");
    }
}

fn segment_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log" || x == "txnindex"))
        .map(|p| {
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_follower_stores_the_leaders_batches_byte_for_byte() {
    let (ldir, fdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let leader = open(ldir.path(), segmented());
    let end = busy_leader(&leader);
    let follower = open(fdir.path(), segmented());
    replicate(&leader, &follower, 250);
    assert_eq!(follower.log_end_offset(), end);
    assert_eq!(read_bytes(&follower, 0), read_bytes(&leader, 0));
    assert_eq!(
        segment_files(fdir.path()),
        segment_files(ldir.path()),
        "same segments, same bytes, same .txnindex"
    );
    assert_eq!(epochs(&follower), epochs(&leader));
    assert_eq!(epochs(&follower), vec![(0, 0), (4, 34)]);
    assert_eq!(follower.active_producers(), leader.active_producers());
    assert_eq!(follower.last_stable_offset(), leader.last_stable_offset());
    let committed = |log: &PartitionLog| {
        log.read(30, 1 << 20, true, IsolationLevel::ReadCommitted).unwrap().aborted_transactions
    };
    let aborted = committed(&follower).unwrap();
    assert_eq!(aborted.len(), 1, "{aborted:?}");
    assert_eq!(
        (aborted[0].producer_id, aborted[0].first_offset, aborted[0].last_offset),
        (7, 30, 33)
    );
    assert_eq!(committed(&follower), committed(&leader));
    // And after a restart, from the follower's own files.
    drop(follower);
    let follower = open(fdir.path(), segmented());
    assert_eq!(follower.active_producers(), leader.active_producers());
    assert_eq!(epochs(&follower), epochs(&leader));
}

/// Batches of `n` records placed at `base` (offsets are not covered by the CRC).
fn batch_at(base: i64, n: usize) -> Vec<u8> {
    let mut b = batch(n, 1, 10);
    let stamp = BatchStamp { first_offset: base, partition_leader_epoch: 0, log_append_time: None };
    floe_protocol::record_batch::stamp_batches(&mut b, stamp);
    b
}

#[test]
fn follower_appends_refuse_going_backwards_and_bad_crcs() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(&[]));
    log.append_as_follower(&batch_at(0, 5), 0).unwrap();
    assert!(matches!(
        log.append_as_follower(&batch_at(3, 4), 0),
        Err(StorageError::UnexpectedAppendOffset { expected: 5, first_offset: 3, last_offset: 6 })
    ));
    let overlapping = [batch_at(5, 3), batch_at(7, 2)].concat();
    assert!(matches!(
        log.append_as_follower(&overlapping, 0),
        Err(StorageError::OffsetOutOfOrder { expected: 8, got: 7 })
    ));
    let mut damaged = [batch_at(5, 3), batch_at(8, 2)].concat();
    let last = damaged.len() - 1;
    damaged[last] ^= 0x40;
    assert!(matches!(log.append_as_follower(&damaged, 0), Err(StorageError::Corrupt { .. })));
    assert_eq!(log.log_end_offset(), 5, "nothing of a refused append is written");
    // A gap (a compacted leader) is taken as it is; a partial last batch is left for the next fetch.
    let mut gap = [batch_at(9, 2), batch_at(11, 1)].concat();
    let partial = batch_at(12, 4);
    gap.extend_from_slice(&partial[..partial.len() - 3]);
    let info = log.append_as_follower(&gap, 0).unwrap();
    assert_eq!((info.first_offset, info.last_offset, info.record_count), (9, 11, 3));
    assert_eq!(log.log_end_offset(), 12);
    let offsets: Vec<i64> = decode(&read_bytes(&log, 0)).iter().map(|r| r.0).collect();
    assert_eq!(offsets, [0, 1, 2, 3, 4, 9, 10, 11]);
    assert_eq!(log.append_as_follower(&[], 0).unwrap().first_offset, -1);
    assert!(matches!(
        log.append_as(&mut batch(1, 1, 1), 0, crate::AppendOrigin::Replication),
        Err(StorageError::InvalidRecord { .. })
    ));
}

#[test]
fn a_replicated_high_watermark_moves_only_when_told() {
    use std::future::Future;
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(&[]));
    log.append(&mut batch(2, 1, 10), 0).unwrap();
    log.set_replicated(true);
    assert!(log.is_replicated());
    for _ in 0..2 {
        log.append(&mut batch(2, 1, 10), 0).unwrap();
    }
    log.append_as_follower(&batch_at(6, 2), 0).unwrap();
    assert_eq!((log.log_end_offset(), log.high_watermark()), (8, 2));
    assert_eq!(decode(&read_bytes(&log, 0)).len(), 2, "reads stop at the high watermark");
    let notified = log.append_notify().notified();
    let mut notified = std::pin::pin!(notified);
    notified.as_mut().enable();
    assert!(log.update_high_watermark(4).unwrap());
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(notified.as_mut().poll(&mut cx).is_ready(), "long polls wake up");
    assert!(!log.update_high_watermark(3).unwrap(), "never backwards");
    assert!(log.update_high_watermark(5).unwrap());
    assert_eq!(log.high_watermark(), 5);
    assert_eq!(
        decode(&read_bytes(&log, 0)).len(),
        4,
        "the batch 4-5 is not wholly below 5: not served"
    );
    assert!(log.update_high_watermark(100).unwrap());
    assert_eq!(log.high_watermark(), 8, "capped by the log end offset");
    log.append(&mut batch(2, 1, 10), 0).unwrap();
    assert_eq!(log.high_watermark(), 8);
    assert!(log.update_high_watermark(10).unwrap(), "a target above the log end is not remembered");
    log.set_replicated(false);
    log.append(&mut batch(2, 1, 10), 0).unwrap();
    assert_eq!(log.high_watermark(), 12, "alone again: the high watermark follows the log");
}

#[test]
fn a_restarted_replica_takes_its_checkpointed_high_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(&[]));
    assert!(matches!(log.reset_high_watermark(0), Err(StorageError::InvalidConfig { .. })));
    log.set_replicated(true);
    for _ in 0..5 {
        log.append(&mut batch(2, 1, 10), 0).unwrap();
    }
    log.update_high_watermark(6).unwrap();
    drop(log);
    let log = open(dir.path(), config(&[]));
    assert_eq!(log.high_watermark(), 10, "a log opens with its high watermark at its end");
    log.set_replicated(true);
    assert_eq!(log.reset_high_watermark(6).unwrap(), 6, "down to the checkpoint");
    assert_eq!(offsets_from(&log, 0), (0..6).collect::<Vec<_>>());
    assert_eq!(log.reset_high_watermark(50).unwrap(), 10, "never past the log end");
}

#[test]
fn a_transaction_is_stable_once_the_high_watermark_passes_its_marker() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(&[]));
    log.set_replicated(true);
    log.append(&mut crate::test_util::txn_batch((7, 0, 0), 2, 1), 0).unwrap();
    let marker = log.append_txn_marker(7, 0, crate::ControlRecordType::Commit, 0, 0).unwrap();
    assert_eq!(log.last_stable_offset(), 0);
    log.update_high_watermark(marker).unwrap();
    assert_eq!(
        log.last_stable_offset(),
        0,
        "the marker itself is not below the high watermark yet"
    );
    log.update_high_watermark(marker + 1).unwrap();
    assert_eq!(log.last_stable_offset(), marker + 1);
}

/// 30 batches of 2 records (offsets 0-59) over several segments.
fn sixty(log: &PartitionLog) {
    for i in 0..30 {
        log.append(&mut batch(2, 100 + i, 30), 0).unwrap();
    }
}

fn offsets_from(log: &PartitionLog, offset: i64) -> Vec<i64> {
    decode(&read_bytes(log, offset)).iter().map(|r| r.0).collect()
}

/// Truncating tests run one at a time: the crash test arms the truncation
/// failpoints, which are process-wide.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".deleted") || n.ends_with(".tmp"))
        .collect()
}

#[test]
fn truncation_inside_a_segment_and_across_segments_then_appending_again() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), segmented());
    sixty(&log);
    let segments = log.segment_count();
    assert!(!log.truncate_to(60).unwrap(), "nothing at or past the log end");
    assert!(log.truncate_to(55).unwrap());
    assert_eq!(log.log_end_offset(), 54, "the batch 54-55 straddles 55: it goes whole");
    assert_eq!((log.high_watermark(), log.last_stable_offset()), (54, 54));
    assert_eq!(offsets_from(&log, 0), (0..54).collect::<Vec<_>>());
    assert_eq!(log.append(&mut batch(2, 1, 30), 0).unwrap().first_offset, 54);
    assert!(log.truncate_to(20).unwrap());
    assert!(log.segment_count() < segments);
    assert_eq!((log.log_end_offset(), log.high_watermark()), (20, 20));
    assert!(log.recovery_point() <= 20);
    assert!(leftovers(dir.path()).is_empty(), "{:?}", leftovers(dir.path()));
    assert_eq!(offsets_from(&log, 0), (0..20).collect::<Vec<_>>());
    assert_eq!(log.offset_for_timestamp(109).unwrap().map(|t| t.offset), Some(18));
    assert_eq!(
        log.offset_for_timestamp(110).unwrap(),
        None,
        "later timestamps went with their batches"
    );
    assert_eq!(log.max_timestamp_and_offset().unwrap().map(|t| t.offset), Some(18));
    for _ in 0..20 {
        log.append(&mut batch(2, 7, 30), 0).unwrap();
    }
    assert_eq!(offsets_from(&log, 0), (0..60).collect::<Vec<_>>());
    log.close().unwrap();
    drop(log);
    let log = PartitionLog::open(dir.path(), "t", 0, segmented(), Some(60), None).unwrap();
    assert_eq!(offsets_from(&log, 0), (0..60).collect::<Vec<_>>());
}

#[test]
fn truncation_rebuilds_producer_state_as_of_the_new_end() {
    let _serial = serial();
    use crate::test_util::{idempotent_batch, txn_batch};
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), segmented());
    for seq in [0, 3, 6] {
        log.append(&mut idempotent_batch((5, 0, seq), 3, 1), 0).unwrap();
    }
    log.append(&mut txn_batch((7, 0, 0), 2, 1), 0).unwrap(); // 9-10
    log.append_txn_marker(7, 0, crate::ControlRecordType::Abort, 0, 0).unwrap(); // 11
    assert_eq!(log.last_stable_offset(), 12);
    log.truncate_to(11).unwrap();
    assert_eq!(log.last_stable_offset(), 9, "the cut marker's transaction is ongoing again");
    assert!(log.producer_state().has_ongoing_txn(7));
    log.truncate_to(6).unwrap();
    assert!(
        !log.producer_state().has_ongoing_txn(7),
        "a transaction begun above the new end is forgotten"
    );
    assert_eq!(log.last_stable_offset(), 6);
    // Producer 5's next sequence is 6 again: its retry is a new batch, not a duplicate.
    let info = log.append(&mut idempotent_batch((5, 0, 6), 3, 1), 0).unwrap();
    assert_eq!((info.first_offset, info.duplicate), (6, false));
    assert!(matches!(
        log.append(&mut idempotent_batch((5, 0, 12), 1, 1), 0),
        Err(StorageError::OutOfOrderSequence { expected: 9, .. })
    ));
    assert_eq!(log.producer_state().last_batch(5).map(|(_, b)| b.last_seq), Some(8));
}

#[test]
fn truncation_drops_later_epochs() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), segmented());
    for epoch in [0, 1, 3] {
        if epoch > 0 {
            log.become_leader(epoch).unwrap();
        }
        for _ in 0..5 {
            log.append(&mut batch(2, 1, 30), 0).unwrap();
        }
    }
    assert_eq!(epochs(&log), vec![(0, 0), (1, 10), (3, 20)]);
    log.truncate_to(16).unwrap();
    assert_eq!(epochs(&log), vec![(0, 0), (1, 10)]);
    assert_eq!(log.end_offset_for_epoch(1), (1, 16));
    assert_eq!(log.end_offset_for_epoch(3), (-1, -1));
    // A leader that began epoch 4 and wrote nothing: its entry sits at the log end.
    log.become_leader(4).unwrap();
    assert!(!log.truncate_to(16).unwrap());
    assert_eq!(log.latest_epoch(), Some(1), "an epoch with nothing in the log goes, as in Kafka");
    drop(log);
    assert_eq!(epochs(&open(dir.path(), segmented())), vec![(0, 0), (1, 10)]);
}

#[test]
fn a_replicated_high_watermark_comes_down_with_a_truncation() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(&[]));
    log.set_replicated(true);
    sixty(&log);
    log.update_high_watermark(40).unwrap();
    log.truncate_to(50).unwrap();
    assert_eq!(log.high_watermark(), 40);
    log.truncate_to(30).unwrap();
    assert_eq!(log.high_watermark(), 30, "an unclean truncation below the high watermark");
    log.append(&mut batch(2, 1, 30), 0).unwrap();
    assert!(log.update_high_watermark(32).unwrap());
    assert_eq!(offsets_from(&log, 28), vec![28, 29, 30, 31]);
}

#[test]
fn truncating_fully_starts_an_empty_log_at_the_offset() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), segmented());
    sixty(&log);
    log.append(&mut crate::test_util::txn_batch((7, 0, 0), 2, 1), 0).unwrap();
    log.truncate_fully_and_start_at(500).unwrap();
    assert_eq!(
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.high_watermark(),
            log.recovery_point(),
            log.last_stable_offset()
        ),
        (500, 500, 500, 500, 500)
    );
    assert_eq!(log.segment_count(), 1);
    assert!(log.active_producers().is_empty() && log.epoch_entries().is_empty());
    assert!(leftovers(dir.path()).is_empty());
    log.append_as_follower(&batch_at(500, 3), 0).unwrap();
    assert_eq!(offsets_from(&log, 500), vec![500, 501, 502]);
    assert!(log.truncate_to(100).unwrap(), "below the first segment: a full truncation");
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (100, 100));
    drop(log);
    let log = PartitionLog::open(dir.path(), "t", 0, segmented(), None, Some(100)).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (100, 100));
}

/// A replica truncating to the first offset of a damaged range recovery kept
/// (to fetch it again from its leader) keeps none of the damaged bytes: the
/// segment is cut where the damage starts, and what it fetches again follows
/// the last intact batch directly.
#[test]
fn truncating_to_a_damaged_range_cuts_where_the_damage_starts() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(&[]));
    for i in 0..10 {
        log.append_as_follower(&batch_at(i * 3, 3), 0).unwrap();
    }
    log.close().unwrap();
    let path = crate::file_names::log_file(dir.path(), 0);
    let mut bytes = std::fs::read(&path).unwrap();
    let damaged = BatchIter::new(&bytes).nth(4).unwrap().unwrap();
    let position = damaged.position as u64;
    bytes[damaged.end() - 3] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();

    // Recovery (from offset 0) keeps the range and steps over it.
    let log = PartitionLog::open(dir.path(), "t", 0, config(&[]), Some(0), None).unwrap();
    let ranges = log.corrupt_ranges();
    assert_eq!(
        ranges.iter().map(|r| (r.first_offset, r.last_offset)).collect::<Vec<_>>(),
        vec![(12, Some(14))]
    );
    assert_eq!(log.log_end_offset(), 30);

    assert!(log.truncate_to(12).unwrap());
    assert_eq!(log.log_end_offset(), 12);
    assert!(log.corrupt_ranges().is_empty(), "the damaged range is gone with the cut");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), position, "cut where the damage started");
    for i in 4..10 {
        log.append_as_follower(&batch_at(i * 3, 3), 0).unwrap();
    }
    assert_eq!(offsets_from(&log, 0), (0..30).collect::<Vec<_>>());
    log.close().unwrap();
    let log = PartitionLog::open(dir.path(), "t", 0, config(&[]), Some(0), None).unwrap();
    assert!(log.corrupt_ranges().is_empty(), "whole again after a restart");
    assert_eq!(log.log_end_offset(), 30);
}

/// Garbage before the first batch (a torn write can leave zeroed pages ahead of
/// data that did reach the disk) is a damaged range hiding no offset; cutting
/// to offset 0 removes it too, rather than leaving it in the file.
#[test]
fn truncating_below_garbage_that_hides_no_offset_removes_it() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = vec![0u8; 100];
    for i in 0..3 {
        bytes.extend_from_slice(&batch_at(i * 2, 2));
    }
    std::fs::write(crate::file_names::log_file(dir.path(), 0), &bytes).unwrap();
    let log = PartitionLog::open(dir.path(), "t", 0, config(&[]), Some(0), None).unwrap();
    let ranges = log.corrupt_ranges();
    assert_eq!(
        ranges.iter().map(|r| (r.position, r.first_offset, r.last_offset)).collect::<Vec<_>>(),
        vec![(0, 0, Some(-1))]
    );
    assert_eq!(log.log_end_offset(), 6);
    assert!(log.truncate_to(0).unwrap());
    assert!(log.corrupt_ranges().is_empty());
    assert_eq!(std::fs::metadata(crate::file_names::log_file(dir.path(), 0)).unwrap().len(), 0);
    for i in 0..3 {
        log.append_as_follower(&batch_at(i * 2, 2), 0).unwrap();
    }
    assert_eq!(offsets_from(&log, 0), (0..6).collect::<Vec<_>>());
}

/// A sealed segment that lost its tail while the next segment survived (a power
/// cut before the segment was flushed) leaves offsets missing in the middle of
/// the log: recovery reports them as a damaged range (not on a compacted log,
/// where such gaps are the cleaner's), and a replica cutting there drops the
/// segments after it, to fetch everything again from its leader.
#[test]
fn a_sealed_segment_missing_its_tail_is_a_damaged_range() {
    let _serial = serial();
    for compacted in [false, true] {
        let cfg = || {
            if compacted {
                config(&[("segment.bytes", "1000"), ("cleanup.policy", "compact")])
            } else {
                segmented()
            }
        };
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), cfg());
        for i in 0..20 {
            log.append_as_follower(&batch_at(i * 3, 3), 0).unwrap();
        }
        let mut bases: Vec<i64> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| {
                e.unwrap()
                    .file_name()
                    .to_string_lossy()
                    .strip_suffix(".log")
                    .map(|b| b.parse().unwrap())
            })
            .collect();
        bases.sort_unstable();
        assert!(bases.len() >= 3, "{bases:?}");
        log.close().unwrap();
        // The first segment keeps only its first batch.
        let first = crate::file_names::log_file(dir.path(), 0);
        let bytes = std::fs::read(&first).unwrap();
        let kept = BatchIter::new(&bytes).next().unwrap().unwrap().end();
        std::fs::write(&first, &bytes[..kept]).unwrap();

        let log = PartitionLog::open(dir.path(), "t", 0, cfg(), Some(0), None).unwrap();
        let ranges: Vec<_> =
            log.corrupt_ranges().iter().map(|r| (r.first_offset, r.last_offset)).collect();
        if compacted {
            assert!(ranges.is_empty(), "a compacted log's gaps are the cleaner's: {ranges:?}");
            continue;
        }
        assert_eq!(ranges, vec![(3, Some(bases[1] - 1))]);
        assert!(log.truncate_to(3).unwrap());
        assert_eq!((log.log_end_offset(), log.segment_count()), (3, 1));
        assert!(log.corrupt_ranges().is_empty());
        for i in 1..20 {
            log.append_as_follower(&batch_at(i * 3, 3), 0).unwrap();
        }
        assert_eq!(offsets_from(&log, 0), (0..60).collect::<Vec<_>>());
    }
}

/// Offsets 0-23 producer 5 (idempotent), 24-25 producer 7's transaction,
/// 26-27 plain, 28 its ABORT, then epoch 2: 29-31 producer 5, 32-41 plain.
#[cfg(feature = "failpoints")]
fn crash_scenario(dir: &Path, cfg: Arc<LogConfig>) -> PartitionLog {
    use crate::test_util::{idempotent_batch, txn_batch};
    let log = open(dir, cfg);
    for i in 0..8 {
        log.append(&mut idempotent_batch((5, 0, 3 * i), 3, 1), 0).unwrap();
    }
    log.append(&mut txn_batch((7, 0, 0), 2, 1), 0).unwrap();
    log.append(&mut batch(2, 1, 30), 0).unwrap();
    log.append_txn_marker(7, 0, crate::ControlRecordType::Abort, 0, 0).unwrap();
    log.become_leader(2).unwrap();
    log.append(&mut idempotent_batch((5, 0, 24), 3, 1), 0).unwrap();
    for _ in 0..5 {
        log.append(&mut batch(2, 1, 30), 0).unwrap();
    }
    assert_eq!(log.log_end_offset(), 42);
    log.close().unwrap();
    log
}

/// What a truncated log shows of itself: offsets, producers, epochs, last
/// stable offset, aborted transactions.
#[cfg(feature = "failpoints")]
type Observed =
    (Vec<i64>, Vec<crate::ProducerSummary>, Vec<(i32, i64)>, i64, Option<Vec<crate::AbortedTxn>>);

#[cfg(feature = "failpoints")]
fn observed(log: &PartitionLog) -> Observed {
    let aborted =
        log.read(0, 1 << 20, true, IsolationLevel::ReadCommitted).unwrap().aborted_transactions;
    (offsets_from(log, 0), log.active_producers(), epochs(log), log.last_stable_offset(), aborted)
}

/// A crash (a panic at the failpoint, the log then abandoned without a flush
/// or close) after every durable step of a truncation: the reopened log is
/// the old one or a prefix of it down to the truncation point, every index
/// and cache agreeing with it, even when the recovery point checkpoint still
/// says the old end; truncating again gives what an uninterrupted truncation gives.
#[cfg(feature = "failpoints")]
#[test]
fn a_crash_at_every_truncation_step_leaves_a_consistent_log() {
    let _serial = serial();
    const POINTS: [&str; 4] = [
        "log.truncate.segments_deleted",
        "log.truncate.log_cut",
        "log.truncate.indexes_cut",
        "log.truncate.done",
    ];
    for cfg in [
        config(&[("index.interval.bytes", "100")]),
        config(&[("segment.bytes", "400"), ("index.interval.bytes", "100")]),
    ] {
        let reference_dir = tempfile::tempdir().unwrap();
        let reference = crash_scenario(reference_dir.path(), cfg.clone());
        reference.truncate_to(26).unwrap();
        let want = observed(&reference);
        assert_eq!(want.3, 24, "producer 7's transaction is ongoing again");
        assert_eq!(want.2, vec![(0, 0)]);
        for point in POINTS {
            for recovery_point in [Some(42), None] {
                let dir = tempfile::tempdir().unwrap();
                let log = crash_scenario(dir.path(), cfg.clone());
                crate::failpoint::arm(&format!("{point}=1*panic->off")).unwrap();
                let crashed =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| log.truncate_to(26)));
                crate::failpoint::arm(&format!("{point}=off")).unwrap();
                assert!(crashed.is_err(), "{point} fired");
                std::mem::forget(log);
                let log = PartitionLog::open(dir.path(), "t", 0, cfg.clone(), recovery_point, None)
                    .unwrap();
                let end = log.log_end_offset();
                let case = format!("{point}, recovery point {recovery_point:?}, end {end}");
                assert!((26..=42).contains(&end), "{case}");
                assert_eq!(offsets_from(&log, 0), (0..end).collect::<Vec<_>>(), "{case}");
                assert!(
                    epochs(&log).iter().all(|&(_, start)| start < end),
                    "{case}: {:?}",
                    epochs(&log)
                );
                let (_, _, _, _, aborted) = observed(&log);
                assert!(aborted.unwrap().iter().all(|a| a.last_offset < end), "{case}");
                if end == 26 {
                    assert_eq!(observed(&log), want, "{case}");
                }
                log.truncate_to(26).unwrap();
                assert_eq!(observed(&log), want, "{case}: truncated again");
                let info = log
                    .append(&mut crate::test_util::idempotent_batch((5, 0, 24), 3, 1), 0)
                    .unwrap();
                assert_eq!((info.first_offset, info.duplicate), (26, false), "{case}");
                assert!(leftovers(dir.path()).is_empty(), "{case}");
            }
        }
    }
}

#[test]
fn a_replica_fetch_reads_past_the_high_watermark_up_to_the_log_end() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(&[]));
    log.set_replicated(true);
    for _ in 0..3 {
        log.append(&mut batch(2, 1, 10), 0).unwrap();
    }
    assert_eq!((log.log_end_offset(), log.high_watermark()), (6, 0));
    assert!(
        log.read(0, 1 << 20, true, UNCOMMITTED).unwrap().region.is_none(),
        "consumers see nothing yet"
    );
    let info = log.read_for_replica(0, 1 << 20, true).unwrap();
    assert_eq!(info.high_watermark, 0);
    let bytes = info.region.unwrap().read_to_vec().unwrap();
    assert_eq!(decode(&bytes).len(), 6, "a follower gets every record up to the log end");
    assert!(log.read_for_replica(6, 1 << 20, true).unwrap().region.is_none());
    assert!(matches!(
        log.read_for_replica(7, 1 << 20, true),
        Err(crate::StorageError::OffsetOutOfRange { .. })
    ));
}

/// A flush takes its plan under the lock and fsyncs without it. A follower's
/// truncation in between cuts records the plan's target still names, and the
/// fetcher writes them again, unsynced: the flush must not vouch for them, or a
/// power cut loses a tail that recovery then trusts (seen on the power-loss rig).
#[test]
fn a_flush_that_a_truncation_overtook_moves_no_recovery_point() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), segmented());
    sixty(&log);
    let plan = log.plan_flush();
    assert!(log.truncate_to(20).unwrap());
    for _ in 0..20 {
        log.append(&mut batch(2, 7, 30), 0).unwrap();
    }
    assert_eq!(log.log_end_offset(), 60);
    let synced = plan.sync(dir.path());
    log.finish_flush(plan, synced).unwrap();
    assert!(
        log.recovery_point() <= 20,
        "recovery point {} vouches for records written after the fsyncs",
        log.recovery_point()
    );
    log.flush().unwrap();
    assert_eq!(log.recovery_point(), 60, "the next flush covers them");
}

/// A sealed segment below the recovery point that ends short of the next
/// segment's base lost its tail: its offsets are reported damaged (so a replica
/// fetches them again), not trusted away as a silent gap in the log.
#[test]
fn a_trusted_segment_that_ends_before_the_next_one_reports_the_lost_tail() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), segmented());
    sixty(&log);
    log.flush().unwrap();
    assert_eq!(log.recovery_point(), 60);
    assert!(log.segment_count() > 2);
    log.close().unwrap();
    drop(log);
    let mut logs: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    let first = &logs[0];
    let bytes = std::fs::read(first).unwrap();
    let last = BatchIter::new(&bytes).map(Result::unwrap).last().unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(first)
        .unwrap()
        .set_len(last.position as u64)
        .unwrap();
    // The power cut took the indexes' unsynced entries too: they end where the log does,
    // so the loader's cheap checks of a trusted segment find nothing wrong.
    let keep = |path: std::path::PathBuf, width: usize, keep: &dyn Fn(&[u8]) -> bool| {
        let bytes = std::fs::read(&path).unwrap();
        let kept: Vec<u8> = bytes
            .chunks(width)
            .filter(|e| e.len() == width && keep(e))
            .flatten()
            .copied()
            .collect();
        std::fs::write(&path, kept).unwrap();
    };
    let relative = last.header.base_offset as u32; // relative to the first segment, based at 0
    keep(first.with_extension("index"), 8, &|e| {
        u32::from_be_bytes(e[4..8].try_into().unwrap()) < last.position as u32
    });
    keep(first.with_extension("timeindex"), 12, &|e| {
        u32::from_be_bytes(e[8..12].try_into().unwrap()) < relative
    });
    let next_base: i64 = logs[1].file_stem().unwrap().to_str().unwrap().parse().unwrap();

    let log = PartitionLog::open(dir.path(), "t", 0, segmented(), Some(60), None).unwrap();
    let damaged = log.corrupt_ranges();
    assert_eq!(damaged.len(), 1, "{damaged:?}");
    assert_eq!(
        (damaged[0].first_offset, damaged[0].last_offset),
        (last.header.base_offset, Some(next_base - 1))
    );
}
