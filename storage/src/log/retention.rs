//! Retention (Kafka's `UnifiedLog.deleteOldSegments` and
//! `maybeIncrementLogStartOffset`): the front sealed segments go by
//! `retention.ms` and `retention.bytes` ([`PartitionLog::apply_retention`]),
//! by local retention for a shared-storage topic, or below a log start offset
//! raised by DeleteRecords or the table ([`PartitionLog::delete_records_before`],
//! [`PartitionLog::set_log_start_offset`]). The tiering thread's side: the
//! retention floor that holds segments not yet in the table, and the sealed
//! segments it may copy ([`PartitionLog::sealed_segments`]).

use tracing::info;

use super::{LogState, PartitionLog};
use crate::error::{IoContext, Result, StorageError};
use crate::failpoint;
use crate::segment::{LogSegment, SegmentInfo};
use crate::transaction::AbortedTxn;

impl PartitionLog {
    /// DeleteRecords: moves the log start offset up to `offset` and deletes the
    /// sealed segments wholly below it. Returns the new log start offset.
    ///
    /// # Errors
    /// [`StorageError::OffsetOutOfRange`] if `offset` is above the high watermark
    /// (or negative); [`StorageError::Io`] if a segment cannot be deleted.
    pub fn delete_records_before(&self, offset: i64) -> Result<i64> {
        self.raise_log_start(offset, "log start offset")
    }

    /// Raises the log start offset to `offset` (never lowers it: a smaller
    /// value changes nothing), deletes the local segments wholly below it and
    /// drops the leader epochs that ended below it. For table retention of a
    /// shared-storage topic (the table says where its data now begins, and
    /// this log follows); the same steps as [`PartitionLog::delete_records_before`].
    /// Local segments at or above the retention floor stay, as for every deletion.
    /// Returns the log start offset after the call.
    ///
    /// # Errors
    /// [`StorageError::OffsetOutOfRange`] if `offset` is above the high
    /// watermark (or negative): a log start past what is readable would hide
    /// records no fetch has seen; [`StorageError::Io`] if a segment cannot be deleted.
    pub fn set_log_start_offset(&self, offset: i64) -> Result<i64> {
        self.raise_log_start(offset, "log start offset raised")
    }

    fn raise_log_start(&self, offset: i64, reason: &str) -> Result<i64> {
        self.check_live()?;
        let (removed, snapshots, lso) = {
            let mut st = self.state();
            if offset < 0 || offset > st.high_watermark {
                return Err(StorageError::OffsetOutOfRange {
                    requested: offset,
                    log_start: st.log_start_offset,
                    log_end: st.high_watermark,
                });
            }
            st.log_start_offset = st.log_start_offset.max(offset);
            let shared = st.config.is_shared_storage();
            let removed = Self::take_segments(&mut st, !shared, |_, _| false);
            let snapshots = Self::take_snapshots_below_local_start(&mut st);
            let start = st.log_start_offset;
            let epochs = st.epochs.truncate_from_start(start);
            self.offline_on_io_error(epochs)?;
            (removed, snapshots, st.log_start_offset)
        };
        snapshots.into_iter().for_each(|o| self.remove_snapshot(o));
        let deleted = self.delete_segments(removed, reason);
        self.offline_on_io_error(deleted)?;
        Ok(lso)
    }

    /// Removes from the front the sealed segments that are below the log start
    /// offset or for which `expired` says so, respecting the retention floor.
    /// With `move_log_start` (copy mode) the log start offset moves past them;
    /// without it (shared storage) only the local log start offset does, the
    /// removed offsets staying in the table.
    fn take_segments(
        st: &mut LogState,
        move_log_start: bool,
        mut expired: impl FnMut(&LogSegment, &LogState) -> bool,
    ) -> Vec<LogSegment> {
        let bases: Vec<i64> = st.segments.keys().copied().collect();
        let mut removed = Vec::new();
        for (i, base) in bases.iter().enumerate() {
            if i + 1 == bases.len() {
                break; // the active segment stays
            }
            let Some(seg) = st.segments.get(base) else {
                break;
            };
            if st.retention_floor.is_some_and(|floor| seg.next_offset > floor) {
                break;
            }
            let below_start = bases[i + 1] <= st.log_start_offset;
            if !(below_start || expired(seg, st)) {
                break;
            }
            if let Some(seg) = st.segments.remove(base) {
                removed.push(seg);
            }
        }
        if move_log_start {
            if let Some(&first) = st.segments.keys().next() {
                st.log_start_offset = st.log_start_offset.max(first);
            }
        }
        removed
    }

