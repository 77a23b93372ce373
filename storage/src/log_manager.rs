//! `LogManager`: the storage layer's entry point. Owns the data directory:
//! `meta.properties`, the topic metadata files, the checkpoints, and every
//! partition log; creates, alters and deletes topics; runs maintenance.
//!
//! # Durability
//! Topic metadata (`topics/<name>.json`) is written atomically and is durable
//! before `create_topic`, `create_partitions` or `alter_topic_config`
//! returns. Partition directories without metadata (a creation cut short, or
//! a deletion that removed the metadata first) and `-delete` directories are
//! removed at the next open. Checkpoints are written by `run_maintenance` and
//! `shutdown`; a stale recovery point only costs extra recovery work.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use tracing::{error, info, warn};
use uuid::Uuid;

use crate::atomic_file::{sync_dir, write_atomically};
use crate::checkpoint::{CheckpointEntries, OffsetCheckpointFile};
use crate::config::{LogConfig, LOCAL_RETENTION_BYTES, LOCAL_RETENTION_MS};
use crate::error::{IoContext, Result, StorageError};
use crate::file_names::{
    deleting_dir_name, is_deleting_dir_name, parse_partition_dir_name,
    parse_topic_metadata_file_name, partition_dir, topic_metadata_file, topics_dir,
    LOG_START_OFFSET_CHECKPOINT, META_PROPERTIES, RECOVERY_POINT_CHECKPOINT, TMP_SUFFIX,
};
use crate::log::PartitionLog;
use crate::log_dir_failure::LogDirFailureChannel;
use crate::producer_id_manager::ProducerIdManager;
use crate::topic::{validate_topic_name, Topic, TopicMetadata};

/// What one [`LogManager::run_maintenance`] pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    /// Segments rolled because of `segment.ms`.
    pub segments_rolled: usize,
    /// Segments deleted by retention.
    pub segments_deleted: usize,
    /// Partitions flushed because of `flush.ms`.
    pub partitions_flushed: usize,
    /// Producer ids forgotten after `producer.id.expiration.ms`.
    pub producers_expired: usize,
}

/// All topics and partition logs of one data directory.
///
/// # Thread-safety
/// `Send + Sync`. Lookups take a read lock on the topic map; topic
/// administration (create, delete, add partitions, alter config) is
/// serialised by a separate mutex so that the metadata file and the map
/// change together. All methods block on the filesystem: call them off the
/// request runtime's worker threads when they may do I/O.
#[derive(Debug)]
pub struct LogManager {
    data_dir: PathBuf,
    /// Swapped whole by [`LogManager::set_default_config`] (dynamic broker configs).
    default_config: RwLock<Arc<LogConfig>>,
    cluster_id: String,
    node_id: Option<i32>,
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    admin: Mutex<()>,
    checkpoints: Mutex<()>,
    producer_ids: ProducerIdManager,
    /// Offline after an I/O error that left the directory's state in doubt.
    failure: Arc<LogDirFailureChannel>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// 22 characters of URL-safe base64 (no padding) of a random UUID, like Kafka's cluster ids.
pub fn new_cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = Uuid::new_v4().into_bytes();
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &b)| acc | (u32::from(b) << (16 - 8 * i)));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

