use std::collections::HashMap;

use apache_avro::types::Value;
use apache_avro::{to_avro_datum, Decimal, Schema};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Float64Type, Int32Type, Int64Type, Time64MicrosecondType,
    TimestampMicrosecondType,
};
use arrow_array::Array;
use arrow_schema::DataType;

use super::super::tests::{assert_iceberg_types, column, decode, decoder, framed, strings};
use crate::compatibility::SchemaType;

const ORDER: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
  {"name":"id","type":"long"},
  {"name":"qty","type":"int"},
  {"name":"price","type":"double"},
  {"name":"paid","type":"boolean"},
  {"name":"note","type":["null","string"],"default":null},
  {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID","SHIPPED"]}},
  {"name":"total","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
  {"name":"tax","type":{"type":"fixed","name":"Tax","size":4,"logicalType":"decimal","precision":6,"scale":3}},
  {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"local_at","type":{"type":"long","logicalType":"local-timestamp-micros"}},
  {"name":"day","type":{"type":"int","logicalType":"date"}},
  {"name":"time","type":{"type":"int","logicalType":"time-millis"}},
  {"name":"uid","type":{"type":"string","logicalType":"uuid"}},
  {"name":"hash","type":{"type":"fixed","name":"Hash","size":2}},
  {"name":"tags","type":{"type":"array","items":"string"}},
  {"name":"attrs","type":{"type":"map","values":"long"}},
  {"name":"customer","type":["null",{"type":"record","name":"Customer","fields":[
      {"name":"name","type":"string"},
      {"name":"address","type":{"type":"record","name":"Address","fields":[{"name":"city","type":"string"}]}}]}],"default":null},
  {"name":"lines","type":{"type":"array","items":{"type":"record","name":"Line","fields":[{"name":"sku","type":"string"},{"name":"n","type":"int"}]}}},
  {"name":"either","type":["null","int","string","Address"]}
]}"#;

fn address(city: &str) -> Value {
    Value::Record(vec![("city".into(), Value::String(city.into()))])
}

fn order(id: i64, with_customer: bool) -> Value {
    let customer = if with_customer {
        Value::Union(
            1,
            Box::new(Value::Record(vec![
                ("name".into(), Value::String("Ada".into())),
                ("address".into(), address("Paris")),
            ])),
        )
    } else {
        Value::Union(0, Box::new(Value::Null))
    };
    let note = if with_customer {
        Value::Union(1, Box::new(Value::String("fragile".into())))
    } else {
        Value::Union(0, Box::new(Value::Null))
    };
    Value::Record(vec![
        ("id".into(), Value::Long(id)),
        ("qty".into(), Value::Int(3)),
        ("price".into(), Value::Double(9.5)),
        ("paid".into(), Value::Boolean(true)),
        ("note".into(), note),
        ("status".into(), Value::Enum(1, "PAID".into())),
        ("total".into(), Value::Decimal(Decimal::from((-12345i64).to_be_bytes()))),
        ("tax".into(), Value::Decimal(Decimal::from(1500i32.to_be_bytes()))),
        ("at".into(), Value::TimestampMillis(1_700_000_000_123)),
        ("local_at".into(), Value::LocalTimestampMicros(42)),
        ("day".into(), Value::Date(19_000)),
        ("time".into(), Value::TimeMillis(1_000)),
        ("uid".into(), Value::String("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11".into())),
        ("hash".into(), Value::Fixed(2, vec![0xab, 0xcd])),
        ("tags".into(), Value::Array(vec![Value::String("a".into()), Value::String("b".into())])),
        ("attrs".into(), Value::Map(HashMap::from([("k".to_string(), Value::Long(7))]))),
        ("customer".into(), customer),
        (
            "lines".into(),
            Value::Array(vec![Value::Record(vec![
                ("sku".into(), Value::String("X1".into())),
                ("n".into(), Value::Int(2)),
            ])]),
        ),
        (
            "either".into(),
            if with_customer {
                Value::Union(2, Box::new(Value::String("s".into())))
            } else {
                Value::Union(3, Box::new(address("Oslo")))
            },
        ),
    ])
}

fn encoded(schema: &str, value: Value) -> Vec<u8> {
    let schema = Schema::parse_str(schema).expect("schema");
    to_avro_datum(&schema, value).expect("encodes")
}