    fn delete_segments(&self, removed: Vec<LogSegment>, reason: &str) -> Result<usize> {
        let n = removed.len();
        for seg in removed {
            info!(topic = %self.topic, partition = self.partition, base_offset = seg.base_offset,
                next_offset = seg.next_offset, bytes = seg.size, reason, "deleting segment");
            seg.delete_files()?;
        }
        Ok(n)
    }

    /// Deletes sealed segments past `retention.ms` (by their largest timestamp)
    /// or beyond `retention.bytes` (oldest first), and those below the log start
    /// offset; never the active segment nor one holding offsets at or above the
    /// retention floor. Advances the log start offset. Files are renamed to
    /// `.deleted` and removed at once: fetches holding the `Arc<File>` still read them.
    /// Producer snapshots below the new log start offset go too.
    ///
    /// A shared-storage topic ([`LogConfig::is_shared_storage`](crate::LogConfig::is_shared_storage)) applies local
    /// retention instead; see [`PartitionLog::apply_local_retention`].
    ///
    /// # Errors
    /// [`StorageError::Io`] if a file cannot be renamed or removed.
    pub fn apply_retention(&self, now_ms: i64) -> Result<usize> {
        self.check_live()?;
        if self.config().is_shared_storage() {
            return self.apply_local_retention(now_ms);
        }
        let (removed, snapshots) = {
            let mut st = self.state();
            let config = st.config.clone();
            if st.retention_floor.is_none() && config.retention_held_for_tiering() {
                // A tiered topic whose untiered offsets are not known yet keeps everything.
                return Ok(0);
            }
            let total: u64 = st.segments.values().map(|s| s.size).sum();
            // `cleanup.policy=compact` alone: no time or size retention (as
            // Kafka); only segments below the log start offset go.
            let by_policy = config.cleanup_policy.delete;
            let expired = retention_rule(
                by_policy,
                config.retention_ms,
                config.retention_bytes,
                total,
                now_ms,
            );
            let removed = Self::take_segments(&mut st, true, expired);
            let start = st.log_start_offset;
            let epochs = st.epochs.truncate_from_start(start);
            self.offline_on_io_error(epochs)?;
            (removed, Self::take_snapshots_below_local_start(&mut st))
        };
        snapshots.into_iter().for_each(|o| self.remove_snapshot(o));
        let deleted = self.delete_segments(removed, "retention");
        self.offline_on_io_error(deleted)
    }

    /// Local retention of a shared-storage topic (KIP-405's local log
    /// deletion, `docs/shared-mode.md` 3.1): the front sealed segments go that
    /// are wholly below the retention floor (the table's committed next
    /// offset, set by the tiering thread: only what the table holds may leave
    /// the disk) and past the effective `local.retention.ms` (by their largest
    /// timestamp) or beyond the effective `local.retention.bytes`; segments
    /// below the log start offset go as in copy mode. Without a floor nothing
    /// goes, whatever `floe.iceberg.retention-guard` says.
    ///
    /// The local log start offset moves; the log start offset does not
    /// (`retention.*` over the whole partition is the table's retention, which
    /// moves it through [`PartitionLog::set_log_start_offset`]), nor is the
    /// leader-epoch cache truncated: OffsetForLeaderEpoch answers from the log
    /// start offset. Producer snapshots below the new local log start go.
    fn apply_local_retention(&self, now_ms: i64) -> Result<usize> {
        let (removed, snapshots) = {
            let mut st = self.state();
            if st.retention_floor.is_none() {
                return Ok(0);
            }
            let config = st.config.clone();
            let total: u64 = st.segments.values().map(|s| s.size).sum();
            let expired = retention_rule(
                config.cleanup_policy.delete,
                config.effective_local_retention_ms(),
                config.effective_local_retention_bytes(),
                total,
                now_ms,
            );
            let removed = Self::take_segments(&mut st, false, expired);
            (removed, Self::take_snapshots_below_local_start(&mut st))
        };
        if !removed.is_empty() {
            // The segments are out of the log (reads start at the new local
            // log start) but every file is still on disk: a crash here
            // reloads them, and the next pass deletes them again.
            let taken = failpoint::check("log.local_retention.taken")
                .ctx("delete local segments", &self.dir);
            self.offline_on_io_error(taken)?;
        }
        snapshots.into_iter().for_each(|o| self.remove_snapshot(o));
        let deleted = self.delete_segments(removed, "local retention");
        self.offline_on_io_error(deleted)
    }

