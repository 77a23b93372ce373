//! `SchemaStore`: the registry's state and the `_schemas` topic it is a fold of.
//!
//! `_schemas` is an ordinary compacted topic of one partition, in Confluent's own
//! record layouts, so a Confluent registry (or a backup tool) pointed at Floe reads
//! the same history. The store keeps a [`Registry`] and the offset it has applied
//! up to; every request first catches up to the partition's high watermark, so
//! records appended by anyone else (a restore, another registry) are seen before
//! a read is answered or a write is planned.
//!
//! A write is, under the store's one lock: catch up, plan, append the planned
//! records as one batch, fsync, apply. A crash after the append but before the
//! answer leaves a write the client did not see acknowledged, which a retry
//! finds already done (registering an existing schema answers its id), as with
//! Confluent's. A crash before the fsync loses only what was never answered.
//!
//! In a cluster `_schemas` is replicated like any topic (created through the
//! controller on first use) and every broker's registry reads its own replica up
//! to the high watermark, so reads are served everywhere. Writes are made by the
//! registry of the broker leading `_schemas`-0 (one writer, so ids are never given
//! twice): the [`ClusterSide`] says whether this broker leads, fences the append
//! with the leader epoch and waits for the in-sync replicas before the write is
//! applied and answered. Other brokers forward writes to the leader (the broker's
//! `schema_registry::forward`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use bytes::{Bytes, BytesMut};
use floe_protocol::record_batch::BatchIter;
use floe_storage::{AppendOrigin, IsolationLevel, LogManager, PartitionLog};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::error::RegistryError;
use crate::records::Record as SchemaRecord;
use crate::registry::{Planned, Registry};

/// The topic, by Confluent's default name (`kafkastore.topic`).
pub const SCHEMAS_TOPIC: &str = "_schemas";

/// Most bytes read from the log per step of a catch-up.
const READ_CHUNK_BYTES: u32 = 4 << 20;

