//! The `floe` binary: parse settings, start logging, run the broker; or run
//! one of the admin commands ([`cli`]) against a running cluster.

mod cli;
mod console;

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use floe_broker::config::ConfigBuilder;

/// Floe: a Kafka-compatible broker with zero-copy fetch and Iceberg tiering.
///
/// Settings use Kafka's names and come, later winning, from built-in
/// defaults, `--config FILE`, `FLOE_*` environment variables
/// (`FLOE_LOG_SEGMENT_BYTES`), and these flags.
#[derive(Debug, Parser)]
#[command(name = "floe", version, after_help = ROOT_EXAMPLES)]
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
    /// Web console address (`floe.console.listen`, default 127.0.0.1:8080); empty disables it.
    #[arg(long, value_name = "HOST:PORT")]
    console_listen: Option<String>,
    /// Adds N to every port Floe binds by default and you did not set (`floe.port.offset`):
    /// `--port-offset 10 --data-dir ./floe-data-2` runs a second broker on 9102, 9654,
    /// 8090, 8091 and 8191 beside one on the defaults.
    #[arg(long, value_name = "N")]
    port_offset: Option<u16>,
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

/// `floe --help`'s closing lines: the broker, then an admin command of each kind.
const ROOT_EXAMPLES: &str = "Examples:
  floe --data-dir ./floe-data --listen 127.0.0.1:9092       # run a broker
  floe --config floe.toml --override log.segment.bytes=1048576  # settings from a file, one overridden
  floe topic create orders --partitions 6 --brokers 127.0.0.1:9092
  floe group describe billing
  floe acl list -X security.protocol=SASL_SSL -X sasl.mechanism=SCRAM-SHA-256 -X sasl.username=admin -X sasl.password=...
  floe iceberg tables --data-dir ./floe-data
  floe completion bash > ~/.local/share/bash-completion/completions/floe";

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
    ///
    /// Example: `floe verify --data-dir ./floe-data`
    Verify {
        /// Data directory of the broker.
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
    },
    /// The Iceberg tables a broker tiers its topics into: status, tables,
    /// snapshots, maintain. Read from the catalog the broker's settings name.
    #[command(
        after_help = "Examples:\n  floe iceberg status --data-dir ./floe-data\n  floe iceberg tables --format json\n  floe --config floe.toml iceberg snapshots orders\n  floe iceberg maintain --data-dir ./floe-data --table orders"
    )]
    Iceberg {
        #[command(subcommand)]
        command: cli::iceberg::IcebergCommand,
    },
    /// Prints a shell completion script for `floe` (every subcommand and flag).
    ///
    /// Install it where your shell looks for completions:
    ///   bash: floe completion bash > ~/.local/share/bash-completion/completions/floe
    ///         (or /etc/bash_completion.d/floe; for this shell only: source <(floe completion bash))
    ///   zsh:  floe completion zsh > ~/.zfunc/_floe, with `fpath+=~/.zfunc; autoload -U compinit; compinit`
    ///         in ~/.zshrc (any directory on $fpath works; the file must be named _floe)
    ///   fish: floe completion fish > ~/.config/fish/completions/floe.fish
    ///
    /// Examples:
    ///   floe completion bash > ~/.local/share/bash-completion/completions/floe
    ///   source <(floe completion zsh)
    #[command(verbatim_doc_comment)]
    Completion {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Runs the benchmark harness, `floe-bench` (from the floe-benches crate),
    /// passing every argument on; it is looked for next to this `floe` and on
    /// PATH. It measures a broker OpenMessaging-Benchmark style with librdkafka
    /// as the load, against a `floe` it starts or any broker given by --bootstrap,
    /// and writes report.md, results.json and SVG plots.
    ///
    /// Examples:
    ///   floe bench list
    ///   floe bench run zero-copy --floe-bin target/release/floe
    ///   floe bench run max-throughput --bootstrap kafka-1:9092 --quick
    ///
    /// Build it with `cargo build --release -p floe-benches --bin floe-bench`;
    /// docs/benchmarks.md lists the scenarios and how their results were made.
    #[command(verbatim_doc_comment)]
    Bench {
        /// The arguments for floe-bench (`list`, `run SCENARIO ...`, `--help`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
        args: Vec<String>,
    },
}

