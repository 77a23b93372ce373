//! `Column`: the growable Arrow column a decoder writes one record's values into,
//! for every type the typed decoders produce, with [`Column::truncate`] so that a
//! record that fails half-way leaves nothing behind.
//!
//! Arrow's own builders cannot take back a value; these keep plain `Vec`s (values,
//! validity, offsets) until [`Column::finish`] moves them into arrays without a copy.

use std::sync::Arc;

use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int32Type, Int64Type,
    Time64MicrosecondType, TimestampMicrosecondType,
};
use arrow_array::{
    ArrayRef, ArrowPrimitiveType, BooleanArray, FixedSizeBinaryArray, LargeBinaryArray, ListArray,
    MapArray, PrimitiveArray, StringArray, StructArray,
};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, FieldRef, Fields, TimeUnit};

use super::error::DecodeError;

/// Values of one fixed-width type, and which are valid.
#[derive(Debug)]
pub(crate) struct Primitive<T: ArrowPrimitiveType> {
    data_type: DataType,
    values: Vec<T::Native>,
    valid: Vec<bool>,
}

impl<T: ArrowPrimitiveType> Primitive<T> {
    fn new(data_type: DataType) -> Self {
        Self { data_type, values: Vec::new(), valid: Vec::new() }
    }

    pub(crate) fn push(&mut self, value: T::Native) {
        self.values.push(value);
        self.valid.push(true);
    }

    fn push_null(&mut self) {
        self.values.push(T::Native::default());
        self.valid.push(false);
    }

    fn truncate(&mut self, len: usize) {
        self.values.truncate(len);
        self.valid.truncate(len);
    }

    fn finish(self) -> Result<ArrayRef, ArrowError> {
        let array =
            PrimitiveArray::<T>::try_new(ScalarBuffer::from(self.values), nulls(self.valid))?;
        Ok(Arc::new(array.with_data_type(self.data_type)))
    }
}

/// Variable-length values (text or bytes): offsets into one byte buffer.
#[derive(Debug, Default)]
pub(crate) struct Bytes<O> {
    offsets: Vec<O>,
    bytes: Vec<u8>,
    valid: Vec<bool>,
}

impl<O: Copy + TryFrom<usize> + Into<i64>> Bytes<O> {
    fn new() -> Result<Self, DecodeError> {
        Ok(Self { offsets: vec![offset(0)?], bytes: Vec::new(), valid: Vec::new() })
    }

    /// Appends a value.
    ///
    /// # Errors
    /// The column would outgrow its offset type (2 GiB of text in one batch).
    pub(crate) fn push(&mut self, value: &[u8]) -> Result<(), String> {
        self.bytes.extend_from_slice(value);
        self.offsets.push(offset(self.bytes.len()).map_err(|e| e.to_string())?);
        self.valid.push(true);
        Ok(())
    }

    fn push_null(&mut self) {
        let last = self.offsets[self.offsets.len() - 1];
        self.offsets.push(last);
        self.valid.push(false);
    }

    fn truncate(&mut self, len: usize) {
        self.offsets.truncate(len + 1);
        self.valid.truncate(len);
        let end = self.offsets[self.offsets.len() - 1].into();
        self.bytes.truncate(usize::try_from(end).unwrap_or(0));
    }
}

fn offset<O: TryFrom<usize>>(n: usize) -> Result<O, DecodeError> {
    O::try_from(n).map_err(|_| DecodeError::TooLarge)
}

fn nulls(valid: Vec<bool>) -> Option<NullBuffer> {
    if valid.iter().all(|v| *v) {
        None
    } else {
        Some(NullBuffer::from(valid))
    }
}

