//! A converted batch (the raw layout, [`crate::convert`]) split into the rows of
//! the typed table and the dead letters: values grouped by schema id, each group
//! decoded by its schema's decoder, Kafka columns taken along row by row. Keys
//! typed too are grouped the same way, from the `key` column.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{new_null_array, Array, ArrayRef, RecordBatch, StringArray, UInt32Array};
use arrow_schema::{ArrowError, SchemaRef};
use floe_schema::typed::wire;

use super::evolve::{column_name_in, is_kafka_column};
use super::project::project;

/// The column of the raw layout holding the value bytes.
pub(crate) const VALUE_COLUMN: &str = "value";
/// The column of the raw layout holding the key bytes.
pub(crate) const KEY_COLUMN: &str = "key";

/// The rows of a raw batch by what their value is.
#[derive(Debug, Default)]
pub(crate) struct Grouped {
    /// Null values (tombstones): typed rows whose value columns are all null.
    pub(crate) tombstones: Vec<usize>,
    /// Values in the wire format, by schema id, in row order.
    pub(crate) by_id: BTreeMap<i32, Vec<usize>>,
    /// Values not in the wire format, and why.
    pub(crate) dead: Vec<(usize, String)>,
}

/// Groups `rows` of `raw` by the schema id of their bytes in `column` (the value or the key).
pub(crate) fn group(raw: &RecordBatch, column: &str, rows: &[usize]) -> Grouped {
    let mut g = Grouped::default();
    let Some(values) = raw.column_by_name(column) else { return g };
    let values = values.as_binary::<i64>();
    for &i in rows {
        if values.is_null(i) {
            g.tombstones.push(i);
            continue;
        }
        match wire::split_header(values.value(i)) {
            Ok((id, _)) => g.by_id.entry(id).or_default().push(i),
            Err(reason) => g.dead.push((i, reason)),
        }
    }
    g
}

/// Row indexes by Protobuf message indexes, and the rows that could not be read with why.
type ByMessage = (BTreeMap<Vec<i32>, Vec<usize>>, Vec<(usize, String)>);

/// `rows` of `raw` (values of one Protobuf schema) by the message their indexes
/// name, and the values whose indexes cannot be read, with why.
pub(crate) fn by_message(raw: &RecordBatch, column: &str, rows: Vec<usize>) -> ByMessage {
    let mut groups: BTreeMap<Vec<i32>, Vec<usize>> = BTreeMap::new();
    let mut dead = Vec::new();
    for (row, value) in rows.iter().zip(values(raw, column, &rows)) {
        let indexes = value
            .ok_or_else(|| "no value".to_string())
            .and_then(wire::split_header)
            .and_then(|(_, rest)| wire::split_message_indexes(rest));
        match indexes {
            Ok((indexes, _)) => groups.entry(indexes).or_default().push(*row),
            Err(why) => dead.push((*row, why)),
        }
    }
    (groups, dead)
}

/// The bytes in `column` (the value or the key) of `rows` of `raw` (`None` for null).
pub(crate) fn values<'a>(
    raw: &'a RecordBatch,
    column: &str,
    rows: &[usize],
) -> Vec<Option<&'a [u8]>> {
    let Some(values) = raw.column_by_name(column) else { return vec![None; rows.len()] };
    let values = values.as_binary::<i64>();
    rows.iter().map(|&i| values.is_valid(i).then(|| values.value(i))).collect()
}

fn take(column: &ArrayRef, rows: &[usize]) -> Result<ArrayRef, ArrowError> {
    let indices = UInt32Array::from_iter_values(rows.iter().map(|&r| r as u32));
    arrow_select::take::take(column.as_ref(), &indices, None)
}

/// A batch of the typed table's schema `table`: the Kafka columns of `rows` of
/// `raw`, and the value columns from `decoded` (whose row `k` is the value of
/// `rows[k]`; `None`: all null, for tombstones). Columns the value lacks are null.
/// With typed keys, `keys` holds every row of `raw`'s typed key (in the table's
/// `key` type; `None`: the table has no `key` column yet), and the raw bytes go
/// to `key_raw` if the table has it.
///
/// # Errors
/// The decoded columns do not fit the table (a bug: evolution checked them).
pub(crate) fn typed_batch(
    raw: &RecordBatch,
    rows: &[usize],
    decoded: Option<&RecordBatch>,
    table: &SchemaRef,
    keys: Option<TypedKeys<'_>>,
) -> Result<RecordBatch, ArrowError> {
    let mut columns = Vec::with_capacity(table.fields().len());
    // A shared table's lossless columns are Kafka's: taken from the raw batch.
    let lossless = crate::schema::is_lossless_arrow(table);
    for field in table.fields() {
        let name = field.name().as_str();
        let column = if let (Some(keys), KEY_COLUMN) = (keys, name) {
            match keys.0 {
                Some(k) => project(&take(k, rows)?, field.data_type())?,
                None => new_null_array(field.data_type(), rows.len()),
            }
        } else if keys.is_some() && name == crate::schema::KEY_RAW_COLUMN {
            match raw.column_by_name(KEY_COLUMN) {
                Some(c) => project(&take(c, rows)?, field.data_type())?,
                None => new_null_array(field.data_type(), rows.len()),
            }
        } else if is_kafka_column(name, lossless) {
            match raw.column_by_name(name) {
                Some(c) => project(&take(c, rows)?, field.data_type())?,
                None => new_null_array(field.data_type(), rows.len()),
            }
        } else {
            let from_value = decoded.and_then(|d| {
                d.schema()
                    .fields()
                    .iter()
                    .position(|f| column_name_in(f.name(), lossless) == name)
                    .map(|i| d.column(i).clone())
            });
            match from_value {
                Some(c) => project(&c, field.data_type())?,
                None => new_null_array(field.data_type(), rows.len()),
            }
        };
        columns.push(column);
    }
    RecordBatch::try_new(table.clone(), columns)
}

/// A pass's typed keys: every row's key in the table's `key` type (`None`: no `key` column yet).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TypedKeys<'a>(pub(crate) Option<&'a ArrayRef>);

/// A batch of the dead-letter table's schema `table`: `rows` of `raw` as they
/// are, each with its error.
///
/// # Errors
/// A bug: the dead-letter layout does not hold the raw columns.
pub(crate) fn dead_letter_batch(
    raw: &RecordBatch,
    rows: &[(usize, String)],
    table: &SchemaRef,
) -> Result<RecordBatch, ArrowError> {
    let indices: Vec<usize> = rows.iter().map(|(i, _)| *i).collect();
    let mut columns = Vec::with_capacity(table.fields().len());
    for field in table.fields() {
        let column = match raw.column_by_name(field.name()) {
            Some(c) => project(&take(c, &indices)?, field.data_type())?,
            None if field.name() == crate::schema::DLQ_ERROR_COLUMN => {
                Arc::new(StringArray::from_iter_values(rows.iter().map(|(_, e)| e.as_str())))
                    as ArrayRef
            }
            None => new_null_array(field.data_type(), indices.len()),
        };
        columns.push(column);
    }
    RecordBatch::try_new(table.clone(), columns)
}
