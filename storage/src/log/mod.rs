//! `PartitionLog`: one partition's log (Kafka's `UnifiedLog` and the
//! `LocalLog` beneath it) — its segments and offsets, and its jobs, one file
//! each (see Layout below).
//!
//! Offsets, Kafka's names: `log_start_offset` (first offset a consumer can
//! fetch), `log_end_offset` (next offset to assign), `high_watermark`
//! (offsets below it are readable), `last_stable_offset` (below it every
//! transaction is complete: READ_COMMITTED reads stop there), `recovery_point`
//! (everything below it is fsynced), `local_log_start_offset` (the first
//! offset in a local segment: the log start offset, but for shared-storage
//! topics, whose local retention deletes segments the Iceberg table holds
//! while the log start offset stays; see `docs/shared-mode.md` 3.1).
//!
//! With one replica the high watermark would simply be the log end offset,
//! but an append that `flush.messages` makes fsync is not complete until the
//! fsync returns: only then does the high watermark pass it (Kafka's order).
//! Otherwise a consumer could read a batch that a power cut then drops,
//! and the producer's retry would land it again at a later offset.
//!
//! Idempotent producers: each log has a [`ProducerStateManager`] checked and
//! updated under the log's lock by every append (duplicates are answered
//! with their original offsets, not appended again), saved to
//! `<offset>.snapshot` at every roll and at close (the last two are kept).
//!
//! Leader epochs: each log has a [`LeaderEpochCache`] (`leader-epoch-checkpoint`).
//! Leader appends (clients, coordinators, markers) stamp every batch's
//! `partition_leader_epoch` with the log's leader epoch (the latest in the
//! log, 0 for a new one, until [`PartitionLog::become_leader`] says otherwise);
//! follower appends keep the leader's stamp. Every append records where each
//! epoch began, so OffsetForLeaderEpoch can be answered
//! ([`PartitionLog::end_offset_for_epoch`]).
//!
//! # Layout
//! - `mod.rs` (this file): [`PartitionLog`] and its state (`LogState`, behind
//!   one mutex: segments, offsets, producer state, epochs), open and close,
//!   the offset accessors.
//! - `append`: leader appends (clients, coordinators, transaction markers), [`LogAppendInfo`].
//! - `read`: reads for consumers and followers, [`FetchDataInfo`]; `SegmentSlice`, a
//!   segment's byte range captured under the lock and scanned after it.
//! - `roll`: rolling the active segment (`segment.bytes`, `segment.ms`, on request).
//! - `timestamps`: ListOffsets' two lookups by timestamp, [`TimestampAndOffset`].
//! - `retention`: retention by time and size, local retention, DeleteRecords and a
//!   raised log start offset, the tiering floor and the sealed segments tiering copies.
//! - `flush`: fsyncs, the recovery point, `flush.messages` and `flush.ms`.
//! - `cleaning`: what the log cleaner reads of a log, and the swap of a cleaned segment.
//! - `producers`: the idempotent producers' state, its expiry and `.snapshot` files.
//! - `epochs`: leader epochs (`become_leader`, OffsetForLeaderEpoch) and the cache at open.
//! - `replica`: follower appends and the externally driven high watermark.
//! - `truncation`: Kafka's `truncateTo` and `truncateFullyAndStartAt`.
//!
//! Unit tests sit beside the code they test; their shared helpers are in `test_helpers`.

mod append;
mod cleaning;
mod epochs;
mod flush;
mod producers;
mod read;
mod replica;
mod retention;
mod roll;
#[cfg(test)]
mod test_helpers;
mod timestamps;
mod truncation;

pub use append::LogAppendInfo;
pub(crate) use cleaning::{CleanerView, SealedSegment};
pub use read::FetchDataInfo;
pub use timestamps::TimestampAndOffset;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tracing::{debug, warn};

use crate::config::LogConfig;
use crate::error::{Result, StorageError};
use crate::leader_epoch_cache::LeaderEpochCache;
use crate::loader::LogLoader;
use crate::log_dir_failure::LogDirFailureChannel;
use crate::producer_state::ProducerStateManager;
use crate::segment::LogSegment;
use crate::transaction::AbortedTxn;
use crate::verify::CorruptRange;

