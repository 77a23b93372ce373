//! `shared-vs-copy` (issue #16): what keeping a topic's older data only in its Iceberg
//! table (`floe.iceberg.storage=shared`, `local.retention.ms=0`) wins and costs against
//! keeping it in the local log as well (`copy`), side by side in one run.
//!
//! One data dir and one backlog per mode (the same size of 1 KiB records, half random,
//! lz4 batches, one partition): two topics of one broker rather than two brokers, so
//! both are read by the same process, page cache and consumer, and each round restarts
//! the broker on that data dir (an empty rebuilt-batch cache: the first read of the
//! shared topic in a round is cold, the second warm).
//!
//! 1. Tiering: each backlog produced and tiered in turn; the tiering thread's CPU per
//!    GB of log; for `shared`, a wait until ListOffsets -4 (the local log start) reaches
//!    the active segment, so everything sealed is served from the table.
//! 2. Storage: local segment bytes + table bytes (data and metadata) per mode.
//! 3. Catch-up from offset 0 (librdkafka, as `zero-copy`): `copy` (sendfile), `shared`
//!    with `floe.iceberg.shared.fetch-compression=original` (lz4 rebuilt) and `none`,
//!    each cold then warm; MB/s, broker CPU s/GB (the table read threads' share apart),
//!    and the bytes each fetch path served (`floe_fetch_bytes_total{path}`).
//! 4. Interference: a producer at a fixed rate (acks=all) and a tailing consumer on a
//!    third topic, alone and while a table-served backfill of the shared topic loops.
//!
//! What it leaves out: S3 (the warehouse is the local disk: reads are page-cache hits),
//! several partitions or read threads, typed tables, consumer groups, table retention
//! (retention.ms=-1: the whole backlog is inside the retention window in both modes).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde::Serialize;

use super::common::{bar, kv, spinner, temp_data_dir, CostMeter, PhaseCost, MIB};
use super::ctx::Ctx;
use crate::broker::Broker;
use crate::fetch_client;
use crate::load::{self, CatchUp, LatencySummary, RunSpec};
use crate::plot;
use crate::procstat;
use crate::report::{f1, f2, pct};
use crate::tiering;
use crate::workload::Workload;

/// Table-served catch-up MB/s ÷ sendfile's, the target.
const TARGET_RATIO: f64 = 0.25;
/// Floe's table read threads, `floe-shared-read-N` (`tiering/src/table_reads.rs`), as
/// `/proc` shows them: Linux keeps 15 bytes of a thread's name.
const READ_THREADS: &str = "floe-shared-rea";
/// ListOffsets' timestamp for the local log start offset (KIP-405).
const LOCAL_LOG_START: i64 = -4;

/// One catch-up read.
#[derive(Debug, Serialize)]
struct Read {
    arm: String,
    /// `sendfile`, or the fetch compression of a table-served read.
    path: String,
    /// The first read of its arm since the broker started (empty cache).
    cold: bool,
    round: usize,
    #[serde(flatten)]
    read: CatchUp,
    of_ceiling: Option<f64>,
    broker_cpu_s_per_gb: Option<f64>,
    read_threads_cpu_s_per_gb: Option<f64>,
    /// Read threads' CPU seconds ÷ the read's seconds: near 1, the one thread is the bottleneck.
    read_threads_busy: Option<f64>,
    consumer_cpu_s_per_gb: f64,
    cost: PhaseCost,
    /// Bytes each fetch path served during the read, MB.
    sendfile_mb: Option<f64>,
    copy_mb: Option<f64>,
    table_rebuild_mb: Option<f64>,
}

/// What producing and tiering one backlog did.
#[derive(Debug, Serialize)]
struct Tiered {
    mode: &'static str,
    topic: String,
    records: i64,
    produce_mb_per_s: f64,
    log_bytes_written: u64,
    seconds_to_commit: f64,
    tiering_thread_cpu_s: Option<f64>,
    tiering_cpu_s_per_gb: Option<f64>,
    parquet_bytes_committed: f64,
    local_log_start: Option<i64>,
    seconds_to_local_deletion: Option<f64>,
}

/// Bytes one mode keeps once tiering and local deletion have run.
#[derive(Debug, Serialize)]
struct Stored {
    mode: &'static str,
    local_bytes: u64,
    local_log_bytes: u64,
    table_data_bytes: u64,
    table_metadata_bytes: u64,
    total_bytes: u64,
}

/// One phase of the interference measurement.
#[derive(Debug, Serialize)]
struct Interference {
    phase: &'static str,
    publish: LatencySummary,
    e2e: LatencySummary,
    publish_msg_per_s: f64,
    errors: u64,
    backfill_passes: u64,
    backfill_mb: f64,
    backfill_seconds: f64,
    table_rebuild_mb: Option<f64>,
    broker_cpu_s: Option<f64>,
}

