//! Where one commit's rows go: Parquet data files of the table (and, for a typed
//! table, of its dead-letter table), written as converted batches arrive.
//!
//! A raw table's [`Sink`] writes each converted batch as it is. A typed table's
//! splits it first ([`crate::typed`]): values grouped by schema id, the table's
//! schema evolved (columns added) before a version's first rows are written,
//! rows that cannot be typed written to the dead-letter table instead. An
//! evolution closes the open data files (they keep the schema they were written
//! with, which Iceberg readers project by field id) and opens new ones. Typed
//! keys are typed first, for the whole batch: a record whose key cannot be typed
//! is a dead letter whatever its value. Schemaless JSON is inferred per batch
//! ([`crate::typed::json`]), then evolves the table the same way.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef as ArrowSchemaRef;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::spec::{DataFile, PartitionSpecRef, SchemaRef};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultLocationGenerator, FileNameGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::partitioning::unpartitioned_writer::UnpartitionedWriter;
use iceberg::writer::partitioning::PartitioningWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use tracing::{info, warn};

use crate::error::{Result, TieringError};
use crate::table::{TierLimits, TopicTable};
use crate::typed::evolve::{is_kafka_column, plan_columns, plan_key, Evolution};
use crate::typed::promote::commit_promotions;
use crate::typed::rows::{TypedKeys, KEY_COLUMN, VALUE_COLUMN};
use crate::typed::{
    json, project::project, rows, DataFormat, SchemaLookupError, SchemaSource, TypedLayout,
};

/// File names that cannot collide across runs or processes: `<prefix>-<uuid v4>.parquet`.
#[derive(Debug, Clone)]
pub(crate) struct UuidFileNames {
    prefix: String,
}

impl FileNameGenerator for UuidFileNames {
    fn generate_file_name(&self) -> String {
        format!("{}-{}.parquet", self.prefix, uuid::Uuid::new_v4())
    }
}

pub(crate) type DataWriterBuilder =
    DataFileWriterBuilder<ParquetWriterBuilder, DefaultLocationGenerator, UuidFileNames>;

/// The writer for one commit: fan-out by partition key, or a single writer when unpartitioned.
pub(crate) enum Writer {
    Partitioned(Box<(RecordBatchPartitionSplitter, FanoutWriter<DataWriterBuilder>)>),
    Unpartitioned(Box<UnpartitionedWriter<DataWriterBuilder>>),
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Partitioned(_) => "Writer::Partitioned",
            Self::Unpartitioned(_) => "Writer::Unpartitioned",
        })
    }
}

/// Table property: most rows per Parquet row group (pyiceberg's name). A shared
/// table is created with [`SHARED_ROW_GROUP_ROWS`]: a row group is the unit a
/// table-served fetch decodes, so smaller ones cost a fetch less.
pub(crate) const ROW_GROUP_LIMIT_PROPERTY: &str = "write.parquet.row-group-limit";

/// Rows per row group of a shared table (`docs/shared-mode.md` 1.2): about 8 MiB
/// of 1 KiB records.
pub(crate) const SHARED_ROW_GROUP_ROWS: usize = 8192;

/// Rows per row group when the table says nothing: 64 Ki, fewer and larger row
/// groups for SQL scans.
const DEFAULT_ROW_GROUP_ROWS: usize = 64 * 1024;

fn row_group_rows(metadata: &iceberg::spec::TableMetadata) -> usize {
    metadata
        .properties()
        .get(ROW_GROUP_LIMIT_PROPERTY)
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_ROW_GROUP_ROWS)
}

impl Writer {
    pub(crate) fn new(table: &Table, limits: &TierLimits, prefix: String) -> Result<Self> {
        let metadata = table.metadata();
        let schema: SchemaRef = metadata.current_schema().clone();
        let spec: PartitionSpecRef = metadata.default_partition_spec().clone();
        Self::with_shape(table, schema, spec, limits.target_file_size, prefix)
    }

