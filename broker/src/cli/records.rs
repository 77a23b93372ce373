//! Records as `floe topic produce` writes them and `floe topic consume`
//! reads them: v2 record batches built and parsed with `floe_protocol`'s
//! record codec, which keeps every header in order (a header key sent twice
//! stays twice, as Kafka keeps it; `kafka_protocol`'s codec takes headers as a
//! map and would drop one).
//!
//! Reading follows Kafka's consumer (`CompletedFetch`): control batches
//! (transaction markers) are never shown, records before the fetch offset
//! (a batch starts before it) are skipped, and at read_committed the batches of
//! aborted transactions are dropped using the Fetch response's
//! `aborted_transactions`.

use std::collections::{BTreeSet, HashSet};

use anyhow::{anyhow, bail};
use floe_protocol::record_batch::{
    BatchError, BatchIter, CompressionType, RecordBatchHeader, TimestampType,
};
use floe_protocol::records::{
    compress, parse_records, records_section, write_batch, write_record, BatchFields, HeaderView,
    RecordParts,
};

/// Attributes bit 3: the timestamps are the broker's append time.
const LOG_APPEND_TIME_BIT: i16 = 1 << 3;

/// One record to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRecord {
    /// The key; `None` for null.
    pub key: Option<Vec<u8>>,
    /// The value; `None` for null.
    pub value: Option<Vec<u8>>,
    /// Headers in order, duplicate keys kept.
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Milliseconds since the epoch (CreateTime).
    pub timestamp: i64,
}

impl NewRecord {
    /// Roughly the bytes the record takes in a batch, to cap a batch's size.
    pub fn size(&self) -> usize {
        16 + self.key.as_ref().map_or(0, Vec::len)
            + self.value.as_ref().map_or(0, Vec::len)
            + self
                .headers
                .iter()
                .map(|(k, v)| 4 + k.len() + v.as_ref().map_or(0, Vec::len))
                .sum::<usize>()
    }
}

/// One v2 batch of `records` (not empty) as a non-idempotent producer sends
/// it: base offset 0 (the broker assigns offsets), no producer id.
///
/// # Errors
/// The codec's failure.
pub fn encode_batch(records: &[NewRecord], codec: CompressionType) -> anyhow::Result<Vec<u8>> {
    let first = records.first().ok_or_else(|| anyhow!("no records to encode"))?;
    let base_timestamp = records.iter().map(|r| r.timestamp).min().unwrap_or(first.timestamp);
    let max_timestamp = records.iter().map(|r| r.timestamp).max().unwrap_or(first.timestamp);
    let mut plain = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let delta = i32::try_from(i).map_err(|_| anyhow!("too many records for one batch"))?;
        let headers: Vec<HeaderView<'_>> =
            r.headers.iter().map(|(k, v)| (k.as_slice(), v.as_deref())).collect();
        write_record(
            &mut plain,
            &RecordParts {
                attributes: 0,
                timestamp_delta: r.timestamp - base_timestamp,
                offset_delta: delta,
                key: r.key.as_deref(),
                value: r.value.as_deref(),
            },
            headers.into_iter(),
        );
    }
    let mut compressed = Vec::new();
    compress(codec, &plain, &mut compressed)
        .map_err(|e| anyhow!("compressing the batch with {codec:?}: {e}"))?;
    let count =
        i32::try_from(records.len()).map_err(|_| anyhow!("too many records for one batch"))?;
    let fields = BatchFields {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: i16::from(codec.id()),
        last_offset_delta: count - 1,
        base_timestamp,
        max_timestamp,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        records_count: count,
    };
    let mut out = Vec::with_capacity(compressed.len() + 61);
    write_batch(&mut out, &fields, &compressed);
    Ok(out)
}

/// One record read from a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedRecord {
    /// Its offset.
    pub offset: i64,
    /// Milliseconds since the epoch.
    pub timestamp: i64,
    /// Whether the broker stamped it (`LogAppendTime`) or the producer (`CreateTime`).
    pub log_append_time: bool,
    /// The key; `None` for null.
    pub key: Option<Vec<u8>>,
    /// The value; `None` for null.
    pub value: Option<Vec<u8>>,
    /// Headers in order, duplicate keys kept.
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// An aborted transaction of a Fetch response: its producer and its first offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct AbortedTxn {
    /// The transaction's first offset in the partition.
    pub first_offset: i64,
    /// The producer that aborted it.
    pub producer_id: i64,
}

/// What one partition's fetched bytes held.
#[derive(Debug, Default)]
pub struct Decoded {
    /// The records to show, in offset order.
    pub records: Vec<FetchedRecord>,
    /// Where the next fetch starts: after the last whole batch read (control
    /// and aborted batches included), or the fetch offset when none was whole.
    pub next_offset: i64,
}

