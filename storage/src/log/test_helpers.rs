//! Helpers shared by the log's unit tests (beside each job's code): opening a
//! log, reading it back, and the few logs several tests start from.

use std::path::Path;
use std::sync::Arc;

use super::PartitionLog;
use crate::config::LogConfig;
use crate::test_util::{batch, config, decode, idempotent_batch};

/// A log of topic `t` partition 0 in `dir`, opened without checkpoints.
pub(super) fn open(dir: &Path, cfg: Arc<LogConfig>) -> PartitionLog {
    PartitionLog::open(dir, "t", 0, cfg, None, None).unwrap()
}

/// (offset, timestamp) of every record a READ_UNCOMMITTED read at `offset` returns.
pub(super) fn read_all(log: &PartitionLog, offset: i64) -> Vec<(i64, i64)> {
    let info = log.read(offset, 1 << 20, true, crate::IsolationLevel::ReadUncommitted).unwrap();
    info.region.map(|r| decode(&r.read_to_vec().unwrap())).unwrap_or_default()
}

/// Ten batches of two records (timestamps 1000, 2000, …), two batches a segment: five segments.
pub(super) fn segmented_log(dir: &Path, extra: &[(&str, &str)]) -> PartitionLog {
    // Each batch is about 280 bytes; segments hold 2 batches.
    let mut kv = vec![("segment.bytes", "600")];
    kv.extend_from_slice(extra);
    let log = open(dir, config(&kv));
    for i in 0..10i64 {
        let mut b = batch(2, 1_000 * (i + 1), 100);
        assert!((270..=295).contains(&b.len()), "{}", b.len());
        log.append(&mut b, 0).unwrap();
    }
    log
}

/// The offsets of the `.snapshot` files in `dir`, ascending.
pub(super) fn snapshot_offsets(dir: &Path) -> Vec<i64> {
    let mut v: Vec<i64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            crate::file_names::parse_snapshot_file_name(e.unwrap().file_name().to_str()?)
        })
        .collect();
    v.sort_unstable();
    v
}

/// Producer 100 writes only into the first segment; 200 and 300 into the later ones.
pub(super) fn idempotent_log(dir: &Path) -> PartitionLog {
    let log = open(dir, config(&[("segment.bytes", "400")]));
    for i in 0..3 {
        log.append(&mut idempotent_batch((100, 0, i * 2), 2, 10), 0).unwrap();
    }
    let mut next_seq = [0, 0];
    for i in 0..12 {
        let p = usize::from(i % 3 == 0);
        let pid = [200, 300][p];
        log.append(&mut idempotent_batch((pid, 1, next_seq[p]), 2, 10), 0).unwrap();
        next_seq[p] += 2;
    }
    log.append(&mut batch(1, 1, 10), 0).unwrap();
    assert!(log.segment_count() >= 4, "{} segments", log.segment_count());
    log
}

/// Opens again the log [`idempotent_log`] wrote (no checkpoints: recovery from the files).
pub(super) fn reopen(dir: &Path) -> PartitionLog {
    PartitionLog::open(dir, "t", 0, config(&[("segment.bytes", "400")]), None, None).unwrap()
}
