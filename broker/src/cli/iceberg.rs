//! `floe iceberg`: the Iceberg tables a broker tiers its topics into, read
//! straight from the catalog its settings name (`--config`, `FLOE_*`,
//! `--override`, `--data-dir`), not through the Kafka protocol: `status`,
//! `tables`, `snapshots` and `maintain`.
//!
//! Unlike the other admin groups these run beside the broker's files (or its
//! REST or SQL catalog), so they take the broker's settings, not `--brokers`.

use std::path::PathBuf;

use anyhow::Context;
use floe_broker::config::{ConfigBuilder, Layer};
use floe_tiering::iceberg::spec::{FormatVersion, SnapshotRef, TableMetadata};
use floe_tiering::iceberg::{NamespaceIdent, TableIdent};
use floe_tiering::{CatalogConfig, IcebergCatalog};
use serde_json::{json, Map, Value};

use super::admin::{exit_code, CliFailure};
use super::output::{Format, Output, Table};

/// Where the catalog is: the flags every reading command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct CatalogArgs {
    /// Data directory of the broker (the embedded catalog is DIR/iceberg/catalog.db).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The catalog's name (`floe.iceberg.catalog-name`).
    #[arg(long)]
    pub catalog_name: Option<String>,
    /// The namespace (`floe.iceberg.namespace`).
    #[arg(long)]
    pub namespace: Option<String>,
}

/// `floe iceberg ...`.
#[derive(Debug, clap::Subcommand)]
pub enum IcebergCommand {
    /// Prints each tiered table's committed offsets and totals, read from the
    /// catalog the broker's settings name (`--config`, `FLOE_*`, `--override`
    /// work as for the broker: `floe --config floe.toml iceberg status`).
    ///
    /// Example:
    ///   floe iceberg status --data-dir ./floe-data
    #[command(verbatim_doc_comment)]
    Status {
        #[command(flatten)]
        catalog: CatalogArgs,
    },
    /// Lists the tiered tables: format version, current snapshot, and the
    /// current snapshot's data files, records and bytes. Reads the catalog the
    /// broker's settings name, as `status` does.
    ///
    /// Examples:
    ///   floe iceberg tables --data-dir ./floe-data
    ///   floe --config floe.toml iceberg tables --format json
    #[command(verbatim_doc_comment)]
    Tables {
        #[command(flatten)]
        catalog: CatalogArgs,
        /// Output format: `table`, `json` or `yaml`.
        #[arg(long, short = 'f', value_enum, default_value = "table")]
        format: Format,
    },
    /// Lists a table's snapshots, oldest first: id, parent, time, operation
    /// (`append`, `replace` from compaction, `delete`...) and what each
    /// added and deleted (data files, records).
    ///
    /// Examples:
    ///   floe iceberg snapshots orders --data-dir ./floe-data
    ///   floe iceberg snapshots orders --format yaml
    #[command(verbatim_doc_comment)]
    Snapshots {
        /// The table (its topic's name).
        table: String,
        #[command(flatten)]
        catalog: CatalogArgs,
        /// Output format: `table`, `json` or `yaml`.
        #[arg(long, short = 'f', value_enum, default_value = "table")]
        format: Format,
    },
    /// Maintains the tiered tables now, as the tiering thread does every
    /// `floe.iceberg.maintenance-interval-ms`: expires old snapshots and deletes the
    /// files only they reached, then rewrites each partition's small data files into
    /// files of the target size (a `replace` snapshot), then expires again so the
    /// replaced files go too. Safe while the broker runs: each step commits only on
    /// the snapshot it planned on.
    ///
    /// Example:
    ///   floe iceberg maintain --data-dir ./floe-data --table orders --max-age-ms 0
    #[command(verbatim_doc_comment)]
    Maintain {
        /// Data directory of the broker (the embedded catalog is DIR/iceberg/catalog.db).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// Only this table (its topic's name).
        #[arg(long)]
        table: Option<String>,
        /// Snapshots older than this expire (default `floe.iceberg.snapshot.max-age-ms`).
        #[arg(long, value_name = "MS")]
        max_age_ms: Option<i64>,
        /// Keep at least this many recent snapshots (default `floe.iceberg.snapshot.min-to-keep`).
        #[arg(long, value_name = "N")]
        min_to_keep: Option<usize>,
        /// Size compaction writes files at (default: the table's `write.target-file-size-bytes`,
        /// else `floe.iceberg.target-file-size-bytes`).
        #[arg(long, value_name = "BYTES")]
        target_file_size_bytes: Option<u64>,
        /// Expire snapshots only; leave small files alone.
        #[arg(long)]
        no_compact: bool,
    },
}

/// Runs a `floe iceberg` command with the broker's settings in `builder`
/// (file, environment, `--override` already loaded); returns the exit code.
pub fn run(command: IcebergCommand, builder: ConfigBuilder) -> u8 {
    match run_inner(command, builder) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            exit_code(&e)
        }
    }
}

