//! The state machine, driven with explicit clocks.

use super::*;

const SESSION: Duration = Duration::from_millis(10_000);

fn cfg(delay_ms: u64) -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay: Duration::from_millis(delay_ms),
        ..GroupConfig::default()
    }
}

fn req(member_id: &str, protocols: &[(&str, &'static [u8])]) -> JoinRequest {
    JoinRequest {
        member_id: member_id.to_string(),
        instance_id: None,
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: SESSION.as_millis() as i32,
        rebalance_timeout_ms: 20_000,
        protocol_type: "consumer".into(),
        protocols: protocols.iter().map(|(n, m)| (n.to_string(), Bytes::from_static(m))).collect(),
        require_known_member_id: true,
    }
}

fn range() -> JoinRequest {
    req("", &[("range", b"r")])
}

fn now_result<T: std::fmt::Debug>(o: Outcome<T>) -> T {
    match o {
        Outcome::Now(r) => r,
        Outcome::Wait(_) => panic!("expected an immediate answer"),
    }
}

fn waiting<T>(o: Outcome<T>) -> oneshot::Receiver<T> {
    match o {
        Outcome::Wait(rx) => rx,
        Outcome::Now(_) => panic!("expected a deferred answer"),
    }
}

/// Writes the group record the group waits for (as the coordinator does), with `result`.
fn write(g: &mut Group, result: Result<(), ResponseError>, now: Instant) {
    let (_, w) = g.take_pending_write().expect("a write is pending");
    g.write_done(w, result, &cfg(0), now);
}

/// KIP-394: a first join gets MEMBER_ID_REQUIRED and an id; the rejoin with it waits.
fn join_with_id(
    g: &mut Group,
    c: &GroupConfig,
    r: JoinRequest,
    now: Instant,
) -> (String, oneshot::Receiver<JoinResult>) {
    let first = now_result(g.join(r.clone(), c, now));
    assert_eq!(first.error, Some(ResponseError::MemberIdRequired));
    assert!(!first.member_id.is_empty());
    let rx = waiting(g.join(JoinRequest { member_id: first.member_id.clone(), ..r }, c, now));
    (first.member_id, rx)
}

/// A Stable group of `n` members joined during the initial delay after `t0`;
/// returns their ids (leader first). The group is then driven with `cfg(0)`.
fn stable_group(n: usize, t0: Instant) -> (Group, Vec<String>) {
    let c = cfg(3000);
    let mut g = Group::new("g");
    let pending: Vec<_> = (0..n).map(|_| join_with_id(&mut g, &c, range(), t0)).collect();
    // Members after the first extend the delay once (they all arrived in the first one).
    g.tick(&c, t0 + Duration::from_millis(3000));
    g.tick(&c, t0 + Duration::from_millis(6000));
    let mut ids = Vec::new();
    let mut leader = String::new();
    for (id, mut rx) in pending {
        let r = rx.try_recv().expect("joined");
        assert_eq!(r.error, None);
        leader = r.leader.clone();
        ids.push(id);
    }
    let generation = g.generation();
    let syncs: Vec<_> = ids
        .iter()
        .map(|id| {
            let assignments = if *id == leader {
                ids.iter().map(|m| (m.clone(), Bytes::from(format!("for {m}")))).collect()
            } else {
                Vec::new()
            };
            (id.clone(), g.sync(id, None, generation, None, None, assignments, t0))
        })
        .collect();
    assert_eq!(
        g.state(),
        GroupState::CompletingRebalance,
        "stable only once the assignment is written"
    );
    let (meta, w) = g.take_pending_write().expect("the assignment is written");
    assert_eq!(meta.members.len(), n, "the record holds the new assignment");
    g.write_done(w, Ok(()), &cfg(0), t0);
    assert_eq!(g.state(), GroupState::Stable);
    for (id, o) in syncs {
        let r = match o {
            Outcome::Now(r) => r,
            Outcome::Wait(mut rx) => rx.try_recv().expect("sync answered"),
        };
        assert_eq!(r.error, None);
        assert_eq!(r.assignment, Bytes::from(format!("for {id}")));
    }
    let mut ordered = vec![leader.clone()];
    ordered.extend(ids.into_iter().filter(|i| *i != leader));
    (g, ordered)
}

#[test]
fn join_sync_stable_with_the_initial_delay() {
    let c = cfg(3000);
    let t0 = Instant::now();
    let mut g = Group::new("g");
    let (id, mut rx) = join_with_id(&mut g, &c, range(), t0);
    assert_eq!(g.state(), GroupState::PreparingRebalance);
    g.tick(&c, t0 + Duration::from_millis(2999));
    assert!(rx.try_recv().is_err(), "answered before the initial delay");
    g.tick(&c, t0 + Duration::from_millis(3000));
    let r = rx.try_recv().expect("joined after the delay");
    assert_eq!((r.error, r.generation, r.leader.as_str()), (None, 1, id.as_str()));
    assert_eq!(r.protocol_name.as_deref(), Some("range"));
    assert_eq!(r.members.len(), 1);
    assert_eq!(g.state(), GroupState::CompletingRebalance);
    let mut rx = waiting(g.sync(
        &id,
        None,
        1,
        Some("consumer"),
        Some("range"),
        vec![(id.clone(), Bytes::from_static(b"a"))],
        t0,
    ));
    write(&mut g, Ok(()), t0);
    assert_eq!(rx.try_recv().expect("synced").assignment, Bytes::from_static(b"a"));
    assert_eq!(g.state(), GroupState::Stable);
    assert_eq!(g.heartbeat(&id, None, 1, t0), None);
}

#[test]
fn the_initial_delay_extends_while_members_arrive() {
    let c = cfg(3000);
    let t0 = Instant::now();
    let ms = |n| t0 + Duration::from_millis(n);
    let mut g = Group::new("g");
    let (_, mut a) = join_with_id(&mut g, &c, range(), t0);
    let (_, mut b) = join_with_id(&mut g, &c, range(), ms(2000));
    g.tick(&c, ms(3000));
    assert!(a.try_recv().is_err(), "a member arrived during the delay: wait another delay");
    g.tick(&c, ms(5999));
    assert!(a.try_recv().is_err());
    g.tick(&c, ms(6000));
    assert_eq!(a.try_recv().expect("a").generation, 1);
    assert_eq!(b.try_recv().expect("b").generation, 1);
}

#[test]
fn a_leaving_member_triggers_a_rebalance() {
    let t0 = Instant::now();
    let c = cfg(0);
    let (mut g, ids) = stable_group(2, t0);
    let generation = g.generation();
    assert_eq!(g.leave(&ids[1], None, &c, t0), None);
    assert_eq!(g.state(), GroupState::PreparingRebalance);
    assert_eq!(
        g.heartbeat(&ids[0], None, generation, t0),
        Some(ResponseError::RebalanceInProgress)
    );
    let mut rx = waiting(g.join(JoinRequest { member_id: ids[0].clone(), ..range() }, &c, t0));
    let r = rx.try_recv().expect("rejoined");
    assert_eq!((r.generation, r.members.len()), (generation + 1, 1));
    assert_eq!(g.leave(&ids[1], None, &c, t0), Some(ResponseError::UnknownMemberId));
    // The last member leaving empties the group.
    assert_eq!(g.leave(&ids[0], None, &c, t0), None);
    assert_eq!(g.state(), GroupState::Empty);
}

#[test]
fn an_expired_session_removes_the_member() {
    let t0 = Instant::now();
    let c = cfg(0);
    let (mut g, ids) = stable_group(2, t0);
    let generation = g.generation();
    // Only the first member keeps heartbeating.
    assert_eq!(g.heartbeat(&ids[0], None, generation, t0 + SESSION / 2), None);
    g.tick(&c, t0 + SESSION - Duration::from_millis(1));
    assert_eq!(g.state(), GroupState::Stable);
    g.tick(&c, t0 + SESSION);
    assert_eq!(g.state(), GroupState::PreparingRebalance);
    assert_eq!(g.member_count(), 1);
    assert_eq!(
        g.heartbeat(&ids[1], None, generation, t0 + SESSION),
        Some(ResponseError::UnknownMemberId)
    );
    // The survivor does not rejoin within the rebalance timeout either: the group empties.
    g.tick(&c, t0 + SESSION + Duration::from_secs(20));
    assert_eq!(g.state(), GroupState::Empty);
}

#[test]
fn a_static_member_rejoins_without_a_rebalance() {
    let t0 = Instant::now();
    let c = cfg(0);
    let mut g = Group::new("g");
    let static_req = |member_id: &str| JoinRequest {
        instance_id: Some("instance-1".into()),
        ..req(member_id, &[("range", b"r")])
    };
    // Static members skip MEMBER_ID_REQUIRED.
    let mut rx = waiting(g.join(static_req(""), &c, t0));
    let joined = rx.try_recv().expect("joined");
    let old = joined.member_id.clone();
    let mut rx = waiting(g.sync(
        &old,
        Some("instance-1"),
        1,
        None,
        None,
        vec![(old.clone(), Bytes::from_static(b"mine"))],
        t0,
    ));
    write(&mut g, Ok(()), t0);
    assert_eq!(rx.try_recv().expect("synced").assignment, Bytes::from_static(b"mine"));
    assert_eq!(g.state(), GroupState::Stable);

    // The process restarts: same instance id, no member id, same metadata.
    // The answer waits for the record naming the new member id.
    let mut rx = waiting(g.join(static_req(""), &c, t0 + Duration::from_secs(1)));
    assert!(rx.try_recv().is_err());
    write(&mut g, Ok(()), t0);
    let r = rx.try_recv().expect("rejoined");
    assert_eq!(r.error, None);
    assert_ne!(r.member_id, old);
    assert_eq!((r.generation, g.generation(), g.state()), (1, 1, GroupState::Stable));
    assert!(r.skip_assignment, "the leader keeps the assignment it made");
    let s = now_result(g.sync(&r.member_id, Some("instance-1"), 1, None, None, Vec::new(), t0));
    assert_eq!(s.assignment, Bytes::from_static(b"mine"));
    // The old member id is fenced.
    assert_eq!(g.heartbeat(&old, Some("instance-1"), 1, t0), Some(ResponseError::FencedInstanceId));
    assert_eq!(
        g.validate_commit(&old, Some("instance-1"), 1, false),
        Err(ResponseError::FencedInstanceId)
    );

    // New metadata: a rebalance.
    let o = g.join(
        JoinRequest { instance_id: Some("instance-1".into()), ..req("", &[("range", b"changed")]) },
        &c,
        t0,
    );
    let r = waiting(o).try_recv().expect("rebalanced");
    assert_eq!(r.generation, 2);
}

#[test]
fn a_static_member_rejoining_while_the_group_completes_a_rebalance_starts_another() {
    let t0 = Instant::now();
    let c = cfg(0);
    let mut g = Group::new("g");
    let static_req =
        JoinRequest { instance_id: Some("instance-1".into()), ..req("", &[("range", b"r")]) };
    let mut rx = waiting(g.join(static_req.clone(), &c, t0));
    let old = rx.try_recv().expect("joined").member_id;
    assert_eq!((g.state(), g.generation()), (GroupState::CompletingRebalance, 1));
    // The leader may be assigning to `old` right now: Kafka rebalances rather than hand the new id nothing.
    let mut rx = waiting(g.join(static_req, &c, t0));
    let r = rx.try_recv().expect("rejoined");
    assert_ne!(r.member_id, old);
    assert_eq!((r.error, r.generation), (None, 2));
    assert_eq!(g.heartbeat(&old, Some("instance-1"), 2, t0), Some(ResponseError::FencedInstanceId));
}

#[test]
fn a_loaded_group_is_stable_with_its_members_and_their_assignments() {
    let t0 = Instant::now();
    let (before, ids) = stable_group(2, t0);
    let meta = before.metadata();
    assert_eq!(meta.members.len(), 2);
    assert_eq!(meta.leader.as_deref(), Some(ids[0].as_str()));
    let loaded_at = t0 + Duration::from_secs(60);
    let mut g = Group::loaded("g", &meta, loaded_at);
    assert_eq!(
        (g.state(), g.generation(), g.protocol_type()),
        (GroupState::Stable, before.generation(), "consumer")
    );
    assert_eq!(g.metadata(), meta, "what a reload persists again is what was loaded");
    let c = cfg(0);
    for id in &ids {
        assert_eq!(
            g.heartbeat(id, None, meta.generation, loaded_at),
            None,
            "{id}'s session goes on"
        );
        let s = now_result(g.sync(
            id,
            None,
            meta.generation,
            Some("consumer"),
            Some("range"),
            Vec::new(),
            loaded_at,
        ));
        assert_eq!((s.error, s.assignment), (None, Bytes::from(format!("for {id}"))));
        assert_eq!(g.validate_commit(id, None, meta.generation, true), Ok(()));
    }
    assert_eq!(
        g.heartbeat("stranger", None, meta.generation, loaded_at),
        Some(ResponseError::UnknownMemberId)
    );
    // Sessions run from the load: the member that keeps heartbeating stays, the other expires.
    let later = loaded_at + SESSION - Duration::from_millis(1);
    assert_eq!(g.heartbeat(&ids[0], None, meta.generation, later), None);
    g.tick(&c, later);
    assert_eq!(g.member_count(), 2);
    g.tick(&c, loaded_at + SESSION);
    assert_eq!((g.member_count(), g.state()), (1, GroupState::PreparingRebalance));
}

#[test]
fn a_group_is_persisted_without_members_unless_stable() {
    let t0 = Instant::now();
    let (mut g, ids) = stable_group(2, t0);
    assert_eq!(g.leave(&ids[1], None, &cfg(0), t0), None);
    assert_eq!(g.state(), GroupState::PreparingRebalance);
    assert!(g.metadata().members.is_empty());
    let loaded = Group::loaded("g", &g.metadata(), t0);
    assert_eq!((loaded.state(), loaded.member_count()), (GroupState::Empty, 0));
}

#[test]
fn wrong_generations_are_illegal() {
    let t0 = Instant::now();
    let (mut g, ids) = stable_group(1, t0);
    let generation = g.generation();
    assert_eq!(
        g.heartbeat(&ids[0], None, generation - 1, t0),
        Some(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        now_result(g.sync(&ids[0], None, generation + 1, None, None, Vec::new(), t0)).error,
        Some(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        g.validate_commit(&ids[0], None, generation - 1, false),
        Err(ResponseError::IllegalGeneration)
    );
    assert_eq!(g.validate_commit(&ids[0], None, generation, false), Ok(()));
    assert_eq!(
        g.validate_commit("", None, -1, false),
        Err(ResponseError::UnknownMemberId),
        "simple commits only to empty groups"
    );
    assert_eq!(
        g.validate_commit("", None, -1, true),
        Ok(()),
        "TxnOffsetCommit v0-2 names no member"
    );
    assert_eq!(
        g.validate_commit("stranger", None, generation, true),
        Err(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        g.validate_commit("stranger", None, generation, false),
        Err(ResponseError::UnknownMemberId)
    );
}

#[test]
fn bad_joins_are_refused() {
    let c = cfg(0);
    let t0 = Instant::now();
    let mut g = Group::new("g");
    let short = JoinRequest { session_timeout_ms: 5999, ..range() };
    assert_eq!(now_result(g.join(short, &c, t0)).error, Some(ResponseError::InvalidSessionTimeout));
    let long = JoinRequest { session_timeout_ms: 1_800_001, ..range() };
    assert_eq!(now_result(g.join(long, &c, t0)).error, Some(ResponseError::InvalidSessionTimeout));
    assert_eq!(
        now_result(g.join(req("", &[]), &c, t0)).error,
        Some(ResponseError::InconsistentGroupProtocol)
    );
    assert_eq!(
        now_result(g.join(req("nobody", &[("range", b"")]), &c, t0)).error,
        Some(ResponseError::UnknownMemberId)
    );
    let (_, _rx) = join_with_id(&mut g, &c, range(), t0);
    let other = JoinRequest { require_known_member_id: false, ..req("", &[("roundrobin", b"")]) };
    assert_eq!(
        now_result(g.join(other, &c, t0)).error,
        Some(ResponseError::InconsistentGroupProtocol)
    );
}

#[test]
fn the_protocol_with_most_votes_that_everyone_supports_wins() {
    let c = cfg(3000);
    let t0 = Instant::now();
    let mut g = Group::new("g");
    let mut waits = [
        join_with_id(&mut g, &c, req("", &[("sticky", b"1"), ("range", b"2"), ("rr", b"3")]), t0).1,
        join_with_id(&mut g, &c, req("", &[("range", b"4"), ("rr", b"5")]), t0).1,
        join_with_id(&mut g, &c, req("", &[("rr", b"6"), ("range", b"7")]), t0).1,
    ];
    g.tick(&c, t0 + Duration::from_secs(3));
    g.tick(&c, t0 + Duration::from_secs(6));
    let results: Vec<JoinResult> =
        waits.iter_mut().map(|rx| rx.try_recv().expect("joined")).collect();
    // The first votes range (sticky is not common), the second range, the third rr.
    assert!(results.iter().all(|r| r.protocol_name.as_deref() == Some("range")));
    let leaders: Vec<&JoinResult> = results.iter().filter(|r| !r.members.is_empty()).collect();
    assert_eq!(leaders.len(), 1, "only the leader gets the members");
    let mut metadata: Vec<&[u8]> = leaders[0].members.iter().map(|m| &m.metadata[..]).collect();
    metadata.sort();
    assert_eq!(
        metadata,
        vec![&b"2"[..], &b"4"[..], &b"7"[..]],
        "each member's metadata for the chosen protocol"
    );
}

#[test]
fn a_pending_member_id_expires() {
    let c = cfg(0);
    let t0 = Instant::now();
    let mut g = Group::new("g");
    let first = now_result(g.join(range(), &c, t0));
    assert!(g.has_pending_members());
    g.tick(&c, t0 + SESSION);
    assert!(!g.has_pending_members());
    assert_eq!(
        now_result(g.join(JoinRequest { member_id: first.member_id, ..range() }, &c, t0 + SESSION))
            .error,
        Some(ResponseError::UnknownMemberId)
    );
}

#[test]
fn a_failed_assignment_write_answers_the_error_and_rebalances() {
    let t0 = Instant::now();
    let (c, delayed) = (cfg(0), cfg(3000));
    let mut g = Group::new("g");
    let (a, mut ja) = join_with_id(&mut g, &delayed, range(), t0);
    let (b, mut jb) = join_with_id(&mut g, &delayed, range(), t0);
    g.tick(&delayed, t0 + Duration::from_millis(3000));
    g.tick(&delayed, t0 + Duration::from_millis(6000));
    let (ra, rb) = (ja.try_recv().expect("joined"), jb.try_recv().expect("joined"));
    let leader = if ra.members.is_empty() { b.clone() } else { a.clone() };
    let follower = if leader == a { b.clone() } else { a.clone() };
    let generation = g.generation();
    assert_eq!(generation, rb.generation);
    let mut follower_rx = waiting(g.sync(&follower, None, generation, None, None, Vec::new(), t0));
    let assignment =
        vec![(a.clone(), Bytes::from_static(b"x")), (b.clone(), Bytes::from_static(b"y"))];
    let mut leader_rx =
        waiting(g.sync(&leader, None, generation, None, None, assignment.clone(), t0));
    // A second SyncGroup of the leader while the write is out does not write again.
    let mut again_rx = waiting(g.sync(&leader, None, generation, None, None, assignment, t0));
    let (_, w) = g.take_pending_write().expect("the assignment is written");
    assert!(g.take_pending_write().is_none(), "one write per generation");
    assert!(
        follower_rx.try_recv().is_err() && again_rx.try_recv().is_err(),
        "nobody is answered before the write"
    );
    assert_eq!(
        g.validate_commit(&follower, None, generation, false),
        Err(ResponseError::RebalanceInProgress)
    );
    g.write_done(w, Err(ResponseError::NotCoordinator), &c, t0);
    assert_eq!(
        follower_rx.try_recv().expect("answered").error,
        Some(ResponseError::NotCoordinator)
    );
    assert_eq!(again_rx.try_recv().expect("answered").error, Some(ResponseError::NotCoordinator));
    assert!(
        leader_rx.try_recv().is_err(),
        "the leader's first SyncGroup was replaced by its second"
    );
    assert_eq!(g.state(), GroupState::PreparingRebalance, "Kafka rebalances after a failed write");
    assert!(g.metadata().members.is_empty());
}

#[test]
fn an_assignment_written_after_the_group_moved_on_is_ignored() {
    let t0 = Instant::now();
    let c = cfg(0);
    let mut g = Group::new("g");
    let (a, mut ja) = join_with_id(&mut g, &c, range(), t0);
    g.tick(&c, t0);
    assert!(ja.try_recv().is_ok());
    let mut rx =
        waiting(g.sync(&a, None, 1, None, None, vec![(a.clone(), Bytes::from_static(b"x"))], t0));
    let (_, w) = g.take_pending_write().expect("pending");
    // The member leaves before the write is done: the group empties.
    assert_eq!(g.leave(&a, None, &c, t0), None);
    assert_eq!(rx.try_recv().expect("answered").error, Some(ResponseError::UnknownMemberId));
    g.write_done(w, Ok(()), &c, t0);
    assert_eq!((g.state(), g.generation()), (GroupState::Empty, 2));
}

#[test]
fn a_static_member_whose_new_id_cannot_be_written_keeps_the_old_one() {
    let t0 = Instant::now();
    let c = cfg(0);
    let mut g = Group::new("g");
    let static_req =
        JoinRequest { instance_id: Some("instance-1".into()), ..req("", &[("range", b"r")]) };
    let old = waiting(g.join(static_req.clone(), &c, t0)).try_recv().expect("joined").member_id;
    let _rx = waiting(g.sync(
        &old,
        Some("instance-1"),
        1,
        None,
        None,
        vec![(old.clone(), Bytes::from_static(b"mine"))],
        t0,
    ));
    write(&mut g, Ok(()), t0);
    let mut rx = waiting(g.join(static_req, &c, t0));
    let (meta, w) = g.take_pending_write().expect("the new id is written");
    let new_id = meta.members[0].member_id.clone();
    assert_ne!(new_id, old);
    g.write_done(w, Err(ResponseError::CoordinatorNotAvailable), &c, t0);
    let r = rx.try_recv().expect("answered");
    assert_eq!((r.error, r.member_id.as_str()), (Some(ResponseError::CoordinatorNotAvailable), ""));
    assert_eq!(
        g.heartbeat(&old, Some("instance-1"), 1, t0),
        None,
        "the old id is the member again"
    );
    assert_eq!(
        g.heartbeat(&new_id, Some("instance-1"), 1, t0),
        Some(ResponseError::FencedInstanceId)
    );
    assert_eq!(g.metadata().members[0].member_id, old);
    assert_eq!(g.metadata().leader.as_deref(), Some(old.as_str()));
    assert_eq!(g.state(), GroupState::Stable);
}
