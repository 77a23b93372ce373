//! What a replicated partition needs of its log besides truncation: follower
//! appends (Kafka's `appendAsFollower`) and a high watermark decided outside
//! the log.
//!
//! A follower stores the leader's batches byte for byte: offsets, timestamps
//! and `partition_leader_epoch` are the leader's, so the two logs are the same
//! bytes. The checks are Kafka's for `AppendOrigin.REPLICATION`: every batch's
//! CRC, offsets that never go backwards (a batch starting below the log end
//! offset, or overlapping the batch before it, is refused), and nothing else:
//! producer sequences and epochs are recorded, not judged, and control
//! batches (transaction markers) are welcome. Offsets may jump forward, as on
//! a compacted leader whose cleaner removed whole batches.
//!
//! The high watermark: alone, a log is its own ISR and its high watermark is
//! the end of its complete appends. A replicated log ([`PartitionLog::set_replicated`])
//! leaves that decision to the replica manager: the leader's high watermark is
//! the smallest log end offset of the ISR, a follower's is the leader's (from
//! its fetch responses) capped by its own log. [`PartitionLog::update_high_watermark`]
//! moves it, never past what is complete locally (written, and fsynced where
//! `flush.messages` asks for it).

use floe_protocol::record_batch::{verify_crc, RecordBatchHeader, RECORD_BATCH_OVERHEAD};

use super::{LogState, PartitionLog, SegmentPosition};
use crate::batch_reader::{ScannedBatch, SegmentBatchReader};
use crate::error::{Result, StorageError};
use crate::log::LogAppendInfo;
use crate::segment::AppendedBatch;
use crate::transaction::{parse_control_batch, AbortedTxn};

/// One whole, CRC-checked batch of a follower append.
#[derive(Debug, Clone, Copy)]
struct FollowerBatch {
    position: usize,
    header: RecordBatchHeader,
}

impl FollowerBatch {
    fn end(&self) -> usize {
        self.position + self.header.total_size()
    }
}

impl PartitionLog {
    /// Appends batches fetched from the leader (Kafka's `appendAsFollower`):
    /// stored byte for byte, offsets as the leader assigned them. Checks each
    /// batch's CRC and that offsets only move forward; records producer state
    /// without judging it (Kafka's REPLICATION origin), including transaction
    /// markers (an ABORT goes to the `.txnindex`, as with
    /// [`PartitionLog::append_txn_marker`]); records each batch's leader
    /// epoch. Rolls segments as the leader path does (a new segment is based
    /// at the batch that opens it), honours `flush.messages` and notifies
    /// [`PartitionLog::append_notify`]. A partial batch at the end (a fetch
    /// cut at its byte limit) is left out, as Kafka does: the next fetch
    /// starts at the new log end offset. `max.message.bytes` is not applied:
    /// the leader accepted the batches.
    ///
    /// # Errors
    /// [`StorageError::UnexpectedAppendOffset`] if the first batch starts below
    /// the log end offset; [`StorageError::OffsetOutOfOrder`] if a batch
    /// starts before the previous one ended; [`StorageError::Corrupt`] for a
    /// bad CRC or header (nothing is appended then); [`StorageError::Io`] if
    /// writing fails (batches of earlier segments may be in: the log end
    /// offset says how far).
    pub fn append_as_follower(&self, records: &[u8], now_ms: i64) -> Result<LogAppendInfo> {
        self.check_live()?;
        let batches = self.follower_batches(records)?;
        let (info, flush_due) = {
            let mut st = self.state();
            let (Some(first), Some(last)) = (batches.first(), batches.last()) else {
                return Ok(LogAppendInfo::empty(st.log_start_offset));
            };
            if first.header.base_offset < st.log_end_offset {
                return Err(StorageError::UnexpectedAppendOffset {
                    expected: st.log_end_offset,
                    first_offset: first.header.base_offset,
                    last_offset: last.header.last_offset(),
                });
            }
            self.record_epochs(&mut st, &batches)?;
            let mut done = 0;
            while done < batches.len() {
                done += self.write_follower_run(&mut st, records, &batches[done..], now_ms)?;
            }
            let record_count: i64 = batches.iter().map(|b| i64::from(b.header.records_count)).sum();
            st.unflushed_messages += record_count;
            let flush_due = st.unflushed_messages >= st.config.flush_messages;
            Self::complete_append(&mut st, flush_due);
            let info = LogAppendInfo {
                first_offset: first.header.base_offset,
                last_offset: last.header.last_offset(),
                log_append_time: -1,
                log_start_offset: st.log_start_offset,
                record_count,
                duplicate: false,
            };
            (info, flush_due)
        };
        if flush_due {
            self.flush()?;
        }
        self.append_notify.notify_waiters();
        Ok(info)
    }

