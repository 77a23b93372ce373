//! `SegmentBatchReader`: the one walk over the record batches of a segment's
//! `.log` file, shared by fetches, offset and timestamp lookups, recovery,
//! verification, the cleaner and tiering.
//!
//! A `.log` is a sequence of record batches laid end to end (v2 format, see
//! [`floe_protocol::record_batch`]): each starts with the 61-byte header whose
//! `baseOffset` (8 bytes) and `batchLength` (4 bytes, counting what follows
//! it) give the batch's size, `batchLength + 12`. A walk reads a header,
//! judges it, and steps `size` bytes to the next one. Recovery may have kept
//! damaged byte ranges ("holes", [`crate::CorruptRange`]) inside a segment
//! whose later batches are valid: the reader steps over them, so readers see
//! an offset gap, never the damage.
//!
//! Reads are buffered: a walk over whole batches reads 256 KiB at a time; a
//! header-only walk (fetch, lookups) reads 4 KiB at a time and never reads a
//! batch body it skips, only checks that the batch fits before the end.

use std::borrow::Cow;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use floe_protocol::record_batch::{verify_crc, RecordBatchHeader, RECORD_BATCH_OVERHEAD};

use crate::error::{IoContext, Result};

/// Read size of walks that need every batch whole (recovery, verify, cleaner, tiering).
const BATCH_CHUNK: usize = 256 * 1024;
/// Read size of header-only walks: a page, a few small batches' headers at once.
const HEADER_CHUNK: usize = 4 * 1024;

/// What [`SegmentBatchReader::next_batch`] or [`SegmentBatchReader::next_header`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScannedBatch {
    /// A batch with a sane header that fits before the end of the range (and,
    /// if asked, whose CRC matches).
    Batch {
        /// Byte position of the batch in the file.
        position: u64,
        /// Its header.
        header: RecordBatchHeader,
    },
    /// The clean end of the range.
    End,
    /// No batch can be read at `position`: a torn or damaged header, a batch
    /// passing the end of the range, or (if asked) a CRC mismatch. What that
    /// means is the caller's call (recovery truncates, verify resynchronises,
    /// a fetch reports corruption).
    Invalid {
        /// Byte position of the bad batch.
        position: u64,
        /// What is wrong.
        reason: String,
    },
}

/// The file a reader reads: the caller's, or one it opened itself.
#[derive(Debug)]
enum SegmentFile<'a> {
    Borrowed(&'a File),
    Owned(File),
}

impl SegmentFile<'_> {
    fn get(&self) -> &File {
        match self {
            Self::Borrowed(f) => f,
            Self::Owned(f) => f,
        }
    }
}

/// Walks the record batches of `[start, end)` of a segment's `.log` in order,
/// stepping over damaged ranges.
///
/// Only positional reads (`pread`) below `end` are made, so a reader may run
/// without the log's lock over a range below a size it observed: a segment is
/// append-only. After [`ScannedBatch::End`] or [`ScannedBatch::Invalid`] the
/// reader stays where it is.
///
/// # Errors
/// Every method that reads returns [`crate::StorageError::Io`] when the file
/// cannot be read; damage is never an error but a [`ScannedBatch::Invalid`].
#[derive(Debug)]
pub struct SegmentBatchReader<'a> {
    file: SegmentFile<'a>,
    path: Cow<'a, Path>,
    end: u64,
    /// Where the next batch is looked for.
    pos: u64,
    buf: Vec<u8>,
    buf_start: u64,
    /// Damaged `(start, end)` byte ranges to step over.
    holes: Vec<(u64, u64)>,
    /// `(position, size)` of the batch the last call returned.
    current: Option<(u64, usize)>,
}

impl<'a> SegmentBatchReader<'a> {
    /// Reads `[start, end)` of `file` (the `.log` at `path`, named in errors).
    pub fn new(file: &'a File, path: &'a Path, start: u64, end: u64) -> Self {
        Self::with_file(SegmentFile::Borrowed(file), Cow::Borrowed(path), start, end)
    }