fn fetch_paths(b: &Broker) -> [Option<f64>; 3] {
    [
        b.metric("floe_fetch_bytes_total", "sendfile"),
        b.metric("floe_fetch_bytes_total", "\"copy-"),
        b.metric("floe_fetch_bytes_total", "table-rebuild"),
    ]
}

fn delta_mb(a: Option<f64>, z: Option<f64>) -> Option<f64> {
    z.map(|z| (z - a.unwrap_or(0.0)) / 1e6)
}

fn read_threads_cpu(b: &Broker) -> Option<f64> {
    b.pid.and_then(|p| procstat::named_threads_cpu(p, READ_THREADS).ok()).map(|(_, s)| s)
}

/// Base offsets of a partition directory's segments (`<base>.log`), ascending.
fn segment_bases(dir: &std::path::Path) -> Vec<i64> {
    let mut bases: Vec<i64> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".log")?.parse::<i64>().ok())
        .collect();
    bases.sort_unstable();
    bases
}

/// Bytes of every file under `dir` (recursively), and of those ending in `suffix`.
fn dir_bytes(dir: &std::path::Path, suffix: &str) -> (u64, u64) {
    let (mut all, mut matching) = (0, 0);
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_dir() {
            let (a, m) = dir_bytes(&e.path(), suffix);
            all += a;
            matching += m;
        } else {
            all += meta.len();
            if e.file_name().to_string_lossy().ends_with(suffix) {
                matching += meta.len();
            }
        }
    }
    (all, matching)
}

/// The directory of table `name` under the warehouse (`<namespace>/<name>` or deeper).
fn table_dir(warehouse: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    for e in std::fs::read_dir(warehouse).ok()?.flatten() {
        let path = e.path();
        if !path.is_dir() {
            continue;
        }
        if e.file_name().to_string_lossy() == name {
            return Some(path);
        }
        if let Some(found) = table_dir(&path, name) {
            return Some(found);
        }
    }
    None
}

/// (data, metadata) bytes of the tables `names`.
fn table_bytes(warehouse: &std::path::Path, names: &[String]) -> (u64, u64) {
    let (mut data, mut all) = (0, 0);
    for n in names {
        if let Some(dir) = table_dir(warehouse, n) {
            let (a, parquet) = dir_bytes(&dir, ".parquet");
            all += a;
            data += parquet;
        }
    }
    (data, all - data)
}

