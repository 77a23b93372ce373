//! Typed decoding: record values in the Confluent wire format to Arrow record
//! batches whose columns are typed from the registered schema (the first step of
//! typed Iceberg tables, issue #15).
//!
//! A [`TypedDecoder`] is made once per schema id from the registered schema (and
//! the texts of its references); [`TypedDecoder::decode`] turns a batch of record
//! values into a [`Decoded`]: a `RecordBatch` of the values that decoded, the input
//! index of each of its rows, and the values that did not, each with why. A bad
//! record never fails the batch: it goes to `rejected` (for a dead-letter table).
//!
//! # Decisions
//! - **Every Arrow field is nullable**, whatever the source schema says, except map
//!   keys (Arrow and Iceberg require them). Tombstones need null columns, Iceberg
//!   readers prefer optional columns, and schema evolution can only add optional
//!   ones; a required field is still never null in what is written.
//! - **A null value (tombstone) is a row** whose typed columns are all null, beside
//!   its Kafka columns; it is not rejected.
//! - **A value framed with another schema id is rejected**: one decoder, one id.
//!   The caller groups a partition's records by id (or builds a decoder per id).
//! - Types are only those Iceberg has (checked against iceberg 0.10's
//!   `arrow_schema_to_schema`, without depending on it here): Boolean, Int32,
//!   Int64, Float32, Float64, Decimal128(p ≤ 38, s), Date32, Time64(µs),
//!   Timestamp(µs, "+00:00") (`timestamptz`), Timestamp(µs, none) (`timestamp`),
//!   Utf8, LargeBinary, FixedSizeBinary(n), List, Map (Utf8 keys, except Protobuf
//!   maps whose keys are integers or booleans), Struct. No unsigned types (Iceberg
//!   refuses UInt64; UInt32 would become `long` anyway).
//! - **uuid → Utf8** (the canonical 36-character text). Iceberg's Arrow
//!   conversion reads FixedSizeBinary(16) as `fixed[16]`, not `uuid`, so 16 bytes
//!   would give analysts an opaque binary column; text is what they query with.
//!   An Avro uuid on `fixed(16)` is a plain fixed.
//! - **uint64 → Decimal128(20, 0)**, the whole range without loss (what iceberg's
//!   error message for UInt64 advises); uint32 and fixed32 → Int64.
//! - **Proto3 fields without presence** (scalars without `optional`, outside a
//!   oneof) are written with their value as any protobuf reader sees it: the
//!   default (0, "", false, the first enum value) when absent on the wire, not
//!   null; fields with presence (`optional`, oneof members, messages, wrappers)
//!   are null when absent.
//! - Refused schemas (a [`DecodeError`]): recursive Avro records and Protobuf
//!   messages (JSON Schema's recursive `$ref`s become JSON text instead), nesting
//!   deeper than [`MAX_DEPTH`], Avro big-decimal, decimals beyond 38 digits,
//!   arrays, maps and unions of `null` or of records/messages without fields.
//!   A field that carries no data (Avro `null`, an empty record, Protobuf
//!   `Empty`) has no column (Parquet cannot write an empty group).
//! - Values are checked as they are read, and a record is rejected (not clamped)
//!   when one does not fit: a decimal with more digits than its precision, a
//!   timestamp beyond i64 microseconds, an enum index or union branch out of
//!   range, invalid UTF-8, bytes left over after an Avro value, a JSON value of
//!   another type than its schema's.
//!
//! # Type mapping
//! | Avro | Protobuf | JSON Schema | Arrow |
//! |---|---|---|---|
//! | record (top level: the columns) | message (top level: the columns) | object with `properties` | Struct |
//! | array | repeated | array with `items` | List(`element`) |
//! | map | map<K, V> | — | Map(`key_value`: `key`, `value`) |
//! | `[null, T]` | `optional T`, wrappers | `type: [T, "null"]` | T, null when absent |
//! | other union | oneof (its fields, each nullable) | — | Struct of nullable branches, named by type |
//! | boolean | bool, BoolValue | boolean | Boolean |
//! | int | int32, sint32, sfixed32, Int32Value | — | Int32 |
//! | long | int64, sint64, sfixed64, uint32, fixed32, Int64Value, UInt32Value | integer | Int64 |
//! | — | uint64, fixed64, UInt64Value | — | Decimal128(20, 0) |
//! | float / double | float / double (+ wrappers) | number | Float32 / Float64 |
//! | string, enum, uuid | string, enum (value name), StringValue | string (and untyped: JSON text) | Utf8 |
//! | bytes | bytes, BytesValue | — | LargeBinary |
//! | fixed(n) | — | — | FixedSizeBinary(n) |
//! | decimal(p, s), p ≤ 38 | — | — | Decimal128(p, s) |
//! | date | — | string `format: date` | Date32 |
//! | time-millis, time-micros | — | — | Time64(µs) |
//! | timestamp-millis/micros/nanos | google.protobuf.Timestamp | string `format: date-time` | Timestamp(µs, "+00:00") |
//! | local-timestamp-millis/micros/nanos | — | — | Timestamp(µs) |
//! | duration | Duration, Any, FieldMask: as the messages they are | — | Struct |
//! | — | Struct, Value, ListValue | anything untyped | Utf8 holding JSON text |
//!
//! Nanosecond timestamps are truncated to microseconds (Iceberg's nanosecond
//! types need format v3).
//!
//! # Layout
//! - [`wire`]: the wire format's header and Protobuf message indexes.
//! - `columns`: growable Arrow columns that can drop a half-written record.
//! - `arrow_types`: the list, map and timestamp shapes all formats share.
//! - `avro`, `protobuf`, `json`: each format's type mapping and value reader.
//! - [`DecodeError`]: why a schema has no typed decoder.