    /// The whole batches of `records`, each checked (header, CRC, offsets
    /// after the previous batch's); a partial last batch is left out.
    fn follower_batches(&self, records: &[u8]) -> Result<Vec<FollowerBatch>> {
        let corrupt = |reason: String| StorageError::Corrupt {
            path: self.dir.clone(),
            reason: format!("follower append: {reason}"),
        };
        let mut batches: Vec<FollowerBatch> = Vec::new();
        let mut position = 0;
        while records.len() - position >= RECORD_BATCH_OVERHEAD {
            let header = RecordBatchHeader::parse(&records[position..])
                .map_err(|e| corrupt(e.to_string()))?;
            // Compaction may have removed records: a leader's batch is judged as one in a log.
            header.check_sanity_in_log(position).map_err(|e| corrupt(e.to_string()))?;
            let end = position + header.total_size();
            if end > records.len() {
                break;
            }
            verify_crc(&records[position..end], position).map_err(|e| corrupt(e.to_string()))?;
            if let Some(prev) =
                batches.last().filter(|p| header.base_offset < p.header.next_offset())
            {
                return Err(StorageError::OffsetOutOfOrder {
                    expected: prev.header.next_offset(),
                    got: header.base_offset,
                });
            }
            batches.push(FollowerBatch { position, header });
            position = end;
        }
        Ok(batches)
    }

    /// Records where each leader epoch stamped in `batches` began (before the
    /// batches are written, as Kafka does: an entry ahead of the log is
    /// harmless, a batch whose epoch is unknown is not).
    fn record_epochs(&self, st: &mut LogState, batches: &[FollowerBatch]) -> Result<()> {
        for b in batches.iter().filter(|b| b.header.partition_leader_epoch >= 0) {
            let assigned = st.epochs.assign(b.header.partition_leader_epoch, b.header.base_offset);
            self.offline_on_io_error(assigned)?;
        }
        Ok(())
    }

    /// Writes the longest run of `batches` (at least one) that fits the
    /// active segment, rolling first if the first one does not, and records
    /// the run's producer state. Returns how many batches it wrote.
    fn write_follower_run(
        &self,
        st: &mut LogState,
        records: &[u8],
        batches: &[FollowerBatch],
        now_ms: i64,
    ) -> Result<usize> {
        let first = batches[0];
        let size = |b: &FollowerBatch| b.header.total_size() as u64;
        if let Some(reason) =
            Self::roll_reason(st, size(&first), first.header.last_offset(), now_ms)
        {
            let rolled = self.roll_at(st, first.header.base_offset, reason);
            self.refuse_or_go_offline(rolled)?;
        }
        let (active_size, active_base) = (st.active().size, st.active().base_offset);
        let mut len = size(&first);
        let n = 1 + batches[1..]
            .iter()
            .take_while(|b| {
                len += size(b);
                active_size + len <= st.config.segment_bytes
                    && b.header.last_offset() - active_base <= i64::from(u32::MAX)
            })
            .count();
        let run = &batches[..n];
        let appended: Vec<AppendedBatch> = run
            .iter()
            .map(|b| AppendedBatch {
                position_in_buffer: b.position - first.position,
                size: b.header.total_size(),
                base_offset: b.header.base_offset,
                next_offset: b.header.next_offset(),
                max_timestamp: b.header.max_timestamp,
            })
            .collect();
        let bytes = &records[first.position..run[n - 1].end()];
        let index_interval = st.config.index_interval_bytes;
        let written = st.active_mut().append(bytes, &appended, now_ms, index_interval);
        self.refuse_or_go_offline(written)?;
        st.log_end_offset = run[n - 1].header.next_offset();
        for b in run {
            self.record_replicated_producer_state(st, b, &records[b.position..b.end()])?;
        }
        Ok(n)
    }

    /// Kafka's REPLICATION origin: the batch updates its producer's state
    /// without checks; a marker completes the transaction, an ABORT is added
    /// to the active segment's `.txnindex`.
    fn record_replicated_producer_state(
        &self,
        st: &mut LogState,
        b: &FollowerBatch,
        bytes: &[u8],
    ) -> Result<()> {
        let marker = if b.header.is_control() { parse_control_batch(bytes) } else { None };
        let Some(completed) = st.producers.update_from_header(&b.header, marker) else {
            return Ok(());
        };
        if completed.first_offset < completed.last_offset {
            st.unreplicated.insert(completed.first_offset, completed.last_offset);
        }
        if completed.aborted {
            let entry = AbortedTxn {
                producer_id: completed.producer_id,
                first_offset: completed.first_offset,
                last_offset: completed.last_offset,
                last_stable_offset: st.producers.last_stable_offset_after(&completed),
            };
            let indexed = st.active_mut().txn_index.append(entry);
            self.offline_on_io_error(indexed)?;
        }
        Ok(())
    }

    /// Switches the high watermark between following the log's own complete
    /// appends (off, the default: a single replica) and being driven by
    /// [`PartitionLog::update_high_watermark`] (on: the partition has
    /// replicas, and its leader decides what is committed). Switching off
    /// moves the high watermark up to the complete appends at once.
    pub fn set_replicated(&self, on: bool) {
        let moved = {
            let mut st = self.state();
            st.replicated = on;
            st.high_watermark_target = st.high_watermark;
            let before = st.high_watermark;
            if !on {
                let (end, position) = (st.completed_end, st.completed_position);
                st.complete_to(end, position);
            }
            st.high_watermark > before
        };
        if moved {
            self.append_notify.notify_waiters();
        }
    }