    /// A writer of `table`'s files in `schema` and partition `spec` (compaction
    /// rewrites files in the shape they were committed with), rolling at `target_file_size`.
    pub(crate) fn with_shape(
        table: &Table,
        schema: SchemaRef,
        spec: PartitionSpecRef,
        target_file_size: usize,
        prefix: String,
    ) -> Result<Self> {
        let ident = table.identifier().to_string();
        let metadata = table.metadata();
        // The table's compression property is not applied by the crate: set it here.
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_max_row_group_row_count(Some(row_group_rows(metadata)))
            .build();
        let parquet = ParquetWriterBuilder::new(props, schema.clone());
        let location = DefaultLocationGenerator::new(metadata)
            .map_err(TieringError::iceberg("write", &ident))?;
        let rolling = RollingFileWriterBuilder::new(
            parquet,
            target_file_size,
            table.file_io().clone(),
            location,
            UuidFileNames { prefix },
        );
        let builder = DataFileWriterBuilder::new(rolling);
        Ok(if spec.is_unpartitioned() {
            Self::Unpartitioned(Box::new(UnpartitionedWriter::new(builder)))
        } else {
            let splitter = RecordBatchPartitionSplitter::try_new_with_computed_values(schema, spec)
                .map_err(TieringError::iceberg("write", &ident))?;
            Self::Partitioned(Box::new((splitter, FanoutWriter::new(builder))))
        })
    }

    pub(crate) async fn write(&mut self, batch: RecordBatch) -> iceberg::Result<()> {
        match self {
            Self::Partitioned(pw) => {
                let (splitter, w) = &mut **pw;
                for (key, part) in splitter.split(&batch)? {
                    w.write(key, part).await?;
                }
                Ok(())
            }
            Self::Unpartitioned(w) => w.write(batch).await,
        }
    }

    pub(crate) async fn close(self) -> iceberg::Result<Vec<DataFile>> {
        match self {
            Self::Partitioned(pw) => pw.1.close().await,
            Self::Unpartitioned(w) => (*w).close().await,
        }
    }
}

/// The Arrow schema (field ids in its metadata) of `table`'s current schema.
fn arrow_schema_of(table: &Table) -> Result<ArrowSchemaRef> {
    let schema = iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())
        .map_err(TieringError::iceberg("write", table.identifier()))?;
    Ok(Arc::new(schema))
}

/// A typed table's dead-letter side of a [`Sink`].
#[derive(Debug)]
pub(crate) struct DeadLetters {
    /// The registry's schemas (`None`: off, and nothing of the layout needs it).
    schemas: Option<Arc<dyn SchemaSource>>,
    layout: TypedLayout,
    table: Table,
    arrow: ArrowSchemaRef,
    /// The dead-letter table's committed next offsets at the plan: rows below are there already.
    pub(crate) next: BTreeMap<i32, i64>,
    writer: Option<Writer>,
    /// Rows written, per Kafka partition.
    pub(crate) rows: BTreeMap<i32, u64>,
}

impl DeadLetters {
    pub(crate) fn new(
        schemas: Option<Arc<dyn SchemaSource>>,
        layout: TypedLayout,
        table: Table,
    ) -> Result<Self> {
        let arrow = arrow_schema_of(&table)?;
        let next = crate::offsets::committed_next_offsets(table.metadata());
        Ok(Self { schemas, layout, table, arrow, next, writer: None, rows: BTreeMap::new() })
    }

    /// The dead-letter table as loaded at the plan.
    pub(crate) fn table(&self) -> &Table {
        &self.table
    }
}

/// The data files of one commit being written; see the module doc.
pub(crate) struct Sink {
    table: Table,
    arrow: ArrowSchemaRef,
    writer: Option<Writer>,
    /// Files of writers closed by a schema evolution.
    closed: Vec<DataFile>,
    limits: TierLimits,
    prefix: String,
    dead: Option<DeadLetters>,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink")
            .field("table", self.table.identifier())
            .field("closed", &self.closed.len())
            .finish()
    }
}

