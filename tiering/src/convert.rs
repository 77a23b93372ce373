//! Sealed segment → Arrow: [`ArrowConverter`] decodes record batches
//! (with Floe's own record parser, [`floe_protocol::records`]) into rows of
//! the table layout ([`crate::schema`]) and hands out Arrow record batches of
//! bounded size. Segments are read batch by batch with storage's
//! [`floe_storage::SegmentBatchReader`], which steps over the damaged ranges
//! recovery kept, like every other reader of a segment.
//!
//! Memory is bounded by the reader's buffer (256 KiB, or one Kafka batch if
//! larger), one Kafka batch and one Arrow batch ([`ArrowConverter::is_full`]):
//! nothing reads a whole segment.
//!
//! Control batches (transaction markers) are skipped. A batch that cannot be
//! decoded is reported to the caller with its offset range ([`Pushed::Undecodable`]),
//! never silently dropped. Headers keep their order and duplicate keys (a
//! key sent twice is two list elements); a key that is not UTF-8 (Kafka does
//! not require it) is stored with its invalid bytes replaced by U+FFFD.

use std::sync::Arc;

use arrow_array::builder::{LargeBinaryBuilder, StringBuilder};
use arrow_array::{
    ArrayRef, BooleanArray, Int32Array, Int64Array, ListArray, RecordBatch, StructArray,
    TimestampMicrosecondArray,
};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, SchemaRef};
use bytes::Bytes;
use floe_protocol::record_batch::{CompressionType, RecordBatchHeader, TimestampType};
use floe_protocol::records::{parse_records, records_section, HeaderView};

use floe_storage::{AbortedTxn, ControlRecordType};

use crate::error::Result;
use crate::schema::LogRowKind;

/// What [`ArrowConverter::push`] did with a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    /// Its records at or above the start offset became rows.
    Rows(usize),
    /// A control batch (transaction marker): no rows.
    Control,
    /// The batch could not be decoded; no rows were added.
    Undecodable {
        /// First offset of the batch.
        base_offset: i64,
        /// Last offset of the batch.
        last_offset: i64,
        /// The decoder's message.
        reason: String,
    },
}

/// A control record's type from its key (`version int16, type int16`).
fn marker_type(key: Option<&[u8]>) -> Option<ControlRecordType> {
    let k = key?;
    let t = i16::from_be_bytes([*k.get(2)?, *k.get(3)?]);
    ControlRecordType::from_id(t)
}

fn timestamp_type_name(header: &RecordBatchHeader) -> &'static str {
    match header.timestamp_type() {
        TimestampType::LogAppendTime => "LogAppendTime",
        TimestampType::CreateTime => "CreateTime",
    }
}

/// The name stored in the `compression` column.
pub fn compression_name(c: Option<CompressionType>) -> &'static str {
    match c {
        Some(CompressionType::None) => "none",
        Some(CompressionType::Gzip) => "gzip",
        Some(CompressionType::Snappy) => "snappy",
        Some(CompressionType::Lz4) => "lz4",
        Some(CompressionType::Zstd) => "zstd",
        None => "unknown",
    }
}

/// Accumulates rows of one Kafka partition and turns them into Arrow record batches.
#[derive(Debug)]
pub struct ArrowConverter {
    schema: SchemaRef,
    partition: i32,
    max_rows: usize,
    max_bytes: usize,
    bytes: usize,
    offset: Vec<i64>,
    timestamp: Vec<i64>,
    timestamp_type: StringBuilder,
    key: LargeBinaryBuilder,
    value: LargeBinaryBuilder,
    header_offsets: Vec<i32>,
    header_key: StringBuilder,
    header_value: LargeBinaryBuilder,
    batch_base_offset: Vec<i64>,
    producer_id: Vec<i64>,
    producer_epoch: Vec<i32>,
    base_sequence: Vec<i32>,
    compression: StringBuilder,
    is_transactional: Vec<bool>,
    partition_leader_epoch: Vec<i32>,
    /// The lossless layout's columns (shared tables and `__log`).
    lossless: Option<Box<LosslessColumns>>,
    /// `__log`'s own columns.
    log: Option<Box<LogColumns>>,
}

