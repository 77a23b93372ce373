//! The scenarios of `floe-bench run`: each sets up brokers and load, measures, and
//! fills a [`Report`].
//!
//! - `zero-copy`: one backlog, read from the beginning by a catch-up consumer on two
//!   broker runs over the same data dir, `fetch.zero.copy=true` vs `false`: MB/s and
//!   broker CPU seconds per GB, beside the machine's `sendfile` ceiling.
//! - `max-throughput`: OMB's `1-topic-16-partitions-1kb` flat out, consumers tailing.
//! - `coupling`: produce and end-to-end latency at half the measured maximum rate, with
//!   tiering off; `--override floe.iceberg.enabled=true` adds the tiering-on arm.
//! - `tiering-cost`, `freshness`: need Iceberg tiering (placeholders).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::broker::{Broker, FloeLauncher};
use crate::ceiling::{self, Ceiling};
use crate::load::{self, CatchUp, LoadResult, RunSpec};
use crate::plot;
use crate::procstat::{self, ProcStats};
use crate::report::{f1, f2, pct, Machine, Report};
use crate::workload::Workload;

/// Every scenario name, in `floe-bench list` order.
pub const SCENARIOS: &[(&str, &str)] = &[
    ("zero-copy", "catch-up consumer MB/s and broker CPU s/GB, fetch.zero.copy=true vs false, beside the sendfile ceiling"),
    ("max-throughput", "OMB 1-topic-16-partitions-1kb at maximum rate: publish rate, publish and end-to-end latency"),
    ("coupling", "publish p50/p99 and end-to-end p99 at half the maximum rate; tiering on via --override floe.iceberg.enabled=true"),
    ("tiering-cost", "placeholder: needs Iceberg tiering"),
    ("freshness", "placeholder: needs Iceberg tiering"),
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
    /// Broker settings of the second arm (`coupling`).
    pub overrides: Vec<(String, String)>,
    /// A workload file instead of the scenario's built-in one.
    pub workload: Option<PathBuf>,
}

