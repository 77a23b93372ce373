//! Verification of segment files: every batch's header sanity and CRC-32C,
//! and resynchronisation past a damaged byte range to the next valid batch.
//!
//! Recovery uses [`find_next_valid_batch`] to tell a torn tail (nothing valid
//! after the damage) from damage in the middle of a log (valid batches
//! follow: bit rot, never a crash); `floe verify` uses [`verify_data_dir`] to
//! check every segment of a data directory, read-only.

use std::fmt;
use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use floe_protocol::record_batch::{verify_crc, RecordBatchHeader, RECORD_BATCH_OVERHEAD};

use crate::batch_reader::{ScannedBatch, SegmentBatchReader};
use crate::error::{IoContext, Result};
use crate::file_names::{parse_partition_dir_name, parse_segment_file_name, SegmentFileKind};

/// A damaged byte range of a segment: no valid batch starts inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptRange {
    /// The segment's `.log` file.
    pub segment: PathBuf,
    /// First damaged byte.
    pub position: u64,
    /// Byte after the damage: where the next valid batch starts, or the segment end.
    pub end_position: u64,
    /// First offset the damage hides (the offset expected at `position`).
    pub first_offset: i64,
    /// Last offset it hides: the next valid batch's base offset minus one;
    /// `None` when no valid batch follows in the segment (to the segment's end).
    pub last_offset: Option<i64>,
    /// What was wrong with the bytes at `position`.
    pub reason: String,
}

impl fmt::Display for CorruptRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.last_offset {
            Some(last) => write!(f, "offsets {}..={}", self.first_offset, last)?,
            None => write!(f, "offsets {}.. (to the segment end)", self.first_offset)?,
        }
        write!(
            f,
            " in {} bytes {}..{}: {}",
            self.segment.display(),
            self.position,
            self.end_position,
            self.reason
        )
    }
}

/// What [`verify_segment`] found in one `.log` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentReport {
    /// The `.log` file.
    pub path: PathBuf,
    /// Its base offset (from the name).
    pub base_offset: i64,
    /// Its size in bytes.
    pub size: u64,
    /// Valid batches.
    pub batches: u64,
    /// Records in the valid batches.
    pub records: u64,
    /// Offset after the last valid batch.
    pub next_offset: i64,
    /// Damaged ranges, in file order.
    pub corrupt: Vec<CorruptRange>,
}

/// One partition directory's segments, as [`verify_data_dir`] reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionReport {
    /// The directory name, `<topic>-<partition>`.
    pub name: String,
    /// Every segment, by base offset.
    pub segments: Vec<SegmentReport>,
}

/// Finds the first position in `[from, end)` where a whole batch with a valid
/// CRC starts whose base offset lies in `[min_offset, max_offset]`.
///
/// The offset bounds are what make a match trustworthy: random bytes rarely
/// pass the header checks, and almost never the CRC as well.
///
/// # Errors
/// [`crate::StorageError::Io`] if the file cannot be read.
pub(crate) fn find_next_valid_batch(
    file: &File,
    path: &Path,
    from: u64,
    end: u64,
    min_offset: i64,
    max_offset: i64,
) -> Result<Option<(u64, RecordBatchHeader)>> {
    const WINDOW: u64 = 1 << 20;
    let mut window_start = from;
    let mut buf = Vec::new();
    while window_start + RECORD_BATCH_OVERHEAD as u64 <= end {
        // Headers starting in [window_start, window_start + WINDOW) must fit the buffer whole.
        let len = (WINDOW + RECORD_BATCH_OVERHEAD as u64).min(end - window_start) as usize;
        buf.resize(len, 0);
        file.read_exact_at(&mut buf, window_start).ctx("read segment", path)?;
        let last_start = len - RECORD_BATCH_OVERHEAD;
        for at in 0..=last_start {
            let Ok(header) = RecordBatchHeader::parse(&buf[at..at + RECORD_BATCH_OVERHEAD]) else {
                continue;
            };
            let position = window_start + at as u64;
            let size = header.total_size() as u64;
            if header.check_sanity_in_log(0).is_err()
                || header.base_offset < min_offset
                || header.last_offset() > max_offset
                || position + size > end
            {
                continue;
            }
            let mut batch = vec![0u8; size as usize];
            file.read_exact_at(&mut batch, position).ctx("read segment", path)?;
            if verify_crc(&batch, 0).is_ok() {
                return Ok(Some((position, header)));
            }
        }
        window_start += last_start as u64 + 1;
    }
    Ok(None)
}

