//! `table-maintenance`: what `floe iceberg maintain` does for a reader of the table. N
//! tiering commits make a table of N snapshots (one round of records per commit); the
//! broker is stopped; a DuckDB aggregate over it (`iceberg_scan`, a Python script) is
//! timed before and after `floe iceberg maintain`, with the snapshots, manifests, data
//! files and metadata bytes of each. Both answers must hold every record once.
//!
//! What it leaves out: the broker's write path (the query runs after it stopped), the
//! broker's own periodic maintenance (switched off for the rounds), query engines other than
//! DuckDB, and an object store; without a Python that has `duckdb` the query is skipped
//! and only the metadata figures are measured.

use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use super::common::{bar, kv, spinner, temp_data_dir};
use super::ctx::Ctx;
use crate::iceberg_query;
use crate::load;
use crate::plot;
use crate::report::display_path;
use crate::tiering::{self, TieringCounters};

/// One reading of the table: its metadata files, and the query's times unless skipped.
#[derive(Debug, Serialize)]
struct TableReading {
    metadata: iceberg_query::MetadataFiles,
    query: Option<iceberg_query::QueryTimes>,
    skipped: Option<String>,
}

fn read_table(
    python: &std::path::Path,
    metadata_dir: &std::path::Path,
    runs: usize,
) -> anyhow::Result<TableReading> {
    let metadata = iceberg_query::MetadataFiles::read(metadata_dir)?;
    let (query, skipped) = match iceberg_query::measure(python, &metadata.current, runs)? {
        iceberg_query::QueryOutcome::Measured(q) => (Some(q), None),
        iceberg_query::QueryOutcome::Skipped(why) => (None, Some(why)),
    };
    Ok(TableReading { metadata, query, skipped })
}

