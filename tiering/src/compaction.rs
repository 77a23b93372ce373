//! Small-file compaction: a partition's small data files rewritten into files of
//! the target size, committed as an Iceberg `replace` snapshot.
//!
//! Every tiering commit writes at least one data file per table partition it
//! touches, so a topic tiered every few seconds gets thousands of small files a
//! day, and every query opens them all. Compaction picks, per (partition spec,
//! partition value, manifest schema), the live data files smaller than
//! `min_file_size` (Java's `min-file-size-bytes`: 75% of the target by default);
//! a group is rewritten once it has `min_input_files` of them (Java's
//! `min-input-files`, 5) or they add up to a target file. Their rows are read
//! back (Parquet → Arrow, in commit order, a commit's files by first offset), written again through the same
//! writer stack as tiering into files of `write.target-file-size-bytes`, and the
//! swap is one snapshot whose operation is `replace`: the new files `ADDED`, the
//! old ones `DELETED`, every other file `EXISTING`. The same snapshot merges the
//! data manifests (one per tiering commit) into one per partition spec and schema;
//! with [`MANIFEST_MERGE_MIN_COUNT`] manifests a table gets that merge even when
//! no file needs rewriting. Readers of an older snapshot
//! still see the old files until expiry removes that snapshot and them.
//!
//! The iceberg crate (0.10) has no rewrite action, so the snapshot is built here
//! from the crate's public manifest and manifest-list writers and committed
//! ([`crate::metadata_commit`]) by compare-and-swap on the SQL catalog, or as a
//! REST commit requiring `main` unchanged: it applies only to the snapshot it was
//! planned on, and a tiering commit that lands first
//! makes it fail harmlessly (its files become orphans, removed by the orphan
//! cleanup). The exactly-once guard survives: the snapshot's summary carries
//! every partition's next offset (`floe.next-offset.*`) and tiers nothing.
//!
//! Throttled: at most `max_bytes_per_run` input bytes per run, on the tiering
//! thread (never the request runtime), holding the table's writer lock.
//!
//! Order and crashes: write the files (failpoint `tiering.compact.written`),
//! commit, and only then report (failpoint `tiering.compact.committed`). A crash
//! before the commit leaves orphans; after it, a table whose rows are the same.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{ArrayRef, RecordBatch, StructArray};
use arrow_schema::{DataType, SchemaRef as ArrowSchemaRef};
use iceberg::spec::{
    DataFile, FormatVersion, ManifestEntryRef, ManifestFile, ManifestListWriter,
    ManifestWriterBuilder, Operation, PartitionSpecRef, SchemaRef, Snapshot,
    SnapshotSummaryCollector, Struct, Summary,
};
use iceberg::table::Table;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tracing::{debug, info};

use crate::error::{Result, TieringError};
use crate::metadata_commit::MetadataCommitError;
use crate::sink::Writer;
use crate::table::{TopicTable, BROKER_ID_PROPERTY};

/// Iceberg's table property naming the data files' target size.
pub const TARGET_FILE_SIZE_PROPERTY: &str = "write.target-file-size-bytes";
/// Snapshot summary property marking a compaction's snapshot (its value: how many files it rewrote).
pub const COMPACTED_FILES_PROPERTY: &str = "floe.compacted-files";

/// A table whose current snapshot lists this many data manifests has them merged
/// (one per partition spec and schema) even when no data file needs rewriting:
/// every tiering commit adds a manifest, and a scan opens them all.
pub const MANIFEST_MERGE_MIN_COUNT: usize = 16;

/// Which files a compaction rewrites, and how much it does in one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionPolicy {
    /// Size of the files written.
    pub target_file_size: u64,
    /// Files below this are small (candidates).
    pub min_file_size: u64,
    /// A group is rewritten once it has this many small files (or they add up to a target file).
    pub min_input_files: usize,
    /// Most input bytes rewritten in one run (the rest waits for the next run).
    pub max_bytes_per_run: u64,
}

/// What a table is compacted with, before the table is looked at: the tiering
/// thread's topic settings, or `floe iceberg maintain`'s flags.
#[derive(Debug, Clone, Copy)]
pub struct CompactionRequest {
    /// The topic setting or `--target-file-size-bytes`; `None`: the table's property, else the default.
    pub target_file_size: Option<u64>,
    /// `floe.iceberg.target-file-size-bytes`.
    pub default_target_file_size: u64,
    /// `floe.iceberg.compaction.min-input-files`.
    pub min_input_files: usize,
    /// `floe.iceberg.compaction.max-bytes-per-run`.
    pub max_bytes_per_run: u64,
}

