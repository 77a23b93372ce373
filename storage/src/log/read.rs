//! Reads (Kafka's `LocalLog.read`): the fetch path's [`PartitionLog::read`]
//! and a follower's [`PartitionLog::read_for_replica`], answered with a
//! [`FetchDataInfo`] whose region is a descriptor of segment bytes (file,
//! position, length), never the bytes themselves.
//!
//! A read has two steps. [`ReadPlan`], under the log's lock: the fetch offset
//! is checked, the offsets the answer carries are taken, and so is the slice
//! of the segment holding the offset that the read may return (up to the high
//! watermark's position, or the segment's end for a follower). Then, without
//! the lock: the slice's batch headers are scanned for the batch that holds
//! the offset and, for READ_COMMITTED, for the batch where the last stable
//! offset begins. Segments are append-only, so the bytes below a captured
//! size do not change under the scan.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use floe_protocol::FileRegion;

use super::PartitionLog;
use crate::batch_reader::{readable_end, ScannedBatch, SegmentBatchReader};
use crate::error::{Result, StorageError};
use crate::segment::LogSegment;
use crate::transaction::{AbortedTxn, IsolationLevel};

/// What a read found (Kafka's `FetchDataInfo` plus the partition's offsets).
#[derive(Debug, Clone)]
pub struct FetchDataInfo {
    /// Bytes of the segment file to send; `None` when there is nothing to return.
    pub region: Option<FileRegion>,
    /// The high watermark at the time of the read.
    pub high_watermark: i64,
    /// The log start offset at the time of the read.
    pub log_start_offset: i64,
    /// The last stable offset: below it every transaction is complete.
    pub last_stable_offset: i64,
    /// READ_COMMITTED: the aborted transactions overlapping the fetched
    /// range (Kafka's `abortedTransactions`), possibly empty; `None` for READ_UNCOMMITTED.
    pub aborted_transactions: Option<Vec<AbortedTxn>>,
}

/// A byte range of one segment's `.log`, captured under the log's lock and
/// scanned after it: the file stays readable even if the segment is deleted
/// meanwhile (the scan holds the `Arc<File>`).
#[derive(Debug, Clone)]
pub(super) struct SegmentSlice {
    /// The segment's `.log`.
    pub(super) file: Arc<File>,
    /// Its path, for errors.
    pub(super) path: Arc<Path>,
    /// Where the scan starts: a batch boundary (an offset index entry, or 0).
    pub(super) start: u64,
    /// Where it stops: the segment's size when captured, or the high watermark's position in it.
    pub(super) end: u64,
    /// The damaged ranges recovery found in the segment; the scan steps over them.
    pub(super) holes: Vec<(u64, u64)>,
}

impl SegmentSlice {
    /// The bytes `[start, end)` of `seg`.
    pub(super) fn of(seg: &LogSegment, start: u64, end: u64) -> Self {
        Self { file: seg.log.clone(), path: seg.log_path.clone(), start, end, holes: seg.holes() }
    }

    /// The batch headers of the slice, damaged ranges stepped over.
    pub(super) fn batches(&self) -> SegmentBatchReader<'_> {
        self.batches_from(self.start)
    }

    /// The batch headers from `start` (a batch boundary) to the slice's end.
    fn batches_from(&self, start: u64) -> SegmentBatchReader<'_> {
        SegmentBatchReader::new(&self.file, &self.path, start, self.end)
            .with_holes(self.holes.clone())
    }
}

/// A read's first step, taken under the log's lock (as a `FlushPlan` is for a
/// flush); its scan runs without the lock.
#[derive(Debug)]
struct ReadPlan {
    /// The answer's offsets as the lock saw them and, for READ_COMMITTED, the
    /// aborted transactions; its region is set by the scan.
    info: FetchDataInfo,
    /// The bytes the read may return: from the offset index's entry at or
    /// below the fetch offset to the read's limit in the segment holding it.
    /// `None` when the answer is empty (the fetch offset is at or past what
    /// this read may see).
    slice: Option<SegmentSlice>,
    /// READ_COMMITTED with the last stable offset inside this segment and below
    /// the high watermark: where to look for the batch starting at it (the
    /// offset index's position for it), and the last stable offset. The region
    /// stops at that batch.
    lso_scan_from: Option<(u64, i64)>,
}

impl ReadPlan {
    /// A plan that returns no bytes.
    fn empty(info: FetchDataInfo) -> Self {
        Self { info, slice: None, lso_scan_from: None }
    }
}