/// `table-maintenance`: a topic tiered with `target-lag-ms=0`, written in N rounds, each
/// waited on until committed (so each round is a commit, a snapshot, a manifest and a data
/// file per partition); the broker stopped; a DuckDB aggregate timed on that unmaintained
/// table; `floe iceberg maintain` (the broker binary's CLI: snapshot expiry, small-file
/// compaction with merged manifests, expiry again); the same query on the maintained table.
///
/// Its own scenario rather than an arm of `freshness` or `tiering-cost`: it measures a
/// reader of the table after the broker is done, not the broker's write path, and it runs
/// a second process (the CLI) and a third (Python) on the broker's data dir.
pub(super) fn table_maintenance(ctx: &mut Ctx) -> anyhow::Result<()> {
    use rdkafka::producer::{BaseRecord, Producer};
    let quick = ctx.opts.quick;
    let commits = ctx.opts.commits.unwrap_or(if quick { 20 } else { 200 }).max(1);
    let (partitions, per_partition, value_size) = (4u32, 25i64, 512usize);
    let tick_ms: u64 = if quick { 50 } else { 100 };
    let query_runs = if quick { 5 } else { 15 };
    let round_timeout = Duration::from_secs(60);
    let data = temp_data_dir()?;
    // The broker's own maintenance never runs in the rounds: the table stays unmaintained.
    let b = ctx.broker(
        "table-maintenance",
        data.path(),
        &[
            kv("floe.iceberg.tick-ms", tick_ms),
            kv("floe.iceberg.maintenance-interval-ms", 86_400_000),
        ],
    )?;
    let tag: String = (0..6).map(|_| fastrand::alphanumeric().to_ascii_lowercase()).collect();
    let topic = format!("floe-bench-table-maintenance-{tag}");
    load::create_topics_with(
        &b.bootstrap,
        std::slice::from_ref(&topic),
        partitions,
        &[kv("floe.iceberg.enabled", "true"), kv("floe.iceberg.target-lag-ms", 0)],
    )?;
    let producer: rdkafka::producer::BaseProducer = load::client_config(&b.bootstrap)
        .set("acks", "all")
        .set("linger.ms", "2")
        .create()
        .context("producer")?;
    let topics = [topic.clone()];
    let before = TieringCounters::read(&b, &topics);
    let pb = bar(&format!("{commits} tiering commits"), false);
    pb.set_length(commits as u64);
    let mut round_ms: Vec<(f64, f64)> = Vec::with_capacity(commits);
    let value: Vec<u8> = (0..value_size).map(|_| fastrand::u8(..)).collect();
    for round in 1..=commits {
        let t = std::time::Instant::now();
        for i in 0..per_partition * i64::from(partitions) {
            let partition = (i % i64::from(partitions)) as i32;
            let mut record =
                BaseRecord::<(), [u8]>::to(&topic).partition(partition).payload(&value[..]);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((
                        rdkafka::error::KafkaError::MessageProduction(
                            rdkafka::types::RDKafkaErrorCode::QueueFull,
                        ),
                        r,
                    )) => {
                        record = r;
                        producer.poll(Duration::from_millis(5));
                    }
                    Err((e, _)) => anyhow::bail!("table-maintenance: produce: {e}"),
                }
            }
        }
        producer.flush(Duration::from_secs(30)).context("flush")?;
        let want = per_partition * round as i64;
        loop {
            let committed = tiering::committed_offsets(&b, &topic).unwrap_or_default();
            if (0..partitions as i32).all(|p| committed.get(&p).copied().unwrap_or(0) >= want) {
                break;
            }
            anyhow::ensure!(
                t.elapsed() < round_timeout,
                "table-maintenance: round {round} not committed within {round_timeout:?} (see floe-table-maintenance.log in {})",
                ctx.opts.out.display()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        round_ms.push((round as f64, t.elapsed().as_secs_f64() * 1000.0));
        pb.set_position(round as u64);
    }
    let made = before
        .zip(TieringCounters::read(&b, &topics))
        .map(|(a, z)| a.delta(&z))
        .unwrap_or_default();
    pb.finish_with_message(format!("{:.0} commits", made.commits));
    b.stop()?;

    let metadata_dir =
        data.path().join("iceberg").join("warehouse").join("kafka").join(&topic).join("metadata");
    let (python, python_from) = iceberg_query::find_python();
    let sp = spinner("DuckDB query on the unmaintained table");
    let unmaintained = read_table(&python, &metadata_dir, query_runs)?;
    sp.finish();
    let sp = spinner("floe iceberg maintain");
    let started = std::time::Instant::now();
    let mut cmd = std::process::Command::new(&ctx.launcher.bin);
    cmd.args(&ctx.launcher.extra_args)
        .args(["iceberg", "maintain", "--data-dir"])
        .arg(data.path())
        .args(["--table", &topic, "--max-age-ms", "0", "--min-to-keep", "1"]);
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", "warn");
    }
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {} iceberg maintain", ctx.launcher.bin.display()))?;
    let maintain_s = started.elapsed().as_secs_f64();
    let maintain_out = String::from_utf8_lossy(&out.stdout).trim().to_string();
    anyhow::ensure!(
        out.status.success() && !maintain_out.contains("failed"),
        "floe iceberg maintain failed ({}):\n{maintain_out}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    sp.finish_with_message(format!("{maintain_s:.2} s"));
    let sp = spinner("DuckDB query on the maintained table");
    let maintained = read_table(&python, &metadata_dir, query_runs)?;
    sp.finish();

    // Both readings must see every produced record, once: per partition the count and the last offset.
    let records = per_partition * commits as i64;
    let expected: Vec<(i64, i64, i64)> =
        (0..i64::from(partitions)).map(|p| (p, records, records - 1)).collect();
    for (name, r) in [("unmaintained", &unmaintained), ("maintained", &maintained)] {
        if let Some(q) = &r.query {
            anyhow::ensure!(
                q.result == expected,
                "table-maintenance: the {name} table answered {:?}, expected {expected:?}",
                q.result
            );
        }
    }
    anyhow::ensure!(
        maintained.metadata.snapshots == 1,
        "table-maintenance: {} snapshots left after maintain --max-age-ms 0 --min-to-keep 1",
        maintained.metadata.snapshots
    );

    ctx.report
        .heading("Table maintenance: a DuckDB query on an unmaintained vs a maintained table");
    ctx.report.para(&format!(
        "One broker (`floe.iceberg.tick-ms={tick_ms}`, `floe.iceberg.maintenance-interval-ms=86400000` so its own \
         maintenance never runs here); a topic of {partitions} partitions with `floe.iceberg.enabled=true`, \
         `floe.iceberg.target-lag-ms=0`. {commits} rounds, each {per_partition} records of {value_size} bytes per \
         partition (acks=all), then a wait until `floe_iceberg_committed_offset` reaches them: each round is a \
         commit ({:.0} commits made), so the table has a snapshot, a manifest and small data files per round. The \
         broker is stopped. **Unmaintained**: DuckDB ({}) runs `SELECT partition, count(*), max(offset) FROM \
         iceberg_scan('<metadata.json>') GROUP BY partition` once to warm up and {query_runs} times timed \
         (`benches/scripts/iceberg_query_time.py`, interpreter from {python_from}). Then `floe iceberg maintain \
         --table TOPIC --max-age-ms 0 --min-to-keep 1` ({maintain_s:.2} s), and **maintained**: the same query on \
         the new metadata. Both answers must be every record once.",
        made.commits,
        unmaintained.query.as_ref().map_or("not run".to_string(), |q| q.duckdb.clone()),
    ));
    if let Some(why) = unmaintained.skipped.as_ref().or(maintained.skipped.as_ref()) {
        let line = format!("The DuckDB query was **skipped**: {why} (interpreter `{}` from {python_from}). Only the metadata figures below were measured.", display_path(&python));
        println!("table-maintenance: {line}");
        ctx.report.para(&line);
    }
    let ratio = |a: f64, z: f64| if a > 0.0 { format!("{:.2}", z / a) } else { "–".into() };
    let q =
        |r: &TableReading, f: &dyn Fn(&iceberg_query::QueryTimes) -> f64| r.query.as_ref().map(f);
    let qrow = |name: &str,
                f: &dyn Fn(&iceberg_query::QueryTimes) -> f64,
                fmt: &dyn Fn(f64) -> String|
     -> Vec<String> {
        let (a, z) = (q(&unmaintained, f), q(&maintained, f));
        vec![
            name.into(),
            a.map_or("–".into(), fmt),
            z.map_or("–".into(), fmt),
            a.zip(z).map_or("–".into(), |(a, z)| ratio(a, z)),
        ]
    };
    let mrow = |name: &str, a: f64, z: f64| {
        vec![name.into(), format!("{a:.0}"), format!("{z:.0}"), ratio(a, z)]
    };
    let (um, mm) = (&unmaintained.metadata, &maintained.metadata);
    let runs = |r: &TableReading| {
        r.query.as_ref().map_or("–".into(), |q| {
            q.runs_ms.iter().map(|v| format!("{v:.1}")).collect::<Vec<_>>().join(", ")
        })
    };
    ctx.report.table(
        &["figure", "unmaintained", "maintained", "maintained ÷ unmaintained"],
        &[
            qrow(&format!("**query time, median of {query_runs}** (ms)"), &|q| q.median_ms, &|v| {
                format!("{v:.1}")
            }),
            vec!["query runs (ms)".into(), runs(&unmaintained), runs(&maintained), String::new()],
            mrow("snapshots", um.snapshots as f64, mm.snapshots as f64),
            mrow("snapshot-log entries", um.snapshot_log as f64, mm.snapshot_log as f64),
            qrow("manifests of the current snapshot", &|q| q.manifests as f64, &|v| {
                format!("{v:.0}")
            }),
            qrow("data files", &|q| q.data_files as f64, &|v| format!("{v:.0}")),
            qrow("data bytes", &|q| q.data_bytes as f64, &|v| format!("{v:.0}")),
            qrow("rows", &|q| q.rows as f64, &|v| format!("{v:.0}")),
            mrow("current metadata.json bytes", um.current_bytes as f64, mm.current_bytes as f64),
            mrow("metadata/ files", um.dir_files as f64, mm.dir_files as f64),
            mrow(
                "metadata/ bytes (metadata files, manifest lists, manifests)",
                um.dir_bytes as f64,
                mm.dir_bytes as f64,
            ),
        ],
    );
    ctx.report.para(&format!("`floe iceberg maintain` printed: `{maintain_out}`"));
    ctx.report.para(
        "What maintenance does: snapshot expiry (every snapshot but the current one goes, with the manifest \
         lists only they reached and the metadata files that fall out of the log), then small-file compaction \
         (each partition value's small data files rewritten into files of the target size, one `replace` \
         snapshot that also merges the manifests), then expiry again, which deletes the replaced files. The \
         query's time follows the files a scan opens: the data-file and manifest rows.",
    );
    plot::trials(
        &ctx.plot_path("round-times.svg"),
        "produce → committed, per round (the table grows by a snapshot a round)",
        "round",
        "ms",
        &[("round", round_ms.clone())],
        None,
    )?;
    ctx.report.image("round-times.svg", "time per tiering round");
    let series: Vec<(&str, Vec<(f64, f64)>)> =
        [("unmaintained", &unmaintained), ("maintained", &maintained)]
            .iter()
            .filter_map(|(n, r)| {
                r.query.as_ref().map(|q| {
                    (*n, q.runs_ms.iter().enumerate().map(|(i, v)| ((i + 1) as f64, *v)).collect())
                })
            })
            .collect();
    if !series.is_empty() {
        plot::trials(
            &ctx.plot_path("query-times.svg"),
            "DuckDB aggregate over iceberg_scan, per run",
            "run",
            "ms",
            &series,
            None,
        )?;
        ctx.report.image("query-times.svg", "query time per run");
    }
    ctx.report.set("commits_requested", commits);
    ctx.report.set("commits_made", made.commits);
    ctx.report.set("partitions", partitions);
    ctx.report.set("records_per_partition_per_round", per_partition);
    ctx.report.set("value_size", value_size);
    ctx.report.set("tick_ms", tick_ms);
    ctx.report.set("query_runs", query_runs);
    ctx.report
        .set("python", serde_json::json!({"path": display_path(&python), "from": python_from}));
    ctx.report.set("round_ms", round_ms.iter().map(|(_, v)| *v).collect::<Vec<_>>());
    ctx.report.set("maintain_seconds", maintain_s);
    ctx.report.set("maintain_output", &maintain_out);
    ctx.report.set("unmaintained", &unmaintained);
    ctx.report.set("maintained", &maintained);
    ctx.report.set(
        "summary",
        serde_json::json!({
            "query_median_ms_unmaintained": unmaintained.query.as_ref().map(|q| q.median_ms),
            "query_median_ms_maintained": maintained.query.as_ref().map(|q| q.median_ms),
            "query_ratio_maintained_over_unmaintained": unmaintained.query.as_ref().zip(maintained.query.as_ref()).map(|(a, z)| z.median_ms / a.median_ms),
            "snapshots": [um.snapshots, mm.snapshots],
            "data_files": [unmaintained.query.as_ref().map(|q| q.data_files), maintained.query.as_ref().map(|q| q.data_files)],
            "metadata_dir_bytes": [um.dir_bytes, mm.dir_bytes],
            "query_skipped": unmaintained.skipped.as_ref().or(maintained.skipped.as_ref()),
        }),
    );
    Ok(())
}
