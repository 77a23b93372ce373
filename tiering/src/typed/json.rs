//! Schemaless JSON keys and values (`floe.iceberg.key.format=json`,
//! `floe.iceberg.value.format=json`): the table's columns inferred from the data
//! and widened as new fields appear.
//!
//! A value must be a JSON object: its fields become top-level columns, as a
//! registered schema's would (a field named like a Kafka column is written as
//! `value_<name>`). A key may be any JSON value: it is the one column `key` (an
//! object is a struct, a string a string column...). Each record's JSON is
//! typed on its own ([`infer`]), then checked against the table's columns
//! ([`fit`]) and against the records before it in the same pass ([`merge`]);
//! what is new is added to the table by [`super::evolve`] as for a new schema
//! version. Inference:
//!
//! | JSON | Iceberg column |
//! |---|---|
//! | `true` / `false` | boolean |
//! | an integer within i64 (no fraction, no exponent) | long |
//! | any other number (`1.5`, `1e3`, `10.0`, beyond i64) | double |
//! | string | string (no date or timestamp guessing) |
//! | object | struct of its fields (each optional) |
//! | array | list of its elements' merged type |
//! | `null`, `[]`, `{}` | nothing yet: no column until a value tells its type |
//!
//! Numbers: Iceberg can promote `int` → `long` and `float` → `double`, never
//! `long` → `double`. So a field becomes `double` when any value of it in the
//! pass that adds its column has a fraction (integers in the same pass are
//! written as doubles), else `long`; later integers in a `double` column are
//! written as doubles, but a later fraction in a `long` column sends that record
//! to the dead-letter table, saying so. Producers whose numbers are sometimes
//! whole (JavaScript writes `10.0` as `10`) should write them with a fraction
//! (`10.0`) from the start, or use a JSON Schema (`schema-registry`) that says `number`.
//!
//! A record goes to the dead-letter table (never dropped, never failing the
//! pass) when its value is not JSON or not an object, its key not JSON, a field
//! changes family (a string column meeting an object, a list meeting a number),
//! or a field name is empty or holds a `.` (Iceberg's column paths use it).

use std::sync::Arc;

use arrow_array::{
    new_null_array, ArrayRef, BooleanArray, Float64Array, Int64Array, ListArray, StringArray,
    StructArray,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{ArrowError, DataType, Field, Fields};
use floe_schema::json_schema::kind_of;
use serde_json::{Map, Value};

use super::evolve::column_name_in;

/// A value's bytes as a JSON object whose fields are renamed to their columns ([`super::evolve::column_name`]).
///
/// # Errors
/// Not JSON, not an object, or two fields written as one column.
pub fn value_object(bytes: &[u8]) -> Result<Value, String> {
    value_object_in(bytes, false)
}

/// [`value_object`] for a table that is `lossless` (shared) or not ([`column_name_in`]).
///
/// # Errors
/// As [`value_object`].
pub fn value_object_in(bytes: &[u8], lossless: bool) -> Result<Value, String> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("the value is not JSON: {e}"))?;
    let Value::Object(fields) = value else {
        return Err(format!("the value is JSON {}, not an object", kind_of(&value)));
    };
    let mut columns = Map::new();
    for (name, v) in fields {
        let column = column_name_in(&name, lossless);
        if columns.contains_key(&column) {
            return Err(format!(
                "the value's fields `{name}` and `{column}` would both be column `{column}`"
            ));
        }
        columns.insert(column, v);
    }
    Ok(Value::Object(columns))
}

/// A key's bytes as JSON (any JSON value).
///
/// # Errors
/// Not JSON.
pub fn key_value(bytes: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("the key is not JSON: {e}"))
}

/// What a column of `t` holds, in JSON's words.
fn kind(t: &DataType) -> String {
    match t {
        DataType::Boolean => "boolean".into(),
        DataType::Int32 | DataType::Int64 => "an integer (long)".into(),
        DataType::Float32 | DataType::Float64 => "a number (double)".into(),
        DataType::Utf8 | DataType::LargeUtf8 => "a string".into(),
        DataType::Struct(_) => "an object (struct)".into(),
        DataType::List(_) | DataType::LargeList(_) => "an array (list)".into(),
        other => format!("{other}"),
    }
}

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn list_of(t: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("element", t, true)))
}

