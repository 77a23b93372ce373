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

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::{Bytes, BytesMut};
use floe_protocol::record_batch::BatchIter;
use floe_schema::records::Record as SchemaRecord;
use floe_schema::{Planned, Registry, RegistryError};
use floe_storage::{AppendOrigin, IsolationLevel, LogManager, PartitionLog};
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

/// The topic, by Confluent's default name (`kafkastore.topic`).
pub const SCHEMAS_TOPIC: &str = "_schemas";

/// Most bytes read from the log per step of a catch-up.
const READ_CHUNK_BYTES: u32 = 4 << 20;

/// The topic's settings: compacted, kept forever, one partition.
pub(crate) fn schemas_topic_config() -> BTreeMap<String, String> {
    [("cleanup.policy", "compact"), ("retention.ms", "-1"), ("retention.bytes", "-1")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
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
    log: Arc<PartitionLog>,
    // std Mutex: the work under it is blocking (reads, fsync) and runs on the
    // registry's own thread; no `.await` happens while it is held.
    state: Mutex<State>,
}

impl SchemaStore {
    /// Opens `_schemas` (creating it on first use) and replays it into `registry`.
    ///
    /// # Errors
    /// The topic cannot be created or read.
    pub(crate) fn open(logs: &LogManager, registry: Registry) -> Result<Self, RegistryError> {
        let store_error = |e: floe_storage::StorageError| RegistryError::Store(format!("{SCHEMAS_TOPIC}: {e}"));
        if logs.topic(SCHEMAS_TOPIC).is_none() {
            logs.create_topic(SCHEMAS_TOPIC, 1, schemas_topic_config()).map_err(store_error)?;
            tracing::info!("created {SCHEMAS_TOPIC} (compacted, one partition) for the Schema Registry");
        }
        let log = logs.partition(SCHEMAS_TOPIC, 0).ok_or_else(|| RegistryError::Store(format!("{SCHEMAS_TOPIC}-0 does not exist")))?;
        let next_offset = log.log_start_offset();
        let store = Self { log, state: Mutex::new(State { registry, next_offset }) };
        let applied = store.catch_up(&mut store.lock())?;
        tracing::info!(records = applied, "Schema Registry loaded from {SCHEMAS_TOPIC}");
        Ok(store)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers a read from the registry, caught up first.
    ///
    /// # Errors
    /// What `read` returns, or a failed catch-up.
    pub(crate) fn read<T>(&self, read: impl FnOnce(&Registry) -> Result<T, RegistryError>) -> Result<T, RegistryError> {
        let mut state = self.lock();
        self.catch_up(&mut state)?;
        read(&state.registry)
    }

    /// Plans a write on the caught-up registry, makes its records durable and
    /// applies them; the planned answer.
    ///
    /// # Errors
    /// The planner's refusal, or the append / fsync failed ([`RegistryError::Store`]).
    pub(crate) fn write<T>(&self, plan: impl FnOnce(&Registry) -> Result<Planned<T>, RegistryError>) -> Result<T, RegistryError> {
        let mut state = self.lock();
        self.catch_up(&mut state)?;
        let planned = plan(&state.registry)?;
        if planned.records.is_empty() {
            return Ok(planned.answer);
        }
        self.append(&planned.records)?;
        // Applied by reading back what was appended, so the state is always the log's fold.
        self.catch_up(&mut state)?;
        Ok(planned.answer)
    }

    /// Appends `records` as one batch and fsyncs it.
    fn append(&self, records: &[SchemaRecord]) -> Result<(), RegistryError> {
        let now = wall_ms();
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
        RecordBatchEncoder::encode(&mut buf, batch.iter(), &RecordEncodeOptions { version: 2, compression: Compression::None })
            .map_err(|e| RegistryError::Store(format!("cannot encode the records: {e}")))?;
        let limit = self.log.config().max_message_bytes;
        if buf.len() > limit {
            // The client's to fix (a smaller schema), not a store failure: 422, as an invalid schema.
            return Err(RegistryError::InvalidSchema(format!(
                "the schema takes a {}-byte record; {SCHEMAS_TOPIC} takes records up to {limit} bytes (its max.message.bytes)",
                buf.len()
            )));
        }
        let store_error = |e: floe_storage::StorageError| RegistryError::Store(format!("{SCHEMAS_TOPIC}: {e}"));
        self.log.append_as(&mut buf, now, AppendOrigin::Coordinator).map_err(store_error)?;
        // Appended, not yet fsynced nor answered: a crash here must leave a write a retry finds done.
        floe_storage::failpoint::check("schema.registry.append")
            .map_err(|e| RegistryError::Store(format!("{SCHEMAS_TOPIC}: fsync: {e}")))?;
        self.log.flush().map_err(store_error)?;
        Ok(())
    }

    /// Applies every record from the state's next offset up to the high watermark;
    /// how many were applied.
    fn catch_up(&self, state: &mut State) -> Result<u64, RegistryError> {
        let store_error = |e: String| RegistryError::Store(format!("reading {SCHEMAS_TOPIC}: {e}"));
        let mut applied = 0u64;
        // The cleaner or a DeleteRecords may have moved the start past us; what is gone was superseded.
        state.next_offset = state.next_offset.max(self.log.log_start_offset());
        while state.next_offset < self.log.high_watermark() {
            let info = self
                .log
                .read(state.next_offset, READ_CHUNK_BYTES, true, IsolationLevel::ReadUncommitted)
                .map_err(|e| store_error(e.to_string()))?;
            let Some(region) = info.region else { break };
            let buf = Bytes::from(region.read_to_vec().map_err(|e| store_error(e.to_string()))?);
            let mut progressed = false;
            for b in BatchIter::new(&buf) {
                let Ok(b) = b else { break };
                let mut bytes = buf.slice(b.position..b.end());
                let set = RecordBatchDecoder::decode(&mut bytes).map_err(|e| store_error(e.to_string()))?;
                for r in set.records.iter().filter(|r| !r.control && r.offset >= state.next_offset) {
                    let Some(key) = &r.key else { continue };
                    match state.registry.apply(key, r.value.as_deref()) {
                        Ok(()) => applied += 1,
                        // Confluent skips records it does not understand (NOOP keys, other versions).
                        Err(e) => tracing::warn!(offset = r.offset, error = %e, "{SCHEMAS_TOPIC}: skipping a record"),
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

fn wall_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
