//! Rolling (Kafka's `UnifiedLog.roll`/`maybeRoll`): the active segment is
//! sealed and a new one begins, before an append that would pass
//! `segment.bytes`, once the active segment is older than `segment.ms`, when
//! an offset would not fit the index's relative offsets, or on request. A roll
//! writes a producer snapshot at the new segment's base offset.

use tracing::info;

use super::{LogState, PartitionLog};
use crate::error::{IoContext, Result};
use crate::failpoint;
use crate::segment::LogSegment;

impl PartitionLog {
    /// Rolls before an append of `len` bytes ending at `last_offset` if the active
    /// segment would pass `segment.bytes`, is older than `segment.ms`, or could not
    /// index `last_offset` relative to its base.
    pub(super) fn maybe_roll(
        &self,
        st: &mut LogState,
        len: u64,
        last_offset: i64,
        now_ms: i64,
    ) -> Result<()> {
        match Self::roll_reason(st, len, last_offset, now_ms) {
            Some(reason) => self.roll(st, reason),
            None => Ok(()),
        }
    }

    /// Why an append of `len` bytes ending at `last_offset` must go to a new
    /// segment, if it must (see [`Self::maybe_roll`]).
    pub(super) fn roll_reason(
        st: &LogState,
        len: u64,
        last_offset: i64,
        now_ms: i64,
    ) -> Option<&'static str> {
        let active = st.active();
        if active.is_empty() {
            None
        } else if active.size + len > st.config.segment_bytes {
            Some("segment.bytes")
        } else if active
            .rolling_timestamp_ms
            .is_some_and(|t| now_ms.saturating_sub(t) > st.config.segment_ms)
        {
            Some("segment.ms")
        } else if last_offset - active.base_offset > i64::from(u32::MAX) {
            Some("relative offset overflow")
        } else {
            None
        }
    }

    /// Rolls to a new segment based at the log end offset.
    fn roll(&self, st: &mut LogState, reason: &str) -> Result<()> {
        let base = st.log_end_offset;
        self.roll_at(st, base, reason)
    }

    /// Rolls to a new segment based at `base` (the log end offset, or for a
    /// follower the base offset of the next batch: the leader's log may have
    /// a gap there, left by compaction).
    pub(super) fn roll_at(&self, st: &mut LogState, base: i64, reason: &str) -> Result<()> {
        if st.segments.contains_key(&base) {
            return Ok(());
        }
        failpoint::check("log.segment.roll").ctx("roll segment", &self.dir)?;
        let seg = LogSegment::create(&self.dir, base)?;
        info!(topic = %self.topic, partition = self.partition, new_base_offset = base, reason, "rolled segment");
        st.segments.insert(base, seg);
        st.dir_dirty = true;
        self.take_snapshot(st);
        Ok(())
    }

    /// Rolls the active segment if it is non-empty and older than `segment.ms`.
    ///
    /// # Errors
    /// [`StorageError::Io`](crate::StorageError::Io) if the new segment's files cannot be created.
    pub fn roll_if_due(&self, now_ms: i64) -> Result<bool> {
        self.check_live()?;
        let mut st = self.state();
        let active = st.active();
        let due = !active.is_empty()
            && active
                .rolling_timestamp_ms
                .is_some_and(|t| now_ms.saturating_sub(t) > st.config.segment_ms);
        if due {
            let rolled = self.roll(&mut st, "segment.ms");
            self.offline_on_io_error(rolled)?;
        }
        Ok(due)
    }

    /// Rolls the active segment now if it is non-empty, so the next append
    /// starts a segment of its own (Kafka's `UnifiedLog.roll`). Compaction of
    /// `__consumer_offsets` uses it: everything before the re-appended live
    /// state then sits in sealed segments that can be deleted whole.
    ///
    /// # Errors
    /// [`StorageError::Io`](crate::StorageError::Io) if the new segment's files cannot be created.
    pub fn roll_now(&self) -> Result<bool> {
        self.check_live()?;
        let mut st = self.state();
        if st.active().is_empty() {
            return Ok(false);
        }
        let rolled = self.roll(&mut st, "requested");
        self.offline_on_io_error(rolled)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use crate::log::test_helpers::open;
    use crate::test_util::{batch, config};

    #[test]
    fn rolls_by_segment_ms() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), config(&[("segment.ms", "1000")]));
        log.append(&mut batch(1, 1, 10), 10_000).unwrap();
        log.append(&mut batch(1, 1, 10), 10_500).unwrap();
        assert_eq!(log.segment_count(), 1);
        log.append(&mut batch(1, 1, 10), 11_001).unwrap();
        assert_eq!(log.segment_count(), 2);
        assert_eq!(log.sealed_segments()[0].next_offset, 2);
        assert!(!log.roll_if_due(11_500).unwrap());
        assert!(log.roll_if_due(12_002).unwrap());
        assert_eq!(log.segment_count(), 3);
        assert!(!log.roll_if_due(20_000).unwrap(), "an empty active segment is not rolled");
    }
}
