//! Table retention of a shared topic (`floe.iceberg.storage=shared`): Kafka's
//! `retention.ms` / `retention.bytes` over the whole partition, the table
//! included, and the log start offset it moves (`docs/shared-mode.md` 3.2).
//!
//! Runs from the manifests only (no data file is read). Per Kafka partition
//! (the value of the spec's `identity(partition)` field; a shared table's spec
//! always has one), the live data files are ordered by the lower bound of their
//! `offset` column, and front files go, oldest first, with Kafka's segment rule
//! (`take_segments`) and a data file for a segment:
//!
//! - by time: the file's `timestamp` upper bound is older than `retention.ms`;
//! - by size: the bytes left after removing it (the partition's table bytes plus
//!   its local bytes above the table end) are still at least `retention.bytes`.
//!   A departure from Kafka, which counts log bytes: Parquet is about half of
//!   them, so a shared topic keeps more records for the same setting;
//! - and files wholly below the log start offset already committed.
//!
//! The first file that goes by none of these stops the cut. Whole files only: no
//! row is rewritten, so a file straddling a cut (a DeleteRecords offset inside
//! it, stage 9's copy-on-write `overwrite`, is not done here) is kept whole. The
//! new log start offset `L'` is the first offset of the first file kept, or the
//! table end (the committed next offset) when every file goes.
//!
//! # Commits and crashes
//! The table's `__log` companion is cut first: its files wholly below `L'` go in
//! a `delete` snapshot of that table. Its rows' ranges (markers, aborted batches,
//! opaque batches, holes) never contain an offset of a main-table row, and `L'`
//! is one (or the table end), so a `__log` row whose first offset is below `L'`
//! lies wholly below it: the `offset` upper bound decides. Then one `delete`
//! snapshot of the main table removes its files and records
//! `floe.log-start.<p>` = `L'` (cumulative, with every `floe.next-offset.*`):
//! the main table's property is the authority. Failpoints:
//! `tiering.retention.written` (the `__log` cut committed, the main snapshot's
//! manifests written, not committed: a crash leaves unreferenced manifests, and
//! the next pass cuts the main table again) and `tiering.retention.committed`
//! (committed, not folded into the log: the broker folds it on its next pass).
//! Both commits are compare-and-swaps under the table's writer lock, as
//! compaction's: a lost race commits nothing ([`TieringError::StaleSnapshot`]),
//! the next pass re-plans. Readers of older snapshots keep the removed files
//! until snapshot expiry deletes them.

use std::collections::{BTreeMap, HashSet};

use iceberg::spec::{DataFile, FormatVersion, Literal, Operation, PartitionSpec, PrimitiveLiteral, Schema, Transform};
use iceberg::table::Table;
use tracing::{debug, info, warn};

use crate::compaction::{snapshot_files, SnapshotFiles, SnapshotKind};
use crate::error::{Result, TieringError};
use crate::metadata_commit::MetadataCommitError;
use crate::offsets::{committed_log_starts, committed_next_offsets, cumulative_properties};
use crate::table::TopicTable;

/// Snapshot summary property of a retention snapshot: how many data files it removed.
pub const RETENTION_REMOVED_FILES_PROPERTY: &str = "floe.retention-removed-files";

/// One partition's retention settings and local state, as the broker sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionRetention {
    /// `retention.ms`; negative: no time limit.
    pub retention_ms: i64,
    /// `retention.bytes`; negative: no size limit.
    pub retention_bytes: i64,
    /// Bytes of the partition's local segments above the table end (not in the table yet).
    pub local_bytes: u64,
}

/// What one [`TopicTable::apply_retention`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Per partition, the log start offset the table records after the call
    /// (every partition with one, moved or not): what the broker folds into its logs.
    pub log_starts: BTreeMap<i32, i64>,
    /// Per partition whose log start offset this call moved: the new one.
    pub moved: BTreeMap<i32, i64>,
    /// Data files removed from the main table.
    pub removed_files: usize,
    /// Their bytes.
    pub removed_bytes: u64,
    /// Their records.
    pub removed_records: u64,
    /// Data files removed from the `__log` table.
    pub log_removed_files: usize,
    /// The main table's `delete` snapshot, if one was committed.
    pub snapshot_id: Option<i64>,
}

