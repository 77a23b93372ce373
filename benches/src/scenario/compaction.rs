//! `compaction`: the log cleaner's throughput and what it costs producers. Per arm a fresh
//! broker and a one-partition compacted topic holding a keyed backlog (10 versions per
//! key) back from the cleaner; a fixed-rate acks=all producer into another topic; then
//! AlterConfigs releases the backlog. Cleaning arm: the cleaner's MB/s per core (its bytes
//! read ÷ its threads' CPU), the time to clean, bytes reclaimed; both arms: produce
//! p50…p99.9 over the same window, cleaning vs `log.cleaner.enable=false`.
//!
//! What it leaves out: tombstones and deletes (every record has a value), more than one
//! compacted partition or cleaner thread at work, the disk (the backlog is in the page
//! cache), and brokers it does not start (`--bootstrap` skips it).

use std::time::Duration;

use serde::Serialize;

use super::common::{bar, kv, met, spinner, temp_data_dir, CostMeter, PhaseCost, MIB};
use super::ctx::Ctx;
use crate::compaction::{self, CleanerCounters};
use crate::load::{self, LatencySummary};
use crate::plot;
use crate::rated;
use crate::report::{f1, f2, pct};

/// Versions written of every key of the compaction backlog.
const COMPACTION_VERSIONS: u32 = 10;
/// The cleaner throughput target, MB read per cleaner CPU-second.
const CLEANER_MB_PER_CORE_TARGET: f64 = 100.0;
/// The target for produce p99 while cleaning ÷ without.
const CLEANING_P99_TARGET: f64 = 1.2;

#[derive(Debug, Clone)]
struct CompactionParams {
    backlog_mb: u64,
    value_size: usize,
    segment_bytes: u64,
    backoff_ms: u64,
    rate: u64,
    latency_partitions: u32,
    warmup_s: f64,
    min_window_s: f64,
    timeout: Duration,
}

#[derive(Debug, Serialize)]
struct CompactionArm {
    arm: String,
    cleaner_enabled: bool,
    backlog: compaction::KeyedBacklog,
    log_bytes_before: u64,
    log_segments_before: usize,
    log_bytes_after: u64,
    log_segments_after: usize,
    /// AlterConfigs (min.compaction.lag.ms → 0) to the cleaner's first clean seen on /metrics.
    clean_seconds: Option<f64>,
    /// The latency window: from the AlterConfigs, this long.
    window_seconds: f64,
    /// Cleaner counters, AlterConfigs → clean seen (cleaning arm).
    cleaner: Option<CleanerCounters>,
    /// Broker CPU and RSS over the window.
    cost: PhaseCost,
    latency: LatencySummary,
    producer_errors: u64,
    #[serde(skip)]
    hist: hdrhistogram::Histogram<u64>,
    #[serde(skip)]
    p99_timeline: Vec<(f64, f64)>,
}

