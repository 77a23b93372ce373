//! The scenarios of `floe-bench run`: each sets up brokers and load, measures, and
//! fills a [`Report`].
//!
//! - `zero-copy`: one backlog, read from the beginning by a catch-up consumer on two
//!   broker runs over the same data dir, `fetch.zero.copy=true` vs `false`: MB/s and
//!   broker CPU seconds per GB, beside the machine's `sendfile` ceiling.
//! - `tls`: the same kind of catch-up read, plaintext (sendfile) vs TLS (rustls,
//!   copying), on one broker with both listeners: MB/s and broker CPU s/GB; kTLS
//!   sendfile is a third arm only where the broker reports `floe_ktls_enabled 1`.
//! - `max-throughput`: OMB's `1-topic-16-partitions-1kb` flat out, consumers tailing.
//! - `coupling`: produce and end-to-end latency at half the measured maximum rate, with
//!   Iceberg tiering off and on (a short target lag, so tiering runs during the arm).
//! - `tiering-cost`: a backlog written with tiering off, then tiering switched on
//!   (AlterConfigs): time to commit it all, log MiB per broker CPU-second, CPU-s per
//!   GB, Parquet bytes ÷ log bytes, peak RSS while tiering.
//! - `freshness`: produce acknowledgement → row visible in the Iceberg table, p50/p99,
//!   for two `floe.iceberg.target-lag-ms` settings, raw values vs typed (Avro, Protobuf)
//!   tables, each arm against raw.
//! - `table-maintenance`: N tiering commits make a table of N snapshots; a DuckDB
//!   aggregate over it (`iceberg_scan`, Python) is timed before and after
//!   `floe iceberg maintain`, with the snapshots, data files and metadata bytes of each.
//! - `transactions`: an idempotent vs a transactional producer (100 records per
//!   transaction) flat out: msg/s, publish and commit latency, the throughput ratio;
//!   then read_committed vs read_uncommitted catch-up reads of the transactional topic,
//!   with the bytes each fetch path served.
//! - `compaction`: a keyed backlog (10 versions per key) released to the log cleaner:
//!   the cleaner's MB/s per core (its bytes read ÷ its thread's CPU), bytes reclaimed;
//!   and produce p99 at a fixed rate into another topic while it cleans vs with the
//!   cleaner off.
//! - `replication` ([`replication`]): etcd and three brokers; RF=1 vs RF=3 acks=all
//!   throughput and latency, replica fetch bytes by path, and leader failover times.
//! - `shared-vs-copy` ([`shared_vs_copy`]): a shared topic (older data only in the
//!   Iceberg table) against a copy topic: catch-up MB/s and CPU per GB from the table
//!   vs sendfile, produce and tail p99 beside a table-served backfill, bytes stored,
//!   tiering CPU.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::broker::{Broker, FloeLauncher};
use crate::compaction::{self, CleanerCounters};
use crate::transactions as txn;
use crate::freshness::{self, Freshness, FreshnessSpec};
use crate::iceberg_query;
use crate::tiering::{self, TieringCounters};
use crate::ceiling::{self, Ceiling};
use crate::load::{self, CatchUp, LatencySummary, LoadResult, RunSpec};
use crate::plot;
use crate::rated;
use crate::procstat::{self, ProcStats};
use crate::report::{display_path, f1, f2, pct, Machine, Report};
use crate::typed_payload::{self, ValueKind};
use crate::workload::Workload;

mod replication;
mod shared_vs_copy;

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

/// Options of one `floe-bench run`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Scenario name.
    pub scenario: String,
    /// A few seconds per scenario (CI).
    pub quick: bool,
    /// Drive this broker instead of starting `floe`.
    pub bootstrap: Option<String>,
    /// The external broker's process, for CPU and RSS.
    pub broker_pid: Option<u32>,
    /// Output directory.
    pub out: PathBuf,
    /// The `floe` binary.
    pub floe_bin: Option<PathBuf>,
    /// Extra arguments for every `floe` started.
    pub floe_args: Vec<String>,
    /// Extra broker settings of the tiering-on arm (`coupling`).
    pub overrides: Vec<(String, String)>,
    /// Fixed rate of `coupling` (instead of half the probed maximum), of `compaction`'s
    /// latency producer, and of `replication`'s latency arms; messages/s.
    pub rate: Option<u64>,
    /// Backlog of `tiering-cost`, MB (instead of the workload's).
    pub backlog_mb: Option<u64>,
    /// The two `floe.iceberg.target-lag-ms` of `freshness`.
    pub target_lags_ms: Vec<u64>,
    /// A workload file instead of the scenario's built-in one.
    pub workload: Option<PathBuf>,
    /// Leader kills of `replication` (instead of 20, or 2 with `quick`).
    pub kills: Option<usize>,
    /// Tiering commits of `table-maintenance` (instead of 200, or 20 with `quick`).
    pub commits: Option<usize>,
}

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
    if matches!(opts.scenario.as_str(), "tiering-cost" | "freshness" | "table-maintenance" | "shared-vs-copy") && opts.bootstrap.is_some() {
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
    std::fs::create_dir_all(&opts.out).with_context(|| format!("cannot create {}", opts.out.display()))?;
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
            ctx.opts.broker_pid.map_or(" (no --broker-pid: no CPU or RSS figures)".into(), |p| format!(", pid {p}"))
        ));
    }
    match ctx.opts.scenario.as_str() {
        "zero-copy" => zero_copy(&mut ctx)?,
        "tls" => tls(&mut ctx)?,
        "max-throughput" => max_throughput(&mut ctx)?,
        "coupling" => coupling(&mut ctx)?,
        "tiering-cost" => tiering_cost(&mut ctx)?,
        "freshness" => freshness(&mut ctx)?,
        "table-maintenance" => table_maintenance(&mut ctx)?,
        "transactions" => transactions(&mut ctx)?,
        "compaction" => compaction(&mut ctx)?,
        "replication" => replication::replication(&mut ctx)?,
        "shared-vs-copy" => shared_vs_copy::shared_vs_copy(&mut ctx)?,
        _ => unreachable!("checked above"),
    }
    let (md, json) = ctx.report.write(&ctx.opts.out)?;
    println!("{}", std::fs::read_to_string(&md)?);
    eprintln!("report: {}\nfigures: {}", md.display(), json.display());
    Ok(0)
}

struct Ctx {
    opts: Options,
    report: Report,
    launcher: FloeLauncher,
    ceiling: Option<Ceiling>,
}

impl Ctx {
    fn workload(&self, builtin: &str) -> anyhow::Result<Workload> {
        let w = match &self.opts.workload {
            Some(p) => Workload::load(p)?,
            None => Workload::builtin(builtin)?,
        };
        Ok(if self.opts.quick { w.quick() } else { w })
    }

    fn measure_ceiling(&mut self) -> anyhow::Result<()> {
        let bar = spinner("ceiling: sendfile into loopback");
        let (bytes, runs) = if self.opts.quick { (512u64 << 20, 1) } else { (4u64 << 30, 3) };
        let c = ceiling::sendfile_loopback(bytes, 1 << 20, runs)?;
        bar.finish_with_message(format!("{:.0} MB/s", c.mb_per_s));
        self.report.heading("Ceiling");
        self.report.para(&format!(
            "`sendfile(2)` of a page-cached file into a loopback TCP socket, 1 MiB per call, read and discarded by a \
             thread of the harness: **{:.0} MB/s** (median of {} run(s) of {} MiB: {}). Throughputs below are also \
             quoted as a fraction of this.",
            c.mb_per_s,
            c.runs_mb_per_s.len(),
            c.bytes >> 20,
            c.runs_mb_per_s.iter().map(|v| format!("{v:.0}")).collect::<Vec<_>>().join(", ")
        ));
        self.report.set("ceiling", &c);
        self.ceiling = Some(c);
        Ok(())
    }

    fn of_ceiling(&self, mb_per_s: f64) -> Option<f64> {
        self.ceiling.as_ref().map(|c| mb_per_s / c.mb_per_s)
    }

    /// A broker for one arm: ours on `data_dir` with `overrides`, or the external one.
    fn broker(&self, label: &str, data_dir: &std::path::Path, overrides: &[(String, String)]) -> anyhow::Result<Broker> {
        match &self.opts.bootstrap {
            Some(b) => Ok(Broker::external(b.clone(), self.opts.broker_pid)),
            None => self.launcher.start(label, data_dir, overrides),
        }
    }

    fn topics(&self, w: &Workload) -> Vec<String> {
        let tag: String = (0..6).map(|_| fastrand::alphanumeric().to_ascii_lowercase()).collect();
        (0..w.topics).map(|i| format!("floe-bench-{}-{tag}-{i}", self.opts.scenario)).collect()
    }

    fn plot_path(&self, name: &str) -> PathBuf {
        self.opts.out.join(name)
    }
}

fn spinner(prefix: &str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("{spinner} {prefix:.bold} [{elapsed}] {msg}").expect("template"));
    bar.set_prefix(prefix.to_string());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

fn bar(prefix: &str, bytes: bool) -> ProgressBar {
    let bar = ProgressBar::new(0);
    let tpl = if bytes {
        "{spinner} {prefix:.bold} [{elapsed}] {bar:30} {bytes}/{total_bytes} {msg}"
    } else {
        "{spinner} {prefix:.bold} [{elapsed}] {bar:30} {percent:>3}% {msg}"
    };
    bar.set_style(ProgressStyle::with_template(tpl).expect("template").progress_chars("=> "));
    bar.set_prefix(prefix.to_string());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// Broker CPU and peak RSS over one phase.
#[derive(Debug, Clone, Copy, Default, Serialize)]
struct PhaseCost {
    broker_cpu_s: Option<f64>,
    broker_peak_rss_mib: Option<f64>,
    harness_cpu_s: f64,
}

struct CostMeter {
    before: Option<ProcStats>,
    harness_before: ProcStats,
}

impl CostMeter {
    fn start(b: &Broker) -> CostMeter {
        b.reset_peak_rss();
        CostMeter { before: b.stats(), harness_before: procstat::read(0).unwrap_or_default() }
    }

    fn finish(self, b: &Broker) -> PhaseCost {
        let after = b.stats();
        let harness = procstat::read(0).unwrap_or_default();
        PhaseCost {
            broker_cpu_s: self.before.zip(after).map(|(a, z)| z.cpu_seconds - a.cpu_seconds),
            broker_peak_rss_mib: after.map(|z| z.peak_rss_bytes as f64 / (1 << 20) as f64),
            harness_cpu_s: harness.cpu_seconds - self.harness_before.cpu_seconds,
        }
    }
}

fn temp_data_dir() -> anyhow::Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new().prefix("floe-bench-").tempdir()?)
}

// ------------------------------------------------------------------ zero-copy

#[derive(Debug, Serialize)]
struct CatchUpRun {
    arm: String,
    zero_copy: Option<bool>,
    round: usize,
    #[serde(flatten)]
    read: CatchUp,
    of_ceiling: Option<f64>,
    broker_cpu_s_per_gb: Option<f64>,
    harness_cpu_s_per_gb: f64,
    cost: PhaseCost,
    fetch_bytes_sendfile: Option<f64>,
    fetch_bytes_copy: Option<f64>,
}

