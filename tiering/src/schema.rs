//! The table layout: one Iceberg table per topic, one row per Kafka record.
//!
//! | id | column | Iceberg type | |
//! |---|---|---|---|
//! | 1 | `partition` | int | the Kafka partition |
//! | 2 | `offset` | long | the record's offset |
//! | 3 | `timestamp` | timestamptz (µs, UTC) | the record's timestamp; for LogAppendTime batches the batch's append time |
//! | 4 | `timestamp_type` | string | `CreateTime` or `LogAppendTime` |
//! | 5 | `key` | binary, optional | null for a null key |
//! | 6 | `value` | binary, optional | null for a null value (a tombstone) |
//! | 7 | `headers` | list<struct<key string, value binary optional>> | in record order |
//! | 8 | `batch_base_offset` | long | base offset of the record's batch |
//! | 9 | `producer_id` | long | -1 without an idempotent producer |
//! | 10 | `producer_epoch` | int | -1 without |
//! | 11 | `base_sequence` | int | -1 without |
//! | 12 | `compression` | string | the batch's codec: `none`, `gzip`, `snappy`, `lz4`, `zstd` |
//! | 13 | `is_transactional` | boolean | the batch's transactional bit |
//! | 14 | `partition_leader_epoch` | int | as stored in the batch |
//!
//! List element id 15, header struct fields 16 (`key`) and 17 (`value`).
//!
//! # The lossless layout (`floe.iceberg.storage=shared`)
//! A shared table is the only copy of old offsets, so a Kafka batch must be
//! rebuilt from its rows exactly. It has these optional columns more
//! ([`lossless_iceberg_schema`]; every one's Iceberg `doc` names the Kafka
//! field, and the table property `floe.kafka-columns` lists them):
//!
//! | id | column | Iceberg type | Kafka record batch v2 field |
//! |---|---|---|---|
//! | 18 | `batch_last_offset_delta` | int | lastOffsetDelta |
//! | 19 | `batch_base_timestamp` | long (ms) | baseTimestamp |
//! | 20 | `batch_max_timestamp` | long (ms) | maxTimestamp |
//! | 21 | `batch_attributes` | int | attributes (the int16 as stored) |
//! | 22 | `batch_records_count` | int | recordsCount |
//! | 23 | `batch_crc` | long | CRC (unsigned CRC-32C as stored) |
//! | 24 | `timestamp_delta` | long | the record's timestampDelta |
//! | 25 | `record_attributes` | int, null when 0 | the record's attributes |
//! | 26 | `headers.element.key_bytes` | binary, null when the key is UTF-8 | a header key that is not UTF-8 |
//!
//! (The ids are the layout's; Iceberg gives a new table fresh ids, top-level
//! columns first, so in a created table the nested ones come last. Readers
//! find these columns by name.)
//!
//! What a READ_COMMITTED consumer would not keep goes to the companion table
//! `<topic>__log` ([`log_iceberg_schema`]): the lossless layout plus
//!
//! | id | column | type | |
//! |---|---|---|---|
//! | 27 | `kind` | string | `commit_marker`, `abort_marker`, `aborted`, `opaque`, `hole` |
//! | 28 | `txn_first_offset` | long, optional | abort markers: the transaction's first offset (Kafka's `.txnindex` firstOffset) |
//! | 29 | `txn_last_stable_offset` | long, optional | abort markers: the `.txnindex` lastStableOffset |
//! | 30 | `batch_bytes` | binary, optional | `opaque`: the batch as stored (undecodable or failing its CRC) |
//! | 31 | `hole_last_offset` | long, optional | `hole`: last offset of a damaged range recovery kept (`offset` is its first) |
//! Iceberg `binary` is Arrow `LargeBinary`; `timestamptz` is Arrow
//! `Timestamp(Microsecond, "+00:00")`.
//!
//! The partition spec comes from the topic's `floe.iceberg.partition-spec`:
//! comma-separated `TRANSFORM(COLUMN)` terms, e.g. `day(timestamp)` (the
//! default), `hour(timestamp)`, `identity(partition)`, `bucket[16](key)`.

use std::sync::Arc;

use arrow_schema::SchemaRef as ArrowSchemaRef;
use iceberg::spec::{
    ListType, NestedField, PrimitiveType, Schema, StructType, Transform, Type, UnboundPartitionSpec,
};

use crate::error::{Result, TieringError};

