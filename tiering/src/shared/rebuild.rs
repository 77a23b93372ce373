//! Rows → Kafka v2 record batches (`docs/shared-mode.md` 4.2, 4.4): the rows
//! of main, `__log` and (typed tables) `__dlq` merged by offset, grouped by `batch_base_offset`, each
//! group rebuilt into the batch it came from; `opaque` rows served as stored,
//! `hole` rows stepped over. [`read_batches`] is the entry point a fetch calls.
//!
//! Row groups are decoded lazily in order of their lowest offset: a batch is
//! complete once its last offset is below the next unread row group's lowest
//! offset, so a small `max_bytes` reads few row groups even when the range
//! reaches far.
//!
//! The CRC self-check (2.1): a batch rebuilt uncompressed from an uncompressed
//! original with all its `recordsCount` records must carry the stored CRC; a
//! mismatch is a bug, counted in [`RebuiltRange::mismatches`] and logged, and
//! the batch is still served with its recomputed CRC.

use std::collections::BTreeMap;

use floe_protocol::record_batch::CompressionType;
use floe_protocol::records::{
    compress, write_batch, write_record, BatchFields, HeaderView, RecordParts,
};
use iceberg::table::Table;

use crate::error::{Result, TieringError};
use crate::schema::LogRowKind;
use crate::shared::index::FileIndex;
use crate::shared::read::{clamp, plan, read_row_group, read_rows, table_of, Row};

/// The codec a rebuilt batch's records are compressed with
/// (`floe.iceberg.shared.fetch-compression`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FetchCompression {
    /// The codec the producer used (what its consumers can surely decode).
    #[default]
    Original,
    /// Uncompressed.
    None,
    /// gzip.
    Gzip,
    /// Snappy.
    Snappy,
    /// LZ4.
    Lz4,
    /// Zstandard.
    Zstd,
}

impl FetchCompression {
    fn codec(self, original: CompressionType) -> CompressionType {
        match self {
            Self::Original => original,
            Self::None => CompressionType::None,
            Self::Gzip => CompressionType::Gzip,
            Self::Snappy => CompressionType::Snappy,
            Self::Lz4 => CompressionType::Lz4,
            Self::Zstd => CompressionType::Zstd,
        }
    }
}

/// What [`read_batches`] read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RebuiltRange {
    /// The batches, concatenated (a Fetch response's records).
    pub bytes: Vec<u8>,
    /// The offset after the last batch (or hole) returned; `from` when nothing was.
    pub next_offset: i64,
    /// Aborted transactions `(producer id, first offset)` of the range returned (4.5).
    pub aborted: Vec<(i64, i64)>,
    /// Batches whose rebuilt CRC differs from the stored one where it must not: a bug.
    pub mismatches: u64,
    /// Batches returned (opaque ones included).
    pub batches: usize,
}

/// The batches of `partition` from `from` (the batch containing it whole) below
/// `upper` (the local log start), rebuilt from `main` and `log` (its `__log`
/// table) at their current snapshots, up to `max_bytes` (the first batch always
/// whole, KIP-74), records compressed as `codec` says.
///
/// # Errors
/// [`TieringError::Iceberg`] / [`TieringError::SharedRead`] reading the tables,
/// [`TieringError::Rebuild`] for a batch that cannot be rebuilt.
pub async fn read_batches(
    main: &Table,
    log: &Table,
    partition: i32,
    from: i64,
    upper: i64,
    max_bytes: usize,
    codec: FetchCompression,
) -> Result<RebuiltRange> {
    let index = FileIndex::load(main, log).await?;
    read_batches_with_index(main, log, &index, partition, from, upper, max_bytes, codec).await
}

/// [`read_batches`] with a file index built before (the broker keeps one per snapshot, 4.1).
///
/// # Errors
/// As [`read_batches`].
#[allow(clippy::too_many_arguments)]
pub async fn read_batches_with_index(
    main: &Table,
    log: &Table,
    index: &FileIndex,
    partition: i32,
    from: i64,
    upper: i64,
    max_bytes: usize,
    codec: FetchCompression,
) -> Result<RebuiltRange> {
    // From inside an opaque batch: the batch whole, as the log would serve it.
    let requested = from;
    let from = index.opaque_base(partition, from).unwrap_or(from);
    let units = plan(main, log, index, partition, from, upper).await?;
    let mut out = RebuiltRange { next_offset: requested, ..RebuiltRange::default() };
    let mut buffer: BTreeMap<i64, Row> = BTreeMap::new();
    let mut next_unit = 0;
    let mut completed_first = false;
    loop {
        // No unread row group holds an offset below this one.
        let frontier = units.get(next_unit).map_or(i64::MAX, |u| u.min);
        if !completed_first {
            // The batch containing `from` comes whole: its rows below `from` too.
            if let Some((&offset, r)) = buffer.first_key_value() {
                if offset < frontier
                    && r.batch_base_offset < from
                    && r.kind.is_none_or(is_record_kind)
                {
                    let base = r.batch_base_offset;
                    for row in read_rows(main, log, index, partition, base, from).await? {
                        buffer.entry(row.offset).or_insert(row);
                    }
                    completed_first = true;
                    continue;
                }
            }
        }
        if let Some(group) = take_complete(&mut buffer, frontier, upper) {
            completed_first = true;
            let Some(last) = group.last().map(Row::batch_last_offset) else { continue };
            let mut batch = Vec::new();
            if rebuild(&group, codec, &mut batch)? {
                out.mismatches += 1;
            }
            // Stop before the batch that would pass `max_bytes`, after the first.
            if out.batches > 0 && out.bytes.len() + batch.len() > max_bytes {
                break;
            }
            if !batch.is_empty() {
                out.bytes.extend_from_slice(&batch);
                out.batches += 1;
            }
            out.next_offset = last + 1;
            if out.bytes.len() >= max_bytes {
                break;
            }
            continue;
        }
        let Some(unit) = units.get(next_unit) else { break };
        next_unit += 1;
        let table = table_of(main, log, unit.side);
        let (f, u) = clamp(index, unit.side, partition, from, upper);
        for row in read_row_group(table, unit, partition, f, u).await? {
            buffer.entry(row.offset).or_insert(row);
        }
    }
    out.aborted = index.aborted_transactions(partition, requested, out.next_offset);
    Ok(out)
}