/// A live data file as retention plans with it (from its manifest entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileStats {
    /// Index into the snapshot's live entries.
    pub(crate) index: usize,
    /// Lower bound of `offset`.
    pub(crate) first_offset: i64,
    /// Upper bound of `offset`.
    pub(crate) last_offset: i64,
    /// Upper bound of `timestamp`, in ms; `None` without the statistic.
    pub(crate) max_timestamp_ms: Option<i64>,
    /// The file's size.
    pub(crate) size: u64,
}

/// The field id of column `name` in `schema` (created tables get fresh ids, so never assumed).
pub(crate) fn column_id(schema: &Schema, name: &str) -> Option<i32> {
    schema.field_by_name(name).map(|f| f.id)
}

fn long_bound(bounds: &std::collections::HashMap<i32, iceberg::spec::Datum>, id: i32) -> Option<i64> {
    match bounds.get(&id).map(iceberg::spec::Datum::literal) {
        Some(PrimitiveLiteral::Long(v)) => Some(*v),
        Some(PrimitiveLiteral::Int(v)) => Some(i64::from(*v)),
        _ => None,
    }
}

/// The Kafka partition of `file`: its spec's `identity(partition)` value, or
/// else (a spec without one) the `partition` column's bounds when they agree.
fn kafka_partition(file: &DataFile, spec: &PartitionSpec, partition_id: i32) -> Option<i32> {
    let from_spec = spec
        .fields()
        .iter()
        .position(|f| f.source_id == partition_id && f.transform == Transform::Identity)
        .and_then(|i| file.partition().fields().get(i).cloned().flatten());
    match from_spec {
        Some(Literal::Primitive(PrimitiveLiteral::Int(p))) => Some(p),
        _ => {
            let lo = long_bound(file.lower_bounds(), partition_id)?;
            (long_bound(file.upper_bounds(), partition_id) == Some(lo)).then(|| i32::try_from(lo).ok()).flatten()
        }
    }
}

/// The files of one partition, sorted by first offset, and the new log start offset:
/// how many front files go by `input`'s limits at `now_ms` (or lie wholly below
/// `log_start`), and the first offset of the first one kept, else `table_end`.
pub(crate) fn plan_cut(files: &[FileStats], input: &PartitionRetention, log_start: i64, table_end: i64, now_ms: i64) -> (usize, i64) {
    let total: u64 = files.iter().map(|f| f.size).sum::<u64>() + input.local_bytes;
    let mut excess = (input.retention_bytes >= 0).then(|| total as i64 - input.retention_bytes);
    let mut cut = 0;
    for f in files {
        let below_start = f.last_offset < log_start;
        let by_time = input.retention_ms >= 0 && f.max_timestamp_ms.is_some_and(|ts| now_ms.saturating_sub(ts) > input.retention_ms);
        let by_size = excess.is_some_and(|e| e - f.size as i64 >= 0);
        if !(below_start || by_time || by_size) {
            break;
        }
        excess = excess.map(|e| e - f.size as i64);
        cut += 1;
    }
    let start = files.get(cut).map_or(table_end, |f| f.first_offset);
    (cut, start.max(log_start))
}

/// Column ids retention reads statistics of, found by name in the current schema.
struct Columns {
    partition: i32,
    offset: i32,
    timestamp: Option<i32>,
}

impl Columns {
    fn of(table: &Table) -> Result<Self> {
        let schema = table.metadata().current_schema();
        let missing = |c: &str| TieringError::Unsupported(format!("table {} has no {c} column: no table retention", table.identifier()));
        Ok(Self {
            partition: column_id(schema, "partition").ok_or_else(|| missing("partition"))?,
            offset: column_id(schema, "offset").ok_or_else(|| missing("offset"))?,
            timestamp: column_id(schema, "timestamp"),
        })
    }
}

