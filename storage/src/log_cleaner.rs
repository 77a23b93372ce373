//! `LogCleaner`: the log compaction threads (Kafka's `LogCleaner` and the
//! bookkeeping of its `LogCleanerManager`): which compacted log to clean
//! next, the `cleaner-offset-checkpoint`, throttling, and the statistics the
//! broker's metrics read.
//!
//! Each thread repeatedly takes the compacted partition (`cleanup.policy`
//! containing `compact`) with the highest dirty ratio at or above its
//! `min.cleanable.dirty.ratio` (or whose oldest dirty record passed
//! `max.compaction.lag.ms`) that no other thread is cleaning, cleans it with
//! a [`Cleaner`] (an offset map of `log.cleaner.dedupe.buffer.size` /
//! threads bytes), records its new first dirty offset in the checkpoint, and
//! sleeps `log.cleaner.backoff.ms` when nothing is due. Threads are plain OS
//! threads: cleaning is blocking file work that must stay off the request
//! runtime. All of them share one throttle budget,
//! `log.cleaner.io.max.bytes.per.second`, split evenly.
//!
//! A log whose last clean kept tombstones is cleaned again, whole, once
//! their delete horizon has passed (Kafka's `latestDeleteHorizon`), so
//! tombstones go without waiting for new dirty data. The horizons are kept in
//! memory: after a restart they are learnt again at the next clean.
//!
//! The checkpoint (`<data dir>/cleaner-offset-checkpoint`, Kafka's offset
//! checkpoint format) maps each cleaned partition to its first dirty offset.
//! A missing or stale entry (outside the log) only means re-cleaning from the
//! log start offset. `__consumer_offsets` keeps its own compaction for now;
//! giving it `cleanup.policy=compact` is all it would take to hand it here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{error, info, warn};

use crate::checkpoint::{CheckpointEntries, OffsetCheckpointFile};
use crate::cleaner::{Cleaner, DirtyRange};
use crate::error::{Result, StorageError};
use crate::file_names::CLEANER_OFFSET_CHECKPOINT;
use crate::log::PartitionLog;
use crate::log_manager::LogManager;
use crate::throttler::Throttler;

/// The broker's `log.cleaner.*` settings (Kafka's `CleanerConfig`).
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerConfig {
    /// `log.cleaner.enable`: without it compacted topics are never cleaned.
    pub enable: bool,
    /// `log.cleaner.threads`.
    pub threads: usize,
    /// `log.cleaner.dedupe.buffer.size`: offset map memory of all threads together.
    pub dedupe_buffer_size: usize,
    /// `log.cleaner.io.max.bytes.per.second`: read + write rate of all threads together.
    pub io_max_bytes_per_second: f64,
    /// `log.cleaner.backoff.ms`: the sleep when no log is due.
    pub backoff_ms: u64,
}

impl Default for CleanerConfig {
    /// Kafka's defaults.
    fn default() -> Self {
        Self {
            enable: true,
            threads: 1,
            dedupe_buffer_size: 134_217_728,
            io_max_bytes_per_second: f64::INFINITY,
            backoff_ms: 15_000,
        }
    }
}

/// The cleaner's counters and per-partition state, read by the broker's metrics.
#[derive(Debug, Default)]
pub struct CleanerStats {
    runs: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    partitions: Mutex<BTreeMap<(String, i32), PartitionCleanState>>,
    last_run_ms: AtomicU64,
}

/// What the cleaner knows of one compacted partition.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PartitionCleanState {
    /// Dirty bytes over cleanable bytes, as of the last look.
    pub dirty_ratio: f64,
    /// Unix time in ms of the last completed clean; `None` before the first.
    pub last_clean_ms: Option<i64>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl CleanerStats {
    /// Completed cleans.
    pub fn runs(&self) -> u64 {
        self.runs.load(Ordering::Relaxed)
    }

    /// Bytes read by cleans.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    /// Bytes written by cleans.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written.load(Ordering::Relaxed)
    }

    /// Unix time in ms of the last completed clean of any log (0 before the first).
    pub fn last_run_ms(&self) -> i64 {
        self.last_run_ms.load(Ordering::Relaxed) as i64
    }

    /// Every compacted partition seen, with its state.
    pub fn partitions(&self) -> Vec<((String, i32), PartitionCleanState)> {
        lock(&self.partitions).iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}

