//! Typed tables: record values in the Confluent wire format become typed
//! columns, typed from their Schema Registry schemas (issue #15).
//!
//! With the topic setting `floe.iceberg.value.format=schema-registry`, each
//! value's schema id picks a `floe_schema::TypedDecoder` (from a
//! [`SchemaSource`]: the broker's registry), and the value's top-level fields
//! become top-level columns beside Floe's Kafka columns (a field named like a
//! Kafka column is written as `value_<name>`). The table's schema follows the
//! schema versions by name ([`evolve`]): a new field is a new optional column
//! with a fresh field id, a widened field (`int` → `long`, `float` → `double`,
//! decimal precision) an Iceberg type promotion, a field a later version dropped
//! stays and gets nulls.
//!
//! Keys (`floe.iceberg.key.format=schema-registry`) are typed the same way into
//! one column `key`: a struct of the key schema's fields, or the key's own type
//! for a primitive key schema (`TypedDecoder::wraps_value`). It replaces the
//! binary `key` (kept as `key_raw` with `floe.iceberg.keep-raw`), is added when
//! the first key is seen, and evolves as value columns do ([`evolve::plan_key`]).
//! Keys are typed first: a record whose key cannot be typed is a dead letter,
//! its error starting `key: `. Either may instead be schemaless JSON
//! (`json`), its columns inferred from the data ([`json`]).
//!
//! A record that cannot be written typed goes to the dead-letter table
//! `<topic>__dlq` (the raw layout plus an `error` column): a value not in the
//! wire format, an unknown schema id, bytes that do not match the schema, or a
//! schema the table cannot take. It is never dropped and never stops the
//! topic's tiering.
//!
//! # Exactly once across the two tables
//! One pass commits the dead-letter rows first, then the typed rows, each table
//! with the pass's offset ranges in its snapshot summary. A crash between the two
//! commits re-plans from the typed table's offsets and converts the same records
//! again; dead-letter rows below the dead-letter table's own committed offsets
//! are left out that time, so every offset lands in exactly one of the tables,
//! once. (`tiering.dlq.committed` is the failpoint between the commits.)
//!
//! # Shared mode
//! A shared topic's typed table ([`crate::IcebergCatalog::shared_typed_table`],
//! keep-raw required) also has the lossless columns, and so has its dead-letter
//! table: a Kafka fetch below the local log start is rebuilt from the kept bytes
//! (`value`, `key_raw`) of both, merged with `<topic>__log` by offset
//! ([`crate::shared`]). `__log` commits before the dead letters.
//!
//! # Layout
//! - [`evolve`]: which columns a value (or key) schema needs added; which schemas cannot be written.
//! - [`json`]: schemaless JSON keys and values, their columns inferred.
//! - [`project`]: a decoded column rewritten in the table's shape.
//! - [`promote`]: Iceberg type promotion, committed to the SQL catalog directly.
//! - `rows`: a converted batch split into typed rows and dead letters.

pub mod evolve;
pub mod json;
pub mod project;
pub mod promote;
pub(crate) mod rows;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use floe_schema::TypedDecoder;

/// What a topic's keys or values are, for its table (`floe.iceberg.key.format`,
/// `floe.iceberg.value.format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DataFormat {
    /// The bytes as they are, in the binary `key` or `value` column.
    #[default]
    Raw,
    /// Confluent's wire format (magic byte, schema id, payload): typed from the registered schema.
    SchemaRegistry,
    /// Schemaless JSON: columns inferred from the data ([`json`]).
    Json,
}

/// The format of a topic's values (`floe.iceberg.value.format`).
pub type ValueFormat = DataFormat;
/// The format of a topic's keys (`floe.iceberg.key.format`).
pub type KeyFormat = DataFormat;

impl DataFormat {
    /// The setting's value: `raw`, `schema-registry` or `json`.
    ///
    /// # Errors
    /// Any other value, with the ones accepted.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.trim() {
            "" | "raw" => Ok(Self::Raw),
            "schema-registry" => Ok(Self::SchemaRegistry),
            "json" => Ok(Self::Json),
            other => Err(format!("{other:?} is not a format: raw, schema-registry or json")),
        }
    }
}

/// How a typed table is laid out: what its keys and values are, and whether the
/// raw bytes of the typed ones are kept (`floe.iceberg.keep-raw`, at creation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TypedLayout {
    /// `floe.iceberg.key.format`.
    pub key: KeyFormat,
    /// `floe.iceberg.value.format`.
    pub value: ValueFormat,
    /// `floe.iceberg.keep-raw`: a typed value keeps its bytes in `value`, a typed key in `key_raw`.
    pub keep_raw: bool,
}

