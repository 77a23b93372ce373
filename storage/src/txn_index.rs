//! `TransactionIndex`: a segment's `.txnindex`, the aborted transactions whose
//! ABORT marker lies in the segment (Kafka's `TransactionIndex`).
//!
//! # File layout (`<20-digit base offset>.txnindex`, Kafka's, big-endian)
//! A sequence of 34-byte entries, in marker order, nothing else:
//! ```text
//! offset  size  field
//!      0     2  version             i16 = 0
//!      2     8  producer id         i64
//!     10     8  first offset        i64  the transaction's first batch in this partition
//!     18     8  last offset         i64  the ABORT marker's offset
//!     26     8  last stable offset  i64  the partition's LSO once the transaction completed
//! ```
//! The file is created with the first entry (most segments have none) and
//! written with positioned writes at `entries × 34`; it is fsynced with the
//! segment by `PartitionLog::flush`. Recovery rebuilds the index of every
//! segment it recovers from the segment's markers; a file whose length is not
//! a multiple of 34 or that holds an unknown version fails its check at load,
//! and the segment is recovered.
//!
//! The entries are also kept in memory: aborted transactions are rare and an
//! entry is 34 bytes, so a fetch never reads the file.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{IoContext, Result};
use crate::transaction::AbortedTxn;

/// Bytes of one entry.
pub(crate) const ENTRY_SIZE: usize = 34;

/// The aborted transactions of one segment. Not synchronised: owned by its `LogSegment`.
#[derive(Debug)]
pub(crate) struct TransactionIndex {
    path: PathBuf,
    /// Opened (created) with the first entry.
    file: Option<Arc<File>>,
    entries: Vec<AbortedTxn>,
}

