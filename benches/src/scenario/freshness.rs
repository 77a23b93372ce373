//! `freshness`: produce acknowledgement → row visible in the Iceberg table. Per arm
//! (`raw`, `avro`, `protobuf`) a fresh broker, and per `floe.iceberg.target-lag-ms` (two,
//! or `--target-lags-ms`) a topic; a fixed-rate producer notes each acknowledgement and the
//! harness polls `floe_iceberg_committed_offset`: p50/p95/p99/max, each against the target
//! lag and each typed arm against raw at the same lag. Every acknowledged record must
//! become visible and no typed record may go to the dead-letter table, or the run fails.
//!
//! What it leaves out: a query engine's view of the table (visible means below the
//! committed offset gauge, an upper bound by one poll interval), high produce rates, and
//! an object store or a remote catalog.

use std::time::Duration;

use super::common::{bar, kv, temp_data_dir};
use super::ctx::Ctx;
use crate::freshness::{self, Freshness, FreshnessSpec};
use crate::load;
use crate::plot;
use crate::typed_payload::{self, ValueKind};

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
pub(super) fn freshness(ctx: &mut Ctx) -> anyhow::Result<()> {
    let quick = ctx.opts.quick;
    let lags: Vec<u64> = if ctx.opts.target_lags_ms.is_empty() {
        if quick {
            vec![300, 1000]
        } else {
            vec![1000, 5000]
        }
    } else {
        ctx.opts.target_lags_ms.clone()
    };
    let tick_ms: u64 = if quick { 50 } else { 100 };
    let poll = Duration::from_millis(20);
    let (rate, duration_s, partitions, message_size) =
        if quick { (200, 2.0, 4, 1024) } else { (1000, 30.0, 4, 1024) };
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
            let tag: String =
                (0..6).map(|_| fastrand::alphanumeric().to_ascii_lowercase()).collect();
            let topic = format!("floe-bench-freshness-{tag}-{arm_name}-lag{lag}");
            let mut config =
                vec![kv("floe.iceberg.enabled", "true"), kv("floe.iceberg.target-lag-ms", lag)];
            let values = match arm {
                None => freshness::Values::Raw,
                Some(kind) => {
                    config.push(kv("floe.iceberg.value.format", "schema-registry"));
                    let schema_id =
                        typed_payload::register(&registry, &format!("{topic}-value"), kind)?;
                    freshness::Values::Typed { kind, schema_id }
                }
            };
            load::create_topics_with(
                &b.bootstrap,
                std::slice::from_ref(&topic),
                partitions,
                &config,
            )?;
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
            pb.finish_with_message(format!(
                "p50 {:.0} ms p99 {:.0} ms",
                f.latency.p50_ms, f.latency.p99_ms
            ));
            anyhow::ensure!(
                f.acked > 0 && f.visible == f.acked,
                "freshness: {} of {} acknowledged records became visible in the table ({arm_name}, target lag {lag} ms; see floe-{label}.log in {})",
                f.visible, f.acked, ctx.opts.out.display()
            );
            // A typed value that cannot be decoded goes to the dead-letter table and still
            // moves the committed offset: the arm would then measure the wrong table.
            let dead_letters = b
                .metric("floe_iceberg_dead_letters_total", &format!("topic=\"{topic}\""))
                .unwrap_or(0.0);
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
    ctx.report.table(
        &[
            "arm",
            "target lag ms",
            "visible / acked",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "max ms",
            "p50 ÷ lag",
            "p99 ÷ lag",
        ],
        &rows,
    );
    ctx.report.para(
        "A partition's active segment is rolled once its oldest untiered record has waited the target lag (as \
         seen by the tiering thread, which looks every tick), then converted and committed: a record waits \
         between ~0 and the target lag for the roll, plus up to a tick, plus the conversion and the catalog \
         commit of the whole topic (one commit covers every partition). What exceeds the lag is that overhead; \
         typed arms add decoding every value against its schema (and, once per table, creating it from the schema).",
    );
    // Each arm against raw at the same lag, this run.
    let raw_of =
        |lag: u64| runs.iter().find(|r| r.arm == "raw" && r.lag_ms == lag).map(|r| &r.f.latency);
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
    ctx.report
        .para("Each arm's p50 and p99 against `raw` at the same target lag, measured in this run.");
    ctx.report.table(
        &["arm", "target lag ms", "p50 / p99 ms", "p50 ÷ raw", "p99 ÷ raw", "p50 / p99 − raw, ms"],
        &srows,
    );
    let labels: Vec<String> =
        runs.iter().map(|r| format!("{}, target lag {} ms", r.arm, r.lag_ms)).collect();
    let series: Vec<(&str, &hdrhistogram::Histogram<u64>)> =
        labels.iter().zip(&runs).map(|(n, r)| (n.as_str(), &r.f.hist)).collect();
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
