//! What the log cleaner (Kafka's `LogCleaner`, see [`crate::cleaner`]) needs
//! of a log: a [`CleanerView`] of its sealed segments and offsets taken under
//! the lock, and the last durable steps of the swap of a cleaned segment for
//! the segments it was cleaned from ([`PartitionLog::replace_segments`]).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::warn;

use super::{LogState, PartitionLog, SegmentPosition};
use crate::atomic_file::sync_dir;
use crate::config::LogConfig;
use crate::error::{IoContext, Result};
use crate::failpoint;
use crate::file_names::deleted_file;
use crate::producer_state::ProducerStateManager;
use crate::segment::{LogSegment, SegmentPaths};
use crate::transaction::AbortedTxn;

/// A sealed segment as the log cleaner sees it (captured under the log's lock).
#[derive(Debug, Clone)]
pub(crate) struct SealedSegment {
    pub(crate) base_offset: i64,
    pub(crate) next_offset: i64,
    pub(crate) size: u64,
    pub(crate) max_timestamp: i64,
    /// The segment's first timestamp when known (`max.compaction.lag.ms`).
    pub(crate) first_timestamp: Option<i64>,
    pub(crate) log: Arc<File>,
    pub(crate) log_path: Arc<Path>,
    pub(crate) holes: Vec<(u64, u64)>,
}

/// What [`PartitionLog::cleaner_view`] captured.
#[derive(Debug, Clone)]
pub(crate) struct CleanerView {
    pub(crate) log_start_offset: i64,
    pub(crate) high_watermark: i64,
    /// Offsets at and above it may belong to undecided transactions: not cleaned.
    pub(crate) last_stable_offset: i64,
    pub(crate) active_base_offset: i64,
    /// Every aborted transaction of the log (all segments' `.txnindex`
    /// entries, the active segment's too), in marker order.
    pub(crate) aborted_txns: Vec<AbortedTxn>,
    /// For a topic tiered to Iceberg with its retention guard on: the first
    /// offset not yet tiered. The cleaner leaves it and what follows alone, so
    /// the table gets every version of every key, as sealed.
    pub(crate) tiering_floor: Option<i64>,
    pub(crate) config: Arc<LogConfig>,
    /// All segments but the active one, oldest first.
    pub(crate) segments: Vec<SealedSegment>,
    pub(crate) producers: ProducerStateManager,
}

impl PartitionLog {
    /// What the log cleaner needs to choose and clean this log: its offsets,
    /// sealed segments, config and producer state, captured under the lock.
    pub(crate) fn cleaner_view(&self) -> Result<CleanerView> {
        self.check_live()?;
        let st = self.state();
        let n = st.segments.len();
        let segments = st
            .segments
            .values()
            .take(n.saturating_sub(1))
            .map(|s| SealedSegment {
                base_offset: s.base_offset,
                next_offset: s.next_offset,
                size: s.size,
                max_timestamp: s.max_timestamp,
                first_timestamp: s.rolling_timestamp_ms,
                log: s.log.clone(),
                log_path: s.log_path.clone(),
                holes: s.holes(),
            })
            .collect();
        Ok(CleanerView {
            log_start_offset: st.log_start_offset,
            high_watermark: st.high_watermark,
            last_stable_offset: st.last_stable_offset(),
            active_base_offset: st.active().base_offset,
            aborted_txns: st
                .segments
                .values()
                .flat_map(|s| s.txn_index.entries().iter().copied())
                .collect(),
            tiering_floor: st
                .config
                .retention_held_for_tiering()
                .then(|| st.retention_floor.unwrap_or(st.log_start_offset)),
            config: st.config.clone(),
            segments,
            producers: st.producers.clone(),
        })
    }

