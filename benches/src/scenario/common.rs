//! What several scenarios use: progress bars, a phase's broker CPU and peak RSS
//! ([`CostMeter`]), a scratch data dir, `(key, value)` settings, the broker's request
//! times by API from `/metrics`, and "met" / "not met" for a target.

use std::collections::BTreeMap;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::broker::Broker;
use crate::procstat::{self, ProcStats};

/// A spinner with `prefix`, for a phase of unknown length.
pub(super) fn spinner(prefix: &str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {prefix:.bold} [{elapsed}] {msg}")
            .expect("template"),
    );
    bar.set_prefix(prefix.to_string());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// A progress bar with `prefix`, counting bytes (`bytes`) or a percentage.
pub(super) fn bar(prefix: &str, bytes: bool) -> ProgressBar {
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
pub(super) struct PhaseCost {
    pub(super) broker_cpu_s: Option<f64>,
    pub(super) broker_peak_rss_mib: Option<f64>,
    pub(super) harness_cpu_s: f64,
}

/// Measures a [`PhaseCost`]: started before a phase, finished after it.
pub(super) struct CostMeter {
    before: Option<ProcStats>,
    harness_before: ProcStats,
}

impl CostMeter {
    pub(super) fn start(b: &Broker) -> CostMeter {
        b.reset_peak_rss();
        CostMeter { before: b.stats(), harness_before: procstat::read(0).unwrap_or_default() }
    }

    pub(super) fn finish(self, b: &Broker) -> PhaseCost {
        let after = b.stats();
        let harness = procstat::read(0).unwrap_or_default();
        PhaseCost {
            broker_cpu_s: self.before.zip(after).map(|(a, z)| z.cpu_seconds - a.cpu_seconds),
            broker_peak_rss_mib: after.map(|z| z.peak_rss_bytes as f64 / (1 << 20) as f64),
            harness_cpu_s: harness.cpu_seconds - self.harness_before.cpu_seconds,
        }
    }
}

/// A scratch data dir for one broker, removed when dropped.
pub(super) fn temp_data_dir() -> anyhow::Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new().prefix("floe-bench-").tempdir()?)
}

/// A `(key, value)` setting, for broker overrides and topic configs.
pub(super) fn kv(k: &str, v: impl ToString) -> (String, String) {
    (k.to_string(), v.to_string())
}

/// Bytes in a MiB.
pub(super) const MIB: f64 = (1u64 << 20) as f64;

/// `floe_request_duration_seconds` by API: (count, sum of seconds).
pub(super) fn request_times(b: &Broker) -> Option<BTreeMap<String, (f64, f64)>> {
    let text = b.metrics_text()?;
    let of = |name: &str| -> BTreeMap<String, f64> {
        crate::broker::parse_samples(&text, name)
            .into_iter()
            .filter_map(|(l, v)| Some((l.get("api")?.clone(), v)))
            .collect()
    };
    let sums = of("floe_request_duration_seconds_sum");
    Some(
        of("floe_request_duration_seconds_count")
            .into_iter()
            .map(|(api, n)| (api.clone(), (n, sums.get(&api).copied().unwrap_or(0.0))))
            .collect(),
    )
}

/// Per API, the requests between two [`request_times`] readings: (count, mean ms).
pub(super) fn request_delta(
    a: &Option<BTreeMap<String, (f64, f64)>>,
    z: &Option<BTreeMap<String, (f64, f64)>>,
) -> BTreeMap<String, (f64, f64)> {
    let (Some(a), Some(z)) = (a, z) else { return BTreeMap::new() };
    z.iter()
        .filter_map(|(api, (n, sum))| {
            let (n0, s0) = a.get(api).copied().unwrap_or((0.0, 0.0));
            (n - n0 > 0.0).then(|| (api.clone(), (n - n0, (sum - s0) / (n - n0) * 1000.0)))
        })
        .collect()
}

/// How a report says whether a target was reached.
pub(super) fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**not met**"
    }
}
