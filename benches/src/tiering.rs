//! What a broker's Iceberg tiering did, read from outside: Floe's `floe_iceberg_*`
//! metrics (commits, rows, Parquet bytes, committed offsets) and the CPU time of its
//! tiering thread from `/proc`.
//!
//! `floe_iceberg_committed_offset` is set by the tiering thread only after a commit
//! to the catalog has succeeded (or from offsets read back from the table), so a
//! committed offset above a record's offset means the record is in the table.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::broker::Broker;
use crate::procstat;

/// The name of Floe's tiering thread (its own OS thread, `tiering/src/runner.rs`).
pub const TIERING_THREAD: &str = "floe-tiering";

/// Tiering counters of some topics at one moment.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct TieringCounters {
    /// Iceberg commits made.
    pub commits: f64,
    /// Rows committed.
    pub rows: f64,
    /// Bytes of Parquet data files committed.
    pub parquet_bytes: f64,
    /// CPU seconds of the tiering thread so far (`None` for a broker without a pid).
    pub thread_cpu_s: Option<f64>,
}

impl TieringCounters {
    /// Reads the counters of `topics` (`None` without a metrics endpoint).
    pub fn read(b: &Broker, topics: &[String]) -> Option<TieringCounters> {
        let text = b.metrics_text()?;
        let sum = |name: &str| -> f64 {
            crate::broker::parse_samples(&text, name)
                .iter()
                .filter(|(labels, _)| labels.get("topic").is_some_and(|t| topics.contains(t)))
                .map(|(_, v)| v)
                .sum()
        };
        Some(TieringCounters {
            commits: sum("floe_iceberg_commits_total"),
            rows: sum("floe_iceberg_committed_rows_total"),
            parquet_bytes: sum("floe_iceberg_committed_bytes_total"),
            thread_cpu_s: b.pid.and_then(|p| procstat::thread_cpu_seconds(p, TIERING_THREAD).ok()),
        })
    }

    /// What happened between `self` (earlier) and `later`.
    pub fn delta(&self, later: &TieringCounters) -> TieringCounters {
        TieringCounters {
            commits: later.commits - self.commits,
            rows: later.rows - self.rows,
            parquet_bytes: later.parquet_bytes - self.parquet_bytes,
            thread_cpu_s: self.thread_cpu_s.zip(later.thread_cpu_s).map(|(a, z)| z - a),
        }
    }
}

/// The next offset to tier of each partition of `topic`: everything below it is in
/// the table. Partitions the tiering thread has not reported yet are absent.
pub fn committed_offsets(b: &Broker, topic: &str) -> Option<BTreeMap<i32, i64>> {
    let samples = b.metric_samples("floe_iceberg_committed_offset")?;
    Some(
        samples
            .into_iter()
            .filter(|(l, _)| l.get("topic").is_some_and(|t| t == topic))
            .filter_map(|(l, v)| Some((l.get("partition")?.parse::<i32>().ok()?, v as i64)))
            .collect(),
    )
}

/// Bytes of the files under `dir` whose name ends with `suffix` (recursively; 0 if
/// `dir` does not exist).
pub fn file_bytes(dir: &Path, suffix: &str) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut total = 0;
    for e in entries.flatten() {
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_dir() {
            total += file_bytes(&e.path(), suffix);
        } else if e.file_name().to_string_lossy().ends_with(suffix) {
            total += meta.len();
        }
    }
    total
}