mod arrow_types;
mod avro;
mod columns;
mod error;
mod json;
mod protobuf;
pub mod wire;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_schema::{DataType, Schema, SchemaRef};

use crate::compatibility::SchemaType;
use crate::records::SchemaReference;
use crate::registry::{RegisteredSchema, Registry};

pub use error::{DecodeError, MAX_DEPTH};

use columns::Column;

/// Decodes the values of one schema id into typed Arrow batches.
///
/// Immutable once made: share it between threads (`Send + Sync`).
#[derive(Debug)]
pub struct TypedDecoder {
    id: i32,
    schema: SchemaRef,
    format: FormatDecoder,
    /// The schema is not a record (object, message): its one column `value` is the whole value.
    wraps_value: bool,
}

#[derive(Debug)]
enum FormatDecoder {
    Avro(avro::AvroDecoder),
    Protobuf(protobuf::ProtobufDecoder),
    Json(json::JsonDecoder),
}

/// What [`TypedDecoder::decode`] made of a batch of values.
#[derive(Debug)]
pub struct Decoded {
    /// One row per value that decoded (tombstones included), in input order.
    pub batch: RecordBatch,
    /// For each row of `batch`, the index of its value in the input.
    pub rows: Vec<usize>,
    /// The values that did not decode: their index in the input, and why.
    pub rejected: Vec<(usize, String)>,
}

impl TypedDecoder {
    /// A decoder for `schema`, whose references are resolved to their schema texts
    /// (`(reference, text)`, as [`crate::SchemaFormat::parse`] takes them). A
    /// Protobuf schema's values must be of the file's first message.
    ///
    /// # Errors
    /// The schema does not parse or cannot be typed (see the module doc).
    pub fn new(
        schema: &RegisteredSchema,
        references: &[(SchemaReference, String)],
    ) -> Result<Self, DecodeError> {
        Self::for_message(schema, references, &[0])
    }

    /// A decoder for the schema `id` of `registry`, its references resolved there.
    ///
    /// # Errors
    /// No such schema (or reference), or as [`TypedDecoder::new`].
    pub fn from_registry(registry: &Registry, id: i32) -> Result<Self, DecodeError> {
        let schema = registry.schema_by_id(id)?;
        let references = registry.referenced_texts(schema)?;
        Self::new(schema, &references)
    }

    /// A decoder for the schema `id` of `registry` and, for Protobuf, the message at
    /// `message_indexes` (as the wire format numbers them).
    ///
    /// # Errors
    /// As [`TypedDecoder::from_registry`] and [`TypedDecoder::for_message`].
    pub fn from_registry_for_message(
        registry: &Registry,
        id: i32,
        message_indexes: &[i32],
    ) -> Result<Self, DecodeError> {
        let schema = registry.schema_by_id(id)?;
        let references = registry.referenced_texts(schema)?;
        Self::for_message(schema, &references, message_indexes)
    }

