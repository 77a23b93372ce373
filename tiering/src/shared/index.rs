//! The file index of one shared table snapshot (`docs/shared-mode.md` 4.1):
//! per Kafka partition, the live data files of the main table, of its
//! `__log` table and (a typed table) of its `__dlq` table as `(offset lower bound, upper bound, path, size)` sorted by
//! lower bound, the main table's committed next offset, and `__log`'s abort
//! markers (small: one row per aborted transaction; they are the table's
//! transaction index, 4.5).
//!
//! Everything comes from the manifests: an entry's partition value (the
//! `identity(partition)` field of its spec) and its `offset` column's
//! lower/upper bounds. Columns are found by name: a created table got fresh
//! field ids, so the layout's ids in [`crate::schema::field_id`] may not be the
//! table's.

use std::collections::BTreeMap;

use iceberg::spec::{DataFile, Datum, Literal, PartitionSpec, PrimitiveLiteral, Schema, Transform};
use iceberg::table::Table;

use crate::error::{Result, TieringError};

/// One live data file of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataFileRef {
    /// The lowest `offset` in it (`i64::MIN` when the manifest has no bound:
    /// then it is read for any range).
    pub lower: i64,
    /// The highest `offset` in it (`i64::MAX` without a bound).
    pub upper: i64,
    /// Its location, as the manifest lists it.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// The largest record timestamp in it, in ms (the `timestamp` column's
    /// upper bound; `i64::MAX` without one): ListOffsets by time skips files below.
    pub max_timestamp_ms: i64,
}

impl DataFileRef {
    /// Whether the file may hold offsets in `[from, upper)`.
    pub fn overlaps(&self, from: i64, upper: i64) -> bool {
        self.lower < upper && self.upper >= from
    }
}

/// An ABORT marker of `__log`: Kafka's `AbortedTxn` without the scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortMarker {
    /// The marker's offset.
    pub offset: i64,
    /// The aborting producer.
    pub producer_id: i64,
    /// The transaction's first offset in the partition (`.txnindex` firstOffset).
    pub first_offset: i64,
}

/// The files of a shared table and its `__log` table at one snapshot each.
#[derive(Debug, Clone, Default)]
pub struct FileIndex {
    /// Main table files per Kafka partition, sorted by lower bound.
    /// A file whose partition is unknown (no `identity(partition)` field) is
    /// listed under every partition the table has: its rows are filtered on
    /// the `partition` column when read.
    pub main: BTreeMap<i32, Vec<DataFileRef>>,
    /// `__log` files per Kafka partition, sorted by lower bound (as `main`).
    pub log: BTreeMap<i32, Vec<DataFileRef>>,
    /// A shared typed table's `__dlq` files (records that could not be typed,
    /// in the lossless layout) per Kafka partition, sorted by lower bound; empty
    /// for a raw table. Leftovers at or above the next offset as for `__log`.
    pub dlq: BTreeMap<i32, Vec<DataFileRef>>,
    /// The main table's committed next offset per partition
    /// ([`crate::offsets::committed_next_offsets`]): `__log` rows at or above
    /// it are leftovers of a crashed pass and ignored.
    pub next_offsets: BTreeMap<i32, i64>,
    /// `__log`'s abort markers per partition, in offset order (leftovers left out).
    pub abort_markers: BTreeMap<i32, Vec<AbortMarker>>,
    /// `__log`'s opaque batches per partition as `(base offset, last offset)`,
    /// in offset order: their one row sits at the base, so a fetch from inside
    /// one finds it here, not by the `offset` statistics.
    pub opaque: BTreeMap<i32, Vec<(i64, i64)>>,
}

impl FileIndex {
    /// Builds the index of `main`'s and `log`'s current snapshots (manifests,
    /// then the abort-marker rows of `__log`).
    ///
    /// # Errors
    /// [`TieringError::Iceberg`] reading a manifest list, a manifest or a data file.
    pub async fn load(main: &Table, log: &Table) -> Result<Self> {
        Self::load_with_dead_letters(main, log, None).await
    }