    /// Opens the `.log` at `path` read-only and reads `[start, end)` of it.
    ///
    /// # Errors
    /// [`crate::StorageError::Io`] if the file cannot be opened.
    pub fn open(path: &Path, start: u64, end: u64) -> Result<SegmentBatchReader<'static>> {
        let file = File::open(path).ctx("open segment", path)?;
        Ok(SegmentBatchReader::with_file(
            SegmentFile::Owned(file),
            Cow::Owned(path.to_path_buf()),
            start,
            end,
        ))
    }

    fn with_file(file: SegmentFile<'a>, path: Cow<'a, Path>, start: u64, end: u64) -> Self {
        Self {
            file,
            path,
            end,
            pos: start,
            buf: Vec::new(),
            buf_start: start,
            holes: Vec::new(),
            current: None,
        }
    }

    /// Steps over these damaged `(start, end)` byte ranges (the segment's
    /// [`crate::CorruptRange`]s) instead of reporting them.
    pub fn with_holes(mut self, holes: Vec<(u64, u64)>) -> Self {
        self.holes = holes;
        self
    }

    /// Byte position where the next batch is looked for.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The next batch, read whole: its header is checked for sanity and, if
    /// `verify`, its CRC-32C. Its bytes are then [`SegmentBatchReader::batch_bytes`].
    ///
    /// # Errors
    /// [`crate::StorageError::Io`] on a read error.
    pub fn next_batch(&mut self, verify: bool) -> Result<ScannedBatch> {
        let scanned = self.header(BATCH_CHUNK)?;
        let ScannedBatch::Batch { position, header } = &scanned else {
            return Ok(scanned);
        };
        let (position, size) = (*position, header.total_size());
        // The header check made sure the batch ends before `end`.
        self.fill(position, size, BATCH_CHUNK)?;
        if verify {
            if let Err(e) = verify_crc(self.slice(position, size), as_usize(position)) {
                return Ok(ScannedBatch::Invalid { position, reason: e.to_string() });
            }
        }
        self.advance(position, size);
        Ok(scanned)
    }

    /// The next batch's header, its body left unread: the header is checked
    /// for sanity and the batch for fitting before the end of the range.
    /// [`SegmentBatchReader::batch_bytes`] reads the body if it is wanted.
    ///
    /// # Errors
    /// [`crate::StorageError::Io`] on a read error.
    pub fn next_header(&mut self) -> Result<ScannedBatch> {
        let scanned = self.header(HEADER_CHUNK)?;
        if let ScannedBatch::Batch { position, header } = &scanned {
            self.advance(*position, header.total_size());
        }
        Ok(scanned)
    }

    /// The whole bytes of the batch the last call returned (header included,
    /// as stored); empty if it returned no batch. Reads the body when
    /// [`SegmentBatchReader::next_header`] left it out.
    ///
    /// # Errors
    /// [`crate::StorageError::Io`] on a read error.
    pub fn batch_bytes(&mut self) -> Result<&[u8]> {
        let Some((position, size)) = self.current else {
            return Ok(&[]);
        };
        self.fill(position, size, size)?;
        Ok(self.slice(position, size))
    }

    fn advance(&mut self, position: u64, size: usize) {
        self.current = Some((position, size));
        self.pos = position + size as u64;
    }

    /// Reads and judges the header at the next readable position; does not move.
    fn header(&mut self, chunk: usize) -> Result<ScannedBatch> {
        self.current = None;
        self.pos = step_over_holes(&self.holes, self.pos);
        let position = self.pos;
        if position >= self.end {
            return Ok(ScannedBatch::End);
        }
        let remaining = self.end - position;
        let invalid = |reason: String| Ok(ScannedBatch::Invalid { position, reason });
        if !self.fill(position, RECORD_BATCH_OVERHEAD, chunk)? {
            return invalid(format!("{remaining} trailing bytes are shorter than a batch header"));
        }
        let header = match RecordBatchHeader::parse(self.slice(position, RECORD_BATCH_OVERHEAD)) {
            Ok(h) => h,
            Err(e) => return invalid(e.to_string()),
        };
        if let Err(e) = header.check_sanity_in_log(as_usize(position)) {
            return invalid(e.to_string());
        }
        let size = header.total_size();
        if size as u64 > remaining {
            return invalid(format!(
                "batch of {size} bytes is torn: only {remaining} bytes remain"
            ));
        }
        Ok(ScannedBatch::Batch { position, header })
    }

    /// Makes `[pos, pos + len)` available in the buffer, reading at least
    /// `chunk` bytes (not past `end`) when it is not; `false` if the range
    /// passes `end`.
    fn fill(&mut self, pos: u64, len: usize, chunk: usize) -> Result<bool> {
        if pos + len as u64 > self.end {
            return Ok(false);
        }
        let have =
            pos >= self.buf_start && pos + len as u64 <= self.buf_start + self.buf.len() as u64;
        if !have {
            let want = (len.max(chunk) as u64).min(self.end - pos) as usize;
            self.buf.resize(want, 0);
            self.buf_start = pos;
            if let Err(e) = self.file.get().read_exact_at(&mut self.buf, pos) {
                // Nothing in the buffer is trustworthy after a short read.
                self.buf.clear();
                return Err(e).ctx("read segment", &self.path);
            }
        }
        Ok(true)
    }

    fn slice(&self, pos: u64, len: usize) -> &[u8] {
        let at = (pos - self.buf_start) as usize;
        &self.buf[at..at + len]
    }
}