/// State shared by the cleaner threads.
#[derive(Debug)]
struct Shared {
    logs: Arc<LogManager>,
    config: CleanerConfig,
    stop: AtomicBool,
    stats: Arc<CleanerStats>,
    /// Partitions a thread is cleaning now.
    in_progress: Mutex<BTreeSet<(String, i32)>>,
    /// First dirty offsets; written to the checkpoint file after every clean.
    checkpoint: Mutex<CheckpointEntries>,
    /// The latest delete horizon of the tombstones each log's last clean kept
    /// (Kafka's `latestDeleteHorizon`): once passed, the whole log is cleaned again.
    delete_horizons: Mutex<BTreeMap<(String, i32), i64>>,
}

/// The running cleaner threads. [`LogCleaner::stop`] stops them (a clean in
/// progress is abandoned, leaving the log as it was).
#[derive(Debug)]
pub struct LogCleaner {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl LogCleaner {
    /// Reads the checkpoint and starts `config.threads` threads (none when
    /// `config.enable` is false).
    ///
    /// # Errors
    /// If a thread cannot be spawned.
    pub fn start(logs: Arc<LogManager>, config: CleanerConfig) -> std::io::Result<Self> {
        let checkpoint = match checkpoint_file(&logs).read() {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "cannot read the cleaner checkpoint; cleaning from each log's start");
                CheckpointEntries::new()
            }
        };
        let threads = if config.enable { config.threads.max(1) } else { 0 };
        let shared = Arc::new(Shared {
            logs,
            config,
            stop: AtomicBool::new(false),
            stats: Arc::default(),
            in_progress: Mutex::default(),
            checkpoint: Mutex::new(checkpoint),
            delete_horizons: Mutex::default(),
        });
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let shared = shared.clone();
            let handle = std::thread::Builder::new()
                .name(format!("floe-cleaner-{i}"))
                .spawn(move || run_thread(&shared, threads))?;
            handles.push(handle);
        }
        if threads > 0 {
            info!(threads, "log cleaner started");
        }
        Ok(Self { shared, threads: handles })
    }

    /// The statistics the broker's metrics show.
    pub fn stats(&self) -> Arc<CleanerStats> {
        self.shared.stats.clone()
    }

    /// Cleans the most dirty due log once, on the calling thread (tests,
    /// tools); `Ok(false)` when no log is due.
    ///
    /// # Errors
    /// As a clean: [`StorageError::Io`], [`StorageError::Corrupt`].
    pub fn clean_once(&self) -> Result<bool> {
        let mut throttler = Throttler::new(self.shared.config.io_max_bytes_per_second);
        clean_dirtiest(&self.shared, self.shared.config.dedupe_buffer_size, &mut throttler)
    }

    /// Stops the threads and waits for them.
    pub fn stop(mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                error!("log cleaner thread panicked");
            }
        }
    }
}

fn checkpoint_file(logs: &LogManager) -> OffsetCheckpointFile {
    OffsetCheckpointFile::new(logs.data_dir().join(CLEANER_OFFSET_CHECKPOINT))
}

fn run_thread(shared: &Shared, threads: usize) {
    let memory = shared.config.dedupe_buffer_size / threads.max(1);
    let mut throttler =
        Throttler::new(shared.config.io_max_bytes_per_second / threads.max(1) as f64);
    while !shared.stop.load(Ordering::Relaxed) {
        let cleaned = match clean_dirtiest(shared, memory, &mut throttler) {
            Ok(cleaned) => cleaned,
            Err(StorageError::CleaningAborted { .. }) => break,
            Err(e) => {
                error!(error = %e, "log cleaning failed");
                false
            }
        };
        if !cleaned {
            sleep_unless_stopped(&shared.stop, Duration::from_millis(shared.config.backoff_ms));
        }
    }
}