fn zero_copy(ctx: &mut Ctx) -> anyhow::Result<()> {
    let w = ctx.workload("catch-up-16kb")?;
    let backlog = w.consumer_backlog_mb.max(1) * 1_000_000;
    let data = temp_data_dir()?;
    let topics = ctx.topics(&w);

    // 1. The backlog, written once.
    let b = ctx.broker("backlog", data.path(), &[])?;
    load::create_topics(&b.bootstrap, &topics, w.partitions_per_topic)?;
    let pb = bar("backlog: produce", true);
    let spec = RunSpec { bootstrap: b.bootstrap.clone(), workload: w.clone(), topics: topics.clone(), consume: false, produce_bytes: Some(backlog) };
    let produced = load::run(&spec, &pb)?;
    pb.finish();
    b.stop()?;
    ctx.report.heading(&format!("Catch-up read: zero-copy vs copy (workload `{}`)", w.name));
    ctx.report.para(&format!(
        "Backlog: {:.0} MB of {}-byte messages in {} partition(s), written at {:.0} MB/s; then a consumer \
         (librdkafka, {} thread(s), explicit assignment) reads it all from offset 0. The data stays in the page cache, \
         so this measures the fetch path, not the disk.",
        produced.published_messages as f64 * w.message_size as f64 / 1e6,
        w.message_size,
        w.partitions_per_topic * w.topics,
        produced.publish_mb_per_s,
        w.consumers_per_topic
    ));
    let timeline: Vec<_> = produced.timeline.iter().map(|s| (s.t_s, s.publish_mb_per_s)).collect();
    plot::timeline(&ctx.plot_path("backlog-throughput.svg"), "backlog: publish MB/s", "MB/s", &[("publish", timeline)])?;
    ctx.report.set("backlog", &produced);

    // 2. The catch-up reads, alternating arms on the same data dir.
    let arms: Vec<Option<bool>> = match (&ctx.opts.bootstrap, ctx.opts.quick) {
        (Some(_), _) => vec![None],
        (None, true) => vec![Some(true), Some(false)],
        (None, false) => vec![Some(true), Some(false), Some(true), Some(false), Some(true), Some(false)],
    };
    let mut runs = Vec::new();
    for (i, zc) in arms.iter().enumerate() {
        let arm = match zc {
            Some(true) => "zero-copy (sendfile)",
            Some(false) => "copy (pread + write)",
            None => "as configured",
        };
        let overrides: Vec<(String, String)> = zc.map(|z| vec![("fetch.zero.copy".into(), z.to_string())]).unwrap_or_default();
        let b = ctx.broker(&format!("catch-up-{i}"), data.path(), &overrides)?;
        let pb = bar(&format!("catch-up {} #{}", arm, i / 2 + 1), false);
        let meter = CostMeter::start(&b);
        let read = load::catch_up(&b.bootstrap, &w, &topics, &pb)?;
        let cost = meter.finish(&b);
        pb.finish_with_message(format!("{:.0} MB/s", read.mb_per_s));
        let gb = read.bytes as f64 / 1e9;
        runs.push(CatchUpRun {
            arm: arm.into(),
            zero_copy: *zc,
            round: i / 2 + 1,
            of_ceiling: ctx.of_ceiling(read.mb_per_s),
            broker_cpu_s_per_gb: cost.broker_cpu_s.map(|c| c / gb),
            harness_cpu_s_per_gb: cost.harness_cpu_s / gb,
            fetch_bytes_sendfile: b.metric("floe_fetch_bytes_total", "sendfile"),
            fetch_bytes_copy: b.metric("floe_fetch_bytes_total", "\"copy-"),
            read,
            cost,
        });
        b.stop()?;
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.arm.clone(),
                r.round.to_string(),
                format!("{:.0}", r.read.mb_per_s),
                pct(r.of_ceiling),
                f2(r.cost.broker_cpu_s),
                f2(r.broker_cpu_s_per_gb),
                f2(Some(r.harness_cpu_s_per_gb)),
                f1(r.cost.broker_peak_rss_mib),
                format!("{} / {}", f1(r.fetch_bytes_sendfile.map(|b| b / 1e6)), f1(r.fetch_bytes_copy.map(|b| b / 1e6))),
            ]
        })
        .collect();
    ctx.report.table(
        &["arm", "round", "MB/s", "of ceiling", "broker CPU s", "broker CPU s/GB", "consumer CPU s/GB", "broker peak RSS MiB", "MB via sendfile / copy"],
        &rows,
    );
    // Per arm: the best throughput and the lowest CPU/GB over the rounds (noise on a
    // shared machine only ever slows a run down).
    let best = |zc: bool| -> (Option<f64>, Option<f64>) {
        let arm: Vec<&CatchUpRun> = runs.iter().filter(|r| r.zero_copy == Some(zc)).collect();
        let mbps = arm.iter().map(|r| r.read.mb_per_s).reduce(f64::max);
        let cpu = arm.iter().filter_map(|r| r.broker_cpu_s_per_gb).reduce(f64::min);
        (mbps, cpu)
    };
    let (zc_mbps, zc_cpu) = best(true);
    let (cp_mbps, cp_cpu) = best(false);
    if let (Some(z), Some(c)) = (zc_mbps, cp_mbps) {
        let summary = serde_json::json!({
            "zero_copy_mb_per_s": z, "copy_mb_per_s": c,
            "throughput_ratio_zero_copy_over_copy": z / c,
            "zero_copy_of_ceiling": ctx.of_ceiling(z), "copy_of_ceiling": ctx.of_ceiling(c),
            "zero_copy_broker_cpu_s_per_gb": zc_cpu, "copy_broker_cpu_s_per_gb": cp_cpu,
            "cpu_per_gb_ratio_copy_over_zero_copy": zc_cpu.zip(cp_cpu).map(|(z, c)| c / z),
        });
        ctx.report.para(&format!(
            "**Summary** (best round of each arm): zero-copy {z:.0} MB/s ({} of the ceiling) vs copy {c:.0} MB/s ({}): \
             **{:.2}×** the throughput; broker CPU {} vs {} s/GB: copy costs **{}×** the CPU per GB.",
            pct(ctx.of_ceiling(z)),
            pct(ctx.of_ceiling(c)),
            z / c,
            f2(zc_cpu),
            f2(cp_cpu),
            f2(zc_cpu.zip(cp_cpu).map(|(z, c)| c / z)),
        ));
        ctx.report.set("summary", summary);
    }
    ctx.report.para(
        "The consumer runs on the same cores as the broker (loopback), so its own CPU is part of what limits the \
         read; it is shown so the broker's share can be judged.",
    );
    ctx.report.image("backlog-throughput.svg", "backlog publish throughput");
    ctx.report.set("catch_up_runs", &runs);
    Ok(())
}

// ------------------------------------------------------------------ tls

#[derive(Debug, Serialize)]
struct TlsRun {
    arm: String,
    round: usize,
    bytes: u64,
    seconds: f64,
    mb_per_s: f64,
    broker_cpu_s_per_gb: Option<f64>,
    cost: PhaseCost,
    fetch_bytes_sendfile: Option<f64>,
    fetch_bytes_copy_tls: Option<f64>,
}

/// A throwaway CA and a broker certificate for 127.0.0.1 signed by it (the
/// `openssl` CLI: no new crates). Returns (CA, certificate, key) PEM paths.
fn test_pki(dir: &std::path::Path) -> anyhow::Result<(PathBuf, PathBuf, PathBuf)> {
    let (ca, ca_key) = (dir.join("ca.pem"), dir.join("ca.key"));
    let (cert, key, csr, ext) = (dir.join("broker.pem"), dir.join("broker.key"), dir.join("broker.csr"), dir.join("broker.ext"));
    std::fs::write(&ext, "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")?;
    let p256 = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let openssl = |args: Vec<&std::ffi::OsStr>| -> anyhow::Result<()> {
        let out = std::process::Command::new("openssl")
            .args(&args)
            .output()
            .context("cannot run `openssl` (the tls scenario makes its certificates with it)")?;
        if !out.status.success() {
            bail!("openssl {:?} failed: {}", args, String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    };
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    let mut a: Vec<&std::ffi::OsStr> = vec![os("req"), os("-x509")];
    a.extend(p256.iter().map(|s| os(s)));
    a.extend([os("-days"), os("2"), os("-subj"), os("/CN=floe-bench CA"), os("-keyout"), ca_key.as_os_str(), os("-out"), ca.as_os_str()]);
    openssl(a)?;
    let mut a: Vec<&std::ffi::OsStr> = vec![os("req")];
    a.extend(p256.iter().map(|s| os(s)));
    a.extend([os("-subj"), os("/CN=127.0.0.1"), os("-keyout"), key.as_os_str(), os("-out"), csr.as_os_str()]);
    openssl(a)?;
    openssl(vec![
        os("x509"), os("-req"), os("-days"), os("2"), os("-in"), csr.as_os_str(), os("-CA"), ca.as_os_str(), os("-CAkey"),
        ca_key.as_os_str(), os("-CAcreateserial"), os("-extfile"), ext.as_os_str(), os("-out"), cert.as_os_str(),
    ])?;
    Ok((ca, cert, key))
}

fn tls(ctx: &mut Ctx) -> anyhow::Result<()> {
    use crate::fetch_client::{self, Transport};
    let w = ctx.workload("catch-up-16kb")?;
    let backlog_mb = ctx.opts.backlog_mb.unwrap_or(if ctx.opts.quick { 32 } else { w.consumer_backlog_mb.max(1) });
    let data = temp_data_dir()?;
    let certs = temp_data_dir()?;
    let (ca, cert, key) = test_pki(certs.path())?;
    let topics = ctx.topics(&w);

    // 1. The backlog, written once over plaintext.
    let b = ctx.broker("backlog", data.path(), &[])?;
    load::create_topics(&b.bootstrap, &topics, w.partitions_per_topic)?;
    let pb = bar("backlog: produce", true);
    let spec = RunSpec { bootstrap: b.bootstrap.clone(), workload: w.clone(), topics: topics.clone(), consume: false, produce_bytes: Some(backlog_mb * 1_000_000) };
    let produced = load::run(&spec, &pb)?;
    pb.finish();
    let mut partitions = Vec::new();
    for t in &topics {
        for (p, end) in load::end_offsets(&b.bootstrap, t, w.partitions_per_topic)?.into_iter().enumerate() {
            partitions.push((t.clone(), p as i32, end));
        }
    }
    b.stop()?;
    ctx.report.heading(&format!("Catch-up read: plaintext sendfile vs TLS copy (workload `{}`)", w.name));
    ctx.report.para(&format!(
        "Backlog: {:.0} MB of {}-byte messages in {} partition(s). Each arm starts `floe` with a PLAINTEXT and an SSL \
         listener (a P-256 certificate from a throwaway CA, TLS 1.3 negotiated by rustls on both ends) and reads the backlog from \
         offset 0 with floe-bench's fetch-only client over one connection (librdkafka is built without OpenSSL here: \
         see `fetch_client`). The data stays in the page cache, so this measures the fetch path.",
        produced.published_messages as f64 * w.message_size as f64 / 1e6,
        w.message_size,
        partitions.len(),
    ));
    ctx.report.set("backlog", &produced);

    // 2. kTLS: an arm only if the broker says it uses it.
    let probe_dir = temp_data_dir()?;
    let (probe, _) = ctx.launcher.start_with_ssl("ktls-probe", probe_dir.path(), &[], &cert, &key)?;
    let ktls = probe.metric_samples("floe_ktls_enabled").and_then(|s| s.first().map(|(_, v)| *v > 0.0));
    probe.stop()?;
    let mut arms: Vec<&str> = vec!["plaintext-sendfile", "tls-copy"];
    if ktls == Some(true) {
        arms.push("ktls-sendfile");
    }
    let rounds = if ctx.opts.quick { 1 } else { 3 };
    let mut runs = Vec::new();
    for round in 1..=rounds {
        for arm in &arms {
            // The TLS-copy arm keeps sessions in user space even where the kernel has kTLS.
            let ktls_setting = match *arm {
                "ktls-sendfile" => Some("on"),
                "tls-copy" => Some("off"),
                _ => None,
            };
            let overrides: Vec<(String, String)> =
                ktls_setting.map(|v| ("floe.ssl.ktls".to_string(), v.to_string())).into_iter().collect();
            let (b, ssl) = ctx.launcher.start_with_ssl(&format!("{arm}-{round}"), data.path(), &overrides, &cert, &key)?;
            let (bootstrap, transport) = match *arm {
                "plaintext-sendfile" => (b.bootstrap.clone(), Transport::Plaintext),
                _ => (ssl, Transport::Tls { ca: ca.clone() }),
            };
            let sp = spinner(&format!("catch-up {arm} #{round}"));
            let meter = CostMeter::start(&b);
            let read = fetch_client::catch_up(&bootstrap, &transport, &partitions)?;
            let cost = meter.finish(&b);
            let mb_per_s = read.bytes as f64 / 1e6 / read.seconds;
            sp.finish_with_message(format!("{mb_per_s:.0} MB/s"));
            let gb = read.bytes as f64 / 1e9;
            runs.push(TlsRun {
                arm: arm.to_string(),
                round,
                bytes: read.bytes,
                seconds: read.seconds,
                mb_per_s,
                broker_cpu_s_per_gb: cost.broker_cpu_s.map(|c| c / gb),
                cost,
                fetch_bytes_sendfile: b.metric("floe_fetch_bytes_total", "sendfile"),
                fetch_bytes_copy_tls: b.metric("floe_fetch_bytes_total", "copy-tls"),
            });
            b.stop()?;
        }
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.arm.clone(),
                r.round.to_string(),
                format!("{:.0}", r.mb_per_s),
                f2(r.cost.broker_cpu_s),
                f2(r.broker_cpu_s_per_gb),
                f2(Some(r.cost.harness_cpu_s / (r.bytes as f64 / 1e9))),
                format!("{} / {}", f1(r.fetch_bytes_sendfile.map(|b| b / 1e6)), f1(r.fetch_bytes_copy_tls.map(|b| b / 1e6))),
            ]
        })
        .collect();
    ctx.report.table(&["arm", "round", "MB/s", "broker CPU s", "broker CPU s/GB", "client CPU s/GB", "MB via sendfile / TLS copy"], &rows);
    let best = |arm: &str| -> (Option<f64>, Option<f64>) {
        let of: Vec<&TlsRun> = runs.iter().filter(|r| r.arm == arm).collect();
        (of.iter().map(|r| r.mb_per_s).reduce(f64::max), of.iter().filter_map(|r| r.broker_cpu_s_per_gb).reduce(f64::min))
    };
    let (p_mbps, p_cpu) = best("plaintext-sendfile");
    let (t_mbps, t_cpu) = best("tls-copy");
    let (k_mbps, k_cpu) = best("ktls-sendfile");
    let ktls_note = match ktls {
        Some(true) => format!("kTLS sendfile {} MB/s, {} s/GB.", f1(k_mbps), f2(k_cpu)),
        Some(false) => "kTLS sendfile: unavailable (the broker reports `floe_ktls_enabled 0`: no kernel TLS here, or not in use).".into(),
        None => "kTLS sendfile: unknown (no `floe_ktls_enabled` on /metrics).".into(),
    };
    if let (Some(p), Some(t)) = (p_mbps, t_mbps) {
        ctx.report.para(&format!(
            "**Summary** (best round of each arm): plaintext sendfile {p:.0} MB/s vs TLS copy {t:.0} MB/s: TLS reads at \
             **{:.2}×** the plaintext rate; broker CPU {} vs {} s/GB: TLS costs **{}×** the CPU per GB. {ktls_note}",
            t / p,
            f2(p_cpu),
            f2(t_cpu),
            f2(p_cpu.zip(t_cpu).map(|(p, t)| t / p)),
        ));
        ctx.report.set("summary", serde_json::json!({
            "plaintext_sendfile_mb_per_s": p, "tls_copy_mb_per_s": t, "ktls_sendfile_mb_per_s": k_mbps,
            "throughput_ratio_tls_copy_over_plaintext": t / p,
            "plaintext_broker_cpu_s_per_gb": p_cpu, "tls_copy_broker_cpu_s_per_gb": t_cpu, "ktls_broker_cpu_s_per_gb": k_cpu,
            "cpu_per_gb_ratio_tls_copy_over_plaintext": p_cpu.zip(t_cpu).map(|(p, t)| t / p),
            "ktls_enabled": ktls,
        }));
    }
    ctx.report.para(
        "The client runs on the same cores as the broker (loopback) and decrypts what the broker encrypts, so on the TLS \
         arm both sides pay for the cipher; its CPU is shown so the broker's share can be judged.",
    );
    ctx.report.set("tls_runs", &runs);
    Ok(())
}

// ------------------------------------------------------------------ max-throughput and coupling

/// One load phase on a fresh broker (or the external one): topics (with `topic_config`),
/// load, cost, and what tiering committed to the phase's topics meanwhile.
fn load_phase(
    ctx: &Ctx,
    label: &str,
    w: &Workload,
    overrides: &[(String, String)],
    topic_config: &[(String, String)],
) -> anyhow::Result<(LoadResult, PhaseCost, TieringPhase)> {
    let data = temp_data_dir()?;
    let b = ctx.broker(label, data.path(), overrides)?;
    let topics = ctx.topics(w);
    load::create_topics_with(&b.bootstrap, &topics, w.partitions_per_topic, topic_config)?;
    let pb = bar(label, false);
    let spec = RunSpec { bootstrap: b.bootstrap.clone(), workload: w.clone(), topics: topics.clone(), consume: w.consumers_per_topic > 0, produce_bytes: None };
    let meter = CostMeter::start(&b);
    let tiering_before = TieringCounters::read(&b, &topics);
    let started = std::time::Instant::now();
    let result = load::run(&spec, &pb)?;
    let seconds = started.elapsed().as_secs_f64();
    let tiering = TieringPhase { seconds, counters: tiering_before.zip(TieringCounters::read(&b, &topics)).map(|(a, z)| a.delta(&z)) };
    let cost = meter.finish(&b);
    pb.finish_with_message(format!("{:.0} msg/s, {:.1} MB/s", result.publish_msg_per_s, result.publish_mb_per_s));
    b.stop()?;
    Ok((result, cost, tiering))
}

