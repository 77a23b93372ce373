//! `LogSegment`: one `.log` file of record batches plus its `.index`,
//! `.timeindex` and `.txnindex`, named by the segment's base offset. Walks
//! over its batches go through [`crate::SegmentBatchReader`].
//!
//! A segment is append-only: batches are written at its end with positioned
//! writes, never rewritten. Only recovery truncates one, before the log is
//! shared, and a replica's truncation (`PartitionLog::truncate_to`), which
//! normally cuts only above the high watermark, where no read goes. Readers
//! therefore may `pread` any range below a size they observed without holding
//! the log's lock; a read in flight while a truncation cuts below the high
//! watermark (an unclean leader change) may come up short and fail, as in Kafka.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use floe_protocol::record_batch::RecordBatchHeader;

use crate::error::{IoContext, Result};
use crate::failpoint;
use crate::file_names::{
    deleted_file, index_file, log_file, time_index_file, txn_index_file, with_suffix,
};
use crate::index_file::open_rw;
use crate::offset_index::OffsetIndex;
use crate::time_index::TimeIndex;
use crate::transaction::AbortedTxn;
use crate::txn_index::TransactionIndex;
use crate::verify::CorruptRange;

/// A sealed segment as tiering sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Offset of the first record the segment can hold (its name).
    pub base_offset: i64,
    /// Offset after its last record.
    pub next_offset: i64,
    /// Its `.log` file.
    pub path: PathBuf,
    /// Bytes in the `.log`.
    pub size_bytes: u64,
    /// Damaged ranges recovery kept in it (readers step over them).
    pub corrupt: Vec<CorruptRange>,
    /// The aborted transactions with records in this segment (their markers
    /// may lie in later segments): a reader that must not see aborted records
    /// drops a transactional batch of producer `p` whose offsets lie in
    /// `[first_offset, last_offset]` of one of `p`'s entries.
    pub aborted: Vec<AbortedTxn>,
}

impl SegmentInfo {
    /// Whether `header`'s batch belongs to an aborted transaction (a
    /// transactional data batch inside one of [`SegmentInfo::aborted`]'s
    /// ranges of its producer). A producer has at most one transaction ongoing
    /// in a partition, so its batches between the first offset and the ABORT
    /// marker are exactly that transaction's.
    pub fn is_aborted(&self, header: &RecordBatchHeader) -> bool {
        header.is_transactional()
            && !header.is_control()
            && self.aborted.iter().any(|a| {
                a.producer_id == header.producer_id
                    && a.first_offset <= header.base_offset
                    && header.base_offset < a.last_offset
            })
    }
}

/// One batch appended by [`LogSegment::append`]: where in the appended buffer, and what it holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AppendedBatch {
    pub(crate) position_in_buffer: usize,
    pub(crate) size: usize,
    pub(crate) base_offset: i64,
    pub(crate) next_offset: i64,
    pub(crate) max_timestamp: i64,
}

/// The three files of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentPaths {
    pub(crate) log: PathBuf,
    pub(crate) index: PathBuf,
    pub(crate) time_index: PathBuf,
    /// Exists only when the segment has aborted transactions.
    pub(crate) txn_index: PathBuf,
}

impl SegmentPaths {
    /// The files of the segment based at `base_offset` in `dir`, with `suffix`
    /// (`""`, `.cleaned`, `.swap`) after their usual names.
    pub(crate) fn of(dir: &Path, base_offset: i64, suffix: &str) -> Self {
        Self {
            log: with_suffix(&log_file(dir, base_offset), suffix),
            index: with_suffix(&index_file(dir, base_offset), suffix),
            time_index: with_suffix(&time_index_file(dir, base_offset), suffix),
            txn_index: with_suffix(&txn_index_file(dir, base_offset), suffix),
        }
    }

    /// The four paths, indexes first (the order the swap renames them in);
    /// the `.txnindex` may not exist.
    pub(crate) fn indexes_then_log(&self) -> [&Path; 4] {
        [&self.index, &self.time_index, &self.txn_index, &self.log]
    }
}