/// Which rows an [`ArrowConverter`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowLayout {
    /// [`crate::schema::iceberg_schema`]: copy mode.
    Raw,
    /// [`crate::schema::lossless_iceberg_schema`]: a shared table.
    Lossless,
    /// [`crate::schema::log_iceberg_schema`]: a shared table's `__log`.
    Log,
}

/// Builders of the lossless layout's columns beyond the raw ones.
#[derive(Debug, Default)]
struct LosslessColumns {
    last_offset_delta: Vec<i32>,
    base_timestamp: Vec<i64>,
    max_timestamp: Vec<i64>,
    attributes: Vec<i32>,
    records_count: Vec<i32>,
    crc: Vec<i64>,
    timestamp_delta: Vec<i64>,
    record_attributes: Vec<Option<i32>>,
    header_key_bytes: LargeBinaryBuilder,
}

impl LosslessColumns {
    fn push(&mut self, header: &RecordBatchHeader, timestamp_delta: i64, record_attributes: u8) {
        self.last_offset_delta.push(header.last_offset_delta);
        self.base_timestamp.push(header.base_timestamp);
        self.max_timestamp.push(header.max_timestamp);
        self.attributes.push(i32::from(header.attributes));
        self.records_count.push(header.records_count);
        self.crc.push(i64::from(header.crc));
        self.timestamp_delta.push(timestamp_delta);
        self.record_attributes
            .push((record_attributes != 0).then_some(i32::from(record_attributes)));
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        vec![
            Arc::new(Int32Array::from(std::mem::take(&mut self.last_offset_delta))),
            Arc::new(Int64Array::from(std::mem::take(&mut self.base_timestamp))),
            Arc::new(Int64Array::from(std::mem::take(&mut self.max_timestamp))),
            Arc::new(Int32Array::from(std::mem::take(&mut self.attributes))),
            Arc::new(Int32Array::from(std::mem::take(&mut self.records_count))),
            Arc::new(Int64Array::from(std::mem::take(&mut self.crc))),
            Arc::new(Int64Array::from(std::mem::take(&mut self.timestamp_delta))),
            Arc::new(Int32Array::from(std::mem::take(&mut self.record_attributes))),
        ]
    }
}

/// Builders of `__log`'s own columns.
#[derive(Debug, Default)]
struct LogColumns {
    kind: StringBuilder,
    txn_first_offset: Vec<Option<i64>>,
    txn_last_stable_offset: Vec<Option<i64>>,
    batch_bytes: LargeBinaryBuilder,
    hole_last_offset: Vec<Option<i64>>,
}

impl LogColumns {
    fn push(
        &mut self,
        kind: LogRowKind,
        txn: Option<&AbortedTxn>,
        batch: Option<&[u8]>,
        hole_last: Option<i64>,
    ) {
        self.kind.append_value(kind.as_str());
        self.txn_first_offset.push(txn.map(|t| t.first_offset));
        self.txn_last_stable_offset.push(txn.map(|t| t.last_stable_offset));
        self.batch_bytes.append_option(batch);
        self.hole_last_offset.push(hole_last);
    }

    fn finish(&mut self) -> Vec<ArrayRef> {
        vec![
            Arc::new(self.kind.finish()),
            Arc::new(Int64Array::from(std::mem::take(&mut self.txn_first_offset))),
            Arc::new(Int64Array::from(std::mem::take(&mut self.txn_last_stable_offset))),
            Arc::new(self.batch_bytes.finish()),
            Arc::new(Int64Array::from(std::mem::take(&mut self.hole_last_offset))),
        ]
    }
}

/// What a `__log` record row is, for [`ArrowConverter::push_log`].
#[derive(Debug, Clone, Copy)]
pub enum LogBatch<'a> {
    /// A control batch (a transaction marker); the `.txnindex` entries of the
    /// segment, to find an ABORT marker's transaction.
    Marker(&'a [AbortedTxn]),
    /// A batch of an aborted transaction.
    Aborted,
}

