use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Float64Type, Int64Type, TimestampMicrosecondType};
use arrow_array::Array;
use arrow_schema::DataType;
use serde_json::json;

use super::super::tests::{
    assert_iceberg_types, column, decode, decoder, framed, registered, strings,
};
use super::super::TypedDecoder;
use super::{parse_date, parse_date_time};
use crate::compatibility::SchemaType;
use crate::records::SchemaReference;

const ORDER: &str = r##"{
  "type": "object",
  "definitions": { "address": { "type": "object", "properties": { "city": { "type": "string" } } } },
  "properties": {
    "id": { "type": "integer" },
    "price": { "type": "number" },
    "paid": { "type": "boolean" },
    "note": { "type": ["string", "null"] },
    "status": { "type": "string", "enum": ["NEW", "PAID"] },
    "at": { "type": "string", "format": "date-time" },
    "day": { "type": "string", "format": "date" },
    "tags": { "type": "array", "items": { "type": "string" } },
    "attrs": { "type": "object", "additionalProperties": { "type": "integer" } },
    "customer": { "type": "object", "properties": { "name": { "type": "string" }, "address": { "$ref": "#/definitions/address" } } },
    "lines": { "type": "array", "items": { "type": "object", "properties": { "sku": { "type": "string" }, "n": { "type": "integer" } } } },
    "anything": {},
    "either": { "oneOf": [{ "type": "string" }, { "type": "integer" }] }
  }
}"##;

fn order(id: i64) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "id": id, "price": 9.5, "paid": true, "note": null, "status": "PAID",
        "at": "2023-11-14T22:13:20.123456+01:00", "day": "2024-02-29",
        "tags": ["a", "b"], "attrs": {"k": 7},
        "customer": {"name": "Ada", "address": {"city": "Paris"}},
        "lines": [{"sku": "X1", "n": 2}],
        "anything": {"deep": [1, {"x": null}]}, "either": 5, "unknown": "dropped"
    }))
    .expect("json")
}