/// Parses the records a Fetch returned for one partition, from `fetch_offset` on.
///
/// `aborted`: the response's aborted transactions when reading committed
/// records only (`None` at read_uncommitted). Kafka's rule: a producer's
/// transactional batches are dropped from the first offset of its aborted
/// transaction until its ABORT marker.
///
/// A batch cut short at the end (the broker fills up to its byte limit) is
/// left for the next fetch.
///
/// # Errors
/// A corrupt batch: bad CRC, undecompressable, records that do not parse.
pub fn decode_fetched(
    bytes: &[u8],
    fetch_offset: i64,
    aborted: Option<&[AbortedTxn]>,
) -> anyhow::Result<Decoded> {
    let mut out = Decoded { records: Vec::new(), next_offset: fetch_offset };
    // Aborted transactions by first offset, taken as batches pass them.
    let mut pending: BTreeSet<AbortedTxn> =
        aborted.map(|a| a.iter().copied().collect()).unwrap_or_default();
    let mut aborted_producers: HashSet<i64> = HashSet::new();
    for batch in BatchIter::new(bytes) {
        let position = match batch {
            Ok(p) => p,
            Err(BatchError::Truncated { .. }) => break,
            Err(e) => bail!("a fetched batch is corrupt: {e}"),
        };
        let header = position.header;
        let batch_bytes = &bytes[position.position..position.end()];
        floe_protocol::record_batch::verify_crc(batch_bytes, position.position)
            .map_err(|e| anyhow!("a fetched batch is corrupt: {e}"))?;
        if header.next_offset() <= fetch_offset {
            // Wholly before where we read from (the broker answers from the batch holding the offset).
            continue;
        }
        out.next_offset = header.next_offset();
        if aborted.is_some() && header.producer_id >= 0 {
            // consumeAbortedTransactionsUpTo(batch.lastOffset())
            while let Some(first) = pending.first().copied() {
                if first.first_offset > header.last_offset() {
                    break;
                }
                pending.pop_first();
                aborted_producers.insert(first.producer_id);
            }
            if header.is_control() {
                if is_abort_marker(batch_bytes, &header)? {
                    aborted_producers.remove(&header.producer_id);
                }
                continue;
            }
            if header.is_transactional() && aborted_producers.contains(&header.producer_id) {
                continue;
            }
        }
        if header.is_control() {
            continue;
        }
        let section = records_section(batch_bytes, &header)
            .map_err(|e| anyhow!("a fetched batch at offset {}: {e}", header.base_offset))?;
        let records = parse_records(&section, &header)
            .map_err(|e| anyhow!("a fetched batch at offset {}: {e}", header.base_offset))?;
        let log_append = header.attributes & LOG_APPEND_TIME_BIT != 0;
        debug_assert_eq!(log_append, header.timestamp_type() == TimestampType::LogAppendTime);
        for r in records {
            if r.offset < fetch_offset {
                continue;
            }
            let headers = r.headers().map_err(|e| anyhow!("record {}: {e}", r.offset))?;
            out.records.push(FetchedRecord {
                offset: r.offset,
                // LogAppendTime: the batch's max timestamp is every record's.
                timestamp: if log_append { header.max_timestamp } else { r.timestamp },
                log_append_time: log_append,
                key: r.key.map(<[u8]>::to_vec),
                value: r.value.map(<[u8]>::to_vec),
                headers: headers
                    .into_iter()
                    .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
                    .collect(),
            });
        }
    }
    Ok(out)
}

/// Whether a control batch holds an ABORT marker (key: version i16, type i16; 0 = ABORT).
fn is_abort_marker(batch: &[u8], header: &RecordBatchHeader) -> anyhow::Result<bool> {
    let section = records_section(batch, header)
        .map_err(|e| anyhow!("a control batch at offset {}: {e}", header.base_offset))?;
    let records = parse_records(&section, header)
        .map_err(|e| anyhow!("a control batch at offset {}: {e}", header.base_offset))?;
    Ok(records
        .first()
        .and_then(|r| r.key)
        .is_some_and(|k| k.len() >= 4 && i16::from_be_bytes([k[2], k[3]]) == 0))
}

