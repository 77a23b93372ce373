//! `max-throughput`: OMB's `1-topic-16-partitions-1kb` flat out on a fresh broker,
//! consumers tailing: publish msg/s and MB/s (and their share of the ceiling), consume
//! MB/s, broker CPU s per GB published, peak RSS, publish and end-to-end latency (CDF),
//! throughput over time.
//!
//! What it leaves out: latency at a sustainable rate (at maximum rate it is mostly time
//! queued in the producer; `coupling` measures that), catch-up reads, tiering,
//! replication, and a second machine (the clients share the cores with the broker).

use super::ctx::Ctx;
use super::load_phase::{latency_rows, load_phase, LATENCY_HEADERS};
use crate::plot;
use crate::report::{f1, f2, pct};

pub(super) fn max_throughput(ctx: &mut Ctx) -> anyhow::Result<()> {
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
        &[
            "publish msg/s",
            "publish MB/s",
            "of ceiling",
            "consume MB/s",
            "errors",
            "broker CPU s",
            "broker CPU s/GB published",
            "broker peak RSS MiB",
            "harness CPU s",
        ],
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
    plot::latency_cdf(
        &ctx.plot_path("latency-cdf.svg"),
        "latency at maximum rate",
        &[("publish", &r.publish_hist), ("end-to-end", &r.e2e_hist)],
    )?;
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
