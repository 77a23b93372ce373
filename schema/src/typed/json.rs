//! JSON Schema values to Arrow: the registered schema mapped once to a [`Node`]
//! tree, then each payload parsed by `serde_json` and walked into the columns.
//!
//! - Only what the schema types becomes a typed column: an object's declared
//!   `properties` (in name order, as `serde_json` keeps them); properties a value
//!   has beyond those are not kept. A missing property is null.
//! - Anything the schema leaves untyped (no `type`, several non-null types,
//!   `oneOf`/`anyOf`/`allOf`, objects without `properties` such as
//!   `additionalProperties` maps, a recursive `$ref`) is one Utf8 column holding
//!   the value's JSON text.
//! - `$ref`s: JSON pointers inside the same document (`#/definitions/X`,
//!   `#/$defs/X`), and the schema's references by name (`other.json`, optionally
//!   with a `#/pointer`).
//! - `integer` values must be whole numbers within i64 (1.0 counts as 1);
//!   `format: date-time` values RFC 3339 timestamps (written in UTC), `format:
//!   date` values `YYYY-MM-DD`: other values reject the record.

use std::collections::HashMap;

use arrow_schema::{DataType, Fields};
use serde_json::Value;

use super::arrow_types::{self, field, list_of};
use super::columns::{mismatch, Column};
use super::error::MAX_DEPTH;
use super::error::{child_path, DecodeError};
use crate::json_schema::kind_of;
use crate::records::SchemaReference;

#[derive(Debug)]
enum Node {
    /// Declared properties, by name, in column order.
    Object(Vec<(String, Node)>),
    Array(Box<Node>),
    Integer,
    Number,
    Boolean,
    String,
    DateTime,
    Date,
    /// The value's JSON text.
    Text,
}

/// The compiled schema of one JSON Schema subject version.
#[derive(Debug)]
pub(crate) struct JsonDecoder {
    root: Node,
    fields: Fields,
    /// The schema is not an object: `root` is an object of one `value` property.
    wrapped: bool,
}

impl JsonDecoder {
    /// Parses `text` and its references, and maps it.
    ///
    /// # Errors
    /// A schema that is not JSON.
    pub(crate) fn new(
        id: i32,
        text: &str,
        references: &[(SchemaReference, String)],
    ) -> Result<Self, DecodeError> {
        let parse = |t: &str| {
            serde_json::from_str::<Value>(t)
                .map_err(|e| DecodeError::InvalidSchema { id, reason: e.to_string() })
        };
        let root_doc = parse(text)?;
        let mut documents = HashMap::new();
        for (reference, text) in references {
            documents.insert(reference.name.clone(), parse(text)?);
        }
        // The schema itself is `#`: a `$ref` to it is recursion from the start.
        let mut mapper = Mapper { documents: &documents, refs_open: vec!["#".to_string()] };
        let (root, data_type) = mapper.map(&root_doc, &root_doc, "", 0)?;
        Ok(match (root, data_type) {
            (root @ Node::Object(_), DataType::Struct(fields)) => {
                Self { root, fields, wrapped: false }
            }
            (node, data_type) => Self {
                root: Node::Object(vec![("value".to_string(), node)]),
                fields: Fields::from(vec![field("value", data_type)]),
                wrapped: true,
            },
        })
    }

    /// Whether the schema is not an object (its one column `value` is the whole value).
    pub(crate) fn wraps_value(&self) -> bool {
        self.wrapped
    }

    /// The top-level columns.
    pub(crate) fn fields(&self) -> &Fields {
        &self.fields
    }

    /// Parses one payload into `row`.
    ///
    /// # Errors
    /// Not JSON, or a value of another type than the schema's; `row` may then hold
    /// part of it (the caller truncates).
    pub(crate) fn decode_row(&self, payload: &[u8], row: &mut Column) -> Result<(), String> {
        let value: Value = serde_json::from_slice(payload).map_err(|e| format!("not JSON: {e}"))?;
        if self.wrapped {
            write_wrapped(&self.root, &value, row)
        } else {
            write(&self.root, &value, row)
        }
    }
}

struct Mapper<'d> {
    documents: &'d HashMap<String, Value>,
    /// The `$ref`s being followed: meeting one again is recursion.
    refs_open: Vec<String>,
}