/// A byte position as the `usize` [`floe_protocol::record_batch::BatchError`] reports.
fn as_usize(position: u64) -> usize {
    usize::try_from(position).unwrap_or(usize::MAX)
}

/// Where a walk at `position` continues: the end of the damaged range
/// `position` falls in, or `position` itself.
fn step_over_holes(holes: &[(u64, u64)], position: u64) -> u64 {
    holes
        .iter()
        .find(|&&(start, end)| start <= position && position < end)
        .map_or(position, |&(_, end)| end)
}

/// Where the readable bytes from `position` stop: the next damaged range, or
/// `end`. A fetch's file region ends there, so it never carries damage.
pub(crate) fn readable_end(holes: &[(u64, u64)], position: u64, end: u64) -> u64 {
    holes
        .iter()
        .filter(|&&(start, _)| start > position)
        .map(|&(start, _)| start)
        .min()
        .map_or(end, |s| s.min(end))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::test_util::batch;

    /// A batch of `n` records of `value_len` bytes at `base_offset` (the base
    /// offset is outside the CRC, as when the log assigns it).
    fn batch_at(base_offset: i64, n: usize, value_len: usize) -> Vec<u8> {
        let mut b = batch(n, 1_000, value_len);
        b[..8].copy_from_slice(&base_offset.to_be_bytes());
        b
    }

    fn segment(bytes: &[u8]) -> (tempfile::NamedTempFile, File) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        let file = File::open(f.path()).unwrap();
        (f, file)
    }

    fn batch_at_position(s: ScannedBatch) -> (u64, i64) {
        match s {
            ScannedBatch::Batch { position, header } => (position, header.base_offset),
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    #[test]
    fn batches_are_read_in_order() {
        let batches = [batch_at(0, 3, 10), batch_at(3, 1, 500), batch_at(4, 2, 10)];
        let bytes = batches.concat();
        let (tmp, file) = segment(&bytes);
        let mut reader = SegmentBatchReader::new(&file, tmp.path(), 0, bytes.len() as u64);
        let mut position = 0;
        for (b, base) in batches.iter().zip([0, 3, 4]) {
            assert_eq!(batch_at_position(reader.next_batch(true).unwrap()), (position, base));
            assert_eq!(reader.batch_bytes().unwrap(), &b[..]);
            position += b.len() as u64;
            assert_eq!(reader.position(), position);
        }
        assert_eq!(reader.next_batch(true).unwrap(), ScannedBatch::End);
        assert!(reader.batch_bytes().unwrap().is_empty());
        // A header-only walk sees the same batches.
        let mut reader = SegmentBatchReader::new(&file, tmp.path(), 0, bytes.len() as u64);
        let bases: Vec<i64> = std::iter::from_fn(|| match reader.next_header().unwrap() {
            ScannedBatch::Batch { header, .. } => Some(header.base_offset),
            _ => None,
        })
        .collect();
        assert_eq!(bases, [0, 3, 4]);
    }

    #[test]
    fn holes_are_stepped_over() {
        let (a, b) = (batch_at(0, 2, 10), batch_at(7, 1, 10));
        let bytes = [a.clone(), vec![0xee; 100], b.clone()].concat();
        let (tmp, file) = segment(&bytes);
        let end = bytes.len() as u64;
        let hole = (a.len() as u64, a.len() as u64 + 100);
        let mut reader = SegmentBatchReader::new(&file, tmp.path(), 0, end).with_holes(vec![hole]);
        assert_eq!(batch_at_position(reader.next_batch(true).unwrap()), (0, 0));
        assert_eq!(batch_at_position(reader.next_batch(true).unwrap()), (hole.1, 7));
        assert_eq!(reader.next_batch(true).unwrap(), ScannedBatch::End);
        // Starting inside the hole, header-only.
        let mut reader =
            SegmentBatchReader::new(&file, tmp.path(), hole.0 + 5, end).with_holes(vec![hole]);
        assert_eq!(batch_at_position(reader.next_header().unwrap()), (hole.1, 7));
        // Without the hole the damage is reported where it starts.
        let mut reader = SegmentBatchReader::new(&file, tmp.path(), 0, end);
        reader.next_batch(true).unwrap();
        assert!(matches!(reader.next_batch(true).unwrap(),
            ScannedBatch::Invalid { position, .. } if position == hole.0));
        assert_eq!(readable_end(&[hole], 0, end), hole.0);
        assert_eq!(readable_end(&[hole], hole.1, end), end);
    }

    #[test]
    fn a_torn_last_batch_is_invalid_at_its_position() {
        let (a, b) = (batch_at(0, 2, 10), batch_at(2, 2, 10));
        let bytes = [&a[..], &b[..b.len() - 10]].concat();
        let (tmp, file) = segment(&bytes);
        let mut reader = SegmentBatchReader::new(&file, tmp.path(), 0, bytes.len() as u64);
        reader.next_batch(false).unwrap();
        for _ in 0..2 {
            match reader.next_batch(false).unwrap() {
                ScannedBatch::Invalid { position, reason } => {
                    assert_eq!(position, a.len() as u64);
                    assert!(reason.contains("torn"), "{reason}");
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(reader.position(), a.len() as u64, "stays at the torn batch");
        }
        // A torn header.
        let cut = a.len() + 20;
        let mut reader = SegmentBatchReader::new(&file, tmp.path(), 0, cut as u64);
        reader.next_header().unwrap();
        assert!(matches!(reader.next_header().unwrap(),
            ScannedBatch::Invalid { position, reason }
                if position == a.len() as u64 && reason.contains("shorter than a batch header")));
    }

    #[test]
    fn a_header_walk_does_not_read_bodies() {
        let (big, small) = (batch_at(0, 1, 1 << 20), batch_at(1, 1, 10));
        let bytes = [big.clone(), small.clone()].concat();
        let (tmp, file) = segment(&bytes);
        let end = bytes.len() as u64;
        // The range cut short mid-body: torn, judged from the header alone.
        let mut reader = SegmentBatchReader::new(&file, tmp.path(), 0, 100_000);
        assert!(matches!(reader.next_header().unwrap(),
            ScannedBatch::Invalid { position: 0, reason } if reason.contains("torn")));
        // The file itself cut mid-body while the range claims all of it: the
        // header walk passes over the missing body, a whole-batch walk cannot.
        let (tmp, file) = segment(&bytes);
        tmp.as_file().set_len(8 * 1024).unwrap();
        let mut reader = SegmentBatchReader::new(&file, tmp.path(), 0, end);
        assert_eq!(batch_at_position(reader.next_header().unwrap()), (0, 0));
        assert_eq!(reader.position(), big.len() as u64);
        let mut reader = SegmentBatchReader::new(&file, tmp.path(), 0, end);
        assert!(matches!(reader.next_batch(false), Err(crate::StorageError::Io { .. })));
        // On a whole file, the body is read when asked for.
        let (tmp, file) = segment(&bytes);
        let mut reader = SegmentBatchReader::new(&file, tmp.path(), 0, end);
        reader.next_header().unwrap();
        assert_eq!(reader.batch_bytes().unwrap(), &big[..]);
        assert_eq!(batch_at_position(reader.next_header().unwrap()), (big.len() as u64, 1));
        assert_eq!(reader.batch_bytes().unwrap(), &small[..]);
    }

    #[test]
    fn verify_catches_a_flipped_crc_byte() {
        let (a, mut b) = (batch_at(0, 2, 10), batch_at(2, 2, 10));
        let n = b.len();
        b[n - 3] ^= 0x01;
        let bytes = [a.clone(), b].concat();
        let (tmp, file) = segment(&bytes);
        let end = bytes.len() as u64;
        let mut reader = SegmentBatchReader::new(&file, tmp.path(), 0, end);
        reader.next_batch(true).unwrap();
        assert!(matches!(reader.next_batch(true).unwrap(),
            ScannedBatch::Invalid { position, reason }
                if position == a.len() as u64 && reason.contains("CRC")));
        // Without verification (header-only or not) the batch passes.
        let mut reader = SegmentBatchReader::new(&file, tmp.path(), a.len() as u64, end);
        assert_eq!(batch_at_position(reader.next_batch(false).unwrap()), (a.len() as u64, 2));
        let mut reader = SegmentBatchReader::new(&file, tmp.path(), a.len() as u64, end);
        assert_eq!(batch_at_position(reader.next_header().unwrap()), (a.len() as u64, 2));
    }
}
