//! One OMB-style load phase on a fresh broker (or the external one), shared by
//! `max-throughput` and `coupling`: topics, producers and consumers of a workload, the
//! broker's CPU and RSS over it, and what tiering committed to its topics meanwhile; and
//! the latency table both scenarios print.

use serde::Serialize;

use super::common::{bar, temp_data_dir, CostMeter, PhaseCost};
use super::ctx::Ctx;
use crate::load::{self, LoadResult, RunSpec};
use crate::tiering::TieringCounters;
use crate::workload::Workload;

/// One load phase on a fresh broker (or the external one): topics (with `topic_config`),
/// load, cost, and what tiering committed to the phase's topics meanwhile.
pub(super) fn load_phase(
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
    let spec = RunSpec {
        bootstrap: b.bootstrap.clone(),
        workload: w.clone(),
        topics: topics.clone(),
        consume: w.consumers_per_topic > 0,
        produce_bytes: None,
    };
    let meter = CostMeter::start(&b);
    let tiering_before = TieringCounters::read(&b, &topics);
    let started = std::time::Instant::now();
    let result = load::run(&spec, &pb)?;
    let seconds = started.elapsed().as_secs_f64();
    let tiering = TieringPhase {
        seconds,
        counters: tiering_before.zip(TieringCounters::read(&b, &topics)).map(|(a, z)| a.delta(&z)),
    };
    let cost = meter.finish(&b);
    pb.finish_with_message(format!(
        "{:.0} msg/s, {:.1} MB/s",
        result.publish_msg_per_s, result.publish_mb_per_s
    ));
    b.stop()?;
    Ok((result, cost, tiering))
}

/// What tiering committed during a load phase (`None` for a broker without metrics).
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct TieringPhase {
    /// Seconds of the whole load (warm-up included), the window of `counters`.
    pub(super) seconds: f64,
    pub(super) counters: Option<TieringCounters>,
}

pub(super) fn latency_rows(arms: &[(&str, &LoadResult)]) -> Vec<Vec<String>> {
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

pub(super) const LATENCY_HEADERS: &[&str] =
    &["arm", "latency", "samples", "p50 ms", "p95 ms", "p99 ms", "p99.9 ms", "max ms"];