fn sleep_unless_stopped(flag: &AtomicBool, total: Duration) {
    let started = Instant::now();
    while started.elapsed() < total && !flag.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50).min(total.saturating_sub(started.elapsed())));
    }
}

/// Releases a partition from `in_progress` when dropped.
struct InProgress<'a> {
    shared: &'a Shared,
    key: (String, i32),
}

impl Drop for InProgress<'_> {
    fn drop(&mut self) {
        lock(&self.shared.in_progress).remove(&self.key);
    }
}

/// Finds the dirtiest due log, cleans it, checkpoints. `Ok(false)` when none is due.
fn clean_dirtiest(shared: &Shared, memory: usize, throttler: &mut Throttler) -> Result<bool> {
    if shared.logs.log_dir_failure().is_offline() {
        return Ok(false);
    }
    let now = crate::clock::wall_ms();
    let mut best: Option<(f64, Arc<PartitionLog>, DirtyRange)> = None;
    let mut seen = BTreeMap::new();
    for topic in shared.logs.topics() {
        if !topic.config().cleanup_policy.compact {
            continue;
        }
        for log in topic.partitions() {
            let key = (log.topic().to_string(), log.partition());
            let Ok(view) = log.cleaner_view() else {
                continue;
            };
            let checkpoint = lock(&shared.checkpoint).get(&key).copied();
            let range = DirtyRange::of(&view, checkpoint, now);
            let ratio = range.dirty_ratio();
            seen.insert(key.clone(), ratio);
            let horizon_passed = lock(&shared.delete_horizons).get(&key).is_some_and(|&h| h <= now);
            let min_ratio = view.config.min_cleanable_dirty_ratio;
            let range = if horizon_passed && !range.is_due(min_ratio) {
                // Tombstones are due to go: the whole log is cleaned again.
                DirtyRange::of(&view, None, now)
            } else {
                range
            };
            let due = range.is_due(min_ratio) || (horizon_passed && range.dirty_bytes > 0);
            if !due || lock(&shared.in_progress).contains(&key) {
                continue;
            }
            let priority = if range.past_max_lag { f64::INFINITY } else { ratio };
            if best.as_ref().is_none_or(|(p, _, _)| priority > *p) {
                best = Some((priority, log, range));
            }
        }
    }
    {
        let mut partitions = lock(&shared.stats.partitions);
        partitions.retain(|k, _| seen.contains_key(k));
        for (k, ratio) in seen {
            partitions.entry(k).or_default().dirty_ratio = ratio;
        }
    }
    let Some((_, log, range)) = best else {
        return Ok(false);
    };
    let key = (log.topic().to_string(), log.partition());
    if !lock(&shared.in_progress).insert(key.clone()) {
        return Ok(false);
    }
    let _guard = InProgress { shared, key: key.clone() };
    // A fresh view: the one that chose the log may be stale by now.
    let view = log.cleaner_view()?;
    let mut cleaner = Cleaner { map_memory: memory, stop: &shared.stop, throttler };
    let (end_offset, stats) = match cleaner.clean(&log, &view, &range, now) {
        Ok(done) => done,
        Err(StorageError::UnknownTopicOrPartition { .. }) => return Ok(false),
        Err(e) => return Err(e),
    };
    shared.stats.runs.fetch_add(1, Ordering::Relaxed);
    shared.stats.bytes_read.fetch_add(stats.bytes_read, Ordering::Relaxed);
    shared.stats.bytes_written.fetch_add(stats.bytes_written, Ordering::Relaxed);
    shared.stats.last_run_ms.store(crate::clock::wall_ms().max(0) as u64, Ordering::Relaxed);
    {
        let mut partitions = lock(&shared.stats.partitions);
        let state = partitions.entry(key.clone()).or_default();
        state.last_clean_ms = Some(crate::clock::wall_ms());
        if let Ok(v) = log.cleaner_view() {
            state.dirty_ratio = DirtyRange::of(&v, Some(end_offset), now).dirty_ratio();
        }
    }
    match stats.max_delete_horizon {
        Some(h) => lock(&shared.delete_horizons).insert(key.clone(), h),
        None => lock(&shared.delete_horizons).remove(&key),
    };
    write_checkpoint(shared, key, end_offset);
    Ok(true)
}