/// What tiering committed during a load phase (`None` for a broker without metrics).
#[derive(Debug, Clone, Copy, Serialize)]
struct TieringPhase {
    /// Seconds of the whole load (warm-up included), the window of `counters`.
    seconds: f64,
    counters: Option<TieringCounters>,
}

fn latency_rows(arms: &[(&str, &LoadResult)]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for (name, r) in arms {
        for (kind, l) in [("publish", &r.publish_latency), ("end-to-end", &r.e2e_latency)] {
            rows.push(vec![
                name.to_string(),
                kind.into(),
                l.count.to_string(),
                format!("{:.2}", l.p50_ms),
                format!("{:.2}", l.p95_ms),
                format!("{:.2}", l.p99_ms),
                format!("{:.2}", l.p999_ms),
                format!("{:.2}", l.max_ms),
            ]);
        }
    }
    rows
}

const LATENCY_HEADERS: &[&str] = &["arm", "latency", "samples", "p50 ms", "p95 ms", "p99 ms", "p99.9 ms", "max ms"];

fn max_throughput(ctx: &mut Ctx) -> anyhow::Result<()> {
    let w = ctx.workload("1-topic-16-partitions-1kb")?;
    let (r, cost, _) = load_phase(ctx, "max-throughput", &w, &[], &[])?;
    ctx.report.heading(&format!("Maximum throughput (workload `{}`)", w.name));
    ctx.report.para(&format!(
        "{} topic(s) × {} partitions, {}-byte messages ({:.0}% random), {} producer(s) and {} consumer(s) per topic, \
         acks={}, compression={}, batch.size={}, linger.ms={}; {:.0} s warm-up, {:.0} s measured, producers flat out.",
        w.topics, w.partitions_per_topic, w.message_size, w.random_payload_share * 100.0, w.producers_per_topic,
        w.consumers_per_topic, w.acks, w.compression, w.batch_size, w.linger_ms, w.warmup_s, w.duration_s
    ));
    let gb = r.publish_mb_per_s * r.seconds / 1e3;
    ctx.report.table(
        &["publish msg/s", "publish MB/s", "of ceiling", "consume MB/s", "errors", "broker CPU s", "broker CPU s/GB published", "broker peak RSS MiB", "harness CPU s"],
        &[vec![
            format!("{:.0}", r.publish_msg_per_s),
            format!("{:.1}", r.publish_mb_per_s),
            pct(ctx.of_ceiling(r.publish_mb_per_s)),
            format!("{:.1}", r.consume_mb_per_s),
            r.errors.to_string(),
            f2(cost.broker_cpu_s),
            f2(cost.broker_cpu_s.map(|c| c / gb)),
            f1(cost.broker_peak_rss_mib),
            format!("{:.2}", cost.harness_cpu_s),
        ]],
    );
    ctx.report.table(LATENCY_HEADERS, &latency_rows(&[("max rate", &r)]));
    plot::latency_cdf(&ctx.plot_path("latency-cdf.svg"), "latency at maximum rate", &[("publish", &r.publish_hist), ("end-to-end", &r.e2e_hist)])?;
    let series = [
        ("publish MB/s", r.timeline.iter().map(|s| (s.t_s, s.publish_mb_per_s)).collect()),
        ("consume MB/s", r.timeline.iter().map(|s| (s.t_s, s.consume_mb_per_s)).collect()),
    ];
    plot::timeline(&ctx.plot_path("throughput.svg"), "throughput over time", "MB/s", &series)?;
    ctx.report.image("latency-cdf.svg", "latency CDF");
    ctx.report.image("throughput.svg", "throughput over time");
    ctx.report.para(
        "At maximum rate the publish latency is mostly time queued inside the producer (librdkafka batches up to \
         its buffer limit), as in OMB's max-rate runs; `coupling` measures latency at a sustainable rate.",
    );
    ctx.report.set("workload", &w);
    ctx.report.set("result", &r);
    ctx.report.set("cost", cost);
    Ok(())
}

fn kv(k: &str, v: impl ToString) -> (String, String) {
    (k.to_string(), v.to_string())
}

const MIB: f64 = (1u64 << 20) as f64;

fn coupling(ctx: &mut Ctx) -> anyhow::Result<()> {
    let base = ctx.workload("1-topic-16-partitions-1kb")?;
    // 1. The maximum rate, briefly (unless --rate gives the fixed rate).
    let probe = match ctx.opts.rate {
        Some(_) => None,
        None => {
            let mut probe_w = base.clone();
            probe_w.producer_rate = 0;
            probe_w.duration_s = if ctx.opts.quick { 2.0 } else { 15.0 };
            probe_w.warmup_s = if ctx.opts.quick { 0.0 } else { 3.0 };
            Some(load_phase(ctx, "coupling-probe", &probe_w, &[], &[])?.0)
        }
    };
    let rate = ctx.opts.rate.unwrap_or_else(|| probe.as_ref().map_or(1, |p| ((p.publish_msg_per_s / 2.0) as u64).max(1)));
    // 2. The arms at that rate. Tiering on: a short target lag and tick, so the active
    // segments roll and are tiered several times within the measured window.
    let (lag_ms, tick_ms) = if ctx.opts.quick { (500, 200) } else { (2000, 500) };
    let mut w = base.clone();
    w.producer_rate = rate;
    let tiering_topic = vec![kv("floe.iceberg.enabled", "true"), kv("floe.iceberg.target-lag-ms", lag_ms)];
    let mut tiering_broker = vec![kv("floe.iceberg.tick-ms", tick_ms)];
    tiering_broker.extend(ctx.opts.overrides.iter().cloned());
    let arms: Vec<(String, Vec<(String, String)>, Vec<(String, String)>)> = if ctx.opts.bootstrap.is_some() {
        vec![("as configured".into(), vec![], vec![])]
    } else {
        vec![("tiering off".into(), vec![], vec![]), ("tiering on".into(), tiering_broker.clone(), tiering_topic.clone())]
    };
    let mut results = Vec::new();
    for (i, (name, overrides, topic_config)) in arms.iter().enumerate() {
        let (r, cost, tiering) = load_phase(ctx, &format!("coupling-arm{i}"), &w, overrides, topic_config)?;
        if !topic_config.is_empty() {
            // The arm must have tiered while it was measured, or it measured nothing.
            let rows = tiering.counters.map_or(0.0, |c| c.rows);
            anyhow::ensure!(
                rows > 0.0,
                "coupling: the tiering-on arm committed no rows to Iceberg during the run (see floe-coupling-arm{i}.log in {})",
                ctx.opts.out.display()
            );
        }
        results.push((name.clone(), r, cost, tiering, !topic_config.is_empty()));
    }
    ctx.report.heading(&format!("Coupling: latency at a fixed rate, Iceberg tiering off vs on (workload `{}`)", w.name));
    ctx.report.para(&format!(
        "{} Each arm runs on a fresh broker for {:.0} s (+{:.0} s warm-up). Tiering on: topic created with \
         `floe.iceberg.enabled=true`, `floe.iceberg.target-lag-ms={lag_ms}`, broker `floe.iceberg.tick-ms={tick_ms}`{}, \
         so the active segments roll and are converted to Parquet and committed to the embedded catalog while the \
         load runs. Tiered rows, Parquet bytes and commits are the deltas of `floe_iceberg_*` over the arm (load \
         start to end, warm-up included); the tiering thread's CPU is its `/proc/PID/task/TID/stat` time.",
        match &probe {
            Some(p) => format!("Probe: {:.0} msg/s flat out ({:.1} MB/s) → fixed rate **{rate} msg/s** (half).", p.publish_msg_per_s, p.publish_mb_per_s),
            None => format!("Fixed rate **{rate} msg/s** (`--rate`)."),
        },
        w.duration_s,
        w.warmup_s,
        if ctx.opts.overrides.is_empty() {
            String::new()
        } else {
            format!(" and {}", ctx.opts.overrides.iter().map(|(k, v)| format!("`{k}={v}`")).collect::<Vec<_>>().join(", "))
        },
    ));
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|(n, r, c, t, on)| {
            let tc = t.counters.filter(|_| *on);
            vec![
                n.clone(),
                rate.to_string(),
                format!("{:.0}", r.publish_msg_per_s),
                format!("{:.2}", r.publish_latency.p50_ms),
                format!("{:.2}", r.publish_latency.p99_ms),
                format!("{:.2}", r.e2e_latency.p99_ms),
                f2(c.broker_cpu_s),
                f1(c.broker_peak_rss_mib),
                tc.map_or("–".into(), |c| format!("{:.0}", c.rows)),
                f2(tc.map(|c| c.rows * w.message_size as f64 / MIB / t.seconds)),
                f1(tc.map(|c| c.parquet_bytes / MIB)),
                tc.map_or("–".into(), |c| format!("{:.0}", c.commits)),
                f2(tc.and_then(|c| c.thread_cpu_s)),
            ]
        })
        .collect();
    ctx.report.table(
        &["arm", "target msg/s", "achieved msg/s", "publish p50 ms", "publish p99 ms", "e2e p99 ms", "broker CPU s", "broker peak RSS MiB",
          "rows tiered", "tiered payload MiB/s", "Parquet MiB", "commits", "tiering thread CPU s"],
        &rows,
    );
    if let [(_, off, off_cost, _, _), (_, on, on_cost, _, _)] = &results[..] {
        let ratio = |a: f64, b: f64| if a > 0.0 { format!("{:.2}×", b / a) } else { "–".into() };
        ctx.report.para(&format!(
            "**Tiering on vs off** (same run, same rate): publish p50 {}, publish p99 {}, end-to-end p99 {}; broker CPU {}.",
            ratio(off.publish_latency.p50_ms, on.publish_latency.p50_ms),
            ratio(off.publish_latency.p99_ms, on.publish_latency.p99_ms),
            ratio(off.e2e_latency.p99_ms, on.e2e_latency.p99_ms),
            off_cost.broker_cpu_s.zip(on_cost.broker_cpu_s).map_or("–".into(), |(a, b)| ratio(a, b)),
        ));
    }
    let named: Vec<(&str, &LoadResult)> = results.iter().map(|(n, r, ..)| (n.as_str(), r)).collect();
    ctx.report.table(LATENCY_HEADERS, &latency_rows(&named));
    let labels: Vec<(String, String)> = results.iter().map(|(n, ..)| (format!("publish, {n}"), format!("end-to-end, {n}"))).collect();
    let mut series = Vec::new();
    for ((_, r, ..), (lp, le)) in results.iter().zip(&labels) {
        series.push((lp.as_str(), &r.publish_hist));
        series.push((le.as_str(), &r.e2e_hist));
    }
    plot::latency_cdf(&ctx.plot_path("latency-cdf.svg"), &format!("latency at {rate} msg/s"), &series)?;
    let tl: Vec<(&str, Vec<(f64, f64)>)> =
        results.iter().map(|(n, r, ..)| (n.as_str(), r.timeline.iter().map(|s| (s.t_s, s.publish_msg_per_s)).collect())).collect();
    plot::timeline(&ctx.plot_path("throughput.svg"), "publish rate over time", "msg/s", &tl)?;
    ctx.report.image("latency-cdf.svg", "latency CDF");
    ctx.report.image("throughput.svg", "publish rate over time");
    ctx.report.set("probe", &probe);
    ctx.report.set("fixed_rate", rate);
    ctx.report.set("tiering_target_lag_ms", lag_ms);
    ctx.report.set("tiering_tick_ms", tick_ms);
    ctx.report.set(
        "arms",
        results
            .iter()
            .map(|(n, r, c, t, on)| serde_json::json!({"arm": n, "tiering": on, "result": r, "cost": c, "tiering_counters": t}))
            .collect::<Vec<_>>(),
    );
    Ok(())
}

// ------------------------------------------------------------------ tiering-cost

/// What tiering a backlog cost.
#[derive(Debug, Serialize)]
struct TieringCost {
    records: i64,
    log_bytes: u64,
    largest_segment_bytes: u64,
    seconds_to_commit: f64,
    log_mib_per_s: f64,
    broker_cpu_s: Option<f64>,
    tiering_thread_cpu_s: Option<f64>,
    log_mib_per_cpu_s: Option<f64>,
    cpu_s_per_gb: Option<f64>,
    parquet_bytes_committed: f64,
    parquet_bytes_on_disk: u64,
    parquet_over_log: f64,
    rows_committed: f64,
    commits: f64,
    rss_before_mib: Option<f64>,
    peak_rss_mib: Option<f64>,
    peak_rss_delta_mib: Option<f64>,
}

/// `tiering-cost`: the raw arm (the value's bytes in a binary column), then the typed
/// arms (`floe.iceberg.value.format=schema-registry`: Avro and Protobuf events of the
/// same size, decoded into typed columns), each on a fresh broker; a summary compares them.
fn tiering_cost(ctx: &mut Ctx) -> anyhow::Result<()> {
    let mut w = ctx.workload("tiering-1kb")?;
    // Every payload's random share is fresh, so Parquet's dictionary and zstd cannot
    // exploit the load generator's repeated templates: the size ratio is honest.
    w.fresh_random = true;
    let backlog_mb = ctx.opts.backlog_mb.unwrap_or(if ctx.opts.quick { 8 } else { w.consumer_backlog_mb.max(1) });
    let mut rows = Vec::new();
    let mut raw_rate = None;
    for arm in [None, Some(ValueKind::Avro), Some(ValueKind::Protobuf)] {
        let c = tiering_cost_arm(ctx, &w, backlog_mb, arm)?;
        let name = arm.map_or("raw", ValueKind::name);
        if arm.is_none() {
            raw_rate = c.log_mib_per_cpu_s;
        }
        rows.push(vec![
            format!("`{name}`"),
            f1(c.log_mib_per_cpu_s),
            f2(c.cpu_s_per_gb),
            format!("{:.3}", c.parquet_over_log),
            c.log_mib_per_cpu_s.zip(raw_rate).map_or("–".into(), |(t, r)| format!("{:.2}", t / r)),
        ]);
    }
    ctx.report.heading("Tiering cost by value format (one run)");
    ctx.report.para(
        "The same scenario per arm: `raw` stores the value's bytes; `avro` and `protobuf` produce events of the \
         same size in the Confluent wire format (schema registered with Floe's registry) to a topic with \
         `floe.iceberg.value.format=schema-registry`, so tiering decodes every value into typed columns \
         (numbers, strings, an enum, a timestamp, a list, a map, a nullable field and a text body). \
         The ratio is typed ÷ raw throughput per broker CPU-second, measured in this run.",
    );
    ctx.report.table(&["arm", "log MiB per broker CPU-s", "broker CPU-s per GB", "Parquet ÷ log", "÷ raw"], &rows);
    Ok(())
}

