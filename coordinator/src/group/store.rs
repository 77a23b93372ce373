//! `OffsetStore`: the `__consumer_offsets` log — creating it, appending to
//! it off the request workers, and replaying it at startup.
//!
//! # Durability
//! A write is acknowledged (its callback runs with `Ok`) only after the
//! records are appended and the log is fsynced. Writes are applied to the
//! log, and their callbacks run, in submission order on one thread, so the
//! in-memory state the callbacks update always matches what a replay of the
//! log rebuilds. Concurrent writes are grouped: one append and one fsync for
//! everything queued.
//!
//! # Transactional offsets
//! TxnOffsetCommit writes its records as a transactional batch of the
//! producer (id, epoch, no sequence: Kafka's coordinator-origin append), and
//! the transaction coordinator later has a COMMIT or ABORT marker appended
//! ([`OffsetStore::marker`]), in order with every other write. Replay keeps a
//! producer's transactional records aside and applies them at its COMMIT
//! marker (drops them at ABORT), so after a restart offsets of an open
//! transaction are pending again and committed ones are where the commit put
//! them. While any transaction is open the writer never compacts the log
//! itself (below): the re-append would leave its records behind, in
//! segments about to be deleted.
//!
//! # Compaction
//! The topic is compacted (`cleanup.policy=compact`, as in Kafka): the log
//! cleaner keeps the latest record of every key, so an offset's older
//! commits and a group's older metadata go, and so do tombstones once
//! `delete.retention.ms` has passed. That is safe because every removal is
//! written as a tombstone of its own key: DeleteGroups and OffsetDelete,
//! and offset expiry, tombstone each offset, not just the group, so no
//! offset of a deleted group can come back when the group's tombstone is
//! cleaned away. A data directory from before the cleaner gets the policy
//! set when the log is opened.
//!
//! Before Floe had a log cleaner the writer thread compacted the log
//! itself, and it still does if an operator set `cleanup.policy=delete`. The
//! topic keeps `retention.ms=-1` so that time retention cannot drop live
//! offsets. The writer thread keeps [`LiveRecords`] — what a replay of the
//! log rebuilds — and when the log holds much more than that (more than
//! [`CompactionConfig::min_bytes`] and more than
//! [`CompactionConfig::dirty_ratio`] times as many records as are live) it
//! compacts it in three steps:
//! 1. roll the active segment, so the next append starts a new one at offset `C`;
//! 2. re-append every live record (committed offsets and group metadata not
//!    superseded or tombstoned) from `C` on, and fsync;
//! 3. `delete_records_before(C)`: the log start offset moves to `C` and the
//!    segments below it, all sealed by step 1, are deleted.
//!
//! Crash safety: replay applies records in order, last write wins per key
//! (a group tombstone also drops the group's offsets, in replay and in
//! `LiveRecords` alike). Let `L` be the state the records before `C` build.
//! A crash before step 2 is durable leaves the old log plus perhaps a prefix
//! of the re-append (recovery truncates a torn batch): replaying it yields `L`
//! and then values `L` already holds, so `L`. A crash after step 2 but before
//! step 3 (or before the log start checkpoint is written) replays from any
//! start `S ≤ C`: the records in `[S, C)` build a state that agrees with `L`
//! on every key they touch and holds no key `L` lacks (a key's last record
//! before `C` is the same whether counted from the old start or from `S`;
//! segments are only ever deleted from the front), and the re-append then
//! writes every key of `L`: `L` again. After step 3 replay starts at `C`
//! and reads `L` directly. Records appended after `C` apply on top in every
//! case, so all three replays end in the same state.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use floe_protocol::record_batch::BatchIter;
use floe_storage::{ControlRecordType, LogManager, PartitionLog, StorageError};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::records::{self, GroupMetadata, LogEntry, OffsetAndMetadata};
use crate::clock::wall_ms;
use crate::replicated::{CoordinatorTerm, ReplicationError};

