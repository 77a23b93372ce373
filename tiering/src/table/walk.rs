//! Walking one partition's sealed segments for a pass ([`TopicTable::prepare`]): from
//! the table's committed offset (or the log start, if above it), batch by batch, into
//! the table's Arrow converter and, for a shared table, its `__log` converter; full
//! converters are written to the pass's sinks.
//!
//! What cannot become rows is reported ([`SkippedBatch`]) and still covered: a damaged
//! range recovery kept, an unreadable segment tail, a batch whose CRC does not match, a
//! batch that cannot be decoded. Aborted transactions' batches and markers become no
//! rows (a shared table's `__log` keeps all of them). Reading stops at `stop` (on a
//! batch boundary) or at the pass's bytes per partition (at least one segment is read).

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use floe_protocol::record_batch::{verify_crc, RecordBatchHeader};
use floe_storage::{PartitionLog, ScannedBatch, SegmentBatchReader, SegmentInfo};
use tracing::{error, warn};

use super::plan::Pass;
use super::{SkippedBatch, TierLimits, TopicTable};
use crate::convert::{ArrowConverter, LogBatch, Pushed, RowLayout};
use crate::error::Result;
use crate::sink::Sink;

/// One partition's walk in a pass: where it starts, its converters, how far it covered.
struct PartitionWalk {
    partition: i32,
    /// The first offset to tier: the table's committed next offset, or the log start.
    from: i64,
    /// The table's rows.
    conv: ArrowConverter,
    /// A shared table's `__log` rows, and the offset they start from.
    log_conv: Option<(ArrowConverter, i64)>,
    /// The last offset covered so far (by rows, by batches that make none, by skipped ranges).
    last_covered: Option<i64>,
}

impl PartitionWalk {
    /// A skipped range `[first, last]`, as a hole in a shared table's `__log` rows.
    fn log_hole(&mut self, first: i64, last: i64) {
        if let Some((lc, log_from)) = self.log_conv.as_mut() {
            if last >= *log_from {
                lc.push_hole(first.max(*log_from), last);
            }
        }
    }

    /// A batch (up to `last`) that cannot become rows, as stored in a shared table's `__log`.
    fn log_opaque(&mut self, header: &RecordBatchHeader, bytes: &[u8], last: i64) {
        if let Some((lc, log_from)) = self.log_conv.as_mut() {
            if last >= *log_from {
                lc.push_opaque(header, bytes);
            }
        }
    }
}

impl TopicTable {
    /// Walks `log`'s sealed segments beyond the table's committed offset for `pass` (at
    /// most `limits.max_bytes_per_partition`, at least one segment), writes what was
    /// converted, and records the range covered in the pass's outcome.
    pub(super) async fn walk_partition(
        &self,
        pass: &mut Pass,
        log: &PartitionLog,
        limits: &TierLimits,
        stop: &AtomicBool,
    ) -> Result<()> {
        let p = log.partition();
        let committed = pass.next.get(&p).copied().unwrap_or(0);
        let log_start = log.log_start_offset();
        let from = committed.max(log_start);
        if committed < log_start && committed > 0 {
            warn!(table = %self.ident, partition = p, committed, log_start,
                "offsets below the log start were deleted before they were tiered");
        }
        let conv = ArrowConverter::with_layout(
            p,
            limits.arrow_batch_rows,
            limits.arrow_batch_bytes,
            pass.layout,
        );
        // `__log` rows from where both tables stand: below the log table's own
        // offsets they were committed by a pass whose main commit did not follow.
        let log_conv = pass.log_side.as_ref().map(|l| {
            let from = from.max(l.next.get(&p).copied().unwrap_or(0));
            (
                ArrowConverter::with_layout(
                    p,
                    limits.arrow_batch_rows,
                    limits.arrow_batch_bytes,
                    RowLayout::Log,
                ),
                from,
            )
        });
        let mut walk = PartitionWalk { partition: p, from, conv, log_conv, last_covered: None };
        let mut read = 0u64;
        for seg in log.sealed_segments().into_iter().filter(|s| s.next_offset > from) {
            if pass.stopped || (read > 0 && read + seg.size_bytes > limits.max_bytes_per_partition)
            {
                break;
            }
            read += seg.size_bytes;
            self.walk_segment(pass, &mut walk, &seg, stop).await?;
            if !pass.stopped {
                // Whatever the batches covered, the segment's offsets are tiered up to its end.
                walk.last_covered =
                    Some(walk.last_covered.unwrap_or(seg.next_offset - 1).max(seg.next_offset - 1));
            }
        }
        self.write(&mut pass.sink, &mut walk.conv, p).await?;
        if let (Some((lc, _)), Some(side), Some(log_table)) =
            (walk.log_conv.as_mut(), pass.log_side.as_mut(), &self.log_table)
        {
            if !lc.is_empty() {
                side.partitions.insert(p);
                log_table.write(&mut side.sink, lc, p).await?;
            }
        }
        if let Some(last) = walk.last_covered {
            if last >= from {
                pass.outcome.committed.insert(p, (from, last));
            }
        }
        Ok(())
    }