/// The mutable state of a log, behind [`PartitionLog`]'s mutex.
#[derive(Debug)]
struct LogState {
    config: Arc<LogConfig>,
    /// By base offset; never empty; the last one is the active segment.
    segments: BTreeMap<i64, LogSegment>,
    log_start_offset: i64,
    log_end_offset: i64,
    /// Offsets below it are readable; never above `log_end_offset`.
    high_watermark: i64,
    /// Where the high watermark sits in the files: reads stop there.
    high_watermark_position: SegmentPosition,
    /// Appends are complete up to here: written, and fsynced where
    /// `flush.messages` asked. Without replication the high watermark is this.
    completed_end: i64,
    /// Where `completed_end` sits in the files.
    completed_position: SegmentPosition,
    /// Replicated: only [`PartitionLog::update_high_watermark`] moves the high watermark.
    replicated: bool,
    /// Replicated: the high watermark last asked for; the high watermark
    /// follows it as far as `completed_end` allows.
    high_watermark_target: i64,
    recovery_point: i64,
    /// Bumped by every truncation. A flush that began before one must not move
    /// the recovery point or the completed end to the log end it saw: those
    /// offsets may since have been cut and written again by a follower's fetch,
    /// unsynced (a power cut would then lose a tail that recovery trusts).
    truncations: u64,
    unflushed_messages: i64,
    last_flush_ms: Option<i64>,
    retention_floor: Option<i64>,
    /// Segment files were created since the directory was last fsynced.
    dir_dirty: bool,
    /// Idempotent producers' epochs and last batches.
    producers: ProducerStateManager,
    /// Offsets of the `.snapshot` files on disk.
    snapshots: BTreeSet<i64>,
    /// Transactions whose marker is written but not yet below the high
    /// watermark (Kafka's unreplicated transactions): first offset → marker
    /// offset. They hold the last stable offset until the high watermark passes the marker.
    unreplicated: BTreeMap<i64, i64>,
    /// Where each leader epoch began in this log.
    epochs: LeaderEpochCache,
    /// The epoch leader appends stamp into their batches (0: the single broker's).
    leader_epoch: i32,
}

/// A byte position in one segment's log file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SegmentPosition {
    segment_base_offset: i64,
    position: u64,
}

impl LogState {
    /// The position of the log end offset: the end of the active segment.
    fn log_end_position(&self) -> SegmentPosition {
        let active = self.active();
        SegmentPosition { segment_base_offset: active.base_offset, position: active.size }
    }

    /// Moves the high watermark up to `offset`, which sits at `position`
    /// (a log end offset and its position seen earlier); never backwards.
    fn advance_high_watermark(&mut self, offset: i64, position: SegmentPosition) {
        if offset > self.high_watermark {
            self.high_watermark = offset;
            self.high_watermark_position = position;
            let hw = self.high_watermark;
            self.unreplicated.retain(|_, &mut marker| marker >= hw);
        }
    }

    /// An append (or a flush) completed the log up to `offset`, at `position`:
    /// without replication the high watermark follows at once.
    fn complete_to(&mut self, offset: i64, position: SegmentPosition) {
        if offset > self.completed_end {
            self.completed_end = offset;
            self.completed_position = position;
        }
        if !self.replicated {
            self.advance_high_watermark(offset, position);
        }
    }