    /// When set, retention keeps every segment holding offsets `>= floor`
    /// (tiering sets it to the first offset not yet uploaded). A topic with
    /// `floe.iceberg.enabled=true` (and `floe.iceberg.retention-guard` not
    /// `false`) keeps everything until a floor is set, so retention cannot run
    /// before the tiering thread has looked at it.
    pub fn set_retention_floor(&self, floor: Option<i64>) {
        self.state().retention_floor = floor;
    }

    /// The sealed segments (all but the active one) wholly below the last
    /// stable offset, oldest first: a segment whose last append still awaits
    /// its fsync, or that holds records of a transaction not yet complete, is
    /// not handed to tiering. Each lists the aborted transactions with records
    /// in it ([`SegmentInfo::aborted`]), so readers can drop them.
    pub fn sealed_segments(&self) -> Vec<SegmentInfo> {
        let st = self.state();
        let n = st.segments.len();
        let last_stable = st.last_stable_offset();
        let aborted: Vec<AbortedTxn> =
            st.segments.values().flat_map(|s| s.txn_index.entries().iter().copied()).collect();
        st.segments
            .values()
            .take(n.saturating_sub(1))
            .filter(|s| s.next_offset <= last_stable)
            .map(|s| {
                let mut info = s.info();
                info.aborted = aborted
                    .iter()
                    .filter(|a| a.first_offset < s.next_offset && a.last_offset >= s.base_offset)
                    .copied()
                    .collect();
                info
            })
            .collect()
    }
}

