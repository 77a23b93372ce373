//! Schema evolution: what a value schema needs of the table's Iceberg schema.
//!
//! [`plan_columns`] compares the Arrow fields a `TypedDecoder` makes with the
//! table's current schema, by name, and answers with the columns to add (new
//! optional columns, nested ones under their parent struct) or why the schema
//! cannot be written to this table. Existing columns keep their field ids, so a
//! column's history survives every version of the schema; a column the value
//! schema no longer has stays in the table and is written as nulls.
//!
//! A value type may be *narrower* than its column (int data in a `long` column,
//! `float` in `double`, a decimal of lower precision and the same scale): the
//! writer widens it. A value type *wider* than its column is an Iceberg type
//! promotion of the column ([`super::promote`]). A change across type families
//! is refused (its records go to the dead-letter table with the reason).

use arrow_schema::{DataType, Field, Fields, TimeUnit};
use iceberg::spec::{ListType, MapType, NestedField, PrimitiveType, Schema, StructType, Type};
use iceberg::transaction::AddColumn;

use super::promote::Promotion;

/// The names of Floe's Kafka columns ([`crate::schema`]); a value field of one of
/// these names is written as `value_<name>`.
pub const KAFKA_COLUMNS: [&str; 14] = [
    "partition",
    "offset",
    "timestamp",
    "timestamp_type",
    "key",
    "value",
    "headers",
    "batch_base_offset",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "compression",
    "is_transactional",
    "partition_leader_epoch",
];

/// The table column of the top-level value field `name`. `key_raw` (a typed
/// key's bytes with keep-raw) is reserved too.
pub fn column_name(name: &str) -> String {
    column_name_in(name, false)
}

/// Whether `name` is a column of Floe's, not a value's, in a table that is
/// `lossless` (shared) or not: the Kafka columns, `key_raw`, and in a shared
/// table the lossless layout's (a copy table keeps value columns of those
/// names, as it always had them).
pub fn is_kafka_column(name: &str, lossless: bool) -> bool {
    KAFKA_COLUMNS.contains(&name)
        || name == crate::schema::KEY_RAW_COLUMN
        || (lossless && crate::schema::is_lossless_column(name))
}

/// [`column_name`] in a table that is `lossless` (shared) or not ([`is_kafka_column`]).
pub fn column_name_in(name: &str, lossless: bool) -> String {
    if is_kafka_column(name, lossless) {
        format!("value_{name}")
    } else {
        name.to_string()
    }
}

/// What a table's schema needs before a value schema's rows are written to it.
#[derive(Default)]
pub struct Evolution {
    /// Columns to add (new optional columns, nested ones under their parent).
    pub adds: Vec<AddColumn>,
    /// Columns whose type widens (Iceberg type promotion), by field id.
    pub promotions: Vec<Promotion>,
}

impl std::fmt::Debug for Evolution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evolution")
            .field("adds", &self.adds.len())
            .field("promotions", &self.promotions)
            .finish()
    }
}

impl Evolution {
    /// Nothing to change.
    pub fn is_empty(&self) -> bool {
        self.adds.is_empty() && self.promotions.is_empty()
    }
}

/// What the table of `schema` needs so that the value fields `fields` can be
/// written to it; empty when it already can.
///
/// # Errors
/// Why the value schema cannot be written to the table: a field whose type is
/// not the column's and not a promotion of it, two value fields written as one column.
pub fn plan_columns(schema: &Schema, fields: &Fields) -> Result<Evolution, String> {
    let mut ev = Evolution::default();
    let mut seen = std::collections::HashSet::new();
    let lossless = crate::schema::is_lossless(schema);
    for f in fields {
        let name = column_name_in(f.name(), lossless);
        if !seen.insert(name.clone()) {
            return Err(format!("two value fields are both written as column `{name}`"));
        }
        match schema.as_struct().field_by_name(&name) {
            Some(column) => compare(&name, column, f.data_type(), &mut ev)?,
            None => ev.adds.push(AddColumn::optional(name, iceberg_type(f.data_type())?)),
        }
    }
    Ok(ev)
}

/// What the table of `schema` needs so that keys of Arrow type `key` (a key
/// schema's struct of fields, or its one primitive type) can be written to its
/// `key` column: the column itself the first time, then the same rules as values
/// (new optional fields inside the struct, promotions).
///
/// # Errors
/// Why such keys cannot be written to the table's `key` column.
pub fn plan_key(schema: &Schema, key: &DataType) -> Result<Evolution, String> {
    let mut ev = Evolution::default();
    match schema.as_struct().field_by_name(KEY_COLUMN) {
        Some(column) => compare(KEY_COLUMN, column, key, &mut ev)?,
        None => ev.adds.push(AddColumn::optional(KEY_COLUMN, iceberg_type(key)?)),
    }
    Ok(ev)
}

