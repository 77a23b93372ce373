//! The tiering thread: sealed segments of opted-in topics become rows of
//! Iceberg tables (see `floe-tiering`), off the request runtime.
//!
//! One OS thread runs its own current-thread tokio runtime: the iceberg
//! crate's local file I/O and the segment reads are blocking, so none of it
//! may run on a request worker. Every `floe.iceberg.tick-ms` it walks the
//! topics with `floe.iceberg.enabled=true` and, per topic:
//! 1. sets each partition's retention floor to its next untiered offset
//!    (`floe.iceberg.retention-guard`; the log start offset until the table's
//!    committed offsets are known, so nothing is deleted before that);
//! 2. rolls the active segment of a partition whose oldest untiered record
//!    has waited `floe.iceberg.target-lag-ms` (measured from when this thread
//!    first saw it), so it becomes sealed and tierable;
//! 3. tiers the sealed segments beyond the committed offsets in one commit
//!    (backfill of an existing topic falls out of this);
//! 4. updates the `floe_iceberg_*` metrics. A failure (catalog down, I/O) is
//!    logged and counted, and the topic backs off (doubling up to 60 s);
//! 5. every 10 minutes, deletes the table's orphan data files (written by an
//!    attempt that crashed or was aborted, in no snapshot, older than 30 min);
//! 6. for a shared topic (`floe.iceberg.storage=shared`), applies `retention.ms` /
//!    `retention.bytes` to the table of the partitions it leads (whole data files,
//!    `floe_tiering::retention`) and folds the table's log start offset
//!    (`floe.log-start.<p>`) into every partition's log it has, followers included.
//!
//! # In a cluster
//! Only a partition's leader tiers it ([`Leadership`]: the partitions this
//! broker has taken the leadership of), so the brokers leading the partitions
//! of one topic all commit to its one table, each recording its node id in the
//! snapshot summary (`floe.broker-id`). Every plan starts from the table's
//! committed offsets of each partition, and every commit is conditional on
//! them ([`TopicTable::commit`]): a commit that finds another broker's commit
//! of *other* partitions under it goes on top; one that finds its own
//! partitions tiered since the plan (it was deposed, and the new leader went
//! on) commits nothing. So after a leader change the new leader resumes
//! exactly where the table says, whatever the old one was doing.
//!
//! Followers tier nothing, but hold retention at the table's committed offset
//! of each partition they follow, read from the catalog every pass (the log
//! start offset until it is known): a follower can become the leader, and
//! must still have every record the table does not. Keeping "the floor the
//! leader would" from the leader's own state would need it sent over (Kafka's
//! fetch carries only the log start offset); the table is the one authority
//! both already read, and a floor that is a pass stale only holds more.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use floe_storage::{LogManager, PartitionLog, Topic};
use floe_tiering::shared::FetchCompression;
use floe_tiering::{
    CatalogConfig, CatalogType, DataFormat, IcebergCatalog, PartitionRetention, RetentionReport, S3Settings, SchemaSource, Secret,
    TierLimits, TieringError, TopicTable, TypedLayout,
};
use tracing::{debug, error, info, warn};

use crate::metrics::Metrics;
use crate::text::count;

/// `floe.iceberg.*` broker settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TieringSettings {
    /// Default of the topic setting `floe.iceberg.enabled`.
    pub enabled_default: bool,
    /// The catalog's name.
    pub catalog_name: String,
    /// The namespace of the tables.
    pub namespace: String,
    /// Default of the topic setting `floe.iceberg.partition-spec`.
    pub partition_spec: String,
    /// Default of the topic setting `floe.iceberg.target-lag-ms`.
    pub target_lag_ms: i64,
    /// Hold retention below untiered offsets.
    pub retention_guard: bool,
    /// Pass interval.
    pub tick_ms: u64,
    /// `floe.iceberg.orphan-check-interval-ms`: how often a table is checked for orphan data files.
    pub orphan_check_interval_ms: u64,
    /// `floe.iceberg.orphan-min-age-ms`: an unreferenced data file younger than this is left alone
    /// (it may belong to an attempt still in flight).
    pub orphan_min_age_ms: u64,
    /// `floe.iceberg.maintenance-interval-ms`: how often a table's snapshots are expired.
    pub maintenance_interval_ms: u64,
    /// Default of the topic setting `floe.iceberg.snapshot.max-age-ms`.
    pub snapshot_max_age_ms: i64,
    /// Default of the topic setting `floe.iceberg.snapshot.min-to-keep`.
    pub snapshot_min_to_keep: usize,
    /// Default of the topic setting `floe.iceberg.target-file-size-bytes`.
    pub target_file_size: u64,
    /// Default of the topic setting `floe.iceberg.compaction.enabled`.
    pub compaction_enabled: bool,
    /// Default of the topic setting `floe.iceberg.compaction.min-input-files`.
    pub compaction_min_input_files: usize,
    /// `floe.iceberg.compaction.max-bytes-per-run`: the compaction throttle.
    pub compaction_max_bytes_per_run: u64,
    /// The catalog and warehouse (`floe.iceberg.catalog-type`, `-uri`, `warehouse`, `s3.*`, `rest.*`).
    pub catalog: CatalogSettings,
    /// `log.retention.check.interval.ms`: how often a shared table's retention runs
    /// (it reads every manifest; Kafka's segment retention runs as often).
    pub retention_check_interval_ms: u64,
    /// How fetches below a shared topic's local log start offset are served from its table.
    pub shared_reads: SharedReadSettings,
}

/// The table read path of shared topics (`floe.iceberg.shared.*`; KIP-405's
/// `remote.log.reader.*` and KIP-1018's `remote.fetch.max.wait.ms` are the counterparts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedReadSettings {
    /// `floe.iceberg.shared.read-threads`: OS threads rebuilding batches from the table.
    pub threads: usize,
    /// `floe.iceberg.shared.read-queue`: table reads waiting for a thread; beyond, a fetch answers empty.
    pub queue: usize,
    /// `floe.iceberg.shared.cache-bytes`: rebuilt batches kept for the next fetch of the same offset.
    pub cache_bytes: u64,
    /// `floe.iceberg.shared.fetch-max-wait-ms`: how long a fetch waits for a table read
    /// before answering empty (the read goes on and fills the cache).
    pub fetch_max_wait_ms: u64,
}

/// Which catalog and warehouse the tables live in, as configured; defaults
/// (empty URI or warehouse) resolve against the data directory in
/// [`CatalogSettings::catalog_config`].
#[derive(Clone, PartialEq, Eq)]
pub struct CatalogSettings {
    /// SQL (embedded SQLite) or REST.
    pub catalog_type: CatalogType,
    /// `floe.iceberg.catalog-uri` (empty: the embedded database).
    pub uri: String,
    /// `floe.iceberg.warehouse` (empty: `DATA_DIR/iceberg/warehouse`, or the REST catalog's choice).
    pub warehouse: String,
    /// `floe.iceberg.s3.*`.
    pub s3: S3Settings,
    /// `floe.iceberg.rest.credential`.
    pub rest_credential: Secret,
    /// `floe.iceberg.rest.token`.
    pub rest_token: Secret,
}

impl std::fmt::Debug for CatalogSettings {
    // The secrets print masked by themselves; URIs may carry `user:password@`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use floe_tiering::catalog_config::mask_userinfo;
        let s3 = S3Settings { endpoint: mask_userinfo(&self.s3.endpoint), ..self.s3.clone() };
        f.debug_struct("CatalogSettings")
            .field("catalog_type", &self.catalog_type)
            .field("uri", &mask_userinfo(&self.uri))
            .field("warehouse", &mask_userinfo(&self.warehouse))
            .field("s3", &s3)
            .field("rest_credential", &self.rest_credential)
            .field("rest_token", &self.rest_token)
            .finish()
    }
}

impl Default for CatalogSettings {
    fn default() -> Self {
        Self {
            catalog_type: CatalogType::Sql,
            uri: String::new(),
            warehouse: String::new(),
            s3: S3Settings::default(),
            rest_credential: Secret::default(),
            rest_token: Secret::default(),
        }
    }
}

impl CatalogSettings {
    /// The catalog to open for a broker whose data directory is `data_dir`, named `name`.
    pub fn catalog_config(&self, data_dir: &std::path::Path, name: &str) -> CatalogConfig {
        let dir = data_dir.join("iceberg");
        let mut config = CatalogConfig::sqlite(name, &dir.join("catalog.db"), &dir.join("warehouse"));
        config.catalog_type = self.catalog_type;
        match self.catalog_type {
            CatalogType::Sql if !self.uri.is_empty() => config.uri = self.uri.clone(),
            CatalogType::Sql => {}
            CatalogType::Rest => {
                config.uri = self.uri.clone();
                // A REST catalog places tables itself unless told where.
                config.warehouse = String::new();
            }
        }
        if !self.warehouse.is_empty() {
            config.warehouse = self.warehouse.clone();
        }
        config.s3 = self.s3.clone();
        config.rest_credential = self.rest_credential.clone();
        config.rest_token = self.rest_token.clone();
        config
    }
}

