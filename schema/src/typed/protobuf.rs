//! Protobuf values to Arrow: the message's descriptor (from the registered .proto
//! text or base64 descriptor, compiled with its imports) mapped once to a
//! [`MessagePlan`], then each payload decoded by `prost-reflect` into a
//! `DynamicMessage` and walked into the columns.
//!
//! - A value must carry the message indexes the decoder was made for; others are
//!   rejected (one decoder, one message type).
//! - Field presence: see the parent module's "Decisions" (proto3 implicit-presence
//!   fields get their default, fields with presence are null when absent).
//! - An enum number the schema does not name (proto3 enums are open) is written as
//!   its number in text.
//! - `google.protobuf.Struct`, `Value` and `ListValue` are recursive: they are
//!   written as their JSON text (Utf8). Messages without fields (`Empty`) are left
//!   out. prost's decoder stops at 100 nested messages, so no walk goes deeper.

use std::collections::BTreeMap;

use arrow_schema::{DataType, Fields};
use prost_reflect::{
    Cardinality, DynamicMessage, EnumDescriptor, FieldDescriptor, Kind, MapKey, MessageDescriptor,
    ReflectMessage, Value,
};

use super::arrow_types::{self, field, list_of, map_of};
use super::columns::{mismatch, Column};
use super::error::MAX_DEPTH;
use super::error::{child_path, DecodeError};
use super::wire::split_message_indexes;
use crate::protobuf::{descriptor_pool, SCHEMA_FILE};
use crate::records::SchemaReference;

/// A scalar's reading.
#[derive(Debug, Clone)]
enum Scalar {
    Bool,
    Int32,
    /// int64, sint64, sfixed64, and the unsigned 32-bit types widened.
    Int64,
    /// uint64 and fixed64, as Decimal128(20, 0).
    UInt64,
    Float,
    Double,
    String,
    Bytes,
    Enum(EnumDescriptor),
}

/// A single value's reading.
#[derive(Debug)]
enum Node {
    Scalar(Scalar),
    Message(MessagePlan),
    Timestamp,
    /// A `google.protobuf.*Value` wrapper: its `value` field, null when the wrapper is absent.
    Wrapper(Scalar),
    /// `google.protobuf.Struct`, `Value`, `ListValue`: JSON text.
    JsonText,
}

#[derive(Debug)]
enum Shape {
    Single(Node),
    List(Node),
    Map { key: Scalar, value: Node },
}

#[derive(Debug)]
struct FieldPlan {
    descriptor: FieldDescriptor,
    shape: Shape,
    /// Null when absent (proto2 optional, proto3 `optional`, oneof members, messages).
    has_presence: bool,
}

/// A message's fields that have columns, in declaration order (= column order).
#[derive(Debug)]
struct MessagePlan {
    fields: Vec<FieldPlan>,
}

/// The compiled schema of one Protobuf message type.
#[derive(Debug)]
pub(crate) struct ProtobufDecoder {
    message: MessageDescriptor,
    message_indexes: Vec<i32>,
    plan: MessagePlan,
    fields: Fields,
}

impl ProtobufDecoder {
    /// Compiles `text` with its references and maps the message at `message_indexes`.
    ///
    /// # Errors
    /// A schema that does not compile, no such message, or no Iceberg type for it.
    pub(crate) fn new(
        id: i32,
        text: &str,
        references: &[(SchemaReference, String)],
        message_indexes: &[i32],
    ) -> Result<Self, DecodeError> {
        let pool = descriptor_pool(text, references)
            .map_err(|reason| DecodeError::InvalidSchema { id, reason })?;
        let file = pool.get_file_by_name(SCHEMA_FILE).ok_or_else(|| {
            DecodeError::InvalidSchema { id, reason: format!("no {SCHEMA_FILE}") }
        })?;
        let no_message = || DecodeError::InvalidSchema {
            id,
            reason: format!("no message at indexes {message_indexes:?}"),
        };
        let mut indexes = message_indexes.iter().map(|i| usize::try_from(*i).ok());
        let first = indexes.next().flatten().ok_or_else(no_message)?;
        let mut message = file.messages().nth(first).ok_or_else(no_message)?;
        for index in indexes {
            let child = message.child_messages().nth(index.ok_or_else(no_message)?);
            message = child.ok_or_else(no_message)?;
        }
        let mut open = vec![message.full_name().to_string()];
        let (plan, fields) = message_plan(&message, "", 0, &mut open)?;
        Ok(Self { message, message_indexes: message_indexes.to_vec(), plan, fields })
    }

