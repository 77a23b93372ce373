//! Server-side assignors of the consumer group protocol (KIP-848): `uniform`
//! (the default) and `range`, by Kafka's names.
//!
//! An assignor maps every member to its target partitions, given each
//! member's subscribed topics, the topics' partition counts and the previous
//! target (so that `uniform` can be sticky). Pure functions: the
//! reconciliation in [`super::consumer_group`] turns the target into
//! revocations and assignments.

use std::collections::{BTreeMap, BTreeSet};

/// Partitions by topic name.
pub type Assignment = BTreeMap<String, BTreeSet<i32>>;

/// The assignor a group uses when its members name none.
pub const DEFAULT_ASSIGNOR: &str = "uniform";

/// The assignors Floe has.
pub const ASSIGNORS: &[&str] = &["uniform", "range"];

/// One member as an assignor sees it.
#[derive(Debug, Clone)]
pub struct AssignorMember<'a> {
    /// Member id.
    pub id: &'a str,
    /// Topics it subscribes to that exist.
    pub topics: BTreeSet<String>,
}

/// Computes the target assignment with `assignor` (one of [`ASSIGNORS`];
/// anything else is treated as the default).
pub fn assign(
    assignor: &str,
    members: &[AssignorMember<'_>],
    partitions: &BTreeMap<String, i32>,
    previous: &BTreeMap<String, Assignment>,
) -> BTreeMap<String, Assignment> {
    match assignor {
        "range" => range(members, partitions),
        _ => uniform(members, partitions, previous),
    }
}

/// Per topic, the subscribed members (by id) get consecutive ranges; the
/// first `partitions % members` get one more.
fn range(
    members: &[AssignorMember<'_>],
    partitions: &BTreeMap<String, i32>,
) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> =
        members.iter().map(|m| (m.id.to_string(), Assignment::new())).collect();
    for (topic, &count) in partitions {
        let mut subscribed: Vec<&str> =
            members.iter().filter(|m| m.topics.contains(topic)).map(|m| m.id).collect();
        if subscribed.is_empty() {
            continue;
        }
        subscribed.sort_unstable();
        let n = subscribed.len() as i32;
        let (per, extra) = (count / n, count % n);
        let mut next = 0;
        for (i, id) in subscribed.iter().enumerate() {
            let take = per + i32::from((i as i32) < extra);
            if take > 0 {
                out.entry(id.to_string())
                    .or_default()
                    .entry(topic.clone())
                    .or_default()
                    .extend(next..next + take);
            }
            next += take;
        }
    }
    out
}

/// Balanced and sticky: every partition stays with its previous owner if
/// that member still subscribes to its topic; the rest go to the eligible
/// member with the fewest partitions; then partitions move from the most to
/// the least loaded eligible member until no move narrows the gap (for
/// identical subscriptions: counts differ by at most one).
fn uniform(
    members: &[AssignorMember<'_>],
    partitions: &BTreeMap<String, i32>,
    previous: &BTreeMap<String, Assignment>,
) -> BTreeMap<String, Assignment> {
    let mut owner: BTreeMap<(String, i32), String> = BTreeMap::new();
    let mut load: BTreeMap<&str, usize> = members.iter().map(|m| (m.id, 0)).collect();
    let eligible = |topic: &str| -> Vec<&str> {
        members.iter().filter(|m| m.topics.contains(topic)).map(|m| m.id).collect()
    };
    for m in members {
        for (topic, parts) in previous.get(m.id).into_iter().flatten() {
            let Some(&count) = partitions.get(topic) else { continue };
            if !m.topics.contains(topic) {
                continue;
            }
            for &p in parts.iter().filter(|&&p| p < count) {
                owner.insert((topic.clone(), p), m.id.to_string());
                *load.entry(m.id).or_default() += 1;
            }
        }
    }
    for (topic, &count) in partitions {
        let candidates = eligible(topic);
        if candidates.is_empty() {
            continue;
        }
        for p in 0..count {
            let key = (topic.clone(), p);
            if owner.contains_key(&key) {
                continue;
            }
            let Some(&least) = candidates.iter().min_by_key(|id| (load[*id], **id)) else {
                continue;
            };
            owner.insert(key, least.to_string());
            *load.entry(least).or_default() += 1;
        }
    }
    // Rebalance: move one partition at a time from a most loaded member to a least loaded eligible one.
    loop {
        let mut moved = false;
        let mut by_load: Vec<&str> = load.keys().copied().collect();
        by_load.sort_by_key(|id| (std::cmp::Reverse(load[id]), *id));
        'donors: for donor in by_load {
            let donor_load = load[donor];
            // The donor's partitions, newest topic-partition first (arbitrary but deterministic).
            let owned: Vec<(String, i32)> = owner
                .iter()
                .filter(|(_, o)| o.as_str() == donor)
                .map(|(k, _)| k.clone())
                .rev()
                .collect();
            for key in owned {
                let receiver = eligible(&key.0)
                    .into_iter()
                    .filter(|r| *r != donor)
                    .min_by_key(|id| (load[*id], *id));
                if let Some(receiver) = receiver {
                    if load[receiver] + 1 < donor_load {
                        owner.insert(key, receiver.to_string());
                        *load.get_mut(donor).expect("donor") -= 1;
                        *load.get_mut(receiver).expect("receiver") += 1;
                        moved = true;
                        break 'donors;
                    }
                }
            }
        }
        if !moved {
            break;
        }
    }
    let mut out: BTreeMap<String, Assignment> =
        members.iter().map(|m| (m.id.to_string(), Assignment::new())).collect();
    for ((topic, p), id) in owner {
        out.entry(id).or_default().entry(topic).or_default().insert(p);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member<'a>(id: &'a str, topics: &[&str]) -> AssignorMember<'a> {
        AssignorMember { id, topics: topics.iter().map(|t| t.to_string()).collect() }
    }

    fn count(a: &BTreeMap<String, Assignment>, id: &str) -> usize {
        a[id].values().map(BTreeSet::len).sum()
    }

    #[test]
    fn uniform_balances_and_sticks() {
        let parts: BTreeMap<String, i32> = [("t".to_string(), 6), ("u".to_string(), 1)].into();
        let one = assign("uniform", &[member("a", &["t", "u"])], &parts, &BTreeMap::new());
        assert_eq!(count(&one, "a"), 7);
        let two =
            assign("uniform", &[member("a", &["t", "u"]), member("b", &["t", "u"])], &parts, &one);
        assert_eq!((count(&two, "a"), count(&two, "b")), (4, 3));
        // Sticky: a kept what it keeps, b got only what a gave up.
        for (t, ps) in &two["a"] {
            assert!(ps.is_subset(&one["a"][t]));
        }
        let three = assign(
            "uniform",
            &[member("a", &["t", "u"]), member("b", &["t", "u"]), member("c", &["t"])],
            &parts,
            &two,
        );
        let counts: Vec<usize> = ["a", "b", "c"].iter().map(|m| count(&three, m)).collect();
        assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1, "{counts:?}");
        assert!(three["c"].keys().all(|t| t == "t"));
    }

    #[test]
    fn range_gives_consecutive_ranges_per_topic() {
        let parts: BTreeMap<String, i32> = [("t".to_string(), 5)].into();
        let a = assign(
            "range",
            &[member("b", &["t"]), member("a", &["t"]), member("c", &["x"])],
            &parts,
            &BTreeMap::new(),
        );
        assert_eq!(a["a"]["t"], [0, 1, 2].into());
        assert_eq!(a["b"]["t"], [3, 4].into());
        assert!(a["c"].is_empty());
    }
}
