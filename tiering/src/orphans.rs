//! Orphan data files: Parquet files under a table's data directory that no
//! snapshot references — left by an attempt that crashed or was aborted
//! before its commit. They never count as tiered (only snapshots do); this
//! finds them, and deletes them when asked.
//!
//! Safe to delete only when no write to the table is in flight: callers hold
//! the table's writer lock ([`crate::table::TopicTable::clean_orphans`]) and
//! only files older than a threshold are considered.
//!
//! Local (`file://`) warehouses only: FileIO has no listing, so on an object
//! store (S3) the table's data files cannot be enumerated through it; there
//! orphans are left for the store's lifecycle rules or an external
//! `remove_orphan_files` job ([`is_listable`] says which case applies).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use iceberg::table::Table;

use crate::catalog_config::local_path;
use crate::error::{Result, TieringError};

/// Whether the table's files can be listed here (its location is a local directory).
pub fn is_listable(table: &Table) -> bool {
    local_path(table.metadata().location()).is_some()
}

/// Every data file path referenced by any snapshot of `table` (not only the current ancestry).
///
/// # Errors
/// [`TieringError::Iceberg`] if a manifest list or manifest cannot be read.
pub async fn referenced_files(table: &Table) -> Result<HashSet<PathBuf>> {
    let ident = table.identifier().to_string();
    let mut files = HashSet::new();
    for snapshot in table.metadata().snapshots() {
        let list = table.manifest_list_reader(snapshot).load().await.map_err(TieringError::iceberg("read", &ident))?;
        for manifest in list.entries() {
            let m = manifest.load_manifest(table.file_io()).await.map_err(TieringError::iceberg("read", &ident))?;
            for entry in m.entries() {
                if let Some(p) = local_path(entry.file_path()) {
                    files.insert(p);
                }
            }
        }
    }
    Ok(files)
}

fn walk(dir: &Path, out: &mut Vec<(PathBuf, SystemTime)>) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            walk(&entry.path(), out)?;
        } else if entry.path().extension().is_some_and(|e| e == "parquet") {
            out.push((entry.path(), meta.modified()?));
        }
    }
    Ok(())
}

/// Parquet files under the table's `data/` directory that no snapshot references
/// and that were last modified more than `older_than` ago.
///
/// # Errors
/// [`TieringError::Iceberg`] reading manifests; [`TieringError::SegmentIo`] listing the directory.
pub async fn find_orphans(table: &Table, older_than: Duration) -> Result<Vec<PathBuf>> {
    let Some(root) = local_path(table.metadata().location()) else { return Ok(Vec::new()) };
    let data = root.join("data");
    let referenced = referenced_files(table).await?;
    let mut files = Vec::new();
    walk(&data, &mut files).map_err(|source| TieringError::SegmentIo { path: data.clone(), source })?;
    let now = SystemTime::now();
    let mut orphans: Vec<PathBuf> = files
        .into_iter()
        .filter(|(p, modified)| {
            !referenced.contains(p) && now.duration_since(*modified).unwrap_or_default() >= older_than
        })
        .map(|(p, _)| p)
        .collect();
    orphans.sort();
    Ok(orphans)
}