    /// The top-level columns.
    pub(crate) fn fields(&self) -> &Fields {
        &self.fields
    }

    /// Reads one payload (message indexes first) into `row`.
    ///
    /// # Errors
    /// Other message indexes, bytes that are not the message, or values without
    /// an Arrow value; `row` may then hold part of it (the caller truncates).
    pub(crate) fn decode_row(&self, bytes: &[u8], row: &mut Column) -> Result<(), String> {
        let (indexes, payload) = split_message_indexes(bytes)?;
        if indexes != self.message_indexes {
            return Err(format!(
                "message indexes {indexes:?}, not {:?} ({})",
                self.message_indexes,
                self.message.full_name()
            ));
        }
        let message = DynamicMessage::decode(self.message.clone(), payload)
            .map_err(|e| format!("not a {}: {e}", self.message.full_name()))?;
        write_message(&self.plan, &message, row)
    }
}

// ---- mapping -------------------------------------------------------------------

fn message_plan(
    message: &MessageDescriptor,
    path: &str,
    depth: usize,
    open: &mut Vec<String>,
) -> Result<(MessagePlan, Fields), DecodeError> {
    let mut plans = Vec::new();
    let mut fields = Vec::new();
    for descriptor in message.fields() {
        let field_path = child_path(path, descriptor.name());
        let Some((shape, data_type)) = field_shape(&descriptor, &field_path, depth + 1, open)?
        else {
            continue;
        };
        fields.push(field(descriptor.name(), data_type));
        let has_presence = descriptor.supports_presence();
        plans.push(FieldPlan { descriptor, shape, has_presence });
    }
    Ok((MessagePlan { fields: plans }, Fields::from(fields)))
}

/// `None`: a field without columns (a message without fields).
fn field_shape(
    descriptor: &FieldDescriptor,
    path: &str,
    depth: usize,
    open: &mut Vec<String>,
) -> Result<Option<(Shape, DataType)>, DecodeError> {
    if depth > MAX_DEPTH {
        return Err(DecodeError::TooDeep { path: path.to_string() });
    }
    if descriptor.is_map() {
        let Kind::Message(entry) = descriptor.kind() else {
            return Err(DecodeError::unsupported(path, "a map without an entry message"));
        };
        let (key, key_type) = scalar(&entry.map_entry_key_field().kind())
            .ok_or_else(|| DecodeError::unsupported(path, "map key type"))?;
        let Some((value, value_type)) =
            node(&entry.map_entry_value_field().kind(), path, depth + 1, open)?
        else {
            return Err(DecodeError::unsupported(
                path,
                "a map of messages without fields has no Iceberg type",
            ));
        };
        return Ok(Some((Shape::Map { key, value }, map_of(key_type, value_type))));
    }
    let Some((item, data_type)) = node(&descriptor.kind(), path, depth, open)? else {
        return Ok(None);
    };
    Ok(Some(match descriptor.cardinality() {
        Cardinality::Repeated => (Shape::List(item), list_of(data_type)),
        _ => (Shape::Single(item), data_type),
    }))
}

fn scalar(kind: &Kind) -> Option<(Scalar, DataType)> {
    Some(match kind {
        Kind::Bool => (Scalar::Bool, DataType::Boolean),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => (Scalar::Int32, DataType::Int32),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 | Kind::Uint32 | Kind::Fixed32 => {
            (Scalar::Int64, DataType::Int64)
        }
        Kind::Uint64 | Kind::Fixed64 => (Scalar::UInt64, DataType::Decimal128(20, 0)),
        Kind::Float => (Scalar::Float, DataType::Float32),
        Kind::Double => (Scalar::Double, DataType::Float64),
        Kind::String => (Scalar::String, DataType::Utf8),
        Kind::Bytes => (Scalar::Bytes, DataType::LargeBinary),
        Kind::Enum(e) => (Scalar::Enum(e.clone()), DataType::Utf8),
        Kind::Message(_) => return None,
    })
}