#[test]
fn an_order_decodes_field_by_field() {
    let d = decoder(7, SchemaType::Avro, ORDER);
    assert_iceberg_types(&d);
    let values = vec![
        Some(framed(7, false, &encoded(ORDER, order(1, true)))),
        None,
        Some(framed(7, false, &encoded(ORDER, order(2, false)))),
    ];
    let out = decode(&d, &values);
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    assert_eq!(out.rows, vec![0, 1, 2]);
    let b = &out.batch;
    assert_eq!(b.num_rows(), 3);
    let ids = column(b, "id").as_primitive::<Int64Type>();
    assert_eq!(
        (ids.value(0), ids.is_null(1), ids.value(2)),
        (1, true, 2),
        "the tombstone is a row of nulls"
    );
    assert_eq!(column(b, "qty").as_primitive::<Int32Type>().value(0), 3);
    assert_eq!(column(b, "price").as_primitive::<Float64Type>().value(0), 9.5);
    assert!(column(b, "paid").as_boolean().value(0));
    assert_eq!(strings(column(b, "note")), vec![Some("fragile".into()), None, None]);
    assert_eq!(strings(column(b, "status"))[0].as_deref(), Some("PAID"));
    let total = column(b, "total").as_primitive::<Decimal128Type>();
    assert_eq!((total.value(0), total.precision(), total.scale()), (-12345, 10, 2));
    assert_eq!(column(b, "tax").as_primitive::<Decimal128Type>().value(0), 1500);
    let at = column(b, "at");
    assert_eq!(
        at.data_type(),
        &DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, Some("+00:00".into()))
    );
    assert_eq!(at.as_primitive::<TimestampMicrosecondType>().value(0), 1_700_000_000_123_000);
    let local = column(b, "local_at");
    assert_eq!(local.data_type(), &DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, None));
    assert_eq!(local.as_primitive::<TimestampMicrosecondType>().value(0), 42);
    assert_eq!(column(b, "day").as_primitive::<Date32Type>().value(0), 19_000);
    assert_eq!(column(b, "time").as_primitive::<Time64MicrosecondType>().value(0), 1_000_000);
    assert_eq!(
        strings(column(b, "uid"))[0].as_deref(),
        Some("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
    );
    assert_eq!(column(b, "hash").as_fixed_size_binary().value(0), &[0xab, 0xcd]);
    let tags = column(b, "tags").as_list::<i32>();
    assert_eq!(strings(tags.value(0).as_ref()), vec![Some("a".into()), Some("b".into())]);
    assert!(tags.is_null(1));
    let attrs = column(b, "attrs").as_map();
    assert_eq!(strings(attrs.value(0).column(0).as_ref()), vec![Some("k".into())]);
    assert_eq!(attrs.value(0).column(1).as_primitive::<Int64Type>().value(0), 7);
    let customer = column(b, "customer").as_struct();
    assert!(customer.is_valid(0) && customer.is_null(2));
    assert_eq!(
        strings(customer.column_by_name("name").expect("name").as_ref())[0].as_deref(),
        Some("Ada")
    );
    let city = customer
        .column_by_name("address")
        .expect("address")
        .as_struct()
        .column_by_name("city")
        .expect("city")
        .clone();
    assert_eq!(strings(city.as_ref())[0].as_deref(), Some("Paris"));
    let lines = column(b, "lines").as_list::<i32>().value(0);
    assert_eq!(
        strings(lines.as_struct().column_by_name("sku").expect("sku").as_ref()),
        vec![Some("X1".into())]
    );
    let either = column(b, "either").as_struct();
    assert_eq!(
        either.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>(),
        ["int", "string", "Address"]
    );
    assert_eq!(
        strings(either.column_by_name("string").expect("string").as_ref())[0].as_deref(),
        Some("s")
    );
    assert!(either.column_by_name("int").expect("int").is_null(0));
    let oslo = either.column_by_name("Address").expect("Address").as_struct().column(0).clone();
    assert_eq!(strings(oslo.as_ref())[2].as_deref(), Some("Oslo"));
}