/// Per Kafka partition, the live files of `files` with their statistics, in offset
/// order; a partition with a file lacking `offset` bounds is left out (it cannot be
/// ordered: no retention for it, logged).
fn files_by_partition(table: &Table, files: &SnapshotFiles, columns: &Columns) -> BTreeMap<i32, Vec<FileStats>> {
    let mut by: BTreeMap<i32, Vec<FileStats>> = BTreeMap::new();
    let mut unordered = HashSet::new();
    for (index, live) in files.live.iter().enumerate() {
        let file = live.entry.data_file();
        let spec = &files.shapes[live.manifest].1;
        let Some(p) = kafka_partition(file, spec, columns.partition) else {
            warn!(table = %table.identifier(), path = file.file_path(), "data file of no single Kafka partition: left to table retention");
            continue;
        };
        let bounds = long_bound(file.lower_bounds(), columns.offset).zip(long_bound(file.upper_bounds(), columns.offset));
        let Some((first_offset, last_offset)) = bounds else {
            unordered.insert(p);
            continue;
        };
        // Iceberg's timestamptz statistics are µs; Kafka's timestamps ms.
        let max_timestamp_ms = columns.timestamp.and_then(|id| long_bound(file.upper_bounds(), id)).map(|us| us.div_euclid(1000));
        by.entry(p).or_default().push(FileStats { index, first_offset, last_offset, max_timestamp_ms, size: file.file_size_in_bytes() });
    }
    for p in unordered {
        warn!(table = %table.identifier(), partition = p, "a data file has no offset statistics: no table retention for this partition");
        by.remove(&p);
    }
    for v in by.values_mut() {
        v.sort_by_key(|f| (f.first_offset, f.last_offset));
    }
    by
}

impl TopicTable {
    /// Applies `retention.ms` / `retention.bytes` to the partitions of `inputs`
    /// at `now_ms` (see the module doc): whole data files out, the `__log`
    /// table cut at the same offsets first, and `floe.log-start.<p>` recorded.
    /// Returns every partition's committed log start offset (for the broker to
    /// fold into its logs) and what went. Nothing is committed (an empty cut)
    /// when no file qualifies, the table is not format v2, or its catalog takes
    /// no hand-built commit.
    ///
    /// # Errors
    /// [`TieringError::StaleSnapshot`] when a table moved under the plan (the
    /// `__log` cut may have been committed: harmless, the main table's log start
    /// is the authority and the next pass cuts the main table);
    /// [`TieringError::Iceberg`] reading or committing.
    pub async fn apply_retention(&self, inputs: &BTreeMap<i32, PartitionRetention>, now_ms: i64) -> Result<RetentionReport> {
        let Some(committer) = self.direct_committer() else {
            debug!(table = %self.ident(), "table retention skipped: the table's catalog takes no hand-built commit");
            return Ok(RetentionReport::default());
        };
        // Main first, then `__log`: the order tiering takes them in.
        let _writer = self.writer_lock().await;
        let before = self.load().await?;
        let metadata = before.metadata();
        let starts = committed_log_starts(metadata);
        let mut report = RetentionReport { log_starts: starts.clone(), ..RetentionReport::default() };
        if metadata.format_version() != FormatVersion::V2 || inputs.is_empty() {
            return Ok(report);
        }
        let Some(files) = snapshot_files(&before).await? else { return Ok(report) };
        let next = committed_next_offsets(metadata);
        let columns = Columns::of(&before)?;
        let mut removed = HashSet::new();
        let mut new_starts = starts.clone();
        for (p, stats) in files_by_partition(&before, &files, &columns) {
            let Some(input) = inputs.get(&p) else { continue };
            let (Some(&table_end), start) = (next.get(&p), starts.get(&p).copied().unwrap_or(0)) else { continue };
            let (cut, new_start) = plan_cut(&stats, input, start, table_end, now_ms);
            if cut == 0 {
                continue;
            }
            for f in &stats[..cut] {
                let entry = &files.live[f.index].entry;
                removed.insert(entry.file_path().to_string());
                report.removed_bytes += entry.file_size_in_bytes();
                report.removed_records += entry.record_count();
            }
            report.removed_files += cut;
            if new_start > start {
                new_starts.insert(p, new_start);
                report.moved.insert(p, new_start);
            }
        }
        if removed.is_empty() {
            return Ok(report);
        }
        if let Some(log) = self.log_table() {
            report.log_removed_files = log.cut_log_table(&report.moved).await?;
        }
        let mut properties = cumulative_properties(&next, &new_starts);
        properties.insert(RETENTION_REMOVED_FILES_PROPERTY.to_string(), removed.len().to_string());
        let kind = SnapshotKind { operation: Operation::Delete, label: "retention", properties };
        let snapshot = self.rewrite_snapshot(&before, &files, &BTreeMap::new(), &removed, kind).await?;
        let snapshot_id = snapshot.snapshot_id();
        self.failpoint("tiering.retention.written")?;
        self.commit_cut(&committer, &before, snapshot).await?;
        self.failpoint("tiering.retention.committed")?;
        if let Ok(after) = self.load().await {
            self.delete_dropped_metadata(&before, &after).await;
        }
        report.snapshot_id = Some(snapshot_id);
        report.log_starts = new_starts;
        info!(table = %self.ident(), moved = ?report.moved, files = report.removed_files, bytes = report.removed_bytes,
            records = report.removed_records, log_files = report.log_removed_files, snapshot = snapshot_id,
            "table retention removed data files; the log start offset moved");
        Ok(report)
    }

