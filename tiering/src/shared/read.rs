//! Reading a partition's rows back from a shared table (`docs/shared-mode.md`
//! 4.1): only the data files whose `offset` bounds overlap the range
//! ([`FileIndex`]), within a file only the Parquet row groups whose `offset`
//! statistics overlap it, and only the columns a batch's rebuild needs (a
//! typed table's value columns and typed key are never decoded: its bytes are
//! `value` and `key_raw`, kept because shared mode demands keep-raw). Columns
//! are found by name. A typed table's dead letters (`__dlq`) are read like
//! main-table rows (the lossless layout).
//!
//! I/O: a local warehouse path is opened as a file and the Parquet reader
//! reads the footer and the selected row groups' column chunks by range. Any
//! other location (S3) is read whole through the table's `FileIO` for now;
//! ranged reads there need an `AsyncFileReader` over `FileIO::new_input(..).reader()`
//! and `ParquetRecordBatchStreamBuilder` with the same row-group selection
//! (and a footer cache, 4.3), left for the broker's read pool (stage 7).
//! Local reads block: callers run them on the read pool's own threads.

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use bytes::Bytes;
use iceberg::table::Table;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::ChunkReader;
use parquet::file::statistics::Statistics;

use crate::error::{Result, TieringError};
use crate::schema::LogRowKind;
use crate::shared::index::{AbortMarker, DataFileRef, FileIndex};

/// The columns a rebuild reads from the main table.
const MAIN_COLUMNS: &[&str] = &[
    "partition",
    "offset",
    "key",
    "value",
    "headers",
    "batch_base_offset",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "partition_leader_epoch",
    "batch_last_offset_delta",
    "batch_base_timestamp",
    "batch_max_timestamp",
    "batch_attributes",
    "batch_records_count",
    "batch_crc",
    "timestamp_delta",
    "record_attributes",
];

/// A shared typed table's typed key keeps its bytes here (keep-raw); the
/// typed `key` column is then never decoded.
const KEY_RAW_COLUMN: &str = crate::schema::KEY_RAW_COLUMN;

/// `__log`'s own columns, read besides [`MAIN_COLUMNS`].
const LOG_COLUMNS: &[&str] = &["kind", "txn_first_offset", "batch_bytes", "hole_last_offset"];

/// One header of a row: key bytes, value.
pub type Header = (Vec<u8>, Option<Vec<u8>>);

/// One row of a shared table or its `__log`, with what a rebuild needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The record's offset (a hole's first offset).
    pub offset: i64,
    /// Its batch's base offset.
    pub batch_base_offset: i64,
    /// The batch's partition leader epoch.
    pub partition_leader_epoch: i32,
    /// The batch's attributes as stored.
    pub batch_attributes: i16,
    /// The batch's lastOffsetDelta.
    pub last_offset_delta: i32,
    /// The batch's baseTimestamp.
    pub base_timestamp: i64,
    /// The batch's maxTimestamp.
    pub max_timestamp: i64,
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// Base sequence.
    pub base_sequence: i32,
    /// The batch's recordsCount as stored.
    pub records_count: i32,
    /// The batch's CRC as stored.
    pub crc: u32,
    /// The record's timestampDelta.
    pub timestamp_delta: i64,
    /// The record's attributes byte.
    pub record_attributes: u8,
    /// Key (`None`: null).
    pub key: Option<Vec<u8>>,
    /// Value (`None`: null).
    pub value: Option<Vec<u8>>,
    /// Headers in stored order.
    pub headers: Vec<Header>,
    /// `None` for a main-table row; a `__log` row's kind.
    pub kind: Option<LogRowKind>,
    /// Abort markers: the transaction's first offset.
    pub txn_first_offset: Option<i64>,
    /// Opaque rows: the batch as stored.
    pub batch_bytes: Option<Vec<u8>>,
    /// Hole rows: the range's last offset.
    pub hole_last_offset: Option<i64>,
}

impl Row {
    /// The last offset this row's batch (or hole) covers.
    pub fn batch_last_offset(&self) -> i64 {
        match (self.kind, self.hole_last_offset) {
            (Some(LogRowKind::Hole), Some(last)) => last,
            _ => self.batch_base_offset + i64::from(self.last_offset_delta),
        }
    }
}

/// Which table a file belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The main table.
    Main,
    /// `__log`.
    Log,
    /// `__dlq` (a shared typed table's records that could not be typed).
    DeadLetters,
}

