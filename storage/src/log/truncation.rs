//! Truncation of a replica's log (Kafka's `UnifiedLog.truncateTo` and
//! `truncateFullyAndStartAt`): a follower drops the divergent tail an
//! ex-leader wrote, or a follower behind its leader's log start starts over.
//!
//! # Durable steps, and what a crash after each leaves (failpoints in brackets)
//! 1. The segments wholly above the truncation point are renamed to
//!    `.deleted`, highest first (the `.log` of each first), with the producer
//!    snapshots above it; the directory is fsynced
//!    [`log.truncate.segments_deleted`]. A crash part-way leaves a prefix of
//!    the old segments: a shorter old log, consistent.
//! 2. The segment holding the point is cut at the first batch reaching it,
//!    and fsynced [`log.truncate.log_cut`]. Its indexes now name bytes that
//!    are gone: recovery notices (an offset index past the log, a time or
//!    transaction index entry past the segment's end) and rebuilds them, even
//!    below a stale recovery point.
//! 3. Its offset, time and transaction indexes are cut [`log.truncate.indexes_cut`].
//! 4. The epoch cache drops the epochs that began at or after the new end
//!    [`log.truncate.done`]; a crash before leaves entries past the log end,
//!    which opening the log drops.
//!
//! The producer state is then rebuilt as of the new end from the newest
//! snapshot at or below it and the batches after it (the loader's replay);
//! transactions whose markers were cut are ongoing again, those that began
//! above the new end are forgotten.

use std::collections::BTreeSet;
use std::path::PathBuf;

use tracing::{info, warn};

use super::{LogState, PartitionLog};
use crate::atomic_file::sync_dir;
use crate::batch_reader::{ScannedBatch, SegmentBatchReader};
use crate::error::{IoContext, Result, StorageError};
use crate::failpoint;
use crate::loader::LogLoader;
use crate::producer_state::{delete_snapshot, ProducerStateManager};
use crate::segment::LogSegment;

/// Where a segment is cut: the first batch that reaches the truncation point.
#[derive(Debug, Clone, Copy)]
struct Cut {
    /// Byte position of that batch (the segment's size if none reaches it).
    position: u64,
    /// The log end offset after the cut: the truncation point, or the base of
    /// a batch that straddles it (a batch is kept or dropped whole).
    end: i64,
}

impl PartitionLog {
    /// Drops every record at or above `offset` (Kafka's `truncateTo`): what a
    /// follower does with the tail its log does not share with the new
    /// leader (found with OffsetForLeaderEpoch). A batch straddling `offset`
    /// goes whole, so the log end offset becomes `offset` or that batch's
    /// base offset. The high watermark, recovery point and log start offset
    /// come down to the new end if above it; the leader epochs that began at
    /// or after it go; the producer state is rebuilt as of it. Truncating
    /// below the first segment is [`PartitionLog::truncate_fully_and_start_at`].
    ///
    /// Allowed below the log start offset (the log start comes down with it,
    /// as in Kafka) and below what tiering has uploaded: the caller (the
    /// replica manager) owns that decision; the uploaded records above the new
    /// end then no longer match the log, and tiering must be told. A fetch in
    /// flight over records below the high watermark that this cuts may fail.
    ///
    /// Returns whether anything was truncated (`false` for `offset` at or
    /// past the log end offset; epochs past the log end go all the same, as
    /// in Kafka: a leader that never wrote in its epoch leaves one).
    ///
    /// # Errors
    /// [`StorageError::OffsetOutOfRange`] for a negative offset;
    /// [`StorageError::Io`] (the directory goes offline: recovery finishes or
    /// undoes the truncation at the next start, see the module docs).
    pub fn truncate_to(&self, offset: i64) -> Result<bool> {
        self.check_live()?;
        let (deleted, from, to) = {
            let mut st = self.state();
            let from = st.log_end_offset;
            if offset < 0 {
                return Err(StorageError::OffsetOutOfRange {
                    requested: offset,
                    log_start: st.log_start_offset,
                    log_end: from,
                });
            }
            if offset >= from {
                let epochs = st.epochs.truncate_from_end(from);
                self.offline_on_io_error(epochs)?;
                return Ok(false);
            }
            let truncated = if st.segments.keys().next().is_some_and(|&first| first > offset) {
                self.truncate_fully_locked(&mut st, offset)
            } else {
                self.truncate_locked(&mut st, offset)
            };
            (self.offline_on_io_error(truncated)?, from, st.log_end_offset)
        };
        info!(topic = %self.topic, partition = self.partition, from, to, requested = offset, why = "truncate_to", "truncated log");
        self.finish_truncation(deleted);
        Ok(true)
    }

