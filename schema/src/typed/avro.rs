//! Avro values to Arrow: the registered schema compiled once into a [`Node`] tree
//! (its Arrow type and how to read its binary encoding), then each payload read
//! straight from its bytes into the columns, without `apache_avro::Value`s.
//!
//! Reading the binary encoding directly keeps the hot path free of per-value
//! allocations and bounds every length by the bytes actually present (a garbage
//! length never allocates). `apache-avro` only parses the schema.
//!
//! A payload must be consumed exactly: trailing bytes reject the record (they mean
//! it was written with another schema than its id says).

use std::collections::HashMap;

use apache_avro::schema::{Name, ResolvedSchema, Schema};
use arrow_schema::{DataType, Fields};

use super::arrow_types::{self, field, list_of, string_map_of, MAX_DECIMAL_PRECISION};
use super::columns::{mismatch, Column};
use super::error::MAX_DEPTH;
use super::error::{child_path, DecodeError};
use super::wire::read_zigzag;

/// How to read one Avro value, and into which column shape.
#[derive(Debug)]
enum Node {
    /// `null`, or a record without fields: no bytes, no column.
    Nothing,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Fixed(usize),
    Enum(Vec<String>),
    Array(Box<Node>),
    Map(Box<Node>),
    /// Fields in order; `None` for a field that has no column (see [`Node::Nothing`]).
    Record(Vec<(Node, Option<usize>)>),
    /// `[null, T]` or `[T, null]`: T's column, null for the null branch.
    Nullable {
        null_branch: i64,
        inner: Box<Node>,
    },
    /// Any other union: a struct with one nullable child per non-null branch.
    Union(Vec<Option<Node>>),
    Decimal {
        fixed: Option<usize>,
        bound: i128,
    },
    Date,
    TimeMillis,
    TimeMicros,
    TimestampMillis,
    TimestampMicros,
    TimestampNanos,
    Duration,
}

/// The compiled schema of one Avro subject version.
#[derive(Debug)]
pub(crate) struct AvroDecoder {
    /// The schema is not a record: `root` reads it as the one field `value`.
    wraps_value: bool,
    root: Node,
    fields: Fields,
}

impl AvroDecoder {
    /// Parses `text` with the referenced schemas' texts and compiles it.
    ///
    /// # Errors
    /// A schema that does not parse, or has no Iceberg-compatible type (see the
    /// parent module's table).
    pub(crate) fn new(id: i32, text: &str, references: &[String]) -> Result<Self, DecodeError> {
        let invalid = |reason: String| DecodeError::InvalidSchema { id, reason };
        let text = fixed_uuid_as_fixed(text).map_err(invalid)?;
        let references = references
            .iter()
            .map(|r| fixed_uuid_as_fixed(r))
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid)?;
        let (schema, dependencies) = if references.is_empty() {
            (Schema::parse_str(&text).map_err(|e| invalid(e.to_string()))?, Vec::new())
        } else {
            Schema::parse_str_with_list(&text, &references).map_err(|e| invalid(e.to_string()))?
        };
        // Dependencies first: resolving a schema needs the named types it refers to.
        let mut all: Vec<&Schema> = dependencies.iter().collect();
        all.push(&schema);
        let resolved = ResolvedSchema::try_from(all).map_err(|e| invalid(e.to_string()))?;
        let mut compiler = Compiler { names: resolved.get_names(), records_open: Vec::new() };
        let top = compiler.resolve(&schema, "")?;
        let wraps_value = !matches!(top, Schema::Record(_));
        let (root, fields) = match top {
            Schema::Record(_) => {
                let (root, data_type) = compiler.compile(top, "", 0)?;
                match data_type {
                    Some(DataType::Struct(fields)) => (root, fields),
                    _ => (root, Fields::empty()),
                }
            }
            // Not a record: one column, `value`.
            other => {
                let (node, data_type) = compiler.compile(other, "value", 1)?;
                let data_type = data_type.ok_or_else(|| {
                    DecodeError::unsupported("value", "a null schema has no column")
                })?;
                (Node::Record(vec![(node, Some(0))]), Fields::from(vec![field("value", data_type)]))
            }
        };
        Ok(Self { wraps_value, root, fields })
    }

    /// Whether the schema is not a record (its one column `value` is the whole value).
    pub(crate) fn wraps_value(&self) -> bool {
        self.wraps_value
    }

    /// The top-level columns.
    pub(crate) fn fields(&self) -> &Fields {
        &self.fields
    }

    /// Reads one payload into `row` (the top-level struct column).
    ///
    /// # Errors
    /// Why the bytes are not a value of the schema; `row` may then hold part of it
    /// (the caller truncates).
    pub(crate) fn decode_row(&self, payload: &[u8], row: &mut Column) -> Result<(), String> {
        let mut bytes = payload;
        read(&self.root, &mut bytes, row)?;
        if !bytes.is_empty() {
            return Err(format!(
                "{} bytes left after the value: written with another schema?",
                bytes.len()
            ));
        }
        Ok(())
    }
}

