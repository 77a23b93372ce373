//! Leader appends (Kafka's `UnifiedLog.append` with the leader's origins):
//! client batches through [`PartitionLog::append_validated`] (the Produce
//! handler, which validated them) or [`PartitionLog::append`] and
//! [`PartitionLog::append_as`] (which validate first), and transaction
//! markers through [`PartitionLog::append_txn_marker`], answered with a
//! [`LogAppendInfo`].
//!
//! Validation ([`validate_batches`], protocol's half of Kafka's
//! `LogValidator`) is the one walk that checks anything: sizes, CRCs, control
//! and transactional flags. An append takes its answer, a
//! [`ValidatedBatches`], and walks the bytes once more only to stamp them.
//! The steps: the batch list and idempotent producers' fields from the
//! validated batches, without the lock; then under it `segment.bytes`, the
//! producer state's check (a retry is answered with its original offsets),
//! the write itself (a roll if due, then one stamp walk for offsets, leader
//! epoch and LogAppendTime, one positioned write and the indexes) and the
//! producer state's update; then, without the lock, the `flush.messages`
//! fsync if due and the waiters' wake-up. Follower appends live in `replica`.

use floe_protocol::record_batch::{
    stamp_batches, validate_batches, BatchError, BatchStamp, ValidatedBatches,
};
use tracing::debug;

use super::{LogState, PartitionLog};
use crate::config::MessageTimestampType;
use crate::error::{IoContext, Result, StorageError};
use crate::failpoint;
use crate::producer_state::{AppendCheck, BatchMetadata, ProducerBatch};
use crate::segment::AppendedBatch;
use crate::transaction::{control_batch, AbortedTxn, AppendOrigin, ControlRecordType};

/// What an append did (Kafka's `LogAppendInfo`, reduced to what Produce answers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogAppendInfo {
    /// Offset given to the first record (-1 for an empty append).
    pub first_offset: i64,
    /// Offset given to the last record (-1 for an empty append).
    pub last_offset: i64,
    /// The append time written into the batches, or -1 for CreateTime topics.
    pub log_append_time: i64,
    /// The log start offset after the append.
    pub log_start_offset: i64,
    /// Records appended (0 for a duplicate).
    pub record_count: i64,
    /// The batches were a retry of an idempotent producer's batch already in
    /// the log: nothing was appended and the offsets are the original ones.
    pub duplicate: bool,
}

impl LogAppendInfo {
    /// The answer to an append of nothing (offsets -1, as Kafka answers).
    pub(super) fn empty(log_start_offset: i64) -> Self {
        Self {
            first_offset: -1,
            last_offset: -1,
            log_append_time: -1,
            log_start_offset,
            record_count: 0,
            duplicate: false,
        }
    }
}

/// What an append needs of its validated batches, made before the lock
/// (Kafka's `LogAppendInfo` of `analyzeAndValidateRecords`, without a walk:
/// validation found it all).
#[derive(Debug)]
struct PlannedAppend {
    /// Each batch's place in the buffer, size and max timestamp, and its
    /// offsets relative to the append's first (moved to the real ones under the lock).
    batches: Vec<AppendedBatch>,
    /// (index into `batches`, producer fields) of the idempotent batches.
    producer_batches: Vec<(usize, ProducerBatch)>,
}

impl PlannedAppend {
    fn of(validated: &ValidatedBatches) -> Self {
        let mut batches = Vec::with_capacity(validated.batch_count);
        let mut producer_batches = Vec::new();
        let mut relative = 0i64;
        for b in validated.batches() {
            if let Some(pb) = ProducerBatch::of(&b.header) {
                producer_batches.push((batches.len(), pb));
            }
            let next = relative + i64::from(b.header.records_count);
            batches.push(AppendedBatch {
                position_in_buffer: b.position,
                size: b.header.total_size(),
                base_offset: relative,
                next_offset: next,
                max_timestamp: b.header.max_timestamp,
            });
            relative = next;
        }
        Self { batches, producer_batches }
    }
}