impl<'d> Mapper<'d> {
    fn map(
        &mut self,
        schema: &'d Value,
        document: &'d Value,
        path: &str,
        depth: usize,
    ) -> Result<(Node, DataType), DecodeError> {
        if depth > MAX_DEPTH {
            return Err(DecodeError::TooDeep { path: path.to_string() });
        }
        let text = (Node::Text, DataType::Utf8);
        let Value::Object(schema) = schema else { return Ok(text) };
        if let Some(Value::String(reference)) = schema.get("$ref") {
            let Some((target, target_doc)) = self.resolve(reference, document) else {
                return Err(DecodeError::unsupported(
                    path,
                    format!("$ref {reference} names nothing"),
                ));
            };
            if self.refs_open.contains(reference) {
                return Ok(text); // recursive: kept as JSON text
            }
            self.refs_open.push(reference.clone());
            let mapped = self.map(target, target_doc, path, depth + 1);
            self.refs_open.pop();
            return mapped;
        }
        if ["oneOf", "anyOf", "allOf", "not", "if"].iter().any(|k| schema.contains_key(*k)) {
            return Ok(text);
        }
        let types: Vec<&str> = match schema.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => {
                ts.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect()
            }
            _ if schema.contains_key("properties") => vec!["object"],
            _ => Vec::new(),
        };
        let [kind] = types[..] else { return Ok(text) };
        Ok(match kind {
            "object" => {
                let Some(Value::Object(properties)) = schema.get("properties") else {
                    return Ok(text);
                };
                let mut nodes = Vec::with_capacity(properties.len());
                let mut fields = Vec::with_capacity(properties.len());
                // By name, whatever order serde_json keeps (its `preserve_order`
                // feature may be on in one build and off in another).
                let mut properties: Vec<(&String, &'d Value)> = properties.iter().collect();
                properties.sort_unstable_by(|a, b| a.0.cmp(b.0));
                for (name, property) in properties {
                    let (node, data_type) =
                        self.map(property, document, &child_path(path, name), depth + 1)?;
                    nodes.push((name.clone(), node));
                    fields.push(field(name, data_type));
                }
                if fields.is_empty() {
                    return Ok(text);
                }
                (Node::Object(nodes), DataType::Struct(Fields::from(fields)))
            }
            "array" => match schema.get("items") {
                Some(items @ Value::Object(_)) => {
                    let (node, data_type) =
                        self.map(items, document, &child_path(path, "element"), depth + 1)?;
                    (Node::Array(Box::new(node)), list_of(data_type))
                }
                _ => (Node::Array(Box::new(Node::Text)), list_of(DataType::Utf8)),
            },
            "integer" => (Node::Integer, DataType::Int64),
            "number" => (Node::Number, DataType::Float64),
            "boolean" => (Node::Boolean, DataType::Boolean),
            "string" => match schema.get("format").and_then(Value::as_str) {
                Some("date-time") => (Node::DateTime, arrow_types::timestamptz()),
                Some("date") => (Node::Date, DataType::Date32),
                _ => (Node::String, DataType::Utf8),
            },
            _ => text,
        })
    }

    /// The schema a `$ref` names, and the document it is in.
    fn resolve(&self, reference: &str, document: &'d Value) -> Option<(&'d Value, &'d Value)> {
        let (doc_name, pointer) = reference.split_once('#').unwrap_or((reference, ""));
        let doc = if doc_name.is_empty() { document } else { self.documents.get(doc_name)? };
        Some((doc.pointer(pointer)?, doc))
    }
}

// ---- writing values --------------------------------------------------------------

/// A schema that is not an object: its one `value` column in a valid row.
fn write_wrapped(root: &Node, value: &Value, row: &mut Column) -> Result<(), String> {
    let Node::Object(props) = root else {
        return Err("internal: the top level is not an object".to_string());
    };
    let Column::Struct { valid, children, .. } = row else { return Err(mismatch("row", row)) };
    match (props.first(), children.first_mut()) {
        (Some((_, node)), Some(child)) => write(node, value, child)?,
        _ => return Err("internal: no value column".to_string()),
    }
    valid.push(true);
    Ok(())
}