/// The internal topic's name, as in Kafka.
pub use floe_protocol::topic::OFFSETS_TOPIC;

/// Topic settings of the internal topic.
const OFFSETS_TOPIC_CONFIG: &[(&str, &str)] = &[
    ("cleanup.policy", "compact"),
    ("retention.ms", "-1"),
    ("retention.bytes", "-1"),
    ("segment.bytes", "104857600"),
    ("max.message.bytes", "10485760"),
];

/// The internal topic's settings, for creating it (in a cluster, through the cluster's metadata).
pub fn offsets_topic_config() -> BTreeMap<String, String> {
    OFFSETS_TOPIC_CONFIG.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Records per batch when the live state is re-appended (well below `max.message.bytes`).
const COMPACTION_BATCH_RECORDS: usize = 2000;

/// Why the log could not be written or read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The storage layer failed.
    #[error("__consumer_offsets: {0}")]
    Storage(String),
    /// A record could not be encoded or a batch decoded.
    #[error("__consumer_offsets: {0}")]
    Format(String),
    /// This broker does not coordinate (any more) for the partition: NOT_COORDINATOR.
    #[error("__consumer_offsets: {0}")]
    NotCoordinator(String),
    /// The in-sync replicas did not take the write: COORDINATOR_NOT_AVAILABLE.
    #[error("__consumer_offsets: {0}")]
    NotReplicated(String),
}

impl From<ReplicationError> for StoreError {
    fn from(e: ReplicationError) -> Self {
        match e {
            ReplicationError::NotLeader(m) => StoreError::NotCoordinator(m),
            ReplicationError::NotReplicated(m) => StoreError::NotReplicated(m),
        }
    }
}

impl StoreError {
    /// The Kafka error a client gets for a write that failed so.
    pub fn response_error(&self) -> kafka_protocol::error::ResponseError {
        use kafka_protocol::error::ResponseError;
        match self {
            StoreError::NotCoordinator(_) => ResponseError::NotCoordinator,
            StoreError::NotReplicated(_) => ResponseError::CoordinatorNotAvailable,
            StoreError::Storage(_) | StoreError::Format(_) => ResponseError::UnknownServerError,
        }
    }
}

impl From<StorageError> for StoreError {
    fn from(e: StorageError) -> Self {
        StoreError::Storage(e.to_string())
    }
}

/// A key and a value (`None`: a tombstone).
pub type LogRecord = (Bytes, Option<Bytes>);

/// Runs on the writer thread after the write, in log order.
pub type WriteCallback = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// Fails a write the gone writer thread will never run, on a thread of its
/// own: the caller may hold a lock `done` takes (this happens at shutdown only).
fn fail_elsewhere(done: WriteCallback) {
    let fail = move || done(Err(StoreError::Storage("the writer thread is gone".into())));
    if let Err(e) = std::thread::Builder::new().name("offsets-write-failed".into()).spawn(fail) {
        // No thread to run it on: the callback is lost with the closure, and
        // its waiter sees a closed channel (an error) instead.
        tracing::warn!(error = %e, "__consumer_offsets: could not fail a write on a thread of its own");
    }
}

/// Runs on the writer thread after a requested compaction.
pub type CompactCallback = Box<dyn FnOnce(Result<Option<Compacted>, StoreError>) + Send>;

/// When the writer thread compacts the log on its own.
#[derive(Debug, Clone, Copy)]
pub struct CompactionConfig {
    /// The log must be larger than this many bytes.
    pub min_bytes: u64,
    /// … and hold more than this many times as many records as are live.
    pub dirty_ratio: u64,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self { min_bytes: 16 << 20, dirty_ratio: 2 }
    }
}

/// What one compaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    /// Live records re-appended.
    pub live_records: usize,
    /// The new log start offset (`C`).
    pub log_start_offset: i64,
    /// Log size before and after, in bytes.
    pub bytes_before: u64,
    /// Log size after.
    pub bytes_after: u64,
}