/// Topic setting keys.
pub const ENABLED: &str = "floe.iceberg.enabled";
/// Topic setting: the table's partition spec (at creation).
pub const PARTITION_SPEC: &str = "floe.iceberg.partition-spec";
/// Topic setting: how long the oldest untiered record may wait in the active segment.
pub const TARGET_LAG_MS: &str = "floe.iceberg.target-lag-ms";
/// Topic setting: what the values are (`raw`, `schema-registry`, `json`), so what the table's columns are.
pub const VALUE_FORMAT: &str = "floe.iceberg.value.format";
/// Topic setting: what the keys are (`raw`, `schema-registry`, `json`): the binary `key`, or a typed `key` column.
pub const KEY_FORMAT: &str = "floe.iceberg.key.format";
/// Topic setting: a typed table keeps the bytes of typed values in a binary `value` column
/// too, of typed keys in `key_raw` (at creation).
pub const KEEP_RAW: &str = "floe.iceberg.keep-raw";
/// Topic setting: snapshots older than this expire (the most recent `min-to-keep` stay).
pub const SNAPSHOT_MAX_AGE_MS: &str = "floe.iceberg.snapshot.max-age-ms";
/// Topic setting: how many of the most recent snapshots expiry keeps (at least 1).
pub const SNAPSHOT_MIN_TO_KEEP: &str = "floe.iceberg.snapshot.min-to-keep";
/// Topic setting: the data files' target size (Iceberg's `write.target-file-size-bytes`).
pub const TARGET_FILE_SIZE: &str = "floe.iceberg.target-file-size-bytes";
/// Topic setting: whether maintenance compacts small data files.
pub const COMPACTION_ENABLED: &str = "floe.iceberg.compaction.enabled";
/// Topic setting: how many small files of a partition make a compaction.
pub const COMPACTION_MIN_INPUT_FILES: &str = "floe.iceberg.compaction.min-input-files";
/// Topic setting: whether the table is a copy of the log or the partition's older log
/// ([`StorageMode`]; `docs/shared-mode.md`).
pub const STORAGE: &str = "floe.iceberg.storage";
/// Topic (and broker) setting: retention never deletes offsets not yet tiered.
pub const RETENTION_GUARD: &str = "floe.iceberg.retention-guard";
/// The partition spec of a shared table whose topic names none, with the broker's
/// built-in default `day(timestamp)` ([`table_partition_spec`] puts `identity(partition)`
/// in front of the broker's spec): offset pruning, and day pruning for SQL readers.
pub const SHARED_PARTITION_SPEC: &str = "identity(partition),day(timestamp)";

/// What the Iceberg table of a tiered topic is to its log (`floe.iceberg.storage`).
///
/// In `copy` (the default, and what Floe has always done) the table is a copy: local
/// retention deletes tiered segments and the table keeps its own view for SQL readers.
/// In `shared` the table is the partition's older log: a Kafka client fetches from it
/// what local disk no longer holds (KIP-405's tiered storage, with Iceberg as the
/// remote tier; `docs/shared-mode.md`). The mode is fixed when the topic is created
/// ([`validate_topic_change`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StorageMode {
    /// The table is a copy of the log (`copy`).
    #[default]
    Copy,
    /// The table is the partition's older log (`shared`).
    Shared,
}

impl StorageMode {
    /// The setting's value: `copy` or `shared` (as Kafka's enumerated settings, case-sensitive).
    ///
    /// # Errors
    /// Any other value, in the words CreateTopics and AlterConfigs answer with.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.trim() {
            "copy" => Ok(Self::Copy),
            "shared" => Ok(Self::Shared),
            _ => Err(format!("{STORAGE}: {value:?} is not copy or shared")),
        }
    }

    /// The setting's value for this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Copy => "copy",
            Self::Shared => "shared",
        }
    }
}

impl std::fmt::Display for StorageMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Topic setting: the codec of batches rebuilt from a shared topic's table
/// (`original`: each batch's own, as its producer wrote it).
pub const SHARED_FETCH_COMPRESSION: &str = "floe.iceberg.shared.fetch-compression";

/// Parses a `floe.iceberg.shared.fetch-compression` value.
///
/// # Errors
/// The message INVALID_CONFIG carries.
pub fn parse_fetch_compression(value: &str) -> Result<FetchCompression, String> {
    Ok(match value.trim().to_ascii_lowercase().as_str() {
        "original" => FetchCompression::Original,
        "none" => FetchCompression::None,
        "gzip" => FetchCompression::Gzip,
        "snappy" => FetchCompression::Snappy,
        "lz4" => FetchCompression::Lz4,
        "zstd" => FetchCompression::Zstd,
        _ => return Err(format!("{SHARED_FETCH_COMPRESSION}: {value:?} is not original, none, gzip, snappy, lz4 or zstd")),
    })
}

/// The codec a shared topic's table-served batches are rebuilt with.
pub fn fetch_compression(config: &floe_storage::LogConfig) -> FetchCompression {
    config.floe.get(SHARED_FETCH_COMPRESSION).and_then(|v| parse_fetch_compression(v).ok()).unwrap_or(FetchCompression::Original)
}

/// A topic's storage mode, from its effective config. A value that does not parse
/// (only one stored before validation existed could) is `copy`, what Floe did then.
pub fn storage_mode(config: &floe_storage::LogConfig) -> StorageMode {
    config.floe.get(STORAGE).and_then(|v| StorageMode::parse(v).ok()).unwrap_or_default()
}

/// The partition spec a topic's table is created with: the topic's
/// `floe.iceberg.partition-spec`, else the broker's (`broker_default`). A shared table
/// must find a partition's offsets by pruning on `identity(partition)`, so a shared
/// topic without its own spec gets `identity(partition)` in front of the broker's when
/// that lacks it (with the built-in default: [`SHARED_PARTITION_SPEC`]); a spec the
/// topic names itself is taken as it is, and refused by validation if unfit.
pub fn table_partition_spec(config: &floe_storage::LogConfig, broker_default: &str) -> String {
    if let Some(spec) = config.floe.get(PARTITION_SPEC) {
        return spec.trim().to_string();
    }
    let spec = broker_default.trim();
    if storage_mode(config) != StorageMode::Shared || has_identity_partition(spec) {
        return spec.to_string();
    }
    if spec.is_empty() {
        return "identity(partition)".to_string();
    }
    format!("identity(partition),{spec}")
}

/// Whether `spec` parses and has the term `identity(partition)`.
fn has_identity_partition(spec: &str) -> bool {
    use floe_tiering::iceberg::spec::Transform;
    use floe_tiering::schema::field_id;
    floe_tiering::schema::parse_partition_spec(spec)
        .is_ok_and(|s| s.fields().iter().any(|f| f.source_id == field_id::PARTITION && f.transform == Transform::Identity))
}

/// Whether a shared table can use `spec`: `identity(partition)`, so each data file holds
/// one Kafka partition and its `offset` bounds prune a fetch to the files it needs; and
/// no term on `key`, `value` or `headers`, which would split one partition's offsets
/// over parallel files (`bucket[16](key)`: sixteen). Any timestamp transform is fine.
fn spec_fits_shared(spec: &str) -> bool {
    use floe_tiering::schema::field_id;
    let on_record_content = [field_id::KEY, field_id::VALUE, field_id::HEADERS, field_id::HEADERS_ELEMENT, field_id::HEADER_KEY, field_id::HEADER_VALUE];
    has_identity_partition(spec)
        && floe_tiering::schema::parse_partition_spec(spec).is_ok_and(|s| s.fields().iter().all(|f| !on_record_content.contains(&f.source_id)))
}