/// What a [`Sink`] wrote: the table's data files, and the dead-letter table's with its rows per partition.
pub(crate) type Written = (Vec<DataFile>, Option<(Vec<DataFile>, DeadLetters)>);

impl Sink {
    /// Writes to `table` as it is now; a typed table with `dead` (its dead-letter side).
    pub(crate) fn new(
        table: Table,
        limits: &TierLimits,
        prefix: String,
        dead: Option<DeadLetters>,
    ) -> Result<Self> {
        let arrow = arrow_schema_of(&table)?;
        Ok(Self { table, arrow, writer: None, closed: Vec::new(), limits: *limits, prefix, dead })
    }

    /// Writes the rows of one converted batch of Kafka `partition` (the raw layout).
    pub(crate) async fn write(
        &mut self,
        owner: &TopicTable,
        raw: RecordBatch,
        partition: i32,
    ) -> Result<()> {
        if self.dead.is_none() {
            let same_names = raw.schema().fields().len() == self.arrow.fields().len()
                && raw
                    .schema()
                    .fields()
                    .iter()
                    .zip(self.arrow.fields())
                    .all(|(a, b)| a.name() == b.name());
            let batch = if raw.schema().fields() == self.arrow.fields() {
                raw
            } else if same_names {
                // The same layout with the table's field ids (Iceberg assigns fresh ids at
                // creation, so nested ids differ from the layout's): cheap, no rows copied.
                let columns = raw
                    .columns()
                    .iter()
                    .zip(self.arrow.fields())
                    .map(|(c, f)| crate::typed::project::project(c, f.data_type()))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                RecordBatch::try_new(self.arrow.clone(), columns)?
            } else {
                // A table made typed earlier, tiered raw now: the Kafka columns, nothing typed.
                let all: Vec<usize> = (0..raw.num_rows()).collect();
                rows::typed_batch(&raw, &all, None, &self.arrow, None)?
            };
            return self.write_rows(batch).await;
        }
        let layout = self.dead.as_ref().map(|d| d.layout).unwrap_or_default();
        let all: Vec<usize> = (0..raw.num_rows()).collect();
        let mut dead = Vec::new();
        // Keys first, for every row: a record whose key cannot be typed is a dead letter whatever its value.
        let keys: Option<Option<ArrayRef>> = match layout.key {
            DataFormat::Raw => None,
            DataFormat::SchemaRegistry => Some(self.registry_keys(owner, &raw, &mut dead).await?),
            DataFormat::Json => Some(self.json_keys(owner, &raw, &mut dead).await?),
        };
        let keys = keys.as_ref().map(|k| TypedKeys(k.as_ref()));
        let live: Vec<usize> = if dead.is_empty() {
            all
        } else {
            let gone: std::collections::HashSet<usize> = dead.iter().map(|(r, _)| *r).collect();
            all.into_iter().filter(|r| !gone.contains(r)).collect()
        };
        match layout.value {
            DataFormat::Raw => {
                let batch = rows::typed_batch(&raw, &live, None, &self.arrow, keys)?;
                self.write_rows(batch).await?;
            }
            DataFormat::Json => self.json_values(owner, &raw, &live, keys, &mut dead).await?,
            DataFormat::SchemaRegistry => {
                self.registry_values(owner, &raw, &live, keys, &mut dead).await?
            }
        }
        self.write_dead(&raw, partition, dead).await
    }

    fn registry(&self) -> Result<Arc<dyn SchemaSource>> {
        self.dead.as_ref().and_then(|d| d.schemas.clone()).ok_or_else(|| {
            TieringError::SchemaRegistry("this table's key or value format is schema-registry, and the Schema Registry is off".into())
        })
    }

