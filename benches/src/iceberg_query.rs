//! A reader's view of a tiered Iceberg table, for `table-maintenance`: the files of its
//! metadata directory (the current `metadata.json`, its snapshots, what the directory
//! holds), and the time of a DuckDB aggregate query over it.
//!
//! DuckDB is Python-only here, so the query runs in a Python interpreter on
//! `benches/scripts/iceberg_query_time.py`: the interpreter is `$FLOE_BENCH_PYTHON`, else
//! the repository's `.venv/bin/python` (what `tests/run-all.sh` installs), else `python3`
//! on the `PATH`. A missing interpreter, or one without duckdb, is a
//! [`QueryOutcome::Skipped`] with the reason, for the report to show; any other failure
//! is an error. Making the table and maintaining it are the scenario's.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// The metadata directory of a table, read at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct MetadataFiles {
    /// The current `metadata.json`: the highest version number in the directory (Floe
    /// writes `NNNNN-<uuid>.metadata.json`, one version up per commit).
    #[serde(skip)]
    pub current: PathBuf,
    /// Its file name (reports name no absolute paths).
    pub current_name: String,
    /// Its size, bytes.
    pub current_bytes: u64,
    /// Snapshots it lists.
    pub snapshots: usize,
    /// Entries of its snapshot log.
    pub snapshot_log: usize,
    /// Every file of the directory (metadata files, manifest lists, manifests): count.
    pub dir_files: usize,
    /// Their bytes.
    pub dir_bytes: u64,
}

impl MetadataFiles {
    /// Reads `dir` (a table's `metadata/`).
    ///
    /// # Errors
    /// The directory cannot be read, holds no `*.metadata.json`, or the newest is not JSON.
    pub fn read(dir: &Path) -> anyhow::Result<MetadataFiles> {
        let (mut dir_files, mut dir_bytes) = (0, 0);
        let mut current: Option<(u64, PathBuf)> = None;
        for e in
            std::fs::read_dir(dir).with_context(|| format!("read {}", dir.display()))?.flatten()
        {
            let Ok(meta) = e.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            dir_files += 1;
            dir_bytes += meta.len();
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".metadata.json") {
                continue;
            }
            let version =
                name.split(['-', '.']).next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            if current.as_ref().is_none_or(|(v, _)| version > *v) {
                current = Some((version, e.path()));
            }
        }
        let (_, current) =
            current.with_context(|| format!("no *.metadata.json in {}", dir.display()))?;
        let text = std::fs::read_to_string(&current)
            .with_context(|| format!("read {}", current.display()))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", current.display()))?;
        let count = |key: &str| json.get(key).and_then(|v| v.as_array()).map_or(0, Vec::len);
        Ok(MetadataFiles {
            current_name: current
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            current_bytes: text.len() as u64,
            snapshots: count("snapshots"),
            snapshot_log: count("snapshot-log"),
            current,
            dir_files,
            dir_bytes,
        })
    }
}

/// What the query script measured (its JSON answer).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueryTimes {
    /// DuckDB's version.
    pub duckdb: String,
    /// Each timed run, milliseconds (after one warm-up run).
    pub runs_ms: Vec<f64>,
    /// Their median.
    pub median_ms: f64,
    /// `partition, count(*), max(offset)` per partition.
    pub result: Vec<(i64, i64, i64)>,
    /// Manifests of the current snapshot.
    pub manifests: usize,
    /// Live data files of the current snapshot.
    pub data_files: usize,
    /// Their bytes.
    pub data_bytes: u64,
    /// Rows they hold, by the manifests.
    pub rows: u64,
}

/// The query's outcome.
#[derive(Debug, Clone)]
pub enum QueryOutcome {
    /// It ran.
    Measured(QueryTimes),
    /// It could not run here: no interpreter, or no duckdb in it.
    Skipped(String),
}

/// The interpreter to run the script with, and where that choice came from.
pub fn find_python() -> (PathBuf, &'static str) {
    if let Some(p) = std::env::var_os("FLOE_BENCH_PYTHON").filter(|p| !p.is_empty()) {
        return (PathBuf::from(p), "$FLOE_BENCH_PYTHON");
    }
    for root in repo_roots() {
        let venv = root.join(".venv/bin/python");
        if venv.exists() {
            return (venv, "the repository's .venv");
        }
    }
    (PathBuf::from("python3"), "python3 on the PATH")
}

/// The query script.
///
/// # Errors
/// It is in none of the places floe-bench looks (the source tree it was built from, the
/// current directory).
pub fn script() -> anyhow::Result<PathBuf> {
    repo_roots()
        .into_iter()
        .map(|r| r.join("benches/scripts/iceberg_query_time.py"))
        .find(|p| p.exists())
        .context(
            "benches/scripts/iceberg_query_time.py not found (run floe-bench from the repository)",
        )
}

/// The source tree floe-bench was built from, then the current directory.
fn repo_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Some(r) = Path::new(env!("CARGO_MANIFEST_DIR")).parent() {
        roots.push(r.to_path_buf());
    }
    if let Ok(cwd) = std::env::current_dir() {
        roots.push(cwd);
    }
    roots
}

/// Runs the query `runs` times (after a warm-up) on the table whose current metadata is
/// `metadata`, with `python`.
///
/// # Errors
/// The script fails for any reason other than a missing interpreter or duckdb, or its
/// answer is not the JSON it should print.
pub fn measure(python: &Path, metadata: &Path, runs: usize) -> anyhow::Result<QueryOutcome> {
    let script = script()?;
    let out = match Command::new(python)
        .arg(&script)
        .arg("--metadata")
        .arg(metadata)
        .args(["--runs", &runs.to_string()])
        .output()
    {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(QueryOutcome::Skipped(
                "there is no such interpreter (set FLOE_BENCH_PYTHON)".into(),
            ));
        }
        Err(e) => return Err(e).with_context(|| format!("cannot run {}", python.display())),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(2) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(stdout.trim()) {
            if let Some(reason) = v.get("skipped").and_then(|r| r.as_str()) {
                return Ok(QueryOutcome::Skipped(reason.to_string()));
            }
        }
    }
    anyhow::ensure!(
        out.status.success(),
        "{} {} failed ({}):\n{stdout}{stderr}",
        python.display(),
        script.display(),
        out.status
    );
    let times: QueryTimes = serde_json::from_str(stdout.trim())
        .with_context(|| format!("the query script answered: {stdout}"))?;
    Ok(QueryOutcome::Measured(times))
}