/// Field ids of the columns, in schema order.
pub mod field_id {
    #![allow(missing_docs)]
    pub const PARTITION: i32 = 1;
    pub const OFFSET: i32 = 2;
    pub const TIMESTAMP: i32 = 3;
    pub const TIMESTAMP_TYPE: i32 = 4;
    pub const KEY: i32 = 5;
    pub const VALUE: i32 = 6;
    pub const HEADERS: i32 = 7;
    pub const BATCH_BASE_OFFSET: i32 = 8;
    pub const PRODUCER_ID: i32 = 9;
    pub const PRODUCER_EPOCH: i32 = 10;
    pub const BASE_SEQUENCE: i32 = 11;
    pub const COMPRESSION: i32 = 12;
    pub const IS_TRANSACTIONAL: i32 = 13;
    pub const PARTITION_LEADER_EPOCH: i32 = 14;
    pub const HEADERS_ELEMENT: i32 = 15;
    pub const HEADER_KEY: i32 = 16;
    pub const HEADER_VALUE: i32 = 17;
    pub const BATCH_LAST_OFFSET_DELTA: i32 = 18;
    pub const BATCH_BASE_TIMESTAMP: i32 = 19;
    pub const BATCH_MAX_TIMESTAMP: i32 = 20;
    pub const BATCH_ATTRIBUTES: i32 = 21;
    pub const BATCH_RECORDS_COUNT: i32 = 22;
    pub const BATCH_CRC: i32 = 23;
    pub const TIMESTAMP_DELTA: i32 = 24;
    pub const RECORD_ATTRIBUTES: i32 = 25;
    pub const HEADER_KEY_BYTES: i32 = 26;
    pub const KIND: i32 = 27;
    pub const TXN_FIRST_OFFSET: i32 = 28;
    pub const TXN_LAST_STABLE_OFFSET: i32 = 29;
    pub const BATCH_BYTES: i32 = 30;
    pub const HOLE_LAST_OFFSET: i32 = 31;
}

/// The lossless layout's columns beyond the raw layout, with the Kafka field each
/// holds (the Iceberg `doc` of the column): [`lossless_iceberg_schema`].
pub const LOSSLESS_COLUMNS: &[(&str, &str)] = &[
    ("batch_last_offset_delta", "Kafka record batch v2: lastOffsetDelta"),
    ("batch_base_timestamp", "Kafka record batch v2: baseTimestamp (ms)"),
    ("batch_max_timestamp", "Kafka record batch v2: maxTimestamp (ms)"),
    ("batch_attributes", "Kafka record batch v2: attributes, as stored"),
    ("batch_records_count", "Kafka record batch v2: recordsCount"),
    ("batch_crc", "Kafka record batch v2: CRC-32C, as stored (unsigned)"),
    ("timestamp_delta", "Kafka record v2: timestampDelta"),
    ("record_attributes", "Kafka record v2: attributes (null when 0)"),
];

/// The header struct's column holding a key that is not UTF-8 (lossless layout).
pub const HEADER_KEY_BYTES_COLUMN: &str = "key_bytes";

/// Table property listing the columns that are Kafka's (lossless tables).
pub const KAFKA_COLUMNS_PROPERTY: &str = "floe.kafka-columns";

/// The value of [`KAFKA_COLUMNS_PROPERTY`]: every column of the lossless layout, comma-separated.
pub fn kafka_columns_property() -> String {
    let mut names: Vec<String> =
        iceberg_schema().as_struct().fields().iter().map(|f| f.name.clone()).collect();
    names.extend(LOSSLESS_COLUMNS.iter().map(|(n, _)| n.to_string()));
    names.push(format!("headers.element.{HEADER_KEY_BYTES_COLUMN}"));
    names.join(",")
}

/// What a `__log` row is ([`log_iceberg_schema`]'s `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogRowKind {
    /// A transaction's COMMIT marker (one control record).
    CommitMarker,
    /// A transaction's ABORT marker.
    AbortMarker,
    /// A record of an aborted transaction.
    Aborted,
    /// A batch that could not be decoded, kept as stored.
    Opaque,
    /// A damaged range recovery kept: no batch covers it.
    Hole,
}

impl LogRowKind {
    /// Its name in the `kind` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CommitMarker => "commit_marker",
            Self::AbortMarker => "abort_marker",
            Self::Aborted => "aborted",
            Self::Opaque => "opaque",
            Self::Hole => "hole",
        }
    }
}

/// The dead-letter table's column holding why a record is there.
pub const DLQ_ERROR_COLUMN: &str = "error";

