//! Projection: a decoded value column, in the shape its schema version gave it,
//! rewritten into the shape of the table's column (the table's Arrow type, field
//! ids in its metadata): struct fields matched by name and put in the table's
//! order, fields the version lacks filled with nulls, narrower numbers widened.
//! [`crate::typed::evolve::plan_columns`] has already checked that this works.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{new_null_array, Array, ArrayRef, ListArray, MapArray, StructArray};
use arrow_schema::{ArrowError, DataType};

/// `array` rewritten as the table's type `to`.
///
/// # Errors
/// The shapes do not correspond (a bug: the evolution plan said they did).
pub fn project(array: &ArrayRef, to: &DataType) -> Result<ArrayRef, ArrowError> {
    let from = array.data_type();
    match (from, to) {
        (DataType::Struct(_), DataType::Struct(to_fields)) => {
            let s = array.as_struct();
            let children = to_fields
                .iter()
                .map(|f| match s.column_by_name(f.name()) {
                    Some(child) => project(child, f.data_type()),
                    None => Ok(new_null_array(f.data_type(), s.len())),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Arc::new(StructArray::try_new(to_fields.clone(), children, s.nulls().cloned())?))
        }
        (DataType::List(_), DataType::List(to_item)) => {
            let l = array.as_list::<i32>();
            let values = project(l.values(), to_item.data_type())?;
            Ok(Arc::new(ListArray::try_new(
                to_item.clone(),
                l.offsets().clone(),
                values,
                l.nulls().cloned(),
            )?))
        }
        (DataType::Map(_, _), DataType::Map(to_entries, sorted)) => {
            let m = array.as_map();
            let entries: ArrayRef = Arc::new(m.entries().clone());
            let entries = project(&entries, to_entries.data_type())?;
            Ok(Arc::new(MapArray::try_new(
                to_entries.clone(),
                m.offsets().clone(),
                entries.as_struct().clone(),
                m.nulls().cloned(),
                *sorted,
            )?))
        }
        (from, to) if from == to => Ok(array.clone()),
        (DataType::Timestamp(u1, _), DataType::Timestamp(u2, _)) if u1 == u2 => {
            // Same instants, the table's spelling of UTC ("+00:00" or "UTC").
            arrow_cast::cast(array.as_ref(), to)
        }
        (DataType::Int32, DataType::Int64)
        | (DataType::Float32, DataType::Float64)
        | (DataType::Decimal128(_, _), DataType::Decimal128(_, _))
        | (DataType::Binary, DataType::LargeBinary)
        | (DataType::LargeUtf8, DataType::Utf8) => arrow_cast::cast(array.as_ref(), to),
        (from, to) => {
            Err(ArrowError::SchemaError(format!("cannot write {from} values into a {to} column")))
        }
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::{Int32Array, Int64Array, StringArray};
    use arrow_schema::{Field, Fields};

    use super::*;

    #[test]
    fn fields_are_reordered_filled_and_widened() {
        let from = StructArray::from(vec![
            (
                Arc::new(Field::new("b", DataType::Int32, true)),
                Arc::new(Int32Array::from(vec![Some(1), None])) as ArrayRef,
            ),
            (
                Arc::new(Field::new("a", DataType::Utf8, true)),
                Arc::new(StringArray::from(vec!["x", "y"])) as ArrayRef,
            ),
        ]);
        let to = DataType::Struct(Fields::from(vec![
            Field::new("a", DataType::Utf8, true),
            Field::new("b", DataType::Int64, true),
            Field::new("c", DataType::Utf8, true),
        ]));
        let out = project(&(Arc::new(from) as ArrayRef), &to).unwrap();
        let s = out.as_struct();
        assert_eq!(s.column(0).as_string::<i32>().value(1), "y");
        let b = s.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!((b.value(0), b.is_null(1)), (1, true));
        assert_eq!(s.column(2).null_count(), 2);
    }
}
