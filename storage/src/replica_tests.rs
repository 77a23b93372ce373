//! Tests of what a replica needs of `PartitionLog`: leader epochs stamped and
//! recorded, follower appends, the externally driven high watermark,
//! truncation (and crashes in the middle of one).

use std::path::Path;
use std::sync::Arc;

use floe_protocol::record_batch::BatchIter;

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
    floe_protocol::record_batch::set_partition_leader_epoch(&mut unstamped, -1);
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
    assert!(matches!(log.become_leader(2), Err(StorageError::FencedLeaderEpoch { epoch: 2, latest: 3 })));
    drop(log);
    let log = open(dir.path(), config(&[]));
    assert_eq!(epochs(&log), vec![(0, 0), (3, 2)]);
    assert_eq!(log.leader_epoch(), 0, "the stamp is not persisted: the controller says it again");
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
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
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
    assert_eq!(segment_files(fdir.path()), segment_files(ldir.path()), "same segments, same bytes, same .txnindex");
    assert_eq!(epochs(&follower), epochs(&leader));
    assert_eq!(epochs(&follower), vec![(0, 0), (4, 34)]);
    assert_eq!(follower.active_producers(), leader.active_producers());
    assert_eq!(follower.last_stable_offset(), leader.last_stable_offset());
    let committed = |log: &PartitionLog| log.read(30, 1 << 20, true, IsolationLevel::ReadCommitted).unwrap().aborted_transactions;
    let aborted = committed(&follower).unwrap();
    assert_eq!(aborted.len(), 1, "{aborted:?}");
    assert_eq!((aborted[0].producer_id, aborted[0].first_offset, aborted[0].last_offset), (7, 30, 33));
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
    floe_protocol::record_batch::assign_offsets(&mut b, base);
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
    assert!(matches!(log.append_as_follower(&overlapping, 0), Err(StorageError::OffsetOutOfOrder { expected: 8, got: 7 })));
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
    assert_eq!(decode(&read_bytes(&log, 0)).len(), 4, "the batch 4-5 is not wholly below 5: not served");
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
fn a_transaction_is_stable_once_the_high_watermark_passes_its_marker() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config(&[]));
    log.set_replicated(true);
    log.append(&mut crate::test_util::txn_batch((7, 0, 0), 2, 1), 0).unwrap();
    let marker = log.append_txn_marker(7, 0, crate::ControlRecordType::Commit, 0, 0).unwrap();
    assert_eq!(log.last_stable_offset(), 0);
    log.update_high_watermark(marker).unwrap();
    assert_eq!(log.last_stable_offset(), 0, "the marker itself is not below the high watermark yet");
    log.update_high_watermark(marker + 1).unwrap();
    assert_eq!(log.last_stable_offset(), marker + 1);
}
