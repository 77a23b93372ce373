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

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{IoContext, Result};

/// Bytes per entry.
pub(crate) const OFFSET_INDEX_ENTRY_SIZE: usize = 8;

/// A segment's offset index; see the module docs for the layout.
#[derive(Debug)]
pub(crate) struct OffsetIndex {
    path: PathBuf,
    file: Arc<File>,
    base_offset: i64,
    /// (relative offset, position)
    entries: Vec<(u32, u32)>,
    /// How many of `entries` are written to the file.
    persisted: usize,
}

pub(crate) fn open_rw(path: &Path, truncate: bool) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(truncate)
        .open(path)
        .ctx("open", path)
}

impl OffsetIndex {
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

    /// Loads the index at `path` for a log of `log_size` bytes. `Ok(Err(reason))`
    /// when the file is missing or fails the sanity checks (and must be rebuilt).
    pub(crate) fn load(
        path: &Path,
        base_offset: i64,
        log_size: u64,
    ) -> Result<Result<Self, String>> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Err("index file is missing".into()))
            }
            Err(e) => return Err(e).ctx("read", path),
        };
        if bytes.len() % OFFSET_INDEX_ENTRY_SIZE != 0 {
            return Ok(Err(format!(
                "size {} is not a multiple of {OFFSET_INDEX_ENTRY_SIZE}",
                bytes.len()
            )));
        }
        let mut entries = Vec::with_capacity(bytes.len() / OFFSET_INDEX_ENTRY_SIZE);
        for chunk in bytes.chunks_exact(OFFSET_INDEX_ENTRY_SIZE) {
            let rel = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            let pos = u32::from_be_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
            if let Some(&(prev_rel, prev_pos)) = entries.last() {
                if rel <= prev_rel || pos <= prev_pos {
                    return Ok(Err(format!(
                        "entry {} ({rel}, {pos}) is not after ({prev_rel}, {prev_pos})",
                        entries.len()
                    )));
                }
            }
            if u64::from(pos) >= log_size {
                return Ok(Err(format!(
                    "entry {} points at {pos}, past the log's {log_size} bytes",
                    entries.len()
                )));
            }
            entries.push((rel, pos));
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

    /// Adds an entry in memory if it is representable and after the last one;
    /// [`OffsetIndex::persist`] writes it.
    pub(crate) fn append(&mut self, offset: i64, position: u64) {
        let (Ok(rel), Ok(pos)) = (
            u32::try_from(offset - self.base_offset),
            u32::try_from(position),
        ) else {
            return;
        };
        if let Some(&(last_rel, last_pos)) = self.entries.last() {
            if rel <= last_rel || pos <= last_pos {
                return;
            }
        }
        self.entries.push((rel, pos));
    }

    /// Writes the entries added since the last call, with one `write`.
    pub(crate) fn persist(&mut self) -> Result<()> {
        if self.persisted == self.entries.len() {
            return Ok(());
        }
        let mut buf =
            Vec::with_capacity((self.entries.len() - self.persisted) * OFFSET_INDEX_ENTRY_SIZE);
        for &(rel, pos) in &self.entries[self.persisted..] {
            buf.extend_from_slice(&rel.to_be_bytes());
            buf.extend_from_slice(&pos.to_be_bytes());
        }
        let at = (self.persisted * OFFSET_INDEX_ENTRY_SIZE) as u64;
        self.file
            .write_all_at(&buf, at)
            .ctx("append to index", &self.path)?;
        self.persisted = self.entries.len();
        Ok(())
    }

    /// The entry with the largest offset `<= offset`, as (absolute offset, position).
    pub(crate) fn lookup(&self, offset: i64) -> Option<(i64, u64)> {
        let rel = offset - self.base_offset;
        if rel < 0 {
            return None;
        }
        let rel = u32::try_from(rel).unwrap_or(u32::MAX);
        let idx = self.entries.partition_point(|&(r, _)| r <= rel);
        idx.checked_sub(1).map(|i| self.entry(i))
    }

    /// Position to start scanning from for `offset` (0 when no entry is at or before it).
    pub(crate) fn position_for(&self, offset: i64) -> u64 {
        self.lookup(offset).map_or(0, |(_, p)| p)
    }

    /// The last entry.
    pub(crate) fn last_entry(&self) -> Option<(i64, u64)> {
        self.entries.len().checked_sub(1).map(|i| self.entry(i))
    }

    fn entry(&self, i: usize) -> (i64, u64) {
        let (rel, pos) = self.entries[i];
        (self.base_offset + i64::from(rel), u64::from(pos))
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
        assert!(
            OffsetIndex::load(&p, 0, 50).unwrap().is_err(),
            "past the log"
        );
    }
}
