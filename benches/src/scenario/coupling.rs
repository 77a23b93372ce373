//! `coupling`: whether Iceberg tiering disturbs the produce path. The maximum rate is
//! probed briefly (unless `--rate` fixes the rate), then two arms on fresh brokers at half
//! of it: tiering off, and tiering on with a short target lag and tick, so the active
//! segments roll and are tiered while the arm is measured (an arm that tiered nothing
//! fails the run): publish p50/p99, end-to-end p99, broker CPU and RSS, and what tiering
//! committed meanwhile (rows, Parquet bytes, commits, the tiering thread's CPU).
//!
//! What it leaves out: what tiering costs per byte (`tiering-cost`), typed tables, a
//! remote catalog or object store (the embedded catalog and the local disk), and
//! `--override` settings other than the tiering-on arm's.

use super::common::{kv, MIB};
use super::ctx::Ctx;
use super::load_phase::{latency_rows, load_phase, LATENCY_HEADERS};
use crate::load::LoadResult;
use crate::plot;
use crate::report::{f1, f2};

/// An arm: its name, the broker's extra settings, the topic's settings.
type Arm = (String, Vec<(String, String)>, Vec<(String, String)>);

pub(super) fn coupling(ctx: &mut Ctx) -> anyhow::Result<()> {
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
    let rate = ctx.opts.rate.unwrap_or_else(|| {
        probe.as_ref().map_or(1, |p| ((p.publish_msg_per_s / 2.0) as u64).max(1))
    });
    // 2. The arms at that rate. Tiering on: a short target lag and tick, so the active
    // segments roll and are tiered several times within the measured window.
    let (lag_ms, tick_ms) = if ctx.opts.quick { (500, 200) } else { (2000, 500) };
    let mut w = base.clone();
    w.producer_rate = rate;
    let tiering_topic =
        vec![kv("floe.iceberg.enabled", "true"), kv("floe.iceberg.target-lag-ms", lag_ms)];
    let mut tiering_broker = vec![kv("floe.iceberg.tick-ms", tick_ms)];
    tiering_broker.extend(ctx.opts.overrides.iter().cloned());
    let arms: Vec<Arm> = if ctx.opts.bootstrap.is_some() {
        vec![("as configured".into(), vec![], vec![])]
    } else {
        vec![
            ("tiering off".into(), vec![], vec![]),
            ("tiering on".into(), tiering_broker.clone(), tiering_topic.clone()),
        ]
    };
    let mut results = Vec::new();
    for (i, (name, overrides, topic_config)) in arms.iter().enumerate() {
        let (r, cost, tiering) =
            load_phase(ctx, &format!("coupling-arm{i}"), &w, overrides, topic_config)?;
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
    ctx.report.heading(&format!(
        "Coupling: latency at a fixed rate, Iceberg tiering off vs on (workload `{}`)",
        w.name
    ));
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
        &[
            "arm",
            "target msg/s",
            "achieved msg/s",
            "publish p50 ms",
            "publish p99 ms",
            "e2e p99 ms",
            "broker CPU s",
            "broker peak RSS MiB",
            "rows tiered",
            "tiered payload MiB/s",
            "Parquet MiB",
            "commits",
            "tiering thread CPU s",
        ],
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
    let named: Vec<(&str, &LoadResult)> =
        results.iter().map(|(n, r, ..)| (n.as_str(), r)).collect();
    ctx.report.table(LATENCY_HEADERS, &latency_rows(&named));
    let labels: Vec<(String, String)> = results
        .iter()
        .map(|(n, ..)| (format!("publish, {n}"), format!("end-to-end, {n}")))
        .collect();
    let mut series = Vec::new();
    for ((_, r, ..), (lp, le)) in results.iter().zip(&labels) {
        series.push((lp.as_str(), &r.publish_hist));
        series.push((le.as_str(), &r.e2e_hist));
    }
    plot::latency_cdf(
        &ctx.plot_path("latency-cdf.svg"),
        &format!("latency at {rate} msg/s"),
        &series,
    )?;
    let tl: Vec<(&str, Vec<(f64, f64)>)> = results
        .iter()
        .map(|(n, r, ..)| {
            (n.as_str(), r.timeline.iter().map(|s| (s.t_s, s.publish_msg_per_s)).collect())
        })
        .collect();
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