impl CompactionRequest {
    /// The policy for `table`: the requested target, else the table's
    /// `write.target-file-size-bytes`, else the default; at least 2 files a group.
    pub async fn policy(&self, table: &crate::TopicTable) -> CompactionPolicy {
        let target = match self.target_file_size {
            Some(t) => t,
            // Unreadable: the default; the compaction itself then says what is wrong.
            None => table
                .target_file_size_property()
                .await
                .ok()
                .flatten()
                .unwrap_or(self.default_target_file_size),
        };
        CompactionPolicy {
            min_input_files: self.min_input_files.max(2),
            ..CompactionPolicy::for_target(target, self.max_bytes_per_run)
        }
    }
}

impl CompactionPolicy {
    /// Java's defaults around `target_file_size`: small below 75% of it, 5 files
    /// make a group; `max_bytes_per_run` of input per run.
    pub fn for_target(target_file_size: u64, max_bytes_per_run: u64) -> Self {
        Self {
            target_file_size: target_file_size.max(1),
            min_file_size: target_file_size / 4 * 3,
            min_input_files: 5,
            max_bytes_per_run: max_bytes_per_run.max(1),
        }
    }
}

/// What a compaction did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactionReport {
    /// Groups (partition values) rewritten.
    pub groups: usize,
    /// Data files replaced.
    pub rewritten_files: usize,
    /// Their bytes.
    pub rewritten_bytes: u64,
    /// Data files written in their place.
    pub added_files: usize,
    /// Data manifests before, merged into one per partition spec and schema.
    pub merged_manifests: usize,
    /// Their bytes.
    pub added_bytes: u64,
    /// The `replace` snapshot, if one was committed.
    pub snapshot_id: Option<i64>,
}

/// One live data file as compaction plans with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// What files must share to be rewritten together: partition spec id, manifest schema id, partition value.
    pub key: (i32, i32, Struct),
    /// The file's size.
    pub size: u64,
    /// The file's data sequence number (commit order).
    pub sequence_number: i64,
    /// The lowest Kafka offset in the file (its `offset` column's lower bound; `i64::MIN` unknown):
    /// files of one commit are taken in offset order, so a partition's rows stay in offset order.
    pub first_offset: i64,
    /// The file's location (a tie-breaker that keeps plans deterministic).
    pub path: String,
}

/// A partition key of the candidates (spec id, partition, partition values), and the files under it.
type KeyGroup<'a> = (&'a (i32, i32, Struct), Vec<usize>);

/// The groups to rewrite, as indexes into `files`, each in commit order (a commit's files by their first offset); within
/// `policy.max_bytes_per_run` input bytes in all (a group larger than what is
/// left is cut, never skipped whole, so big backlogs still shrink).
pub fn plan_groups(files: &[Candidate], policy: &CompactionPolicy) -> Vec<Vec<usize>> {
    let mut by_key: BTreeMap<String, KeyGroup<'_>> = BTreeMap::new();
    for (i, f) in files.iter().enumerate().filter(|(_, f)| f.size < policy.min_file_size) {
        // Struct has no order: key the map by its debug form, stable for equal values.
        by_key.entry(format!("{:?}", f.key)).or_insert_with(|| (&f.key, Vec::new())).1.push(i);
    }
    let mut budget = policy.max_bytes_per_run;
    let mut groups = Vec::new();
    for (_, (_, mut members)) in by_key {
        let total: u64 = members.iter().map(|&i| files[i].size).sum();
        if members.len() < 2
            || (members.len() < policy.min_input_files && total < policy.target_file_size)
        {
            continue;
        }
        let order = |i: usize| (files[i].sequence_number, files[i].first_offset, &files[i].path);
        members.sort_by(|&a, &b| order(a).cmp(&order(b)));
        let mut taken = Vec::new();
        for i in members {
            if budget < files[i].size && !taken.is_empty() {
                break;
            }
            budget = budget.saturating_sub(files[i].size);
            taken.push(i);
        }
        if taken.len() >= 2 {
            groups.push(taken);
        }
        if budget == 0 {
            break;
        }
    }
    groups
}

