//! One tiered topic's Iceberg table: [`TopicTable::tier`] plans (from the
//! committed offsets in the snapshot ancestry), converts sealed segments,
//! writes Parquet data files and commits them exactly once.
//!
//! # Exactly once
//! The iceberg crate silently rebases a commit built on a stale table state
//! (it re-loads the table and re-applies the append on a catalog conflict),
//! which would tier the same offsets twice if two plans raced. Two guards:
//! one writer per table in this process ([`crate::catalog::IcebergCatalog`]
//! hands out a per-table `tokio::sync::Mutex` held from plan to commit), and
//! the table's committed offsets of the partitions a commit tiers must still
//! be the ones the plan started from ([`TieringError::StaleSnapshot`]
//! otherwise: nothing is committed, the next pass re-plans). Other writers
//! (brokers leading other partitions of the topic) may commit meanwhile: the
//! commit then goes on top of the fresh snapshot. Each attempt is conditional
//! on the snapshot it checked, through [`crate::guard`] on every load the
//! commit itself makes, with the catalog's compare-and-swap covering the rest.
//! Data files of an aborted
//! or crashed attempt are in no snapshot, so they are never counted; see
//! [`crate::orphans`].
//!
//! # Transactions
//! A table only ever gets what a READ_COMMITTED consumer would keep:
//! `PartitionLog::sealed_segments` hands out only segments wholly below the
//! last stable offset, control batches (markers) become no rows, and the
//! batches of aborted transactions (`SegmentInfo::is_aborted`, from the
//! `.txnindex` entries) are skipped; their offsets still count as tiered.
//!
//! # Layout
//! - this file: [`TopicTable`] (how it is opened and what it is made of), a pass's
//!   [`TierLimits`] and [`TierOutcome`], a [`PreparedTier`], orphan cleanup.
//! - `plan`: [`TopicTable::prepare`]: the writer locks, where the tables stand, the
//!   sinks; the pass's end, a [`PreparedTier`] with its companions'.
//! - `walk`: one partition's sealed segments, batch by batch, into rows (what cannot
//!   become rows is reported and covered).
//! - `commit`: [`TopicTable::commit`]: the guarded, exactly-once commit, companions first.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use floe_storage::PartitionLog;
use iceberg::spec::DataFile;
use iceberg::table::Table;
use iceberg::{Catalog, TableIdent};
use tracing::{info, warn};

use crate::error::{Result, TieringError};
use crate::offsets::committed_next_offsets;
use crate::typed::{CachedSchemas, SchemaSource, TypedLayout};

mod commit;
mod plan;
#[cfg(test)]
mod tests;
mod walk;

/// Limits of one tiering pass over a table.
#[derive(Debug, Clone, Copy)]
pub struct TierLimits {
    /// Most segment bytes read per partition in one commit (at least one segment is).
    pub max_bytes_per_partition: u64,
    /// Rows per Arrow batch handed to the writer.
    pub arrow_batch_rows: usize,
    /// Key/value/header bytes per Arrow batch.
    pub arrow_batch_bytes: usize,
    /// Target Parquet file size.
    pub target_file_size: usize,
}

impl Default for TierLimits {
    fn default() -> Self {
        Self {
            max_bytes_per_partition: 256 << 20,
            arrow_batch_rows: 8192,
            arrow_batch_bytes: 8 << 20,
            target_file_size: 128 << 20,
        }
    }
}

/// A batch that could not be decoded: logged, counted, skipped (its offsets are covered by the commit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedBatch {
    /// The partition.
    pub partition: i32,
    /// First offset of the batch (or of the unreadable tail).
    pub first_offset: i64,
    /// Last offset covered.
    pub last_offset: i64,
    /// Why.
    pub reason: String,
}

/// What one [`TopicTable::tier`] call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TierOutcome {
    /// Per partition, the next offset to tier after this call (committed state).
    pub next_offsets: BTreeMap<i32, i64>,
    /// Per partition, the inclusive range committed by this call.
    pub committed: BTreeMap<i32, (i64, i64)>,
    /// Rows committed.
    pub rows: u64,
    /// Data files committed.
    pub files: u64,
    /// Bytes of data files committed.
    pub bytes: u64,
    /// The snapshot created, if any.
    pub snapshot_id: Option<i64>,
    /// Batches skipped because they could not be decoded.
    pub skipped: Vec<SkippedBatch>,
    /// Records written to the dead-letter table (typed tables).
    pub dead_letters: u64,
}

/// Snapshot summary property: the node id of the broker that made the commit
/// (in a cluster, the leader of every partition the commit tiers).
pub const BROKER_ID_PROPERTY: &str = "floe.broker-id";

/// Data files written for one commit, not committed yet ([`TopicTable::prepare`]);
/// holds this process's writer lock of the table until committed or dropped.
/// Dropped uncommitted, its files are orphans.
#[derive(Debug)]
pub struct PreparedTier {
    _writer: tokio::sync::OwnedMutexGuard<()>,
    /// The snapshot the plan was based on.
    base_snapshot: Option<i64>,
    /// Per partition, the committed next offset the plan started from.
    planned: BTreeMap<i32, i64>,
    outcome: TierOutcome,
    data_files: Vec<DataFile>,
    /// A typed table's dead letters of the same offsets, committed first.
    dead_letters: Option<Box<PreparedTier>>,
    /// A shared table's `__log` rows of the same offsets, committed before anything else.
    log_rows: Option<Box<PreparedTier>>,
}

