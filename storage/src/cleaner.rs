//! `Cleaner`: one compaction of one partition log (Kafka's `Cleaner`): the
//! offset map of the dirty range, the rewrite of the sealed segments keeping
//! each key's latest record, and the crash-safe swap of the results.
//!
//! # What is cleaned
//! The *dirty range* is `[first dirty offset, first uncleanable offset)`:
//! from the cleaner checkpoint (or the log start offset) up to the first of
//! the active segment, the high watermark, the last stable offset (no
//! undecided transaction is cleaned), the first segment with records
//! newer than `min.compaction.lag.ms`, and (for a topic tiered to Iceberg with
//! its retention guard) the first offset not yet tiered, so the table receives
//! every version as it was sealed and compaction never rewrites the table;
//! whole sealed segments only. The map of
//! key → latest offset is built over as many dirty segments as
//! `log.cleaner.dedupe.buffer.size` holds. Then every sealed segment from the
//! log start up to the end of the mapped range is rewritten, in groups of
//! adjacent segments whose sizes add up to at most `segment.bytes` (Kafka's
//! `groupSegmentsBySize`), each group into one segment. A record stays if a
//! later record with its key is not in the map, and a tombstone only until
//! its batch's delete horizon (see [`crate::batch_filter`]). Offsets never
//! change; the active segment is never touched.
//!
//! Transactions (see [`crate::cleaned_txns`]): batches of aborted
//! transactions are dropped and never enter the offset map; committed
//! transactional records are compacted like any others; a transaction marker
//! stays while batches of its transaction do, then `delete.retention.ms` more
//! (stamped with a delete horizon), then goes. The cleaned segment's
//! `.txnindex` lists the aborted transactions whose ABORT marker it kept.
//!
//! # The swap (Kafka's protocol; failpoints in brackets)
//! 1. The group is written as `<base>.log.cleaned` (+ `.index.cleaned`,
//!    `.timeindex.cleaned`), each fsynced. [`cleaner.cleaned.written`]
//! 2. The indexes are renamed `.cleaned` → `.swap` [`cleaner.swap.index_renamed`],
//!    then the log; the directory is fsynced. A `<base>.log.swap` on disk is
//!    the decision: recovery completes the swap from here. [`cleaner.swap.renamed`]
//! 3. Under the log's lock: the old segments' files are renamed `.deleted`
//!    [`cleaner.old.deleted`], the `.swap` files to their final names
//!    [`cleaner.swap.done`], the segment map updated; then the directory is
//!    fsynced and the `.deleted` files removed.
//!
//! A crash before step 2's log rename leaves the old segments (recovery
//! deletes the `.cleaned` and orphan index `.swap` files); from then on it
//! leaves the cleaned segment (recovery deletes every segment based inside the
//! `.swap`'s offset range and renames it). Because the last batch of every
//! group is kept (empty if need be), the cleaned segment ends exactly where
//! its group ended, so that range is exactly the group's.

use std::sync::atomic::{AtomicBool, Ordering};

use floe_protocol::record_batch::RecordBatchHeader;
use tracing::{debug, info};

use crate::atomic_file::sync_dir;
use crate::batch_filter::{filter_batch, RecordView};
use crate::batch_reader::{ScannedBatch, SegmentBatchReader};
use crate::cleaned_txns::CleanedTxns;
use crate::error::{IoContext, Result, StorageError};
use crate::failpoint;
use crate::file_names::{CLEANED_SUFFIX, SWAP_SUFFIX};
use crate::log::{CleanerView, PartitionLog, SealedSegment};
use crate::offset_map::OffsetMap;
use crate::producer_state::ProducerStateManager;
use crate::segment::{AppendedBatch, LogSegment, SegmentPaths};
use crate::throttler::Throttler;
use crate::transaction::{parse_control_batch, ControlRecordType};

/// Bytes of cleaned batches buffered before they are written to the cleaned segment.
const WRITE_BUFFER: usize = 1 << 20;

/// What one clean did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CleanStats {
    /// Bytes of batches read (map building and rewriting).
    pub bytes_read: u64,
    /// Bytes of batches written to cleaned segments.
    pub bytes_written: u64,
    /// Records read while rewriting.
    pub records_read: u64,
    /// Records kept.
    pub records_kept: u64,
    /// Segment groups swapped in.
    pub segments_swapped: u64,
    /// Share of the offset map used.
    pub map_utilization: f64,
    /// The latest delete horizon of the tombstones kept: once it has passed,
    /// a clean of the whole log removes them (KIP-534), dirty or not.
    pub max_delete_horizon: Option<i64>,
}

/// The offsets that bound a clean (Kafka's `LogToClean`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct DirtyRange {
    pub(crate) first_dirty_offset: i64,
    pub(crate) first_uncleanable_offset: i64,
    /// Bytes of sealed segments below the dirty range.
    pub(crate) clean_bytes: u64,
    /// Bytes of sealed segments inside it.
    pub(crate) dirty_bytes: u64,
    /// The oldest dirty record is older than `max.compaction.lag.ms`.
    pub(crate) past_max_lag: bool,
}

impl DirtyRange {
    /// Kafka's cleanable ratio: dirty bytes over all cleanable bytes.
    pub(crate) fn dirty_ratio(&self) -> f64 {
        let total = self.clean_bytes + self.dirty_bytes;
        if total == 0 {
            0.0
        } else {
            self.dirty_bytes as f64 / total as f64
        }
    }

