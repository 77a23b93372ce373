//! Where one commit's rows go: Parquet data files of the table (and, for a typed
//! table, of its dead-letter table), written as converted batches arrive.
//!
//! A raw table's [`Sink`] writes each converted batch as it is. A typed table's
//! splits it first ([`crate::typed`]): values grouped by schema id, the table's
//! schema evolved (columns added) before a version's first rows are written,
//! rows that cannot be typed written to the dead-letter table instead. An
//! evolution closes the open data files (they keep the schema they were written
//! with, which Iceberg readers project by field id) and opens new ones.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::RecordBatch;
use arrow_schema::SchemaRef as ArrowSchemaRef;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::spec::{DataFile, PartitionSpecRef, SchemaRef};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::location_generator::{DefaultLocationGenerator, FileNameGenerator};
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
use crate::typed::evolve::{plan_columns, Evolution};
use crate::typed::promote::commit_promotions;
use crate::typed::{rows, SchemaLookupError, SchemaSource};

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

pub(crate) type DataWriterBuilder = DataFileWriterBuilder<ParquetWriterBuilder, DefaultLocationGenerator, UuidFileNames>;

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
            .set_max_row_group_row_count(Some(64 * 1024))
            .build();
        let parquet = ParquetWriterBuilder::new(props, schema.clone());
        let location = DefaultLocationGenerator::new(metadata).map_err(TieringError::iceberg("write", &ident))?;
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
    schemas: Arc<dyn SchemaSource>,
    table: Table,
    arrow: ArrowSchemaRef,
    /// The dead-letter table's committed next offsets at the plan: rows below are there already.
    pub(crate) next: BTreeMap<i32, i64>,
    writer: Option<Writer>,
    /// Rows written, per Kafka partition.
    pub(crate) rows: BTreeMap<i32, u64>,
}

impl DeadLetters {
    pub(crate) fn new(schemas: Arc<dyn SchemaSource>, table: Table) -> Result<Self> {
        let arrow = arrow_schema_of(&table)?;
        let next = crate::offsets::committed_next_offsets(table.metadata());
        Ok(Self { schemas, table, arrow, next, writer: None, rows: BTreeMap::new() })
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
        f.debug_struct("Sink").field("table", self.table.identifier()).field("closed", &self.closed.len()).finish()
    }
}

/// What a [`Sink`] wrote: the table's data files, and the dead-letter table's with its rows per partition.
pub(crate) type Written = (Vec<DataFile>, Option<(Vec<DataFile>, DeadLetters)>);

impl Sink {
    /// Writes to `table` as it is now; a typed table with `dead` (its dead-letter side).
    pub(crate) fn new(table: Table, limits: &TierLimits, prefix: String, dead: Option<DeadLetters>) -> Result<Self> {
        let arrow = arrow_schema_of(&table)?;
        Ok(Self { table, arrow, writer: None, closed: Vec::new(), limits: *limits, prefix, dead })
    }

    /// Writes the rows of one converted batch of Kafka `partition` (the raw layout).
    pub(crate) async fn write(&mut self, owner: &TopicTable, raw: RecordBatch, partition: i32) -> Result<()> {
        if self.dead.is_none() {
            let batch = if raw.schema().fields() == self.arrow.fields() {
                raw
            } else {
                // A table made typed earlier, tiered raw now: the Kafka columns, nothing typed.
                let all: Vec<usize> = (0..raw.num_rows()).collect();
                rows::typed_batch(&raw, &all, None, &self.arrow)?
            };
            return self.write_rows(batch).await;
        }
        let grouped = rows::group(&raw);
        let mut dead = grouped.dead;
        for (id, of_id) in grouped.by_id {
            let schemas = self.dead.as_ref().map(|d| d.schemas.clone()).expect("typed");
            let messages = match schemas.is_protobuf(id) {
                Ok(false) => BTreeMap::from([(Vec::new(), of_id)]),
                Ok(true) => {
                    let (messages, unreadable) = rows::by_message(&raw, of_id);
                    dead.extend(unreadable.into_iter().map(|(r, why)| (r, format!("schema id {id}: {why}"))));
                    messages
                }
                Err(SchemaLookupError::Missing(why)) => {
                    dead.extend(of_id.iter().map(|&r| (r, format!("schema id {id}: {why}"))));
                    continue;
                }
                Err(SchemaLookupError::Unavailable(why)) => return Err(TieringError::SchemaRegistry(why)),
            };
            for (indexes, of_message) in messages {
                self.write_schema_rows(owner, &raw, id, &indexes, of_message, &mut dead).await?;
            }
        }
        // Tombstones last: with the schema the values just evolved to, not in a file of their own.
        if !grouped.tombstones.is_empty() {
            let batch = rows::typed_batch(&raw, &grouped.tombstones, None, &self.arrow)?;
            self.write_rows(batch).await?;
        }
        self.write_dead(&raw, partition, dead).await
    }