    /// Walks one sealed segment: its damaged ranges, then batch by batch until its end,
    /// an unreadable tail, or `stop` (which stops the whole pass).
    async fn walk_segment(
        &self,
        pass: &mut Pass,
        walk: &mut PartitionWalk,
        seg: &SegmentInfo,
        stop: &AtomicBool,
    ) -> Result<()> {
        let (p, from) = (walk.partition, walk.from);
        for c in seg.corrupt.iter().filter(|c| c.last_offset.is_none_or(|l| l >= from)) {
            // Recovery kept this damage (valid batches follow it); the reader steps over it.
            let s = SkippedBatch {
                partition: p,
                first_offset: c.first_offset.max(from),
                last_offset: c.last_offset.unwrap_or(seg.next_offset - 1),
                reason: c.to_string(),
            };
            error!(table = %self.ident, partition = p, first_offset = s.first_offset,
                last_offset = s.last_offset, reason = %s.reason, "skipping a damaged range of a segment");
            walk.log_hole(s.first_offset, s.last_offset);
            pass.outcome.skipped.push(s);
        }
        let holes = seg.corrupt.iter().map(|c| (c.position, c.end_position)).collect();
        let mut reader = SegmentBatchReader::open(&seg.path, 0, seg.size_bytes)?.with_holes(holes);
        loop {
            if stop.load(Ordering::Relaxed) {
                // Commit what is converted so far (whole batches), promptly.
                pass.stopped = true;
                break;
            }
            // The CRC is checked below: a bad one skips one batch, not the rest of the segment.
            let (position, header) = match reader.next_batch(false)? {
                ScannedBatch::End => break,
                ScannedBatch::Batch { position, header } => (position, header),
                ScannedBatch::Invalid { position, reason } => {
                    let first = walk.last_covered.map_or(from, |l| l + 1).max(seg.base_offset);
                    let s = SkippedBatch {
                        partition: p,
                        first_offset: first,
                        last_offset: seg.next_offset - 1,
                        reason: format!("unreadable segment tail at byte {position}: {reason}"),
                    };
                    error!(table = %self.ident, partition = p, first_offset = s.first_offset,
                        last_offset = s.last_offset, reason = %s.reason, "skipping records that cannot be read");
                    walk.log_hole(s.first_offset, s.last_offset);
                    pass.outcome.skipped.push(s);
                    walk.last_covered = Some(seg.next_offset - 1);
                    break;
                }
            };
            if header.last_offset() < from {
                continue;
            }
            let bytes = reader.batch_bytes()?;
            if let Err(e) = verify_crc(bytes, 0) {
                // Bit rot in a segment recovery trusted (below the recovery point): never tier garbage.
                let s = SkippedBatch {
                    partition: p,
                    first_offset: header.base_offset,
                    last_offset: header.last_offset(),
                    reason: format!("{} at byte {position}: {e}", seg.path.display()),
                };
                error!(table = %self.ident, partition = p, first_offset = s.first_offset,
                    last_offset = s.last_offset, reason = %s.reason, "skipping a record batch whose CRC does not match");
                // Served back as stored: a consumer fails its CRC as it would on the log.
                walk.log_opaque(&header, bytes, header.last_offset());
                pass.outcome.skipped.push(s);
                walk.last_covered = Some(header.last_offset());
                continue;
            }
            self.push_batch(pass, walk, seg, &header, bytes).await?;
        }
        Ok(())
    }

    /// One readable batch of `seg` into rows of the table, rows of a shared table's
    /// `__log`, or nothing; writes whichever converter is full.
    async fn push_batch(
        &self,
        pass: &mut Pass,
        walk: &mut PartitionWalk,
        seg: &SegmentInfo,
        header: &RecordBatchHeader,
        bytes: &[u8],
    ) -> Result<()> {
        let (p, from) = (walk.partition, walk.from);
        let pushed = if seg.is_aborted(header) {
            // An aborted transaction's records never become rows of the table
            // (READ_COMMITTED semantics); a shared table's `__log` keeps them.
            match walk.log_conv.as_mut() {
                Some((lc, log_from)) => lc.push_log(header, bytes, *log_from, LogBatch::Aborted),
                None => Pushed::Rows(0),
            }
        } else {
            match walk.conv.push(header, Bytes::copy_from_slice(bytes), from) {
                Pushed::Control => match walk.log_conv.as_mut() {
                    Some((lc, log_from)) => {
                        lc.push_log(header, bytes, *log_from, LogBatch::Marker(&seg.aborted))
                    }
                    None => Pushed::Control,
                },
                other => other,
            }
        };
        if let Pushed::Undecodable { base_offset, last_offset, reason } = pushed {
            error!(table = %self.ident, partition = p, first_offset = base_offset, last_offset,
                %reason, "skipping a record batch that cannot be decoded");
            walk.log_opaque(header, bytes, last_offset);
            pass.outcome.skipped.push(SkippedBatch {
                partition: p,
                first_offset: base_offset,
                last_offset,
                reason,
            });
        }
        walk.last_covered = Some(header.last_offset());
        if walk.conv.is_full() {
            self.write(&mut pass.sink, &mut walk.conv, p).await?;
        }
        if let (Some((lc, _)), Some(side), Some(log_table)) =
            (walk.log_conv.as_mut(), pass.log_side.as_mut(), &self.log_table)
        {
            if lc.is_full() {
                side.partitions.insert(p);
                log_table.write(&mut side.sink, lc, p).await?;
            }
        }
        Ok(())
    }

    /// What `conv` holds, as one Arrow batch of `partition`, into `sink`.
    async fn write(
        &self,
        sink: &mut Sink,
        conv: &mut ArrowConverter,
        partition: i32,
    ) -> Result<()> {
        match conv.finish()? {
            Some(batch) => sink.write(self, batch, partition).await,
            None => Ok(()),
        }
    }
}
