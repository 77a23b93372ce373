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
//! Records are parsed and written by [`floe_protocol::records`].

use floe_protocol::record_batch::{RecordBatchHeader, TimestampType, DELETE_HORIZON_BIT};
use floe_protocol::records::{compress, write_varlong, BatchFields};
pub(crate) use floe_protocol::records::{parse_records, records_section, RecordView};

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

/// The header of a rebuilt batch (the original's, with these attributes,
/// timestamps and count) followed by `records`, CRC filled in.
fn write_batch(
    out: &mut Vec<u8>,
    header: &RecordBatchHeader,
    attributes: i16,
    base_timestamp: i64,
    max_timestamp: i64,
    count: i32,
    records: &[u8],
) {
    let fields = BatchFields {
        attributes,
        base_timestamp,
        max_timestamp,
        records_count: count,
        ..BatchFields::of(header)
    };
    floe_protocol::records::write_batch(out, &fields, records);
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
        (marker_horizon && !kept.is_empty()) || kept.iter().any(|r| r.value.is_none());
    let stamp_horizon = !header.has_delete_horizon() && needs_horizon;
    let mut filtered = Filtered {
        records_read: records.len(),
        records_kept: kept.len(),
        bytes_written: 0,
        max_timestamp: -1,
        delete_horizon: None,
    };
    if needs_horizon {
        filtered.delete_horizon =
            Some(if stamp_horizon { new_horizon } else { header.base_timestamp });
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
        write_batch(out, header, attributes, header.max_timestamp, header.max_timestamp, 0, &[]);
        filtered.max_timestamp = header.max_timestamp;
    } else {
        let base_timestamp = if stamp_horizon { new_horizon } else { header.base_timestamp };
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
            kept.iter().map(|r| r.timestamp).max().unwrap_or(header.max_timestamp)
        };
        let codec = header.compression().ok_or("unknown codec")?;
        let mut body = Vec::with_capacity(plain.len());
        compress(codec, &plain, &mut body)?;
        let attributes =
            if stamp_horizon { header.attributes | DELETE_HORIZON_BIT } else { header.attributes };
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
/// The batches are the ones validation found in `records` (`validated`): no
/// header is walked again, only the records are read.
///
/// # Errors
/// A description of records that cannot be parsed or decompressed.
pub fn keyless_record_index(
    records: &[u8],
    validated: &floe_protocol::record_batch::ValidatedBatches,
) -> Result<Option<usize>, String> {
    let mut index = 0;
    for b in validated.batches() {
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
    use bytes::{Bytes, BytesMut};
    use floe_protocol::kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType as KTs,
    };
    use floe_protocol::record_batch::{verify_crc, RECORD_BATCH_OVERHEAD};

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
            headers: [("h".into(), Some(Bytes::from_static(b"v")))].into_iter().collect(),
            delete_horizon: false,
        }
    }

    fn encode(records: &[Record], compression: Compression) -> Vec<u8> {
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            records.iter(),
            &RecordEncodeOptions { version: 2, compression },
        )
        .unwrap();
        buf.to_vec()
    }

    fn decode(batch: &[u8]) -> Vec<Record> {
        RecordBatchDecoder::decode(&mut Bytes::copy_from_slice(batch)).unwrap().records
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
            assert_eq!((f.records_read, f.records_kept, f.bytes_written), (5, 2, out.len()));
            verify_crc(&out, 0).unwrap();
            let h = RecordBatchHeader::parse(&out).unwrap();
            h.check_sanity_in_log(0).unwrap();
            assert_eq!(
                (h.base_offset, h.last_offset(), h.records_count),
                (100, 104, 2),
                "{compression:?}"
            );
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch),
                (42, 1, 110, 3)
            );
            assert_eq!(h.compression(), header.compression());
            assert!(!h.has_delete_horizon());
            assert_eq!(h.max_timestamp, 1_104);
            let got = decode(&out);
            let want: Vec<Record> =
                five().into_iter().filter(|r| r.offset == 102 || r.offset == 104).collect();
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
        filter_batch(&batch, &header, false, 50_000, false, |r| r.offset >= 103, &mut out).unwrap();
        let h = RecordBatchHeader::parse(&out).unwrap();
        assert!(h.has_delete_horizon());
        assert_eq!(h.base_timestamp, 50_000);
        let got = decode(&out);
        assert_eq!(
            got.iter().map(|r| (r.offset, r.timestamp)).collect::<Vec<_>>(),
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
            (h.base_offset, h.last_offset(), h.records_count, h.base_sequence),
            (100, 102, 0, 110)
        );
        assert_eq!(out.len(), RECORD_BATCH_OVERHEAD);
    }

    #[test]
    fn keyless_records_are_found_in_plain_and_compressed_batches() {
        let keyless = |records: &[u8]| {
            let validated = floe_protocol::record_batch::validate_batches(records, 1 << 20)
                .expect("valid batches");
            keyless_record_index(records, &validated).unwrap()
        };
        let mut two = encode(&five()[..2], Compression::None);
        assert_eq!(keyless(&two), None);
        two.extend(encode(
            &[record(0, Some("k"), Some("v")), record(1, None, Some("v"))],
            Compression::Zstd,
        ));
        assert_eq!(keyless(&two), Some(3));
    }
}