/// Runs a scenario; returns the process exit code.
///
/// # Errors
/// Any failure to start, load or measure the broker.
pub fn run(opts: Options) -> anyhow::Result<i32> {
    if matches!(opts.scenario.as_str(), "tiering-cost" | "freshness") {
        // Hook: these arms land with Iceberg tiering (floe-tiering). `tiering-cost` will
        // compare broker CPU/RSS and produce latency with `floe.iceberg.enabled` on and
        // off under the max-throughput workload; `freshness` will measure the lag from a
        // produce acknowledgement to the row being visible in the Iceberg table.
        println!("{}: needs Iceberg tiering", opts.scenario);
        return Ok(if opts.quick { 0 } else { 2 });
    }
    if !SCENARIOS.iter().any(|(n, _)| *n == opts.scenario) {
        bail!("unknown scenario `{}` (see `floe-bench list`)", opts.scenario);
    }
    if !opts.overrides.is_empty() && opts.scenario != "coupling" {
        bail!("--override sets the second arm of `coupling`; pass broker flags to other scenarios with --floe-arg");
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
        ctx.report.set("floe_bin", ctx.launcher.bin.display().to_string());
        ctx.report.para(&format!("Broker: `floe` started by the harness ({}).", ctx.launcher.bin.display()));
    } else {
        ctx.report.para(&format!(
            "Broker: external, `{}`{}.",
            ctx.opts.bootstrap.as_deref().unwrap_or_default(),
            ctx.opts.broker_pid.map_or(" (no --broker-pid: no CPU or RSS figures)".into(), |p| format!(", pid {p}"))
        ));
    }
    match ctx.opts.scenario.as_str() {
        "zero-copy" => zero_copy(&mut ctx)?,
        "max-throughput" => max_throughput(&mut ctx)?,
        "coupling" => coupling(&mut ctx)?,
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

// ------------------------------------------------------------------ max-throughput and coupling

/// One load phase on a fresh broker (or the external one): topics, load, cost.
fn load_phase(ctx: &Ctx, label: &str, w: &Workload, overrides: &[(String, String)]) -> anyhow::Result<(LoadResult, PhaseCost)> {
    let data = temp_data_dir()?;
    let b = ctx.broker(label, data.path(), overrides)?;
    let topics = ctx.topics(w);
    load::create_topics(&b.bootstrap, &topics, w.partitions_per_topic)?;
    let pb = bar(label, false);
    let spec = RunSpec { bootstrap: b.bootstrap.clone(), workload: w.clone(), topics, consume: w.consumers_per_topic > 0, produce_bytes: None };
    let meter = CostMeter::start(&b);
    let result = load::run(&spec, &pb)?;
    let cost = meter.finish(&b);
    pb.finish_with_message(format!("{:.0} msg/s, {:.1} MB/s", result.publish_msg_per_s, result.publish_mb_per_s));
    b.stop()?;
    Ok((result, cost))
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
    let (r, cost) = load_phase(ctx, "max-throughput", &w, &[])?;
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

fn coupling(ctx: &mut Ctx) -> anyhow::Result<()> {
    let base = ctx.workload("1-topic-16-partitions-1kb")?;
    // 1. The maximum rate, briefly.
    let mut probe_w = base.clone();
    probe_w.producer_rate = 0;
    probe_w.duration_s = if ctx.opts.quick { 2.0 } else { 15.0 };
    probe_w.warmup_s = if ctx.opts.quick { 0.0 } else { 3.0 };
    let (probe, _) = load_phase(ctx, "coupling-probe", &probe_w, &[])?;
    let rate = ((probe.publish_msg_per_s / 2.0) as u64).max(1);
    // 2. The arms at half of it.
    let mut w = base.clone();
    w.producer_rate = rate;
    let mut arms: Vec<(String, Vec<(String, String)>)> = vec![("tiering off".into(), vec![])];
    if !ctx.opts.overrides.is_empty() {
        let label = ctx.opts.overrides.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ");
        arms.push((label, ctx.opts.overrides.clone()));
    }
    let mut results = Vec::new();
    for (i, (name, overrides)) in arms.iter().enumerate() {
        let (r, cost) = load_phase(ctx, &format!("coupling-arm{i}"), &w, overrides)?;
        results.push((name.clone(), r, cost));
    }
    ctx.report.heading(&format!("Coupling: latency at half the maximum rate (workload `{}`)", w.name));
    ctx.report.para(&format!(
        "Probe: {:.0} msg/s flat out ({:.1} MB/s) → fixed rate {rate} msg/s. Each arm runs on a fresh broker for \
         {:.0} s (+{:.0} s warm-up). The tiering-on arm is `--override floe.iceberg.enabled=true` (any broker setting \
         works); {}.",
        probe.publish_msg_per_s,
        probe.publish_mb_per_s,
        w.duration_s,
        w.warmup_s,
        if ctx.opts.overrides.is_empty() { "it was not requested in this run" } else { "it ran as the second arm" }
    ));
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|(n, r, c)| {
            vec![
                n.clone(),
                rate.to_string(),
                format!("{:.0}", r.publish_msg_per_s),
                format!("{:.2}", r.publish_latency.p50_ms),
                format!("{:.2}", r.publish_latency.p99_ms),
                format!("{:.2}", r.e2e_latency.p99_ms),
                f2(c.broker_cpu_s),
                f1(c.broker_peak_rss_mib),
            ]
        })
        .collect();
    ctx.report.table(&["arm", "target msg/s", "achieved msg/s", "publish p50 ms", "publish p99 ms", "e2e p99 ms", "broker CPU s", "broker peak RSS MiB"], &rows);
    let named: Vec<(&str, &LoadResult)> = results.iter().map(|(n, r, _)| (n.as_str(), r)).collect();
    ctx.report.table(LATENCY_HEADERS, &latency_rows(&named));
    let labels: Vec<(String, String)> = results.iter().map(|(n, _, _)| (format!("publish, {n}"), format!("end-to-end, {n}"))).collect();
    let mut series = Vec::new();
    for ((_, r, _), (lp, le)) in results.iter().zip(&labels) {
        series.push((lp.as_str(), &r.publish_hist));
        series.push((le.as_str(), &r.e2e_hist));
    }
    plot::latency_cdf(&ctx.plot_path("latency-cdf.svg"), &format!("latency at {rate} msg/s"), &series)?;
    let tl: Vec<(&str, Vec<(f64, f64)>)> =
        results.iter().map(|(n, r, _)| (n.as_str(), r.timeline.iter().map(|s| (s.t_s, s.publish_msg_per_s)).collect())).collect();
    plot::timeline(&ctx.plot_path("throughput.svg"), "publish rate over time", "msg/s", &tl)?;
    ctx.report.image("latency-cdf.svg", "latency CDF");
    ctx.report.image("throughput.svg", "publish rate over time");
    ctx.report.set("probe", &probe);
    ctx.report.set("fixed_rate", rate);
    ctx.report.set(
        "arms",
        results.iter().map(|(n, r, c)| serde_json::json!({"arm": n, "result": r, "cost": c})).collect::<Vec<_>>(),
    );
    Ok(())
}