impl TypedLayout {
    /// Whether anything is typed (else the topic's table is a raw one).
    pub fn is_typed(&self) -> bool {
        self.key != DataFormat::Raw || self.value != DataFormat::Raw
    }

    /// Whether decoding needs the Schema Registry.
    pub fn needs_registry(&self) -> bool {
        self.key == DataFormat::SchemaRegistry || self.value == DataFormat::SchemaRegistry
    }
}

/// Why a [`SchemaSource`] has no decoder for a schema id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaLookupError {
    /// No such id, or its schema cannot be typed: its records are dead letters.
    Missing(String),
    /// The registry cannot answer now (its topic is unreadable, not yet replicated):
    /// the pass fails and is retried; nothing is written.
    Unavailable(String),
}

/// Where the tiering thread gets the schemas of schema ids: the broker's registry.
pub trait SchemaSource: Send + Sync + std::fmt::Debug {
    /// Whether schema `id` is a Protobuf schema (its values carry message indexes).
    ///
    /// # Errors
    /// See [`SchemaLookupError`].
    fn is_protobuf(&self, id: i32) -> Result<bool, SchemaLookupError>;

    /// The typed decoder of schema `id`; for Protobuf, of the message at
    /// `message_indexes` (as the wire format numbers them; ignored otherwise).
    ///
    /// # Errors
    /// See [`SchemaLookupError`].
    fn decoder(
        &self,
        id: i32,
        message_indexes: &[i32],
    ) -> Result<Arc<TypedDecoder>, SchemaLookupError>;
}

/// A [`SchemaSource`] whose answers are kept once made: a schema id's schema
/// never changes, so neither does its decoder.
#[derive(Debug)]
pub struct CachedSchemas {
    source: Arc<dyn SchemaSource>,
    kinds: Mutex<HashMap<i32, bool>>,
    decoders: Mutex<DecoderCache>,
}

/// Decoders by schema id and Protobuf message indexes.
type DecoderCache = HashMap<(i32, Vec<i32>), Arc<TypedDecoder>>;

impl CachedSchemas {
    /// Answers from `source`, each asked once.
    pub fn new(source: Arc<dyn SchemaSource>) -> Self {
        Self { source, kinds: Mutex::new(HashMap::new()), decoders: Mutex::new(HashMap::new()) }
    }
}

impl SchemaSource for CachedSchemas {
    fn is_protobuf(&self, id: i32) -> Result<bool, SchemaLookupError> {
        if let Some(p) = self.kinds.lock().unwrap_or_else(PoisonError::into_inner).get(&id) {
            return Ok(*p);
        }
        let p = self.source.is_protobuf(id)?;
        self.kinds.lock().unwrap_or_else(PoisonError::into_inner).insert(id, p);
        Ok(p)
    }

    fn decoder(
        &self,
        id: i32,
        message_indexes: &[i32],
    ) -> Result<Arc<TypedDecoder>, SchemaLookupError> {
        let key = (id, message_indexes.to_vec());
        if let Some(d) = self.decoders.lock().unwrap_or_else(PoisonError::into_inner).get(&key) {
            return Ok(d.clone());
        }
        let d = self.source.decoder(id, message_indexes)?;
        self.decoders.lock().unwrap_or_else(PoisonError::into_inner).insert(key, d.clone());
        Ok(d)
    }
}

/// The broker's registry: typed tables decode values with its schemas.
impl SchemaSource for floe_schema::SchemaStore {
    fn is_protobuf(&self, id: i32) -> Result<bool, SchemaLookupError> {
        use SchemaLookupError::{Missing, Unavailable};
        match self.read(|registry| {
            Ok(registry
                .schema_by_id(id)
                .map(|s| s.schema_type == floe_schema::SchemaType::Protobuf))
        }) {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(e)) => Err(Missing(e.to_string())),
            Err(e) => Err(Unavailable(e.to_string())),
        }
    }

    fn decoder(
        &self,
        id: i32,
        message_indexes: &[i32],
    ) -> Result<Arc<TypedDecoder>, SchemaLookupError> {
        use SchemaLookupError::{Missing, Unavailable};
        match self.read(|registry| {
            Ok(TypedDecoder::from_registry_for_message(registry, id, message_indexes))
        }) {
            Ok(Ok(decoder)) => Ok(Arc::new(decoder)),
            Ok(Err(e)) => Err(Missing(e.to_string())),
            Err(e) => Err(Unavailable(e.to_string())),
        }
    }
}
