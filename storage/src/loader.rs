//! `LogLoader`: opens a partition directory and recovers it after a crash.
//!
//! Segments whose offsets all lie below the recovery point were fsynced
//! before the crash and are trusted: their indexes get cheap sanity checks
//! and only the batch headers after the last offset-index entry are read (to
//! learn the segment's end). Every other segment is recovered: scanned batch
//! by batch, checking header sanity and CRC-32C, while its indexes are
//! rebuilt. A trusted segment whose index fails its checks is recovered the
//! same way.
//!
//! Damage is handled by where it is, not by which segment it is in:
//! - **A damaged tail** (no valid batch anywhere after it: a torn write, a
//!   zero-filled or garbage end after a crash) is truncated, as Kafka's
//!   unclean-shutdown recovery does. Only the last segment can have one.
//! - **Damage followed by valid batches** (bit rot, a lost page in the
//!   middle) is never truncated: truncating would throw away acknowledged
//!   records that are still intact and hand their offsets out again. The
//!   range (file, bytes, offsets) is logged as an error and kept in the
//!   segment ([`crate::CorruptRange`]); reads and scans step over it, so
//!   consumers see an offset gap, as on a compacted topic, and the partition's
//!   `corrupt_ranges` feed a metric. `floe verify` finds the same ranges offline.
//!
//! Before anything is read, what a crash left of a log cleaner swap is
//! finished or discarded (`.swap` files complete it, `.cleaned` files are
//! deleted), so the directory holds either the old segments or the cleaned
//! one, never both.
//!
//! Then the producer state is rebuilt: from the latest valid `.snapshot` at
//! or below the recovered log end offset, plus the batch headers of the log
//! after it (headers only: nothing is decompressed, but a control batch's one
//! record is read for its marker type). Transactional batches start ongoing
//! transactions, markers complete them. Snapshots above the log end describe
//! batches recovery cut off and are deleted (Kafka's stray snapshots).
//! Without a usable snapshot the state comes from the headers of the whole log.
//!
//! The `.txnindex` of every recovered segment is rebuilt from its ABORT
//! markers during that replay; an entry needs the transaction's first offset
//! and the last stable offset at the marker, so the replay starts at or below
//! the first recovered segment: from the latest valid snapshot at or below it
//! (or the start of the log), switching to the newest snapshot's state at its
//! offset. A trusted segment whose `.txnindex` is torn is recovered.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use tracing::{debug, error, info, warn};

use crate::atomic_file::sync_dir;
use crate::batch_reader::{ScannedBatch, SegmentBatchReader};
use crate::error::{IoContext, Result};
use crate::file_names::{
    index_file, log_file, parse_segment_file_name, parse_snapshot_file_name, snapshot_file,
    time_index_file, txn_index_file, SegmentFileKind, CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX,
    TMP_SUFFIX,
};
use crate::index_file::open_rw;
use crate::offset_index::OffsetIndex;
use crate::producer_state::{delete_snapshot, read_snapshot, ProducerStateManager};
use crate::segment::{LogSegment, SegmentPaths};
use crate::time_index::TimeIndex;
use crate::transaction::{parse_control_batch, AbortedTxn};
use crate::txn_index::TransactionIndex;
use crate::verify::{find_next_valid_batch, CorruptRange};

fn remove_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).ctx("remove file", path),
    }
}

/// A loaded partition directory.
#[derive(Debug)]
pub(crate) struct LoadedLog {
    pub(crate) segments: BTreeMap<i64, LogSegment>,
    pub(crate) log_start_offset: i64,
    pub(crate) log_end_offset: i64,
    pub(crate) recovery_point: i64,
    pub(crate) producers: ProducerStateManager,
    /// Offsets of the `.snapshot` files kept.
    pub(crate) snapshots: BTreeSet<i64>,
}

/// Loads and recovers one partition directory.
#[derive(Debug)]
pub(crate) struct LogLoader<'a> {
    pub(crate) dir: &'a Path,
    pub(crate) index_interval_bytes: u64,
    /// From the recovery-point checkpoint; `None` recovers every segment.
    pub(crate) recovery_point: Option<i64>,
    /// From the log-start-offset checkpoint.
    pub(crate) log_start_offset: Option<i64>,
    /// The topic is in shared storage ([`crate::LogConfig::is_shared_storage`]):
    /// the checkpointed log start offset stands even below the first local
    /// segment, whose offsets below it live in the Iceberg table only.
    pub(crate) shared_storage: bool,
    /// Whether offsets missing between a recovered segment's last batch and
    /// the next segment's base are damage (a sealed segment's tail lost in a
    /// power cut). Not on a compacted log, whose cleaned segments end wherever
    /// their last kept record does.
    pub(crate) gaps_are_damage: bool,
}

enum Outcome {
    Trusted(Box<LogSegment>),
    Recover(String),
}

