//! A log's leader epochs (Kafka's `LeaderEpochFileCache` as `UnifiedLog`
//! uses it): the epoch leader appends stamp ([`PartitionLog::become_leader`]),
//! OffsetForLeaderEpoch's answer ([`PartitionLog::end_offset_for_epoch`]),
//! and the cache of a log being opened: read from its
//! `leader-epoch-checkpoint`, made to agree with what recovery kept, and
//! rebuilt from the batches' `partition_leader_epoch` when the file is
//! missing, damaged or empty (Kafka learns epochs from the batches it
//! recovers; a log written before the cache existed has no file at all).

use std::collections::BTreeMap;
use std::path::Path;

use tracing::info;

use super::PartitionLog;
use crate::batch_reader::{ScannedBatch, SegmentBatchReader};
use crate::error::{Result, StorageError};
use crate::leader_epoch_cache::{EpochEntry, LeaderEpochCache};
use crate::loader::LoadedLog;
use crate::segment::LogSegment;

impl PartitionLog {
    /// Makes this log's leader appends stamp `epoch` (the partition's leader
    /// epoch, from the controller) and records that it begins at the log end
    /// offset, as Kafka's `Partition.makeLeader` does before any append: a
    /// follower asking OffsetForLeaderEpoch for an older epoch then learns
    /// where it ended even if nothing is written in the new one yet.
    ///
    /// # Errors
    /// [`StorageError::FencedLeaderEpoch`] for an epoch older than the latest
    /// recorded; [`StorageError::InvalidConfig`] for a negative epoch;
    /// [`StorageError::Io`] if the epoch checkpoint cannot be written (the
    /// directory goes offline).
    pub fn become_leader(&self, epoch: i32) -> Result<()> {
        self.check_live()?;
        let mut st = self.state();
        if let Some(latest) = st.epochs.latest_epoch().filter(|&l| epoch < l) {
            return Err(StorageError::FencedLeaderEpoch { epoch, latest });
        }
        let end = st.log_end_offset;
        let assigned = st.epochs.assign(epoch, end).map(drop);
        self.offline_on_io_error(assigned)?;
        st.leader_epoch = epoch;
        Ok(())
    }

    /// The epoch leader appends stamp into their batches: the one
    /// [`PartitionLog::become_leader`] set, else the latest in the log
    /// when it was opened (0 for a new log: the single broker's epoch).
    pub fn leader_epoch(&self) -> i32 {
        self.state().leader_epoch
    }

    /// OffsetForLeaderEpoch's answer for `epoch` (Kafka's `endOffsetForEpoch`):
    /// the largest known epoch at or below it and the offset where it ended
    /// (the log end offset for the latest epoch); `(-1, -1)` when unknown. A
    /// follower truncates to the answer before fetching from its new leader.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        let st = self.state();
        st.epochs.end_offset_for(epoch, st.log_end_offset)
    }

    /// The latest leader epoch written in this log, if any: what a follower
    /// sends in OffsetForLeaderEpoch, and a fetch's `last_fetched_epoch`.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.state().epochs.latest_epoch()
    }

    /// Every leader epoch of the log and where it began, oldest first.
    pub fn epoch_entries(&self) -> Vec<EpochEntry> {
        self.state().epochs.entries()
    }
}

/// Opens the cache of `dir` for the recovered `loaded` log: entries at or
/// past its log end offset go (recovery or a truncation cut what they
/// describe), entries below its log start offset are folded into it, and an
/// empty cache of a non-empty log is rebuilt from the batches.
///
/// # Errors
/// [`StorageError::Io`] if the checkpoint cannot be read or written, or a
/// segment cannot be read during a rebuild.
pub(super) fn load(dir: &Path, loaded: &LoadedLog) -> Result<LeaderEpochCache> {
    let mut cache = LeaderEpochCache::open(dir)?;
    cache.truncate_from_end(loaded.log_end_offset)?;
    if cache.entries().is_empty() && loaded.log_end_offset > loaded.log_start_offset {
        rebuild(&mut cache, &loaded.segments, loaded.log_start_offset)?;
        info!(dir = %dir.display(), epochs = cache.entries().len(), "rebuilt the leader epoch cache from the log's batches");
    }
    cache.truncate_from_start(loaded.log_start_offset)?;
    Ok(cache)
}

/// Records every epoch change found in the batches of `segments`. Epochs
/// never decrease along a log, so a segment whose first and last batches
/// carry the same epoch holds no change and is not scanned: the rebuild
/// reads two headers per segment plus the segments where an epoch began.
fn rebuild(
    cache: &mut LeaderEpochCache,
    segments: &BTreeMap<i64, LogSegment>,
    log_start: i64,
) -> Result<()> {
    for seg in segments.values().filter(|s| !s.is_empty()) {
        let tail = seg.offset_index.last_entry().map_or(0, |(_, p)| p);
        let (Some(first), Some(last)) = (
            epochs_in(seg, 0, true)?.first().copied(),
            epochs_in(seg, tail, false)?.last().copied(),
        ) else {
            continue;
        };
        let changes = if first.0 == last.0 { vec![first] } else { epochs_in(seg, 0, false)? };
        for (epoch, base_offset) in changes {
            cache.assign(epoch, base_offset.max(log_start))?;
        }
    }
    Ok(())
}

/// The (epoch, base offset) of the batches of `seg` from `position` on where
/// a new stamped epoch begins; only the first batch's if `first_only`.
fn epochs_in(seg: &LogSegment, position: u64, first_only: bool) -> Result<Vec<(i32, i64)>> {
    let mut batches = SegmentBatchReader::new(&seg.log, &seg.log_path, position, seg.size)
        .with_holes(seg.holes());
    let mut found: Vec<(i32, i64)> = Vec::new();
    loop {
        match batches.next_header()? {
            ScannedBatch::Batch { header, .. } => {
                let epoch = header.partition_leader_epoch;
                if epoch >= 0 && found.last().is_none_or(|&(e, _)| e != epoch) {
                    found.push((epoch, header.base_offset));
                }
                if first_only && !found.is_empty() {
                    return Ok(found);
                }
            }
            ScannedBatch::End => return Ok(found),
            ScannedBatch::Invalid { position, reason } => {
                return Err(StorageError::Corrupt {
                    path: seg.log_path.to_path_buf(),
                    reason: format!("batch at {position}: {reason}"),
                })
            }
        }
    }
}
