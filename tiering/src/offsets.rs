//! Tiered offsets in snapshot summaries, and reading them back.
//!
//! Every commit Floe makes records, per partition it tiered, the inclusive
//! offset range it covered: `floe.offsets.<partition>` = `<first>-<last>`.
//! Summary properties belong to one snapshot, so the next offset to tier
//! of a partition is found by walking the current snapshot's ancestry and
//! taking the highest `last` + 1. Data files that were written but never
//! committed are in no snapshot, so they never count.

use std::collections::{BTreeMap, HashMap};

use iceberg::spec::TableMetadata;

/// Prefix of the summary property holding a partition's tiered range.
pub const OFFSETS_PREFIX: &str = "floe.offsets.";

/// The summary property name for `partition`.
pub fn offsets_key(partition: i32) -> String {
    format!("{OFFSETS_PREFIX}{partition}")
}

/// The summary properties of a commit covering `ranges` (partition → inclusive first, last).
pub fn summary_properties(ranges: &BTreeMap<i32, (i64, i64)>) -> HashMap<String, String> {
    ranges.iter().map(|(p, (first, last))| (offsets_key(*p), format!("{first}-{last}"))).collect()
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
            let Some(p) = k.strip_prefix(OFFSETS_PREFIX).and_then(|p| p.parse::<i32>().ok()) else { continue };
            if let Some((_, last)) = parse_range(v) {
                let e = next.entry(p).or_insert(last + 1);
                *e = (*e).max(last + 1);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_format_and_parse() {
        let props = summary_properties(&BTreeMap::from([(0, (0, 99)), (12, (5, 5))]));
        assert_eq!(props["floe.offsets.0"], "0-99");
        assert_eq!(parse_range(&props["floe.offsets.12"]), Some((5, 5)));
        assert_eq!(parse_range("x-1"), None);
    }
}
