//! The records inside a v2 record batch, read and written by Floe itself: the
//! log cleaner filters them, tiering turns them into table rows, and shared
//! mode rebuilds batches from those rows.
//!
//! `kafka_protocol`'s `RecordBatchDecoder` hands a record's headers out as a
//! map, so a header key sent twice keeps one value; Kafka keeps both, in
//! order. This module parses records without losing anything: every header
//! in order, keys as bytes (Kafka does not promise UTF-8 on the wire), null
//! kept apart from empty.
//!
//! Record layout (after the 61-byte batch header; varints are zigzag):
//! ```text
//! length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
//! keyLength varint (-1 = null) | key | valueLength varint (-1 = null) | value |
//! headerCount varint | (headerKeyLength varint | headerKey | headerValueLength varint | headerValue)…
//! ```

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Decompressor, Gzip, Lz4, Snappy, Zstd};

use crate::record_batch::{CompressionType, RecordBatchHeader, RECORD_BATCH_OVERHEAD};

/// Why records could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RecordsError(pub String);

impl From<&str> for RecordsError {
    fn from(s: &str) -> Self {
        Self(s.to_string())
    }
}

impl From<String> for RecordsError {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl From<RecordsError> for String {
    fn from(e: RecordsError) -> Self {
        e.0
    }
}

type Result<T> = std::result::Result<T, RecordsError>;

/// One record of a batch, borrowed from its (uncompressed) records section.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    /// Its offset (the batch's base offset plus its offset delta).
    pub offset: i64,
    /// Its offset delta.
    pub offset_delta: i32,
    /// Its timestamp as the record states it (the batch's base timestamp plus
    /// its delta); for LogAppendTime batches the batch's max timestamp applies.
    pub timestamp: i64,
    /// Its timestamp delta as stored.
    pub timestamp_delta: i64,
    /// Its attributes byte (unused by v2 clients: 0).
    pub attributes: u8,
    /// Its key; `None` for a null key.
    pub key: Option<&'a [u8]>,
    /// Its value; `None` for a null value (a tombstone).
    pub value: Option<&'a [u8]>,
    /// The whole record, its length prefix included.
    pub bytes: &'a [u8],
    /// The record from `keyLength` to its end.
    pub tail: &'a [u8],
    /// The record from `headerCount` to its end.
    headers: &'a [u8],
}

/// One header of a record: its key's bytes and its value (`None` for null).
pub type HeaderView<'a> = (&'a [u8], Option<&'a [u8]>);

impl<'a> RecordView<'a> {
    /// The record's headers in stored order, duplicate keys kept.
    ///
    /// # Errors
    /// A header that runs past the record, or a negative key length.
    pub fn headers(&self) -> Result<Vec<HeaderView<'a>>> {
        let buf = self.headers;
        let mut pos = 0;
        let count = read_varint(buf, &mut pos)?;
        let count =
            usize::try_from(count).map_err(|_| RecordsError(format!("header count {count}")))?;
        // Each header is at least two bytes: a hostile count cannot make us allocate much.
        let mut out = Vec::with_capacity(count.min(buf.len() / 2));
        for _ in 0..count {
            let key = read_bytes(buf, &mut pos)?.ok_or("a header key is null")?;
            let value = read_bytes(buf, &mut pos)?;
            out.push((key, value));
        }
        if pos != buf.len() {
            return Err(RecordsError(format!(
                "{} bytes after the record's headers",
                buf.len() - pos
            )));
        }
        Ok(out)
    }
}