/// The default partition spec of a tiered topic's table.
pub const DEFAULT_PARTITION_SPEC: &str = "day(timestamp)";

/// The Iceberg schema of every tiered topic's table.
pub fn iceberg_schema() -> Schema {
    raw_schema(false)
}

/// The schema of a shared topic's table: the raw layout and the columns a
/// batch's rebuild needs (module doc).
pub fn lossless_iceberg_schema() -> Schema {
    raw_schema(true)
}

/// The schema of a shared topic's `<topic>__log` table: the lossless layout and
/// what markers, aborted records, opaque batches and holes need (module doc).
pub fn log_iceberg_schema() -> Schema {
    use field_id::*;
    let p = |t| Type::Primitive(t);
    let mut fields = lossless_iceberg_schema().as_struct().fields().to_vec();
    fields.push(NestedField::required(KIND, "kind", p(PrimitiveType::String)).into());
    fields.push(
        NestedField::optional(TXN_FIRST_OFFSET, "txn_first_offset", p(PrimitiveType::Long)).into(),
    );
    fields.push(
        NestedField::optional(
            TXN_LAST_STABLE_OFFSET,
            "txn_last_stable_offset",
            p(PrimitiveType::Long),
        )
        .into(),
    );
    fields.push(NestedField::optional(BATCH_BYTES, "batch_bytes", p(PrimitiveType::Binary)).into());
    fields.push(
        NestedField::optional(HOLE_LAST_OFFSET, "hole_last_offset", p(PrimitiveType::Long)).into(),
    );
    Schema::builder()
        .with_schema_id(0)
        .with_fields(fields)
        .build()
        .expect("the __log schema is well formed (a unit test builds it)")
}

/// The Arrow schema of [`lossless_iceberg_schema`].
pub fn lossless_arrow_schema() -> ArrowSchemaRef {
    Arc::new(
        iceberg::arrow::schema_to_arrow_schema(&lossless_iceberg_schema())
            .expect("the lossless schema converts to Arrow (a unit test converts it)"),
    )
}

/// The Arrow schema of [`log_iceberg_schema`].
pub fn log_arrow_schema() -> ArrowSchemaRef {
    Arc::new(
        iceberg::arrow::schema_to_arrow_schema(&log_iceberg_schema())
            .expect("the __log schema converts to Arrow (a unit test converts it)"),
    )
}

/// The table has the lossless layout's columns (created shared). By name: a
/// created table renumbers the layout's ids, and a typed table's value columns
/// take ids of their own.
pub fn is_lossless(schema: &Schema) -> bool {
    LOSSLESS_COLUMNS.iter().all(|(name, _)| schema.field_by_name(name).is_some())
        && schema.field_by_name(&format!("headers.element.{HEADER_KEY_BYTES_COLUMN}")).is_some()
}

/// Whether an Arrow table schema is the lossless layout's (its header struct has
/// `key_bytes`, which no value column can add): then the lossless columns are
/// Kafka's, never a value's.
pub fn is_lossless_arrow(schema: &arrow_schema::Schema) -> bool {
    use arrow_schema::DataType;
    let Ok(headers) = schema.field_with_name("headers") else { return false };
    let element = match headers.data_type() {
        DataType::List(f) | DataType::LargeList(f) => f,
        _ => return false,
    };
    matches!(element.data_type(), DataType::Struct(fields) if fields.find(HEADER_KEY_BYTES_COLUMN).is_some())
}

/// Whether `name` is a column of the lossless layout beyond the raw one (a
/// value field of such a name is renamed in a shared typed table).
pub fn is_lossless_column(name: &str) -> bool {
    LOSSLESS_COLUMNS.iter().any(|(n, _)| *n == name)
}

