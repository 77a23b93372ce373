//! Committing a prepared pass ([`TopicTable::commit`]) exactly once, or not at all: a
//! shared table's `__log` rows first, then a typed table's dead letters, then the
//! table's own data files, each conditional on the committed offsets it planned from
//! and guarded against a rebase (the module doc of [`super`] says why).

use iceberg::transaction::{ApplyTransactionAction, Transaction};
use tracing::{debug, error, warn};

use super::{PreparedTier, TierOutcome, TopicTable, BROKER_ID_PROPERTY};
use crate::error::{Result, TieringError};
use crate::guard::{ExpectSnapshot, MOVED};
use crate::offsets::{
    committed_log_starts, committed_next_offsets, conflicting_partition, summary_properties,
};

/// How many times [`TopicTable::commit`] tries when other partitions keep being
/// committed under it (each try re-checks its own partitions' offsets).
const MAX_COMMIT_ATTEMPTS: u32 = 8;

impl TopicTable {
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
        let PreparedTier {
            _writer,
            base_snapshot: planned_snapshot,
            planned,
            mut outcome,
            data_files,
            ..
        } = prepared;
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
                let stale = || TieringError::StaleSnapshot {
                    table: self.ident.to_string(),
                    planned: planned_snapshot,
                    current: now,
                };
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
            let mut properties = summary_properties(
                &outcome.committed,
                &next,
                &committed_log_starts(current.metadata()),
            );
            if let Some(id) = self.broker_id {
                properties.insert(BROKER_ID_PROPERTY.to_string(), id.to_string());
            }
            let append = tx
                .fast_append()
                .with_check_duplicate(false)
                .add_data_files(data_files.clone())
                .set_snapshot_properties(properties);
            let tx = append.apply(tx).map_err(TieringError::iceberg("commit", &self.ident))?;
            let guarded = ExpectSnapshot {
                inner: self.catalog.clone(),
                ident: self.ident.clone(),
                expected: base_snapshot,
            };
            match tx.commit(&guarded).await {
                Ok(t) => break (current, t),
                // Moved between the load above and the commit: look again.
                Err(e) if e.message().starts_with(MOVED) => {
                    debug!(table = %self.ident, error = %e, "table moved during the commit")
                }
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
}