/// What a replay of the log rebuilds, by group: the last value of every key.
/// Kept by the writer thread so it can re-append the live state.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LiveRecords {
    groups: BTreeMap<String, LiveGroup>,
    count: usize,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct LiveGroup {
    metadata: Option<GroupMetadata>,
    offsets: BTreeMap<(String, i32), OffsetAndMetadata>,
}

impl LiveRecords {
    /// Applies one record as replay does (a group tombstone drops the group's offsets too).
    pub fn apply(&mut self, entry: &LogEntry) {
        match entry {
            LogEntry::Offset { group, topic, partition, value } => {
                let g = self.groups.entry(group.clone()).or_default();
                match value {
                    Some(v) => g.offsets.insert((topic.clone(), *partition), v.clone()),
                    None => g.offsets.remove(&(topic.clone(), *partition)),
                };
                if g.offsets.is_empty() && g.metadata.is_none() {
                    self.groups.remove(group);
                }
            }
            LogEntry::Group { group, value: Some(meta) } => {
                self.groups.entry(group.clone()).or_default().metadata = Some(meta.clone());
            }
            LogEntry::Group { group, value: None } => {
                self.groups.remove(group);
            }
        }
        self.count =
            self.groups.values().map(|g| g.offsets.len() + usize::from(g.metadata.is_some())).sum();
    }

    /// Number of live records.
    pub fn len(&self) -> usize {
        self.count
    }

    /// No live records.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Every live record, group by group (its offsets, then its metadata).
    pub fn records(&self) -> impl Iterator<Item = LogRecord> + '_ {
        self.groups.iter().flat_map(|(id, g)| {
            let offsets = g.offsets.iter().map(move |((t, p), o)| {
                (records::offset_key(id, t, *p), Some(records::offset_value(o)))
            });
            let meta = g
                .metadata
                .iter()
                .map(move |m| (records::group_key(id), Some(records::group_value(m))));
            offsets.chain(meta)
        })
    }
}

enum Job {
    /// Records to append; `producer` makes them a transactional batch of that producer id and epoch (TxnOffsetCommit).
    /// `term` is the coordinator's term (leader epoch) the write was made in.
    Write {
        records: Vec<LogRecord>,
        producer: Option<(i64, i16)>,
        term: i32,
        done: WriteCallback,
    },
    /// A transaction marker for a producer's pending offsets: COMMIT makes them live.
    /// `coordinator_epoch` is the transaction coordinator's, fencing an older one's markers.
    Marker {
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
        term: i32,
        done: WriteCallback,
    },
    /// The replay finished: the live state to start from, and the offsets of
    /// transactions still open; compaction may run from now on.
    Loaded(LiveRecords, PendingTxnOffsets),
    Compact(CompactCallback),
}

/// Offsets committed inside transactions that have no marker yet, by producer id, in log order.
pub type PendingTxnOffsets = HashMap<i64, Vec<LogEntry>>;

/// What one queued write is: its records, its producer (transactional), its term, its callback.
type WriteJob = (Vec<LogRecord>, Option<(i64, i16)>, i32, WriteCallback);

/// The writer side of the log: a queue feeding one thread.
pub struct OffsetStore {
    tx: std::sync::Mutex<mpsc::Sender<Job>>,
    term: Arc<CoordinatorTerm>,
}

impl std::fmt::Debug for OffsetStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffsetStore").finish_non_exhaustive()
    }
}