    /// Deletes every segment and starts the log over, empty, at `offset`
    /// (Kafka's `truncateFullyAndStartAt`): log start, log end, high
    /// watermark and recovery point all become `offset`; producer state,
    /// snapshots and leader epochs are cleared. For a follower whose fetch
    /// offset is below its leader's log start offset (or whose log has
    /// nothing in common with the leader's). `offset` may be below the
    /// current log start or what tiering uploaded; see [`PartitionLog::truncate_to`].
    ///
    /// # Errors
    /// [`StorageError::OffsetOutOfRange`] for a negative offset;
    /// [`StorageError::Io`] (the directory goes offline).
    pub fn truncate_fully_and_start_at(&self, offset: i64) -> Result<()> {
        self.check_live()?;
        let (deleted, from) = {
            let mut st = self.state();
            if offset < 0 {
                return Err(StorageError::OffsetOutOfRange {
                    requested: offset,
                    log_start: st.log_start_offset,
                    log_end: st.log_end_offset,
                });
            }
            let from = st.log_end_offset;
            let truncated = self.truncate_fully_locked(&mut st, offset);
            (self.offline_on_io_error(truncated)?, from)
        };
        info!(topic = %self.topic, partition = self.partition, from, to = offset, why = "truncate_fully_and_start_at", "truncated log");
        self.finish_truncation(deleted);
        Ok(())
    }

    /// [`PartitionLog::truncate_fully_and_start_at`] `local_start` for a
    /// shared-storage follower whose leader answered OFFSET_MOVED_TO_TIERED_STORAGE
    /// (KIP-405): the local log starts at the leader's local log start offset,
    /// and the log start offset is `log_start` (the table's, below it): the
    /// offsets between are in the Iceberg table, as on the leader. A copy-mode
    /// log starts at `local_start` as with the plain call.
    ///
    /// # Errors
    /// As [`PartitionLog::truncate_fully_and_start_at`].
    pub fn start_at_local_log_start(&self, local_start: i64, log_start: i64) -> Result<()> {
        self.truncate_fully_and_start_at(local_start)?;
        if self.config().is_shared_storage() && (0..local_start).contains(&log_start) {
            self.state().log_start_offset = log_start;
            info!(topic = %self.topic, partition = self.partition, log_start, local_start,
                "local log starts at the leader's local log start; older offsets are in the table");
        }
        Ok(())
    }

    /// After the lock is released: removes the renamed files (fetches holding
    /// them keep reading) and wakes long polls, which see the new offsets.
    fn finish_truncation(&self, deleted: Vec<PathBuf>) {
        for path in deleted {
            if let Err(e) = std::fs::remove_file(&path) {
                warn!(file = %path.display(), error = %e, "cannot remove a truncated segment file; the next start removes it");
            }
        }
        self.append_notify.notify_waiters();
    }