impl ArrowConverter {
    /// A converter for `partition`'s records that is full at `max_rows` rows
    /// or `max_bytes` of keys, values and headers.
    pub fn new(partition: i32, max_rows: usize, max_bytes: usize) -> Self {
        Self::with_layout(partition, max_rows, max_bytes, RowLayout::Raw)
    }

    /// [`ArrowConverter::new`], making rows of `layout`.
    pub fn with_layout(
        partition: i32,
        max_rows: usize,
        max_bytes: usize,
        layout: RowLayout,
    ) -> Self {
        let schema = match layout {
            RowLayout::Raw => crate::schema::arrow_schema(),
            RowLayout::Lossless => crate::schema::lossless_arrow_schema(),
            RowLayout::Log => crate::schema::log_arrow_schema(),
        };
        Self {
            lossless: (layout != RowLayout::Raw).then(Box::default),
            log: (layout == RowLayout::Log).then(Box::default),
            schema,
            partition,
            max_rows: max_rows.max(1),
            max_bytes,
            bytes: 0,
            offset: Vec::new(),
            timestamp: Vec::new(),
            timestamp_type: StringBuilder::new(),
            key: LargeBinaryBuilder::new(),
            value: LargeBinaryBuilder::new(),
            header_offsets: vec![0],
            header_key: StringBuilder::new(),
            header_value: LargeBinaryBuilder::new(),
            batch_base_offset: Vec::new(),
            producer_id: Vec::new(),
            producer_epoch: Vec::new(),
            base_sequence: Vec::new(),
            compression: StringBuilder::new(),
            is_transactional: Vec::new(),
            partition_leader_epoch: Vec::new(),
        }
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.offset.len()
    }

    /// No rows held.
    pub fn is_empty(&self) -> bool {
        self.offset.is_empty()
    }

    /// Time to call [`ArrowConverter::finish`].
    pub fn is_full(&self) -> bool {
        self.len() >= self.max_rows || self.bytes >= self.max_bytes
    }

    /// Decodes one batch (`bytes` as stored, header included) and adds its
    /// records with offsets `>= from_offset` as rows.
    pub fn push(&mut self, header: &RecordBatchHeader, bytes: Bytes, from_offset: i64) -> Pushed {
        if header.is_control() {
            return Pushed::Control;
        }
        self.push_records(header, &bytes, from_offset, None)
    }

    /// `__log` rows: the records of a marker or aborted batch with offsets
    /// `>= from_offset`, their `kind` set. A `__log` converter only.
    pub fn push_log(
        &mut self,
        header: &RecordBatchHeader,
        bytes: &[u8],
        from_offset: i64,
        batch: LogBatch<'_>,
    ) -> Pushed {
        self.push_records(header, bytes, from_offset, Some(batch))
    }

    /// A `__log` row holding a batch that could not be decoded, as stored
    /// (one row at its base offset; fetches serve the bytes back verbatim).
    pub fn push_opaque(&mut self, header: &RecordBatchHeader, bytes: &[u8]) {
        let ts_type = timestamp_type_name(header);
        self.add_row(
            header,
            header.base_offset,
            header.max_timestamp,
            ts_type,
            None,
            None,
            &[],
            0,
            0,
        );
        if let Some(log) = self.log.as_mut() {
            log.push(LogRowKind::Opaque, None, Some(bytes), None);
        }
        self.bytes += bytes.len();
    }

    /// A `__log` row for offsets `first..=last` that no batch covers (a damaged
    /// range recovery kept): a fetch steps over them, as the log's readers do.
    pub fn push_hole(&mut self, first: i64, last: i64) {
        let header = RecordBatchHeader {
            base_offset: first,
            batch_length: 0,
            partition_leader_epoch: -1,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: i32::try_from(last - first).unwrap_or(i32::MAX),
            base_timestamp: -1,
            max_timestamp: -1,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records_count: 0,
        };
        self.add_row(&header, first, -1, "CreateTime", None, None, &[], 0, 0);
        if let Some(log) = self.log.as_mut() {
            log.push(LogRowKind::Hole, None, None, Some(last));
        }
    }

