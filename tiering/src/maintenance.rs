//! Table maintenance: snapshot expiry and the files it leaves behind.
//!
//! Every tiering commit adds a snapshot, a manifest list and a metadata file.
//! Expiry removes the snapshots older than a maximum age, keeping the most recent
//! `min_to_keep` (and always the current one), with the iceberg crate's
//! `ExpireSnapshotsAction` (Java's `RemoveSnapshots` selection), committed through
//! the same guard as a tiering commit: it applies only on the snapshot it was
//! planned on, and holds the table's writer lock, so no tiering attempt of this
//! process runs meanwhile.
//!
//! Once committed, the files only the expired snapshots reached are deleted: their
//! manifest lists, and manifests and data files no remaining snapshot references
//! (for data files: none, until compaction replaces them; a file a remaining
//! snapshot lists only as `DELETED` is not referenced). Metadata files
//! that fell out of the table's metadata log (`write.metadata.previous-versions-max`)
//! are deleted when `write.metadata.delete-after-commit.enabled` is true, as Iceberg
//! names and does it.
//!
//! The exactly-once guard survives expiry: every commit's summary carries the next
//! offset of every partition ever tiered (`floe.next-offset.*`), so the current
//! snapshot alone says what is tiered.
//!
//! Order and crashes, as Java's: commit, then delete. A crash between the two
//! (failpoint `tiering.expire.committed`) leaves files no snapshot references: never
//! read, and data files among them are removed by the orphan cleanup.

use std::collections::HashSet;

use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use tracing::{info, warn};

use crate::error::{Result, TieringError};
use crate::guard::ExpectSnapshot;
use crate::table::TopicTable;

/// The table property that turns metadata-file cleanup on (Iceberg's name).
pub const METADATA_DELETE_AFTER_COMMIT: &str = "write.metadata.delete-after-commit.enabled";
/// How many previous metadata files the metadata log keeps (Iceberg's name).
pub const METADATA_PREVIOUS_VERSIONS_MAX: &str = "write.metadata.previous-versions-max";

/// Which snapshots expire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpiryPolicy {
    /// Snapshots older than this (by their commit time) expire.
    pub max_age_ms: i64,
    /// ... but the most recent this many are kept (at least 1).
    pub min_to_keep: usize,
}

/// What an expiry did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpiryReport {
    /// Snapshots removed from the table.
    pub expired: usize,
    /// Snapshots left.
    pub snapshots_left: usize,
    /// Manifest lists, manifests and data files deleted.
    pub deleted_files: usize,
    /// Old metadata files deleted.
    pub deleted_metadata_files: usize,
}

/// Every file the table's snapshots reach: manifest lists, manifests, live data files.
async fn reachable_files(table: &Table) -> Result<HashSet<String>> {
    let ident = table.identifier().to_string();
    let mut files = HashSet::new();
    let mut manifests_seen = HashSet::new();
    for snapshot in table.metadata().snapshots() {
        files.insert(snapshot.manifest_list().to_string());
        let list = table
            .manifest_list_reader(snapshot)
            .load()
            .await
            .map_err(TieringError::iceberg("read", &ident))?;
        for manifest in list.entries() {
            if !manifests_seen.insert(manifest.manifest_path.clone()) {
                continue;
            }
            files.insert(manifest.manifest_path.clone());
            let m = manifest
                .load_manifest(table.file_io())
                .await
                .map_err(TieringError::iceberg("read", &ident))?;
            // A DELETED entry (a compaction's replaced file) is not a reference: once the
            // snapshots that still had the file alive expire, the file goes (as Java's cleanup).
            files.extend(
                m.entries()
                    .iter()
                    .filter(|e| e.is_alive())
                    .map(|entry| entry.file_path().to_string()),
            );
        }
    }
    Ok(files)
}

/// The metadata files a table's metadata still lists (its log), and its current one.
fn listed_metadata(metadata: &TableMetadata, location: Option<&str>) -> HashSet<String> {
    metadata
        .metadata_log()
        .iter()
        .map(|m| m.metadata_file.clone())
        .chain(location.map(str::to_string))
        .collect()
}