fn raw_schema(lossless: bool) -> Schema {
    use field_id::*;
    let mut header_fields = vec![
        NestedField::required(HEADER_KEY, "key", Type::Primitive(PrimitiveType::String)).into(),
        NestedField::optional(HEADER_VALUE, "value", Type::Primitive(PrimitiveType::Binary)).into(),
    ];
    if lossless {
        header_fields.push(
            NestedField::optional(
                HEADER_KEY_BYTES,
                HEADER_KEY_BYTES_COLUMN,
                Type::Primitive(PrimitiveType::Binary),
            )
            .with_doc("Kafka record v2: a header key that is not UTF-8, as sent (null otherwise)")
            .into(),
        );
    }
    let header = StructType::new(header_fields);
    let headers = ListType::new(
        NestedField::required(HEADERS_ELEMENT, "element", Type::Struct(header)).into(),
    );
    let p = |t| Type::Primitive(t);
    let base = Schema::builder()
        .with_schema_id(0)
        .with_fields(vec![
            NestedField::required(PARTITION, "partition", p(PrimitiveType::Int)).into(),
            NestedField::required(OFFSET, "offset", p(PrimitiveType::Long)).into(),
            NestedField::required(TIMESTAMP, "timestamp", p(PrimitiveType::Timestamptz)).into(),
            NestedField::required(TIMESTAMP_TYPE, "timestamp_type", p(PrimitiveType::String))
                .into(),
            NestedField::optional(KEY, "key", p(PrimitiveType::Binary)).into(),
            NestedField::optional(VALUE, "value", p(PrimitiveType::Binary)).into(),
            NestedField::required(HEADERS, "headers", Type::List(headers)).into(),
            NestedField::required(BATCH_BASE_OFFSET, "batch_base_offset", p(PrimitiveType::Long))
                .into(),
            NestedField::required(PRODUCER_ID, "producer_id", p(PrimitiveType::Long)).into(),
            NestedField::required(PRODUCER_EPOCH, "producer_epoch", p(PrimitiveType::Int)).into(),
            NestedField::required(BASE_SEQUENCE, "base_sequence", p(PrimitiveType::Int)).into(),
            NestedField::required(COMPRESSION, "compression", p(PrimitiveType::String)).into(),
            NestedField::required(IS_TRANSACTIONAL, "is_transactional", p(PrimitiveType::Boolean))
                .into(),
            NestedField::required(
                PARTITION_LEADER_EPOCH,
                "partition_leader_epoch",
                p(PrimitiveType::Int),
            )
            .into(),
        ])
        .build()
        .expect("the table schema is well formed (a unit test builds it)");
    if !lossless {
        return base;
    }
    let ids = [
        (BATCH_LAST_OFFSET_DELTA, PrimitiveType::Int),
        (BATCH_BASE_TIMESTAMP, PrimitiveType::Long),
        (BATCH_MAX_TIMESTAMP, PrimitiveType::Long),
        (BATCH_ATTRIBUTES, PrimitiveType::Int),
        (BATCH_RECORDS_COUNT, PrimitiveType::Int),
        (BATCH_CRC, PrimitiveType::Long),
        (TIMESTAMP_DELTA, PrimitiveType::Long),
        (RECORD_ATTRIBUTES, PrimitiveType::Int),
    ];
    let mut fields = base.as_struct().fields().to_vec();
    for ((id, t), (name, doc)) in ids.into_iter().zip(LOSSLESS_COLUMNS) {
        fields.push(NestedField::optional(id, *name, p(t)).with_doc(*doc).into());
    }
    Schema::builder()
        .with_schema_id(0)
        .with_fields(fields)
        .build()
        .expect("the lossless schema is well formed (a unit test builds it)")
}

/// The dead-letter table's and a typed table's column holding a typed key's
/// bytes, with `floe.iceberg.keep-raw` (field id 5, the raw layout's `key`).
pub const KEY_RAW_COLUMN: &str = "key_raw";

/// The schema a typed table starts with (`floe.iceberg.value.format=schema-registry`,
/// raw keys): the Kafka columns, without the binary `value` unless `keep_raw`.
pub fn typed_iceberg_schema(keep_raw: bool) -> Schema {
    typed_table_schema(&crate::typed::TypedLayout {
        key: crate::typed::DataFormat::Raw,
        value: crate::typed::DataFormat::SchemaRegistry,
        keep_raw,
    })
}

/// The schema a typed table of `layout` starts with: the Kafka columns, where a
/// typed value has no binary `value` (unless `keep_raw`) and a typed key no binary
/// `key` (with `keep_raw`: the bytes stay, as `key_raw`, field id 5). The typed
/// columns are added as keys and values are seen ([`crate::typed::evolve`]): a
/// typed key is one column `key` with a field id of its own.
pub fn typed_table_schema(layout: &crate::typed::TypedLayout) -> Schema {
    typed_of(layout, iceberg_schema())
}

