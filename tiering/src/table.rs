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

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use floe_protocol::record_batch::verify_crc;
use floe_storage::{PartitionLog, ScannedBatch, SegmentBatchReader};
use iceberg::spec::DataFile;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, TableIdent};
use tracing::{debug, error, info, warn};

use crate::convert::{ArrowConverter, LogBatch, Pushed, RowLayout};
use crate::error::{Result, TieringError};
use crate::guard::{ExpectSnapshot, MOVED};
use crate::offsets::{committed_log_starts, committed_next_offsets, conflicting_partition, summary_properties};
use crate::sink::{DeadLetters, Sink};
use crate::typed::{CachedSchemas, SchemaSource, TypedLayout};

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

/// How many times [`TopicTable::commit`] tries when other partitions keep being
/// committed under it (each try re-checks its own partitions' offsets).
const MAX_COMMIT_ATTEMPTS: u32 = 8;

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

/// A shared table's `__log` side of one pass: its writer lock, where it
/// stands, what was written to it.
struct LogSide {
    lock: tokio::sync::OwnedMutexGuard<()>,
    next: BTreeMap<i32, i64>,
    snapshot: Option<i64>,
    sink: Sink,
    /// Partitions with `__log` rows in this pass.
    partitions: std::collections::BTreeSet<i32>,
}