/// Checks the `floe.iceberg.*` topic settings a topic would have with `overrides`, so
/// CreateTopics and (Incremental)AlterConfigs refuse a bad value (INVALID_CONFIG)
/// instead of the tiering thread failing on it later.
///
/// Each override is checked alone; then the combinations of `floe.iceberg.storage=shared`
/// are checked on the effective config, `overrides` over `defaults` (the broker's
/// topic defaults: `floe.iceberg.enabled`, `floe.iceberg.retention-guard`,
/// `cleanup.policy`) and `settings` (the default partition spec, and whether shared
/// mode is accepted at all): a topic that sets none of them gets the broker's, and
/// must be refused by what it gets. Overrides that storage refuses (an unknown key, a
/// bad `cleanup.policy`) are left to its own validation, which answers them.
///
/// # Errors
/// A message naming the key and what is wrong (`docs/shared-mode.md` 1.3).
pub fn validate_topic_overrides(
    overrides: &BTreeMap<String, String>,
    defaults: &floe_storage::LogConfig,
    settings: &TieringSettings,
) -> Result<(), String> {
    validate_each_override(overrides)?;
    match defaults.with_overrides(overrides) {
        Ok(effective) => validate_storage_mode(&effective, settings),
        Err(_) => Ok(()),
    }
}

/// Checks an (Incremental)AlterConfigs of an existing topic from its `current`
/// overrides to `next` (both over `defaults`): `floe.iceberg.storage` is fixed once
/// the topic exists. Leaving `shared` would strand the offsets only the table holds,
/// and entering it would serve old offsets from table rows written without the
/// columns a rebuild needs; Kafka refuses turning `remote.storage.enable` off the
/// same way. A value that does not change the mode (unset ↔ `copy`) passes.
///
/// # Errors
/// The message INVALID_CONFIG carries.
pub fn validate_topic_change(
    current: &BTreeMap<String, String>,
    next: &BTreeMap<String, String>,
    defaults: &floe_storage::LogConfig,
) -> Result<(), String> {
    let mode = |overrides: &BTreeMap<String, String>| defaults.with_overrides(overrides).ok().map(|c| storage_mode(&c));
    match (mode(current), mode(next)) {
        (Some(before), Some(after)) if before != after => Err(format!(
            "{STORAGE}: cannot change from {before} to {after} on an existing topic; it is fixed when the topic is created (create a new topic and copy the records to it)"
        )),
        _ => Ok(()),
    }
}

/// The `floe.iceberg.storage=shared` rows of `docs/shared-mode.md` 1.3 that need no
/// catalog, on the effective config. (Those on an existing table's spec and on
/// offsets only the table holds need the tiering thread, and are a later stage.)
fn validate_storage_mode(config: &floe_storage::LogConfig, settings: &TieringSettings) -> Result<(), String> {
    if storage_mode(config) != StorageMode::Shared {
        return Ok(());
    }
    let flag = |key: &str| config.floe.get(key).map(|v| v.trim().to_ascii_lowercase());
    if flag(ENABLED).as_deref() != Some("true") {
        return Err(format!("{STORAGE}: shared needs {ENABLED}=true"));
    }
    if config.cleanup_policy.compact {
        return Err(format!(
            "{STORAGE}: shared cannot be combined with cleanup.policy=compact: the log cleaner would remove records from the local log only, and the table keeps every version"
        ));
    }
    let spec = table_partition_spec(config, &settings.partition_spec);
    if !spec_fits_shared(&spec) {
        return Err(format!(
            "{STORAGE}: shared needs a partition spec with identity(partition) and no term on key, value or headers, to find a partition's offsets in the table; {PARTITION_SPEC} is {spec:?}"
        ));
    }
    // Storage holds retention for the table unless the topic (or the broker default) turns the guard off.
    if flag(RETENTION_GUARD).as_deref() == Some("false") {
        return Err(format!("{STORAGE}: shared needs {RETENTION_GUARD}=true: a local segment may go only once the table holds it"));
    }
    if flag(KEEP_RAW).as_deref() != Some("true") {
        for key in [VALUE_FORMAT, KEY_FORMAT] {
            let format = config.floe.get(key).map_or("raw", |v| v.trim());
            if DataFormat::parse(format).is_ok_and(|f| f != DataFormat::Raw) {
                return Err(format!(
                    "{STORAGE}: shared with {key}={format} needs {KEEP_RAW}=true (the table must hold the bytes a consumer fetches)"
                ));
            }
        }
    }
    Ok(())
}

/// Each `floe.iceberg.*` override alone: its value parses.
fn validate_each_override(overrides: &BTreeMap<String, String>) -> Result<(), String> {
    for (key, value) in overrides {
        let v = value.trim();
        match key.as_str() {
            STORAGE => {
                StorageMode::parse(v)?;
            }
            ENABLED | KEEP_RAW | COMPACTION_ENABLED | RETENTION_GUARD if !v.eq_ignore_ascii_case("true") && !v.eq_ignore_ascii_case("false") => {
                return Err(format!("{key}: {value:?} is not true or false"));
            }
            VALUE_FORMAT | KEY_FORMAT => {
                DataFormat::parse(v).map_err(|e| format!("{key}: {e}"))?;
            }
            PARTITION_SPEC => {
                floe_tiering::schema::parse_partition_spec(v).map_err(|e| e.to_string())?;
            }
            SNAPSHOT_MAX_AGE_MS if v.parse::<u64>().is_err() => {
                return Err(format!("{key}: {value:?} is not a non-negative integer"));
            }
            SNAPSHOT_MIN_TO_KEEP if v.parse::<u64>().map_or(true, |n| n == 0) => {
                return Err(format!("{key}: {value:?} is not a positive integer"));
            }
            TARGET_LAG_MS if v.parse::<u64>().is_err() => {
                return Err(format!("{key}: {value:?} is not a non-negative integer"));
            }
            TARGET_FILE_SIZE | COMPACTION_MIN_INPUT_FILES if v.parse::<u64>().map_or(true, |n| n == 0) => {
                return Err(format!("{key}: {value:?} is not a positive integer"));
            }
            SHARED_FETCH_COMPRESSION => {
                parse_fetch_compression(v)?;
            }
            _ => {}
        }
    }
    Ok(())
}

const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Which partitions this broker tiers, asked every pass: in a cluster, the ones
/// it leads now (`ReplicaManager::is_leader`: the leadership taken, not only
/// given); alone (`None` in [`TieringTask::start`]), every partition it has.
pub type Leadership = Arc<dyn Fn(&str, i32) -> bool + Send + Sync>;

/// Who tiers: this broker's node id (recorded in each commit) and its view of leadership.
#[derive(Clone, Default)]
pub struct Tierers {
    /// In a cluster, this broker's node id.
    pub broker_id: Option<i32>,
    /// In a cluster, which partitions this broker leads.
    pub leadership: Option<Leadership>,
    /// The Schema Registry's schemas, for typed tables (`floe.iceberg.value.format` or
    /// `floe.iceberg.key.format` `=schema-registry`);
    /// `None` when the registry is off.
    pub schemas: Option<Arc<dyn SchemaSource>>,
}

impl std::fmt::Debug for Tierers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tierers")
            .field("broker_id", &self.broker_id)
            .field("clustered", &self.leadership.is_some())
            .field("schemas", &self.schemas.is_some())
            .finish()
    }
}

impl Tierers {
    fn leads(&self, topic: &str, partition: i32) -> bool {
        self.leadership.as_ref().is_none_or(|leads| leads(topic, partition))
    }
}

/// The running tiering thread; [`TieringTask::stop`] ends it after its current pass.
#[derive(Debug)]
pub struct TieringTask {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl TieringTask {
    /// Starts the thread. The catalog lives in `data_dir/iceberg/`.
    ///
    /// # Errors
    /// If the thread cannot be spawned.
    pub fn start(
        logs: Arc<LogManager>,
        data_dir: PathBuf,
        settings: TieringSettings,
        metrics: Arc<Metrics>,
        tierers: Tierers,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new().name("floe-tiering".into()).spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    error!(error = %e, "cannot start the tiering runtime: tiering is off");
                    return;
                }
            };
            let mut tierer = Tierer {
                logs,
                data_dir,
                settings,
                metrics,
                tierers,
                catalog: None,
                catalog_retry: None,
                topics: HashMap::new(),
                stop: flag,
            };
            runtime.block_on(tierer.run());
        })?;
        Ok(Self { stop, handle: Some(handle) })
    }

    /// Stops the thread and waits for its current pass to finish.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            if h.join().is_err() {
                error!("tiering thread panicked");
            }
        }
    }
}

/// How a topic's table is laid out: its key and value formats and, typed, whether it keeps the raw bytes.
type Layout = TypedLayout;

#[derive(Default)]
struct TopicState {
    table: Option<TopicTable>,
    /// The layout `table` was opened with; a changed setting re-opens it.
    layout: Layout,
    /// `floe.iceberg.storage` `table` was opened with; a change re-opens it.
    storage: StorageMode,
    /// Next offset to tier per partition, once known from the table.
    next: Option<BTreeMap<i32, i64>>,
    /// When this thread first saw untiered records in a partition's active segment.
    active_since: HashMap<i32, Instant>,
    failures: u32,
    retry_at: Option<Instant>,
    /// When orphan data files were last looked for.
    orphans_checked: Option<Instant>,
    /// When snapshots were last expired.
    maintained: Option<Instant>,
    /// The partitions this broker tiered on the last pass (it led them).
    led: BTreeSet<i32>,
    /// When a shared table's retention last ran.
    retention_checked: Option<Instant>,
}


