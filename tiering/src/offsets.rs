//! Tiered offsets in snapshot summaries, and reading them back.
//!
//! Every commit Floe makes records, per partition it tiered, the inclusive
//! offset range it covered: `floe.offsets.<partition>` = `<first>-<last>`,
//! and for every partition ever tiered the next offset to tier:
//! `floe.next-offset.<partition>` = `<offset>` (cumulative, so the current
//! snapshot alone suffices once older snapshots are expired). Summary
//! properties belong to one snapshot, so the next offset to tier of a
//! partition is found by walking the current snapshot's ancestry and taking
//! the highest of `last` + 1 and `next-offset`. Data files that were written
//! but never committed are in no snapshot, so they never count.
//!
//! A shared table (`floe.iceberg.storage=shared`) also records each
//! partition's log start offset, `floe.log-start.<partition>` (cumulative too;
//! moved only by table retention, [`crate::retention`]). Every commit Floe
//! builds carries both cumulative properties forward through
//! [`cumulative_properties`], so no commit can drop one.

use std::collections::{BTreeMap, HashMap};

use iceberg::spec::TableMetadata;

/// Prefix of the summary property holding a partition's tiered range.
pub const OFFSETS_PREFIX: &str = "floe.offsets.";
/// Prefix of the summary property holding a partition's next offset to tier (all partitions, every commit).
pub const NEXT_OFFSET_PREFIX: &str = "floe.next-offset.";
/// Prefix of the summary property holding a partition's log start offset (shared tables; cumulative).
pub const LOG_START_PREFIX: &str = "floe.log-start.";

/// The summary property name for `partition`.
pub fn offsets_key(partition: i32) -> String {
    format!("{OFFSETS_PREFIX}{partition}")
}

/// The summary properties of a commit covering `ranges` (partition → inclusive first, last)
/// on top of `committed` (partition → next offset to tier before the commit), carrying
/// `log_starts` (partition → log start offset) forward.
pub fn summary_properties(
    ranges: &BTreeMap<i32, (i64, i64)>,
    committed: &BTreeMap<i32, i64>,
    log_starts: &BTreeMap<i32, i64>,
) -> HashMap<String, String> {
    let mut next = committed.clone();
    for (p, (_, last)) in ranges {
        let e = next.entry(*p).or_insert(last + 1);
        *e = (*e).max(last + 1);
    }
    let mut props = cumulative_properties(&next, log_starts);
    props.extend(
        ranges.iter().map(|(p, (first, last))| (offsets_key(*p), format!("{first}-{last}"))),
    );
    props
}

/// The cumulative summary properties every commit carries: `floe.next-offset.*`
/// from `next_offsets` and `floe.log-start.*` from `log_starts`. The one place
/// that names them, so a commit (tiering, compaction, retention) cannot forget one.
pub fn cumulative_properties(
    next_offsets: &BTreeMap<i32, i64>,
    log_starts: &BTreeMap<i32, i64>,
) -> HashMap<String, String> {
    next_offsets
        .iter()
        .map(|(p, n)| (format!("{NEXT_OFFSET_PREFIX}{p}"), n.to_string()))
        .chain(log_starts.iter().map(|(p, s)| (format!("{LOG_START_PREFIX}{p}"), s.to_string())))
        .collect()
}

/// [`cumulative_properties`] as `metadata`'s current snapshot ancestry has them:
/// what a commit that moves neither (a compaction) carries forward.
pub fn carried_properties(metadata: &TableMetadata) -> HashMap<String, String> {
    cumulative_properties(&committed_next_offsets(metadata), &committed_log_starts(metadata))
}

