//! `floe-bench`: the benchmark harness. See the `floe_benches` crate doc and
//! `docs/benchmarks.md`.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use floe_benches::scenario::{self, Options, SCENARIOS};

/// Benchmarks a Kafka-compatible broker (a `floe` of its own, or any `--bootstrap`).
#[derive(Debug, Parser)]
#[command(name = "floe-bench", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once at start-up: its size costs nothing
enum Cmd {
    /// Runs one scenario and writes report.md, results.json and SVG plots.
    Run {
        /// zero-copy, tls, max-throughput, coupling, tiering-cost, freshness, table-maintenance, transactions, compaction or replication.
        scenario: String,
        /// A few seconds per scenario (CI): short runs, small backlogs.
        #[arg(long)]
        quick: bool,
        /// Drive this broker instead of starting `floe`.
        #[arg(long, value_name = "HOST:PORT")]
        bootstrap: Option<String>,
        /// The external broker's pid, for CPU seconds and peak RSS.
        #[arg(long, value_name = "PID", requires = "bootstrap")]
        broker_pid: Option<u32>,
        /// Output directory (default: bench-results/SCENARIO-UNIXTIME).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// The `floe` binary (default: $FLOE_BIN, else `floe` beside floe-bench).
        #[arg(long, value_name = "PATH")]
        floe_bin: Option<PathBuf>,
        /// An argument for every `floe` started, e.g. `--floe-arg=--override --floe-arg=log.segment.bytes=1048576`.
        #[arg(long = "floe-arg", value_name = "ARG", allow_hyphen_values = true)]
        floe_args: Vec<String>,
        /// An extra broker setting of the tiering-on arm of `coupling`, e.g. `floe.iceberg.tick-ms=1000`.
        #[arg(long = "override", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// `coupling`: the fixed rate in messages/s (default: half the probed maximum); `compaction`: the
        /// rate of the latency producer (default 5000, 2000 with --quick); `replication`: the rate of the
        /// latency arms (default: a quarter of RF=3's flat-out rate); `shared-vs-copy`: the latency
        /// producer beside the backfill (default 5000, 2000 with --quick).
        #[arg(long, value_name = "MSG_PER_S")]
        rate: Option<u64>,
        /// `tiering-cost`, `tls`, `compaction` and `shared-vs-copy`: the backlog in MB (default: the workload's,
        /// 512 for compaction and shared-vs-copy; 8 (tiering-cost, compaction, shared-vs-copy) or 32 (tls) with --quick).
        #[arg(long, value_name = "MB")]
        backlog_mb: Option<u64>,
        /// `freshness`: a target lag to measure (repeat; default 1000 and 5000, 300 and 1000 with --quick).
        #[arg(long = "target-lag-ms", value_name = "MS")]
        target_lags_ms: Vec<u64>,
        /// A workload file instead of the scenario's own (benches/workloads/*.toml).
        #[arg(long, value_name = "FILE")]
        workload: Option<PathBuf>,
        /// `replication`: leader kills of the failover phase (default 20, 2 with --quick).
        #[arg(long, value_name = "N")]
        kills: Option<usize>,
        /// `table-maintenance`: tiering commits (snapshots) before the query (default 200, 20 with --quick).
        #[arg(long, value_name = "N")]
        commits: Option<usize>,
    },
    /// Lists the scenarios.
    List,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Cmd::List => {
            for (name, what) in SCENARIOS {
                println!("{name:<16} {what}");
            }
            Ok(())
        }
        Cmd::Run {
            scenario,
            quick,
            bootstrap,
            broker_pid,
            out,
            floe_bin,
            floe_args,
            overrides,
            rate,
            backlog_mb,
            target_lags_ms,
            workload,
            kills,
            commits,
        } => {
            let overrides = overrides
                .iter()
                .map(|o| {
                    o.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .with_context(|| format!("--override `{o}` is not KEY=VALUE"))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let out = out.unwrap_or_else(|| {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                PathBuf::from("bench-results").join(format!("{scenario}-{t}"))
            });
            let code = scenario::run(Options {
                scenario,
                quick,
                bootstrap,
                broker_pid,
                out,
                floe_bin,
                floe_args,
                overrides,
                rate,
                backlog_mb,
                target_lags_ms,
                workload,
                kills,
                commits,
            })?;
            std::process::exit(code);
        }
    }
}