struct Tierer {
    logs: Arc<LogManager>,
    data_dir: PathBuf,
    settings: TieringSettings,
    metrics: Arc<Metrics>,
    tierers: Tierers,
    catalog: Option<IcebergCatalog>,
    catalog_retry: Option<(Instant, u32)>,
    topics: HashMap<String, TopicState>,
    /// Set by [`TieringTask::stop`]: passes end early, committing what they converted.
    stop: Arc<AtomicBool>,
}

/// Bytes of `log`'s segments not wholly below `table_end` (the active one included):
/// what a shared partition holds beyond its table, for `retention.bytes`.
fn local_bytes_above(log: &PartitionLog, table_end: i64) -> u64 {
    let in_table: u64 = log.sealed_segments().iter().filter(|s| s.next_offset <= table_end).map(|s| s.size_bytes).sum();
    log.size_bytes().saturating_sub(in_table)
}

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

fn backoff(tick: Duration, failures: u32) -> Duration {
    tick.saturating_mul(1 << failures.min(10)).min(MAX_BACKOFF)
}

impl Tierer {
    async fn run(&mut self) {
        let stop = self.stop.clone();
        let tick = Duration::from_millis(self.settings.tick_ms);
        info!(tick_ms = self.settings.tick_ms, "iceberg tiering thread started");
        while !stop.load(Ordering::Relaxed) {
            self.pass().await;
            let until = Instant::now() + tick;
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(50).min(until.saturating_duration_since(Instant::now()))).await;
            }
        }
    }

    fn enabled(&self, topic: &Topic) -> bool {
        topic.config().floe.get(ENABLED).map_or(self.settings.enabled_default, |v| v.trim().eq_ignore_ascii_case("true"))
    }

    async fn catalog(&mut self) -> Option<IcebergCatalog> {
        if let Some(c) = &self.catalog {
            return Some(c.clone());
        }
        if let Some((at, _)) = self.catalog_retry {
            if Instant::now() < at {
                return None;
            }
        }
        let config = self.settings.catalog.catalog_config(&self.data_dir, &self.settings.catalog_name);
        match IcebergCatalog::open(&config, &self.settings.namespace).await {
            Ok(c) => {
                info!(catalog = %config.describe(), "iceberg catalog open");
                self.catalog = Some(c.clone());
                self.catalog_retry = None;
                Some(c)
            }
            Err(e) => {
                let failures = self.catalog_retry.map_or(0, |(_, n)| n) + 1;
                let wait = backoff(Duration::from_millis(self.settings.tick_ms), failures);
                error!(catalog = %config.describe(), error = %e, retry_in_ms = wait.as_millis() as u64,
                    "cannot open the iceberg catalog");
                self.metrics.iceberg.record_error("(catalog)", &e.kind(), &e.to_string(), now_secs());
                self.catalog_retry = Some((Instant::now() + wait, failures));
                None
            }
        }
    }

    async fn pass(&mut self) {
        // Every topic but the coordinators' own logs (storage holds retention for
        // any topic with tiering on until a floor is set, so none may be skipped here).
        let topics: Vec<Arc<Topic>> =
            self.logs.topics().into_iter().filter(|t| !crate::handlers::is_internal_topic(t.name())).collect();
        for topic in &topics {
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            if self.enabled(topic) {
                self.topic_pass(topic).await;
            } else if self.topics.remove(topic.name()).is_some() {
                info!(topic = topic.name(), "iceberg tiering disabled");
                topic.partitions().iter().for_each(|p| p.set_retention_floor(None));
            }
        }
        self.topics.retain(|name, _| topics.iter().any(|t| t.name() == name));
    }

    fn guard_retention(&self, partitions: &[Arc<PartitionLog>], next: Option<&BTreeMap<i32, i64>>) {
        for log in partitions {
            let floor = if !self.settings.retention_guard {
                None
            } else {
                // Until the committed offsets are known, hold everything.
                Some(next.map_or(log.log_start_offset(), |n| n.get(&log.partition()).copied().unwrap_or(0)))
            };
            log.set_retention_floor(floor);
        }
    }

    async fn topic_pass(&mut self, topic: &Topic) {
        let name = topic.name().to_string();
        let partitions = topic.partitions();
        let config = topic.config();
        let spec = table_partition_spec(&config, &self.settings.partition_spec);
        let format = |key: &str| config.floe.get(key).and_then(|v| DataFormat::parse(v).ok()).unwrap_or_default();
        let layout = Layout {
            key: format(KEY_FORMAT),
            value: format(VALUE_FORMAT),
            keep_raw: config.floe.get(KEEP_RAW).is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
        };
        let target_lag = config
            .floe
            .get(TARGET_LAG_MS)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(self.settings.target_lag_ms.max(0) as u64);
        // The partitions this broker tiers (leads); the others it only holds retention for.
        let (led, followed): (Vec<Arc<PartitionLog>>, Vec<Arc<PartitionLog>>) =
            partitions.iter().cloned().partition(|log| self.tierers.leads(&name, log.partition()));
        {
            let state = self.topics.entry(name.clone()).or_default();
            let storage = storage_mode(&config);
            if state.layout != layout || state.storage != storage {
                state.layout = layout;
                state.storage = storage;
                state.table = None;
            }
            let now_led: BTreeSet<i32> = led.iter().map(|l| l.partition()).collect();
            if now_led != state.led {
                let gained: Vec<i32> = now_led.difference(&state.led).copied().collect();
                let lost: Vec<i32> = state.led.difference(&now_led).copied().collect();
                info!(topic = %name, ?gained, ?lost, tiers = ?now_led, "partitions this broker tiers (those it leads) changed");
                state.led = now_led;
            }
            if state.retry_at.is_some_and(|at| Instant::now() < at) {
                return;
            }
        }
        let next = self.topics[&name].next.clone();
        self.guard_retention(&partitions, next.as_ref());

        // Freshness: roll active segments whose untiered records have waited long enough
        // (on the leader only: a follower's segments are never tiered).
        let state = self.topics.get_mut(&name).expect("inserted above");
        state.active_since.retain(|p, _| state.led.contains(p));
        for log in &led {
            let sealed_end = log.sealed_segments().last().map_or(log.log_start_offset(), |s| s.next_offset);
            if log.log_end_offset() > sealed_end {
                let since = *state.active_since.entry(log.partition()).or_insert_with(Instant::now);
                if since.elapsed() >= Duration::from_millis(target_lag) {
                    match log.roll_now() {
                        Ok(_) => {
                            state.active_since.remove(&log.partition());
                        }
                        Err(e) => warn!(topic = %name, partition = log.partition(), error = %e, "cannot roll for tiering"),
                    }
                }
            } else {
                state.active_since.remove(&log.partition());
            }
        }

        let Some(catalog) = self.catalog().await else { return };
        let topic_id = topic.id().to_string();
        // Nothing sealed beyond what is committed: no need to tier. Followers still
        // read the table's committed offsets, to hold retention at them.
        let pending = self.topics[&name].next.as_ref().is_none_or(|next| {
            led.iter().any(|log| {
                let done = next.get(&log.partition()).copied().unwrap_or(0).max(log.log_start_offset());
                log.sealed_segments().last().is_some_and(|s| s.next_offset > done)
            })
        });
        if led.is_empty() || !pending {
            if !followed.is_empty() && self.settings.retention_guard {
                self.refresh_committed(&catalog, &name, &topic_id, &spec, &partitions).await;
            } else if let Some(next) = &self.topics[&name].next {
                self.update_lag(&name, &partitions, next);
            }
            self.shared_retention(&catalog, &name, &topic_id, &spec, &config, &led, &partitions).await;
            return;
        }
        let limits = TierLimits {
            target_file_size: config
                .floe
                .get(TARGET_FILE_SIZE)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(self.settings.target_file_size)
                .clamp(1, usize::MAX as u64) as usize,
            ..TierLimits::default()
        };
        let result = self.tier(&catalog, &name, &topic_id, &spec, &led, &limits).await;
        let tick = Duration::from_millis(self.settings.tick_ms);
        let m = &self.metrics.iceberg;
        let state = self.topics.get_mut(&name).expect("inserted above");
        match result {
            Ok(outcome) => {
                state.failures = 0;
                state.retry_at = None;
                if !outcome.committed.is_empty() {
                    m.commits.with_label_values(&[&name]).inc();
                    m.rows.with_label_values(&[&name]).inc_by(outcome.rows);
                    m.bytes.with_label_values(&[&name]).inc_by(outcome.bytes);
                    m.files.with_label_values(&[&name]).inc_by(outcome.files);
                    m.dead_letters.with_label_values(&[&name]).inc_by(outcome.dead_letters);
                    info!(topic = %name, ranges = ?outcome.committed, rows = outcome.rows, files = outcome.files,
                        snapshot = outcome.snapshot_id, "tiered to iceberg");
                }
                m.skipped_batches.with_label_values(&[&name]).inc_by(outcome.skipped.len() as u64);
                state.next = Some(outcome.next_offsets);
                let next = state.next.clone();
                let check_orphans = state.orphans_checked.is_none_or(|t| t.elapsed() >= Duration::from_millis(self.settings.orphan_check_interval_ms));
                if check_orphans {
                    state.orphans_checked = Some(Instant::now());
                }
                let maintain = state.maintained.is_none_or(|t| t.elapsed() >= Duration::from_millis(self.settings.maintenance_interval_ms));
                if maintain {
                    state.maintained = Some(Instant::now());
                }
                self.guard_retention(&partitions, next.as_ref());
                if let Some(next) = &next {
                    self.update_lag(&name, &partitions, next);
                }
                if check_orphans {
                    self.clean_orphans(&name).await;
                }
                if maintain {
                    self.maintain(&name, &config).await;
                }
                self.shared_retention(&catalog, &name, &topic_id, &spec, &config, &led, &partitions).await;
            }
            Err(e) => {
                state.failures += 1;
                let wait = match e {
                    // Someone else committed: re-plan at once on the next pass.
                    TieringError::StaleSnapshot { .. } => tick,
                    _ => backoff(tick, state.failures),
                };
                state.retry_at = Some(Instant::now() + wait);
                state.table = None;
                error!(topic = %name, error = %e, failures = state.failures, retry_in_ms = wait.as_millis() as u64,
                    "iceberg tiering failed");
                m.record_error(&name, &e.kind(), &e.to_string(), now_secs());
            }
        }
    }

    /// Reads the table's committed offsets (for the partitions this broker follows)
    /// and holds retention at them. A failure keeps the floors where they were.
    async fn refresh_committed(
        &mut self,
        catalog: &IcebergCatalog,
        name: &str,
        topic_id: &str,
        spec: &str,
        partitions: &[Arc<PartitionLog>],
    ) {
        let result = match self.table(catalog, name, topic_id, spec).await {
            Ok(table) => table.committed_next_offsets().await,
            Err(e) => Err(e),
        };
        let state = self.topics.get_mut(name).expect("inserted by topic_pass");
        match result {
            Ok(next) => {
                state.next = Some(next.clone());
                self.guard_retention(partitions, Some(&next));
                self.update_lag(name, partitions, &next);
            }
            Err(e) => {
                state.failures += 1;
                let wait = backoff(Duration::from_millis(self.settings.tick_ms), state.failures);
                state.retry_at = Some(Instant::now() + wait);
                state.table = None;
                warn!(topic = %name, error = %e, retry_in_ms = wait.as_millis() as u64,
                    "cannot read the table's committed offsets: follower retention stays held");
                self.metrics.iceberg.record_error(name, &e.kind(), &e.to_string(), now_secs());
            }
        }
    }

    /// A shared topic's table retention and log start offset (`docs/shared-mode.md` 3.2):
    /// for the partitions this broker leads, `retention.ms`/`retention.bytes` applied to
    /// the table, and the log start offset a DeleteRecords moved carried into it (every
    /// `log.retention.check.interval.ms`); then, for every partition it
    /// has (followers too), the table's `floe.log-start.<p>` folded into the log. The
    /// table is the authority: a log start the log has not reached yet moves it up,
    /// never down. A failure changes nothing and is retried on the next pass.
    #[allow(clippy::too_many_arguments)]
    async fn shared_retention(
        &mut self,
        catalog: &IcebergCatalog,
        name: &str,
        topic_id: &str,
        spec: &str,
        config: &floe_storage::LogConfig,
        led: &[Arc<PartitionLog>],
        partitions: &[Arc<PartitionLog>],
    ) {
        let Some(state) = self.topics.get(name) else { return };
        if state.storage != StorageMode::Shared || (state.next.is_none() && !led.is_empty()) {
            return;
        }
        let interval = Duration::from_millis(self.settings.retention_check_interval_ms);
        let due = state.retention_checked.is_none_or(|t| t.elapsed() >= interval);
        let next = state.next.clone().unwrap_or_default();
        // `cleanup.policy` without `delete` turns retention off, as for segments (shared refuses compact anyway).
        let (ms, bytes) = if config.cleanup_policy.delete { (config.retention_ms, config.retention_bytes) } else { (-1, -1) };
        // Due even without limits: a DeleteRecords on the leader moved its log start
        // offset, and the table (which every replica reads) must follow.
        let inputs: BTreeMap<i32, PartitionRetention> = if due {
            led.iter()
                .map(|log| {
                    let end = next.get(&log.partition()).copied().unwrap_or(0);
                    let input = PartitionRetention {
                        retention_ms: ms,
                        retention_bytes: bytes,
                        local_bytes: local_bytes_above(log, end),
                        log_start_offset: log.log_start_offset(),
                    };
                    (log.partition(), input)
                })
                .collect()
        } else {
            BTreeMap::new()
        };
        let table = match self.table(catalog, name, topic_id, spec).await {
            Ok(t) => t,
            Err(e) => {
                debug!(topic = %name, error = %e, "table retention skipped: the table cannot be opened");
                return;
            }
        };
        let result = if inputs.is_empty() {
            table.committed_log_starts().await.map(|s| RetentionReport { log_starts: s, ..RetentionReport::default() })
        } else {
            table.apply_retention(&inputs, floe_coordinator::clock::wall_ms()).await
        };
        if !inputs.is_empty() {
            if let Some(state) = self.topics.get_mut(name) {
                state.retention_checked = Some(Instant::now());
            }
        }
        let report = match result {
            Ok(r) => r,
            Err(e @ TieringError::StaleSnapshot { .. }) => {
                debug!(topic = %name, error = %e, "table retention lost its race: re-planned on the next run");
                if let Some(state) = self.topics.get_mut(name) {
                    state.retention_checked = None;
                }
                return;
            }
            Err(e) => {
                warn!(topic = %name, error = %e, "table retention failed");
                self.metrics.iceberg.record_error(name, &e.kind(), &e.to_string(), now_secs());
                return;
            }
        };
        if report.removed_files > 0 {
            self.metrics.iceberg.retention_removed_files.with_label_values(&[name]).inc_by(report.removed_files as u64);
        }
        for log in partitions {
            let Some(&start) = report.log_starts.get(&log.partition()) else { continue };
            if start <= log.log_start_offset() {
                continue;
            }
            match log.set_log_start_offset(start) {
                Ok(now) => info!(topic = %name, partition = log.partition(), log_start = now, "log start offset moved by table retention"),
                // A follower whose high watermark is still below it: folded on a later pass.
                Err(e) => debug!(topic = %name, partition = log.partition(), start, error = %e, "cannot fold the table's log start offset yet"),
            }
        }
    }

    fn update_lag(&self, name: &str, partitions: &[Arc<PartitionLog>], next: &BTreeMap<i32, i64>) {
        let m = &self.metrics.iceberg;
        for log in partitions {
            let next = next.get(&log.partition()).copied().unwrap_or(0);
            let p = log.partition().to_string();
            m.committed_offset.with_label_values(&[name, &p]).set(next);
            m.lag_records.with_label_values(&[name, &p]).set((log.log_end_offset() - next.max(log.log_start_offset())).max(0));
        }
    }

    /// Table maintenance after a commit: expires the table's old snapshots
    /// (`floe.iceberg.snapshot.*`) and deletes what only they reached, compacts small
    /// data files (`floe.iceberg.compaction.*`; in a cluster, the broker leading
    /// partition 0 does), and records the table's size in the metrics.
    async fn maintain(&self, name: &str, config: &floe_storage::LogConfig) {
        let Some(table) = self.topics.get(name).and_then(|s| s.table.as_ref()) else { return };
        let setting = |key: &str| config.floe.get(key).and_then(|v| v.trim().parse::<u64>().ok());
        let policy = floe_tiering::ExpiryPolicy {
            max_age_ms: setting(SNAPSHOT_MAX_AGE_MS).map_or(self.settings.snapshot_max_age_ms, |v| v.min(i64::MAX as u64) as i64),
            min_to_keep: setting(SNAPSHOT_MIN_TO_KEEP).map_or(self.settings.snapshot_min_to_keep, |v| v as usize).max(1),
        };
        let now_ms = floe_coordinator::clock::wall_ms();
        let m = &self.metrics.iceberg;
        match table.expire_snapshots(policy, now_ms).await {
            Ok(report) => m.expired_snapshots.with_label_values(&[name]).inc_by(report.expired as u64),
            Err(e) => warn!(topic = %name, error = %e, "cannot expire snapshots"),
        }
        // A typed table's dead-letter table and a shared table's `__log` get commits too: the same policy.
        for dead in table.companion_tables() {
            if let Err(e) = dead.expire_snapshots(policy, now_ms).await {
                warn!(topic = %name, table = %dead.ident(), error = %e, "cannot expire snapshots");
            }
        }
        let compaction = config
            .floe
            .get(COMPACTION_ENABLED)
            .map_or(self.settings.compaction_enabled, |v| v.trim().eq_ignore_ascii_case("true"));
        if compaction && self.tierers.leads(name, 0) {
            let policy = CompactionRequest {
                target_file_size: setting(TARGET_FILE_SIZE),
                default_target_file_size: self.settings.target_file_size,
                min_input_files: setting(COMPACTION_MIN_INPUT_FILES).map_or(self.settings.compaction_min_input_files, |v| v as usize),
                max_bytes_per_run: self.settings.compaction_max_bytes_per_run,
            }
            .policy(table)
            .await;
            for table in std::iter::once(table).chain(table.companion_tables()) {
                match table.compact(&policy).await {
                    Ok(r) if r.snapshot_id.is_some() => {
                        m.compactions.with_label_values(&[name]).inc();
                        m.compacted_files.with_label_values(&[name]).inc_by(r.rewritten_files as u64);
                    }
                    Ok(_) => {}
                    // Tiering committed first (another broker's partitions): the next run re-plans.
                    Err(e @ TieringError::StaleSnapshot { .. }) => debug!(topic = %name, table = %table.ident(), error = %e, "compaction lost its race"),
                    Err(e) => warn!(topic = %name, table = %table.ident(), error = %e, "cannot compact small data files"),
                }
            }
        }
        match table.stats().await {
            Ok(stats) => {
                m.snapshots.with_label_values(&[name]).set(stats.snapshots as i64);
                m.data_files.with_label_values(&[name]).set(stats.data_files as i64);
                m.metadata_bytes.with_label_values(&[name]).set(stats.metadata_bytes as i64);
            }
            Err(e) => debug!(topic = %name, error = %e, "cannot read the table's size"),
        }
    }

    /// Deletes data files of crashed or aborted attempts (in no snapshot, older than `floe.iceberg.orphan-min-age-ms`).
    async fn clean_orphans(&self, name: &str) {
        let Some(table) = self.topics.get(name).and_then(|s| s.table.as_ref()) else { return };
        for table in std::iter::once(table).chain(table.companion_tables()) {
            match table.clean_orphans(Duration::from_millis(self.settings.orphan_min_age_ms), true).await {
                Ok(removed) if !removed.is_empty() => {
                    info!(topic = %name, table = %table.ident(), files = removed.len(), "removed orphan data files");
                }
                Ok(_) => {}
                Err(e) => warn!(topic = %name, table = %table.ident(), error = %e, "cannot look for orphan data files"),
            }
        }
    }

    /// The topic's table, opened (created if missing) once and kept.
    async fn table(&mut self, catalog: &IcebergCatalog, name: &str, topic_id: &str, spec: &str) -> Result<&TopicTable, TieringError> {
        if self.topics[name].table.is_none() {
            let layout = self.topics[name].layout;
            let shared = self.topics[name].storage == StorageMode::Shared;
            if layout.needs_registry() && self.tierers.schemas.is_none() {
                return Err(TieringError::SchemaRegistry(format!(
                    "{KEY_FORMAT} or {VALUE_FORMAT}=schema-registry needs the Schema Registry, which is off (floe.schema.registry.listen is empty)"
                )));
            }
            let mut table = if shared && layout.is_typed() {
                // Validation demanded keep-raw: the fetch path rebuilds batches from the kept bytes.
                catalog.shared_typed_table(name, topic_id, spec, layout, self.tierers.schemas.clone()).await?
            } else if shared {
                catalog.shared_topic_table(name, topic_id, spec).await?
            } else if !layout.is_typed() {
                catalog.topic_table(name, topic_id, spec).await?
            } else {
                catalog.typed_table(name, topic_id, spec, layout, self.tierers.schemas.clone()).await?
            };
            if let Some(id) = self.tierers.broker_id {
                table = table.with_broker_id(id);
            }
            self.topics.get_mut(name).expect("present").table = Some(table);
        }
        Ok(self.topics[name].table.as_ref().expect("set above"))
    }

    async fn tier(
        &mut self,
        catalog: &IcebergCatalog,
        name: &str,
        topic_id: &str,
        spec: &str,
        partitions: &[Arc<PartitionLog>],
        limits: &TierLimits,
    ) -> Result<floe_tiering::TierOutcome, TieringError> {
        let stop = self.stop.clone();
        let table = self.table(catalog, name, topic_id, spec).await?;
        table.tier_until(partitions, limits, &stop).await
    }
}