fn tiering_cost_arm(ctx: &mut Ctx, w: &Workload, backlog_mb: u64, arm: Option<ValueKind>) -> anyhow::Result<TieringCost> {
    let arm_name = arm.map_or("raw", ValueKind::name);
    let backlog = backlog_mb * 1_000_000;
    let partitions = w.partitions_per_topic.max(1);
    // One segment per partition holds the whole backlog (Kafka caps segment.bytes at 2 GiB),
    // so a full run tiers single segments of ~1 GiB: the memory figure is for that case.
    let segment_bytes = (backlog / u64::from(partitions) * 11 / 10 + (16 << 20)).min(i32::MAX as u64);
    let tick_ms = if ctx.opts.quick { 100 } else { 200 };
    let data = temp_data_dir()?;
    let registry = format!("127.0.0.1:{}", crate::broker::free_port()?);
    let mut overrides = vec![kv("floe.iceberg.tick-ms", tick_ms)];
    if arm.is_some() {
        overrides.push(kv("floe.schema.registry.listen", &registry));
    }
    let b = ctx.broker(&format!("tiering-cost-{arm_name}"), data.path(), &overrides)?;
    let topics = ctx.topics(w);
    let topic = topics[0].clone();
    load::create_topics_with(&b.bootstrap, &topics[..1], partitions, &[kv("segment.bytes", segment_bytes)])?;

    // 1. The backlog, tiering off.
    let pb = bar(&format!("backlog ({arm_name}): produce (tiering off)"), true);
    let (produced_mb_per_s, produced_json) = match arm {
        None => {
            let spec = RunSpec { bootstrap: b.bootstrap.clone(), workload: w.clone(), topics: topics[..1].to_vec(), consume: false, produce_bytes: Some(backlog) };
            let produced = load::run(&spec, &pb)?;
            (produced.publish_mb_per_s, serde_json::to_value(&produced)?)
        }
        Some(kind) => {
            let id = typed_payload::register(&registry, &format!("{topic}-value"), kind)?;
            let produced = typed_payload::produce(&b.bootstrap, &topic, partitions, kind, id, w.message_size, backlog, &w.compression)?;
            (produced.bytes as f64 / 1e6 / produced.seconds, serde_json::json!({"records": produced.records, "bytes": produced.bytes, "seconds": produced.seconds}))
        }
    };
    pb.finish();
    let end_offsets = load::end_offsets(&b.bootstrap, &topic, partitions)?;
    let records: i64 = end_offsets.iter().sum();
    let partition_dirs: Vec<PathBuf> = (0..partitions).map(|p| data.path().join(format!("{topic}-{p}"))).collect();
    let log_bytes: u64 = partition_dirs.iter().map(|d| tiering::file_bytes(d, ".log")).sum();
    let largest_segment_bytes = partition_dirs.iter().flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .filter_map(|e| e.metadata().ok().map(|m| m.len()))
        .max()
        .unwrap_or(0);

    // 2. Tiering on (AlterConfigs replaces the overrides: keep segment.bytes), until the
    // table's committed offsets reach the log end of every partition.
    let rss_before = b.stats().map(|s| s.rss_bytes);
    let meter = CostMeter::start(&b);
    let counters_before = TieringCounters::read(&b, &topics);
    let started = std::time::Instant::now();
    let mut settings = vec![
        kv("segment.bytes", segment_bytes),
        kv("floe.iceberg.enabled", "true"),
        kv("floe.iceberg.target-lag-ms", 0),
    ];
    if arm.is_some() {
        settings.push(kv("floe.iceberg.value.format", "schema-registry"));
    }
    load::alter_topic_config(&b.bootstrap, &topic, &settings)?;
    let pb = bar(&format!("tiering the backlog ({arm_name})"), false);
    pb.set_length(records.max(0) as u64);
    let timeout = Duration::from_secs(if ctx.opts.quick { 60 } else { 900 });
    loop {
        let committed = tiering::committed_offsets(&b, &topic).unwrap_or_default();
        let done: i64 = (0..partitions as i32).map(|p| committed.get(&p).copied().unwrap_or(0)).sum();
        pb.set_position(done.max(0) as u64);
        if (0..partitions as i32).all(|p| committed.get(&p).copied().unwrap_or(0) >= end_offsets[p as usize]) {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < timeout,
            "tiering-cost: {done} of {records} records committed after {timeout:?} (see floe-tiering-cost-{arm_name}.log in {})",
            ctx.opts.out.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let seconds = started.elapsed().as_secs_f64();
    let counters = counters_before.zip(TieringCounters::read(&b, &topics)).map(|(a, z)| a.delta(&z)).unwrap_or_default();
    let cost = meter.finish(&b);
    pb.finish_with_message(format!("{seconds:.1} s"));
    let parquet_on_disk = tiering::file_bytes(&data.path().join("iceberg").join("warehouse"), ".parquet");
    b.stop()?;

    let log_mib = log_bytes as f64 / MIB;
    let rss_before_mib = rss_before.map(|r| r as f64 / MIB);
    let c = TieringCost {
        records,
        log_bytes,
        largest_segment_bytes,
        seconds_to_commit: seconds,
        log_mib_per_s: log_mib / seconds,
        broker_cpu_s: cost.broker_cpu_s,
        tiering_thread_cpu_s: counters.thread_cpu_s,
        log_mib_per_cpu_s: cost.broker_cpu_s.filter(|c| *c > 0.0).map(|c| log_mib / c),
        cpu_s_per_gb: cost.broker_cpu_s.map(|c| c / (log_bytes as f64 / 1e9)),
        parquet_bytes_committed: counters.parquet_bytes,
        parquet_bytes_on_disk: parquet_on_disk,
        parquet_over_log: counters.parquet_bytes / log_bytes.max(1) as f64,
        rows_committed: counters.rows,
        commits: counters.commits,
        rss_before_mib,
        peak_rss_mib: cost.broker_peak_rss_mib,
        peak_rss_delta_mib: cost.broker_peak_rss_mib.zip(rss_before_mib).map(|(p, b)| p - b),
    };
    ctx.report.heading(&format!("Tiering cost ({arm_name}): a {backlog_mb} MB backlog to Iceberg (workload `{}`)", w.name));
    ctx.report.para(&format!(
        "Backlog: {} records of {} bytes ({:.0}% random) in {partitions} partition(s), written with tiering off at \
         {:.0} MB/s (acks={}, compression={}); {:.1} MiB of log, largest segment {:.1} MiB (topic `segment.bytes={segment_bytes}`, \
         so each partition's backlog is one segment). Then AlterConfigs sets `floe.iceberg.enabled=true`, \
         `floe.iceberg.target-lag-ms=0` (broker `floe.iceberg.tick-ms={tick_ms}`), and the harness polls \
         `floe_iceberg_committed_offset` until every partition's committed offset reaches its log end. Nothing else \
         loads the broker meanwhile, so its CPU is the tiering's (the tiering thread's own share is shown).",
        records, w.message_size, w.random_payload_share * 100.0, produced_mb_per_s, w.acks, w.compression,
        log_mib, largest_segment_bytes as f64 / MIB,
    ));
    ctx.report.table(
        &["figure", "value"],
        &[
            vec!["time to commit everything".into(), format!("{seconds:.2} s")],
            vec!["log MiB/s tiered (wall clock)".into(), format!("{:.1}", c.log_mib_per_s)],
            vec!["broker CPU s (tiering thread)".into(), format!("{} ({})", f2(c.broker_cpu_s), f2(c.tiering_thread_cpu_s))],
            vec!["**log MiB per broker CPU-second** (MiB/s per core)".into(), f1(c.log_mib_per_cpu_s)],
            vec!["**broker CPU-s per GB of log**".into(), f2(c.cpu_s_per_gb)],
            vec!["Parquet bytes committed ÷ log bytes".into(), format!("{:.3} ({:.1} MiB of {:.1} MiB; {:.1} MiB of .parquet on disk)", c.parquet_over_log, c.parquet_bytes_committed / MIB, log_mib, parquet_on_disk as f64 / MIB)],
            vec!["rows committed / records".into(), format!("{:.0} / {records}", c.rows_committed)],
            vec!["Iceberg commits".into(), format!("{:.0}", c.commits)],
            vec!["broker RSS before → peak while tiering".into(), format!("{} → {} MiB (+{} MiB)", f1(c.rss_before_mib), f1(c.peak_rss_mib), f1(c.peak_rss_delta_mib))],
        ],
    );
    if c.rows_committed as i64 != records {
        ctx.report.para(&format!("**Warning**: {} rows committed for {records} records.", c.rows_committed));
    }
    ctx.report.para(
        "Peak RSS is `VmHWM` after resetting it through `/proc/PID/clear_refs` when tiering was switched on; \
         the segment is read one batch at a time and converted to bounded Arrow batches, so the delta stays \
         bounded by the Arrow batch and Parquet row-group buffers, not by the segment size. The log is in the \
         page cache (just written), so this is CPU cost, not disk reads.",
    );
    // The raw arm keeps the report's original keys; typed arms are suffixed.
    let suffix = arm.map_or(String::new(), |k| format!("_{}", k.name()));
    ctx.report.set("workload", w);
    ctx.report.set(&format!("backlog{suffix}"), &produced_json);
    ctx.report.set(&format!("tiering_cost{suffix}"), &c);
    ctx.report.set("segment_bytes", segment_bytes);
    ctx.report.set("tick_ms", tick_ms);
    Ok(c)
}

// ------------------------------------------------------------------ freshness

/// One freshness measurement: an arm (value format) at one target lag.
struct FreshnessRun {
    arm: &'static str,
    lag_ms: u64,
    f: Freshness,
    dead_letters: f64,
}

/// `freshness`: per arm a fresh broker — `raw` (the value's bytes), then `avro` and
/// `protobuf` (events of the same size in the Confluent wire format, the schema
/// registered with Floe's registry, a topic with `floe.iceberg.value.format=schema-registry`)
/// — and per target lag a topic; a summary gives each typed arm against raw, same run.
fn freshness(ctx: &mut Ctx) -> anyhow::Result<()> {
    let quick = ctx.opts.quick;
    let lags: Vec<u64> = if ctx.opts.target_lags_ms.is_empty() {
        if quick { vec![300, 1000] } else { vec![1000, 5000] }
    } else {
        ctx.opts.target_lags_ms.clone()
    };
    let tick_ms: u64 = if quick { 50 } else { 100 };
    let poll = Duration::from_millis(20);
    let (rate, duration_s, partitions, message_size) = if quick { (200, 2.0, 4, 1024) } else { (1000, 30.0, 4, 1024) };
    let mut runs: Vec<FreshnessRun> = Vec::new();
    for arm in [None, Some(ValueKind::Avro), Some(ValueKind::Protobuf)] {
        let arm_name = arm.map_or("raw", ValueKind::name);
        let label = format!("freshness-{arm_name}");
        let data = temp_data_dir()?;
        let registry = format!("127.0.0.1:{}", crate::broker::free_port()?);
        let mut overrides = vec![kv("floe.iceberg.tick-ms", tick_ms)];
        if arm.is_some() {
            overrides.push(kv("floe.schema.registry.listen", &registry));
        }
        let b = ctx.broker(&label, data.path(), &overrides)?;
        for &lag in &lags {
            let tag: String = (0..6).map(|_| fastrand::alphanumeric().to_ascii_lowercase()).collect();
            let topic = format!("floe-bench-freshness-{tag}-{arm_name}-lag{lag}");
            let mut config = vec![kv("floe.iceberg.enabled", "true"), kv("floe.iceberg.target-lag-ms", lag)];
            let values = match arm {
                None => freshness::Values::Raw,
                Some(kind) => {
                    config.push(kv("floe.iceberg.value.format", "schema-registry"));
                    let schema_id = typed_payload::register(&registry, &format!("{topic}-value"), kind)?;
                    freshness::Values::Typed { kind, schema_id }
                }
            };
            load::create_topics_with(&b.bootstrap, std::slice::from_ref(&topic), partitions, &config)?;
            let spec = FreshnessSpec {
                topic: topic.clone(),
                partitions,
                message_size,
                values,
                rate,
                duration_s,
                poll,
                settle: Duration::from_millis(lag * 3 + tick_ms * 10) + Duration::from_secs(20),
            };
            let pb = bar(&format!("freshness ({arm_name}), target lag {lag} ms"), false);
            let f = freshness::measure(&b, &spec, &pb)?;
            pb.finish_with_message(format!("p50 {:.0} ms p99 {:.0} ms", f.latency.p50_ms, f.latency.p99_ms));
            anyhow::ensure!(
                f.acked > 0 && f.visible == f.acked,
                "freshness: {} of {} acknowledged records became visible in the table ({arm_name}, target lag {lag} ms; see floe-{label}.log in {})",
                f.visible, f.acked, ctx.opts.out.display()
            );
            // A typed value that cannot be decoded goes to the dead-letter table and still
            // moves the committed offset: the arm would then measure the wrong table.
            let dead_letters = b.metric("floe_iceberg_dead_letters_total", &format!("topic=\"{topic}\"")).unwrap_or(0.0);
            anyhow::ensure!(dead_letters == 0.0, "freshness ({arm_name}): {dead_letters} records went to {topic}__dlq (see floe-{label}.log in {})", ctx.opts.out.display());
            runs.push(FreshnessRun { arm: arm_name, lag_ms: lag, f, dead_letters });
        }
        b.stop()?;
    }
    ctx.report.heading("Freshness: produce acknowledgement → row visible in the Iceberg table");
    ctx.report.para(&format!(
        "Three arms, each on a fresh broker (`floe.iceberg.tick-ms={tick_ms}`): `raw` (one random {message_size}-byte \
         value, stored as bytes), `avro` and `protobuf` (events of about {message_size} bytes in the Confluent wire \
         format, each encoded afresh, the schema registered with Floe's Schema Registry, the topic tiered with \
         `floe.iceberg.value.format=schema-registry`, so every value is decoded into typed columns). Per arm and \
         target lag a topic of {partitions} partitions with `floe.iceberg.enabled=true` and \
         `floe.iceberg.target-lag-ms=LAG`. A librdkafka producer (acks=all, linger.ms=5) sends {rate} msg/s for \
         {duration_s:.0} s and notes each delivery report's partition, offset and time. The harness reads \
         `floe_iceberg_committed_offset` every {} ms: a record below its partition's committed offset is in a \
         committed snapshot (the gauge moves only after the catalog commit succeeds), so freshness = that read's \
         time − the acknowledgement (an upper bound by at most one poll interval). Every acknowledged record must \
         become visible, and no typed record may go to the dead-letter table, or the run fails.",
        poll.as_millis()
    ));
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let l = &r.f.latency;
            vec![
                format!("`{}`", r.arm),
                r.lag_ms.to_string(),
                format!("{} / {}", r.f.visible, r.f.acked),
                format!("{:.0}", l.p50_ms),
                format!("{:.0}", l.p95_ms),
                format!("{:.0}", l.p99_ms),
                format!("{:.0}", l.max_ms),
                format!("{:.2}", l.p50_ms / r.lag_ms as f64),
                format!("{:.2}", l.p99_ms / r.lag_ms as f64),
            ]
        })
        .collect();
    ctx.report.table(&["arm", "target lag ms", "visible / acked", "p50 ms", "p95 ms", "p99 ms", "max ms", "p50 ÷ lag", "p99 ÷ lag"], &rows);
    ctx.report.para(
        "A partition's active segment is rolled once its oldest untiered record has waited the target lag (as \
         seen by the tiering thread, which looks every tick), then converted and committed: a record waits \
         between ~0 and the target lag for the roll, plus up to a tick, plus the conversion and the catalog \
         commit of the whole topic (one commit covers every partition). What exceeds the lag is that overhead; \
         typed arms add decoding every value against its schema (and, once per table, creating it from the schema).",
    );
    // Each arm against raw at the same lag, this run.
    let raw_of = |lag: u64| runs.iter().find(|r| r.arm == "raw" && r.lag_ms == lag).map(|r| &r.f.latency);
    let mut summary = Vec::new();
    let mut srows = Vec::new();
    for r in &runs {
        let Some(raw) = raw_of(r.lag_ms) else { continue };
        let l = &r.f.latency;
        let (p50_ratio, p99_ratio) = (l.p50_ms / raw.p50_ms, l.p99_ms / raw.p99_ms);
        srows.push(vec![
            format!("`{}`", r.arm),
            r.lag_ms.to_string(),
            format!("{:.0} / {:.0}", l.p50_ms, l.p99_ms),
            format!("{p50_ratio:.2}"),
            format!("{p99_ratio:.2}"),
            format!("{:+.0} / {:+.0}", l.p50_ms - raw.p50_ms, l.p99_ms - raw.p99_ms),
        ]);
        summary.push(serde_json::json!({
            "arm": r.arm, "target_lag_ms": r.lag_ms, "p50_ms": l.p50_ms, "p99_ms": l.p99_ms,
            "p50_over_raw": p50_ratio, "p99_over_raw": p99_ratio,
        }));
    }
    ctx.report.heading("Freshness by value format (one run)");
    ctx.report.para("Each arm's p50 and p99 against `raw` at the same target lag, measured in this run.");
    ctx.report.table(&["arm", "target lag ms", "p50 / p99 ms", "p50 ÷ raw", "p99 ÷ raw", "p50 / p99 − raw, ms"], &srows);
    let labels: Vec<String> = runs.iter().map(|r| format!("{}, target lag {} ms", r.arm, r.lag_ms)).collect();
    let series: Vec<(&str, &hdrhistogram::Histogram<u64>)> = labels.iter().zip(&runs).map(|(n, r)| (n.as_str(), &r.f.hist)).collect();
    plot::latency_cdf(&ctx.plot_path("freshness-cdf.svg"), "ack → visible in Iceberg", &series)?;
    ctx.report.image("freshness-cdf.svg", "freshness CDF");
    ctx.report.set("tick_ms", tick_ms);
    ctx.report.set("poll_ms", poll.as_millis() as u64);
    ctx.report.set("rate", rate);
    ctx.report.set("duration_s", duration_s);
    ctx.report.set("partitions", partitions);
    ctx.report.set("message_size", message_size);
    ctx.report.set(
        "runs",
        runs.iter()
            .map(|r| serde_json::json!({"arm": r.arm, "target_lag_ms": r.lag_ms, "freshness": r.f, "dead_letters": r.dead_letters}))
            .collect::<Vec<_>>(),
    );
    ctx.report.set("summary", summary);
    Ok(())
}