impl PartitionLog {
    /// Reads from `fetch_offset`: a region of the segment holding it, starting
    /// at the batch that contains it, of at most `max_bytes` (but the whole
    /// first batch if `min_one_batch`, KIP-74), never past the high watermark
    /// and never into the next segment.
    ///
    /// Like Kafka, the region is cut at `max_bytes` even mid-batch: clients
    /// drop a partial trailing batch, and not locating the last whole batch
    /// saves a header scan. Without `min_one_batch`, a first batch larger than
    /// `max_bytes` yields no region.
    ///
    /// At [`IsolationLevel::ReadCommitted`] the region also stops at the last
    /// stable offset (at the batch that starts there), and
    /// [`FetchDataInfo::aborted_transactions`] lists every aborted transaction
    /// whose marker is at or after `fetch_offset` and that started below the
    /// end of the region (Kafka's `collectAbortedTransactions` over the
    /// `.txnindex` of this and later segments; a superset is harmless).
    /// Records are not filtered: consumers drop the aborted ones.
    ///
    /// # Errors
    /// [`StorageError::OffsetOutOfRange`] outside `[log_start_offset, log_end_offset]`;
    /// [`StorageError::BelowLocalStart`] for a shared-storage topic's offset in
    /// `[log_start_offset, local_log_start_offset)`, held by the table only;
    /// [`StorageError::Io`]/[`StorageError::Corrupt`] if the segment cannot be read.
    pub fn read(
        &self,
        fetch_offset: i64,
        max_bytes: u32,
        min_one_batch: bool,
        isolation: IsolationLevel,
    ) -> Result<FetchDataInfo> {
        self.read_bounded(fetch_offset, max_bytes, min_one_batch, isolation, false)
    }

    /// [`PartitionLog::read`] for a follower replica's fetch (Kafka's
    /// `FetchIsolation.LOG_END`): up to the log end offset, past the high
    /// watermark, since the high watermark moves only once followers have fetched
    /// what lies above it.
    ///
    /// # Errors
    /// As [`PartitionLog::read`].
    pub fn read_for_replica(
        &self,
        fetch_offset: i64,
        max_bytes: u32,
        min_one_batch: bool,
    ) -> Result<FetchDataInfo> {
        self.read_bounded(
            fetch_offset,
            max_bytes,
            min_one_batch,
            IsolationLevel::ReadUncommitted,
            true,
        )
    }

    /// [`PartitionLog::read`] up to the high watermark (or the last stable
    /// offset), or with `to_log_end` up to the log end offset: plans the read
    /// under the lock, then finds its region without it.
    fn read_bounded(
        &self,
        fetch_offset: i64,
        max_bytes: u32,
        min_one_batch: bool,
        isolation: IsolationLevel,
        to_log_end: bool,
    ) -> Result<FetchDataInfo> {
        self.check_live()?;
        let ReadPlan { mut info, slice, lso_scan_from } =
            self.plan_read(fetch_offset, isolation, to_log_end)?;
        if let Some(slice) = slice {
            info.region = region(slice, fetch_offset, max_bytes, min_one_batch, lso_scan_from)?;
        }
        Ok(info)
    }

    /// A read's first step, under the lock: checks `fetch_offset` against the
    /// log's offsets and captures the answer's offsets, the aborted
    /// transactions (READ_COMMITTED) and the slice of the segment holding
    /// `fetch_offset` that this read may return.
    fn plan_read(
        &self,
        fetch_offset: i64,
        isolation: IsolationLevel,
        to_log_end: bool,
    ) -> Result<ReadPlan> {
        let committed = isolation == IsolationLevel::ReadCommitted;
        let st = self.state();
        let (hw, log_start) = (st.high_watermark, st.log_start_offset);
        // As Kafka: out of range only past the log end offset; between
        // the high watermark and it the answer is just empty.
        if fetch_offset < log_start || fetch_offset > st.log_end_offset {
            return Err(StorageError::OffsetOutOfRange {
                requested: fetch_offset,
                log_start,
                log_end: st.log_end_offset,
            });
        }
        // Shared storage: offsets below the first local segment are the
        // table's; the caller reads them there. Checked under the same
        // lock as the segments, so a race with local retention ends here
        // too, never in a read of a deleted range.
        let local_start = st.local_log_start_offset();
        if fetch_offset < local_start && st.config.is_shared_storage() {
            return Err(StorageError::BelowLocalStart { local_start });
        }
        let last_stable = st.last_stable_offset();
        let mut info = FetchDataInfo {
            region: None,
            high_watermark: hw,
            log_start_offset: log_start,
            last_stable_offset: last_stable,
            aborted_transactions: committed.then(Vec::new),
        };
        let limit = if to_log_end {
            st.log_end_offset
        } else if committed {
            last_stable
        } else {
            hw
        };
        if fetch_offset >= limit {
            return Ok(ReadPlan::empty(info));
        }
        let Some(seg) = st.segment_for(fetch_offset) else {
            return Ok(ReadPlan::empty(info));
        };
        let end = if to_log_end {
            Some(seg.size)
        } else {
            st.high_watermark_end(seg.base_offset, seg.size)
        };
        let Some(end) = end else {
            return Ok(ReadPlan::empty(info));
        };
        // Where to look for the batch starting at the LSO, if it lies in this segment below the high watermark.
        let lso_scan_from = (committed && last_stable < hw && last_stable < seg.next_offset)
            .then(|| seg.offset_index.position_for(last_stable));
        if let Some(aborted) = info.aborted_transactions.as_mut() {
            let upper_bound = last_stable.min(seg.next_offset);
            for s in st.segments.range(seg.base_offset..).map(|(_, s)| s) {
                if s.txn_index.collect(fetch_offset, upper_bound, aborted) {
                    break;
                }
            }
        }
        Ok(ReadPlan {
            info,
            slice: Some(SegmentSlice::of(seg, seg.offset_index.position_for(fetch_offset), end)),
            lso_scan_from: lso_scan_from.map(|p| (p, last_stable)),
        })
    }
}