/// The table whose `FileIO` reads `side`'s files. `__dlq` files are read with
/// the main table's: the three tables are in one catalog with one `FileIO`
/// configuration, and the callers hold no `__dlq` table (the index lists its files).
pub fn table_of<'a>(main: &'a Table, log: &'a Table, side: Side) -> &'a Table {
    match side {
        Side::Main | Side::DeadLetters => main,
        Side::Log => log,
    }
}

/// One Parquet row group of one data file: the unit of reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowGroupRef {
    /// Which table.
    pub side: Side,
    /// The data file.
    pub path: String,
    /// The row group's index in it.
    pub row_group: usize,
    /// Its lowest `offset` (statistics; `i64::MIN` without).
    pub min: i64,
    /// Its highest `offset` (`i64::MAX` without).
    pub max: i64,
}

/// A data file opened for reading: by range (local) or in memory.
enum Source {
    File(std::fs::File),
    Bytes(Bytes),
}

fn read_error(path: &str) -> impl Fn(String) -> TieringError + '_ {
    move |reason| TieringError::SharedRead { path: path.to_string(), reason }
}

/// A local warehouse path, if `path` is one.
fn local_path(path: &str) -> Option<&str> {
    path.strip_prefix("file://").or_else(|| path.starts_with('/').then_some(path))
}

async fn open(table: &Table, path: &str) -> Result<Source> {
    if let Some(local) = local_path(path) {
        let file = std::fs::File::open(local).map_err(|e| read_error(path)(e.to_string()))?;
        return Ok(Source::File(file));
    }
    let ident = table.identifier().to_string();
    let input = table.file_io().new_input(path).map_err(TieringError::iceberg("read", &ident))?;
    Ok(Source::Bytes(input.read().await.map_err(TieringError::iceberg("read", &ident))?))
}

/// The `offset` statistics of every row group of a file.
fn row_group_bounds(meta: &ParquetMetaData) -> Vec<(i64, i64)> {
    let column = meta
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .position(|c| c.path().string() == "offset");
    meta.row_groups()
        .iter()
        .map(|rg| match column.and_then(|c| rg.column(c).statistics()) {
            Some(Statistics::Int64(s)) => {
                (s.min_opt().copied().unwrap_or(i64::MIN), s.max_opt().copied().unwrap_or(i64::MAX))
            }
            _ => (i64::MIN, i64::MAX),
        })
        .collect()
}

fn builder<T: ChunkReader + 'static>(
    src: T,
    path: &str,
) -> Result<ParquetRecordBatchReaderBuilder<T>> {
    ParquetRecordBatchReaderBuilder::try_new(src).map_err(|e| read_error(path)(e.to_string()))
}

/// The row groups of `files` whose `offset` statistics overlap `[from, upper)`, in `min` order.
///
/// # Errors
/// A file that cannot be opened or has no valid footer.
pub async fn row_groups(
    table: &Table,
    side: Side,
    files: &[&DataFileRef],
    from: i64,
    upper: i64,
) -> Result<Vec<RowGroupRef>> {
    let mut out = Vec::new();
    for f in files {
        let bounds = match open(table, &f.path).await? {
            Source::File(file) => row_group_bounds(builder(file, &f.path)?.metadata()),
            Source::Bytes(bytes) => row_group_bounds(builder(bytes, &f.path)?.metadata()),
        };
        for (i, (min, max)) in bounds.into_iter().enumerate() {
            if min < upper && max >= from {
                out.push(RowGroupRef { side, path: f.path.clone(), row_group: i, min, max });
            }
        }
    }
    out.sort_by(|a, b| (a.min, &a.path, a.row_group).cmp(&(b.min, &b.path, b.row_group)));
    Ok(out)
}

fn decode<T: ChunkReader + 'static>(
    src: T,
    path: &str,
    row_group: usize,
    columns: &[&str],
) -> Result<Vec<RecordBatch>> {
    let b = builder(src, path)?;
    // A typed key is read from its bytes (`key_raw`), never decoded typed.
    let typed_key = b.schema().field_with_name(KEY_RAW_COLUMN).is_ok();
    let roots: Vec<usize> = b
        .schema()
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| columns.contains(&f.name().as_str()) && !(typed_key && f.name() == "key"))
        .map(|(i, _)| i)
        .collect();
    let mask = ProjectionMask::roots(b.parquet_schema(), roots);
    let reader = b
        .with_row_groups(vec![row_group])
        .with_projection(mask)
        .with_batch_size(8192)
        .build()
        .map_err(|e| read_error(path)(e.to_string()))?;
    reader.map(|r| r.map_err(|e| read_error(path)(e.to_string()))).collect()
}