impl PartitionLog {
    /// Appends a client's record batches: validates them
    /// ([`validate_batches`] against this topic's `max.message.bytes`), then
    /// appends them as [`PartitionLog::append_validated`] does. A caller that
    /// validated the batches already (the Produce handler) calls that instead.
    ///
    /// # Errors
    /// [`StorageError::RecordTooLarge`] for a batch above `max.message.bytes`;
    /// [`StorageError::InvalidRecord`] for a control batch or a transactional
    /// one without a producer id; [`StorageError::Corrupt`] for bytes that are
    /// not whole, valid batches; and the errors of [`PartitionLog::append_validated`].
    pub fn append(&self, records: &mut [u8], now_ms: i64) -> Result<LogAppendInfo> {
        self.append_as(records, now_ms, AppendOrigin::Client)
    }

    /// [`PartitionLog::append`] for a writer other than a client (see [`AppendOrigin`]).
    ///
    /// # Errors
    /// As [`PartitionLog::append`].
    pub fn append_as(
        &self,
        records: &mut [u8],
        now_ms: i64,
        origin: AppendOrigin,
    ) -> Result<LogAppendInfo> {
        let max_message_bytes = self.config().max_message_bytes;
        let validated = validate_batches(records, max_message_bytes).map_err(|e| match e {
            BatchError::MessageTooLarge { size, limit, .. } => {
                StorageError::RecordTooLarge { size, limit }
            }
            e if e.is_invalid_record() => StorageError::InvalidRecord { reason: e.to_string() },
            e => StorageError::Corrupt { path: self.dir.clone(), reason: format!("append: {e}") },
        })?;
        self.append_validated_as(records, &validated, now_ms, origin)
    }

    /// Appends record batches [`validate_batches`] accepted (`validated`, made
    /// from these very bytes): assigns offsets from the log end offset,
    /// applies LogAppendTime if the topic uses it, rolls the active segment
    /// first if due, writes the bytes with one positioned write and indexes
    /// them. Nothing is walked or checked again that validation did (sizes
    /// against `max.message.bytes`, CRCs, control batches): the batch list
    /// comes from `validated`, and the one walk over `records` is the stamp
    /// ([`stamp_batches`]: offsets, leader epoch, append time). `records` is
    /// rewritten in place. An empty buffer is a no-op answered with offsets
    /// -1, as in Kafka.
    ///
    /// Batches with a producer id are checked against the producer state
    /// first (see [`crate::producer_state`]): a retry of a batch already in the
    /// log appends nothing and is answered with the original offsets
    /// ([`LogAppendInfo::duplicate`]). A transactional batch starts (or
    /// extends) the producer's transaction in this partition, holding the
    /// last stable offset at its first offset until a marker completes it.
    ///
    /// # Errors
    /// [`StorageError::InvalidRecord`] if `records` is not the payload
    /// `validated` describes (its length differs); [`StorageError::RecordTooLarge`]
    /// for an append above `segment.bytes`; [`StorageError::InvalidProducerEpoch`]
    /// and [`StorageError::OutOfOrderSequence`] and [`StorageError::InvalidTxnState`]
    /// from the producer state (nothing is appended); [`StorageError::Io`] if
    /// writing (or the `flush.messages` fsync) fails.
    pub fn append_validated(
        &self,
        records: &mut [u8],
        validated: &ValidatedBatches,
        now_ms: i64,
    ) -> Result<LogAppendInfo> {
        self.append_validated_as(records, validated, now_ms, AppendOrigin::Client)
    }

    fn append_validated_as(
        &self,
        records: &mut [u8],
        validated: &ValidatedBatches,
        now_ms: i64,
        origin: AppendOrigin,
    ) -> Result<LogAppendInfo> {
        let (info, flush_due) = self.write_batches(records, validated, now_ms, origin)?;
        if flush_due {
            // `flush` moves the high watermark past this append when it returns.
            self.flush()?;
        }
        if info.record_count > 0 {
            self.append_notify.notify_waiters();
        }
        Ok(info)
    }