/// Records `end_offset` for `key` and rewrites the checkpoint, keeping only
/// partitions that still exist (a deleted topic's namesake starts afresh).
fn write_checkpoint(shared: &Shared, key: (String, i32), end_offset: i64) {
    let mut entries = lock(&shared.checkpoint);
    entries.insert(key, end_offset);
    entries.retain(|(topic, partition), _| shared.logs.partition(topic, *partition).is_some());
    if let Err(e) = checkpoint_file(&shared.logs).write(&entries) {
        warn!(error = %e, "cannot write the cleaner checkpoint; the next start cleans from further back");
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use floe_protocol::kafka_protocol::records::Compression;

    use super::*;
    use crate::config::LogConfig;
    use crate::test_util::{decode_keyed, keyed_batch};

    fn keys_in(log: &PartitionLog) -> Vec<(i64, String, Option<String>)> {
        let mut rows = Vec::new();
        let mut offset = log.log_start_offset();
        while offset < log.high_watermark() {
            let Some(region) = log
                .read(offset, 1 << 24, true, crate::IsolationLevel::ReadUncommitted)
                .unwrap()
                .region
            else {
                break;
            };
            let b = region.read_to_vec().unwrap();
            let (next, end) = crate::test_util::stored_batches_end(&b);
            assert!(next > offset, "a read at {offset} returns whole batches");
            offset = next;
            rows.extend(decode_keyed(&b[..end]));
        }
        rows
    }

    #[test]
    fn cleans_the_dirtiest_compacted_log_checkpoints_and_drops_tombstones_after_their_horizon() {
        let dir = tempfile::tempdir().unwrap();
        let logs = Arc::new(LogManager::open(dir.path(), LogConfig::default()).unwrap());
        let compact: BTreeMap<String, String> = [
            ("cleanup.policy", "compact"),
            ("segment.bytes", "2000"),
            ("delete.retention.ms", "0"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        logs.create_topic("c", 1, compact).unwrap();
        logs.create_topic("d", 1, BTreeMap::new()).unwrap();
        let log = logs.partition("c", 0).unwrap();
        for i in 0..40 {
            let v = format!("v{i}");
            let tomb = if i == 39 { None } else { Some("x") };
            log.append(&mut keyed_batch(&[("k", Some(&v)), ("t", tomb)], 1, Compression::None), 1)
                .unwrap();
        }
        log.roll_now().unwrap();
        logs.partition("d", 0)
            .unwrap()
            .append(&mut keyed_batch(&[("k", Some("v"))], 1, Compression::None), 1)
            .unwrap();
        let cleaner = LogCleaner::start(
            logs.clone(),
            CleanerConfig { enable: false, ..CleanerConfig::default() },
        )
        .unwrap();
        assert!(cleaner.clean_once().unwrap());
        assert_eq!(
            keys_in(&log),
            vec![(78, "k".into(), Some("v39".into())), (79, "t".into(), None)]
        );
        let stats = cleaner.stats();
        assert_eq!(stats.runs(), 1);
        assert!(stats.bytes_written() > 0 && stats.bytes_written() < stats.bytes_read());
        let parts = stats.partitions();
        assert_eq!(parts.len(), 1, "only the compacted topic: {parts:?}");
        assert_eq!(parts[0].0, ("c".to_string(), 0));
        assert!(parts[0].1.last_clean_ms.is_some());
        let cp = checkpoint_file(&logs).read().unwrap();
        assert_eq!(cp.get(&("c".to_string(), 0)), Some(&80));
        // Nothing dirty, but the tombstone's horizon (now + 0) has passed: cleaned again, whole.
        std::thread::sleep(Duration::from_millis(5));
        assert!(cleaner.clean_once().unwrap());
        assert_eq!(keys_in(&log), vec![(78, "k".into(), Some("v39".into()))]);
        assert!(!cleaner.clean_once().unwrap(), "nothing left to do");
        assert_eq!(log.log_end_offset(), 80);
        cleaner.stop();
    }
}