impl OffsetStore {
    /// Starts the writer thread. It exits when the store is dropped.
    ///
    /// # Errors
    /// If the thread cannot be spawned.
    pub fn start(
        logs: Arc<LogManager>,
        partition: i32,
        compaction: CompactionConfig,
        term: Arc<CoordinatorTerm>,
    ) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let gate = term.clone();
        std::thread::Builder::new().name(format!("floe-group-log-{partition}")).spawn(move || {
            let logs = Target { logs, partition };
            let mut live: Option<LiveRecords> = None;
            // Offsets of open transactions: they become live at a COMMIT marker. While any
            // exist the log is not compacted, as the re-append would leave them behind.
            let mut pending = PendingTxnOffsets::new();
            while let Ok(first) = rx.recv() {
                let mut jobs: Vec<WriteJob> = Vec::new();
                let mut next = Some(first);
                while let Some(job) = next.take() {
                    match job {
                        Job::Write { records, producer, term, done } => jobs.push((records, producer, term, done)),
                        Job::Loaded(state, open) => {
                            live = Some(state);
                            pending = open;
                        }
                        Job::Marker { producer_id, producer_epoch, commit, coordinator_epoch, term, done } => {
                            // Writes queued before the marker go first.
                            write_all(&logs, &gate, std::mem::take(&mut jobs), live.as_mut(), &mut pending);
                            let result = write_marker(&logs, &gate, term, producer_id, producer_epoch, commit, coordinator_epoch);
                            if result.is_ok() {
                                let entries = pending.remove(&producer_id).unwrap_or_default();
                                if let (true, Some(live)) = (commit, live.as_mut()) {
                                    entries.iter().for_each(|e| live.apply(e));
                                }
                            }
                            done(result);
                        }
                        Job::Compact(done) => {
                            // Writes queued before the request go first.
                            write_all(&logs, &gate, std::mem::take(&mut jobs), live.as_mut(), &mut pending);
                            done(match &live {
                                Some(l) if pending.is_empty() => compact(&logs, &gate, l, true).map(Some),
                                _ => Ok(None),
                            });
                        }
                    }
                    if jobs.len() < 256 {
                        next = rx.try_recv().ok();
                    }
                }
                write_all(&logs, &gate, jobs, live.as_mut(), &mut pending);
                if let (Some(l), true) = (&live, pending.is_empty()) {
                    if let Err(e) = maybe_compact(&logs, &gate, l, compaction) {
                        tracing::error!(partition, error = %e, "compacting __consumer_offsets failed");
                    }
                }
            }
        })?;
        Ok(Self { tx: std::sync::Mutex::new(tx), term })
    }

    fn send(&self, job: Job) -> Result<(), Job> {
        let tx = self.tx.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        tx.send(job).map_err(|mpsc::SendError(job)| job)
    }

    /// Queues `records`; `done` runs on the writer thread once they are durable (or failed).
    /// Never blocks, and `done` never runs on the caller's thread: safe to call under a
    /// lock that `done` takes.
    pub fn append(&self, records: Vec<LogRecord>, done: WriteCallback) {
        self.append_as(records, None, done);
    }

    /// Queues `records` as a transactional batch of `producer` (id, epoch): TxnOffsetCommit.
    /// They are pending until [`OffsetStore::marker`] writes the transaction's marker.
    pub fn append_transactional(
        &self,
        records: Vec<LogRecord>,
        producer: (i64, i16),
        done: WriteCallback,
    ) {
        self.append_as(records, Some(producer), done);
    }

    fn append_as(
        &self,
        records: Vec<LogRecord>,
        producer: Option<(i64, i16)>,
        done: WriteCallback,
    ) {
        let term = self.term.epoch();
        if let Err(Job::Write { done, .. }) =
            self.send(Job::Write { records, producer, term, done })
        {
            fail_elsewhere(done);
        }
    }

    /// Queues a transaction marker for `producer_id`'s pending offsets; `done`
    /// runs once it is durable (after the writes queued before it).
    pub fn marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
        done: WriteCallback,
    ) {
        let term = self.term.epoch();
        let job =
            Job::Marker { producer_id, producer_epoch, commit, coordinator_epoch, term, done };
        if let Err(Job::Marker { done, .. }) = self.send(job) {
            fail_elsewhere(done);
        }
    }

    /// Hands the writer thread the state the replay rebuilt and the offsets
    /// of open transactions; compaction is enabled from then on.
    pub fn loaded(&self, live: LiveRecords, pending: PendingTxnOffsets) {
        let _ = self.send(Job::Loaded(live, pending));
    }

    /// Compacts the log now (after the writes queued before); `done` gets
    /// `None` if the log was not loaded yet.
    pub fn compact(&self, done: CompactCallback) {
        if let Err(Job::Compact(done)) = self.send(Job::Compact(done)) {
            done(Err(StoreError::Storage("the writer thread is gone".into())));
        }
    }
}