/// The rows of one row group of `partition` with offsets in `[from, upper)`.
///
/// # Errors
/// The file cannot be read, or lacks a column the rebuild needs.
pub async fn read_row_group(
    table: &Table,
    rg: &RowGroupRef,
    partition: i32,
    from: i64,
    upper: i64,
) -> Result<Vec<Row>> {
    let mut columns: Vec<&str> = MAIN_COLUMNS.to_vec();
    columns.push(KEY_RAW_COLUMN);
    if rg.side == Side::Log {
        columns.extend_from_slice(LOG_COLUMNS);
    }
    let batches = match open(table, &rg.path).await? {
        Source::File(file) => decode(file, &rg.path, rg.row_group, &columns)?,
        Source::Bytes(bytes) => decode(bytes, &rg.path, rg.row_group, &columns)?,
    };
    let mut rows = Vec::new();
    for b in &batches {
        rows_of(b, rg.side, partition, from, upper, &rg.path, &mut rows)?;
    }
    Ok(rows)
}

/// Every row of `partition` with offsets in `[from, upper)` from the files
/// `index` lists, main, `__log` and `__dlq` merged by offset (leftovers at or
/// above the main table's next offset left out).
///
/// # Errors
/// As [`read_row_group`].
pub async fn read_rows(
    main: &Table,
    log: &Table,
    index: &FileIndex,
    partition: i32,
    from: i64,
    upper: i64,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for rg in plan(main, log, index, partition, from, upper).await? {
        let table = table_of(main, log, rg.side);
        let (from, upper) = clamp(index, rg.side, partition, from, upper);
        rows.extend(read_row_group(table, &rg, partition, from, upper).await?);
    }
    rows.sort_by_key(|r| r.offset);
    Ok(rows)
}

/// The row groups of the tables (main, `__log`, `__dlq`) overlapping `[from, upper)`, in `min` order.
///
/// # Errors
/// As [`row_groups`].
pub async fn plan(
    main: &Table,
    log: &Table,
    index: &FileIndex,
    partition: i32,
    from: i64,
    upper: i64,
) -> Result<Vec<RowGroupRef>> {
    let main_files: Vec<&DataFileRef> = index.main_files(partition, from, upper).collect();
    let (lf, lu) = clamp(index, Side::Log, partition, from, upper);
    let log_files: Vec<&DataFileRef> = index.log_files(partition, lf, lu).collect();
    let mut units = row_groups(main, Side::Main, &main_files, from, upper).await?;
    units.extend(row_groups(log, Side::Log, &log_files, lf, lu).await?);
    let dlq_files: Vec<&DataFileRef> = index.dlq_files(partition, lf, lu).collect();
    units.extend(
        row_groups(table_of(main, log, Side::DeadLetters), Side::DeadLetters, &dlq_files, lf, lu)
            .await?,
    );
    units.sort_by(|a, b| (a.min, &a.path, a.row_group).cmp(&(b.min, &b.path, b.row_group)));
    Ok(units)
}

/// The range to read from `side`: `__log` and `__dlq` stop at the main
/// table's next offset (rows at or above it are a crashed pass's leftovers).
pub fn clamp(index: &FileIndex, side: Side, partition: i32, from: i64, upper: i64) -> (i64, i64) {
    match side {
        Side::Main => (from, upper),
        Side::Log | Side::DeadLetters => {
            (from, upper.min(index.next_offset(partition).unwrap_or(i64::MIN)))
        }
    }
}

/// `partition`'s abort markers and opaque batches `(base, last offset)` in
/// `__log` (for the [`FileIndex`]). Reads every live `__log` row of the
/// partition: the table is small (markers, aborted records, damage).
///
/// # Errors
/// As [`read_row_group`].
pub(crate) async fn log_entries(
    log: &Table,
    index: &FileIndex,
    partition: i32,
) -> Result<(Vec<AbortMarker>, Vec<(i64, i64)>)> {
    let (from, upper) = clamp(index, Side::Log, partition, i64::MIN, i64::MAX);
    let files: Vec<&DataFileRef> = index.log_files(partition, from, upper).collect();
    let (mut markers, mut opaque) = (Vec::new(), Vec::new());
    for rg in row_groups(log, Side::Log, &files, from, upper).await? {
        for r in read_row_group(log, &rg, partition, from, upper).await? {
            match (r.kind, r.txn_first_offset) {
                (Some(LogRowKind::AbortMarker), Some(first_offset)) => {
                    markers.push(AbortMarker {
                        offset: r.offset,
                        producer_id: r.producer_id,
                        first_offset,
                    });
                }
                (Some(LogRowKind::Opaque), _) => opaque.push((r.offset, r.batch_last_offset())),
                _ => {}
            }
        }
    }
    markers.sort_by_key(|m| m.offset);
    markers.dedup();
    opaque.sort_unstable();
    opaque.dedup();
    Ok((markers, opaque))
}