/// A live data file of the current snapshot, where it was found.
#[derive(Debug, Clone)]
pub(crate) struct LiveEntry {
    pub(crate) entry: ManifestEntryRef,
    /// Index into the snapshot's manifest list.
    pub(crate) manifest: usize,
}

/// The current snapshot's manifests and their live data files.
#[derive(Debug)]
pub(crate) struct SnapshotFiles {
    manifests: Vec<ManifestFile>,
    /// Per manifest: its schema and partition spec.
    pub(crate) shapes: Vec<(SchemaRef, PartitionSpecRef)>,
    /// Per manifest: every entry (live or not).
    entries: Vec<Vec<ManifestEntryRef>>,
    pub(crate) live: Vec<LiveEntry>,
}

/// What [`TopicTable::rewrite_snapshot`] builds: the operation, the label of its
/// errors, and the summary properties beyond the carried totals.
#[derive(Debug)]
pub(crate) struct SnapshotKind {
    pub(crate) operation: Operation,
    pub(crate) label: &'static str,
    pub(crate) properties: HashMap<String, String>,
}

pub(crate) async fn snapshot_files(table: &Table) -> Result<Option<SnapshotFiles>> {
    let ident = table.identifier().to_string();
    let Some(snapshot) = table.metadata().current_snapshot() else { return Ok(None) };
    let list = table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .map_err(TieringError::iceberg("read", &ident))?;
    let mut out = SnapshotFiles {
        manifests: Vec::new(),
        shapes: Vec::new(),
        entries: Vec::new(),
        live: Vec::new(),
    };
    for manifest in list.entries() {
        let m = manifest
            .load_manifest(table.file_io())
            .await
            .map_err(TieringError::iceberg("read", &ident))?;
        let index = out.manifests.len();
        let (entries, meta) = m.into_parts();
        if manifest.content == iceberg::spec::ManifestContentType::Data {
            out.live.extend(
                entries
                    .iter()
                    .filter(|e| e.is_alive())
                    .map(|e| LiveEntry { entry: e.clone(), manifest: index }),
            );
        }
        out.shapes.push((meta.schema().clone(), Arc::new(meta.partition_spec().clone())));
        out.entries.push(entries);
        out.manifests.push(manifest.clone());
    }
    Ok(Some(out))
}

/// `batch`, read back from a data file, in the exact Arrow shape of `to` (the
/// schema the group is written with): fields by name, missing ones null,
/// narrower numbers widened ([`crate::typed::project`]).
fn conform(batch: RecordBatch, to: &ArrowSchemaRef) -> Result<RecordBatch> {
    if batch.schema().fields() == to.fields() {
        return Ok(RecordBatch::try_new(to.clone(), batch.columns().to_vec())?);
    }
    let rows = batch.num_rows();
    let whole: ArrayRef = Arc::new(StructArray::from(batch));
    let projected = crate::typed::project::project(&whole, &DataType::Struct(to.fields().clone()))?;
    let columns = projected.as_struct().columns().to_vec();
    Ok(RecordBatch::try_new_with_options(
        to.clone(),
        columns,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows)),
    )?)
}

