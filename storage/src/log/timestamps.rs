//! The two timestamp lookups of ListOffsets (Kafka's
//! `UnifiedLog.fetchOffsetByTimestamp`): the earliest record at or after a
//! timestamp ([`PartitionLog::offset_for_timestamp`], through each segment's
//! `.timeindex`) and the record carrying the largest timestamp
//! ([`PartitionLog::max_timestamp_and_offset`]). Both capture segment slices
//! under the log's lock and scan and decode batches after it.

use std::path::Path;

use floe_protocol::kafka_protocol::records::{RecordBatchDecoder, TimestampType as KTimestampType};
use floe_protocol::record_batch::{RecordBatchHeader, TimestampType};

use super::read::SegmentSlice;
use super::PartitionLog;
use crate::batch_reader::ScannedBatch;
use crate::error::{Result, StorageError};
use crate::segment::LogSegment;

/// A record's timestamp and offset (Kafka's `TimestampAndOffset`), as ListOffsets answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampAndOffset {
    /// The record's timestamp (the batch's append time for LogAppendTime).
    pub timestamp: i64,
    /// The record's offset.
    pub offset: i64,
}

impl PartitionLog {
    /// The earliest record whose timestamp is `>= timestamp` (ListOffsets by time); `None` if every record is older.
    /// LogAppendTime batches count every record at the batch's append time.
    ///
    /// # Errors
    /// [`StorageError::Io`]/[`StorageError::Corrupt`] if a segment cannot be read or decoded.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<TimestampAndOffset>> {
        self.check_live()?;
        let (candidates, lso) = {
            let st = self.state();
            let c: Vec<SegmentSlice> = st
                .segments
                .values()
                .filter(|s| s.max_timestamp >= timestamp && s.next_offset > st.log_start_offset)
                .map(|s| {
                    let start_offset = s
                        .time_index
                        .lookup(timestamp)
                        .unwrap_or(s.base_offset)
                        .max(st.log_start_offset);
                    SegmentSlice::of(s, s.offset_index.position_for(start_offset), s.size)
                })
                .collect();
            (c, st.log_start_offset)
        };
        for slice in candidates {
            let mut batches = slice.batches();
            // A batch that cannot be read ends the segment's search.
            while let ScannedBatch::Batch { position, header } = batches.next_header()? {
                if header.max_timestamp >= timestamp && header.last_offset() >= lso {
                    let batch = batches.batch_bytes()?;
                    let found =
                        find_record(&slice.path, position, batch, &header, |offset, ts| {
                            offset >= lso && ts >= timestamp
                        })?;
                    if found.is_some() {
                        return Ok(found);
                    }
                }
            }
        }
        Ok(None)
    }

    /// The largest timestamp in the log and the offset of the first record
    /// carrying it (ListOffsets MAX_TIMESTAMP); `None` for an empty log.
    ///
    /// # Errors
    /// [`StorageError::Io`]/[`StorageError::Corrupt`] if the segment cannot be read.
    pub fn max_timestamp_and_offset(&self) -> Result<Option<TimestampAndOffset>> {
        self.check_live()?;
        let (slice, max_ts, known, lso) = {
            let st = self.state();
            let Some(seg) = st
                .segments
                .values()
                .filter(|s| !s.is_empty() && s.next_offset > st.log_start_offset)
                .fold(None::<&LogSegment>, |best, s| match best {
                    Some(b) if b.max_timestamp >= s.max_timestamp => Some(b),
                    _ => Some(s),
                })
            else {
                return Ok(None);
            };
            (
                SegmentSlice::of(seg, 0, seg.size),
                seg.max_timestamp,
                seg.offset_of_max_timestamp,
                st.log_start_offset,
            )
        };
        let mut batches = slice.batches();
        // A batch that cannot be read ends the search.
        while let ScannedBatch::Batch { position, header } = batches.next_header()? {
            let candidate =
                known.map_or(header.max_timestamp == max_ts, |base| header.base_offset == base);
            if candidate && header.last_offset() >= lso {
                let batch = batches.batch_bytes()?;
                if let Some(found) = find_record(&slice.path, position, batch, &header, |o, ts| {
                    o >= lso && ts >= max_ts
                })? {
                    return Ok(Some(found));
                }
            }
        }
        Ok(None)
    }
}

/// Decodes `batch` (the whole batch at `position` of `path`, as
/// [`SegmentBatchReader::batch_bytes`](crate::SegmentBatchReader::batch_bytes) gives it) and returns the first record
/// (offset, timestamp) accepted by `want`. LogAppendTime records all carry the
/// batch's max timestamp.
fn find_record(
    path: &Path,
    position: u64,
    batch: &[u8],
    header: &RecordBatchHeader,
    want: impl Fn(i64, i64) -> bool,
) -> Result<Option<TimestampAndOffset>> {
    let mut bytes = bytes::Bytes::copy_from_slice(batch);
    let set = RecordBatchDecoder::decode(&mut bytes).map_err(|e| StorageError::Corrupt {
        path: path.to_path_buf(),
        reason: format!("batch at {position}: {e}"),
    })?;
    let log_append = header.timestamp_type() == TimestampType::LogAppendTime;
    Ok(set.records.iter().find_map(|r| {
        let ts = if log_append || r.timestamp_type == KTimestampType::LogAppend {
            header.max_timestamp
        } else {
            r.timestamp
        };
        want(r.offset, ts).then_some(TimestampAndOffset { timestamp: ts, offset: r.offset })
    }))
}

#[cfg(test)]
mod tests {
    use super::TimestampAndOffset;
    use crate::log::test_helpers::open;
    use crate::log::PartitionLog;
    use crate::test_util::{batch_ts, config};

    #[test]
    fn offset_for_timestamp_and_max() {
        let dir = tempfile::tempdir().unwrap();
        let log =
            open(dir.path(), config(&[("segment.bytes", "600"), ("index.interval.bytes", "100")]));
        let mut expected = Vec::new();
        let mut offset = 0;
        for i in 0..20i64 {
            // Out of order inside a batch: 3 records, ts base+20, base+0, base+10.
            let base = 1_000 + i * 100;
            let ts = [base + 20, base, base + 10];
            log.append(&mut batch_ts(&ts, 40), 0).unwrap();
            for t in ts {
                expected.push((offset, t));
                offset += 1;
            }
        }
        assert!(log.segment_count() > 2);
        for target in [0, 1_000, 1_005, 1_015, 1_020, 1_021, 1_500, 2_910, 2_920] {
            let want = expected
                .iter()
                .find(|&&(_, t)| t >= target)
                .map(|&(offset, timestamp)| TimestampAndOffset { timestamp, offset });
            assert_eq!(log.offset_for_timestamp(target).unwrap(), want, "target {target}");
        }
        assert_eq!(log.offset_for_timestamp(2_921).unwrap(), None);
        assert_eq!(
            log.max_timestamp_and_offset().unwrap(),
            Some(TimestampAndOffset { timestamp: 2_920, offset: 57 })
        );
        drop(log);
        // Reopened with everything trusted: the max is found by a scan.
        let log = PartitionLog::open(
            dir.path(),
            "t",
            0,
            config(&[("segment.bytes", "600")]),
            Some(60),
            None,
        )
        .unwrap();
        assert_eq!(
            log.max_timestamp_and_offset().unwrap(),
            Some(TimestampAndOffset { timestamp: 2_920, offset: 57 })
        );
        assert_eq!(
            log.offset_for_timestamp(1_505).unwrap(),
            Some(TimestampAndOffset { timestamp: 1_520, offset: 15 })
        );
    }
}