    /// The rows `live` of `raw` whose values are in the wire format, typed by schema id.
    async fn registry_values(
        &mut self,
        owner: &TopicTable,
        raw: &RecordBatch,
        live: &[usize],
        keys: Option<TypedKeys<'_>>,
        dead: &mut Vec<(usize, String)>,
    ) -> Result<()> {
        let grouped = rows::group(raw, VALUE_COLUMN, live);
        dead.extend(grouped.dead);
        let schemas = self.registry()?;
        for (id, of_id) in grouped.by_id {
            let messages = match schemas.is_protobuf(id) {
                Ok(false) => BTreeMap::from([(Vec::new(), of_id)]),
                Ok(true) => {
                    let (messages, unreadable) = rows::by_message(raw, VALUE_COLUMN, of_id);
                    dead.extend(
                        unreadable
                            .into_iter()
                            .map(|(r, why)| (r, format!("schema id {id}: {why}"))),
                    );
                    messages
                }
                Err(SchemaLookupError::Missing(why)) => {
                    dead.extend(of_id.iter().map(|&r| (r, format!("schema id {id}: {why}"))));
                    continue;
                }
                Err(SchemaLookupError::Unavailable(why)) => {
                    return Err(TieringError::SchemaRegistry(why))
                }
            };
            for (indexes, of_message) in messages {
                self.write_schema_rows(owner, raw, id, &indexes, of_message, keys, dead).await?;
            }
        }
        // Tombstones last: with the schema the values just evolved to, not in a file of their own.
        if !grouped.tombstones.is_empty() {
            let batch = rows::typed_batch(raw, &grouped.tombstones, None, &self.arrow, keys)?;
            self.write_rows(batch).await?;
        }
        Ok(())
    }

    /// Every row's key of `raw` in the wire format, typed by its schema id into the
    /// table's `key` column (evolved first if a key schema needs it). Keys that
    /// cannot be typed make their records dead letters (`dead`), their keys null here.
    async fn registry_keys(
        &mut self,
        owner: &TopicTable,
        raw: &RecordBatch,
        dead: &mut Vec<(usize, String)>,
    ) -> Result<Option<ArrayRef>> {
        let all: Vec<usize> = (0..raw.num_rows()).collect();
        let grouped = rows::group(raw, KEY_COLUMN, &all);
        let key_dead = |r: usize, why: &str| (r, format!("key: {why}"));
        dead.extend(grouped.dead.iter().map(|(r, why)| key_dead(*r, why)));
        if grouped.by_id.is_empty() {
            return self.keys_of(raw.num_rows(), Vec::new());
        }
        let schemas = self.registry()?;
        // Each key schema's decoded keys (in its own shape) and the rows they are of.
        let mut parts: Vec<(Vec<usize>, ArrayRef)> = Vec::new();
        for (id, of_id) in grouped.by_id {
            let messages = match schemas.is_protobuf(id) {
                Ok(false) => BTreeMap::from([(Vec::new(), of_id)]),
                Ok(true) => {
                    let (messages, unreadable) = rows::by_message(raw, KEY_COLUMN, of_id);
                    dead.extend(
                        unreadable
                            .into_iter()
                            .map(|(r, why)| key_dead(r, &format!("schema id {id}: {why}"))),
                    );
                    messages
                }
                Err(SchemaLookupError::Missing(why)) => {
                    dead.extend(
                        of_id.iter().map(|&r| key_dead(r, &format!("schema id {id}: {why}"))),
                    );
                    continue;
                }
                Err(SchemaLookupError::Unavailable(why)) => {
                    return Err(TieringError::SchemaRegistry(why))
                }
            };
            for (indexes, of_message) in messages {
                let decoder = match schemas.decoder(id, &indexes) {
                    Ok(d) => d,
                    Err(SchemaLookupError::Missing(why)) => {
                        dead.extend(
                            of_message
                                .iter()
                                .map(|&r| key_dead(r, &format!("schema id {id}: {why}"))),
                        );
                        continue;
                    }
                    Err(SchemaLookupError::Unavailable(why)) => {
                        return Err(TieringError::SchemaRegistry(why))
                    }
                };
                let fields = decoder.arrow_schema().fields();
                let key_type = match (decoder.wraps_value(), fields.first()) {
                    (true, Some(f)) => f.data_type().clone(),
                    _ => arrow_schema::DataType::Struct(fields.clone()),
                };
                let why = match plan_key(self.table.metadata().current_schema(), &key_type) {
                    Err(why) => Some(format!("schema id {id} cannot be written to the table's key column: {why}")),
                    Ok(ev) if !ev.promotions.is_empty() && owner.direct_committer().is_none() => Some(format!(
                        "schema id {id} widens key fields {:?} (an Iceberg type promotion), which this table's catalog cannot be given",
                        ev.promotions
                    )),
                    Ok(ev) if !ev.is_empty() => {
                        self.evolve(owner, &format!("key schema id {id}"), ev).await?;
                        None
                    }
                    Ok(_) => None,
                };
                if let Some(why) = why {
                    dead.extend(of_message.iter().map(|&r| key_dead(r, &why)));
                    continue;
                }
                let decoded = match decoder.decode(&rows::values(raw, KEY_COLUMN, &of_message)) {
                    Ok(d) => d,
                    Err(e) => {
                        dead.extend(
                            of_message
                                .iter()
                                .map(|&r| key_dead(r, &format!("schema id {id}: {e}"))),
                        );
                        continue;
                    }
                };
                dead.extend(
                    decoded.rejected.iter().map(|(k, why)| {
                        key_dead(of_message[*k], &format!("schema id {id}: {why}"))
                    }),
                );
                if decoded.rows.is_empty() {
                    continue;
                }
                let array: ArrayRef = if decoder.wraps_value() {
                    decoded.batch.column(0).clone()
                } else {
                    Arc::new(arrow_array::StructArray::from(decoded.batch))
                };
                parts.push((decoded.rows.iter().map(|&k| of_message[k]).collect(), array));
            }
        }
        self.keys_of(raw.num_rows(), parts)
    }