impl TopicTable {
    /// Rewrites small data files by `policy` (see the module doc) and commits the
    /// swap as a `replace` snapshot. Does nothing (an empty report) when no group
    /// qualifies or the table is not format v2. The commit is a compare-and-swap
    /// on Floe's SQL catalog, or a REST commit conditional on `main` (409 if it moved).
    ///
    /// # Errors
    /// [`TieringError::Iceberg`] reading, writing or committing (nothing committed:
    /// written files are orphans); [`TieringError::StaleSnapshot`] when the table
    /// moved during the rewrite.
    pub async fn compact(&self, policy: &CompactionPolicy) -> Result<CompactionReport> {
        let Some(committer) = self.direct_committer() else {
            debug!(table = %self.ident(), "compaction skipped: the table's catalog takes no hand-built commit");
            return Ok(CompactionReport::default());
        };
        let _writer = self.writer_lock().await;
        let before = self.load().await?;
        let ident = self.ident().to_string();
        if before.metadata().format_version() != FormatVersion::V2 {
            debug!(table = %ident, "compaction skipped: only format v2 tables are compacted");
            return Ok(CompactionReport::default());
        }
        let Some(files) = snapshot_files(&before).await? else {
            return Ok(CompactionReport::default());
        };
        // By name: a created table's ids are Iceberg's fresh ones, not the layout's.
        let offset_id = crate::retention::column_id(before.metadata().current_schema(), "offset")
            .unwrap_or(crate::schema::field_id::OFFSET);
        let candidates: Vec<Candidate> = files
            .live
            .iter()
            .map(|l| {
                let (schema, spec) = &files.shapes[l.manifest];
                Candidate {
                    key: (
                        spec.spec_id(),
                        schema.schema_id(),
                        l.entry.data_file().partition().clone(),
                    ),
                    size: l.entry.file_size_in_bytes(),
                    sequence_number: l.entry.sequence_number().unwrap_or(0),
                    first_offset: first_offset(l.entry.data_file(), offset_id),
                    path: l.entry.file_path().to_string(),
                }
            })
            .collect();
        let groups = plan_groups(&candidates, policy);
        let data_manifests = files
            .manifests
            .iter()
            .filter(|m| m.content == iceberg::spec::ManifestContentType::Data)
            .count();
        if groups.is_empty() && data_manifests < MANIFEST_MERGE_MIN_COUNT {
            return Ok(CompactionReport::default());
        }
        let prefix = format!("floe-compact-{}", uuid::Uuid::new_v4());
        let mut report = CompactionReport {
            groups: groups.len(),
            merged_manifests: data_manifests,
            ..CompactionReport::default()
        };
        // Per (spec id, schema id): the files written, and the files they replace.
        let mut added: BTreeMap<(i32, i32), Vec<DataFile>> = BTreeMap::new();
        let mut removed: HashSet<String> = HashSet::new();
        for group in &groups {
            let first = &files.live[group[0]];
            let (schema, spec) = files.shapes[first.manifest].clone();
            let arrow: ArrowSchemaRef = Arc::new(
                iceberg::arrow::schema_to_arrow_schema(&schema)
                    .map_err(TieringError::iceberg("compact", &ident))?,
            );
            let mut writer = Writer::with_shape(
                &before,
                schema.clone(),
                spec.clone(),
                policy.target_file_size as usize,
                prefix.clone(),
            )?;
            let mut rows_in = 0u64;
            for &i in group {
                let entry = &files.live[i].entry;
                let bytes = before
                    .file_io()
                    .new_input(entry.file_path())
                    .map_err(TieringError::iceberg("compact", &ident))?
                    .read()
                    .await
                    .map_err(TieringError::iceberg("compact", &ident))?;
                let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
                    .and_then(|b| b.with_batch_size(8192).build())
                    .map_err(|e| parquet_error(&ident, entry.file_path(), e))?;
                for batch in reader {
                    let batch = conform(batch?, &arrow)?;
                    rows_in += batch.num_rows() as u64;
                    writer.write(batch).await.map_err(TieringError::iceberg("compact", &ident))?;
                }
                report.rewritten_files += 1;
                report.rewritten_bytes += entry.file_size_in_bytes();
                removed.insert(entry.file_path().to_string());
            }
            let written = writer.close().await.map_err(TieringError::iceberg("compact", &ident))?;
            let rows_out: u64 = written.iter().map(DataFile::record_count).sum();
            let rows_listed: u64 = group.iter().map(|&i| files.live[i].entry.record_count()).sum();
            if rows_out != rows_in || rows_in != rows_listed {
                return Err(TieringError::iceberg("compact", &ident)(iceberg::Error::new(
                    iceberg::ErrorKind::DataInvalid,
                    format!("rewrote {rows_in} rows into {rows_out}, the manifests list {rows_listed}: nothing committed"),
                )));
            }
            report.added_files += written.len();
            report.added_bytes += written.iter().map(DataFile::file_size_in_bytes).sum::<u64>();
            added.entry((spec.spec_id(), schema.schema_id())).or_default().extend(written);
        }
        self.failpoint("tiering.compact.written")?;
        let snapshot = self.replace_snapshot(&before, &files, &added, &removed).await?;
        let snapshot_id = snapshot.snapshot_id();
        match committer.commit_snapshot(&before, snapshot).await {
            Ok(()) => {}
            Err(MetadataCommitError::Moved(_)) => {
                let current =
                    self.load().await.ok().and_then(|t| t.metadata().current_snapshot_id());
                return Err(TieringError::StaleSnapshot {
                    table: ident,
                    planned: before.metadata().current_snapshot_id(),
                    current,
                });
            }
            Err(MetadataCommitError::Failed(why)) => {
                return Err(TieringError::iceberg("compact", &ident)(iceberg::Error::new(
                    iceberg::ErrorKind::Unexpected,
                    why,
                )))
            }
        }
        self.failpoint("tiering.compact.committed")?;
        if let Ok(after) = self.load().await {
            self.delete_dropped_metadata(&before, &after).await;
        }
        report.snapshot_id = Some(snapshot_id);
        info!(table = %ident, groups = report.groups, rewritten = report.rewritten_files, rewritten_bytes = report.rewritten_bytes,
            added = report.added_files, added_bytes = report.added_bytes, manifests = report.merged_manifests, snapshot = snapshot_id,
            "compacted small data files and merged manifests");
        Ok(report)
    }

