use arrow_array::cast::AsArray;
use arrow_array::types::{
    Decimal128Type, Float64Type, Int32Type, Int64Type, TimestampMicrosecondType,
};
use arrow_array::Array;
use arrow_schema::DataType;
use prost::Message as _;
use prost_reflect::{DynamicMessage, MapKey, MessageDescriptor, ReflectMessage, Value};

use super::super::tests::{
    assert_iceberg_types, column, decode, decoder, framed, registered, strings,
};
use super::super::{wire, TypedDecoder};
use crate::compatibility::SchemaType;
use crate::protobuf::descriptor_pool;

const ORDER: &str = r#"
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/empty.proto";
import "google/protobuf/duration.proto";

message Order {
  int64 id = 1;
  int32 qty = 2;
  uint64 big = 3;
  uint32 medium = 4;
  double price = 5;
  bool paid = 6;
  optional string note = 7;
  Status status = 8;
  bytes blob = 9;
  repeated string tags = 10;
  map<string, int64> attrs = 11;
  Customer customer = 12;
  repeated Line lines = 13;
  google.protobuf.Timestamp at = 14;
  google.protobuf.Int32Value maybe = 15;
  google.protobuf.Struct extra = 16;
  google.protobuf.Empty nothing = 17;
  google.protobuf.Duration took = 18;
  oneof pay { string card = 19; int64 voucher = 20; }
  map<int32, Line> by_number = 21;
  sint32 delta = 22;

  enum Status { NEW = 0; PAID = 1; }
  message Customer { string name = 1; Address address = 2; }
  message Address { string city = 1; }
  message Line { string sku = 1; int32 n = 2; }
}
message Other { string x = 1; }
"#;

fn order_descriptor() -> MessageDescriptor {
    let pool = descriptor_pool(ORDER, &[]).expect("compiles");
    pool.get_message_by_name("shop.Order").expect("Order")
}

fn sub(parent: &MessageDescriptor, field: &str) -> DynamicMessage {
    let Some(f) = parent.get_field_by_name(field) else { panic!("no field {field}") };
    let prost_reflect::Kind::Message(m) = f.kind() else { panic!("{field} is not a message") };
    DynamicMessage::new(m)
}

fn full_order() -> Vec<u8> {
    let desc = order_descriptor();
    let mut m = DynamicMessage::new(desc.clone());
    m.set_field_by_name("id", Value::I64(1));
    m.set_field_by_name("qty", Value::I32(3));
    m.set_field_by_name("big", Value::U64(u64::MAX));
    m.set_field_by_name("medium", Value::U32(u32::MAX));
    m.set_field_by_name("price", Value::F64(9.5));
    m.set_field_by_name("paid", Value::Bool(true));
    m.set_field_by_name("note", Value::String("fragile".into()));
    m.set_field_by_name("status", Value::EnumNumber(1));
    m.set_field_by_name("blob", Value::Bytes(vec![1, 2].into()));
    m.set_field_by_name(
        "tags",
        Value::List(vec![Value::String("a".into()), Value::String("b".into())]),
    );
    m.set_field_by_name(
        "attrs",
        Value::Map([(MapKey::String("k".into()), Value::I64(7))].into_iter().collect()),
    );
    let mut customer = sub(&desc, "customer");
    customer.set_field_by_name("name", Value::String("Ada".into()));
    let mut address = sub(&customer.descriptor(), "address");
    address.set_field_by_name("city", Value::String("Paris".into()));
    customer.set_field_by_name("address", Value::Message(address));
    m.set_field_by_name("customer", Value::Message(customer));
    let mut line = sub(&desc, "lines");
    line.set_field_by_name("sku", Value::String("X1".into()));
    line.set_field_by_name("n", Value::I32(2));
    m.set_field_by_name("lines", Value::List(vec![Value::Message(line.clone())]));
    let mut at = sub(&desc, "at");
    at.set_field_by_name("seconds", Value::I64(1_700_000_000));
    at.set_field_by_name("nanos", Value::I32(123_456_789));
    m.set_field_by_name("at", Value::Message(at));
    let mut maybe = sub(&desc, "maybe");
    maybe.set_field_by_name("value", Value::I32(0));
    m.set_field_by_name("maybe", Value::Message(maybe));
    let mut extra = sub(&desc, "extra");
    let struct_value = |kind: &str, v: Value| {
        let value_desc = extra.descriptor().get_field_by_name("fields").expect("fields");
        let prost_reflect::Kind::Message(entry) = value_desc.kind() else { panic!() };
        let prost_reflect::Kind::Message(value_message) = entry.map_entry_value_field().kind()
        else {
            panic!()
        };
        let mut value = DynamicMessage::new(value_message);
        value.set_field_by_name(kind, v);
        Value::Message(value)
    };
    let fields = [
        (MapKey::String("n".into()), struct_value("number_value", Value::F64(1.5))),
        (MapKey::String("s".into()), struct_value("string_value", Value::String("x".into()))),
    ];
    extra.set_field_by_name("fields", Value::Map(fields.into_iter().collect()));
    m.set_field_by_name("extra", Value::Message(extra));
    let mut took = sub(&desc, "took");
    took.set_field_by_name("seconds", Value::I64(5));
    m.set_field_by_name("took", Value::Message(took));
    m.set_field_by_name("voucher", Value::I64(99));
    m.set_field_by_name(
        "by_number",
        Value::Map([(MapKey::I32(4), Value::Message(line))].into_iter().collect()),
    );
    m.set_field_by_name("delta", Value::I32(-5));
    m.encode_to_vec()
}

