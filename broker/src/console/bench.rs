//! Benchmark reports for the console: the directories `floe-bench run ...
//! --out DIR` writes (report.md, results.json, SVG plots), found under
//! `floe.console.bench-reports-dir` and served read-only.
//!
//! Only a report directory's own files are served: a name or file with a
//! path separator, `..`, or a leading dot is refused, and the resolved path
//! must stay inside the reports directory (a symlink out of it is refused).

use std::path::Path;

use hyper::StatusCode;
use serde_json::{json, Value};

use super::cli_call::ApiError;

/// Files served, by extension, and their content types.
const TYPES: &[(&str, &str)] = &[
    ("md", "text/markdown; charset=utf-8"),
    ("svg", "image/svg+xml"),
    ("html", "text/html; charset=utf-8"),
    ("json", "application/json"),
    ("txt", "text/plain; charset=utf-8"),
    ("csv", "text/csv; charset=utf-8"),
    ("png", "image/png"),
];

/// Largest file served.
const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;

fn content_type(file: &str) -> Option<&'static str> {
    let ext = file.rsplit_once('.')?.1.to_ascii_lowercase();
    TYPES.iter().find(|(e, _)| *e == ext).map(|(_, t)| *t)
}

/// A single path component that names nothing outside its directory.
fn plain_component(s: &str) -> bool {
    !s.is_empty() && !s.starts_with('.') && !s.contains(['/', '\\', '\0']) && s != ".."
}

/// GET /api/bench: the reports and their files.
pub fn list(dir: Option<&Path>) -> Value {
    let Some(dir) = dir else {
        return json!({"dir": null, "reports": [], "how": "floe-bench run SCENARIO ... --out DIR, then set floe.console.bench-reports-dir=DIR"});
    };
    let mut reports = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            return json!({"dir": dir.display().to_string(), "reports": [], "error": format!("cannot read {}: {e}", dir.display())})
        }
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| plain_component(n))
        .collect();
    names.sort();
    for name in names {
        let mut files: Vec<String> = std::fs::read_dir(dir.join(&name))
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|f| plain_component(f) && content_type(f).is_some())
            .collect();
        files.sort();
        reports.push(json!({"name": name, "files": files}));
    }
    json!({"dir": dir.display().to_string(), "reports": reports})
}

/// GET /api/bench/{name}/{file}: the file's content type and bytes.
///
/// # Errors
/// 404 without a reports directory or for a missing file; 400 for a name
/// that would leave the report's directory or a type not served.
pub fn file(
    dir: Option<&Path>,
    name: &str,
    file: &str,
) -> Result<(&'static str, Vec<u8>), ApiError> {
    let not_found = || ApiError {
        status: StatusCode::NOT_FOUND,
        message: format!("no benchmark file {name}/{file}"),
    };
    let dir = dir.ok_or_else(|| ApiError {
        status: StatusCode::NOT_FOUND,
        message: "no benchmark reports: floe.console.bench-reports-dir is empty".into(),
    })?;
    if !plain_component(name) || !plain_component(file) {
        return Err(ApiError::bad(format!("`{name}/{file}` is not a report's file: names may not contain `/`, `..` or start with a dot")));
    }
    let content_type = content_type(file).ok_or_else(|| {
        ApiError::bad(format!(
            "{file}: only {} files are served",
            TYPES.iter().map(|(e, _)| *e).collect::<Vec<_>>().join(", ")
        ))
    })?;
    let root = dir.canonicalize().map_err(|_| not_found())?;
    let report = root.join(name).canonicalize().map_err(|_| not_found())?;
    let path = report.join(file).canonicalize().map_err(|_| not_found())?;
    // A symlink pointing out of the report's directory resolves outside it.
    if !report.starts_with(&root) || !path.starts_with(&report) {
        return Err(ApiError {
            status: StatusCode::FORBIDDEN,
            message: format!("{name}/{file} leads out of its report's directory"),
        });
    }
    let meta = std::fs::metadata(&path).map_err(|_| not_found())?;
    if !meta.is_file() {
        return Err(not_found());
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(ApiError::bad(format!("{name}/{file} is over {MAX_FILE_BYTES} bytes")));
    }
    let bytes = std::fs::read(&path).map_err(|_| not_found())?;
    Ok((content_type, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_reports_own_files_are_served() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("run1")).unwrap();
        std::fs::write(dir.path().join("run1/report.md"), "# hi").unwrap();
        std::fs::write(dir.path().join("secret.md"), "no").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.md"), dir.path().join("run1/link.md"))
            .unwrap();
        let d = Some(dir.path());
        assert_eq!(file(d, "run1", "report.md").unwrap().1, b"# hi");
        assert_eq!(file(d, "..", "secret.md").unwrap_err().status, StatusCode::BAD_REQUEST);
        assert_eq!(file(d, "run1", "../secret.md").unwrap_err().status, StatusCode::BAD_REQUEST);
        assert_eq!(file(d, "run1", "link.md").unwrap_err().status, StatusCode::FORBIDDEN);
        assert_eq!(file(d, "run1", "missing.md").unwrap_err().status, StatusCode::NOT_FOUND);
        assert_eq!(list(d)["reports"][0]["name"], "run1");
        assert_eq!(list(None)["dir"], Value::Null);
    }
}