    /// The table's metadata with a `replace` snapshot on top of `before`'s current one:
    /// `added` files in, `removed` files out, everything else as it was.
    async fn replace_snapshot(
        &self,
        before: &Table,
        files: &SnapshotFiles,
        added: &BTreeMap<(i32, i32), Vec<DataFile>>,
        removed: &HashSet<String>,
    ) -> Result<Snapshot> {
        let mut properties = crate::offsets::carried_properties(before.metadata());
        properties.insert(COMPACTED_FILES_PROPERTY.to_string(), removed.len().to_string());
        let kind = SnapshotKind { operation: Operation::Replace, label: "compact", properties };
        self.rewrite_snapshot(before, files, added, removed, kind).await
    }

    /// A snapshot on top of `before`'s current one, of `kind`'s operation: `added`
    /// files in, `removed` files out (`DELETED` entries), everything else as it was,
    /// every data manifest merged into one per partition spec and schema. Its summary:
    /// the totals carried from the parent with the changes applied, and `kind`'s
    /// properties (which must hold the cumulative ones, [`crate::offsets::cumulative_properties`]).
    pub(crate) async fn rewrite_snapshot(
        &self,
        before: &Table,
        files: &SnapshotFiles,
        added: &BTreeMap<(i32, i32), Vec<DataFile>>,
        removed: &HashSet<String>,
        kind: SnapshotKind,
    ) -> Result<Snapshot> {
        let label = kind.label;
        let ident = self.ident().to_string();
        let err = |e| TieringError::iceberg(label, &ident)(e);
        let metadata = before.metadata();
        let parent = metadata.current_snapshot().ok_or_else(|| {
            err(iceberg::Error::new(iceberg::ErrorKind::Unexpected, "no current snapshot"))
        })?;
        let snapshot_id = unique_snapshot_id(metadata);
        let sequence_number = metadata.next_sequence_number();
        let commit = uuid::Uuid::new_v4();
        let location = metadata.location();
        let mut written = 0;
        let mut manifest_path = || {
            written += 1;
            format!("{location}/metadata/{commit}-m{written}.avro")
        };
        let mut summary = SnapshotSummaryCollector::default();
        // Every data manifest is merged into one per (spec, schema): replaced files
        // DELETED, the others EXISTING (their sequence numbers and adding snapshot
        // kept), the new files ADDED. Delete manifests (Floe writes none) stay as they are.
        let mut merged: BTreeMap<(i32, i32), (SchemaRef, PartitionSpecRef, Vec<usize>)> =
            BTreeMap::new();
        let mut manifests = Vec::new();
        for (m, manifest) in files.manifests.iter().enumerate() {
            if manifest.content != iceberg::spec::ManifestContentType::Data {
                manifests.push(manifest.clone());
                continue;
            }
            let (schema, spec) = files.shapes[m].clone();
            merged
                .entry((spec.spec_id(), schema.schema_id()))
                .or_insert_with(|| (schema, spec, Vec::new()))
                .2
                .push(m);
        }
        if let Some(key) = added.keys().find(|k| !merged.contains_key(k)) {
            // A group's files came from a data manifest of that shape: a bug if not.
            return Err(err(iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!("no manifest of spec and schema {key:?}"),
            )));
        }
        for (key, (schema, spec, sources)) in merged {
            let output = before
                .file_io()
                .new_output(manifest_path())
                .map_err(TieringError::iceberg(label, &ident))?;
            let mut writer = ManifestWriterBuilder::new(
                output,
                Some(snapshot_id),
                schema.clone(),
                (*spec).clone(),
            )
            .build_v2_data();
            for m in sources {
                for e in files.entries[m].iter().filter(|e| e.is_alive()) {
                    let (seq, file_seq) = (
                        e.sequence_number().unwrap_or(0),
                        e.file_sequence_number.or(e.sequence_number()),
                    );
                    if removed.contains(e.file_path()) {
                        summary.remove_file(e.data_file(), schema.clone(), spec.clone());
                        writer
                            .add_delete_file(e.data_file().clone(), seq, file_seq)
                            .map_err(TieringError::iceberg(label, &ident))?;
                    } else {
                        let added_by =
                            e.snapshot_id().unwrap_or(files.manifests[m].added_snapshot_id);
                        writer
                            .add_existing_file(e.data_file().clone(), added_by, seq, file_seq)
                            .map_err(TieringError::iceberg(label, &ident))?;
                    }
                }
            }
            for f in added.get(&key).into_iter().flatten() {
                summary.add_file(f, schema.clone(), spec.clone());
                writer
                    .add_file(f.clone(), sequence_number)
                    .map_err(TieringError::iceberg(label, &ident))?;
            }
            manifests.push(
                writer.write_manifest_file().await.map_err(TieringError::iceberg(label, &ident))?,
            );
        }
        let list_path = format!("{location}/metadata/snap-{snapshot_id}-0-{commit}.avro");
        let list_out = before
            .file_io()
            .new_output(&list_path)
            .map_err(TieringError::iceberg(label, &ident))?;
        let mut list = ManifestListWriter::v2(
            list_out.writer().await.map_err(TieringError::iceberg(label, &ident))?,
            snapshot_id,
            Some(parent.snapshot_id()),
            sequence_number,
        );
        list.add_manifests(manifests.into_iter()).map_err(TieringError::iceberg(label, &ident))?;
        list.close().await.map_err(TieringError::iceberg(label, &ident))?;

