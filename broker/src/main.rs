//! The `floe` binary: parse settings, start logging, run the broker; or run
//! one of the admin commands ([`cli`]) against a running cluster.

mod cli;

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use floe_broker::config::{ConfigBuilder, Layer};

/// Floe: a Kafka-compatible broker with zero-copy fetch and Iceberg tiering.
///
/// Settings use Kafka's names and come, later winning, from built-in
/// defaults, `--config FILE`, `FLOE_*` environment variables
/// (`FLOE_LOG_SEGMENT_BYTES`), and these flags.
#[derive(Debug, Parser)]
#[command(name = "floe", version)]
struct Cli {
    /// Data directory (`log.dirs`).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Kafka listener address (`listeners`), e.g. 127.0.0.1:9092.
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Address given to clients (`advertised.listeners`).
    #[arg(long, value_name = "HOST:PORT")]
    advertised_listener: Option<String>,
    /// Prometheus endpoint address (`metrics.listen`); empty disables it.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<String>,
    /// Read-only Iceberg REST catalog address (`floe.iceberg.rest-listen`); empty disables it.
    #[arg(long, value_name = "HOST:PORT")]
    iceberg_rest_listen: Option<String>,
    /// Built-in Schema Registry address (`floe.schema.registry.listen`); empty disables it.
    #[arg(long, value_name = "HOST:PORT")]
    schema_registry_listen: Option<String>,
    /// This broker's id (`node.id`), unique in a cluster.
    #[arg(long, value_name = "ID")]
    node_id: Option<i32>,
    /// Where the cluster's metadata lives (`floe.metadata.store`): `local`, or
    /// `etcd://HOST:PORT[,HOST:PORT...][/PREFIX]` to join a cluster.
    #[arg(long, value_name = "URL")]
    metadata_store: Option<String>,
    /// TOML file of settings.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Any setting, e.g. `--override log.segment.bytes=1048576`; repeatable.
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// How stderr logs are written: `text` for people (coloured only on a terminal), or
    /// `json`, one object per line with level, target, fields and spans, for log shippers.
    /// Which lines: `RUST_LOG` (default `info`); `RUST_LOG=info,floe_broker::request=debug`
    /// adds one line per Kafka request.
    ///
    /// Example: `floe --log-format json --data-dir ./floe-data 2>>floe.log`
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "FLOE_LOG_FORMAT", value_name = "FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Option<Command>,
}

/// `--log-format`. Not a setting of the config file: logging starts before the file is
/// read, so that what goes wrong reading it is logged in the chosen format.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    #[command(flatten)]
    Admin(cli::AdminCommand),
    /// Checks the CRC-32C of every record batch of every segment in a data
    /// directory (read-only) and lists each damaged range. Exits 1 if any is
    /// found. On a running broker an active segment's last batch may be
    /// mid-write and show up as damage.
    Verify {
        /// Data directory of the broker.
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
    },
    /// Iceberg tiering tools.
    Iceberg {
        #[command(subcommand)]
        command: IcebergCommand,
    },
}