/// A segment of a partition log. Not synchronised: `PartitionLog` owns its segments under its lock.
#[derive(Debug)]
pub(crate) struct LogSegment {
    pub(crate) base_offset: i64,
    /// Shared so reads can name the file in errors without allocating.
    pub(crate) log_path: Arc<Path>,
    pub(crate) log: Arc<File>,
    /// Bytes of whole batches in the `.log`.
    pub(crate) size: u64,
    /// Offset after the last batch (`base_offset` when empty).
    pub(crate) next_offset: i64,
    pub(crate) offset_index: OffsetIndex,
    pub(crate) time_index: TimeIndex,
    /// The aborted transactions whose ABORT marker is in this segment.
    pub(crate) txn_index: TransactionIndex,
    /// Largest batch max timestamp, -1 when empty.
    pub(crate) max_timestamp: i64,
    /// Base offset of the first batch holding `max_timestamp`; `None` when not
    /// known (a segment loaded without a full scan): found by a scan on demand.
    pub(crate) offset_of_max_timestamp: Option<i64>,
    /// When the segment's age for `segment.ms` starts: the first append's clock,
    /// or for a loaded segment its first batch's max timestamp (as Kafka does).
    pub(crate) rolling_timestamp_ms: Option<i64>,
    pub(crate) bytes_since_last_index_entry: u64,
    /// Damaged byte ranges recovery found and kept (valid batches follow
    /// them): reads and scans step over them; see `loader`.
    pub(crate) corrupt: Vec<CorruptRange>,
}

impl LogSegment {
    /// Creates a new empty segment (truncating any files of the same name).
    pub(crate) fn create(dir: &Path, base_offset: i64) -> Result<Self> {
        let log_path = log_file(dir, base_offset);
        let log = open_rw(&log_path, true)?;
        let offset_index = OffsetIndex::create(&index_file(dir, base_offset), base_offset)?;
        let time_index = TimeIndex::create(&time_index_file(dir, base_offset), base_offset)?;
        let txn_index = TransactionIndex::create(&txn_index_file(dir, base_offset))?;
        Ok(Self::assemble(base_offset, log_path, log, 0, offset_index, time_index, txn_index))
    }

    /// Creates a new empty segment whose files are at the given paths (the
    /// cleaner's `.cleaned` files), truncating (or for the `.txnindex`,
    /// removing) any files there.
    pub(crate) fn create_at(base_offset: i64, paths: &SegmentPaths) -> Result<Self> {
        let log = open_rw(&paths.log, true)?;
        let offset_index = OffsetIndex::create(&paths.index, base_offset)?;
        let time_index = TimeIndex::create(&paths.time_index, base_offset)?;
        let txn_index = TransactionIndex::create(&paths.txn_index)?;
        Ok(Self::assemble(
            base_offset,
            paths.log.clone(),
            log,
            0,
            offset_index,
            time_index,
            txn_index,
        ))
    }

    /// Names the segment's files by `paths` from now on (after they were
    /// renamed: the open descriptors stay valid).
    pub(crate) fn set_paths(&mut self, paths: &SegmentPaths) {
        self.log_path = Arc::from(paths.log.as_path());
        self.offset_index.set_path(&paths.index);
        self.time_index.set_path(&paths.time_index);
        self.txn_index.set_path(&paths.txn_index);
    }

    /// Puts a segment together from opened parts; offsets and timestamps start empty.
    pub(crate) fn assemble(
        base_offset: i64,
        log_path: PathBuf,
        log: File,
        size: u64,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        txn_index: TransactionIndex,
    ) -> Self {
        Self {
            base_offset,
            log_path: Arc::from(log_path),
            log: Arc::new(log),
            size,
            next_offset: base_offset,
            offset_index,
            time_index,
            txn_index,
            max_timestamp: -1,
            offset_of_max_timestamp: None,
            rolling_timestamp_ms: None,
            bytes_since_last_index_entry: 0,
            corrupt: Vec::new(),
        }
    }

    /// Accounts for one batch at `position`: adds index entries every
    /// `index_interval` bytes (at the batch's start), tracks timestamps.
    pub(crate) fn index_batch(
        &mut self,
        base_offset: i64,
        position: u64,
        size: u64,
        max_timestamp: i64,
        index_interval: u64,
    ) {
        if self.bytes_since_last_index_entry > index_interval {
            self.offset_index.append(base_offset, position);
            if self.max_timestamp >= 0
                && Some(self.max_timestamp) > self.time_index.last_timestamp()
            {
                self.time_index.append(self.max_timestamp, base_offset);
            }
            self.bytes_since_last_index_entry = 0;
        }
        self.bytes_since_last_index_entry += size;
        if max_timestamp > self.max_timestamp {
            self.max_timestamp = max_timestamp;
            self.offset_of_max_timestamp = Some(base_offset);
        }
    }

