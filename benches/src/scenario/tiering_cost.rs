//! `tiering-cost`: what converting a backlog to Iceberg costs. Per arm a fresh broker: a
//! backlog written with tiering off (one segment per partition), then tiering switched on
//! by AlterConfigs and the committed offsets polled until every partition's reaches its
//! log end: time to commit, log MiB per broker CPU-second, CPU-s per GB, Parquet ÷ log
//! bytes, RSS before and peak while tiering. Arms: `raw` (the value's bytes), `avro` and
//! `protobuf` (typed tables from Schema Registry schemas); a summary gives each against raw.
//!
//! What it leaves out: the disk (the log is in the page cache, just written), load on the
//! broker while it tiers (`coupling`), an object store or a remote catalog, and brokers it
//! does not start (`--bootstrap` skips it).

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::common::{bar, kv, temp_data_dir, CostMeter, MIB};
use super::ctx::Ctx;
use crate::load::{self, RunSpec};
use crate::report::{f1, f2};
use crate::tiering::{self, TieringCounters};
use crate::typed_payload::{self, ValueKind};
use crate::workload::Workload;

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
pub(super) fn tiering_cost(ctx: &mut Ctx) -> anyhow::Result<()> {
    let mut w = ctx.workload("tiering-1kb")?;
    // Every payload's random share is fresh, so Parquet's dictionary and zstd cannot
    // exploit the load generator's repeated templates: the size ratio is honest.
    w.fresh_random = true;
    let backlog_mb = ctx.opts.backlog_mb.unwrap_or(if ctx.opts.quick {
        8
    } else {
        w.consumer_backlog_mb.max(1)
    });
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
            c.log_mib_per_cpu_s
                .zip(raw_rate)
                .map_or("–".into(), |(t, r)| format!("{:.2}", t / r)),
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
    ctx.report.table(
        &["arm", "log MiB per broker CPU-s", "broker CPU-s per GB", "Parquet ÷ log", "÷ raw"],
        &rows,
    );
    Ok(())
}

fn tiering_cost_arm(
    ctx: &mut Ctx,
    w: &Workload,
    backlog_mb: u64,
    arm: Option<ValueKind>,
) -> anyhow::Result<TieringCost> {
    let arm_name = arm.map_or("raw", ValueKind::name);
    let backlog = backlog_mb * 1_000_000;
    let partitions = w.partitions_per_topic.max(1);
    // One segment per partition holds the whole backlog (Kafka caps segment.bytes at 2 GiB),
    // so a full run tiers single segments of ~1 GiB: the memory figure is for that case.
    let segment_bytes =
        (backlog / u64::from(partitions) * 11 / 10 + (16 << 20)).min(i32::MAX as u64);
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
    load::create_topics_with(
        &b.bootstrap,
        &topics[..1],
        partitions,
        &[kv("segment.bytes", segment_bytes)],
    )?;

    // 1. The backlog, tiering off.
    let pb = bar(&format!("backlog ({arm_name}): produce (tiering off)"), true);
    let (produced_mb_per_s, produced_json) = match arm {
        None => {
            let spec = RunSpec {
                bootstrap: b.bootstrap.clone(),
                workload: w.clone(),
                topics: topics[..1].to_vec(),
                consume: false,
                produce_bytes: Some(backlog),
            };
            let produced = load::run(&spec, &pb)?;
            (produced.publish_mb_per_s, serde_json::to_value(&produced)?)
        }
        Some(kind) => {
            let id = typed_payload::register(&registry, &format!("{topic}-value"), kind)?;
            let produced = typed_payload::produce(
                &b.bootstrap,
                &topic,
                partitions,
                kind,
                id,
                w.message_size,
                backlog,
                &w.compression,
            )?;
            (
                produced.bytes as f64 / 1e6 / produced.seconds,
                serde_json::json!({"records": produced.records, "bytes": produced.bytes, "seconds": produced.seconds}),
            )
        }
    };
    pb.finish();
    let end_offsets = load::end_offsets(&b.bootstrap, &topic, partitions)?;
    let records: i64 = end_offsets.iter().sum();
    let partition_dirs: Vec<PathBuf> =
        (0..partitions).map(|p| data.path().join(format!("{topic}-{p}"))).collect();
    let log_bytes: u64 = partition_dirs.iter().map(|d| tiering::file_bytes(d, ".log")).sum();
    let largest_segment_bytes = partition_dirs
        .iter()
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
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
        let done: i64 =
            (0..partitions as i32).map(|p| committed.get(&p).copied().unwrap_or(0)).sum();
        pb.set_position(done.max(0) as u64);
        if (0..partitions as i32)
            .all(|p| committed.get(&p).copied().unwrap_or(0) >= end_offsets[p as usize])
        {
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
    let counters = counters_before
        .zip(TieringCounters::read(&b, &topics))
        .map(|(a, z)| a.delta(&z))
        .unwrap_or_default();
    let cost = meter.finish(&b);
    pb.finish_with_message(format!("{seconds:.1} s"));
    let parquet_on_disk =
        tiering::file_bytes(&data.path().join("iceberg").join("warehouse"), ".parquet");
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
    ctx.report.heading(&format!(
        "Tiering cost ({arm_name}): a {backlog_mb} MB backlog to Iceberg (workload `{}`)",
        w.name
    ));
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
            vec![
                "broker CPU s (tiering thread)".into(),
                format!("{} ({})", f2(c.broker_cpu_s), f2(c.tiering_thread_cpu_s)),
            ],
            vec![
                "**log MiB per broker CPU-second** (MiB/s per core)".into(),
                f1(c.log_mib_per_cpu_s),
            ],
            vec!["**broker CPU-s per GB of log**".into(), f2(c.cpu_s_per_gb)],
            vec![
                "Parquet bytes committed ÷ log bytes".into(),
                format!(
                    "{:.3} ({:.1} MiB of {:.1} MiB; {:.1} MiB of .parquet on disk)",
                    c.parquet_over_log,
                    c.parquet_bytes_committed / MIB,
                    log_mib,
                    parquet_on_disk as f64 / MIB
                ),
            ],
            vec!["rows committed / records".into(), format!("{:.0} / {records}", c.rows_committed)],
            vec!["Iceberg commits".into(), format!("{:.0}", c.commits)],
            vec![
                "broker RSS before → peak while tiering".into(),
                format!(
                    "{} → {} MiB (+{} MiB)",
                    f1(c.rss_before_mib),
                    f1(c.peak_rss_mib),
                    f1(c.peak_rss_delta_mib)
                ),
            ],
        ],
    );
    if c.rows_committed as i64 != records {
        ctx.report.para(&format!(
            "**Warning**: {} rows committed for {records} records.",
            c.rows_committed
        ));
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