/// Whether the table asks for old metadata files to be deleted.
fn deletes_old_metadata(metadata: &TableMetadata) -> bool {
    metadata
        .properties()
        .get(METADATA_DELETE_AFTER_COMMIT)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Deletes `paths` through the table's FileIO; how many went. A failure is logged
/// and skipped: the file is unreferenced either way.
async fn delete_all(table: &Table, paths: impl IntoIterator<Item = String>, what: &str) -> usize {
    let mut deleted = 0;
    for path in paths {
        match table.file_io().delete(&path).await {
            Ok(()) => deleted += 1,
            Err(e) => {
                warn!(table = %table.identifier(), path, error = %e, "cannot delete an unreferenced {what}")
            }
        }
    }
    deleted
}

impl TopicTable {
    /// Expires snapshots by `policy` (as of `now_ms`) and deletes what only they reached
    /// (see the module doc). Does nothing when no snapshot is old enough.
    ///
    /// # Errors
    /// [`TieringError::Iceberg`] loading, reading manifests or committing;
    /// [`TieringError::StaleSnapshot`]-like commit failures when the table moved.
    pub async fn expire_snapshots(
        &self,
        policy: ExpiryPolicy,
        now_ms: i64,
    ) -> Result<ExpiryReport> {
        let _writer = self.writer_lock().await;
        let before = self.load().await?;
        let cutoff = now_ms.saturating_sub(policy.max_age_ms);
        let min_to_keep = policy.min_to_keep.max(1);
        let count = before.metadata().snapshots().len();
        let old = before.metadata().snapshots().filter(|s| s.timestamp_ms() < cutoff).count();
        if old == 0 || count <= min_to_keep {
            return Ok(ExpiryReport { snapshots_left: count, ..ExpiryReport::default() });
        }
        let reachable_before = reachable_files(&before).await?;
        let tx = Transaction::new(&before);
        let expire = tx.expire_snapshots().expire_older_than_ms(cutoff).retain_last(min_to_keep);
        let tx =
            expire.apply(tx).map_err(TieringError::iceberg("expire snapshots", self.ident()))?;
        let guarded = ExpectSnapshot {
            inner: self.catalog(),
            ident: self.ident().clone(),
            expected: before.metadata().current_snapshot_id(),
        };
        let after = tx
            .commit(&guarded)
            .await
            .map_err(TieringError::iceberg("expire snapshots", self.ident()))?;
        // Committed, nothing deleted yet: a crash here leaves unreferenced files only.
        self.failpoint("tiering.expire.committed")?;
        let reachable_after = reachable_files(&after).await?;
        let unreferenced: Vec<String> =
            reachable_before.difference(&reachable_after).cloned().collect();
        let deleted_files = delete_all(&after, unreferenced, "file of an expired snapshot").await;
        let deleted_metadata_files = self.delete_dropped_metadata(&before, &after).await;
        let report = ExpiryReport {
            expired: count.saturating_sub(after.metadata().snapshots().len()),
            snapshots_left: after.metadata().snapshots().len(),
            deleted_files,
            deleted_metadata_files,
        };
        info!(table = %self.ident(), expired = report.expired, left = report.snapshots_left, files = report.deleted_files,
            metadata_files = report.deleted_metadata_files, "expired snapshots");
        Ok(report)
    }

    /// With `write.metadata.delete-after-commit.enabled`, deletes the metadata files
    /// `before` listed that `after` no longer does; how many.
    pub(crate) async fn delete_dropped_metadata(&self, before: &Table, after: &Table) -> usize {
        if !deletes_old_metadata(after.metadata()) {
            return 0;
        }
        let still = listed_metadata(after.metadata(), after.metadata_location());
        let dropped: Vec<String> = listed_metadata(before.metadata(), before.metadata_location())
            .into_iter()
            .filter(|f| !still.contains(f))
            .collect();
        delete_all(after, dropped, "old metadata file").await
    }
}

/// How big a table's state is, for the maintenance metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Snapshots in the metadata.
    pub snapshots: usize,
    /// Live data files of the current snapshot.
    pub data_files: u64,
    /// Bytes a reader opens to plan a scan: the metadata file, the manifest list and its manifests.
    pub metadata_bytes: u64,
}

impl TopicTable {
    /// The table's [`TableStats`] as the catalog has it now.
    ///
    /// # Errors
    /// [`TieringError::Iceberg`] loading the table or reading its manifest list.
    pub async fn stats(&self) -> Result<TableStats> {
        let table = self.load().await?;
        let metadata = table.metadata();
        let mut stats =
            TableStats { snapshots: metadata.snapshots().len(), ..TableStats::default() };
        let size = |path: String| {
            let io = table.file_io().clone();
            async move { io.new_input(path).ok()?.metadata().await.ok().map(|m| m.size) }
        };
        if let Some(location) = table.metadata_location() {
            stats.metadata_bytes += size(location.to_string()).await.unwrap_or(0);
        }
        if let Some(snapshot) = metadata.current_snapshot() {
            stats.data_files = snapshot
                .summary()
                .additional_properties
                .get("total-data-files")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            stats.metadata_bytes += size(snapshot.manifest_list().to_string()).await.unwrap_or(0);
            let list = table
                .manifest_list_reader(snapshot)
                .load()
                .await
                .map_err(TieringError::iceberg("read", self.ident()))?;
            stats.metadata_bytes +=
                list.entries().iter().map(|m| m.manifest_length.max(0) as u64).sum::<u64>();
        }
        Ok(stats)
    }

    /// The table's `write.target-file-size-bytes` property, if it has one.
    ///
    /// # Errors
    /// [`TieringError::Iceberg`] loading the table.
    pub async fn target_file_size_property(&self) -> Result<Option<u64>> {
        let table = self.load().await?;
        Ok(table
            .metadata()
            .properties()
            .get(crate::compaction::TARGET_FILE_SIZE_PROPERTY)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|n| *n > 0))
    }
}
