//! The report of one run: Markdown for people (`report.md`), JSON with every figure
//! (`results.json`), and the machine it ran on.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;
use serde_json::{Map, Value};

/// The machine a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPUs available to this process.
    pub nproc: usize,
    /// `MemTotal` of `/proc/meminfo`, bytes.
    pub mem_total_bytes: u64,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: String,
    /// The first `model name` of `/proc/cpuinfo`.
    pub cpu_model: String,
}

impl Machine {
    /// Describes this machine.
    pub fn this() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let mem_kib = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
        let cpu_model = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        Machine {
            nproc: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            mem_total_bytes: mem_kib * 1024,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            cpu_model,
        }
    }
}

/// A report being written: Markdown blocks in order, and a JSON object of figures.
#[derive(Debug)]
pub struct Report {
    title: String,
    markdown: String,
    json: Map<String, Value>,
}

impl Report {
    /// Starts the report of `scenario`, recording the command line and the machine.
    pub fn new(scenario: &str, quick: bool, machine: &Machine) -> Report {
        let mut command =
            std::env::args().map(|a| shell_quote(&relative_arg(&a))).collect::<Vec<_>>().join(" ");
        // Where the brokers' data dirs went (they are temporary directories) changes
        // what a run measures, e.g. tmpfs against the disk: keep it with the command.
        if let Some(dir) = std::env::var_os("TMPDIR").filter(|d| !d.is_empty()) {
            command = format!("TMPDIR={} {command}", shell_quote(&dir.to_string_lossy()));
        }
        let mut r = Report {
            title: format!("floe-bench: {scenario}{}", if quick { " (--quick)" } else { "" }),
            markdown: String::new(),
            json: Map::new(),
        };
        r.set("scenario", scenario);
        r.set("quick", quick);
        r.set("command", &command);
        r.set("machine", machine);
        r.set(
            "unix_time",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        );
        r.para(&format!(
            "Machine: {} CPUs ({}), {:.1} GiB memory, Linux {}.\n\nCommand:\n\n```sh\n{}\n```",
            machine.nproc,
            machine.cpu_model,
            machine.mem_total_bytes as f64 / (1u64 << 30) as f64,
            machine.kernel,
            command
        ));
        r
    }

    /// A `## heading`.
    pub fn heading(&mut self, h: &str) {
        let _ = write!(self.markdown, "## {h}\n\n");
    }

    /// A paragraph of Markdown.
    pub fn para(&mut self, text: &str) {
        let _ = write!(self.markdown, "{text}\n\n");
    }

    /// A table.
    pub fn table(&mut self, headers: &[&str], rows: &[Vec<String>]) {
        let _ = writeln!(self.markdown, "| {} |", headers.join(" | "));
        let _ = writeln!(self.markdown, "|{}", headers.iter().map(|_| "---|").collect::<String>());
        for r in rows {
            let _ = writeln!(self.markdown, "| {} |", r.join(" | "));
        }
        self.markdown.push('\n');
    }

    /// An SVG plot, by file name relative to the report.
    pub fn image(&mut self, file: &str, caption: &str) {
        let _ = write!(self.markdown, "![{caption}]({file})\n\n");
    }

    /// Records a figure in the JSON file under `key`.
    pub fn set(&mut self, key: &str, value: impl Serialize) {
        self.json.insert(key.to_string(), serde_json::to_value(value).unwrap_or(Value::Null));
    }

    /// Writes `report.md` and `results.json` into `dir`; returns their paths.
    ///
    /// # Errors
    /// The files cannot be written.
    pub fn write(&self, dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
        let md = dir.join("report.md");
        let json = dir.join("results.json");
        std::fs::write(&md, format!("# {}\n\n{}", self.title, self.markdown))
            .with_context(|| md.display().to_string())?;
        std::fs::write(&json, serde_json::to_string_pretty(&self.json)? + "\n")
            .with_context(|| json.display().to_string())?;
        Ok((md, json))
    }
}

/// `p` for a report: relative to the current directory when it is inside it, else to
/// the source tree floe-bench was built from (`benches/..`) when inside that, else
/// relative to the current directory through `..` — never an absolute path, which
/// would only describe this machine.
pub fn display_path(p: &Path) -> String {
    if !p.is_absolute() {
        return p.display().to_string();
    }
    let cwd = std::env::current_dir().ok();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf);
    for base in [&cwd, &repo].into_iter().flatten() {
        if let Ok(rest) = p.strip_prefix(base) {
            return if rest.as_os_str().is_empty() {
                ".".into()
            } else {
                rest.display().to_string()
            };
        }
    }
    match cwd {
        Some(cwd) => relative_to(p, &cwd).display().to_string(),
        None => p.file_name().map_or_else(|| ".".into(), |n| n.to_string_lossy().into_owned()),
    }
}

/// `p` (absolute) relative to the directory `base` (absolute), through `..` as needed.
fn relative_to(p: &Path, base: &Path) -> PathBuf {
    let (pc, bc): (Vec<_>, Vec<_>) = (p.components().collect(), base.components().collect());
    let common = pc.iter().zip(&bc).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..bc.len() {
        out.push("..");
    }
    for c in &pc[common..] {
        out.push(c.as_os_str());
    }
    out
}

/// A command-line argument with any absolute path in it (`/x/y`, `--out=/x/y`) made
/// relative by [`display_path`].
fn relative_arg(a: &str) -> String {
    if a.starts_with('/') {
        return display_path(Path::new(a));
    }
    match a.split_once("=/") {
        Some((k, v)) if k.starts_with('-') => {
            format!("{k}={}", display_path(&Path::new("/").join(v)))
        }
        _ => a.to_string(),
    }
}

fn shell_quote(a: &str) -> String {
    if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@".contains(c)) {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

/// `x` with one decimal, or "–" when unknown.
pub fn f1(x: Option<f64>) -> String {
    x.map_or_else(|| "–".into(), |v| format!("{v:.1}"))
}

/// `x` with two decimals, or "–".
pub fn f2(x: Option<f64>) -> String {
    x.map_or_else(|| "–".into(), |v| format!("{v:.2}"))
}

/// `x` as a percentage, or "–".
pub fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "–".into(), |v| format!("{:.0}%", v * 100.0))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn paths_in_reports_are_relative() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(super::display_path(&cwd.join("out/report.md")), "out/report.md");
        assert_eq!(super::display_path(Path::new("rel/x")), "rel/x");
        let outside = super::display_path(Path::new("/nonexistent-floe-bench-dir/x"));
        assert!(
            !outside.starts_with('/') && outside.ends_with("nonexistent-floe-bench-dir/x"),
            "{outside}"
        );
        assert_eq!(super::relative_arg("--quick"), "--quick");
        assert!(!super::relative_arg("--out=/nonexistent-floe-bench-dir/x").contains("=/"));
    }
}