#[test]
fn an_order_decodes_field_by_field() {
    let d = decoder(5, SchemaType::Protobuf, ORDER);
    assert_iceberg_types(&d);
    assert!(d.arrow_schema().field_with_name("nothing").is_err(), "Empty has no column");
    let values = vec![Some(framed(5, true, &full_order())), None, Some(framed(5, true, &[]))];
    let out = decode(&d, &values);
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    let b = &out.batch;
    assert_eq!(b.num_rows(), 3);
    let ids = column(b, "id").as_primitive::<Int64Type>();
    assert_eq!(
        (ids.value(0), ids.is_null(1), ids.value(2)),
        (1, true, 0),
        "proto3 defaults are values, tombstones null"
    );
    assert_eq!(column(b, "qty").as_primitive::<Int32Type>().value(0), 3);
    let big = column(b, "big");
    assert_eq!(big.data_type(), &DataType::Decimal128(20, 0));
    assert_eq!(big.as_primitive::<Decimal128Type>().value(0), i128::from(u64::MAX));
    assert_eq!(column(b, "medium").as_primitive::<Int64Type>().value(0), i64::from(u32::MAX));
    assert_eq!(column(b, "price").as_primitive::<Float64Type>().value(0), 9.5);
    assert!(column(b, "paid").as_boolean().value(0));
    assert_eq!(
        strings(column(b, "note")),
        vec![Some("fragile".into()), None, None],
        "optional: null when absent"
    );
    assert_eq!(strings(column(b, "status")), vec![Some("PAID".into()), None, Some("NEW".into())]);
    assert_eq!(column(b, "blob").as_binary::<i64>().value(0), &[1, 2]);
    assert_eq!(
        strings(column(b, "tags").as_list::<i32>().value(0).as_ref()),
        vec![Some("a".into()), Some("b".into())]
    );
    let attrs = column(b, "attrs").as_map();
    assert_eq!(strings(attrs.value(0).column(0).as_ref()), vec![Some("k".into())]);
    assert_eq!(attrs.value(0).column(1).as_primitive::<Int64Type>().value(0), 7);
    let customer = column(b, "customer").as_struct();
    assert!(customer.is_valid(0) && customer.is_null(2), "an absent message is null");
    let city = customer.column_by_name("address").expect("address").as_struct().column(0).clone();
    assert_eq!(strings(city.as_ref())[0].as_deref(), Some("Paris"));
    let lines = column(b, "lines").as_list::<i32>().value(0);
    assert_eq!(
        lines.as_struct().column_by_name("n").expect("n").as_primitive::<Int32Type>().value(0),
        2
    );
    let at = column(b, "at");
    assert_eq!(
        at.data_type(),
        &DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, Some("+00:00".into()))
    );
    assert_eq!(at.as_primitive::<TimestampMicrosecondType>().value(0), 1_700_000_000_123_456);
    let maybe = column(b, "maybe").as_primitive::<Int32Type>();
    assert_eq!(
        (maybe.is_valid(0), maybe.value(0), maybe.is_null(2)),
        (true, 0, true),
        "a wrapper's 0 is not null"
    );
    assert_eq!(strings(column(b, "extra"))[0].as_deref(), Some(r#"{"n":1.5,"s":"x"}"#));
    let took = column(b, "took").as_struct();
    assert_eq!(
        took.column_by_name("seconds").expect("seconds").as_primitive::<Int64Type>().value(0),
        5
    );
    assert!(column(b, "card").is_null(0));
    assert_eq!(column(b, "voucher").as_primitive::<Int64Type>().value(0), 99);
    let by_number = column(b, "by_number").as_map();
    assert_eq!(by_number.value(0).column(0).as_primitive::<Int32Type>().value(0), 4);
    assert_eq!(column(b, "delta").as_primitive::<Int32Type>().value(0), -5);
}

#[test]
fn bad_values_are_rejected_one_by_one() {
    let d = decoder(5, SchemaType::Protobuf, ORDER);
    let good = full_order();
    let mut other_message = wire::header(5, Some(&[1]));
    other_message.extend_from_slice(&good);
    let values = vec![
        Some(framed(5, true, &good)),
        Some(good.clone()),                             // no magic byte
        Some(framed(6, true, &good)),                   // another id
        Some(framed(5, true, &good[..good.len() - 1])), // truncated (inside the last field: at a field boundary protobuf cannot tell)
        Some(framed(5, true, &[0xff; 16])),             // garbage
        Some(other_message),                            // another message type
        Some(wire::header(5, None)),                    // no message indexes
        Some(framed(5, true, &good)),
    ];
    let out = decode(&d, &values);
    assert_eq!(out.rows, vec![0, 7], "{:?}", out.rejected);
    assert_eq!(out.rejected.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(
        column(&out.batch, "tags").as_list::<i32>().values().len(),
        4,
        "nothing left of rejected records"
    );
}

#[test]
fn a_nested_message_is_chosen_by_its_indexes() {
    let pool = descriptor_pool(ORDER, &[]).expect("compiles");
    // Nested types in declaration order, map entries included (as Confluent numbers them).
    let order = pool.get_message_by_name("shop.Order").expect("Order");
    let index = order.child_messages().position(|m| m.name() == "Address").expect("Address") as i32;
    let d =
        TypedDecoder::for_message(&registered(5, SchemaType::Protobuf, ORDER), &[], &[0, index])
            .expect("Order.Address");
    assert_eq!(d.arrow_schema().fields().len(), 1);
    let mut value = wire::header(5, Some(&[0, index]));
    let mut address =
        DynamicMessage::new(pool.get_message_by_name("shop.Order.Address").expect("Address"));
    address.set_field_by_name("city", Value::String("Oslo".into()));
    value.extend_from_slice(&address.encode_to_vec());
    let out = d.decode(&[Some(value.as_slice())]).expect("batch");
    assert_eq!(strings(column(&out.batch, "city")), vec![Some("Oslo".into())]);
}

#[test]
fn a_base64_descriptor_reads_as_its_text_does() {
    use base64::Engine as _;
    let pool = descriptor_pool(ORDER, &[]).expect("compiles");
    let file = pool.get_file_by_name(crate::protobuf::SCHEMA_FILE).expect("file");
    let encoded = base64::engine::general_purpose::STANDARD
        .encode(file.file_descriptor_proto().encode_to_vec());
    let from_text = decoder(5, SchemaType::Protobuf, ORDER);
    let from_descriptor = decoder(5, SchemaType::Protobuf, &encoded);
    assert_eq!(from_text.arrow_schema(), from_descriptor.arrow_schema());
    let out = decode(&from_descriptor, &[Some(framed(5, true, &full_order()))]);
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
}

#[test]
fn recursive_and_deep_messages_are_refused() {
    let recursive = r#"syntax = "proto3"; message Node { Node next = 1; int32 v = 2; }"#;
    let err = TypedDecoder::new(&registered(1, SchemaType::Protobuf, recursive), &[])
        .expect_err("recursive");
    assert!(err.to_string().contains("recursive"), "{err}");
    let mutual = r#"syntax = "proto3"; message A { B b = 1; } message B { A a = 1; }"#;
    assert!(TypedDecoder::new(&registered(1, SchemaType::Protobuf, mutual), &[]).is_err());
    // A chain deeper than MAX_DEPTH, which protox accepts (messages side by side).
    let depth = super::super::MAX_DEPTH + 5;
    let mut text = String::from("syntax = \"proto3\";\n");
    for i in 0..depth {
        text.push_str(&format!("message M{i} {{ M{} next = 1; }}\n", i + 1));
    }
    text.push_str(&format!("message M{depth} {{ int32 v = 1; }}\n"));
    let err =
        TypedDecoder::new(&registered(1, SchemaType::Protobuf, &text), &[]).expect_err("too deep");
    assert!(matches!(err, super::super::DecodeError::TooDeep { .. }), "{err}");
}

#[test]
fn a_deeply_nested_struct_value_is_rejected_without_overflow() {
    let schema = r#"syntax = "proto3"; import "google/protobuf/struct.proto"; message M { google.protobuf.Value v = 1; }"#;
    let d = decoder(1, SchemaType::Protobuf, schema);
    let length_delimited = |tag: u8, inner: Vec<u8>| {
        let mut out = vec![tag];
        let mut len = inner.len();
        while len >= 0x80 {
            out.push((len as u8) | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
        out.extend(inner);
        out
    };
    let nest = |depth: usize| {
        let mut value = vec![0x08, 0x00]; // Value { null_value: NULL_VALUE }
        for _ in 0..depth {
            let list = length_delimited(0x0a, value); // ListValue { values: [value] }
            value = length_delimited(0x32, list); // Value { list_value }
        }
        length_delimited(0x0a, value) // M { v }
    };
    let out = decode(&d, &[Some(framed(1, true, &nest(3))), Some(framed(1, true, &nest(5_000)))]);
    assert_eq!(strings(column(&out.batch, "v")), vec![Some("[[[null]]]".into())]);
    assert_eq!(out.rejected.len(), 1, "prost's recursion limit");
}

#[test]
fn an_enum_number_without_a_name_is_its_number() {
    let d = decoder(
        1,
        SchemaType::Protobuf,
        r#"syntax = "proto3"; message M { E e = 1; } enum E { A = 0; B = 1; }"#,
    );
    let out =
        decode(&d, &[Some(framed(1, true, &[0x08, 0x07])), Some(framed(1, true, &[0x08, 0x01]))]);
    assert_eq!(strings(column(&out.batch, "e")), vec![Some("7".into()), Some("B".into())]);
}