#[test]
fn an_order_decodes_field_by_field() {
    let d = decoder(9, SchemaType::Json, ORDER);
    assert_iceberg_types(&d);
    let out = decode(&d, &[Some(framed(9, false, &order(1))), None, Some(framed(9, false, b"{}"))]);
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    let b = &out.batch;
    let ids = column(b, "id").as_primitive::<Int64Type>();
    assert_eq!((ids.value(0), ids.is_null(1), ids.is_null(2)), (1, true, true));
    assert_eq!(column(b, "price").as_primitive::<Float64Type>().value(0), 9.5);
    assert!(column(b, "paid").as_boolean().value(0));
    assert_eq!(strings(column(b, "note")), vec![None, None, None]);
    assert_eq!(strings(column(b, "status"))[0].as_deref(), Some("PAID"));
    let at = column(b, "at");
    assert_eq!(
        at.data_type(),
        &DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, Some("+00:00".into()))
    );
    assert_eq!(at.as_primitive::<TimestampMicrosecondType>().value(0), 1_699_996_400_123_456);
    assert_eq!(column(b, "day").as_primitive::<Date32Type>().value(0), 19_782);
    assert_eq!(
        strings(column(b, "tags").as_list::<i32>().value(0).as_ref()),
        vec![Some("a".into()), Some("b".into())]
    );
    assert_eq!(
        strings(column(b, "attrs"))[0].as_deref(),
        Some(r#"{"k":7}"#),
        "maps without properties are JSON text"
    );
    let customer = column(b, "customer").as_struct();
    let city = customer.column_by_name("address").expect("address").as_struct().column(0).clone();
    assert_eq!(strings(city.as_ref())[0].as_deref(), Some("Paris"));
    let lines = column(b, "lines").as_list::<i32>().value(0);
    assert_eq!(
        lines.as_struct().column_by_name("n").expect("n").as_primitive::<Int64Type>().value(0),
        2
    );
    assert_eq!(strings(column(b, "anything"))[0].as_deref(), Some(r#"{"deep":[1,{"x":null}]}"#));
    assert_eq!(strings(column(b, "either"))[0].as_deref(), Some("5"));
    assert!(b.column_by_name("unknown").is_none());
}

#[test]
fn bad_values_are_rejected_one_by_one() {
    let d = decoder(9, SchemaType::Json, ORDER);
    let good = order(1);
    let wrong =
        |v: serde_json::Value| Some(framed(9, false, &serde_json::to_vec(&v).expect("json")));
    let values = vec![
        Some(framed(9, false, &good)),
        Some(good.clone()),                              // no magic byte
        Some(framed(10, false, &good)),                  // another id
        Some(framed(9, false, &good[..good.len() / 2])), // truncated
        Some(framed(9, false, b"\xff\xfe garbage")),     // garbage
        wrong(json!({"id": "one"})),                     // a string for an integer
        wrong(json!({"id": 1.5})),                       // a fraction
        wrong(json!({"id": 18446744073709551615u64})),   // beyond i64
        wrong(json!({"at": "yesterday"})),               // not a date-time
        wrong(json!({"day": "2023-02-29"})),             // no such day
        wrong(json!({"lines": [{"n": 1}, {"n": "x"}]})), // fails half-way through a list
        Some(framed(9, false, &good)),
    ];
    let out = decode(&d, &values);
    assert_eq!(out.rows, vec![0, 11], "{:?}", out.rejected);
    assert_eq!(out.rejected.len(), 10);
    let lines = column(&out.batch, "lines").as_list::<i32>();
    assert_eq!(lines.values().len(), 2, "nothing left of the half-written list");
}

#[test]
fn references_recursion_and_non_objects() {
    let address = r#"{"type":"object","properties":{"city":{"type":"string"}}}"#;
    let order = r#"{"type":"object","properties":{"ship_to":{"$ref":"address.json"}}}"#;
    let reference =
        SchemaReference { name: "address.json".into(), subject: "address".into(), version: 1 };
    let d = TypedDecoder::new(
        &registered(2, SchemaType::Json, order),
        &[(reference, address.to_string())],
    )
    .expect("decoder");
    let out = decode(&d, &[Some(framed(2, false, br#"{"ship_to":{"city":"Oslo"}}"#))]);
    let ship_to = column(&out.batch, "ship_to").as_struct().column(0).clone();
    assert_eq!(strings(ship_to.as_ref()), vec![Some("Oslo".into())]);

    let tree = r##"{"type":"object","properties":{"v":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#"}}}}"##;
    let d = decoder(3, SchemaType::Json, tree);
    let children = d.arrow_schema().field_with_name("children").expect("children");
    assert_eq!(
        children.data_type(),
        &arrow_schema::DataType::List(std::sync::Arc::new(arrow_schema::Field::new(
            "element",
            DataType::Utf8,
            true
        )))
    );

    let d = decoder(4, SchemaType::Json, r#"{"type":"array","items":{"type":"integer"}}"#);
    let out = decode(&d, &[Some(framed(4, false, b"[1,2]")), Some(framed(4, false, b"null"))]);
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    let value = column(&out.batch, "value").as_list::<i32>();
    assert_eq!(value.value(0).as_primitive::<Int64Type>().values().to_vec(), vec![1, 2]);
    assert!(value.is_null(1));
}

#[test]
fn deep_schemas_are_refused() {
    let depth = super::super::MAX_DEPTH + 2;
    let deep = format!(
        "{}{{\"type\":\"integer\"}}{}",
        r#"{"type":"array","items":"#.repeat(depth),
        "}".repeat(depth)
    );
    let err =
        TypedDecoder::new(&registered(1, SchemaType::Json, &deep), &[]).expect_err("too deep");
    assert!(matches!(err, super::super::DecodeError::TooDeep { .. }), "{err}");
}

#[test]
fn dates_and_times() {
    assert_eq!(parse_date("1970-01-01"), Ok(0));
    assert_eq!(parse_date("1969-12-31"), Ok(-1));
    assert!(parse_date("2023-13-01").is_err());
    assert_eq!(parse_date_time("1970-01-01T00:00:00Z"), Ok(0));
    assert_eq!(parse_date_time("1970-01-01T01:00:00.5+01:00"), Ok(500_000));
    assert_eq!(parse_date_time("1969-12-31T23:59:59.999999999Z"), Ok(-1));
    assert!(parse_date_time("1970-01-01T00:00:00").is_err(), "an offset is required");
}

#[test]
fn a_deeply_nested_payload_is_rejected_without_overflow() {
    let d = decoder(1, SchemaType::Json, r#"{"type":"object","properties":{"any":{}}}"#);
    let deep = format!(r#"{{"any":{}1{}}}"#, "[".repeat(100_000), "]".repeat(100_000));
    let out = decode(
        &d,
        &[Some(framed(1, false, deep.as_bytes())), Some(framed(1, false, br#"{"any":[[1]]}"#))],
    );
    assert_eq!(out.rows, vec![1], "serde_json's recursion limit");
    assert_eq!(strings(column(&out.batch, "any")), vec![Some("[[1]]".into())]);
}