    /// Writes `of_id`, rows of `raw` whose values are of schema `id` (and Protobuf
    /// message `indexes`): typed if the table can take the schema (evolving it
    /// first if it needs columns), else as dead letters, like values that do not decode.
    async fn write_schema_rows(
        &mut self,
        owner: &TopicTable,
        raw: &RecordBatch,
        id: i32,
        indexes: &[i32],
        of_id: Vec<usize>,
        dead: &mut Vec<(usize, String)>,
    ) -> Result<()> {
        let schemas = self.dead.as_ref().map(|d| d.schemas.clone()).expect("typed");
        let decoder = match schemas.decoder(id, indexes) {
            Ok(d) => d,
            Err(SchemaLookupError::Missing(why)) => {
                dead.extend(of_id.iter().map(|&r| (r, format!("schema id {id}: {why}"))));
                return Ok(());
            }
            Err(SchemaLookupError::Unavailable(why)) => return Err(TieringError::SchemaRegistry(why)),
        };
        match plan_columns(self.table.metadata().current_schema(), decoder.arrow_schema().fields()) {
            Err(why) => {
                dead.extend(of_id.iter().map(|&r| (r, format!("schema id {id} cannot be written to the table: {why}"))));
                return Ok(());
            }
            Ok(ev) if !ev.promotions.is_empty() && owner.direct_committer().is_none() => {
                let why = format!("schema id {id} widens columns {:?} (an Iceberg type promotion), which this table's catalog cannot be given", ev.promotions);
                dead.extend(of_id.iter().map(|&r| (r, why.clone())));
                return Ok(());
            }
            Ok(ev) if !ev.is_empty() => self.evolve(owner, id, ev).await?,
            Ok(_) => {}
        }
        let values = rows::values(raw, &of_id);
        let decoded = match decoder.decode(&values) {
            Ok(d) => d,
            Err(e) => {
                dead.extend(of_id.iter().map(|&r| (r, format!("schema id {id}: {e}"))));
                return Ok(());
            }
        };
        dead.extend(decoded.rejected.into_iter().map(|(k, why)| (of_id[k], format!("schema id {id}: {why}"))));
        if !decoded.rows.is_empty() {
            let typed_rows: Vec<usize> = decoded.rows.iter().map(|&k| of_id[k]).collect();
            let batch = rows::typed_batch(raw, &typed_rows, Some(&decoded.batch), &self.arrow)?;
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
        self.writer.as_mut().expect("just set").write(batch).await.map_err(TieringError::iceberg("write", ident))
    }

    async fn write_dead(&mut self, raw: &RecordBatch, partition: i32, mut dead: Vec<(usize, String)>) -> Result<()> {
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
        d.writer.as_mut().expect("just set").write(batch).await.map_err(TieringError::iceberg("write", ident))?;
        *d.rows.entry(partition).or_default() += dead.len() as u64;
        Ok(())
    }

    /// Promotes the columns schema `id` widens and adds the ones it needs (metadata-only
    /// commits, no snapshot), then writes on with the new schema: files written so far
    /// are closed as they are.
    async fn evolve(&mut self, owner: &TopicTable, id: i32, ev: Evolution) -> Result<()> {
        let ident = self.table.identifier().to_string();
        let failed = |why: String| TieringError::iceberg("evolve", &ident)(iceberg::Error::new(iceberg::ErrorKind::Unexpected, why));
        let mut before = owner.load().await?;
        if !ev.promotions.is_empty() {
            let committer = owner.direct_committer().ok_or_else(|| failed("this table's catalog takes no type promotion".into()))?;
            commit_promotions(&before, &ev.promotions, &committer).await.map_err(failed)?;
            let promoted = owner.load().await?;
            owner.delete_dropped_metadata(&before, &promoted).await;
            info!(table = %ident, schema_id = id, promotions = ?ev.promotions,
                table_schema = promoted.metadata().current_schema_id(), "column types promoted for a new value schema");
            before = promoted;
        }
        let after = if ev.adds.is_empty() {
            before
        } else {
            let count = ev.adds.len();
            let tx = Transaction::new(&before);
            let action = ev.adds.into_iter().fold(tx.update_schema(), |action, add| action.add_column(add));
            let tx = action.apply(tx).map_err(TieringError::iceberg("evolve", &ident))?;
            let after = tx.commit(owner.catalog().as_ref()).await.map_err(TieringError::iceberg("evolve", &ident))?;
            owner.delete_dropped_metadata(&before, &after).await;
            info!(table = %ident, schema_id = id, columns_added = count,
                table_schema = after.metadata().current_schema_id(), "columns added for a new value schema");
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
                    Some(w) => w.close().await.map_err(TieringError::iceberg("write", d.table.identifier()))?,
                    None => Vec::new(),
                };
                Some((files, d))
            }
            None => None,
        };
        Ok((self.closed, dead))
    }
}