impl LogSide {
    /// The `__log` commit of a pass tiering `committed`: its partitions with rows,
    /// each from where the `__log` table stands; `None` without rows.
    async fn prepared(self, committed: &BTreeMap<i32, (i64, i64)>) -> Result<Option<Box<PreparedTier>>> {
        let (files, _) = self.sink.finish().await?;
        if files.is_empty() {
            return Ok(None);
        }
        let ranges: BTreeMap<i32, (i64, i64)> = self
            .partitions
            .iter()
            .filter_map(|p| {
                let (first, last) = *committed.get(p)?;
                let first = first.max(self.next.get(p).copied().unwrap_or(0));
                (first <= last).then_some((*p, (first, last)))
            })
            .collect();
        let outcome = TierOutcome {
            committed: ranges,
            rows: files.iter().map(DataFile::record_count).sum(),
            files: files.len() as u64,
            bytes: files.iter().map(DataFile::file_size_in_bytes).sum(),
            ..TierOutcome::default()
        };
        Ok(Some(Box::new(PreparedTier {
            _writer: self.lock,
            base_snapshot: self.snapshot,
            planned: self.next,
            outcome,
            data_files: files,
            dead_letters: None,
            log_rows: None,
        })))
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
            crate::CatalogType::Sql => Some(DirectCommitter::Sql(config.sqlite_path()?, config.name.clone())),
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
        self.catalog.load_table(&self.ident).await.map_err(TieringError::iceberg("load", &self.ident))
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
    pub async fn tier(&self, partitions: &[Arc<PartitionLog>], limits: &TierLimits) -> Result<TierOutcome> {
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

    /// The first half of [`TopicTable::tier_until`]: plans from the table's
    /// committed offsets, converts the sealed segments beyond them and writes
    /// the data files, committing nothing. The writer lock of this process is
    /// held until the [`PreparedTier`] is committed or dropped.
    ///
    /// # Errors
    /// [`TieringError::Iceberg`] and [`TieringError::SegmentIo`] (written files are orphans).
    pub async fn prepare(
        &self,
        partitions: &[Arc<PartitionLog>],
        limits: &TierLimits,
        stop: &AtomicBool,
    ) -> Result<PreparedTier> {
        let mut stopped = false;
        let writer_lock = self.lock.clone().lock_owned().await;
        let table = self.load().await?;
        let base_snapshot = table.metadata().current_snapshot_id();
        let next = committed_next_offsets(table.metadata());
        let mut outcome = TierOutcome::default();
        let commit_id = uuid::Uuid::new_v4();
        // A typed table's dead-letter table is planned with it, under its own writer lock (taken second).
        let (dead_lock, dead) = match &self.typed {
            Some(t) => {
                let lock = t.dead_letters.lock.clone().lock_owned().await;
                (Some(lock), Some(DeadLetters::new(t.schemas.clone(), t.layout, t.dead_letters.load().await?)?))
            }
            None => (None, None),
        };
        let mut sink = Sink::new(table, limits, format!("floe-{commit_id}"), dead)?;
        // A shared table's `__log` is planned with it too, under its writer lock (taken last).
        let mut log_side = match &self.log_table {
            Some(t) => {
                let lock = t.lock.clone().lock_owned().await;
                let table = t.load().await?;
                let next = committed_next_offsets(table.metadata());
                let snapshot = table.metadata().current_snapshot_id();
                let sink = Sink::new(table, limits, format!("floe-{commit_id}-log"), None)?;
                Some(LogSide { lock, next, snapshot, sink, partitions: Default::default() })
            }
            None => None,
        };
        let layout = if self.log_table.is_some() { RowLayout::Lossless } else { RowLayout::Raw };

        for log in partitions {
            let p = log.partition();
            let committed = next.get(&p).copied().unwrap_or(0);
            let log_start = log.log_start_offset();
            let from = committed.max(log_start);
            if committed < log_start && committed > 0 {
                warn!(table = %self.ident, partition = p, committed, log_start,
                    "offsets below the log start were deleted before they were tiered");
            }
            let mut conv = ArrowConverter::with_layout(p, limits.arrow_batch_rows, limits.arrow_batch_bytes, layout);
            // `__log` rows from where both tables stand: below the log table's own
            // offsets they were committed by a pass whose main commit did not follow.
            let mut log_conv = log_side.as_ref().map(|l| {
                let from = from.max(l.next.get(&p).copied().unwrap_or(0));
                (ArrowConverter::with_layout(p, limits.arrow_batch_rows, limits.arrow_batch_bytes, RowLayout::Log), from)
            });
            let mut last_covered: Option<i64> = None;
            let mut read = 0u64;
            for seg in log.sealed_segments().into_iter().filter(|s| s.next_offset > from) {
                if stopped || (read > 0 && read + seg.size_bytes > limits.max_bytes_per_partition) {
                    break;
                }
                read += seg.size_bytes;
                for c in seg.corrupt.iter().filter(|c| c.last_offset.is_none_or(|l| l >= from)) {
                    // Recovery kept this damage (valid batches follow it); the reader steps over it.
                    let s = SkippedBatch { partition: p, first_offset: c.first_offset.max(from),
                        last_offset: c.last_offset.unwrap_or(seg.next_offset - 1), reason: c.to_string() };
                    error!(table = %self.ident, partition = p, first_offset = s.first_offset,
                        last_offset = s.last_offset, reason = %s.reason, "skipping a damaged range of a segment");
                    if let Some((lc, log_from)) = log_conv.as_mut() {
                        if s.last_offset >= *log_from {
                            lc.push_hole(s.first_offset.max(*log_from), s.last_offset);
                        }
                    }
                    outcome.skipped.push(s);
                }
                let holes = seg.corrupt.iter().map(|c| (c.position, c.end_position)).collect();
                let mut reader = SegmentBatchReader::open(&seg.path, 0, seg.size_bytes)?.with_holes(holes);
                loop {
                    if stop.load(Ordering::Relaxed) {
                        // Commit what is converted so far (whole batches), promptly.
                        stopped = true;
                        break;
                    }
                    // The CRC is checked below: a bad one skips one batch, not the rest of the segment.
                    let (position, header) = match reader.next_batch(false)? {
                        ScannedBatch::End => break,
                        ScannedBatch::Batch { position, header } => (position, header),
                        ScannedBatch::Invalid { position, reason } => {
                            let first = last_covered.map_or(from, |l| l + 1).max(seg.base_offset);
                            let s = SkippedBatch { partition: p, first_offset: first, last_offset: seg.next_offset - 1,
                                reason: format!("unreadable segment tail at byte {position}: {reason}") };
                            error!(table = %self.ident, partition = p, first_offset = s.first_offset,
                                last_offset = s.last_offset, reason = %s.reason, "skipping records that cannot be read");
                            if let Some((lc, log_from)) = log_conv.as_mut() {
                                if s.last_offset >= *log_from {
                                    lc.push_hole(s.first_offset.max(*log_from), s.last_offset);
                                }
                            }
                            outcome.skipped.push(s);
                            last_covered = Some(seg.next_offset - 1);
                            break;
                        }
                    };
                    if header.last_offset() < from {
                        continue;
                    }
                    let bytes = reader.batch_bytes()?;
                    if let Err(e) = verify_crc(bytes, 0) {
                        // Bit rot in a segment recovery trusted (below the recovery point): never tier garbage.
                        let s = SkippedBatch { partition: p, first_offset: header.base_offset,
                            last_offset: header.last_offset(), reason: format!("{} at byte {position}: {e}", seg.path.display()) };
                        error!(table = %self.ident, partition = p, first_offset = s.first_offset,
                            last_offset = s.last_offset, reason = %s.reason, "skipping a record batch whose CRC does not match");
                        if let Some((lc, log_from)) = log_conv.as_mut() {
                            if header.last_offset() >= *log_from {
                                // Served back as stored: a consumer fails its CRC as it would on the log.
                                lc.push_opaque(&header, bytes);
                            }
                        }
                        outcome.skipped.push(s);
                        last_covered = Some(header.last_offset());
                        continue;
                    }
                    let pushed = if seg.is_aborted(&header) {
                        // An aborted transaction's records never become rows of the table
                        // (READ_COMMITTED semantics); a shared table's `__log` keeps them.
                        match log_conv.as_mut() {
                            Some((lc, log_from)) => lc.push_log(&header, bytes, *log_from, LogBatch::Aborted),
                            None => Pushed::Rows(0),
                        }
                    } else {
                        match conv.push(&header, Bytes::copy_from_slice(bytes), from) {
                            Pushed::Control => match log_conv.as_mut() {
                                Some((lc, log_from)) => lc.push_log(&header, bytes, *log_from, LogBatch::Marker(&seg.aborted)),
                                None => Pushed::Control,
                            },
                            other => other,
                        }
                    };
                    if let Pushed::Undecodable { base_offset, last_offset, reason } = pushed {
                        error!(table = %self.ident, partition = p, first_offset = base_offset, last_offset,
                            %reason, "skipping a record batch that cannot be decoded");
                        if let Some((lc, log_from)) = log_conv.as_mut() {
                            if last_offset >= *log_from {
                                lc.push_opaque(&header, bytes);
                            }
                        }
                        outcome.skipped.push(SkippedBatch { partition: p, first_offset: base_offset, last_offset, reason });
                    }
                    last_covered = Some(header.last_offset());
                    if conv.is_full() {
                        self.write(&mut sink, &mut conv, p).await?;
                    }
                    if let (Some((lc, _)), Some(side), Some(log_table)) = (log_conv.as_mut(), log_side.as_mut(), &self.log_table) {
                        if lc.is_full() {
                            side.partitions.insert(p);
                            log_table.write(&mut side.sink, lc, p).await?;
                        }
                    }
                }
                if !stopped {
                    // Whatever the batches covered, the segment's offsets are tiered up to its end.
                    last_covered = Some(last_covered.unwrap_or(seg.next_offset - 1).max(seg.next_offset - 1));
                }
            }
            self.write(&mut sink, &mut conv, p).await?;
            if let (Some((lc, _)), Some(side), Some(log_table)) = (log_conv.as_mut(), log_side.as_mut(), &self.log_table) {
                if !lc.is_empty() {
                    side.partitions.insert(p);
                    log_table.write(&mut side.sink, lc, p).await?;
                }
            }
            if let Some(last) = last_covered {
                if last >= from {
                    outcome.committed.insert(p, (from, last));
                }
            }
        }
        let (data_files, dead) = sink.finish().await?;
        if outcome.committed.is_empty() {
            outcome.next_offsets = next.clone();
            return Ok(PreparedTier {
                _writer: writer_lock,
                base_snapshot,
                planned: next,
                outcome,
                data_files: Vec::new(),
                dead_letters: None,
                log_rows: None,
            });
        }
        let log_rows = match log_side {
            Some(side) => side.prepared(&outcome.committed).await?,
            None => None,
        };
        outcome.files = data_files.len() as u64;
        outcome.bytes = data_files.iter().map(DataFile::file_size_in_bytes).sum();
        outcome.rows = data_files.iter().map(DataFile::record_count).sum();
        let dead_letters = match (dead, dead_lock) {
            (Some((files, dead)), Some(lock)) if !files.is_empty() => {
                // The dead letters' ranges: the pass's, from where the dead-letter table stands.
                let committed: BTreeMap<i32, (i64, i64)> = dead
                    .rows
                    .keys()
                    .filter_map(|p| {
                        let (first, last) = *outcome.committed.get(p)?;
                        let first = first.max(dead.next.get(p).copied().unwrap_or(0));
                        (first <= last).then_some((*p, (first, last)))
                    })
                    .collect();
                outcome.dead_letters = files.iter().map(DataFile::record_count).sum();
                let dead_outcome = TierOutcome {
                    committed,
                    rows: outcome.dead_letters,
                    files: files.len() as u64,
                    bytes: files.iter().map(DataFile::file_size_in_bytes).sum(),
                    ..TierOutcome::default()
                };
                Some(Box::new(PreparedTier {
                    _writer: lock,
                    base_snapshot: dead.table().metadata().current_snapshot_id(),
                    planned: dead.next.clone(),
                    outcome: dead_outcome,
                    data_files: files,
                    dead_letters: None,
                    log_rows: None,
                }))
            }
            _ => None,
        };
        Ok(PreparedTier { _writer: writer_lock, base_snapshot, planned: next, outcome, data_files, dead_letters, log_rows })
    }

    /// Commits `prepared` exactly once, or not at all.
    ///
    /// The commit is conditional on the table's committed offsets of the
    /// partitions it tiers: if the table moved on since the plan only by
    /// commits of *other* partitions (another broker leading them), the same
    /// data files are committed on top of the fresh snapshot, with the summary
    /// rebuilt from the fresh offsets (Iceberg's optimistic concurrency, with
    /// Floe's offsets as the conflict check). If any of its partitions was
    /// committed by someone else meanwhile (a new leader after this broker
    /// was deposed), nothing is committed: [`TieringError::StaleSnapshot`].
    /// Each attempt is itself guarded by [`crate::guard`] and the catalog's
    /// compare-and-swap, so an attempt never lands on a snapshot it did not check.
    ///
    /// # Errors
    /// [`TieringError::StaleSnapshot`] (nothing committed; the data files are
    /// orphans); [`TieringError::Iceberg`] if the catalog fails.
    pub async fn commit(&self, mut prepared: PreparedTier) -> Result<TierOutcome> {
        if let (Some(log), Some(log_table)) = (prepared.log_rows.take(), &self.log_table) {
            // `__log` first: the main table's offsets are the authority, so a crash
            // before its commit leaves `__log` rows the next pass does not write again.
            let out = log_table.commit_one(*log).await?;
            debug!(table = %log_table.ident, ?out.committed, rows = out.rows, "__log rows committed");
            self.failpoint("tiering.log.committed")?;
        }
        if let (Some(dead), Some(typed)) = (prepared.dead_letters.take(), &self.typed) {
            // Dead letters first: a crash before the typed commit re-converts the same
            // records, and leaves out the dead letters committed here ([`crate::typed`]).
            let out = typed.dead_letters.commit_one(*dead).await?;
            debug!(table = %typed.dead_letters.ident, ?out.committed, rows = out.rows, "dead letters committed");
            self.failpoint("tiering.dlq.committed")?;
        }
        self.commit_one(prepared).await
    }

    /// A crash between the commits of a shared table: its `__log` rows committed, nothing else.
    #[cfg(test)]
    pub(crate) async fn commit_log_only(&self, mut prepared: PreparedTier) -> Result<()> {
        let log = prepared.log_rows.take().expect("the pass has __log rows");
        self.log_table.as_ref().expect("a shared table").commit_one(*log).await.map(drop)
    }

    /// A crash before a shared typed table's main commit: its `__log` rows and
    /// dead letters committed (in the order [`TopicTable::commit`] takes), not the table's rows.
    #[cfg(test)]
    pub(crate) async fn commit_companions_only(&self, mut prepared: PreparedTier) -> Result<()> {
        if let (Some(log), Some(t)) = (prepared.log_rows.take(), &self.log_table) {
            t.commit_one(*log).await?;
        }
        if let (Some(dead), Some(t)) = (prepared.dead_letters.take(), &self.typed) {
            t.dead_letters.commit_one(*dead).await?;
        }
        Ok(())
    }

    /// A crash between the two commits of a typed table: its dead letters committed, nothing else.
    #[cfg(test)]
    pub(crate) async fn commit_dead_letters_only(&self, mut prepared: PreparedTier) -> Result<()> {
        let dead = prepared.dead_letters.take().expect("the pass has dead letters");
        self.typed.as_ref().expect("a typed table").dead_letters.commit_one(*dead).await.map(drop)
    }

    async fn commit_one(&self, prepared: PreparedTier) -> Result<TierOutcome> {
        let PreparedTier { _writer, base_snapshot: planned_snapshot, planned, mut outcome, data_files, .. } = prepared;
        if outcome.committed.is_empty() {
            return Ok(outcome);
        }
        self.failpoint("tiering.iceberg.commit")?;
        let mut base_snapshot = planned_snapshot;
        let mut next = planned.clone();
        let mut attempts = 0;
        let (previous, committed) = loop {
            attempts += 1;
            let current = self.load().await?;
            let now = current.metadata().current_snapshot_id();
            if now != base_snapshot {
                let fresh = committed_next_offsets(current.metadata());
                let stale = || TieringError::StaleSnapshot { table: self.ident.to_string(), planned: planned_snapshot, current: now };
                if let Some(p) = conflicting_partition(&outcome.committed, &planned, &fresh) {
                    warn!(table = %self.ident, partition = p, planned = planned.get(&p), committed = fresh.get(&p),
                        files = data_files.len(), "another writer tiered this partition since the plan: data files left uncommitted");
                    return Err(stale());
                }
                if attempts > MAX_COMMIT_ATTEMPTS {
                    warn!(table = %self.ident, attempts, files = data_files.len(), "table kept moving: data files left uncommitted");
                    return Err(stale());
                }
                debug!(table = %self.ident, base_snapshot, now, "other partitions were committed since the plan: committing on top");
                base_snapshot = now;
                next = fresh;
            }
            let tx = Transaction::new(&current);
            // Table retention's log starts ride along unchanged (`floe.log-start.*`, cumulative).
            let mut properties = summary_properties(&outcome.committed, &next, &committed_log_starts(current.metadata()));
            if let Some(id) = self.broker_id {
                properties.insert(BROKER_ID_PROPERTY.to_string(), id.to_string());
            }
            let append = tx
                .fast_append()
                .with_check_duplicate(false)
                .add_data_files(data_files.clone())
                .set_snapshot_properties(properties);
            let tx = append.apply(tx).map_err(TieringError::iceberg("commit", &self.ident))?;
            let guarded = ExpectSnapshot { inner: self.catalog.clone(), ident: self.ident.clone(), expected: base_snapshot };
            match tx.commit(&guarded).await {
                Ok(t) => break (current, t),
                // Moved between the load above and the commit: look again.
                Err(e) if e.message().starts_with(MOVED) => debug!(table = %self.ident, error = %e, "table moved during the commit"),
                Err(e) => return Err(TieringError::iceberg("commit", &self.ident)(e)),
            }
        };
        // Committed, not yet reported: the next pass must plan from the catalog's offsets.
        self.failpoint("tiering.iceberg.committed")?;
        // The metadata file that fell out of the log with this commit (previous-versions-max).
        self.delete_dropped_metadata(&previous, &committed).await;
        let snapshot = committed.metadata().current_snapshot();
        outcome.snapshot_id = snapshot.map(|s| s.snapshot_id());
        if snapshot.and_then(|s| s.parent_snapshot_id()) != base_snapshot {
            // Only another process committing between the guard and the commit gets here.
            error!(table = %self.ident, base_snapshot, snapshot = outcome.snapshot_id,
                "commit was rebased by the iceberg crate onto a snapshot this plan did not see: offsets may be duplicated");
        }
        for (p, (_, last)) in &outcome.committed {
            next.insert(*p, last + 1);
        }
        outcome.next_offsets = next;
        debug!(table = %self.ident, ?outcome.committed, rows = outcome.rows, files = outcome.files, attempts, "tiered");
        Ok(outcome)
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
    pub async fn clean_orphans(&self, older_than: std::time::Duration, delete: bool) -> Result<Vec<String>> {
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
                        Ok(()) => warn!(table = %self.ident, path = %path.display(), "deleted orphan data file"),
                        Err(e) => warn!(table = %self.ident, path = %path.display(), error = %e, "cannot delete orphan data file"),
                    }
                } else {
                    warn!(table = %self.ident, path = %path.display(), "orphan data file (in no snapshot)");
                }
            }
            return Ok(orphans.iter().map(|p| p.display().to_string()).collect());
        }
        let props = self.config.as_ref().map(|c| c.properties().into_iter().collect()).unwrap_or_default();
        let orphans = crate::orphans::find_s3_orphans(&table, &props, older_than).await?;
        for location in &orphans {
            if delete {
                match table.file_io().delete(location).await {
                    Ok(()) => warn!(table = %self.ident, path = %location, "deleted orphan data file"),
                    Err(e) => warn!(table = %self.ident, path = %location, error = %e, "cannot delete orphan data file"),
                }
            } else {
                warn!(table = %self.ident, path = %location, "orphan data file (in no snapshot)");
            }
        }
        Ok(orphans)
    }

    async fn write(&self, sink: &mut Sink, conv: &mut ArrowConverter, partition: i32) -> Result<()> {
        match conv.finish()? {
            Some(batch) => sink.write(self, batch, partition).await,
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::Array;

    use super::*;
    use crate::catalog::IcebergCatalog;
    use crate::test_util::*;

    async fn catalog(dir: &std::path::Path) -> IcebergCatalog {
        IcebergCatalog::open_sqlite("floe", &dir.join("iceberg/catalog.db"), &dir.join("iceberg/warehouse"), "kafka")
            .await
            .unwrap()
    }

    async fn scanned_offsets(t: &TopicTable) -> Vec<i64> {
        let batches = scan_columns(t, &["offset"]).await;
        let mut v: Vec<i64> =
            batches.iter().flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec()).collect();
        v.sort_unstable();
        v
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sealed_segments_are_tiered_once_and_resume_from_the_summary() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[("segment.bytes", "2000")]));
        fill(&log, 0, 200);
        let sealed_end = log.sealed_segments().last().unwrap().next_offset;
        let cat = catalog(dir.path()).await;
        let t = cat.topic_table("t", "id-1", "day(timestamp)").await.unwrap();
        let limits = TierLimits { arrow_batch_rows: 16, ..TierLimits::default() };
        let out = t.tier(std::slice::from_ref(&log), &limits).await.unwrap();
        assert_eq!(out.committed[&0], (0, sealed_end - 1));
        assert_eq!(out.rows, sealed_end as u64);
        assert!(out.files >= 1 && out.bytes > 0);
        assert!(out.skipped.is_empty());
        // Nothing new: nothing committed.
        let again = t.tier(std::slice::from_ref(&log), &limits).await.unwrap();
        assert!(again.committed.is_empty());
        assert_eq!(again.next_offsets[&0], sealed_end);
        // The active segment rolls; the rest follows, read back from a fresh catalog (a restart).
        fill(&log, 200, 30);
        log.roll_now().unwrap();
        drop(cat);
        let cat = catalog(dir.path()).await;
        let t = cat.topic_table("t", "id-1", "day(timestamp)").await.unwrap();
        assert_eq!(t.committed_next_offsets().await.unwrap()[&0], sealed_end);
        assert!(matches!(
            cat.topic_table("t", "id-2", "day(timestamp)").await,
            Err(TieringError::TopicMismatch { .. })
        ), "a re-created topic of the same name");
        let out = t.tier(std::slice::from_ref(&log), &limits).await.unwrap();
        assert_eq!(out.committed[&0], (sealed_end, 229));
        assert_eq!(scanned_offsets(&t).await, (0..230).collect::<Vec<_>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn aborted_open_and_control_records_never_become_rows() {
        use floe_storage::ControlRecordType::{Abort, Commit};
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[]));
        fill(&log, 0, 10); // 0-9
        log.append(&mut transactional(1, 0, 5), 0).unwrap(); // 10-14, aborted
        log.append_txn_marker(1, 0, Abort, 0, 1).unwrap(); // 15
        log.append(&mut transactional(2, 0, 5), 0).unwrap(); // 16-20, committed
        log.append_txn_marker(2, 0, Commit, 0, 1).unwrap(); // 21
        fill(&log, 22, 5); // 22-26
        log.roll_now().unwrap();
        log.append(&mut transactional(3, 0, 3), 0).unwrap(); // 27-29, open
        fill(&log, 30, 5); // 30-34
        log.roll_now().unwrap();
        let cat = catalog(dir.path()).await;
        let t = cat.topic_table("t", "id-1", "").await.unwrap();
        let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
        assert_eq!(out.committed[&0], (0, 26), "the segment of the open transaction waits");
        let committed: Vec<i64> = (0..10).chain(16..21).chain(22..27).collect();
        assert_eq!(scanned_offsets(&t).await, committed);
        // The transaction commits (its marker in the active segment): the waiting segment is stable.
        log.append_txn_marker(3, 0, Commit, 0, 1).unwrap();
        log.roll_now().unwrap();
        let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
        assert_eq!(out.committed[&0], (27, 35));
        let all: Vec<i64> = committed.into_iter().chain(27..35).collect();
        assert_eq!(scanned_offsets(&t).await, all, "no row for a marker (offset 35)");
    }

    /// `(offset, kind)` of a shared table's `__log` rows, in offset order.
    async fn log_rows(t: &TopicTable) -> Vec<(i64, String, Option<i64>)> {
        let batches = scan_columns(t.log_table().unwrap(), &["offset", "kind", "txn_first_offset"]).await;
        let mut v = Vec::new();
        for b in &batches {
            let (o, k, f) = (b.column(0).as_primitive::<Int64Type>(), b.column(1).as_string::<i32>(), b.column(2).as_primitive::<Int64Type>());
            for i in 0..b.num_rows() {
                v.push((o.value(i), k.value(i).to_string(), f.is_valid(i).then(|| f.value(i))));
            }
        }
        v.sort();
        v
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_shared_table_holds_every_offset_once_across_it_and_its_log_table() {
        use floe_storage::ControlRecordType::{Abort, Commit};
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[]));
        fill(&log, 0, 10); // 0-4, 5-9 (damaged below)
        log.append(&mut transactional(1, 0, 5), 0).unwrap(); // 10-14, aborted
        log.append_txn_marker(1, 0, Abort, 0, 1).unwrap(); // 15
        log.append(&mut transactional(2, 0, 5), 0).unwrap(); // 16-20, committed
        log.append_txn_marker(2, 0, Commit, 0, 1).unwrap(); // 21
        fill(&log, 22, 5); // 22-26
        log.roll_now().unwrap();
        let seg = &log.sealed_segments()[0];
        let bytes = std::fs::read(&seg.path).unwrap();
        let first = floe_protocol::record_batch::RecordBatchHeader::parse(&bytes).unwrap().total_size();
        let mut damaged = bytes.clone();
        damaged[first + 61 + 3] ^= 0xa5;
        std::fs::write(&seg.path, &damaged).unwrap();
        let cat = catalog(dir.path()).await;
        let t = cat.shared_topic_table("t", "id-1", "identity(partition)").await.unwrap();
        // A crash after the `__log` commit: the next pass commits the main table and no `__log` row twice.
        let prepared = t.prepare(std::slice::from_ref(&log), &TierLimits::default(), &AtomicBool::new(false)).await.unwrap();
        t.commit_log_only(prepared).await.unwrap();
        assert!(scanned_offsets(&t).await.is_empty());
        let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
        assert_eq!(out.committed[&0], (0, 26));
        let main: Vec<i64> = (0..5).chain(16..21).chain(22..27).collect();
        assert_eq!(scanned_offsets(&t).await, main, "the main table keeps what READ_COMMITTED keeps");
        let mut want: Vec<(i64, String, Option<i64>)> = vec![(5, "opaque".into(), None)];
        want.extend((10..15).map(|o| (o, "aborted".to_string(), None)));
        want.push((15, "abort_marker".into(), Some(10)));
        want.push((21, "commit_marker".into(), None));
        assert_eq!(log_rows(&t).await, want);
        // Every offset once across both tables (the opaque row stands for its batch, 5-9).
        let mut all: Vec<i64> = main.iter().copied().chain(want.iter().map(|w| w.0)).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), main.len() + want.len(), "no offset in both tables");
        // The lossless columns hold each batch's header as stored.
        let b = scan_columns(&t, &["offset", "batch_crc", "batch_last_offset_delta", "batch_records_count", "batch_base_timestamp"]).await;
        let headers: std::collections::BTreeMap<i64, floe_protocol::record_batch::RecordBatchHeader> =
            floe_protocol::record_batch::BatchIter::new(&damaged).map(|h| h.unwrap().header).map(|h| (h.base_offset, h)).collect();
        for batch in &b {
            let (off, crc, lod, count, base_ts) = (
                batch.column(0).as_primitive::<Int64Type>(),
                batch.column(1).as_primitive::<Int64Type>(),
                batch.column(2).as_primitive::<arrow_array::types::Int32Type>(),
                batch.column(3).as_primitive::<arrow_array::types::Int32Type>(),
                batch.column(4).as_primitive::<Int64Type>(),
            );
            for i in 0..batch.num_rows() {
                let h = headers.range(..=off.value(i)).next_back().unwrap().1;
                assert_eq!(crc.value(i), i64::from(h.crc));
                assert_eq!((lod.value(i), count.value(i), base_ts.value(i)), (h.last_offset_delta, h.records_count, h.base_timestamp));
            }
        }
        // A copy-mode table cannot be opened shared.
        cat.topic_table("c", "id-2", "").await.unwrap();
        assert!(matches!(cat.shared_topic_table("c", "id-2", "").await, Err(TieringError::NotLossless { .. })));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_undecodable_batch_is_reported_skipped_and_covered() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[]));
        fill(&log, 0, 15); // batches [0,5) [5,10) [10,15)
        log.roll_now().unwrap();
        // Damage the middle batch's records (after its 61-byte header); the log's own checks ran at append.
        let seg = &log.sealed_segments()[0];
        let bytes = std::fs::read(&seg.path).unwrap();
        let first = floe_protocol::record_batch::RecordBatchHeader::parse(&bytes).unwrap().total_size();
        let mut damaged = bytes.clone();
        let at = first + 61 + 3;
        for b in &mut damaged[at..at + 8] {
            *b ^= 0xa5;
        }
        std::fs::write(&seg.path, &damaged).unwrap();
        let cat = catalog(dir.path()).await;
        let t = cat.topic_table("t", "id-1", "").await.unwrap();
        let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
        assert_eq!(out.skipped.len(), 1, "{:?}", out.skipped);
        assert_eq!((out.skipped[0].first_offset, out.skipped[0].last_offset), (5, 9));
        assert_eq!(out.committed[&0], (0, 14), "the skipped range is covered, not retried forever");
        let offsets = scanned_offsets(&t).await;
        assert_eq!(offsets, (0..5).chain(10..15).collect::<Vec<_>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stopped_pass_commits_whole_batches_and_the_next_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[]));
        fill(&log, 0, 15);
        log.roll_now().unwrap();
        let cat = catalog(dir.path()).await;
        let t = cat.topic_table("t", "id-1", "").await.unwrap();
        let out = t.tier_until(std::slice::from_ref(&log), &TierLimits::default(), &AtomicBool::new(true)).await.unwrap();
        assert!(out.committed.is_empty(), "stopped before the first batch: {out:?}");
        let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
        assert_eq!(out.committed[&0], (0, 14));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn orphans_are_files_in_no_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[]));
        fill(&log, 0, 20);
        log.roll_now().unwrap();
        let cat = catalog(dir.path()).await;
        let t = cat.topic_table("t", "id-1", "").await.unwrap();
        t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
        let data = dir.path().join("iceberg/warehouse/kafka/t/data");
        let committed: Vec<_> = std::fs::read_dir(&data).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(committed.len(), 1, "{committed:?}");
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
        std::fs::File::options().write(true).open(&committed[0]).unwrap().set_modified(old).unwrap();
        let orphan = data.join("floe-crashed.parquet");
        let young = data.join("floe-in-flight.parquet");
        for p in [&orphan, &young] {
            std::fs::write(p, b"PAR1").unwrap();
        }
        std::fs::File::options().write(true).open(&orphan).unwrap().set_modified(old).unwrap();
        let hour = std::time::Duration::from_secs(3600);
        let want = vec![orphan.display().to_string()];
        assert_eq!(t.clean_orphans(hour, false).await.unwrap(), want);
        assert!(orphan.exists());
        assert_eq!(t.clean_orphans(hour, true).await.unwrap(), want);
        assert!(!orphan.exists() && young.exists() && committed[0].exists());
        assert_eq!(scanned_offsets(&t).await, (0..20).collect::<Vec<_>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn racing_writers_never_duplicate() {
        let dir = tempfile::tempdir().unwrap();
        let logs: Vec<Arc<PartitionLog>> = (0..2)
            .map(|p| Arc::new(open_log(&dir.path().join(format!("t-{p}")), p, &[("segment.bytes", "1500")])))
            .collect();
        for log in &logs {
            fill(log, 0, 100);
            log.roll_now().unwrap();
        }
        // Two catalogs, so two lock maps: as two processes would be.
        let (a, b) = (catalog(dir.path()).await, catalog(dir.path()).await);
        let ta = a.topic_table("t", "id-1", "identity(partition), hour(timestamp)").await.unwrap();
        let tb = b.topic_table("t", "id-1", "identity(partition), hour(timestamp)").await.unwrap();
        let limits = TierLimits { max_bytes_per_partition: 1, ..TierLimits::default() };
        for _ in 0..20 {
            let (ra, rb) = tokio::join!(ta.tier(&logs, &limits), tb.tier(&logs, &limits));
            for r in [ra, rb] {
                match r {
                    Ok(_) | Err(TieringError::StaleSnapshot { .. }) => {}
                    // SQLite can refuse a second writer outright; also not a commit.
                    Err(TieringError::Iceberg { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        }
        let next = ta.committed_next_offsets().await.unwrap();
        assert_eq!(next, BTreeMap::from([(0, 100), (1, 100)]));
        let offsets = scanned_offsets(&ta).await;
        assert_eq!(offsets.len(), 200, "every offset once");
        assert_eq!(offsets.iter().copied().collect::<BTreeSet<_>>().len(), 100);
    }

    async fn scanned_partition_offsets(t: &TopicTable) -> Vec<(i32, i64)> {
        let batches = scan_columns(t, &["partition", "offset"]).await;
        let mut v: Vec<(i32, i64)> = batches
            .iter()
            .flat_map(|b| {
                let p = b.column(0).as_primitive::<arrow_array::types::Int32Type>().values().to_vec();
                let o = b.column(1).as_primitive::<Int64Type>().values().to_vec();
                p.into_iter().zip(o)
            })
            .collect();
        v.sort_unstable();
        v
    }

    /// Two brokers (two catalogs: two lock maps), each leading one partition of the table.
    async fn two_writers(dir: &std::path::Path) -> (Vec<Arc<PartitionLog>>, TopicTable, TopicTable) {
        let logs: Vec<Arc<PartitionLog>> = (0..2)
            .map(|p| Arc::new(open_log(&dir.join(format!("t-{p}")), p, &[("segment.bytes", "1500")])))
            .collect();
        for log in &logs {
            fill(log, 0, 100);
            log.roll_now().unwrap();
        }
        let (a, b) = (catalog(dir).await, catalog(dir).await);
        let ta = a.topic_table("t", "id-1", "identity(partition)").await.unwrap().with_broker_id(1);
        let tb = b.topic_table("t", "id-1", "identity(partition)").await.unwrap().with_broker_id(2);
        (logs, ta, tb)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_of_another_partition_under_the_plan_is_not_a_conflict() {
        let dir = tempfile::tempdir().unwrap();
        let (logs, ta, tb) = two_writers(dir.path()).await;
        // A plans partition 0; B commits partition 1 meanwhile; A's commit goes on top of B's.
        let prepared = ta.prepare(&logs[..1], &TierLimits::default(), &AtomicBool::new(false)).await.unwrap();
        assert_eq!(prepared.ranges()[&0], (0, 99));
        let b_out = tb.tier(&logs[1..], &TierLimits::default()).await.unwrap();
        assert_eq!(b_out.committed[&1], (0, 99));
        let a_out = ta.commit(prepared).await.unwrap();
        assert_eq!(a_out.committed[&0], (0, 99));
        assert_eq!(a_out.next_offsets, BTreeMap::from([(0, 100), (1, 100)]), "planned on a stale table, reported from the fresh one");
        let table = ta.load().await.unwrap();
        let current = table.metadata().current_snapshot().unwrap();
        assert_eq!(current.parent_snapshot_id(), b_out.snapshot_id, "on top of B's commit, not over it");
        let summary = &current.summary().additional_properties;
        assert_eq!(summary["floe.next-offset.1"], "100", "the summary carries B's offsets");
        assert_eq!(summary[BROKER_ID_PROPERTY], "1");
        let want: Vec<(i32, i64)> = (0..2).flat_map(|p| (0..100).map(move |o| (p, o))).collect();
        assert_eq!(scanned_partition_offsets(&ta).await, want);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_deposed_writer_cannot_commit_a_partition_tiered_since_its_plan() {
        let dir = tempfile::tempdir().unwrap();
        let (logs, ta, tb) = two_writers(dir.path()).await;
        // A (the old leader of partition 0) plans it and stalls; B (the new leader) tiers it.
        let stale = ta.prepare(&logs[..1], &TierLimits::default(), &AtomicBool::new(false)).await.unwrap();
        let b_out = tb.tier(&logs[..1], &TierLimits::default()).await.unwrap();
        assert_eq!(b_out.committed[&0], (0, 99));
        match ta.commit(stale).await {
            Err(TieringError::StaleSnapshot { current, .. }) => assert_eq!(current, b_out.snapshot_id),
            other => panic!("the deposed writer's commit must fail: {other:?}"),
        }
        // A's next plan starts where B stopped: nothing left to do for partition 0.
        let again = ta.tier(&logs[..1], &TierLimits::default()).await.unwrap();
        assert!(again.committed.is_empty(), "{again:?}");
        let want: Vec<(i32, i64)> = (0..100).map(|o| (0, o)).collect();
        assert_eq!(scanned_partition_offsets(&ta).await, want, "every offset once");
        let summary = ta.load().await.unwrap().metadata().current_snapshot().unwrap().summary().additional_properties.clone();
        assert_eq!(summary[BROKER_ID_PROPERTY], "2");
    }

    /// Whole-path throughput: sealed segments → Arrow → Parquet (zstd) → commit.
    /// `cargo test -p floe-tiering -- --ignored --nocapture tier_throughput`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore]
    async fn tier_throughput() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(open_log(&dir.path().join("t-0"), 0, &[("segment.bytes", "8388608")]));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for b in 0..8000 {
            let recs: Vec<TestRecord> = (0..5)
                .map(|i| TestRecord {
                    key: Some(format!("k{b}-{i}").into_bytes()),
                    // Half-compressible values: 512 random bytes then 512 zeros.
                    value: Some((0..1024).map(|j| if j < 512 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x as u8 } else { 0 }).collect()),
                    headers: vec![],
                    timestamp: 1_700_000_000_000 + b,
                })
                .collect();
            log.append(&mut encode(&recs, floe_protocol::kafka_protocol::records::Compression::Lz4), 0).unwrap();
        }
        log.roll_now().unwrap();
        let bytes: u64 = log.sealed_segments().iter().map(|s| s.size_bytes).sum();
        let cat = catalog(dir.path()).await;
        let t = cat.topic_table("t", "id-1", "day(timestamp)").await.unwrap();
        let start = std::time::Instant::now();
        let out = t.tier(std::slice::from_ref(&log), &TierLimits { max_bytes_per_partition: u64::MAX, ..TierLimits::default() }).await.unwrap();
        let took = start.elapsed().as_secs_f64();
        assert_eq!(out.rows, 40_000);
        println!("tiered {bytes} segment bytes into {} Parquet bytes ({} files) in {took:.3}s: {:.1} MiB/s of segment, {:.0} records/s",
            out.bytes, out.files, bytes as f64 / took / 1048576.0, 40_000.0 / took);
    }
}
