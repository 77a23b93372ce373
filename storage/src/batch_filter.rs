//! Record-level filtering of one stored record batch, for the log cleaner
//! (Kafka's `MemoryRecords.filterTo`): the records a predicate keeps are
//! written out as a batch with the original's offset range, producer id,
//! epoch, base sequence, partition leader epoch, codec and timestamp type.
//!
//! What Kafka promises and this keeps:
//! - **Offsets never change.** The rebuilt batch keeps `baseOffset` and
//!   `lastOffsetDelta` (so the producer's last sequence survives), and each
//!   kept record its offset delta: consumers see gaps, as on any compacted topic.
//! - **A batch whose records all go** disappears, unless the caller asks to
//!   retain it empty (`recordsCount` 0, codec none, `baseTimestamp` =
//!   `maxTimestamp`, as Kafka's `writeEmptyHeader`): the last batch of an
//!   active producer, or the last batch of a cleaned segment group.
//! - **The delete horizon (KIP-534).** The first clean that keeps a tombstone
//!   in a batch without a horizon stamps one: attributes bit 6 set and
//!   `baseTimestamp` = the horizon, the records' timestamp deltas re-encoded
//!   against it. Later cleans drop the tombstones once the horizon has passed.
//! - **Untouched batches stay byte for byte**: when every record is kept and
//!   no horizon is stamped, the original bytes are copied.
//!
//! Uncompressed records are copied as they are (their deltas stay valid, as
//! `baseTimestamp` is kept when no horizon is stamped); compressed batches are
//! decompressed and recompressed with their own codec. The CRC-32C is computed
//! over the rebuilt bytes.
//!
//! Record layout (v2, after the 61-byte batch header; varints are zigzag):
//! ```text
//! length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
//! keyLength varint (-1 = null) | key | valueLength varint (-1 = null) | value |
//! headerCount varint | headers…
//! ```

use bytes::{BufMut, Bytes, BytesMut};
use floe_protocol::kafka_protocol::compression::{
    Compressor, Decompressor, Gzip, Lz4, Snappy, Zstd,
};
use floe_protocol::record_batch::{
    CompressionType, RecordBatchHeader, TimestampType, DELETE_HORIZON_BIT, RECORD_BATCH_OVERHEAD,
};

/// One record of a batch, as the cleaner judges it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordView<'a> {
    /// Its offset.
    pub(crate) offset: i64,
    /// Its timestamp (CreateTime; for LogAppendTime batches the batch's time applies).
    pub(crate) timestamp: i64,
    /// Its key; `None` for a null key.
    pub(crate) key: Option<&'a [u8]>,
    /// `false` for a tombstone (a null value).
    pub(crate) has_value: bool,
    /// The record's attributes byte.
    attributes: u8,
    /// The whole record, its length prefix included.
    bytes: &'a [u8],
    /// The record from `keyLength` to its end.
    tail: &'a [u8],
}

/// What [`filter_batch`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Filtered {
    /// Records in the source batch.
    pub(crate) records_read: usize,
    /// Records written out.
    pub(crate) records_kept: usize,
    /// Bytes appended to the output (0 when the batch was dropped).
    pub(crate) bytes_written: usize,
    /// Largest timestamp of the written batch (-1 when dropped).
    pub(crate) max_timestamp: i64,
    /// The delete horizon of the written batch when it holds tombstones: a
    /// later clean past it has tombstones to remove.
    pub(crate) delete_horizon: Option<i64>,
}

fn read_varlong(buf: &[u8], pos: &mut usize) -> Result<i64, String> {
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

fn read_varint(buf: &[u8], pos: &mut usize) -> Result<i32, String> {
    let v = read_varlong(buf, pos)?;
    i32::try_from(v).map_err(|_| format!("varint {v} is not a 32-bit value"))
}

fn write_varlong(out: &mut Vec<u8>, v: i64) {
    let mut raw = ((v << 1) ^ (v >> 63)) as u64;
    while raw >= 0x80 {
        out.push((raw as u8) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

/// A length-prefixed field: `None` for length -1.
fn read_bytes<'a>(buf: &'a [u8], pos: &mut usize) -> Result<Option<&'a [u8]>, String> {
    let len = read_varint(buf, pos)?;
    if len < 0 {
        return Ok(None);
    }
    let end = *pos + len as usize;
    let field = buf.get(*pos..end).ok_or("field runs past the record")?;
    *pos = end;
    Ok(Some(field))
}

/// Parses the records of an uncompressed records section.
pub(crate) fn parse_records<'a>(
    records: &'a [u8],
    header: &RecordBatchHeader,
) -> Result<Vec<RecordView<'a>>, String> {
    let mut out = Vec::with_capacity(usize::try_from(header.records_count).unwrap_or(0));
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
            timestamp: header.base_timestamp.wrapping_add(timestamp_delta),
            key,
            has_value: value.is_some(),
            attributes,
            bytes: &records[start..end],
            tail: &body[tail_start..],
        });
        pos = end;
    }
    if out.len() != usize::try_from(header.records_count).unwrap_or(usize::MAX) {
        return Err(format!(
            "{} records found, recordsCount says {}",
            out.len(),
            header.records_count
        ));
    }
    Ok(out)
}