// ------------------------------------------------------------------ table-maintenance

/// One reading of the table: its metadata files, and the query's times unless skipped.
#[derive(Debug, Serialize)]
struct TableReading {
    metadata: iceberg_query::MetadataFiles,
    query: Option<iceberg_query::QueryTimes>,
    skipped: Option<String>,
}

fn read_table(python: &std::path::Path, metadata_dir: &std::path::Path, runs: usize) -> anyhow::Result<TableReading> {
    let metadata = iceberg_query::MetadataFiles::read(metadata_dir)?;
    let (query, skipped) = match iceberg_query::measure(python, &metadata.current, runs)? {
        iceberg_query::QueryOutcome::Measured(q) => (Some(q), None),
        iceberg_query::QueryOutcome::Skipped(why) => (None, Some(why)),
    };
    Ok(TableReading { metadata, query, skipped })
}

/// `table-maintenance`: a topic tiered with `target-lag-ms=0`, written in N rounds, each
/// waited on until committed (so each round is a commit, a snapshot, a manifest and a data
/// file per partition); the broker stopped; a DuckDB aggregate timed on that unmaintained
/// table; `floe iceberg maintain` (the broker binary's CLI: snapshot expiry, small-file
/// compaction with merged manifests, expiry again); the same query on the maintained table.
///
/// Its own scenario rather than an arm of `freshness` or `tiering-cost`: it measures a
/// reader of the table after the broker is done, not the broker's write path, and it runs
/// a second process (the CLI) and a third (Python) on the broker's data dir.
fn table_maintenance(ctx: &mut Ctx) -> anyhow::Result<()> {
    use rdkafka::producer::{BaseRecord, Producer};
    let quick = ctx.opts.quick;
    let commits = ctx.opts.commits.unwrap_or(if quick { 20 } else { 200 }).max(1);
    let (partitions, per_partition, value_size) = (4u32, 25i64, 512usize);
    let tick_ms: u64 = if quick { 50 } else { 100 };
    let query_runs = if quick { 5 } else { 15 };
    let round_timeout = Duration::from_secs(60);
    let data = temp_data_dir()?;
    // The broker's own maintenance never runs in the rounds: the table stays unmaintained.
    let b = ctx.broker(
        "table-maintenance",
        data.path(),
        &[kv("floe.iceberg.tick-ms", tick_ms), kv("floe.iceberg.maintenance-interval-ms", 86_400_000)],
    )?;
    let tag: String = (0..6).map(|_| fastrand::alphanumeric().to_ascii_lowercase()).collect();
    let topic = format!("floe-bench-table-maintenance-{tag}");
    load::create_topics_with(&b.bootstrap, std::slice::from_ref(&topic), partitions, &[
        kv("floe.iceberg.enabled", "true"),
        kv("floe.iceberg.target-lag-ms", 0),
    ])?;
    let producer: rdkafka::producer::BaseProducer = load::client_config(&b.bootstrap)
        .set("acks", "all")
        .set("linger.ms", "2")
        .create()
        .context("producer")?;
    let topics = [topic.clone()];
    let before = TieringCounters::read(&b, &topics);
    let pb = bar(&format!("{commits} tiering commits"), false);
    pb.set_length(commits as u64);
    let mut round_ms: Vec<(f64, f64)> = Vec::with_capacity(commits);
    let value: Vec<u8> = (0..value_size).map(|_| fastrand::u8(..)).collect();
    for round in 1..=commits {
        let t = std::time::Instant::now();
        for i in 0..per_partition * i64::from(partitions) {
            let partition = (i % i64::from(partitions)) as i32;
            let mut record = BaseRecord::<(), [u8]>::to(&topic).partition(partition).payload(&value[..]);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), r)) => {
                        record = r;
                        producer.poll(Duration::from_millis(5));
                    }
                    Err((e, _)) => anyhow::bail!("table-maintenance: produce: {e}"),
                }
            }
        }
        producer.flush(Duration::from_secs(30)).context("flush")?;
        let want = per_partition * round as i64;
        loop {
            let committed = tiering::committed_offsets(&b, &topic).unwrap_or_default();
            if (0..partitions as i32).all(|p| committed.get(&p).copied().unwrap_or(0) >= want) {
                break;
            }
            anyhow::ensure!(
                t.elapsed() < round_timeout,
                "table-maintenance: round {round} not committed within {round_timeout:?} (see floe-table-maintenance.log in {})",
                ctx.opts.out.display()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        round_ms.push((round as f64, t.elapsed().as_secs_f64() * 1000.0));
        pb.set_position(round as u64);
    }
    let made = before.zip(TieringCounters::read(&b, &topics)).map(|(a, z)| a.delta(&z)).unwrap_or_default();
    pb.finish_with_message(format!("{:.0} commits", made.commits));
    b.stop()?;

    let metadata_dir = data.path().join("iceberg").join("warehouse").join("kafka").join(&topic).join("metadata");
    let (python, python_from) = iceberg_query::find_python();
    let sp = spinner("DuckDB query on the unmaintained table");
    let unmaintained = read_table(&python, &metadata_dir, query_runs)?;
    sp.finish();
    let sp = spinner("floe iceberg maintain");
    let started = std::time::Instant::now();
    let mut cmd = std::process::Command::new(&ctx.launcher.bin);
    cmd.args(&ctx.launcher.extra_args)
        .args(["iceberg", "maintain", "--data-dir"])
        .arg(data.path())
        .args(["--table", &topic, "--max-age-ms", "0", "--min-to-keep", "1"]);
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", "warn");
    }
    let out = cmd.output().with_context(|| format!("cannot run {} iceberg maintain", ctx.launcher.bin.display()))?;
    let maintain_s = started.elapsed().as_secs_f64();
    let maintain_out = String::from_utf8_lossy(&out.stdout).trim().to_string();
    anyhow::ensure!(
        out.status.success() && !maintain_out.contains("failed"),
        "floe iceberg maintain failed ({}):\n{maintain_out}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    sp.finish_with_message(format!("{maintain_s:.2} s"));
    let sp = spinner("DuckDB query on the maintained table");
    let maintained = read_table(&python, &metadata_dir, query_runs)?;
    sp.finish();

    // Both readings must see every produced record, once: per partition the count and the last offset.
    let records = per_partition * commits as i64;
    let expected: Vec<(i64, i64, i64)> = (0..i64::from(partitions)).map(|p| (p, records, records - 1)).collect();
    for (name, r) in [("unmaintained", &unmaintained), ("maintained", &maintained)] {
        if let Some(q) = &r.query {
            anyhow::ensure!(q.result == expected, "table-maintenance: the {name} table answered {:?}, expected {expected:?}", q.result);
        }
    }
    anyhow::ensure!(maintained.metadata.snapshots == 1, "table-maintenance: {} snapshots left after maintain --max-age-ms 0 --min-to-keep 1", maintained.metadata.snapshots);

    ctx.report.heading("Table maintenance: a DuckDB query on an unmaintained vs a maintained table");
    ctx.report.para(&format!(
        "One broker (`floe.iceberg.tick-ms={tick_ms}`, `floe.iceberg.maintenance-interval-ms=86400000` so its own \
         maintenance never runs here); a topic of {partitions} partitions with `floe.iceberg.enabled=true`, \
         `floe.iceberg.target-lag-ms=0`. {commits} rounds, each {per_partition} records of {value_size} bytes per \
         partition (acks=all), then a wait until `floe_iceberg_committed_offset` reaches them: each round is a \
         commit ({:.0} commits made), so the table has a snapshot, a manifest and small data files per round. The \
         broker is stopped. **Unmaintained**: DuckDB ({}) runs `SELECT partition, count(*), max(offset) FROM \
         iceberg_scan('<metadata.json>') GROUP BY partition` once to warm up and {query_runs} times timed \
         (`benches/scripts/iceberg_query_time.py`, interpreter from {python_from}). Then `floe iceberg maintain \
         --table TOPIC --max-age-ms 0 --min-to-keep 1` ({maintain_s:.2} s), and **maintained**: the same query on \
         the new metadata. Both answers must be every record once.",
        made.commits,
        unmaintained.query.as_ref().map_or("not run".to_string(), |q| q.duckdb.clone()),
    ));
    if let Some(why) = unmaintained.skipped.as_ref().or(maintained.skipped.as_ref()) {
        let line = format!("The DuckDB query was **skipped**: {why} (interpreter `{}` from {python_from}). Only the metadata figures below were measured.", display_path(&python));
        println!("table-maintenance: {line}");
        ctx.report.para(&line);
    }
    let ratio = |a: f64, z: f64| if a > 0.0 { format!("{:.2}", z / a) } else { "–".into() };
    let q = |r: &TableReading, f: &dyn Fn(&iceberg_query::QueryTimes) -> f64| r.query.as_ref().map(f);
    let qrow = |name: &str, f: &dyn Fn(&iceberg_query::QueryTimes) -> f64, fmt: &dyn Fn(f64) -> String| -> Vec<String> {
        let (a, z) = (q(&unmaintained, f), q(&maintained, f));
        vec![name.into(), a.map_or("–".into(), fmt), z.map_or("–".into(), fmt), a.zip(z).map_or("–".into(), |(a, z)| ratio(a, z))]
    };
    let mrow = |name: &str, a: f64, z: f64| vec![name.into(), format!("{a:.0}"), format!("{z:.0}"), ratio(a, z)];
    let (um, mm) = (&unmaintained.metadata, &maintained.metadata);
    let runs = |r: &TableReading| r.query.as_ref().map_or("–".into(), |q| q.runs_ms.iter().map(|v| format!("{v:.1}")).collect::<Vec<_>>().join(", "));
    ctx.report.table(
        &["figure", "unmaintained", "maintained", "maintained ÷ unmaintained"],
        &[
            qrow(&format!("**query time, median of {query_runs}** (ms)"), &|q| q.median_ms, &|v| format!("{v:.1}")),
            vec!["query runs (ms)".into(), runs(&unmaintained), runs(&maintained), String::new()],
            mrow("snapshots", um.snapshots as f64, mm.snapshots as f64),
            mrow("snapshot-log entries", um.snapshot_log as f64, mm.snapshot_log as f64),
            qrow("manifests of the current snapshot", &|q| q.manifests as f64, &|v| format!("{v:.0}")),
            qrow("data files", &|q| q.data_files as f64, &|v| format!("{v:.0}")),
            qrow("data bytes", &|q| q.data_bytes as f64, &|v| format!("{v:.0}")),
            qrow("rows", &|q| q.rows as f64, &|v| format!("{v:.0}")),
            mrow("current metadata.json bytes", um.current_bytes as f64, mm.current_bytes as f64),
            mrow("metadata/ files", um.dir_files as f64, mm.dir_files as f64),
            mrow("metadata/ bytes (metadata files, manifest lists, manifests)", um.dir_bytes as f64, mm.dir_bytes as f64),
        ],
    );
    ctx.report.para(&format!("`floe iceberg maintain` printed: `{maintain_out}`"));
    ctx.report.para(
        "What maintenance does: snapshot expiry (every snapshot but the current one goes, with the manifest \
         lists only they reached and the metadata files that fall out of the log), then small-file compaction \
         (each partition value's small data files rewritten into files of the target size, one `replace` \
         snapshot that also merges the manifests), then expiry again, which deletes the replaced files. The \
         query's time follows the files a scan opens: the data-file and manifest rows.",
    );
    plot::trials(
        &ctx.plot_path("round-times.svg"),
        "produce → committed, per round (the table grows by a snapshot a round)",
        "round",
        "ms",
        &[("round", round_ms.clone())],
        None,
    )?;
    ctx.report.image("round-times.svg", "time per tiering round");
    let series: Vec<(&str, Vec<(f64, f64)>)> = [("unmaintained", &unmaintained), ("maintained", &maintained)]
        .iter()
        .filter_map(|(n, r)| r.query.as_ref().map(|q| (*n, q.runs_ms.iter().enumerate().map(|(i, v)| ((i + 1) as f64, *v)).collect())))
        .collect();
    if !series.is_empty() {
        plot::trials(&ctx.plot_path("query-times.svg"), "DuckDB aggregate over iceberg_scan, per run", "run", "ms", &series, None)?;
        ctx.report.image("query-times.svg", "query time per run");
    }
    ctx.report.set("commits_requested", commits);
    ctx.report.set("commits_made", made.commits);
    ctx.report.set("partitions", partitions);
    ctx.report.set("records_per_partition_per_round", per_partition);
    ctx.report.set("value_size", value_size);
    ctx.report.set("tick_ms", tick_ms);
    ctx.report.set("query_runs", query_runs);
    ctx.report.set("python", serde_json::json!({"path": display_path(&python), "from": python_from}));
    ctx.report.set("round_ms", round_ms.iter().map(|(_, v)| *v).collect::<Vec<_>>());
    ctx.report.set("maintain_seconds", maintain_s);
    ctx.report.set("maintain_output", &maintain_out);
    ctx.report.set("unmaintained", &unmaintained);
    ctx.report.set("maintained", &maintained);
    ctx.report.set(
        "summary",
        serde_json::json!({
            "query_median_ms_unmaintained": unmaintained.query.as_ref().map(|q| q.median_ms),
            "query_median_ms_maintained": maintained.query.as_ref().map(|q| q.median_ms),
            "query_ratio_maintained_over_unmaintained": unmaintained.query.as_ref().zip(maintained.query.as_ref()).map(|(a, z)| z.median_ms / a.median_ms),
            "snapshots": [um.snapshots, mm.snapshots],
            "data_files": [unmaintained.query.as_ref().map(|q| q.data_files), maintained.query.as_ref().map(|q| q.data_files)],
            "metadata_dir_bytes": [um.dir_bytes, mm.dir_bytes],
            "query_skipped": unmaintained.skipped.as_ref().or(maintained.skipped.as_ref()),
        }),
    );
    Ok(())
}