/// The codec named as Kafka's `compression.type` names it.
pub fn codec_name(codec: CompressionType) -> &'static str {
    match codec {
        CompressionType::None => "none",
        CompressionType::Gzip => "gzip",
        CompressionType::Snappy => "snappy",
        CompressionType::Lz4 => "lz4",
        CompressionType::Zstd => "zstd",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(key: &str, value: &str, headers: &[(&str, &str)]) -> NewRecord {
        NewRecord {
            key: Some(key.as_bytes().to_vec()),
            value: Some(value.as_bytes().to_vec()),
            headers: headers
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), Some(v.as_bytes().to_vec())))
                .collect(),
            timestamp: 1_700_000_000_000,
        }
    }

    /// A batch as a broker stores it: offsets assigned from `base`, a producer id.
    fn stored(
        records: &[NewRecord],
        base: i64,
        producer_id: i64,
        transactional: bool,
        control: bool,
    ) -> Vec<u8> {
        let plain = encode_batch(records, CompressionType::None).expect("encodes");
        let header = RecordBatchHeader::parse(&plain).expect("header");
        let mut fields = BatchFields::of(&header);
        fields.base_offset = base;
        fields.producer_id = producer_id;
        fields.producer_epoch = 0;
        fields.attributes |=
            if transactional { 1 << 4 } else { 0 } | if control { 1 << 5 } else { 0 };
        let mut out = Vec::new();
        write_batch(&mut out, &fields, &plain[61..]);
        out
    }

    fn marker(abort: bool) -> NewRecord {
        let kind: i16 = if abort { 0 } else { 1 };
        let mut key = 0i16.to_be_bytes().to_vec();
        key.extend_from_slice(&kind.to_be_bytes());
        NewRecord {
            key: Some(key),
            value: Some(vec![0, 0, 0, 0, 0, 0]),
            headers: vec![],
            timestamp: 1,
        }
    }

    #[test]
    fn a_batch_round_trips_with_duplicate_headers_in_every_codec() {
        let records = vec![
            rec("k1", "v1", &[("h", "1"), ("x", "y"), ("h", "2")]),
            NewRecord { key: None, value: None, headers: vec![], timestamp: 1_700_000_000_005 },
        ];
        for codec in [
            CompressionType::None,
            CompressionType::Gzip,
            CompressionType::Snappy,
            CompressionType::Lz4,
            CompressionType::Zstd,
        ] {
            let bytes = encode_batch(&records, codec).expect("encodes");
            let decoded = decode_fetched(&bytes, 0, None).expect("decodes");
            assert_eq!(decoded.next_offset, 2);
            let got = &decoded.records;
            assert_eq!(got.len(), 2, "{codec:?}");
            assert_eq!(got[0].headers, records[0].headers, "{codec:?}");
            assert_eq!(
                (got[0].key.as_deref(), got[0].value.as_deref()),
                (Some(&b"k1"[..]), Some(&b"v1"[..]))
            );
            assert_eq!(
                (got[1].offset, got[1].timestamp, got[1].key.clone(), got[1].value.clone()),
                (1, 1_700_000_000_005, None, None)
            );
        }
    }

    #[test]
    fn records_before_the_fetch_offset_and_a_cut_batch_are_skipped() {
        let mut bytes = stored(
            &[rec("a", "0", &[]), rec("b", "1", &[]), rec("c", "2", &[])],
            10,
            -1,
            false,
            false,
        );
        let second = stored(&[rec("d", "3", &[])], 13, -1, false, false);
        bytes.extend_from_slice(&second[..second.len() - 5]);
        let decoded = decode_fetched(&bytes, 11, None).expect("decodes");
        assert_eq!(decoded.records.iter().map(|r| r.offset).collect::<Vec<_>>(), vec![11, 12]);
        assert_eq!(decoded.next_offset, 13);
    }

    #[test]
    fn read_committed_drops_an_aborted_transaction_until_its_marker() {
        // Producer 7 aborts offsets 0-1 (marker at 2); producer 8 commits 3 (marker 4);
        // producer 7 writes 5 in a later transaction that commits (marker 6).
        let mut bytes =
            stored(&[rec("a", "aborted-1", &[]), rec("a", "aborted-2", &[])], 0, 7, true, false);
        bytes.extend(stored(&[marker(true)], 2, 7, true, true));
        bytes.extend(stored(&[rec("b", "committed", &[])], 3, 8, true, false));
        bytes.extend(stored(&[marker(false)], 4, 8, true, true));
        bytes.extend(stored(&[rec("a", "later", &[])], 5, 7, true, false));
        bytes.extend(stored(&[marker(false)], 6, 7, true, true));
        let aborted = [AbortedTxn { first_offset: 0, producer_id: 7 }];
        let committed = decode_fetched(&bytes, 0, Some(&aborted)).expect("decodes");
        let values: Vec<_> = committed
            .records
            .iter()
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
            .collect();
        assert_eq!(values, ["committed", "later"]);
        assert_eq!(committed.next_offset, 7);
        let all = decode_fetched(&bytes, 0, None).expect("decodes");
        assert_eq!(
            all.records.len(),
            4,
            "read_uncommitted shows every data record, never the markers"
        );
    }
}