        let mut properties = replace_summary(parent.summary(), summary.build());
        properties.extend(kind.properties);
        if let Some(id) = self.broker_id() {
            properties.insert(BROKER_ID_PROPERTY.to_string(), id.to_string());
        }
        let snapshot = Snapshot::builder()
            .with_manifest_list(list_path)
            .with_snapshot_id(snapshot_id)
            .with_parent_snapshot_id(Some(parent.snapshot_id()))
            .with_sequence_number(sequence_number)
            .with_summary(Summary { operation: kind.operation, additional_properties: properties })
            .with_schema_id(metadata.current_schema_id())
            .with_timestamp_ms(floe_storage::clock::wall_ms().max(metadata.last_updated_ms() + 1))
            .build();
        Ok(snapshot)
    }
}

/// The lower bound of `file`'s Kafka `offset` column, `i64::MIN` when it has none.
fn first_offset(file: &DataFile, offset_id: i32) -> i64 {
    match file.lower_bounds().get(&offset_id).map(iceberg::spec::Datum::literal) {
        Some(iceberg::spec::PrimitiveLiteral::Long(v)) => *v,
        _ => i64::MIN,
    }
}

/// A replace snapshot's summary: `changes` (what the collector counted: added and
/// removed files and bytes), and the totals carried from `parent`'s with them
/// applied. Records are neither added nor removed by a rewrite.
fn replace_summary(parent: &Summary, changes: HashMap<String, String>) -> HashMap<String, String> {
    let get = |m: &HashMap<String, String>, k: &str| {
        m.get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0)
    };
    let prev = &parent.additional_properties;
    let mut out = changes.clone();
    let total = |key: &str, plus: &str, minus: &str| {
        (get(prev, key) + get(&changes, plus) - get(&changes, minus)).max(0).to_string()
    };
    out.insert(
        "total-data-files".into(),
        total("total-data-files", "added-data-files", "deleted-data-files"),
    );
    out.insert("total-records".into(), total("total-records", "added-records", "deleted-records"));
    out.insert(
        "total-files-size".into(),
        total("total-files-size", "added-files-size", "removed-files-size"),
    );
    for key in ["total-delete-files", "total-position-deletes", "total-equality-deletes"] {
        out.insert(key.into(), get(prev, key).to_string());
    }
    out
}

