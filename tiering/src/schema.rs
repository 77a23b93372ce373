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
}

/// The dead-letter table's column holding why a record is there.
pub const DLQ_ERROR_COLUMN: &str = "error";

/// The default partition spec of a tiered topic's table.
pub const DEFAULT_PARTITION_SPEC: &str = "day(timestamp)";

/// The Iceberg schema of every tiered topic's table.
pub fn iceberg_schema() -> Schema {
    use field_id::*;
    let header = StructType::new(vec![
        NestedField::required(HEADER_KEY, "key", Type::Primitive(PrimitiveType::String)).into(),
        NestedField::optional(HEADER_VALUE, "value", Type::Primitive(PrimitiveType::Binary)).into(),
    ]);
    let headers = ListType::new(NestedField::required(HEADERS_ELEMENT, "element", Type::Struct(header)).into());
    let p = |t| Type::Primitive(t);
    Schema::builder()
        .with_schema_id(0)
        .with_fields(vec![
            NestedField::required(PARTITION, "partition", p(PrimitiveType::Int)).into(),
            NestedField::required(OFFSET, "offset", p(PrimitiveType::Long)).into(),
            NestedField::required(TIMESTAMP, "timestamp", p(PrimitiveType::Timestamptz)).into(),
            NestedField::required(TIMESTAMP_TYPE, "timestamp_type", p(PrimitiveType::String)).into(),
            NestedField::optional(KEY, "key", p(PrimitiveType::Binary)).into(),
            NestedField::optional(VALUE, "value", p(PrimitiveType::Binary)).into(),
            NestedField::required(HEADERS, "headers", Type::List(headers)).into(),
            NestedField::required(BATCH_BASE_OFFSET, "batch_base_offset", p(PrimitiveType::Long)).into(),
            NestedField::required(PRODUCER_ID, "producer_id", p(PrimitiveType::Long)).into(),
            NestedField::required(PRODUCER_EPOCH, "producer_epoch", p(PrimitiveType::Int)).into(),
            NestedField::required(BASE_SEQUENCE, "base_sequence", p(PrimitiveType::Int)).into(),
            NestedField::required(COMPRESSION, "compression", p(PrimitiveType::String)).into(),
            NestedField::required(IS_TRANSACTIONAL, "is_transactional", p(PrimitiveType::Boolean)).into(),
            NestedField::required(PARTITION_LEADER_EPOCH, "partition_leader_epoch", p(PrimitiveType::Int)).into(),
        ])
        .build()
        .expect("the table schema is well formed (a unit test builds it)")
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
    use crate::typed::DataFormat::Raw;
    let all = iceberg_schema();
    let fields = all
        .as_struct()
        .fields()
        .iter()
        .filter_map(|f| match f.id {
            field_id::VALUE if layout.value != Raw && !layout.keep_raw => None,
            field_id::KEY if layout.key != Raw && !layout.keep_raw => None,
            field_id::KEY if layout.key != Raw => {
                Some(Arc::new(NestedField { name: KEY_RAW_COLUMN.to_string(), ..NestedField::clone(f) }))
            }
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
    fields.push(NestedField::required(18, DLQ_ERROR_COLUMN, Type::Primitive(PrimitiveType::String)).into());
    Schema::builder()
        .with_schema_id(0)
        .with_fields(fields)
        .build()
        .expect("the dead-letter schema is well formed (a unit test builds it)")
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
    let invalid = |reason: String| TieringError::InvalidPartitionSpec { spec: spec.to_string(), reason };
    let mut builder = UnboundPartitionSpec::builder().with_spec_id(0);
    for term in spec.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (transform, column) = term
            .strip_suffix(')')
            .and_then(|t| t.split_once('('))
            .ok_or_else(|| invalid(format!("`{term}` is not TRANSFORM(COLUMN)")))?;
        let (transform, column) = (transform.trim(), column.trim());
        let field = schema
            .field_by_name(column)
            .ok_or_else(|| invalid(format!("no column `{column}`")))?;
        let t: Transform = transform
            .parse()
            .map_err(|e| invalid(format!("transform `{transform}`: {e}")))?;
        if t.result_type(&field.field_type).is_err() {
            return Err(invalid(format!("`{transform}` does not apply to `{column}`")));
        }
        let name = match t {
            Transform::Identity => column.to_string(),
            _ => format!("{column}_{}", transform.split('[').next().unwrap_or(transform)),
        };
        builder = builder
            .add_partition_field(field.id, name, t)
            .map_err(|e| invalid(e.to_string()))?;
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
        assert_eq!(a.field_with_name("key").unwrap().data_type(), &arrow_schema::DataType::LargeBinary);
        assert_eq!(
            a.field_with_name("timestamp").unwrap().data_type(),
            &arrow_schema::DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, Some("+00:00".into()))
        );
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