#[derive(Debug, clap::Subcommand)]
enum IcebergCommand {
    /// Prints each tiered table's committed offsets and totals, read from the
    /// catalog the broker's settings name (`--config`, `FLOE_*`, `--override`
    /// work as for the broker: `floe --config floe.toml iceberg status`).
    Status {
        /// Data directory of the broker (the embedded catalog is DIR/iceberg/catalog.db).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// The catalog's name (`floe.iceberg.catalog-name`).
        #[arg(long)]
        catalog_name: Option<String>,
        /// The namespace (`floe.iceberg.namespace`).
        #[arg(long)]
        namespace: Option<String>,
    },
    /// Maintains the tiered tables now, as the tiering thread does every
    /// `floe.iceberg.maintenance-interval-ms`: expires old snapshots and deletes the
    /// files only they reached, then rewrites each partition's small data files into
    /// files of the target size (a `replace` snapshot), then expires again so the
    /// replaced files go too. Safe while the broker runs: each step commits only on
    /// the snapshot it planned on.
    ///
    /// Example: `floe iceberg maintain --data-dir ./floe-data --table orders --max-age-ms 0`
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

fn main() -> anyhow::Result<()> {
    // Parsed first, so logging starts in the format asked for (clap prints its own errors).
    let cli = Cli::parse();
    // Admin commands talk to people through stdout and their errors: only warnings are logged.
    init_logging(cli.log_format, if matches!(cli.command, Some(Command::Admin(_))) { "warn" } else { "info" });
    if let Some(Command::Admin(command)) = cli.command {
        std::process::exit(i32::from(cli::run(command)));
    }
    if let Some(Command::Verify { data_dir }) = &cli.command {
        let corrupt = verify(data_dir)?;
        std::process::exit(if corrupt { 1 } else { 0 });
    }
    arm_failpoints()?;

    let mut builder = ConfigBuilder::new();
    if let Some(path) = &cli.config {
        builder.load_file(path)?;
    }
    builder.load_env(std::env::vars());
    let flags = [
        ("log.dirs", cli.data_dir.map(|p| p.display().to_string())),
        ("listeners", cli.listen),
        ("advertised.listeners", cli.advertised_listener),
        ("metrics.listen", cli.metrics_listen),
        ("floe.iceberg.rest-listen", cli.iceberg_rest_listen),
        ("floe.schema.registry.listen", cli.schema_registry_listen),
        ("node.id", cli.node_id.map(|id| id.to_string())),
        ("floe.metadata.store", cli.metadata_store),
    ];
    for (key, value) in flags {
        if let Some(v) = value {
            builder.set(key, v, Layer::CommandLine)?;
        }
    }
    for o in &cli.overrides {
        let (k, v) = o.split_once('=').with_context(|| format!("--override `{o}` is not KEY=VALUE"))?;
        builder.set(k, v, Layer::CommandLine)?;
    }
    if let Some(Command::Iceberg { command: IcebergCommand::Maintain { data_dir, table, max_age_ms, min_to_keep, target_file_size_bytes, no_compact } }) = &cli.command {
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
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("tokio runtime")?;
        let compaction = (!no_compact).then(|| floe_broker::tiering::CompactionRequest {
            target_file_size: *target_file_size_bytes,
            default_target_file_size: tiering.target_file_size,
            min_input_files: tiering.compaction_min_input_files,
            max_bytes_per_run: tiering.compaction_max_bytes_per_run,
        });
        let text = runtime.block_on(floe_broker::tiering::maintain(&catalog, &tiering.namespace, policy, compaction, table.as_deref()))?;
        print!("{text}");
        return Ok(());
    }
    if let Some(Command::Iceberg { command: IcebergCommand::Status { data_dir, catalog_name, namespace } }) = &cli.command {
        let status_flags = [
            ("log.dirs", data_dir.as_ref().map(|p| p.display().to_string())),
            ("floe.iceberg.catalog-name", catalog_name.clone()),
            ("floe.iceberg.namespace", namespace.clone()),
        ];
        for (key, value) in status_flags {
            if let Some(v) = value {
                builder.set(key, v, Layer::CommandLine)?;
            }
        }
        let config = builder.build()?;
        let tiering = &config.tiering;
        let catalog = tiering.catalog.catalog_config(&config.data_dir, &tiering.catalog_name);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("tokio runtime")?;
        let text = runtime.block_on(floe_broker::tiering::status(&catalog, &tiering.namespace))?;
        print!("{text}");
        return Ok(());
    }
    let config = builder.build()?;
    // Every connection is a file descriptor: let max.connections fit if the hard limit allows.
    match floe_broker::server::limits::raise_open_files_limit() {
        Ok(limit) if limit < config.max_connections as u64 => {
            tracing::warn!(limit, max_connections = config.max_connections, "open-files limit is below max.connections; accepts will fail with EMFILE before the limit is reached");
        }
        Ok(limit) => tracing::debug!(limit, "open-files limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-files limit"),
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("floe-worker")
        .build()
        .context("cannot start the tokio runtime")?;
    runtime.block_on(floe_broker::run::run(config))?;
    Ok(())
}

/// Starts logging to stderr, filtered by `RUST_LOG` (default `default_level`), for every subcommand.
fn init_logging(format: LogFormat, default_level: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => {
            // Colour only for a person at a terminal: a file or a pipe to a log shipper would
            // get escape codes. NO_COLOR (https://no-color.org) still wins on a terminal;
            // with_ansi would otherwise override it.
            let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
            builder.with_ansi(std::io::stderr().is_terminal() && !no_color).init();
        }
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(true).with_ansi(false).init(),
    }
}

/// Arms the failpoints named in `FAILPOINTS` (builds with the `failpoints`
/// feature only; others ignore the variable, saying so).
fn arm_failpoints() -> anyhow::Result<()> {
    match floe_storage::failpoint::arm_from_env() {
        Ok(armed) if armed.is_empty() => {}
        Ok(armed) => tracing::warn!(failpoints = %armed.join(";"),
            "FAILPOINTS ARMED: this broker injects I/O errors or aborts on purpose; never give it data you want to keep"),
        Err(e) if cfg!(feature = "failpoints") => anyhow::bail!(e),
        Err(e) => tracing::warn!("{e}"),
    }
    Ok(())
}

/// `floe verify`: prints one line per partition and one per damaged range; returns whether any was found.
fn verify(data_dir: &std::path::Path) -> anyhow::Result<bool> {
    let partitions = floe_storage::verify::verify_data_dir(data_dir)
        .with_context(|| format!("cannot verify {}", data_dir.display()))?;
    let (mut segments, mut records, mut damaged) = (0usize, 0u64, 0usize);
    for p in &partitions {
        let recs: u64 = p.segments.iter().map(|s| s.records).sum();
        let ranges: Vec<_> = p.segments.iter().flat_map(|s| &s.corrupt).collect();
        let verdict = if ranges.is_empty() { "ok".to_string() } else { format!("{} CORRUPT RANGE(S)", ranges.len()) };
        println!("{}: {} segments, {recs} records: {verdict}", p.name, p.segments.len());
        for r in &ranges {
            println!("  corrupt: {} {r}", p.name);
        }
        segments += p.segments.len();
        records += recs;
        damaged += ranges.len();
    }
    println!(
        "verified {} partitions, {segments} segments, {records} records: {}",
        partitions.len(),
        if damaged == 0 { "no corruption".to_string() } else { format!("{damaged} corrupt ranges") }
    );
    Ok(damaged > 0)
}