/// Reads a zigzag varlong at `*pos`, moving `pos` past it.
///
/// # Errors
/// A varint running past `buf` or longer than 10 bytes.
pub fn read_varlong(buf: &[u8], pos: &mut usize) -> Result<i64> {
    let mut raw: u64 = 0;
    let mut shift = 0u32;
    loop {
        let b = *buf.get(*pos).ok_or("varint runs past the record")?;
        *pos += 1;
        raw |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 63 {
            return Err("varint longer than 10 bytes".into());
        }
    }
    Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

/// Reads a zigzag varint (a varlong that must fit 32 bits).
///
/// # Errors
/// As [`read_varlong`], or a value beyond 32 bits.
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Result<i32> {
    let v = read_varlong(buf, pos)?;
    i32::try_from(v).map_err(|_| RecordsError(format!("varint {v} is not a 32-bit value")))
}

/// Appends `v` as a zigzag varlong.
pub fn write_varlong(out: &mut Vec<u8>, v: i64) {
    let mut raw = ((v << 1) ^ (v >> 63)) as u64;
    while raw >= 0x80 {
        out.push((raw as u8) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

/// A length-prefixed field: `None` for length -1.
fn read_bytes<'a>(buf: &'a [u8], pos: &mut usize) -> Result<Option<&'a [u8]>> {
    let len = read_varint(buf, pos)?;
    if len < 0 {
        return Ok(None);
    }
    let end = pos.checked_add(len as usize).ok_or("field length overflows")?;
    let field = buf.get(*pos..end).ok_or("field runs past the record")?;
    *pos = end;
    Ok(Some(field))
}

fn write_bytes(out: &mut Vec<u8>, field: Option<&[u8]>) {
    match field {
        None => write_varlong(out, -1),
        Some(b) => {
            write_varlong(out, b.len() as i64);
            out.extend_from_slice(b);
        }
    }
}

/// Parses the records of an uncompressed records section of the batch `header` heads.
///
/// # Errors
/// A record running past the section, or a count other than `recordsCount`.
pub fn parse_records<'a>(
    records: &'a [u8],
    header: &RecordBatchHeader,
) -> Result<Vec<RecordView<'a>>> {
    // A record is at least 7 bytes: a hostile recordsCount cannot make us allocate much.
    let expected = usize::try_from(header.records_count).unwrap_or(0);
    let mut out = Vec::with_capacity(expected.min(records.len() / 7 + 1));
    let mut pos = 0;
    while pos < records.len() {
        let start = pos;
        let len = read_varint(records, &mut pos)?;
        let body_start = pos;
        let end = body_start
            .checked_add(usize::try_from(len).map_err(|_| "negative record length")?)
            .filter(|&e| e <= records.len())
            .ok_or("record runs past its batch")?;
        let body = &records[body_start..end];
        let mut p = 0;
        let attributes = *body.first().ok_or("empty record")?;
        p += 1;
        let timestamp_delta = read_varlong(body, &mut p)?;
        let offset_delta = read_varint(body, &mut p)?;
        let tail_start = p;
        let key = read_bytes(body, &mut p)?;
        let value = read_bytes(body, &mut p)?;
        out.push(RecordView {
            offset: header.base_offset + i64::from(offset_delta),
            offset_delta,
            timestamp: header.base_timestamp.wrapping_add(timestamp_delta),
            timestamp_delta,
            attributes,
            key,
            value,
            bytes: &records[start..end],
            tail: &body[tail_start..],
            headers: &body[p..],
        });
        pos = end;
    }
    if out.len() != usize::try_from(header.records_count).unwrap_or(usize::MAX) {
        return Err(RecordsError(format!(
            "{} records found, recordsCount says {}",
            out.len(),
            header.records_count
        )));
    }
    Ok(out)
}

/// The records section of `batch` (header included, as stored), decompressed if need be.
///
/// # Errors
/// A batch shorter than its header, an unknown codec or undecompressable bytes.
pub fn records_section(batch: &[u8], header: &RecordBatchHeader) -> Result<Bytes> {
    let raw = Bytes::copy_from_slice(
        batch.get(RECORD_BATCH_OVERHEAD..).ok_or("batch shorter than its header")?,
    );
    let fail = |e| RecordsError(format!("cannot decompress: {e}"));
    let take = |b: &mut Bytes| Ok(std::mem::take(b));
    match header.compression() {
        Some(CompressionType::None) => Ok(raw),
        Some(CompressionType::Gzip) => Gzip::decompress(&mut raw.clone(), take).map_err(fail),
        Some(CompressionType::Snappy) => Snappy::decompress(&mut raw.clone(), take).map_err(fail),
        Some(CompressionType::Lz4) => Lz4::decompress(&mut raw.clone(), take).map_err(fail),
        Some(CompressionType::Zstd) => Zstd::decompress(&mut raw.clone(), take).map_err(fail),
        None => Err("unknown codec".into()),
    }
}