    /// Swaps a cleaned segment in for the sealed segments `old` (base offset
    /// and size each) it was cleaned from: the last durable steps of Kafka's
    /// swap protocol, done under the log's lock so that retention, reads and
    /// the file names agree at every moment. `cleaned` must be durable as
    /// `.swap` files already and named by its final paths.
    ///
    /// Under the lock: the old segments' files are renamed to `.deleted`,
    /// the `.swap` files to their final names, the segment map is updated.
    /// After it: the directory is fsynced and the `.deleted` files removed
    /// (fetches holding the old files keep reading them until done).
    ///
    /// Returns `false`, changing nothing, if the old segments are no longer
    /// all there as they were (retention or DeleteRecords removed some):
    /// the caller deletes its `.swap` files.
    ///
    /// # Errors
    /// [`StorageError::Io`](crate::StorageError::Io) from a rename or the fsync: the directory goes
    /// offline (recovery completes the swap at the next start).
    pub(crate) fn replace_segments(
        &self,
        mut cleaned: LogSegment,
        old: &[(i64, u64)],
        swap: &SegmentPaths,
    ) -> Result<bool> {
        self.check_live()?;
        let deleted = {
            let mut st = self.state();
            let active = st.active().base_offset;
            let intact = old.iter().all(|&(base, size)| {
                base != active && st.segments.get(&base).is_some_and(|s| s.size == size)
            });
            if !intact || old.first().map(|&(b, _)| b) != Some(cleaned.base_offset) {
                return Ok(false);
            }
            let renamed = self.rename_for_swap(&st, &cleaned, old, swap);
            let deleted = match renamed {
                Ok(d) => d,
                Err(e) => {
                    drop(st);
                    return self.offline_on_io_error(Err(e));
                }
            };
            let group_end = old
                .iter()
                .filter_map(|&(b, _)| st.segments.get(&b))
                .map(|s| s.next_offset)
                .max()
                .unwrap_or(cleaned.next_offset);
            for &(base, _) in old {
                st.segments.remove(&base);
            }
            cleaned.rolling_timestamp_ms = None;
            let (base, size) = (cleaned.base_offset, cleaned.size);
            st.segments.insert(base, cleaned);
            // Reads stop at the high watermark's position: if it pointed into
            // a replaced segment, it now points at the end of the cleaned one
            // (the high watermark is never inside a cleaned range).
            let replaced = |p: &SegmentPosition| {
                p.segment_base_offset >= base && p.segment_base_offset < group_end.max(base + 1)
            };
            let cleaned_end = SegmentPosition { segment_base_offset: base, position: size };
            if replaced(&st.high_watermark_position) {
                st.high_watermark_position = cleaned_end;
            }
            if replaced(&st.completed_position) {
                st.completed_position = cleaned_end;
            }
            deleted
        };
        let synced = sync_dir(&self.dir);
        self.offline_on_io_error(synced)?;
        for path in deleted {
            if let Err(e) = std::fs::remove_file(&path) {
                warn!(file = %path.display(), error = %e, "cannot remove a replaced segment file; the next start removes it");
            }
        }
        Ok(true)
    }

    /// The renames of a swap, under the lock: the old segments' files to
    /// `.deleted` (returned, for removal after the directory's fsync), then the
    /// `.swap` files to their final names, indexes first. Failpoints
    /// `cleaner.old.deleted` and `cleaner.swap.done` after each step.
    fn rename_for_swap(
        &self,
        st: &LogState,
        cleaned: &LogSegment,
        old: &[(i64, u64)],
        swap: &SegmentPaths,
    ) -> Result<Vec<PathBuf>> {
        let mut deleted = Vec::new();
        for &(base, _) in old {
            let Some(seg) = st.segments.get(&base) else {
                continue;
            };
            for path in [
                seg.log_path.to_path_buf(),
                seg.offset_index.path().to_path_buf(),
                seg.time_index.path().to_path_buf(),
                seg.txn_index.path().to_path_buf(),
            ] {
                let to = deleted_file(&path);
                match std::fs::rename(&path, &to) {
                    Ok(()) => deleted.push(to),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e).ctx("rename replaced segment for deletion", &path),
                }
            }
        }
        failpoint::check("cleaner.old.deleted").ctx("swap cleaned segment", &self.dir)?;
        let finals = [
            cleaned.offset_index.path().to_path_buf(),
            cleaned.time_index.path().to_path_buf(),
            cleaned.txn_index.path().to_path_buf(),
            cleaned.log_path.to_path_buf(),
        ];
        for (from, to) in swap.indexes_then_log().into_iter().zip(finals.iter()) {
            match std::fs::rename(from, to) {
                Ok(()) => {}
                // A segment without aborted transactions has no `.txnindex`.
                Err(e)
                    if e.kind() == std::io::ErrorKind::NotFound
                        && from == swap.txn_index.as_path() => {}
                Err(e) => return Err(e).ctx("rename swap file", from),
            }
        }
        failpoint::check("cleaner.swap.done").ctx("swap cleaned segment", &self.dir)?;
        Ok(deleted)
    }
}