    /// The first half of an append: writes the batches under the lock and
    /// says whether `flush.messages` asks for an fsync before the append is
    /// complete (until then the high watermark stays below it).
    fn write_batches(
        &self,
        records: &mut [u8],
        validated: &ValidatedBatches,
        now_ms: i64,
        origin: AppendOrigin,
    ) -> Result<(LogAppendInfo, bool)> {
        self.check_live()?;
        if origin == AppendOrigin::Replication {
            return Err(StorageError::InvalidRecord {
                reason: "a leader's batches are appended by append_as_follower, offsets kept"
                    .into(),
            });
        }
        if records.len() != validated.total_bytes {
            return Err(StorageError::InvalidRecord {
                reason: format!(
                    "{} bytes of records, but the validated batches cover {}",
                    records.len(),
                    validated.total_bytes
                ),
            });
        }
        let PlannedAppend { mut batches, producer_batches } = PlannedAppend::of(validated);
        let record_count = validated.record_count;

        let mut st = self.state();
        if batches.is_empty() {
            return Ok((LogAppendInfo::empty(st.log_start_offset), false));
        }
        let segment_bytes = st.config.segment_bytes;
        if records.len() as u64 > segment_bytes {
            return Err(StorageError::RecordTooLarge {
                size: records.len(),
                limit: segment_bytes as usize,
            });
        }
        if !producer_batches.is_empty() {
            let pbs: Vec<ProducerBatch> = producer_batches.iter().map(|&(_, pb)| pb).collect();
            if let AppendCheck::Duplicate(original) = st.producers.check(&pbs, origin)? {
                return Ok(self.duplicate_answer(&st, pbs[0].producer_id, original));
            }
        }
        let (first_offset, log_append_time, flush_due) =
            self.write_locked(&mut st, records, &mut batches, record_count, now_ms)?;
        for (i, pb) in &producer_batches {
            let b = &batches[*i];
            st.producers.update(pb, b.base_offset, b.next_offset - 1, b.max_timestamp);
        }
        Self::complete_append(&mut st, flush_due);
        let info = LogAppendInfo {
            first_offset,
            last_offset: first_offset + record_count - 1,
            log_append_time,
            log_start_offset: st.log_start_offset,
            record_count,
            duplicate: false,
        };
        Ok((info, flush_due))
    }

    /// The answer to a retry of `producer_id`'s batches already in the log at
    /// `original`: nothing is appended. If the original append's fsync has not
    /// returned yet, the retry is acknowledged only once the batch is durable
    /// (the `bool`: an fsync is due).
    fn duplicate_answer(
        &self,
        st: &LogState,
        producer_id: i64,
        original: BatchMetadata,
    ) -> (LogAppendInfo, bool) {
        debug!(topic = %self.topic, partition = self.partition, producer_id,
            first_offset = original.first_offset, "duplicate batch not appended");
        let flush_due = original.last_offset >= st.completed_end;
        let log_append_time_topic =
            st.config.message_timestamp_type == MessageTimestampType::LogAppendTime;
        let info = LogAppendInfo {
            first_offset: original.first_offset,
            last_offset: original.last_offset,
            log_append_time: if log_append_time_topic { original.timestamp } else { -1 },
            log_start_offset: st.log_start_offset,
            record_count: 0,
            duplicate: true,
        };
        (info, flush_due)
    }

    /// Writes checked batches under the lock: applies LogAppendTime, rolls if
    /// due, assigns offsets from the log end offset (`batches` are moved to
    /// them), writes and indexes. Returns the first offset, the append time
    /// (-1 for CreateTime) and whether `flush.messages` asks for an fsync; the
    /// caller records producer state, then calls [`Self::complete_append`].
    fn write_locked(
        &self,
        st: &mut LogState,
        records: &mut [u8],
        batches: &mut [AppendedBatch],
        record_count: i64,
        now_ms: i64,
    ) -> Result<(i64, i64, bool)> {
        let config = st.config.clone();
        let log_append_time = (config.message_timestamp_type
            == MessageTimestampType::LogAppendTime)
            .then_some(now_ms);
        let first_offset = st.log_end_offset;
        let last_offset = first_offset + record_count - 1;
        let rolled = self.maybe_roll(st, records.len() as u64, last_offset, now_ms);
        self.refuse_or_go_offline(rolled)?;
        let epoch = st.leader_epoch;
        let assigned = st.epochs.assign(epoch, first_offset).map(drop);
        self.offline_on_io_error(assigned)?;
        // The one walk over the bytes: offsets, the leader's epoch (followers
        // learn epochs from it) and, for LogAppendTime, the time and CRC.
        let stamp = BatchStamp { first_offset, partition_leader_epoch: epoch, log_append_time };
        let next = stamp_batches(records, stamp);
        for b in batches.iter_mut() {
            b.base_offset += first_offset;
            b.next_offset += first_offset;
            if let Some(now_ms) = log_append_time {
                b.max_timestamp = now_ms;
            }
        }
        let written = st.active_mut().append(records, batches, now_ms, config.index_interval_bytes);
        self.refuse_or_go_offline(written)?;
        st.log_end_offset = next;
        st.unflushed_messages += record_count;
        let flush_due = st.unflushed_messages >= config.flush_messages;
        Ok((first_offset, log_append_time.unwrap_or(-1), flush_due))
    }