/// Kafka's time and size retention rule over the front segments, oldest first:
/// a segment goes if its newest record is older than `retention_ms`, or while
/// the bytes left after removing it would still be at least `retention_bytes`
/// over the `total`. Negative limits are off; `by_policy` false
/// (`cleanup.policy` without `delete`) turns both off.
fn retention_rule(
    by_policy: bool,
    retention_ms: i64,
    retention_bytes: i64,
    total: u64,
    now_ms: i64,
) -> impl FnMut(&LogSegment, &LogState) -> bool {
    let mut excess =
        if by_policy && retention_bytes >= 0 { total as i64 - retention_bytes } else { i64::MIN };
    move |seg, _| {
        let by_time = by_policy
            && retention_ms >= 0
            && now_ms.saturating_sub(seg.max_timestamp) > retention_ms;
        let by_size = excess != i64::MIN && excess - seg.size as i64 >= 0;
        if by_time || by_size {
            if excess != i64::MIN {
                excess -= seg.size as i64;
            }
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::error::StorageError;
    use crate::log::test_helpers::{idempotent_log, read_all, segmented_log, snapshot_offsets};
    use crate::test_util::{config, decode, idempotent_batch};

    #[test]
    fn retention_by_time() {
        let dir = tempfile::tempdir().unwrap();
        let log = segmented_log(dir.path(), &[("retention.ms", "5000")]);
        assert_eq!(log.segment_count(), 5);
        // Segment max timestamps: 2000, 4000, 6000, 8000, (active) 10000.
        assert_eq!(log.apply_retention(7_000).unwrap(), 0, "exactly retention.ms old is kept");
        assert_eq!(log.apply_retention(10_500).unwrap(), 2);
        assert_eq!(log.log_start_offset(), 8);
        assert!(matches!(
            log.read(7, 100, true, crate::IsolationLevel::ReadUncommitted),
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        assert_eq!(read_all(&log, 8)[0].0, 8);
        assert!(!crate::file_names::log_file(dir.path(), 0).exists());
        assert!(!crate::file_names::index_file(dir.path(), 4).exists());
        // Never the active segment.
        assert_eq!(log.apply_retention(1_000_000).unwrap(), 2);
        assert_eq!(log.segment_count(), 1);
        assert_eq!(log.log_start_offset(), 16);
        assert_eq!(log.log_end_offset(), 20);
    }

    #[test]
    fn retention_by_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let log = segmented_log(dir.path(), &[("retention.ms", "-1")]);
        let total = log.size_bytes() as i64;
        let seg = log.sealed_segments()[0].size_bytes as i64;
        log.set_config(config(&[
            ("segment.bytes", "600"),
            ("retention.ms", "-1"),
            ("retention.bytes", &(total - seg - 1).to_string()),
        ]));
        // As Kafka: a segment goes only if the log stays at least retention.bytes without it.
        assert_eq!(log.apply_retention(0).unwrap(), 1);
        assert_eq!(log.log_start_offset(), 4);
        assert_eq!(log.size_bytes() as i64, total - seg);
        let now = log.size_bytes() as i64;
        let next = log.sealed_segments()[0].size_bytes as i64;
        log.set_config(config(&[
            ("segment.bytes", "600"),
            ("retention.ms", "-1"),
            ("retention.bytes", &(now - next).to_string()),
        ]));
        assert_eq!(log.apply_retention(0).unwrap(), 1);
        assert_eq!(log.apply_retention(0).unwrap(), 0);
        assert_eq!(log.log_start_offset(), 8);
    }

    #[test]
    fn retention_floor_keeps_segments() {
        let dir = tempfile::tempdir().unwrap();
        let log = segmented_log(dir.path(), &[("retention.ms", "0")]);
        log.set_retention_floor(Some(5));
        assert_eq!(log.apply_retention(1_000_000).unwrap(), 1, "segment [0,4) only");
        log.set_retention_floor(None);
        assert_eq!(log.apply_retention(1_000_000).unwrap(), 3);
    }

    #[test]
    fn tiered_topic_holds_retention_until_a_floor_is_set() {
        let dir = tempfile::tempdir().unwrap();
        let log =
            segmented_log(dir.path(), &[("retention.ms", "0"), ("floe.iceberg.enabled", "true")]);
        assert_eq!(log.apply_retention(1_000_000).unwrap(), 0, "no floor yet: everything kept");
        log.set_retention_floor(Some(5));
        assert_eq!(log.apply_retention(1_000_000).unwrap(), 1);
        log.set_config(config(&[
            ("segment.bytes", "600"),
            ("retention.ms", "0"),
            ("floe.iceberg.enabled", "true"),
            ("floe.iceberg.retention-guard", "false"),
        ]));
        log.set_retention_floor(None);
        assert_eq!(log.apply_retention(1_000_000).unwrap(), 3, "guard off");
    }

    #[test]
    fn fetch_in_flight_survives_deletion() {
        let dir = tempfile::tempdir().unwrap();
        let log = segmented_log(dir.path(), &[("retention.ms", "0")]);
        let region = log
            .read(0, 1 << 20, true, crate::IsolationLevel::ReadUncommitted)
            .unwrap()
            .region
            .unwrap();
        log.apply_retention(1_000_000).unwrap();
        assert_eq!(decode(&region.read_to_vec().unwrap())[0].0, 0);
    }

    #[test]
    fn delete_records_before_moves_log_start() {
        let dir = tempfile::tempdir().unwrap();
        let log = segmented_log(dir.path(), &[]);
        assert!(matches!(
            log.delete_records_before(21),
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        assert_eq!(log.delete_records_before(9).unwrap(), 9);
        assert_eq!(log.log_start_offset(), 9);
        assert_eq!(log.sealed_segments()[0].base_offset, 8, "segments [0,4) and [4,8) deleted");
        assert!(matches!(
            log.read(8, 100, true, crate::IsolationLevel::ReadUncommitted),
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        assert_eq!(read_all(&log, 9)[0].0, 8, "the batch holding 9");
        assert_eq!(log.delete_records_before(3).unwrap(), 9, "never moves back");
        assert_eq!(log.delete_records_before(20).unwrap(), 20);
        assert!(log
            .read(20, 100, true, crate::IsolationLevel::ReadUncommitted)
            .unwrap()
            .region
            .is_none());
        assert_eq!(log.offset_for_timestamp(0).unwrap(), None);
    }

    #[test]
    fn retention_deletes_snapshots_below_the_log_start() {
        let dir = tempfile::tempdir().unwrap();
        let log = idempotent_log(dir.path());
        let snaps = snapshot_offsets(dir.path());
        log.delete_records_before(log.log_end_offset()).unwrap();
        assert!(snapshot_offsets(dir.path()).is_empty(), "{snaps:?} all below the log start");
        log.append(&mut idempotent_batch((100, 0, 6), 1, 10), 0).unwrap();
        log.close().unwrap();
        let snaps = snapshot_offsets(dir.path());
        assert!(snaps.iter().all(|&o| o >= log.log_start_offset()), "{snaps:?}");
        assert_eq!(snaps.last(), Some(&log.log_end_offset()));
    }
}