    /// [`FileIndex::load`] for a shared typed table, whose dead letters (`dlq`,
    /// its `<topic>__dlq` table) hold the offsets the main table could not type:
    /// the three tables' rows are merged by offset when read.
    ///
    /// # Errors
    /// As [`FileIndex::load`].
    pub async fn load_with_dead_letters(
        main: &Table,
        log: &Table,
        dlq: Option<&Table>,
    ) -> Result<Self> {
        let next_offsets = crate::offsets::committed_next_offsets(main.metadata());
        let main_files = table_files(main).await?;
        let mut log_files = table_files(log).await?;
        let mut dlq_files = match dlq {
            Some(t) => table_files(t).await?,
            None => BTreeMap::new(),
        };
        // A `__log` or `__dlq` file entirely at or above the next offset is a
        // crashed pass's: never worth opening.
        for (p, files) in log_files.iter_mut().chain(dlq_files.iter_mut()) {
            let next = next_offsets.get(p).copied().unwrap_or(i64::MIN);
            files.retain(|f| f.lower < next);
        }
        let mut index = Self {
            main: main_files,
            log: log_files,
            dlq: dlq_files,
            next_offsets,
            ..Self::default()
        };
        let partitions: Vec<i32> = index.log.keys().copied().collect();
        for p in partitions {
            let (markers, opaque) = crate::shared::read::log_entries(log, &index, p).await?;
            if !markers.is_empty() {
                index.abort_markers.insert(p, markers);
            }
            if !opaque.is_empty() {
                index.opaque.insert(p, opaque);
            }
        }
        Ok(index)
    }

    /// The main table's next offset of `partition` (`None`: never tiered).
    pub fn next_offset(&self, partition: i32) -> Option<i64> {
        self.next_offsets.get(&partition).copied()
    }

    /// The base offset of the opaque batch of `partition` holding `offset`
    /// past its base, if one does: a fetch from there starts at the base.
    pub fn opaque_base(&self, partition: i32, offset: i64) -> Option<i64> {
        self.opaque
            .get(&partition)?
            .iter()
            .find(|(base, last)| *base < offset && offset <= *last)
            .map(|(base, _)| *base)
    }

    /// `partition`'s main-table files that may hold offsets in `[from, upper)`.
    pub fn main_files(
        &self,
        partition: i32,
        from: i64,
        upper: i64,
    ) -> impl Iterator<Item = &DataFileRef> {
        overlapping(&self.main, partition, from, upper)
    }

    /// `partition`'s `__dlq` files that may hold offsets in `[from, upper)`.
    pub fn dlq_files(
        &self,
        partition: i32,
        from: i64,
        upper: i64,
    ) -> impl Iterator<Item = &DataFileRef> {
        overlapping(&self.dlq, partition, from, upper)
    }

    /// `partition`'s `__log` files that may hold offsets in `[from, upper)`.
    pub fn log_files(
        &self,
        partition: i32,
        from: i64,
        upper: i64,
    ) -> impl Iterator<Item = &DataFileRef> {
        overlapping(&self.log, partition, from, upper)
    }

    /// The aborted transactions `(producer id, first offset)` a response
    /// covering `[from, upper)` must list, by KIP-98's rule (Kafka's
    /// `collectAbortedTransactions`): every abort marker at or after `from`
    /// whose transaction starts below `upper`. Markers at or above the table's
    /// end are the local log's `.txnindex` entries, the caller's.
    pub fn aborted_transactions(&self, partition: i32, from: i64, upper: i64) -> Vec<(i64, i64)> {
        self.abort_markers
            .get(&partition)
            .into_iter()
            .flatten()
            .filter(|m| m.offset >= from && m.first_offset < upper)
            .map(|m| (m.producer_id, m.first_offset))
            .collect()
    }
}

fn overlapping(
    files: &BTreeMap<i32, Vec<DataFileRef>>,
    partition: i32,
    from: i64,
    upper: i64,
) -> impl Iterator<Item = &DataFileRef> {
    files.get(&partition).into_iter().flatten().filter(move |f| f.overlaps(from, upper))
}