    /// Ends an append under the lock: without an fsync to wait for, the
    /// append is complete now and (unless the log is replicated) the high
    /// watermark passes it.
    pub(super) fn complete_append(st: &mut LogState, flush_due: bool) {
        if !flush_due {
            let end = st.log_end_position();
            let next = st.log_end_offset;
            st.complete_to(next, end);
        }
    }

    /// Writes one transaction marker for `producer_id` (what Kafka's
    /// WriteTxnMarkers does for one partition): a control batch (layout in
    /// [`crate::transaction`]) that completes the producer's ongoing
    /// transaction here. An ABORT adds the transaction to the active
    /// segment's `.txnindex`. A marker for a producer with no transaction
    /// ongoing here is written all the same (the partition may have been added
    /// to the transaction without data). Like [`PartitionLog::append`] it
    /// honours `flush.messages`: the high watermark (and so the last stable
    /// offset) passes the marker once it is complete. Returns the marker's offset.
    ///
    /// Failpoints: `log.txn_marker.append` before the write, `log.txn_marker.appended`
    /// after it (before the answer).
    ///
    /// # Errors
    /// [`StorageError::InvalidProducerEpoch`] for an epoch older than the
    /// producer's; [`StorageError::TransactionCoordinatorFenced`] for an older
    /// coordinator epoch; [`StorageError::Io`] if writing fails.
    pub fn append_txn_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        marker: ControlRecordType,
        coordinator_epoch: i32,
        now_ms: i64,
    ) -> Result<i64> {
        self.check_live()?;
        let mut records =
            control_batch(producer_id, producer_epoch, marker, coordinator_epoch, now_ms);
        let (offset, flush_due, indexed) = {
            let mut st = self.state();
            st.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)?;
            let injected = failpoint::check("log.txn_marker.append")
                .ctx("append transaction marker", &self.dir);
            self.refuse_or_go_offline(injected)?;
            let mut batches = [AppendedBatch {
                position_in_buffer: 0,
                size: records.len(),
                base_offset: 0,
                next_offset: 1,
                max_timestamp: now_ms,
            }];
            let (offset, _, flush_due) =
                self.write_locked(&mut st, &mut records, &mut batches, 1, now_ms)?;
            let completed = st.producers.complete_txn(
                producer_id,
                producer_epoch,
                marker,
                coordinator_epoch,
                offset,
                batches[0].max_timestamp,
            );
            if completed.first_offset < completed.last_offset {
                // Unstable until the high watermark passes the marker (Kafka's unreplicated txns).
                st.unreplicated.insert(completed.first_offset, completed.last_offset);
            }
            let mut indexed = Ok(());
            if completed.aborted {
                let entry = AbortedTxn {
                    producer_id,
                    first_offset: completed.first_offset,
                    last_offset: completed.last_offset,
                    last_stable_offset: st.producers.last_stable_offset_after(&completed),
                };
                // Kept in memory even if the write fails; the directory then goes
                // offline below, so the restart recovers this segment and rebuilds its index.
                indexed = st.active_mut().txn_index.append(entry);
            }
            Self::complete_append(&mut st, flush_due);
            debug!(topic = %self.topic, partition = self.partition, producer_id, producer_epoch,
                ?marker, offset, first_offset = completed.first_offset, "wrote transaction marker");
            (offset, flush_due, indexed)
        };
        self.offline_on_io_error(indexed)?;
        let injected =
            failpoint::check("log.txn_marker.appended").ctx("append transaction marker", &self.dir);
        self.offline_on_io_error(injected)?;
        if flush_due {
            self.flush()?;
        }
        self.append_notify.notify_waiters();
        Ok(offset)
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::Arc;

    use floe_protocol::kafka_protocol::records::Compression;
    use floe_protocol::record_batch::{RecordBatchHeader, TimestampType};

    use crate::error::StorageError;
    use crate::log::test_helpers::{open, read_all};
    use crate::log::TimestampAndOffset;
    use crate::test_util::{batch, batch_with, config, idempotent_batch};
    use crate::transaction::AppendOrigin;

    /// An append's first half only (written, its `flush.messages` fsync not run): (answer, fsync due).
    fn write_unflushed(
        log: &crate::PartitionLog,
        records: &mut [u8],
    ) -> crate::Result<(crate::LogAppendInfo, bool)> {
        let validated = floe_protocol::record_batch::validate_batches(records, 1 << 20).unwrap();
        log.write_batches(records, &validated, 0, AppendOrigin::Client)
    }

    #[test]
    fn append_notifies_waiters() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(open(dir.path(), config(&[])));
        let notified = log.append_notify().notified();
        let mut notified = std::pin::pin!(notified);
        notified.as_mut().enable();
        log.append(&mut batch(1, 1, 1), 0).unwrap();
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        assert!(notified.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn empty_append_is_a_no_op() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), config(&[]));
        let info = log.append(&mut [], 0).unwrap();
        assert_eq!((info.first_offset, info.last_offset, info.record_count), (-1, -1, 0));
        assert_eq!(log.log_end_offset(), 0);
    }

    #[test]
    fn oversized_batch_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), config(&[("max.message.bytes", "200")]));
        let mut b = batch(3, 1, 100);
        assert!(matches!(
            log.append(&mut b, 0),
            Err(StorageError::RecordTooLarge { limit: 200, .. })
        ));
        assert_eq!(log.log_end_offset(), 0);
    }

    #[test]
    fn log_append_time_is_applied() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), config(&[("message.timestamp.type", "LogAppendTime")]));
        let mut b = batch_with(&[1, 2, 3], 10, Compression::Gzip);
        let info = log.append(&mut b, 777_000).unwrap();
        assert_eq!(info.log_append_time, 777_000);
        let bytes = log
            .read(0, 1 << 20, true, crate::IsolationLevel::ReadUncommitted)
            .unwrap()
            .region
            .unwrap()
            .read_to_vec()
            .unwrap();
        floe_protocol::record_batch::validate_batches(&bytes, 1 << 20).unwrap();
        let h = RecordBatchHeader::parse(&bytes).unwrap();
        assert_eq!((h.timestamp_type(), h.max_timestamp), (TimestampType::LogAppendTime, 777_000));
        assert_eq!(
            log.offset_for_timestamp(500_000).unwrap(),
            Some(TimestampAndOffset { timestamp: 777_000, offset: 0 })
        );
        assert_eq!(
            log.max_timestamp_and_offset().unwrap(),
            Some(TimestampAndOffset { timestamp: 777_000, offset: 0 })
        );
    }

    #[test]
    fn high_watermark_waits_for_the_flush_messages_fsync() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), config(&[("flush.messages", "1")]));
        log.append(&mut batch(2, 1, 10), 0).unwrap();
        assert_eq!((log.log_end_offset(), log.high_watermark()), (2, 2));

        // Written, its fsync not yet run: not readable, not tiered, not "latest".
        let (info, flush_due) = write_unflushed(&log, &mut batch(3, 1, 10)).unwrap();
        assert!(flush_due);
        assert_eq!(info.first_offset, 2);
        assert_eq!((log.log_end_offset(), log.high_watermark()), (5, 2));
        let offsets: Vec<i64> = read_all(&log, 0).iter().map(|r| r.0).collect();
        assert_eq!(offsets, vec![0, 1], "the unflushed batch is not sent");
        let at_hw = log.read(2, 1 << 20, true, crate::IsolationLevel::ReadUncommitted).unwrap();
        assert!(at_hw.region.is_none());
        assert_eq!(at_hw.high_watermark, 2);
        assert!(
            matches!(
                log.read(6, 1 << 20, true, crate::IsolationLevel::ReadUncommitted),
                Err(StorageError::OffsetOutOfRange { .. })
            ),
            "past the log end offset is still out of range"
        );
        assert!(log.delete_records_before(4).is_err(), "DeleteRecords stops at the high watermark");

        log.flush().unwrap();
        assert_eq!(log.high_watermark(), 5);
        assert_eq!(read_all(&log, 0).len(), 5);
    }

    /// A replicated log: the leader's high watermark never passes an append
    /// still waiting for its `flush.messages` fsync; it follows when the fsync returns.
    #[test]
    fn a_replicated_high_watermark_waits_for_the_flush_messages_fsync() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), config(&[("flush.messages", "1")]));
        log.set_replicated(true);
        log.append(&mut batch(2, 1, 10), 0).unwrap();
        let (_, flush_due) = write_unflushed(&log, &mut batch(3, 1, 10)).unwrap();
        assert!(flush_due);
        assert_eq!(log.high_watermark(), 0, "replicated: appends do not move it");
        assert!(log.update_high_watermark(5).unwrap());
        assert_eq!(log.high_watermark(), 2, "held at what is durable");
        log.flush().unwrap();
        assert_eq!(log.high_watermark(), 5, "the asked-for high watermark once the fsync returned");
        let (_, flush_due) = write_unflushed(&log, &mut batch(3, 1, 10)).unwrap();
        assert!(flush_due);
        log.update_high_watermark(6).unwrap();
        log.flush().unwrap();
        assert_eq!(log.high_watermark(), 6, "no further than asked");
        assert_eq!(read_all(&log, 0).len(), 5, "the batch 5-7 is not wholly below 6");
    }

    #[test]
    fn a_retry_of_a_batch_awaiting_its_fsync_waits_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), config(&[("flush.messages", "1")]));
        let mut first = idempotent_batch((7, 0, 0), 2, 5);
        let mut retry = first.clone();
        let (_, flush_due) = write_unflushed(&log, &mut first).unwrap();
        assert!(flush_due);
        assert_eq!(log.high_watermark(), 0);
        let info = log.append(&mut retry, 0).unwrap();
        assert!(info.duplicate);
        assert_eq!((info.first_offset, info.last_offset), (0, 1));
        assert_eq!(log.high_watermark(), 2, "the retry's answer waited for the fsync");
        assert_eq!(log.recovery_point(), 2);
    }

    #[test]
    fn idempotent_retry_is_not_appended_and_gets_the_original_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), config(&[]));
        log.append(&mut batch(2, 1, 10), 0).unwrap();
        let first = log.append(&mut idempotent_batch((7, 0, 0), 3, 5), 0).unwrap();
        assert_eq!((first.first_offset, first.last_offset, first.duplicate), (2, 4, false));
        let second = log.append(&mut idempotent_batch((7, 0, 3), 2, 5), 0).unwrap();
        assert_eq!((second.first_offset, second.last_offset), (5, 6));
        for (seq, n, want) in [(0, 3, (2, 4)), (3, 2, (5, 6))] {
            let again = log.append(&mut idempotent_batch((7, 0, seq), n, 5), 0).unwrap();
            assert_eq!(
                (again.first_offset, again.last_offset, again.record_count, again.duplicate),
                (want.0, want.1, 0, true)
            );
        }
        assert_eq!(log.log_end_offset(), 7, "nothing appended twice");
        assert_eq!(read_all(&log, 0).len(), 7);
        assert_eq!(log.append(&mut idempotent_batch((7, 0, 5), 1, 5), 0).unwrap().first_offset, 7);
    }

    #[test]
    fn sequence_gap_and_old_epoch_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), config(&[]));
        // An unknown producer may start at any sequence.
        log.append(&mut idempotent_batch((3, 2, 40), 2, 5), 0).unwrap();
        assert!(matches!(
            log.append(&mut idempotent_batch((3, 2, 43), 1, 5), 0),
            Err(StorageError::OutOfOrderSequence {
                producer_id: 3,
                sequence: 43,
                expected: 42,
                ..
            })
        ));
        assert!(matches!(
            log.append(&mut idempotent_batch((3, 1, 42), 1, 5), 0),
            Err(StorageError::InvalidProducerEpoch { epoch: 1, current_epoch: 2, .. })
        ));
        assert!(
            matches!(
                log.append(&mut idempotent_batch((3, 3, 42), 1, 5), 0),
                Err(StorageError::OutOfOrderSequence { expected: 0, .. })
            ),
            "a new epoch starts at 0"
        );
        assert_eq!(log.log_end_offset(), 2, "refused batches are not appended");
        log.append(&mut idempotent_batch((3, 3, 0), 1, 5), 0).unwrap();
        assert_eq!(log.log_end_offset(), 3);
    }
}