/// A read's second step, without the lock: the region of `slice` to send,
/// from the batch holding `fetch_offset`, or `None` when there is nothing to
/// send (no such batch, or a first batch above `max_bytes` without `min_one_batch`).
fn region(
    slice: SegmentSlice,
    fetch_offset: i64,
    max_bytes: u32,
    min_one_batch: bool,
    lso_scan_from: Option<(u64, i64)>,
) -> Result<Option<FileRegion>> {
    let Some((position, size)) = batch_holding(&slice, fetch_offset)? else {
        return Ok(None);
    };
    let end = match lso_scan_from {
        Some((from, lso)) => batch_start_at_or_after(&slice, from.max(position), lso)?,
        None => slice.end,
    };
    let available = readable_end(&slice.holes, position, end).saturating_sub(position);
    if available == 0 {
        return Ok(None);
    }
    let len = if size > u64::from(max_bytes) {
        if !min_one_batch {
            return Ok(None);
        }
        size.min(available)
    } else {
        u64::from(max_bytes).min(available)
    };
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    Ok(Some(FileRegion { file: slice.file, position, len }))
}

/// The position and size of the first batch of `slice` whose last offset is
/// at least `fetch_offset`; `None` if the slice ends first.
///
/// Headers only, from the offset index's position: damaged ranges are
/// stepped over (consumers see an offset gap); a batch that cannot be
/// read is corruption, never served.
fn batch_holding(slice: &SegmentSlice, fetch_offset: i64) -> Result<Option<(u64, u64)>> {
    let mut batches = slice.batches();
    loop {
        match batches.next_header()? {
            ScannedBatch::Batch { position, header } if header.last_offset() >= fetch_offset => {
                return Ok(Some((position, header.total_size() as u64)))
            }
            ScannedBatch::Batch { .. } => {}
            ScannedBatch::End => return Ok(None),
            ScannedBatch::Invalid { position, reason } => {
                return Err(StorageError::Corrupt {
                    path: slice.path.to_path_buf(),
                    reason: format!("batch at {position}: {reason}"),
                })
            }
        }
    }
}

