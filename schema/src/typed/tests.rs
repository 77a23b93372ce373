//! Helpers the format tests share, and checks that hold for every format.

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, TimeUnit};

use super::{wire, Decoded, TypedDecoder};
use crate::compatibility::SchemaType;
use crate::registry::RegisteredSchema;

pub(super) fn registered(id: i32, schema_type: SchemaType, text: &str) -> RegisteredSchema {
    RegisteredSchema { id, schema_type, schema: text.to_string(), references: Vec::new() }
}

pub(super) fn decoder(id: i32, schema_type: SchemaType, text: &str) -> TypedDecoder {
    match TypedDecoder::new(&registered(id, schema_type, text), &[]) {
        Ok(d) => d,
        Err(e) => panic!("no decoder: {e}"),
    }
}

/// `payload` framed for `id` (Protobuf: with the first message's index).
pub(super) fn framed(id: i32, protobuf: bool, payload: &[u8]) -> Vec<u8> {
    let mut value = wire::header(id, protobuf.then_some(&[0][..]));
    value.extend_from_slice(payload);
    value
}

pub(super) fn decode(decoder: &TypedDecoder, values: &[Option<Vec<u8>>]) -> Decoded {
    let borrowed: Vec<Option<&[u8]>> = values.iter().map(|v| v.as_deref()).collect();
    decoder.decode(&borrowed).expect("the batch builds")
}

pub(super) fn column<'a>(batch: &'a RecordBatch, name: &str) -> &'a dyn Array {
    batch.column_by_name(name).unwrap_or_else(|| panic!("no column {name} in {:?}", batch.schema())).as_ref()
}

pub(super) fn strings(array: &dyn Array) -> Vec<Option<String>> {
    array.as_string::<i32>().iter().map(|s| s.map(str::to_string)).collect()
}

/// Whether iceberg 0.10's `arrow_schema_to_schema` (its `primitive`, `list`, `map`
/// and `struct` visitors, read from its source) accepts the type: a copy of its
/// rules, so this crate does not depend on iceberg.
pub(super) fn iceberg_accepts(data_type: &DataType) -> bool {
    match data_type {
        DataType::Boolean
        | DataType::Int32
        | DataType::Int64
        | DataType::Float32
        | DataType::Float64
        | DataType::Date32
        | DataType::Time64(TimeUnit::Microsecond)
        | DataType::Timestamp(TimeUnit::Microsecond, None)
        | DataType::Utf8
        | DataType::LargeBinary
        | DataType::FixedSizeBinary(_) => true,
        DataType::Timestamp(TimeUnit::Microsecond, Some(zone)) => zone.as_ref() == "+00:00" || zone.as_ref() == "UTC",
        DataType::Decimal128(p, s) => *p >= 1 && *p <= 38 && *s >= 0 && (*s as u8) <= *p,
        DataType::List(item) => iceberg_accepts(item.data_type()),
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) => kv.len() == 2 && !kv[0].is_nullable() && kv.iter().all(|f| iceberg_accepts(f.data_type())),
            _ => false,
        },
        DataType::Struct(fields) => !fields.is_empty() && fields.iter().all(|f| iceberg_accepts(f.data_type())),
        _ => false,
    }
}

pub(super) fn assert_iceberg_types(decoder: &TypedDecoder) {
    for f in decoder.arrow_schema().fields() {
        assert!(iceberg_accepts(f.data_type()), "{}: {} is not an Iceberg type", f.name(), f.data_type());
        assert!(f.is_nullable(), "{} is required", f.name());
    }
}
