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
//! The log is never compacted (Floe has no log cleaner yet); it is created
//! with `retention.ms=-1` so that time retention cannot drop live offsets.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use floe_protocol::record_batch::BatchIter;
use floe_storage::{LogManager, PartitionLog, StorageError};
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

use super::group::wall_ms;
use super::records::{self, LogEntry};

/// The internal topic's name, as in Kafka.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Topic settings of the internal topic.
const OFFSETS_TOPIC_CONFIG: &[(&str, &str)] = &[
    ("retention.ms", "-1"),
    ("retention.bytes", "-1"),
    ("segment.bytes", "104857600"),
    ("max.message.bytes", "10485760"),
];

/// Why the log could not be written or read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The storage layer failed.
    #[error("__consumer_offsets: {0}")]
    Storage(String),
    /// A record could not be encoded or a batch decoded.
    #[error("__consumer_offsets: {0}")]
    Format(String),
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

struct WriteJob {
    records: Vec<LogRecord>,
    done: WriteCallback,
}

/// The writer side of the log: a queue feeding one thread.
pub struct OffsetStore {
    tx: std::sync::Mutex<mpsc::Sender<WriteJob>>,
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
    pub fn start(logs: Arc<LogManager>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<WriteJob>();
        std::thread::Builder::new().name("floe-group-log".into()).spawn(move || {
            while let Ok(first) = rx.recv() {
                let mut jobs = vec![first];
                while jobs.len() < 256 {
                    match rx.try_recv() {
                        Ok(j) => jobs.push(j),
                        Err(_) => break,
                    }
                }
                let result = write(&logs, &jobs);
                if let Err(e) = &result {
                    tracing::error!(error = %e, "writing __consumer_offsets failed");
                }
                for j in jobs {
                    (j.done)(result.clone());
                }
            }
        })?;
        Ok(Self { tx: std::sync::Mutex::new(tx) })
    }

    /// Queues `records`; `done` runs on the writer thread once they are durable (or failed).
    /// Never blocks: safe to call under a group's lock.
    pub fn append(&self, records: Vec<LogRecord>, done: WriteCallback) {
        let job = WriteJob { records, done };
        let tx = self.tx.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(mpsc::SendError(job)) = tx.send(job) {
            (job.done)(Err(StoreError::Storage("the writer thread is gone".into())));
        }
    }
}

fn write(logs: &LogManager, jobs: &[WriteJob]) -> Result<(), StoreError> {
    let log = logs.partition(OFFSETS_TOPIC, 0).ok_or_else(|| StoreError::Storage("the log does not exist".into()))?;
    let now = wall_ms();
    let mut buf = BytesMut::new();
    for job in jobs {
        if job.records.is_empty() {
            continue;
        }
        let batch: Vec<Record> = job
            .records
            .iter()
            .enumerate()
            .map(|(i, (key, value))| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: -1,
                timestamp: now,
                key: Some(key.clone()),
                value: value.clone(),
                headers: Default::default(),
            })
            .collect();
        RecordBatchEncoder::encode(&mut buf, batch.iter(), &RecordEncodeOptions { version: 2, compression: Compression::None })
            .map_err(|e| StoreError::Format(e.to_string()))?;
    }
    if buf.is_empty() {
        return Ok(());
    }
    log.append(&mut buf, now)?;
    log.flush()?;
    Ok(())
}

/// Creates the internal topic if it does not exist and returns its log.
///
/// # Errors
/// [`StoreError::Storage`].
pub fn open_log(logs: &LogManager) -> Result<Arc<PartitionLog>, StoreError> {
    if logs.topic(OFFSETS_TOPIC).is_none() {
        let config: BTreeMap<String, String> = OFFSETS_TOPIC_CONFIG.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        logs.create_topic(OFFSETS_TOPIC, 1, config)?;
        tracing::info!("created {OFFSETS_TOPIC}");
    }
    logs.partition(OFFSETS_TOPIC, 0).ok_or_else(|| StoreError::Storage("partition 0 is missing".into()))
}

/// Reads the whole log in order, calling `apply` for every record.
/// Undecodable records are logged and skipped.
///
/// # Errors
/// [`StoreError`] if the log cannot be read or a batch does not decode.
pub fn replay(log: &PartitionLog, mut apply: impl FnMut(LogEntry)) -> Result<u64, StoreError> {
    let mut offset = log.log_start_offset();
    let end = log.high_watermark();
    let mut count = 0u64;
    while offset < end {
        let info = log.read(offset, 8 << 20, true)?;
        let Some(region) = info.region else { break };
        let buf = Bytes::from(region.read_to_vec().map_err(|e| StoreError::Storage(e.to_string()))?);
        let mut progressed = false;
        for b in BatchIter::new(&buf) {
            let Ok(b) = b else { break };
            let mut batch = buf.slice(b.position..b.end());
            let set = RecordBatchDecoder::decode(&mut batch).map_err(|e| StoreError::Format(e.to_string()))?;
            for r in set.records {
                if r.offset < offset {
                    continue;
                }
                match records::decode(r.key.as_ref(), r.value.as_ref()) {
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
    Ok(count)
}