impl TransactionIndex {
    /// An index with no entries whose file does not exist yet; deletes a stale file of that name.
    pub(crate) fn create(path: &Path) -> Result<Self> {
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).ctx("remove stale transaction index", path),
        }
        Ok(Self { path: path.to_path_buf(), file: None, entries: Vec::new() })
    }

    /// Loads `path` (a missing file is an empty index); `Ok(Err(reason))` if
    /// the file is torn or not an index, or holds a marker at or past `next_offset`.
    pub(crate) fn load(path: &Path, next_offset: i64) -> Result<Result<Self, String>> {
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Ok(Self { path: path.to_path_buf(), file: None, entries: Vec::new() }))
            }
            Err(e) => return Err(e).ctx("read transaction index", path),
        };
        if bytes.len() % ENTRY_SIZE != 0 {
            return Ok(Err(format!(
                "{} bytes is not a whole number of {ENTRY_SIZE}-byte entries",
                bytes.len()
            )));
        }
        let mut entries = Vec::with_capacity(bytes.len() / ENTRY_SIZE);
        for chunk in bytes.chunks_exact(ENTRY_SIZE) {
            let i64_at = |at: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&chunk[at..at + 8]);
                i64::from_be_bytes(b)
            };
            let version = i16::from_be_bytes([chunk[0], chunk[1]]);
            if version != 0 {
                return Ok(Err(format!("entry version {version}")));
            }
            let e = AbortedTxn {
                producer_id: i64_at(2),
                first_offset: i64_at(10),
                last_offset: i64_at(18),
                last_stable_offset: i64_at(26),
            };
            if e.last_offset >= next_offset || e.first_offset > e.last_offset {
                return Ok(Err(format!(
                    "entry {e:?} does not fit a segment ending at {next_offset}"
                )));
            }
            entries.push(e);
        }
        let file = if entries.is_empty() {
            None
        } else {
            Some(Arc::new(
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(path)
                    .ctx("open transaction index", path)?,
            ))
        };
        Ok(Ok(Self { path: path.to_path_buf(), file, entries }))
    }

    /// Appends one entry (memory and file).
    ///
    /// # Errors
    /// [`crate::StorageError::Io`] if the file cannot be created or written;
    /// the entry stays in memory either way (recovery rebuilds the file).
    pub(crate) fn append(&mut self, entry: AbortedTxn) -> Result<()> {
        let position = (self.entries.len() * ENTRY_SIZE) as u64;
        self.entries.push(entry);
        let file = match &self.file {
            Some(f) => f.clone(),
            None => {
                let f = Arc::new(
                    OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create(true)
                        .truncate(true)
                        .open(&self.path)
                        .ctx("create transaction index", &self.path)?,
                );
                self.file = Some(f.clone());
                // Earlier entries kept in memory after a failed write go in too.
                let mut all = Vec::with_capacity(self.entries.len() * ENTRY_SIZE);
                self.entries.iter().for_each(|e| all.extend(encode(e)));
                return file_write(&f, &all, 0, &self.path);
            }
        };
        file_write(&file, &encode(&entry), position, &self.path)
    }

    /// Drops the entries whose marker is at or past `offset` (the log was cut there).
    ///
    /// # Errors
    /// [`crate::StorageError::Io`] if the file cannot be cut.
    pub(crate) fn truncate_to(&mut self, offset: i64) -> Result<()> {
        let keep = self.entries.partition_point(|e| e.last_offset < offset);
        if keep == self.entries.len() {
            return Ok(());
        }
        self.entries.truncate(keep);
        match &self.file {
            Some(f) => {
                f.set_len((keep * ENTRY_SIZE) as u64).ctx("truncate transaction index", &self.path)
            }
            None => Ok(()),
        }
    }

    /// The entries, in marker order.
    pub(crate) fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }

    /// Kafka's `collectAbortedTxns`: the entries whose marker is at or after
    /// `fetch_offset` and whose first offset is below `upper_bound`, and
    /// whether the search is complete (an entry's last stable offset reached
    /// `upper_bound`: no later segment can hold a transaction that started below it).
    pub(crate) fn collect(
        &self,
        fetch_offset: i64,
        upper_bound: i64,
        out: &mut Vec<AbortedTxn>,
    ) -> bool {
        for e in &self.entries {
            if e.last_offset >= fetch_offset && e.first_offset < upper_bound {
                out.push(*e);
            }
            if e.last_stable_offset >= upper_bound {
                return true;
            }
        }
        false
    }

    /// The file and its path, if it exists (for fsync).
    pub(crate) fn file(&self) -> Option<(Arc<File>, PathBuf)> {
        self.file.clone().map(|f| (f, self.path.clone()))
    }

    /// Names the file `path` from now on (after it was renamed; the open
    /// descriptor stays valid).
    pub(crate) fn set_path(&mut self, path: &Path) {
        self.path = path.to_path_buf();
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

fn encode(e: &AbortedTxn) -> [u8; ENTRY_SIZE] {
    let mut b = [0u8; ENTRY_SIZE];
    b[2..10].copy_from_slice(&e.producer_id.to_be_bytes());
    b[10..18].copy_from_slice(&e.first_offset.to_be_bytes());
    b[18..26].copy_from_slice(&e.last_offset.to_be_bytes());
    b[26..34].copy_from_slice(&e.last_stable_offset.to_be_bytes());
    b
}

fn file_write(file: &File, bytes: &[u8], position: u64, path: &Path) -> Result<()> {
    crate::failpoint::check("log.txn_index.append")
        .and_then(|()| file.write_all_at(bytes, position))
        .ctx("append to transaction index", path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    #[test]
    fn entries_round_trip_and_torn_files_fail_their_check() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.txnindex");
        let mut idx = TransactionIndex::create(&path).unwrap();
        assert!(!path.exists(), "created with the first entry");
        idx.append(txn(1, 0, 5, 6)).unwrap();
        idx.append(txn(2, 3, 9, 4)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 2 * ENTRY_SIZE);
        assert_eq!(&bytes[..2], &[0, 0]);
        assert_eq!(&bytes[2..10], &1i64.to_be_bytes());
        assert_eq!(&bytes[26..34], &6i64.to_be_bytes());
        let loaded = TransactionIndex::load(&path, 10).unwrap().unwrap();
        assert_eq!(loaded.entries(), idx.entries());
        assert!(TransactionIndex::load(&path, 9).unwrap().is_err(), "marker past the segment end");
        std::fs::write(&path, &bytes[..40]).unwrap();
        assert!(TransactionIndex::load(&path, 10).unwrap().is_err());
        let missing = dir.path().join("x.txnindex");
        assert!(TransactionIndex::load(&missing, 0).unwrap().unwrap().entries().is_empty());
    }

    #[test]
    fn collect_is_kafkas_search() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = TransactionIndex::create(&dir.path().join("i")).unwrap();
        idx.append(txn(1, 0, 10, 2)).unwrap();
        idx.append(txn(2, 2, 20, 21)).unwrap();
        idx.append(txn(3, 25, 30, 31)).unwrap();
        let mut out = Vec::new();
        assert!(idx.collect(11, 15, &mut out), "LSO 21 after the second covers 15");
        assert_eq!(out, vec![txn(2, 2, 20, 21)]);
        let mut out = Vec::new();
        assert!(!idx.collect(0, 100, &mut out));
        assert_eq!(out.len(), 3);
    }
}