    /// A shared table's `__log` side of a cut: its files wholly below `cut`'s
    /// offsets (partition → new log start) go in one `delete` snapshot, which
    /// records them as `floe.log-start.*` too. Returns how many files went.
    async fn cut_log_table(&self, cut: &BTreeMap<i32, i64>) -> Result<usize> {
        let Some(committer) = self.direct_committer() else { return Ok(0) };
        let _writer = self.writer_lock().await;
        let before = self.load().await?;
        if before.metadata().format_version() != FormatVersion::V2 || cut.is_empty() {
            return Ok(0);
        }
        let Some(files) = snapshot_files(&before).await? else { return Ok(0) };
        let columns = Columns::of(&before)?;
        let removed: HashSet<String> = files_by_partition(&before, &files, &columns)
            .iter()
            .filter_map(|(p, stats)| Some((cut.get(p)?, stats)))
            .flat_map(|(start, stats)| stats.iter().filter(move |f| f.last_offset < *start))
            .map(|f| files.live[f.index].entry.file_path().to_string())
            .collect();
        if removed.is_empty() {
            return Ok(0);
        }
        let metadata = before.metadata();
        let mut starts = committed_log_starts(metadata);
        for (p, s) in cut {
            let e = starts.entry(*p).or_insert(*s);
            *e = (*e).max(*s);
        }
        let mut properties = cumulative_properties(&committed_next_offsets(metadata), &starts);
        properties.insert(RETENTION_REMOVED_FILES_PROPERTY.to_string(), removed.len().to_string());
        let kind = SnapshotKind { operation: Operation::Delete, label: "retention", properties };
        let snapshot = self.rewrite_snapshot(&before, &files, &BTreeMap::new(), &removed, kind).await?;
        self.commit_cut(&committer, &before, snapshot).await?;
        if let Ok(after) = self.load().await {
            self.delete_dropped_metadata(&before, &after).await;
        }
        debug!(table = %self.ident(), files = removed.len(), ?cut, "table retention cut the __log table");
        Ok(removed.len())
    }

    async fn commit_cut(
        &self,
        committer: &crate::metadata_commit::DirectCommitter,
        before: &Table,
        snapshot: iceberg::spec::Snapshot,
    ) -> Result<()> {
        match committer.commit_snapshot(before, snapshot).await {
            Ok(()) => Ok(()),
            Err(MetadataCommitError::Moved(_)) => {
                let current = self.load().await.ok().and_then(|t| t.metadata().current_snapshot_id());
                Err(TieringError::StaleSnapshot { table: self.ident().to_string(), planned: before.metadata().current_snapshot_id(), current })
            }
            Err(MetadataCommitError::Failed(why)) => {
                Err(TieringError::iceberg("retention", self.ident())(iceberg::Error::new(iceberg::ErrorKind::Unexpected, why)))
            }
        }
    }
}
