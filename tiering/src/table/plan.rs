//! Planning one pass over a table ([`TopicTable::prepare`]): the writer locks, where the
//! table stands (and a typed table's dead-letter table, a shared table's `__log`), the
//! sinks the partitions are walked into ([`super::walk`]), and the pass's end: a
//! [`PreparedTier`] carrying its companions' own prepared commits.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use floe_storage::PartitionLog;
use iceberg::spec::DataFile;
use tokio::sync::OwnedMutexGuard;

use super::{PreparedTier, TierLimits, TierOutcome, TopicTable};
use crate::convert::RowLayout;
use crate::error::Result;
use crate::offsets::committed_next_offsets;
use crate::sink::{DeadLetters, Sink};

/// One pass of [`TopicTable::prepare`]: its writer locks, where its tables stood when it
/// was planned, its sinks, and what the walk covered so far.
pub(super) struct Pass {
    /// This process's writer lock of the table, held until the pass is committed or dropped.
    writer_lock: OwnedMutexGuard<()>,
    /// The snapshot the plan is based on.
    base_snapshot: Option<i64>,
    /// Per partition, the committed next offset the plan started from.
    pub(super) next: BTreeMap<i32, i64>,
    /// A typed table's dead-letter writer lock (taken second).
    dead_lock: Option<OwnedMutexGuard<()>>,
    /// The table's Parquet writers (and a typed table's dead letters).
    pub(super) sink: Sink,
    /// A shared table's `__log` side (its writer lock taken last).
    pub(super) log_side: Option<LogSide>,
    /// The rows' layout: lossless for a shared table, raw otherwise.
    pub(super) layout: RowLayout,
    /// Per partition the range covered, and the batches skipped.
    pub(super) outcome: TierOutcome,
    /// `stop` was seen: no batch is read after it.
    pub(super) stopped: bool,
}

/// A shared table's `__log` side of one pass: its writer lock, where it
/// stands, what was written to it.
pub(super) struct LogSide {
    lock: OwnedMutexGuard<()>,
    pub(super) next: BTreeMap<i32, i64>,
    snapshot: Option<i64>,
    pub(super) sink: Sink,
    /// Partitions with `__log` rows in this pass.
    pub(super) partitions: BTreeSet<i32>,
}

impl TopicTable {
    /// The first half of [`TopicTable::tier_until`]: plans from the table's
    /// committed offsets, converts the sealed segments beyond them and writes
    /// the data files, committing nothing. The writer lock of this process is
    /// held until the [`PreparedTier`] is committed or dropped.
    ///
    /// # Errors
    /// [`TieringError::Iceberg`](crate::TieringError::Iceberg) and
    /// [`TieringError::SegmentIo`](crate::TieringError::SegmentIo) (written files are orphans).
    pub async fn prepare(
        &self,
        partitions: &[Arc<PartitionLog>],
        limits: &TierLimits,
        stop: &AtomicBool,
    ) -> Result<PreparedTier> {
        let mut pass = self.plan(limits).await?;
        for log in partitions {
            self.walk_partition(&mut pass, log, limits, stop).await?;
        }
        pass.finish().await
    }

    /// Takes the writer locks (the table's, a typed table's dead-letter table's, a shared
    /// table's `__log`'s, in that order), loads where each table stands, opens the sinks.
    async fn plan(&self, limits: &TierLimits) -> Result<Pass> {
        let writer_lock = self.lock.clone().lock_owned().await;
        let table = self.load().await?;
        let base_snapshot = table.metadata().current_snapshot_id();
        let next = committed_next_offsets(table.metadata());
        let commit_id = uuid::Uuid::new_v4();
        // A typed table's dead-letter table is planned with it, under its own writer lock (taken second).
        let (dead_lock, dead) = match &self.typed {
            Some(t) => {
                let lock = t.dead_letters.lock.clone().lock_owned().await;
                (
                    Some(lock),
                    Some(DeadLetters::new(
                        t.schemas.clone(),
                        t.layout,
                        t.dead_letters.load().await?,
                    )?),
                )
            }
            None => (None, None),
        };
        let sink = Sink::new(table, limits, format!("floe-{commit_id}"), dead)?;
        // A shared table's `__log` is planned with it too, under its writer lock (taken last).
        let log_side = match &self.log_table {
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
        Ok(Pass {
            writer_lock,
            base_snapshot,
            next,
            dead_lock,
            sink,
            log_side,
            layout,
            outcome: TierOutcome::default(),
            stopped: false,
        })
    }
}

impl Pass {
    /// Closes the sinks: the pass's [`PreparedTier`], with a shared table's `__log` rows
    /// and a typed table's dead letters as its companions. A pass that covered no
    /// offsets prepares nothing (its next offsets are the plan's).
    async fn finish(self) -> Result<PreparedTier> {
        let Pass {
            writer_lock, base_snapshot, next, dead_lock, sink, log_side, mut outcome, ..
        } = self;
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
                Some(dead_letters_prepared(lock, files, &dead, &mut outcome))
            }
            _ => None,
        };
        Ok(PreparedTier {
            _writer: writer_lock,
            base_snapshot,
            planned: next,
            outcome,
            data_files,
            dead_letters,
            log_rows,
        })
    }
}

/// A typed table's dead letters of a pass as a commit of their own (counted in the
/// pass's `outcome`): the pass's ranges of the partitions with dead letters, each from
/// where the dead-letter table stands.
fn dead_letters_prepared(
    lock: OwnedMutexGuard<()>,
    files: Vec<DataFile>,
    dead: &DeadLetters,
    outcome: &mut TierOutcome,
) -> Box<PreparedTier> {
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
    Box::new(PreparedTier {
        _writer: lock,
        base_snapshot: dead.table().metadata().current_snapshot_id(),
        planned: dead.next.clone(),
        outcome: dead_outcome,
        data_files: files,
        dead_letters: None,
        log_rows: None,
    })
}

impl LogSide {
    /// The `__log` commit of a pass tiering `committed`: its partitions with rows,
    /// each from where the `__log` table stands; `None` without rows.
    async fn prepared(
        self,
        committed: &BTreeMap<i32, (i64, i64)>,
    ) -> Result<Option<Box<PreparedTier>>> {
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