fn run_inner(command: IcebergCommand, mut builder: ConfigBuilder) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    match command {
        IcebergCommand::Maintain {
            data_dir,
            table,
            max_age_ms,
            min_to_keep,
            target_file_size_bytes,
            no_compact,
        } => {
            if let Some(dir) = data_dir {
                builder.set("log.dirs", dir.display().to_string(), Layer::CommandLine)?;
            }
            let config = builder.build()?;
            let tiering = &config.tiering;
            let catalog = tiering.catalog.catalog_config(&config.data_dir, &tiering.catalog_name);
            let policy = floe_tiering::ExpiryPolicy {
                max_age_ms: max_age_ms.unwrap_or(tiering.snapshot_max_age_ms),
                min_to_keep: min_to_keep.unwrap_or(tiering.snapshot_min_to_keep).max(1),
            };
            let compaction = (!no_compact).then_some(floe_tiering::compaction::CompactionRequest {
                target_file_size: target_file_size_bytes,
                default_target_file_size: tiering.target_file_size,
                min_input_files: tiering.compaction_min_input_files,
                max_bytes_per_run: tiering.compaction_max_bytes_per_run,
            });
            let text = runtime.block_on(floe_tiering::report::maintain(
                &catalog,
                &tiering.namespace,
                policy,
                compaction,
                table.as_deref(),
            ))?;
            print!("{text}");
        }
        IcebergCommand::Status { catalog } => {
            let (config, namespace) = catalog_config(builder, &catalog)?;
            let text = runtime.block_on(floe_tiering::report::status(&config, &namespace))?;
            print!("{text}");
        }
        IcebergCommand::Tables { catalog, format } => {
            let (config, namespace) = catalog_config(builder, &catalog)?;
            runtime.block_on(tables(&config, &namespace, Output { format }))?;
        }
        IcebergCommand::Snapshots { table, catalog, format } => {
            let (config, namespace) = catalog_config(builder, &catalog)?;
            runtime.block_on(snapshots(&config, &namespace, &table, Output { format }))?;
        }
    }
    Ok(())
}

/// The catalog and namespace the settings and the flags name.
fn catalog_config(
    mut builder: ConfigBuilder,
    args: &CatalogArgs,
) -> anyhow::Result<(CatalogConfig, String)> {
    let flags = [
        ("log.dirs", args.data_dir.as_ref().map(|p| p.display().to_string())),
        ("floe.iceberg.catalog-name", args.catalog_name.clone()),
        ("floe.iceberg.namespace", args.namespace.clone()),
    ];
    for (key, value) in flags {
        if let Some(v) = value {
            builder.set(key, v, Layer::CommandLine)?;
        }
    }
    let config = builder.build()?;
    let tiering = &config.tiering;
    Ok((
        tiering.catalog.catalog_config(&config.data_dir, &tiering.catalog_name),
        tiering.namespace.clone(),
    ))
}

/// Opens the catalog as `floe iceberg status` does, once sure an embedded
/// one exists (opening would create it: a mistyped --data-dir should say so).
async fn open(config: &CatalogConfig, namespace: &str) -> anyhow::Result<IcebergCatalog> {
    if let Some(db) = config.sqlite_path().filter(|db| !db.exists()) {
        return Err(CliFailure::NotFound(format!(
            "no Iceberg catalog at {}: is --data-dir (or log.dirs) the broker's data directory? A broker creates it when it first tiers a topic",
            db.display()
        ))
        .into());
    }
    IcebergCatalog::open(config, namespace)
        .await
        .with_context(|| format!("cannot open the catalog {} ({})", config.name, config.describe()))
}