/// The schema a shared typed table starts with (`floe.iceberg.storage=shared`,
/// which needs `keep_raw`): [`typed_table_schema`]'s columns and the lossless
/// layout's, so a batch is rebuilt from the kept bytes (`value`, `key_raw` or
/// the raw `key`) and the lossless columns ([`lossless_iceberg_schema`]).
pub fn lossless_typed_table_schema(layout: &crate::typed::TypedLayout) -> Schema {
    typed_of(layout, lossless_iceberg_schema())
}

fn typed_of(layout: &crate::typed::TypedLayout, all: Schema) -> Schema {
    use crate::typed::DataFormat::Raw;
    let fields = all
        .as_struct()
        .fields()
        .iter()
        .filter_map(|f| match f.id {
            field_id::VALUE if layout.value != Raw && !layout.keep_raw => None,
            field_id::KEY if layout.key != Raw && !layout.keep_raw => None,
            field_id::KEY if layout.key != Raw => Some(Arc::new(NestedField {
                name: KEY_RAW_COLUMN.to_string(),
                ..NestedField::clone(f)
            })),
            _ => Some(f.clone()),
        })
        .collect::<Vec<_>>();
    Schema::builder()
        .with_schema_id(0)
        .with_fields(fields)
        .build()
        .expect("a subset of the table schema is well formed (a unit test builds it)")
}

/// The dead-letter table's schema: the raw layout and an `error` column (id 18).
pub fn dlq_iceberg_schema() -> Schema {
    let mut fields = iceberg_schema().as_struct().fields().to_vec();
    fields.push(
        NestedField::required(18, DLQ_ERROR_COLUMN, Type::Primitive(PrimitiveType::String)).into(),
    );
    Schema::builder()
        .with_schema_id(0)
        .with_fields(fields)
        .build()
        .expect("the dead-letter schema is well formed (a unit test builds it)")
}

/// A shared typed table's dead-letter table: the lossless layout and an
/// `error` column (the id after the lossless layout's), so a dead letter's batch is rebuilt like a main
/// table row's.
pub fn lossless_dlq_iceberg_schema() -> Schema {
    let mut fields = lossless_iceberg_schema().as_struct().fields().to_vec();
    fields.push(
        NestedField::required(
            field_id::HEADER_KEY_BYTES + 1,
            DLQ_ERROR_COLUMN,
            Type::Primitive(PrimitiveType::String),
        )
        .into(),
    );
    Schema::builder()
        .with_schema_id(0)
        .with_fields(fields)
        .build()
        .expect("the lossless dead-letter schema is well formed (a unit test builds it)")
}

/// The Arrow schema matching [`iceberg_schema`], field ids in the metadata (as the Parquet writer needs).
pub fn arrow_schema() -> ArrowSchemaRef {
    Arc::new(
        iceberg::arrow::schema_to_arrow_schema(&iceberg_schema())
            .expect("the table schema converts to Arrow (a unit test converts it)"),
    )
}