#[test]
fn bad_values_are_rejected_one_by_one() {
    let d = decoder(7, SchemaType::Avro, ORDER);
    let good = encoded(ORDER, order(1, true));
    let mut trailing = framed(7, false, &good);
    trailing.push(0);
    let values = vec![
        Some(framed(7, false, &good)),
        Some(good.clone()),                              // no magic byte
        Some(framed(8, false, &good)),                   // another id
        Some(framed(7, false, &good[..good.len() / 2])), // truncated
        Some(framed(7, false, &[0xff; 40])),             // garbage
        Some(trailing),                                  // bytes left over
        Some(vec![0, 0]),                                // short header
        Some(framed(7, false, &good)),
    ];
    let out = decode(&d, &values);
    assert_eq!(out.rows, vec![0, 7]);
    assert_eq!(
        out.rejected.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5, 6],
        "{:?}",
        out.rejected
    );
    assert!(out.rejected[1].1.contains("schema id 8"), "{:?}", out.rejected[1]);
    let b = &out.batch;
    assert_eq!(b.num_rows(), 2);
    // Nothing of the half-read records is left in nested columns.
    assert_eq!(column(b, "tags").as_list::<i32>().values().len(), 4);
    assert_eq!(column(b, "attrs").as_map().entries().len(), 2);
}