fn main() -> std::process::ExitCode {
    // Errors at this edge are for people: the message and its causes on one line each
    // (`{:#}`), never a backtrace, whatever RUST_BACKTRACE says.
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    // Parsed first, so logging starts in the format asked for (clap prints its own errors).
    let cli = Cli::parse();
    // Admin commands talk to people through stdout and their errors: only warnings are logged.
    init_logging(
        cli.log_format,
        if matches!(cli.command, Some(Command::Admin(_))) { "warn" } else { "info" },
    );
    if let Some(Command::Admin(command)) = cli.command {
        std::process::exit(i32::from(cli::run(command)));
    }
    if let Some(Command::Completion { shell }) = cli.command {
        // Written whole, so a closed pipe (`| head`) is an error to report, not a panic in clap_complete.
        let mut script = Vec::new();
        clap_complete::generate(
            shell,
            &mut <Cli as clap::CommandFactory>::command(),
            "floe",
            &mut script,
        );
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        match stdout.write_all(&script).and_then(|()| stdout.flush()) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                anyhow::bail!("cannot write the completion script: {e}")
            }
            _ => return Ok(()),
        }
    }
    if let Some(Command::Bench { args }) = &cli.command {
        std::process::exit(bench(args));
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
    builder.load_env(std::env::vars())?;
    let flags = [
        ("log.dirs", "--data-dir", cli.data_dir.map(|p| p.display().to_string())),
        ("listeners", "--listen", cli.listen),
        ("advertised.listeners", "--advertised-listener", cli.advertised_listener),
        ("metrics.listen", "--metrics-listen", cli.metrics_listen),
        ("floe.iceberg.rest-listen", "--iceberg-rest-listen", cli.iceberg_rest_listen),
        ("floe.schema.registry.listen", "--schema-registry-listen", cli.schema_registry_listen),
        ("floe.console.listen", "--console-listen", cli.console_listen),
        ("floe.port.offset", "--port-offset", cli.port_offset.map(|n| n.to_string())),
        ("node.id", "--node-id", cli.node_id.map(|id| id.to_string())),
        ("floe.metadata.store", "--metadata-store", cli.metadata_store),
    ];
    for (key, flag, value) in flags {
        if let Some(v) = value {
            builder.set_from(key, v, &format!("flag {flag}"))?;
        }
    }
    for o in &cli.overrides {
        let (k, v) = o.split_once('=').with_context(|| {
            format!("--override `{o}` is not KEY=VALUE (e.g. --override log.segment.bytes=1048576)")
        })?;
        builder.set_from(k, v, "--override")?;
    }
    if let Some(Command::Iceberg { command }) = cli.command {
        std::process::exit(i32::from(cli::iceberg::run(command, builder)));
    }
    let config = builder.build()?;
    // Every port at once, before anything starts: a start with several taken names them all.
    floe_broker::ports::check_ports(&floe_broker::ports::services(&config))?;
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
    runtime.block_on(async move {
        // The console is a client of this broker, beside it on the same runtime:
        // it binds now (a taken port fails the start, as the broker's own would)
        // and connects to the broker lazily, once a page asks.
        console::start(&config).await?;
        floe_broker::run::run(config).await.map_err(anyhow::Error::from)
    })?;
    Ok(())
}

/// Starts logging to stderr, filtered by `RUST_LOG` (default `default_level`), for every subcommand.
fn init_logging(format: LogFormat, default_level: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => {
            // Colour only for a person at a terminal: a file or a pipe to a log shipper would
            // get escape codes. NO_COLOR (https://no-color.org) still wins on a terminal;
            // with_ansi would otherwise override it.
            let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
            builder.with_ansi(std::io::stderr().is_terminal() && !no_color).init();
        }
        LogFormat::Json => {
            builder.json().with_current_span(true).with_span_list(true).with_ansi(false).init()
        }
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

/// `floe bench ARGS...`: runs `floe-bench ARGS...` (next to this binary, else
/// on PATH) in this process's place; says where to get it when there is none.
fn bench(args: &[String]) -> i32 {
    use std::os::unix::process::CommandExt;
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("floe-bench")))
        .filter(|p| p.is_file());
    let on_path = || {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths).map(|dir| dir.join("floe-bench")).find(|p| p.is_file())
        })
    };
    let Some(harness) = beside.or_else(on_path) else {
        eprintln!(
            "error: floe-bench, the benchmark harness, is not next to this floe nor on PATH.\n\
             Build it from the Floe source tree:\n  \
               cargo build --release -p floe-benches --bin floe-bench\n\
             then run it (or `floe bench ...` with it on PATH):\n  \
               target/release/floe-bench list\n  \
               target/release/floe-bench run zero-copy --floe-bin target/release/floe\n  \
               target/release/floe-bench run max-throughput --bootstrap HOST:9092\n\
             Every scenario also runs with --quick in tests/run-all.sh; docs/benchmarks.md has the scenarios and results."
        );
        return 1;
    };
    // exec: floe-bench's exit code, signals and terminal are the user's directly.
    let error = std::process::Command::new(&harness).args(args).exec();
    eprintln!("error: cannot run {}: {error}", harness.display());
    1
}

/// `floe verify`: prints one line per partition and one per damaged range; returns whether any was found.
fn verify(data_dir: &std::path::Path) -> anyhow::Result<bool> {
    let partitions = floe_storage::verify::verify_data_dir(data_dir)
        .with_context(|| format!("cannot verify {}", data_dir.display()))?;
    let (mut segments, mut records, mut damaged) = (0usize, 0u64, 0usize);
    for p in &partitions {
        let recs: u64 = p.segments.iter().map(|s| s.records).sum();
        let ranges: Vec<_> = p.segments.iter().flat_map(|s| &s.corrupt).collect();
        let verdict = if ranges.is_empty() {
            "ok".to_string()
        } else {
            format!("{} CORRUPT RANGE(S)", ranges.len())
        };
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
        if damaged == 0 {
            "no corruption".to_string()
        } else {
            format!("{damaged} corrupt ranges")
        }
    );
    Ok(damaged > 0)
}