impl PreparedTier {
    /// Per partition, the inclusive offset range this commit would tier.
    pub fn ranges(&self) -> &BTreeMap<i32, (i64, i64)> {
        &self.outcome.committed
    }
}

/// A tiered topic's table in a catalog.
#[derive(Debug)]
pub struct TopicTable {
    catalog: Arc<dyn Catalog>,
    ident: TableIdent,
    lock: Arc<tokio::sync::Mutex<()>>,
    /// The catalog's settings (its `s3.*` properties list an S3 table location); `None`: defaults.
    config: Option<Arc<crate::catalog_config::CatalogConfig>>,
    /// Recorded in every commit's summary ([`BROKER_ID_PROPERTY`]) when set.
    broker_id: Option<i32>,
    /// A typed table's schemas and dead-letter table ([`crate::typed`]).
    typed: Option<TypedValues>,
    /// A shared table's `<topic>__log` ([`crate::schema::log_iceberg_schema`]).
    log_table: Option<Box<TopicTable>>,
}

/// What a typed table has beyond a raw one.
#[derive(Debug)]
struct TypedValues {
    /// The registry's schemas; `None` when it is off (a layout of JSON and raw only).
    schemas: Option<Arc<dyn SchemaSource>>,
    layout: TypedLayout,
    dead_letters: Box<TopicTable>,
}

impl TopicTable {
    pub(crate) fn new(
        catalog: Arc<dyn Catalog>,
        ident: TableIdent,
        lock: Arc<tokio::sync::Mutex<()>>,
        config: Option<Arc<crate::catalog_config::CatalogConfig>>,
    ) -> Self {
        Self { catalog, ident, lock, config, broker_id: None, typed: None, log_table: None }
    }

    /// Makes this a shared table (`floe.iceberg.storage=shared`): rows of the
    /// lossless layout, and markers, aborted records, undecodable batches and
    /// damaged ranges written to `log` (its `__log` table), committed first.
    #[must_use]
    pub(crate) fn with_log_table(mut self, log: TopicTable) -> Self {
        self.log_table = Some(Box::new(log));
        self
    }

    /// A shared table's `__log` table.
    pub fn log_table(&self) -> Option<&TopicTable> {
        self.log_table.as_deref()
    }

    /// The tables committed with this one: a typed table's dead-letter table, a
    /// shared table's `__log` (maintained with the same policies).
    pub fn companion_tables(&self) -> impl Iterator<Item = &TopicTable> {
        self.dead_letter_table().into_iter().chain(self.log_table())
    }

    /// Makes this a typed table of `layout`: keys and values decoded with `schemas`'
    /// decoders or as JSON, the records that cannot be typed written to
    /// `dead_letters` ([`crate::typed`]).
    #[must_use]
    pub(crate) fn with_typed_values(
        mut self,
        schemas: Option<Arc<dyn SchemaSource>>,
        layout: TypedLayout,
        dead_letters: TopicTable,
    ) -> Self {
        let schemas = schemas.map(|s| Arc::new(CachedSchemas::new(s)) as Arc<dyn SchemaSource>);
        self.typed = Some(TypedValues { schemas, layout, dead_letters: Box::new(dead_letters) });
        self
    }

    /// How this table's catalog takes a commit Floe built itself (a type promotion,
    /// a compaction's `replace` snapshot): Floe's SQL catalog or a REST catalog.
    pub(crate) fn direct_committer(&self) -> Option<crate::metadata_commit::DirectCommitter> {
        use crate::metadata_commit::DirectCommitter;
        let config = self.config.as_ref()?;
        match config.catalog_type {
            crate::CatalogType::Sql => {
                Some(DirectCommitter::Sql(config.sqlite_path()?, config.name.clone()))
            }
            crate::CatalogType::Rest => Some(DirectCommitter::Rest(config.clone())),
        }
    }

    /// A typed table's dead-letter table.
    pub fn dead_letter_table(&self) -> Option<&TopicTable> {
        self.typed.as_ref().map(|t| &*t.dead_letters)
    }

    /// Records `broker_id` as the committer in the summary of every commit this table makes.
    #[must_use]
    pub fn with_broker_id(mut self, broker_id: i32) -> Self {
        self.broker_id = Some(broker_id);
        if let Some(log) = self.log_table.take() {
            self.log_table = Some(Box::new(log.with_broker_id(broker_id)));
        }
        if let Some(t) = self.typed.take() {
            let dead_letters = Box::new((*t.dead_letters).with_broker_id(broker_id));
            self.typed = Some(TypedValues { schemas: t.schemas, layout: t.layout, dead_letters });
        }
        self
    }