/// Writes the jobs (one append, one fsync, and in a cluster one wait for the
/// in-sync replicas), updates `live`, runs the callbacks. Jobs of an older term
/// fail without being written.
fn write_all(
    logs: &Target,
    gate: &CoordinatorTerm,
    jobs: Vec<WriteJob>,
    mut live: Option<&mut LiveRecords>,
    pending: &mut PendingTxnOffsets,
) {
    if jobs.is_empty() {
        return;
    }
    let term = gate.epoch();
    let (jobs, stale): (Vec<WriteJob>, Vec<WriteJob>) =
        jobs.into_iter().partition(|(_, _, t, _)| *t == term);
    for (_, _, t, done) in stale {
        done(Err(StoreError::NotCoordinator(format!(
            "a write of the coordinator's term {t} reached term {term}"
        ))));
    }
    if jobs.is_empty() {
        return;
    }
    let result =
        write(logs, gate, term, jobs.iter().map(|(r, producer, _, _)| (r.as_slice(), *producer)));
    match &result {
        Err(e) => tracing::error!(error = %e, "writing __consumer_offsets failed"),
        Ok(()) => {
            for (records, producer, _, _) in &jobs {
                for (key, value) in records {
                    let Ok(entry) = records::decode(Some(key), value.as_ref()) else { continue };
                    match producer {
                        Some((producer_id, _)) => {
                            pending.entry(*producer_id).or_default().push(entry)
                        }
                        None => {
                            if let Some(live) = live.as_deref_mut() {
                                live.apply(&entry);
                            }
                        }
                    }
                }
            }
        }
    }
    for (_, _, _, done) in jobs {
        done(result.clone());
    }
}

/// Appends a COMMIT or ABORT marker for `producer_id` and fsyncs (and waits for the
/// in-sync replicas).
fn write_marker(
    logs: &Target,
    gate: &CoordinatorTerm,
    term: i32,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
) -> Result<(), StoreError> {
    let log = offsets_log(logs)?;
    gate.before_append(&log, term)?;
    let marker = if commit { ControlRecordType::Commit } else { ControlRecordType::Abort };
    let offset =
        log.append_txn_marker(producer_id, producer_epoch, marker, coordinator_epoch, wall_ms())?;
    log.flush()?;
    gate.after_append(&log, offset + 1)?;
    Ok(())
}

/// One partition of the topic: the log a writer thread writes.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) logs: Arc<LogManager>,
    pub(crate) partition: i32,
}

fn offsets_log(logs: &Target) -> Result<Arc<PartitionLog>, StoreError> {
    let p = logs.partition;
    logs.logs
        .partition(OFFSETS_TOPIC, p)
        .ok_or_else(|| StoreError::Storage(format!("the log of partition {p} does not exist")))
}

fn encode_batch(
    buf: &mut BytesMut,
    records: &[LogRecord],
    now: i64,
    producer: Option<(i64, i16)>,
) -> Result<(), StoreError> {
    let (producer_id, producer_epoch) = producer.unwrap_or((-1, -1));
    let batch: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional: producer.is_some(),
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: -1,
            timestamp: now,
            key: Some(key.clone()),
            value: value.clone(),
            headers: Default::default(),
        })
        .collect();
    RecordBatchEncoder::encode(
        buf,
        batch.iter(),
        &RecordEncodeOptions { version: 2, compression: Compression::None },
    )
    .map_err(|e| StoreError::Format(e.to_string()))
}