// ------------------------------------------------------------------ transactions

/// Records per transaction of the transactional arm.
const RECORDS_PER_TXN: usize = 100;

/// The throughput ratio transactional ÷ idempotent the scenario checks against.
const TXN_THROUGHPUT_TARGET: f64 = 0.8;

/// Producers of the concurrent arms: an application with several transactional
/// producers (a stream processor's tasks) against as many idempotent ones.
const TXN_CONCURRENT_PRODUCERS: usize = 8;

#[derive(Debug, Serialize)]
struct TxnArm {
    /// `idempotent`, `transactional`, `idempotent ×8`, …
    label: String,
    topic: String,
    #[serde(flatten)]
    result: txn::ProduceResult,
    cost: PhaseCost,
    broker_cpu_s_per_gb: Option<f64>,
    /// Requests the broker handled during the arm, by API: (count, mean ms), from
    /// `floe_request_duration_seconds` (decoded request → response written).
    broker_requests: BTreeMap<String, (f64, f64)>,
}

/// `floe_request_duration_seconds` by API: (count, sum of seconds).
fn request_times(b: &Broker) -> Option<BTreeMap<String, (f64, f64)>> {
    let text = b.metrics_text()?;
    let of = |name: &str| -> BTreeMap<String, f64> {
        crate::broker::parse_samples(&text, name).into_iter().filter_map(|(l, v)| Some((l.get("api")?.clone(), v))).collect()
    };
    let sums = of("floe_request_duration_seconds_sum");
    Some(of("floe_request_duration_seconds_count").into_iter().map(|(api, n)| (api.clone(), (n, sums.get(&api).copied().unwrap_or(0.0)))).collect())
}

/// Per API, the requests between two [`request_times`] readings: (count, mean ms).
fn request_delta(a: &Option<BTreeMap<String, (f64, f64)>>, z: &Option<BTreeMap<String, (f64, f64)>>) -> BTreeMap<String, (f64, f64)> {
    let (Some(a), Some(z)) = (a, z) else { return BTreeMap::new() };
    z.iter()
        .filter_map(|(api, (n, sum))| {
            let (n0, s0) = a.get(api).copied().unwrap_or((0.0, 0.0));
            (n - n0 > 0.0).then(|| (api.clone(), (n - n0, (sum - s0) / (n - n0) * 1000.0)))
        })
        .collect()
}

#[derive(Debug, Serialize)]
struct IsolatedReadRun {
    round: usize,
    #[serde(flatten)]
    read: txn::IsolatedRead,
    of_ceiling: Option<f64>,
    broker_cpu_s_per_gb: Option<f64>,
    cost: PhaseCost,
    /// Bytes `floe_fetch_bytes_total` counted during the read, sendfile paths.
    fetch_bytes_sendfile: Option<f64>,
    /// Same, copying paths.
    fetch_bytes_copy: Option<f64>,
}

fn fetch_counters(b: &Broker) -> (Option<f64>, Option<f64>) {
    (b.metric("floe_fetch_bytes_total", "sendfile"), b.metric("floe_fetch_bytes_total", "\"copy-"))
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**not met**"
    }
}