/// `floe iceberg status`: what the configured catalog holds, per table: the
/// committed (next) offset of each partition and the totals of the current
/// snapshot. Reads the catalog only; safe while the broker runs.
///
/// # Errors
/// If the catalog cannot be opened or read.
pub async fn status(config: &CatalogConfig, namespace: &str) -> Result<String, TieringError> {
    use std::fmt::Write;
    let catalog_name = &config.name;
    let (catalog, tables) = open_and_list(config, namespace).await?;
    let mut out = String::new();
    let _ = writeln!(out, "catalog {catalog_name} ({}), namespace {namespace}: {}", config.describe(), count(tables.len(), "table"));
    for ident in tables {
        let table = catalog.catalog().load_table(&ident).await.map_err(|source| TieringError::Iceberg {
            operation: "load",
            table: ident.to_string(),
            source: Box::new(source),
        })?;
        let metadata = table.metadata();
        let summary = metadata.current_snapshot().map(|s| s.summary().additional_properties.clone()).unwrap_or_default();
        let total = |k: &str| summary.get(k).cloned().unwrap_or_else(|| "0".into());
        // Each term by its column's name: day(event_time), not the field id.
        let schema = metadata.current_schema();
        let terms: Vec<String> = metadata
            .default_partition_spec()
            .fields()
            .iter()
            .map(|f| {
                let column = schema.field_by_id(f.source_id).map_or_else(|| format!("field {}", f.source_id), |c| c.name.clone());
                format!("{}({column})", f.transform)
            })
            .collect();
        let _ = writeln!(
            out,
            "table {ident}: snapshots {}, current snapshot {}, rows {}, data files {}, bytes {}, partitioned by {}",
            metadata.snapshots().len(),
            metadata.current_snapshot_id().map_or_else(|| "none".to_string(), |id| id.to_string()),
            total("total-records"),
            total("total-data-files"),
            total("total-files-size"),
            if terms.is_empty() { "nothing (unpartitioned)".to_string() } else { terms.join(", ") },
        );
        for (p, next) in floe_tiering::offsets::committed_next_offsets(metadata) {
            let _ = writeln!(out, "  partition {p}: committed offset {next} (next to tier)");
        }
    }
    Ok(out)
}