fn node(
    kind: &Kind,
    path: &str,
    depth: usize,
    open: &mut Vec<String>,
) -> Result<Option<(Node, DataType)>, DecodeError> {
    if let Some((s, data_type)) = scalar(kind) {
        return Ok(Some((Node::Scalar(s), data_type)));
    }
    let Kind::Message(message) = kind else {
        return Err(DecodeError::unsupported(path, "unknown kind"));
    };
    let name = message.full_name();
    match name {
        "google.protobuf.Timestamp" => {
            return Ok(Some((Node::Timestamp, arrow_types::timestamptz())))
        }
        "google.protobuf.Struct" | "google.protobuf.Value" | "google.protobuf.ListValue" => {
            return Ok(Some((Node::JsonText, DataType::Utf8)))
        }
        _ => {}
    }
    if name.starts_with("google.protobuf.") && name.ends_with("Value") {
        if let Some((s, data_type)) = message.get_field(1).and_then(|f| scalar(&f.kind())) {
            return Ok(Some((Node::Wrapper(s), data_type)));
        }
    }
    if open.iter().any(|o| o == name) {
        return Err(DecodeError::unsupported(
            path,
            format!("message {name} contains itself: a recursive type has no Iceberg type"),
        ));
    }
    open.push(name.to_string());
    let (plan, fields) = message_plan(message, path, depth, open)?;
    open.pop();
    if fields.is_empty() {
        return Ok(None);
    }
    Ok(Some((Node::Message(plan), DataType::Struct(fields))))
}

// ---- writing values --------------------------------------------------------------

fn write_message(
    plan: &MessagePlan,
    message: &DynamicMessage,
    column: &mut Column,
) -> Result<(), String> {
    let Column::Struct { valid, children, .. } = column else {
        return Err(mismatch("message", column));
    };
    for (f, child) in plan.fields.iter().zip(children.iter_mut()) {
        if f.has_presence && !message.has_field(&f.descriptor) {
            child.push_null();
            continue;
        }
        let value = message.get_field(&f.descriptor);
        match (&f.shape, value.as_ref()) {
            (Shape::Single(node), v) => write(node, v, child)?,
            (Shape::List(node), Value::List(items)) => {
                let Column::List { items: out, .. } = child else {
                    return Err(mismatch("repeated", child));
                };
                for item in items {
                    write(node, item, out)?;
                }
                child.end_entries()?;
            }
            (Shape::Map { key, value }, Value::Map(entries)) => {
                let Column::Map { keys, values, .. } = child else {
                    return Err(mismatch("map", child));
                };
                // Sorted, so equal messages make equal rows (the decoder's map is a HashMap).
                let sorted: BTreeMap<&MapKey, &Value> = entries.iter().collect();
                for (k, v) in sorted {
                    write_scalar(key, &map_key_value(k), keys)?;
                    write(value, v, values)?;
                }
                child.end_entries()?;
            }
            (_, other) => {
                return Err(format!("field {}: unexpected value {other:?}", f.descriptor.name()))
            }
        }
    }
    valid.push(true);
    Ok(())
}

fn map_key_value(key: &MapKey) -> Value {
    match key {
        MapKey::Bool(b) => Value::Bool(*b),
        MapKey::I32(n) => Value::I32(*n),
        MapKey::I64(n) => Value::I64(*n),
        MapKey::U32(n) => Value::U32(*n),
        MapKey::U64(n) => Value::U64(*n),
        MapKey::String(s) => Value::String(s.clone()),
    }
}