/// `name`'s column cast to `to` (Parquet may hand `Binary` where the table
/// said `LargeBinary`, or `LargeUtf8`); `None` when the file lacks it.
fn column(b: &RecordBatch, name: &str, to: &DataType) -> Result<Option<ArrayRef>> {
    let Ok(i) = b.schema().index_of(name) else { return Ok(None) };
    let c = b.column(i);
    if c.data_type() == to {
        return Ok(Some(c.clone()));
    }
    Ok(Some(arrow_cast::cast(c, to)?))
}

fn kind_of(s: &str) -> Option<LogRowKind> {
    use LogRowKind::*;
    [CommitMarker, AbortMarker, Aborted, Opaque, Hole].into_iter().find(|k| k.as_str() == s)
}

/// The rows of `b` for `partition` in `[from, upper)`, appended to `out`.
fn rows_of(
    b: &RecordBatch,
    side: Side,
    partition: i32,
    from: i64,
    upper: i64,
    path: &str,
    out: &mut Vec<Row>,
) -> Result<()> {
    let fail = read_error(path);
    let need = |name: &str, t: &DataType| {
        column(b, name, t)?.ok_or_else(|| fail(format!("no column {name}")))
    };
    let long = |name: &str| need(name, &DataType::Int64);
    let int = |name: &str| need(name, &DataType::Int32);
    let bin = |name: &str| need(name, &DataType::LargeBinary);
    let part = int("partition")?;
    let offset = long("offset")?;
    let (part, offset) = (part.as_primitive::<Int32Type>(), offset.as_primitive::<Int64Type>());
    let longs: Vec<ArrayRef> = [
        "batch_base_offset",
        "producer_id",
        "batch_base_timestamp",
        "batch_max_timestamp",
        "batch_crc",
        "timestamp_delta",
    ]
    .iter()
    .map(|n| long(n))
    .collect::<Result<_>>()?;
    let ints: Vec<ArrayRef> = [
        "partition_leader_epoch",
        "batch_attributes",
        "batch_last_offset_delta",
        "producer_epoch",
        "base_sequence",
        "batch_records_count",
        "record_attributes",
    ]
    .iter()
    .map(|n| int(n))
    .collect::<Result<_>>()?;
    let longs: Vec<&arrow_array::Int64Array> =
        longs.iter().map(|a| a.as_primitive::<Int64Type>()).collect();
    let ints: Vec<&arrow_array::Int32Array> =
        ints.iter().map(|a| a.as_primitive::<Int32Type>()).collect();
    // A typed key's bytes are `key_raw` (keep-raw); a raw key's, `key`. A typed
    // value's bytes stay in `value` (keep-raw, which shared mode demands).
    let key_column =
        if b.schema().index_of(KEY_RAW_COLUMN).is_ok() { KEY_RAW_COLUMN } else { "key" };
    let (key, value) = (bin(key_column)?, bin("value")?);
    let (key, value) = (key.as_binary::<i64>(), value.as_binary::<i64>());
    let headers = b
        .schema()
        .index_of("headers")
        .map(|i| b.column(i).clone())
        .map_err(|_| fail("no column headers".into()))?;
    let log = if side == Side::Log {
        let kind = need("kind", &DataType::Utf8)?;
        Some((kind, long("txn_first_offset")?, bin("batch_bytes")?, long("hole_last_offset")?))
    } else {
        None
    };
    let opt_long = |a: &arrow_array::Int64Array, i: usize| a.is_valid(i).then(|| a.value(i));
    let opt_bin =
        |a: &arrow_array::LargeBinaryArray, i: usize| a.is_valid(i).then(|| a.value(i).to_vec());
    for i in 0..b.num_rows() {
        if part.is_null(i) || part.value(i) != partition || offset.is_null(i) {
            continue;
        }
        let o = offset.value(i);
        if o < from || o >= upper {
            continue;
        }
        // The lossless columns are optional in the schema but always written in
        // a shared table: a null is damage, not a default.
        let lossless = |a: &arrow_array::Int64Array| {
            opt_long(a, i).ok_or_else(|| fail(format!("offset {o}: a lossless column is null")))
        };
        let lossless_int = |a: &arrow_array::Int32Array| {
            a.is_valid(i)
                .then(|| a.value(i))
                .ok_or_else(|| fail(format!("offset {o}: a lossless column is null")))
        };
        let (kind, txn_first_offset, batch_bytes, hole_last_offset) = match &log {
            Some((k, t, bb, h)) => {
                let k = k.as_string::<i32>();
                let kind = kind_of(k.value(i))
                    .ok_or_else(|| fail(format!("offset {o}: unknown kind {}", k.value(i))))?;
                (
                    Some(kind),
                    opt_long(t.as_primitive(), i),
                    opt_bin(bb.as_binary(), i),
                    opt_long(h.as_primitive(), i),
                )
            }
            None => (None, None, None, None),
        };
        out.push(Row {
            offset: o,
            batch_base_offset: lossless(longs[0])?,
            producer_id: lossless(longs[1])?,
            base_timestamp: lossless(longs[2])?,
            max_timestamp: lossless(longs[3])?,
            crc: u32::try_from(lossless(longs[4])?)
                .map_err(|_| fail(format!("offset {o}: batch_crc out of range")))?,
            timestamp_delta: lossless(longs[5])?,
            partition_leader_epoch: lossless_int(ints[0])?,
            batch_attributes: i16::try_from(lossless_int(ints[1])?)
                .map_err(|_| fail(format!("offset {o}: batch_attributes out of range")))?,
            last_offset_delta: lossless_int(ints[2])?,
            producer_epoch: i16::try_from(lossless_int(ints[3])?)
                .map_err(|_| fail(format!("offset {o}: producer_epoch out of range")))?,
            base_sequence: lossless_int(ints[4])?,
            records_count: lossless_int(ints[5])?,
            // Null when 0 (the layout's rule).
            record_attributes: if ints[6].is_valid(i) { ints[6].value(i) as u8 } else { 0 },
            key: opt_bin(key, i),
            value: opt_bin(value, i),
            headers: headers_at(&headers, i, path)?,
            kind,
            txn_first_offset,
            batch_bytes,
            hole_last_offset,
        });
    }
    Ok(())
}