    /// Whether the high watermark is driven from outside (see [`PartitionLog::set_replicated`]).
    pub fn is_replicated(&self) -> bool {
        self.state().replicated
    }

    /// Moves the high watermark of a replicated log up to `high_watermark`
    /// (the leader: the smallest log end offset of its ISR; a follower: the
    /// leader's high watermark from a fetch response). Never backwards, never
    /// past the log end offset nor past appends still waiting for the fsync
    /// `flush.messages` asked of them (the high watermark follows when that
    /// fsync returns). Returns whether it moved; if it did, long-polling
    /// fetches waiting on [`PartitionLog::append_notify`] are woken. Without
    /// replication the high watermark already follows the log and this
    /// changes nothing.
    ///
    /// # Errors
    /// [`StorageError::Io`]/[`StorageError::Corrupt`] if the batch holding
    /// the new high watermark cannot be located in its segment.
    pub fn update_high_watermark(&self, high_watermark: i64) -> Result<bool> {
        self.check_live()?;
        let moved = {
            let mut st = self.state();
            if !st.replicated {
                return Ok(false);
            }
            st.high_watermark_target = st.high_watermark_target.max(high_watermark);
            self.advance_to_target(&mut st)?
        };
        if moved {
            self.append_notify.notify_waiters();
        }
        Ok(moved)
    }

    /// Sets the high watermark of a replicated log to `high_watermark`, down
    /// as well as up (Kafka's `updateHighWatermark`), clamped to the log start
    /// offset and to the complete appends; returns the value set. For the
    /// replica manager at startup, with the high watermark it checkpointed:
    /// a log opens with its high watermark at its recovered log end, which
    /// for a replica may hold records no ISR has acknowledged. Wakes long
    /// polls if it moved up.
    ///
    /// # Errors
    /// [`StorageError::InvalidConfig`] if the log is not replicated (its high
    /// watermark is its own); as [`PartitionLog::update_high_watermark`].
    pub fn reset_high_watermark(&self, high_watermark: i64) -> Result<i64> {
        self.check_live()?;
        let (hw, up) = {
            let mut st = self.state();
            if !st.replicated {
                return Err(StorageError::InvalidConfig {
                    key: "high watermark".into(),
                    reason: "only a replicated log's high watermark is set from outside".into(),
                });
            }
            let hw = high_watermark.clamp(st.log_start_offset, st.completed_end);
            let position = Self::position_of(&st, hw)?;
            let up = hw > st.high_watermark;
            st.high_watermark = hw;
            st.high_watermark_position = position;
            st.high_watermark_target = hw;
            (hw, up)
        };
        if up {
            self.append_notify.notify_waiters();
        }
        Ok(hw)
    }

    /// Moves the high watermark to the target as far as complete appends
    /// allow; after a flush, failures are logged (the next update retries).
    pub(super) fn follow_high_watermark_target(&self, st: &mut LogState) {
        if let Err(e) = self.advance_to_target(st) {
            tracing::warn!(topic = %self.topic, partition = self.partition, error = %e, "cannot move the high watermark after a flush");
        }
    }

    fn advance_to_target(&self, st: &mut LogState) -> Result<bool> {
        let to = st.high_watermark_target.min(st.completed_end).min(st.log_end_offset);
        if to <= st.high_watermark {
            return Ok(false);
        }
        let position =
            if to == st.completed_end { st.completed_position } else { Self::position_of(st, to)? };
        st.advance_high_watermark(to, position);
        Ok(true)
    }

    /// Where reads must stop for the high watermark to be `offset`: the start
    /// of the batch holding it (a batch is readable once wholly below the high
    /// watermark), found from the offset index and a short header scan.
    pub(super) fn position_of(st: &LogState, offset: i64) -> Result<SegmentPosition> {
        if offset >= st.log_end_offset {
            return Ok(st.log_end_position());
        }
        let Some(seg) = st.segments.range(..=offset).next_back().map(|(_, s)| s) else {
            let first = st.segments.values().next().map_or(0, |s| s.base_offset);
            return Ok(SegmentPosition { segment_base_offset: first, position: 0 });
        };
        let at = |position| SegmentPosition { segment_base_offset: seg.base_offset, position };
        if offset >= seg.next_offset {
            return Ok(at(seg.size));
        }
        let start = seg.offset_index.position_for(offset);
        let mut batches = SegmentBatchReader::new(&seg.log, &seg.log_path, start, seg.size)
            .with_holes(seg.holes());
        loop {
            match batches.next_header()? {
                ScannedBatch::Batch { position, header } if header.last_offset() >= offset => {
                    return Ok(at(position))
                }
                ScannedBatch::Batch { .. } => {}
                ScannedBatch::End => return Ok(at(seg.size)),
                ScannedBatch::Invalid { position, reason } => {
                    return Err(StorageError::Corrupt {
                        path: seg.log_path.to_path_buf(),
                        reason: format!("batch at {position}: {reason}"),
                    })
                }
            }
        }
    }
}