/// The column of a typed key (and of a raw one: the binary `key`).
pub const KEY_COLUMN: &str = "key";

pub(crate) fn compare(
    path: &str,
    field: &NestedField,
    data: &DataType,
    ev: &mut Evolution,
) -> Result<(), String> {
    match (field.field_type.as_ref(), data) {
        (Type::Struct(st), DataType::Struct(fields)) => {
            for f in fields {
                match st.field_by_name(f.name()) {
                    Some(c) => compare(&format!("{path}.{}", f.name()), c, f.data_type(), ev)?,
                    None => ev.adds.push(
                        AddColumn::builder()
                            .parent(path.to_string())
                            .name(f.name().to_string())
                            .field_type(iceberg_type(f.data_type())?)
                            .build(),
                    ),
                }
            }
            Ok(())
        }
        (Type::List(l), DataType::List(item)) => {
            compare(&format!("{path}.element"), &l.element_field, item.data_type(), ev)
        }
        (Type::Map(m), DataType::Map(entries, _)) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return Err(format!("`{path}`: a map without entries"));
            };
            let (Some(k), Some(v)) = (kv.first(), kv.get(1)) else {
                return Err(format!("`{path}`: a map without key and value"));
            };
            let key = iceberg_type(k.data_type())?;
            if *m.key_field.field_type != key {
                return Err(format!(
                    "`{path}`: map keys are {} in the table, {key} in the schema",
                    m.key_field.field_type
                ));
            }
            compare(&format!("{path}.value"), &m.value_field, v.data_type(), ev)
        }
        (Type::Primitive(p), data) => {
            let want = iceberg_type(data)?;
            let Type::Primitive(d) = &want else {
                return Err(format!("`{path}`: the table has {p}, the schema {want}"));
            };
            if d == p || widens_into(d, p) {
                Ok(())
            } else if widens_into(p, d) {
                ev.promotions.push((field.id, d.clone()));
                Ok(())
            } else {
                Err(format!(
                    "`{path}`: the table has {p}, the schema {d}: a change Iceberg cannot express"
                ))
            }
        }
        (column, data) => {
            Err(format!("`{path}`: the table has {column}, the schema {}", type_name(data)))
        }
    }
}

/// Whether values of `from` are written into a column of `to` without loss (Iceberg's promotions).
pub(crate) fn widens_into(from: &PrimitiveType, to: &PrimitiveType) -> bool {
    use PrimitiveType::*;
    match (from, to) {
        (Int, Long) | (Float, Double) => true,
        (Decimal { precision: p1, scale: s1 }, Decimal { precision: p2, scale: s2 }) => {
            s1 == s2 && p1 <= p2
        }
        _ => false,
    }
}

fn type_name(data: &DataType) -> String {
    iceberg_type(data).map_or_else(|_| data.to_string(), |t| t.to_string())
}

/// The Iceberg type of an Arrow type a `TypedDecoder` makes, every nested field
/// optional except map keys, field ids left for the table to assign.
///
/// # Errors
/// An Arrow type Iceberg has no type for (the decoders make none).
pub fn iceberg_type(data: &DataType) -> Result<Type, String> {
    let p = |t| Ok(Type::Primitive(t));
    match data {
        DataType::Boolean => p(PrimitiveType::Boolean),
        DataType::Int32 => p(PrimitiveType::Int),
        DataType::Int64 => p(PrimitiveType::Long),
        DataType::Float32 => p(PrimitiveType::Float),
        DataType::Float64 => p(PrimitiveType::Double),
        DataType::Decimal128(precision, scale) if *scale >= 0 => {
            p(PrimitiveType::Decimal { precision: u32::from(*precision), scale: *scale as u32 })
        }
        DataType::Date32 => p(PrimitiveType::Date),
        DataType::Time64(TimeUnit::Microsecond) => p(PrimitiveType::Time),
        DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => p(PrimitiveType::Timestamptz),
        DataType::Timestamp(TimeUnit::Microsecond, None) => p(PrimitiveType::Timestamp),
        DataType::Utf8 | DataType::LargeUtf8 => p(PrimitiveType::String),
        DataType::LargeBinary | DataType::Binary => p(PrimitiveType::Binary),
        DataType::FixedSizeBinary(n) if *n >= 0 => p(PrimitiveType::Fixed(*n as u64)),
        DataType::Struct(fields) => Ok(Type::Struct(struct_type(fields)?)),
        DataType::List(item) | DataType::LargeList(item) => Ok(Type::List(ListType::new(
            NestedField::new(0, "element", iceberg_type(item.data_type())?, false).into(),
        ))),
        DataType::Map(entries, _) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return Err("a map without entries".into());
            };
            let (Some(k), Some(v)) = (kv.first(), kv.get(1)) else {
                return Err("a map without key and value".into());
            };
            Ok(Type::Map(MapType::new(
                NestedField::map_key_element(0, iceberg_type(k.data_type())?).into(),
                NestedField::map_value_element(0, iceberg_type(v.data_type())?, false).into(),
            )))
        }
        other => Err(format!("no Iceberg type for Arrow {other}")),
    }
}

