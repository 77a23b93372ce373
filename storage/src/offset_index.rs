//! `OffsetIndex`: a segment's sparse map from offsets to file positions (`.index`).
//!
//! # Layout
//! A flat array of 8-byte entries, nothing else:
//! ```text
//! relative offset  u32 BE   base offset of a batch minus the segment's base offset
//! position         u32 BE   byte position of that batch in the segment's .log
//! ```
//! Entries are strictly increasing in both fields and point at batch
//! boundaries. One is added every `index.interval.bytes` of log, so a lookup
//! finds the batch at or before an offset and the reader scans forward from
//! there over at most about one interval of batch headers.
//!
//! The entries are held in memory (8 bytes per ~4 KiB of log) and appended to
//! the file with one `write` per append call ([`OffsetIndex::persist`]); the
//! file becomes durable when the segment is flushed. A file found torn,
//! unsorted or pointing past its log at startup is rebuilt from the log.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use crate::error::Result;
use crate::index_file::{IndexEntry, IndexFile};

/// Bytes per entry.
pub(crate) const OFFSET_INDEX_ENTRY_SIZE: usize = 8;

/// (relative offset, position)
impl IndexEntry for (u32, u32) {
    const SIZE: usize = OFFSET_INDEX_ENTRY_SIZE;

    fn decode(b: &[u8]) -> Self {
        (u32::from_be_bytes([b[0], b[1], b[2], b[3]]), u32::from_be_bytes([b[4], b[5], b[6], b[7]]))
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_be_bytes());
        out.extend_from_slice(&self.1.to_be_bytes());
    }
}

/// A segment's offset index; see the module docs for the layout.
#[derive(Debug)]
pub(crate) struct OffsetIndex {
    index: IndexFile<(u32, u32)>,
    base_offset: i64,
}

impl OffsetIndex {
    /// Creates an empty index at `path`, truncating any file there.
    pub(crate) fn create(path: &Path, base_offset: i64) -> Result<Self> {
        Ok(Self { index: IndexFile::create(path)?, base_offset })
    }

    /// Loads the index at `path` for a log of `log_size` bytes. `Ok(Err(reason))`
    /// when the file is missing or fails the sanity checks (and must be rebuilt).
    pub(crate) fn load(
        path: &Path,
        base_offset: i64,
        log_size: u64,
    ) -> Result<Result<Self, String>> {
        let loaded = IndexFile::load(path, |prev: Option<&(u32, u32)>, &(rel, pos)| {
            if let Some(&(prev_rel, prev_pos)) = prev {
                if rel <= prev_rel || pos <= prev_pos {
                    return Err(format!("({rel}, {pos}) is not after ({prev_rel}, {prev_pos})"));
                }
            }
            if u64::from(pos) >= log_size {
                return Err(format!("points at {pos}, past the log's {log_size} bytes"));
            }
            Ok(())
        })?;
        Ok(loaded
            .map(|index| Self { index, base_offset })
            .map_err(|r| format!("offset index: {r}")))
    }

    /// Adds an entry in memory if it is representable and after the last one;
    /// [`OffsetIndex::persist`] writes it.
    pub(crate) fn append(&mut self, offset: i64, position: u64) {
        let (Ok(rel), Ok(pos)) =
            (u32::try_from(offset - self.base_offset), u32::try_from(position))
        else {
            return;
        };
        if let Some(&(last_rel, last_pos)) = self.index.entries().last() {
            if rel <= last_rel || pos <= last_pos {
                return;
            }
        }
        self.index.push((rel, pos));
    }

    /// Drops the entries pointing at or past `position` (the log was cut there).
    ///
    /// # Errors
    /// [`crate::StorageError::Io`] if the file cannot be cut.
    pub(crate) fn truncate_to_position(&mut self, position: u64) -> Result<()> {
        let keep = self.index.entries().partition_point(|&(_, p)| u64::from(p) < position);
        self.index.truncate(keep)
    }

    /// Writes the entries added since the last call, with one `write`.
    pub(crate) fn persist(&mut self) -> Result<()> {
        self.index.persist()
    }

    /// The entry with the largest offset `<= offset`, as (absolute offset, position).
    pub(crate) fn lookup(&self, offset: i64) -> Option<(i64, u64)> {
        let rel = offset - self.base_offset;
        if rel < 0 {
            return None;
        }
        let rel = u32::try_from(rel).unwrap_or(u32::MAX);
        let idx = self.index.entries().partition_point(|&(r, _)| r <= rel);
        idx.checked_sub(1).map(|i| self.entry(i))
    }

    /// Position to start scanning from for `offset` (0 when no entry is at or before it).
    pub(crate) fn position_for(&self, offset: i64) -> u64 {
        self.lookup(offset).map_or(0, |(_, p)| p)
    }

    /// The last entry.
    pub(crate) fn last_entry(&self) -> Option<(i64, u64)> {
        self.index.entries().len().checked_sub(1).map(|i| self.entry(i))
    }

    fn entry(&self, i: usize) -> (i64, u64) {
        let (rel, pos) = self.index.entries()[i];
        (self.base_offset + i64::from(rel), u64::from(pos))
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
        let p = dir.path().join("0.index");
        let mut idx = OffsetIndex::create(&p, 100).unwrap();
        idx.append(110, 4000);
        idx.append(105, 5000); // not after: ignored
        idx.append(120, 9000);
        idx.persist().unwrap();
        idx.append(130, 12000);
        idx.persist().unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 24);
        let idx = OffsetIndex::load(&p, 100, 20_000).unwrap().unwrap();
        assert_eq!(idx.len(), 3);
        assert_eq!(idx.lookup(99), None);
        assert_eq!(idx.position_for(109), 0);
        assert_eq!(idx.lookup(110), Some((110, 4000)));
        assert_eq!(idx.lookup(125), Some((120, 9000)));
        assert_eq!(idx.last_entry(), Some((130, 12000)));
    }

    #[test]
    fn bad_files_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.index");
        assert!(OffsetIndex::load(&p, 0, 100).unwrap().is_err(), "missing");
        std::fs::write(&p, [0u8; 7]).unwrap();
        assert!(OffsetIndex::load(&p, 0, 100).unwrap().is_err(), "torn");
        let mut b = Vec::new();
        for (r, pos) in [(5u32, 50u32), (3, 60)] {
            b.extend(r.to_be_bytes());
            b.extend(pos.to_be_bytes());
        }
        std::fs::write(&p, &b).unwrap();
        assert!(OffsetIndex::load(&p, 0, 100).unwrap().is_err(), "unsorted");
        std::fs::write(&p, &b[..8]).unwrap();
        assert!(OffsetIndex::load(&p, 0, 100).unwrap().is_ok());
        assert!(OffsetIndex::load(&p, 0, 50).unwrap().is_err(), "past the log");
    }
}
