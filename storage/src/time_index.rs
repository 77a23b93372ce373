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
use std::path::Path;
use std::sync::Arc;

use crate::error::Result;
use crate::index_file::{IndexEntry, IndexFile};

/// Bytes per entry.
pub(crate) const TIME_INDEX_ENTRY_SIZE: usize = 12;

/// (timestamp, relative offset)
impl IndexEntry for (i64, u32) {
    const SIZE: usize = TIME_INDEX_ENTRY_SIZE;

    fn decode(b: &[u8]) -> Self {
        (
            i64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
        )
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_be_bytes());
        out.extend_from_slice(&self.1.to_be_bytes());
    }
}

/// A segment's time index; see the module docs for the layout and meaning.
#[derive(Debug)]
pub(crate) struct TimeIndex {
    index: IndexFile<(i64, u32)>,
    base_offset: i64,
}

impl TimeIndex {
    /// Creates an empty index at `path`, truncating any file there.
    pub(crate) fn create(path: &Path, base_offset: i64) -> Result<Self> {
        Ok(Self { index: IndexFile::create(path)?, base_offset })
    }

    /// Loads the index for a segment whose offsets end before `next_offset`.
    /// `Ok(Err(reason))` when missing or failing the sanity checks.
    pub(crate) fn load(
        path: &Path,
        base_offset: i64,
        next_offset: i64,
    ) -> Result<Result<Self, String>> {
        let loaded = IndexFile::load(path, |prev: Option<&(i64, u32)>, &(ts, rel)| {
            if let Some(&(prev_ts, prev_rel)) = prev {
                if ts <= prev_ts || rel <= prev_rel {
                    return Err(format!("({ts}, {rel}) is not after ({prev_ts}, {prev_rel})"));
                }
            }
            if base_offset + i64::from(rel) >= next_offset {
                return Err(format!(
                    "names offset {}, past the segment's end",
                    base_offset + i64::from(rel)
                ));
            }
            Ok(())
        })?;
        Ok(loaded.map(|index| Self { index, base_offset }).map_err(|r| format!("time index: {r}")))
    }

    /// Adds `(timestamp, offset)` in memory if representable and after the last entry.
    pub(crate) fn append(&mut self, timestamp: i64, offset: i64) {
        let Ok(rel) = u32::try_from(offset - self.base_offset) else {
            return;
        };
        if let Some(&(last_ts, last_rel)) = self.index.entries().last() {
            if timestamp <= last_ts || rel <= last_rel {
                return;
            }
        }
        self.index.push((timestamp, rel));
    }

    /// Drops the entries naming offsets at or past `offset` (the log was cut there).
    ///
    /// # Errors
    /// [`crate::StorageError::Io`] if the file cannot be cut.
    pub(crate) fn truncate_to_offset(&mut self, offset: i64) -> Result<()> {
        let base = self.base_offset;
        let keep = self.index.entries().partition_point(|&(_, rel)| base + i64::from(rel) < offset);
        self.index.truncate(keep)
    }

    /// Writes the entries added since the last call, with one `write`.
    pub(crate) fn persist(&mut self) -> Result<()> {
        self.index.persist()
    }

    /// Offset to start scanning from for the first record with timestamp `>= target`:
    /// that of the last entry with a timestamp below `target`, if any.
    pub(crate) fn lookup(&self, target: i64) -> Option<i64> {
        let entries = self.index.entries();
        let idx = entries.partition_point(|&(ts, _)| ts < target);
        idx.checked_sub(1).map(|i| self.base_offset + i64::from(entries[i].1))
    }

    /// The largest timestamp recorded, if any.
    pub(crate) fn last_timestamp(&self) -> Option<i64> {
        self.index.entries().last().map(|&(ts, _)| ts)
    }

    /// Number of entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.index.entries().len()
    }

    /// The open file (for fsync outside the log's lock).
    pub(crate) fn file(&self) -> &Arc<File> {
        self.index.file()
    }

    /// Where the index lives.
    pub(crate) fn path(&self) -> &Path {
        self.index.path()
    }

    /// Names the file by `path` from now on (after a rename).
    pub(crate) fn set_path(&mut self, path: &Path) {
        self.index.set_path(path);
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
        assert!(TimeIndex::load(&p, 10, 40).unwrap().is_err(), "offset past the end");
        std::fs::write(&p, [1u8; 13]).unwrap();
        assert!(TimeIndex::load(&p, 10, 50).unwrap().is_err(), "torn");
    }
}