    fn push_records(
        &mut self,
        header: &RecordBatchHeader,
        bytes: &[u8],
        from_offset: i64,
        log: Option<LogBatch<'_>>,
    ) -> Pushed {
        let undecodable = |reason: String| Pushed::Undecodable {
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            reason,
        };
        let section = match records_section(bytes, header) {
            Ok(section) => section,
            Err(e) => return undecodable(e.0),
        };
        let records = match parse_records(&section, header) {
            Ok(records) => records,
            Err(e) => return undecodable(e.0),
        };
        // Headers are parsed before any row is added: a batch goes in whole or not at all.
        let mut headers: Vec<Vec<HeaderView<'_>>> = Vec::with_capacity(records.len());
        for r in &records {
            match r.headers() {
                Ok(h) => headers.push(h),
                Err(e) => return undecodable(format!("record at offset {}: {e}", r.offset)),
            }
        }
        let log_append = header.timestamp_type() == TimestampType::LogAppendTime;
        let ts_type = timestamp_type_name(header);
        let mut rows = 0;
        for (r, r_headers) in records.iter().zip(&headers).filter(|(r, _)| r.offset >= from_offset)
        {
            let ts = if log_append { header.max_timestamp } else { r.timestamp };
            self.add_row(
                header,
                r.offset,
                ts,
                ts_type,
                r.key,
                r.value,
                r_headers,
                r.timestamp_delta,
                r.attributes,
            );
            if let (Some(columns), Some(batch)) = (self.log.as_mut(), log) {
                let (kind, txn) = match batch {
                    LogBatch::Aborted => (LogRowKind::Aborted, None),
                    LogBatch::Marker(txns) => match marker_type(r.key) {
                        Some(ControlRecordType::Abort) => (
                            LogRowKind::AbortMarker,
                            txns.iter().find(|t| {
                                t.producer_id == header.producer_id && t.last_offset == r.offset
                            }),
                        ),
                        _ => (LogRowKind::CommitMarker, None),
                    },
                };
                columns.push(kind, txn, None, None);
            }
            rows += 1;
        }
        Pushed::Rows(rows)
    }

    /// Adds one row; the `__log` columns are the caller's.
    #[allow(clippy::too_many_arguments)]
    fn add_row(
        &mut self,
        header: &RecordBatchHeader,
        offset: i64,
        timestamp_ms: i64,
        ts_type: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[HeaderView<'_>],
        timestamp_delta: i64,
        record_attributes: u8,
    ) {
        self.offset.push(offset);
        self.timestamp.push(timestamp_ms.saturating_mul(1000));
        self.timestamp_type.append_value(ts_type);
        self.key.append_option(key);
        self.value.append_option(value);
        let mut size = key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len);
        for (k, v) in headers {
            let text = std::str::from_utf8(k);
            self.header_key.append_value(String::from_utf8_lossy(k));
            self.header_value.append_option(*v);
            if let Some(lossless) = self.lossless.as_mut() {
                // The bytes only when the text column cannot hold them.
                lossless.header_key_bytes.append_option(text.is_err().then_some(*k));
            }
            size += k.len() + v.map_or(0, <[u8]>::len);
        }
        let last = *self.header_offsets.last().expect("starts with 0");
        self.header_offsets.push(last + headers.len() as i32);
        self.batch_base_offset.push(header.base_offset);
        self.producer_id.push(header.producer_id);
        self.producer_epoch.push(i32::from(header.producer_epoch));
        self.base_sequence.push(header.base_sequence);
        self.compression.append_value(compression_name(header.compression()));
        self.is_transactional.push(header.is_transactional());
        self.partition_leader_epoch.push(header.partition_leader_epoch);
        if let Some(lossless) = self.lossless.as_mut() {
            lossless.push(header, timestamp_delta, record_attributes);
        }
        self.bytes += size + 64;
    }

