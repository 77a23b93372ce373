//! `IndexFile`: the file side of a sparse index, shared by the offset and
//! time indexes: a flat array of fixed-size big-endian entries, held in
//! memory and appended to its file.
//!
//! Entries are appended to the file with one `write` per
//! [`IndexFile::persist`] call; the file becomes durable when the segment
//! is flushed. [`IndexFile::load`] refuses a torn file (a size that is not a
//! whole number of entries) or one whose entries fail the index's own check,
//! so the caller can rebuild it from the log.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{IoContext, Result};

/// One fixed-size entry of an index file.
pub(crate) trait IndexEntry: Copy {
    /// Bytes per entry on disk.
    const SIZE: usize;
    /// Decodes an entry from exactly [`IndexEntry::SIZE`] bytes.
    fn decode(bytes: &[u8]) -> Self;
    /// Appends the entry's [`IndexEntry::SIZE`] bytes to `out`.
    fn encode(&self, out: &mut Vec<u8>);
}

/// Opens (creating if needed) a file for reading and writing.
pub(crate) fn open_rw(path: &Path, truncate: bool) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(truncate)
        .open(path)
        .ctx("open", path)
}

/// The entries of one index and the file they are persisted to.
#[derive(Debug)]
pub(crate) struct IndexFile<E> {
    path: PathBuf,
    file: Arc<File>,
    entries: Vec<E>,
    /// How many of `entries` are written to the file.
    persisted: usize,
}

impl<E: IndexEntry> IndexFile<E> {
    /// Creates an empty index at `path`, truncating any file there.
    pub(crate) fn create(path: &Path) -> Result<Self> {
        let file = open_rw(path, true)?;
        Ok(Self {
            path: path.to_path_buf(),
            file: Arc::new(file),
            entries: Vec::new(),
            persisted: 0,
        })
    }

    /// Loads the index at `path`. `Ok(Err(reason))` when the file is missing,
    /// torn, or `check(previous, entry)` refuses an entry: the caller rebuilds it.
    pub(crate) fn load(
        path: &Path,
        check: impl Fn(Option<&E>, &E) -> std::result::Result<(), String>,
    ) -> Result<std::result::Result<Self, String>> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Err("the file is missing".into()))
            }
            Err(e) => return Err(e).ctx("read", path),
        };
        if bytes.len() % E::SIZE != 0 {
            return Ok(Err(format!("size {} is not a multiple of {}", bytes.len(), E::SIZE)));
        }
        let mut entries: Vec<E> = Vec::with_capacity(bytes.len() / E::SIZE);
        for chunk in bytes.chunks_exact(E::SIZE) {
            let entry = E::decode(chunk);
            if let Err(reason) = check(entries.last(), &entry) {
                return Ok(Err(format!("entry {}: {reason}", entries.len())));
            }
            entries.push(entry);
        }
        let file = open_rw(path, false)?;
        let persisted = entries.len();
        Ok(Ok(Self { path: path.to_path_buf(), file: Arc::new(file), entries, persisted }))
    }

    /// The entries, in order.
    pub(crate) fn entries(&self) -> &[E] {
        &self.entries
    }

    /// Adds an entry in memory; [`IndexFile::persist`] writes it.
    pub(crate) fn push(&mut self, entry: E) {
        self.entries.push(entry);
    }

    /// Writes the entries added since the last call, with one `write`.
    pub(crate) fn persist(&mut self) -> Result<()> {
        if self.persisted == self.entries.len() {
            return Ok(());
        }
        let mut buf = Vec::with_capacity((self.entries.len() - self.persisted) * E::SIZE);
        for e in &self.entries[self.persisted..] {
            e.encode(&mut buf);
        }
        let at = (self.persisted * E::SIZE) as u64;
        self.file.write_all_at(&buf, at).ctx("append to index", &self.path)?;
        self.persisted = self.entries.len();
        Ok(())
    }

    /// Keeps the first `keep` entries, in memory and in the file (truncation).
    ///
    /// # Errors
    /// [`crate::StorageError::Io`] if the file cannot be cut.
    pub(crate) fn truncate(&mut self, keep: usize) -> Result<()> {
        if keep >= self.entries.len() {
            return Ok(());
        }
        self.entries.truncate(keep);
        self.persisted = self.persisted.min(keep);
        self.file.set_len((keep * E::SIZE) as u64).ctx("truncate index", &self.path)
    }

    /// The open file (for fsync outside the log's lock).
    pub(crate) fn file(&self) -> &Arc<File> {
        &self.file
    }

    /// Where the index lives.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Names the file by `path` from now on (after a rename).
    pub(crate) fn set_path(&mut self, path: &Path) {
        self.path = path.to_path_buf();
    }
}