/// Appends one batch per job, then fsyncs (then, in a cluster, waits for the in-sync replicas).
fn write<'a>(
    logs: &Target,
    gate: &CoordinatorTerm,
    term: i32,
    jobs: impl Iterator<Item = (&'a [LogRecord], Option<(i64, i16)>)>,
) -> Result<(), StoreError> {
    let log = offsets_log(logs)?;
    gate.before_append(&log, term)?;
    let now = wall_ms();
    let mut buf = BytesMut::new();
    for (records, producer) in jobs {
        if !records.is_empty() {
            encode_batch(&mut buf, records, now, producer)?;
        }
    }
    if buf.is_empty() {
        return Ok(());
    }
    let appended = log.append_as(&mut buf, now, floe_storage::AppendOrigin::Coordinator)?;
    // Appended, not yet fsynced nor acknowledged: a crash here must cost nothing acknowledged.
    if let Err(source) = floe_storage::failpoint::check("group.offsets.write") {
        let e = StorageError::Io {
            context: "fsync group offsets",
            path: log.dir().to_path_buf(),
            source,
        };
        logs.logs.log_dir_failure().mark_offline(&e);
        return Err(e.into());
    }
    log.flush()?;
    gate.after_append(&log, appended.last_offset + 1)?;
    Ok(())
}

fn maybe_compact(
    logs: &Target,
    gate: &CoordinatorTerm,
    live: &LiveRecords,
    cfg: CompactionConfig,
) -> Result<(), StoreError> {
    let log = offsets_log(logs)?;
    if log.config().cleanup_policy.compact {
        return Ok(()); // the log cleaner's job
    }
    let records = (log.log_end_offset() - log.log_start_offset()).max(0) as u64;
    if log.size_bytes() <= cfg.min_bytes
        || records <= cfg.dirty_ratio.saturating_mul(live.len() as u64)
    {
        return Ok(());
    }
    compact(logs, gate, live, true).map(|_| ())
}

/// Rolls, re-appends `live` and fsyncs; then, if `delete`, moves the log
/// start offset past everything before the re-append (see the module doc).
/// `delete: false` stops where a crash between the steps would.
pub(crate) fn compact(
    logs: &Target,
    gate: &CoordinatorTerm,
    live: &LiveRecords,
    delete: bool,
) -> Result<Compacted, StoreError> {
    let log = offsets_log(logs)?;
    gate.before_append(&log, gate.epoch())?;
    let started = std::time::Instant::now();
    let bytes_before = log.size_bytes();
    log.roll_now()?;
    let first = log.log_end_offset();
    let now = wall_ms();
    let all: Vec<LogRecord> = live.records().collect();
    for chunk in all.chunks(COMPACTION_BATCH_RECORDS) {
        let mut buf = BytesMut::new();
        encode_batch(&mut buf, chunk, now, None)?;
        log.append(&mut buf, now)?;
    }
    log.flush()?;
    gate.after_append(&log, log.log_end_offset())?;
    if delete {
        log.delete_records_before(first)?;
    }
    let done = Compacted {
        live_records: all.len(),
        log_start_offset: log.log_start_offset(),
        bytes_before,
        bytes_after: log.size_bytes(),
    };
    tracing::info!(
        live = done.live_records,
        log_start_offset = done.log_start_offset,
        bytes_before,
        bytes_after = done.bytes_after,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "compacted __consumer_offsets"
    );
    Ok(done)
}