fn is_record_kind(k: LogRowKind) -> bool {
    matches!(k, LogRowKind::Aborted | LogRowKind::CommitMarker | LogRowKind::AbortMarker)
}

/// The first batch's rows, removed from `buffer`, once no unread row group can
/// add to it (its last offset, capped at `upper`, below `frontier`).
fn take_complete(buffer: &mut BTreeMap<i64, Row>, frontier: i64, upper: i64) -> Option<Vec<Row>> {
    let (_, first) = buffer.first_key_value()?;
    let last = first.batch_last_offset().min(upper - 1);
    if last >= frontier {
        return None;
    }
    let base = first.batch_base_offset;
    let single = matches!(first.kind, Some(LogRowKind::Opaque | LogRowKind::Hole));
    let mut group = Vec::new();
    while let Some(entry) = buffer.first_entry() {
        if entry.get().batch_base_offset != base || (single && !group.is_empty()) {
            break;
        }
        group.push(entry.remove());
        if single {
            break;
        }
    }
    Some(group)
}

/// Appends the batch of `rows` (one batch's, in offset order) to `out`;
/// `true` when the CRC self-check failed.
pub(crate) fn rebuild(rows: &[Row], codec: FetchCompression, out: &mut Vec<u8>) -> Result<bool> {
    let Some(first) = rows.first() else { return Ok(false) };
    let base = first.batch_base_offset;
    let fail = |reason: String| TieringError::Rebuild { base_offset: base, reason };
    match first.kind {
        Some(LogRowKind::Hole) => return Ok(false),
        Some(LogRowKind::Opaque) => {
            let bytes = first
                .batch_bytes
                .as_deref()
                .ok_or_else(|| fail("an opaque row without its bytes".into()))?;
            out.extend_from_slice(bytes);
            return Ok(false);
        }
        _ => {}
    }
    const CODEC_BITS: i16 = 0x07;
    let original = CompressionType::from_id((first.batch_attributes & CODEC_BITS) as u8)
        .ok_or_else(|| {
            fail(format!("unknown codec in attributes {:#x}", first.batch_attributes))
        })?;
    let chosen = codec.codec(original);
    let mut plain = Vec::new();
    for r in rows {
        let offset_delta = i32::try_from(r.offset - base)
            .map_err(|_| fail(format!("offset {} too far from its base", r.offset)))?;
        let parts = RecordParts {
            attributes: r.record_attributes,
            timestamp_delta: r.timestamp_delta,
            offset_delta,
            key: r.key.as_deref(),
            value: r.value.as_deref(),
        };
        let headers: Vec<HeaderView<'_>> =
            r.headers.iter().map(|(k, v)| (k.as_slice(), v.as_deref())).collect();
        write_record(&mut plain, &parts, headers.into_iter());
    }
    let mut body = Vec::new();
    compress(chosen, &plain, &mut body).map_err(|e| fail(e.0))?;
    let fields = BatchFields {
        base_offset: base,
        partition_leader_epoch: first.partition_leader_epoch,
        attributes: (first.batch_attributes & !CODEC_BITS) | i16::from(chosen.id()),
        last_offset_delta: first.last_offset_delta,
        base_timestamp: first.base_timestamp,
        max_timestamp: first.max_timestamp,
        producer_id: first.producer_id,
        producer_epoch: first.producer_epoch,
        base_sequence: first.base_sequence,
        records_count: i32::try_from(rows.len()).map_err(|_| fail("too many rows".into()))?,
    };
    let start = out.len();
    write_batch(out, &fields, &body);
    // Only an uncompressed rebuild of an uncompressed original with every record
    // is byte-comparable: codec output differs between implementations, and a
    // batch straddling the log start lost its records below it.
    let comparable = chosen == CompressionType::None
        && original == CompressionType::None
        && i32::try_from(rows.len()).is_ok_and(|n| n == first.records_count);
    if comparable {
        let crc = u32::from_be_bytes([
            out[start + 17],
            out[start + 18],
            out[start + 19],
            out[start + 20],
        ]);
        if crc != first.crc {
            tracing::warn!(base_offset = base, stored = first.crc, rebuilt = crc, "shared mode: a rebuilt batch's CRC differs from the stored one (a bug); served with the rebuilt CRC");
            return Ok(true);
        }
    }
    Ok(false)
}