/// Checks every batch of the `.log` at `path` (base offset `base_offset`),
/// resynchronising past damage. `next_base_offset` (the next segment's base
/// offset, if any) bounds the offsets a valid batch may hold.
///
/// # Errors
/// [`crate::StorageError::Io`] if the file cannot be read.
pub fn verify_segment(
    path: &Path,
    base_offset: i64,
    next_base_offset: Option<i64>,
) -> Result<SegmentReport> {
    let file = File::open(path).ctx("open segment", path)?;
    let size = file.metadata().ctx("stat segment", path)?.len();
    let max_offset = next_base_offset
        .map_or(base_offset + i64::from(u32::MAX), |n| n - 1)
        .min(base_offset + i64::from(u32::MAX));
    let mut report = SegmentReport {
        path: path.to_path_buf(),
        base_offset,
        size,
        batches: 0,
        records: 0,
        next_offset: base_offset,
        corrupt: Vec::new(),
    };
    let mut start = 0;
    'segment: loop {
        let mut scanner = SegmentBatchReader::new(&file, path, start, size);
        let (position, reason) = loop {
            match scanner.next_batch(true)? {
                ScannedBatch::End => break 'segment,
                ScannedBatch::Invalid { position, reason } => break (position, reason),
                ScannedBatch::Batch { position, header } => {
                    if header.base_offset < report.next_offset || header.last_offset() > max_offset
                    {
                        let reason = format!(
                            "base offset {} is outside the expected {}..={max_offset}",
                            header.base_offset, report.next_offset
                        );
                        break (position, reason);
                    }
                    report.batches += 1;
                    report.records += u64::try_from(header.records_count).unwrap_or(0);
                    report.next_offset = header.next_offset();
                }
            }
        };
        let next =
            find_next_valid_batch(&file, path, position + 1, size, report.next_offset, max_offset)?;
        report.corrupt.push(CorruptRange {
            segment: path.to_path_buf(),
            position,
            end_position: next.as_ref().map_or(size, |(p, _)| *p),
            first_offset: report.next_offset,
            last_offset: next.as_ref().map(|(_, h)| h.base_offset - 1),
            reason,
        });
        match next {
            Some((p, _)) => start = p,
            None => break,
        }
    }
    Ok(report)
}