/// A growing column of any type the decoders produce (see the parent module's table).
#[derive(Debug)]
pub(crate) enum Column {
    Boolean {
        values: Vec<bool>,
        valid: Vec<bool>,
    },
    Int32(Primitive<Int32Type>),
    Int64(Primitive<Int64Type>),
    Float32(Primitive<Float32Type>),
    Float64(Primitive<Float64Type>),
    Decimal(Primitive<Decimal128Type>),
    Date(Primitive<Date32Type>),
    Time(Primitive<Time64MicrosecondType>),
    Timestamp(Primitive<TimestampMicrosecondType>),
    Utf8(Bytes<i32>),
    Binary(Bytes<i64>),
    Fixed {
        width: usize,
        bytes: Vec<u8>,
        valid: Vec<bool>,
    },
    /// A list: `offsets[i]..offsets[i + 1]` are row i's items.
    List {
        item_field: FieldRef,
        offsets: Vec<i32>,
        valid: Vec<bool>,
        items: Box<Column>,
    },
    /// A map: a list of (key, value) entries.
    Map {
        entries_field: FieldRef,
        offsets: Vec<i32>,
        valid: Vec<bool>,
        keys: Box<Column>,
        values: Box<Column>,
    },
    Struct {
        fields: Fields,
        valid: Vec<bool>,
        children: Vec<Column>,
    },
}

impl Column {
    /// An empty column of `data_type`.
    ///
    /// # Errors
    /// A type no decoder produces (a bug in a mapping).
    pub(crate) fn new(data_type: &DataType) -> Result<Self, DecodeError> {
        let unsupported = || DecodeError::Internal(format!("no column for Arrow type {data_type}"));
        Ok(match data_type {
            DataType::Boolean => Column::Boolean { values: Vec::new(), valid: Vec::new() },
            DataType::Int32 => Column::Int32(Primitive::new(data_type.clone())),
            DataType::Int64 => Column::Int64(Primitive::new(data_type.clone())),
            DataType::Float32 => Column::Float32(Primitive::new(data_type.clone())),
            DataType::Float64 => Column::Float64(Primitive::new(data_type.clone())),
            DataType::Decimal128(_, _) => Column::Decimal(Primitive::new(data_type.clone())),
            DataType::Date32 => Column::Date(Primitive::new(data_type.clone())),
            DataType::Time64(TimeUnit::Microsecond) => {
                Column::Time(Primitive::new(data_type.clone()))
            }
            DataType::Timestamp(TimeUnit::Microsecond, _) => {
                Column::Timestamp(Primitive::new(data_type.clone()))
            }
            DataType::Utf8 => Column::Utf8(Bytes::new()?),
            DataType::LargeBinary => Column::Binary(Bytes::new()?),
            DataType::FixedSizeBinary(width) => Column::Fixed {
                width: usize::try_from(*width).map_err(|_| unsupported())?,
                bytes: Vec::new(),
                valid: Vec::new(),
            },
            DataType::List(item) => Column::List {
                item_field: item.clone(),
                offsets: vec![0],
                valid: Vec::new(),
                items: Box::new(Column::new(item.data_type())?),
            },
            DataType::Map(entries, _) => {
                let DataType::Struct(kv) = entries.data_type() else { return Err(unsupported()) };
                let [key, value] = kv.iter().collect::<Vec<_>>()[..] else {
                    return Err(unsupported());
                };
                Column::Map {
                    entries_field: entries.clone(),
                    offsets: vec![0],
                    valid: Vec::new(),
                    keys: Box::new(Column::new(key.data_type())?),
                    values: Box::new(Column::new(value.data_type())?),
                }
            }
            DataType::Struct(fields) => Column::Struct {
                fields: fields.clone(),
                valid: Vec::new(),
                children: fields
                    .iter()
                    .map(|f| Column::new(f.data_type()))
                    .collect::<Result<_, _>>()?,
            },
            _ => return Err(unsupported()),
        })
    }

    /// Rows written so far.
    pub(crate) fn len(&self) -> usize {
        match self {
            Column::Boolean { valid, .. }
            | Column::Fixed { valid, .. }
            | Column::List { valid, .. }
            | Column::Map { valid, .. }
            | Column::Struct { valid, .. } => valid.len(),
            Column::Int32(p) => p.valid.len(),
            Column::Int64(p) => p.valid.len(),
            Column::Float32(p) => p.valid.len(),
            Column::Float64(p) => p.valid.len(),
            Column::Decimal(p) => p.valid.len(),
            Column::Date(p) => p.valid.len(),
            Column::Time(p) => p.valid.len(),
            Column::Timestamp(p) => p.valid.len(),
            Column::Utf8(b) => b.valid.len(),
            Column::Binary(b) => b.valid.len(),
        }
    }