/// The records section of `batch`, decompressed if need be.
pub(crate) fn records_section(batch: &[u8], header: &RecordBatchHeader) -> Result<Bytes, String> {
    let raw = Bytes::copy_from_slice(&batch[RECORD_BATCH_OVERHEAD..]);
    let fail = |e| format!("cannot decompress: {e}");
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

fn compress(codec: CompressionType, records: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
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
        CompressionType::Lz4 => Lz4::compress(&mut buf, fill),
        CompressionType::Zstd => Zstd::compress(&mut buf, fill),
    };
    result.map_err(|e| format!("cannot compress: {e}"))?;
    out.extend_from_slice(&buf);
    Ok(())
}

/// The 61-byte header of a rebuilt batch followed by `records`, CRC filled in.
#[allow(clippy::too_many_arguments)]
fn write_batch(
    out: &mut Vec<u8>,
    header: &RecordBatchHeader,
    attributes: i16,
    base_timestamp: i64,
    max_timestamp: i64,
    count: i32,
    records: &[u8],
) {
    let start = out.len();
    out.extend_from_slice(&header.base_offset.to_be_bytes());
    let batch_length = (RECORD_BATCH_OVERHEAD - 12 + records.len()) as i32;
    out.extend_from_slice(&batch_length.to_be_bytes());
    out.extend_from_slice(&header.partition_leader_epoch.to_be_bytes());
    out.push(header.magic as u8);
    out.extend_from_slice(&[0; 4]); // CRC, below
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&header.last_offset_delta.to_be_bytes());
    out.extend_from_slice(&base_timestamp.to_be_bytes());
    out.extend_from_slice(&max_timestamp.to_be_bytes());
    out.extend_from_slice(&header.producer_id.to_be_bytes());
    out.extend_from_slice(&header.producer_epoch.to_be_bytes());
    out.extend_from_slice(&header.base_sequence.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(records);
    let crc = crc32c::crc32c(&out[start + 21..]);
    out[start + 17..start + 21].copy_from_slice(&crc.to_be_bytes());
}