    /// See [`PartitionLog::last_stable_offset`].
    fn last_stable_offset(&self) -> i64 {
        let ongoing = self.producers.first_unstable_offset();
        let unreplicated = self.unreplicated.keys().next().copied();
        let first_unstable = match (ongoing, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        first_unstable
            .map_or(self.high_watermark, |f| f.max(self.log_start_offset).min(self.high_watermark))
    }

    /// Where a read of the segment based at `base_offset` must stop: the
    /// high watermark's position in that segment, its end if the high
    /// watermark lies in a later one, `None` if it lies in an earlier one.
    fn high_watermark_end(&self, base_offset: i64, size: u64) -> Option<u64> {
        let hw = self.high_watermark_position;
        match base_offset.cmp(&hw.segment_base_offset) {
            std::cmp::Ordering::Less => Some(size),
            std::cmp::Ordering::Equal => Some(hw.position.min(size)),
            std::cmp::Ordering::Greater => None,
        }
    }

    /// See [`PartitionLog::local_log_start_offset`].
    fn local_log_start_offset(&self) -> i64 {
        self.segments
            .keys()
            .next()
            .map_or(self.log_start_offset, |&first| first.max(self.log_start_offset))
    }

    fn active(&self) -> &LogSegment {
        self.segments.values().next_back().expect("a log always has an active segment")
    }

    fn active_mut(&mut self) -> &mut LogSegment {
        self.segments.values_mut().next_back().expect("a log always has an active segment")
    }

    /// The segment holding `offset`, or the first one after it.
    fn segment_for(&self, offset: i64) -> Option<&LogSegment> {
        let floor = self.segments.range(..=offset).next_back().map(|(_, s)| s);
        match floor {
            Some(s) if s.next_offset > offset => Some(s),
            _ => self.segments.range(offset + 1..).map(|(_, s)| s).find(|s| !s.is_empty()),
        }
    }
}

/// One partition's log on disk.
///
/// # Thread-safety
/// `Send + Sync`. The mutable state sits behind a `std::sync::Mutex` held for
/// short critical sections only. The one blocking call made under it is the
/// append itself (the `.log` `pwrite` and the small index writes, plus
/// creating files when a segment rolls): appends must be serialised anyway and
/// a write to the page cache is short. Everything slower — fsyncs, header
/// scans and reads for fetches and timestamp lookups, deleting files — runs
/// after the lock is released, on `Arc<File>`s and sizes captured under it.
/// Segments are append-only, so bytes below a captured size never change.
///
/// # Durability
/// An append is in the page cache when `append` returns; it is durable after
/// the next [`PartitionLog::flush`] (driven by `flush.messages`, `flush.ms`,
/// [`PartitionLog::close`] or the caller). After a crash, recovery keeps the
/// longest valid prefix of everything above the recovery point.
#[derive(Debug)]
pub struct PartitionLog {
    topic: String,
    partition: i32,
    dir: PathBuf,
    state: Mutex<LogState>,
    /// Serialises flushes so the recovery point only moves forward.
    flush_lock: Mutex<()>,
    append_notify: Notify,
    deleted: AtomicBool,
    /// The data directory's offline state, shared with every log in it.
    failure: Arc<LogDirFailureChannel>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl PartitionLog {
    /// Opens (recovering if needed) the log in `dir`, creating it if missing.
    /// `recovery_point` and `log_start_offset` come from the checkpoints;
    /// `None` means "unknown" (recover everything; start at the first segment).
    ///
    /// # Errors
    /// [`StorageError::Io`] if the directory cannot be read or repaired.
    pub fn open(
        dir: &Path,
        topic: &str,
        partition: i32,
        config: Arc<LogConfig>,
        recovery_point: Option<i64>,
        log_start_offset: Option<i64>,
    ) -> Result<Self> {
        let loaded = LogLoader {
            dir,
            index_interval_bytes: config.index_interval_bytes,
            recovery_point,
            log_start_offset,
            shared_storage: config.is_shared_storage(),
            gaps_are_damage: !config.cleanup_policy.compact,
        }
        .load()?;
        let epochs = epochs::load(dir, &loaded)?;
        debug!(
            topic,
            partition,
            segments = loaded.segments.len(),
            log_start_offset = loaded.log_start_offset,
            log_end_offset = loaded.log_end_offset,
            "opened partition log"
        );
        let mut state = LogState {
            config,
            segments: loaded.segments,
            log_start_offset: loaded.log_start_offset,
            log_end_offset: loaded.log_end_offset,
            // Everything recovery kept is readable (it was flushed, or was
            // never promised to be).
            high_watermark: loaded.log_end_offset,
            high_watermark_position: SegmentPosition { segment_base_offset: 0, position: 0 },
            completed_end: loaded.log_end_offset,
            completed_position: SegmentPosition { segment_base_offset: 0, position: 0 },
            replicated: false,
            high_watermark_target: loaded.log_end_offset,
            recovery_point: loaded.recovery_point,
            truncations: 0,
            unflushed_messages: 0,
            last_flush_ms: None,
            retention_floor: None,
            dir_dirty: false,
            producers: loaded.producers,
            snapshots: loaded.snapshots,
            unreplicated: BTreeMap::new(),
            // Until told otherwise, appends go on in the latest epoch written:
            // a default below it would wipe the epochs above it from the cache.
            leader_epoch: epochs.latest_epoch().unwrap_or(0),
            epochs,
        };
        state.high_watermark_position = state.log_end_position();
        state.completed_position = state.high_watermark_position;
        Ok(Self {
            topic: topic.to_string(),
            partition,
            dir: dir.to_path_buf(),
            state: Mutex::new(state),
            flush_lock: Mutex::new(()),
            append_notify: Notify::new(),
            deleted: AtomicBool::new(false),
            failure: Arc::new(LogDirFailureChannel::new(dir)),
        })
    }

    /// Makes the log share `failure` (its data directory's offline state)
    /// instead of one of its own; `LogManager` does this for every log.
    pub(crate) fn with_failure_channel(mut self, failure: Arc<LogDirFailureChannel>) -> Self {
        self.failure = failure;
        self
    }

    /// `Err(LogDirOffline)` once the log's directory is offline. Handlers that
    /// answer from in-memory offsets call it so those answers fail too.
    ///
    /// # Errors
    /// [`StorageError::LogDirOffline`].
    pub fn check_online(&self) -> Result<()> {
        self.failure.check()
    }

    /// Takes the directory offline if `result` is an I/O error (see
    /// [`crate::log_dir_failure`]), and passes it on.
    fn offline_on_io_error<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(e @ StorageError::Io { .. }) = &result {
            self.failure.mark_offline(e);
        }
        result
    }

