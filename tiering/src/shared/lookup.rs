//! ListOffsets by time across the table (`docs/shared-mode.md` 4.7): Kafka's
//! time index answers "the first record, in offset order, whose timestamp is
//! at least T", and "the record with the largest timestamp" (KIP-734's
//! MAX_TIMESTAMP). For the table part of a shared partition the manifests'
//! `timestamp` upper bounds pick the one file that can hold the answer, and
//! only its rows (offset and timestamp columns' worth) are read.
//!
//! `__log` rows count as Kafka counts them: its time index covers every batch,
//! so a transaction marker (stamped with the coordinator's clock when the
//! transaction ended) or an aborted record can be the answer. Only holes
//! (damaged ranges no batch covers) are skipped.

use iceberg::table::Table;

use crate::error::Result;
use crate::schema::LogRowKind;
use crate::shared::index::{DataFileRef, FileIndex};
use crate::shared::read::{read_rows, Row};

/// The record's timestamp as a consumer sees it.
fn record_timestamp(r: &Row) -> i64 {
    const LOG_APPEND_TIME: i16 = 1 << 3;
    if r.batch_attributes & LOG_APPEND_TIME != 0 {
        r.max_timestamp
    } else {
        r.base_timestamp.wrapping_add(r.timestamp_delta)
    }
}

/// A row Kafka's time index would know: anything but a hole.
fn is_record(r: &Row) -> bool {
    r.kind != Some(LogRowKind::Hole)
}

/// The tables' files (main, `__log`, `__dlq`) of `partition` overlapping `[from, upper)`, by lower bound.
fn files(index: &FileIndex, partition: i32, from: i64, upper: i64) -> Vec<&DataFileRef> {
    let mut all: Vec<&DataFileRef> = index
        .main_files(partition, from, upper)
        .chain(index.log_files(partition, from, upper))
        .chain(index.dlq_files(partition, from, upper))
        .collect();
    all.sort_by_key(|f| f.lower);
    all
}

/// `(offset, timestamp)` of the first record of `partition` in `[from, upper)`
/// whose timestamp is at least `target_ms`; `None` when none is.
///
/// # Errors
/// As [`read_rows`].
pub async fn offset_for_timestamp(
    main: &Table,
    log: &Table,
    index: &FileIndex,
    partition: i32,
    target_ms: i64,
    from: i64,
    upper: i64,
) -> Result<Option<(i64, i64)>> {
    // Files by lower bound: the first that can hold the target, read with every
    // row of both tables in its range, holds the first match (files of the two
    // tables overlap in offsets, so its range is read merged).
    for file in
        files(index, partition, from, upper).into_iter().filter(|f| f.max_timestamp_ms >= target_ms)
    {
        let (lo, hi) = (file.lower.max(from), file.upper.saturating_add(1).min(upper));
        let rows = read_rows(main, log, index, partition, lo, hi).await?;
        if let Some(r) =
            rows.iter().filter(|r| is_record(r)).find(|r| record_timestamp(r) >= target_ms)
        {
            return Ok(Some((r.offset, record_timestamp(r))));
        }
    }
    Ok(None)
}

/// `(offset, timestamp)` of the record of `partition` in `[from, upper)` with
/// the largest timestamp (the first of equals); `None` without records.
///
/// # Errors
/// As [`read_rows`].
pub async fn max_timestamp(
    main: &Table,
    log: &Table,
    index: &FileIndex,
    partition: i32,
    from: i64,
    upper: i64,
) -> Result<Option<(i64, i64)>> {
    let all = files(index, partition, from, upper);
    let Some(best) = all.iter().map(|f| f.max_timestamp_ms).max() else { return Ok(None) };
    let mut found: Option<(i64, i64)> = None;
    for file in all.into_iter().filter(|f| f.max_timestamp_ms >= best) {
        let (lo, hi) = (file.lower.max(from), file.upper.saturating_add(1).min(upper));
        for r in
            read_rows(main, log, index, partition, lo, hi).await?.iter().filter(|r| is_record(r))
        {
            let ts = record_timestamp(r);
            if found.is_none_or(|(_, t)| ts > t) {
                found = Some((r.offset, ts));
            }
        }
    }
    Ok(found)
}