    /// [`PartitionLog::truncate_to`] under the lock, `offset` inside the log.
    /// Returns the `.deleted` files to remove.
    fn truncate_locked(&self, st: &mut LogState, offset: i64) -> Result<Vec<PathBuf>> {
        let floor = st.segments.range(..=offset).next_back().map_or(offset, |(&b, _)| b);
        let cut = find_cut(&st.segments[&floor], offset)?;
        let above = st.segments.split_off(&(floor + 1));
        let deleted = self.delete_above(st, above, cut.end)?;
        failpoint::check("log.truncate.segments_deleted").ctx("truncate log", &self.dir)?;
        let seg = st.active_mut();
        seg.log
            .set_len(cut.position)
            .and_then(|()| seg.log.sync_data())
            .ctx("truncate segment", &seg.log_path)?;
        failpoint::check("log.truncate.log_cut").ctx("truncate log", &self.dir)?;
        cut_indexes(seg, cut)?;
        failpoint::check("log.truncate.indexes_cut").ctx("truncate log", &self.dir)?;
        self.reset_offsets(st, cut.end, st.log_start_offset.min(cut.end))?;
        failpoint::check("log.truncate.done").ctx("truncate log", &self.dir)?;
        self.rebuild_producer_state(st)?;
        Ok(deleted)
    }

    /// [`PartitionLog::truncate_fully_and_start_at`] under the lock.
    fn truncate_fully_locked(&self, st: &mut LogState, offset: i64) -> Result<Vec<PathBuf>> {
        let all = std::mem::take(&mut st.segments);
        let deleted = self.delete_above(st, all, i64::MIN)?;
        failpoint::check("log.truncate.segments_deleted").ctx("truncate log", &self.dir)?;
        st.segments.insert(offset, LogSegment::create(&self.dir, offset)?);
        sync_dir(&self.dir)?;
        st.unflushed_messages = 0;
        st.producers = ProducerStateManager::default();
        // Kafka moves the high watermark (and the recovery point) to the new
        // log end even when it was below: the empty log is complete there.
        st.high_watermark = offset;
        st.completed_end = offset;
        st.high_watermark_target = offset;
        st.recovery_point = offset;
        st.epochs.truncate_from_end(i64::MIN)?;
        self.reset_offsets(st, offset, offset)?;
        Ok(deleted)
    }

    /// Renames the segments `above` for deletion (highest first) and deletes
    /// the producer snapshots above `end`, then fsyncs the directory.
    fn delete_above(
        &self,
        st: &mut LogState,
        above: std::collections::BTreeMap<i64, LogSegment>,
        end: i64,
    ) -> Result<Vec<PathBuf>> {
        let mut deleted = Vec::new();
        for (_, seg) in above.into_iter().rev() {
            deleted.extend(seg.rename_for_deletion()?);
        }
        for snapshot in st.snapshots.split_off(&end.saturating_add(1)) {
            delete_snapshot(&self.dir, snapshot)?;
        }
        sync_dir(&self.dir)?;
        Ok(deleted)
    }

    /// The offsets after a truncation to `end`: nothing stays above it; the
    /// epochs that began at or after it go.
    fn reset_offsets(&self, st: &mut LogState, end: i64, log_start: i64) -> Result<()> {
        st.truncations += 1;
        st.log_end_offset = end;
        st.log_start_offset = log_start;
        let end_position = st.log_end_position();
        if st.high_watermark >= end {
            st.high_watermark = end;
            st.high_watermark_position = end_position;
        }
        if st.completed_end >= end {
            st.completed_end = end;
            st.completed_position = end_position;
        }
        st.high_watermark_target = st.high_watermark_target.min(end);
        st.recovery_point = st.recovery_point.min(end);
        st.unreplicated.retain(|_, &mut marker| marker < end);
        st.epochs.truncate_from_end(end)
    }