    /// As [`TypedDecoder::new`], for the Protobuf message at `message_indexes` (as
    /// the wire format numbers them: a top-level message's index, then nested
    /// ones'). Ignored for Avro and JSON Schema.
    ///
    /// # Errors
    /// As [`TypedDecoder::new`], and no message at those indexes.
    pub fn for_message(
        schema: &RegisteredSchema,
        references: &[(SchemaReference, String)],
        message_indexes: &[i32],
    ) -> Result<Self, DecodeError> {
        let id = schema.id;
        let (format, fields, wraps_value) = match schema.schema_type {
            SchemaType::Avro => {
                let texts: Vec<String> = references.iter().map(|(_, t)| t.clone()).collect();
                let decoder = avro::AvroDecoder::new(id, &schema.schema, &texts)?;
                let fields = decoder.fields().clone();
                let wraps = decoder.wraps_value();
                (FormatDecoder::Avro(decoder), fields, wraps)
            }
            SchemaType::Protobuf => {
                let decoder = protobuf::ProtobufDecoder::new(
                    id,
                    &schema.schema,
                    references,
                    message_indexes,
                )?;
                let fields = decoder.fields().clone();
                (FormatDecoder::Protobuf(decoder), fields, false)
            }
            SchemaType::Json => {
                let decoder = json::JsonDecoder::new(id, &schema.schema, references)?;
                let fields = decoder.fields().clone();
                let wraps = decoder.wraps_value();
                (FormatDecoder::Json(decoder), fields, wraps)
            }
        };
        Ok(Self { id, schema: Arc::new(Schema::new(fields)), format, wraps_value })
    }

    /// The schema id whose values this decodes.
    pub fn schema_id(&self) -> i32 {
        self.id
    }

    /// Whether the schema is not a record (an Avro `"string"`, a JSON Schema
    /// `{"type":"integer"}`): its batches then have one column, `value`, that is
    /// the whole value, not a field of it. (A Protobuf schema is always a message.)
    pub fn wraps_value(&self) -> bool {
        self.wraps_value
    }

    /// The Arrow schema of the batches [`TypedDecoder::decode`] makes.
    pub fn arrow_schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Decodes `values` (`None`: a tombstone), each in the Confluent wire format.
    ///
    /// # Errors
    /// Only when the batch itself cannot be built (a variable-length column beyond
    /// 2 GiB, or a bug); a value that does not decode is in [`Decoded::rejected`].
    pub fn decode(&self, values: &[Option<&[u8]>]) -> Result<Decoded, DecodeError> {
        let mut root = Column::new(&DataType::Struct(self.schema.fields().clone()))?;
        let mut rows = Vec::with_capacity(values.len());
        let mut rejected = Vec::new();
        for (index, value) in values.iter().enumerate() {
            let Some(value) = value else {
                root.push_null();
                rows.push(index);
                continue;
            };
            let before = root.len();
            match self.decode_one(value, &mut root) {
                Ok(()) if root.len() == before + 1 => rows.push(index),
                Ok(()) => {
                    root.truncate(before);
                    rejected.push((
                        index,
                        "internal: the value did not make exactly one row".to_string(),
                    ));
                }
                Err(reason) => {
                    root.truncate(before);
                    rejected.push((index, reason));
                }
            }
        }
        let (columns, row_count) = root.finish_children()?;
        let options = RecordBatchOptions::new().with_row_count(Some(row_count));
        let batch = RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)?;
        Ok(Decoded { batch, rows, rejected })
    }

    fn decode_one(&self, value: &[u8], root: &mut Column) -> Result<(), String> {
        let (id, rest) = wire::split_header(value)?;
        if id != self.id {
            return Err(format!("schema id {id}, not {}", self.id));
        }
        match &self.format {
            FormatDecoder::Avro(d) => d.decode_row(rest, root),
            FormatDecoder::Protobuf(d) => d.decode_row(rest, root),
            FormatDecoder::Json(d) => d.decode_row(rest, root),
        }
    }
}