/// Appends `records` (an uncompressed records section) to `out`, compressed with `codec`.
///
/// # Errors
/// The codec's failure.
pub fn compress(codec: CompressionType, records: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let fill = |b: &mut BytesMut| {
        b.put_slice(records);
        Ok(())
    };
    let mut buf = BytesMut::new();
    let result = match codec {
        CompressionType::None => {
            out.extend_from_slice(records);
            return Ok(());
        }
        CompressionType::Gzip => Gzip::compress(&mut buf, fill),
        CompressionType::Snappy => Snappy::compress(&mut buf, fill),
        CompressionType::Lz4 => return lz4_fast(records, out),
        CompressionType::Zstd => Zstd::compress(&mut buf, fill),
    };
    result.map_err(|e| RecordsError(format!("cannot compress: {e}")))?;
    out.extend_from_slice(&buf);
    Ok(())
}

/// An LZ4 frame in lz4's fast mode (level 0). kafka-protocol's compressor asks
/// for level 4, which liblz4 runs as its high-compression mode: several times the
/// CPU for a few percent of size. The broker compresses on read paths (batches
/// rebuilt from a shared topic's table, cleaned batches), where that CPU is the
/// cost (`docs/benchmarks.md`, shared-vs-copy). Otherwise the frame is built as
/// kafka-protocol's: independent blocks, the library's other defaults.
fn lz4_fast(records: &[u8], out: &mut Vec<u8>) -> Result<()> {
    use std::io::Write;
    let fail = |e: std::io::Error| RecordsError(format!("cannot compress: lz4: {e}"));
    let mut encoder = lz4::EncoderBuilder::new()
        .level(0)
        .block_mode(lz4::BlockMode::Independent)
        .build(out)
        .map_err(fail)?;
    encoder.write_all(records).map_err(fail)?;
    encoder.finish().1.map_err(fail)
}

/// What a record is made of, for [`write_record`].
#[derive(Debug, Clone, Copy)]
pub struct RecordParts<'a> {
    /// The attributes byte.
    pub attributes: u8,
    /// Timestamp minus the batch's base timestamp.
    pub timestamp_delta: i64,
    /// Offset minus the batch's base offset.
    pub offset_delta: i32,
    /// The key; `None` for null.
    pub key: Option<&'a [u8]>,
    /// The value; `None` for null.
    pub value: Option<&'a [u8]>,
}

/// Appends one record, length prefix included, to an uncompressed records section.
pub fn write_record<'h>(
    out: &mut Vec<u8>,
    parts: &RecordParts<'_>,
    headers: impl ExactSizeIterator<Item = HeaderView<'h>>,
) {
    let mut body = Vec::with_capacity(
        16 + parts.key.map_or(0, <[u8]>::len) + parts.value.map_or(0, <[u8]>::len),
    );
    body.push(parts.attributes);
    write_varlong(&mut body, parts.timestamp_delta);
    write_varlong(&mut body, i64::from(parts.offset_delta));
    write_bytes(&mut body, parts.key);
    write_bytes(&mut body, parts.value);
    write_varlong(&mut body, headers.len() as i64);
    for (k, v) in headers {
        write_bytes(&mut body, Some(k));
        write_bytes(&mut body, v);
    }
    write_varlong(out, body.len() as i64);
    out.extend_from_slice(&body);
}