    /// The broker id recorded in this table's commits, if any.
    pub(crate) fn broker_id(&self) -> Option<i32> {
        self.broker_id
    }

    /// The table's identifier.
    pub fn ident(&self) -> &TableIdent {
        &self.ident
    }

    /// Loads the table as the catalog has it now.
    ///
    /// # Errors
    /// [`TieringError::Iceberg`] if the catalog cannot be reached.
    pub async fn load(&self) -> Result<Table> {
        self.catalog
            .load_table(&self.ident)
            .await
            .map_err(TieringError::iceberg("load", &self.ident))
    }

    /// Per partition, the next offset to tier, from the snapshot ancestry.
    ///
    /// # Errors
    /// [`TieringError::Iceberg`] if the catalog cannot be reached.
    pub async fn committed_next_offsets(&self) -> Result<BTreeMap<i32, i64>> {
        Ok(committed_next_offsets(self.load().await?.metadata()))
    }

    /// Tiers the sealed segments of `partitions` beyond the committed offsets
    /// (at most `limits.max_bytes_per_partition` each) in one commit.
    /// Does nothing when no partition has sealed data to tier.
    ///
    /// # Errors
    /// [`TieringError::StaleSnapshot`] if the table changed since the plan (nothing
    /// committed); [`TieringError::Iceberg`] and [`TieringError::SegmentIo`] on failures
    /// (nothing committed either: written files are orphans).
    pub async fn tier(
        &self,
        partitions: &[Arc<PartitionLog>],
        limits: &TierLimits,
    ) -> Result<TierOutcome> {
        self.tier_until(partitions, limits, &AtomicBool::new(false)).await
    }

    /// [`TopicTable::tier`], but once `stop` is set reading stops at the next batch
    /// boundary and what was converted so far is committed (shutdown stays prompt).
    ///
    /// # Errors
    /// As [`TopicTable::tier`].
    pub async fn tier_until(
        &self,
        partitions: &[Arc<PartitionLog>],
        limits: &TierLimits,
        stop: &AtomicBool,
    ) -> Result<TierOutcome> {
        let prepared = self.prepare(partitions, limits, stop).await?;
        self.commit(prepared).await
    }

    /// This process's writer lock of the table: no attempt of ours writes while it is held.
    pub(crate) async fn writer_lock(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.lock.lock().await
    }

    /// The catalog the table is in.
    pub(crate) fn catalog(&self) -> Arc<dyn Catalog> {
        self.catalog.clone()
    }

    /// The failpoint `name` (see `floe_storage::failpoint`), its injected error as a commit failure.
    pub(crate) fn failpoint(&self, name: &str) -> Result<()> {
        floe_storage::failpoint::check(name).map_err(|e| {
            TieringError::iceberg("commit", &self.ident)(iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!("failpoint {name}: {e}"),
            ))
        })
    }

    /// Finds (and with `delete`, removes) data files of this table that no
    /// snapshot references and that are older than `older_than`, holding the
    /// writer lock so no attempt of this process is in flight. Returns their
    /// locations (local paths, or `s3://` URLs). Skipped (logged, nothing
    /// found) when the table is neither in a local directory nor on S3.
    ///
    /// # Errors
    /// As [`crate::orphans::find_orphans`] and [`crate::orphans::find_s3_orphans`].
    pub async fn clean_orphans(
        &self,
        older_than: std::time::Duration,
        delete: bool,
    ) -> Result<Vec<String>> {
        let _writer = self.lock.lock().await;
        let table = self.load().await?;
        if !crate::orphans::is_listable(&table) {
            info!(table = %self.ident, location = table.metadata().location(),
                "orphan data file cleanup skipped: the table is neither in a local directory nor on S3");
            return Ok(Vec::new());
        }
        if crate::catalog_config::local_path(table.metadata().location()).is_some() {
            let orphans = crate::orphans::find_orphans(&table, older_than).await?;
            for path in &orphans {
                if delete {
                    match std::fs::remove_file(path) {
                        Ok(()) => {
                            warn!(table = %self.ident, path = %path.display(), "deleted orphan data file")
                        }
                        Err(e) => {
                            warn!(table = %self.ident, path = %path.display(), error = %e, "cannot delete orphan data file")
                        }
                    }
                } else {
                    warn!(table = %self.ident, path = %path.display(), "orphan data file (in no snapshot)");
                }
            }
            return Ok(orphans.iter().map(|p| p.display().to_string()).collect());
        }
        let props =
            self.config.as_ref().map(|c| c.properties().into_iter().collect()).unwrap_or_default();
        let orphans = crate::orphans::find_s3_orphans(&table, &props, older_than).await?;
        for location in &orphans {
            if delete {
                match table.file_io().delete(location).await {
                    Ok(()) => {
                        warn!(table = %self.ident, path = %location, "deleted orphan data file")
                    }
                    Err(e) => {
                        warn!(table = %self.ident, path = %location, error = %e, "cannot delete orphan data file")
                    }
                }
            } else {
                warn!(table = %self.ident, path = %location, "orphan data file (in no snapshot)");
            }
        }
        Ok(orphans)
    }
}
