//! `zero-copy`: what `sendfile` saves on a catch-up read. A backlog (workload
//! `catch-up-16kb`) is written once, then read from offset 0 by a librdkafka consumer
//! (explicit assignment) on broker runs over the same data dir, `fetch.zero.copy=true`
//! and `false` alternating, three rounds each (one with `--quick`; one run "as configured"
//! with `--bootstrap`): MB/s and its share of the machine's `sendfile` ceiling, broker and
//! consumer CPU seconds per GB, broker peak RSS, and the bytes `floe_fetch_bytes_total`
//! counted by path. The summary takes each arm's best round.
//!
//! What it leaves out: the disk (the backlog stays in the page cache), producers or
//! tailing consumers during the read, TLS (`tls`), and a second machine (the consumer
//! shares the cores with the broker).

use serde::Serialize;

use super::common::{bar, temp_data_dir, CostMeter, PhaseCost};
use super::ctx::Ctx;
use crate::load::{self, CatchUp, RunSpec};
use crate::plot;
use crate::report::{f1, f2, pct};

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

pub(super) fn zero_copy(ctx: &mut Ctx) -> anyhow::Result<()> {
    let w = ctx.workload("catch-up-16kb")?;
    let backlog = w.consumer_backlog_mb.max(1) * 1_000_000;
    let data = temp_data_dir()?;
    let topics = ctx.topics(&w);

    // 1. The backlog, written once.
    let b = ctx.broker("backlog", data.path(), &[])?;
    load::create_topics(&b.bootstrap, &topics, w.partitions_per_topic)?;
    let pb = bar("backlog: produce", true);
    let spec = RunSpec {
        bootstrap: b.bootstrap.clone(),
        workload: w.clone(),
        topics: topics.clone(),
        consume: false,
        produce_bytes: Some(backlog),
    };
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
    plot::timeline(
        &ctx.plot_path("backlog-throughput.svg"),
        "backlog: publish MB/s",
        "MB/s",
        &[("publish", timeline)],
    )?;
    ctx.report.set("backlog", &produced);

    // 2. The catch-up reads, alternating arms on the same data dir.
    let arms: Vec<Option<bool>> = match (&ctx.opts.bootstrap, ctx.opts.quick) {
        (Some(_), _) => vec![None],
        (None, true) => vec![Some(true), Some(false)],
        (None, false) => {
            vec![Some(true), Some(false), Some(true), Some(false), Some(true), Some(false)]
        }
    };
    let mut runs = Vec::new();
    for (i, zc) in arms.iter().enumerate() {
        let arm = match zc {
            Some(true) => "zero-copy (sendfile)",
            Some(false) => "copy (pread + write)",
            None => "as configured",
        };
        let overrides: Vec<(String, String)> =
            zc.map(|z| vec![("fetch.zero.copy".into(), z.to_string())]).unwrap_or_default();
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
                format!(
                    "{} / {}",
                    f1(r.fetch_bytes_sendfile.map(|b| b / 1e6)),
                    f1(r.fetch_bytes_copy.map(|b| b / 1e6))
                ),
            ]
        })
        .collect();
    ctx.report.table(
        &[
            "arm",
            "round",
            "MB/s",
            "of ceiling",
            "broker CPU s",
            "broker CPU s/GB",
            "consumer CPU s/GB",
            "broker peak RSS MiB",
            "MB via sendfile / copy",
        ],
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