/// Row `i`'s headers: each key from `key_bytes` when set, else the UTF-8 `key`.
fn headers_at(headers: &ArrayRef, i: usize, path: &str) -> Result<Vec<Header>> {
    let fail = read_error(path);
    if headers.is_null(i) {
        return Ok(Vec::new());
    }
    let element: ArrayRef = match headers.data_type() {
        DataType::List(_) => headers.as_list::<i32>().value(i),
        DataType::LargeList(_) => headers.as_list::<i64>().value(i),
        other => return Err(fail(format!("headers is {other}, not a list"))),
    };
    let s =
        element.as_struct_opt().ok_or_else(|| fail("headers' elements are not structs".into()))?;
    let child = |name: &str, to: &DataType| -> Result<Option<ArrayRef>> {
        match s.column_by_name(name) {
            Some(c) if c.data_type() == to => Ok(Some(c.clone())),
            Some(c) => Ok(Some(arrow_cast::cast(c, to)?)),
            None => Ok(None),
        }
    };
    let key = child("key", &DataType::Utf8)?
        .ok_or_else(|| fail("no column headers.element.key".into()))?;
    let value = child("value", &DataType::LargeBinary)?
        .ok_or_else(|| fail("no column headers.element.value".into()))?;
    let key_bytes = child(crate::schema::HEADER_KEY_BYTES_COLUMN, &DataType::LargeBinary)?;
    let (key, value) = (key.as_string::<i32>(), value.as_binary::<i64>());
    let key_bytes = key_bytes.as_ref().map(|k| k.as_binary::<i64>());
    Ok((0..s.len())
        .map(|j| {
            let k = match key_bytes {
                Some(kb) if kb.is_valid(j) => kb.value(j).to_vec(),
                _ => key.value(j).as_bytes().to_vec(),
            };
            (k, value.is_valid(j).then(|| value.value(j).to_vec()))
        })
        .collect())
}