#[test]
fn out_of_range_values_are_rejected() {
    let schema = r#"{"type":"record","name":"R","fields":[{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":3,"scale":0}},
        {"name":"e","type":{"type":"enum","name":"E","symbols":["A"]}},{"name":"t","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#;
    let d = decoder(1, SchemaType::Avro, schema);
    let row = |digits: i64, symbol: u8, millis: i64| {
        let mut payload = Vec::new();
        let bytes = digits.to_be_bytes();
        payload.extend_from_slice(&[16]); // length 8
        payload.extend_from_slice(&bytes);
        payload.push(symbol);
        let mut zz = ((millis << 1) ^ (millis >> 63)) as u64;
        while zz >= 0x80 {
            payload.push(zz as u8 | 0x80);
            zz >>= 7;
        }
        payload.push(zz as u8);
        Some(framed(1, false, &payload))
    };
    let out =
        decode(&d, &[row(999, 0, 5), row(1000, 0, 5), row(5, 2, 5), row(5, 0, i64::MAX / 10)]);
    assert_eq!(out.rows, vec![0]);
    assert_eq!(out.rejected.len(), 3, "{:?}", out.rejected);
}

#[test]
fn decimals_wider_than_16_bytes_must_be_sign_extensions() {
    let bound = crate::typed::arrow_types::decimal_bound(38);
    let mut wide = vec![0u8; 17];
    wide[16] = 5;
    assert_eq!(super::decimal(&wide, bound), Ok(5));
    let mut negative = vec![0xffu8; 17];
    negative[16] = 0xfb;
    assert_eq!(super::decimal(&negative, bound), Ok(-5));
    wide[1] = 0x80; // the kept bytes read as negative, the dropped byte said positive
    assert!(super::decimal(&wide, bound).is_err());
    wide[0] = 1;
    assert!(super::decimal(&wide, bound).is_err());
    assert_eq!(super::decimal(&[], bound), Ok(0));
}

#[test]
fn schemas_without_an_iceberg_type_are_refused() {
    let recursive =
        r#"{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]}]}"#;
    let err = super::super::TypedDecoder::new(
        &super::super::tests::registered(1, SchemaType::Avro, recursive),
        &[],
    )
    .expect_err("recursive");
    assert!(err.to_string().contains("recursive"), "{err}");
    let wide = r#"{"type":"record","name":"R","fields":[{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":39,"scale":0}}]}"#;
    assert!(super::super::TypedDecoder::new(
        &super::super::tests::registered(1, SchemaType::Avro, wide),
        &[]
    )
    .is_err());
}

#[test]
fn deep_nesting_is_refused_or_read_without_overflow() {
    let nested = |depth: usize| {
        let mut schema = r#""int""#.to_string();
        for i in 0..depth {
            schema = format!(
                r#"{{"type":"record","name":"R{i}","fields":[{{"name":"f","type":{schema}}}]}}"#
            );
        }
        schema
    };
    let ok = nested(40);
    let d = decoder(1, SchemaType::Avro, &ok);
    let out = decode(&d, &[Some(framed(1, false, &[4]))]);
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    // Arrays nest one JSON level each, so this parses (serde_json stops at 128) and is refused here.
    let too_deep = format!(
        "{}\"int\"{}",
        r#"{"type":"array","items":"#.repeat(super::super::MAX_DEPTH + 2),
        "}".repeat(super::super::MAX_DEPTH + 2)
    );
    assert!(Schema::parse_str(&too_deep).is_ok());
    let err = super::super::TypedDecoder::new(
        &super::super::tests::registered(1, SchemaType::Avro, &too_deep),
        &[],
    )
    .expect_err("too deep");
    assert!(matches!(err, super::super::DecodeError::TooDeep { .. }), "{err}");
}

#[test]
fn a_non_record_schema_is_one_value_column() {
    let d = decoder(3, SchemaType::Avro, r#"{"type":"array","items":"long"}"#);
    let out = decode(&d, &[Some(framed(3, false, &[2, 2, 0]))]);
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    let list = column(&out.batch, "value").as_list::<i32>().value(0);
    assert_eq!(list.as_primitive::<Int64Type>().values().to_vec(), vec![1]);
}

/// A rough figure, not an assertion: `cargo test -p floe-schema -- --ignored avro_throughput --nocapture`.
#[test]
#[ignore]
fn avro_throughput() {
    let d = decoder(7, SchemaType::Avro, ORDER);
    // About 1 KiB: the order with a long note.
    let mut value = order(1, true);
    if let Value::Record(fields) = &mut value {
        fields[4].1 = Value::Union(1, Box::new(Value::String("n".repeat(900))));
    }
    let one = framed(7, false, &encoded(ORDER, value));
    let values: Vec<Option<&[u8]>> = (0..20_000).map(|_| Some(one.as_slice())).collect();
    let start = std::time::Instant::now();
    let out = d.decode(&values).expect("decodes");
    let elapsed = start.elapsed();
    let mib = (one.len() * values.len()) as f64 / (1024.0 * 1024.0);
    println!(
        "{} records of {} bytes: {:.1} MiB/s",
        out.batch.num_rows(),
        one.len(),
        mib / elapsed.as_secs_f64()
    );
}

#[test]
fn negative_block_counts_and_fixed_uuids() {
    // Writers may give a block's byte size after a negative count: -2 items, 2 bytes, 1, 2, end.
    let d = decoder(3, SchemaType::Avro, r#"{"type":"array","items":"long"}"#);
    let out = decode(&d, &[Some(framed(3, false, &[3, 4, 2, 4, 0]))]);
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    assert_eq!(
        column(&out.batch, "value")
            .as_list::<i32>()
            .value(0)
            .as_primitive::<Int64Type>()
            .values()
            .to_vec(),
        vec![1, 2]
    );

    let schema = r#"{"type":"record","name":"R","fields":[{"name":"u","type":{"type":"fixed","name":"U","size":16,"logicalType":"uuid"}}]}"#;
    let d = decoder(4, SchemaType::Avro, schema);
    assert_eq!(
        d.arrow_schema().field(0).data_type(),
        &DataType::FixedSizeBinary(16),
        "a uuid on fixed is its 16 bytes"
    );
    let out = decode(&d, &[Some(framed(4, false, &[7u8; 16]))]);
    assert_eq!(column(&out.batch, "u").as_fixed_size_binary().value(0), &[7u8; 16]);
}

#[test]
fn union_branches_with_one_simple_name_get_distinct_columns() {
    let schema = r#"{"type":"record","name":"R","fields":[{"name":"u","type":[
        {"type":"record","name":"Id","namespace":"a","fields":[{"name":"n","type":"int"}]},
        {"type":"record","name":"Id","namespace":"b","fields":[{"name":"s","type":"string"}]}]}]}"#;
    let d = decoder(1, SchemaType::Avro, schema);
    let DataType::Struct(branches) = d.arrow_schema().field(0).data_type() else {
        panic!("a struct")
    };
    assert_eq!(branches.iter().map(|f| f.name().as_str()).collect::<Vec<_>>(), ["Id", "b_Id"]);
    let out = decode(&d, &[Some(framed(1, false, &[2, 2, b'x']))]);
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    let b_id = column(&out.batch, "u").as_struct().column(1).as_struct().column(0).clone();
    assert_eq!(strings(b_id.as_ref()), vec![Some("x".into())]);
}