    /// Whether the log should be cleaned now.
    pub(crate) fn is_due(&self, min_ratio: f64) -> bool {
        self.dirty_bytes > 0 && (self.past_max_lag || self.dirty_ratio() >= min_ratio)
    }

    /// Computes the dirty range of `view` with the cleaner checkpoint `checkpoint`.
    pub(crate) fn of(view: &CleanerView, checkpoint: Option<i64>, now_ms: i64) -> Self {
        let config = &view.config;
        let first_dirty = checkpoint
            .filter(|&c| c >= view.log_start_offset && c <= view.active_base_offset)
            .unwrap_or(view.log_start_offset);
        let mut first_uncleanable =
            view.active_base_offset.min(view.high_watermark).min(view.last_stable_offset);
        if let Some(floor) = view.tiering_floor {
            first_uncleanable = first_uncleanable.min(floor);
        }
        if config.min_compaction_lag_ms > 0 {
            let young = view.segments.iter().find(|s| {
                s.next_offset > first_dirty
                    && s.max_timestamp > now_ms.saturating_sub(config.min_compaction_lag_ms)
            });
            if let Some(s) = young {
                first_uncleanable = first_uncleanable.min(s.base_offset);
            }
        }
        let mut range = Self {
            first_dirty_offset: first_dirty,
            first_uncleanable_offset: first_uncleanable,
            clean_bytes: 0,
            dirty_bytes: 0,
            past_max_lag: false,
        };
        for s in &view.segments {
            if s.next_offset <= first_dirty {
                if s.next_offset > view.log_start_offset {
                    range.clean_bytes += s.size;
                }
            } else if s.next_offset <= first_uncleanable {
                range.dirty_bytes += s.size;
                if range.dirty_bytes == s.size && config.max_compaction_lag_ms < i64::MAX {
                    let first = s.first_timestamp.unwrap_or(s.max_timestamp);
                    range.past_max_lag =
                        first >= 0 && now_ms.saturating_sub(first) > config.max_compaction_lag_ms;
                }
            }
        }
        range
    }
}

/// What to do with a whole batch before its records are looked at (Kafka's
/// `checkBatchRetention`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchRetention {
    /// The batch stays, empty if no record is left: the last batch of an
    /// active producer (its sequence and epoch must survive recovery) or of
    /// the group (so the cleaned segment ends where the group did).
    pub(crate) retain_empty: bool,
    /// Every record goes: an aborted transaction's batch, or a marker whose
    /// transaction is gone and whose delete horizon has passed.
    pub(crate) discard_records: bool,
    /// A transaction marker whose transaction is gone: kept records get a
    /// delete horizon, as tombstones do.
    pub(crate) marker_horizon: bool,
}

/// The batch-level decision. `marker` is the marker type of a control batch.
pub(crate) fn retain_batch(
    header: &RecordBatchHeader,
    marker: Option<ControlRecordType>,
    txns: &mut CleanedTxns,
    producers: &ProducerStateManager,
    group_next_offset: i64,
    now_ms: i64,
) -> BatchRetention {
    let control = header.is_control();
    let can_discard =
        if control { txns.on_control_batch(header, marker) } else { txns.on_data_batch(header) };
    let discard_records = if control {
        can_discard && header.has_delete_horizon() && header.base_timestamp <= now_ms
    } else {
        can_discard
    };
    let pid = header.producer_id;
    let last_of_producer = pid >= 0
        && if control {
            // The producer's latest entry is this marker (after its last data batch, or
            // the abort of an epoch bump with no data since): it carries the epoch that fences.
            producers.epoch(pid) == Some(header.producer_epoch)
                && producers.last_batch(pid).is_none_or(|(_, b)| b.last_offset < header.base_offset)
        } else {
            producers.last_batch(pid).is_some_and(|(_, b)| b.last_offset == header.last_offset())
        };
    BatchRetention {
        retain_empty: last_of_producer || header.next_offset() == group_next_offset,
        discard_records,
        marker_horizon: control && can_discard,
    }
}

/// Whether a record of a filtered batch stays (Kafka's `shouldRetainRecord`).
fn retain_record(
    map: &OffsetMap,
    header: &RecordBatchHeader,
    record: &RecordView<'_>,
    now_ms: i64,
) -> bool {
    if record.offset > map.latest_offset() {
        return true;
    }
    let Some(key) = record.key else {
        // A keyless record has no place in a compacted log (Kafka drops it too).
        return false;
    };
    let latest = record.offset >= map.get(key);
    let keep_tombstone = !header.has_delete_horizon() || now_ms < header.base_timestamp;
    latest && (record.value.is_some() || keep_tombstone)
}

/// Cleans logs, one at a time; owns an offset map's worth of memory budget.
#[derive(Debug)]
pub(crate) struct Cleaner<'a> {
    /// Bytes the offset map may take.
    pub(crate) map_memory: usize,
    /// Shared with the cleaner thread's owner: set to abandon a clean.
    pub(crate) stop: &'a AtomicBool,
    pub(crate) throttler: &'a mut Throttler,
}

fn corrupt(seg: &SealedSegment, position: u64, reason: impl std::fmt::Display) -> StorageError {
    StorageError::Corrupt {
        path: seg.log_path.to_path_buf(),
        reason: format!("batch at {position}: {reason}"),
    }
}

