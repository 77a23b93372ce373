//! Flushing (Kafka's `UnifiedLog.flush` and `LocalLog.flush`): fsyncs of the
//! segments above the recovery point, in three steps so the fsyncs run
//! without the log's lock ([`FlushPlan`]), then the recovery point and the
//! completed end (and so the high watermark) move to what they made durable.
//! When a flush is due: `flush.messages` (from the append path), `flush.ms`
//! and after a roll ([`PartitionLog::flush_if_due`]), at close and on drop.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{lock, PartitionLog, SegmentPosition};
use crate::atomic_file::sync_dir;
use crate::error::{IoContext, Result};
use crate::failpoint;

impl PartitionLog {
    /// Fsyncs (`fdatasync`) every segment holding offsets at or above the
    /// recovery point, their indexes, and the directory if segments were
    /// created; then moves the recovery point to the log end offset seen at the start.
    ///
    /// A failed fsync takes the directory offline: the kernel may have
    /// dropped the pages it could not write, so no later fsync can vouch for them.
    ///
    /// # Errors
    /// [`StorageError::Io`](crate::StorageError::Io) if an fsync fails (the recovery point stays put);
    /// [`StorageError::LogDirOffline`](crate::StorageError::LogDirOffline) once the directory is offline.
    pub fn flush(&self) -> Result<()> {
        self.failure.check()?;
        let _flushing = lock(&self.flush_lock);
        let plan = self.plan_flush();
        let synced = plan.sync(&self.dir);
        self.finish_flush(plan, synced)
    }

    /// The first step of [`PartitionLog::flush`], under the lock: the files to
    /// fsync and the offsets their fsync will vouch for.
    pub(crate) fn plan_flush(&self) -> FlushPlan {
        let mut st = self.state();
        let rp = st.recovery_point;
        let from = st.segments.range(..=rp).next_back().map_or(i64::MIN, |(b, _)| *b);
        let files = st.segments.range(from..).flat_map(|(_, s)| s.files()).collect();
        FlushPlan {
            files,
            target: (st.log_end_offset, st.log_end_position()),
            unflushed: st.unflushed_messages,
            dir_dirty: std::mem::take(&mut st.dir_dirty),
            truncations: st.truncations,
        }
    }

    /// The last step of [`PartitionLog::flush`], under the lock again: moves the
    /// recovery point and the completed end to what the fsyncs made durable.
    pub(crate) fn finish_flush(&self, plan: FlushPlan, synced: Result<()>) -> Result<()> {
        let mut st = self.state();
        if let Err(e) = synced {
            st.dir_dirty |= plan.dir_dirty;
            drop(st);
            return self.offline_on_io_error(Err(e));
        }
        if st.truncations != plan.truncations {
            // A truncation ran during the fsyncs (a follower cutting its log to
            // fetch it again): the offsets up to the planned target may since have
            // been written anew, unsynced. Nothing is vouched for; the next flush
            // starts again from the lowered recovery point.
            return Ok(());
        }
        let (target, target_position) = plan.target;
        st.recovery_point = st.recovery_point.max(target);
        st.unflushed_messages = (st.unflushed_messages - plan.unflushed).max(0);
        // Everything written before the fsyncs began is durable: appends
        // waiting on `flush.messages` are complete up to there.
        st.complete_to(target, target_position);
        if st.replicated {
            self.follow_high_watermark_target(&mut st);
        }
        Ok(())
    }

    /// Flushes if a roll sealed segments not yet flushed (as Kafka flushes after
    /// each roll), or if there are unflushed messages and the last flush is older
    /// than `flush.ms`.
    ///
    /// # Errors
    /// As [`PartitionLog::flush`].
    pub fn flush_if_due(&self, now_ms: i64) -> Result<bool> {
        self.check_live()?;
        let due = {
            let mut st = self.state();
            let last = *st.last_flush_ms.get_or_insert(now_ms);
            // Kafka flushes the segments a roll sealed right after the roll, so a crash
            // can lose only the active segment's tail, not a sealed segment's middle
            // of the log while later segments survive.
            let sealed_unflushed =
                st.segments.keys().next_back().is_some_and(|&active| st.recovery_point < active);
            sealed_unflushed
                || (st.unflushed_messages > 0 && now_ms.saturating_sub(last) >= st.config.flush_ms)
        };
        if due {
            self.flush()?;
            self.state().last_flush_ms = Some(now_ms);
        }
        Ok(due)
    }

    /// Whether a flush would sync anything (the log is online, with unflushed
    /// messages, new segment files or a recovery point below the log end).
    pub(super) fn needs_flush(&self) -> bool {
        if self.failure.is_offline() {
            return false;
        }
        let st = self.state();
        st.unflushed_messages > 0 || st.dir_dirty || st.recovery_point < st.log_end_offset
    }
}

/// One flush: what it fsyncs, and what their success vouches for
/// ([`PartitionLog::flush`]). Taken under the log's lock; the fsyncs run without it.
pub(crate) struct FlushPlan {
    files: Vec<(Arc<File>, PathBuf)>,
    /// The log end offset and its position when the plan was taken.
    target: (i64, SegmentPosition),
    unflushed: i64,
    dir_dirty: bool,
    /// [`LogState::truncations`](super::LogState::truncations) when the plan was taken.
    truncations: u64,
}

impl FlushPlan {
    /// Fsyncs the planned files, and the directory if segments were created.
    pub(crate) fn sync(&self, dir: &Path) -> Result<()> {
        for (file, path) in &self.files {
            failpoint::check("log.segment.flush")
                .and_then(|()| file.sync_data())
                .ctx("fsync", path)?;
        }
        if self.dir_dirty {
            sync_dir(dir)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::log::test_helpers::open;
    use crate::test_util::{batch, config};

    #[test]
    fn flush_messages_and_flush_ms_move_the_recovery_point() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), config(&[("flush.messages", "4"), ("flush.ms", "1000")]));
        log.append(&mut batch(3, 1, 10), 0).unwrap();
        assert_eq!(log.recovery_point(), 0);
        log.append(&mut batch(1, 1, 10), 0).unwrap();
        assert_eq!(log.recovery_point(), 4);
        log.append(&mut batch(1, 1, 10), 0).unwrap();
        assert!(!log.flush_if_due(100).unwrap());
        assert!(!log.flush_if_due(600).unwrap());
        assert!(log.flush_if_due(1_100).unwrap());
        assert_eq!(log.recovery_point(), 5);
    }
}