/// apache-avro reads `{"type":"fixed","size":16,"logicalType":"uuid"}` as a
/// length-prefixed uuid, which is not its encoding: such a schema is read here as
/// the plain `fixed` it is on the wire.
fn fixed_uuid_as_fixed(text: &str) -> Result<String, String> {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                if map.get("type").and_then(|t| t.as_str()) == Some("fixed")
                    && map.get("logicalType").and_then(|t| t.as_str()) == Some("uuid")
                {
                    map.remove("logicalType");
                }
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    if !text.contains("uuid") {
        return Ok(text.to_string());
    }
    let mut value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    strip(&mut value);
    Ok(value.to_string())
}

struct Compiler<'s> {
    names: &'s HashMap<Name, &'s Schema>,
    /// Full names of the records being compiled, outermost first: meeting one again is recursion.
    records_open: Vec<String>,
}

impl<'s> Compiler<'s> {
    fn resolve(&self, schema: &'s Schema, path: &str) -> Result<&'s Schema, DecodeError> {
        match schema {
            Schema::Ref { name } => self.names.get(name).copied().ok_or_else(|| {
                DecodeError::unsupported(path, format!("unknown type {}", name.fullname(None)))
            }),
            other => Ok(other),
        }
    }

    /// The node and Arrow type (`None`: no column) of `schema` at `path`.
    fn compile(
        &mut self,
        schema: &'s Schema,
        path: &str,
        depth: usize,
    ) -> Result<(Node, Option<DataType>), DecodeError> {
        if depth > MAX_DEPTH {
            return Err(DecodeError::TooDeep { path: path.to_string() });
        }
        let schema = self.resolve(schema, path)?;
        let typed = |node: Node, data_type: DataType| Ok((node, Some(data_type)));
        match schema {
            Schema::Null => Ok((Node::Nothing, None)),
            Schema::Boolean => typed(Node::Boolean, DataType::Boolean),
            Schema::Int => typed(Node::Int, DataType::Int32),
            Schema::Long => typed(Node::Long, DataType::Int64),
            Schema::Float => typed(Node::Float, DataType::Float32),
            Schema::Double => typed(Node::Double, DataType::Float64),
            Schema::Bytes => typed(Node::Bytes, DataType::LargeBinary),
            Schema::String | Schema::Uuid => typed(Node::String, DataType::Utf8),
            Schema::Fixed(f) => {
                let width = i32::try_from(f.size)
                    .map_err(|_| DecodeError::unsupported(path, "fixed size beyond i32"))?;
                typed(Node::Fixed(f.size), DataType::FixedSizeBinary(width))
            }
            Schema::Enum(e) => typed(Node::Enum(e.symbols.clone()), DataType::Utf8),
            Schema::Array(a) => {
                let (items, item_type) =
                    self.compile(&a.items, &child_path(path, "element"), depth + 1)?;
                let item_type = item_type.ok_or_else(|| {
                    DecodeError::unsupported(
                        path,
                        "an array of nulls or empty records has no Iceberg type",
                    )
                })?;
                typed(Node::Array(Box::new(items)), list_of(item_type))
            }
            Schema::Map(m) => {
                let (values, value_type) =
                    self.compile(&m.types, &child_path(path, "value"), depth + 1)?;
                let value_type = value_type.ok_or_else(|| {
                    DecodeError::unsupported(
                        path,
                        "a map of nulls or empty records has no Iceberg type",
                    )
                })?;
                typed(Node::Map(Box::new(values)), string_map_of(value_type))
            }
            Schema::Record(r) => {
                let full_name = r.name.fullname(None);
                if self.records_open.contains(&full_name) {
                    return Err(DecodeError::unsupported(path, format!("record {full_name} contains itself: a recursive type has no Iceberg type")));
                }
                self.records_open.push(full_name);
                let mut nodes = Vec::with_capacity(r.fields.len());
                let mut fields = Vec::with_capacity(r.fields.len());
                for f in &r.fields {
                    let (node, data_type) =
                        self.compile(&f.schema, &child_path(path, &f.name), depth + 1)?;
                    let column = data_type.map(|t| {
                        fields.push(field(&f.name, t));
                        fields.len() - 1
                    });
                    nodes.push((node, column));
                }
                self.records_open.pop();
                if fields.is_empty() {
                    return Ok((Node::Nothing, None));
                }
                typed(Node::Record(nodes), DataType::Struct(Fields::from(fields)))
            }
            Schema::Union(u) => self.compile_union(u.variants(), path, depth),
            Schema::Decimal(d) => {
                let precision = u8::try_from(d.precision)
                    .ok()
                    .filter(|p| (1..=MAX_DECIMAL_PRECISION).contains(p));
                let precision = precision.ok_or_else(|| {
                    DecodeError::unsupported(
                        path,
                        format!(
                            "decimal precision {} outside 1..={MAX_DECIMAL_PRECISION}",
                            d.precision
                        ),
                    )
                })?;
                let scale = i8::try_from(d.scale).ok().filter(|s| *s as u8 <= precision);
                let scale = scale.ok_or_else(|| {
                    DecodeError::unsupported(
                        path,
                        format!("decimal scale {} above its precision", d.scale),
                    )
                })?;
                let fixed = match self.resolve(&d.inner, path)? {
                    Schema::Fixed(f) => Some(f.size),
                    _ => None,
                };
                typed(
                    Node::Decimal { fixed, bound: arrow_types::decimal_bound(precision) },
                    DataType::Decimal128(precision, scale),
                )
            }
            Schema::BigDecimal => Err(DecodeError::unsupported(
                path,
                "big-decimal has no fixed precision, so no Iceberg decimal type",
            )),
            Schema::Date => typed(Node::Date, DataType::Date32),
            Schema::TimeMillis => typed(Node::TimeMillis, arrow_types::time()),
            Schema::TimeMicros => typed(Node::TimeMicros, arrow_types::time()),
            Schema::TimestampMillis => typed(Node::TimestampMillis, arrow_types::timestamptz()),
            Schema::TimestampMicros => typed(Node::TimestampMicros, arrow_types::timestamptz()),
            Schema::TimestampNanos => typed(Node::TimestampNanos, arrow_types::timestamptz()),
            Schema::LocalTimestampMillis => {
                typed(Node::TimestampMillis, arrow_types::local_timestamp())
            }
            Schema::LocalTimestampMicros => {
                typed(Node::TimestampMicros, arrow_types::local_timestamp())
            }
            Schema::LocalTimestampNanos => {
                typed(Node::TimestampNanos, arrow_types::local_timestamp())
            }
            Schema::Duration => {
                let parts = ["months", "days", "milliseconds"].map(|n| field(n, DataType::Int64));
                typed(Node::Duration, DataType::Struct(Fields::from(parts.to_vec())))
            }
            Schema::Ref { name } => Err(DecodeError::unsupported(
                path,
                format!("unresolved reference to {}", name.fullname(None)),
            )),
        }
    }

    fn compile_union(
        &mut self,
        variants: &'s [Schema],
        path: &str,
        depth: usize,
    ) -> Result<(Node, Option<DataType>), DecodeError> {
        let null_branch = variants.iter().position(|v| matches!(v, Schema::Null));
        if let (Some(null_branch), 2) = (null_branch, variants.len()) {
            let (inner, data_type) = self.compile(&variants[1 - null_branch], path, depth + 1)?;
            if data_type.is_none() {
                return Err(DecodeError::unsupported(
                    path,
                    "a union of null and a type without columns has no Iceberg type",
                ));
            }
            return Ok((
                Node::Nullable { null_branch: null_branch as i64, inner: Box::new(inner) },
                data_type,
            ));
        }
        let mut branches = Vec::with_capacity(variants.len());
        let mut fields = Vec::with_capacity(variants.len());
        for variant in variants {
            if matches!(variant, Schema::Null) {
                branches.push(None);
                continue;
            }
            let resolved = self.resolve(variant, path)?;
            let mut name = branch_name(resolved);
            if fields.iter().any(|f: &arrow_schema::Field| f.name() == &name) {
                // Two named types of one simple name in different namespaces.
                name = full_branch_name(resolved)
                    .unwrap_or_else(|| format!("{name}_{}", fields.len()));
            }
            let (node, data_type) = self.compile(variant, &child_path(path, &name), depth + 1)?;
            let data_type = data_type.ok_or_else(|| {
                DecodeError::unsupported(path, format!("union branch {name} has no Iceberg type"))
            })?;
            fields.push(field(&name, data_type));
            branches.push(Some(node));
        }
        if fields.is_empty() {
            return Ok((Node::Nothing, None));
        }
        Ok((Node::Union(branches), Some(DataType::Struct(Fields::from(fields)))))
    }
}

/// A named type's full name with `_` for `.` (for branches whose simple names clash).
fn full_branch_name(schema: &Schema) -> Option<String> {
    let name = match schema {
        Schema::Record(r) => &r.name,
        Schema::Enum(e) => &e.name,
        Schema::Fixed(f) => &f.name,
        _ => return None,
    };
    Some(name.fullname(None).replace('.', "_"))
}

/// A union branch's struct field name: the type's name (a named type's simple name).
fn branch_name(schema: &Schema) -> String {
    match schema {
        Schema::Record(r) => r.name.name.clone(),
        Schema::Enum(e) => e.name.name.clone(),
        Schema::Fixed(f) => f.name.name.clone(),
        Schema::Ref { name } => name.name.clone(),
        other => {
            let json = serde_json::to_value(other).ok();
            let plain = json.as_ref().and_then(|j| j.as_str().map(str::to_string));
            let logical = json
                .as_ref()
                .and_then(|j| j.get("logicalType"))
                .and_then(|t| t.as_str())
                .map(str::to_string);
            let container = json
                .as_ref()
                .and_then(|j| j.get("type"))
                .and_then(|t| t.as_str())
                .map(str::to_string);
            plain.or(logical).or(container).unwrap_or_else(|| "branch".to_string())
        }
    }
}

// ---- reading the binary encoding ---------------------------------------------

fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
    if bytes.len() < n {
        return Err(format!("truncated: {n} bytes wanted, {} left", bytes.len()));
    }
    let (head, rest) = bytes.split_at(n);
    *bytes = rest;
    Ok(head)
}