/// The catalog and the tables of `namespace` in it (for the `floe iceberg` tools).
async fn open_and_list(config: &CatalogConfig, namespace: &str) -> Result<(IcebergCatalog, Vec<floe_tiering::iceberg::TableIdent>), TieringError> {
    let catalog = IcebergCatalog::open(config, namespace).await?;
    let ns = floe_tiering::iceberg::NamespaceIdent::new(namespace.to_string());
    let tables = catalog.catalog().list_tables(&ns).await.map_err(|source| TieringError::Iceberg {
        operation: "list",
        table: namespace.to_string(),
        source: Box::new(source),
    })?;
    Ok((catalog, tables))
}

/// What a table is compacted with, before the table is looked at: the tiering
/// thread's topic settings, or `floe iceberg maintain`'s flags.
#[derive(Debug, Clone, Copy)]
pub struct CompactionRequest {
    /// The topic setting or `--target-file-size-bytes`; `None`: the table's property, else the default.
    pub target_file_size: Option<u64>,
    /// `floe.iceberg.target-file-size-bytes`.
    pub default_target_file_size: u64,
    /// `floe.iceberg.compaction.min-input-files`.
    pub min_input_files: usize,
    /// `floe.iceberg.compaction.max-bytes-per-run`.
    pub max_bytes_per_run: u64,
}