fn transactions(ctx: &mut Ctx) -> anyhow::Result<()> {
    let mut w = ctx.workload("1-topic-16-partitions-1kb")?;
    w.acks = "all".into(); // idempotence and transactions need acks=all
    let partitions = w.partitions_per_topic;
    let data = temp_data_dir()?;
    let b = ctx.broker("transactions", data.path(), &[])?;
    let tag: String = (0..6).map(|_| fastrand::alphanumeric().to_ascii_lowercase()).collect();
    let idem_topic = format!("floe-bench-transactions-{tag}-idempotent");
    let txn_topic = format!("floe-bench-transactions-{tag}-transactional");
    load::create_topics(&b.bootstrap, &[idem_topic.clone(), txn_topic.clone()], partitions)?;

    // 1. The producer arms, one after the other on the same broker: one idempotent and
    // one transactional producer, then as many of each as an application with several
    // tasks runs. Idempotent arms write one topic, transactional arms the other.
    let txn_mode = |n: usize| txn::Mode::Transactional { id: format!("floe-bench-{tag}-{n}"), records_per_txn: RECORDS_PER_TXN };
    let modes = [
        (idem_topic.clone(), txn::Mode::Idempotent, 1),
        (txn_topic.clone(), txn_mode(1), 1),
        (idem_topic.clone(), txn::Mode::Idempotent, TXN_CONCURRENT_PRODUCERS),
        (txn_topic.clone(), txn_mode(TXN_CONCURRENT_PRODUCERS), TXN_CONCURRENT_PRODUCERS),
    ];
    let mut arms = Vec::new();
    for (topic, mode, producers) in modes {
        let kind = if matches!(mode, txn::Mode::Idempotent) { "idempotent" } else { "transactional" };
        let name = if producers == 1 { kind.to_string() } else { format!("{kind} ×{producers}") };
        let pb = bar(&format!("{name} producer"), false);
        let spec = txn::ProduceSpec { bootstrap: b.bootstrap.clone(), topic: topic.clone(), workload: w.clone(), mode, producers };
        let meter = CostMeter::start(&b);
        let requests_before = request_times(&b);
        let result = txn::produce(&spec, &pb)?;
        let broker_requests = request_delta(&requests_before, &request_times(&b));
        let cost = meter.finish(&b);
        pb.finish_with_message(format!("{:.0} msg/s, {:.1} MB/s", result.publish_msg_per_s, result.publish_mb_per_s));
        anyhow::ensure!(result.published_messages > 0, "transactions: the {name} producer delivered nothing (see floe-transactions.log in {})", ctx.opts.out.display());
        let gb = result.total_messages as f64 * w.message_size as f64 / 1e9;
        arms.push(TxnArm { label: name, topic, broker_cpu_s_per_gb: cost.broker_cpu_s.map(|c| c / gb), result, cost, broker_requests });
    }
    let (idem, tx, idem_n, tx_n) = (&arms[0], &arms[1], &arms[2], &arms[3]);

    // Every transaction wrote one marker (an offset no consumer sees) to each partition it touched.
    let txn_log_end: i64 = load::end_offsets(&b.bootstrap, &txn_topic, partitions)?.iter().sum();
    let txn_records = tx.result.total_messages + tx_n.result.total_messages;
    let txn_count = tx.result.total_transactions + tx_n.result.total_transactions;
    let markers = (txn_log_end - txn_records as i64).max(0);
    let partitions_per_txn = markers as f64 / txn_count.max(1) as f64;

    // 2. Catch-up reads of the transactional topic, read_committed and read_uncommitted alternating.
    let rounds = if ctx.opts.quick { 1 } else { 3 };
    let expected = txn_records;
    let mut reads = Vec::new();
    for round in 1..=rounds {
        for committed in [true, false] {
            let label = if committed { "read_committed" } else { "read_uncommitted" };
            let pb = bar(&format!("catch-up {label} #{round}"), false);
            let (s0, c0) = fetch_counters(&b);
            let meter = CostMeter::start(&b);
            let read = txn::catch_up(&b.bootstrap, &txn_topic, partitions, committed, expected, &pb)?;
            let cost = meter.finish(&b);
            let (s1, c1) = fetch_counters(&b);
            pb.finish_with_message(format!("{:.0} MB/s", read.mb_per_s));
            let gb = read.bytes as f64 / 1e9;
            reads.push(IsolatedReadRun {
                round,
                of_ceiling: ctx.of_ceiling(read.mb_per_s),
                broker_cpu_s_per_gb: cost.broker_cpu_s.map(|c| c / gb),
                fetch_bytes_sendfile: s0.zip(s1).map(|(a, z)| z - a),
                fetch_bytes_copy: c0.zip(c1).map(|(a, z)| z - a),
                read,
                cost,
            });
        }
    }
    b.stop()?;

    // The report.
    let ratio = tx.result.publish_msg_per_s / idem.result.publish_msg_per_s;
    let ratio_n = tx_n.result.publish_msg_per_s / idem_n.result.publish_msg_per_s;
    ctx.report.heading(&format!("Transactions: idempotent vs transactional producer, flat out (workload `{}`)", w.name));
    ctx.report.para(&format!(
        "One broker, two topics of {partitions} partitions. Each arm runs flat out for {:.0} s \
         (+{:.0} s warm-up), {}-byte messages ({:.0}% random), acks=all, compression={}, batch.size={}, linger.ms={}: \
         **idempotent** (`enable.idempotence=true`) and **transactional** (`transactional.id`, `init_transactions`, then \
         `begin_transaction`, {RECORDS_PER_TXN} records, `commit_transaction`, in a loop), first with one librdkafka \
         producer, then with {TXN_CONCURRENT_PRODUCERS} at once (each on its own thread, transactional ones each with \
         its own `transactional.id`, as the tasks of a stream processor). Publish latency is per record, \
         `send` → delivery report. *Commit* is `commit_transaction` as an application calls it: librdkafka flushes the \
         transaction's records (the last batch goes at once, without waiting for `linger.ms`), then sends EndTxn, which \
         the broker answers once the markers are written.",
        w.duration_s, w.warmup_s, w.message_size, w.random_payload_share * 100.0, w.compression, w.batch_size, w.linger_ms,
    ));
    let lat = |l: Option<&LatencySummary>, f: fn(&LatencySummary) -> f64| l.map_or("–".into(), |l| format!("{:.2}", f(l)));
    let rows: Vec<Vec<String>> = arms
        .iter()
        .map(|a| {
            let r = &a.result;
            vec![
                a.label.clone(),
                format!("{:.0}", r.publish_msg_per_s),
                format!("{:.1}", r.publish_mb_per_s),
                pct(ctx.of_ceiling(r.publish_mb_per_s)),
                if r.records_per_txn.is_some() { format!("{:.0}", r.transactions_per_s) } else { "–".into() },
                format!("{:.2}", r.publish_latency.p50_ms),
                format!("{:.2}", r.publish_latency.p99_ms),
                lat(r.commit_latency.as_ref(), |l| l.p50_ms),
                lat(r.commit_latency.as_ref(), |l| l.p99_ms),
                format!("{} / {}", r.errors, r.aborted_transactions),
                f2(a.broker_cpu_s_per_gb),
            ]
        })
        .collect();
    ctx.report.table(
        &["producer", "msg/s", "MB/s", "of ceiling", "txn/s", "publish p50 ms", "publish p99 ms", "commit p50 ms", "commit p99 ms",
          "errors / aborted txns", "broker CPU s/GB"],
        &rows,
    );
    ctx.report.para(&format!(
        "**Transactional ÷ idempotent throughput, one producer each: {ratio:.2}×** (target ≥ {TXN_THROUGHPUT_TARGET}×: {}); \
         {:.0} transactions/s of {RECORDS_PER_TXN} records, commit p50/p99 {} / {} ms. \
         **{TXN_CONCURRENT_PRODUCERS} producers each: {ratio_n:.2}×** ({}); {:.0} transactions/s, commit p50/p99 {} / {} ms.",
        met(ratio >= TXN_THROUGHPUT_TARGET),
        tx.result.transactions_per_s,
        lat(tx.result.commit_latency.as_ref(), |l| l.p50_ms),
        lat(tx.result.commit_latency.as_ref(), |l| l.p99_ms),
        met(ratio_n >= TXN_THROUGHPUT_TARGET),
        tx_n.result.transactions_per_s,
        lat(tx_n.result.commit_latency.as_ref(), |l| l.p50_ms),
        lat(tx_n.result.commit_latency.as_ref(), |l| l.p99_ms),
    ));
    let mut lrows = Vec::new();
    let lat_rows = arms.iter().flat_map(|a| {
        [
            (format!("{}: publish", a.label), Some(&a.result.publish_latency)),
            (format!("{}: commit", a.label), a.result.commit_latency.as_ref()),
        ]
    });
    for (name, l) in lat_rows {
        if let Some(l) = l {
            lrows.push(vec![
                name,
                l.count.to_string(),
                format!("{:.2}", l.p50_ms),
                format!("{:.2}", l.p95_ms),
                format!("{:.2}", l.p99_ms),
                format!("{:.2}", l.p999_ms),
                format!("{:.2}", l.max_ms),
            ]);
        }
    }
    ctx.report.table(&["latency", "samples", "p50 ms", "p95 ms", "p99 ms", "p99.9 ms", "max ms"], &lrows);
    let apis: std::collections::BTreeSet<&String> = arms.iter().flat_map(|a| a.broker_requests.keys()).collect();
    if !apis.is_empty() {
        let cell = |a: &TxnArm, api: &str| a.broker_requests.get(api).map_or("–".into(), |(n, ms)| format!("{n:.0} × {ms:.2} ms"));
        let rows: Vec<Vec<String>> =
            apis.iter().map(|api| std::iter::once(format!("`{api}`")).chain(arms.iter().map(|a| cell(a, api))).collect()).collect();
        ctx.report.para(
            "Requests the broker handled during each arm (warm-up included) and their mean time inside the broker, from \
             decoded request to response written (`floe_request_duration_seconds`): what of the latencies above is the \
             broker's.",
        );
        let headers: Vec<String> =
            std::iter::once("API".to_string()).chain(arms.iter().map(|a| format!("{}: requests × mean", a.label))).collect();
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        ctx.report.table(&headers, &rows);
    }
    // Where a transaction's time goes: the broker's share is the time it spent in the
    // transaction's coordinator requests (per committed transaction, whole arm).
    let per_txn = |api: &str| -> Option<(f64, f64)> {
        let (n, ms) = tx.broker_requests.get(api)?;
        let txns = tx.result.total_transactions.max(1) as f64;
        Some((n / txns, n * ms / txns))
    };
    if tx.result.transactions_per_s > 0.0 {
        let mut text = format!(
            "**Where a transaction's time goes**: {:.1} ms per transaction (1 ÷ {:.0} txn/s): sending its {RECORDS_PER_TXN} \
             records, committing them (commit p50 {} ms: the flush of the last batch and EndTxn).",
            1000.0 / tx.result.transactions_per_s,
            tx.result.transactions_per_s,
            lat(tx.result.commit_latency.as_ref(), |l| l.p50_ms),
        );
        if let (Some((an, ams)), Some((en, ems))) = (per_txn("AddPartitionsToTxn"), per_txn("EndTxn")) {
            text.push_str(&format!(
                " Inside the broker, per transaction: {ams:.1} ms of `AddPartitionsToTxn` ({an:.1} request(s)) and {ems:.1} ms \
                 of `EndTxn` ({en:.1}), {:.1} ms together. A transaction touched {partitions_per_txn:.1} partition(s) on \
                 average ({markers} markers in the topic: log end offsets − records). The coordinator appends each \
                 step before it answers, fsynced only as `flush.messages` says (here the default: none), as Kafka does: \
                 `AddPartitionsToTxn` one record to `__transaction_state` (`coordinator/src/transaction/log.rs`), \
                 `EndTxn` the decision there, a marker to each partition (`broker/src/txn_markers.rs`), then the \
                 completion. The rest of a transaction's time is the client's: the round trips of AddPartitionsToTxn, \
                 the produce and EndTxn, one after the other.",
                ams + ems,
            ));
        }
        ctx.report.para(&text);
    }
    ctx.report.para(
        "Flat out, the idempotent producer's publish latency is mostly time queued inside librdkafka (as in \
         `max-throughput`); the transactional producer's queue never holds more than one transaction.",
    );
    plot::latency_cdf(
        &ctx.plot_path("latency-cdf.svg"),
        "publish and commit latency, flat out",
        &[
            ("idempotent: publish", &idem.result.publish_hist),
            ("transactional: publish", &tx.result.publish_hist),
            ("transactional: commit", &tx.result.commit_hist),
            (&format!("transactional ×{TXN_CONCURRENT_PRODUCERS}: commit"), &tx_n.result.commit_hist),
        ],
    )?;
    let tl: Vec<(&str, Vec<(f64, f64)>)> =
        arms.iter().map(|a| (a.label.as_str(), a.result.timeline.iter().map(|s| (s.t_s, s.publish_msg_per_s)).collect())).collect();
    plot::timeline(&ctx.plot_path("throughput.svg"), "publish rate over time", "msg/s", &tl)?;
    ctx.report.image("latency-cdf.svg", "latency CDF");
    ctx.report.image("throughput.svg", "publish rate over time");

    ctx.report.heading("Catch-up read of the transactional topic: read_committed vs read_uncommitted");
    ctx.report.para(&format!(
        "A librdkafka consumer (explicit assignment, `enable.partition.eof`) reads the transactional topic — {expected} \
         records in {:.0} transactions, one commit marker per partition written to — from offset 0 to the end of every \
         partition, with `isolation.level=read_committed` and `read_uncommitted` alternating ({rounds} round(s) each). \
         The data is in the page cache. *MB via sendfile / copy* is the change of Floe's `floe_fetch_bytes_total` \
         (by `path` label) during the read: record bytes the broker sent with `sendfile(2)` vs copied through user space.",
        (expected as f64 / RECORDS_PER_TXN as f64).ceil(),
    ));
    let mb = |x: Option<f64>| f1(x.map(|b| b / 1e6));
    let rrows: Vec<Vec<String>> = reads
        .iter()
        .map(|r| {
            vec![
                r.read.isolation.clone(),
                r.round.to_string(),
                r.read.messages.to_string(),
                format!("{:.0}", r.read.mb_per_s),
                pct(r.of_ceiling),
                f2(r.broker_cpu_s_per_gb),
                f2(Some(r.cost.harness_cpu_s / (r.read.bytes as f64 / 1e9))),
                format!("{} / {}", mb(r.fetch_bytes_sendfile), mb(r.fetch_bytes_copy)),
            ]
        })
        .collect();
    ctx.report.table(&["isolation", "round", "messages", "MB/s", "of ceiling", "broker CPU s/GB", "consumer CPU s/GB", "MB via sendfile / copy"], &rrows);
    let best = |iso: &str| reads.iter().filter(|r| r.read.isolation == iso).map(|r| r.read.mb_per_s).reduce(f64::max);
    let sum = |iso: &str, f: fn(&IsolatedReadRun) -> Option<f64>| -> Option<f64> {
        reads.iter().filter(|r| r.read.isolation == iso).map(f).sum::<Option<f64>>()
    };
    let (rc, ru) = (best("read_committed"), best("read_uncommitted"));
    let rc_sendfile = sum("read_committed", |r| r.fetch_bytes_sendfile);
    let rc_copy = sum("read_committed", |r| r.fetch_bytes_copy);
    let zero_copy = match (rc_sendfile, rc_copy) {
        (Some(s), Some(c)) if s > 0.0 && c == 0.0 => format!("every read_committed byte went through sendfile ({:.1} MB, none copied): READ_COMMITTED stays zero-copy", s / 1e6),
        (Some(s), Some(c)) => format!("read_committed: {:.1} MB via sendfile, **{:.1} MB copied**", s / 1e6, c / 1e6),
        _ => "no `floe_fetch_bytes_total` on /metrics (external broker): the fetch path is not known".into(),
    };
    let mismatch = reads.iter().any(|r| r.read.messages != expected);
    if let (Some(rc), Some(ru)) = (rc, ru) {
        ctx.report.para(&format!(
            "**read_committed {rc:.0} MB/s vs read_uncommitted {ru:.0} MB/s: {:.2}×** (best round of each); {zero_copy}.{}",
            rc / ru,
            if mismatch { format!(" **Warning**: a read did not return the {expected} records produced.") } else { String::new() },
        ));
    }
    ctx.report.para(
        "READ_COMMITTED fetches stop at the last stable offset and carry the aborted transactions of the range; the \
         broker still sends the stored batches as they are (the consumer skips markers and aborted records), so it \
         costs the broker what READ_UNCOMMITTED does. The consumer shares the two cores with the broker.",
    );
    ctx.report.set("workload", &w);
    ctx.report.set("records_per_txn", RECORDS_PER_TXN);
    ctx.report.set("transactional_topic_markers", markers);
    ctx.report.set("partitions_per_transaction", partitions_per_txn);
    ctx.report.set("producers", &arms);
    ctx.report.set("reads", &reads);
    ctx.report.set(
        "summary",
        serde_json::json!({
            "idempotent_msg_per_s": idem.result.publish_msg_per_s,
            "transactional_msg_per_s": tx.result.publish_msg_per_s,
            "idempotent_mb_per_s": idem.result.publish_mb_per_s,
            "transactional_mb_per_s": tx.result.publish_mb_per_s,
            "throughput_ratio_transactional_over_idempotent": ratio,
            "throughput_ratio_target": TXN_THROUGHPUT_TARGET,
            "throughput_ratio_target_met": ratio >= TXN_THROUGHPUT_TARGET,
            "concurrent_producers": TXN_CONCURRENT_PRODUCERS,
            "idempotent_concurrent_msg_per_s": idem_n.result.publish_msg_per_s,
            "transactional_concurrent_msg_per_s": tx_n.result.publish_msg_per_s,
            "transactional_concurrent_txn_per_s": tx_n.result.transactions_per_s,
            "throughput_ratio_concurrent": ratio_n,
            "throughput_ratio_concurrent_target_met": ratio_n >= TXN_THROUGHPUT_TARGET,
            "transactional_commit_p50_ms": tx.result.commit_latency.as_ref().map(|l| l.p50_ms),
            "transactional_commit_p99_ms": tx.result.commit_latency.as_ref().map(|l| l.p99_ms),
            "read_committed_mb_per_s": rc,
            "read_uncommitted_mb_per_s": ru,
            "read_ratio_committed_over_uncommitted": rc.zip(ru).map(|(a, b)| a / b),
            "read_committed_fetch_bytes_sendfile": rc_sendfile,
            "read_committed_fetch_bytes_copy": rc_copy,
            "reads_returned_every_record": !mismatch,
        }),
    );
    Ok(())
}

// ------------------------------------------------------------------ compaction

/// Versions written of every key of the compaction backlog.
const COMPACTION_VERSIONS: u32 = 10;
/// The cleaner throughput target, MB read per cleaner CPU-second.
const CLEANER_MB_PER_CORE_TARGET: f64 = 100.0;
/// The target for produce p99 while cleaning ÷ without.
const CLEANING_P99_TARGET: f64 = 1.2;

#[derive(Debug, Clone)]
struct CompactionParams {
    backlog_mb: u64,
    value_size: usize,
    segment_bytes: u64,
    backoff_ms: u64,
    rate: u64,
    latency_partitions: u32,
    warmup_s: f64,
    min_window_s: f64,
    timeout: Duration,
}

#[derive(Debug, Serialize)]
struct CompactionArm {
    arm: String,
    cleaner_enabled: bool,
    backlog: compaction::KeyedBacklog,
    log_bytes_before: u64,
    log_segments_before: usize,
    log_bytes_after: u64,
    log_segments_after: usize,
    /// AlterConfigs (min.compaction.lag.ms → 0) to the cleaner's first clean seen on /metrics.
    clean_seconds: Option<f64>,
    /// The latency window: from the AlterConfigs, this long.
    window_seconds: f64,
    /// Cleaner counters, AlterConfigs → clean seen (cleaning arm).
    cleaner: Option<CleanerCounters>,
    /// Broker CPU and RSS over the window.
    cost: PhaseCost,
    latency: LatencySummary,
    producer_errors: u64,
    #[serde(skip)]
    hist: hdrhistogram::Histogram<u64>,
    #[serde(skip)]
    p99_timeline: Vec<(f64, f64)>,
}