    /// One key array of `rows` rows in the table's `key` type, from `parts` (each
    /// the keys of some rows, in a key schema's shape); rows in none are null.
    /// `None` when the table has no `key` column yet (no key has told its type).
    fn keys_of(&self, rows: usize, parts: Vec<(Vec<usize>, ArrayRef)>) -> Result<Option<ArrayRef>> {
        let Ok(field) = self.arrow.field_with_name(KEY_COLUMN) else { return Ok(None) };
        let to = field.data_type();
        let mut arrays: Vec<ArrayRef> = vec![arrow_array::new_null_array(to, 1)];
        let mut at: Vec<(usize, usize)> = vec![(0, 0); rows];
        for (of_rows, array) in parts {
            arrays.push(project(&array, to)?);
            let part = arrays.len() - 1;
            for (k, r) in of_rows.into_iter().enumerate() {
                at[r] = (part, k);
            }
        }
        let refs: Vec<&dyn arrow_array::Array> = arrays.iter().map(|a| a.as_ref()).collect();
        Ok(Some(arrow_select::interleave::interleave(&refs, &at)?))
    }

    /// Every row's key of `raw` as schemaless JSON, the table's `key` column evolved to take them.
    async fn json_keys(
        &mut self,
        owner: &TopicTable,
        raw: &RecordBatch,
        dead: &mut Vec<(usize, String)>,
    ) -> Result<Option<ArrayRef>> {
        let all: Vec<usize> = (0..raw.num_rows()).collect();
        let table_type = self.arrow.field_with_name(KEY_COLUMN).ok().map(|f| f.data_type().clone());
        let mut inference = json::Inference::default();
        let mut keys: Vec<Option<serde_json::Value>> = Vec::with_capacity(all.len());
        for (r, bytes) in all.iter().zip(rows::values(raw, KEY_COLUMN, &all)) {
            let Some(bytes) = bytes else {
                keys.push(None);
                continue;
            };
            match json::key_value(bytes)
                .and_then(|v| inference.take(KEY_COLUMN, table_type.as_ref(), &v).map(|()| v))
            {
                Ok(v) => keys.push(Some(v)),
                Err(why) => {
                    dead.push((*r, format!("key: {why}")));
                    keys.push(None);
                }
            }
        }
        if let Some(t) = &inference.merged {
            match plan_key(self.table.metadata().current_schema(), t) {
                Ok(ev) if !ev.promotions.is_empty() && owner.direct_committer().is_none() => {
                    // Only a table typed another way before has int or float columns JSON widens.
                    let why = format!("key: widens {:?} (an Iceberg type promotion), which this table's catalog cannot be given", ev.promotions);
                    for (r, k) in keys.iter_mut().enumerate() {
                        if k.take().is_some() {
                            dead.push((r, why.clone()));
                        }
                    }
                }
                Ok(ev) if !ev.is_empty() => self.evolve(owner, "JSON keys", ev).await?,
                Ok(_) => {}
                Err(why) => {
                    return Err(self.bug(format!("inferred JSON keys do not fit the table: {why}")))
                }
            }
        }
        let Ok(field) = self.arrow.field_with_name(KEY_COLUMN) else { return Ok(None) };
        let refs: Vec<Option<&serde_json::Value>> = keys.iter().map(Option::as_ref).collect();
        Ok(Some(json::to_array(&refs, field.data_type())?))
    }

