//! `TimeIndex`: a segment's sparse map from timestamps to offsets (`.timeindex`).
//!
//! # Layout
//! A flat array of 12-byte entries:
//! ```text
//! timestamp        i64 BE   largest timestamp of all batches before the entry's batch
//! relative offset  u32 BE   base offset of a batch minus the segment's base offset
//! ```
//! An entry `(T, R)` promises that every batch of the segment starting below
//! offset `R` has a max timestamp `<= T`. Entries are added at the same batch
//! boundaries as offset index entries, only when `T` grew, so both fields
//! strictly increase. To find the first record with a timestamp `>= target`,
//! start scanning at the last entry with `T < target`.
//!
//! Held in memory and persisted like the offset index; rebuilt from the log
//! when found invalid at startup.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{IoContext, Result};
use crate::offset_index::open_rw;

/// Bytes per entry.
pub(crate) const TIME_INDEX_ENTRY_SIZE: usize = 12;

/// A segment's time index; see the module docs for the layout and meaning.
#[derive(Debug)]
pub(crate) struct TimeIndex {
    path: PathBuf,
    file: Arc<File>,
    base_offset: i64,
    /// (timestamp, relative offset)
    entries: Vec<(i64, u32)>,
    persisted: usize,
}

impl TimeIndex {
    /// Creates an empty index at `path`, truncating any file there.
    pub(crate) fn create(path: &Path, base_offset: i64) -> Result<Self> {
        let file = open_rw(path, true)?;
        Ok(Self {
            path: path.to_path_buf(),
            file: Arc::new(file),
            base_offset,
            entries: Vec::new(),
            persisted: 0,
        })
    }

    /// Loads the index for a segment whose offsets end before `next_offset`.
    /// `Ok(Err(reason))` when missing or failing the sanity checks.
    pub(crate) fn load(
        path: &Path,
        base_offset: i64,
        next_offset: i64,
    ) -> Result<Result<Self, String>> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Err("time index file is missing".into()))
            }
            Err(e) => return Err(e).ctx("read", path),
        };
        if bytes.len() % TIME_INDEX_ENTRY_SIZE != 0 {
            return Ok(Err(format!(
                "size {} is not a multiple of {TIME_INDEX_ENTRY_SIZE}",
                bytes.len()
            )));
        }
        let mut entries: Vec<(i64, u32)> = Vec::with_capacity(bytes.len() / TIME_INDEX_ENTRY_SIZE);
        for c in bytes.chunks_exact(TIME_INDEX_ENTRY_SIZE) {
            let ts = i64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            let rel = u32::from_be_bytes([c[8], c[9], c[10], c[11]]);
            if let Some(&(prev_ts, prev_rel)) = entries.last() {
                if ts <= prev_ts || rel <= prev_rel {
                    return Ok(Err(format!(
                        "entry {} ({ts}, {rel}) is not after ({prev_ts}, {prev_rel})",
                        entries.len()
                    )));
                }
            }
            if base_offset + i64::from(rel) >= next_offset {
                return Ok(Err(format!(
                    "entry {} names offset {}, past the segment's end",
                    entries.len(),
                    base_offset + i64::from(rel)
                )));
            }
            entries.push((ts, rel));
        }
        let file = open_rw(path, false)?;
        let persisted = entries.len();
        Ok(Ok(Self {
            path: path.to_path_buf(),
            file: Arc::new(file),
            base_offset,
            entries,
            persisted,
        }))
    }

    /// Adds `(timestamp, offset)` in memory if representable and after the last entry.
    pub(crate) fn append(&mut self, timestamp: i64, offset: i64) {
        let Ok(rel) = u32::try_from(offset - self.base_offset) else {
            return;
        };
        if let Some(&(last_ts, last_rel)) = self.entries.last() {
            if timestamp <= last_ts || rel <= last_rel {
                return;
            }
        }
        self.entries.push((timestamp, rel));
    }

    /// Writes the entries added since the last call, with one `write`.
    pub(crate) fn persist(&mut self) -> Result<()> {
        if self.persisted == self.entries.len() {
            return Ok(());
        }
        let mut buf =
            Vec::with_capacity((self.entries.len() - self.persisted) * TIME_INDEX_ENTRY_SIZE);
        for &(ts, rel) in &self.entries[self.persisted..] {
            buf.extend_from_slice(&ts.to_be_bytes());
            buf.extend_from_slice(&rel.to_be_bytes());
        }
        let at = (self.persisted * TIME_INDEX_ENTRY_SIZE) as u64;
        self.file
            .write_all_at(&buf, at)
            .ctx("append to time index", &self.path)?;
        self.persisted = self.entries.len();
        Ok(())
    }

    /// Offset to start scanning from for the first record with timestamp `>= target`:
    /// that of the last entry with a timestamp below `target`, if any.
    pub(crate) fn lookup(&self, target: i64) -> Option<i64> {
        let idx = self.entries.partition_point(|&(ts, _)| ts < target);
        idx.checked_sub(1)
            .map(|i| self.base_offset + i64::from(self.entries[i].1))
    }

    /// The largest timestamp recorded, if any.
    pub(crate) fn last_timestamp(&self) -> Option<i64> {
        self.entries.last().map(|&(ts, _)| ts)
    }

    /// Number of entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The open file (for fsync outside the log's lock).
    pub(crate) fn file(&self) -> &Arc<File> {
        &self.file
    }

    /// Where the index lives.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_persist_load_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.timeindex");
        let mut idx = TimeIndex::create(&p, 10).unwrap();
        idx.append(1000, 20);
        idx.append(1000, 30); // timestamp did not grow: ignored
        idx.append(2000, 40);
        idx.persist().unwrap();
        let idx = TimeIndex::load(&p, 10, 50).unwrap().unwrap();
        assert_eq!(idx.len(), 2);
        assert_eq!(idx.lookup(1000), None);
        assert_eq!(idx.lookup(1001), Some(20));
        assert_eq!(idx.lookup(5000), Some(40));
        assert_eq!(idx.last_timestamp(), Some(2000));
        assert!(
            TimeIndex::load(&p, 10, 40).unwrap().is_err(),
            "offset past the end"
        );
        std::fs::write(&p, [1u8; 13]).unwrap();
        assert!(TimeIndex::load(&p, 10, 50).unwrap().is_err(), "torn");
    }
}