/// A snapshot id no snapshot of `metadata` has (positive, as Iceberg's are).
fn unique_snapshot_id(metadata: &iceberg::spec::TableMetadata) -> i64 {
    loop {
        let (a, b) = uuid::Uuid::new_v4().as_u64_pair();
        let id = ((a ^ b) >> 1) as i64;
        if id != 0 && metadata.snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

fn parquet_error(table: &str, path: &str, e: parquet::errors::ParquetError) -> TieringError {
    TieringError::iceberg("compact", table)(iceberg::Error::new(
        iceberg::ErrorKind::DataInvalid,
        format!("cannot read data file {path}: {e}"),
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use arrow_array::types::Int64Type;
    use arrow_array::Array;
    use iceberg::spec::Literal;

    use super::*;
    use crate::catalog::IcebergCatalog;
    use crate::table::TierLimits;
    use crate::test_util::*;

    fn file(day: i32, size: u64, seq: i64) -> Candidate {
        Candidate {
            key: (0, 0, Struct::from_iter([Some(Literal::int(day))])),
            size,
            sequence_number: seq,
            first_offset: 0,
            path: format!("f{day}-{seq}"),
        }
    }

    #[test]
    fn small_files_of_a_partition_are_grouped_in_commit_order() {
        let policy = CompactionPolicy::for_target(1000, 1 << 30);
        let files = vec![
            file(1, 100, 3),
            file(1, 100, 1),
            file(1, 900, 2),
            file(1, 100, 5),
            file(1, 100, 4),
            file(1, 100, 6),
            file(2, 100, 7),
        ];
        let groups = plan_groups(&files, &policy);
        // Day 1: five small files (the 900-byte one is not small); day 2: one file, left alone.
        assert_eq!(groups, vec![vec![1, 0, 4, 3, 5]]);
    }

    #[test]
    fn fewer_files_than_the_minimum_wait_unless_they_fill_a_target_file() {
        let policy = CompactionPolicy::for_target(1000, 1 << 30);
        assert!(plan_groups(&[file(1, 100, 1), file(1, 100, 2)], &policy).is_empty());
        assert_eq!(plan_groups(&[file(1, 600, 1), file(1, 600, 2)], &policy), vec![vec![0, 1]]);
        assert!(
            plan_groups(&[file(1, 600, 1)], &policy).is_empty(),
            "one file is never rewritten alone"
        );
    }

    #[test]
    fn files_of_one_commit_go_in_offset_order_whatever_their_names() {
        let policy = CompactionPolicy::for_target(1000, 1 << 30);
        let mut files: Vec<Candidate> = (0..5).map(|_| file(1, 100, 1)).collect();
        for (k, f) in files.iter_mut().enumerate() {
            f.first_offset = 100 - k as i64 * 10;
            f.path = format!("uuid-{k}");
        }
        assert_eq!(plan_groups(&files, &policy), vec![vec![4, 3, 2, 1, 0]]);
    }

    #[test]
    fn a_run_stops_at_its_byte_budget() {
        let policy =
            CompactionPolicy { max_bytes_per_run: 250, ..CompactionPolicy::for_target(1000, 0) };
        let files: Vec<Candidate> = (0..10).map(|s| file(1, 100, s)).collect();
        assert_eq!(plan_groups(&files, &policy), vec![vec![0, 1]]);
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

    /// Every (partition, offset, value) of the table, sorted, read by the iceberg crate's scan.
    async fn rows(t: &TopicTable) -> Vec<(i32, i64, Option<Vec<u8>>)> {
        let batches = scan_columns(t, &["partition", "offset", "value"]).await;
        let mut out = Vec::new();
        for b in &batches {
            let p = b.column(0).as_primitive::<arrow_array::types::Int32Type>();
            let o = b.column(1).as_primitive::<Int64Type>();
            let v = b.column(2).as_binary::<i64>();
            for i in 0..b.num_rows() {
                out.push((p.value(i), o.value(i), (!v.is_null(i)).then(|| v.value(i).to_vec())));
            }
        }
        out.sort();
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn small_files_become_one_replace_snapshot_and_the_offsets_guard_survives() {
        let dir = tempfile::tempdir().unwrap();
        let logs: Vec<Arc<floe_storage::PartitionLog>> = (0..2)
            .map(|p| Arc::new(open_log(&dir.path().join(format!("t-{p}")), p, &[])))
            .collect();
        let cat = catalog(dir.path()).await;
        let t = cat.topic_table("t", "id-1", "day(timestamp)").await.unwrap();
        // Twelve commits of a few records each: twelve small files in one day partition.
        for round in 0..12 {
            for log in &logs {
                fill(log, round * 10, 10);
                log.roll_now().unwrap();
            }
            t.tier(&logs, &TierLimits::default()).await.unwrap();
        }
        let before = rows(&t).await;
        assert_eq!(before.len(), 240);
        let next_before = t.committed_next_offsets().await.unwrap();
        let stats_before = t.stats().await.unwrap();
        assert!(stats_before.data_files >= 12, "{stats_before:?}");

        let policy = CompactionPolicy::for_target(64 << 20, 1 << 30);
        let report = t.compact(&policy).await.unwrap();
        assert_eq!(report.rewritten_files as u64, stats_before.data_files);
        assert_eq!(report.added_files, 1, "{report:?}");
        let table = t.load().await.unwrap();
        let snapshot = table.metadata().current_snapshot().unwrap();
        assert_eq!(snapshot.summary().operation, Operation::Replace);
        assert_eq!(snapshot.summary().additional_properties["total-data-files"], "1");
        assert_eq!(snapshot.summary().additional_properties["total-records"], "240");
        let manifests = table.manifest_list_reader(snapshot).load().await.unwrap();
        assert_eq!(manifests.entries().len(), 1, "twelve manifests merged into one");
        assert_eq!(rows(&t).await, before, "the same rows, once each");
        assert_eq!(
            t.committed_next_offsets().await.unwrap(),
            next_before,
            "the offsets guard reads the same"
        );
        assert_eq!(t.stats().await.unwrap().data_files, 1);
        assert!(
            t.compact(&policy).await.unwrap().snapshot_id.is_none(),
            "one file: nothing more to do"
        );

        // Tiering goes on exactly once on top; expiry then deletes the replaced files.
        for log in &logs {
            fill(log, 200, 10);
            log.roll_now().unwrap();
        }
        let out = t.tier(&logs, &TierLimits::default()).await.unwrap();
        assert_eq!(out.committed.len(), 2);
        assert_eq!(rows(&t).await.len(), 260);
        let old: BTreeSet<String> =
            std::fs::read_dir(dir.path().join("iceberg/warehouse/kafka/t/data"))
                .unwrap()
                .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
                .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
        let expiry = crate::ExpiryPolicy { max_age_ms: 0, min_to_keep: 1 };
        let expired =
            t.expire_snapshots(expiry, floe_storage::clock::wall_ms() + 1000).await.unwrap();
        assert!(expired.deleted_files >= 12, "{expired:?}");
        let left: BTreeSet<String> =
            std::fs::read_dir(dir.path().join("iceberg/warehouse/kafka/t/data"))
                .unwrap()
                .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
                .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
        assert_eq!(left.len(), 2, "the compacted file and the new one: {left:?} (was {old:?})");
        assert_eq!(rows(&t).await.len(), 260);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_compaction_planned_on_an_old_snapshot_commits_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[]));
        let cat = catalog(dir.path()).await;
        let t = cat.topic_table("t", "id-1", "").await.unwrap();
        for round in 0..6 {
            fill(&log, round * 5, 5);
            log.roll_now().unwrap();
            t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
        }
        // Build the replace on the current state, then let a tiering commit land first.
        let before = t.load().await.unwrap();
        let files = snapshot_files(&before).await.unwrap().unwrap();
        let removed: HashSet<String> =
            files.live.iter().map(|l| l.entry.file_path().to_string()).collect();
        let snapshot =
            t.replace_snapshot(&before, &files, &BTreeMap::new(), &removed).await.unwrap();
        fill(&log, 30, 5);
        log.roll_now().unwrap();
        t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
        let lost = t.direct_committer().unwrap().commit_snapshot(&before, snapshot).await;
        assert!(matches!(lost, Err(MetadataCommitError::Moved(_))), "{lost:?}");
        assert_eq!(rows(&t).await.len(), 35, "nothing was removed");
    }
}
