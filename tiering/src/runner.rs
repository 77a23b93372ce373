//! The tiering thread: sealed segments of opted-in topics become rows of
//! Iceberg tables ([`crate::table`]), off the request runtime. The broker
//! starts it ([`TieringTask::start`]) with its logs, its settings, the
//! tiering metrics and who leads what ([`Tierers`]); everything else is here.
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
use std::time::{Duration, Instant};

use floe_storage::{LogManager, PartitionLog, Topic};
use tracing::{debug, error, info, warn};

use crate::compaction::CompactionRequest;
use crate::metrics::IcebergMetrics;
use crate::settings::*;
use crate::{
    DataFormat, IcebergCatalog, PartitionRetention, RetentionReport, SchemaSource, TierLimits,
    TieringError, TopicTable, TypedLayout,
};
use floe_storage::clock::{wall_ms, wall_secs};

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
        metrics: IcebergMetrics,
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
    metrics: IcebergMetrics,
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
    let in_table: u64 = log
        .sealed_segments()
        .iter()
        .filter(|s| s.next_offset <= table_end)
        .map(|s| s.size_bytes)
        .sum();
    log.size_bytes().saturating_sub(in_table)
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
                tokio::time::sleep(
                    Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())),
                )
                .await;
            }
        }
    }

    fn enabled(&self, topic: &Topic) -> bool {
        topic
            .config()
            .floe
            .get(ENABLED)
            .map_or(self.settings.enabled_default, |v| v.trim().eq_ignore_ascii_case("true"))
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
        let config =
            self.settings.catalog.catalog_config(&self.data_dir, &self.settings.catalog_name);
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
                self.metrics.record_error("(catalog)", &e.kind(), &e.to_string(), wall_secs());
                self.catalog_retry = Some((Instant::now() + wait, failures));
                None
            }
        }
    }

    async fn pass(&mut self) {
        // Every topic but the coordinators' own logs (storage holds retention for
        // any topic with tiering on until a floor is set, so none may be skipped here).
        let topics: Vec<Arc<Topic>> = self
            .logs
            .topics()
            .into_iter()
            .filter(|t| !floe_protocol::topic::is_internal(t.name()))
            .collect();
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
                Some(next.map_or(log.log_start_offset(), |n| {
                    n.get(&log.partition()).copied().unwrap_or(0)
                }))
            };
            log.set_retention_floor(floor);
        }
    }

    async fn topic_pass(&mut self, topic: &Topic) {
        let name = topic.name().to_string();
        let partitions = topic.partitions();
        let config = topic.config();
        let spec = table_partition_spec(&config, &self.settings.partition_spec);
        let format = |key: &str| {
            config.floe.get(key).and_then(|v| DataFormat::parse(v).ok()).unwrap_or_default()
        };
        let layout = Layout {
            key: format(KEY_FORMAT),
            value: format(VALUE_FORMAT),
            keep_raw: config
                .floe
                .get(KEEP_RAW)
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
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
            let sealed_end =
                log.sealed_segments().last().map_or(log.log_start_offset(), |s| s.next_offset);
            if log.log_end_offset() > sealed_end {
                let since = *state.active_since.entry(log.partition()).or_insert_with(Instant::now);
                if since.elapsed() >= Duration::from_millis(target_lag) {
                    match log.roll_now() {
                        Ok(_) => {
                            state.active_since.remove(&log.partition());
                        }
                        Err(e) => {
                            warn!(topic = %name, partition = log.partition(), error = %e, "cannot roll for tiering")
                        }
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
                let done =
                    next.get(&log.partition()).copied().unwrap_or(0).max(log.log_start_offset());
                log.sealed_segments().last().is_some_and(|s| s.next_offset > done)
            })
        });
        if led.is_empty() || !pending {
            if !followed.is_empty() && self.settings.retention_guard {
                self.refresh_committed(&catalog, &name, &topic_id, &spec, &partitions).await;
            } else if let Some(next) = &self.topics[&name].next {
                self.update_lag(&name, &partitions, next);
            }
            self.shared_retention(&catalog, &name, &topic_id, &spec, &config, &led, &partitions)
                .await;
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
        let m = &self.metrics;
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
                let check_orphans = state.orphans_checked.is_none_or(|t| {
                    t.elapsed() >= Duration::from_millis(self.settings.orphan_check_interval_ms)
                });
                if check_orphans {
                    state.orphans_checked = Some(Instant::now());
                }
                let maintain = state.maintained.is_none_or(|t| {
                    t.elapsed() >= Duration::from_millis(self.settings.maintenance_interval_ms)
                });
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
                self.shared_retention(
                    &catalog,
                    &name,
                    &topic_id,
                    &spec,
                    &config,
                    &led,
                    &partitions,
                )
                .await;
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
                m.record_error(&name, &e.kind(), &e.to_string(), wall_secs());
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
                self.metrics.record_error(name, &e.kind(), &e.to_string(), wall_secs());
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
        let (ms, bytes) = if config.cleanup_policy.delete {
            (config.retention_ms, config.retention_bytes)
        } else {
            (-1, -1)
        };
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
            table
                .committed_log_starts()
                .await
                .map(|s| RetentionReport { log_starts: s, ..RetentionReport::default() })
        } else {
            table.apply_retention(&inputs, wall_ms()).await
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
                self.metrics.record_error(name, &e.kind(), &e.to_string(), wall_secs());
                return;
            }
        };
        if report.removed_files > 0 {
            self.metrics
                .retention_removed_files
                .with_label_values(&[name])
                .inc_by(report.removed_files as u64);
        }
        for log in partitions {
            let Some(&start) = report.log_starts.get(&log.partition()) else { continue };
            if start <= log.log_start_offset() {
                continue;
            }
            match log.set_log_start_offset(start) {
                Ok(now) => {
                    info!(topic = %name, partition = log.partition(), log_start = now, "log start offset moved by table retention")
                }
                // A follower whose high watermark is still below it: folded on a later pass.
                Err(e) => {
                    debug!(topic = %name, partition = log.partition(), start, error = %e, "cannot fold the table's log start offset yet")
                }
            }
        }
    }

    fn update_lag(&self, name: &str, partitions: &[Arc<PartitionLog>], next: &BTreeMap<i32, i64>) {
        let m = &self.metrics;
        for log in partitions {
            let next = next.get(&log.partition()).copied().unwrap_or(0);
            let p = log.partition().to_string();
            m.committed_offset.with_label_values(&[name, &p]).set(next);
            m.lag_records
                .with_label_values(&[name, &p])
                .set((log.log_end_offset() - next.max(log.log_start_offset())).max(0));
        }
    }

    /// Table maintenance after a commit: expires the table's old snapshots
    /// (`floe.iceberg.snapshot.*`) and deletes what only they reached, compacts small
    /// data files (`floe.iceberg.compaction.*`; in a cluster, the broker leading
    /// partition 0 does), and records the table's size in the metrics.
    async fn maintain(&self, name: &str, config: &floe_storage::LogConfig) {
        let Some(table) = self.topics.get(name).and_then(|s| s.table.as_ref()) else { return };
        let setting = |key: &str| config.floe.get(key).and_then(|v| v.trim().parse::<u64>().ok());
        let policy = crate::ExpiryPolicy {
            max_age_ms: setting(SNAPSHOT_MAX_AGE_MS)
                .map_or(self.settings.snapshot_max_age_ms, |v| v.min(i64::MAX as u64) as i64),
            min_to_keep: setting(SNAPSHOT_MIN_TO_KEEP)
                .map_or(self.settings.snapshot_min_to_keep, |v| v as usize)
                .max(1),
        };
        let now_ms = wall_ms();
        let m = &self.metrics;
        match table.expire_snapshots(policy, now_ms).await {
            Ok(report) => {
                m.expired_snapshots.with_label_values(&[name]).inc_by(report.expired as u64)
            }
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
                min_input_files: setting(COMPACTION_MIN_INPUT_FILES)
                    .map_or(self.settings.compaction_min_input_files, |v| v as usize),
                max_bytes_per_run: self.settings.compaction_max_bytes_per_run,
            }
            .policy(table)
            .await;
            for table in std::iter::once(table).chain(table.companion_tables()) {
                match table.compact(&policy).await {
                    Ok(r) if r.snapshot_id.is_some() => {
                        m.compactions.with_label_values(&[name]).inc();
                        m.compacted_files
                            .with_label_values(&[name])
                            .inc_by(r.rewritten_files as u64);
                    }
                    Ok(_) => {}
                    // Tiering committed first (another broker's partitions): the next run re-plans.
                    Err(e @ TieringError::StaleSnapshot { .. }) => {
                        debug!(topic = %name, table = %table.ident(), error = %e, "compaction lost its race")
                    }
                    Err(e) => {
                        warn!(topic = %name, table = %table.ident(), error = %e, "cannot compact small data files")
                    }
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
            match table
                .clean_orphans(Duration::from_millis(self.settings.orphan_min_age_ms), true)
                .await
            {
                Ok(removed) if !removed.is_empty() => {
                    info!(topic = %name, table = %table.ident(), files = removed.len(), "removed orphan data files");
                }
                Ok(_) => {}
                Err(e) => {
                    warn!(topic = %name, table = %table.ident(), error = %e, "cannot look for orphan data files")
                }
            }
        }
    }

    /// The topic's table, opened (created if missing) once and kept.
    async fn table(
        &mut self,
        catalog: &IcebergCatalog,
        name: &str,
        topic_id: &str,
        spec: &str,
    ) -> Result<&TopicTable, TieringError> {
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
                catalog
                    .shared_typed_table(name, topic_id, spec, layout, self.tierers.schemas.clone())
                    .await?
            } else if shared {
                catalog.shared_topic_table(name, topic_id, spec).await?
            } else if !layout.is_typed() {
                catalog.topic_table(name, topic_id, spec).await?
            } else {
                catalog
                    .typed_table(name, topic_id, spec, layout, self.tierers.schemas.clone())
                    .await?
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
    ) -> Result<crate::TierOutcome, TieringError> {
        let stop = self.stop.clone();
        let table = self.table(catalog, name, topic_id, spec).await?;
        table.tier_until(partitions, limits, &stop).await
    }
}