impl LogLoader<'_> {
    /// Loads the directory (creating it if missing); see the module docs.
    pub(crate) fn load(self) -> Result<LoadedLog> {
        let dir = self.dir;
        fs::create_dir_all(dir).ctx("create partition directory", dir)?;
        self.finish_cleaner_swaps()?;
        let (bases, snapshots) = self.list_and_clean()?;
        let recovery_point = self.recovery_point.unwrap_or(0);
        let mut segments = BTreeMap::new();
        let mut modified = false;
        let mut recovered: Vec<i64> = Vec::new();
        // Segments whose `.txnindex` the producer-state replay rebuilds.
        let mut rebuilt: BTreeSet<i64> = BTreeSet::new();
        let mut cut_at: Option<usize> = None;

        for (i, &base) in bases.iter().enumerate() {
            let next_base = bases.get(i + 1).copied();
            let outcome = if base < recovery_point {
                self.load_trusted(base)?
            } else {
                Outcome::Recover(String::new())
            };
            let segment = match outcome {
                // A sealed segment ends where the next begins. One that ends short
                // lost its tail although the recovery point vouched for it (a
                // checkpoint taken over data that was cut and written again): the
                // full scan reports the missing offsets as damage, which a replica
                // then fetches again from its leader.
                Outcome::Trusted(seg)
                    if seg.next_offset <= recovery_point
                        && !(self.gaps_are_damage
                            && next_base.is_some_and(|n| seg.next_offset < n)) =>
                {
                    *seg
                }
                Outcome::Trusted(_) => {
                    rebuilt.insert(base);
                    self.recover_segment(base, next_base, &mut modified, &mut cut_at, i)?
                }
                Outcome::Recover(reason) => {
                    if !reason.is_empty() {
                        warn!(segment = %log_file(dir, base).display(), %reason, "rebuilding indexes of segment below the recovery point");
                    }
                    rebuilt.insert(base);
                    self.recover_segment(base, next_base, &mut modified, &mut cut_at, i)?
                }
            };
            recovered.push(base);
            if let Some(prev) = segments.values().next_back().map(|s: &LogSegment| s.next_offset) {
                if base < prev {
                    warn!(dir = %dir.display(), base, previous_end = prev, "segment overlaps its predecessor");
                }
            }
            segments.insert(base, segment);
            if cut_at.is_some() {
                break;
            }
        }
        if let Some(i) = cut_at {
            for &base in &bases[i + 1..] {
                warn!(segment = %log_file(dir, base).display(), "deleting segment after a truncated one");
                rebuilt.remove(&base);
                for p in [
                    log_file(dir, base),
                    index_file(dir, base),
                    time_index_file(dir, base),
                    txn_index_file(dir, base),
                ] {
                    match fs::remove_file(&p) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(e).ctx("delete segment after truncation", &p),
                    }
                }
            }
        }

        let first_base = segments.keys().next().copied();
        // Copy mode: local segments are the whole log, so the log starts at
        // the first one at the earliest. Shared storage: local deletion moves
        // only the local log start offset (the first segment's base), and the
        // checkpoint keeps where the table's data begins; no checkpoint is 0,
        // as Kafka's loader for a tiered log, and the table retention of a
        // later pass raises it (`PartitionLog::set_log_start_offset`).
        let checkpointed = self.log_start_offset.unwrap_or(0);
        let mut log_start_offset = if self.shared_storage {
            checkpointed
        } else {
            checkpointed.max(first_base.unwrap_or(0))
        };
        let mut log_end_offset =
            segments.values().next_back().map_or(log_start_offset, |s| s.next_offset);
        if segments.is_empty() || log_end_offset < log_start_offset {
            if !segments.is_empty() {
                warn!(dir = %dir.display(), log_start_offset, log_end_offset,
                    "log ends before its start offset; starting an empty log at the start offset");
                for (_, seg) in std::mem::take(&mut segments) {
                    seg.delete_files()?;
                }
            }
            let seg = LogSegment::create(dir, log_start_offset)?;
            segments.insert(log_start_offset, seg);
            modified = true;
            log_end_offset = log_start_offset;
        }
        log_start_offset = log_start_offset.min(log_end_offset);
        rebuilt.retain(|b| segments.contains_key(b));
        let (producers, snapshots) =
            self.load_producer_state(&mut segments, log_end_offset, snapshots, &rebuilt)?;

        // Make what recovery read or rewrote durable, so the recovery point can move to the end.
        for base in recovered {
            if let Some(seg) = segments.get(&base) {
                if base >= recovery_point || seg.next_offset > recovery_point {
                    for (file, path) in seg.files() {
                        file.sync_data().ctx("fsync recovered segment", &path)?;
                    }
                }
            }
        }
        if modified || !rebuilt.is_empty() {
            sync_dir(dir)?;
        }
        Ok(LoadedLog {
            segments,
            log_start_offset,
            log_end_offset,
            recovery_point: log_end_offset,
            producers,
            snapshots,
        })
    }

    /// Rebuilds the producer state: the latest valid snapshot at or below
    /// `log_end_offset`, then the headers of the batches from its offset on;
    /// and the `.txnindex` of the `rebuilt` segments (see the module docs).
    /// Deletes stray and invalid snapshots; returns the state and the snapshots kept.
    pub(crate) fn load_producer_state(
        &self,
        segments: &mut BTreeMap<i64, LogSegment>,
        log_end_offset: i64,
        mut snapshots: BTreeSet<i64>,
        rebuilt: &BTreeSet<i64>,
    ) -> Result<(ProducerStateManager, BTreeSet<i64>)> {
        let dir = self.dir;
        for stray in snapshots.split_off(&(log_end_offset + 1)) {
            warn!(snapshot = %snapshot_file(dir, stray).display(), log_end_offset, "deleting producer snapshot above the log end");
            delete_snapshot(dir, stray)?;
        }
        let (newest, from) =
            self.latest_valid_snapshot(&mut snapshots, log_end_offset)?.unwrap_or_default();
        // Rebuilt segments below the newest snapshot: replay from an older state first.
        let (mut producers, start, mut switch_at) = match rebuilt.first() {
            Some(&first) if first < from => {
                let (older, start) =
                    self.latest_valid_snapshot(&mut snapshots, first)?.unwrap_or_default();
                (older, start, Some((newest, from)))
            }
            _ => (newest, from, None),
        };
        let mut batches = 0u64;
        for seg in segments.values_mut().filter(|s| s.next_offset > start) {
            let rebuild = rebuilt.contains(&seg.base_offset);
            let position =
                if seg.base_offset < start { seg.offset_index.position_for(start) } else { 0 };
            let (log, path) = (seg.log.clone(), seg.log_path.clone());
            let mut scanner =
                SegmentBatchReader::new(&log, &path, position, seg.size).with_holes(seg.holes());
            loop {
                match scanner.next_batch(false)? {
                    ScannedBatch::Batch { header, .. } => {
                        if header.last_offset() < start {
                            continue;
                        }
                        if switch_at.as_ref().is_some_and(|(_, at)| header.base_offset >= *at) {
                            if let Some((state, _)) = switch_at.take() {
                                producers = state;
                            }
                        }
                        let marker = if header.is_control() {
                            parse_control_batch(scanner.batch_bytes()?)
                        } else {
                            None
                        };
                        let completed = producers.update_from_header(&header, marker);
                        if let Some(c) = completed.filter(|c| c.aborted && rebuild) {
                            let entry = AbortedTxn {
                                producer_id: c.producer_id,
                                first_offset: c.first_offset,
                                last_offset: c.last_offset,
                                last_stable_offset: producers.last_stable_offset_after(&c),
                            };
                            seg.txn_index.append(entry)?;
                        }
                        batches += 1;
                    }
                    ScannedBatch::End => break,
                    ScannedBatch::Invalid { position, reason } => {
                        // Recovery left whole batches only; this would be a bug.
                        warn!(segment = %seg.log_path.display(), position, %reason, "unexpected invalid batch while rebuilding producer state");
                        break;
                    }
                }
            }
        }
        if let Some((state, _)) = switch_at.take() {
            producers = state;
        }
        debug!(dir = %dir.display(), snapshot_offset = from, replay_from = start, batches_read = batches,
            producers = producers.producer_count(), rebuilt_txn_indexes = rebuilt.len(), "loaded producer state");
        Ok((producers, snapshots))
    }

    /// The newest valid snapshot at or below `at_most`, and its offset;
    /// invalid ones met on the way are deleted.
    fn latest_valid_snapshot(
        &self,
        snapshots: &mut BTreeSet<i64>,
        at_most: i64,
    ) -> Result<Option<(ProducerStateManager, i64)>> {
        let dir = self.dir;
        while let Some(&offset) = snapshots.range(..=at_most).next_back() {
            match read_snapshot(dir, offset)? {
                Ok(s) => return Ok(Some((s, offset))),
                Err(reason) => {
                    warn!(snapshot = %snapshot_file(dir, offset).display(), %reason, "deleting invalid producer snapshot");
                    delete_snapshot(dir, offset)?;
                    snapshots.remove(&offset);
                }
            }
        }
        Ok(None)
    }

    /// Finishes or discards what a crash left of the log cleaner's swap
    /// (Kafka's `.cleaned` → `.swap` protocol, see [`crate::cleaner`]):
    /// - `.cleaned` files were never complete: deleted (the old segments stay);
    /// - a `<base>.log.swap` is a complete, durable cleaned segment whose swap
    ///   was decided: every segment based in `[base, its next offset)` is one
    ///   it replaces and is deleted, then the `.swap` files take their final
    ///   names. An index `.swap` without its `.log.swap` is left from a swap
    ///   cut short before the decision (or after the log was renamed): deleted,
    ///   and a missing index is rebuilt from the log.
    fn finish_cleaner_swaps(&self) -> Result<()> {
        let dir = self.dir;
        let mut log_swaps = Vec::new();
        let mut index_swaps = Vec::new();
        let mut segments: Vec<(i64, PathBuf)> = Vec::new();
        let mut changed = false;
        for entry in fs::read_dir(dir).ctx("list partition directory", dir)? {
            let entry = entry.ctx("list partition directory", dir)?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let path = entry.path();
            if name.ends_with(CLEANED_SUFFIX) {
                info!(file = %path.display(), "removing an unfinished cleaned segment file");
                fs::remove_file(&path).ctx("remove cleaned file", &path)?;
                changed = true;
            } else if let Some(stem) = name.strip_suffix(SWAP_SUFFIX) {
                match parse_segment_file_name(stem) {
                    Some((base, SegmentFileKind::Log)) => log_swaps.push(base),
                    Some(_) => index_swaps.push(path),
                    None => {}
                }
            } else if let Some((base, _)) = parse_segment_file_name(name) {
                segments.push((base, path));
            }
        }
        log_swaps.sort_unstable();
        for base in &log_swaps {
            let swap = SegmentPaths::of(dir, *base, SWAP_SUFFIX);
            let file = open_rw(&swap.log, false)?;
            let size = file.metadata().ctx("stat swap segment", &swap.log)?.len();
            let mut scanner = SegmentBatchReader::new(&file, &swap.log, 0, size);
            let mut next_offset = *base;
            loop {
                match scanner.next_batch(true)? {
                    ScannedBatch::Batch { header, .. } => next_offset = header.next_offset(),
                    ScannedBatch::End => break,
                    ScannedBatch::Invalid { position, reason } => {
                        // It was fsynced before its rename: this is damage, not a torn write.
                        warn!(file = %swap.log.display(), position, %reason, "damaged batch in a swap segment; keeping what precedes it");
                        break;
                    }
                }
            }
            if next_offset == *base {
                warn!(file = %swap.log.display(), "swap segment holds no batch; discarding it");
                for p in swap.indexes_then_log() {
                    remove_if_exists(p)?;
                }
                continue;
            }
            for (seg_base, path) in &segments {
                if *seg_base >= *base && *seg_base < next_offset {
                    info!(file = %path.display(), "removing a segment replaced by a cleaned one");
                    remove_if_exists(path)?;
                }
            }
            let finals = SegmentPaths::of(dir, *base, "");
            for (from, to) in swap.indexes_then_log().into_iter().zip(finals.indexes_then_log()) {
                match fs::rename(from, to) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e).ctx("rename swap file", from),
                }
            }
            info!(segment = %finals.log.display(), next_offset, "completed an interrupted swap of a cleaned segment");
            changed = true;
        }
        for path in index_swaps {
            if path.exists() {
                info!(file = %path.display(), "removing an index swap file without its log");
                remove_if_exists(&path)?;
                changed = true;
            }
        }
        if changed {
            sync_dir(dir)?;
        }
        Ok(())
    }

    /// Lists segment base offsets and snapshot offsets (sorted), deleting
    /// `.deleted`/`.tmp` leftovers and orphan indexes.
    fn list_and_clean(&self) -> Result<(Vec<i64>, BTreeSet<i64>)> {
        let dir = self.dir;
        let mut logs = Vec::new();
        let mut snapshots = BTreeSet::new();
        let mut indexes: Vec<(i64, PathBuf)> = Vec::new();
        for entry in fs::read_dir(dir).ctx("list partition directory", dir)? {
            let entry = entry.ctx("list partition directory", dir)?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let path = entry.path();
            if name.ends_with(DELETED_SUFFIX) || name.ends_with(TMP_SUFFIX) {
                info!(file = %path.display(), "removing leftover file");
                fs::remove_file(&path).ctx("remove leftover file", &path)?;
                continue;
            }
            match parse_segment_file_name(name) {
                Some((base, SegmentFileKind::Log)) => logs.push(base),
                Some((base, _)) => indexes.push((base, path)),
                None => {
                    if let Some(offset) = parse_snapshot_file_name(name) {
                        snapshots.insert(offset);
                    }
                }
            }
        }
        logs.sort_unstable();
        for (base, path) in indexes {
            if logs.binary_search(&base).is_err() {
                info!(file = %path.display(), "removing index without a log");
                fs::remove_file(&path).ctx("remove orphan index", &path)?;
            }
        }
        Ok((logs, snapshots))
    }

    /// Opens a segment below the recovery point with cheap checks only.
    fn load_trusted(&self, base: i64) -> Result<Outcome> {
        let dir = self.dir;
        let log_path = log_file(dir, base);
        let log = open_rw(&log_path, false)?;
        let size = log.metadata().ctx("stat segment", &log_path)?.len();
        let offset_index = match OffsetIndex::load(&index_file(dir, base), base, size)? {
            Ok(i) => i,
            Err(reason) => return Ok(Outcome::Recover(format!("offset index: {reason}"))),
        };
        // Read the headers after the last index entry to find the segment's end.
        let (mut next_offset, start) = offset_index.last_entry().unwrap_or((base, 0));
        let mut tail_max = (-1i64, None);
        let mut first_max_ts = None;
        {
            let mut scanner = SegmentBatchReader::new(&log, &log_path, start, size);
            loop {
                // Headers only: a trusted segment's bodies are not read at open.
                match scanner.next_header()? {
                    ScannedBatch::Batch { position, header } => {
                        if header.base_offset < next_offset
                            || (position == start && start > 0 && header.base_offset != next_offset)
                        {
                            return Ok(Outcome::Recover(format!(
                                "offset index disagrees with the log at {position}"
                            )));
                        }
                        if header.max_timestamp > tail_max.0 {
                            tail_max = (header.max_timestamp, Some(header.base_offset));
                        }
                        next_offset = header.next_offset();
                    }
                    ScannedBatch::End => break,
                    ScannedBatch::Invalid { position, reason } => {
                        return Ok(Outcome::Recover(format!("batch at {position}: {reason}")))
                    }
                }
            }
        }
        if size > 0 {
            // The first batch sets the segment's rolling time (segment.ms).
            match SegmentBatchReader::new(&log, &log_path, 0, size).next_header()? {
                ScannedBatch::Batch { header, .. } => first_max_ts = Some(header.max_timestamp),
                ScannedBatch::End => {}
                ScannedBatch::Invalid { position, reason } => {
                    return Ok(Outcome::Recover(format!("batch at {position}: {reason}")))
                }
            }
        }
        let time_index = match TimeIndex::load(&time_index_file(dir, base), base, next_offset)? {
            Ok(i) => i,
            Err(reason) => return Ok(Outcome::Recover(format!("time index: {reason}"))),
        };
        let txn_index = match TransactionIndex::load(&txn_index_file(dir, base), next_offset)? {
            Ok(i) => i,
            Err(reason) => return Ok(Outcome::Recover(format!("transaction index: {reason}"))),
        };
        let indexed_max = time_index.last_timestamp().unwrap_or(-1);
        let mut seg =
            LogSegment::assemble(base, log_path, log, size, offset_index, time_index, txn_index);
        seg.next_offset = next_offset;
        if tail_max.0 > indexed_max {
            seg.max_timestamp = tail_max.0;
            seg.offset_of_max_timestamp = tail_max.1;
        } else {
            seg.max_timestamp = indexed_max;
            seg.offset_of_max_timestamp = None;
        }
        seg.rolling_timestamp_ms = first_max_ts;
        // Fresh appends go to a new segment anyway unless this is the last one;
        // start the index interval over so the next entry is not too far away.
        seg.bytes_since_last_index_entry = size - start;
        Ok(Outcome::Trusted(Box::new(seg)))
    }

    /// Scans a segment fully, rebuilding its indexes. Damage followed by a
    /// valid batch in this segment, or anywhere in a segment that is not the
    /// last, is kept and reported; a damaged tail of the last segment is
    /// truncated (see the module docs).
    fn recover_segment(
        &self,
        base: i64,
        next_base: Option<i64>,
        modified: &mut bool,
        cut_at: &mut Option<usize>,
        i: usize,
    ) -> Result<LogSegment> {
        let dir = self.dir;
        let log_path = log_file(dir, base);
        let log = open_rw(&log_path, false)?;
        let file_len = log.metadata().ctx("stat segment", &log_path)?.len();
        let offset_index = OffsetIndex::create(&index_file(dir, base), base)?;
        let time_index = TimeIndex::create(&time_index_file(dir, base), base)?;
        // Rebuilt from the segment's markers by the producer-state replay.
        let txn_index = TransactionIndex::create(&txn_index_file(dir, base))?;
        let mut seg = LogSegment::assemble(
            base,
            log_path.clone(),
            log,
            0,
            offset_index,
            time_index,
            txn_index,
        );
        let log = seg.log.clone();
        // Offsets a batch of this segment may hold: below the next segment, relative offsets in a u32.
        let max_offset = next_base.map_or(i64::MAX, |n| n - 1).min(base + i64::from(u32::MAX));
        let mut start = 0;
        let valid_end = 'segment: loop {
            let mut scanner = SegmentBatchReader::new(&log, &log_path, start, file_len);
            let (position, reason) = loop {
                match scanner.next_batch(true)? {
                    ScannedBatch::Batch { position, header } => {
                        if header.base_offset < seg.next_offset || header.last_offset() > max_offset
                        {
                            let reason = format!(
                                "base offset {} is outside the expected {}..={max_offset}",
                                header.base_offset, seg.next_offset
                            );
                            break (position, reason);
                        }
                        if position == 0 {
                            seg.rolling_timestamp_ms = Some(header.max_timestamp);
                        }
                        seg.index_batch(
                            header.base_offset,
                            position,
                            header.total_size() as u64,
                            header.max_timestamp,
                            self.index_interval_bytes,
                        );
                        seg.next_offset = header.next_offset();
                    }
                    ScannedBatch::End => break 'segment None,
                    ScannedBatch::Invalid { position, reason } => break (position, reason),
                }
            };
            let next = find_next_valid_batch(
                &log,
                &log_path,
                position + 1,
                file_len,
                seg.next_offset,
                max_offset,
            )?;
            if next.is_none() && next_base.is_none() {
                break self.truncate(&seg, position, file_len, &reason)?;
            }
            let range = CorruptRange {
                segment: log_path.clone(),
                position,
                end_position: next.as_ref().map_or(file_len, |(p, _)| *p),
                first_offset: seg.next_offset,
                last_offset: next
                    .as_ref()
                    .map_or(next_base.map(|n| n - 1), |(_, h)| Some(h.base_offset - 1)),
                reason,
            };
            error!(
                segment = %log_path.display(),
                first_offset = range.first_offset,
                last_offset = ?range.last_offset,
                position = range.position,
                end_position = range.end_position,
                reason = %range.reason,
                "corrupt record batches followed by valid ones: kept and skipped when serving, later data not truncated (`floe verify` lists every damaged range)"
            );
            seg.corrupt.push(range);
            // The next batch starts a fresh index interval.
            seg.bytes_since_last_index_entry = self.index_interval_bytes + 1;
            match next {
                Some((p, _)) => start = p,
                None => break None,
            }
        };
        seg.size = valid_end.unwrap_or(file_len);
        if let Some(next_base) = next_base.filter(|&n| self.gaps_are_damage && seg.next_offset < n)
        {
            // A sealed segment that ends short of the next one lost its tail: a
            // power cut kept the next segment but not all of this one (only a
            // replica can restore it; alone, the offsets are reported missing).
            if seg.corrupt.last().is_none_or(|c| c.end_position < seg.size) {
                let range = CorruptRange {
                    segment: log_path.clone(),
                    position: seg.size,
                    end_position: seg.size,
                    first_offset: seg.next_offset,
                    last_offset: Some(next_base - 1),
                    reason: format!(
                        "offsets {}..={} missing before the next segment",
                        seg.next_offset,
                        next_base - 1
                    ),
                };
                error!(segment = %log_path.display(), first_offset = range.first_offset, last_offset = ?range.last_offset,
                    position = range.position, "a sealed segment ends before the next one begins: its tail was lost (reported as a damaged range)");
                seg.corrupt.push(range);
            }
        }
        if valid_end.is_some() {
            *modified = true;
            *cut_at = Some(i);
        }
        seg.offset_index.persist()?;
        seg.time_index.persist()?;
        Ok(seg)
    }

    fn truncate(
        &self,
        seg: &LogSegment,
        position: u64,
        file_len: u64,
        reason: &str,
    ) -> Result<Option<u64>> {
        warn!(
            segment = %seg.log_path.display(),
            position,
            bytes_cut = file_len - position,
            valid_up_to_offset = seg.next_offset - 1,
            %reason,
            "truncating segment at an invalid batch"
        );
        seg.log.set_len(position).ctx("truncate segment", &seg.log_path)?;
        Ok(Some(position))
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;

    use crate::config::LogConfig;
    use crate::file_names::{index_file, log_file, time_index_file};
    use crate::log::PartitionLog;
    use crate::test_util::{batch, batch_ts, config, decode};

    fn cfg() -> Arc<LogConfig> {
        config(&[("segment.bytes", "1000"), ("index.interval.bytes", "100")])
    }

    /// 30 batches of 2 records (~ 100 bytes each), several segments; returns the closed log's end.
    fn write_log(dir: &std::path::Path) -> i64 {
        let log = PartitionLog::open(dir, "t", 0, cfg(), None, None).unwrap();
        for i in 0..30i64 {
            log.append(&mut batch_ts(&[100 + 2 * i, 101 + 2 * i], 20), 0).unwrap();
        }
        log.close().unwrap();
        log.log_end_offset()
    }

    fn all_records(log: &PartitionLog) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        let mut offset = log.log_start_offset();
        while offset < log.log_end_offset() {
            let bytes = log
                .read(offset, 1 << 20, true, crate::IsolationLevel::ReadUncommitted)
                .unwrap()
                .region
                .unwrap()
                .read_to_vec()
                .unwrap();
            let recs = decode(&bytes);
            offset = recs.last().unwrap().0 + 1;
            out.extend(recs);
        }
        out
    }

    fn active_base(dir: &std::path::Path) -> i64 {
        let log = PartitionLog::open(dir, "t", 0, cfg(), Some(0), None).unwrap();
        let base = log.sealed_segments().last().map_or(0, |s| s.next_offset);
        std::mem::forget(log); // no flush, no changes
        base
    }

    fn append_bytes(path: &std::path::Path, bytes: &[u8]) {
        std::fs::OpenOptions::new().append(true).open(path).unwrap().write_all(bytes).unwrap();
    }

    #[test]
    fn empty_dir_starts_at_log_start_offset() {
        let dir = tempfile::tempdir().unwrap();
        let log = PartitionLog::open(&dir.path().join("p"), "t", 0, cfg(), None, Some(42)).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (42, 42));
        assert!(log_file(&dir.path().join("p"), 42).exists());
        assert_eq!(log.append(&mut batch(1, 1, 1), 0).unwrap().first_offset, 42);
    }

    #[test]
    fn clean_reopen_keeps_everything() {
        let dir = tempfile::tempdir().unwrap();
        let end = write_log(dir.path());
        let log = PartitionLog::open(dir.path(), "t", 0, cfg(), Some(end), None).unwrap();
        assert_eq!(log.log_end_offset(), 60);
        assert_eq!(all_records(&log).len(), 60);
        assert_eq!(log.append(&mut batch(1, 1, 1), 0).unwrap().first_offset, 60);
    }

    #[test]
    fn garbage_after_the_active_segment_is_truncated() {
        for recovery_point in [None, Some(60)] {
            let dir = tempfile::tempdir().unwrap();
            write_log(dir.path());
            let base = active_base(dir.path());
            let path = log_file(dir.path(), base);
            let good_len = std::fs::metadata(&path).unwrap().len();
            append_bytes(&path, &[0xab; 333]);
            let log = PartitionLog::open(dir.path(), "t", 0, cfg(), recovery_point, None).unwrap();
            assert_eq!(std::fs::metadata(&path).unwrap().len(), good_len, "{recovery_point:?}");
            assert_eq!(log.log_end_offset(), 60);
            let recs = all_records(&log);
            assert_eq!(recs.iter().map(|r| r.0).collect::<Vec<_>>(), (0..60).collect::<Vec<_>>());
            assert_eq!(log.append(&mut batch(1, 1, 1), 0).unwrap().first_offset, 60);
            assert_eq!(log.recovery_point(), 60);
        }
    }

    #[test]
    fn torn_last_batch_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        write_log(dir.path());
        let base = active_base(dir.path());
        let path = log_file(dir.path(), base);
        let len = std::fs::metadata(&path).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 30).unwrap();
        let log = PartitionLog::open(dir.path(), "t", 0, cfg(), Some(base), None).unwrap();
        assert_eq!(log.log_end_offset(), 58);
        assert_eq!(all_records(&log).len(), 58);
        assert!(std::fs::metadata(&path).unwrap().len() < len - 30);
    }

    #[test]
    fn zeroed_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        write_log(dir.path());
        let base = active_base(dir.path());
        let path = log_file(dir.path(), base);
        let len = std::fs::metadata(&path).unwrap().len();
        append_bytes(&path, &vec![0u8; 4096]);
        let log = PartitionLog::open(dir.path(), "t", 0, cfg(), None, None).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
        assert_eq!(log.log_end_offset(), 60);
    }

    /// Bit rot in a sealed segment: reported, stepped over, nothing after it truncated.
    #[test]
    fn corrupt_batch_in_an_early_segment_keeps_the_rest() {
        for damage in ["payload", "length"] {
            let dir = tempfile::tempdir().unwrap();
            write_log(dir.path());
            let path = log_file(dir.path(), 0);
            let mut bytes = std::fs::read(&path).unwrap();
            let h = floe_protocol::record_batch::BatchIter::new(&bytes).nth(1).unwrap().unwrap();
            if damage == "payload" {
                bytes[h.position + 70] ^= 0xff;
            } else {
                bytes[h.position + 8..h.position + 12].copy_from_slice(&[0x7f, 0, 0, 0]);
            }
            std::fs::write(&path, &bytes).unwrap();
            let files_before = std::fs::read_dir(dir.path()).unwrap().count();
            let log = PartitionLog::open(dir.path(), "t", 0, cfg(), None, None).unwrap();
            assert_eq!(log.log_end_offset(), 60, "{damage}: nothing truncated");
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), files_before);
            let ranges = log.corrupt_ranges();
            assert_eq!(ranges.len(), 1, "{damage}: {ranges:?}");
            assert_eq!((ranges[0].first_offset, ranges[0].last_offset), (2, Some(3)));
            assert_eq!(ranges[0].position, h.position as u64);
            let offsets: Vec<i64> = all_records(&log).iter().map(|r| r.0).collect();
            let want: Vec<i64> = (0..60).filter(|o| !(2..4).contains(o)).collect();
            assert_eq!(offsets, want, "{damage}: every intact record served, the gap skipped");
            // A fetch inside the damaged range continues after it.
            let bytes = log
                .read(2, 1 << 20, true, crate::IsolationLevel::ReadUncommitted)
                .unwrap()
                .region
                .unwrap()
                .read_to_vec()
                .unwrap();
            assert_eq!(decode(&bytes)[0].0, 4);
            assert_eq!(log.offset_for_timestamp(102).unwrap().unwrap().offset, 4);
            assert_eq!(log.append(&mut batch(1, 1, 1), 0).unwrap().first_offset, 60);
            // The damaged segment stays below the recovery point, so the next start reports it again.
            assert_eq!(log.recovery_point(), 0);
            log.close().unwrap();
            let log = PartitionLog::open(dir.path(), "t", 0, cfg(), Some(0), None).unwrap();
            assert_eq!(log.corrupt_ranges().len(), 1);
            assert_eq!(log.log_end_offset(), 61);
        }
    }

    /// Damage in the active segment with valid batches after it is not a torn
    /// tail: kept and skipped, the later batches stay.
    #[test]
    fn damage_inside_the_active_segment_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        write_log(dir.path());
        let base = active_base(dir.path());
        let path = log_file(dir.path(), base);
        let mut bytes = std::fs::read(&path).unwrap();
        let first = floe_protocol::record_batch::BatchIter::new(&bytes).next().unwrap().unwrap();
        assert!(first.end() < bytes.len(), "the active segment needs two batches");
        bytes[first.position + 17] ^= 0x01; // the CRC field itself
        std::fs::write(&path, &bytes).unwrap();
        let log = PartitionLog::open(dir.path(), "t", 0, cfg(), None, None).unwrap();
        assert_eq!(log.log_end_offset(), 60);
        let ranges = log.corrupt_ranges();
        assert_eq!(ranges.len(), 1, "{ranges:?}");
        assert_eq!(ranges[0].first_offset, base);
        assert_eq!(all_records(&log).len(), 58);
        assert_eq!(log.append(&mut batch(1, 1, 1), 0).unwrap().first_offset, 60);
    }

    #[test]
    fn missing_and_corrupt_indexes_are_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let end = write_log(dir.path());
        let reference = {
            let log = PartitionLog::open(dir.path(), "t", 0, cfg(), Some(end), None).unwrap();
            let r = (
                all_records(&log),
                log.offset_for_timestamp(130).unwrap(),
                log.max_timestamp_and_offset().unwrap(),
            );
            std::mem::forget(log);
            r
        };
        let sizes: Vec<u64> = [index_file(dir.path(), 0), time_index_file(dir.path(), 0)]
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .collect();
        assert!(sizes.iter().all(|&s| s > 0), "indexes were written: {sizes:?}");
        let second = {
            let log = PartitionLog::open(dir.path(), "t", 0, cfg(), Some(end), None).unwrap();
            let b = log.sealed_segments()[1].base_offset;
            std::mem::forget(log);
            b
        };
        std::fs::remove_file(index_file(dir.path(), 0)).unwrap();
        std::fs::write(time_index_file(dir.path(), second), [7u8; 13]).unwrap();
        // An index entry pointing past the end of its log.
        let mut bad = Vec::new();
        bad.extend(1u32.to_be_bytes());
        bad.extend(1_000_000u32.to_be_bytes());
        let third = {
            let log = PartitionLog::open(dir.path(), "t", 0, cfg(), Some(end), None).unwrap();
            let b = log.sealed_segments()[2].base_offset;
            std::mem::forget(log);
            b
        };
        std::fs::write(index_file(dir.path(), third), &bad).unwrap();

        let log = PartitionLog::open(dir.path(), "t", 0, cfg(), Some(end), None).unwrap();
        assert_eq!(std::fs::metadata(index_file(dir.path(), 0)).unwrap().len(), sizes[0]);
        let ti = std::fs::metadata(time_index_file(dir.path(), second)).unwrap().len();
        assert!(ti > 0, "time index rebuilt: {ti} bytes");
        assert_eq!(ti % 12, 0);
        let oi = std::fs::metadata(index_file(dir.path(), third)).unwrap().len();
        assert_ne!(oi, 8, "offset index rebuilt");
        assert_eq!(oi % 8, 0);
        let now = (
            all_records(&log),
            log.offset_for_timestamp(130).unwrap(),
            log.max_timestamp_and_offset().unwrap(),
        );
        assert_eq!(now, reference);
        assert_eq!(
            reference.1,
            Some(crate::log::TimestampAndOffset { timestamp: 130, offset: 30 })
        );
    }
}
