//! `OffsetCheckpointFile`: Kafka's checkpoint file format, used for the
//! recovery points and the log start offsets of all partitions.
//!
//! # Layout
//! ```text
//! 0                         version
//! <count>                   number of entries
//! <topic> <partition> <offset>
//! …                         one line per partition
//! ```
//! Written atomically (tmp + fsync + rename + fsync dir): a reader sees the
//! previous checkpoint or the new one, never a mix. A missing file reads as
//! empty; an unreadable one is logged and read as empty, which is safe: every
//! partition is then recovered from its first segment.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use tracing::warn;

use crate::atomic_file::{write_atomically_at, RenameFailpoints};
use crate::error::{IoContext, Result};

/// Offsets keyed by (topic, partition).
pub type CheckpointEntries = BTreeMap<(String, i32), i64>;

const VERSION: &str = "0";

/// One checkpoint file.
#[derive(Debug, Clone)]
pub struct OffsetCheckpointFile {
    path: PathBuf,
}

impl OffsetCheckpointFile {
    /// The checkpoint at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Where it lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file with `entries`, durably.
    ///
    /// # Errors
    /// [`crate::StorageError::Io`] naming the failed step.
    pub fn write(&self, entries: &CheckpointEntries) -> Result<()> {
        let mut s = String::with_capacity(16 + entries.len() * 32);
        let _ = writeln!(s, "{VERSION}");
        let _ = writeln!(s, "{}", entries.len());
        for ((topic, partition), offset) in entries {
            let _ = writeln!(s, "{topic} {partition} {offset}");
        }
        let points =
            RenameFailpoints { before: "log.checkpoint.write", after: "log.checkpoint.renamed" };
        write_atomically_at(&self.path, s.as_bytes(), Some(points))
    }

    /// Reads the entries; empty if the file is missing or malformed (logged).
    ///
    /// # Errors
    /// [`crate::StorageError::Io`] if the file exists but cannot be read.
    pub fn read(&self) -> Result<CheckpointEntries> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                warn!(file = %self.path.display(), "checkpoint is not UTF-8; ignoring it");
                return Ok(BTreeMap::new());
            }
            Err(e) => return Err(e).ctx("read checkpoint", &self.path),
        };
        match parse(&text) {
            Ok(entries) => Ok(entries),
            Err(reason) => {
                warn!(file = %self.path.display(), %reason, "malformed checkpoint; ignoring it");
                Ok(BTreeMap::new())
            }
        }
    }
}

fn parse(text: &str) -> std::result::Result<CheckpointEntries, String> {
    let mut lines = text.lines();
    match lines.next() {
        Some(VERSION) => {}
        other => return Err(format!("unsupported version line {other:?}")),
    }
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| "missing entry count".to_string())?;
    let mut entries = BTreeMap::new();
    for line in lines.by_ref().take(count) {
        let mut parts = line.split(' ');
        let (Some(topic), Some(partition), Some(offset), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(format!("malformed line {line:?}"));
        };
        let partition: i32 = partition.parse().map_err(|_| format!("bad partition in {line:?}"))?;
        let offset: i64 = offset.parse().map_err(|_| format!("bad offset in {line:?}"))?;
        entries.insert((topic.to_string(), partition), offset);
    }
    if entries.len() != count {
        return Err(format!("expected {count} entries, found {}", entries.len()));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_format() {
        let dir = tempfile::tempdir().unwrap();
        let f = OffsetCheckpointFile::new(dir.path().join("cp"));
        assert!(f.read().unwrap().is_empty());
        let mut e = CheckpointEntries::new();
        e.insert(("a.b".into(), 0), 5);
        e.insert(("c".into(), 3), 1234);
        f.write(&e).unwrap();
        assert_eq!(std::fs::read_to_string(f.path()).unwrap(), "0\n2\na.b 0 5\nc 3 1234\n");
        assert_eq!(f.read().unwrap(), e);
    }

    #[test]
    fn malformed_reads_empty() {
        let dir = tempfile::tempdir().unwrap();
        let f = OffsetCheckpointFile::new(dir.path().join("cp"));
        for bad in ["1\n0\n", "0\n2\na 0 5\n", "0\n1\na x 5\n", "0\n1\na 0 5 6\n"] {
            std::fs::write(f.path(), bad).unwrap();
            assert!(f.read().unwrap().is_empty(), "{bad:?}");
        }
    }
}