fn read_int(bytes: &mut &[u8]) -> Result<i32, String> {
    let n = read_zigzag(bytes)?;
    i32::try_from(n).map_err(|_| format!("int {n} out of range"))
}

fn read_len(bytes: &mut &[u8]) -> Result<usize, String> {
    let n = read_zigzag(bytes)?;
    let len = usize::try_from(n).map_err(|_| format!("negative length {n}"))?;
    if len > bytes.len() {
        return Err(format!("truncated: a length of {len} with {} bytes left", bytes.len()));
    }
    Ok(len)
}

fn read_bytes<'a>(bytes: &mut &'a [u8]) -> Result<&'a [u8], String> {
    let len = read_len(bytes)?;
    take(bytes, len)
}

fn read_str<'a>(bytes: &mut &'a [u8]) -> Result<&'a [u8], String> {
    let value = read_bytes(bytes)?;
    std::str::from_utf8(value).map_err(|e| format!("string is not UTF-8: {e}"))?;
    Ok(value)
}

fn fixed_array<const N: usize>(bytes: &mut &[u8]) -> Result<[u8; N], String> {
    let mut out = [0u8; N];
    out.copy_from_slice(take(bytes, N)?);
    Ok(out)
}

/// Calls `item` for each item of an array or map, block by block; the number of items.
fn read_blocks(
    bytes: &mut &[u8],
    mut item: impl FnMut(&mut &[u8]) -> Result<(), String>,
) -> Result<(), String> {
    loop {
        let count = read_zigzag(bytes)?;
        if count == 0 {
            return Ok(());
        }
        if count < 0 {
            // A negative count is followed by the block's size in bytes (for skipping).
            read_zigzag(bytes)?;
        }
        let count = count.unsigned_abs();
        // Every item takes at least one byte, except in schemas nobody writes
        // (arrays of empty records are refused when compiling).
        if count > bytes.len() as u64 {
            return Err(format!(
                "truncated: a block of {count} items with {} bytes left",
                bytes.len()
            ));
        }
        for _ in 0..count {
            item(bytes)?;
        }
    }
}