impl Cleaner<'_> {
    fn check_stop(&self, log: &PartitionLog) -> Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(StorageError::CleaningAborted {
                topic: log.topic().to_string(),
                partition: log.partition(),
            });
        }
        Ok(())
    }

    /// Cleans `log` over `range`; returns the next first dirty offset and what was done.
    ///
    /// # Errors
    /// [`StorageError::Io`] or [`StorageError::Corrupt`] reading or writing
    /// segments; [`StorageError::CleaningAborted`] when stopped. The cleaned
    /// files written so far are deleted; the log is unchanged unless a swap
    /// had begun (then recovery or the log's offline state takes over).
    pub(crate) fn clean(
        &mut self,
        log: &PartitionLog,
        view: &CleanerView,
        range: &DirtyRange,
        now_ms: i64,
    ) -> Result<(i64, CleanStats)> {
        let mut stats = CleanStats::default();
        let dirty: Vec<&SealedSegment> = view
            .segments
            .iter()
            .filter(|s| {
                s.next_offset > range.first_dirty_offset
                    && s.next_offset <= range.first_uncleanable_offset
            })
            .collect();
        let max_keys = usize::try_from(range.first_uncleanable_offset - range.first_dirty_offset)
            .unwrap_or(usize::MAX);
        let mut map = OffsetMap::for_memory(self.map_memory, max_keys);
        let mut txns = CleanedTxns::new(
            &view.aborted_txns,
            range.first_dirty_offset,
            range.first_uncleanable_offset,
        );
        let mut end_offset = range.first_dirty_offset;
        for (i, seg) in dirty.iter().enumerate() {
            let offsets = usize::try_from(seg.next_offset - seg.base_offset).unwrap_or(usize::MAX);
            if i > 0 && map.free_entries() < offsets {
                debug!(
                    topic = log.topic(),
                    partition = log.partition(),
                    end_offset,
                    "offset map full; cleaning the rest next time"
                );
                break;
            }
            self.map_segment(log, seg, range.first_dirty_offset, &mut map, &mut txns, &mut stats)?;
            end_offset = seg.next_offset;
        }
        stats.map_utilization = map.utilization();
        if end_offset <= range.first_dirty_offset {
            return Ok((range.first_dirty_offset, stats));
        }
        let segments: Vec<&SealedSegment> = view
            .segments
            .iter()
            .filter(|s| s.base_offset < end_offset && s.next_offset > view.log_start_offset)
            .collect();
        for group in group_by_size(&segments, view.config.segment_bytes) {
            self.check_stop(log)?;
            self.clean_group(log, view, &group, &map, now_ms, &mut stats)?;
        }
        info!(
            topic = log.topic(),
            partition = log.partition(),
            first_dirty_offset = range.first_dirty_offset,
            end_offset,
            keys = map.len(),
            bytes_read = stats.bytes_read,
            bytes_written = stats.bytes_written,
            records_read = stats.records_read,
            records_kept = stats.records_kept,
            groups_swapped = stats.segments_swapped,
            "cleaned log"
        );
        Ok((end_offset, stats))
    }

    /// Puts the keys of `seg`'s records at or above `from` into the map.
    fn map_segment(
        &mut self,
        log: &PartitionLog,
        seg: &SealedSegment,
        from: i64,
        map: &mut OffsetMap,
        txns: &mut CleanedTxns,
        stats: &mut CleanStats,
    ) -> Result<()> {
        let mut scanner = SegmentBatchReader::new(&seg.log, &seg.log_path, 0, seg.size)
            .with_holes(seg.holes.clone());
        loop {
            self.check_stop(log)?;
            let (position, header) = match scanner.next_batch(true)? {
                ScannedBatch::Batch { position, header } => (position, header),
                ScannedBatch::End => return Ok(()),
                ScannedBatch::Invalid { position, reason } => {
                    return Err(corrupt(seg, position, reason))
                }
            };
            let size = header.total_size();
            stats.bytes_read += size as u64;
            self.throttler.maybe_throttle(size as u64);
            let batch = scanner.batch_bytes()?;
            if header.is_control() {
                txns.on_control_batch(&header, parse_control_batch(batch).map(|(m, _)| m));
                continue;
            }
            // An aborted transaction's records must not hide older committed ones.
            let aborted = txns.on_data_batch(&header);
            if aborted || header.last_offset() < from || header.records_count == 0 {
                continue;
            }
            let section = crate::batch_filter::records_section(batch, &header)
                .map_err(|e| corrupt(seg, position, e))?;
            let records = crate::batch_filter::parse_records(&section, &header)
                .map_err(|e| corrupt(seg, position, e))?;
            for r in records {
                if let (Some(key), true) = (r.key, r.offset >= from) {
                    // The map was sized for every offset of the segment: a new key always fits.
                    map.put(key, r.offset);
                }
            }
        }
    }

    /// Rewrites one group of adjacent segments into one cleaned segment and swaps it in.
    fn clean_group(
        &mut self,
        log: &PartitionLog,
        view: &CleanerView,
        group: &[&SealedSegment],
        map: &OffsetMap,
        now_ms: i64,
        stats: &mut CleanStats,
    ) -> Result<()> {
        let Some(first) = group.first() else {
            return Ok(());
        };
        let base = first.base_offset;
        let group_next_offset = group.iter().map(|s| s.next_offset).max().unwrap_or(base);
        if group.iter().all(|s| s.size == 0) {
            return Ok(());
        }
        let dir = log.dir();
        let cleaned_paths = SegmentPaths::of(dir, base, CLEANED_SUFFIX);
        let swap_paths = SegmentPaths::of(dir, base, SWAP_SUFFIX);
        let remove = |paths: &SegmentPaths| {
            for p in paths.indexes_then_log() {
                let _ = std::fs::remove_file(p);
            }
        };
        let written = self.write_cleaned(
            log,
            view,
            group,
            map,
            now_ms,
            group_next_offset,
            &cleaned_paths,
            stats,
        );
        let (mut cleaned, changed) = match written {
            Ok(w) => w,
            Err(e) => {
                remove(&cleaned_paths);
                return Err(e);
            }
        };
        if !changed {
            // Nothing to drop or stamp, and nothing to merge: the group stays as it is.
            drop(cleaned);
            remove(&cleaned_paths);
            return Ok(());
        }
        let durable = (|| {
            for (file, path) in cleaned.files() {
                file.sync_data().ctx("fsync cleaned segment", &path)?;
            }
            failpoint::check("cleaner.cleaned.written").ctx("write cleaned segment", dir)?;
            let [index, time_index, _, log_file] = cleaned_paths.indexes_then_log();
            std::fs::rename(index, &swap_paths.index).ctx("rename cleaned index", index)?;
            std::fs::rename(time_index, &swap_paths.time_index)
                .ctx("rename cleaned time index", time_index)?;
            match std::fs::rename(&cleaned_paths.txn_index, &swap_paths.txn_index) {
                Ok(()) => {}
                // Written only when the segment keeps aborted transactions.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(e).ctx("rename cleaned transaction index", &cleaned_paths.txn_index)
                }
            }
            failpoint::check("cleaner.swap.index_renamed").ctx("rename cleaned segment", dir)?;
            std::fs::rename(log_file, &swap_paths.log).ctx("rename cleaned segment", log_file)?;
            sync_dir(dir)?;
            failpoint::check("cleaner.swap.renamed").ctx("swap cleaned segment", dir)?;
            Ok(())
        })();
        if let Err(e) = durable {
            // Whatever was renamed goes too: before the log's own rename nothing
            // is decided; after it, deleting the swap undoes the decision.
            remove(&cleaned_paths);
            remove(&swap_paths);
            return Err(e);
        }
        cleaned.set_paths(&SegmentPaths::of(dir, base, ""));
        let old: Vec<(i64, u64)> = group.iter().map(|s| (s.base_offset, s.size)).collect();
        if log.replace_segments(cleaned, &old, &swap_paths)? {
            stats.segments_swapped += 1;
        } else {
            info!(
                topic = log.topic(),
                partition = log.partition(),
                base,
                "segments changed while cleaning (retention?); discarding the cleaned segment"
            );
            remove(&swap_paths);
        }
        Ok(())
    }

    /// Writes the group's surviving batches into a new segment at `paths`;
    /// returns it and whether it differs from the group (a batch changed or
    /// dropped, or several segments merged).
    #[allow(clippy::too_many_arguments)]
    fn write_cleaned(
        &mut self,
        log: &PartitionLog,
        view: &CleanerView,
        group: &[&SealedSegment],
        map: &OffsetMap,
        now_ms: i64,
        group_next_offset: i64,
        paths: &SegmentPaths,
        stats: &mut CleanStats,
    ) -> Result<(LogSegment, bool)> {
        let base = group[0].base_offset;
        let mut cleaned = LogSegment::create_at(base, paths)?;
        let new_horizon = now_ms.saturating_add(view.config.delete_retention_ms);
        let index_interval = view.config.index_interval_bytes;
        let mut changed = group.iter().filter(|s| s.size > 0).count() > 1;
        let mut txns = CleanedTxns::new(&view.aborted_txns, base, group_next_offset);
        let mut out = Vec::with_capacity(WRITE_BUFFER + 64 * 1024);
        let mut batches: Vec<AppendedBatch> = Vec::new();
        for seg in group {
            let mut scanner = SegmentBatchReader::new(&seg.log, &seg.log_path, 0, seg.size)
                .with_holes(seg.holes.clone());
            if !seg.holes.is_empty() {
                // Damaged ranges are not carried over: the cleaned segment is whole.
                changed = true;
            }
            loop {
                self.check_stop(log)?;
                let (position, header) = match scanner.next_batch(true)? {
                    ScannedBatch::Batch { position, header } => (position, header),
                    ScannedBatch::End => break,
                    ScannedBatch::Invalid { position, reason } => {
                        return Err(corrupt(seg, position, reason))
                    }
                };
                let size = header.total_size();
                stats.bytes_read += size as u64;
                self.throttler.maybe_throttle(size as u64);
                let batch = scanner.batch_bytes()?;
                let at = out.len();
                let marker = header
                    .is_control()
                    .then(|| parse_control_batch(batch).map(|(m, _)| m))
                    .flatten();
                let retention = retain_batch(
                    &header,
                    marker,
                    &mut txns,
                    &view.producers,
                    group_next_offset,
                    now_ms,
                );
                let control = header.is_control();
                let f = filter_batch(
                    batch,
                    &header,
                    retention.retain_empty,
                    new_horizon,
                    retention.marker_horizon,
                    |r| {
                        !retention.discard_records
                            && (control || retain_record(map, &header, r, now_ms))
                    },
                    &mut out,
                )
                .map_err(|e| corrupt(seg, position, e))?;
                stats.records_read += f.records_read as u64;
                stats.records_kept += f.records_kept as u64;
                if let Some(h) = f.delete_horizon {
                    stats.max_delete_horizon =
                        Some(stats.max_delete_horizon.map_or(h, |m| m.max(h)));
                }
                if f.bytes_written != size || out[at..] != *batch {
                    changed = true;
                }
                let max_timestamp = f.max_timestamp;
                if out.len() > at {
                    batches.push(AppendedBatch {
                        position_in_buffer: at,
                        size: out.len() - at,
                        base_offset: header.base_offset,
                        next_offset: header.next_offset(),
                        max_timestamp,
                    });
                }
                if out.len() >= WRITE_BUFFER {
                    self.flush_out(&mut cleaned, &mut out, &mut batches, index_interval, stats)?;
                }
            }
        }
        self.flush_out(&mut cleaned, &mut out, &mut batches, index_interval, stats)?;
        for txn in txns.take_kept_aborted() {
            cleaned.txn_index.append(txn)?;
        }
        Ok((cleaned, changed))
    }

    fn flush_out(
        &mut self,
        cleaned: &mut LogSegment,
        out: &mut Vec<u8>,
        batches: &mut Vec<AppendedBatch>,
        index_interval: u64,
        stats: &mut CleanStats,
    ) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        cleaned.append(out, batches, 0, index_interval)?;
        stats.bytes_written += out.len() as u64;
        self.throttler.maybe_throttle(out.len() as u64);
        out.clear();
        batches.clear();
        Ok(())
    }
}

