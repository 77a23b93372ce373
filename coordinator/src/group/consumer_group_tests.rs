//! Reconciliation of the consumer group protocol, without a runtime.

use super::*;

fn topics() -> BTreeMap<String, i32> {
    [("t".to_string(), 6)].into()
}

fn cfg() -> ConsumerGroupConfig {
    ConsumerGroupConfig {
        session_timeout: Duration::from_secs(45),
        heartbeat_interval: Duration::from_secs(5),
        max_size: 3,
    }
}

fn join(id: &str) -> Heartbeat {
    Heartbeat {
        member_id: id.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 60_000,
        subscribed_topic_names: Some(vec!["t".into()]),
        owned: Some(Assignment::new()),
        ..Default::default()
    }
}

/// A heartbeat with only the epoch (and owned partitions, if given).
fn beat(id: &str, epoch: i32, owned: Option<&Assignment>) -> Heartbeat {
    Heartbeat {
        member_id: id.into(),
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        owned: owned.cloned(),
        ..Default::default()
    }
}

fn parts(a: &Assignment) -> usize {
    a.values().map(BTreeSet::len).sum()
}

#[test]
fn partitions_move_only_after_their_owner_revokes_them() {
    let mut g = ConsumerGroup::default();
    let now = Instant::now();
    let t = topics();
    let a1 = g.heartbeat(join("a"), &t, &cfg(), now).expect("a joins");
    assert_eq!((a1.member_epoch, g.group_epoch()), (1, 1), "one bump per heartbeat");
    let a_owned = a1.assignment.expect("assignment");
    assert_eq!(parts(&a_owned), 6);
    assert_eq!(g.state_name(), "Stable");

    // b joins: the target splits 3/3, but b gets nothing until a revokes.
    let b1 = g.heartbeat(join("b"), &t, &cfg(), now).expect("b joins");
    assert_eq!(b1.member_epoch, 2);
    assert_eq!(b1.assignment.as_ref().map(parts), Some(0));
    assert_eq!(g.state_name(), "Reconciling");
    // a is told to keep only its half; its epoch stays until it acknowledges.
    let a2 = g.heartbeat(beat("a", 1, None), &t, &cfg(), now).expect("a heartbeats");
    let a_keep = a2.assignment.expect("a's shrunk assignment");
    assert_eq!((a2.member_epoch, parts(&a_keep)), (1, 3));
    // Still owning the revoked partitions (or not saying): no progress, b still waits.
    assert_eq!(
        g.heartbeat(beat("a", 1, Some(&a_owned)), &t, &cfg(), now).expect("a").member_epoch,
        1
    );
    assert_eq!(g.heartbeat(beat("a", 1, None), &t, &cfg(), now).expect("a").member_epoch, 1);
    let b2 = g.heartbeat(beat("b", 2, Some(&Assignment::new())), &t, &cfg(), now).expect("b");
    assert_eq!(b2.assignment.as_ref().map_or(0, parts), 0);
    // a acknowledges: it reaches epoch 2; then b gets the released half.
    let a3 = g.heartbeat(beat("a", 1, Some(&a_keep)), &t, &cfg(), now).expect("a acks");
    assert_eq!(a3.member_epoch, 2);
    let b3 = g.heartbeat(beat("b", 2, Some(&Assignment::new())), &t, &cfg(), now).expect("b");
    let b_owned = b3.assignment.expect("b's partitions");
    assert_eq!(parts(&b_owned), 3);
    assert!(!overlaps(&a_keep, &b_owned));
    assert_eq!(g.state_name(), "Stable");

    // a leaves: b gets everything at a new epoch.
    let left = g.heartbeat(beat("a", LEAVE_EPOCH, None), &t, &cfg(), now).expect("a leaves");
    assert_eq!(left.member_epoch, LEAVE_EPOCH);
    let b4 = g.heartbeat(beat("b", 2, Some(&b_owned)), &t, &cfg(), now).expect("b");
    assert_eq!((b4.member_epoch, b4.assignment.as_ref().map(parts)), (3, Some(6)));
    assert_eq!(g.state_name(), "Stable");
}

