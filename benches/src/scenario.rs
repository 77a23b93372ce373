//! The scenarios of `floe-bench run`: each sets up brokers and load, measures, and
//! fills a [`Report`]. This file holds the table of scenarios, the options of a run and
//! the dispatch; each scenario is a file of its own, opening with what it measures and
//! what it leaves out.
//!
//! - `zero-copy` ([`zero_copy`]): one backlog, read from the beginning by a catch-up
//!   consumer on two broker runs over the same data dir, `fetch.zero.copy=true` vs
//!   `false`: MB/s and broker CPU seconds per GB, beside the machine's `sendfile` ceiling.
//! - `tls` ([`tls`]): the same kind of catch-up read, plaintext (sendfile) vs TLS (rustls,
//!   copying), on one broker with both listeners: MB/s and broker CPU s/GB; kTLS
//!   sendfile is a third arm only where the broker reports `floe_ktls_enabled 1`.
//! - `max-throughput` ([`max_throughput`]): OMB's `1-topic-16-partitions-1kb` flat out,
//!   consumers tailing.
//! - `coupling` ([`coupling`]): produce and end-to-end latency at half the measured maximum
//!   rate, with Iceberg tiering off and on (a short target lag, so tiering runs during the arm).
//! - `tiering-cost` ([`tiering_cost`]): a backlog written with tiering off, then tiering
//!   switched on (AlterConfigs): time to commit it all, log MiB per broker CPU-second, CPU-s
//!   per GB, Parquet bytes ÷ log bytes, peak RSS while tiering.
//! - `freshness` ([`freshness`]): produce acknowledgement → row visible in the Iceberg table,
//!   p50/p99, for two `floe.iceberg.target-lag-ms` settings, raw values vs typed (Avro,
//!   Protobuf) tables, each arm against raw.
//! - `table-maintenance` ([`table_maintenance`]): N tiering commits make a table of N
//!   snapshots; a DuckDB aggregate over it (`iceberg_scan`, Python) is timed before and after
//!   `floe iceberg maintain`, with the snapshots, data files and metadata bytes of each.
//! - `transactions` ([`transactions`]): an idempotent vs a transactional producer (100
//!   records per transaction) flat out: msg/s, publish and commit latency, the throughput
//!   ratio; then read_committed vs read_uncommitted catch-up reads of the transactional
//!   topic, with the bytes each fetch path served.
//! - `compaction` ([`compaction`]): a keyed backlog (10 versions per key) released to the log
//!   cleaner: the cleaner's MB/s per core (its bytes read ÷ its thread's CPU), bytes
//!   reclaimed; and produce p99 at a fixed rate into another topic while it cleans vs with
//!   the cleaner off.
//! - `replication` ([`replication`]): etcd and three brokers; RF=1 vs RF=3 acks=all
//!   throughput and latency, replica fetch bytes by path, and leader failover times.
//! - `shared-vs-copy` ([`shared_vs_copy`]): a shared topic (older data only in the
//!   Iceberg table) against a copy topic: catch-up MB/s and CPU per GB from the table
//!   vs sendfile, produce and tail p99 beside a table-served backfill, bytes stored,
//!   tiering CPU.
//!
//! Shared by the scenarios: [`ctx`] (the run's options, report, launcher and ceiling),
//! [`common`] (progress bars, a phase's broker CPU and RSS, scratch data dirs,
//! request metrics), [`load_phase`] (one OMB-style load on a fresh broker, for
//! `max-throughput` and `coupling`).

use anyhow::{bail, Context};

use self::ctx::Ctx;
pub use self::ctx::Options;
use crate::broker::FloeLauncher;
use crate::report::{display_path, Machine, Report};

mod common;
mod compaction;
mod coupling;
mod ctx;
mod freshness;
mod load_phase;
mod max_throughput;
mod replication;
mod shared_vs_copy;
mod table_maintenance;
mod tiering_cost;
mod tls;
mod transactions;
mod zero_copy;

/// Every scenario name, in `floe-bench list` order.
pub const SCENARIOS: &[(&str, &str)] = &[
    ("zero-copy", "catch-up consumer MB/s and broker CPU s/GB, fetch.zero.copy=true vs false, beside the sendfile ceiling"),
    ("tls", "catch-up MB/s and broker CPU s/GB, plaintext sendfile vs TLS copy (and kTLS sendfile where the kernel has it)"),
    ("max-throughput", "OMB 1-topic-16-partitions-1kb at maximum rate: publish rate, publish and end-to-end latency"),
    ("coupling", "publish p50/p99 and end-to-end p99 at half the maximum rate, Iceberg tiering off vs on"),
    ("tiering-cost", "a backlog tiered to Iceberg: log MiB per CPU-second, CPU-s/GB, Parquet/log bytes, peak RSS"),
    ("freshness", "produce acknowledgement to row visible in the Iceberg table, p50/p99, two target lags; raw vs Avro vs Protobuf typed tables"),
    ("transactions", "idempotent vs transactional producer (100 records/txn) flat out: msg/s, publish and commit p50/p99; read_committed vs read_uncommitted catch-up MB/s"),
    ("compaction", "log cleaner MB/s per core and bytes reclaimed on a keyed backlog; produce p99 at a fixed rate while cleaning vs cleaner off"),
    ("table-maintenance", "DuckDB aggregate query time on a table of N tiering commits, before vs after `floe iceberg maintain`; snapshots, data files, metadata bytes"),
    ("replication", "etcd + 3 brokers: RF=1 vs RF=3 acks=all throughput and latency, replica fetch bytes by path, kill -9 leader failover p50/p99"),
    ("shared-vs-copy", "shared vs copy storage: catch-up MB/s and broker CPU s/GB from the table vs sendfile, produce/tail p99 beside a table backfill, bytes stored, tiering CPU"),
];