fn decimal(raw: &[u8], bound: i128) -> Result<i128, String> {
    let negative = raw.first().is_some_and(|b| b & 0x80 != 0);
    let sign_byte = if negative { 0xff } else { 0 };
    let significant = raw.len().saturating_sub(16);
    if raw[..significant].iter().any(|b| *b != sign_byte) {
        return Err("decimal beyond 128 bits".to_string());
    }
    let mut buf = [sign_byte; 16];
    let tail = &raw[significant..];
    buf[16 - tail.len()..].copy_from_slice(tail);
    let value = i128::from_be_bytes(buf);
    // The 16 bytes kept must still carry the sign the dropped ones extended.
    if (value < 0) != negative {
        return Err("decimal beyond 128 bits".to_string());
    }
    if value >= bound || value <= -bound {
        return Err(format!("decimal {value} (unscaled) has more digits than its precision"));
    }
    Ok(value)
}

fn scaled(value: i64, factor: i64, what: &str) -> Result<i64, String> {
    value.checked_mul(factor).ok_or_else(|| format!("{what} {value} out of range in microseconds"))
}

/// Reads one value of `node` into `column`.
fn read(node: &Node, bytes: &mut &[u8], column: &mut Column) -> Result<(), String> {
    match (node, column) {
        (Node::Boolean, Column::Boolean { values, valid }) => {
            let value = match take(bytes, 1)?[0] {
                0 => false,
                1 => true,
                other => return Err(format!("boolean byte {other}")),
            };
            values.push(value);
            valid.push(true);
        }
        (Node::Int, Column::Int32(c)) => c.push(read_int(bytes)?),
        (Node::Long, Column::Int64(c)) => c.push(read_zigzag(bytes)?),
        (Node::Float, Column::Float32(c)) => c.push(f32::from_le_bytes(fixed_array(bytes)?)),
        (Node::Double, Column::Float64(c)) => c.push(f64::from_le_bytes(fixed_array(bytes)?)),
        (Node::Bytes, Column::Binary(c)) => c.push(read_bytes(bytes)?)?,
        (Node::String, Column::Utf8(c)) => c.push(read_str(bytes)?)?,
        (Node::Fixed(n), Column::Fixed { bytes: out, valid, .. }) => {
            out.extend_from_slice(take(bytes, *n)?);
            valid.push(true);
        }
        (Node::Enum(symbols), Column::Utf8(c)) => {
            let index = read_int(bytes)?;
            let symbol = usize::try_from(index)
                .ok()
                .and_then(|i| symbols.get(i))
                .ok_or_else(|| format!("enum index {index} out of range"))?;
            c.push(symbol.as_bytes())?;
        }
        (Node::Array(item), column @ Column::List { .. }) => {
            let Column::List { items, .. } = column else { unreachable!("matched above") };
            read_blocks(bytes, |b| read(item, b, items))?;
            column.end_entries()?;
        }
        (Node::Map(value), column @ Column::Map { .. }) => {
            let Column::Map { keys, values, .. } = column else { unreachable!("matched above") };
            let Column::Utf8(keys) = keys.as_mut() else { return Err(mismatch("map key", keys)) };
            read_blocks(bytes, |b| {
                keys.push(read_str(b)?)?;
                read(value, b, values)
            })?;
            column.end_entries()?;
        }
        (Node::Record(fields), Column::Struct { valid, children, .. }) => {
            for (node, index) in fields {
                match index.and_then(|i| children.get_mut(i)) {
                    Some(child) => read(node, bytes, child)?,
                    None => read_nothing(node)?,
                }
            }
            valid.push(true);
        }
        (Node::Nullable { null_branch, inner }, column) => {
            let branch = read_zigzag(bytes)?;
            match branch {
                b if b == *null_branch => column.push_null(),
                0 | 1 => read(inner, bytes, column)?,
                other => return Err(format!("union branch {other} out of range")),
            }
        }
        (Node::Union(branches), column @ Column::Struct { .. }) => {
            let branch = read_zigzag(bytes)?;
            let chosen = usize::try_from(branch)
                .ok()
                .and_then(|b| branches.get(b))
                .ok_or_else(|| format!("union branch {branch} out of range"))?;
            let Some(chosen) = chosen else {
                column.push_null();
                return Ok(());
            };
            let Column::Struct { valid, children, .. } = column else {
                unreachable!("matched above")
            };
            let mut child = children.iter_mut();
            for node in branches.iter().flatten() {
                let Some(c) = child.next() else {
                    return Err("internal: union without its column".to_string());
                };
                if std::ptr::eq(node, chosen) {
                    read(node, bytes, c)?;
                } else {
                    c.push_null();
                }
            }
            valid.push(true);
        }
        (Node::Decimal { fixed, bound }, Column::Decimal(c)) => {
            let raw = match fixed {
                Some(n) => take(bytes, *n)?,
                None => read_bytes(bytes)?,
            };
            c.push(decimal(raw, *bound)?);
        }
        (Node::Date, Column::Date(c)) => c.push(read_int(bytes)?),
        (Node::TimeMillis, Column::Time(c)) => c.push(i64::from(read_int(bytes)?) * 1000),
        (Node::TimeMicros, Column::Time(c)) => c.push(read_zigzag(bytes)?),
        (Node::TimestampMillis, Column::Timestamp(c)) => {
            c.push(scaled(read_zigzag(bytes)?, 1000, "timestamp-millis")?)
        }
        (Node::TimestampMicros, Column::Timestamp(c)) => c.push(read_zigzag(bytes)?),
        (Node::TimestampNanos, Column::Timestamp(c)) => {
            c.push(read_zigzag(bytes)?.div_euclid(1000))
        }
        (Node::Duration, Column::Struct { valid, children, .. }) => {
            let raw: [u8; 12] = fixed_array(bytes)?;
            for (i, child) in children.iter_mut().enumerate() {
                let Column::Int64(c) = child else { return Err(mismatch("duration part", child)) };
                let part: [u8; 4] =
                    raw[i * 4..i * 4 + 4].try_into().map_err(|_| "duration".to_string())?;
                c.push(i64::from(u32::from_le_bytes(part)));
            }
            valid.push(true);
        }
        (node, column) => return Err(mismatch(&format!("{node:?}"), column)),
    }
    Ok(())
}

/// A field without a column: only null and empty records have none, and neither has bytes.
fn read_nothing(node: &Node) -> Result<(), String> {
    match node {
        Node::Nothing => Ok(()),
        other => Err(format!("internal: {other:?} has no column")),
    }
}

#[cfg(test)]
#[path = "avro_tests.rs"]
mod tests;