fn parse_properties(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn remove_dir(path: &Path, why: &str) -> Result<()> {
    info!(dir = %path.display(), why, "removing directory");
    fs::remove_dir_all(path).ctx("remove directory", path)
}

impl LogManager {
    /// Opens `data_dir` (creating it), without checking a node id.
    ///
    /// # Errors
    /// As [`LogManager::open_with_node_id`].
    pub fn open(data_dir: impl AsRef<Path>, default_config: LogConfig) -> Result<Self> {
        Self::open_with_node_id(data_dir, None, default_config)
    }

    /// Opens `data_dir` (creating it): reads or creates `meta.properties`
    /// (checking `node.id` when given), loads every topic, recovers every
    /// partition log, removes half-deleted topics and leftovers, and writes
    /// fresh checkpoints.
    ///
    /// # Errors
    /// [`StorageError::InvalidConfig`] (key `node.id`) if the directory belongs
    /// to another node or a stored topic config no longer parses;
    /// [`StorageError::Corrupt`] for unreadable metadata; [`StorageError::Io`].
    pub fn open_with_node_id(
        data_dir: impl AsRef<Path>,
        node_id: Option<i32>,
        default_config: LogConfig,
    ) -> Result<Self> {
        Self::open_in_cluster(data_dir, node_id, None, default_config)
    }

    /// As [`LogManager::open_with_node_id`], for a directory that must belong to
    /// `cluster_id` (the id a cluster's metadata store holds): a new directory takes
    /// it, one of another cluster is refused (Kafka's `InconsistentClusterIdException`),
    /// so that a broker cannot bring one cluster's data into another.
    ///
    /// # Errors
    /// [`StorageError::InvalidConfig`] (key `cluster.id`) for a directory of another
    /// cluster; otherwise as [`LogManager::open_with_node_id`].
    pub fn open_in_cluster(
        data_dir: impl AsRef<Path>,
        node_id: Option<i32>,
        cluster_id: Option<&str>,
        default_config: LogConfig,
    ) -> Result<Self> {
        let data_dir = data_dir.as_ref().to_path_buf();
        fs::create_dir_all(topics_dir(&data_dir)).ctx("create data directory", &data_dir)?;
        let cluster_id = Self::load_meta(&data_dir, node_id, cluster_id)?;
        let recovery_points =
            OffsetCheckpointFile::new(data_dir.join(RECOVERY_POINT_CHECKPOINT)).read()?;
        let log_starts =
            OffsetCheckpointFile::new(data_dir.join(LOG_START_OFFSET_CHECKPOINT)).read()?;

        let failure = Arc::new(LogDirFailureChannel::new(&data_dir));
        let mut topics = BTreeMap::new();
        let tdir = topics_dir(&data_dir);
        for entry in fs::read_dir(&tdir).ctx("list topics", &tdir)? {
            let entry = entry.ctx("list topics", &tdir)?;
            let path = entry.path();
            let Some(file_name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if file_name.ends_with(TMP_SUFFIX) {
                fs::remove_file(&path).ctx("remove leftover file", &path)?;
                continue;
            }
            let Some(name) = parse_topic_metadata_file_name(&file_name) else {
                continue;
            };
            let bytes = fs::read(&path).ctx("read topic metadata", &path)?;
            let meta: TopicMetadata = serde_json::from_slice(&bytes)
                .map_err(|e| StorageError::Corrupt { path: path.clone(), reason: e.to_string() })?;
            if meta.name != name || meta.partitions <= 0 {
                return Err(StorageError::Corrupt {
                    path,
                    reason: format!(
                        "names topic {:?} with {} partitions",
                        meta.name, meta.partitions
                    ),
                });
            }
            let config = Arc::new(stored_topic_config(&default_config, &meta.name, &meta.config)?);
            let mut partitions = Vec::with_capacity(meta.partitions as usize);
            for p in 0..meta.partitions {
                let key = (meta.name.clone(), p);
                let log = PartitionLog::open(
                    &partition_dir(&data_dir, &meta.name, p),
                    &meta.name,
                    p,
                    config.clone(),
                    recovery_points.get(&key).copied(),
                    log_starts.get(&key).copied(),
                )?
                .with_failure_channel(failure.clone());
                partitions.push(Arc::new(log));
            }
            let topic = Topic::new(meta.name.clone(), meta.id, partitions, meta.config, config);
            topics.insert(meta.name, Arc::new(topic));
        }

        // Half-deleted topics and partitions without metadata.
        for entry in fs::read_dir(&data_dir).ctx("list data directory", &data_dir)? {
            let entry = entry.ctx("list data directory", &data_dir)?;
            if !entry.file_type().ctx("stat", &entry.path())?.is_dir() {
                continue;
            }
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if is_deleting_dir_name(&name) {
                remove_dir(&entry.path(), "deleted topic")?;
            } else if let Some((topic, p)) = parse_partition_dir_name(&name) {
                let known = topics.get(topic).is_some_and(|t: &Arc<Topic>| p < t.partition_count());
                if !known {
                    remove_dir(&entry.path(), "partition directory without topic metadata")?;
                }
            }
        }

        let producer_ids = ProducerIdManager::open(&data_dir)?;
        let manager = Self {
            data_dir,
            default_config: RwLock::new(Arc::new(default_config)),
            cluster_id,
            node_id,
            topics: RwLock::new(topics),
            admin: Mutex::new(()),
            checkpoints: Mutex::new(()),
            producer_ids,
            failure,
        };
        manager.write_checkpoints()?;
        Ok(manager)
    }

    /// The cluster id in `data_dir`'s `meta.properties`, if it has one; nothing is created.
    ///
    /// # Errors
    /// [`StorageError::Io`] if the file exists but cannot be read.
    pub fn stored_cluster_id(data_dir: &Path) -> Result<Option<String>> {
        let path = data_dir.join(META_PROPERTIES);
        match fs::read_to_string(&path) {
            Ok(t) => {
                Ok(parse_properties(&t).get("cluster.id").filter(|id| !id.is_empty()).cloned())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).ctx("read", &path),
        }
    }

    fn load_meta(data_dir: &Path, node_id: Option<i32>, required: Option<&str>) -> Result<String> {
        let path = data_dir.join(META_PROPERTIES);
        let existing = match fs::read_to_string(&path) {
            Ok(t) => Some(parse_properties(&t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).ctx("read", &path),
        };
        if let (Some(want), Some(have)) = (
            required,
            existing.as_ref().and_then(|p| p.get("cluster.id")).filter(|id| !id.is_empty()),
        ) {
            if have != want {
                return Err(StorageError::InvalidConfig {
                    key: "cluster.id".into(),
                    reason: format!(
                        "{} holds the data of cluster {have}, but the metadata store's cluster is {want}",
                        data_dir.display()
                    ),
                });
            }
        }
        if let Some(props) = &existing {
            if let (Some(want), Some(have)) = (node_id, props.get("node.id")) {
                if have != &want.to_string() {
                    return Err(StorageError::InvalidConfig {
                        key: "node.id".into(),
                        reason: format!(
                            "{} belongs to node {have}, not {want}",
                            data_dir.display()
                        ),
                    });
                }
            }
            if let Some(id) = props.get("cluster.id").filter(|id| !id.is_empty()) {
                if node_id.is_none() || props.contains_key("node.id") {
                    return Ok(id.clone());
                }
            }
        }
        let cluster_id = existing
            .as_ref()
            .and_then(|p| p.get("cluster.id").filter(|id| !id.is_empty()).cloned())
            .or_else(|| required.map(str::to_string))
            .unwrap_or_else(new_cluster_id);
        let mut text = format!("# Written by Floe\nversion=1\ncluster.id={cluster_id}\n");
        if let Some(n) = node_id {
            text.push_str(&format!("node.id={n}\n"));
        }
        write_atomically(&path, text.as_bytes())?;
        Ok(cluster_id)
    }

    /// The cluster id stored in `meta.properties`.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// The node id this directory was opened for, if one was given.
    pub fn node_id(&self) -> Option<i32> {
        self.node_id
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The producer id allocator of this data directory (InitProducerId).
    pub fn producer_ids(&self) -> &ProducerIdManager {
        &self.producer_ids
    }

    /// The broker-wide defaults topic overrides apply to.
    pub fn default_config(&self) -> Arc<LogConfig> {
        self.default_config.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Replaces the broker-wide defaults (a dynamic broker config change):
    /// every topic's effective config becomes its overrides over the new
    /// defaults, so a topic without an override of a key sees the new value
    /// at once. Nothing is written: the caller persists the defaults.
    ///
    /// # Errors
    /// [`StorageError::InvalidConfig`] if some topic's overrides do not
    /// combine with the new defaults; then nothing changes.
    pub fn set_default_config(&self, defaults: LogConfig) -> Result<()> {
        let _admin = lock(&self.admin);
        let topics = self.topics();
        let configs = topics
            .iter()
            .map(|t| defaults.with_overrides(&t.overrides()).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        *self.default_config.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(defaults);
        for (topic, config) in topics.iter().zip(configs) {
            topic.set_config(topic.overrides(), config);
        }
        Ok(())
    }

    fn topics_read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Topic>>> {
        self.topics.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn topics_write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<Topic>>> {
        self.topics.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// A topic by name.
    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics_read().get(name).cloned()
    }

    /// The topic with this topic id (Fetch v13+, Metadata and DeleteTopics by id).
    pub fn topic_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.topics_read().values().find(|t| t.id() == id).cloned()
    }

    /// All topics, by name.
    pub fn topics(&self) -> Vec<Arc<Topic>> {
        self.topics_read().values().cloned().collect()
    }

    /// One partition's log.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<Arc<PartitionLog>> {
        self.topic(topic)?.partition(partition)
    }

    /// Checks what `create_topic` would check, creating nothing (CreateTopics validate_only).
    ///
    /// # Errors
    /// As [`LogManager::create_topic`].
    pub fn validate_create_topic(
        &self,
        name: &str,
        partitions: i32,
        overrides: &BTreeMap<String, String>,
    ) -> Result<LogConfig> {
        validate_topic_name(name)?;
        if partitions <= 0 {
            return Err(StorageError::InvalidPartitions {
                topic: name.to_string(),
                reason: format!("{partitions} partitions; must be at least 1"),
            });
        }
        let config = self.default_config().with_overrides(overrides)?;
        if self.topics_read().contains_key(name) {
            return Err(StorageError::TopicAlreadyExists { topic: name.to_string() });
        }
        Ok(config)
    }

    fn persist_metadata(&self, meta: &TopicMetadata) -> Result<()> {
        let path = topic_metadata_file(&self.data_dir, &meta.name);
        let json = serde_json::to_vec_pretty(meta)
            .map_err(|e| StorageError::Corrupt { path: path.clone(), reason: e.to_string() })?;
        write_atomically(&path, &json)
    }

    fn open_new_partitions(
        &self,
        name: &str,
        range: std::ops::Range<i32>,
        config: &Arc<LogConfig>,
    ) -> Result<Vec<Arc<PartitionLog>>> {
        let mut logs = Vec::new();
        for p in range.clone() {
            let dir = partition_dir(&self.data_dir, name, p);
            let result = (|| {
                if dir.exists() {
                    remove_dir(&dir, "stale partition directory")?;
                }
                PartitionLog::open(&dir, name, p, config.clone(), Some(0), Some(0))
                    .map(|log| log.with_failure_channel(self.failure.clone()))
            })();
            match result {
                Ok(log) => logs.push(Arc::new(log)),
                Err(e) => {
                    for log in &logs {
                        log.mark_deleted();
                    }
                    for q in range.start..=p {
                        let _ = fs::remove_dir_all(partition_dir(&self.data_dir, name, q));
                    }
                    return Err(e);
                }
            }
        }
        sync_dir(&self.data_dir)?;
        Ok(logs)
    }

    /// Creates a topic with empty partition logs; its metadata is durable when this returns.
    ///
    /// # Errors
    /// [`StorageError::InvalidTopic`], [`StorageError::InvalidPartitions`] (≤ 0),
    /// [`StorageError::InvalidConfig`], [`StorageError::TopicAlreadyExists`], [`StorageError::Io`].
    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        overrides: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>> {
        self.create_topic_with_id(name, Uuid::new_v4(), partitions, overrides)
    }

    /// [`LogManager::create_topic`] with the topic id given: a broker of a cluster
    /// creates its copy of a topic under the id the cluster's metadata holds.
    ///
    /// # Errors
    /// As [`LogManager::create_topic`].
    pub fn create_topic_with_id(
        &self,
        name: &str,
        id: Uuid,
        partitions: i32,
        overrides: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>> {
        let _admin = lock(&self.admin);
        let config = Arc::new(self.validate_create_topic(name, partitions, &overrides)?);
        let logs = self.open_new_partitions(name, 0..partitions, &config)?;
        let topic = Arc::new(Topic::new(name.to_string(), id, logs, overrides, config));
        if let Err(e) = self.persist_metadata(&topic.metadata()) {
            for p in topic.partitions() {
                p.mark_deleted();
                let _ = fs::remove_dir_all(p.dir());
            }
            return Err(e);
        }
        self.topics_write().insert(name.to_string(), topic.clone());
        info!(topic = name, partitions, id = %topic.id(), "created topic");
        // Replace any checkpoint entries a deleted namesake left behind.
        self.write_checkpoints()?;
        Ok(topic)
    }

    /// Deletes a topic: removes its metadata (durably), renames its partition
    /// directories to `…-delete`, then removes them. Logs still referenced by
    /// in-flight requests fail further calls with `UnknownTopicOrPartition`.
    ///
    /// # Errors
    /// [`StorageError::UnknownTopicOrPartition`]; [`StorageError::Io`] (leftovers are removed at the next open).
    pub fn delete_topic(&self, name: &str) -> Result<()> {
        let _admin = lock(&self.admin);
        let topic = self.topics_write().remove(name).ok_or_else(|| {
            StorageError::UnknownTopicOrPartition { topic: name.to_string(), partition: None }
        })?;
        let partitions = topic.partitions();
        for p in &partitions {
            p.mark_deleted();
        }
        let meta = topic_metadata_file(&self.data_dir, name);
        fs::remove_file(&meta).ctx("delete topic metadata", &meta)?;
        sync_dir(&topics_dir(&self.data_dir))?;
        let unique = topic.id().simple().to_string();
        let mut renamed = Vec::with_capacity(partitions.len());
        for p in &partitions {
            let to = self.data_dir.join(deleting_dir_name(name, p.partition(), &unique));
            match fs::rename(p.dir(), &to) {
                Ok(()) => renamed.push(to),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).ctx("rename partition directory for deletion", p.dir()),
            }
        }
        sync_dir(&self.data_dir)?;
        for dir in renamed {
            fs::remove_dir_all(&dir).ctx("remove deleted partition directory", &dir)?;
        }
        info!(topic = name, "deleted topic");
        // Drop its checkpoint entries, so a namesake created later cannot inherit them.
        self.write_checkpoints()
    }

    /// Grows a topic to `new_count` partitions (CreatePartitions).
    ///
    /// # Errors
    /// [`StorageError::UnknownTopicOrPartition`]; [`StorageError::InvalidPartitions`]
    /// unless `new_count` exceeds the current count; [`StorageError::Io`].
    pub fn create_partitions(&self, name: &str, new_count: i32) -> Result<()> {
        let _admin = lock(&self.admin);
        let topic = self.topic(name).ok_or_else(|| StorageError::UnknownTopicOrPartition {
            topic: name.to_string(),
            partition: None,
        })?;
        let current = topic.partition_count();
        if new_count <= current {
            return Err(StorageError::InvalidPartitions {
                topic: name.to_string(),
                reason: format!(
                    "topic has {current} partitions; the new count {new_count} must be larger"
                ),
            });
        }
        let logs = self.open_new_partitions(name, current..new_count, &topic.config())?;
        let mut meta = topic.metadata();
        meta.partitions = new_count;
        if let Err(e) = self.persist_metadata(&meta) {
            for p in logs {
                p.mark_deleted();
                let _ = fs::remove_dir_all(p.dir());
            }
            return Err(e);
        }
        topic.add_partitions(logs);
        info!(topic = name, from = current, to = new_count, "added partitions");
        self.write_checkpoints()
    }

    /// Checks a full set of overrides for a topic without applying it (validate_only).
    ///
    /// # Errors
    /// [`StorageError::UnknownTopicOrPartition`], [`StorageError::InvalidConfig`].
    pub fn validate_topic_config(
        &self,
        name: &str,
        overrides: &BTreeMap<String, String>,
    ) -> Result<LogConfig> {
        if self.topic(name).is_none() {
            return Err(StorageError::UnknownTopicOrPartition {
                topic: name.to_string(),
                partition: None,
            });
        }
        self.default_config().with_overrides(overrides)
    }

    /// Replaces a topic's overrides with `overrides` (the full set, as AlterConfigs
    /// sends it), persisting them before they apply to the partitions.
    ///
    /// # Errors
    /// As [`LogManager::validate_topic_config`], plus [`StorageError::Io`].
    pub fn alter_topic_config(
        &self,
        name: &str,
        overrides: BTreeMap<String, String>,
    ) -> Result<()> {
        let _admin = lock(&self.admin);
        let config = Arc::new(self.validate_topic_config(name, &overrides)?);
        let topic = self.topic(name).ok_or_else(|| StorageError::UnknownTopicOrPartition {
            topic: name.to_string(),
            partition: None,
        })?;
        let mut meta = topic.metadata();
        meta.config = overrides.clone();
        self.persist_metadata(&meta)?;
        topic.set_config(overrides, config);
        Ok(())
    }

    fn all_partitions(&self) -> Vec<Arc<PartitionLog>> {
        self.topics().iter().flat_map(|t| t.partitions()).collect()
    }

    /// The data directory's offline state (see [`crate::log_dir_failure`]).
    pub fn log_dir_failure(&self) -> &Arc<LogDirFailureChannel> {
        &self.failure
    }

    /// Writes the recovery-point and log-start-offset checkpoints of every
    /// partition. An I/O error takes the directory offline; an offline
    /// directory gets no checkpoint (its recovery points may not be trusted).
    ///
    /// # Errors
    /// [`StorageError::Io`]; [`StorageError::LogDirOffline`].
    pub fn write_checkpoints(&self) -> Result<()> {
        self.failure.check()?;
        let result = self.write_checkpoint_files();
        if let Err(e @ StorageError::Io { .. }) = &result {
            self.failure.mark_offline(e);
        }
        result
    }

    fn write_checkpoint_files(&self) -> Result<()> {
        let _guard = lock(&self.checkpoints);
        let mut rps = CheckpointEntries::new();
        let mut starts = CheckpointEntries::new();
        for p in self.all_partitions() {
            let key = (p.topic().to_string(), p.partition());
            rps.insert(key.clone(), p.recovery_point());
            starts.insert(key, p.log_start_offset());
        }
        OffsetCheckpointFile::new(self.data_dir.join(RECOVERY_POINT_CHECKPOINT)).write(&rps)?;
        OffsetCheckpointFile::new(self.data_dir.join(LOG_START_OFFSET_CHECKPOINT)).write(&starts)
    }

    /// One maintenance pass over every partition: roll by `segment.ms`, apply
    /// retention, expire idle producers, flush by `flush.ms`; then write the
    /// checkpoints. Every partition is visited even if one fails; the first
    /// error is returned. Blocks on the filesystem: run it on a blocking thread.
    ///
    /// # Errors
    /// The first [`StorageError`] met.
    pub fn run_maintenance(&self, now_ms: i64) -> Result<MaintenanceReport> {
        self.run_maintenance_pass(now_ms, true)
    }

    /// [`Self::run_maintenance`], with retention and producer expiry only
    /// when `retention` is set: they run every `log.retention.check.interval.ms`,
    /// the rest every `log.flush.scheduler.interval.ms`.
    ///
    /// # Errors
    /// The first [`StorageError`] met.
    pub fn run_maintenance_pass(&self, now_ms: i64, retention: bool) -> Result<MaintenanceReport> {
        if self.failure.is_offline() {
            // Nothing more is written to the directory until a restart (said once, loudly, already).
            return Ok(MaintenanceReport::default());
        }
        let mut report = MaintenanceReport::default();
        let mut first_error = None;
        for p in self.all_partitions() {
            let step = (|| {
                if p.roll_if_due(now_ms)? {
                    report.segments_rolled += 1;
                }
                if retention {
                    report.segments_deleted += p.apply_retention(now_ms)?;
                    report.producers_expired += p.expire_producers(now_ms);
                }
                if p.flush_if_due(now_ms)? {
                    report.partitions_flushed += 1;
                }
                Ok::<_, StorageError>(())
            })();
            match step {
                Ok(())
                | Err(StorageError::UnknownTopicOrPartition { .. })
                | Err(StorageError::LogDirOffline { .. }) => {}
                Err(e) => {
                    error!(topic = p.topic(), partition = p.partition(), error = %e, "log maintenance failed");
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Err(e) = self.write_checkpoints() {
            if !self.failure.is_offline() {
                error!(error = %e, "writing checkpoints failed");
            }
            first_error.get_or_insert(e);
        }
        first_error.map_or(Ok(report), Err)
    }

    /// Flushes every partition and writes the checkpoints. The manager stays usable.
    ///
    /// # Errors
    /// The first [`StorageError`] met (every partition is still attempted).
    pub fn shutdown(&self) -> Result<()> {
        // An offline directory is left as it is: the next start recovers it.
        self.failure.check()?;
        let mut first_error = None;
        for p in self.all_partitions() {
            if let Err(e) = p.close() {
                warn!(topic = p.topic(), partition = p.partition(), error = %e, "flush on shutdown failed");
                first_error.get_or_insert(e);
            }
        }
        if let Err(e) = self.write_checkpoints() {
            first_error.get_or_insert(e);
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// A stored topic's effective config: its overrides over `defaults`.
///
/// `local.retention.ms` and `local.retention.bytes` were stored unchecked while
/// Floe accepted them without applying them, so a topic may hold a value that
/// no longer passes (above its `retention.*`, or not a number). Such a value
/// is left out with a warning rather than keeping the broker from starting:
/// the topic then keeps locally what `retention.*` says (`-2`), which copy mode
/// ignores anyway. Any other bad value still fails the open, as before.
fn stored_topic_config(
    defaults: &LogConfig,
    topic: &str,
    overrides: &BTreeMap<String, String>,
) -> Result<LogConfig> {
    let mut overrides = std::borrow::Cow::Borrowed(overrides);
    loop {
        match defaults.with_overrides(&overrides) {
            Err(StorageError::InvalidConfig { key, reason })
                if (key == LOCAL_RETENTION_MS || key == LOCAL_RETENTION_BYTES)
                    && overrides.contains_key(&key) =>
            {
                warn!(topic, %key, %reason, "ignoring a stored topic config that no longer validates; -2 (same as retention) applies");
                overrides.to_mut().remove(&key);
            }
            // An older Floe stored any `floe.*` key; one no longer known must not keep the
            // topic from opening: it stays in the topic's metadata until altered, unused.
            Err(StorageError::InvalidConfig { key, reason })
                if key.starts_with(crate::config::FLOE_PREFIX)
                    && reason.starts_with(crate::config::UNKNOWN_TOPIC_CONFIG)
                    && overrides.contains_key(&key) =>
            {
                warn!(topic, %key, %reason, "ignoring an unknown floe.* key in a stored topic config; alter the topic's config to remove it");
                overrides.to_mut().remove(&key);
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{batch, decode};

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn append(m: &LogManager, topic: &str, p: i32, n: usize) {
        m.partition(topic, p).unwrap().append(&mut batch(n, 1_000, 10), 0).unwrap();
    }

    #[test]
    fn topics_configs_and_data_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (cluster_id, id) = {
            let m =
                LogManager::open_with_node_id(dir.path(), Some(1), LogConfig::default()).unwrap();
            assert_eq!(m.cluster_id().len(), 22);
            let t = m
                .create_topic(
                    "orders",
                    3,
                    map(&[("retention.ms", "1000"), ("floe.iceberg.partition-spec", "x")]),
                )
                .unwrap();
            assert_eq!(t.partition_count(), 3);
            append(&m, "orders", 1, 5);
            append(&m, "orders", 1, 2);
            m.shutdown().unwrap();
            (m.cluster_id().to_string(), t.id())
        };
        let m = LogManager::open_with_node_id(dir.path(), Some(1), LogConfig::default()).unwrap();
        assert_eq!(m.cluster_id(), cluster_id);
        let t = m.topic("orders").unwrap();
        assert_eq!((t.id(), t.partition_count()), (id, 3));
        assert_eq!(t.config().retention_ms, 1000);
        assert_eq!(
            t.overrides(),
            map(&[("retention.ms", "1000"), ("floe.iceberg.partition-spec", "x")])
        );
        let described = t.describe_config();
        assert!(described
            .iter()
            .any(|e| e.name == "retention.ms" && e.value == "1000" && !e.is_default));
        assert!(described
            .iter()
            .any(|e| e.name == "floe.iceberg.partition-spec" && e.value == "x"));
        let p1 = m.partition("orders", 1).unwrap();
        assert_eq!(p1.log_end_offset(), 7);
        assert_eq!(p1.recovery_point(), 7);
        let bytes = p1
            .read(0, 1 << 20, true, crate::IsolationLevel::ReadUncommitted)
            .unwrap()
            .region
            .unwrap()
            .read_to_vec()
            .unwrap();
        assert_eq!(decode(&bytes).len(), 7);
        assert!(m.partition("orders", 3).is_none());
        let cp =
            OffsetCheckpointFile::new(dir.path().join(RECOVERY_POINT_CHECKPOINT)).read().unwrap();
        assert_eq!(cp.get(&("orders".to_string(), 1)), Some(&7));
        drop(m);
        assert!(matches!(
            LogManager::open_with_node_id(dir.path(), Some(2), LogConfig::default()),
            Err(StorageError::InvalidConfig { key, .. }) if key == "node.id"
        ));
    }

    #[test]
    fn a_cluster_id_is_taken_by_a_new_directory_and_enforced_on_an_old_one() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(LogManager::stored_cluster_id(dir.path()).unwrap(), None);
        let m = LogManager::open_in_cluster(
            dir.path(),
            Some(1),
            Some("ClusterA"),
            LogConfig::default(),
        )
        .unwrap();
        assert_eq!(m.cluster_id(), "ClusterA");
        drop(m);
        assert_eq!(LogManager::stored_cluster_id(dir.path()).unwrap().as_deref(), Some("ClusterA"));
        let refused = LogManager::open_in_cluster(
            dir.path(),
            Some(1),
            Some("ClusterB"),
            LogConfig::default(),
        );
        assert!(
            matches!(refused, Err(StorageError::InvalidConfig { key, .. }) if key == "cluster.id")
        );
        let m = LogManager::open_with_node_id(dir.path(), Some(1), LogConfig::default()).unwrap();
        assert_eq!(m.cluster_id(), "ClusterA", "alone, a broker keeps the id it has");
    }

    /// `local.retention.*` were stored unchecked before they were applied: a
    /// stored value that no longer validates is ignored at open, not fatal.
    #[test]
    fn a_stored_local_retention_that_no_longer_validates_is_ignored_at_open() {
        let dir = tempfile::tempdir().unwrap();
        {
            let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
            let o = [("retention.ms", "1000"), ("local.retention.ms", "500")];
            m.create_topic("t", 1, o.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
                .unwrap();
            append(&m, "t", 0, 3);
        }
        let path = crate::file_names::topic_metadata_file(dir.path(), "t");
        let json = std::fs::read_to_string(&path).unwrap().replace("\"500\"", "\"604800000\"");
        assert!(json.contains("604800000"));
        std::fs::write(&path, json).unwrap();
        let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
        let c = m.topic("t").unwrap().config();
        assert_eq!((c.retention_ms, c.local_retention_ms), (1000, -2));
        assert_eq!(m.partition("t", 0).unwrap().log_end_offset(), 3);
    }

    #[test]
    fn log_start_offset_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
            m.create_topic("t", 1, BTreeMap::new()).unwrap();
            append(&m, "t", 0, 10);
            m.partition("t", 0).unwrap().delete_records_before(6).unwrap();
            m.run_maintenance(0).unwrap();
        }
        let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!(m.partition("t", 0).unwrap().log_start_offset(), 6);
    }

    #[test]
    fn create_topic_rejects_bad_requests() {
        let dir = tempfile::tempdir().unwrap();
        let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
        m.create_topic("a", 1, BTreeMap::new()).unwrap();
        assert!(matches!(
            m.create_topic("a", 1, BTreeMap::new()),
            Err(StorageError::TopicAlreadyExists { .. })
        ));
        assert!(matches!(
            m.create_topic("b c", 1, BTreeMap::new()),
            Err(StorageError::InvalidTopic { .. })
        ));
        assert!(matches!(
            m.create_topic("..", 1, BTreeMap::new()),
            Err(StorageError::InvalidTopic { .. })
        ));
        assert!(matches!(
            m.create_topic("b", 0, BTreeMap::new()),
            Err(StorageError::InvalidPartitions { .. })
        ));
        assert!(matches!(
            m.create_topic("b", 1, map(&[("cleanup.policy", "shred")])),
            Err(StorageError::InvalidConfig { key, .. }) if key == "cleanup.policy"
        ));
        assert!(m.topic("b").is_none());
        assert!(!partition_dir(dir.path(), "b", 0).exists());
        assert!(m.validate_create_topic("b", 2, &BTreeMap::new()).is_ok());
        assert!(m.topic("b").is_none(), "validate only");
    }

    #[test]
    fn delete_topic_removes_everything() {
        let dir = tempfile::tempdir().unwrap();
        {
            let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
            m.create_topic("gone", 2, BTreeMap::new()).unwrap();
            append(&m, "gone", 0, 3);
            let held = m.partition("gone", 0).unwrap();
            m.delete_topic("gone").unwrap();
            assert!(m.topic("gone").is_none());
            assert!(matches!(
                held.append(&mut batch(1, 1, 1), 0),
                Err(StorageError::UnknownTopicOrPartition { .. })
            ));
            assert!(matches!(
                m.delete_topic("gone"),
                Err(StorageError::UnknownTopicOrPartition { .. })
            ));
            assert!(!partition_dir(dir.path(), "gone", 0).exists());
            assert!(!topic_metadata_file(dir.path(), "gone").exists());
            let again = m.create_topic("gone", 1, BTreeMap::new()).unwrap();
            assert_eq!(again.partition(0).unwrap().log_end_offset(), 0);
            m.delete_topic("gone").unwrap();
        }
        let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
        assert!(m.topics().is_empty());
        let names: Vec<_> =
            fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(names.iter().all(|n| !n.to_string_lossy().starts_with("gone")), "{names:?}");
    }

    #[test]
    fn recreated_topic_does_not_inherit_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        {
            let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
            m.create_topic("t", 1, BTreeMap::new()).unwrap();
            append(&m, "t", 0, 10);
            m.partition("t", 0).unwrap().delete_records_before(8).unwrap();
            m.run_maintenance(0).unwrap();
            m.delete_topic("t").unwrap();
            m.create_topic("t", 1, BTreeMap::new()).unwrap();
            append(&m, "t", 0, 3);
            std::mem::forget(m); // crash: no shutdown, no flush
        }
        let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
        let p = m.partition("t", 0).unwrap();
        assert_eq!((p.log_start_offset(), p.log_end_offset()), (0, 3));
    }

    #[test]
    fn half_deleted_topics_are_cleaned_at_open() {
        let dir = tempfile::tempdir().unwrap();
        {
            let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
            m.create_topic("keep", 1, BTreeMap::new()).unwrap();
        }
        fs::create_dir_all(dir.path().join("ghost-0")).unwrap();
        fs::write(dir.path().join("ghost-0/00000000000000000000.log"), b"x").unwrap();
        fs::create_dir_all(dir.path().join("keep-5")).unwrap();
        fs::create_dir_all(dir.path().join(deleting_dir_name("old", 0, "abc"))).unwrap();
        let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
        assert!(!dir.path().join("ghost-0").exists());
        assert!(!dir.path().join("keep-5").exists());
        assert!(!dir.path().join(deleting_dir_name("old", 0, "abc")).exists());
        assert!(dir.path().join("keep-0").exists());
        assert_eq!(m.topics().len(), 1);
    }

    #[test]
    fn create_partitions_only_grows() {
        let dir = tempfile::tempdir().unwrap();
        {
            let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
            let t = m.create_topic("t", 2, BTreeMap::new()).unwrap();
            assert!(matches!(
                m.create_partitions("t", 2),
                Err(StorageError::InvalidPartitions { .. })
            ));
            assert!(matches!(
                m.create_partitions("t", 1),
                Err(StorageError::InvalidPartitions { .. })
            ));
            assert!(matches!(
                m.create_partitions("nope", 3),
                Err(StorageError::UnknownTopicOrPartition { .. })
            ));
            m.create_partitions("t", 4).unwrap();
            assert_eq!(t.partition_count(), 4, "visible through the existing Arc<Topic>");
            append(&m, "t", 3, 2);
        }
        let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!(m.topic("t").unwrap().partition_count(), 4);
        assert_eq!(m.partition("t", 3).unwrap().log_end_offset(), 2);
    }

    #[test]
    fn new_defaults_reach_topics_without_an_override() {
        let dir = tempfile::tempdir().unwrap();
        let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
        m.create_topic("plain", 1, BTreeMap::new()).unwrap();
        m.create_topic("kept", 1, map(&[("retention.ms", "5")])).unwrap();
        let defaults =
            LogConfig::default().with_overrides(&map(&[("retention.ms", "777")])).unwrap();
        m.set_default_config(defaults).unwrap();
        assert_eq!(m.topic("plain").unwrap().config().retention_ms, 777);
        assert_eq!(m.partition("plain", 0).unwrap().config().retention_ms, 777);
        assert_eq!(m.topic("kept").unwrap().config().retention_ms, 5, "an override wins");
        assert_eq!(m.default_config().retention_ms, 777);
        m.create_topic("later", 1, BTreeMap::new()).unwrap();
        assert_eq!(m.topic("later").unwrap().config().retention_ms, 777);
    }

    #[test]
    fn alter_config_is_persisted_and_applied() {
        let dir = tempfile::tempdir().unwrap();
        {
            let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
            m.create_topic("t", 1, map(&[("retention.ms", "5")])).unwrap();
            assert!(matches!(
                m.validate_topic_config("t", &map(&[("segment.bytes", "x")])),
                Err(StorageError::InvalidConfig { .. })
            ));
            assert!(m.alter_topic_config("t", map(&[("bogus", "1")])).is_err());
            assert_eq!(m.topic("t").unwrap().config().retention_ms, 5);
            m.alter_topic_config("t", map(&[("message.timestamp.type", "LogAppendTime")])).unwrap();
            let info = m.partition("t", 0).unwrap().append(&mut batch(1, 1, 1), 1234).unwrap();
            assert_eq!(info.log_append_time, 1234, "applied to the partition");
        }
        let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
        let t = m.topic("t").unwrap();
        assert_eq!(t.overrides(), map(&[("message.timestamp.type", "LogAppendTime")]));
        assert_eq!(
            t.config().retention_ms,
            LogConfig::default().retention_ms,
            "full-set semantics"
        );
    }

    #[test]
    fn maintenance_applies_retention() {
        let dir = tempfile::tempdir().unwrap();
        let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
        m.create_topic("t", 1, map(&[("segment.bytes", "100"), ("retention.ms", "100")])).unwrap();
        for _ in 0..4 {
            append(&m, "t", 0, 2);
        }
        let report = m.run_maintenance_pass(10_000, false).unwrap();
        assert_eq!(report.segments_deleted, 0, "not a retention pass");
        assert_eq!(m.partition("t", 0).unwrap().log_start_offset(), 0);
        let report = m.run_maintenance(10_000).unwrap();
        assert_eq!(report.segments_deleted, 3);
        assert_eq!(m.partition("t", 0).unwrap().log_start_offset(), 6);
        let starts =
            OffsetCheckpointFile::new(dir.path().join(LOG_START_OFFSET_CHECKPOINT)).read().unwrap();
        assert_eq!(starts.get(&("t".to_string(), 0)), Some(&6));
    }

    #[test]
    fn an_offline_directory_refuses_everything_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
        m.create_topic("t", 1, BTreeMap::new()).unwrap();
        append(&m, "t", 0, 3);
        m.shutdown().unwrap();
        let checkpoint = fs::read(dir.path().join(RECOVERY_POINT_CHECKPOINT)).unwrap();
        append(&m, "t", 0, 2);
        m.log_dir_failure().mark_offline(&StorageError::Io {
            context: "fsync",
            path: dir.path().join("t-0"),
            source: std::io::Error::from_raw_os_error(5),
        });
        let log = m.partition("t", 0).unwrap();
        let offline = |r: Result<()>| matches!(r, Err(StorageError::LogDirOffline { .. }));
        assert!(offline(log.append(&mut batch(1, 1_000, 10), 0).map(|_| ())));
        assert!(offline(
            log.read(0, 1 << 20, true, crate::IsolationLevel::ReadUncommitted).map(|_| ())
        ));
        assert!(offline(log.offset_for_timestamp(0).map(|_| ())));
        assert!(offline(log.flush()));
        assert!(offline(log.check_online()));
        assert!(offline(m.write_checkpoints()));
        assert_eq!(m.run_maintenance(i64::MAX / 2).unwrap(), MaintenanceReport::default());
        assert!(offline(m.shutdown()));
        // Nothing was written after going offline: the recovery point stays where it was.
        assert_eq!(fs::read(dir.path().join(RECOVERY_POINT_CHECKPOINT)).unwrap(), checkpoint);
        drop(log);
        drop(m);
        let m = LogManager::open(dir.path(), LogConfig::default()).unwrap();
        let log = m.partition("t", 0).unwrap();
        assert_eq!(log.log_end_offset(), 5, "a restart recovers the directory");
        assert!(log.check_online().is_ok());
    }

    #[test]
    fn cluster_ids_are_url_safe_base64() {
        let a = new_cluster_id();
        assert_eq!(a.len(), 22);
        assert!(a.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_ne!(a, new_cluster_id());
    }
}