#[test]
fn epochs_are_monotonic_and_stale_or_future_epochs_are_fenced() {
    let mut g = ConsumerGroup::default();
    let now = Instant::now();
    let t = topics();
    let mut last = (0, 0);
    let mut owned: BTreeMap<String, Assignment> = BTreeMap::new();
    let mut epochs: BTreeMap<String, i32> = BTreeMap::new();
    for id in ["a", "b", "c"] {
        let r = g.heartbeat(join(id), &t, &cfg(), now).expect("join");
        epochs.insert(id.into(), r.member_epoch);
        owned.insert(id.into(), r.assignment.unwrap_or_default());
        // Everyone heartbeats (acknowledging whatever they were told) until the group is stable.
        for _ in 0..4 {
            for (m, epoch) in epochs.clone() {
                let r = g
                    .heartbeat(beat(&m, epoch, owned.get(&m)), &t, &cfg(), now)
                    .expect("heartbeat");
                assert!(r.member_epoch >= epoch, "member epoch went back");
                epochs.insert(m.clone(), r.member_epoch);
                if let Some(a) = r.assignment {
                    owned.insert(m, a);
                }
            }
        }
        assert!(g.group_epoch() > last.0 && g.assignment_epoch() >= last.1);
        last = (g.group_epoch(), g.assignment_epoch());
        assert_eq!(g.state_name(), "Stable");
    }
    let counts: Vec<usize> = owned.values().map(parts).collect();
    assert_eq!(counts, vec![2, 2, 2]);
    let e = epochs["a"];
    assert_eq!(
        g.heartbeat(beat("a", e + 1, None), &t, &cfg(), now),
        Err(ResponseError::FencedMemberEpoch)
    );
    assert_eq!(
        g.heartbeat(beat("a", e - 1, None), &t, &cfg(), now),
        Err(ResponseError::FencedMemberEpoch)
    );
    assert_eq!(
        g.heartbeat(beat("zz", e, None), &t, &cfg(), now),
        Err(ResponseError::UnknownMemberId)
    );
    assert_eq!(g.heartbeat(join("d"), &t, &cfg(), now), Err(ResponseError::GroupMaxSizeReached));
    let mut bad = join("d");
    bad.server_assignor = Some("nope".into());
    assert_eq!(g.heartbeat(bad, &t, &cfg(), now), Err(ResponseError::UnsupportedAssignor));
    assert_eq!(g.validate_offset_request("a", e), Ok(()));
    assert_eq!(g.validate_offset_request("a", e - 1), Err(ResponseError::StaleMemberEpoch));
    assert_eq!(g.validate_offset_request("", -1), Err(ResponseError::UnknownMemberId));
}

#[test]
fn sessions_expire_and_static_members_come_back() {
    let mut g = ConsumerGroup::default();
    let now = Instant::now();
    let t = topics();
    let mut s = join("s1");
    s.instance_id = Some("i".into());
    let r = g.heartbeat(s.clone(), &t, &cfg(), now).expect("static join");
    let epoch = r.member_epoch;
    // Same instance, new member id, while the first is still in: refused.
    let mut again = s.clone();
    again.member_id = "s2".into();
    assert_eq!(
        g.heartbeat(again.clone(), &t, &cfg(), now),
        Err(ResponseError::UnreleasedInstanceId)
    );
    // A static leave keeps its place; the new incarnation takes it over without an epoch bump.
    let mut leave = beat("s1", STATIC_LEAVE_EPOCH, None);
    leave.instance_id = Some("i".into());
    g.heartbeat(leave, &t, &cfg(), now).expect("static leave");
    let back = g.heartbeat(again, &t, &cfg(), now).expect("comes back");
    assert_eq!((back.member_id.as_str(), back.member_epoch), ("s2", epoch));
    assert_eq!(back.assignment.as_ref().map(parts), Some(6));
    assert_eq!(g.group_epoch(), epoch);
    // Silence past the session timeout fences the member.
    assert!(g.tick(&t, &cfg(), now + Duration::from_secs(46)));
    assert!(g.is_empty());
    assert_eq!(g.state_name(), "Empty");
}