/// One arm: a fresh broker, the keyed backlog in a compacted topic held back from the
/// cleaner by `min.compaction.lag.ms`, a fixed-rate producer into another topic, then
/// AlterConfigs releases the backlog (lag 0); with the cleaner on, the window lasts
/// until the clean is seen (at least `min_window_s`); without, `window_s`.
fn compaction_arm(ctx: &Ctx, label: &str, cleaner: bool, p: &CompactionParams, window_s: Option<f64>) -> anyhow::Result<CompactionArm> {
    let data = temp_data_dir()?;
    let b = ctx.broker(label, data.path(), &[kv("log.cleaner.backoff.ms", p.backoff_ms), kv("log.cleaner.enable", cleaner)])?;
    let tag: String = (0..6).map(|_| fastrand::alphanumeric().to_ascii_lowercase()).collect();
    let compacted = format!("floe-bench-compaction-{tag}-compacted");
    let latency_topic = format!("floe-bench-compaction-{tag}-latency");
    let topic_config = |lag_ms: u64| {
        vec![
            kv("cleanup.policy", "compact"),
            kv("segment.bytes", p.segment_bytes),
            kv("min.cleanable.dirty.ratio", "0.01"),
            kv("min.compaction.lag.ms", lag_ms),
        ]
    };
    // Held back: every segment is younger than an hour, so nothing is cleanable yet.
    load::create_topics_with(&b.bootstrap, std::slice::from_ref(&compacted), 1, &topic_config(3_600_000))?;
    load::create_topics(&b.bootstrap, std::slice::from_ref(&latency_topic), p.latency_partitions)?;
    let keys = (p.backlog_mb * 1_000_000 / (p.value_size as u64 * u64::from(COMPACTION_VERSIONS))).max(1);
    let pb = bar(&format!("{label}: keyed backlog"), true);
    let backlog = compaction::produce_keyed(&b.bootstrap, &compacted, keys, COMPACTION_VERSIONS, p.value_size, &pb)?;
    pb.finish_with_message(format!("{:.1} MB/s", backlog.mb_per_s));
    anyhow::ensure!(backlog.errors == 0, "compaction: {} backlog records failed (see floe-{label}.log in {})", backlog.errors, ctx.opts.out.display());
    let dir = data.path().join(format!("{compacted}-0"));
    let (log_bytes_before, log_segments_before) = compaction::log_files(&dir);

    let rated = rated::RatedProducer::start(&b.bootstrap, &latency_topic, p.rate, p.value_size)?;
    std::thread::sleep(Duration::from_secs_f64(p.warmup_s));
    let meter = CostMeter::start(&b);
    let before = CleanerCounters::read(&b);
    let alter_us = rated.now_us();
    load::alter_topic_config(&b.bootstrap, &compacted, &topic_config(0))?;
    let (clean_seconds, counters) = if cleaner {
        let sp = spinner(&format!("{label}: cleaning {:.1} MB", log_bytes_before as f64 / 1e6));
        loop {
            let states = compaction::partition_states(&b, &compacted).unwrap_or_default();
            if let Some(&(ratio, since)) = states.get(&0) {
                if since >= 0.0 && ratio < 0.01 {
                    break;
                }
            }
            let elapsed = Duration::from_micros(rated.now_us() - alter_us);
            anyhow::ensure!(
                elapsed < p.timeout,
                "compaction: the cleaner did not clean the backlog within {:?} (see floe-{label}.log in {})",
                p.timeout,
                ctx.opts.out.display()
            );
            if let Some(now) = CleanerCounters::read(&b) {
                sp.set_message(format!("{:.1} MB read by the cleaner", (now.bytes_read - before.map_or(0.0, |c| c.bytes_read)) / 1e6));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let seconds = (rated.now_us() - alter_us) as f64 / 1e6;
        let counters = before.zip(CleanerCounters::read(&b)).map(|(a, z)| a.delta(&z));
        sp.finish_with_message(format!("{seconds:.2} s"));
        (Some(seconds), counters)
    } else {
        (None, None)
    };
    let window = window_s.unwrap_or_else(|| clean_seconds.unwrap_or(0.0).max(p.min_window_s));
    let end_us = alter_us + (window * 1e6) as u64;
    let sp = spinner(&format!("{label}: {} msg/s into another topic", p.rate));
    while rated.now_us() < end_us {
        std::thread::sleep(Duration::from_millis(10));
    }
    let cost = meter.finish(&b);
    let (samples, producer_errors) = rated.finish()?;
    sp.finish();
    let (log_bytes_after, log_segments_after) = compaction::log_files(&dir);
    b.stop()?;
    let hist = rated::window_histogram(&samples, alter_us, end_us);
    anyhow::ensure!(!hist.is_empty(), "compaction: no produce latency sample in the {window:.2} s window of {label}");
    let warm_us = (p.warmup_s * 1e6) as u64;
    Ok(CompactionArm {
        arm: if cleaner { "cleaning" } else { "no cleaning (log.cleaner.enable=false)" }.into(),
        cleaner_enabled: cleaner,
        backlog,
        log_bytes_before,
        log_segments_before,
        log_bytes_after,
        log_segments_after,
        clean_seconds,
        window_seconds: window,
        cleaner: counters,
        cost,
        latency: LatencySummary::of(&hist),
        producer_errors,
        p99_timeline: rated::p99_timeline(&samples, alter_us.saturating_sub(warm_us), end_us, alter_us, 250_000),
        hist,
    })
}

fn compaction(ctx: &mut Ctx) -> anyhow::Result<()> {
    let quick = ctx.opts.quick;
    let p = CompactionParams {
        backlog_mb: ctx.opts.backlog_mb.unwrap_or(if quick { 8 } else { 512 }),
        value_size: 1024,
        segment_bytes: if quick { 1 << 20 } else { 8 << 20 },
        backoff_ms: 200,
        rate: ctx.opts.rate.unwrap_or(if quick { 2000 } else { 5000 }),
        latency_partitions: 4,
        warmup_s: if quick { 0.5 } else { 2.0 },
        min_window_s: if quick { 1.0 } else { 5.0 },
        timeout: Duration::from_secs(if quick { 60 } else { 1800 }),
    };
    let on = compaction_arm(ctx, "compaction-cleaning", true, &p, None)?;
    let off = compaction_arm(ctx, "compaction-no-cleaning", false, &p, Some(on.window_seconds))?;

    let c = on.cleaner.unwrap_or_default();
    let (cpu_s, cpu_basis) = match c.thread_cpu_s.filter(|s| *s > 0.0) {
        Some(s) => (Some(s), format!("CPU seconds of the `{}-*` thread(s) ({} found in /proc/PID/task)", compaction::CLEANER_THREAD, c.threads)),
        None => (
            on.clean_seconds,
            format!(
                "**wall-clock seconds** (no `{}-*` thread with CPU time was found in /proc/PID/task, so the wall time of the \
                 clean stands in for its CPU time; it includes up to {} ms of the cleaner's backoff)",
                compaction::CLEANER_THREAD,
                p.backoff_ms
            ),
        ),
    };
    let mb_per_core = cpu_s.map(|s| c.bytes_read / 1e6 / s);
    let log_mb_per_core = cpu_s.map(|s| on.log_bytes_before as f64 / 1e6 / s);
    let reclaimed = on.log_bytes_before as f64 - on.log_bytes_after as f64;
    anyhow::ensure!(c.runs >= 1.0 && reclaimed > 0.0, "compaction: the cleaner ran {} time(s) and reclaimed {reclaimed} bytes", c.runs);
    let p99_ratio = on.latency.p99_ms / off.latency.p99_ms;
    let mib = |b: u64| b as f64 / MIB;

    ctx.report.heading("Compaction: the log cleaner's throughput and what it costs producers");
    ctx.report.para(&format!(
        "Per arm a fresh broker (`log.cleaner.backoff.ms={}`) and a topic of one partition with `cleanup.policy=compact`, \
         `segment.bytes={}`, `min.cleanable.dirty.ratio=0.01`, and `min.compaction.lag.ms=3600000` while a keyed backlog \
         is written ({} keys × {COMPACTION_VERSIONS} versions of {}-byte values, each round of keys after the other, acks=all), \
         so nothing is cleanable yet. Then a producer sends {} msg/s of {} bytes (acks=all, linger.ms=1) to another topic \
         ({} partitions, `cleanup.policy=delete`); after {:.1} s, AlterConfigs sets `min.compaction.lag.ms=0` and the \
         backlog is due. **Cleaning** arm: the harness polls `floe_log_cleaner_seconds_since_last_clean` and \
         `floe_log_cleaner_dirty_ratio` of the partition every 20 ms until it has been cleaned; the window is that \
         time, at least {:.1} s. **No cleaning** arm: the same on a broker with `log.cleaner.enable=false`, for a window of \
         the same length. Publish latency (send → delivery report) counts the records sent within the window.",
        p.backoff_ms, p.segment_bytes, on.backlog.keys, p.value_size, p.rate, p.value_size, p.latency_partitions, p.warmup_s, p.min_window_s,
    ));
    ctx.report.table(
        &["figure", "value"],
        &[
            vec!["backlog".into(), format!("{} records, {:.1} MB of values, written at {:.1} MB/s", on.backlog.records, on.backlog.value_bytes as f64 / 1e6, on.backlog.mb_per_s)],
            vec!["log before → after the clean".into(), format!("{:.1} MiB in {} segment(s) → {:.1} MiB in {} segment(s)", mib(on.log_bytes_before), on.log_segments_before, mib(on.log_bytes_after), on.log_segments_after)],
            vec!["bytes reclaimed".into(), format!("{:.1} MiB ({:.0}% of the log)", reclaimed / MIB, reclaimed / on.log_bytes_before.max(1) as f64 * 100.0)],
            vec!["time to clean (AlterConfigs → clean seen)".into(), f2(on.clean_seconds).to_string() + " s"],
            vec!["cleaner runs, MB read / written".into(), format!("{:.0}, {:.1} / {:.1}", c.runs, c.bytes_read / 1e6, c.bytes_written / 1e6)],
            vec!["cleaner thread CPU s".into(), f2(c.thread_cpu_s)],
            vec!["**cleaner MB/s per core** (MB read ÷ CPU s)".into(), format!("{} (target ≥ {CLEANER_MB_PER_CORE_TARGET:.0}: {})", f1(mb_per_core), met(mb_per_core.is_some_and(|v| v >= CLEANER_MB_PER_CORE_TARGET)))],
            vec!["log MB compacted per cleaner CPU-second".into(), f1(log_mb_per_core)],
            vec!["cleaner MB/s (wall clock)".into(), f1(on.clean_seconds.map(|s| c.bytes_read / 1e6 / s))],
            vec!["broker CPU s over the window (cleaning / no cleaning)".into(), format!("{} / {}", f2(on.cost.broker_cpu_s), f2(off.cost.broker_cpu_s))],
        ],
    );
    ctx.report.para(&format!(
        "Per core: the bytes the cleaner read (`floe_log_cleaner_read_bytes_total`, which counts both the pass that \
         builds the offset map over the dirty segments and the pass that rewrites them, so each dirty byte twice) ÷ {cpu_basis}. \
         *Log MB compacted per cleaner CPU-second* divides the log's size before the clean instead."
    ));
    let lrows: Vec<Vec<String>> = [&on, &off]
        .iter()
        .map(|a| {
            let l = &a.latency;
            vec![
                a.arm.clone(),
                p.rate.to_string(),
                format!("{:.2}", a.window_seconds),
                l.count.to_string(),
                format!("{:.2}", l.p50_ms),
                format!("{:.2}", l.p95_ms),
                format!("{:.2}", l.p99_ms),
                format!("{:.2}", l.p999_ms),
                format!("{:.2}", l.max_ms),
                a.producer_errors.to_string(),
            ]
        })
        .collect();
    ctx.report.table(&["arm", "msg/s", "window s", "samples", "p50 ms", "p95 ms", "p99 ms", "p99.9 ms", "max ms", "errors"], &lrows);
    let cleaning_share = on.clean_seconds.map(|s| (s / on.window_seconds).min(1.0));
    ctx.report.para(&format!(
        "**Produce p99 while cleaning ÷ without: {p99_ratio:.2}×** (target ≤ {CLEANING_P99_TARGET}×: {}); the cleaner was \
         at work for {} of the window.{}",
        met(p99_ratio <= CLEANING_P99_TARGET),
        pct(cleaning_share),
        if cleaning_share.is_some_and(|s| s < 0.5) {
            " The clean was short against the window (a small backlog): pass `--backlog-mb` for a longer one."
        } else {
            ""
        },
    ));
    plot::latency_cdf(
        &ctx.plot_path("latency-cdf.svg"),
        &format!("publish latency at {} msg/s, during the window", p.rate),
        &[("cleaning", &on.hist), ("no cleaning", &off.hist)],
    )?;
    plot::timeline(
        &ctx.plot_path("latency-timeline.svg"),
        "publish p99 per 250 ms (0 = AlterConfigs releases the backlog)",
        "p99 ms",
        &[("cleaning", on.p99_timeline.iter().map(|(t, v)| (t + p.warmup_s, *v)).collect()), ("no cleaning", off.p99_timeline.iter().map(|(t, v)| (t + p.warmup_s, *v)).collect())],
    )?;
    ctx.report.image("latency-cdf.svg", "publish latency CDF");
    ctx.report.image("latency-timeline.svg", "publish p99 over time");
    ctx.report.para(&format!(
        "The timeline's x axis starts at the producer's warm-up; the backlog is released at {:.1} s. The cleaner is one OS \
         thread at normal priority, off the request runtime; on two cores it competes with the broker's request path and \
         the producer for CPU.",
        p.warmup_s
    ));
    ctx.report.set("segment_bytes", p.segment_bytes);
    ctx.report.set("cleaner_backoff_ms", p.backoff_ms);
    ctx.report.set("versions_per_key", COMPACTION_VERSIONS);
    ctx.report.set("rate", p.rate);
    ctx.report.set("arms", [&on, &off]);
    ctx.report.set(
        "summary",
        serde_json::json!({
            "log_bytes_before": on.log_bytes_before,
            "log_bytes_after": on.log_bytes_after,
            "bytes_reclaimed": reclaimed,
            "clean_seconds": on.clean_seconds,
            "cleaner_bytes_read": c.bytes_read,
            "cleaner_bytes_written": c.bytes_written,
            "cleaner_thread_cpu_s": c.thread_cpu_s,
            "cleaner_cpu_basis": if c.thread_cpu_s.filter(|s| *s > 0.0).is_some() { "thread_cpu" } else { "wall_clock" },
            "cleaner_mb_per_s_per_core": mb_per_core,
            "cleaner_mb_per_core_target": CLEANER_MB_PER_CORE_TARGET,
            "cleaner_mb_per_core_target_met": mb_per_core.is_some_and(|v| v >= CLEANER_MB_PER_CORE_TARGET),
            "log_mb_per_cleaner_cpu_s": log_mb_per_core,
            "produce_p99_ms_cleaning": on.latency.p99_ms,
            "produce_p99_ms_no_cleaning": off.latency.p99_ms,
            "p99_ratio_cleaning_over_no_cleaning": p99_ratio,
            "p99_ratio_target": CLEANING_P99_TARGET,
            "p99_ratio_target_met": p99_ratio <= CLEANING_P99_TARGET,
            "cleaning_share_of_window": cleaning_share,
        }),
    );
    Ok(())
}