    /// Appends a null (a struct's children get nulls too, so they keep its length).
    pub(crate) fn push_null(&mut self) {
        match self {
            Column::Boolean { values, valid } => {
                values.push(false);
                valid.push(false);
            }
            Column::Int32(p) => p.push_null(),
            Column::Int64(p) => p.push_null(),
            Column::Float32(p) => p.push_null(),
            Column::Float64(p) => p.push_null(),
            Column::Decimal(p) => p.push_null(),
            Column::Date(p) => p.push_null(),
            Column::Time(p) => p.push_null(),
            Column::Timestamp(p) => p.push_null(),
            Column::Utf8(b) => b.push_null(),
            Column::Binary(b) => b.push_null(),
            Column::Fixed { width, bytes, valid } => {
                bytes.resize(bytes.len() + *width, 0);
                valid.push(false);
            }
            Column::List { offsets, valid, .. } | Column::Map { offsets, valid, .. } => {
                offsets.push(offsets[offsets.len() - 1]);
                valid.push(false);
            }
            Column::Struct { valid, children, .. } => {
                valid.push(false);
                children.iter_mut().for_each(Column::push_null);
            }
        }
    }

    /// Drops the rows from `len` on, and everything they hold in child columns.
    pub(crate) fn truncate(&mut self, len: usize) {
        match self {
            Column::Boolean { values, valid } => {
                values.truncate(len);
                valid.truncate(len);
            }
            Column::Int32(p) => p.truncate(len),
            Column::Int64(p) => p.truncate(len),
            Column::Float32(p) => p.truncate(len),
            Column::Float64(p) => p.truncate(len),
            Column::Decimal(p) => p.truncate(len),
            Column::Date(p) => p.truncate(len),
            Column::Time(p) => p.truncate(len),
            Column::Timestamp(p) => p.truncate(len),
            Column::Utf8(b) => b.truncate(len),
            Column::Binary(b) => b.truncate(len),
            Column::Fixed { width, bytes, valid } => {
                valid.truncate(len);
                bytes.truncate(len * *width);
            }
            Column::List { offsets, valid, items, .. } => {
                offsets.truncate(len + 1);
                valid.truncate(len);
                items.truncate(child_len(offsets));
            }
            Column::Map { offsets, valid, keys, values, .. } => {
                offsets.truncate(len + 1);
                valid.truncate(len);
                keys.truncate(child_len(offsets));
                values.truncate(child_len(offsets));
            }
            Column::Struct { valid, children, .. } => {
                valid.truncate(len);
                children.iter_mut().for_each(|c| c.truncate(len));
            }
        }
    }