fn write(node: &Node, value: &Value, column: &mut Column) -> Result<(), String> {
    if value.is_null() {
        column.push_null();
        return Ok(());
    }
    match (node, column) {
        (Node::Object(props), Column::Struct { valid, children, .. }) => {
            let Value::Object(object) = value else {
                return Err(format!("{} where an object belongs", kind_of(value)));
            };
            for ((name, node), child) in props.iter().zip(children.iter_mut()) {
                match object.get(name) {
                    Some(v) => write(node, v, child).map_err(|e| format!("{name}: {e}"))?,
                    None => child.push_null(),
                }
            }
            valid.push(true);
        }
        (Node::Array(item), column @ Column::List { .. }) => {
            let Value::Array(items) = value else {
                return Err(format!("{} where an array belongs", kind_of(value)));
            };
            let Column::List { items: out, .. } = column else { unreachable!("matched above") };
            for v in items {
                write(item, v, out)?;
            }
            column.end_entries()?;
        }
        (Node::Integer, Column::Int64(c)) => {
            let n = value.as_i64().or_else(|| {
                value.as_f64().filter(|x| x.fract() == 0.0 && x.abs() < 9.2e18).map(|x| x as i64)
            });
            c.push(n.ok_or_else(|| format!("{value} is not an integer within 64 bits"))?);
        }
        (Node::Number, Column::Float64(c)) => c.push(
            value.as_f64().ok_or_else(|| format!("{} where a number belongs", kind_of(value)))?,
        ),
        (Node::Boolean, Column::Boolean { values, valid }) => {
            values.push(
                value
                    .as_bool()
                    .ok_or_else(|| format!("{} where a boolean belongs", kind_of(value)))?,
            );
            valid.push(true);
        }
        (Node::String, Column::Utf8(c)) => c.push(string(value)?.as_bytes())?,
        (Node::DateTime, Column::Timestamp(c)) => c.push(parse_date_time(string(value)?)?),
        (Node::Date, Column::Date(c)) => c.push(parse_date(string(value)?)?),
        (Node::Text, Column::Utf8(c)) => c.push(value.to_string().as_bytes())?,
        (node, column) => return Err(mismatch(&format!("{node:?}"), column)),
    }
    Ok(())
}

fn string(value: &Value) -> Result<&str, String> {
    value.as_str().ok_or_else(|| format!("{} where a string belongs", kind_of(value)))
}

// ---- dates and times (RFC 3339) --------------------------------------------------

/// Days from 1970-01-01 to a civil date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn digits(text: &str, range: std::ops::Range<usize>) -> Option<u32> {
    let part = text.get(range)?;
    part.bytes().all(|b| b.is_ascii_digit()).then(|| part.parse().ok()).flatten()
}

/// `YYYY-MM-DD` to days since the epoch.
fn date_days(text: &str) -> Option<i64> {
    if text.len() < 10 || text.as_bytes()[4] != b'-' || text.as_bytes()[7] != b'-' {
        return None;
    }
    let (year, month, day) = (digits(text, 0..4)?, digits(text, 5..7)?, digits(text, 8..10)?);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => return None,
    };
    (1..=days_in_month).contains(&day).then(|| days_from_civil(i64::from(year), month, day))
}

fn parse_date(text: &str) -> Result<i32, String> {
    let days = date_days(text)
        .filter(|_| text.len() == 10)
        .ok_or_else(|| format!("{text:?} is not a YYYY-MM-DD date"))?;
    i32::try_from(days).map_err(|_| format!("{text:?} out of range"))
}

/// An RFC 3339 date-time (`2024-05-01T12:30:00.123456Z`, `...+02:00`) to
/// microseconds since the epoch, UTC. Digits beyond microseconds are dropped.
fn parse_date_time(text: &str) -> Result<i64, String> {
    let bad = || format!("{text:?} is not an RFC 3339 date-time");
    let days = date_days(text).ok_or_else(bad)?;
    let b = text.as_bytes();
    if b.len() < 20 || !matches!(b[10], b'T' | b't' | b' ') || b[13] != b':' || b[16] != b':' {
        return Err(bad());
    }
    let (hour, minute, second) = (
        digits(text, 11..13).ok_or_else(bad)?,
        digits(text, 14..16).ok_or_else(bad)?,
        digits(text, 17..19).ok_or_else(bad)?,
    );
    if hour > 23 || minute > 59 || second > 60 {
        return Err(bad());
    }
    let mut rest = &text[19..];
    let mut micros = 0i64;
    if let Some(fraction) = rest.strip_prefix('.') {
        let end = fraction.bytes().position(|c| !c.is_ascii_digit()).unwrap_or(fraction.len());
        if end == 0 {
            return Err(bad());
        }
        let mut scale = 100_000;
        for c in fraction[..end].bytes().take(6) {
            micros += i64::from(c - b'0') * scale;
            scale /= 10;
        }
        rest = &fraction[end..];
    }
    let offset_seconds = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6
            && matches!(rest.as_bytes()[0], b'+' | b'-')
            && rest.as_bytes()[3] == b':' =>
        {
            let (h, m) = (digits(rest, 1..3).ok_or_else(bad)?, digits(rest, 4..6).ok_or_else(bad)?);
            let seconds = i64::from(h * 3600 + m * 60);
            if rest.starts_with('-') {
                -seconds
            } else {
                seconds
            }
        }
        _ => return Err(bad()),
    };
    let seconds = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second) - offset_seconds;
    Ok(seconds * 1_000_000 + micros)
}

#[cfg(test)]
#[path = "json_tests.rs"]
mod tests;