    /// The rows held as one Arrow record batch (`None` when empty); the converter is empty afterwards.
    ///
    /// # Errors
    /// [`TieringError::Arrow`] if the arrays do not match the schema (a bug).
    pub fn finish(&mut self) -> Result<Option<RecordBatch>> {
        if self.is_empty() {
            return Ok(None);
        }
        let n = self.len();
        let fields = self.schema.fields();
        let DataType::List(element) = fields[6].data_type() else {
            unreachable!("headers is a list")
        };
        let DataType::Struct(header_fields) = element.data_type() else {
            unreachable!("of structs")
        };
        let mut header_columns = vec![
            Arc::new(self.header_key.finish()) as ArrayRef,
            Arc::new(self.header_value.finish()),
        ];
        if let Some(lossless) = self.lossless.as_mut() {
            header_columns.push(Arc::new(lossless.header_key_bytes.finish()));
        }
        let header_struct = StructArray::try_new(header_fields.clone(), header_columns, None)?;
        let offsets = std::mem::replace(&mut self.header_offsets, vec![0]);
        let headers = ListArray::try_new(
            element.clone(),
            OffsetBuffer::new(offsets.into()),
            Arc::new(header_struct),
            None,
        )?;
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(vec![self.partition; n])),
            Arc::new(Int64Array::from(std::mem::take(&mut self.offset))),
            Arc::new(
                TimestampMicrosecondArray::from(std::mem::take(&mut self.timestamp))
                    .with_timezone("+00:00"),
            ),
            Arc::new(self.timestamp_type.finish()),
            Arc::new(self.key.finish()),
            Arc::new(self.value.finish()),
            Arc::new(headers),
            Arc::new(Int64Array::from(std::mem::take(&mut self.batch_base_offset))),
            Arc::new(Int64Array::from(std::mem::take(&mut self.producer_id))),
            Arc::new(Int32Array::from(std::mem::take(&mut self.producer_epoch))),
            Arc::new(Int32Array::from(std::mem::take(&mut self.base_sequence))),
            Arc::new(self.compression.finish()),
            Arc::new(BooleanArray::from(std::mem::take(&mut self.is_transactional))),
            Arc::new(Int32Array::from(std::mem::take(&mut self.partition_leader_epoch))),
        ];
        if let Some(lossless) = self.lossless.as_mut() {
            columns.extend(lossless.finish());
        }
        if let Some(log) = self.log.as_mut() {
            columns.extend(log.finish());
        }
        self.bytes = 0;
        Ok(Some(RecordBatch::try_new(self.schema.clone(), columns)?))
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type, TimestampMicrosecondType};
    use arrow_array::Array;

    use floe_storage::{ScannedBatch, SegmentBatchReader};

    use super::*;
    use crate::test_util::*;

    /// Reads every sealed segment of `log` from `from` into Arrow batches of at most `max_rows`.
    fn convert_all(
        log: &floe_storage::PartitionLog,
        from: i64,
        max_rows: usize,
    ) -> (Vec<RecordBatch>, usize) {
        let mut conv = ArrowConverter::new(log.partition(), max_rows, usize::MAX);
        let mut out = Vec::new();
        let mut control = 0;
        for seg in log.sealed_segments() {
            let mut reader = SegmentBatchReader::open(&seg.path, 0, seg.size_bytes).unwrap();
            loop {
                let header = match reader.next_batch(true).unwrap() {
                    ScannedBatch::Batch { header, .. } => header,
                    ScannedBatch::End => break,
                    other => panic!("{other:?}"),
                };
                let bytes = Bytes::copy_from_slice(reader.batch_bytes().unwrap());
                match conv.push(&header, bytes, from) {
                    Pushed::Rows(_) => {}
                    Pushed::Control => control += 1,
                    other => panic!("{other:?}"),
                }
                if conv.is_full() {
                    out.extend(conv.finish().unwrap());
                }
            }
        }
        out.extend(conv.finish().unwrap());
        (out, control)
    }

    fn rows(batches: &[RecordBatch]) -> Vec<(i32, i64, TestRecord)> {
        let mut v = Vec::new();
        for b in batches {
            let part = b.column(0).as_primitive::<Int32Type>();
            let off = b.column(1).as_primitive::<Int64Type>();
            let ts = b.column(2).as_primitive::<TimestampMicrosecondType>();
            let key = b.column(4).as_binary::<i64>();
            let value = b.column(5).as_binary::<i64>();
            let headers = b.column(6).as_list::<i32>();
            for i in 0..b.num_rows() {
                let h = headers.value(i);
                let h = h.as_struct();
                let hk = h.column(0).as_string::<i32>();
                let hv = h.column(1).as_binary::<i64>();
                let headers = (0..h.len())
                    .map(|j| {
                        (hk.value(j).to_string(), hv.is_valid(j).then(|| hv.value(j).to_vec()))
                    })
                    .collect();
                v.push((
                    part.value(i),
                    off.value(i),
                    TestRecord {
                        key: key.is_valid(i).then(|| key.value(i).to_vec()),
                        value: value.is_valid(i).then(|| value.value(i).to_vec()),
                        headers,
                        timestamp: ts.value(i) / 1000,
                    },
                ));
            }
        }
        v
    }

    #[test]
    fn every_codec_null_keys_values_and_headers_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let log = open_log(dir.path(), 3, &[("segment.bytes", "2000")]);
        let produced = fill(&log, 0, 200);
        log.roll_now().unwrap();
        assert!(log.sealed_segments().len() > 3);
        let (batches, control) = convert_all(&log, 0, 64);
        assert_eq!(control, 0);
        assert!(batches.iter().all(|b| b.num_rows() <= 64 + 5), "bounded batches");
        let got = rows(&batches);
        assert_eq!(got.len(), 200);
        for (i, (p, o, r)) in got.iter().enumerate() {
            assert_eq!((*p, *o), (3, i as i64));
            assert_eq!(r, &produced[i], "offset {i}");
        }
        // Batch-level columns.
        let b = &batches[0];
        assert_eq!(b.column(3).as_string::<i32>().value(0), "CreateTime");
        let codecs: std::collections::BTreeSet<String> = batches
            .iter()
            .flat_map(|b| {
                let c = b.column(11).as_string::<i32>();
                (0..c.len()).map(|i| c.value(i).to_string()).collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(codecs.len(), 5, "{codecs:?}");
        let bases: Vec<i64> =
            b.column(7).as_primitive::<Int64Type>().values().iter().take(12).copied().collect();
        assert_eq!(bases, [0, 0, 0, 0, 0, 5, 5, 5, 5, 5, 10, 10], "batch base offsets");
        assert_eq!(b.column(8).as_primitive::<Int64Type>().value(0), -1);
        assert!(!b.column(12).as_boolean().value(0));
    }

    #[test]
    fn records_below_the_start_offset_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let log = open_log(dir.path(), 0, &[]);
        fill(&log, 0, 20);
        log.roll_now().unwrap();
        let (batches, _) = convert_all(&log, 7, 1000);
        let offsets: Vec<i64> = rows(&batches).iter().map(|r| r.1).collect();
        assert_eq!(offsets, (7..20).collect::<Vec<_>>());
    }

    #[test]
    fn control_batches_are_skipped_and_garbage_is_reported() {
        let mut bytes =
            encode(&[record(1)], floe_protocol::kafka_protocol::records::Compression::None);
        let header = RecordBatchHeader::parse(&bytes).unwrap();
        let mut conv = ArrowConverter::new(0, 10, usize::MAX);
        // Attributes bit 5: control. (The CRC is not checked here; the log checked it on append.)
        let mut control = header;
        control.attributes |= 1 << 5;
        assert_eq!(conv.push(&control, Bytes::from(bytes.clone()), 0), Pushed::Control);
        // Damage the records: the decoder refuses, nothing is added.
        let n = bytes.len();
        bytes[n - 4..].copy_from_slice(&[0xff; 4]);
        match conv.push(&header, Bytes::from(bytes), 0) {
            Pushed::Undecodable { base_offset: 0, last_offset: 0, .. } => {}
            other => panic!("{other:?}"),
        }
        assert!(conv.is_empty());
    }

    #[test]
    fn duplicate_header_keys_are_kept_in_order() {
        use floe_protocol::records::{write_batch, write_record, BatchFields, RecordParts};
        let mut plain = Vec::new();
        let headers: [HeaderView<'_>; 3] =
            [(b"h", Some(b"1")), (b"\xffx", None), (b"h", Some(b"2"))];
        let parts = RecordParts {
            attributes: 0,
            timestamp_delta: 2,
            offset_delta: 0,
            key: Some(b"k"),
            value: Some(b""),
        };
        write_record(&mut plain, &parts, headers.into_iter());
        let fields = BatchFields {
            base_offset: 9,
            partition_leader_epoch: 0,
            attributes: 0,
            last_offset_delta: 0,
            base_timestamp: 1_000,
            max_timestamp: 1_002,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records_count: 1,
        };
        let mut batch = Vec::new();
        write_batch(&mut batch, &fields, &plain);
        let header = RecordBatchHeader::parse(&batch).unwrap();
        let mut conv = ArrowConverter::new(0, 10, usize::MAX);
        assert_eq!(conv.push(&header, Bytes::from(batch), 0), Pushed::Rows(1));
        let got = rows(&conv.finish().unwrap().into_iter().collect::<Vec<_>>());
        let r = &got[0].2;
        assert_eq!((got[0].1, r.timestamp, r.value.as_deref()), (9, 1_002, Some(&b""[..])));
        let want = vec![
            ("h".to_string(), Some(b"1".to_vec())),
            ("\u{fffd}x".to_string(), None),
            ("h".to_string(), Some(b"2".to_vec())),
        ];
        assert_eq!(r.headers, want);
    }

    /// Conversion throughput (not a criterion bench yet): `cargo test -p floe-tiering -- --ignored --nocapture throughput`.
    /// Segment bytes in (1 KiB incompressible values, lz4, batches of 5 records) → Arrow; excludes Parquet writing.
    /// Measured 2026-11-30 (debug build of this crate, dependencies at opt-level 2, shared 2-core machine): see the report.
    #[test]
    #[ignore]
    fn conversion_throughput() {
        let dir = tempfile::tempdir().unwrap();
        let log = open_log(dir.path(), 0, &[("segment.bytes", "67108864")]);
        // Incompressible values, so segment bytes ≈ value bytes.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut value = || {
            (0..1024)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect::<Vec<u8>>()
        };
        for b in 0..8000 {
            let recs: Vec<TestRecord> = (0..5)
                .map(|i| TestRecord {
                    key: Some(format!("k{b}-{i}").into_bytes()),
                    value: Some(value()),
                    headers: vec![],
                    timestamp: 1,
                })
                .collect();
            log.append(
                &mut encode(&recs, floe_protocol::kafka_protocol::records::Compression::Lz4),
                0,
            )
            .unwrap();
        }
        log.roll_now().unwrap();
        let bytes: u64 = log.sealed_segments().iter().map(|s| s.size_bytes).sum();
        let raw = 40_000u64 * 1024;
        let start = std::time::Instant::now();
        let (batches, _) = convert_all(&log, 0, 8192);
        let took = start.elapsed().as_secs_f64();
        assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 40_000);
        println!("converted {bytes} segment bytes ({raw} value bytes) in {took:.3}s: {:.1} MiB/s of segment, {:.1} MiB/s of values, {:.0} records/s",
            bytes as f64 / took / 1048576.0, raw as f64 / took / 1048576.0, 40_000.0 / took);
    }
}