    /// A full disk refuses an append that left nothing behind (the segment
    /// was cut back, or the roll created nothing in use): the producer gets
    /// KAFKA_STORAGE_ERROR and can produce again once space is freed. Any
    /// other I/O error takes the directory offline.
    fn refuse_or_go_offline(&self, result: Result<()>) -> Result<()> {
        match result {
            Err(e) if e.is_out_of_space() => Err(e),
            other => self.offline_on_io_error(other),
        }
    }

    /// The topic's name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The partition index.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn state(&self) -> MutexGuard<'_, LogState> {
        lock(&self.state)
    }

    fn check_live(&self) -> Result<()> {
        if self.deleted.load(Ordering::Acquire) {
            return Err(StorageError::UnknownTopicOrPartition {
                topic: self.topic.clone(),
                partition: Some(self.partition),
            });
        }
        self.failure.check()
    }

    /// Marks the log deleted: later calls fail with `UnknownTopicOrPartition`, drop does not flush.
    pub(crate) fn mark_deleted(&self) {
        self.deleted.store(true, Ordering::Release);
        self.append_notify.notify_waiters();
    }

    /// Replaces the configuration (AlterConfigs); applies from the next append or maintenance run.
    pub fn set_config(&self, config: Arc<LogConfig>) {
        self.state().config = config;
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<LogConfig> {
        self.state().config.clone()
    }

    /// Notified (`notify_waiters`) after every successful append, and when the
    /// log is deleted: long-polling fetches wait on it. `notify_waiters` stores
    /// no permit, so a waiter must create and `enable()` its `Notified` before
    /// re-checking the log end offset, or it can miss an append.
    pub fn append_notify(&self) -> &Notify {
        &self.append_notify
    }

    /// First offset a consumer can fetch.
    pub fn log_start_offset(&self) -> i64 {
        self.state().log_start_offset
    }

    /// The local log start offset (KIP-405): the first offset held in a local
    /// segment, the base of the first one, or the log start offset when that
    /// lies inside it (`log start <= local log start` always). Equal to the
    /// log start offset in copy mode; in shared storage
    /// ([`LogConfig::is_shared_storage`]) local retention moves it alone and
    /// the offsets of `[log start, local log start)` are in the Iceberg table
    /// only. Computed from the segments, so it needs no checkpoint: a reopened
    /// log finds it where its first segment begins.
    pub fn local_log_start_offset(&self) -> i64 {
        self.state().local_log_start_offset()
    }

    /// The local segments' aborted transactions whose first offset is below
    /// `upper` (their markers are all local): with a table-served range that
    /// ends at `upper`, Kafka's rule (every abort marker at or after the fetch
    /// offset whose transaction starts below the range's end) takes these from
    /// the local `.txnindex` and the rest from the table.
    pub fn local_aborted_transactions_before(&self, upper: i64) -> Vec<AbortedTxn> {
        self.state()
            .segments
            .values()
            .flat_map(|s| s.txn_index.entries().iter().copied())
            .filter(|a| a.first_offset < upper)
            .collect()
    }

    /// Next offset to be assigned.
    pub fn log_end_offset(&self) -> i64 {
        self.state().log_end_offset
    }

    /// Offsets below it are readable by consumers: the log end offset, once
    /// the fsync that `flush.messages` asked of the last append has returned;
    /// for a replicated log, what [`PartitionLog::update_high_watermark`] set.
    pub fn high_watermark(&self) -> i64 {
        self.state().high_watermark
    }

    /// Offsets below it are fsynced, and recovery may trust them without a
    /// scan. Held at the base of the first segment with a damaged range, so
    /// every start scans that segment again and reports the damage again.
    pub fn recovery_point(&self) -> i64 {
        let st = self.state();
        let damaged = st.segments.values().find(|s| !s.corrupt.is_empty());
        damaged.map_or(st.recovery_point, |s| st.recovery_point.min(s.base_offset))
    }

    /// The damaged ranges recovery found and kept (see [`crate::verify`]), in log order.
    pub fn corrupt_ranges(&self) -> Vec<CorruptRange> {
        let st = self.state();
        st.segments.values().flat_map(|s| s.corrupt.iter().cloned()).collect()
    }

    /// Total bytes of all segments.
    pub fn size_bytes(&self) -> u64 {
        self.state().segments.values().map(|s| s.size).sum()
    }

    /// Number of segments, the active one included.
    pub fn segment_count(&self) -> usize {
        self.state().segments.len()
    }

    /// Kafka's last stable offset: the first offset of the oldest transaction
    /// not yet complete (ongoing, or its marker still above the high
    /// watermark), never below the log start offset, capped by the high watermark.
    pub fn last_stable_offset(&self) -> i64 {
        self.state().last_stable_offset()
    }

    /// Flushes everything; call on shutdown (dropping the log does it too, logging failures).
    ///
    /// # Errors
    /// As [`PartitionLog::flush`].
    pub fn close(&self) -> Result<()> {
        if self.deleted.load(Ordering::Acquire) || self.failure.is_offline() {
            // An offline directory is not written again: the restart recovers it.
            return Ok(());
        }
        self.flush()?;
        // As Kafka at shutdown: a snapshot at the log end, so the next start reads no headers.
        let mut st = self.state();
        if !st.snapshots.contains(&st.log_end_offset) {
            self.take_snapshot(&mut st);
        }
        Ok(())
    }
}

impl Drop for PartitionLog {
    fn drop(&mut self) {
        if !self.deleted.load(Ordering::Acquire) && self.needs_flush() {
            if let Err(e) = self.flush() {
                warn!(topic = %self.topic, partition = self.partition, error = %e, "flush on drop failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::test_helpers::open;
    use super::PartitionLog;
    use crate::test_util::{batch, config, decode};

    #[test]
    fn partition_log_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<PartitionLog>();
        check::<crate::LogManager>();
        check::<crate::Topic>();
    }

    #[test]
    fn concurrent_appends_and_reads() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(open(dir.path(), config(&[("segment.bytes", "3000")])));
        let writers: Vec<_> = (0..4)
            .map(|_| {
                let log = log.clone();
                std::thread::spawn(move || {
                    (0..50)
                        .map(|_| log.append(&mut batch(2, 1, 50), 0).unwrap().first_offset)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let reader = {
            let log = log.clone();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    let hw = log.high_watermark();
                    let mut offset = 0;
                    while offset < hw {
                        let bytes = log
                            .read(offset, 1 << 20, true, crate::IsolationLevel::ReadUncommitted)
                            .unwrap()
                            .region
                            .unwrap()
                            .read_to_vec()
                            .unwrap();
                        let recs = decode(&bytes);
                        assert_eq!(recs[0].0, offset);
                        offset = recs.last().unwrap().0 + 1;
                    }
                }
            })
        };
        let mut firsts: Vec<i64> = writers.into_iter().flat_map(|w| w.join().unwrap()).collect();
        reader.join().unwrap();
        firsts.sort_unstable();
        assert_eq!(firsts, (0..200).map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(log.log_end_offset(), 400);
    }
}