/// Per Kafka partition, the live data files of `table`'s current snapshot.
async fn table_files(table: &Table) -> Result<BTreeMap<i32, Vec<DataFileRef>>> {
    let ident = table.identifier().to_string();
    let mut by_partition: BTreeMap<i32, Vec<DataFileRef>> = BTreeMap::new();
    let mut unknown: Vec<DataFileRef> = Vec::new();
    let Some(snapshot) = table.metadata().current_snapshot() else { return Ok(by_partition) };
    let list = table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .map_err(TieringError::iceberg("read", &ident))?;
    for manifest in list.entries() {
        if manifest.content != iceberg::spec::ManifestContentType::Data {
            continue;
        }
        let m = manifest
            .load_manifest(table.file_io())
            .await
            .map_err(TieringError::iceberg("read", &ident))?;
        let (entries, meta) = m.into_parts();
        // Each manifest carries the schema and spec its files were written with.
        let offset_id = meta.schema().field_id_by_name("offset");
        let timestamp_id = meta.schema().field_id_by_name("timestamp");
        let partition_pos = partition_position(meta.schema(), meta.partition_spec());
        for entry in entries.iter().filter(|e| e.is_alive()) {
            let file = entry.data_file();
            let (lower, upper) = offset_bounds(file, offset_id);
            let max_timestamp_ms = max_timestamp_ms(file, timestamp_id);
            let f = DataFileRef {
                lower,
                upper,
                path: file.file_path().to_string(),
                size: file.file_size_in_bytes(),
                max_timestamp_ms,
            };
            match partition_pos.and_then(|pos| partition_value(file, pos)) {
                Some(p) => by_partition.entry(p).or_default().push(f),
                None => unknown.push(f),
            }
        }
    }
    if !unknown.is_empty() {
        // Without a partition value a file may hold any partition's rows. The
        // partitions known are those of other files and of the summaries.
        let mut partitions: Vec<i32> = by_partition.keys().copied().collect();
        partitions.extend(crate::offsets::committed_next_offsets(table.metadata()).keys().copied());
        partitions.sort_unstable();
        partitions.dedup();
        for p in partitions {
            by_partition.entry(p).or_default().extend(unknown.iter().cloned());
        }
    }
    for files in by_partition.values_mut() {
        files.sort_by(|a, b| (a.lower, &a.path).cmp(&(b.lower, &b.path)));
    }
    Ok(by_partition)
}

/// Where the `identity(partition)` field sits in a spec's partition tuple.
fn partition_position(schema: &Schema, spec: &PartitionSpec) -> Option<usize> {
    let source = schema.field_id_by_name("partition")?;
    spec.fields().iter().position(|f| f.source_id == source && f.transform == Transform::Identity)
}

fn partition_value(file: &DataFile, pos: usize) -> Option<i32> {
    match file.partition().fields().get(pos)? {
        Some(Literal::Primitive(PrimitiveLiteral::Int(p))) => Some(*p),
        _ => None,
    }
}

/// The `timestamp` column's upper bound in ms (timestamptz bounds are µs).
fn max_timestamp_ms(file: &DataFile, timestamp_id: Option<i32>) -> i64 {
    match timestamp_id.and_then(|id| file.upper_bounds().get(&id)).map(Datum::literal) {
        Some(PrimitiveLiteral::Long(us)) => us.div_euclid(1000),
        _ => i64::MAX,
    }
}

fn offset_bounds(file: &DataFile, offset_id: Option<i32>) -> (i64, i64) {
    let long = |d: Option<&Datum>| match d.map(Datum::literal) {
        Some(PrimitiveLiteral::Long(v)) => Some(*v),
        _ => None,
    };
    match offset_id {
        Some(id) => (
            long(file.lower_bounds().get(&id)).unwrap_or(i64::MIN),
            long(file.upper_bounds().get(&id)).unwrap_or(i64::MAX),
        ),
        None => (i64::MIN, i64::MAX),
    }
}
