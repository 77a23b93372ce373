//! `Cleaner`: one compaction of one partition log (Kafka's `Cleaner`): the
//! offset map of the dirty range, the rewrite of the sealed segments keeping
//! each key's latest record, and the crash-safe swap of the results.
//!
//! # What is cleaned
//! The *dirty range* is `[first dirty offset, first uncleanable offset)`:
//! from the cleaner checkpoint (or the log start offset) up to the first of
//! the active segment, the high watermark, the first segment with records
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
//! Transactional and control batches are kept unchanged for now
//! ([`retain_batch`] is where aborted data and expired markers will go).
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
use crate::error::{IoContext, Result, StorageError};
use crate::failpoint;
use crate::file_names::{CLEANED_SUFFIX, SWAP_SUFFIX};
use crate::log::{CleanerView, PartitionLog, SealedSegment};
use crate::offset_map::OffsetMap;
use crate::producer_state::ProducerStateManager;
use crate::segment::{AppendedBatch, FileBatchScanner, LogSegment, Scanned, SegmentPaths};
use crate::throttler::Throttler;

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
        let mut first_uncleanable = view.active_base_offset.min(view.high_watermark);
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
pub(crate) enum BatchRetention {
    /// Copied as it is, every record kept.
    KeepUnchanged,
    /// Records filtered; the batch stays (empty) even if none is left when `retain_empty`.
    Filter { retain_empty: bool },
}

