//! The Arrow shapes every typed decoder builds, in one place so that the three
//! formats make identical lists, maps and timestamps (and the ones Iceberg's
//! `arrow_schema_to_schema` reads: a map's entries are a non-null struct of a
//! non-null `key` and a `value`).

use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, TimeUnit};

/// The timezone of `timestamptz` columns (Iceberg's Arrow conversion writes this one).
pub const UTC: &str = "+00:00";

/// A column or struct field: nullable, always (see the parent module's doc).
pub fn field(name: &str, data_type: DataType) -> Field {
    Field::new(name, data_type, true)
}

/// A list of nullable `element`s (Iceberg's name for a list's item).
pub fn list_of(item: DataType) -> DataType {
    DataType::List(Arc::new(field("element", item)))
}

/// A map with text keys (never null) and nullable values.
pub fn string_map_of(value: DataType) -> DataType {
    map_of(DataType::Utf8, value)
}

/// A map with keys of `key` (never null) and nullable values.
pub fn map_of(key: DataType, value: DataType) -> DataType {
    let entries = Fields::from(vec![Field::new("key", key, false), field("value", value)]);
    DataType::Map(Arc::new(Field::new("key_value", DataType::Struct(entries), false)), false)
}

/// Iceberg `timestamptz`: microseconds since the epoch, UTC.
pub fn timestamptz() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into()))
}

/// Iceberg `timestamp` (without zone): microseconds, local time.
pub fn local_timestamp() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, None)
}

/// Iceberg `time`: microseconds since midnight.
pub fn time() -> DataType {
    DataType::Time64(TimeUnit::Microsecond)
}

/// The most digits an Iceberg (and Arrow `Decimal128`) decimal holds.
pub const MAX_DECIMAL_PRECISION: u8 = 38;

/// `10^precision`: decimals must stay below it in magnitude.
pub fn decimal_bound(precision: u8) -> i128 {
    10i128.pow(u32::from(precision.min(MAX_DECIMAL_PRECISION)))
}