    /// The Arrow array of the rows written.
    ///
    /// # Errors
    /// Arrow's own checks (they hold for what the decoders write; an error is a bug).
    pub(crate) fn finish(self) -> Result<ArrayRef, ArrowError> {
        Ok(match self {
            Column::Boolean { values, valid } => {
                Arc::new(BooleanArray::new(values.into(), nulls(valid)))
            }
            Column::Int32(p) => p.finish()?,
            Column::Int64(p) => p.finish()?,
            Column::Float32(p) => p.finish()?,
            Column::Float64(p) => p.finish()?,
            Column::Decimal(p) => p.finish()?,
            Column::Date(p) => p.finish()?,
            Column::Time(p) => p.finish()?,
            Column::Timestamp(p) => p.finish()?,
            Column::Utf8(b) => Arc::new(StringArray::try_new(
                OffsetBuffer::new(ScalarBuffer::from(b.offsets)),
                Buffer::from_vec(b.bytes),
                nulls(b.valid),
            )?),
            Column::Binary(b) => Arc::new(LargeBinaryArray::try_new(
                OffsetBuffer::new(ScalarBuffer::from(b.offsets)),
                Buffer::from_vec(b.bytes),
                nulls(b.valid),
            )?),
            Column::Fixed { width, bytes, valid } => {
                let width = i32::try_from(width)
                    .map_err(|_| ArrowError::InvalidArgumentError("fixed width".into()))?;
                Arc::new(FixedSizeBinaryArray::try_new(
                    width,
                    Buffer::from_vec(bytes),
                    nulls(valid),
                )?)
            }
            Column::List { item_field, offsets, valid, items } => Arc::new(ListArray::try_new(
                item_field,
                OffsetBuffer::new(ScalarBuffer::from(offsets)),
                items.finish()?,
                nulls(valid),
            )?),
            Column::Map { entries_field, offsets, valid, keys, values } => {
                let DataType::Struct(kv) = entries_field.data_type() else {
                    return Err(ArrowError::InvalidArgumentError(
                        "map entries are not a struct".into(),
                    ));
                };
                let entries =
                    StructArray::try_new(kv.clone(), vec![keys.finish()?, values.finish()?], None)?;
                Arc::new(MapArray::try_new(
                    entries_field,
                    OffsetBuffer::new(ScalarBuffer::from(offsets)),
                    entries,
                    nulls(valid),
                    false,
                )?)
            }
            Column::Struct { fields, valid, children } => {
                let len = valid.len();
                let arrays =
                    children.into_iter().map(Column::finish).collect::<Result<Vec<_>, _>>()?;
                Arc::new(StructArray::try_new_with_length(fields, arrays, nulls(valid), len)?)
            }
        })
    }

    /// The struct's children's arrays and the row count, ignoring its own validity
    /// (the top level of a batch, whose rows are never null themselves).
    pub(crate) fn finish_children(self) -> Result<(Vec<ArrayRef>, usize), ArrowError> {
        match self {
            Column::Struct { valid, children, .. } => {
                let len = valid.len();
                Ok((children.into_iter().map(Column::finish).collect::<Result<_, _>>()?, len))
            }
            _ => Err(ArrowError::InvalidArgumentError("the top level is not a struct".into())),
        }
    }

    // ---- helpers for the list, map and struct layouts ------------------------

    /// Ends a list or map row whose items (or keys and values) the decoder has
    /// just written to the child columns.
    pub(crate) fn end_entries(&mut self) -> Result<(), String> {
        match self {
            Column::List { offsets, valid, items, .. } => {
                offsets.push(
                    i32::try_from(items.len())
                        .map_err(|_| "list items exceed i32 offsets".to_string())?,
                );
                valid.push(true);
                Ok(())
            }
            Column::Map { offsets, valid, keys, .. } => {
                offsets.push(
                    i32::try_from(keys.len())
                        .map_err(|_| "map entries exceed i32 offsets".to_string())?,
                );
                valid.push(true);
                Ok(())
            }
            _ => Err(mismatch("list or map", self)),
        }
    }
}

fn child_len(offsets: &[i32]) -> usize {
    offsets.last().and_then(|o| usize::try_from(*o).ok()).unwrap_or(0)
}

/// The message for a decoder that reached a column of another type than its
/// mapping made (a bug, reported per record rather than panicking).
pub(crate) fn mismatch(expected: &str, column: &Column) -> String {
    let kind = match column {
        Column::Boolean { .. } => "boolean",
        Column::Int32(_) => "int32",
        Column::Int64(_) => "int64",
        Column::Float32(_) => "float32",
        Column::Float64(_) => "float64",
        Column::Decimal(_) => "decimal",
        Column::Date(_) => "date",
        Column::Time(_) => "time",
        Column::Timestamp(_) => "timestamp",
        Column::Utf8(_) => "utf8",
        Column::Binary(_) => "binary",
        Column::Fixed { .. } => "fixed",
        Column::List { .. } => "list",
        Column::Map { .. } => "map",
        Column::Struct { .. } => "struct",
    };
    format!("internal: a {expected} value for a {kind} column")
}