/// One arm: a fresh broker, the keyed backlog in a compacted topic held back from the
/// cleaner by `min.compaction.lag.ms`, a fixed-rate producer into another topic, then
/// AlterConfigs releases the backlog (lag 0); with the cleaner on, the window lasts
/// until the clean is seen (at least `min_window_s`); without, `window_s`.
fn compaction_arm(
    ctx: &Ctx,
    label: &str,
    cleaner: bool,
    p: &CompactionParams,
    window_s: Option<f64>,
) -> anyhow::Result<CompactionArm> {
    let data = temp_data_dir()?;
    let b = ctx.broker(
        label,
        data.path(),
        &[kv("log.cleaner.backoff.ms", p.backoff_ms), kv("log.cleaner.enable", cleaner)],
    )?;
    let tag: String = (0..6).map(|_| fastrand::alphanumeric().to_ascii_lowercase()).collect();
    let compacted = format!("floe-bench-compaction-{tag}-compacted");
    let latency_topic = format!("floe-bench-compaction-{tag}-latency");
    let topic_config = |lag_ms: u64| {
        vec![
            kv("cleanup.policy", "compact"),
            kv("segment.bytes", p.segment_bytes),
            kv("min.cleanable.dirty.ratio", "0.01"),
            kv("min.compaction.lag.ms", lag_ms),
        ]
    };
    // Held back: every segment is younger than an hour, so nothing is cleanable yet.
    load::create_topics_with(
        &b.bootstrap,
        std::slice::from_ref(&compacted),
        1,
        &topic_config(3_600_000),
    )?;
    load::create_topics(&b.bootstrap, std::slice::from_ref(&latency_topic), p.latency_partitions)?;
    let keys =
        (p.backlog_mb * 1_000_000 / (p.value_size as u64 * u64::from(COMPACTION_VERSIONS))).max(1);
    let pb = bar(&format!("{label}: keyed backlog"), true);
    let backlog = compaction::produce_keyed(
        &b.bootstrap,
        &compacted,
        keys,
        COMPACTION_VERSIONS,
        p.value_size,
        &pb,
    )?;
    pb.finish_with_message(format!("{:.1} MB/s", backlog.mb_per_s));
    anyhow::ensure!(
        backlog.errors == 0,
        "compaction: {} backlog records failed (see floe-{label}.log in {})",
        backlog.errors,
        ctx.opts.out.display()
    );
    let dir = data.path().join(format!("{compacted}-0"));
    let (log_bytes_before, log_segments_before) = compaction::log_files(&dir);

    let rated = rated::RatedProducer::start(&b.bootstrap, &latency_topic, p.rate, p.value_size)?;
    std::thread::sleep(Duration::from_secs_f64(p.warmup_s));
    let meter = CostMeter::start(&b);
    let before = CleanerCounters::read(&b);
    let alter_us = rated.now_us();
    load::alter_topic_config(&b.bootstrap, &compacted, &topic_config(0))?;
    let (clean_seconds, counters) = if cleaner {
        let sp = spinner(&format!("{label}: cleaning {:.1} MB", log_bytes_before as f64 / 1e6));
        loop {
            let states = compaction::partition_states(&b, &compacted).unwrap_or_default();
            if let Some(&(ratio, since)) = states.get(&0) {
                if since >= 0.0 && ratio < 0.01 {
                    break;
                }
            }
            let elapsed = Duration::from_micros(rated.now_us() - alter_us);
            anyhow::ensure!(
                elapsed < p.timeout,
                "compaction: the cleaner did not clean the backlog within {:?} (see floe-{label}.log in {})",
                p.timeout,
                ctx.opts.out.display()
            );
            if let Some(now) = CleanerCounters::read(&b) {
                sp.set_message(format!(
                    "{:.1} MB read by the cleaner",
                    (now.bytes_read - before.map_or(0.0, |c| c.bytes_read)) / 1e6
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let seconds = (rated.now_us() - alter_us) as f64 / 1e6;
        let counters = before.zip(CleanerCounters::read(&b)).map(|(a, z)| a.delta(&z));
        sp.finish_with_message(format!("{seconds:.2} s"));
        (Some(seconds), counters)
    } else {
        (None, None)
    };
    let window = window_s.unwrap_or_else(|| clean_seconds.unwrap_or(0.0).max(p.min_window_s));
    let end_us = alter_us + (window * 1e6) as u64;
    let sp = spinner(&format!("{label}: {} msg/s into another topic", p.rate));
    while rated.now_us() < end_us {
        std::thread::sleep(Duration::from_millis(10));
    }
    let cost = meter.finish(&b);
    let (samples, producer_errors) = rated.finish()?;
    sp.finish();
    let (log_bytes_after, log_segments_after) = compaction::log_files(&dir);
    b.stop()?;
    let hist = rated::window_histogram(&samples, alter_us, end_us);
    anyhow::ensure!(
        !hist.is_empty(),
        "compaction: no produce latency sample in the {window:.2} s window of {label}"
    );
    let warm_us = (p.warmup_s * 1e6) as u64;
    Ok(CompactionArm {
        arm: if cleaner { "cleaning" } else { "no cleaning (log.cleaner.enable=false)" }.into(),
        cleaner_enabled: cleaner,
        backlog,
        log_bytes_before,
        log_segments_before,
        log_bytes_after,
        log_segments_after,
        clean_seconds,
        window_seconds: window,
        cleaner: counters,
        cost,
        latency: LatencySummary::of(&hist),
        producer_errors,
        p99_timeline: rated::p99_timeline(
            &samples,
            alter_us.saturating_sub(warm_us),
            end_us,
            alter_us,
            250_000,
        ),
        hist,
    })
}

pub(super) fn compaction(ctx: &mut Ctx) -> anyhow::Result<()> {
    let quick = ctx.opts.quick;
    let p = CompactionParams {
        backlog_mb: ctx.opts.backlog_mb.unwrap_or(if quick { 8 } else { 512 }),
        value_size: 1024,
        segment_bytes: if quick { 1 << 20 } else { 8 << 20 },
        backoff_ms: 200,
        rate: ctx.opts.rate.unwrap_or(if quick { 2000 } else { 5000 }),
        latency_partitions: 4,
        warmup_s: if quick { 0.5 } else { 2.0 },
        min_window_s: if quick { 1.0 } else { 5.0 },
        timeout: Duration::from_secs(if quick { 60 } else { 1800 }),
    };
    let on = compaction_arm(ctx, "compaction-cleaning", true, &p, None)?;
    let off = compaction_arm(ctx, "compaction-no-cleaning", false, &p, Some(on.window_seconds))?;

    let c = on.cleaner.unwrap_or_default();
    let (cpu_s, cpu_basis) = match c.thread_cpu_s.filter(|s| *s > 0.0) {
        Some(s) => (Some(s), format!("CPU seconds of the `{}-*` thread(s) ({} found in /proc/PID/task)", compaction::CLEANER_THREAD, c.threads)),
        None => (
            on.clean_seconds,
            format!(
                "**wall-clock seconds** (no `{}-*` thread with CPU time was found in /proc/PID/task, so the wall time of the \
                 clean stands in for its CPU time; it includes up to {} ms of the cleaner's backoff)",
                compaction::CLEANER_THREAD,
                p.backoff_ms
            ),
        ),
    };
    let mb_per_core = cpu_s.map(|s| c.bytes_read / 1e6 / s);
    let log_mb_per_core = cpu_s.map(|s| on.log_bytes_before as f64 / 1e6 / s);
    let reclaimed = on.log_bytes_before as f64 - on.log_bytes_after as f64;
    anyhow::ensure!(
        c.runs >= 1.0 && reclaimed > 0.0,
        "compaction: the cleaner ran {} time(s) and reclaimed {reclaimed} bytes",
        c.runs
    );
    let p99_ratio = on.latency.p99_ms / off.latency.p99_ms;
    let mib = |b: u64| b as f64 / MIB;

    ctx.report.heading("Compaction: the log cleaner's throughput and what it costs producers");
    ctx.report.para(&format!(
        "Per arm a fresh broker (`log.cleaner.backoff.ms={}`) and a topic of one partition with `cleanup.policy=compact`, \
         `segment.bytes={}`, `min.cleanable.dirty.ratio=0.01`, and `min.compaction.lag.ms=3600000` while a keyed backlog \
         is written ({} keys × {COMPACTION_VERSIONS} versions of {}-byte values, each round of keys after the other, acks=all), \
         so nothing is cleanable yet. Then a producer sends {} msg/s of {} bytes (acks=all, linger.ms=1) to another topic \
         ({} partitions, `cleanup.policy=delete`); after {:.1} s, AlterConfigs sets `min.compaction.lag.ms=0` and the \
         backlog is due. **Cleaning** arm: the harness polls `floe_log_cleaner_seconds_since_last_clean` and \
         `floe_log_cleaner_dirty_ratio` of the partition every 20 ms until it has been cleaned; the window is that \
         time, at least {:.1} s. **No cleaning** arm: the same on a broker with `log.cleaner.enable=false`, for a window of \
         the same length. Publish latency (send → delivery report) counts the records sent within the window.",
        p.backoff_ms, p.segment_bytes, on.backlog.keys, p.value_size, p.rate, p.value_size, p.latency_partitions, p.warmup_s, p.min_window_s,
    ));
    ctx.report.table(
        &["figure", "value"],
        &[
            vec![
                "backlog".into(),
                format!(
                    "{} records, {:.1} MB of values, written at {:.1} MB/s",
                    on.backlog.records,
                    on.backlog.value_bytes as f64 / 1e6,
                    on.backlog.mb_per_s
                ),
            ],
            vec![
                "log before → after the clean".into(),
                format!(
                    "{:.1} MiB in {} segment(s) → {:.1} MiB in {} segment(s)",
                    mib(on.log_bytes_before),
                    on.log_segments_before,
                    mib(on.log_bytes_after),
                    on.log_segments_after
                ),
            ],
            vec![
                "bytes reclaimed".into(),
                format!(
                    "{:.1} MiB ({:.0}% of the log)",
                    reclaimed / MIB,
                    reclaimed / on.log_bytes_before.max(1) as f64 * 100.0
                ),
            ],
            vec![
                "time to clean (AlterConfigs → clean seen)".into(),
                f2(on.clean_seconds).to_string() + " s",
            ],
            vec![
                "cleaner runs, MB read / written".into(),
                format!("{:.0}, {:.1} / {:.1}", c.runs, c.bytes_read / 1e6, c.bytes_written / 1e6),
            ],
            vec!["cleaner thread CPU s".into(), f2(c.thread_cpu_s)],
            vec![
                "**cleaner MB/s per core** (MB read ÷ CPU s)".into(),
                format!(
                    "{} (target ≥ {CLEANER_MB_PER_CORE_TARGET:.0}: {})",
                    f1(mb_per_core),
                    met(mb_per_core.is_some_and(|v| v >= CLEANER_MB_PER_CORE_TARGET))
                ),
            ],
            vec!["log MB compacted per cleaner CPU-second".into(), f1(log_mb_per_core)],
            vec![
                "cleaner MB/s (wall clock)".into(),
                f1(on.clean_seconds.map(|s| c.bytes_read / 1e6 / s)),
            ],
            vec![
                "broker CPU s over the window (cleaning / no cleaning)".into(),
                format!("{} / {}", f2(on.cost.broker_cpu_s), f2(off.cost.broker_cpu_s)),
            ],
        ],
    );
    ctx.report.para(&format!(
        "Per core: the bytes the cleaner read (`floe_log_cleaner_read_bytes_total`, which counts both the pass that \
         builds the offset map over the dirty segments and the pass that rewrites them, so each dirty byte twice) ÷ {cpu_basis}. \
         *Log MB compacted per cleaner CPU-second* divides the log's size before the clean instead."
    ));
    let lrows: Vec<Vec<String>> = [&on, &off]
        .iter()
        .map(|a| {
            let l = &a.latency;
            vec![
                a.arm.clone(),
                p.rate.to_string(),
                format!("{:.2}", a.window_seconds),
                l.count.to_string(),
                format!("{:.2}", l.p50_ms),
                format!("{:.2}", l.p95_ms),
                format!("{:.2}", l.p99_ms),
                format!("{:.2}", l.p999_ms),
                format!("{:.2}", l.max_ms),
                a.producer_errors.to_string(),
            ]
        })
        .collect();
    ctx.report.table(
        &[
            "arm", "msg/s", "window s", "samples", "p50 ms", "p95 ms", "p99 ms", "p99.9 ms",
            "max ms", "errors",
        ],
        &lrows,
    );
    let cleaning_share = on.clean_seconds.map(|s| (s / on.window_seconds).min(1.0));
    ctx.report.para(&format!(
        "**Produce p99 while cleaning ÷ without: {p99_ratio:.2}×** (target ≤ {CLEANING_P99_TARGET}×: {}); the cleaner was \
         at work for {} of the window.{}",
        met(p99_ratio <= CLEANING_P99_TARGET),
        pct(cleaning_share),
        if cleaning_share.is_some_and(|s| s < 0.5) {
            " The clean was short against the window (a small backlog): pass `--backlog-mb` for a longer one."
        } else {
            ""
        },
    ));
    plot::latency_cdf(
        &ctx.plot_path("latency-cdf.svg"),
        &format!("publish latency at {} msg/s, during the window", p.rate),
        &[("cleaning", &on.hist), ("no cleaning", &off.hist)],
    )?;
    plot::timeline(
        &ctx.plot_path("latency-timeline.svg"),
        "publish p99 per 250 ms (0 = AlterConfigs releases the backlog)",
        "p99 ms",
        &[
            ("cleaning", on.p99_timeline.iter().map(|(t, v)| (t + p.warmup_s, *v)).collect()),
            ("no cleaning", off.p99_timeline.iter().map(|(t, v)| (t + p.warmup_s, *v)).collect()),
        ],
    )?;
    ctx.report.image("latency-cdf.svg", "publish latency CDF");
    ctx.report.image("latency-timeline.svg", "publish p99 over time");
    ctx.report.para(&format!(
        "The timeline's x axis starts at the producer's warm-up; the backlog is released at {:.1} s. The cleaner is one OS \
         thread at normal priority, off the request runtime; on two cores it competes with the broker's request path and \
         the producer for CPU.",
        p.warmup_s
    ));
    ctx.report.set("segment_bytes", p.segment_bytes);
    ctx.report.set("cleaner_backoff_ms", p.backoff_ms);
    ctx.report.set("versions_per_key", COMPACTION_VERSIONS);
    ctx.report.set("rate", p.rate);
    ctx.report.set("arms", [&on, &off]);
    ctx.report.set(
        "summary",
        serde_json::json!({
            "log_bytes_before": on.log_bytes_before,
            "log_bytes_after": on.log_bytes_after,
            "bytes_reclaimed": reclaimed,
            "clean_seconds": on.clean_seconds,
            "cleaner_bytes_read": c.bytes_read,
            "cleaner_bytes_written": c.bytes_written,
            "cleaner_thread_cpu_s": c.thread_cpu_s,
            "cleaner_cpu_basis": if c.thread_cpu_s.filter(|s| *s > 0.0).is_some() { "thread_cpu" } else { "wall_clock" },
            "cleaner_mb_per_s_per_core": mb_per_core,
            "cleaner_mb_per_core_target": CLEANER_MB_PER_CORE_TARGET,
            "cleaner_mb_per_core_target_met": mb_per_core.is_some_and(|v| v >= CLEANER_MB_PER_CORE_TARGET),
            "log_mb_per_cleaner_cpu_s": log_mb_per_core,
            "produce_p99_ms_cleaning": on.latency.p99_ms,
            "produce_p99_ms_no_cleaning": off.latency.p99_ms,
            "p99_ratio_cleaning_over_no_cleaning": p99_ratio,
            "p99_ratio_target": CLEANING_P99_TARGET,
            "p99_ratio_target_met": p99_ratio <= CLEANING_P99_TARGET,
            "cleaning_share_of_window": cleaning_share,
        }),
    );
    Ok(())
}