fn struct_type(fields: &Fields) -> Result<StructType, String> {
    Ok(StructType::new(
        fields
            .iter()
            .map(|f: &std::sync::Arc<Field>| {
                Ok(NestedField::optional(0, f.name(), iceberg_type(f.data_type())?).into())
            })
            .collect::<Result<Vec<_>, String>>()?,
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn f(name: &str, t: DataType) -> Field {
        Field::new(name, t, true)
    }

    #[test]
    fn the_kafka_column_names_are_the_table_layouts() {
        let schema = crate::schema::iceberg_schema();
        let names: Vec<&str> =
            schema.as_struct().fields().iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, KAFKA_COLUMNS);
    }

    #[test]
    fn new_fields_become_columns_and_kafka_names_are_prefixed() {
        let schema = crate::schema::typed_iceberg_schema(false);
        let fields = Fields::from(vec![f("id", DataType::Int64), f("offset", DataType::Utf8)]);
        let ev = plan_columns(&schema, &fields).unwrap();
        assert_eq!(ev.adds.len(), 2);
        assert_eq!(column_name("offset"), "value_offset");
        assert_eq!(column_name("id"), "id");
    }

    #[test]
    fn narrower_data_is_written_wider_data_is_a_promotion_other_types_are_refused() {
        let int = NestedField::optional(7, "a", Type::Primitive(PrimitiveType::Int));
        let long = NestedField::optional(8, "a", Type::Primitive(PrimitiveType::Long));
        let mut ev = Evolution::default();
        assert!(compare("a", &long, &DataType::Int32, &mut ev).is_ok());
        assert!(ev.is_empty());
        compare("a", &int, &DataType::Int64, &mut ev).unwrap();
        assert_eq!(ev.promotions, [(7, PrimitiveType::Long)]);
        let e = compare("a", &int, &DataType::Utf8, &mut ev).unwrap_err();
        assert!(e.contains("cannot express"), "{e}");
        assert!(ev.adds.is_empty());
    }

    #[test]
    fn a_key_is_one_column_that_evolves_like_values() {
        let keys = crate::typed::TypedLayout {
            key: crate::typed::DataFormat::SchemaRegistry,
            ..Default::default()
        };
        let schema = crate::schema::typed_table_schema(&keys);
        let v1 = DataType::Struct(Fields::from(vec![f("id", DataType::Int32)]));
        let ev = plan_key(&schema, &v1).unwrap();
        assert_eq!((ev.adds.len(), ev.promotions.len()), (1, 0), "the key column itself");
        let with_key = Schema::builder()
            .with_fields(
                schema.as_struct().fields().iter().cloned().chain([NestedField::optional(
                    30,
                    "key",
                    Type::Struct(StructType::new(vec![NestedField::optional(
                        31,
                        "id",
                        Type::Primitive(PrimitiveType::Int),
                    )
                    .into()])),
                )
                .into()]),
            )
            .build()
            .unwrap();
        let v2 = DataType::Struct(Fields::from(vec![
            f("id", DataType::Int64),
            f("region", DataType::Utf8),
        ]));
        let ev = plan_key(&with_key, &v2).unwrap();
        assert_eq!(ev.adds.len(), 1);
        assert_eq!(ev.promotions, [(31, PrimitiveType::Long)]);
        assert!(
            plan_key(&with_key, &DataType::Utf8).is_err(),
            "a struct key cannot become a string"
        );
        assert_eq!(column_name("key_raw"), "value_key_raw");
    }

    #[test]
    fn nested_fields_are_added_under_their_parent() {
        let inner = Fields::from(vec![f("x", DataType::Int32)]);
        let column =
            iceberg_type(&DataType::List(Arc::new(f("element", DataType::Struct(inner))))).unwrap();
        let column = NestedField::optional(20, "items", column);
        let wider = Fields::from(vec![f("x", DataType::Int32), f("y", DataType::Utf8)]);
        let data = DataType::List(Arc::new(f("element", DataType::Struct(wider))));
        let mut ev = Evolution::default();
        compare("items", &column, &data, &mut ev).unwrap();
        assert_eq!((ev.adds.len(), ev.promotions.len()), (1, 0));
    }
}
