//! `floe iceberg status` and `floe iceberg maintain`: what the catalog holds, and
//! maintenance run by hand (expiry, compaction), as text for people. Both read
//! or commit through the catalog only, so they are safe while a broker runs.

use crate::compaction::CompactionRequest;
use crate::text::count;
use crate::{CatalogConfig, IcebergCatalog, TieringError};
use floe_storage::clock::wall_ms;

/// `floe iceberg status`: what the configured catalog holds, per table: the
/// committed (next) offset of each partition and the totals of the current
/// snapshot. Reads the catalog only; safe while the broker runs.
///
/// # Errors
/// If the catalog cannot be opened or read.
pub async fn status(config: &CatalogConfig, namespace: &str) -> Result<String, TieringError> {
    use std::fmt::Write;
    let catalog_name = &config.name;
    let (catalog, tables) = open_and_list(config, namespace).await?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "catalog {catalog_name} ({}), namespace {namespace}: {}",
        config.describe(),
        count(tables.len(), "table")
    );
    for ident in tables {
        let table =
            catalog.catalog().load_table(&ident).await.map_err(|source| TieringError::Iceberg {
                operation: "load",
                table: ident.to_string(),
                source: Box::new(source),
            })?;
        let metadata = table.metadata();
        let summary = metadata
            .current_snapshot()
            .map(|s| s.summary().additional_properties.clone())
            .unwrap_or_default();
        let total = |k: &str| summary.get(k).cloned().unwrap_or_else(|| "0".into());
        // Each term by its column's name: day(event_time), not the field id.
        let schema = metadata.current_schema();
        let terms: Vec<String> = metadata
            .default_partition_spec()
            .fields()
            .iter()
            .map(|f| {
                let column = schema
                    .field_by_id(f.source_id)
                    .map_or_else(|| format!("field {}", f.source_id), |c| c.name.clone());
                format!("{}({column})", f.transform)
            })
            .collect();
        let _ = writeln!(
            out,
            "table {ident}: snapshots {}, current snapshot {}, rows {}, data files {}, bytes {}, partitioned by {}",
            metadata.snapshots().len(),
            metadata.current_snapshot_id().map_or_else(|| "none".to_string(), |id| id.to_string()),
            total("total-records"),
            total("total-data-files"),
            total("total-files-size"),
            if terms.is_empty() { "nothing (unpartitioned)".to_string() } else { terms.join(", ") },
        );
        for (p, next) in crate::offsets::committed_next_offsets(metadata) {
            let _ = writeln!(out, "  partition {p}: committed offset {next} (next to tier)");
        }
    }
    Ok(out)
}

/// The catalog and the tables of `namespace` in it (for the `floe iceberg` tools).
async fn open_and_list(
    config: &CatalogConfig,
    namespace: &str,
) -> Result<(IcebergCatalog, Vec<crate::iceberg::TableIdent>), TieringError> {
    let catalog = IcebergCatalog::open(config, namespace).await?;
    let ns = crate::iceberg::NamespaceIdent::new(namespace.to_string());
    let tables =
        catalog.catalog().list_tables(&ns).await.map_err(|source| TieringError::Iceberg {
            operation: "list",
            table: namespace.to_string(),
            source: Box::new(source),
        })?;
    Ok((catalog, tables))
}

/// `floe iceberg maintain`: expires the snapshots of every tiered table in
/// `namespace` (or of `only`) by `policy`, as the tiering thread does; with
/// `compaction`, compacts small data files and expires again (so the replaced
/// files are deleted when the policy lets their snapshots go); says what it did.
/// Safe beside a running broker: every step commits only on the snapshot it
/// planned on, and deletes only files no remaining snapshot reaches.
///
/// # Errors
/// [`TieringError`] if the catalog cannot be opened or listed; a table that fails
/// is reported in the text and the others go on.
pub async fn maintain(
    config: &CatalogConfig,
    namespace: &str,
    policy: crate::ExpiryPolicy,
    compaction: Option<CompactionRequest>,
    only: Option<&str>,
) -> Result<String, TieringError> {
    use std::fmt::Write;
    let (catalog, tables) = open_and_list(config, namespace).await?;
    let now_ms = wall_ms();
    let mut out = String::new();
    for ident in tables.into_iter().filter(|t| only.is_none_or(|o| t.name() == o)) {
        let name = ident.name().to_string();
        let result = async {
            let loaded = catalog.catalog().load_table(&ident).await.map_err(|source| {
                TieringError::Iceberg {
                    operation: "load",
                    table: ident.to_string(),
                    source: Box::new(source),
                }
            })?;
            let topic_id = loaded
                .metadata()
                .properties()
                .get(crate::catalog::TOPIC_ID_PROPERTY)
                .cloned()
                .unwrap_or_default();
            let table = catalog.topic_table(&name, &topic_id, "").await?;
            let mut expired = table.expire_snapshots(policy, now_ms).await?;
            let mut compacted = None;
            if let Some(c) = compaction {
                let report = table.compact(&c.policy(&table).await).await?;
                if report.snapshot_id.is_some() {
                    // The replaced files' snapshots may already be past the max age: let them go now.
                    let again = table.expire_snapshots(policy, wall_ms()).await?;
                    expired.expired += again.expired;
                    expired.snapshots_left = again.snapshots_left;
                    expired.deleted_files += again.deleted_files;
                    expired.deleted_metadata_files += again.deleted_metadata_files;
                }
                compacted = Some(report);
            }
            let stats = table.stats().await?;
            Ok::<_, TieringError>((expired, compacted, stats))
        }
        .await;
        let _ = match result {
            Ok((r, c, stats)) => {
                let _ = writeln!(
                    out,
                    "table {ident}: expired {}, {} left, deleted {} and {}",
                    count(r.expired, "snapshot"),
                    r.snapshots_left,
                    count(r.deleted_files, "file"),
                    count(r.deleted_metadata_files, "metadata file")
                );
                if let Some(c) = c {
                    let _ = writeln!(out, "table {ident}: compacted {} ({} bytes) of {} into {} ({} bytes); {} merged",
                        count(c.rewritten_files, "small data file"), c.rewritten_bytes, count(c.groups, "partition"), c.added_files, c.added_bytes,
                        count(if c.snapshot_id.is_some() { c.merged_manifests as u64 } else { 0 }, "manifest"));
                }
                writeln!(
                    out,
                    "table {ident}: {}, {}, {} metadata bytes",
                    count(stats.snapshots, "snapshot"),
                    count(stats.data_files, "data file"),
                    stats.metadata_bytes
                )
            }
            Err(e) => writeln!(out, "table {ident}: failed: {e}"),
        };
    }
    Ok(out)
}