/// Creates the internal topic with `partitions` partitions if it does not exist, and
/// hands an older one to the log cleaner; its partition count.
///
/// # Errors
/// [`StoreError::Storage`].
pub fn create_log(logs: &LogManager, partitions: i32) -> Result<i32, StoreError> {
    match logs.topic(OFFSETS_TOPIC) {
        None => {
            logs.create_topic(OFFSETS_TOPIC, partitions, offsets_topic_config())?;
            tracing::info!(partitions, "created {OFFSETS_TOPIC}");
            Ok(partitions)
        }
        Some(topic) => {
            let mut overrides = topic.overrides();
            if !overrides.contains_key("cleanup.policy") {
                // Created before Floe had a log cleaner: hand the topic to it, as Kafka's is.
                overrides.insert("cleanup.policy".into(), "compact".into());
                logs.alter_topic_config(OFFSETS_TOPIC, overrides)?;
                tracing::info!(
                    "{OFFSETS_TOPIC} is now compacted by the log cleaner (cleanup.policy=compact)"
                );
            }
            Ok(topic.partition_count())
        }
    }
}

/// Opens `partition` of the internal topic, creating the topic (with one partition)
/// if it does not exist.
///
/// # Errors
/// [`StoreError::Storage`].
pub fn open_log(logs: &LogManager, partition: i32) -> Result<Arc<PartitionLog>, StoreError> {
    create_log(logs, 1)?;
    logs.partition(OFFSETS_TOPIC, partition)
        .ok_or_else(|| StoreError::Storage(format!("partition {partition} is missing")))
}

/// Reads the whole log in order, calling `apply` for every record.
/// Undecodable records are logged and skipped.
///
/// # Errors
/// [`StoreError`] if the log cannot be read or a batch does not decode.
pub fn replay(
    log: &PartitionLog,
    mut apply: impl FnMut(LogEntry),
) -> Result<(u64, PendingTxnOffsets), StoreError> {
    // To the log end, past the high watermark: a new leader's tail is the partition's
    // history from now on (its followers truncate to it), as Kafka's loader reads it.
    let mut offset = log.log_start_offset();
    let end = log.log_end_offset();
    let mut count = 0u64;
    // Offsets of transactions (TxnOffsetCommit) apply at their COMMIT marker, in marker order.
    let mut pending = PendingTxnOffsets::new();
    while offset < end {
        let info = log.read_for_replica(offset, 8 << 20, true)?;
        let Some(region) = info.region else { break };
        let buf =
            Bytes::from(region.read_to_vec().map_err(|e| StoreError::Storage(e.to_string()))?);
        let mut progressed = false;
        for b in BatchIter::new(&buf) {
            let Ok(b) = b else { break };
            let mut batch = buf.slice(b.position..b.end());
            let set = RecordBatchDecoder::decode(&mut batch)
                .map_err(|e| StoreError::Format(e.to_string()))?;
            let producer_id = b.header.producer_id;
            for r in set.records {
                if r.offset < offset {
                    continue;
                }
                if r.control {
                    // Key: version i16, type i16 (0 ABORT, 1 COMMIT).
                    let commit = r
                        .key
                        .as_ref()
                        .is_some_and(|k| k.len() >= 4 && i16::from_be_bytes([k[2], k[3]]) == 1);
                    let entries = pending.remove(&producer_id).unwrap_or_default();
                    if commit {
                        count += entries.len() as u64;
                        entries.into_iter().for_each(&mut apply);
                    }
                    continue;
                }
                match records::decode(r.key.as_ref(), r.value.as_ref()) {
                    Ok(entry) if b.header.is_transactional() => {
                        pending.entry(producer_id).or_default().push(entry)
                    }
                    Ok(entry) => {
                        apply(entry);
                        count += 1;
                    }
                    Err(e) => tracing::warn!(offset = r.offset, error = %e, "skipping record"),
                }
            }
            offset = b.header.next_offset();
            progressed = true;
        }
        if !progressed {
            return Err(StoreError::Format(format!("no whole batch at offset {offset}")));
        }
    }
    Ok((count, pending))
}