/// A summary total of the current snapshot (`total-records`...), 0 if absent.
fn total(metadata: &TableMetadata, key: &str) -> u64 {
    metadata
        .current_snapshot()
        .and_then(|s| s.summary().additional_properties.get(key))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn format_version(v: FormatVersion) -> u8 {
    match v {
        FormatVersion::V1 => 1,
        FormatVersion::V2 => 2,
        FormatVersion::V3 => 3,
    }
}

pub async fn tables(config: &CatalogConfig, namespace: &str, out: Output) -> anyhow::Result<()> {
    let catalog = open(config, namespace).await?;
    let ns = NamespaceIdent::new(namespace.to_string());
    let mut idents = catalog
        .catalog()
        .list_tables(&ns)
        .await
        .with_context(|| format!("cannot list the tables of namespace {namespace}"))?;
    idents.sort_by(|a, b| a.name().cmp(b.name()));
    let mut rows = Vec::new();
    for ident in idents {
        let table = catalog
            .catalog()
            .load_table(&ident)
            .await
            .with_context(|| format!("cannot load table {ident}"))?;
        let metadata = table.metadata();
        let committed: Map<String, Value> = floe_tiering::offsets::committed_next_offsets(metadata)
            .into_iter()
            .map(|(p, next)| (p.to_string(), json!(next)))
            .collect();
        rows.push(json!({
            "table": ident.name(),
            "namespace": namespace,
            "format_version": format_version(metadata.format_version()),
            "current_snapshot_id": metadata.current_snapshot_id(),
            "snapshots": metadata.snapshots().len(),
            "data_files": total(metadata, "total-data-files"),
            "records": total(metadata, "total-records"),
            "bytes": total(metadata, "total-files-size"),
            "location": metadata.location(),
            "metadata_location": table.metadata_location(),
            "committed_next_offsets": committed,
        }));
    }
    let mut t = Table::new(&[
        "table",
        "format",
        "current-snapshot",
        "snapshots",
        "data-files",
        "records",
        "bytes",
    ]);
    for r in &rows {
        let current =
            r["current_snapshot_id"].as_i64().map_or_else(|| "-".to_string(), |id| id.to_string());
        t.row([
            r["table"].as_str().unwrap_or("").to_string(),
            format!("v{}", r["format_version"]),
            current,
            r["snapshots"].to_string(),
            r["data_files"].to_string(),
            r["records"].to_string(),
            r["bytes"].to_string(),
        ]);
    }
    let notes = if rows.is_empty() {
        vec![format!(
            "no tables in namespace {namespace} of catalog {} ({}): a topic is tiered once it has floe.iceberg.enabled=true and a closed segment",
            config.name,
            config.describe()
        )]
    } else {
        vec![]
    };
    out.print(&Value::Array(rows), &t, &notes);
    Ok(())
}

/// A snapshot as JSON: every field, the whole summary.
fn snapshot_json(s: &SnapshotRef, current: Option<i64>) -> Value {
    let summary = &s.summary().additional_properties;
    let count = |k: &str| summary.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let timestamp =
        s.timestamp().map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()).unwrap_or_default();
    let mut sorted: Vec<(&String, &String)> = summary.iter().collect();
    sorted.sort();
    json!({
        "snapshot_id": s.snapshot_id(),
        "parent_snapshot_id": s.parent_snapshot_id(),
        "sequence_number": s.sequence_number(),
        "timestamp_ms": s.timestamp_ms(),
        "timestamp": timestamp,
        "operation": s.summary().operation.as_str(),
        "current": current == Some(s.snapshot_id()),
        "added_data_files": count("added-data-files"),
        "deleted_data_files": count("deleted-data-files"),
        "added_records": count("added-records"),
        "deleted_records": count("deleted-records"),
        "summary": sorted.into_iter().map(|(k, v)| (k.clone(), json!(v))).collect::<Map<String, Value>>(),
        "manifest_list": s.manifest_list(),
    })
}

pub async fn snapshots(
    config: &CatalogConfig,
    namespace: &str,
    name: &str,
    out: Output,
) -> anyhow::Result<()> {
    let catalog = open(config, namespace).await?;
    let ident = TableIdent::new(NamespaceIdent::new(namespace.to_string()), name.to_string());
    let exists = catalog
        .catalog()
        .table_exists(&ident)
        .await
        .with_context(|| format!("cannot look up table {ident}"))?;
    if !exists {
        return Err(CliFailure::NotFound(format!(
            "no table {name} in namespace {namespace} of catalog {} ({}) (see `floe iceberg tables`)",
            config.name,
            config.describe()
        ))
        .into());
    }
    let table = catalog
        .catalog()
        .load_table(&ident)
        .await
        .with_context(|| format!("cannot load table {ident}"))?;
    let metadata = table.metadata();
    let current = metadata.current_snapshot_id();
    let mut snaps: Vec<&SnapshotRef> = metadata.snapshots().collect();
    snaps.sort_by_key(|s| (s.sequence_number(), s.timestamp_ms(), s.snapshot_id()));
    let rows: Vec<Value> = snaps.iter().map(|s| snapshot_json(s, current)).collect();
    let mut t = Table::new(&[
        "snapshot-id",
        "parent",
        "timestamp",
        "operation",
        "added-files",
        "deleted-files",
        "added-records",
        "deleted-records",
    ]);
    for r in &rows {
        let mark = if r["current"].as_bool() == Some(true) { " *" } else { "" };
        t.row([
            format!("{}{mark}", r["snapshot_id"]),
            r["parent_snapshot_id"].as_i64().map_or_else(|| "-".to_string(), |p| p.to_string()),
            r["timestamp"].as_str().unwrap_or("").to_string(),
            r["operation"].as_str().unwrap_or("").to_string(),
            r["added_data_files"].to_string(),
            r["deleted_data_files"].to_string(),
            r["added_records"].to_string(),
            r["deleted_records"].to_string(),
        ]);
    }
    let notes = if rows.is_empty() {
        vec![format!("table {name} has no snapshot yet")]
    } else {
        vec!["* the current snapshot".to_string()]
    };
    out.print(&Value::Array(rows), &t, &notes);
    Ok(())
}