/// Parses a `floe.iceberg.partition-spec` value: comma-separated
/// `transform(column)` terms; an empty value means unpartitioned.
///
/// # Errors
/// [`TieringError::InvalidPartitionSpec`] for an unknown column or transform.
pub fn parse_partition_spec(spec: &str) -> Result<UnboundPartitionSpec> {
    let schema = iceberg_schema();
    let invalid =
        |reason: String| TieringError::InvalidPartitionSpec { spec: spec.to_string(), reason };
    let mut builder = UnboundPartitionSpec::builder().with_spec_id(0);
    for term in spec.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (transform, column) = term
            .strip_suffix(')')
            .and_then(|t| t.split_once('('))
            .ok_or_else(|| invalid(format!("`{term}` is not TRANSFORM(COLUMN)")))?;
        let (transform, column) = (transform.trim(), column.trim());
        let field =
            schema.field_by_name(column).ok_or_else(|| invalid(format!("no column `{column}`")))?;
        let t: Transform =
            transform.parse().map_err(|e| invalid(format!("transform `{transform}`: {e}")))?;
        if t.result_type(&field.field_type).is_err() {
            return Err(invalid(format!("`{transform}` does not apply to `{column}`")));
        }
        let name = match t {
            Transform::Identity => column.to_string(),
            _ => format!("{column}_{}", transform.split('[').next().unwrap_or(transform)),
        };
        builder =
            builder.add_partition_field(field.id, name, t).map_err(|e| invalid(e.to_string()))?;
    }
    Ok(builder.build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_converts_to_arrow_with_large_binary_and_utc() {
        let a = arrow_schema();
        assert_eq!(a.fields().len(), 14);
        assert_eq!(
            a.field_with_name("key").unwrap().data_type(),
            &arrow_schema::DataType::LargeBinary
        );
        assert_eq!(
            a.field_with_name("timestamp").unwrap().data_type(),
            &arrow_schema::DataType::Timestamp(
                arrow_schema::TimeUnit::Microsecond,
                Some("+00:00".into())
            )
        );
    }

    #[test]
    fn lossless_and_log_schemas_build_and_convert() {
        let l = lossless_arrow_schema();
        assert_eq!(l.fields().len(), 14 + LOSSLESS_COLUMNS.len());
        assert!(is_lossless(&lossless_iceberg_schema()) && !is_lossless(&iceberg_schema()));
        let s = lossless_iceberg_schema();
        assert_eq!(s.field_by_name("batch_crc").unwrap().id, field_id::BATCH_CRC);
        assert_eq!(s.field_by_name("record_attributes").unwrap().id, field_id::RECORD_ATTRIBUTES);
        assert!(s.field_by_name("batch_crc").unwrap().doc.as_deref().unwrap().starts_with("Kafka"));
        assert_eq!(
            s.field_by_id(field_id::HEADER_KEY_BYTES).unwrap().name,
            HEADER_KEY_BYTES_COLUMN
        );
        let log = log_iceberg_schema();
        assert_eq!(log.field_by_name("kind").unwrap().id, field_id::KIND);
        assert_eq!(log_arrow_schema().fields().len(), l.fields().len() + 5);
        assert_eq!(log.highest_field_id(), field_id::HOLE_LAST_OFFSET);
        assert!(kafka_columns_property().ends_with("record_attributes,headers.element.key_bytes"));
    }

    #[test]
    fn typed_and_dead_letter_schemas_build() {
        assert!(typed_iceberg_schema(false).field_by_name("value").is_none());
        assert!(typed_iceberg_schema(true).field_by_name("value").is_some());
        use crate::typed::{DataFormat, TypedLayout};
        let keys = TypedLayout { key: DataFormat::Json, value: DataFormat::Raw, keep_raw: false };
        let s = typed_table_schema(&keys);
        assert!(s.field_by_name("key").is_none() && s.field_by_name(KEY_RAW_COLUMN).is_none());
        assert_eq!(s.field_by_name("value").unwrap().id, field_id::VALUE, "a raw value stays");
        let s = typed_table_schema(&TypedLayout { keep_raw: true, ..keys });
        assert_eq!(s.field_by_name(KEY_RAW_COLUMN).unwrap().id, field_id::KEY);
        assert_eq!(dlq_iceberg_schema().field_by_name(DLQ_ERROR_COLUMN).unwrap().id, 18);
        // Shared typed tables: the typed layout and the lossless columns; the dead letters lossless.
        let shared = TypedLayout {
            key: DataFormat::SchemaRegistry,
            value: DataFormat::SchemaRegistry,
            keep_raw: true,
        };
        let s = lossless_typed_table_schema(&shared);
        assert!(is_lossless(&s) && s.field_by_name("key").is_none());
        assert_eq!(s.field_by_name(KEY_RAW_COLUMN).unwrap().id, field_id::KEY);
        assert_eq!(s.field_by_name("value").unwrap().id, field_id::VALUE);
        let a = iceberg::arrow::schema_to_arrow_schema(&s).unwrap();
        assert!(is_lossless_arrow(&a) && !is_lossless_arrow(&arrow_schema()));
        let d = lossless_dlq_iceberg_schema();
        assert!(is_lossless(&d) && d.field_by_name(DLQ_ERROR_COLUMN).is_some());
        assert!(!is_lossless(&typed_table_schema(&shared)));
    }

    #[test]
    fn partition_specs_parse() {
        assert_eq!(parse_partition_spec("day(timestamp)").unwrap().fields().len(), 1);
        let s = parse_partition_spec("hour(timestamp), identity(partition)").unwrap();
        assert_eq!(s.fields()[0].name, "timestamp_hour");
        assert_eq!(s.fields()[1].name, "partition");
        assert!(parse_partition_spec("").unwrap().fields().is_empty());
        assert!(parse_partition_spec("bucket[4](partition)").is_ok());
        assert!(parse_partition_spec("day(nope)").is_err());
        assert!(parse_partition_spec("day(partition)").is_err());
        assert!(parse_partition_spec("frobnicate(offset)").is_err());
        assert!(parse_partition_spec("timestamp").is_err());
    }
}