/// Verifies every segment of one partition directory, by base offset.
///
/// # Errors
/// [`crate::StorageError::Io`] if the directory or a segment cannot be read.
pub fn verify_partition_dir(dir: &Path) -> Result<Vec<SegmentReport>> {
    let mut bases = Vec::new();
    for entry in fs::read_dir(dir).ctx("list partition directory", dir)? {
        let entry = entry.ctx("list partition directory", dir)?;
        if let Some((base, SegmentFileKind::Log)) =
            entry.file_name().to_str().and_then(parse_segment_file_name)
        {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    let mut reports = Vec::with_capacity(bases.len());
    for (i, &base) in bases.iter().enumerate() {
        let path = crate::file_names::log_file(dir, base);
        reports.push(verify_segment(&path, base, bases.get(i + 1).copied())?);
    }
    Ok(reports)
}

/// Verifies every partition directory (`<topic>-<partition>`) of a data directory, by name.
///
/// # Errors
/// [`crate::StorageError::Io`] if a directory or segment cannot be read.
pub fn verify_data_dir(data_dir: &Path) -> Result<Vec<PartitionReport>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(data_dir).ctx("list data directory", data_dir)? {
        let entry = entry.ctx("list data directory", data_dir)?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if entry.path().is_dir() && parse_partition_dir_name(&name).is_some() {
            names.push(name);
        }
    }
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let segments = verify_partition_dir(&data_dir.join(&name))?;
            Ok(PartitionReport { name, segments })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::PartitionLog;
    use crate::test_util::{batch_ts, config};

    /// 30 batches of 2 records in segments of ~1000 bytes; returns the segment paths.
    fn write_log(dir: &Path) -> Vec<PathBuf> {
        let cfg = config(&[("segment.bytes", "1000"), ("index.interval.bytes", "100")]);
        let log = PartitionLog::open(dir, "t", 0, cfg, None, None).unwrap();
        for i in 0..30i64 {
            log.append(&mut batch_ts(&[100 + 2 * i, 101 + 2 * i], 20), 0).unwrap();
        }
        log.close().unwrap();
        let mut logs: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        logs.sort();
        logs
    }

    #[test]
    fn a_clean_log_verifies() {
        let dir = tempfile::tempdir().unwrap();
        write_log(dir.path());
        let reports = verify_partition_dir(dir.path()).unwrap();
        assert!(reports.len() >= 3);
        assert!(reports.iter().all(|r| r.corrupt.is_empty()));
        assert_eq!(reports.iter().map(|r| r.records).sum::<u64>(), 60);
        assert_eq!(reports.last().unwrap().next_offset, 60);
    }

    #[test]
    fn a_flipped_byte_is_one_batch_and_the_rest_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let logs = write_log(dir.path());
        let mut bytes = fs::read(&logs[0]).unwrap();
        let second = floe_protocol::record_batch::BatchIter::new(&bytes).nth(1).unwrap().unwrap();
        let (pos, end) = (second.position, second.end());
        bytes[pos + 70] ^= 0x01; // in the records: CRC mismatch
        fs::write(&logs[0], &bytes).unwrap();
        let reports = verify_partition_dir(dir.path()).unwrap();
        let bad = &reports[0].corrupt;
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!((bad[0].position, bad[0].end_position), (pos as u64, end as u64));
        assert_eq!((bad[0].first_offset, bad[0].last_offset), (2, Some(3)));
        assert_eq!(reports.iter().map(|r| r.records).sum::<u64>(), 58);
        assert!(reports[1..].iter().all(|r| r.corrupt.is_empty()));
    }

    #[test]
    fn a_smashed_length_field_resynchronises_at_the_next_batch() {
        let dir = tempfile::tempdir().unwrap();
        let logs = write_log(dir.path());
        let mut bytes = fs::read(&logs[0]).unwrap();
        let batches: Vec<_> =
            floe_protocol::record_batch::BatchIter::new(&bytes).map(|b| b.unwrap()).collect();
        let (pos, next) = (batches[2].position, batches[3].position);
        bytes[pos + 8..pos + 12].copy_from_slice(&0x7fff_0000i32.to_be_bytes());
        fs::write(&logs[0], &bytes).unwrap();
        let report = verify_segment(&logs[0], 0, None).unwrap();
        assert_eq!(report.corrupt.len(), 1);
        let c = &report.corrupt[0];
        assert_eq!((c.position, c.end_position), (pos as u64, next as u64));
        assert_eq!((c.first_offset, c.last_offset), (4, Some(5)));
        assert!(c.to_string().contains("offsets 4..=5"), "{c}");
    }

    #[test]
    fn zeroed_tail_runs_to_the_segment_end() {
        let dir = tempfile::tempdir().unwrap();
        let logs = write_log(dir.path());
        let mut bytes = fs::read(&logs[0]).unwrap();
        let n = bytes.len();
        bytes[n - 150..].fill(0);
        fs::write(&logs[0], &bytes).unwrap();
        let report = verify_segment(&logs[0], 0, Some(1000)).unwrap();
        assert_eq!(report.corrupt.len(), 1);
        assert_eq!(report.corrupt[0].last_offset, None);
        assert_eq!(report.corrupt[0].end_position, n as u64);
    }
}