fn parse_range(v: &str) -> Option<(i64, i64)> {
    let (a, b) = v.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Per partition, the next offset to tier: the highest committed `last` + 1
/// along the current snapshot's ancestry. Partitions never tiered are absent.
pub fn committed_next_offsets(metadata: &TableMetadata) -> BTreeMap<i32, i64> {
    let mut next = BTreeMap::new();
    let mut snapshot = metadata.current_snapshot();
    // Guard against a malformed cycle: never visit more snapshots than exist.
    let mut budget = metadata.snapshots().len();
    while let Some(s) = snapshot {
        for (k, v) in &s.summary().additional_properties {
            let candidate = if let Some(p) = k.strip_prefix(OFFSETS_PREFIX) {
                p.parse::<i32>().ok().zip(parse_range(v).map(|(_, last)| last + 1))
            } else if let Some(p) = k.strip_prefix(NEXT_OFFSET_PREFIX) {
                p.parse::<i32>().ok().zip(v.parse::<i64>().ok())
            } else {
                None
            };
            if let Some((p, n)) = candidate {
                let e = next.entry(p).or_insert(n);
                *e = (*e).max(n);
            }
        }
        if budget == 0 {
            break;
        }
        budget -= 1;
        snapshot = s.parent_snapshot_id().and_then(|id| metadata.snapshot_by_id(id));
    }
    next
}

/// Per partition, the log start offset table retention committed
/// (`floe.log-start.<p>`): the highest along the current snapshot's ancestry, as
/// the log start offset only moves up. Partitions retention never moved are absent.
pub fn committed_log_starts(metadata: &TableMetadata) -> BTreeMap<i32, i64> {
    let mut starts = BTreeMap::new();
    let mut snapshot = metadata.current_snapshot();
    let mut budget = metadata.snapshots().len();
    while let Some(s) = snapshot {
        for (k, v) in &s.summary().additional_properties {
            let found = k
                .strip_prefix(LOG_START_PREFIX)
                .and_then(|p| p.parse::<i32>().ok())
                .zip(v.parse::<i64>().ok());
            if let Some((p, start)) = found {
                let e = starts.entry(p).or_insert(start);
                *e = (*e).max(start);
            }
        }
        if budget == 0 {
            break;
        }
        budget -= 1;
        snapshot = s.parent_snapshot_id().and_then(|id| metadata.snapshot_by_id(id));
    }
    starts
}

/// The first partition of `ranges` (a commit's tiered ranges, planned when the
/// committed next offsets were `planned`) whose committed next offset is no
/// longer what the plan saw in `fresh`: another writer tiered it meanwhile, so
/// committing would tier its offsets twice. `None`: the commit may go on top
/// of `fresh` (only other partitions moved).
pub fn conflicting_partition(
    ranges: &BTreeMap<i32, (i64, i64)>,
    planned: &BTreeMap<i32, i64>,
    fresh: &BTreeMap<i32, i64>,
) -> Option<i32> {
    ranges.keys().copied().find(|p| planned.get(p) != fresh.get(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_format_and_parse() {
        let props = summary_properties(
            &BTreeMap::from([(0, (0, 99)), (12, (5, 5))]),
            &BTreeMap::from([(3, 40), (0, 0)]),
            &BTreeMap::from([(3, 17)]),
        );
        assert_eq!(props["floe.log-start.3"], "17", "log starts are carried");
        assert!(!props.contains_key("floe.log-start.0"));
        assert_eq!(props["floe.offsets.0"], "0-99");
        assert_eq!(props["floe.next-offset.0"], "100");
        assert_eq!(props["floe.next-offset.3"], "40", "partitions not in this commit are carried");
        assert_eq!(props["floe.next-offset.12"], "6");
        assert!(!props.contains_key("floe.offsets.3"));
        assert_eq!(parse_range(&props["floe.offsets.12"]), Some((5, 5)));
        assert_eq!(parse_range("x-1"), None);
    }

    #[test]
    fn only_a_move_of_the_commits_own_partitions_conflicts() {
        let ranges = BTreeMap::from([(0, (100, 199))]);
        let planned = BTreeMap::from([(0, 100), (1, 50)]);
        assert_eq!(conflicting_partition(&ranges, &planned, &planned), None);
        assert_eq!(
            conflicting_partition(&ranges, &planned, &BTreeMap::from([(0, 100), (1, 80), (2, 5)])),
            None
        );
        assert_eq!(
            conflicting_partition(&ranges, &planned, &BTreeMap::from([(0, 150), (1, 50)])),
            Some(0)
        );
        // First tiering of a partition: someone else's first commit of it conflicts too.
        let first = BTreeMap::from([(3, (0, 9))]);
        assert_eq!(
            conflicting_partition(&first, &BTreeMap::new(), &BTreeMap::from([(3, 10)])),
            Some(3)
        );
    }
}
