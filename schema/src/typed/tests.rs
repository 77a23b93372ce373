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
    batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name} in {:?}", batch.schema()))
        .as_ref()
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
        DataType::Timestamp(TimeUnit::Microsecond, Some(zone)) => {
            zone.as_ref() == "+00:00" || zone.as_ref() == "UTC"
        }
        DataType::Decimal128(p, s) => *p >= 1 && *p <= 38 && *s >= 0 && (*s as u8) <= *p,
        DataType::List(item) => iceberg_accepts(item.data_type()),
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) => {
                kv.len() == 2
                    && !kv[0].is_nullable()
                    && kv.iter().all(|f| iceberg_accepts(f.data_type()))
            }
            _ => false,
        },
        DataType::Struct(fields) => {
            !fields.is_empty() && fields.iter().all(|f| iceberg_accepts(f.data_type()))
        }
        _ => false,
    }
}

pub(super) fn assert_iceberg_types(decoder: &TypedDecoder) {
    for f in decoder.arrow_schema().fields() {
        assert!(
            iceberg_accepts(f.data_type()),
            "{}: {} is not an Iceberg type",
            f.name(),
            f.data_type()
        );
        assert!(f.is_nullable(), "{} is required", f.name());
    }
}

fn register(
    registry: &mut crate::Registry,
    subject: &str,
    text: &str,
    references: &[crate::SchemaReference],
) -> i32 {
    let planned =
        registry.register(subject, SchemaType::Avro, text, references).expect("registers");
    for record in &planned.records {
        registry.apply(&record.key, record.value.as_deref()).expect("applies");
    }
    planned.answer
}

#[test]
fn a_decoder_from_the_registry_resolves_references() {
    use apache_avro::types::Value;
    let mut registry = crate::Registry::new(vec![std::sync::Arc::new(crate::AvroFormat)]);
    let money = r#"{"type":"record","name":"Money","namespace":"shop","fields":[{"name":"cents","type":"long"}]}"#;
    let order = r#"{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"total","type":"shop.Money"}]}"#;
    register(&mut registry, "money", money, &[]);
    let reference =
        crate::SchemaReference { name: "shop.Money".into(), subject: "money".into(), version: 1 };
    let id = register(&mut registry, "orders-value", order, &[reference]);
    let d = TypedDecoder::from_registry(&registry, id).expect("decoder");
    assert_eq!(d.schema_id(), id);
    let schemata = apache_avro::Schema::parse_list([money, order]).expect("schemas");
    let value = Value::Record(vec![(
        "total".into(),
        Value::Record(vec![("cents".into(), Value::Long(250))]),
    )]);
    let payload =
        apache_avro::to_avro_datum_schemata(&schemata[1], schemata.iter().collect(), value)
            .expect("encodes");
    let out = decode(&d, &[Some(framed(id, false, &payload))]);
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    let total = column(&out.batch, "total").as_struct();
    assert_eq!(total.column(0).as_primitive::<arrow_array::types::Int64Type>().value(0), 250);
    assert!(TypedDecoder::from_registry(&registry, 99).is_err(), "no such id");
}

#[test]
fn decoders_are_shared_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<TypedDecoder>();
}

#[test]
fn an_empty_batch_and_a_batch_of_only_rejections_are_empty_batches() {
    let d = decoder(
        1,
        SchemaType::Avro,
        r#"{"type":"record","name":"R","fields":[{"name":"n","type":"int"}]}"#,
    );
    let out = decode(&d, &[]);
    assert_eq!(out.batch.num_rows(), 0);
    let out = decode(&d, &[Some(vec![1, 2, 3])]);
    assert_eq!((out.batch.num_rows(), out.rejected.len()), (0, 1));
    assert_eq!(out.batch.schema(), *d.arrow_schema());
}

#[test]
fn a_schema_that_is_not_a_record_wraps_its_value() {
    let record = r#"{"type":"record","name":"K","fields":[{"name":"value","type":"string"}]}"#;
    assert!(
        !decoder(1, SchemaType::Avro, record).wraps_value(),
        "a record with a field named `value` is a record"
    );
    assert!(decoder(2, SchemaType::Avro, r#""string""#).wraps_value());
    assert!(decoder(3, SchemaType::Json, r#"{"type":"integer"}"#).wraps_value());
    assert!(!decoder(
        4,
        SchemaType::Json,
        r#"{"type":"object","properties":{"a":{"type":"string"}}}"#
    )
    .wraps_value());
}