/// Groups adjacent segments so each group's total size stays within
/// `max_bytes` and its offsets within a 32-bit relative range (Kafka's
/// `groupSegmentsBySize`).
fn group_by_size<'a>(
    segments: &[&'a SealedSegment],
    max_bytes: u64,
) -> Vec<Vec<&'a SealedSegment>> {
    let mut groups: Vec<Vec<&SealedSegment>> = Vec::new();
    let mut size = 0u64;
    for &s in segments {
        let fits = groups.last().is_some_and(|g| {
            size + s.size <= max_bytes && s.next_offset - g[0].base_offset <= i64::from(i32::MAX)
        });
        if fits {
            size += s.size;
            if let Some(g) = groups.last_mut() {
                g.push(s);
            }
        } else {
            size = s.size;
            groups.push(vec![s]);
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;
    #[cfg(feature = "failpoints")]
    use std::sync::Arc;

    use floe_protocol::kafka_protocol::records::Compression;

    use super::*;
    use crate::test_util::{config, decode_keyed, keyed_batch, keyed_txn_batch};

    type Row = (i64, String, Option<String>);

    const COMPACT: &[(&str, &str)] =
        &[("cleanup.policy", "compact"), ("segment.bytes", "700"), ("delete.retention.ms", "1000")];

    fn open(dir: &Path) -> PartitionLog {
        PartitionLog::open(dir, "t", 0, config(COMPACT), None, None).unwrap()
    }

    /// Every record below the high watermark, walking the log with reads.
    fn read_all(log: &PartitionLog) -> Vec<Row> {
        let mut rows = Vec::new();
        let mut offset = log.log_start_offset();
        while offset < log.high_watermark() {
            let Some(region) = log
                .read(offset, 1 << 20, true, crate::IsolationLevel::ReadUncommitted)
                .unwrap()
                .region
            else {
                break;
            };
            let bytes = region.read_to_vec().unwrap();
            let (next, end) = crate::test_util::stored_batches_end(&bytes);
            assert!(next > offset, "a read at {offset} returns whole batches");
            offset = next;
            rows.extend(
                decode_keyed(&bytes[..end]).into_iter().filter(|r| r.0 >= log.log_start_offset()),
            );
        }
        rows
    }

    /// 3 keys' worth of updates over many batches and segments, compressed
    /// and not, with a tombstone for `k1`; then one more batch in the active segment.
    fn fill(log: &PartitionLog, ts: i64) {
        for i in 0..30 {
            let v0 = format!("a{i}");
            let v1 = format!("b{i}");
            let compression = if i % 2 == 0 { Compression::None } else { Compression::Zstd };
            let k1 = if i == 29 { None } else { Some(v1.as_str()) };
            log.append(
                &mut keyed_batch(
                    &[("k0", Some(&v0)), ("k1", k1), (&format!("u{i}"), Some("once"))],
                    ts,
                    compression,
                ),
                ts,
            )
            .unwrap();
        }
        log.roll_now().unwrap();
        log.append(&mut keyed_batch(&[("k0", Some("active"))], ts, Compression::None), ts).unwrap();
    }

    /// What compaction must leave of `rows`: each key's latest record, tombstones
    /// kept (`drop_tombstones` false) or gone, records of the active segment all.
    fn expected(rows: &[Row], active_base: i64, drop_tombstones: bool) -> Vec<Row> {
        let mut latest: BTreeMap<&str, i64> = BTreeMap::new();
        for r in rows.iter().filter(|r| r.0 < active_base) {
            latest.insert(&r.1, r.0);
        }
        rows.iter()
            .filter(|r| {
                r.0 >= active_base
                    || (latest[r.1.as_str()] == r.0 && (r.2.is_some() || !drop_tombstones))
            })
            .cloned()
            .collect()
    }

    /// Failpoints are process-wide: the tests that clean take turns.
    fn serial() -> std::sync::MutexGuard<'static, ()> {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn clean(log: &PartitionLog, now: i64) -> (i64, CleanStats) {
        let stop = AtomicBool::new(false);
        let mut throttler = Throttler::new(f64::INFINITY);
        let view = log.cleaner_view().unwrap();
        let range = DirtyRange::of(&view, None, now);
        Cleaner { map_memory: 1 << 20, stop: &stop, throttler: &mut throttler }
            .clean(log, &view, &range, now)
            .unwrap()
    }

    /// Lets one group take every sealed segment (written at 700 bytes each).
    fn one_group(log: &PartitionLog) {
        log.set_config(config(&[
            ("cleanup.policy", "compact"),
            ("segment.bytes", "100000"),
            ("delete.retention.ms", "1000"),
        ]));
    }

    fn stray_files(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".cleaned") || n.ends_with(".swap") || n.ends_with(".deleted"))
            .collect()
    }

    #[test]
    fn keeps_each_keys_latest_record_at_its_offset_and_shrinks_the_log() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path());
        fill(&log, 1_000);
        let before = read_all(&log);
        assert_eq!(before.len(), 91);
        let active_base = log.cleaner_view().unwrap().active_base_offset;
        let (segments, size) = (log.segment_count(), log.size_bytes());
        assert!(segments > 4, "{segments} segments");
        let view = log.cleaner_view().unwrap();
        let range = DirtyRange::of(&view, None, 2_000);
        assert!(range.is_due(0.5) && range.dirty_ratio() == 1.0, "{range:?}");
        one_group(&log);
        let (end, stats) = clean(&log, 2_000);
        assert_eq!(end, active_base);
        assert!(stats.segments_swapped >= 1 && stats.bytes_written < stats.bytes_read, "{stats:?}");
        let after = read_all(&log);
        assert_eq!(after, expected(&before, active_base, false));
        assert!(after.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(log.size_bytes() < size && log.segment_count() < segments);
        assert_eq!((log.log_end_offset(), log.high_watermark()), (91, 91));
        assert!(stray_files(dir.path()).is_empty(), "{:?}", stray_files(dir.path()));
        // The cleaned range is clean now; appends go on at the log end.
        let view = log.cleaner_view().unwrap();
        assert_eq!(DirtyRange::of(&view, Some(end), 2_000).dirty_bytes, 0);
        assert_eq!(
            log.append(&mut keyed_batch(&[("k9", Some("z"))], 3_000, Compression::None), 3_000)
                .unwrap()
                .first_offset,
            91
        );
        // Reopened, recovery finds the same log.
        let want = read_all(&log);
        drop(log);
        let log = open(dir.path());
        assert_eq!(read_all(&log), want);
        let log_no_checkpoints =
            PartitionLog::open(dir.path(), "t", 0, config(COMPACT), Some(0), Some(0));
        drop(log);
        assert_eq!(read_all(&log_no_checkpoints.unwrap()), want);
    }

    #[test]
    fn tombstones_go_only_after_the_delete_horizon() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path());
        fill(&log, 1_000);
        let before = read_all(&log);
        let active_base = log.cleaner_view().unwrap().active_base_offset;
        clean(&log, 2_000);
        assert!(
            read_all(&log).iter().any(|r| r.1 == "k1" && r.2.is_none()),
            "first clean stamps a horizon of 3000"
        );
        // More dirty data, so there is something to clean again.
        let more = |log: &PartitionLog| {
            log.roll_now().unwrap();
            log.append(&mut keyed_batch(&[("x", Some("y"))], 1_000, Compression::None), 1_000)
                .unwrap();
        };
        more(&log);
        clean(&log, 2_999);
        assert!(read_all(&log).iter().any(|r| r.1 == "k1" && r.2.is_none()), "before the horizon");
        more(&log);
        clean(&log, 3_001);
        let after = read_all(&log);
        assert!(!after.iter().any(|r| r.1 == "k1"), "after the horizon");
        // Everything else: each key's latest record (k0's is now the one that was active).
        let mut want: Vec<Row> =
            expected(&before, active_base, true).into_iter().filter(|r| r.1 != "k0").collect();
        want.push((active_base, "k0".into(), Some("active".into())));
        want.sort();
        let mut got: Vec<Row> = after.into_iter().filter(|r| r.1 != "x").collect();
        got.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn a_tiered_topic_is_cleaned_only_below_what_tiering_has_read() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path());
        fill(&log, 1_000);
        log.set_config(config(&[
            ("cleanup.policy", "compact"),
            ("segment.bytes", "700"),
            ("floe.iceberg.enabled", "true"),
        ]));
        let range = |log: &PartitionLog| DirtyRange::of(&log.cleaner_view().unwrap(), None, 2_000);
        assert_eq!(range(&log).dirty_bytes, 0, "nothing tiered yet: nothing to clean");
        let second = log.sealed_segments()[1].clone();
        log.set_retention_floor(Some(second.next_offset));
        assert_eq!(range(&log).first_uncleanable_offset, second.next_offset);
        log.set_retention_floor(Some(1_000));
        assert_eq!(
            range(&log).first_uncleanable_offset,
            log.cleaner_view().unwrap().active_base_offset
        );
    }

    /// (base offset, is a control batch, records, has a delete horizon) of every stored batch.
    fn stored_batches(log: &PartitionLog) -> Vec<(i64, bool, i32, bool)> {
        let region = log
            .read(log.log_start_offset(), 1 << 24, true, crate::IsolationLevel::ReadUncommitted)
            .unwrap()
            .region
            .unwrap();
        let bytes = region.read_to_vec().unwrap();
        let mut out = Vec::new();
        let mut pos = 0;
        while let Ok(h) = RecordBatchHeader::parse(&bytes[pos..]) {
            out.push((h.base_offset, h.is_control(), h.records_count, h.has_delete_horizon()));
            pos += h.total_size();
        }
        out
    }

    #[test]
    fn aborted_data_goes_at_once_and_markers_a_horizon_after_their_transaction() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path());
        let none = Compression::None;
        let plain = |kv: &[(&str, Option<&str>)]| {
            log.append(&mut keyed_batch(kv, 1_000, none), 1_000).unwrap();
        };
        let txn = |kv: &[(&str, Option<&str>)], producer| {
            log.append(&mut keyed_txn_batch(kv, 1_000, producer), 1_000).unwrap();
        };
        plain(&[("k1", Some("a")), ("k2", Some("b"))]); // 0-1
        txn(&[("k1", Some("c"))], (10, 0, 0)); // 2
        txn(&[("k2", Some("x")), ("k3", Some("y"))], (20, 0, 0)); // 3-4, aborted
        log.append_txn_marker(10, 0, ControlRecordType::Commit, 0, 1_000).unwrap(); // 5
        log.append_txn_marker(20, 0, ControlRecordType::Abort, 0, 1_000).unwrap(); // 6
        txn(&[("k4", Some("z"))], (10, 0, 1)); // 7
        txn(&[("k5", Some("w"))], (20, 0, 2)); // 8
        log.append_txn_marker(10, 0, ControlRecordType::Commit, 0, 1_000).unwrap(); // 9
        log.append_txn_marker(20, 0, ControlRecordType::Commit, 0, 1_000).unwrap(); // 10
        plain(&[("k1", Some("d"))]); // 11: the committed k1=c is outdated
        txn(&[("k6", Some("v"))], (30, 0, 0)); // 12, aborted by an epoch bump:
        log.append_txn_marker(30, 1, ControlRecordType::Abort, 0, 1_000).unwrap(); // 13
        for i in 0..20 {
            plain(&[("k9", Some(&format!("v{i}")))]);
        }
        one_group(&log);
        let aborted = |log: &PartitionLog| log.cleaner_view().unwrap().aborted_txns;
        assert_eq!(aborted(&log).len(), 2);
        let has = |log: &PartitionLog, offset: i64| {
            stored_batches(log).into_iter().find(|b| b.0 == offset)
        };

        clean(&log, 2_000);
        let offsets: Vec<i64> = read_all(&log).iter().map(|r| r.0).filter(|&o| o < 12).collect();
        // k2=b stays: the aborted k2=x never was its latest value. Offset 2 (k1=c)
        // goes to k1=d; the aborted 3-4 go whole.
        assert_eq!(offsets, vec![1, 5, 6, 7, 8, 9, 10, 11], "{:?}", stored_batches(&log));
        // Both first markers stay (this clean saw their transactions' batches), unstamped;
        // the ABORT is in the cleaned segment's .txnindex.
        assert_eq!(has(&log, 5), Some((5, true, 1, false)));
        assert_eq!(has(&log, 6), Some((6, true, 1, false)));
        assert_eq!(aborted(&log).len(), 2, "{:?}", aborted(&log));
        let log = {
            drop(log);
            open(dir.path())
        };
        assert_eq!(aborted(&log).len(), 2, "the cleaned .txnindex is on disk");
        assert_eq!(log.last_stable_offset(), log.high_watermark());

        // Next clean: nothing of either transaction is left, so the markers
        // get a delete horizon; the aborted transaction leaves the index.
        clean(&log, 3_000);
        assert_eq!(has(&log, 5), Some((5, true, 1, true)));
        assert_eq!(has(&log, 6), Some((6, true, 1, true)));
        assert!(aborted(&log).is_empty(), "{:?}", aborted(&log));
        // Before the horizon (3_000 + delete.retention.ms) they stay; after it they go.
        clean(&log, 3_500);
        assert!(has(&log, 5).is_some() && has(&log, 6).is_some());
        clean(&log, 4_001);
        assert_eq!((has(&log, 5), has(&log, 6)), (None, None), "{:?}", stored_batches(&log));
        // The markers of the producers' last transactions stay: their data does. The
        // epoch bump's abort is producer 30's latest entry: it stays, emptied (Kafka's
        // RETAIN_EMPTY), for the epoch it carries.
        assert_eq!(has(&log, 13), Some((13, true, 0, false)));
        assert_eq!(has(&log, 9), Some((9, true, 1, false)));
        assert_eq!(has(&log, 10), Some((10, true, 1, false)));
        let offsets: Vec<i64> = read_all(&log).iter().map(|r| r.0).filter(|&o| o < 12).collect();
        assert_eq!(offsets, vec![1, 7, 8, 9, 10, 11]);
        drop(log);
        let log = open(dir.path());
        assert_eq!(log.last_stable_offset(), log.high_watermark());
        assert_eq!(read_all(&log).iter().map(|r| r.0).filter(|&o| o < 12).count(), 6);
    }

    #[test]
    fn an_open_transaction_bounds_the_dirty_range() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path());
        log.append(&mut keyed_batch(&[("k1", Some("a"))], 1_000, Compression::None), 1_000)
            .unwrap();
        log.append(&mut keyed_txn_batch(&[("k1", Some("b"))], 1_000, (7, 0, 0)), 1_000).unwrap(); // 1, open
        for i in 0..20 {
            log.append(
                &mut keyed_batch(&[("k1", Some(&format!("v{i}")))], 1_000, Compression::None),
                1_000,
            )
            .unwrap();
        }
        let view = log.cleaner_view().unwrap();
        assert_eq!(view.last_stable_offset, 1);
        assert_eq!(DirtyRange::of(&view, None, 2_000).first_uncleanable_offset, 1);
        log.append_txn_marker(7, 0, ControlRecordType::Abort, 0, 1_000).unwrap();
        let view = log.cleaner_view().unwrap();
        assert_eq!(
            DirtyRange::of(&view, None, 2_000).first_uncleanable_offset,
            view.active_base_offset
        );
    }

    /// Not a test: prints the cleaner's rate on 1 KiB records, 10 versions of
    /// each key (`cargo test --release -p floe-storage cleaner_throughput -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn cleaner_throughput() {
        let dir = tempfile::tempdir().unwrap();
        let log = PartitionLog::open(
            dir.path(),
            "t",
            0,
            config(&[("cleanup.policy", "compact"), ("segment.bytes", "16777216")]),
            None,
            None,
        )
        .unwrap();
        let value = "v".repeat(1000);
        for round in 0..10 {
            for chunk in 0..1000 {
                let keys: Vec<String> =
                    (0..10).map(|i| format!("key-{:06}", chunk * 10 + i)).collect();
                let records: Vec<(&str, Option<&str>)> =
                    keys.iter().map(|k| (k.as_str(), Some(value.as_str()))).collect();
                log.append(&mut keyed_batch(&records, round, Compression::None), round).unwrap();
            }
        }
        log.roll_now().unwrap();
        let size = log.size_bytes();
        let started = std::time::Instant::now();
        let (_, stats) = clean(&log, 1_000);
        let secs = started.elapsed().as_secs_f64();
        println!(
            "cleaned {:.1} MB ({} records) into {:.1} MB in {:.3} s: {:.0} MB/s read",
            size as f64 / 1e6,
            stats.records_read,
            log.size_bytes() as f64 / 1e6,
            secs,
            stats.bytes_read as f64 / 1e6 / secs
        );
    }

    #[test]
    fn a_compacted_only_log_ignores_time_and_size_retention() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path());
        fill(&log, 1_000);
        log.set_config(config(&[
            ("cleanup.policy", "compact"),
            ("segment.bytes", "700"),
            ("retention.ms", "1"),
            ("retention.bytes", "1"),
        ]));
        assert_eq!(log.apply_retention(1_000_000).unwrap(), 0);
        log.set_config(config(&[
            ("cleanup.policy", "compact,delete"),
            ("segment.bytes", "700"),
            ("retention.ms", "1"),
        ]));
        assert!(log.apply_retention(1_000_000).unwrap() > 0);
    }

    /// A crash (a panic at the failpoint, the log then abandoned without a
    /// flush or close) at every durable step of the swap: reopening finds the
    /// old segments or the cleaned ones, never a mix, every offset where it was.
    #[cfg(feature = "failpoints")]
    #[test]
    fn a_crash_at_every_swap_step_leaves_the_old_or_the_new_log() {
        let _serial = serial();
        let points = [
            ("cleaner.cleaned.written", false),
            ("cleaner.swap.index_renamed", false),
            ("cleaner.swap.renamed", true),
            ("cleaner.old.deleted", true),
            ("cleaner.swap.done", true),
        ];
        for (point, decided) in points {
            let dir = tempfile::tempdir().unwrap();
            let log = open(dir.path());
            fill(&log, 1_000);
            log.flush().unwrap();
            let before = read_all(&log);
            let active_base = log.cleaner_view().unwrap().active_base_offset;
            let after = expected(&before, active_base, false);
            one_group(&log);
            crate::failpoint::arm(&format!("{point}=1*panic->off")).unwrap();
            let log = Arc::new(log);
            let crashed =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| clean(&log, 2_000)));
            assert!(crashed.is_err(), "{point} fired");
            crate::failpoint::arm(&format!("{point}=off")).unwrap();
            std::mem::forget(log);
            let log = open(dir.path());
            let found = read_all(&log);
            let want = if decided { &after } else { &before };
            assert_eq!(&found, want, "after a crash at {point}");
            assert_eq!(log.log_end_offset(), 91, "{point}");
            assert!(stray_files(dir.path()).is_empty(), "{point}: {:?}", stray_files(dir.path()));
            // And the next clean finishes the job.
            clean(&log, 2_000);
            assert_eq!(read_all(&log), after, "{point}: cleaned after recovery");
        }
    }
}