impl CompactionRequest {
    /// The policy for `table`: the requested target, else the table's
    /// `write.target-file-size-bytes`, else the default; at least 2 files a group.
    async fn policy(&self, table: &floe_tiering::TopicTable) -> floe_tiering::CompactionPolicy {
        let target = match self.target_file_size {
            Some(t) => t,
            // Unreadable: the default; the compaction itself then says what is wrong.
            None => table.target_file_size_property().await.ok().flatten().unwrap_or(self.default_target_file_size),
        };
        floe_tiering::CompactionPolicy {
            min_input_files: self.min_input_files.max(2),
            ..floe_tiering::CompactionPolicy::for_target(target, self.max_bytes_per_run)
        }
    }
}

/// `floe iceberg maintain`: expires the snapshots of every tiered table in
/// `namespace` (or of `only`) by `policy`, as the tiering thread does; with
/// `compaction`, compacts small data files and expires again (so the replaced
/// files are deleted when the policy lets their snapshots go); says what it did.
/// Safe beside a running broker: every step commits only on the snapshot it
/// planned on, and deletes only files no remaining snapshot reaches.
///
/// # Errors
/// [`TieringError`] if the catalog cannot be opened or listed; a table that fails
/// is reported in the text and the others go on.
pub async fn maintain(
    config: &CatalogConfig,
    namespace: &str,
    policy: floe_tiering::ExpiryPolicy,
    compaction: Option<CompactionRequest>,
    only: Option<&str>,
) -> Result<String, TieringError> {
    use std::fmt::Write;
    let (catalog, tables) = open_and_list(config, namespace).await?;
    let now_ms = floe_coordinator::clock::wall_ms();
    let mut out = String::new();
    for ident in tables.into_iter().filter(|t| only.is_none_or(|o| t.name() == o)) {
        let name = ident.name().to_string();
        let result = async {
            let loaded = catalog.catalog().load_table(&ident).await.map_err(|source| TieringError::Iceberg {
                operation: "load",
                table: ident.to_string(),
                source: Box::new(source),
            })?;
            let topic_id = loaded.metadata().properties().get(floe_tiering::catalog::TOPIC_ID_PROPERTY).cloned().unwrap_or_default();
            let table = catalog.topic_table(&name, &topic_id, "").await?;
            let mut expired = table.expire_snapshots(policy, now_ms).await?;
            let mut compacted = None;
            if let Some(c) = compaction {
                let report = table.compact(&c.policy(&table).await).await?;
                if report.snapshot_id.is_some() {
                    // The replaced files' snapshots may already be past the max age: let them go now.
                    let again = table.expire_snapshots(policy, floe_coordinator::clock::wall_ms()).await?;
                    expired.expired += again.expired;
                    expired.snapshots_left = again.snapshots_left;
                    expired.deleted_files += again.deleted_files;
                    expired.deleted_metadata_files += again.deleted_metadata_files;
                }
                compacted = Some(report);
            }
            let stats = table.stats().await?;
            Ok::<_, TieringError>((expired, compacted, stats))
        }
        .await;
        let _ = match result {
            Ok((r, c, stats)) => {
                let _ = writeln!(out, "table {ident}: expired {}, {} left, deleted {} and {}",
                    count(r.expired, "snapshot"), r.snapshots_left, count(r.deleted_files, "file"), count(r.deleted_metadata_files, "metadata file"));
                if let Some(c) = c {
                    let _ = writeln!(out, "table {ident}: compacted {} ({} bytes) of {} into {} ({} bytes); {} merged",
                        count(c.rewritten_files, "small data file"), c.rewritten_bytes, count(c.groups, "partition"), c.added_files, c.added_bytes,
                        count(if c.snapshot_id.is_some() { c.merged_manifests as u64 } else { 0 }, "manifest"));
                }
                writeln!(out, "table {ident}: {}, {}, {} metadata bytes",
                    count(stats.snapshots, "snapshot"), count(stats.data_files, "data file"), stats.metadata_bytes)
            }
            Err(e) => writeln!(out, "table {ident}: failed: {e}"),
        };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Storage refuses a `floe.*` topic key it does not list: every key tiering reads is listed.
    #[test]
    fn every_topic_key_tiering_reads_is_accepted_by_storage() {
        let keys = [
            ENABLED,
            PARTITION_SPEC,
            TARGET_LAG_MS,
            VALUE_FORMAT,
            KEY_FORMAT,
            KEEP_RAW,
            SNAPSHOT_MAX_AGE_MS,
            SNAPSHOT_MIN_TO_KEEP,
            TARGET_FILE_SIZE,
            COMPACTION_ENABLED,
            COMPACTION_MIN_INPUT_FILES,
            STORAGE,
            RETENTION_GUARD,
            SHARED_FETCH_COMPRESSION,
        ];
        for key in keys {
            assert!(floe_storage::config::FLOE_TOPIC_KEYS.contains(&key), "{key}");
        }
        assert_eq!(keys.len(), floe_storage::config::FLOE_TOPIC_KEYS.len(), "storage lists a key tiering does not read");
    }

    fn settings() -> TieringSettings {
        TieringSettings {
            enabled_default: false,
            catalog_name: "floe".into(),
            namespace: "kafka".into(),
            partition_spec: floe_tiering::schema::DEFAULT_PARTITION_SPEC.into(),
            target_lag_ms: 60_000,
            retention_guard: true,
            tick_ms: 5000,
            orphan_check_interval_ms: 600_000,
            orphan_min_age_ms: 1_800_000,
            maintenance_interval_ms: 600_000,
            snapshot_max_age_ms: 86_400_000,
            snapshot_min_to_keep: 1,
            target_file_size: 128 << 20,
            compaction_enabled: true,
            compaction_min_input_files: 5,
            compaction_max_bytes_per_run: 512 << 20,
            catalog: CatalogSettings::default(),
            shared_reads: SharedReadSettings { threads: 1, queue: 64, cache_bytes: 256 << 20, fetch_max_wait_ms: 500 },
            retention_check_interval_ms: 300_000,
        }
    }

    /// The broker's topic defaults as `BrokerConfig` builds them (tiering off, guard on).
    fn broker_defaults() -> floe_storage::LogConfig {
        let keys = BTreeMap::from([(ENABLED.to_string(), "false".to_string()), (RETENTION_GUARD.to_string(), "true".to_string())]);
        floe_storage::LogConfig::default().with_overrides(&keys).unwrap()
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn check(pairs: &[(&str, &str)]) -> Result<(), String> {
        validate_topic_overrides(&map(pairs), &broker_defaults(), &settings())
    }

    #[test]
    fn topic_settings_are_validated() {
        let o = |k: &str, v: &str| check(&[(k, v)]);
        assert!(o(ENABLED, "true").is_ok());
        assert!(o(ENABLED, "yes").is_err());
        assert!(o(PARTITION_SPEC, "hour(timestamp),identity(partition)").is_ok());
        assert!(o(PARTITION_SPEC, "hour(nope)").is_err());
        assert!(o(TARGET_LAG_MS, "-1").is_err());
        assert!(o(VALUE_FORMAT, "schema-registry").is_ok());
        assert!(o(VALUE_FORMAT, "avro").is_err());
        assert!(o(VALUE_FORMAT, "json").is_ok());
        assert!(o(KEY_FORMAT, "schema-registry").is_ok());
        assert!(o(KEY_FORMAT, "json").is_ok());
        let e = o(KEY_FORMAT, "avro").unwrap_err();
        assert!(e.starts_with(KEY_FORMAT), "{e}");
        assert!(o(KEEP_RAW, "maybe").is_err());
        assert!(o(RETENTION_GUARD, "maybe").is_err());
        assert!(o("retention.ms", "x").is_ok(), "not ours: storage answers it");
    }

    /// A shared topic with everything it needs: tiering on, and the broker's defaults for the rest.
    const SHARED: &[(&str, &str)] = &[(STORAGE, "shared"), (ENABLED, "true")];

    fn shared_with(extra: &[(&str, &str)]) -> Result<(), String> {
        let mut pairs = SHARED.to_vec();
        pairs.extend_from_slice(extra);
        check(&pairs)
    }

    #[test]
    fn storage_mode_values() {
        assert_eq!(check(&[(STORAGE, "copy")]), Ok(()));
        assert_eq!(shared_with(&[]), Ok(()), "the shared default spec has identity(partition)");
        assert_eq!(check(&[(STORAGE, "x")]), Err(r#"floe.iceberg.storage: "x" is not copy or shared"#.to_string()));
        assert_eq!(check(&[(STORAGE, "Shared")]), Err(r#"floe.iceberg.storage: "Shared" is not copy or shared"#.to_string()));
        assert_eq!(check(&[(STORAGE, "")]), Err(r#"floe.iceberg.storage: "" is not copy or shared"#.to_string()));
    }

    #[test]
    fn shared_needs_tiering_on() {
        let e = Err("floe.iceberg.storage: shared needs floe.iceberg.enabled=true".to_string());
        assert_eq!(check(&[(STORAGE, "shared")]), e, "the broker default is off");
        assert_eq!(check(&[(STORAGE, "shared"), (ENABLED, "false")]), e);
        // The broker default counts: on there, a topic need not set it.
        let on = floe_storage::LogConfig::default().with_overrides(&map(&[(ENABLED, "true")])).unwrap();
        assert_eq!(validate_topic_overrides(&map(&[(STORAGE, "shared")]), &on, &settings()), Ok(()));
        assert_eq!(validate_topic_overrides(&map(&[(STORAGE, "shared"), (ENABLED, "false")]), &on, &settings()), e);
    }

    #[test]
    fn shared_refuses_compaction() {
        let e = Err("floe.iceberg.storage: shared cannot be combined with cleanup.policy=compact: the log cleaner would remove records from the local log only, and the table keeps every version".to_string());
        assert_eq!(shared_with(&[("cleanup.policy", "compact")]), e);
        assert_eq!(shared_with(&[("cleanup.policy", "compact,delete")]), e);
        assert_eq!(shared_with(&[("cleanup.policy", "delete")]), Ok(()));
        // The broker's log.cleanup.policy is the topic's default.
        let compacted = broker_defaults().with_overrides(&map(&[("cleanup.policy", "compact")])).unwrap();
        assert_eq!(validate_topic_overrides(&map(SHARED), &compacted, &settings()), e);
        // A bad cleanup.policy is storage's to answer.
        assert_eq!(shared_with(&[("cleanup.policy", "sometimes")]), Ok(()));
    }

    #[test]
    fn shared_needs_a_spec_that_finds_offsets() {
        let e = |spec: &str| {
            Err(format!(
                "floe.iceberg.storage: shared needs a partition spec with identity(partition) and no term on key, value or headers, to find a partition's offsets in the table; floe.iceberg.partition-spec is \"{spec}\""
            ))
        };
        assert_eq!(shared_with(&[(PARTITION_SPEC, "day(timestamp)")]), e("day(timestamp)"));
        assert_eq!(shared_with(&[(PARTITION_SPEC, "")]), e(""));
        assert_eq!(shared_with(&[(PARTITION_SPEC, "bucket[4](partition)")]), e("bucket[4](partition)"));
        assert_eq!(shared_with(&[(PARTITION_SPEC, "identity(partition),bucket[16](key)")]), e("identity(partition),bucket[16](key)"));
        assert_eq!(shared_with(&[(PARTITION_SPEC, "identity(partition),truncate[4](value)")]), e("identity(partition),truncate[4](value)"));
        assert_eq!(shared_with(&[(PARTITION_SPEC, "identity(partition)")]), Ok(()));
        assert_eq!(shared_with(&[(PARTITION_SPEC, "hour(timestamp), identity(partition)")]), Ok(()));
        assert_eq!(shared_with(&[(PARTITION_SPEC, "identity(partition),bucket[8](offset)")]), Ok(()));
        // A copy topic keeps any spec.
        assert_eq!(check(&[(ENABLED, "true"), (PARTITION_SPEC, "bucket[16](key)")]), Ok(()));
        // The broker's spec is the topic's default: one with a key term is refused too.
        let mut keyed = settings();
        keyed.partition_spec = "bucket[16](key)".into();
        assert_eq!(validate_topic_overrides(&map(SHARED), &broker_defaults(), &keyed), e("identity(partition),bucket[16](key)"));
    }

    #[test]
    fn shared_needs_the_retention_guard() {
        let e = Err("floe.iceberg.storage: shared needs floe.iceberg.retention-guard=true: a local segment may go only once the table holds it".to_string());
        assert_eq!(shared_with(&[(RETENTION_GUARD, "false")]), e);
        assert_eq!(shared_with(&[(RETENTION_GUARD, "FALSE")]), e);
        assert_eq!(shared_with(&[(RETENTION_GUARD, "true")]), Ok(()));
        let unguarded = broker_defaults().with_overrides(&map(&[(RETENTION_GUARD, "false")])).unwrap();
        assert_eq!(validate_topic_overrides(&map(SHARED), &unguarded, &settings()), e);
    }

    #[test]
    fn the_storage_mode_is_fixed_once_a_topic_exists() {
        let defaults = broker_defaults();
        let copy = map(&[(ENABLED, "true")]);
        let shared = map(&[(ENABLED, "true"), (STORAGE, "shared")]);
        let explicit_copy = map(&[(ENABLED, "true"), (STORAGE, "copy")]);
        let e = |a: &str, b: &str| {
            Err(format!("floe.iceberg.storage: cannot change from {a} to {b} on an existing topic; it is fixed when the topic is created (create a new topic and copy the records to it)"))
        };
        assert_eq!(validate_topic_change(&copy, &shared, &defaults), e("copy", "shared"));
        assert_eq!(validate_topic_change(&shared, &copy, &defaults), e("shared", "copy"));
        assert_eq!(validate_topic_change(&shared, &explicit_copy, &defaults), e("shared", "copy"));
        assert_eq!(validate_topic_change(&copy, &explicit_copy, &defaults), Ok(()), "unset is copy");
        let retention = map(&[(ENABLED, "true"), (STORAGE, "shared"), ("retention.ms", "1000")]);
        assert_eq!(validate_topic_change(&shared, &retention, &defaults), Ok(()), "other settings of a shared topic change freely");
    }

    #[test]
    fn shared_typed_tables_keep_the_raw_bytes() {
        let e = |key: &str, format: &str| {
            Err(format!("floe.iceberg.storage: shared with {key}={format} needs floe.iceberg.keep-raw=true (the table must hold the bytes a consumer fetches)"))
        };
        assert_eq!(shared_with(&[(VALUE_FORMAT, "schema-registry")]), e(VALUE_FORMAT, "schema-registry"));
        assert_eq!(shared_with(&[(VALUE_FORMAT, "json"), (KEEP_RAW, "false")]), e(VALUE_FORMAT, "json"));
        assert_eq!(shared_with(&[(KEY_FORMAT, "json")]), e(KEY_FORMAT, "json"));
        assert_eq!(shared_with(&[(KEY_FORMAT, "schema-registry"), (VALUE_FORMAT, "json")]), e(VALUE_FORMAT, "json"));
        assert_eq!(shared_with(&[(VALUE_FORMAT, "schema-registry"), (KEY_FORMAT, "json"), (KEEP_RAW, "true")]), Ok(()));
        assert_eq!(shared_with(&[(VALUE_FORMAT, "raw"), (KEY_FORMAT, "raw")]), Ok(()));
    }

    #[test]
    fn the_mode_and_the_table_spec_of_a_topic() {
        let config = |pairs: &[(&str, &str)]| broker_defaults().with_overrides(&map(pairs)).unwrap();
        assert_eq!(storage_mode(&config(&[])), StorageMode::Copy);
        assert_eq!(storage_mode(&config(&[(STORAGE, "shared")])), StorageMode::Shared);
        assert_eq!(storage_mode(&config(&[(STORAGE, "bogus")])), StorageMode::Copy);
        assert_eq!(StorageMode::Shared.to_string(), "shared");
        let day = floe_tiering::schema::DEFAULT_PARTITION_SPEC;
        assert_eq!(table_partition_spec(&config(&[]), day), "day(timestamp)");
        assert_eq!(table_partition_spec(&config(&[(STORAGE, "shared")]), day), SHARED_PARTITION_SPEC);
        assert_eq!(table_partition_spec(&config(&[(STORAGE, "shared")]), "hour(timestamp)"), "identity(partition),hour(timestamp)");
        assert_eq!(table_partition_spec(&config(&[(STORAGE, "shared")]), "hour(timestamp),identity(partition)"), "hour(timestamp),identity(partition)");
        assert_eq!(table_partition_spec(&config(&[(STORAGE, "shared")]), ""), "identity(partition)");
        // The topic's own spec is taken as it is (validation refuses it if unfit).
        assert_eq!(table_partition_spec(&config(&[(STORAGE, "shared"), (PARTITION_SPEC, " day(timestamp) ")]), day), "day(timestamp)");
        assert!(spec_fits_shared(SHARED_PARTITION_SPEC));
    }
}