    /// The rows `live` of `raw` whose values are schemaless JSON objects: columns
    /// inferred, the table evolved to take them, then written.
    async fn json_values(
        &mut self,
        owner: &TopicTable,
        raw: &RecordBatch,
        live: &[usize],
        keys: Option<TypedKeys<'_>>,
        dead: &mut Vec<(usize, String)>,
    ) -> Result<()> {
        let value_columns = |arrow: &ArrowSchemaRef| -> arrow_schema::Fields {
            arrow
                .fields()
                .iter()
                .filter(|f| !is_kafka_column(f.name(), crate::schema::is_lossless_arrow(arrow)))
                .cloned()
                .collect()
        };
        let table_type = arrow_schema::DataType::Struct(value_columns(&self.arrow));
        let mut inference = json::Inference::default();
        let mut tombstones = Vec::new();
        let mut typed: Vec<(usize, serde_json::Value)> = Vec::new();
        for (r, bytes) in live.iter().zip(rows::values(raw, VALUE_COLUMN, live)) {
            let Some(bytes) = bytes else {
                tombstones.push(*r);
                continue;
            };
            match json::value_object_in(bytes, crate::schema::is_lossless_arrow(&self.arrow))
                .and_then(|v| inference.take("", Some(&table_type), &v).map(|()| v))
            {
                Ok(v) => typed.push((*r, v)),
                Err(why) => dead.push((*r, why)),
            }
        }
        if let Some(arrow_schema::DataType::Struct(fields)) = &inference.merged {
            match plan_columns(self.table.metadata().current_schema(), fields) {
                Ok(ev) if !ev.promotions.is_empty() && owner.direct_committer().is_none() => {
                    let why = format!("the value widens {:?} (an Iceberg type promotion), which this table's catalog cannot be given", ev.promotions);
                    dead.extend(typed.drain(..).map(|(r, _)| (r, why.clone())));
                }
                Ok(ev) if !ev.is_empty() => self.evolve(owner, "JSON values", ev).await?,
                Ok(_) => {}
                Err(why) => {
                    return Err(
                        self.bug(format!("inferred JSON values do not fit the table: {why}"))
                    )
                }
            }
        }
        if !typed.is_empty() {
            let columns = value_columns(&self.arrow);
            let (of_rows, values): (Vec<usize>, Vec<serde_json::Value>) = typed.into_iter().unzip();
            let arrays = columns
                .iter()
                .map(|f| {
                    let of_field: Vec<Option<&serde_json::Value>> =
                        values.iter().map(|v| v.get(f.name())).collect();
                    json::to_array(&of_field, f.data_type())
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let options =
                arrow_array::RecordBatchOptions::new().with_row_count(Some(of_rows.len()));
            let decoded = RecordBatch::try_new_with_options(
                Arc::new(arrow_schema::Schema::new(columns)),
                arrays,
                &options,
            )?;
            let batch = rows::typed_batch(raw, &of_rows, Some(&decoded), &self.arrow, keys)?;
            self.write_rows(batch).await?;
        }
        if !tombstones.is_empty() {
            let batch = rows::typed_batch(raw, &tombstones, None, &self.arrow, keys)?;
            self.write_rows(batch).await?;
        }
        Ok(())
    }

    fn bug(&self, why: String) -> TieringError {
        TieringError::iceberg("evolve", self.table.identifier())(iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            why,
        ))
    }

    /// Writes `of_id`, rows of `raw` whose values are of schema `id` (and Protobuf
    /// message `indexes`): typed if the table can take the schema (evolving it
    /// first if it needs columns), else as dead letters, like values that do not decode.
    // One caller (the split of a batch by schema), which has each of these at hand.
    #[allow(clippy::too_many_arguments)]
    async fn write_schema_rows(
        &mut self,
        owner: &TopicTable,
        raw: &RecordBatch,
        id: i32,
        indexes: &[i32],
        of_id: Vec<usize>,
        keys: Option<TypedKeys<'_>>,
        dead: &mut Vec<(usize, String)>,
    ) -> Result<()> {
        let schemas = self.registry()?;
        let decoder = match schemas.decoder(id, indexes) {
            Ok(d) => d,
            Err(SchemaLookupError::Missing(why)) => {
                dead.extend(of_id.iter().map(|&r| (r, format!("schema id {id}: {why}"))));
                return Ok(());
            }
            Err(SchemaLookupError::Unavailable(why)) => {
                return Err(TieringError::SchemaRegistry(why))
            }
        };
        match plan_columns(self.table.metadata().current_schema(), decoder.arrow_schema().fields())
        {
            Err(why) => {
                dead.extend(of_id.iter().map(|&r| {
                    (r, format!("schema id {id} cannot be written to the table: {why}"))
                }));
                return Ok(());
            }
            Ok(ev) if !ev.promotions.is_empty() && owner.direct_committer().is_none() => {
                let why = format!("schema id {id} widens columns {:?} (an Iceberg type promotion), which this table's catalog cannot be given", ev.promotions);
                dead.extend(of_id.iter().map(|&r| (r, why.clone())));
                return Ok(());
            }
            Ok(ev) if !ev.is_empty() => {
                self.evolve(owner, &format!("value schema id {id}"), ev).await?
            }
            Ok(_) => {}
        }
        let values = rows::values(raw, VALUE_COLUMN, &of_id);
        let decoded = match decoder.decode(&values) {
            Ok(d) => d,
            Err(e) => {
                dead.extend(of_id.iter().map(|&r| (r, format!("schema id {id}: {e}"))));
                return Ok(());
            }
        };
        dead.extend(
            decoded
                .rejected
                .into_iter()
                .map(|(k, why)| (of_id[k], format!("schema id {id}: {why}"))),
        );
        if !decoded.rows.is_empty() {
            let typed_rows: Vec<usize> = decoded.rows.iter().map(|&k| of_id[k]).collect();
            let batch =
                rows::typed_batch(raw, &typed_rows, Some(&decoded.batch), &self.arrow, keys)?;
            self.write_rows(batch).await?;
        }
        Ok(())
    }

    async fn write_rows(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if self.writer.is_none() {
            self.writer = Some(Writer::new(&self.table, &self.limits, self.prefix.clone())?);
        }
        let ident = self.table.identifier().to_string();
        self.writer
            .as_mut()
            .expect("just set")
            .write(batch)
            .await
            .map_err(TieringError::iceberg("write", ident))
    }

    async fn write_dead(
        &mut self,
        raw: &RecordBatch,
        partition: i32,
        mut dead: Vec<(usize, String)>,
    ) -> Result<()> {
        let Some(d) = self.dead.as_mut() else { return Ok(()) };
        let floor = d.next.get(&partition).copied().unwrap_or(0);
        if let Some(offsets) = raw.column_by_name("offset") {
            let offsets = offsets.as_primitive::<Int64Type>();
            // Below the dead-letter table's own offsets: committed by an attempt whose typed commit did not follow.
            dead.retain(|(r, _)| offsets.value(*r) >= floor);
        }
        if dead.is_empty() {
            return Ok(());
        }
        dead.sort_by_key(|(r, _)| *r);
        for (r, why) in dead.iter().take(3) {
            warn!(table = %d.table.identifier(), partition, row = *r, reason = %why, "record written to the dead-letter table");
        }
        let batch = rows::dead_letter_batch(raw, &dead, &d.arrow)?;
        if d.writer.is_none() {
            d.writer = Some(Writer::new(&d.table, &self.limits, self.prefix.clone())?);
        }
        let ident = d.table.identifier().to_string();
        d.writer
            .as_mut()
            .expect("just set")
            .write(batch)
            .await
            .map_err(TieringError::iceberg("write", ident))?;
        *d.rows.entry(partition).or_default() += dead.len() as u64;
        Ok(())
    }

    /// Promotes the columns `what` (a key or value schema, JSON keys or values) widens
    /// and adds the ones it needs (metadata-only commits, no snapshot), then writes on
    /// with the new schema: files written so far are closed as they are.
    async fn evolve(&mut self, owner: &TopicTable, what: &str, ev: Evolution) -> Result<()> {
        let ident = self.table.identifier().to_string();
        let failed = |why: String| {
            TieringError::iceberg("evolve", &ident)(iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                why,
            ))
        };
        let mut before = owner.load().await?;
        if !ev.promotions.is_empty() {
            let committer = owner
                .direct_committer()
                .ok_or_else(|| failed("this table's catalog takes no type promotion".into()))?;
            commit_promotions(&before, &ev.promotions, &committer).await.map_err(failed)?;
            let promoted = owner.load().await?;
            owner.delete_dropped_metadata(&before, &promoted).await;
            info!(table = %ident, source = what, promotions = ?ev.promotions,
                table_schema = promoted.metadata().current_schema_id(), "column types promoted");
            before = promoted;
        }
        let after = if ev.adds.is_empty() {
            before
        } else {
            let count = ev.adds.len();
            let tx = Transaction::new(&before);
            let action =
                ev.adds.into_iter().fold(tx.update_schema(), |action, add| action.add_column(add));
            let tx = action.apply(tx).map_err(TieringError::iceberg("evolve", &ident))?;
            let after = tx
                .commit(owner.catalog().as_ref())
                .await
                .map_err(TieringError::iceberg("evolve", &ident))?;
            owner.delete_dropped_metadata(&before, &after).await;
            info!(table = %ident, source = what, columns_added = count,
                table_schema = after.metadata().current_schema_id(), "columns added");
            after
        };
        if let Some(w) = self.writer.take() {
            self.closed.extend(w.close().await.map_err(TieringError::iceberg("write", &ident))?);
        }
        self.arrow = arrow_schema_of(&after)?;
        self.table = after;
        Ok(())
    }

    /// Closes the writers: the table's data files, and the dead-letter side's.
    pub(crate) async fn finish(mut self) -> Result<Written> {
        let ident = self.table.identifier().to_string();
        if let Some(w) = self.writer.take() {
            self.closed.extend(w.close().await.map_err(TieringError::iceberg("write", &ident))?);
        }
        let dead = match self.dead {
            Some(mut d) => {
                let files = match d.writer.take() {
                    Some(w) => w
                        .close()
                        .await
                        .map_err(TieringError::iceberg("write", d.table.identifier()))?,
                    None => Vec::new(),
                };
                Some((files, d))
            }
            None => None,
        };
        Ok((self.closed, dead))
    }
}