/// The batch-level decision. Transactional data and control batches
/// (transaction markers) are kept unchanged: removing aborted transactions
/// and expired markers needs the aborted-transaction index, and belongs here.
/// The last batch of an active producer stays (empty if need be) so its
/// sequence survives recovery, as does the last batch of a group (so the
/// cleaned segment ends where the group did).
pub(crate) fn retain_batch(
    header: &RecordBatchHeader,
    producers: &ProducerStateManager,
    group_next_offset: i64,
) -> BatchRetention {
    if header.is_transactional() || header.is_control() {
        return BatchRetention::KeepUnchanged;
    }
    let last_of_producer = header.producer_id >= 0
        && producers
            .last_batch(header.producer_id)
            .is_some_and(|(_, b)| b.last_offset == header.last_offset());
    BatchRetention::Filter {
        retain_empty: last_of_producer || header.next_offset() == group_next_offset,
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
    latest && (record.has_value || keep_tombstone)
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
            self.map_segment(log, seg, range.first_dirty_offset, &mut map, &mut stats)?;
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
        stats: &mut CleanStats,
    ) -> Result<()> {
        let mut scanner = FileBatchScanner::new(&seg.log, &seg.log_path, 0, seg.size)
            .with_holes(seg.holes.clone());
        loop {
            self.check_stop(log)?;
            let (position, header) = match scanner.next_batch(true)? {
                Scanned::Batch { position, header } => (position, header),
                Scanned::End => return Ok(()),
                Scanned::Invalid { position, reason } => {
                    return Err(corrupt(seg, position, reason))
                }
            };
            let size = header.total_size();
            stats.bytes_read += size as u64;
            self.throttler.maybe_throttle(size as u64);
            if header.last_offset() < from
                || header.is_control()
                || header.is_transactional()
                || header.records_count == 0
            {
                continue;
            }
            let batch = scanner.batch_bytes(position, size);
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
            let [index, time_index, log_file] = cleaned_paths.indexes_then_log();
            std::fs::rename(index, &swap_paths.index).ctx("rename cleaned index", index)?;
            std::fs::rename(time_index, &swap_paths.time_index)
                .ctx("rename cleaned time index", time_index)?;
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
        let mut out = Vec::with_capacity(WRITE_BUFFER + 64 * 1024);
        let mut batches: Vec<AppendedBatch> = Vec::new();
        for seg in group {
            let mut scanner = FileBatchScanner::new(&seg.log, &seg.log_path, 0, seg.size)
                .with_holes(seg.holes.clone());
            if !seg.holes.is_empty() {
                // Damaged ranges are not carried over: the cleaned segment is whole.
                changed = true;
            }
            loop {
                self.check_stop(log)?;
                let (position, header) = match scanner.next_batch(true)? {
                    Scanned::Batch { position, header } => (position, header),
                    Scanned::End => break,
                    Scanned::Invalid { position, reason } => {
                        return Err(corrupt(seg, position, reason))
                    }
                };
                let size = header.total_size();
                stats.bytes_read += size as u64;
                self.throttler.maybe_throttle(size as u64);
                let batch = scanner.batch_bytes(position, size);
                let at = out.len();
                let max_timestamp = match retain_batch(&header, &view.producers, group_next_offset)
                {
                    BatchRetention::KeepUnchanged => {
                        out.extend_from_slice(batch);
                        stats.records_read += u64::try_from(header.records_count).unwrap_or(0);
                        stats.records_kept += u64::try_from(header.records_count).unwrap_or(0);
                        header.max_timestamp
                    }
                    BatchRetention::Filter { retain_empty } => {
                        let f = filter_batch(
                            batch,
                            &header,
                            retain_empty,
                            new_horizon,
                            |r| retain_record(map, &header, r, now_ms),
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
                        f.max_timestamp
                    }
                };
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
    use std::sync::Arc;

    use floe_protocol::kafka_protocol::records::Compression;

    use super::*;
    use crate::test_util::{config, decode_keyed, keyed_batch};

    type Row = (i64, String, Option<String>);

    const COMPACT: &[(&str, &str)] = &[
        ("cleanup.policy", "compact"),
        ("segment.bytes", "700"),
        ("delete.retention.ms", "1000"),
    ];

    fn open(dir: &Path) -> PartitionLog {
        PartitionLog::open(dir, "t", 0, config(COMPACT), None, None).unwrap()
    }

    /// Every record below the high watermark, walking the log with reads.
    fn read_all(log: &PartitionLog) -> Vec<Row> {
        let mut rows = Vec::new();
        let mut offset = log.log_start_offset();
        while offset < log.high_watermark() {
            let Some(region) = log.read(offset, 1 << 20, true).unwrap().region else {
                break;
            };
            let bytes = region.read_to_vec().unwrap();
            let (next, end) = crate::test_util::stored_batches_end(&bytes);
            assert!(next > offset, "a read at {offset} returns whole batches");
            offset = next;
            rows.extend(
                decode_keyed(&bytes[..end])
                    .into_iter()
                    .filter(|r| r.0 >= log.log_start_offset()),
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
            let compression = if i % 2 == 0 {
                Compression::None
            } else {
                Compression::Zstd
            };
            let k1 = if i == 29 { None } else { Some(v1.as_str()) };
            log.append(
                &mut keyed_batch(
                    &[
                        ("k0", Some(&v0)),
                        ("k1", k1),
                        (&format!("u{i}"), Some("once")),
                    ],
                    ts,
                    compression,
                ),
                ts,
            )
            .unwrap();
        }
        log.roll_now().unwrap();
        log.append(
            &mut keyed_batch(&[("k0", Some("active"))], ts, Compression::None),
            ts,
        )
        .unwrap();
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
        LOCK.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn clean(log: &PartitionLog, now: i64) -> (i64, CleanStats) {
        let stop = AtomicBool::new(false);
        let mut throttler = Throttler::new(f64::INFINITY);
        let view = log.cleaner_view().unwrap();
        let range = DirtyRange::of(&view, None, now);
        Cleaner {
            map_memory: 1 << 20,
            stop: &stop,
            throttler: &mut throttler,
        }
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
        assert!(
            stats.segments_swapped >= 1 && stats.bytes_written < stats.bytes_read,
            "{stats:?}"
        );
        let after = read_all(&log);
        assert_eq!(after, expected(&before, active_base, false));
        assert!(after.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(log.size_bytes() < size && log.segment_count() < segments);
        assert_eq!((log.log_end_offset(), log.high_watermark()), (91, 91));
        assert!(
            stray_files(dir.path()).is_empty(),
            "{:?}",
            stray_files(dir.path())
        );
        // The cleaned range is clean now; appends go on at the log end.
        let view = log.cleaner_view().unwrap();
        assert_eq!(DirtyRange::of(&view, Some(end), 2_000).dirty_bytes, 0);
        assert_eq!(
            log.append(
                &mut keyed_batch(&[("k9", Some("z"))], 3_000, Compression::None),
                3_000
            )
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
            log.append(
                &mut keyed_batch(&[("x", Some("y"))], 1_000, Compression::None),
                1_000,
            )
            .unwrap();
        };
        more(&log);
        clean(&log, 2_999);
        assert!(
            read_all(&log).iter().any(|r| r.1 == "k1" && r.2.is_none()),
            "before the horizon"
        );
        more(&log);
        clean(&log, 3_001);
        let after = read_all(&log);
        assert!(!after.iter().any(|r| r.1 == "k1"), "after the horizon");
        // Everything else: each key's latest record (k0's is now the one that was active).
        let mut want: Vec<Row> = expected(&before, active_base, true)
            .into_iter()
            .filter(|r| r.1 != "k0")
            .collect();
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
        assert_eq!(
            range(&log).dirty_bytes,
            0,
            "nothing tiered yet: nothing to clean"
        );
        let second = log.sealed_segments()[1].clone();
        log.set_retention_floor(Some(second.next_offset));
        assert_eq!(range(&log).first_uncleanable_offset, second.next_offset);
        log.set_retention_floor(Some(1_000));
        assert_eq!(
            range(&log).first_uncleanable_offset,
            log.cleaner_view().unwrap().active_base_offset
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
                let keys: Vec<String> = (0..10)
                    .map(|i| format!("key-{:06}", chunk * 10 + i))
                    .collect();
                let records: Vec<(&str, Option<&str>)> = keys
                    .iter()
                    .map(|k| (k.as_str(), Some(value.as_str())))
                    .collect();
                log.append(&mut keyed_batch(&records, round, Compression::None), round)
                    .unwrap();
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
            assert!(
                stray_files(dir.path()).is_empty(),
                "{point}: {:?}",
                stray_files(dir.path())
            );
            // And the next clean finishes the job.
            clean(&log, 2_000);
            assert_eq!(read_all(&log), after, "{point}: cleaned after recovery");
        }
    }
}