/// The Arrow type of `v` on its own (see the module doc); `None` when it tells
/// none (`null`, an empty array or object, or only those inside).
///
/// # Errors
/// An array whose elements are of different families; a field name that is
/// empty or holds a `.`.
pub fn infer(path: &str, v: &Value) -> Result<Option<DataType>, String> {
    Ok(match v {
        Value::Null => None,
        Value::Bool(_) => Some(DataType::Boolean),
        Value::Number(n) if n.is_i64() => Some(DataType::Int64),
        Value::Number(_) => Some(DataType::Float64),
        Value::String(_) => Some(DataType::Utf8),
        Value::Array(items) => {
            let element = format!("{path}[]");
            let mut merged: Option<DataType> = None;
            for item in items {
                if let Some(t) = infer(&element, item)? {
                    merged = Some(match merged {
                        Some(m) => merge(&element, &m, &t)?,
                        None => t,
                    });
                }
            }
            merged.map(list_of)
        }
        Value::Object(fields) => {
            let mut out = Vec::with_capacity(fields.len());
            for (name, value) in fields {
                if name.is_empty() || name.contains('.') {
                    return Err(format!(
                        "`{}`: field name {name:?} cannot be a column (empty, or holds a `.`)",
                        child(path, name)
                    ));
                }
                if let Some(t) = infer(&child(path, name), value)? {
                    out.push(Field::new(name, t, true));
                }
            }
            (!out.is_empty()).then(|| DataType::Struct(Fields::from(out)))
        }
    })
}

