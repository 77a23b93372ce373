//! Orphan data files: Parquet files under a table's data directory that no
//! snapshot references — left by an attempt that crashed or was aborted
//! before its commit. They never count as tiered (only snapshots do); this
//! finds them, and deletes them when asked.
//!
//! Safe to delete only when no write to the table is in flight: callers hold
//! the table's writer lock ([`crate::table::TopicTable::clean_orphans`]) and
//! only files older than a threshold are considered.
//!
//! Local (`file://`) warehouses are walked on disk; S3 ones are listed with
//! an OpenDAL operator made from the same `s3.*` properties FileIO uses
//! (FileIO itself cannot list). Other object stores are skipped
//! ([`is_listable`] says which case applies).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use iceberg::table::Table;

use crate::catalog_config::{is_s3, local_path};
use crate::error::{Result, TieringError};

/// Whether the table's files can be listed here (its location is a local directory or on S3).
pub fn is_listable(table: &Table) -> bool {
    let location = table.metadata().location();
    local_path(location).is_some() || is_s3(location)
}

/// Every data file location any snapshot of `table` reads (its live entries), as written in the manifests.
async fn referenced_locations(table: &Table) -> Result<HashSet<String>> {
    let ident = table.identifier().to_string();
    let mut files = HashSet::new();
    for snapshot in table.metadata().snapshots() {
        let list = table
            .manifest_list_reader(snapshot)
            .load()
            .await
            .map_err(TieringError::iceberg("read", &ident))?;
        for manifest in list.entries() {
            let m = manifest
                .load_manifest(table.file_io())
                .await
                .map_err(TieringError::iceberg("read", &ident))?;
            // A file listed only as DELETED (replaced by compaction) is read by no snapshot.
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

/// Parquet objects under the S3 table's `data/` prefix that no snapshot
/// references and that were last modified more than `older_than` ago, as
/// `s3://bucket/key` locations. `props` are the catalog's `s3.*` properties.
///
/// # Errors
/// [`TieringError::Iceberg`] reading manifests; [`TieringError::ObjectStore`] listing the bucket.
pub async fn find_s3_orphans(
    table: &Table,
    props: &std::collections::HashMap<String, String>,
    older_than: Duration,
) -> Result<Vec<String>> {
    use opendal::Configurator;
    let location = table.metadata().location().trim_end_matches('/');
    let Some((scheme, rest)) = location.split_once("://") else { return Ok(Vec::new()) };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let store_err = |source: opendal::Error| TieringError::ObjectStore {
        location: location.to_string(),
        source,
    };
    let mut cfg = opendal::services::S3Config::default();
    cfg.bucket = bucket.to_string();
    cfg.root = Some("/".to_string());
    cfg.endpoint = props.get("s3.endpoint").cloned();
    cfg.region = props.get("s3.region").cloned();
    cfg.access_key_id = props.get("s3.access-key-id").cloned();
    cfg.secret_access_key = props.get("s3.secret-access-key").cloned();
    // As FileIO does (Iceberg's default): virtual-host style unless path style is asked for.
    cfg.enable_virtual_host_style =
        !props.get("s3.path-style-access").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let op = opendal::Operator::new(cfg.into_builder()).map_err(store_err)?.finish();
    let referenced = referenced_locations(table).await?;
    let data = if prefix.is_empty() { "data/".to_string() } else { format!("{prefix}/data/") };
    let entries = op.list_with(&data).recursive(true).await.map_err(store_err)?;
    let now = SystemTime::now();
    let mut orphans: Vec<String> = entries
        .into_iter()
        .filter(|e| e.path().ends_with(".parquet"))
        .filter(|e| {
            // An object whose age is unknown is treated as young: never deleted.
            e.metadata().last_modified().is_some_and(|t| {
                now.duration_since(SystemTime::from(t)).unwrap_or_default() >= older_than
            })
        })
        .map(|e| format!("{scheme}://{bucket}/{}", e.path().trim_start_matches('/')))
        .filter(|l| !referenced.contains(l))
        .collect();
    orphans.sort();
    Ok(orphans)
}

/// Every data file path referenced by any snapshot of `table` (not only the current ancestry).
///
/// # Errors
/// [`TieringError::Iceberg`] if a manifest list or manifest cannot be read.
pub async fn referenced_files(table: &Table) -> Result<HashSet<PathBuf>> {
    let ident = table.identifier().to_string();
    let mut files = HashSet::new();
    for snapshot in table.metadata().snapshots() {
        let list = table
            .manifest_list_reader(snapshot)
            .load()
            .await
            .map_err(TieringError::iceberg("read", &ident))?;
        for manifest in list.entries() {
            let m = manifest
                .load_manifest(table.file_io())
                .await
                .map_err(TieringError::iceberg("read", &ident))?;
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
    walk(&data, &mut files)
        .map_err(|source| TieringError::SegmentIo { path: data.clone(), source })?;
    let now = SystemTime::now();
    let mut orphans: Vec<PathBuf> = files
        .into_iter()
        .filter(|(p, modified)| {
            !referenced.contains(p)
                && now.duration_since(*modified).unwrap_or_default() >= older_than
        })
        .map(|(p, _)| p)
        .collect();
    orphans.sort();
    Ok(orphans)
}
