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
//! - and files wholly below the log start offset: the one already committed,
//!   or the broker's when DeleteRecords moved it further (capped at the table
//!   end: the table never records a start above what it holds).
//!
//! The first file that goes by none of these stops the cut. Whole files only, as
//! Kafka deletes whole segments: no row is rewritten, so a file straddling a cut
//! (a DeleteRecords offset inside it) is kept whole and its rows below the log
//! start stay visible to SQL readers until the file itself goes (Kafka reads
//! never reach them: a fetch below the log start is out of range). The new log
//! start offset `L'` is the first offset of the first file kept, or the table
//! end (the committed next offset) when every file goes, and never below the
//! floor above; a moved start is committed even when no file goes, so the
//! table, read by every replica, carries a DeleteRecords to them all. The
//! companion tables' files (`__log`, `__dlq`) are planned with the main table's,
//! by the same rules: a recent pass of only dead letters or aborted records is
//! kept as a recent main file would be, and the start never falls inside a
//! removed file.
//!
//! # Commits and crashes
//! One `delete` snapshot of the main table removes its files and records
//! `floe.log-start.<p>` = `L'` (cumulative, with every `floe.next-offset.*`):
//! the main table's property is the authority. Then the table's `__log`
//! companion is cut at the committed log starts: its files wholly below them go
//! in a `delete` snapshot of that table (and so is a shared typed table's `__dlq`,
//! whose rows are single records of the log too). Its rows' ranges (markers, aborted
//! batches, opaque batches, holes) never contain an offset of a main-table row,
//! and `L'` is one (or the table end), so a `__log` row whose first offset is
//! below `L'` lies wholly below it: the `offset` upper bound decides. Failpoints:
//! `tiering.retention.written` (the main snapshot's manifests written, not
//! committed: a crash leaves unreferenced manifests, and the next pass cuts the
//! main table again) and `tiering.retention.committed` (committed, `__log` not
//! cut, not folded into the log: no read reaches below the log start, and the
//! next pass cuts `__log` and the broker folds the start).
//! Both commits are compare-and-swaps under the table's writer lock, as
//! compaction's: a lost race commits nothing ([`TieringError::StaleSnapshot`]),
//! the next pass re-plans. Readers of older snapshots keep the removed files
//! until snapshot expiry deletes them.

use std::collections::{BTreeMap, HashSet};

use iceberg::spec::{
    DataFile, FormatVersion, Literal, Operation, PartitionSpec, PrimitiveLiteral, Schema, Transform,
};
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
    /// The broker's log start offset of the partition: DeleteRecords moves it
    /// before the table knows; the table follows (up to its end).
    pub log_start_offset: i64,
}

impl PartitionRetention {
    /// Whether this can move anything: a limit is set, or the broker's log start
    /// offset is ahead of `committed` (the table's).
    fn can_cut(&self, committed: i64) -> bool {
        self.retention_ms >= 0 || self.retention_bytes >= 0 || self.log_start_offset > committed
    }
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
    /// Data files removed from the `__log` table (and a shared typed table's `__dlq`).
    pub log_removed_files: usize,
    /// The main table's `delete` snapshot, if one was committed.
    pub snapshot_id: Option<i64>,
}

/// A live data file as retention plans with it (from its manifest entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileStats {
    /// Index into the snapshot's live entries.
    pub(crate) index: usize,
    /// A file of the main table (`false`: of a companion, `__log` or `__dlq`).
    pub(crate) main: bool,
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

fn long_bound(
    bounds: &std::collections::HashMap<i32, iceberg::spec::Datum>,
    id: i32,
) -> Option<i64> {
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
            (long_bound(file.upper_bounds(), partition_id) == Some(lo))
                .then(|| i32::try_from(lo).ok())
                .flatten()
        }
    }
}