    /// The producer state as of the log end offset: the loader's replay of
    /// the batches after the newest snapshot at or below it.
    fn rebuild_producer_state(&self, st: &mut LogState) -> Result<()> {
        let loader = LogLoader {
            dir: &self.dir,
            index_interval_bytes: st.config.index_interval_bytes,
            recovery_point: None,
            log_start_offset: None,
            // Not used: only the producer-state replay runs.
            shared_storage: st.config.is_shared_storage(),
            gaps_are_damage: !st.config.cleanup_policy.compact,
        };
        let snapshots = std::mem::take(&mut st.snapshots);
        let end = st.log_end_offset;
        let (producers, snapshots) =
            loader.load_producer_state(&mut st.segments, end, snapshots, &BTreeSet::new())?;
        st.producers = producers;
        st.snapshots = snapshots;
        Ok(())
    }
}

/// Finds where `seg` must be cut to hold nothing at or above `offset`.
///
/// A damaged range recovery kept before the cut that does not lie wholly below
/// the new end goes too (the cut moves back to where it starts, the end to its
/// first offset), so a replica truncating to a damaged range's first offset (to
/// fetch it again from its leader) keeps none of its bytes, even of a range
/// that hides no offset (garbage before a batch).
fn find_cut(seg: &LogSegment, offset: i64) -> Result<Cut> {
    let start = seg.offset_index.position_for(offset);
    let mut batches =
        SegmentBatchReader::new(&seg.log, &seg.log_path, start, seg.size).with_holes(seg.holes());
    let batch_cut = loop {
        match batches.next_header()? {
            ScannedBatch::Batch { position, header } if header.last_offset() >= offset => {
                break Cut { position, end: header.base_offset.min(offset) }
            }
            ScannedBatch::Batch { .. } => {}
            ScannedBatch::End => break Cut { position: seg.size, end: offset },
            ScannedBatch::Invalid { position, reason } => {
                return Err(StorageError::Corrupt {
                    path: seg.log_path.to_path_buf(),
                    reason: format!("batch at {position}: {reason}"),
                })
            }
        }
    };
    let damaged_cut = seg
        .corrupt
        .iter()
        .filter(|c| c.position < batch_cut.position)
        .filter(|c| {
            c.first_offset >= batch_cut.end
                || c.last_offset.is_none_or(|last| last >= batch_cut.end)
        })
        .map(|c| Cut { position: c.position, end: c.first_offset.min(batch_cut.end) })
        .min_by_key(|c| c.position);
    Ok(damaged_cut.unwrap_or(batch_cut))
}

/// Cuts the segment's indexes and in-memory accounts at `cut` (its `.log`
/// is cut already): offset and time index entries past it, aborted
/// transactions whose marker is past it, damaged ranges past it; the largest
/// timestamp is recomputed from the time index and the headers after the
/// last offset index entry kept (Kafka's `readLargestTimestamp`).
fn cut_indexes(seg: &mut LogSegment, cut: Cut) -> Result<()> {
    seg.offset_index.truncate_to_position(cut.position)?;
    seg.time_index.truncate_to_offset(cut.end)?;
    seg.txn_index.truncate_to(cut.end)?;
    seg.size = cut.position;
    seg.next_offset = cut.end;
    seg.corrupt.retain(|c| c.position < cut.position);
    for c in &mut seg.corrupt {
        c.end_position = c.end_position.min(cut.position);
    }
    let (_, tail) = seg.offset_index.last_entry().unwrap_or((seg.base_offset, 0));
    let mut max = (seg.time_index.last_timestamp().unwrap_or(-1), None);
    let mut batches =
        SegmentBatchReader::new(&seg.log, &seg.log_path, tail, seg.size).with_holes(seg.holes());
    while let ScannedBatch::Batch { header, .. } = batches.next_header()? {
        if header.max_timestamp > max.0 {
            max = (header.max_timestamp, Some(header.base_offset));
        }
    }
    (seg.max_timestamp, seg.offset_of_max_timestamp) = max;
    seg.bytes_since_last_index_entry = seg.size - tail;
    if seg.is_empty() {
        seg.rolling_timestamp_ms = None;
    }
    seg.offset_index.persist()?;
    seg.time_index.persist()
}