pub(super) fn shared_vs_copy(ctx: &mut Ctx) -> anyhow::Result<()> {
    let quick = ctx.opts.quick;
    let backlog_mb = ctx.opts.backlog_mb.unwrap_or(if quick { 8 } else { 512 });
    let backlog = backlog_mb * 1_000_000;
    let rounds = if quick { 1 } else { 3 };
    let segment_bytes: u64 = if quick { 256 << 10 } else { 8 << 20 };
    let tick_ms = if quick { 100 } else { 200 };
    let lag_ms = if quick { 300 } else { 1000 };
    let rate = ctx.opts.rate.unwrap_or(if quick { 2000 } else { 5000 });
    let w = Workload {
        name: "shared-vs-copy-1kb".into(),
        topics: 1,
        partitions_per_topic: 1,
        message_size: 1024,
        random_payload_share: 0.5,
        producers_per_topic: 1,
        consumers_per_topic: 1,
        producer_rate: 0,
        consumer_backlog_mb: backlog_mb,
        duration_s: 5.0,
        warmup_s: 0.0,
        acks: "1".into(),
        // The producer's codec is what `original` rebuilds: lz4, the usual choice.
        compression: "lz4".into(),
        batch_size: 131_072,
        linger_ms: 5.0,
        // Fresh random halves: Parquet's size is honest, not the 64 templates' repeats.
        fresh_random: true,
    };
    let tag: String = (0..6).map(|_| fastrand::alphanumeric().to_ascii_lowercase()).collect();
    let copy_topic = format!("floe-bench-copy-{tag}");
    let shared_topic = format!("floe-bench-shared-{tag}");
    let latency_topic = format!("floe-bench-latency-{tag}");
    let common = vec![
        kv("floe.iceberg.enabled", "true"),
        kv("floe.iceberg.target-lag-ms", lag_ms),
        kv("segment.bytes", segment_bytes),
        kv("retention.ms", -1),
    ];
    let mut copy_config = common.clone();
    copy_config.push(kv("floe.iceberg.storage", "copy"));
    let shared_config = |fetch_compression: &str| {
        let mut c = common.clone();
        c.extend([
            kv("floe.iceberg.storage", "shared"),
            kv("local.retention.ms", 0),
            kv("floe.iceberg.shared.fetch-compression", fetch_compression),
        ]);
        c
    };
    let base_overrides = vec![
        kv("floe.iceberg.tick-ms", tick_ms),
        kv("log.retention.check.interval.ms", if quick { 200 } else { 500 }),
    ];
    // The catch-up brokers' cache holds the whole backlog in both codecs, so a warm read
    // is served from memory from start to end.
    let cache_bytes = (backlog * 3).max(256 << 20);
    let mut catch_up_overrides = base_overrides.clone();
    catch_up_overrides.push(kv("floe.iceberg.shared.cache-bytes", cache_bytes));
    let data = temp_data_dir()?;

    // 1. Backlogs, tiered; the shared one deleted locally down to its active segment.
    let b = ctx.launcher.start("setup", data.path(), &base_overrides)?;
    load::create_topics_with(&b.bootstrap, std::slice::from_ref(&copy_topic), 1, &copy_config)?;
    load::create_topics_with(
        &b.bootstrap,
        std::slice::from_ref(&shared_topic),
        1,
        &shared_config("original"),
    )?;
    load::create_topics(&b.bootstrap, std::slice::from_ref(&latency_topic), 4)?;
    let timeout = Duration::from_secs(if quick { 45 } else { 900 });
    let mut tiered = Vec::new();
    for (mode, topic) in [("copy", &copy_topic), ("shared", &shared_topic)] {
        let before = tiering::TieringCounters::read(&b, std::slice::from_ref(topic));
        let pb = bar(&format!("backlog ({mode}): produce"), true);
        let spec = RunSpec {
            bootstrap: b.bootstrap.clone(),
            workload: w.clone(),
            topics: vec![topic.clone()],
            consume: false,
            produce_bytes: Some(backlog),
        };
        let produced = load::run(&spec, &pb)?;
        pb.finish();
        let end = load::end_offsets(&b.bootstrap, topic, 1)?[0];
        let started = Instant::now();
        let sp = spinner(&format!("tiering ({mode})"));
        loop {
            let committed = tiering::committed_offsets(&b, topic)
                .unwrap_or_default()
                .get(&0)
                .copied()
                .unwrap_or(0);
            sp.set_message(format!("{committed} / {end}"));
            if committed >= end {
                break;
            }
            anyhow::ensure!(started.elapsed() < timeout, "shared-vs-copy: {mode} topic committed {committed} of {end} after {timeout:?} (see floe-setup.log)");
            std::thread::sleep(Duration::from_millis(50));
        }
        let seconds_to_commit = started.elapsed().as_secs_f64();
        let counters = before
            .zip(tiering::TieringCounters::read(&b, std::slice::from_ref(topic)))
            .map(|(a, z)| a.delta(&z))
            .unwrap_or_default();
        let dir = data.path().join(format!("{topic}-0"));
        let (mut local_log_start, mut seconds_to_local_deletion) = (None, None);
        if mode == "shared" {
            // Everything sealed must leave local disk: the local log start reaches the active segment.
            loop {
                let start = fetch_client::list_offset(&b.bootstrap, topic, 0, LOCAL_LOG_START)?;
                let active = segment_bases(&dir).last().copied().unwrap_or(0);
                sp.set_message(format!(
                    "local log start {start}, active segment {active}, end {end}"
                ));
                if start >= active && start > 0 {
                    local_log_start = Some(start);
                    seconds_to_local_deletion = Some(started.elapsed().as_secs_f64());
                    break;
                }
                anyhow::ensure!(
                    started.elapsed() < timeout,
                    "shared-vs-copy: local log start {start} below the active segment {active} after {timeout:?} (see floe-setup.log)"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        sp.finish_with_message(format!("{seconds_to_commit:.1} s"));
        let log_bytes_written = produced.published_messages * w.message_size as u64;
        tiered.push(Tiered {
            mode,
            topic: topic.clone(),
            records: end,
            produce_mb_per_s: produced.publish_mb_per_s,
            log_bytes_written,
            seconds_to_commit,
            tiering_thread_cpu_s: counters.thread_cpu_s,
            tiering_cpu_s_per_gb: counters
                .thread_cpu_s
                .map(|c| c / (log_bytes_written as f64 / 1e9)),
            parquet_bytes_committed: counters.parquet_bytes,
            local_log_start,
            seconds_to_local_deletion,
        });
    }
    // Local files that retention renamed go after `file.delete.delay.ms`: let them.
    std::thread::sleep(Duration::from_millis(if quick { 500 } else { 2000 }));
    b.stop()?;

    // 2. What each mode stores.
    let warehouse = data.path().join("iceberg").join("warehouse");
    let stored: Vec<Stored> = [("copy", &copy_topic), ("shared", &shared_topic)]
        .into_iter()
        .map(|(mode, topic)| {
            let (local_bytes, local_log_bytes) =
                dir_bytes(&data.path().join(format!("{topic}-0")), ".log");
            let (table_data_bytes, table_metadata_bytes) =
                table_bytes(&warehouse, &[topic.clone(), format!("{topic}__log")]);
            Stored {
                mode,
                local_bytes,
                local_log_bytes,
                table_data_bytes,
                table_metadata_bytes,
                total_bytes: local_bytes + table_data_bytes + table_metadata_bytes,
            }
        })
        .collect();
    let shared_tiered = &tiered[1];
    let table_share =
        shared_tiered.local_log_start.map(|s| s as f64 / shared_tiered.records.max(1) as f64);

    // 3. Catch-up rounds; the arms' order alternates between rounds.
    let mut reads: Vec<Read> = Vec::new();
    for round in 1..=rounds {
        let b =
            ctx.launcher.start(&format!("catch-up-{round}"), data.path(), &catch_up_overrides)?;
        // (fetch compression of the shared topic, or None for the copy topic; cold)
        let mut arms: Vec<(Option<&str>, bool)> = vec![
            (None, true),
            (Some("original"), true),
            (Some("original"), false),
            (Some("none"), true),
            (Some("none"), false),
        ];
        if round % 2 == 0 {
            arms.rotate_left(1);
        }
        for (fc, cold) in arms {
            let topic = match fc {
                None => &copy_topic,
                Some(fc) => {
                    load::alter_topic_config(&b.bootstrap, &shared_topic, &shared_config(fc))?;
                    &shared_topic
                }
            };
            let path = fc.unwrap_or("sendfile").to_string();
            let arm = match fc {
                None => "copy: local log, sendfile".to_string(),
                Some(fc) => format!(
                    "shared: table, fetch-compression={fc}, {}",
                    if cold { "cold" } else { "warm" }
                ),
            };
            let pb = bar(&format!("catch-up #{round} {arm}"), false);
            let paths_before = fetch_paths(&b);
            let threads_before = read_threads_cpu(&b);
            let meter = CostMeter::start(&b);
            let one = load::catch_up(&b.bootstrap, &w, std::slice::from_ref(topic), &pb)?;
            let cost = meter.finish(&b);
            let threads = threads_before.zip(read_threads_cpu(&b)).map(|(a, z)| z - a);
            let paths_after = fetch_paths(&b);
            pb.finish_with_message(format!("{:.0} MB/s", one.mb_per_s));
            let gb = one.bytes as f64 / 1e9;
            reads.push(Read {
                arm,
                path,
                cold,
                round,
                of_ceiling: ctx.of_ceiling(one.mb_per_s),
                broker_cpu_s_per_gb: cost.broker_cpu_s.map(|c| c / gb),
                read_threads_cpu_s_per_gb: threads.map(|c| c / gb),
                read_threads_busy: threads.map(|c| c / one.seconds.max(1e-3)),
                consumer_cpu_s_per_gb: cost.harness_cpu_s / gb,
                cost,
                sendfile_mb: delta_mb(paths_before[0], paths_after[0]),
                copy_mb: delta_mb(paths_before[1], paths_after[1]),
                table_rebuild_mb: delta_mb(paths_before[2], paths_after[2]),
                read: one,
            });
        }
        b.stop()?;
    }

    // 4. Interference: a fixed-rate producer and a tailing consumer, alone, then beside a
    // table-served backfill. A 16 MiB cache holds two read-aheads, so every pass of the
    // backfill is rebuilt from the table, as a backfill larger than the cache is.
    let mut interference_overrides = base_overrides.clone();
    interference_overrides.push(kv("floe.iceberg.shared.cache-bytes", 16u64 << 20));
    let b = ctx.launcher.start("interference", data.path(), &interference_overrides)?;
    load::alter_topic_config(&b.bootstrap, &shared_topic, &shared_config("original"))?;
    let lw = Workload {
        name: "shared-vs-copy-latency".into(),
        topics: 1,
        partitions_per_topic: 4,
        message_size: 1024,
        random_payload_share: 0.5,
        producers_per_topic: 1,
        consumers_per_topic: 1,
        producer_rate: rate,
        consumer_backlog_mb: 0,
        duration_s: if quick { 3.0 } else { 20.0 },
        warmup_s: if quick { 1.0 } else { 2.0 },
        acks: "all".into(),
        compression: "none".into(),
        batch_size: 131_072,
        linger_ms: 1.0,
        fresh_random: false,
    };
    let mut phases = Vec::new();
    let mut hists = Vec::new();
    // Alone before and after: a fresh broker's first seconds (and the machine's neighbours)
    // move a single baseline's tail; the backfill is compared with the quieter of the two.
    for (phase, backfill) in
        [("alone", false), ("with table-served backfill", true), ("alone, again", false)]
    {
        let pb = bar(&format!("latency at {rate} msg/s, {phase}"), false);
        let spec = RunSpec {
            bootstrap: b.bootstrap.clone(),
            workload: lw.clone(),
            topics: vec![latency_topic.clone()],
            consume: true,
            produce_bytes: None,
        };
        let stop = AtomicBool::new(false);
        let (passes, backfill_bytes) = (AtomicU64::new(0), AtomicU64::new(0));
        let table_before = fetch_paths(&b)[2];
        let meter = CostMeter::start(&b);
        let started = Instant::now();
        let result = std::thread::scope(|s| -> anyhow::Result<load::LoadResult> {
            let looping = backfill.then(|| {
                s.spawn(|| -> anyhow::Result<()> {
                    while !stop.load(Ordering::Relaxed) {
                        let one = load::catch_up(
                            &b.bootstrap,
                            &w,
                            std::slice::from_ref(&shared_topic),
                            &ProgressBar::hidden(),
                        )?;
                        passes.fetch_add(1, Ordering::Relaxed);
                        backfill_bytes.fetch_add(one.bytes, Ordering::Relaxed);
                    }
                    Ok(())
                })
            });
            if backfill {
                // Let the backfill's first table read start before the load does.
                std::thread::sleep(Duration::from_millis(300));
            }
            let result = load::run(&spec, &pb);
            stop.store(true, Ordering::Relaxed);
            if let Some(h) = looping {
                h.join().map_err(|_| anyhow::anyhow!("backfill thread panicked"))??;
            }
            result
        })?;
        let backfill_seconds = started.elapsed().as_secs_f64();
        let cost = meter.finish(&b);
        pb.finish_with_message(format!(
            "publish p99 {:.1} ms, e2e p99 {:.1} ms",
            result.publish_latency.p99_ms, result.e2e_latency.p99_ms
        ));
        phases.push(Interference {
            phase,
            publish: result.publish_latency.clone(),
            e2e: result.e2e_latency.clone(),
            publish_msg_per_s: result.publish_msg_per_s,
            errors: result.errors,
            backfill_passes: passes.load(Ordering::Relaxed),
            backfill_mb: backfill_bytes.load(Ordering::Relaxed) as f64 / 1e6,
            backfill_seconds: if backfill { backfill_seconds } else { 0.0 },
            table_rebuild_mb: delta_mb(table_before, fetch_paths(&b)[2]),
            broker_cpu_s: cost.broker_cpu_s,
        });
        hists.push(result);
    }
    b.stop()?;

    write_report(
        ctx,
        &w,
        backlog_mb,
        segment_bytes,
        rate,
        &tiered,
        &stored,
        table_share,
        &reads,
        &phases,
        &hists,
        &lw,
        cache_bytes,
    )?;
    anyhow::ensure!(
        reads
            .iter()
            .filter(|r| r.path != "sendfile")
            .all(|r| r.table_rebuild_mb.unwrap_or(0.0) > 0.0 || r.read.bytes == 0),
        "a shared-topic read served nothing through the table-rebuild path: the table was not read"
    );
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn write_report(
    ctx: &mut Ctx,
    w: &Workload,
    backlog_mb: u64,
    segment_bytes: u64,
    rate: u64,
    tiered: &[Tiered],
    stored: &[Stored],
    table_share: Option<f64>,
    reads: &[Read],
    phases: &[Interference],
    hists: &[load::LoadResult],
    latency: &Workload,
    cache_bytes: u64,
) -> anyhow::Result<()> {
    let r = &mut ctx.report;
    r.heading("Shared vs copy storage: one backlog per mode");
    r.para(&format!(
        "One broker, one data dir, two topics of one partition each: **copy** \
         (`floe.iceberg.storage=copy`: the log kept, the table beside it) and **shared** (`floe.iceberg.storage=shared`, \
         `local.retention.ms=0`: sealed segments leave local disk once in the table). Each gets a {backlog_mb} MB backlog of \
         {}-byte records ({:.0}% random, every one fresh), produced with compression={} (batch.size {}, linger.ms {}); \
         `segment.bytes={segment_bytes}`, `retention.ms=-1` (the whole backlog is inside the retention window), \
         `floe.iceberg.target-lag-ms` as below. Two topics of one broker rather than two brokers: both modes are read by the same \
         process, page cache and consumer. The shared backlog counts as table-served once ListOffsets -4 (the local \
         log start) reaches the active segment: {} of its records were then only in the table.",
        w.message_size,
        w.random_payload_share * 100.0,
        w.compression,
        w.batch_size,
        w.linger_ms,
        pct(table_share),
    ));
    r.table(
        &[
            "mode",
            "records",
            "produced MB/s",
            "time to commit (s)",
            "tiering thread CPU s",
            "**tiering CPU-s per GB**",
            "Parquet MiB committed",
            "local log start / time to it",
        ],
        &tiered
            .iter()
            .map(|t| {
                vec![
                    format!("`{}`", t.mode),
                    t.records.to_string(),
                    format!("{:.0}", t.produce_mb_per_s),
                    format!("{:.1}", t.seconds_to_commit),
                    f2(t.tiering_thread_cpu_s),
                    f2(t.tiering_cpu_s_per_gb),
                    format!("{:.1}", t.parquet_bytes_committed / MIB),
                    t.local_log_start.map_or("– (log kept)".into(), |s| {
                        format!("{s} / {} s", f1(t.seconds_to_local_deletion))
                    }),
                ]
            })
            .collect::<Vec<_>>(),
    );
    let tier_ratio =
        tiered[0].tiering_cpu_s_per_gb.zip(tiered[1].tiering_cpu_s_per_gb).map(|(c, s)| s / c);
    r.para(&format!(
        "Tiering CPU is the `floe-tiering` thread's (`/proc/PID/task/*/stat`) from the backlog's first record to its commit, per GB of \
         payload; shared tiers the lossless columns and writes `<topic>__log` as well: **shared ÷ copy {}×**.",
        f2(tier_ratio)
    ));

    r.heading("Bytes stored after tiering and local deletion");
    let copy_total = stored[0].total_bytes.max(1) as f64;
    r.table(
        &[
            "mode",
            "local segments (all files / .log) MiB",
            "table data (Parquet) MiB",
            "table metadata MiB",
            "**total MiB**",
            "÷ copy",
            "÷ payload written",
        ],
        &stored
            .iter()
            .zip(tiered)
            .map(|(s, t)| {
                vec![
                    format!("`{}`", s.mode),
                    format!(
                        "{:.1} / {:.1}",
                        s.local_bytes as f64 / MIB,
                        s.local_log_bytes as f64 / MIB
                    ),
                    format!("{:.1}", s.table_data_bytes as f64 / MIB),
                    format!("{:.2}", s.table_metadata_bytes as f64 / MIB),
                    format!("{:.1}", s.total_bytes as f64 / MIB),
                    format!("{:.2}", s.total_bytes as f64 / copy_total),
                    format!("{:.2}", s.total_bytes as f64 / t.log_bytes_written.max(1) as f64),
                ]
            })
            .collect::<Vec<_>>(),
    );
    r.para(
        "Local segments are every file of the partition directory (`.log`, indexes, snapshots); shared keeps its active segment. \
         Table bytes are every file under the table's directories (`<topic>` and, shared, `<topic>__log`), data (`.parquet`) apart \
         from metadata (manifests, `metadata.json`). The table metadata grows with commits until `floe iceberg maintain` expires them.",
    );

    r.heading("Catch-up from offset 0: local log (sendfile) vs table");
    r.para(&format!(
        "Per round the broker is restarted on the data dir (the rebuilt-batch cache empty; `floe.iceberg.shared.cache-bytes={cache_bytes}`, \
         enough for the backlog in both codecs) and a librdkafka consumer reads each arm from offset 0 to its end: the copy topic \
         (sendfile), then the shared topic with `floe.iceberg.shared.fetch-compression=original` (each batch rebuilt and compressed \
         again with lz4, as produced) twice — **cold** (rebuilt from Parquet) and **warm** (cut from the cache) — and with \
         `fetch-compression=none` (AlterConfigs; the cache is per codec, so cold again) twice. The arms' order rotates between rounds. \
         The consumer shares the two cores with the broker. \"read threads\" is the CPU of the `floe-shared-read-*` threads (Parquet \
         read, decode, rebuild, CRC, compression); the rest of the broker's is the request path (cutting, copying into the socket). \
         \"read threads busy\" is their CPU time ÷ the read's wall time: near 100%, the one read thread (the default \
         `floe.iceberg.shared.read-threads=1`) bounds the read; well below, the read waits elsewhere (the consumer, the \
         fetch round trips)."
    ));
    r.table(
        &[
            "arm",
            "round",
            "MB/s",
            "of ceiling",
            "broker CPU s/GB",
            "of which read threads",
            "read threads busy",
            "consumer CPU s/GB",
            "MB via sendfile / copy / table-rebuild",
        ],
        &reads
            .iter()
            .map(|x| {
                vec![
                    x.arm.clone(),
                    x.round.to_string(),
                    format!("{:.0}", x.read.mb_per_s),
                    pct(x.of_ceiling),
                    f2(x.broker_cpu_s_per_gb),
                    f2(x.read_threads_cpu_s_per_gb),
                    pct(x.read_threads_busy),
                    f2(Some(x.consumer_cpu_s_per_gb)),
                    format!(
                        "{} / {} / {}",
                        f1(x.sendfile_mb),
                        f1(x.copy_mb),
                        f1(x.table_rebuild_mb)
                    ),
                ]
            })
            .collect::<Vec<_>>(),
    );
    // Per arm the best round (noise on a shared machine only slows a run down).
    let best = |path: &str, cold: bool| -> Option<(f64, Option<f64>, Option<f64>)> {
        let of: Vec<&Read> = reads
            .iter()
            .filter(|x| x.path == path && (path == "sendfile" || x.cold == cold))
            .collect();
        let mbps = of.iter().map(|x| x.read.mb_per_s).reduce(f64::max)?;
        let cpu = of.iter().filter_map(|x| x.broker_cpu_s_per_gb).reduce(f64::min);
        let threads = of.iter().filter_map(|x| x.read_threads_cpu_s_per_gb).reduce(f64::min);
        Some((mbps, cpu, threads))
    };
    let sendfile = best("sendfile", true);
    let arms = [
        ("original", true, "table lz4, cold"),
        ("original", false, "table lz4, warm"),
        ("none", true, "table none, cold"),
        ("none", false, "table none, warm"),
    ];
    let mut summary_rows = vec![];
    let mut bars_mbps = vec![];
    let mut bars_cpu = vec![];
    let mut summary = serde_json::Map::new();
    if let Some((s_mbps, s_cpu, _)) = sendfile {
        summary_rows.push(vec![
            "copy: sendfile".into(),
            format!("{s_mbps:.0}"),
            "1.00".into(),
            "–".into(),
            f2(s_cpu),
            "1.0".into(),
        ]);
        bars_mbps.push(("sendfile".to_string(), 1.0));
        bars_cpu.push(("sendfile".to_string(), s_cpu.unwrap_or(0.0)));
        summary.insert("sendfile_mb_per_s".into(), s_mbps.into());
        summary.insert("sendfile_broker_cpu_s_per_gb".into(), serde_json::to_value(s_cpu)?);
        for (path, cold, label) in arms {
            let Some((mbps, cpu, _)) = best(path, cold) else { continue };
            let ratio = mbps / s_mbps;
            summary_rows.push(vec![
                label.into(),
                format!("{mbps:.0}"),
                format!("**{ratio:.2}**"),
                if ratio >= TARGET_RATIO { "met".into() } else { "**not met**".into() },
                f2(cpu),
                f1(cpu.zip(s_cpu).map(|(c, s)| c / s)),
            ]);
            bars_mbps.push((label.to_string(), ratio));
            bars_cpu.push((label.to_string(), cpu.unwrap_or(0.0)));
            let key = format!("{}_{}", path, if cold { "cold" } else { "warm" });
            summary.insert(format!("{key}_mb_per_s"), mbps.into());
            summary.insert(format!("{key}_over_sendfile"), ratio.into());
            summary.insert(format!("{key}_broker_cpu_s_per_gb"), serde_json::to_value(cpu)?);
        }
    }
    r.para(&format!("**Summary** (best round of each arm; target: table-served ≥ {TARGET_RATIO}× the sendfile MB/s):"));
    r.table(
        &["arm", "MB/s", "÷ sendfile", "≥ 0.25×", "broker CPU s/GB", "÷ sendfile's CPU/GB"],
        &summary_rows,
    );

    // CPU per GB, step by step, from the arms' differences (lowest CPU/GB of each arm).
    let cpu = |path: &str, cold: bool| best(path, cold).and_then(|b| b.1);
    let threads = |path: &str, cold: bool| best(path, cold).and_then(|b| b.2);
    let sub = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a - b);
    let steps = vec![
        vec!["sendfile path (copy topic)".into(), f2(cpu("sendfile", true)), "the kernel moves page-cache pages; the broker handles requests".into()],
        vec!["cache → socket (`none`, warm)".into(), f2(cpu("none", false)), "cut whole batches from the cache, copy them into the response (no sendfile: the bytes are in memory)".into()],
        vec!["Parquet read + decode + rebuild + CRC (`none` cold − warm)".into(), f2(sub(cpu("none", true), cpu("none", false))), format!("read threads alone: {} s/GB", f2(threads("none", true)))],
        vec!["lz4 compression (`original` cold − `none` cold)".into(), f2(sub(cpu("original", true), cpu("none", true))), format!("read threads, original − none: {} s/GB", f2(sub(threads("original", true), threads("none", true))))],
        vec!["cache → socket (`original`, warm)".into(), f2(cpu("original", false)), "as `none` warm, with about half the bytes (lz4)".into()],
    ];
    r.para(
        "**Broker CPU per GB of payload, step by step** (differences between arms of this run):",
    );
    r.table(&["step", "CPU-s/GB", "how"], &steps);

    r.heading("Interference: produce and tail latency while a table-served backfill runs");
    r.para(&format!(
        "A fresh broker on the same data dir (`floe.iceberg.shared.cache-bytes` 16 MiB: two read-aheads, so each pass of the backfill \
         is rebuilt from the table, as a backfill larger than the cache is). A producer at {rate} msg/s of {} bytes (acks=all, linger.ms=1) \
         to a third topic of {} partitions and a consumer tailing it, {:.0} s after {:.0} s of warm-up: alone, while a second \
         consumer reads the shared topic from offset 0 to its end in a loop (`fetch-compression=original`), and alone again. The table read \
         threads run at nice 10.",
        latency.message_size,
        latency.partitions_per_topic,
        latency.duration_s,
        latency.warmup_s,
    ));
    r.table(
        &[
            "phase",
            "publish p50 / p99 / p99.9 ms",
            "e2e p50 / p99 / p99.9 ms",
            "msg/s",
            "errors",
            "backfill passes, MB",
            "table-rebuild MB",
            "broker CPU s",
        ],
        &phases
            .iter()
            .map(|p| {
                vec![
                    p.phase.to_string(),
                    format!(
                        "{:.2} / {:.2} / {:.2}",
                        p.publish.p50_ms, p.publish.p99_ms, p.publish.p999_ms
                    ),
                    format!("{:.2} / {:.2} / {:.2}", p.e2e.p50_ms, p.e2e.p99_ms, p.e2e.p999_ms),
                    format!("{:.0}", p.publish_msg_per_s),
                    p.errors.to_string(),
                    format!("{}, {:.0}", p.backfill_passes, p.backfill_mb),
                    f1(p.table_rebuild_mb),
                    f2(p.broker_cpu_s),
                ]
            })
            .collect::<Vec<_>>(),
    );
    if let [a1, with, a2] = phases {
        let alone = if a1.publish.p99_ms <= a2.publish.p99_ms { a1 } else { a2 };
        let backfill_mbps = with.backfill_mb / with.backfill_seconds.max(1e-3);
        r.para(&format!(
            "With the backfill ÷ alone (the alone phase with the lower publish p99, `{}`): publish p99 **{:.2}×**, end-to-end p99 **{:.2}×** (the backfill read about {:.0} MB/s meanwhile).",
            alone.phase,
            with.publish.p99_ms / alone.publish.p99_ms.max(1e-3),
            with.e2e.p99_ms / alone.e2e.p99_ms.max(1e-3),
            backfill_mbps,
        ));
        summary.insert(
            "publish_p99_with_backfill_over_alone".into(),
            (with.publish.p99_ms / alone.publish.p99_ms.max(1e-3)).into(),
        );
        summary.insert(
            "e2e_p99_with_backfill_over_alone".into(),
            (with.e2e.p99_ms / alone.e2e.p99_ms.max(1e-3)).into(),
        );
    }
    if let [copy, shared] = stored {
        summary.insert(
            "stored_shared_over_copy".into(),
            (shared.total_bytes as f64 / copy.total_bytes.max(1) as f64).into(),
        );
    }
    summary.insert(
        "tiering_cpu_shared_over_copy".into(),
        serde_json::to_value(
            tiered[0].tiering_cpu_s_per_gb.zip(tiered[1].tiering_cpu_s_per_gb).map(|(c, s)| s / c),
        )?,
    );

    // Plots.
    let out = |n: &str| ctx.opts.out.join(n);
    let b1: Vec<(&str, f64)> = bars_mbps.iter().map(|(l, v)| (l.as_str(), *v)).collect();
    plot::bars(
        &out("catch-up-ratio.svg"),
        "catch-up MB/s ÷ sendfile (best round)",
        "÷ sendfile",
        &b1,
        Some(("target 0.25×", TARGET_RATIO)),
    )?;
    let b2: Vec<(&str, f64)> = bars_cpu.iter().map(|(l, v)| (l.as_str(), *v)).collect();
    plot::bars(
        &out("catch-up-cpu.svg"),
        "broker CPU-s per GB read (best round)",
        "CPU-s/GB",
        &b2,
        None,
    )?;
    let b3: Vec<(&str, f64)> =
        stored.iter().map(|s| (s.mode, s.total_bytes as f64 / MIB)).collect();
    plot::bars(
        &out("stored.svg"),
        "bytes stored after tiering and local deletion",
        "MiB",
        &b3,
        None,
    )?;
    if let [alone, with, _] = hists {
        plot::latency_cdf(
            &out("latency-cdf.svg"),
            &format!("latency at {rate} msg/s, alone vs beside a table-served backfill"),
            &[
                ("publish, alone", &alone.publish_hist),
                ("publish, with backfill", &with.publish_hist),
                ("end-to-end, alone", &alone.e2e_hist),
                ("end-to-end, with backfill", &with.e2e_hist),
            ],
        )?;
    }
    let r = &mut ctx.report;
    r.image("catch-up-ratio.svg", "catch-up MB/s relative to sendfile");
    r.image("catch-up-cpu.svg", "broker CPU per GB");
    r.image("stored.svg", "bytes stored");
    r.image("latency-cdf.svg", "latency CDF");
    r.set("workload", w);
    r.set("latency_rate", rate);
    r.set("segment_bytes", segment_bytes);
    r.set("cache_bytes", cache_bytes);
    r.set("table_served_share", table_share);
    r.set("tiered", tiered);
    r.set("stored", stored);
    r.set("catch_up_reads", reads);
    r.set("interference", phases);
    r.set("summary", summary);
    Ok(())
}