/// The header fields of a batch to write with [`write_batch`]; `batchLength`,
/// magic (2) and the CRC are derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchFields {
    /// First offset.
    pub base_offset: i64,
    /// The partition leader epoch.
    pub partition_leader_epoch: i32,
    /// The attributes as stored (codec bits included).
    pub attributes: i16,
    /// Last offset minus the base offset.
    pub last_offset_delta: i32,
    /// The base timestamp.
    pub base_timestamp: i64,
    /// The max timestamp.
    pub max_timestamp: i64,
    /// Producer id (-1 without).
    pub producer_id: i64,
    /// Producer epoch (-1 without).
    pub producer_epoch: i16,
    /// Base sequence (-1 without).
    pub base_sequence: i32,
    /// Records in the batch.
    pub records_count: i32,
}

impl BatchFields {
    /// The fields of a stored batch's header.
    pub fn of(header: &RecordBatchHeader) -> Self {
        Self {
            base_offset: header.base_offset,
            partition_leader_epoch: header.partition_leader_epoch,
            attributes: header.attributes,
            last_offset_delta: header.last_offset_delta,
            base_timestamp: header.base_timestamp,
            max_timestamp: header.max_timestamp,
            producer_id: header.producer_id,
            producer_epoch: header.producer_epoch,
            base_sequence: header.base_sequence,
            records_count: header.records_count,
        }
    }
}