/// The position of the first batch of `slice` at or after `from` whose base
/// offset is at least `offset` (a batch boundary), or the slice's end if there
/// is none before it.
fn batch_start_at_or_after(slice: &SegmentSlice, from: u64, offset: i64) -> Result<u64> {
    let mut batches = slice.batches_from(from);
    loop {
        match batches.next_header()? {
            ScannedBatch::Batch { position, header } if header.base_offset >= offset => {
                return Ok(position)
            }
            ScannedBatch::Batch { .. } => {}
            ScannedBatch::End => return Ok(slice.end),
            // The region stops before what cannot be read.
            ScannedBatch::Invalid { position, .. } => return Ok(position),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::error::StorageError;
    use crate::log::test_helpers::{open, read_all};
    use crate::test_util::{batch, config, decode};

    #[test]
    fn append_and_read_across_rolls() {
        let dir = tempfile::tempdir().unwrap();
        let log =
            open(dir.path(), config(&[("segment.bytes", "2000"), ("index.interval.bytes", "200")]));
        for i in 0..50 {
            let mut b = batch(3, 1_000 + i, 100);
            let info = log.append(&mut b, 5_000).unwrap();
            assert_eq!(
                (info.first_offset, info.last_offset, info.record_count),
                (i * 3, i * 3 + 2, 3)
            );
            assert_eq!(info.log_append_time, -1);
        }
        assert_eq!(log.log_end_offset(), 150);
        assert_eq!(log.high_watermark(), 150);
        assert!(log.segment_count() > 3, "rolled into {} segments", log.segment_count());
        let sealed = log.sealed_segments();
        assert_eq!(sealed.len(), log.segment_count() - 1);
        for w in sealed.windows(2) {
            assert_eq!(w[0].next_offset, w[1].base_offset);
            assert!(w[0].size_bytes <= 2000);
        }
        for offset in 0..150 {
            let got = read_all(&log, offset);
            assert!(!got.is_empty(), "offset {offset}");
            // Starts at the batch holding the offset, offsets contiguous, one segment only.
            assert_eq!(got[0].0, offset - offset % 3, "offset {offset}");
            assert!(got.windows(2).all(|w| w[1].0 == w[0].0 + 1));
            let seg_end = sealed
                .iter()
                .find(|s| s.base_offset <= offset && offset < s.next_offset)
                .map_or(150, |s| s.next_offset);
            assert_eq!(got.last().unwrap().0, seg_end - 1, "offset {offset}");
        }
        assert!(log
            .read(150, 1000, true, crate::IsolationLevel::ReadUncommitted)
            .unwrap()
            .region
            .is_none());
        assert!(matches!(
            log.read(151, 1000, true, crate::IsolationLevel::ReadUncommitted),
            Err(StorageError::OffsetOutOfRange { requested: 151, log_start: 0, log_end: 150 })
        ));
        assert!(matches!(
            log.read(-1, 1000, true, crate::IsolationLevel::ReadUncommitted),
            Err(StorageError::OffsetOutOfRange { .. })
        ));
    }

    #[test]
    fn index_lookup_finds_batch_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), config(&[("index.interval.bytes", "300")]));
        let mut positions = Vec::new();
        let mut pos = 0u64;
        for i in 0..40 {
            let mut b = batch(2, 10 + i, 80);
            positions.push((i * 2, pos));
            pos += b.len() as u64;
            log.append(&mut b, 0).unwrap();
        }
        let st = log.state();
        let seg = st.active();
        assert!(seg.offset_index.len() >= 10, "{} entries", seg.offset_index.len());
        for offset in 0..80 {
            let (entry_offset, entry_pos) = seg.offset_index.lookup(offset).unwrap_or((0, 0));
            assert!(entry_offset <= offset);
            assert!(
                positions.contains(&(entry_offset, entry_pos)),
                "entry ({entry_offset}, {entry_pos}) is not a batch start"
            );
            // Sparse: the entry is within about one interval of the target batch.
            let target_pos = positions[(offset / 2) as usize].1;
            assert!(
                target_pos - entry_pos <= 300 + 200,
                "offset {offset}: entry at {entry_pos}, batch at {target_pos}"
            );
        }
    }

    #[test]
    fn max_bytes_and_min_one_batch() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), config(&[]));
        let mut big = batch(5, 1, 500);
        let big_len = big.len() as u32;
        log.append(&mut big, 0).unwrap();
        let mut small = batch(1, 2, 10);
        let small_len = small.len() as u32;
        log.append(&mut small, 0).unwrap();

        let r =
            log.read(0, 100, true, crate::IsolationLevel::ReadUncommitted).unwrap().region.unwrap();
        assert_eq!((r.position, r.len), (0, big_len), "KIP-74: the whole first batch");
        assert!(log
            .read(0, 100, false, crate::IsolationLevel::ReadUncommitted)
            .unwrap()
            .region
            .is_none());
        let r = log
            .read(0, big_len + 5, true, crate::IsolationLevel::ReadUncommitted)
            .unwrap()
            .region
            .unwrap();
        assert_eq!(r.len, big_len + 5, "cut mid second batch, as Kafka");
        assert_eq!(decode(&r.read_to_vec().unwrap()).len(), 5);
        let r = log
            .read(3, 1 << 20, false, crate::IsolationLevel::ReadUncommitted)
            .unwrap()
            .region
            .unwrap();
        assert_eq!(
            (r.position, r.len),
            (0, big_len + small_len),
            "starts at the batch holding offset 3"
        );
        let r = log
            .read(5, 1 << 20, false, crate::IsolationLevel::ReadUncommitted)
            .unwrap()
            .region
            .unwrap();
        assert_eq!((r.position, r.len), (u64::from(big_len), small_len));
    }
}