/// Writes to `out` what is left of `batch` (whole, CRC-checked, `header` its
/// header) once `keep` has judged each record: the original bytes if every
/// record stays and no horizon is stamped, a rebuilt batch if some go, an
/// empty batch if all go and `retain_empty`, nothing otherwise. A kept
/// tombstone in a batch without a delete horizon gets `new_horizon` stamped,
/// and so does a kept batch when `stamp_horizon` says so (a transaction
/// marker that may go once the horizon has passed).
///
/// # Errors
/// A description of records that cannot be parsed, decompressed or recompressed;
/// nothing is written then.
pub(crate) fn filter_batch(
    batch: &[u8],
    header: &RecordBatchHeader,
    retain_empty: bool,
    new_horizon: i64,
    marker_horizon: bool,
    mut keep: impl FnMut(&RecordView<'_>) -> bool,
    out: &mut Vec<u8>,
) -> Result<Filtered, String> {
    let section = records_section(batch, header)?;
    let records = parse_records(&section, header)?;
    let kept: Vec<&RecordView<'_>> = records.iter().filter(|r| keep(r)).collect();
    let log_append_time = header.timestamp_type() == TimestampType::LogAppendTime;
    let needs_horizon =
        (marker_horizon && !kept.is_empty()) || kept.iter().any(|r| !r.has_value);
    let stamp_horizon = !header.has_delete_horizon() && needs_horizon;
    let mut filtered = Filtered {
        records_read: records.len(),
        records_kept: kept.len(),
        bytes_written: 0,
        max_timestamp: -1,
        delete_horizon: None,
    };
    if needs_horizon {
        filtered.delete_horizon = Some(if stamp_horizon {
            new_horizon
        } else {
            header.base_timestamp
        });
    }
    let start = out.len();
    if kept.len() == records.len() && !stamp_horizon {
        out.extend_from_slice(batch);
        filtered.max_timestamp = header.max_timestamp;
    } else if kept.is_empty() {
        if !retain_empty {
            return Ok(filtered);
        }
        // Kafka's `writeEmptyHeader`: no codec, no horizon, the batch's max timestamp.
        let attributes = header.attributes & !(0x07 | DELETE_HORIZON_BIT);
        write_batch(
            out,
            header,
            attributes,
            header.max_timestamp,
            header.max_timestamp,
            0,
            &[],
        );
        filtered.max_timestamp = header.max_timestamp;
    } else {
        let base_timestamp = if stamp_horizon {
            new_horizon
        } else {
            header.base_timestamp
        };
        let mut plain = Vec::with_capacity(section.len());
        let mut scratch = Vec::new();
        for r in &kept {
            if stamp_horizon {
                scratch.clear();
                scratch.push(r.attributes);
                write_varlong(&mut scratch, r.timestamp.wrapping_sub(base_timestamp));
                write_varlong(&mut scratch, r.offset - header.base_offset);
                scratch.extend_from_slice(r.tail);
                write_varlong(&mut plain, scratch.len() as i64);
                plain.extend_from_slice(&scratch);
            } else {
                plain.extend_from_slice(r.bytes);
            }
        }
        let max_timestamp = if log_append_time {
            header.max_timestamp
        } else {
            kept.iter()
                .map(|r| r.timestamp)
                .max()
                .unwrap_or(header.max_timestamp)
        };
        let codec = header.compression().ok_or("unknown codec")?;
        let mut body = Vec::with_capacity(plain.len());
        compress(codec, &plain, &mut body)?;
        let attributes = if stamp_horizon {
            header.attributes | DELETE_HORIZON_BIT
        } else {
            header.attributes
        };
        write_batch(
            out,
            header,
            attributes,
            base_timestamp,
            max_timestamp,
            kept.len() as i32,
            &body,
        );
        filtered.max_timestamp = max_timestamp;
    }
    filtered.bytes_written = out.len() - start;
    Ok(filtered)
}

/// The index (counting from 0 over all records of `records`) of the first
/// record without a key, outside control batches: a compacted topic refuses
/// it (Kafka's `LogValidator`: "Compacted topic cannot accept message without
/// key"). Decompresses compressed batches; call it only for compacted topics.
///
/// # Errors
/// A description of records that cannot be parsed or decompressed.
pub fn keyless_record_index(records: &[u8]) -> Result<Option<usize>, String> {
    let mut index = 0;
    for b in floe_protocol::record_batch::BatchIter::new(records) {
        let b = b.map_err(|e| e.to_string())?;
        let batch = records
            .get(b.position..b.position + b.header.total_size())
            .ok_or("batch runs past the buffer")?;
        if b.header.is_control() {
            index += usize::try_from(b.header.records_count).unwrap_or(0);
            continue;
        }
        let section = records_section(batch, &b.header)?;
        for r in parse_records(&section, &b.header)? {
            if r.key.is_none() {
                return Ok(Some(index));
            }
            index += 1;
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_protocol::kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType as KTs,
    };
    use floe_protocol::record_batch::verify_crc;

    fn record(offset: i64, key: Option<&str>, value: Option<&str>) -> Record {
        Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 3,
            producer_id: 42,
            producer_epoch: 1,
            timestamp_type: KTs::Creation,
            offset,
            sequence: 10 + offset as i32,
            timestamp: 1_000 + offset,
            key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value: value.map(|v| Bytes::copy_from_slice(v.as_bytes())),
            headers: [("h".into(), Some(Bytes::from_static(b"v")))]
                .into_iter()
                .collect(),
            delete_horizon: false,
        }
    }

    fn encode(records: &[Record], compression: Compression) -> Vec<u8> {
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            records.iter(),
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
        )
        .unwrap();
        buf.to_vec()
    }

    fn decode(batch: &[u8]) -> Vec<Record> {
        RecordBatchDecoder::decode(&mut Bytes::copy_from_slice(batch))
            .unwrap()
            .records
    }

    fn five() -> Vec<Record> {
        vec![
            record(100, Some("a"), Some("1")),
            record(101, Some("b"), Some("2")),
            record(102, Some("a"), Some("3")),
            record(103, Some("c"), None),
            record(104, Some("b"), Some("5")),
        ]
    }

    #[test]
    fn kept_records_keep_offsets_and_the_batch_its_range() {
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Lz4,
            Compression::Zstd,
            Compression::Snappy,
        ] {
            let batch = encode(&five(), compression);
            let header = RecordBatchHeader::parse(&batch).unwrap();
            let mut out = Vec::new();
            let f = filter_batch(
                &batch,
                &header,
                false,
                9_999,
                false,
                |r| r.offset == 102 || r.offset == 104,
                &mut out,
            )
            .unwrap();
            assert_eq!(
                (f.records_read, f.records_kept, f.bytes_written),
                (5, 2, out.len())
            );
            verify_crc(&out, 0).unwrap();
            let h = RecordBatchHeader::parse(&out).unwrap();
            h.check_sanity_in_log(0).unwrap();
            assert_eq!(
                (h.base_offset, h.last_offset(), h.records_count),
                (100, 104, 2),
                "{compression:?}"
            );
            assert_eq!(
                (
                    h.producer_id,
                    h.producer_epoch,
                    h.base_sequence,
                    h.partition_leader_epoch
                ),
                (42, 1, 110, 3)
            );
            assert_eq!(h.compression(), header.compression());
            assert!(!h.has_delete_horizon());
            assert_eq!(h.max_timestamp, 1_104);
            let got = decode(&out);
            let want: Vec<Record> = five()
                .into_iter()
                .filter(|r| r.offset == 102 || r.offset == 104)
                .collect();
            assert_eq!(got.len(), 2);
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(
                    (g.offset, g.timestamp, &g.key, &g.value, &g.headers),
                    (w.offset, w.timestamp, &w.key, &w.value, &w.headers)
                );
            }
        }
    }

    #[test]
    fn a_kept_tombstone_gets_a_delete_horizon_once() {
        let batch = encode(&five(), Compression::None);
        let header = RecordBatchHeader::parse(&batch).unwrap();
        let mut out = Vec::new();
        filter_batch(
            &batch,
            &header,
            false,
            50_000,
            false,
            |r| r.offset >= 103,
            &mut out,
        )
        .unwrap();
        let h = RecordBatchHeader::parse(&out).unwrap();
        assert!(h.has_delete_horizon());
        assert_eq!(h.base_timestamp, 50_000);
        let got = decode(&out);
        assert_eq!(
            got.iter()
                .map(|r| (r.offset, r.timestamp))
                .collect::<Vec<_>>(),
            vec![(103, 1_103), (104, 1_104)]
        );
        assert!(got[0].value.is_none());
        // A second clean keeping everything copies the stamped batch as it is.
        let mut again = Vec::new();
        filter_batch(&out, &h, false, 99_999, false, |_| true, &mut again).unwrap();
        assert_eq!(again, out);
    }

    #[test]
    fn untouched_batches_are_copied_and_emptied_ones_dropped_or_kept_empty() {
        let batch = encode(&five()[..3], Compression::None);
        let header = RecordBatchHeader::parse(&batch).unwrap();
        let mut out = Vec::new();
        filter_batch(&batch, &header, false, 0, false, |_| true, &mut out).unwrap();
        assert_eq!(out, batch);
        out.clear();
        let f = filter_batch(&batch, &header, false, 0, false, |_| false, &mut out).unwrap();
        assert_eq!((f.records_kept, f.bytes_written, out.len()), (0, 0, 0));
        filter_batch(&batch, &header, true, 0, false, |_| false, &mut out).unwrap();
        verify_crc(&out, 0).unwrap();
        let h = RecordBatchHeader::parse(&out).unwrap();
        assert_eq!(
            (
                h.base_offset,
                h.last_offset(),
                h.records_count,
                h.base_sequence
            ),
            (100, 102, 0, 110)
        );
        assert_eq!(out.len(), RECORD_BATCH_OVERHEAD);
    }

    #[test]
    fn keyless_records_are_found_in_plain_and_compressed_batches() {
        let mut two = encode(&five()[..2], Compression::None);
        assert_eq!(keyless_record_index(&two).unwrap(), None);
        two.extend(encode(
            &[record(0, Some("k"), Some("v")), record(1, None, Some("v"))],
            Compression::Zstd,
        ));
        assert_eq!(keyless_record_index(&two).unwrap(), Some(3));
    }
}
