//! One `floe-bench run`'s [`Options`] and the context every scenario runs in
//! ([`Ctx`]): the workload, the sendfile ceiling, brokers for each arm, topics, plot paths.

use std::path::PathBuf;

use super::common::spinner;
use crate::broker::{Broker, FloeLauncher};
use crate::ceiling::{self, Ceiling};
use crate::report::Report;
use crate::workload::Workload;

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

/// What every scenario runs with: its options, the report it writes, how brokers start, the ceiling.
pub(super) struct Ctx {
    pub(super) opts: Options,
    pub(super) report: Report,
    pub(super) launcher: FloeLauncher,
    pub(super) ceiling: Option<Ceiling>,
}

impl Ctx {
    pub(super) fn workload(&self, builtin: &str) -> anyhow::Result<Workload> {
        let w = match &self.opts.workload {
            Some(p) => Workload::load(p)?,
            None => Workload::builtin(builtin)?,
        };
        Ok(if self.opts.quick { w.quick() } else { w })
    }

    pub(super) fn measure_ceiling(&mut self) -> anyhow::Result<()> {
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

    pub(super) fn of_ceiling(&self, mb_per_s: f64) -> Option<f64> {
        self.ceiling.as_ref().map(|c| mb_per_s / c.mb_per_s)
    }

    /// A broker for one arm: ours on `data_dir` with `overrides`, or the external one.
    pub(super) fn broker(
        &self,
        label: &str,
        data_dir: &std::path::Path,
        overrides: &[(String, String)],
    ) -> anyhow::Result<Broker> {
        match &self.opts.bootstrap {
            Some(b) => Ok(Broker::external(b.clone(), self.opts.broker_pid)),
            None => self.launcher.start(label, data_dir, overrides),
        }
    }

    pub(super) fn topics(&self, w: &Workload) -> Vec<String> {
        let tag: String = (0..6).map(|_| fastrand::alphanumeric().to_ascii_lowercase()).collect();
        (0..w.topics).map(|i| format!("floe-bench-{}-{tag}-{i}", self.opts.scenario)).collect()
    }

    pub(super) fn plot_path(&self, name: &str) -> PathBuf {
        self.opts.out.join(name)
    }
}