    /// Writes `records` (whole batches, offsets assigned) at the end of the
    /// `.log` with one positioned write, then indexes them.
    ///
    /// On a failed write (a full disk) the file is cut back to its previous
    /// size, so no partial batch stays behind to be overwritten or recovered
    /// as garbage; if even that fails, the next append still writes at the
    /// old size and recovery would truncate the leftover tail.
    pub(crate) fn append(
        &mut self,
        records: &[u8],
        batches: &[AppendedBatch],
        now_ms: i64,
        index_interval: u64,
    ) -> Result<()> {
        let start = self.size;
        if let Err(e) = self.write_at_end(records) {
            if let Err(cut) = self.log.set_len(start) {
                // A partial batch may stay past `size`: the log must go offline
                // (the caller sees this error, not the write's) rather than
                // leave recovery to judge bytes nobody acknowledged.
                tracing::error!(segment = %self.log_path.display(), size = start, write_error = %e,
                    error = %cut, "cannot cut a partly written batch off the segment");
                return Err(cut).ctx("cut a partial batch off the segment", &self.log_path);
            }
            return Err(e).ctx("append to segment", &self.log_path);
        }
        for b in batches {
            self.index_batch(
                b.base_offset,
                start + b.position_in_buffer as u64,
                b.size as u64,
                b.max_timestamp,
                index_interval,
            );
            self.next_offset = b.next_offset;
        }
        self.size = start + records.len() as u64;
        self.rolling_timestamp_ms.get_or_insert(now_ms);
        // The batches are in the log: failing the append now would leave them
        // there unacknowledged while their offsets are handed out again. Index
        // entries that cannot be written (a full disk) stay in memory and are
        // written by the next append; recovery rebuilds an index that lacks them.
        for (result, index) in
            [(self.offset_index.persist(), "offset"), (self.time_index.persist(), "time")]
        {
            if let Err(e) = result {
                tracing::warn!(segment = %self.log_path.display(), index, error = %e,
                    "cannot write index entries; keeping them in memory and retrying on the next append");
            }
        }
        Ok(())
    }

    /// One positioned write of `records` at the segment's end. The
    /// `log.segment.append` failpoint makes it a short write: half the bytes
    /// land, then the injected error, as a disk that fills mid-write does.
    fn write_at_end(&self, records: &[u8]) -> std::io::Result<()> {
        if let Err(e) = failpoint::check("log.segment.append") {
            self.log.write_all_at(&records[..records.len() / 2], self.size)?;
            return Err(e);
        }
        self.log.write_all_at(records, self.size)
    }

    /// The damaged byte ranges as `(start, end)`, for walks outside the log's lock.
    pub(crate) fn holes(&self) -> Vec<(u64, u64)> {
        self.corrupt.iter().map(|c| (c.position, c.end_position)).collect()
    }

    /// Whether the segment holds no batch.
    pub(crate) fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// The files a flush must fsync.
    pub(crate) fn files(&self) -> Vec<(Arc<File>, PathBuf)> {
        let mut files = vec![
            (self.log.clone(), self.log_path.to_path_buf()),
            (self.offset_index.file().clone(), self.offset_index.path().to_path_buf()),
            (self.time_index.file().clone(), self.time_index.path().to_path_buf()),
        ];
        files.extend(self.txn_index.file());
        files
    }

    /// What tiering needs to know.
    pub(crate) fn info(&self) -> SegmentInfo {
        SegmentInfo {
            base_offset: self.base_offset,
            next_offset: self.next_offset,
            path: self.log_path.to_path_buf(),
            size_bytes: self.size,
            corrupt: self.corrupt.clone(),
            aborted: Vec::new(),
        }
    }

    /// The segment's files, the `.log` first.
    fn file_paths(&self) -> [PathBuf; 4] {
        [
            self.log_path.to_path_buf(),
            self.offset_index.path().to_path_buf(),
            self.time_index.path().to_path_buf(),
            self.txn_index.path().to_path_buf(),
        ]
    }

    /// Renames the segment's files to `*.deleted`, then removes them. Open
    /// descriptors (in-flight fetches) keep the data readable until dropped.
    pub(crate) fn delete_files(self) -> Result<()> {
        let paths = self.file_paths();
        drop(self);
        for path in paths {
            let deleted = deleted_file(&path);
            match std::fs::rename(&path, &deleted) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e).ctx("rename for deletion", &path),
            }
            failpoint::check("log.retention.delete").ctx("delete", &deleted)?;
            std::fs::remove_file(&deleted).ctx("delete", &deleted)?;
        }
        Ok(())
    }

    /// The first half of [`LogSegment::delete_files`]: renames the files to
    /// `*.deleted` and returns those names, to be removed once the log's lock
    /// is released. The `.log` goes first: a crash after it leaves indexes
    /// without a log, which recovery removes, so the segment vanishes in one
    /// step. Recovery also removes the `.deleted` files a crash left.
    pub(crate) fn rename_for_deletion(self) -> Result<Vec<PathBuf>> {
        let paths = self.file_paths();
        drop(self);
        let mut renamed = Vec::with_capacity(paths.len());
        for path in paths {
            let deleted = deleted_file(&path);
            match std::fs::rename(&path, &deleted) {
                Ok(()) => renamed.push(deleted),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).ctx("rename for deletion", &path),
            }
        }
        Ok(renamed)
    }
}