/// The files of one partition, sorted by first offset, and the new log start offset:
/// how many front files go by `input`'s limits at `now_ms` (or lie wholly below
/// the committed `log_start`, or the broker's up to `table_end`), and the first
/// offset of the first one kept, else `table_end`, never below that floor.
pub(crate) fn plan_cut(
    files: &[FileStats],
    input: &PartitionRetention,
    log_start: i64,
    table_end: i64,
    now_ms: i64,
) -> (usize, i64) {
    let log_start = log_start.max(input.log_start_offset.min(table_end));
    let total: u64 = files.iter().map(|f| f.size).sum::<u64>() + input.local_bytes;
    let mut excess = (input.retention_bytes >= 0).then(|| total as i64 - input.retention_bytes);
    let mut cut = 0;
    for f in files {
        let below_start = f.last_offset < log_start;
        let by_time = input.retention_ms >= 0
            && f.max_timestamp_ms.is_some_and(|ts| now_ms.saturating_sub(ts) > input.retention_ms);
        let by_size = excess.is_some_and(|e| e - f.size as i64 >= 0);
        if !(below_start || by_time || by_size) {
            break;
        }
        excess = excess.map(|e| e - f.size as i64);
        cut += 1;
    }
    // Files of the main table and its companions overlap (one pass writes both);
    // the start never falls inside a removed file.
    let removed_end = files[..cut].iter().map(|f| f.last_offset + 1).max().unwrap_or(log_start);
    let start = files.get(cut).map_or(table_end, |f| f.first_offset);
    (cut, start.max(log_start).max(removed_end))
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
        let missing = |c: &str| {
            TieringError::Unsupported(format!(
                "table {} has no {c} column: no table retention",
                table.identifier()
            ))
        };
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
fn files_by_partition(
    table: &Table,
    files: &SnapshotFiles,
    columns: &Columns,
) -> BTreeMap<i32, Vec<FileStats>> {
    let mut by: BTreeMap<i32, Vec<FileStats>> = BTreeMap::new();
    let mut unordered = HashSet::new();
    for (index, live) in files.live.iter().enumerate() {
        let file = live.entry.data_file();
        let spec = &files.shapes[live.manifest].1;
        let Some(p) = kafka_partition(file, spec, columns.partition) else {
            warn!(table = %table.identifier(), path = file.file_path(), "data file of no single Kafka partition: left to table retention");
            continue;
        };
        let bounds = long_bound(file.lower_bounds(), columns.offset)
            .zip(long_bound(file.upper_bounds(), columns.offset));
        let Some((first_offset, last_offset)) = bounds else {
            unordered.insert(p);
            continue;
        };
        // Iceberg's timestamptz statistics are µs; Kafka's timestamps ms.
        let max_timestamp_ms = columns
            .timestamp
            .and_then(|id| long_bound(file.upper_bounds(), id))
            .map(|us| us.div_euclid(1000));
        by.entry(p).or_default().push(FileStats {
            index,
            main: true,
            first_offset,
            last_offset,
            max_timestamp_ms,
            size: file.file_size_in_bytes(),
        });
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
    /// Per partition, the log start offset the table records (`floe.log-start.<p>`).
    ///
    /// # Errors
    /// [`TieringError::Iceberg`] if the catalog cannot be reached.
    pub async fn committed_log_starts(&self) -> Result<BTreeMap<i32, i64>> {
        Ok(committed_log_starts(self.load().await?.metadata()))
    }

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
    pub async fn apply_retention(
        &self,
        inputs: &BTreeMap<i32, PartitionRetention>,
        now_ms: i64,
    ) -> Result<RetentionReport> {
        let Some(committer) = self.direct_committer() else {
            debug!(table = %self.ident(), "table retention skipped: the table's catalog takes no hand-built commit");
            return Ok(RetentionReport::default());
        };
        let _writer = self.writer_lock().await;
        let before = self.load().await?;
        let metadata = before.metadata();
        let starts = committed_log_starts(metadata);
        let mut report =
            RetentionReport { log_starts: starts.clone(), ..RetentionReport::default() };
        // Nothing can move (no limit, no DeleteRecords ahead of the table): no manifest is read.
        let movable =
            inputs.iter().any(|(p, input)| input.can_cut(starts.get(p).copied().unwrap_or(0)));
        if metadata.format_version() != FormatVersion::V2 || !movable {
            return Ok(report);
        }
        let Some(files) = snapshot_files(&before).await? else { return Ok(report) };
        let next = committed_next_offsets(metadata);
        let columns = Columns::of(&before)?;
        let mut removed = HashSet::new();
        let mut new_starts = starts.clone();
        let mut companions = self.companion_files().await?;
        for (p, mut stats) in files_by_partition(&before, &files, &columns) {
            let Some(input) = inputs.get(&p) else { continue };
            let (Some(&table_end), start) = (next.get(&p), starts.get(&p).copied().unwrap_or(0))
            else {
                continue;
            };
            // The companions' files are the partition's log too: planned with the
            // main table's, so a recent pass of dead letters or aborted records only
            // is kept as a recent main file would be (and counts for the size).
            stats.extend(companions.remove(&p).unwrap_or_default());
            stats.sort_by_key(|f| (f.first_offset, f.last_offset));
            let (cut, new_start) = plan_cut(&stats, input, start, table_end, now_ms);
            let gone: Vec<&FileStats> = stats[..cut].iter().filter(|f| f.main).collect();
            if gone.is_empty() && new_start <= start {
                continue;
            }
            for f in &gone {
                let entry = &files.live[f.index].entry;
                removed.insert(entry.file_path().to_string());
                report.removed_bytes += entry.file_size_in_bytes();
                report.removed_records += entry.record_count();
            }
            report.removed_files += gone.len();
            if new_start > start {
                new_starts.insert(p, new_start);
                report.moved.insert(p, new_start);
            }
        }
        if !removed.is_empty() || !report.moved.is_empty() {
            self.cut_main_table(
                &committer,
                &before,
                &files,
                &removed,
                &next,
                &new_starts,
                &mut report,
            )
            .await?;
        }
        // `__log` after the main table, cut at the committed log starts: a crash
        // between the two leaves `__log` rows below the log start, which no read
        // reaches (a fetch there is out of range) and the next run removes.
        // Cut first, a lost main commit would leave the table with a log start
        // below rows `__log` no longer has.
        if let Some(log) = self.log_table() {
            report.log_removed_files = log.cut_log_table(&new_starts).await?;
            // A shared typed table's dead letters are part of its log too: cut the same way.
            if let Some(dlq) = self.dead_letter_table() {
                report.log_removed_files += dlq.cut_log_table(&new_starts).await?;
            }
        }
        report.log_starts = new_starts;
        Ok(report)
    }

    /// Per partition, the live files of the companion tables (`__log`, and `__dlq`
    /// of a typed table) with their statistics, for planning with the main table's.
    async fn companion_files(&self) -> Result<BTreeMap<i32, Vec<FileStats>>> {
        let mut by: BTreeMap<i32, Vec<FileStats>> = BTreeMap::new();
        for companion in self.log_table().into_iter().chain(self.dead_letter_table()) {
            let table = companion.load().await?;
            let Some(files) = snapshot_files(&table).await? else { continue };
            let columns = Columns::of(&table)?;
            for (p, stats) in files_by_partition(&table, &files, &columns) {
                by.entry(p)
                    .or_default()
                    .extend(stats.into_iter().map(|f| FileStats { main: false, ..f }));
            }
        }
        Ok(by)
    }

    /// The main table's side of a cut: one `delete` snapshot of `removed`, with
    /// `new_starts` as `floe.log-start.*`.
    #[allow(clippy::too_many_arguments)]
    async fn cut_main_table(
        &self,
        committer: &crate::metadata_commit::DirectCommitter,
        before: &iceberg::table::Table,
        files: &SnapshotFiles,
        removed: &HashSet<String>,
        next: &BTreeMap<i32, i64>,
        new_starts: &BTreeMap<i32, i64>,
        report: &mut RetentionReport,
    ) -> Result<()> {
        let mut properties = cumulative_properties(next, new_starts);
        properties.insert(RETENTION_REMOVED_FILES_PROPERTY.to_string(), removed.len().to_string());
        let kind = SnapshotKind { operation: Operation::Delete, label: "retention", properties };
        let snapshot =
            self.rewrite_snapshot(before, files, &BTreeMap::new(), removed, kind).await?;
        let snapshot_id = snapshot.snapshot_id();
        self.failpoint("tiering.retention.written")?;
        self.commit_cut(committer, before, snapshot).await?;
        self.failpoint("tiering.retention.committed")?;
        if let Ok(after) = self.load().await {
            self.delete_dropped_metadata(before, &after).await;
        }
        report.snapshot_id = Some(snapshot_id);
        info!(table = %self.ident(), moved = ?report.moved, files = report.removed_files, bytes = report.removed_bytes,
            records = report.removed_records, log_files = report.log_removed_files, snapshot = snapshot_id,
            "table retention: data files removed, the log start offset moved");
        Ok(())
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
        let snapshot =
            self.rewrite_snapshot(&before, &files, &BTreeMap::new(), &removed, kind).await?;
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
                let current =
                    self.load().await.ok().and_then(|t| t.metadata().current_snapshot_id());
                Err(TieringError::StaleSnapshot {
                    table: self.ident().to_string(),
                    planned: before.metadata().current_snapshot_id(),
                    current,
                })
            }
            Err(MetadataCommitError::Failed(why)) => {
                Err(TieringError::iceberg("retention", self.ident())(iceberg::Error::new(
                    iceberg::ErrorKind::Unexpected,
                    why,
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use floe_storage::ControlRecordType::Abort;
    use floe_storage::PartitionLog;

    use super::*;
    use crate::catalog::IcebergCatalog;
    use crate::table::TierLimits;
    use crate::test_util::*;
    use crate::CompactionPolicy;

    const DAY: i64 = 86_400_000;
    const NOW: i64 = 1_800_000_000_000;

    fn stats(first: i64, last: i64, ts: Option<i64>, size: u64) -> FileStats {
        FileStats {
            index: 0,
            main: true,
            first_offset: first,
            last_offset: last,
            max_timestamp_ms: ts,
            size,
        }
    }

    fn limits(ms: i64, bytes: i64, local: u64) -> PartitionRetention {
        PartitionRetention {
            retention_ms: ms,
            retention_bytes: bytes,
            local_bytes: local,
            log_start_offset: 0,
        }
    }

    #[test]
    fn front_files_go_by_time_until_the_first_that_is_not_older() {
        let files = [
            stats(0, 9, Some(NOW - 9 * DAY), 10),
            stats(10, 19, Some(NOW - DAY), 10),
            stats(20, 29, Some(NOW - 9 * DAY), 10),
        ];
        assert_eq!(
            plan_cut(&files, &limits(7 * DAY, -1, 0), 0, 30, NOW),
            (1, 10),
            "the third is old too but comes after a young one"
        );
        assert_eq!(
            plan_cut(&files, &limits(-1, -1, 0), 0, 30, NOW),
            (0, 0),
            "no limits: nothing goes"
        );
        assert_eq!(
            plan_cut(&files, &limits(0, -1, 0), 0, 30, NOW),
            (3, 30),
            "all go: the log starts at the table end"
        );
        let unknown = [stats(0, 9, None, 10)];
        assert_eq!(
            plan_cut(&unknown, &limits(0, -1, 0), 0, 10, NOW),
            (0, 0),
            "no timestamp statistic: kept"
        );
    }

    #[test]
    fn front_files_go_by_size_while_what_is_left_stays_at_the_limit() {
        let files = [stats(0, 9, None, 100), stats(10, 19, None, 100), stats(20, 29, None, 100)];
        assert_eq!(plan_cut(&files, &limits(-1, 200, 0), 0, 30, NOW), (1, 10));
        assert_eq!(
            plan_cut(&files, &limits(-1, 201, 0), 0, 30, NOW),
            (0, 0),
            "removing one would leave too little"
        );
        assert_eq!(
            plan_cut(&files, &limits(-1, 200, 100), 0, 30, NOW),
            (2, 20),
            "local bytes above the table end count"
        );
        assert_eq!(plan_cut(&files, &limits(-1, 0, 0), 0, 30, NOW), (3, 30));
    }

    #[test]
    fn files_below_the_log_start_go_and_the_start_never_moves_back() {
        let files = [stats(0, 9, None, 100), stats(10, 19, None, 100)];
        assert_eq!(plan_cut(&files, &limits(-1, -1, 0), 10, 20, NOW), (1, 10));
        // A straddling file is kept whole; the committed start stays inside it.
        assert_eq!(plan_cut(&files, &limits(-1, -1, 0), 15, 20, NOW), (1, 15));
    }

    #[test]
    fn companion_files_are_planned_with_the_main_tables() {
        let companion =
            |first, last, ts, size| FileStats { main: false, ..stats(first, last, ts, size) };
        // Main 0-99 (old), a pass of dead letters only at 100-149 (recent), main 150-199 (recent).
        let files = [
            stats(0, 99, Some(NOW - 9 * DAY), 10),
            companion(100, 149, Some(NOW - DAY), 10),
            stats(150, 199, Some(NOW), 10),
        ];
        assert_eq!(
            plan_cut(&files, &limits(7 * DAY, -1, 0), 0, 200, NOW),
            (1, 100),
            "the recent dead letters stay"
        );
        let old = [
            stats(0, 99, Some(NOW - 9 * DAY), 10),
            companion(100, 149, Some(NOW - 9 * DAY), 10),
            stats(150, 199, Some(NOW), 10),
        ];
        assert_eq!(
            plan_cut(&old, &limits(7 * DAY, -1, 0), 0, 200, NOW),
            (2, 150),
            "old ones go with the main file"
        );
        // One pass wrote main rows 0-20 and aborted records 10-15: the start never falls inside the removed main file.
        let overlapping = [
            stats(0, 20, Some(NOW - 9 * DAY), 10),
            companion(10, 15, Some(NOW), 10),
            stats(21, 30, Some(NOW), 10),
        ];
        assert_eq!(plan_cut(&overlapping, &limits(7 * DAY, -1, 0), 0, 31, NOW), (1, 21));
    }

    #[test]
    fn a_delete_records_start_ahead_of_the_table_cuts_it_up_to_the_table_end() {
        let files = [stats(0, 9, None, 100), stats(10, 19, None, 100), stats(20, 29, None, 100)];
        let deleted_to =
            |offset| PartitionRetention { log_start_offset: offset, ..limits(-1, -1, 0) };
        assert_eq!(
            plan_cut(&files, &deleted_to(15), 0, 30, NOW),
            (1, 15),
            "inside a file: it stays whole, the start is 15"
        );
        assert_eq!(plan_cut(&files, &deleted_to(20), 0, 30, NOW), (2, 20));
        assert_eq!(
            plan_cut(&files, &deleted_to(45), 0, 30, NOW),
            (3, 30),
            "beyond the table: capped at its end"
        );
        assert_eq!(
            plan_cut(&files, &deleted_to(5), 10, 30, NOW),
            (1, 10),
            "behind the committed start: nothing moves back"
        );
        assert!(
            deleted_to(15).can_cut(10)
                && !deleted_to(10).can_cut(10)
                && limits(0, -1, 0).can_cut(99)
        );
    }

    async fn catalog(dir: &std::path::Path) -> IcebergCatalog {
        IcebergCatalog::open_sqlite(
            "floe",
            &dir.join("iceberg/catalog.db"),
            &dir.join("iceberg/warehouse"),
            "kafka",
        )
        .await
        .unwrap()
    }

    /// Appends `n` records with timestamp `ts`, in batches of 5; returns the first offset.
    fn fill_at(log: &PartitionLog, n: usize, ts: i64) -> i64 {
        let first = log.log_end_offset();
        let recs: Vec<TestRecord> =
            (0..n).map(|i| TestRecord { timestamp: ts, ..record(i) }).collect();
        for chunk in recs.chunks(5) {
            log.append(
                &mut encode(chunk, floe_protocol::kafka_protocol::records::Compression::None),
                0,
            )
            .unwrap();
        }
        first
    }

    async fn offsets(t: &TopicTable, partition: i32) -> Vec<i64> {
        let mut v: Vec<i64> = scan_columns(t, &["partition", "offset"])
            .await
            .iter()
            .flat_map(|b| {
                let p =
                    b.column(0).as_primitive::<arrow_array::types::Int32Type>().values().to_vec();
                let o = b.column(1).as_primitive::<Int64Type>().values().to_vec();
                p.into_iter().zip(o)
            })
            .filter(|(p, _)| *p == partition)
            .map(|(_, o)| o)
            .collect();
        v.sort_unstable();
        v
    }

    async fn summary(t: &TopicTable) -> (Operation, std::collections::HashMap<String, String>) {
        let table = t.load().await.unwrap();
        let s = table.metadata().current_snapshot().unwrap().summary().clone();
        (s.operation, s.additional_properties)
    }

    /// Live data file sizes of `partition`, in offset order.
    async fn sizes(t: &TopicTable, partition: i32) -> Vec<u64> {
        let table = t.load().await.unwrap();
        let files = snapshot_files(&table).await.unwrap().unwrap();
        let columns = Columns::of(&table).unwrap();
        files_by_partition(&table, &files, &columns)
            .remove(&partition)
            .unwrap_or_default()
            .iter()
            .map(|f| f.size)
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retention_by_time_and_size_drops_front_files_and_every_commit_carries_the_log_start() {
        let dir = tempfile::tempdir().unwrap();
        let logs: Vec<Arc<PartitionLog>> = (0..2)
            .map(|p| Arc::new(open_log(&dir.path().join(format!("t-{p}")), p, &[])))
            .collect();
        let cat = catalog(dir.path()).await;
        let t = cat.shared_topic_table("t", "id-1", "identity(partition)").await.unwrap();
        let tier_limits = TierLimits::default();
        let tier = || t.tier(&logs, &tier_limits);
        // Four passes, one file each per partition: 10, 5 and 1 days old, then new.
        // Partition 0's first pass has an aborted transaction: `__log` rows below the cut.
        let mut firsts = Vec::new();
        for (round, age) in [10 * DAY, 5 * DAY, DAY, 0].into_iter().enumerate() {
            firsts.push(fill_at(&logs[0], 10, NOW - age));
            fill_at(&logs[1], 10, NOW - age);
            if round == 0 {
                logs[0].append(&mut transactional(7, 0, 5), 0).unwrap();
                logs[0].append_txn_marker(7, 0, Abort, 0, 1).unwrap();
            }
            for log in &logs {
                log.roll_now().unwrap();
            }
            tier().await.unwrap();
        }
        let log_rows_before = scan_columns(t.log_table().unwrap(), &["offset"])
            .await
            .iter()
            .map(|b| b.num_rows())
            .sum::<usize>();
        assert_eq!(log_rows_before, 6, "five aborted records and their marker");
        let all0 = offsets(&t, 0).await;

        // By time, partition 0 only: the 10-day-old file goes, and its `__log` rows.
        let week = BTreeMap::from([(0, limits(7 * DAY, -1, 0))]);
        let r = t.apply_retention(&week, NOW).await.unwrap();
        assert_eq!((r.removed_files, r.log_removed_files), (1, 1), "{r:?}");
        assert_eq!(r.moved, BTreeMap::from([(0, firsts[1])]));
        assert_eq!(r.log_starts, BTreeMap::from([(0, firsts[1])]));
        assert_eq!(
            offsets(&t, 0).await,
            all0.iter().copied().filter(|o| *o >= firsts[1]).collect::<Vec<_>>()
        );
        assert_eq!(offsets(&t, 1).await.len(), 40, "partition 1 untouched");
        assert!(scan_columns(t.log_table().unwrap(), &["offset"])
            .await
            .iter()
            .all(|b| b.num_rows() == 0));
        let (op, props) = summary(&t).await;
        assert_eq!(op, Operation::Delete);
        assert_eq!(props["floe.log-start.0"], firsts[1].to_string());
        assert_eq!(
            props["floe.next-offset.0"],
            logs[0].log_end_offset().to_string(),
            "next offsets carried"
        );
        assert_eq!(props["total-records"], "70");
        let (_, log_props) = summary(t.log_table().unwrap()).await;
        assert_eq!(
            log_props["floe.log-start.0"],
            firsts[1].to_string(),
            "the __log cut records it too"
        );
        assert_eq!(
            t.apply_retention(&week, NOW).await.unwrap().removed_files,
            0,
            "again: nothing more"
        );

        // A tiering commit carries it.
        fill_at(&logs[0], 10, NOW);
        logs[0].roll_now().unwrap();
        tier().await.unwrap();
        let (op, props) = summary(&t).await;
        assert_eq!(
            (op, props["floe.log-start.0"].as_str()),
            (Operation::Append, firsts[1].to_string().as_str())
        );

        // By size, partition 1 only: keep all but its first file's bytes.
        let s1 = sizes(&t, 1).await;
        let keep = (s1.iter().sum::<u64>() - s1[0]) as i64;
        let r = t.apply_retention(&BTreeMap::from([(1, limits(-1, keep, 0))]), NOW).await.unwrap();
        assert_eq!(r.removed_files, 1, "{r:?}");
        assert_eq!(
            r.log_starts,
            BTreeMap::from([(0, firsts[1]), (1, 10)]),
            "partition 0's carried"
        );
        assert_eq!(offsets(&t, 1).await, (10..40).collect::<Vec<_>>());
        // Local bytes above the table end count: with as many local bytes as a file, two more go.
        let s1 = sizes(&t, 1).await;
        let keep = s1.iter().sum::<u64>() as i64;
        let r = t
            .apply_retention(&BTreeMap::from([(1, limits(-1, keep, s1[0] + s1[1]))]), NOW)
            .await
            .unwrap();
        assert_eq!((r.removed_files, r.moved.get(&1).copied()), (2, Some(30)), "{r:?}");

        // A compaction carries both.
        let policy = CompactionPolicy {
            min_input_files: 2,
            ..CompactionPolicy::for_target(64 << 20, 1 << 30)
        };
        assert!(t.compact(&policy).await.unwrap().snapshot_id.is_some());
        let (op, props) = summary(&t).await;
        assert_eq!(op, Operation::Replace);
        assert_eq!(
            (props["floe.log-start.0"].as_str(), props["floe.log-start.1"].as_str()),
            (firsts[1].to_string().as_str(), "30")
        );
        assert_eq!(t.committed_next_offsets().await.unwrap()[&0], logs[0].log_end_offset());

        // Everything expired: the log starts at the table end, and tiering goes on from there.
        let end0 = logs[0].log_end_offset();
        let r = t
            .apply_retention(
                &BTreeMap::from([(0, limits(0, -1, 0)), (1, limits(0, -1, 0))]),
                NOW + 1,
            )
            .await
            .unwrap();
        assert_eq!(r.log_starts, BTreeMap::from([(0, end0), (1, 40)]), "{r:?}");
        assert!(offsets(&t, 0).await.is_empty() && offsets(&t, 1).await.is_empty());
        let next = fill_at(&logs[0], 5, NOW);
        logs[0].roll_now().unwrap();
        let out =
            t.tier_until(&logs, &TierLimits::default(), &AtomicBool::new(false)).await.unwrap();
        assert_eq!(out.committed[&0], (next, next + 4));
        assert_eq!(summary(&t).await.1["floe.log-start.0"], end0.to_string());
    }
}