/// `t` (a record's inferred type) as it is written into a column of type `table`:
/// an integer into a `double` column as a double, new struct fields as they are;
/// `int` and `float` columns widen (an Iceberg promotion, planned by [`super::evolve`]).
///
/// # Errors
/// A change of family, or a fraction in a `long` column (which Iceberg cannot promote).
pub fn fit(path: &str, table: &DataType, t: &DataType) -> Result<DataType, String> {
    match (table, t) {
        (a, b) if a == b => Ok(b.clone()),
        (DataType::Struct(columns), DataType::Struct(fields)) => {
            let fitted = fields
                .iter()
                .map(|f| match columns.iter().find(|c| c.name() == f.name()) {
                    Some(c) => Ok(Field::new(f.name(), fit(&child(path, f.name()), c.data_type(), f.data_type())?, true)),
                    None => Ok(f.as_ref().clone()),
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(DataType::Struct(Fields::from(fitted)))
        }
        (DataType::List(column), DataType::List(item)) => {
            Ok(list_of(fit(&format!("{path}[]"), column.data_type(), item.data_type())?))
        }
        (DataType::Int64, DataType::Int64) | (DataType::Int32, DataType::Int64) => Ok(DataType::Int64),
        (DataType::Float64 | DataType::Float32, DataType::Int64 | DataType::Float64) => Ok(DataType::Float64),
        (DataType::Int32 | DataType::Int64, DataType::Float64) => Err(format!(
            "`{path}` is a long column and this value is not an integer (Iceberg cannot promote long to double)"
        )),
        (a, b) => Err(format!("`{path}` is {} in the table and {} in this record", kind(a), kind(b))),
    }
}

/// The type of a column holding values of `a` and of `b` (records of one pass).
///
/// # Errors
/// `a` and `b` are of different families.
pub fn merge(path: &str, a: &DataType, b: &DataType) -> Result<DataType, String> {
    match (a, b) {
        (a, b) if a == b => Ok(a.clone()),
        (DataType::Struct(x), DataType::Struct(y)) => {
            let mut out: Vec<Field> = Vec::with_capacity(x.len().max(y.len()));
            for f in x {
                match y.iter().find(|g| g.name() == f.name()) {
                    Some(g) => out.push(Field::new(
                        f.name(),
                        merge(&child(path, f.name()), f.data_type(), g.data_type())?,
                        true,
                    )),
                    None => out.push(f.as_ref().clone()),
                }
            }
            out.extend(
                y.iter()
                    .filter(|g| !x.iter().any(|f| f.name() == g.name()))
                    .map(|g| g.as_ref().clone()),
            );
            Ok(DataType::Struct(Fields::from(out)))
        }
        (DataType::List(x), DataType::List(y)) => {
            Ok(list_of(merge(&format!("{path}[]"), x.data_type(), y.data_type())?))
        }
        (DataType::Int64, DataType::Float64) | (DataType::Float64, DataType::Int64) => {
            Ok(DataType::Float64)
        }
        (a, b) => Err(format!("`{path}` is {} in one record and {} in another", kind(a), kind(b))),
    }
}

/// The type one column needs for the JSON values of one pass, checked value by value.
#[derive(Debug, Default)]
pub struct Inference {
    /// The merged type of the values taken so far; `None` while none told one.
    pub merged: Option<DataType>,
}

impl Inference {
    /// Takes `v` (the column `path`, of type `table` if the table has it) if it
    /// fits the column and the values taken before; nothing changes otherwise.
    ///
    /// # Errors
    /// Why `v` cannot be written to the column (see [`infer`], [`fit`], [`merge`]).
    pub fn take(&mut self, path: &str, table: Option<&DataType>, v: &Value) -> Result<(), String> {
        let Some(t) = infer(path, v)? else { return Ok(()) };
        let t = match table {
            Some(column) => fit(path, column, &t)?,
            None => t,
        };
        let merged = match &self.merged {
            Some(m) => merge(path, m, &t)?,
            None => t,
        };
        self.merged = Some(merged);
        Ok(())
    }
}

/// An Arrow array of type `to` (a table column's, after evolution) holding `values`
/// (`None` or JSON `null`: null). [`fit`] has checked that they fit: a value that
/// still does not (a bug) is an error, never a silent null.
///
/// # Errors
/// A value of another family than `to`; a type JSON never makes.
pub fn to_array(values: &[Option<&Value>], to: &DataType) -> Result<ArrayRef, ArrowError> {
    let present = |v: &&Option<&Value>| v.is_some_and(|v| !v.is_null());
    let wrong = |v: &Value| {
        ArrowError::InvalidArgumentError(format!("JSON {} in a {to} column", kind_of(v)))
    };
    let each = |f: &dyn Fn(&Value) -> bool| -> Result<(), ArrowError> {
        match values.iter().flatten().find(|v| !v.is_null() && !f(v)) {
            Some(v) => Err(wrong(v)),
            None => Ok(()),
        }
    };
    Ok(match to {
        DataType::Boolean => {
            each(&|v: &Value| v.is_boolean())?;
            Arc::new(values.iter().map(|v| v.and_then(Value::as_bool)).collect::<BooleanArray>())
        }
        DataType::Int64 => {
            each(&|v: &Value| v.is_i64())?;
            Arc::new(values.iter().map(|v| v.and_then(Value::as_i64)).collect::<Int64Array>())
        }
        DataType::Float64 => {
            each(&|v: &Value| v.is_number())?;
            Arc::new(values.iter().map(|v| v.and_then(Value::as_f64)).collect::<Float64Array>())
        }
        DataType::Utf8 => {
            each(&|v: &Value| v.is_string())?;
            Arc::new(values.iter().map(|v| v.and_then(Value::as_str)).collect::<StringArray>())
        }
        DataType::Struct(fields) => {
            each(&|v: &Value| v.is_object())?;
            let children = fields
                .iter()
                .map(|f| {
                    let of_field: Vec<Option<&Value>> = values
                        .iter()
                        .map(|v| v.and_then(Value::as_object).and_then(|o| o.get(f.name())))
                        .collect();
                    to_array(&of_field, f.data_type())
                })
                .collect::<Result<Vec<_>, _>>()?;
            let nulls = NullBuffer::from(values.iter().map(|v| present(&v)).collect::<Vec<bool>>());
            if fields.is_empty() {
                Arc::new(StructArray::new_empty_fields(values.len(), Some(nulls)))
            } else {
                Arc::new(StructArray::try_new(fields.clone(), children, Some(nulls))?)
            }
        }
        DataType::List(item) => {
            each(&|v: &Value| v.is_array())?;
            let lengths = values.iter().map(|v| v.and_then(Value::as_array).map_or(0, Vec::len));
            let offsets = OffsetBuffer::<i32>::from_lengths(lengths);
            let elements: Vec<Option<&Value>> = values
                .iter()
                .filter_map(|v| v.and_then(Value::as_array))
                .flatten()
                .map(Some)
                .collect();
            let elements = to_array(&elements, item.data_type())?;
            let nulls = NullBuffer::from(values.iter().map(|v| present(&v)).collect::<Vec<bool>>());
            Arc::new(ListArray::try_new(item.clone(), offsets, elements, Some(nulls))?)
        }
        // A column JSON never makes (the table was typed another way before): nulls only.
        other => {
            each(&|_: &Value| false)?;
            new_null_array(other, values.len())
        }
    })
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float64Type, Int64Type};
    use arrow_array::Array;
    use serde_json::json;

    use super::*;

    #[test]
    fn types_are_inferred_and_merged_within_a_pass() {
        let t = infer("", &json!({"id": 1, "n": null, "tags": ["a"], "a": {"x": 1.5}, "e": []}))
            .unwrap()
            .unwrap();
        let DataType::Struct(f) = &t else { panic!("{t}") };
        let names: Vec<&str> = f.iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["a", "id", "tags"], "null and [] tell no type");
        let mut inf = Inference::default();
        inf.take("", None, &json!({"price": 10})).unwrap();
        inf.take("", None, &json!({"price": 10.5, "extra": "x"})).unwrap();
        let DataType::Struct(f) = inf.merged.clone().unwrap() else { panic!() };
        assert_eq!(
            f.find("price").unwrap().1.data_type(),
            &DataType::Float64,
            "a fraction in the same pass: double"
        );
        let e = inf.take("", None, &json!({"price": "ten"})).unwrap_err();
        assert!(
            e.contains("`price` is a number (double) in one record and a string in another"),
            "{e}"
        );
        assert!(infer("", &json!({"a.b": 1})).is_err());
        assert!(infer("", &json!({"mixed": [1, "x"]})).is_err());
    }

    #[test]
    fn the_table_decides_what_a_value_may_be() {
        let long = DataType::Struct(Fields::from(vec![Field::new("n", DataType::Int64, true)]));
        let e = fit("", &long, &infer("", &json!({"n": 1.5})).unwrap().unwrap()).unwrap_err();
        assert!(e.contains("cannot promote long to double"), "{e}");
        let double = DataType::Struct(Fields::from(vec![Field::new("n", DataType::Float64, true)]));
        assert_eq!(
            fit("", &double, &infer("", &json!({"n": 2})).unwrap().unwrap()).unwrap(),
            double
        );
        let e =
            fit("", &double, &infer("", &json!({"n": {"x": 1}})).unwrap().unwrap()).unwrap_err();
        assert!(
            e.contains(
                "`n` is a number (double) in the table and an object (struct) in this record"
            ),
            "{e}"
        );
    }

    #[test]
    fn arrays_are_built_in_the_columns_types() {
        let t = DataType::Struct(Fields::from(vec![
            Field::new("n", DataType::Float64, true),
            Field::new("l", list_of(DataType::Int64), true),
        ]));
        let a = json!({"n": 1, "l": [1, 2]});
        let b = json!({"l": null});
        let out = to_array(&[Some(&a), None, Some(&b)], &t).unwrap();
        let s = out.as_struct();
        assert!(s.is_null(1) && s.is_valid(2));
        assert_eq!(s.column(0).as_primitive::<Float64Type>().value(0), 1.0);
        let l = s.column(1).as_list::<i32>();
        assert_eq!(l.value(0).as_primitive::<Int64Type>().values().to_vec(), [1, 2]);
        assert!(l.is_null(2));
        assert!(to_array(&[Some(&json!("x"))], &DataType::Int64).is_err());
    }
}