/// Runs a scenario; returns the process exit code.
///
/// # Errors
/// Any failure to start, load or measure the broker.
pub fn run(opts: Options) -> anyhow::Result<i32> {
    if opts.scenario == "tls" && opts.bootstrap.is_some() {
        println!("tls: skipped: it starts its own floe with a PLAINTEXT and an SSL listener (drop --bootstrap)");
        return Ok(0);
    }
    if opts.scenario == "compaction" && opts.bootstrap.is_some() {
        // Its arms need brokers with chosen cleaner settings (one with the cleaner off), their
        // /metrics and data dirs: only brokers started here have them.
        println!(
            "compaction: skipped: it starts its own floe twice (log.cleaner.backoff.ms, log.cleaner.enable=false) and reads \
             the cleaner's /metrics, threads and data dir (drop --bootstrap)"
        );
        return Ok(0);
    }
    if opts.scenario == "replication" && opts.bootstrap.is_some() {
        // It kills and restarts brokers and reads etcd: only a cluster of its own.
        println!("replication: skipped: it starts its own etcd and three brokers, and kills their leaders (drop --bootstrap)");
        return Ok(0);
    }
    if matches!(
        opts.scenario.as_str(),
        "tiering-cost" | "freshness" | "table-maintenance" | "shared-vs-copy"
    ) && opts.bootstrap.is_some()
    {
        // They read Floe's tiering metrics and data dir, which only a broker started here has.
        println!(
            "{}: skipped: it measures Floe's Iceberg tiering through the /metrics and data dir of a broker \
             floe-bench starts (drop --bootstrap)",
            opts.scenario
        );
        return Ok(0);
    }
    if !SCENARIOS.iter().any(|(n, _)| *n == opts.scenario) {
        bail!("unknown scenario `{}` (see `floe-bench list`)", opts.scenario);
    }
    if !opts.overrides.is_empty() && opts.scenario != "coupling" {
        bail!("--override sets the tiering-on arm of `coupling`; pass broker flags to other scenarios with --floe-arg");
    }
    if !opts.overrides.is_empty() && opts.bootstrap.is_some() {
        bail!("--override needs a broker started by floe-bench (it restarts it with the settings); drop --bootstrap");
    }
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("cannot create {}", opts.out.display()))?;
    let machine = Machine::this();
    let mut ctx = Ctx {
        report: Report::new(&opts.scenario, opts.quick, &machine),
        launcher: FloeLauncher {
            bin: FloeLauncher::find_bin(opts.floe_bin.clone()),
            extra_args: opts.floe_args.clone(),
            log_dir: opts.out.clone(),
        },
        ceiling: None,
        opts,
    };
    ctx.measure_ceiling()?;
    if ctx.opts.bootstrap.is_none() {
        let bin = display_path(&ctx.launcher.bin);
        ctx.report.set("floe_bin", &bin);
        ctx.report.para(&format!("Broker: `floe` started by the harness (`{bin}`)."));
    } else {
        ctx.report.para(&format!(
            "Broker: external, `{}`{}.",
            ctx.opts.bootstrap.as_deref().unwrap_or_default(),
            ctx.opts
                .broker_pid
                .map_or(" (no --broker-pid: no CPU or RSS figures)".into(), |p| format!(
                    ", pid {p}"
                ))
        ));
    }
    match ctx.opts.scenario.as_str() {
        "zero-copy" => zero_copy::zero_copy(&mut ctx)?,
        "tls" => tls::tls(&mut ctx)?,
        "max-throughput" => max_throughput::max_throughput(&mut ctx)?,
        "coupling" => coupling::coupling(&mut ctx)?,
        "tiering-cost" => tiering_cost::tiering_cost(&mut ctx)?,
        "freshness" => freshness::freshness(&mut ctx)?,
        "table-maintenance" => table_maintenance::table_maintenance(&mut ctx)?,
        "transactions" => transactions::transactions(&mut ctx)?,
        "compaction" => compaction::compaction(&mut ctx)?,
        "replication" => replication::replication(&mut ctx)?,
        "shared-vs-copy" => shared_vs_copy::shared_vs_copy(&mut ctx)?,
        _ => unreachable!("checked above"),
    }
    let (md, json) = ctx.report.write(&ctx.opts.out)?;
    println!("{}", std::fs::read_to_string(&md)?);
    eprintln!("report: {}\nfigures: {}", md.display(), json.display());
    Ok(0)
}