/// Appends a v2 batch: the 61-byte header of `fields` followed by `records`
/// (already compressed as `fields.attributes` says), the CRC-32C filled in.
pub fn write_batch(out: &mut Vec<u8>, fields: &BatchFields, records: &[u8]) {
    let start = out.len();
    out.extend_from_slice(&fields.base_offset.to_be_bytes());
    let batch_length = (RECORD_BATCH_OVERHEAD - 12 + records.len()) as i32;
    out.extend_from_slice(&batch_length.to_be_bytes());
    out.extend_from_slice(&fields.partition_leader_epoch.to_be_bytes());
    out.push(2); // magic
    out.extend_from_slice(&[0; 4]); // CRC, below
    out.extend_from_slice(&fields.attributes.to_be_bytes());
    out.extend_from_slice(&fields.last_offset_delta.to_be_bytes());
    out.extend_from_slice(&fields.base_timestamp.to_be_bytes());
    out.extend_from_slice(&fields.max_timestamp.to_be_bytes());
    out.extend_from_slice(&fields.producer_id.to_be_bytes());
    out.extend_from_slice(&fields.producer_epoch.to_be_bytes());
    out.extend_from_slice(&fields.base_sequence.to_be_bytes());
    out.extend_from_slice(&fields.records_count.to_be_bytes());
    out.extend_from_slice(records);
    let crc = crc32c::crc32c(&out[start + 21..]);
    out[start + 17..start + 21].copy_from_slice(&crc.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record_batch::verify_crc;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType as KTs,
    };

    fn encode(records: &[Record], compression: Compression) -> Vec<u8> {
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            records.iter(),
            &RecordEncodeOptions { version: 2, compression },
        )
        .expect("encodes");
        buf.to_vec()
    }

    fn record(
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) -> Record {
        Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 7,
            producer_id: 9,
            producer_epoch: 2,
            timestamp_type: KTs::Creation,
            offset,
            sequence: offset as i32,
            timestamp: 5_000 + offset * 3,
            key: key.map(Bytes::copy_from_slice),
            value: value.map(Bytes::copy_from_slice),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string().into(), v.map(Bytes::copy_from_slice)))
                .collect(),
            delete_horizon: false,
        }
    }

    /// A batch whose second record has the header key `h` twice, written by
    /// hand (kafka_protocol's encoder takes a map and cannot write it).
    fn batch_with_duplicate_headers(codec: CompressionType) -> Vec<u8> {
        let mut plain = Vec::new();
        let a: [HeaderView<'_>; 0] = [];
        write_record(
            &mut plain,
            &RecordParts {
                attributes: 0,
                timestamp_delta: 0,
                offset_delta: 0,
                key: None,
                value: Some(b""),
            },
            a.into_iter(),
        );
        let hs: [HeaderView<'_>; 3] = [(b"h", Some(b"1")), (b"\xff\xfe", None), (b"h", Some(b"2"))];
        write_record(
            &mut plain,
            &RecordParts {
                attributes: 0,
                timestamp_delta: 4,
                offset_delta: 1,
                key: Some(b"k"),
                value: None,
            },
            hs.into_iter(),
        );
        let mut body = Vec::new();
        compress(codec, &plain, &mut body).expect("compresses");
        let fields = BatchFields {
            base_offset: 40,
            partition_leader_epoch: 3,
            attributes: i16::from(codec.id()),
            last_offset_delta: 1,
            base_timestamp: 1_000,
            max_timestamp: 1_004,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records_count: 2,
        };
        let mut out = Vec::new();
        write_batch(&mut out, &fields, &body);
        out
    }

    #[test]
    fn duplicate_and_non_utf8_header_keys_survive_every_codec() {
        for codec in [
            CompressionType::None,
            CompressionType::Gzip,
            CompressionType::Snappy,
            CompressionType::Lz4,
            CompressionType::Zstd,
        ] {
            let batch = batch_with_duplicate_headers(codec);
            verify_crc(&batch, 0).expect("CRC");
            let header = RecordBatchHeader::parse(&batch).expect("header");
            assert_eq!(header.compression(), Some(codec));
            let section = records_section(&batch, &header).expect("section");
            let records = parse_records(&section, &header).expect("records");
            assert_eq!(records.len(), 2);
            assert_eq!(
                (records[0].key, records[0].value),
                (None, Some(&b""[..])),
                "null key, empty value"
            );
            assert!(records[0].headers().expect("headers").is_empty());
            let r = records[1];
            assert_eq!((r.offset, r.timestamp, r.key, r.value), (41, 1_004, Some(&b"k"[..]), None));
            let h = r.headers().expect("headers");
            assert_eq!(
                h,
                vec![
                    (&b"h"[..], Some(&b"1"[..])),
                    (&b"\xff\xfe"[..], None),
                    (&b"h"[..], Some(&b"2"[..]))
                ]
            );
        }
    }

    #[test]
    fn records_rewritten_from_their_parts_are_byte_identical() {
        let recs = vec![
            record(0, Some(b"a"), Some(b"1"), &[("x", Some(b"y"))]),
            record(1, None, None, &[]),
            record(2, Some(b""), Some(&[0u8; 300]), &[("e", None)]),
        ];
        let batch = encode(&recs, Compression::None);
        let header = RecordBatchHeader::parse(&batch).expect("header");
        let section = records_section(&batch, &header).expect("section");
        let mut plain = Vec::new();
        for r in parse_records(&section, &header).expect("records") {
            let parts = RecordParts {
                attributes: r.attributes,
                timestamp_delta: r.timestamp_delta,
                offset_delta: r.offset_delta,
                key: r.key,
                value: r.value,
            };
            write_record(&mut plain, &parts, r.headers().expect("headers").into_iter());
        }
        let mut out = Vec::new();
        write_batch(&mut out, &BatchFields::of(&header), &plain);
        assert_eq!(out, batch);
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        let batch =
            encode(&[record(0, Some(b"k"), Some(b"v"), &[("h", Some(b"v"))])], Compression::None);
        let header = RecordBatchHeader::parse(&batch).expect("header");
        let section = records_section(&batch, &header).expect("section");
        for cut in 0..section.len() {
            let short = &section[..cut];
            if let Ok(rs) = parse_records(short, &header) {
                // Only a cut that still parses as whole records (none here) could pass.
                assert!(rs.iter().all(|r| r.headers().is_ok()), "cut {cut}");
            }
        }
        let mut bad = section.to_vec();
        let n = bad.len();
        assert_eq!(bad[n - 2], 2, "the header value's length, 1");
        bad[n - 2] = 8; // now 4: it runs past the record
        let rs = parse_records(&bad, &header).expect("the record itself still parses");
        assert!(rs[0].headers().is_err());
        let mut lying = header;
        lying.records_count = 1_000_000_000;
        assert!(parse_records(&section, &lying).is_err());
    }
}