/// The topic's settings: compacted, kept forever, one partition.
pub fn schemas_topic_config() -> BTreeMap<String, String> {
    [("cleanup.policy", "compact"), ("retention.ms", "-1"), ("retention.bytes", "-1")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// What a cluster broker's registry needs of the cluster (implemented over the
/// broker's controller client and replica manager). Blocking: called on the
/// registry's blocking pool.
pub trait ClusterSide: Send + Sync + std::fmt::Debug {
    /// Asks the controller to create `_schemas` if the cluster has none.
    ///
    /// # Errors
    /// Why it cannot be created now (too few brokers, no controller).
    fn ensure_topic(&self) -> Result<(), String>;

    /// The leader epoch of `_schemas`-0 if this broker leads it.
    fn leader_epoch(&self) -> Option<i32>;

    /// Fences an append: `Ok` only while this broker leads `log` at `leader_epoch`.
    ///
    /// # Errors
    /// Why not.
    fn check_leader(&self, log: &PartitionLog, leader_epoch: i32) -> Result<(), String>;

    /// Waits until the in-sync replicas have everything below `end_offset`.
    ///
    /// # Errors
    /// A timeout, a shrunk ISR, or the leadership lost.
    fn wait_committed(&self, log: &PartitionLog, end_offset: i64) -> Result<(), String>;

    /// The registry URL of the broker leading `_schemas`-0, if known.
    fn leader_url(&self) -> Option<String>;
}

/// The registry and where in `_schemas` it stands.
#[derive(Debug)]
struct State {
    registry: Registry,
    /// The next offset of `_schemas` to apply.
    next_offset: i64,
}

/// See the module doc.
#[derive(Debug)]
pub struct SchemaStore {
    logs: Arc<LogManager>,
    /// Set once in a cluster (after the broker exists); never on a single broker.
    cluster: OnceLock<Arc<dyn ClusterSide>>,
    clustered: bool,
    /// A fresh registry, for replaying a `_schemas` that was deleted and created again.
    empty: fn() -> Registry,
    // std Mutex: the work under it is blocking (reads, fsync) and runs on the
    // registry's own thread; no `.await` happens while it is held.
    state: Mutex<State>,
}

impl SchemaStore {
    /// On a single broker: opens `_schemas` (creating it on first use) and replays
    /// it. In a cluster (`clustered`): the topic comes from the cluster, on first use.
    ///
    /// # Errors
    /// The topic cannot be created or read (single broker).
    pub fn open(
        logs: Arc<LogManager>,
        empty: fn() -> Registry,
        clustered: bool,
    ) -> Result<Self, RegistryError> {
        let store = Self {
            logs,
            cluster: OnceLock::new(),
            clustered,
            empty,
            state: Mutex::new(State { registry: empty(), next_offset: 0 }),
        };
        if !clustered {
            let applied = store.catch_up(&mut store.lock())?;
            tracing::info!(records = applied, "Schema Registry loaded from {SCHEMAS_TOPIC}");
        }
        Ok(store)
    }

    /// In a cluster: how this store reaches the cluster (set once).
    pub fn attach(&self, cluster: Arc<dyn ClusterSide>) {
        let _ = self.cluster.set(cluster);
    }

    /// Whether writes go through `_schemas`' leader (a cluster).
    pub fn is_clustered(&self) -> bool {
        self.clustered
    }

    /// In a cluster, whether this broker's registry makes the writes now.
    pub fn leads(&self) -> bool {
        !self.clustered || self.cluster.get().and_then(|c| c.leader_epoch()).is_some()
    }

    /// In a cluster, the leading registry's URL.
    pub fn leader_url(&self) -> Option<String> {
        self.cluster.get().and_then(|c| c.leader_url())
    }

    /// The high watermark of the local `_schemas`-0 (0 before it exists).
    pub fn high_watermark(&self) -> i64 {
        self.logs.partition(SCHEMAS_TOPIC, 0).map_or(0, |l| l.high_watermark())
    }

    /// `_schemas`-0 here: created on a single broker, asked of the controller in a cluster.
    fn log(&self) -> Result<Arc<PartitionLog>, RegistryError> {
        if let Some(log) = self.logs.partition(SCHEMAS_TOPIC, 0) {
            return Ok(log);
        }
        if self.clustered {
            let why = match self.cluster.get() {
                Some(c) => c.ensure_topic().err().unwrap_or_else(|| "it is being created".into()),
                None => "the broker is starting".into(),
            };
            return Err(RegistryError::UnknownLeader(format!(
                "{SCHEMAS_TOPIC} has no replica on this broker yet: {why}"
            )));
        }
        let store_error =
            |e: floe_storage::StorageError| RegistryError::Store(format!("{SCHEMAS_TOPIC}: {e}"));
        self.logs.create_topic(SCHEMAS_TOPIC, 1, schemas_topic_config()).map_err(store_error)?;
        tracing::info!(
            "created {SCHEMAS_TOPIC} (compacted, one partition) for the Schema Registry"
        );
        self.logs
            .partition(SCHEMAS_TOPIC, 0)
            .ok_or_else(|| RegistryError::Store(format!("{SCHEMAS_TOPIC}-0 does not exist")))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers a read from the registry, caught up first.
    ///
    /// # Errors
    /// What `read` returns, or a failed catch-up.
    pub fn read<T>(
        &self,
        read: impl FnOnce(&Registry) -> Result<T, RegistryError>,
    ) -> Result<T, RegistryError> {
        let mut state = self.lock();
        self.catch_up(&mut state)?;
        read(&state.registry)
    }

    /// Plans a write on the caught-up registry, makes its records durable and
    /// applies them; the planned answer.
    ///
    /// # Errors
    /// The planner's refusal, or the append / fsync failed ([`RegistryError::Store`]).
    pub fn write<T>(
        &self,
        plan: impl FnOnce(&Registry) -> Result<Planned<T>, RegistryError>,
    ) -> Result<T, RegistryError> {
        let mut state = self.lock();
        self.catch_up(&mut state)?;
        let planned = plan(&state.registry)?;
        if planned.records.is_empty() {
            return Ok(planned.answer);
        }
        let log = self.log()?;
        let end = match self.cluster.get() {
            Some(cluster) => {
                let not_leader = |why: String| {
                    RegistryError::UnknownLeader(format!(
                        "this broker no longer leads {SCHEMAS_TOPIC}: {why}"
                    ))
                };
                let epoch =
                    cluster.leader_epoch().ok_or_else(|| not_leader("not its leader".into()))?;
                cluster.check_leader(&log, epoch).map_err(not_leader)?;
                let end = self.append(&log, &planned.records)?;
                cluster
                    .wait_committed(&log, end)
                    .map_err(|why| RegistryError::Store(format!("not replicated: {why}")))?;
                end
            }
            None if self.clustered => {
                return Err(RegistryError::UnknownLeader("the broker is starting".into()))
            }
            None => self.append(&log, &planned.records)?,
        };
        // Applied by reading back what was appended, so the state is always the log's fold.
        self.catch_up(&mut state)?;
        if state.next_offset < end {
            return Err(RegistryError::Store(format!(
                "{SCHEMAS_TOPIC}: the write below {end} is not readable yet"
            )));
        }
        Ok(planned.answer)
    }

    /// Appends `records` as one batch and fsyncs it; the offset after it.
    fn append(&self, log: &PartitionLog, records: &[SchemaRecord]) -> Result<i64, RegistryError> {
        let now = floe_storage::clock::wall_ms();
        let batch: Vec<Record> = records
            .iter()
            .enumerate()
            .map(|(i, r)| Record {
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
                key: Some(Bytes::copy_from_slice(&r.key)),
                value: r.value.as_deref().map(Bytes::copy_from_slice),
                headers: Default::default(),
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            batch.iter(),
            &RecordEncodeOptions { version: 2, compression: Compression::None },
        )
        .map_err(|e| RegistryError::Store(format!("cannot encode the records: {e}")))?;
        let limit = log.config().max_message_bytes;
        if buf.len() > limit {
            // The client's to fix (a smaller schema), not a store failure: 422, as an invalid schema.
            return Err(RegistryError::InvalidSchema(format!(
                "the schema takes a {}-byte record; {SCHEMAS_TOPIC} takes records up to {limit} bytes (its max.message.bytes)",
                buf.len()
            )));
        }
        let store_error =
            |e: floe_storage::StorageError| RegistryError::Store(format!("{SCHEMAS_TOPIC}: {e}"));
        let appended =
            log.append_as(&mut buf, now, AppendOrigin::Coordinator).map_err(store_error)?;
        // Appended, not yet fsynced nor answered: a crash here must leave a write a retry finds done.
        floe_storage::failpoint::check("schema.registry.append")
            .map_err(|e| RegistryError::Store(format!("{SCHEMAS_TOPIC}: fsync: {e}")))?;
        log.flush().map_err(store_error)?;
        Ok(appended.last_offset + 1)
    }

    /// Applies every record from the state's next offset up to the high watermark;
    /// how many were applied.
    fn catch_up(&self, state: &mut State) -> Result<u64, RegistryError> {
        let store_error = |e: String| RegistryError::Store(format!("reading {SCHEMAS_TOPIC}: {e}"));
        let log = match self.log() {
            Ok(log) => log,
            // No replica yet in a cluster: nothing to read, an empty registry.
            Err(_) if self.clustered => return Ok(0),
            Err(e) => return Err(e),
        };
        if log.log_end_offset() < state.next_offset {
            // The topic was deleted and created again: its history starts over.
            tracing::warn!("{SCHEMAS_TOPIC} is shorter than what was applied (deleted and created again?): replaying it");
            *state = State { registry: (self.empty)(), next_offset: 0 };
        }
        let mut applied = 0u64;
        // The cleaner or a DeleteRecords may have moved the start past us; what is gone was superseded.
        state.next_offset = state.next_offset.max(log.log_start_offset());
        while state.next_offset < log.high_watermark() {
            let info = log
                .read(state.next_offset, READ_CHUNK_BYTES, true, IsolationLevel::ReadUncommitted)
                .map_err(|e| store_error(e.to_string()))?;
            let Some(region) = info.region else { break };
            let buf = Bytes::from(region.read_to_vec().map_err(|e| store_error(e.to_string()))?);
            let mut progressed = false;
            for b in BatchIter::new(&buf) {
                let Ok(b) = b else { break };
                let mut bytes = buf.slice(b.position..b.end());
                let set = RecordBatchDecoder::decode(&mut bytes)
                    .map_err(|e| store_error(e.to_string()))?;
                for r in set.records.iter().filter(|r| !r.control && r.offset >= state.next_offset)
                {
                    let Some(key) = &r.key else { continue };
                    match state.registry.apply(key, r.value.as_deref()) {
                        Ok(()) => applied += 1,
                        // Confluent skips records it does not understand (NOOP keys, other versions).
                        Err(e) => {
                            tracing::warn!(offset = r.offset, error = %e, "{SCHEMAS_TOPIC}: skipping a record")
                        }
                    }
                }
                state.next_offset = b.header.next_offset();
                progressed = true;
            }
            if !progressed {
                return Err(store_error(format!("no whole batch at offset {}", state.next_offset)));
            }
        }
        Ok(applied)
    }
}