fn write(node: &Node, value: &Value, column: &mut Column) -> Result<(), String> {
    match (node, value) {
        (Node::Scalar(s), v) => write_scalar(s, v, column),
        (Node::Message(plan), Value::Message(m)) => write_message(plan, m, column),
        (Node::Timestamp, Value::Message(m)) => {
            let Column::Timestamp(c) = column else { return Err(mismatch("timestamp", column)) };
            let seconds = m.get_field_by_number(1).and_then(|v| v.as_i64()).unwrap_or(0);
            let nanos = m.get_field_by_number(2).and_then(|v| v.as_i32()).unwrap_or(0);
            let micros = seconds
                .checked_mul(1_000_000)
                .and_then(|s| s.checked_add(i64::from(nanos).div_euclid(1000)));
            c.push(micros.ok_or_else(|| format!("timestamp of {seconds} seconds out of range"))?);
            Ok(())
        }
        (Node::Wrapper(s), Value::Message(m)) => match m.get_field_by_number(1) {
            Some(v) => write_scalar(s, &v, column),
            None => Err("wrapper without its value field".to_string()),
        },
        (Node::JsonText, Value::Message(m)) => {
            let Column::Utf8(c) = column else { return Err(mismatch("json text", column)) };
            c.push(json_of_message(m).to_string().as_bytes())
        }
        (node, value) => Err(format!("unexpected value {value:?} for {node:?}")),
    }
}

fn write_scalar(scalar: &Scalar, value: &Value, column: &mut Column) -> Result<(), String> {
    match (scalar, value, column) {
        (Scalar::Bool, Value::Bool(b), Column::Boolean { values, valid }) => {
            values.push(*b);
            valid.push(true);
        }
        (Scalar::Int32, Value::I32(n), Column::Int32(c)) => c.push(*n),
        (Scalar::Int64, Value::I64(n), Column::Int64(c)) => c.push(*n),
        (Scalar::Int64, Value::U32(n), Column::Int64(c)) => c.push(i64::from(*n)),
        (Scalar::UInt64, Value::U64(n), Column::Decimal(c)) => c.push(i128::from(*n)),
        (Scalar::Float, Value::F32(x), Column::Float32(c)) => c.push(*x),
        (Scalar::Double, Value::F64(x), Column::Float64(c)) => c.push(*x),
        (Scalar::String, Value::String(s), Column::Utf8(c)) => c.push(s.as_bytes())?,
        (Scalar::Bytes, Value::Bytes(b), Column::Binary(c)) => c.push(b)?,
        (Scalar::Enum(e), Value::EnumNumber(n), Column::Utf8(c)) => match e.get_value(*n) {
            Some(v) => c.push(v.name().as_bytes())?,
            None => c.push(n.to_string().as_bytes())?,
        },
        (scalar, value, column) => {
            return Err(format!("{value:?} for {scalar:?}: {}", mismatch("scalar", column)))
        }
    }
    Ok(())
}

/// `google.protobuf.Struct`, `Value` or `ListValue` as the JSON it stands for.
fn json_of_message(message: &DynamicMessage) -> serde_json::Value {
    match message.descriptor().full_name() {
        "google.protobuf.Struct" => match message.get_field_by_number(1).as_deref() {
            Some(Value::Map(fields)) => {
                let sorted: BTreeMap<String, serde_json::Value> = fields
                    .iter()
                    .filter_map(|(k, v)| match (k, v) {
                        (MapKey::String(k), Value::Message(m)) => {
                            Some((k.clone(), json_of_message(m)))
                        }
                        _ => None,
                    })
                    .collect();
                serde_json::Value::Object(sorted.into_iter().collect())
            }
            _ => serde_json::Value::Object(serde_json::Map::new()),
        },
        "google.protobuf.ListValue" => match message.get_field_by_number(1).as_deref() {
            Some(Value::List(items)) => serde_json::Value::Array(
                items
                    .iter()
                    .filter_map(|v| {
                        if let Value::Message(m) = v {
                            Some(json_of_message(m))
                        } else {
                            None
                        }
                    })
                    .collect(),
            ),
            _ => serde_json::Value::Array(Vec::new()),
        },
        // google.protobuf.Value: whichever of its oneof is set.
        _ => {
            let set = message.fields().next();
            match set {
                Some((f, Value::F64(x))) if f.number() == 2 => serde_json::Number::from_f64(*x)
                    .map_or(serde_json::Value::Null, serde_json::Value::Number),
                Some((_, Value::String(s))) => serde_json::Value::String(s.clone()),
                Some((_, Value::Bool(b))) => serde_json::Value::Bool(*b),
                Some((_, Value::Message(m))) => json_of_message(m),
                _ => serde_json::Value::Null,
            }
        }
    }
}

#[cfg(test)]
#[path = "protobuf_tests.rs"]
mod tests;
